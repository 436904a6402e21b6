//! DCQCN, the RoCEv2 reaction point (sender side) rate control, and the congestion-control
//! configurations a QP can be built with (the DCQCN paper, Zhu et al., SIGCOMM 2015 §3-4; the
//! authors' ns3-rdma simulator; NVIDIA's DOCA DCQCN parameters; design note `stack/CC.md`).
//!
//! * [`Dcqcn`] implements [`CongestionControl`]: per-QP current rate R_C, target rate R_T, α,
//!   rate-increase timer and byte counter, cut on CNP, α decay, fast recovery, additive and
//!   hyper increase, clamped to the line rate and R_min, with transmissions paced to R_C by a
//!   drift-free [`Pacer`].
//! * [`DcqcnParams`] holds every parameter, with the presets [`DcqcnParams::paper`] and
//!   [`DcqcnParams::nvidia`]; all fields are public and overridable.
//! * [`FixedRate`](super::pacing::FixedRate) paces to a constant rate and ignores CNPs.
//! * [`CcConfig`](super::CcConfig) names one of none, fixed, DCQCN with parameters, and builds
//!   a `Box<dyn CongestionControl>` for a QP.
//!
//! Units: rates are `u64` bits per second of the transport-packet bytes the QP reports to
//! [`CongestionControl::on_packet_sent`] (BTH through ICRC); α is an `f64` in `[0, 1]`;
//! durations are [`Duration`]s; the byte counter counts the same bytes as the rate.
//!
//! Time only moves through the `now` arguments: the controller never reads a clock. Its
//! timers (rate increase, a coalesced rate cut) are reported by `poll_timeout`; α decay is
//! computed lazily from the elapsed time, so it needs no timer of its own.
use core::time::Duration;

use super::pacing::{Pacer, DEFAULT_BURST_BYTES};
use super::CongestionControl;
use crate::time::Instant;

const MBPS: u64 = 1_000_000;

/// Cap on timer events processed by one `handle_timeout` call (a caller that slept for a very
/// long time gets the timers re-anchored at `now` instead of a long catch-up loop).
const MAX_CATCH_UP: u32 = 4096;

/// How α is raised and decayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AlphaMode {
    /// DCQCN paper and the authors' simulator: every rate cut first uses α, then sets
    /// α ← (1 − g)·α + g; every K without a cut, α ← (1 − g)·α (the K period restarts at each
    /// cut).
    OnCut,
    /// NVIDIA firmware (as modelled by HPCC's `rdma-hw.cc`): a free-running period K from the
    /// first CNP; at the end of each period α ← (1 − g)·α + g if a CNP arrived in it, else
    /// α ← (1 − g)·α. Cuts use the α of the moment.
    Periodic,
}

impl AlphaMode {
    /// The name used in configuration strings: `on-cut` or `periodic`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::OnCut => "on-cut",
            Self::Periodic => "periodic",
        }
    }
}

/// Every DCQCN reaction-point parameter. Start from a preset and override fields:
/// `DcqcnParams { min_rate_bps: 10_000_000, ..DcqcnParams::nvidia() }`.
///
/// Stage counters, as used by `fast_recovery_steps`: a counter is the number of increase
/// events of its kind (timer or byte counter) since the last cut, the current one included.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DcqcnParams {
    /// g, the α gain in `(0, 1]`: α ← (1 − g)·α (+ g on congestion).
    pub g: f64,
    /// K, the α update period (must be > 0).
    pub alpha_period: Duration,
    /// How α is updated, see [`AlphaMode`].
    pub alpha_mode: AlphaMode,
    /// α in `[0, 1]` until the first CNP is processed (NVIDIA `initial_alpha_value`): the
    /// first cut uses it.
    pub initial_alpha: f64,
    /// Rate-reduce monitor period (NVIDIA `rate_reduce_monitor_period`): the minimum time
    /// between two cuts. A CNP arriving sooner than this after the last cut is remembered and
    /// all such CNPs are answered by one cut when the period ends. `Duration::ZERO` = cut on
    /// every CNP (DCQCN paper).
    pub rate_reduce_period: Duration,
    /// T, the rate-increase timer (NVIDIA `rpg_time_reset`); `Duration::ZERO` disables timer
    /// events. At least one of T and B must be enabled.
    pub increase_timer: Duration,
    /// B, bytes sent per byte-counter increase event (NVIDIA `rpg_byte_reset`); 0 disables
    /// byte-counter events.
    pub byte_counter: u64,
    /// F, fast-recovery steps (NVIDIA `rpg_threshold`): an event whose counter is `<= F` is a
    /// fast-recovery step; above F it is additive increase while the other counter is still
    /// `<= F` (a disabled counter counts as always above F), hyper increase once both are
    /// above F.
    pub fast_recovery_steps: u32,
    /// R_AI, additive-increase step of R_T in bits/s (NVIDIA `rpg_ai_rate`).
    pub ai_rate_bps: u64,
    /// R_HAI, hyper-increase step of R_T in bits/s (NVIDIA `rpg_hai_rate`), multiplied by
    /// i = min(byte stage, timer stage) − F.
    pub hai_rate_bps: u64,
    /// R_min, the floor of R_C and R_T in bits/s (NVIDIA `rpg_min_rate`). Capped at the line
    /// rate.
    pub min_rate_bps: u64,
    /// Largest fraction of R_C one cut may remove, in `[0, 1]` (NVIDIA `rpg_min_dec_fac` =
    /// 50 % ⇒ 0.5): R_C ← max(R_min, R_C·(1 − α/2), R_C·(1 − max_cut)).
    pub max_cut: f64,
    /// `true`: every cut first sets R_T ← R_C (DCQCN paper, simulator `CLAMP_TARGET_RATE 1`,
    /// NVIDIA `clamp_tgt_rate`). `false`: only if a rate increase happened since the last cut
    /// (QCN behaviour; R_T then remembers the rate before a burst of cuts).
    pub clamp_target_rate: bool,
    /// NVIDIA `rate_to_set_on_first_cnp`: when `Some(r)`, the first CNP of the QP sets
    /// R_C = R_T = r (clamped to [R_min, line rate]) *instead of* the first cut. `None` (NVIDIA
    /// value 0): the first CNP cuts like any other.
    pub first_cnp_rate_bps: Option<u64>,
    /// Authors' simulator: in hyper increase the counter that fired waits only T/2 or B/2 for
    /// its next event.
    pub halve_in_hyper: bool,
    /// Burst allowance of the pacer in bytes (see [`super::pacing`]).
    pub burst_bytes: u64,
}

impl DcqcnParams {
    /// The DCQCN paper (Zhu et al., SIGCOMM 2015) and the authors' simulator
    /// (bobzhuyb/ns3-rdma, `config.txt`). Agreeing values: g = 1/256,
    /// K = 55 µs, F = 5, R_AI = 40 Mb/s, one cut per CNP, at most 50 % per cut, R_T clamped on
    /// every cut (`CLAMP_TARGET_RATE 1`). Only the simulator gives R_HAI = 200 Mb/s,
    /// R_min = 100 Mb/s, initial α = 0.5 (its initialisation) and the halving of T and B in
    /// hyper increase: taken from it. Where they differ the paper wins: T = 55 µs (simulator
    /// config 60 µs) and B = 10 MB (simulator config 300 000 B). With B = 300 kB the byte
    /// counter, which fires faster the faster a flow sends, dominates recovery and keeps
    /// flows unequal (Jain index 0.33 for 8 flows in `tests/dcqcn.rs`'s closed loop, against
    /// 0.99 with 10 MB); see `stack/CC.md`.
    pub const fn paper() -> Self {
        Self {
            g: 1.0 / 256.0,
            alpha_period: Duration::from_micros(55),
            alpha_mode: AlphaMode::OnCut,
            initial_alpha: 0.5,
            rate_reduce_period: Duration::ZERO,
            increase_timer: Duration::from_micros(55),
            byte_counter: 10_000_000,
            fast_recovery_steps: 5,
            ai_rate_bps: 40 * MBPS,
            hai_rate_bps: 200 * MBPS,
            min_rate_bps: 100 * MBPS,
            max_cut: 0.5,
            clamp_target_rate: true,
            first_cnp_rate_bps: None,
            halve_in_hyper: true,
            burst_bytes: DEFAULT_BURST_BYTES,
        }
    }

    /// NVIDIA ConnectX firmware defaults as far as known.
    /// Verified from the DOCA "DCQCN CC Parameters" page: g = 5/1024 (`dce_tcp_g` 1019),
    /// K = 1 µs (`dce_tcp_rtt`), initial α = 1023/1024, rate-reduce period 4 µs,
    /// R_min = 1 Mb/s, at most 50 % per cut, no rate set on the first CNP. **Unconfirmed**
    /// (memory, consistent with HPCC's Mellanox model): T = 300 µs, B = 32 767 B, F = 1,
    /// R_AI = 5 Mb/s, R_HAI = 50 Mb/s, `clamp_tgt_rate` off. Not modelled: `rpg_gd` (its
    /// formula is unconfirmed; the cut is the DCQCN R_C·(1 − α/2)).
    pub const fn nvidia() -> Self {
        Self {
            g: 5.0 / 1024.0,
            alpha_period: Duration::from_micros(1),
            alpha_mode: AlphaMode::Periodic,
            initial_alpha: 1023.0 / 1024.0,
            rate_reduce_period: Duration::from_micros(4),
            increase_timer: Duration::from_micros(300),
            byte_counter: 32_767,
            fast_recovery_steps: 1,
            ai_rate_bps: 5 * MBPS,
            hai_rate_bps: 50 * MBPS,
            min_rate_bps: MBPS,
            max_cut: 0.5,
            clamp_target_rate: false,
            first_cnp_rate_bps: None,
            halve_in_hyper: false,
            burst_bytes: DEFAULT_BURST_BYTES,
        }
    }

    /// Checks ranges: g in (0, 1], α and `max_cut` in [0, 1], K > 0, T or B enabled.
    pub fn validate(&self) -> Result<(), InvalidParams> {
        let bad = |reason| Err(InvalidParams { reason });
        if !(self.g > 0.0 && self.g <= 1.0) {
            return bad("g must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.initial_alpha) {
            return bad("initial_alpha must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.max_cut) {
            return bad("max_cut must be in [0, 1]");
        }
        if self.alpha_period.is_zero() {
            return bad("the alpha period K must be > 0");
        }
        if self.increase_timer.is_zero() && self.byte_counter == 0 {
            return bad(
                "at least one of the increase timer T and the byte counter B must be enabled",
            );
        }
        Ok(())
    }
}

/// DCQCN parameters that do not make sense together ([`DcqcnParams::validate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid DCQCN parameters: {reason}")]
pub struct InvalidParams {
    /// What is wrong.
    pub reason: &'static str,
}

impl Default for DcqcnParams {
    /// [`DcqcnParams::paper`].
    fn default() -> Self {
        Self::paper()
    }
}

/// Where a [`Dcqcn`] is in its rate-control cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Never cut, or fully recovered to the line rate: no timers run, no pacing.
    LineRate,
    /// Cut, no increase event yet, or the last event was a fast-recovery step.
    FastRecovery,
    /// The last increase event was additive.
    AdditiveIncrease,
    /// The last increase event was hyper.
    HyperIncrease,
}

/// Event counters of a [`Dcqcn`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DcqcnStats {
    /// CNPs received.
    pub cnps: u64,
    /// Rate cuts made (a coalesced group of CNPs makes one).
    pub cuts: u64,
    /// CNPs that arrived within the rate-reduce period and were folded into a later cut.
    pub coalesced_cnps: u64,
    /// Increase events fired by the timer T.
    pub timer_events: u64,
    /// Increase events fired by the byte counter B.
    pub byte_events: u64,
    /// Fast-recovery steps.
    pub fast_recovery: u64,
    /// Additive-increase steps.
    pub additive_increase: u64,
    /// Hyper-increase steps.
    pub hyper_increase: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Timer,
    Bytes,
}

/// A DCQCN reaction point for one QP. See the module docs and `stack/CC.md`.
///
/// Before the first CNP the QP sends unpaced at line rate and no timer runs. A CNP cuts the
/// rate (or, within the rate-reduce period, schedules one cut at its end) and starts the
/// increase timer and byte counter; increases bring R_C back, and once R_C and R_T are both
/// at the line rate the controller goes idle again (timers stopped, pacing off).
#[derive(Debug, Clone)]
pub struct Dcqcn {
    p: DcqcnParams,
    line_rate: u64,
    min_rate: u64,
    rc: u64,
    rt: u64,
    alpha: f64,
    /// Start of the current α period; `None` before the first CNP (α frozen).
    alpha_epoch: Option<Instant>,
    /// Periodic mode: a CNP arrived in the current α period.
    alpha_cnp: bool,
    first_cnp_seen: bool,
    last_cut: Option<Instant>,
    /// A cut is owed at `reduce_deadline` (CNPs coalesced in the rate-reduce period).
    reduce_deadline: Option<Instant>,
    /// Rate increase machinery runs (between a cut and full recovery).
    recovering: bool,
    timer_deadline: Option<Instant>,
    timer_period_ns: u64,
    byte_threshold: u64,
    bytes_since: u64,
    time_stage: u32,
    byte_stage: u32,
    increased_since_cut: bool,
    phase: Phase,
    pacer: Pacer,
    stats: DcqcnStats,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Midpoint rounded up, so R_C reaches R_T exactly instead of stalling 1 bit/s below.
fn midpoint_up(a: u64, b: u64) -> u64 {
    let m = (u128::from(a) + u128::from(b)).div_ceil(2);
    u64::try_from(m).unwrap_or(u64::MAX)
}

impl Dcqcn {
    /// A reaction point for a QP whose link runs at `line_rate_bps` (R_C starts there). The
    /// parameters are used as given; run [`DcqcnParams::validate`] first to reject nonsense
    /// (out-of-range values are clamped here rather than panicking). A line rate of 0 is
    /// treated as 1 bit/s.
    pub fn new(params: DcqcnParams, line_rate_bps: u64) -> Self {
        let line_rate = line_rate_bps.max(1);
        let mut p = params;
        p.g = if p.g.is_nan() {
            1.0
        } else {
            p.g.clamp(0.0, 1.0)
        };
        p.initial_alpha = if p.initial_alpha.is_nan() {
            1.0
        } else {
            p.initial_alpha.clamp(0.0, 1.0)
        };
        p.max_cut = if p.max_cut.is_nan() {
            0.5
        } else {
            p.max_cut.clamp(0.0, 1.0)
        };
        Self {
            line_rate,
            min_rate: p.min_rate_bps.clamp(1, line_rate),
            rc: line_rate,
            rt: line_rate,
            alpha: p.initial_alpha,
            alpha_epoch: None,
            alpha_cnp: false,
            first_cnp_seen: false,
            last_cut: None,
            reduce_deadline: None,
            recovering: false,
            timer_deadline: None,
            timer_period_ns: nanos(p.increase_timer),
            byte_threshold: p.byte_counter,
            bytes_since: 0,
            time_stage: 0,
            byte_stage: 0,
            increased_since_cut: true,
            phase: Phase::LineRate,
            pacer: Pacer::new(0, p.burst_bytes),
            stats: DcqcnStats::default(),
            p,
        }
    }

    /// The parameters in use.
    pub const fn params(&self) -> &DcqcnParams {
        &self.p
    }

    /// The line rate in bits/s.
    pub const fn line_rate_bps(&self) -> u64 {
        self.line_rate
    }

    /// R_C, the current rate in bits/s.
    pub const fn current_rate_bps(&self) -> u64 {
        self.rc
    }

    /// R_T, the target rate in bits/s.
    pub const fn target_rate_bps(&self) -> u64 {
        self.rt
    }

    /// α as of the last event processed (decay since then is applied lazily; see
    /// [`Dcqcn::alpha_at`]).
    pub const fn alpha(&self) -> f64 {
        self.alpha
    }

    /// α at `now`, with the decay of every α period that ended by `now` applied.
    pub fn alpha_at(&self, now: Instant) -> f64 {
        let mut c = self.clone();
        c.sync_alpha(now);
        c.alpha
    }

    /// Stage counters `(timer, byte counter)`: increase events of each kind since the last cut.
    pub const fn stages(&self) -> (u32, u32) {
        (self.time_stage, self.byte_stage)
    }

    /// The current phase.
    pub const fn phase(&self) -> Phase {
        self.phase
    }

    /// Event counters.
    pub const fn stats(&self) -> &DcqcnStats {
        &self.stats
    }

    fn k_ns(&self) -> u64 {
        nanos(self.p.alpha_period).max(1)
    }

    /// Applies the α updates of every period that ended by `now`.
    fn sync_alpha(&mut self, now: Instant) {
        let Some(epoch) = self.alpha_epoch else {
            return;
        };
        let k = self.k_ns();
        let n = now.as_nanos().saturating_sub(epoch.as_nanos()) / k;
        if n == 0 {
            return;
        }
        let keep = 1.0 - self.p.g;
        let mut decays = n;
        if self.p.alpha_mode == AlphaMode::Periodic {
            // The first period that ended may have seen a CNP; later ones saw none.
            self.alpha = keep * self.alpha + if self.alpha_cnp { self.p.g } else { 0.0 };
            self.alpha_cnp = false;
            decays -= 1;
        }
        if decays > 0 {
            let exp = i32::try_from(decays).unwrap_or(i32::MAX);
            self.alpha *= keep.powi(exp);
        }
        self.alpha = self.alpha.clamp(0.0, 1.0);
        self.alpha_epoch = Some(epoch.add_nanos(n.saturating_mul(k)));
    }

    fn clamp_rates(&mut self) {
        self.rt = self.rt.clamp(self.min_rate, self.line_rate);
        self.rc = self.rc.clamp(self.min_rate, self.line_rate);
    }

    /// Restarts the increase machinery after a cut (or the first-CNP rate set) at `now`.
    fn restart_increase(&mut self, now: Instant) {
        self.recovering = true;
        self.phase = Phase::FastRecovery;
        self.time_stage = 0;
        self.byte_stage = 0;
        self.bytes_since = 0;
        self.increased_since_cut = false;
        self.byte_threshold = self.p.byte_counter;
        self.timer_period_ns = nanos(self.p.increase_timer);
        self.timer_deadline =
            (self.timer_period_ns > 0).then(|| now.add_nanos(self.timer_period_ns));
        self.last_cut = Some(now);
        self.reduce_deadline = None;
        self.update_pacer(now);
    }

    fn update_pacer(&mut self, now: Instant) {
        // At line rate the link is the limit: no pacing, so it can never throttle below it.
        self.pacer.set_rate(
            now,
            if self.rc >= self.line_rate {
                0
            } else {
                self.rc
            },
        );
    }

    /// The rate cut, at `now`.
    fn cut(&mut self, now: Instant) {
        self.sync_alpha(now);
        if self.p.clamp_target_rate || self.increased_since_cut {
            self.rt = self.rc;
        }
        let rc = self.rc as f64;
        let by_alpha = rc * (1.0 - self.alpha / 2.0);
        let by_max_cut = rc * (1.0 - self.p.max_cut);
        // f64 → u64 `as` saturates (NaN → 0), then the R_min clamp applies.
        self.rc = by_alpha.max(by_max_cut).round() as u64;
        self.clamp_rates();
        if self.p.alpha_mode == AlphaMode::OnCut {
            self.alpha = ((1.0 - self.p.g) * self.alpha + self.p.g).clamp(0.0, 1.0);
            self.alpha_epoch = Some(now);
        }
        self.stats.cuts += 1;
        self.restart_increase(now);
    }

    /// One rate-increase event of kind `trigger` at `now` (§8.2 step 3).
    fn increase(&mut self, now: Instant, trigger: Trigger) {
        let f = self.p.fast_recovery_steps;
        let timer_on = self.p.increase_timer > Duration::ZERO;
        let bytes_on = self.p.byte_counter > 0;
        let (fired, other) = match trigger {
            Trigger::Timer => {
                self.time_stage = self.time_stage.saturating_add(1);
                self.stats.timer_events += 1;
                (
                    self.time_stage,
                    if bytes_on { self.byte_stage } else { u32::MAX },
                )
            }
            Trigger::Bytes => {
                self.byte_stage = self.byte_stage.saturating_add(1);
                self.stats.byte_events += 1;
                (
                    self.byte_stage,
                    if timer_on { self.time_stage } else { u32::MAX },
                )
            }
        };
        let hyper = if fired <= f {
            self.stats.fast_recovery += 1;
            self.phase = Phase::FastRecovery;
            false
        } else if other <= f {
            self.rt = self.rt.saturating_add(self.p.ai_rate_bps);
            self.stats.additive_increase += 1;
            self.phase = Phase::AdditiveIncrease;
            false
        } else {
            let i = u64::from(fired.min(other) - f);
            self.rt = self
                .rt
                .saturating_add(self.p.hai_rate_bps.saturating_mul(i));
            self.stats.hyper_increase += 1;
            self.phase = Phase::HyperIncrease;
            true
        };
        self.rt = self.rt.min(self.line_rate);
        self.rc = midpoint_up(self.rt, self.rc);
        self.clamp_rates();
        self.increased_since_cut = true;
        let halve = hyper && self.p.halve_in_hyper;
        match trigger {
            Trigger::Timer => {
                let t = nanos(self.p.increase_timer);
                self.timer_period_ns = if halve { (t / 2).max(1) } else { t };
            }
            Trigger::Bytes => {
                let b = self.p.byte_counter;
                self.byte_threshold = if halve { (b / 2).max(1) } else { b };
            }
        }
        if self.rc >= self.line_rate && self.rt >= self.line_rate {
            // Fully recovered: nothing left to increase.
            self.recovering = false;
            self.timer_deadline = None;
            self.bytes_since = 0;
            self.phase = Phase::LineRate;
        }
        self.update_pacer(now);
    }

    fn process_timers(&mut self, now: Instant) {
        for _ in 0..MAX_CATCH_UP {
            let reduce = self.reduce_deadline.filter(|&t| t <= now);
            let timer = self.timer_deadline.filter(|&t| t <= now);
            match (reduce, timer) {
                (Some(r), t) if t.is_none_or(|t| r <= t) => {
                    self.reduce_deadline = None;
                    self.cut(r);
                }
                (_, Some(t)) => {
                    self.timer_deadline = None;
                    self.increase(t, Trigger::Timer);
                    if self.recovering {
                        // One (possibly halved, by `increase`) period after this event.
                        self.timer_deadline = Some(t.add_nanos(self.timer_period_ns.max(1)));
                    }
                }
                _ => return,
            }
        }
        // A very late caller: re-anchor the timers at `now` rather than catch up forever.
        if let Some(t) = self.timer_deadline {
            if t <= now {
                self.timer_deadline = Some(now.add_nanos(self.timer_period_ns.max(1)));
            }
        }
        if let Some(r) = self.reduce_deadline {
            if r <= now {
                self.reduce_deadline = None;
                self.cut(now);
            }
        }
    }
}

impl CongestionControl for Dcqcn {
    fn on_packet_sent(&mut self, now: Instant, bytes: usize) {
        self.process_timers(now);
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        self.pacer.on_sent(now, bytes);
        if self.recovering && self.p.byte_counter > 0 {
            self.bytes_since = self.bytes_since.saturating_add(bytes);
            if self.bytes_since >= self.byte_threshold {
                // At most one event per packet; the overshoot carries over (below one
                // threshold), so no sent byte is lost to the counter.
                self.bytes_since -= self.byte_threshold;
                self.increase(now, Trigger::Bytes);
                self.bytes_since = self.bytes_since.min(self.byte_threshold.saturating_sub(1));
            }
        }
    }

    fn on_ack(&mut self, _now: Instant, _bytes: u64) {}

    fn on_cnp(&mut self, now: Instant) {
        self.process_timers(now);
        self.stats.cnps += 1;
        if !self.first_cnp_seen {
            self.first_cnp_seen = true;
            self.alpha = self.p.initial_alpha;
            self.alpha_epoch = Some(now);
            // Periodic mode: the first CNP only sets α (HPCC's model does not count it).
            self.alpha_cnp = false;
            if let Some(r) = self.p.first_cnp_rate_bps.filter(|&r| r > 0) {
                self.rc = r;
                self.rt = r;
                self.clamp_rates();
                self.stats.cuts += 1;
                self.restart_increase(now);
            } else {
                self.cut(now);
            }
            return;
        }
        self.sync_alpha(now);
        if self.p.alpha_mode == AlphaMode::Periodic {
            self.alpha_cnp = true;
        }
        let period = nanos(self.p.rate_reduce_period);
        match self.last_cut {
            Some(last) if period > 0 && now < last.add_nanos(period) => {
                self.stats.coalesced_cnps += 1;
                self.reduce_deadline = Some(last.add_nanos(period));
            }
            _ => self.cut(now),
        }
    }

    fn next_send_time(&self, now: Instant, _bytes: usize) -> Option<Instant> {
        self.pacer.next_send_time(now)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.timer_deadline, self.reduce_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.process_timers(now);
    }

    fn rate_bps(&self) -> Option<u64> {
        Some(self.rc)
    }
}

/// The reaction point's allowed rate over time, replayed from what a capture shows: the
/// CNPs the sender received (`cnps`, ns, ascending), the bytes it sent (`sent`: (ns, bytes),
/// ascending, e.g. per window), sampled at `samples` (ns, ascending). Timers run as they
/// would; the byte counter counts `sent`. For comparing a sender's measured rate with this
/// model (`roce analyze --fit-dcqcn`).
pub fn replay(
    params: DcqcnParams,
    line_rate_bps: u64,
    cnps: &[u64],
    sent: &[(u64, u64)],
    samples: &[u64],
) -> Vec<u64> {
    let mut d = Dcqcn::new(params, line_rate_bps.max(1));
    let (mut c, mut b) = (0, 0);
    let mut out = Vec::with_capacity(samples.len());
    for &at in samples {
        // Everything up to this sample, in time order: CNPs, sends, and the timers between.
        loop {
            let next_cnp = cnps.get(c).copied().filter(|&t| t <= at);
            let next_sent = sent.get(b).map(|s| s.0).filter(|&t| t <= at);
            let next = match (next_cnp, next_sent) {
                (Some(x), Some(y)) => x.min(y),
                (Some(x), None) | (None, Some(x)) => x,
                (None, None) => break,
            };
            while let Some(t) = d.poll_timeout().filter(|t| t.as_nanos() <= next) {
                d.handle_timeout(t);
            }
            if next_cnp == Some(next) {
                d.on_cnp(Instant::from_nanos(next));
                c += 1;
            } else {
                let bytes = usize::try_from(sent[b].1).unwrap_or(usize::MAX);
                d.on_packet_sent(Instant::from_nanos(next), bytes);
                b += 1;
            }
        }
        while let Some(t) = d.poll_timeout().filter(|t| t.as_nanos() <= at) {
            d.handle_timeout(t);
        }
        out.push(d.current_rate_bps());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_cuts_on_cnps_and_recovers_without_them() {
        let line = 100_000_000_000;
        let ms = 1_000_000;
        let samples: Vec<u64> = (0..40).map(|i| i * ms / 4).collect();
        let sent: Vec<(u64, u64)> = (0..400).map(|i| (i * ms / 40, 100_000)).collect();
        let quiet = replay(DcqcnParams::paper(), line, &[], &sent, &samples);
        assert!(
            quiet.iter().all(|&r| r == line),
            "no CNP, no cut: {quiet:?}"
        );
        let cnps = [ms, ms + 60_000, ms + 120_000];
        let r = replay(DcqcnParams::paper(), line, &cnps, &sent, &samples);
        let at = |t: u64| r[(t / (ms / 4)) as usize];
        assert_eq!(at(ms / 2), line, "before the first CNP");
        assert!(at(ms + ms / 4) < line * 3 / 4, "cut: {r:?}");
        assert!(at(9 * ms + ms / 2) > at(ms + ms / 4), "recovering: {r:?}");
    }

    #[test]
    fn midpoint_rounds_up_and_never_overflows() {
        assert_eq!(midpoint_up(100, 99), 100);
        assert_eq!(midpoint_up(100, 98), 99);
        assert_eq!(midpoint_up(u64::MAX, u64::MAX), u64::MAX);
    }

    #[test]
    fn nonsense_parameters_are_clamped_not_panicking() {
        let p = DcqcnParams {
            g: f64::NAN,
            initial_alpha: 7.0,
            max_cut: -1.0,
            min_rate_bps: u64::MAX,
            alpha_period: Duration::ZERO,
            ..DcqcnParams::paper()
        };
        assert!(p.validate().is_err());
        let mut cc = Dcqcn::new(p, 0);
        cc.on_cnp(Instant(0));
        cc.on_packet_sent(Instant(1), usize::MAX);
        cc.handle_timeout(Instant(u64::MAX));
        assert_eq!(cc.current_rate_bps(), 1);
        assert!((0.0..=1.0).contains(&cc.alpha_at(Instant(u64::MAX))));
    }
}
