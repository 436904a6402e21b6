//! Latency distributions in bounded memory: exact samples up to a few hundred, then a
//! log-bucketed histogram (8 buckets per power of two, so quantiles are within 9 %).

/// Exact samples kept before switching to the histogram.
const EXACT: usize = 256;
/// Buckets per power of two.
const SUB: u32 = 8;

/// A distribution of nanosecond values (nothing on the heap until its first sample: most
/// connections of a large capture fill few of their measures).
#[derive(Debug, Clone, Default)]
pub struct Dist(Option<Box<Samples>>);

/// The samples of a [`Dist`] that has some.
#[derive(Debug, Clone, Default)]
struct Samples {
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
        let d = self.0.get_or_insert_with(Box::default);
        d.count += 1;
        d.max = d.max.max(v);
        d.sum += u128::from(v);
        if let Some(h) = &mut d.hist {
            h[bucket(v)] += 1;
            return;
        }
        d.exact.push(v);
        if d.exact.len() > EXACT {
            let mut h = vec![0u32; 64 * SUB as usize];
            for &x in &d.exact {
                h[bucket(x)] += 1;
            }
            d.exact = Vec::new();
            d.hist = Some(h);
        }
    }

    /// Samples so far.
    pub fn count(&self) -> u64 {
        self.0.as_ref().map_or(0, |d| d.count)
    }

    /// The largest sample.
    pub fn max(&self) -> u64 {
        self.0.as_ref().map_or(0, |d| d.max)
    }

    /// The mean.
    pub fn mean(&self) -> u64 {
        match &self.0 {
            Some(d) if d.count > 0 => (d.sum / u128::from(d.count)) as u64,
            _ => 0,
        }
    }

    /// The `q` quantile (0..=1): exact while few samples, else a bucket midpoint.
    pub fn quantile(&self, q: f64) -> u64 {
        let Some(d) = self.0.as_deref().filter(|d| d.count > 0) else {
            return 0;
        };
        let rank = ((q * d.count as f64).ceil() as u64).clamp(1, d.count);
        match &d.hist {
            None => {
                let mut v = d.exact.clone();
                v.sort_unstable();
                v[rank as usize - 1]
            }
            Some(h) => {
                let mut seen = 0u64;
                for (b, &n) in h.iter().enumerate() {
                    seen += u64::from(n);
                    if seen >= rank {
                        return bucket_mid(b).min(d.max);
                    }
                }
                d.max
            }
        }
    }

    /// Bytes held (for the memory bound).
    pub fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |d| {
            size_of::<Samples>()
                + d.exact.capacity() * 8
                + d.hist.as_ref().map_or(0, |h| h.capacity() * 4)
        })
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
