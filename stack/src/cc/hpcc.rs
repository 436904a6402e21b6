//! HPCC, High Precision Congestion Control (Li et al., "HPCC: High Precision Congestion
//! Control", SIGCOMM 2019): a sender-side window computed from in-network telemetry (INT).
//!
//! Every switch egress port a data packet leaves stamps one [`IntHop`]: its queue length,
//! the bytes it has transmitted so far, the time and its link rate. The receiver copies the
//! packet's [`IntStack`] into the ACK it answers with, and the sender runs the paper's
//! Algorithm 1 on each ACK ([`Hpcc::on_int`]):
//!
//! * **MeasureInflight**: per hop, the normalised in-flight bytes
//!   `u' = min(qlen, qlen_prev) / (B·T) + txRate / B`, with `txRate` from the difference of
//!   the transmitted-bytes counters between this ACK's stamp and the previous one. The
//!   largest `u'` over the path, smoothed over `τ` (its stamps' time difference, at most `T`):
//!   `U = (1 − τ/T)·U + (τ/T)·u`.
//! * **ComputeWind**: if `U ≥ η` or `incStage ≥ maxStage`, multiplicative decrease
//!   `W = Wc / (U/η) + W_AI`, else additive increase `W = Wc + W_AI`. The reference window
//!   `Wc` is updated (and `incStage` counted or reset) once per round trip: on the first ACK
//!   beyond the PSN that was next to send at the previous update; other ACKs compute `W`
//!   from the same `Wc` without moving it.
//! * The rate is `R = W / T` (this controller paces to it; the window is not enforced
//!   separately), at most the line rate.
//!
//! `T` is the network's base round trip ([`HpccParams::base_rtt`]); `W_init = B_nic·T`.
//!
//! Where INT lives: in the simulator it is per-packet metadata beside the frame, so the
//! packets, their ICRCs and the captures are unchanged. On a wire it is a header the
//! switches append to (HPCC's prototype used an INT header after UDP, 2 bytes of control
//! plus 8 bytes per hop: 24-bit timestamp, 20-bit transmitted bytes in 128-byte units, 17-bit
//! queue length in 80-byte units, 3-bit link rate code), which the receiver copies into the
//! ACK; here the stamps keep full precision.
use core::time::Duration;

use roce_proto::Psn;

use super::pacing::{Pacer, DEFAULT_BURST_BYTES};
use super::CongestionControl;
use crate::time::Instant;

/// Most hops an [`IntStack`] records (a 3-tier fat tree's longest path has 5 switches).
pub const MAX_INT_HOPS: usize = 8;

/// One switch egress port's stamp on a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct IntHop {
    /// Bytes queued at the port as the packet left.
    pub qlen_bytes: u64,
    /// Bytes the port had transmitted, this packet included.
    pub tx_bytes: u64,
    /// When the packet left, ns.
    pub ts_ns: u64,
    /// The port's link rate, bits/s.
    pub rate_bps: u64,
}

/// The stamps a packet collected, in path order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntStack {
    hops: [IntHop; MAX_INT_HOPS],
    len: u8,
}

impl IntStack {
    /// No stamps yet.
    pub const fn new() -> Self {
        Self {
            hops: [IntHop {
                qlen_bytes: 0,
                tx_bytes: 0,
                ts_ns: 0,
                rate_bps: 0,
            }; MAX_INT_HOPS],
            len: 0,
        }
    }

    /// Appends a hop's stamp; `false` (and nothing recorded) when full.
    pub fn push(&mut self, hop: IntHop) -> bool {
        let Some(slot) = self.hops.get_mut(usize::from(self.len)) else {
            return false;
        };
        *slot = hop;
        self.len += 1;
        true
    }

    /// The stamps, in path order.
    pub fn hops(&self) -> &[IntHop] {
        &self.hops[..usize::from(self.len)]
    }
}

/// HPCC's parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HpccParams {
    /// Target utilisation η.
    pub eta: f64,
    /// Additive-increase stages before a multiplicative update is forced (`maxStage`).
    pub max_stage: u32,
    /// Additive increase per update, bytes (`W_AI`).
    pub w_ai_bytes: f64,
    /// The network's base round trip `T`.
    pub base_rtt: Duration,
    /// Lowest rate the controller goes to, bits/s.
    pub min_rate_bps: u64,
}

impl HpccParams {
    /// The paper's settings (§5.1): η = 95 %, maxStage = 5, W_AI = 80 bytes, with `T` = 13 µs
    /// (its fat tree's base round trip, 6 links of 1 µs each way plus serialisation).
    pub const fn paper() -> Self {
        Self {
            eta: 0.95,
            max_stage: 5,
            w_ai_bytes: 80.0,
            base_rtt: Duration::from_micros(13),
            min_rate_bps: 100_000_000,
        }
    }

    /// Checks the parameters make sense.
    pub fn validate(&self) -> Result<(), &'static str> {
        if !(self.eta > 0.0 && self.eta <= 1.0) {
            return Err("eta must be in (0, 1]");
        }
        if !(self.w_ai_bytes >= 0.0 && self.w_ai_bytes.is_finite()) {
            return Err("w_ai must be a byte count");
        }
        if self.base_rtt.is_zero() || self.base_rtt > Duration::from_millis(100) {
            return Err("the base RTT must be in (0, 100 ms]");
        }
        Ok(())
    }
}

impl Default for HpccParams {
    fn default() -> Self {
        Self::paper()
    }
}

/// The HPCC sender (see the module docs).
#[derive(Debug, Clone)]
pub struct Hpcc {
    p: HpccParams,
    line_rate_bps: u64,
    /// `W_init = B·T`, bytes: the most the window grows to.
    w_init: f64,
    /// Current window, bytes.
    w: f64,
    /// Reference window, bytes.
    wc: f64,
    /// Smoothed normalised in-flight bytes.
    u: f64,
    inc_stage: u32,
    /// The PSN next to send when `Wc` was last updated (`None` before the first update).
    last_update_seq: Option<Psn>,
    /// The previous ACK's stamps.
    last: Option<IntStack>,
    pacer: Pacer,
    /// Updates that cut the window / that raised it.
    decreases: u64,
    increases: u64,
}

impl Hpcc {
    /// A sender on a NIC of `line_rate_bps`, starting at line rate (`W = W_init`).
    pub fn new(p: HpccParams, line_rate_bps: u64) -> Self {
        let w_init = line_rate_bps as f64 / 8.0 * p.base_rtt.as_nanos() as f64 / 1e9;
        let mut h = Self {
            p,
            line_rate_bps,
            w_init,
            w: w_init,
            wc: w_init,
            u: 0.0,
            inc_stage: 0,
            last_update_seq: None,
            last: None,
            pacer: Pacer::new(line_rate_bps, DEFAULT_BURST_BYTES),
            decreases: 0,
            increases: 0,
        };
        h.apply(Instant::ZERO);
        h
    }

    /// The current window, bytes.
    pub fn window_bytes(&self) -> f64 {
        self.w
    }

    /// The reference window `Wc`, bytes.
    pub fn reference_window_bytes(&self) -> f64 {
        self.wc
    }

    /// The smoothed utilisation `U`.
    pub fn utilization(&self) -> f64 {
        self.u
    }

    /// Updates of `Wc`: (multiplicative ones, additive increases).
    pub fn updates(&self) -> (u64, u64) {
        (self.decreases, self.increases)
    }

    /// The rate `W / T`, bits/s, between the floor and the line rate.
    fn rate(&self) -> u64 {
        let r = self.w * 8e9 / self.p.base_rtt.as_nanos() as f64;
        (r as u64).clamp(
            self.p.min_rate_bps.min(self.line_rate_bps),
            self.line_rate_bps,
        )
    }

    fn apply(&mut self, now: Instant) {
        let r = self.rate();
        self.pacer.set_rate(now, r);
    }

    /// MeasureInflight over `ack`'s stamps against the previous ones; `None` when they do
    /// not pair up (first ACK, or the path changed length).
    fn measure(&mut self, ack: &IntStack) -> Option<f64> {
        let last = self.last.as_ref()?;
        if last.hops().len() != ack.hops().len() || ack.hops().is_empty() {
            return None;
        }
        let t = self.p.base_rtt.as_secs_f64();
        let (mut u, mut tau) = (0.0f64, 0.0f64);
        for (now, prev) in ack.hops().iter().zip(last.hops()) {
            let dt_ns = now.ts_ns.saturating_sub(prev.ts_ns);
            if dt_ns == 0 || now.rate_bps == 0 {
                continue;
            }
            let b = now.rate_bps as f64 / 8.0; // bytes/s
            let dt = dt_ns as f64 / 1e9;
            let tx_rate = now.tx_bytes.saturating_sub(prev.tx_bytes) as f64 / dt;
            let q = now.qlen_bytes.min(prev.qlen_bytes) as f64;
            let u1 = q / (b * t) + tx_rate / b;
            if u1 > u {
                u = u1;
                tau = dt;
            }
        }
        let tau = tau.min(t);
        self.u = (1.0 - tau / t) * self.u + tau / t * u;
        Some(self.u)
    }

    /// ComputeWind.
    fn compute(&mut self, u: f64, update_wc: bool) {
        let eta = self.p.eta;
        let w = if u >= eta || self.inc_stage >= self.p.max_stage {
            let w = self.wc / (u / eta).max(1e-9) + self.p.w_ai_bytes;
            if update_wc {
                self.inc_stage = 0;
                self.decreases += 1;
            }
            w
        } else {
            if update_wc {
                self.inc_stage += 1;
                self.increases += 1;
            }
            self.wc + self.p.w_ai_bytes
        };
        // The window never exceeds line rate over T, nor falls below the rate floor's.
        let floor = self.p.min_rate_bps as f64 / 8.0 * self.p.base_rtt.as_secs_f64();
        let w = w.clamp(floor.min(self.w_init), self.w_init);
        if update_wc {
            self.wc = w;
        }
        self.w = w;
    }
}

impl CongestionControl for Hpcc {
    fn on_packet_sent(&mut self, now: Instant, bytes: usize) {
        self.pacer
            .on_sent(now, u64::try_from(bytes).unwrap_or(u64::MAX));
    }
    fn on_ack(&mut self, _now: Instant, _bytes: u64) {}
    /// HPCC reacts to telemetry, not to ECN: CNPs are ignored.
    fn on_cnp(&mut self, _now: Instant) {}
    fn next_send_time(&self, now: Instant, _bytes: usize) -> Option<Instant> {
        self.pacer.next_send_time(now)
    }
    fn rate_bps(&self) -> Option<u64> {
        Some(self.pacer.rate_bps())
    }
    /// NewAck: `acked` is the ACK's PSN, `next` one past the highest PSN sent (`snd_nxt`).
    fn on_int(&mut self, now: Instant, int: &IntStack, acked: Psn, next: Psn) {
        if let Some(u) = self.measure(int) {
            let update = self.last_update_seq.is_none_or(|s| !acked.precedes(s));
            self.compute(u, update);
            if update {
                self.last_update_seq = Some(next);
            }
            self.apply(now);
        }
        self.last = Some(*int);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1_000_000_000;

    fn hop(q: u64, tx: u64, ts: u64, rate: u64) -> IntHop {
        IntHop {
            qlen_bytes: q,
            tx_bytes: tx,
            ts_ns: ts,
            rate_bps: rate,
        }
    }

    fn stack(hops: &[IntHop]) -> IntStack {
        let mut s = IntStack::new();
        for &h in hops {
            assert!(s.push(h));
        }
        s
    }

    /// T = 10 µs at 100 Gb/s: W_init = 125,000 B.
    fn params() -> HpccParams {
        HpccParams {
            base_rtt: Duration::from_micros(10),
            ..HpccParams::paper()
        }
    }

    #[test]
    fn a_full_link_with_a_queue_cuts_the_window_by_u_over_eta() {
        let mut h = Hpcc::new(params(), 100 * G);
        assert_eq!(h.window_bytes(), 125_000.0);
        assert_eq!(h.rate_bps(), Some(100 * G));
        // First ACK: stamps stored, nothing computed.
        h.on_int(
            Instant(0),
            &stack(&[hop(0, 0, 0, 100 * G)]),
            Psn::new(10),
            Psn::new(20),
        );
        assert_eq!(h.window_bytes(), 125_000.0);
        // 10 µs later: the port sent 125,000 B (line rate: txRate/B = 1) with 62,500 B queued
        // now and 50,000 B before: u' = min(62500, 50000)/(12.5e9 · 1e-5) + 1 = 0.4 + 1 = 1.4.
        let mut h = Hpcc::new(params(), 100 * G);
        h.on_int(
            Instant(0),
            &stack(&[hop(50_000, 0, 0, 100 * G)]),
            Psn::new(10),
            Psn::new(20),
        );
        h.on_int(
            Instant(10_000),
            &stack(&[hop(62_500, 125_000, 10_000, 100 * G)]),
            Psn::new(15),
            Psn::new(30),
        );
        // τ = T: U = u = 1.4. U ≥ η: W = Wc/(U/η) + W_AI = 125000 · 0.95/1.4 + 80.
        let want = 125_000.0 * 0.95 / 1.4 + 80.0;
        assert!((h.utilization() - 1.4).abs() < 1e-12);
        assert!(
            (h.window_bytes() - want).abs() < 1e-6,
            "{}",
            h.window_bytes()
        );
        // The first computed update moves Wc (no earlier update to wait for).
        assert!((h.reference_window_bytes() - want).abs() < 1e-6);
        // R = W / T.
        let r = (want * 8e9 / 10_000.0) as u64;
        assert_eq!(h.rate_bps(), Some(r));
        assert_eq!(h.updates(), (1, 0));
    }

    #[test]
    fn wc_moves_once_per_round_trip_and_the_most_loaded_hop_decides() {
        let mut h = Hpcc::new(params(), 100 * G);
        let two = |q: u64, tx0: u64, tx1: u64, ts: u64| {
            stack(&[hop(0, tx0, ts, 400 * G), hop(q, tx1, ts, 100 * G)])
        };
        h.on_int(Instant(0), &two(0, 0, 0, 0), Psn::new(1), Psn::new(50));
        // 5 µs on: hop 0 at 400G carried 125,000 B (txRate = 25 GB/s over B = 50 GB/s:
        // 0.5); hop 1 at 100G carried 31,250 B (0.5 of 12.5 GB/s) and has 100,000 B queued,
        // but min(q, q_prev) = 0: u = 0.5,
        // τ = 5 µs = T/2: U = 0.5 · 0 + 0.5 · 0.5 = 0.25 < η: additive increase, Wc updated.
        h.on_int(
            Instant(5_000),
            &two(100_000, 125_000, 31_250, 5_000),
            Psn::new(10),
            Psn::new(60),
        );
        assert!(
            (h.utilization() - 0.25).abs() < 1e-12,
            "{}",
            h.utilization()
        );
        assert_eq!(h.reference_window_bytes(), 125_000.0, "capped at W_init");
        assert_eq!(h.updates(), (0, 1));
        // Next ACK for PSN 40 < 60 (the update's next PSN): W is computed but Wc stays.
        // Hop 1 has 100,000 B queued at both stamps and ran at line rate: u' =
        // 100000/125000 + 1 = 1.8 at
        // τ = 5 µs: U = 0.5 · 0.25 + 0.5 · 1.8 = 1.025 ≥ η.
        h.on_int(
            Instant(10_000),
            &stack(&[
                hop(0, 250_000, 10_000, 400 * G),
                hop(100_000, 93_750, 10_000, 100 * G),
            ]),
            Psn::new(40),
            Psn::new(70),
        );
        assert!(
            (h.utilization() - 1.025).abs() < 1e-12,
            "{}",
            h.utilization()
        );
        let want = 125_000.0 / (1.025 / 0.95) + 80.0;
        assert!((h.window_bytes() - want).abs() < 1e-6);
        assert_eq!(h.reference_window_bytes(), 125_000.0, "Wc waits for PSN 60");
        assert_eq!(h.updates(), (0, 1));
    }

    #[test]
    fn max_stage_additive_increases_force_a_multiplicative_update() {
        let mut h = Hpcc::new(params(), 100 * G);
        // Hold the window low first: a heavy queue.
        h.on_int(
            Instant(0),
            &stack(&[hop(500_000, 0, 0, 100 * G)]),
            Psn::new(0),
            Psn::new(1),
        );
        h.on_int(
            Instant(10_000),
            &stack(&[hop(500_000, 125_000, 10_000, 100 * G)]),
            Psn::new(2),
            Psn::new(3),
        );
        // U = 4 + 1 = 5: W = 125000 · 0.95 / 5 + 80 = 23,830.
        assert!((h.window_bytes() - 23_830.0).abs() < 1e-6);
        // Then an idle path (U → small): 5 additive increases of 80 B, then the sixth
        // update is multiplicative (incStage = maxStage), W = Wc / (U/η) + W_AI, a jump up.
        let mut ts = 10_000;
        let mut tx = 125_000;
        let mut psn = 3;
        let mut windows = Vec::new();
        for _ in 0..6 {
            ts += 10_000;
            tx += 12_500; // 10 % of the link
            psn += 2;
            h.on_int(
                Instant(ts),
                &stack(&[hop(0, tx, ts, 100 * G)]),
                Psn::new(psn - 1),
                Psn::new(psn),
            );
            windows.push(h.window_bytes());
        }
        for (i, w) in windows.iter().take(5).enumerate() {
            assert!(
                (w - (23_830.0 + 80.0 * (i + 1) as f64)).abs() < 1e-6,
                "{windows:?}"
            );
        }
        // U = 0.1 after a whole T at 10 %: W = 24230 / (0.1/0.95) + 80 = 230,265 → capped.
        assert_eq!(windows[5], 125_000.0, "{windows:?}");
        assert_eq!(h.updates(), (2, 5));
    }

    #[test]
    fn a_changed_path_or_stamps_without_time_are_not_measured() {
        let mut h = Hpcc::new(params(), 100 * G);
        h.on_int(
            Instant(0),
            &stack(&[hop(0, 0, 0, 100 * G)]),
            Psn::new(0),
            Psn::new(1),
        );
        // Two hops now: not comparable, stored.
        h.on_int(
            Instant(1),
            &stack(&[hop(900_000, 0, 1, 100 * G), hop(0, 0, 1, 100 * G)]),
            Psn::new(0),
            Psn::new(1),
        );
        assert_eq!(h.window_bytes(), 125_000.0);
        // The same timestamps again: no hop contributes and τ = 0 keeps U (still 0).
        h.on_int(
            Instant(2),
            &stack(&[hop(900_000, 0, 1, 100 * G), hop(0, 0, 1, 100 * G)]),
            Psn::new(0),
            Psn::new(1),
        );
        assert_eq!(h.utilization(), 0.0);
        let mut full = IntStack::new();
        for _ in 0..MAX_INT_HOPS {
            assert!(full.push(IntHop::default()));
        }
        assert!(!full.push(IntHop::default()));
        assert_eq!(full.hops().len(), MAX_INT_HOPS);
        assert!(HpccParams::paper().validate().is_ok());
        assert!(HpccParams {
            eta: 1.5,
            ..HpccParams::paper()
        }
        .validate()
        .is_err());
    }
}
