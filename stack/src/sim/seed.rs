//! A simulation's seed: from the environment, and printed when a run that used it fails.

/// The seed in `SIM_SEED` (decimal or 0x-hex), else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("SIM_SEED")
        .ok()
        .and_then(|s| {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        })
        .unwrap_or(default)
}

/// Prints its seed (and how to replay it) if dropped while panicking.
#[derive(Debug)]
pub struct SeedGuard(pub u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "simulation failed with seed {0}; replay with SIM_SEED={0}",
                self.0
            );
        }
    }
}
