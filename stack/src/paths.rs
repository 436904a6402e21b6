//! Sender-side path choice over ECMP, as adaptive-routing NICs do: a QP keeps a few candidate
//! UDP source ports (each hashes to a path of its own, most likely), scores each by the
//! congestion marks its packets earned while on it, and when its current path has been
//! marked for 2 epochs in a row moves to another, chosen at random with weights that favour
//! the least-marked ones, if that one scores under half the current ([`PathChooser::on_epoch`]). The move itself waits for the packets in flight
//! ([`Device::repath_qp`](crate::Device::repath_qp)), so it never reorders.
//!
//! Pure: the caller reports the QP's cumulative CNP and packet counts once per epoch (about a
//! round trip) and hands in the RNG.
use crate::rng::Rng;

/// Most candidate ports per QP.
pub const MAX_PATHS: usize = 8;

/// Weight floor in the choice: a path's weight is `1 / (FLOOR + marks per packet)`.
const FLOOR: f64 = 1e-3;

/// Per-epoch decay of the scores of the paths not in use: what was learned of them fades, so
/// a path marked once is tried again later (half-life about 14 epochs).
const DECAY: f64 = 0.95;

/// Marked epochs in a row before a move (as PLB waits for congested rounds in a row: one
/// marked epoch is noise, and every move costs a drain).
const PATIENCE: u32 = 2;

/// A move needs the chosen path's score below this share of the current one's.
const BETTER: f64 = 0.5;

/// The path state of one QP (see the module docs).
#[derive(Debug, Clone)]
pub struct PathChooser {
    ports: [u16; MAX_PATHS],
    n: usize,
    /// Smoothed CNPs per packet sent on each path.
    score: [f64; MAX_PATHS],
    current: usize,
    /// (CNPs, packets) at the last epoch.
    seen: (u64, u64),
    moves: u64,
    /// Marked epochs in a row on the current path.
    marked: u32,
}

impl PathChooser {
    /// `paths` candidates (1..=[`MAX_PATHS`]) starting from the QP's own port `base`, the
    /// others spread over the dynamic range 49152..=65535.
    pub fn new(base: u16, paths: usize) -> Self {
        let n = paths.clamp(1, MAX_PATHS);
        let mut ports = [base; MAX_PATHS];
        for (k, p) in ports.iter_mut().enumerate().take(n).skip(1) {
            // Odd multiples of a large odd step: distinct ports for k < 2^14.
            let off = (k as u32).wrapping_mul(0x2f1d) as u16 & 0x3fff;
            *p = 0xc000 | ((base & 0x3fff) ^ off);
        }
        Self {
            ports,
            n,
            score: [0.0; MAX_PATHS],
            current: 0,
            seen: (0, 0),
            moves: 0,
            marked: 0,
        }
    }

    /// Counts from here: the QP's cumulative CNPs and packets so far (a reused QP's earlier
    /// flows do not count).
    pub fn with_baseline(mut self, cnps: u64, packets: u64) -> Self {
        self.seen = (cnps, packets);
        self
    }

    /// The port in use.
    pub fn current(&self) -> u16 {
        self.ports[self.current]
    }

    /// The candidate ports.
    pub fn ports(&self) -> &[u16] {
        &self.ports[..self.n]
    }

    /// Moves chosen so far.
    pub fn moves(&self) -> u64 {
        self.moves
    }

    /// One epoch: the QP's cumulative CNPs received and packets sent. When CNPs came in each
    /// of the last 2 epochs on the current path, picks a path with probability proportional
    /// to `1 / (0.001 + its smoothed marks per packet)` and returns its port if it is another
    /// one scoring under half the current path's.
    pub fn on_epoch(&mut self, cnps: u64, packets: u64, rng: &mut Rng) -> Option<u16> {
        let (dc, dp) = (
            cnps.saturating_sub(self.seen.0),
            packets.saturating_sub(self.seen.1),
        );
        self.seen = (cnps, packets);
        for (i, s) in self.score.iter_mut().enumerate().take(self.n) {
            if i != self.current {
                *s *= DECAY;
            }
        }
        if dp == 0 {
            return None;
        }
        let rate = dc as f64 / dp as f64;
        let c = self.current;
        self.score[c] = 0.5 * self.score[c] + 0.5 * rate;
        if dc == 0 || self.n == 1 {
            self.marked = 0;
            return None;
        }
        self.marked += 1;
        if self.marked < PATIENCE {
            return None;
        }
        let weights: Vec<f64> = self.score[..self.n]
            .iter()
            .map(|s| 1.0 / (FLOOR + s))
            .collect();
        let total: f64 = weights.iter().sum();
        let mut x = rng.unit() * total;
        let mut pick = self.n - 1;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                pick = i;
                break;
            }
            x -= w;
        }
        if pick == self.current || self.score[pick] > BETTER * self.score[c] {
            return None;
        }
        self.marked = 0;
        self.current = pick;
        self.moves += 1;
        Some(self.ports[pick])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_distinct_and_the_first_is_the_qps_own() {
        for base in [0xc000u16, 0xd123, 0xffff] {
            let c = PathChooser::new(base, 8);
            assert_eq!(c.ports()[0], base);
            let mut v = c.ports().to_vec();
            v.sort_unstable();
            v.dedup();
            assert_eq!(v.len(), 8, "{:?}", c.ports());
            assert!(c.ports().iter().all(|&p| p >= 0xc000));
        }
        assert_eq!(PathChooser::new(0xc000, 0).ports().len(), 1);
        assert_eq!(PathChooser::new(0xc000, 99).ports().len(), MAX_PATHS);
    }

    #[test]
    fn an_unmarked_path_stays_and_a_marked_one_moves_to_the_least_marked() {
        let mut rng = Rng::new(1);
        let mut c = PathChooser::new(0xc000, 4);
        // No CNPs: never moves.
        for e in 1..100u64 {
            assert_eq!(c.on_epoch(0, e * 100, &mut rng), None);
        }
        assert_eq!(c.moves(), 0);
        // Marks on every path but one, learned by staying on each: the unmarked one (3)
        // ends up chosen far more often than the others.
        let mut on = [0u32; 4];
        let (mut cnps, mut pkts) = (0u64, 10_000u64);
        for _ in 0..4000 {
            pkts += 100;
            let cur = c.ports().iter().position(|&p| p == c.current()).unwrap();
            on[cur] += 1;
            if cur != 3 {
                cnps += 5;
            }
            c.on_epoch(cnps, pkts, &mut rng);
        }
        assert!(on[3] > 3 * (on[0] + on[1] + on[2]), "{on:?}");
        assert!(c.moves() > 0);
    }
}
