//! One side of a connection: what it sent, counted and measured ([`Side`]), the bounded
//! picture data it keeps (rate windows, PSN plot points, message slices), and how a side is
//! named in the reports.
use std::net::IpAddr;

use super::stats::Dist;

/// Stalls kept per side for the check against pauses.
const STALLS_KEPT: usize = 64;

/// The first rate window: 10 us (it doubles whenever 512 windows are kept).
pub const RATE_WINDOW_NS: u64 = 10_000;
/// Rate windows kept per side.
const RATE_MAX: usize = 512;
/// Message slices kept per side for the trace.
pub(super) const SLICES_MAX: usize = 2_048;
/// Points kept per side for the PSN plot (and CNP times received).
pub(super) const TRACE_MAX: usize = 4_096;

/// A retransmission episode open at the end of a capture ([`Side::retrying_at_end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryRun {
    /// The PSN the requester went back to.
    pub psn: u32,
    /// Times it sent that PSN again, a timeout or more apart (its retries so far).
    pub rounds: u64,
    /// The first resend's frame.
    pub first_frame: u64,
    /// The first resend's time, ns.
    pub first_t: u64,
    /// The last resend's time, ns.
    pub last_t: u64,
}

/// Counters and measures of one side of a connection (what it sent).
///
/// In declaration order (`repr(C)`): the counters every packet or message updates come
/// first (through `message_bytes`, 184 bytes), so that the analyzer's lookahead reads
/// them in three or four cache lines; the rest is for losses, measures and pictures.
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub struct Side {
    /// Packets sent.
    pub packets: u64,
    /// Transport bytes sent.
    pub bytes: u64,
    /// Request packets sent.
    pub requests: u64,
    /// Response packets sent (ACK, NAK, READ responses, atomic ACKs).
    pub responses: u64,
    /// First and last packet time, ns.
    pub first_t: u64,
    /// Last packet time.
    pub last_t: u64,
    /// First and last request PSN (24-bit).
    pub psn_first: Option<u32>,
    /// Highest request PSN.
    pub psn_last: Option<u32>,
    /// The priority of its packets: the VLAN PCP when tagged, else DSCP / 8 (the last
    /// packet's).
    pub priority: Option<u8>,
    /// The DSCP of its first IP packet (the traffic class it marks with).
    pub dscp: Option<u8>,
    /// Its packets carried more than one DSCP.
    pub dscp_varied: bool,
    /// Messages by operation: send, send_imm, write, write_imm, read, atomic, other.
    pub messages: [u64; 7],
    /// Payload bytes of those messages (READ: the requested length).
    pub message_bytes: [u64; 7],
    /// Sender address.
    pub addr: Option<IpAddr>,
    /// This side's QPN (the destination QPN of the other side's packets), when known.
    pub qpn: Option<u32>,
    /// PSN wraps seen.
    pub psn_wraps: u64,
    /// Request packets sent again.
    pub retransmitted_packets: u64,
    /// Retransmission episodes by [`Cause`](super::Cause) (index of `Cause::ALL`).
    pub episodes: [u64; 5],
    /// NAKs this side sent, by kind (index of [`NAK_KINDS`](super::NAK_KINDS)).
    pub naks: [u64; 6],
    /// PSN gaps in its requests.
    pub psn_gaps: u64,
    /// PSNs of its requests never seen at all (lost before the capture point).
    pub never_seen_psns: u64,
    /// Its packets the capture did not see although the peer's packets show they were
    /// sent and received (the capture dropped them): request PSNs acknowledged (by an ACK,
    /// a NAK for a later PSN, a response to a later READ) and READ requests answered; and
    /// the answers to READs and atomics that the requester, its later requests answered,
    /// never asked for again.
    pub missed_by_capture: u64,
    /// READ responses of its missing from inside an answer whose later packets were seen
    /// (lost before the capture point, or missed by it): the answer's checks are not judged.
    pub unseen_read_responses: u64,
    /// RNR NAKs it sent with timer code 0: 655.36 ms, the longest (IBTA Vol 1 §9.7.5.2.8,
    /// Table 45), and what `rdma_cm` leaves a QP's `min_rnr_timer` at.
    pub rnr_timer_zero: u64,
    /// The largest payload of the First and Middle packets it sent, requests or READ
    /// responses: its path MTU (IBTA Vol 1 §9.7.1, C9-93; 0: none sent).
    pub path_mtu: u32,
    /// The most READs and atomics it had outstanding when it sent one more (counting that
    /// one): the window `max_rd_atomic` allows it, when the requester filled it.
    pub reads_outstanding_max: u32,
    /// READs and atomics it sent with [`Side::reads_outstanding_max`] outstanding.
    pub reads_at_max: u64,
    /// Out-of-order requests.
    pub out_of_order: u64,
    /// Network duplicates.
    pub duplicates: u64,
    /// ACKs it sent for PSNs never sent.
    pub ghost_acks: u64,
    /// Stale ACKs it sent.
    pub stale_acks: u64,
    /// CNPs it sent.
    pub cnps: u64,
    /// Its packets marked CE.
    pub ecn_ce: u64,
    /// Its packets with a bad ICRC.
    pub icrc_bad: u64,
    /// Stalls of its requests.
    pub stalls: u64,
    /// (start, end) of its first stalls, ns (for the check against PFC pauses).
    pub stall_spans: Vec<(u64, u64)>,
    /// READ responses of its that did not match the request.
    pub read_response_mismatches: u64,
    /// ACK RTT of its requests.
    pub ack_rtt: Dist,
    /// READ latency of its READ requests.
    pub read_latency: Dist,
    /// Time from the first out-of-sequence request it received to its NAK.
    pub nak_generation: Dist,
    /// Time from a NAK it received to its first retransmitted packet.
    pub nak_response: Dist,
    /// Observed retransmission timeouts of its requests.
    pub retransmission_timeout: Dist,
    /// Observed waits after RNR NAKs it received.
    pub rnr_wait: Dist,
    /// Intervals between the CNPs it sent.
    pub cnp_interval: Dist,
    /// Its rate in the window after each CNP it received, in percent of the rate in the
    /// window before (with pictures: from the rate windows).
    pub rate_after_cnp_pct: Dist,
    /// Time from a CE-marked packet it received to the CNP it sent.
    pub ce_to_cnp: Dist,
    /// Request bytes per rate window (for the rate plot), ns window start → bytes, with
    /// pictures ([`Options::pictures`](super::Options::pictures)).
    pub rate: Vec<(u64, u64)>,
    /// The rate windows' length, ns.
    pub rate_window_ns: u64,
    /// Times of the CNPs it received.
    pub cnps_received_at: Vec<u64>,
    /// (time, PSN, kind) of its packets for the PSN plot: 0 request, 1 retransmission,
    /// 2 ACK, 3 NAK, 4 CNP (bounded).
    pub trace: Vec<(u64, u32, u8)>,
    /// Messages as (start, end, operation index of [`OPS`]) for the trace (bounded).
    pub slices: Vec<(u64, u64, u8)>,
    /// Requests and ACKs go into `trace` one in `trace_stride` (it doubles when `trace`
    /// fills; marks are all kept).
    trace_stride: u64,
    trace_seen: u64,
    /// Packets it sent as RoCE v1 (EtherType 0x8915), not v2.
    pub roce_v1: u64,
    /// A retransmission episode still open at the end of the capture (the requester went
    /// back to the same PSN round after round, nothing acknowledged after).
    pub retrying_at_end: Option<Box<RetryRun>>,
}

impl Side {
    /// Message bytes over the side's time span, Gb/s (0 over no time).
    pub(super) fn goodput_gbps(&self) -> f64 {
        let bytes: u64 = self.message_bytes.iter().sum();
        let dt = self.last_t.saturating_sub(self.first_t);
        if dt == 0 {
            0.0
        } else {
            bytes as f64 * 8.0 / dt as f64
        }
    }

    /// The latency measures of the side, in the reports' order.
    pub(super) fn measures(&self) -> [(&'static str, &Dist); 8] {
        [
            ("ack_rtt", &self.ack_rtt),
            ("read", &self.read_latency),
            ("nak_generation", &self.nak_generation),
            ("nak_response", &self.nak_response),
            ("retransmission_timeout", &self.retransmission_timeout),
            ("rnr_wait", &self.rnr_wait),
            ("cnp_interval", &self.cnp_interval),
            ("ce_to_cnp", &self.ce_to_cnp),
        ]
    }

    /// Counts a stall from `start` to `end` (ns), keeping the first spans.
    pub(super) fn note_stall(&mut self, start: u64, end: u64) {
        self.stalls += 1;
        if self.stall_spans.len() < STALLS_KEPT {
            self.stall_spans.push((start, end));
        }
    }

    /// Fills [`Side::rate_after_cnp_pct`] from the rate windows and the CNPs received.
    pub(super) fn note_rate_around_cnps(&mut self) {
        let win = self.rate_window_ns.max(1);
        let bytes_at = |rate: &[(u64, u64)], w: u64| {
            rate.binary_search_by_key(&w, |r| r.0)
                .map_or(0, |i| rate[i].1)
        };
        for &t in &self.cnps_received_at {
            let w = t / win * win;
            let (Some(before_w), after_w) = (w.checked_sub(win), w + win) else {
                continue;
            };
            let before = bytes_at(&self.rate, before_w);
            if let Some(pct) = (bytes_at(&self.rate, after_w) * 100).checked_div(before) {
                self.rate_after_cnp_pct.add(pct);
            }
        }
    }

    /// Adds `bytes` sent at `t` to the rate windows (halving their number, by merging
    /// neighbours, whenever [`RATE_MAX`] are kept).
    pub(super) fn add_rate(&mut self, t: u64, bytes: u64) {
        if self.rate_window_ns == 0 {
            self.rate_window_ns = RATE_WINDOW_NS;
        }
        loop {
            let w = t / self.rate_window_ns * self.rate_window_ns;
            let n = self.rate.len();
            match self.rate.last_mut() {
                Some(last) if last.0 == w => {
                    last.1 += bytes;
                    return;
                }
                _ if n < RATE_MAX => {
                    self.rate.push((w, bytes));
                    return;
                }
                _ => {
                    self.rate_window_ns *= 2;
                    let win = self.rate_window_ns;
                    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(RATE_MAX);
                    for &(start, b) in &self.rate {
                        let ws = start / win * win;
                        match merged.last_mut() {
                            Some(m) if m.0 == ws => m.1 += b,
                            _ => merged.push((ws, b)),
                        }
                    }
                    self.rate = merged;
                }
            }
        }
    }

    /// A point of the PSN plot: the whole capture, thinned (every mark, one request or ACK
    /// in a stride that doubles whenever the points fill up).
    pub(super) fn add_trace_point(&mut self, t: u64, psn: u32, kind: u8) {
        let thin = kind == 0 || kind == 2;
        if thin {
            self.trace_seen += 1;
            if !self.trace_seen.is_multiple_of(self.trace_stride.max(1)) {
                return;
            }
        }
        if self.trace.len() >= TRACE_MAX {
            let full = self.trace.len();
            let mut keep = false;
            self.trace.retain(|p| {
                if p.2 == 0 || p.2 == 2 {
                    keep = !keep;
                    keep
                } else {
                    true
                }
            });
            // Thinner only when thinning took points out (a trace of marks only stays as
            // it is: its stride must not double on every further mark).
            if self.trace.len() < full {
                self.trace_stride = self.trace_stride.max(1).saturating_mul(2);
            }
            if self.trace.len() >= TRACE_MAX {
                return;
            }
        }
        self.trace.push((t, psn, kind));
    }
}

/// Operation index of [`Side::messages`].
pub const OPS: [&str; 7] = [
    "send",
    "send_imm",
    "write",
    "write_imm",
    "read",
    "atomic",
    "other",
];

/// A side as `addr qp 0x…` (`?` for an address never seen).
pub(super) fn endpoint(s: &Side) -> String {
    let a = s.addr.map_or_else(|| "?".to_string(), |a| a.to_string());
    match s.qpn {
        Some(q) => format!("{a} qp {q:#x}"),
        None => a,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_of_marks_only_stays_bounded_and_its_stride_does_not_run_away() {
        let mut s = Side::default();
        // Retransmission marks only (kept, never thinned): far more than fit.
        for i in 0..(TRACE_MAX as u64 + 1000) {
            s.add_trace_point(i, i as u32, 1);
        }
        assert_eq!(s.trace.len(), TRACE_MAX);
        assert!(s.trace_stride <= 1, "stride {}", s.trace_stride);
        // Requests after that are thinned, not lost for good.
        for i in 0..10_000u64 {
            s.add_trace_point(i, i as u32, 0);
        }
        assert_eq!(s.trace.len(), TRACE_MAX);
    }

    #[test]
    fn requests_and_acks_are_thinned_when_the_trace_fills() {
        let mut s = Side::default();
        for i in 0..(4 * TRACE_MAX as u64) {
            s.add_trace_point(i, i as u32, if i % 2 == 0 { 0 } else { 2 });
        }
        assert!(s.trace.len() < TRACE_MAX);
        assert!(s.trace_stride >= 4, "stride {}", s.trace_stride);
        // The whole span is still drawn.
        assert!(s.trace.last().unwrap().0 > 3 * TRACE_MAX as u64);
    }
}
