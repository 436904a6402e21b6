//! Rate pacing: when may the next packet leave so that a flow sends at a set rate.
//!
//! [`Pacer`] is a GCRA (generic cell rate algorithm, the "virtual scheduling" form of a token
//! bucket) with exact integer arithmetic:
//!
//! * It keeps a *theoretical arrival time* `tat`: the instant at which the flow will have paid
//!   for everything it has sent so far at the current rate. `tat` is held as whole nanoseconds
//!   plus a remainder in units of `1 / rate` ns, so the time charged for a packet of `n` bytes
//!   is exactly `8 n / rate` seconds and **no rounding error accumulates**, whatever the rate
//!   and packet size (rates need not divide anything evenly).
//! * A packet may leave at `now` if `now >= tat - burst`, where `burst` is the time the burst
//!   allowance ([`Pacer::burst_bytes`]) takes at the current rate, and never less than 1 ns.
//!   The allowance lets a sender that woke up late (timer jitter, a busy link) catch up
//!   without losing throughput, and the 1 ns floor means the whole-nanosecond deadlines handed
//!   to the caller never throttle the flow below its rate.
//! * Sending charges the packet: `tat = max(tat, now) + 8 n / rate`. The `max` is what stops
//!   an idle flow from hoarding credit: after a pause it may send at most the burst allowance
//!   back to back, then the rate applies again.
//!
//! Long-run throughput of a sender that always sends as soon as allowed is therefore exactly
//! the rate, plus at most one burst allowance in total.
//!
//! A rate of 0 means "unlimited": [`Pacer::next_send_time`] always answers `None`.
//!
//! Units: rates in bits per second, sizes in bytes (whatever the caller counts: the
//! congestion controllers in this crate count the transport-packet bytes they are told about,
//! BTH through ICRC).
use super::CongestionControl;
use crate::time::Instant;

/// Nanoseconds per second times bits per byte: `bytes * NS_BITS / rate_bps` is a duration in ns.
const NS_BITS: u128 = 8 * 1_000_000_000;

/// Default burst allowance: four 4 KiB-MTU packets with their headers. At 100 Gb/s that is
/// about 1.3 µs of credit, at 1 Gb/s about 133 µs.
pub const DEFAULT_BURST_BYTES: u64 = 4 * (4096 + 64);

/// A GCRA pacer with exact (drift-free) integer arithmetic. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pacer {
    /// Current rate in bits per second; 0 = unlimited.
    rate_bps: u64,
    /// Whole nanoseconds of the theoretical arrival time.
    tat_ns: u64,
    /// Fractional part of the theoretical arrival time, in units of `1 / rate_bps` ns
    /// (always `< rate_bps`).
    tat_frac: u64,
    /// Burst allowance in bytes.
    burst_bytes: u64,
    /// Burst allowance in ns at the current rate (at least 1).
    burst_ns: u64,
}

impl Pacer {
    /// A pacer at `rate_bps` bits per second (0 = unlimited) with a burst allowance of
    /// `burst_bytes` bytes.
    pub fn new(rate_bps: u64, burst_bytes: u64) -> Self {
        let mut p = Self {
            rate_bps: 0,
            tat_ns: 0,
            tat_frac: 0,
            burst_bytes,
            burst_ns: 1,
        };
        p.set_rate(Instant::ZERO, rate_bps);
        p
    }

    /// An unlimited pacer (never delays anything) with the default burst allowance.
    pub fn unlimited() -> Self {
        Self::new(0, DEFAULT_BURST_BYTES)
    }

    /// The current rate in bits per second (0 = unlimited).
    pub const fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// The burst allowance in bytes.
    pub const fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    /// Changes the rate at `now` (0 = unlimited). What the flow still owes at `now` (sent
    /// but not yet paid for) is re-priced at the new rate, so a flow that was slow does not
    /// stay blocked for the slow rate's gap after a rate increase, and a cut takes effect
    /// on the bytes already sent. Exact: no rounding error is introduced.
    pub fn set_rate(&mut self, now: Instant, rate_bps: u64) {
        let old = self.rate_bps;
        if rate_bps == old {
            return;
        }
        let now_ns = now.as_nanos();
        if old != 0
            && rate_bps != 0
            && (self.tat_ns > now_ns || self.tat_ns == now_ns && self.tat_frac > 0)
        {
            // Debt × old rate = ((tat_ns − now) · old + frac) [ns·bit/s]; divide by the new rate.
            let num =
                u128::from(self.tat_ns - now_ns) * u128::from(old) + u128::from(self.tat_frac);
            let new = u128::from(rate_bps);
            self.tat_ns = now_ns.saturating_add(u64::try_from(num / new).unwrap_or(u64::MAX));
            self.tat_frac = u64::try_from(num % new).unwrap_or(0);
        } else {
            // Idle, or pacing switched on or off: nothing owed.
            self.tat_ns = self.tat_ns.min(now_ns);
            self.tat_frac = 0;
        }
        self.rate_bps = rate_bps;
        self.burst_ns = if rate_bps == 0 {
            1
        } else {
            let ns = u128::from(self.burst_bytes) * NS_BITS / u128::from(rate_bps);
            u64::try_from(ns).unwrap_or(u64::MAX).max(1)
        };
    }

    /// Earliest time the next packet may leave; `None` when it may leave at `now`.
    pub fn next_send_time(&self, now: Instant) -> Option<Instant> {
        if self.rate_bps == 0 {
            return None;
        }
        // Conforming iff now >= tat - burst. tat >= tat_ns and burst >= 1 ns, so testing
        // against the whole-ns part errs by less than the 1 ns floor of the allowance.
        let earliest = self.tat_ns.saturating_sub(self.burst_ns);
        (earliest > now.as_nanos()).then_some(Instant(earliest))
    }

    /// Charges a packet of `bytes` bytes that left at `now`.
    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        if self.rate_bps == 0 {
            return;
        }
        if now.as_nanos() > self.tat_ns {
            // Idle: credit does not pile up beyond the burst allowance.
            self.tat_ns = now.as_nanos();
            self.tat_frac = 0;
        }
        let rate = u128::from(self.rate_bps);
        let num = u128::from(bytes) * NS_BITS + u128::from(self.tat_frac);
        let whole = u64::try_from(num / rate).unwrap_or(u64::MAX);
        // `num % rate < rate <= u64::MAX`, so the conversion cannot fail.
        self.tat_frac = u64::try_from(num % rate).unwrap_or(0);
        self.tat_ns = self.tat_ns.saturating_add(whole);
    }
}

/// A congestion controller that paces to a constant rate and ignores congestion signals
/// (CNPs, timeouts). Handy as a baseline and for rate-limited tests.
#[derive(Debug, Clone)]
pub struct FixedRate {
    pacer: Pacer,
}

impl FixedRate {
    /// Paces to `rate_bps` bits/s (0 = unlimited) with the default burst allowance.
    pub fn new(rate_bps: u64) -> Self {
        Self::with_burst(rate_bps, DEFAULT_BURST_BYTES)
    }

    /// Paces to `rate_bps` bits/s (0 = unlimited) with a burst allowance of `burst_bytes`.
    pub fn with_burst(rate_bps: u64, burst_bytes: u64) -> Self {
        Self {
            pacer: Pacer::new(rate_bps, burst_bytes),
        }
    }
}

impl CongestionControl for FixedRate {
    fn on_packet_sent(&mut self, now: Instant, bytes: usize) {
        self.pacer
            .on_sent(now, u64::try_from(bytes).unwrap_or(u64::MAX));
    }
    fn on_ack(&mut self, _now: Instant, _bytes: u64) {}
    fn on_cnp(&mut self, _now: Instant) {}
    fn next_send_time(&self, now: Instant, _bytes: usize) -> Option<Instant> {
        self.pacer.next_send_time(now)
    }
    fn rate_bps(&self) -> Option<u64> {
        Some(self.pacer.rate_bps()).filter(|&r| r > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `size`-byte packets as fast as the pacer allows until `end_ns`; returns bytes sent.
    fn run(p: &mut Pacer, size: u64, end_ns: u64) -> u64 {
        let mut now = Instant(0);
        let mut sent = 0;
        loop {
            if let Some(t) = p.next_send_time(now) {
                now = t;
            }
            if now.as_nanos() >= end_ns {
                return sent;
            }
            p.on_sent(now, size);
            sent += size;
        }
    }

    #[test]
    fn unlimited_never_waits() {
        let mut p = Pacer::unlimited();
        for i in 0..100 {
            p.on_sent(Instant(i), 9000);
            assert_eq!(p.next_send_time(Instant(i)), None);
        }
    }

    #[test]
    fn exact_charge_without_drift() {
        // 3 Gb/s, 1000-byte packets: 8000 bits / 3e9 = 2666.67 ns each. After three packets
        // the flow has paid for exactly 8000 ns, not 3 * 2666 or 3 * 2667.
        let mut p = Pacer::new(3_000_000_000, 0);
        for _ in 0..3 {
            p.on_sent(Instant(0), 1000);
        }
        assert_eq!((p.tat_ns, p.tat_frac), (8000, 0));
        // Burst floor 1 ns: the next packet may leave at 7999 ns.
        assert_eq!(p.next_send_time(Instant(0)), Some(Instant(7999)));
        assert_eq!(p.next_send_time(Instant(7999)), None);
    }

    #[test]
    fn idle_credit_is_capped_by_the_burst() {
        // 1 Gb/s, burst 2000 B = 16 µs. After 1 ms idle, 1000-byte packets (8 µs each) may go
        // back to back while now >= tat - 16 µs: packets at tat = 1000+8, +16, +24 → the
        // third packet (tat would be 1024 µs afterwards) must wait.
        let mut p = Pacer::new(1_000_000_000, 2000);
        let t = Instant::from_micros(1000);
        p.on_sent(t, 1000); // tat = 1008 µs
        assert_eq!(p.next_send_time(t), None);
        p.on_sent(t, 1000); // tat = 1016 µs
        assert_eq!(p.next_send_time(t), None);
        p.on_sent(t, 1000); // tat = 1024 µs; 1024 - 16 = 1008 µs > now
        assert_eq!(p.next_send_time(t), Some(Instant::from_micros(1008)));
    }

    #[test]
    fn rate_change_reprices_the_debt() {
        let mut p = Pacer::new(1_000_000_000, 0);
        p.on_sent(Instant(0), 1000); // tat = 8000 ns at 1 Gb/s
                                     // At 2000 ns, 6000 ns of 1 Gb/s debt = 6000 bits = 3000 ns at 2 Gb/s.
        p.set_rate(Instant(2000), 2_000_000_000);
        assert_eq!((p.tat_ns, p.tat_frac), (5000, 0));
        assert_eq!(p.next_send_time(Instant(2000)), Some(Instant(4999)));
        // Back to 1 Gb/s at 3000 ns: 2000 ns at 2 Gb/s = 4000 bits = 4000 ns.
        p.set_rate(Instant(3000), 1_000_000_000);
        assert_eq!(p.tat_ns, 7000);
        // 3 Gb/s at 4000 ns: 3000 bits / 3 Gb/s = 1000 ns exactly.
        p.set_rate(Instant(4000), 3_000_000_000);
        assert_eq!((p.tat_ns, p.tat_frac), (5000, 0));
        // Unlimited forgets the debt.
        p.set_rate(Instant(4500), 0);
        assert_eq!(p.next_send_time(Instant(4500)), None);
        p.set_rate(Instant(4500), 1_000_000_000);
        assert_eq!(p.next_send_time(Instant(4500)), None);
        // Idle flows owe nothing, at any rate.
        let mut q = Pacer::new(1_000_000_000, 0);
        q.on_sent(Instant(0), 1000);
        q.set_rate(Instant(9000), 5);
        assert_eq!(q.next_send_time(Instant(9000)), None);
    }

    #[test]
    fn long_run_matches_rate() {
        for &(rate, size) in &[
            (1_000_000_000u64, 1086u64),
            (7_300_000_000, 4154),
            (99_999_999_999, 4160),
        ] {
            let mut p = Pacer::new(rate, DEFAULT_BURST_BYTES);
            let end = 10_000_000; // 10 ms
            let sent = run(&mut p, size, end);
            let got = sent as f64 * 8.0 / (end as f64 * 1e-9);
            assert!(
                (got / rate as f64 - 1.0).abs() < 0.02,
                "rate {rate} size {size}: got {got}"
            );
        }
    }
}
