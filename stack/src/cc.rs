//! The congestion-control hook (ECN marks → CNPs → rate), STYLE.md §5.
//!
//! A [`Qp`](crate::Qp) asks its controller before each paced transmission (requests and READ
//! responses, retransmissions included) and reports CNPs, ACK progress, sent bytes and
//! retransmit timeouts. [`NoCc`] never throttles. DCQCN (issue 6) plugs in here.
use core::fmt::Debug;

use crate::time::Instant;

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
