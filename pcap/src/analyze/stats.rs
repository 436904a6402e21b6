//! Latency distributions in bounded memory: exact samples up to a few hundred, then a
//! log-bucketed histogram (8 buckets per power of two, so quantiles are within 9 %).

/// Exact samples kept before switching to the histogram.
const EXACT: usize = 256;
/// Buckets per power of two.
const SUB: u32 = 8;

/// A distribution of nanosecond values.
#[derive(Debug, Clone, Default)]
pub struct Dist {
    exact: Vec<u64>,
    hist: Option<Vec<u32>>,
    count: u64,
    max: u64,
    sum: u128,
}

fn bucket(v: u64) -> usize {
    if v < u64::from(SUB) {
        return v as usize;
    }
    let p = 63 - v.leading_zeros(); // v in [2^p, 2^(p+1))
    let frac = ((v >> (p - 3)) & u64::from(SUB - 1)) as u32;
    (p * SUB + frac) as usize
}

fn bucket_mid(b: usize) -> u64 {
    let b = b as u32;
    if b < SUB {
        return u64::from(b);
    }
    let p = b / SUB;
    let frac = u64::from(b % SUB);
    let lo = (1u64 << p) + (frac << (p - 3));
    lo + (1u64 << (p - 3)) / 2
}

impl Dist {
    /// Adds a sample.
    pub fn add(&mut self, v: u64) {
        self.count += 1;
        self.max = self.max.max(v);
        self.sum += u128::from(v);
        if let Some(h) = &mut self.hist {
            h[bucket(v)] += 1;
            return;
        }
        self.exact.push(v);
        if self.exact.len() > EXACT {
            let mut h = vec![0u32; 64 * SUB as usize];
            for &x in &self.exact {
                h[bucket(x)] += 1;
            }
            self.exact = Vec::new();
            self.hist = Some(h);
        }
    }

    /// Samples so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest sample.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The mean.
    pub fn mean(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            (self.sum / u128::from(self.count)) as u64
        }
    }

    /// The `q` quantile (0..=1): exact while few samples, else a bucket midpoint.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        match &self.hist {
            None => {
                let mut v = self.exact.clone();
                v.sort_unstable();
                v[rank as usize - 1]
            }
            Some(h) => {
                let mut seen = 0u64;
                for (b, &n) in h.iter().enumerate() {
                    seen += u64::from(n);
                    if seen >= rank {
                        return bucket_mid(b).min(self.max);
                    }
                }
                self.max
            }
        }
    }

    /// Bytes held (for the memory bound).
    pub fn heap_bytes(&self) -> usize {
        self.exact.capacity() * 8 + self.hist.as_ref().map_or(0, |h| h.capacity() * 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_exact_then_close() {
        let mut d = Dist::default();
        for v in 1..=100u64 {
            d.add(v * 1000);
        }
        assert_eq!(d.quantile(0.5), 50_000);
        assert_eq!(d.quantile(0.99), 99_000);
        assert_eq!(d.max(), 100_000);
        for v in 101..=10_000u64 {
            d.add(v * 1000);
        }
        let p50 = d.quantile(0.5) as f64;
        assert!((p50 / 5_000_000.0 - 1.0).abs() < 0.1, "{p50}");
        let p99 = d.quantile(0.99) as f64;
        assert!((p99 / 9_900_000.0 - 1.0).abs() < 0.1, "{p99}");
        assert_eq!(d.count(), 10_000);
        assert!(d.heap_bytes() < 4096);
    }

    #[test]
    fn buckets_are_monotonic() {
        let mut last = 0;
        for v in [0u64, 1, 7, 8, 9, 15, 16, 100, 1 << 20, u64::MAX / 2] {
            let b = bucket(v);
            assert!(b >= last);
            last = b;
            let m = bucket_mid(b);
            assert!(
                v == 0 || (m as f64 / v as f64 - 1.0).abs() < 0.13,
                "{v} {m}"
            );
        }
    }
}
