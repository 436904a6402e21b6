//! Virtual-or-real time as a plain value: nothing in the stack reads a clock.
//!
//! [`Instant`] counts nanoseconds from an arbitrary epoch chosen by the caller (the simulator
//! starts at 0, a driver at process start), so tests and the simulator control time exactly.
use core::ops::{Add, AddAssign};
use core::time::Duration;

/// A point in time: nanoseconds since an arbitrary epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Self = Self(0);

    /// From nanoseconds since the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }

    /// From microseconds since the epoch.
    pub const fn from_micros(us: u64) -> Self {
        Self(us * 1_000)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + ns` nanoseconds, saturating.
    pub const fn add_nanos(self, ns: u64) -> Self {
        Self(self.0.saturating_add(ns))
    }
}

impl Add<Duration> for Instant {
    type Output = Self;
    fn add(self, d: Duration) -> Self {
        self.add_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        let t = Instant::from_micros(3) + Duration::from_nanos(5);
        assert_eq!(t.as_nanos(), 3_005);
        assert_eq!(
            t.saturating_duration_since(Instant(5)),
            Duration::from_nanos(3_000)
        );
        assert_eq!(Instant(1).saturating_duration_since(t), Duration::ZERO);
        assert_eq!(
            Instant(u64::MAX) + Duration::from_secs(1),
            Instant(u64::MAX)
        );
    }
}
