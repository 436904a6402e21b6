//! Congestion control: the hook a QP calls, and what plugs into it (ECN marks → CNPs → rate).
//!
//! A [`Qp`](crate::Qp) asks its controller before each paced transmission (requests and READ
//! responses, retransmissions included) and reports CNPs, ACK progress, sent bytes and
//! retransmit timeouts ([`CongestionControl`]). The controllers are pure: they see only the
//! times passed in.
//!
//! * [`NoCc`] never throttles; [`pacing::FixedRate`] paces to a constant rate;
//!   [`dcqcn::Dcqcn`] is the DCQCN reaction point; [`hpcc::Hpcc`] runs HPCC on the in-network
//!   telemetry its ACKs echo ([`CongestionControl::on_int`]).
//! * [`cnp`]: the notification point, when a CE mark earns the sender a CNP.
//! * [`CcConfig`]: which controller a QP is built with.
//!
//! A new algorithm is a new module here implementing [`CongestionControl`] and a variant of
//! [`CcConfig`].
use core::fmt::Debug;

use crate::time::Instant;

pub mod cnp;
pub mod dcqcn;
pub mod hpcc;
pub mod pacing;

use dcqcn::{Dcqcn, DcqcnParams};
use hpcc::{Hpcc, HpccParams, IntStack};
use pacing::FixedRate;

/// A per-QP congestion controller. Pure: it sees only times passed in.
pub trait CongestionControl: Debug + Send {
    /// A paced packet of `bytes` (wire bytes of the transport packet) left at `now`.
    fn on_packet_sent(&mut self, now: Instant, bytes: usize);
    /// ACKs (or READ responses) newly acknowledged `bytes` of payload at `now`.
    fn on_ack(&mut self, now: Instant, bytes: u64);
    /// A CNP for this QP arrived.
    fn on_cnp(&mut self, now: Instant);
    /// The retransmit timer fired.
    fn on_retransmit_timeout(&mut self, _now: Instant) {}
    /// Earliest time a packet of `bytes` may leave; `None` or a time `<= now` means "now".
    fn next_send_time(&self, now: Instant, bytes: usize) -> Option<Instant>;
    /// The controller's own next timer (e.g. rate increase), if any.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// Called when `now >= poll_timeout()`.
    fn handle_timeout(&mut self, _now: Instant) {}
    /// Current sending rate in bits per second, `None` when unlimited.
    fn rate_bps(&self) -> Option<u64> {
        None
    }
    /// An ACK for PSN `acked` echoed the telemetry `int` its data packet collected; `next`
    /// is one past the highest PSN sent (`snd_nxt`). Ignored unless implemented (HPCC).
    fn on_int(
        &mut self,
        now: Instant,
        int: &IntStack,
        acked: roce_proto::Psn,
        next: roce_proto::Psn,
    ) {
        let _ = (now, int, acked, next);
    }
}

/// No congestion control: never throttles, ignores CNPs.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCc;

impl CongestionControl for NoCc {
    fn on_packet_sent(&mut self, _: Instant, _: usize) {}
    fn on_ack(&mut self, _: Instant, _: u64) {}
    fn on_cnp(&mut self, _: Instant) {}
    fn next_send_time(&self, _: Instant, _: usize) -> Option<Instant> {
        None
    }
}

/// A congestion-control choice for a QP: which controller, with which parameters.
///
/// | variant | controller |
/// |---|---|
/// | [`CcConfig::None`] | [`NoCc`]: no pacing, CNPs ignored |
/// | [`CcConfig::Fixed`] | [`FixedRate`]: paces to a rate, ignores CNPs |
/// | [`CcConfig::Dcqcn`] | [`Dcqcn`] with the given parameters ([`CcConfig::PAPER`], [`CcConfig::NVIDIA`]) |
/// | [`CcConfig::Hpcc`] | [`Hpcc`] with the given parameters |
///
/// The `roce` command line writes these as `none`, `fixed:rate=10Gbps`, `dcqcn`/`paper`,
/// `nvidia`, `hpcc`, with `:key=value` overrides.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CcConfig {
    /// No congestion control.
    None,
    /// A fixed pacing rate.
    Fixed {
        /// Rate in bits/s.
        rate_bps: u64,
        /// Pacer burst allowance in bytes.
        burst_bytes: u64,
    },
    /// DCQCN with these parameters.
    Dcqcn(DcqcnParams),
    /// HPCC with these parameters (needs a network that stamps INT: the simulator's fabric).
    Hpcc(HpccParams),
}

impl CcConfig {
    /// The DCQCN paper preset.
    pub const PAPER: Self = Self::Dcqcn(DcqcnParams::paper());
    /// The NVIDIA preset.
    pub const NVIDIA: Self = Self::Dcqcn(DcqcnParams::nvidia());

    /// Short name of the controller for reports: `"none"`, `"fixed"`, `"dcqcn"` or `"hpcc"`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Fixed { .. } => "fixed",
            Self::Dcqcn(_) => "dcqcn",
            Self::Hpcc(_) => "hpcc",
        }
    }

    /// A controller for one QP on a link of `line_rate_bps` bits/s.
    pub fn build(&self, line_rate_bps: u64) -> Box<dyn CongestionControl> {
        match *self {
            Self::None => Box::new(NoCc),
            Self::Fixed {
                rate_bps,
                burst_bytes,
            } => Box::new(FixedRate::with_burst(rate_bps, burst_bytes)),
            Self::Dcqcn(p) => Box::new(Dcqcn::new(p, line_rate_bps)),
            Self::Hpcc(p) => Box::new(Hpcc::new(p, line_rate_bps)),
        }
    }
}

impl core::fmt::Display for CcConfig {
    /// The fully explicit form, e.g. `fixed:rate=10000000000bps,burst=16640` or
    /// `dcqcn:g=0.00390625,k=55000ns,...`: every parameter with its unit, so the command line's
    /// `--cc` reads it back to the same value.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Fixed {
                rate_bps,
                burst_bytes,
            } => write!(f, "fixed:rate={rate_bps}bps,burst={burst_bytes}"),
            Self::Dcqcn(p) => {
                write!(
                    f,
                    "dcqcn:g={},k={}ns,alpha_mode={},alpha0={},reduce_period={}ns,t={}ns,b={},\
                     f={},ai={}bps,hai={}bps,min_rate={}bps,max_cut={},clamp={},",
                    p.g,
                    p.alpha_period.as_nanos(),
                    p.alpha_mode.name(),
                    p.initial_alpha,
                    p.rate_reduce_period.as_nanos(),
                    p.increase_timer.as_nanos(),
                    p.byte_counter,
                    p.fast_recovery_steps,
                    p.ai_rate_bps,
                    p.hai_rate_bps,
                    p.min_rate_bps,
                    p.max_cut,
                    p.clamp_target_rate,
                )?;
                match p.first_cnp_rate_bps {
                    Some(r) => write!(f, "first_cnp_rate={r}bps,")?,
                    None => f.write_str("first_cnp_rate=off,")?,
                }
                write!(
                    f,
                    "halve_in_hyper={},burst={}",
                    p.halve_in_hyper, p.burst_bytes
                )
            }
            Self::Hpcc(p) => write!(
                f,
                "hpcc:eta={},max_stage={},wai={},t={}ns,min_rate={}bps",
                p.eta,
                p.max_stage,
                p.w_ai_bytes,
                p.base_rtt.as_nanos(),
                p.min_rate_bps
            ),
        }
    }
}
