//! The requester half of an RC QP (IBTA Vol 1 §9.7): segments send-queue work requests into
//! packets with consecutive PSNs, keeps at most a window of PSNs unacknowledged, processes
//! ACKs, NAKs, atomic ACKs and READ responses (coalesced ACKs, implied NAKs), and retransmits
//! go-back-N from the oldest unacknowledged PSN after a sequence NAK, an implied NAK, an RNR
//! NAK's wait or a local ACK timeout, spending `retry_cnt` / `rnr_retry`.
use std::collections::VecDeque;

use roce_proto::aeth::{rnr_timer_ns, AethKind};
use roce_proto::{
    AethRepr, AtomicEthRepr, Class, IethRepr, ImmDt, Msn, NakCode, Opcode, PacketRepr, Psn,
    RethRepr, Syndrome,
};

use super::attr::{QpCaps, QpState, Retries};
use super::build::{self, nak_status, Position};
use super::timer::Timer;
use super::{Ctx, Qp};
use crate::stats::DropReason;
use crate::time::Instant;
use crate::wr::{WcStatus, WorkRequest, WrOp};

/// A posted send-queue work request with the PSNs it was given.
#[derive(Debug, Clone, Copy)]
pub(super) struct SendWqe {
    /// The request as posted.
    pub(super) wr: WorkRequest,
    /// Message length in bytes (8 for atomics).
    pub(super) len: u32,
    /// PSN of its first packet.
    pub(super) first_psn: Psn,
    /// Packets it takes: request packets for SEND/WRITE, response packets for a READ, 1 for an
    /// atomic.
    pub(super) npkts: u32,
}

impl SendWqe {
    /// PSN of its last packet.
    pub(super) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
}

/// `a <= b` in PSN order.
pub(super) fn le(a: Psn, b: Psn) -> bool {
    a == b || a.precedes(b)
}

/// `p` in `[lo, hi)` modulo 2^24.
pub(super) fn in_range(p: Psn, lo: Psn, hi: Psn) -> bool {
    p.distance_from(lo) < hi.distance_from(lo)
}

/// Requester state.
#[derive(Debug)]
pub(super) struct Requester {
    /// Posted and not yet completed, oldest first.
    pub(super) sq: VecDeque<SendWqe>,
    /// PSN the next posted request gets.
    pub(super) next_psn: Psn,
    /// Index in `sq` of the request the next packet belongs to.
    send_idx: usize,
    /// How many requests, from the front of `sq`, have been sent at least once.
    started: usize,
    /// PSN of the next packet to send (behind `high_psn` while retransmitting).
    req_psn: Psn,
    /// Oldest unacknowledged PSN.
    una: Psn,
    /// One past the highest PSN sent so far.
    high_psn: Psn,
    /// `retry_cnt`: retries after timeouts, sequence NAKs and implied NAKs.
    pub(super) retry: Retries,
    /// `rnr_retry`: retries after RNR NAKs.
    pub(super) rnr: Retries,
    /// READ and atomic requests started and not yet completed (bounded by the initiator depth).
    rd_atomic_inflight: u32,
    /// `una` when the last go-back-N started: one retry sequence per PSN at a time.
    rewound_at: Option<Psn>,
    /// Packets sent since the last one with AckReq set.
    since_ack_req: u32,
}

impl Requester {
    /// One past the highest PSN sent so far (`snd_nxt`).
    pub(super) fn snd_nxt(&self) -> Psn {
        self.high_psn
    }

    /// `p` is a PSN sent and not yet acknowledged: a response for it answers this requester.
    pub(super) fn unacked(&self, p: Psn) -> bool {
        in_range(p, self.una, self.high_psn)
    }

    pub(super) fn new(caps: &QpCaps, retry: Retries, rnr: Retries) -> Self {
        Self {
            sq: VecDeque::with_capacity(caps.max_send_wr.min(64) as usize),
            next_psn: Psn::new(0),
            send_idx: 0,
            started: 0,
            req_psn: Psn::new(0),
            una: Psn::new(0),
            high_psn: Psn::new(0),
            retry,
            rnr,
            rd_atomic_inflight: 0,
            rewound_at: None,
            since_ack_req: 0,
        }
    }

    /// RTR→RTS: the first PSN this requester sends.
    pub(super) fn start_at(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.req_psn = psn;
        self.una = psn;
        self.high_psn = psn;
    }

    /// Queues a validated request of `len` bytes; it takes the next PSNs.
    pub(super) fn push(&mut self, wr: WorkRequest, len: u32, mtu: u32) {
        let npkts = if wr.op.is_atomic() {
            1
        } else {
            len.div_ceil(mtu).max(1)
        };
        self.sq.push_back(SendWqe {
            wr,
            len,
            first_psn: self.next_psn,
            npkts,
        });
        self.next_psn = self.next_psn.add(npkts);
    }

    /// Entering ERR: nothing is in flight any more.
    pub(super) fn clear_progress(&mut self) {
        self.send_idx = 0;
        self.started = 0;
        self.rd_atomic_inflight = 0;
    }

    /// PSNs sent and not yet acknowledged.
    fn outstanding(&self) -> u32 {
        self.req_psn.distance_from(self.una)
    }
}

/// A request packet about to be built: which work request, which of its packets.
#[derive(Debug, Clone, Copy)]
struct NextPacket {
    wqe: SendWqe,
    /// Index of the packet in the message.
    k: u32,
    /// The work request is sent for the first time.
    starting: bool,
}

impl Qp {
    /// The next request packet the window, the initiator depth and fences allow.
    fn next_request_packet(&self) -> Option<NextPacket> {
        let r = &self.req;
        if !matches!(self.state, QpState::Rts | QpState::Sqd)
            || self.timers.is_armed(Timer::RnrWait)
        {
            return None;
        }
        let wqe = *r.sq.get(r.send_idx)?;
        if r.outstanding() >= self.window() {
            return None;
        }
        let starting = r.send_idx >= r.started;
        if starting {
            // SQD finishes what started; a fence waits for earlier READs and atomics.
            let depth_full = wqe.wr.op.is_read_or_atomic()
                && r.rd_atomic_inflight >= self.attr.initiator_depth();
            if self.state == QpState::Sqd
                || depth_full
                || (wqe.wr.fence && r.rd_atomic_inflight > 0)
            {
                return None;
            }
        }
        Some(NextPacket {
            wqe,
            k: r.req_psn.distance_from(wqe.first_psn),
            starting,
        })
    }

    /// Writes the next request packet, if any may go now.
    pub(super) fn poll_request(
        &mut self,
        now: Instant,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        // A path move waits for the packets in flight (only a new packet would overtake):
        // the last one on the old path asks for the ACK that will say they all arrived.
        let new_packet = self.req.req_psn == self.req.high_psn;
        let drained = self.req.una == self.req.high_psn;
        let force_ack_req = new_packet && self.repath_pending_ack(drained);
        if new_packet && !force_ack_req && !self.repath_ready(drained) {
            return None;
        }
        let next = self.next_request_packet()?;
        let NextPacket { wqe: w, k, .. } = next;
        let mtu = self.attr.mtu;
        let off = k * mtu;
        let segmented = !w.wr.op.is_read_or_atomic();
        let plen = if segmented {
            (w.len - off.min(w.len)).min(mtu)
        } else {
            0
        };
        if self.paced(now, plen as usize + 64) {
            return None;
        }
        let pos = Position::of(k, w.npkts);
        let mut opcode = build::request_opcode(&w.wr.op, pos)?;
        if self.is_uc() {
            // The UC twin of the RC SEND or WRITE opcode (reads and atomics are refused at post).
            opcode = Opcode(opcode.0 | 0x20);
        }
        let mut repr = PacketRepr {
            bth: build::bth(opcode, self.attr.dest_qpn, self.req.req_psn),
            ..PacketRepr::default()
        };
        match w.wr.op {
            WrOp::Read(remote) => {
                // A retried READ asks only for what is still missing (IBTA Vol 1 §9.7).
                repr.bth.ack_req = true;
                repr.reth = Some(RethRepr {
                    va: remote.va.wrapping_add(u64::from(off)),
                    rkey: remote.rkey,
                    dma_len: w.len - off.min(w.len),
                });
            }
            WrOp::CompareSwap {
                remote,
                compare,
                swap,
            } => {
                repr.bth.ack_req = true;
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote.va,
                    rkey: remote.rkey,
                    swap_add: swap,
                    compare,
                });
            }
            WrOp::FetchAdd { remote, add } => {
                repr.bth.ack_req = true;
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote.va,
                    rkey: remote.rkey,
                    swap_add: add,
                    compare: 0,
                });
            }
            WrOp::AtomicWrite { remote, .. } => {
                repr.bth.ack_req = true;
                repr.reth = Some(RethRepr {
                    va: remote.va,
                    rkey: remote.rkey,
                    dma_len: 8,
                });
            }
            WrOp::Flush {
                remote,
                len,
                whole_region,
            } => {
                repr.bth.ack_req = true;
                // Placement type 1 (global visibility); selectivity 0 (range) or 1 (region).
                repr.feth = Some(roce_proto::FethRepr {
                    word: u32::from(whole_region) << 4 | 1,
                });
                repr.reth = Some(RethRepr {
                    va: remote.va,
                    rkey: remote.rkey,
                    dma_len: len,
                });
            }
            op => {
                self.segment_headers(&mut repr, &op, &w, pos, plen);
            }
        }
        if force_ack_req && self.service.reliable() {
            repr.bth.ack_req = true;
            self.repath_asked();
        }
        let atomic_data;
        if let WrOp::AtomicWrite { data, .. } = w.wr.op {
            atomic_data = data;
            repr.payload = &atomic_data;
        }
        let n = if segmented {
            let payload = ctx.mrs.gather(
                self.pd,
                &w.wr.sgl,
                u64::from(off),
                plen as usize,
                &mut self.scratch,
            );
            let Ok(payload) = payload else {
                // The region went away after posting: local protection error.
                self.fail_at(ctx, self.req.send_idx, WcStatus::LocProtErr);
                return None;
            };
            repr.payload = payload;
            build::emit(&repr, &self.attr.path, &mut self.seeds, buf)
        } else {
            build::emit(&repr, &self.attr.path, &mut self.seeds, buf)
        };
        let ack_req = repr.bth.ack_req;
        let Ok(n) = n else {
            return self.emit_failed(ctx);
        };
        self.request_sent(now, next, ack_req, n);
        if self.is_uc() {
            // UC: nothing is acknowledged; every packet is done once it left, and a message
            // once its last packet did.
            self.req.una = self.req.req_psn;
            if next.k + 1 == next.wqe.npkts {
                self.complete_front(ctx, WcStatus::Success, Some(now));
            }
        }
        Some(n)
    }

    /// The headers of a SEND or WRITE packet besides the BTH opcode: RETH on the first packet of
    /// a WRITE, ImmDt or IETH and SE on the last, pad, and AckReq (every message end, every
    /// `ack_req_every` packets, and when the window is about to fill).
    fn segment_headers(
        &self,
        repr: &mut PacketRepr<'_>,
        op: &WrOp,
        w: &SendWqe,
        pos: Position,
        plen: u32,
    ) {
        if pos.last {
            match *op {
                WrOp::SendWithImm(imm) | WrOp::WriteWithImm(_, imm) => {
                    repr.immdt = Some(ImmDt(imm));
                }
                WrOp::SendWithInv(rkey) => repr.ieth = Some(IethRepr { rkey }),
                _ => {}
            }
            repr.bth.solicited = w.wr.solicited && !matches!(op, WrOp::Write(_));
        }
        if pos.first {
            if let WrOp::Write(remote) | WrOp::WriteWithImm(remote, _) = *op {
                repr.reth = Some(RethRepr {
                    va: remote.va,
                    rkey: remote.rkey,
                    dma_len: w.len,
                });
            }
        }
        let outstanding = self.req.outstanding() + 1;
        repr.bth.ack_req = self.service.reliable()
            && (pos.last
                || self.req.since_ack_req + 1 >= self.caps.ack_req_every.max(1)
                || outstanding + 1 >= self.window());
        repr.bth.pad_count = PacketRepr::pad_for(plen as usize);
    }

    /// Bookkeeping after a request packet of `n` bytes left.
    fn request_sent(&mut self, now: Instant, next: NextPacket, ack_req: bool, n: usize) {
        let NextPacket {
            wqe: w,
            k,
            starting,
        } = next;
        let r = &mut self.req;
        r.since_ack_req = if ack_req { 0 } else { r.since_ack_req + 1 };
        if starting {
            r.started = r.send_idx + 1;
            if w.wr.op.is_read_or_atomic() {
                r.rd_atomic_inflight += 1;
            }
        }
        if r.req_psn.precedes(r.high_psn) {
            self.stats.retransmitted_packets += 1;
        }
        if w.wr.op.is_read_or_atomic() {
            // One request packet stands for all the PSNs of its responses.
            r.req_psn = w.last_psn().next();
            r.send_idx += 1;
        } else {
            r.req_psn = r.req_psn.next();
            if k + 1 == w.npkts {
                r.send_idx += 1;
            }
        }
        if r.high_psn.precedes(r.req_psn) {
            r.high_psn = r.req_psn;
        }
        if self.service.reliable() && !self.timers.is_armed(Timer::Retransmit) {
            self.arm_retransmit(now);
        }
        self.cc.on_packet_sent(now, n);
    }

    fn arm_retransmit(&mut self, now: Instant) {
        let at = self.attr.timeout_ns().map(|t| now.add_nanos(t));
        self.timers.set_opt(Timer::Retransmit, at);
    }

    /// Go back to the oldest unacknowledged PSN.
    pub(super) fn rewind(&mut self) {
        self.stats.rewinds += 1;
        self.req.req_psn = self.req.una;
        self.req.send_idx = 0;
        self.timers.stop(Timer::Retransmit);
    }

    /// The local ACK timeout fired.
    pub(super) fn on_retransmit_timeout(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        if self.req.una != self.req.high_psn && !self.req.sq.is_empty() {
            self.stats.timeouts += 1;
            self.cc.on_retransmit_timeout(now);
            self.go_back_n(ctx);
        }
    }

    /// Spends one retry and resends from the oldest unacknowledged PSN, or fails the oldest
    /// request with `RETRY_EXC_ERR` when none is left.
    fn go_back_n(&mut self, ctx: &mut Ctx<'_>) {
        if !self.req.retry.spend() {
            self.fail_front(ctx, WcStatus::RetryExcErr);
            return;
        }
        self.req.rewound_at = Some(self.req.una);
        self.rewind();
    }

    /// Go-back-N for a sequence NAK or an implied NAK (one retry sequence at a time).
    fn retry(&mut self, ctx: &mut Ctx<'_>) {
        if self.req.rewound_at != Some(self.req.una) {
            self.go_back_n(ctx);
        }
    }

    /// The peer made progress: retry counters refill, the timer restarts or stops.
    fn progress(&mut self, now: Instant) {
        let r = &mut self.req;
        r.retry.reset();
        r.rnr.reset();
        r.rewound_at = None;
        if r.req_psn.precedes(r.una) {
            r.req_psn = r.una;
            r.send_idx = 0;
        }
        if r.una != r.high_psn {
            self.arm_retransmit(now);
        } else {
            self.timers.stop(Timer::Retransmit);
        }
    }

    /// Completes the oldest request with `status` (a completion is generated if it is signaled
    /// or failed); `now` is given for a success the congestion controller should hear of.
    fn complete_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus, now: Option<Instant>) {
        let Some(w) = self.req.sq.pop_front() else {
            return;
        };
        let r = &mut self.req;
        if r.started > 0 && w.wr.op.is_read_or_atomic() {
            r.rd_atomic_inflight = r.rd_atomic_inflight.saturating_sub(1);
        }
        r.send_idx = r.send_idx.saturating_sub(1);
        r.started = r.started.saturating_sub(1);
        if let Some(now) = now {
            self.cc.on_ack(now, u64::from(w.len));
        }
        if w.wr.signaled || status != WcStatus::Success {
            self.push_send_completion(ctx, &w, status);
        }
    }

    /// The oldest request fails with `status`; the QP moves to ERR.
    pub(super) fn fail_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        self.complete_front(ctx, status, None);
        self.enter_error(ctx);
    }

    /// The request at `idx` failed locally: earlier ones are flushed, it completes with `status`.
    fn fail_at(&mut self, ctx: &mut Ctx<'_>, idx: usize, status: WcStatus) {
        for _ in 0..idx {
            self.complete_front(ctx, WcStatus::WrFlushErr, None);
        }
        self.fail_front(ctx, status);
    }

    /// Acknowledges every PSN up to and including `p`. Returns `false` when that revealed a
    /// lost READ response / atomic ACK (implied NAK) or failed the QP.
    fn ack_upto(&mut self, now: Instant, p: Psn, ctx: &mut Ctx<'_>) -> bool {
        let mut moved = false;
        while let Some(w) = self.req.sq.front().copied() {
            if self.req.started == 0 {
                break;
            }
            if w.wr.op.is_read_or_atomic() {
                if le(w.first_psn, p) {
                    if moved {
                        self.progress(now);
                    }
                    self.stats.implied_naks += 1;
                    self.retry(ctx);
                    return false;
                }
                break;
            }
            let last = w.last_psn();
            if le(last, p) {
                self.req.una = last.next();
                self.complete_front(ctx, WcStatus::Success, Some(now));
                moved = true;
            } else {
                if le(self.req.una, p) {
                    self.req.una = p.next();
                    moved = true;
                }
                break;
            }
        }
        if moved {
            self.progress(now);
        }
        true
    }

    /// Acknowledges every PSN strictly before `p`; `false` as for [`Qp::ack_upto`], or when the
    /// QP is in ERR afterwards.
    fn ack_before(&mut self, now: Instant, p: Psn, ctx: &mut Ctx<'_>) -> bool {
        if p == self.req.una {
            return true;
        }
        self.ack_upto(now, p.sub(1), ctx) && self.state != QpState::Err
    }

    /// An ACK, NAK, atomic ACK or READ response (the state sends).
    pub(super) fn on_response(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        if !in_range(p, self.req.una, self.req.high_psn) {
            let reason = if p.precedes(self.req.una) {
                DropReason::StaleResponse
            } else {
                DropReason::GhostResponse
            };
            self.stats.drops.count(reason);
            return;
        }
        let op = pkt.bth.opcode;
        let aeth = match pkt.aeth {
            Some(a) => a,
            // READ response MIDDLE packets carry no AETH.
            None if op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE => AethRepr {
                syndrome: Syndrome::ACK_UNLIMITED,
                msn: Msn(0),
            },
            None => {
                self.stats.drops.count(DropReason::Malformed);
                return;
            }
        };
        match op {
            Opcode::RC_ACKNOWLEDGE => self.on_ack(now, p, aeth.syndrome, ctx),
            Opcode::RC_ATOMIC_ACKNOWLEDGE => self.on_atomic_ack(now, pkt, ctx),
            _ => self.on_read_response(now, pkt, ctx),
        }
    }

    fn on_ack(&mut self, now: Instant, p: Psn, syndrome: Syndrome, ctx: &mut Ctx<'_>) {
        match syndrome.kind() {
            AethKind::Ack { .. } => {
                self.ack_upto(now, p, ctx);
            }
            AethKind::RnrNak { timer } => {
                // p itself was not executed; everything before it was.
                self.stats.naks_received.rnr += 1;
                if !self.ack_before(now, p, ctx) {
                    return;
                }
                if !self.req.rnr.spend() {
                    self.fail_front(ctx, WcStatus::RnrRetryExcErr);
                    return;
                }
                self.timers
                    .set(Timer::RnrWait, now.add_nanos(rnr_timer_ns(timer)));
                self.timers.stop(Timer::Retransmit);
                self.req.req_psn = self.req.una;
                self.req.send_idx = 0;
            }
            AethKind::Nak(NakCode::PsnSequenceError) => {
                self.stats.naks_received.seq_err += 1;
                if self.ack_before(now, p, ctx) {
                    self.retry(ctx);
                }
            }
            AethKind::Nak(code) => {
                let n = &mut self.stats.naks_received;
                match code {
                    NakCode::InvalidRequest => n.invalid_request += 1,
                    NakCode::RemoteAccessError => n.remote_access += 1,
                    _ => n.remote_op += 1,
                }
                if self.ack_before(now, p, ctx) {
                    self.fail_front(ctx, nak_status(code));
                }
            }
            _ => self.stats.drops.count(DropReason::Malformed),
        }
    }

    fn on_atomic_ack(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        let Some(ack) = pkt.atomic_ack_eth else {
            self.stats.drops.count(DropReason::Malformed);
            return;
        };
        if !self.ack_before(now, p, ctx) {
            return;
        }
        let Some(w) = self.req.sq.front().copied() else {
            return;
        };
        if !w.wr.op.is_atomic() || w.first_psn != p {
            self.stats.drops.count(DropReason::StaleResponse);
            return;
        }
        let orig = ack.orig_data.to_le_bytes();
        if ctx.mrs.scatter(self.pd, &w.wr.sgl, 0, &orig).is_err() {
            self.fail_front(ctx, WcStatus::LocProtErr);
            return;
        }
        self.req.una = p.next();
        self.complete_front(ctx, WcStatus::Success, Some(now));
        self.progress(now);
    }

    fn on_read_response(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        // Everything before the READ holding `p` is acknowledged by this response.
        let r = &self.req;
        let Some(pos) =
            r.sq.iter()
                .take(r.started)
                .position(|w| in_range(p, w.first_psn, w.last_psn().next()))
        else {
            self.stats.drops.count(DropReason::StaleResponse);
            return;
        };
        let w = r.sq[pos];
        if !matches!(w.wr.op, WrOp::Read(_)) && !w.wr.op.is_placement() {
            self.stats.drops.count(DropReason::StaleResponse);
            return;
        }
        if pos > 0 && !self.ack_before(now, w.first_psn, ctx) {
            return;
        }
        if self.req.sq.front().map(|f| f.first_psn) != Some(w.first_psn) {
            return;
        }
        if p != self.req.una {
            if p.precedes(self.req.una) {
                self.stats.drops.count(DropReason::StaleResponse);
            } else {
                // A response before this one was lost.
                self.stats.implied_naks += 1;
                self.retry(ctx);
            }
            return;
        }
        let mtu = self.attr.mtu;
        let k = p.distance_from(w.first_psn);
        let off = k * mtu;
        let expect = (w.len - off).min(mtu);
        let is_last = k + 1 == w.npkts;
        let class_ok = match pkt.bth.opcode.class() {
            Class::First => !is_last,
            Class::Middle => k > 0 && !is_last,
            Class::Last => k > 0 && is_last,
            Class::Only => is_last,
        };
        if !class_ok
            || pkt.payload.len() != expect as usize
            || pkt.bth.pad_count != PacketRepr::pad_for(expect as usize)
        {
            self.fail_front(ctx, WcStatus::BadRespErr);
            return;
        }
        if ctx
            .mrs
            .scatter(self.pd, &w.wr.sgl, u64::from(off), pkt.payload)
            .is_err()
        {
            self.fail_front(ctx, WcStatus::LocProtErr);
            return;
        }
        self.req.una = p.next();
        if is_last {
            self.complete_front(ctx, WcStatus::Success, Some(now));
        } else {
            self.cc.on_ack(now, u64::from(expect));
        }
        self.progress(now);
    }
}
