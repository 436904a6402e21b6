//! The seeded random number generator of the simulator, the impairment stage and the
//! workload planner: xoshiro256** (from `rand_xoshiro`) seeded through SplitMix64, plus the
//! few draws they need. Protocol logic never owns one; it is handed decisions, not an RNG.
use rand_xoshiro::rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::Xoshiro256StarStar;

/// A small, fast, seedable PRNG. The same seed gives the same sequence on every machine.
#[derive(Debug, Clone)]
pub struct Rng(Xoshiro256StarStar);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(Xoshiro256StarStar::seed_from_u64(seed))
    }

    /// 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (0 when `n` is 0), without modulo bias worth measuring for the
    /// small ranges used here (Lemire's multiply-shift).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        self.0.fill_bytes(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.below(10) < 10);
            b.below(10);
            let u = a.unit();
            b.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(a.below(0), 0);
        assert!(!a.chance(0.0));
        assert!(a.chance(1.0));
        let (mut x, mut y) = ([0u8; 13], [0u8; 13]);
        Rng::new(1).fill(&mut x);
        Rng::new(2).fill(&mut y);
        assert_ne!(x, y);
    }
}
