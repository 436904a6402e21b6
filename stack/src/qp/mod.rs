//! Queue pairs, one home per kind ([`Service`]):
//!
//! * RC and UC: the connected [`Qp`] of this module, its requester and responder state
//!   machines (IBTA Vol 1 §9.7 reliable service, §10.3 QP states, §11.4 posting); UC is an RC
//!   QP that acknowledges and retransmits nothing and refuses READs and atomics;
//! * UD: [`ud::UdQp`], addressed per message, one packet per message;
//! * the GSI, QP1 (§13.5.1): [`gsi::Gsi`], the management datagrams' UD QP the CM talks
//!   through.
//!
//! Every QP is sans-IO: [`Device`](crate::Device) hands it datagrams, the time and the memory
//! table (`Ctx`), and asks it for datagrams to send, completions and its next deadline.
//!
//! * this module: the connected [`Qp`] itself, dispatch of received packets and transmit opportunities
//!   between the two halves, posting, and the QP-wide parts (CNPs, congestion control, timers);
//! * [`attr`]: states, attributes, the transition table, [`ConnectParams`];
//! * `requester`: the send queue, PSN allocation, go-back-N, ACK and READ response handling;
//! * `responder`: the receive queue, request validation and execution, ACK/NAK and READ
//!   response generation, duplicate handling;
//! * `timer`: the table of deadlines; `build`: opcodes, headers, emit and completions;
//! * `service`: [`Service`], the kind of QP every layer above names.
use std::collections::VecDeque;

use roce_proto::{Ecn, Opcode, PKey, PacketRepr, Psn, Qpn};

use crate::cc::cnp::{cnp_repr, CnpPacer};
use crate::cc::hpcc::IntStack;
use crate::cc::{CongestionControl, NoCc};
use crate::handle::{CqHandle, PdHandle};
use crate::memory::MrTable;
use crate::path::{IcrcVerdict, PathConfig, RxMeta, SeedCache};
use crate::stats::{DropReason, QpStats};
use crate::time::Instant;
use crate::wr::{Completion, RecvRequest, WcStatus, WorkRequest, WrOp};

pub mod attr;
pub(crate) mod build;
pub mod gsi;
mod requester;
mod responder;
mod service;
pub(crate) mod timer;
pub mod ud;

use attr::{Attributes, Retries};
pub use attr::{ConnectParams, ModifyError, QpAttr, QpCaps, QpState, PATH_MTUS};
use requester::{Requester, SendWqe};
use responder::Responder;
pub use service::{Service, UnknownService};
use timer::{Timer, TimerTable};

/// A datagram the caller must send: `buf[..len]` to `path.remote`, UDP port
/// `path.remote_port`, from UDP port `path.src_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The local QP that produced it.
    pub qpn: Qpn,
    /// Length of the datagram written at the start of the buffer.
    pub len: usize,
    /// ECN codepoint to send it with.
    pub ecn: Ecn,
    /// The path (addresses and UDP ports).
    pub path: PathConfig,
    /// An ACK's echo of the telemetry of the request it answers (networks that stamp INT).
    pub int: Option<IntStack>,
}

impl Transmit {
    /// What the receiving end knows of this datagram once it crosses the link: from our
    /// address and source port, to the peer's address, with our ECN codepoint (for links that
    /// join devices in memory: tests, benchmarks, the fuzz body).
    pub fn rx_meta(&self) -> RxMeta {
        RxMeta::new(
            std::net::SocketAddr::new(self.path.local, self.path.src_port),
            self.path.remote,
            self.ecn,
        )
    }
}

/// Why a post was refused (caller misuse; nothing was queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// No such QP.
    #[error("no such queue pair")]
    NoSuchQp,
    /// The QP's state does not accept this post.
    #[error("queue pair in state {0:?} does not accept this post")]
    WrongState(QpState),
    /// The queue is full.
    #[error("queue full")]
    QueueFull,
    /// The QP's transport does not have this operation (READ or atomics on UC).
    #[error("operation not supported by this transport")]
    Unsupported,
    /// The QP takes its receives from a shared receive queue: post there.
    #[error("the queue pair receives from a shared receive queue")]
    HasSrq,
    /// No such shared receive queue.
    #[error("no such shared receive queue")]
    NoSuchSrq,
    /// A scatter/gather entry names an unknown key, another PD, lacks LOCAL_WRITE, or is out of
    /// bounds.
    #[error("invalid scatter/gather entry")]
    InvalidSge,
    /// The message is longer than the maximum message size.
    #[error("message longer than the maximum message size")]
    TooLong,
    /// An atomic needs one 8-byte result buffer and an 8-byte aligned remote address.
    #[error("atomic needs an 8-byte local buffer and an 8-byte aligned remote address")]
    InvalidAtomic,
}

/// What a QP may touch while it runs: the device's memory table and completion queues.
pub(crate) struct Ctx<'a> {
    /// Every memory region of the device.
    pub(crate) mrs: &'a mut MrTable,
    /// Every completion queue of the device (indexed by [`CqHandle`]).
    pub(crate) cqs: &'a mut [VecDeque<Completion>],
    /// Every shared receive queue of the device, and its async events.
    pub(crate) srq: crate::srq::SrqCtx<'a>,
}

impl Ctx<'_> {
    /// Appends a completion to a CQ.
    pub(crate) fn push(&mut self, cq: CqHandle, c: Completion) {
        if let Some(q) = self.cqs.get_mut(cq.0 as usize) {
            q.push_back(c);
        }
    }
}

/// Consecutive packets of one kind (requests, or responses) a QP sends while the other kind
/// waits. Requests go first when both are ready (a ping-pong's answer should not queue behind
/// the ACK of the ping); under load both kinds alternate in runs of this length, so neither
/// direction of the connection starves.
pub const TX_RUN: u8 = 16;

/// Whose turn it is to send: requests or responses (see [`TX_RUN`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TxTurn {
    /// Responses have the turn.
    responses: bool,
    /// Packets sent in this turn.
    run: u8,
}

impl TxTurn {
    /// A packet of the kind whose turn it is went out.
    fn served(&mut self) {
        self.run += 1;
        if self.run >= TX_RUN {
            *self = Self {
                responses: !self.responses,
                run: 0,
            };
        }
    }

    /// The turn's kind had nothing, and a packet of the other kind went out: requests keep
    /// (or take back) the turn.
    fn other_served(&mut self) {
        *self = Self {
            responses: false,
            run: u8::from(self.responses),
        };
    }
}

/// A pending path move ([`Qp::repath`]).
#[derive(Debug, Clone, Copy)]
struct Repath {
    /// The UDP source port to move to.
    port: u16,
    /// The last packet on the old path asked for an ACK (the move waits for it).
    asked: bool,
}

/// One RC queue pair. Created and driven through [`Device`](crate::Device).
#[derive(Debug)]
pub struct Qp {
    /// This QP's number.
    qpn: Qpn,
    /// Its protection domain: every memory access is checked against it.
    pd: PdHandle,
    /// Where send-queue completions go.
    send_cq: CqHandle,
    /// Where receive-queue completions go.
    recv_cq: CqHandle,
    /// Capacities fixed at creation.
    caps: QpCaps,
    /// The current state.
    state: QpState,
    /// The attributes the transitions set.
    attr: Attributes,
    /// ICRC pseudo-header seeds of the path, by datagram length.
    seeds: SeedCache,
    /// The requester half: send queue, PSNs, retries.
    req: Requester,
    /// The responder half: receive queue, expected PSN, resources, queued responses.
    resp: Responder,
    /// Every deadline of the QP.
    timers: TimerTable,
    /// Reaction point: paces transmissions, reacts to CNPs.
    cc: Box<dyn CongestionControl>,
    /// Notification point: when a CE mark earns the peer a CNP (`None`: never).
    cnp_pacer: Option<CnpPacer>,
    /// A CNP is owed to the peer and goes out first.
    cnp_pending: bool,
    /// The telemetry of the last request that carried some, for the next ACK to echo.
    int_echo: Option<IntStack>,
    /// The echo of the datagram just written (an ACK), for the caller to send with it.
    int_out: Option<IntStack>,
    /// A path move waiting for the packets in flight ([`Qp::repath`]).
    repath: Option<Repath>,
    /// Path moves made.
    repaths: u64,
    /// Requests or responses next.
    turn: TxTurn,
    /// Counters.
    stats: QpStats,
    /// Gather buffer for a packet whose payload spans two scatter/gather entries.
    scratch: Vec<u8>,
    /// The shared receive queue its receives come from, if any.
    srq: Option<crate::srq::SrqHandle>,
    /// RC, or UC (IBTA Vol 1 §9.7.5.1 with §9.8): SEND and WRITE only, nothing acknowledged
    /// or retransmitted. Never UD: UD QPs are [`ud::UdQp`]s.
    service: Service,
}

impl Qp {
    /// Makes it an unreliable connected QP (set at creation).
    pub(crate) fn set_uc(&mut self) {
        self.service = Service::Uc;
    }

    /// Its service: RC or UC.
    pub fn service(&self) -> Service {
        self.service
    }

    /// `true` for an unreliable connected QP.
    pub fn is_uc(&self) -> bool {
        self.service == Service::Uc
    }

    /// Gives back the receive request of an abandoned UC message: the next message uses it
    /// (IBTA Vol 1 §9.7.5.1.x: a UC message cut by a PSN gap completes nothing).
    pub(crate) fn give_back_recv(&mut self, r: RecvRequest, ctx: &mut Ctx<'_>) {
        match self.srq {
            Some(h) => {
                if let Some(s) = ctx.srq.srqs.get_mut(h.0 as usize) {
                    s.queue.push_front(r);
                }
            }
            None => self.resp.rq.push_front(r),
        }
    }

    /// Takes receives from `srq` instead of a queue of its own (set at creation).
    pub(crate) fn set_srq(&mut self, srq: crate::srq::SrqHandle) {
        self.srq = Some(srq);
    }

    /// Its protection domain.
    pub fn pd(&self) -> PdHandle {
        self.pd
    }

    /// The SRQ its receives come from.
    pub fn srq(&self) -> Option<crate::srq::SrqHandle> {
        self.srq
    }

    /// `true` when a receive request is available (its own queue, or its SRQ).
    pub(crate) fn has_recv(&self, ctx: &Ctx<'_>) -> bool {
        match self.srq {
            Some(h) => !ctx.srq.is_empty(h),
            None => !self.resp.rq.is_empty(),
        }
    }

    /// The next receive request (its own queue, or its SRQ).
    pub(crate) fn take_recv(&mut self, ctx: &mut Ctx<'_>) -> Option<RecvRequest> {
        match self.srq {
            Some(h) => ctx.srq.pop(h),
            None => self.resp.rq.pop_front(),
        }
    }

    pub(crate) fn new(
        qpn: Qpn,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        caps: QpCaps,
    ) -> Self {
        let attr = Attributes::default();
        let c = ConnectParams::default();
        Self {
            qpn,
            pd,
            send_cq,
            recv_cq,
            caps,
            state: QpState::Reset,
            attr,
            seeds: SeedCache::default(),
            req: Requester::new(
                &caps,
                Retries::new(c.retry_cnt, caps.infinite_retry_at_7),
                Retries::new(c.rnr_retry, true),
            ),
            resp: Responder::new(&caps),
            timers: TimerTable::default(),
            cc: Box::new(NoCc),
            cnp_pacer: caps.cnp_interval.map(CnpPacer::new),
            cnp_pending: false,
            int_echo: None,
            int_out: None,
            repath: None,
            repaths: 0,
            turn: TxTurn::default(),
            srq: None,
            service: Service::Rc,
            stats: QpStats::default(),
            scratch: Vec::new(),
        }
    }

    /// This QP's number.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }
    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// Counters.
    pub fn stats(&self) -> &QpStats {
        &self.stats
    }
    /// The path (after INIT→RTR).
    pub fn path(&self) -> &PathConfig {
        &self.attr.path
    }
    /// Path MTU in bytes.
    pub fn mtu(&self) -> u32 {
        self.attr.mtu
    }
    /// Peer QPN.
    pub fn dest_qpn(&self) -> Qpn {
        self.attr.dest_qpn
    }
    /// Next PSN a newly posted request will get.
    pub fn next_send_psn(&self) -> Psn {
        self.req.next_psn
    }
    /// The responder's expected PSN.
    pub fn expected_psn(&self) -> Psn {
        self.resp.epsn
    }
    /// Send requests posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.req.sq.len()
    }
    /// Receive requests posted and not yet consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.resp.rq.len()
    }
    /// The congestion controller.
    pub fn congestion_control(&self) -> &dyn CongestionControl {
        &*self.cc
    }
    /// The rate the congestion controller currently paces to, bits/s (`None`: unlimited).
    pub fn rate_bps(&self) -> Option<u64> {
        self.cc.rate_bps()
    }
    /// The notification point's CNP pacer (`None` if [`QpCaps::cnp_interval`] is `None`).
    pub fn cnp_pacer(&self) -> Option<&CnpPacer> {
        self.cnp_pacer.as_ref()
    }
    /// Moves the QP's datagrams to UDP source port `port` (another path under ECMP): new
    /// request packets wait until every packet in flight is acknowledged, then go on the new
    /// port, so nothing overtakes on the new path (the responder accepts any source port of
    /// its peer and checks the ICRC over the real one). Retransmissions of what is in flight
    /// still go the old way.
    pub(crate) fn repath(&mut self, port: u16) {
        self.repath = if port == self.attr.path.src_port {
            // Back to the path in use: nothing to wait for.
            None
        } else {
            // A move already pending keeps the ACK it asked for.
            let asked = self.repath.is_some_and(|r| r.asked);
            Some(Repath { port, asked })
        };
    }

    /// The path moves made so far ([`Device::repath_qp`](crate::Device::repath_qp)).
    pub fn repaths(&self) -> u64 {
        self.repaths
    }

    /// `true` when a move is pending, packets are in flight and none of them asked for an
    /// ACK since: the next new packet goes on the old path with AckReq set (without it the
    /// responder might not answer before its ACK coalescing says so, and the move would wait
    /// for a timeout).
    pub(super) fn repath_pending_ack(&self, drained: bool) -> bool {
        self.repath.is_some_and(|r| !r.asked) && !drained && self.service.reliable()
    }

    /// The packet [`Qp::repath_pending_ack`] asked for went out with AckReq.
    pub(super) fn repath_asked(&mut self) {
        if let Some(r) = self.repath.as_mut() {
            r.asked = true;
        }
    }

    /// Applies a pending [`Qp::repath`] once nothing is in flight; `false` while new request
    /// packets must wait for that.
    pub(super) fn repath_ready(&mut self, nothing_in_flight: bool) -> bool {
        let Some(r) = self.repath else {
            return true;
        };
        if !nothing_in_flight {
            return false;
        }
        self.attr.path.src_port = r.port;
        self.seeds = SeedCache::default();
        self.repath = None;
        self.repaths += 1;
        true
    }

    pub(crate) fn set_congestion_control(&mut self, cc: Box<dyn CongestionControl>) {
        self.cc = cc;
    }
    pub(crate) fn send_cq(&self) -> CqHandle {
        self.send_cq
    }
    pub(crate) fn recv_cq(&self) -> CqHandle {
        self.recv_cq
    }

    /// The outstanding-PSN bound, clamped so that a window plus the largest READ stays well
    /// inside half the PSN space (2^20 + 2^22 < 2^23).
    fn window(&self) -> u32 {
        self.caps.max_unacked_psns.clamp(1, 1 << 20)
    }

    // ------------------------------------------------------------------ modify

    pub(crate) fn modify(&mut self, a: &QpAttr, ctx: &mut Ctx<'_>) -> Result<(), ModifyError> {
        let from = self.state;
        a.validate(from)?;
        match a.state {
            QpState::Reset => self.reset(),
            QpState::Err => self.enter_error(ctx),
            to => {
                self.apply(a, from);
                self.state = to;
            }
        }
        Ok(())
    }

    /// Applies every attribute present in `a` (already validated).
    fn apply(&mut self, a: &QpAttr, from: QpState) {
        fn set<T: Copy>(field: &mut T, value: Option<T>) {
            if let Some(v) = value {
                *field = v;
            }
        }
        let attr = &mut self.attr;
        set(&mut attr.access, a.access_flags);
        set(&mut attr.mtu, a.path_mtu);
        set(&mut attr.dest_qpn, a.dest_qpn);
        if let Some(p) = a.path {
            attr.path = p;
            self.seeds = SeedCache::default();
        }
        set(&mut attr.min_rnr_timer, a.min_rnr_timer);
        set(&mut attr.max_dest_rd_atomic, a.max_dest_rd_atomic);
        set(&mut attr.timeout, a.timeout);
        set(&mut attr.max_rd_atomic, a.max_rd_atomic);
        set(&mut self.resp.epsn, a.rq_psn);
        if let Some(n) = a.retry_cnt {
            self.req.retry = Retries::new(n, self.caps.infinite_retry_at_7);
        }
        if let Some(n) = a.rnr_retry {
            self.req.rnr = Retries::new(n, true);
        }
        if let (Some(psn), QpState::Rtr) = (a.sq_psn, from) {
            self.req.start_at(psn);
        }
    }

    /// Back to RESET: everything but the counters and the congestion controller is cleared.
    fn reset(&mut self) {
        let cc = core::mem::replace(&mut self.cc, Box::new(NoCc));
        let stats = self.stats;
        *self = Self::new(self.qpn, self.pd, self.send_cq, self.recv_cq, self.caps);
        self.cc = cc;
        self.stats = stats;
    }

    /// Moves to ERR and flushes both queues with `WR_FLUSH_ERR` (IBTA Vol 1 §10.3, §10.7.3.1).
    fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        self.state = QpState::Err;
        while let Some(w) = self.req.sq.pop_front() {
            self.push_send_completion(ctx, &w, WcStatus::WrFlushErr);
        }
        self.req.clear_progress();
        for r in self.resp.drain_receives() {
            ctx.push(
                self.recv_cq,
                Completion::recv_status(self.qpn, r.wr_id, WcStatus::WrFlushErr),
            );
        }
        self.resp.clear_responses();
        self.timers.stop_all();
        self.cnp_pending = false;
    }

    fn push_send_completion(&self, ctx: &mut Ctx<'_>, w: &SendWqe, status: WcStatus) {
        ctx.push(
            self.send_cq,
            Completion::send(self.qpn, w.wr.wr_id, &w.wr.op, status, w.len),
        );
    }

    // ------------------------------------------------------------------ posting

    pub(crate) fn post_send(
        &mut self,
        wr: WorkRequest,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), PostError> {
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => {}
            s => return Err(PostError::WrongState(s)),
        }
        if self.req.sq.len() >= self.caps.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        // UC has SEND and RDMA WRITE, with and without immediate, and nothing else (IBTA
        // Vol 1 table 38: no READ, atomics, SEND with Invalidate, ATOMIC WRITE or FLUSH).
        if self.is_uc()
            && !matches!(
                wr.op,
                WrOp::Send | WrOp::SendWithImm(_) | WrOp::Write(_) | WrOp::WriteWithImm(..)
            )
        {
            return Err(PostError::Unsupported);
        }
        let write_local = matches!(wr.op, WrOp::Read(_)) || wr.op.is_atomic();
        if !ctx.mrs.check_sgl(self.pd, &wr.sgl, write_local) {
            return Err(PostError::InvalidSge);
        }
        let total = wr.sgl.total_len();
        let len = match wr.op {
            WrOp::CompareSwap { remote, .. } | WrOp::FetchAdd { remote, .. } => {
                if total != 8 || remote.va % 8 != 0 {
                    return Err(PostError::InvalidAtomic);
                }
                8
            }
            // The data of an ATOMIC WRITE is in the request; both are answered by an empty
            // READ response (one PSN).
            WrOp::AtomicWrite { remote, .. } => {
                if remote.va % 8 != 0 {
                    return Err(PostError::InvalidAtomic);
                }
                0
            }
            WrOp::Flush { .. } => 0,
            _ => {
                if total > u64::from(self.caps.max_msg_size.min(1 << 30)) {
                    return Err(PostError::TooLong);
                }
                total as u32
            }
        };
        if self.state == QpState::Err {
            ctx.push(
                self.send_cq,
                Completion::send(self.qpn, wr.wr_id, &wr.op, WcStatus::WrFlushErr, 0),
            );
            return Ok(());
        }
        self.req.push(wr, len, self.attr.mtu);
        Ok(())
    }

    pub(crate) fn post_recv(&mut self, r: RecvRequest, ctx: &mut Ctx<'_>) -> Result<(), PostError> {
        if self.state == QpState::Reset {
            return Err(PostError::WrongState(self.state));
        }
        if self.srq.is_some() {
            return Err(PostError::HasSrq);
        }
        if self.resp.rq.len() >= self.caps.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if !ctx.mrs.check_sgl(self.pd, &r.sgl, true) {
            return Err(PostError::InvalidSge);
        }
        if self.state == QpState::Err {
            ctx.push(
                self.recv_cq,
                Completion::recv_status(self.qpn, r.wr_id, WcStatus::WrFlushErr),
            );
            return Ok(());
        }
        self.resp.rq.push_back(r);
        Ok(())
    }

    // ------------------------------------------------------------------ timers

    /// The QP's next deadline: its own timers', the congestion controller's and the CNP
    /// pacer's (those two keep their own).
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if !self.state.receives() {
            return None;
        }
        let cnp = self.cnp_pacer.as_ref().and_then(CnpPacer::poll_timeout);
        [self.timers.next_timeout(), self.cc.poll_timeout(), cnp]
            .into_iter()
            .flatten()
            .min()
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        if !self.state.receives() {
            return;
        }
        if self.cc.poll_timeout().is_some_and(|t| t <= now) {
            let before = self.cc.rate_bps();
            self.cc.handle_timeout(now);
            self.note_rate(before);
        }
        if self
            .cnp_pacer
            .as_mut()
            .is_some_and(|p| p.handle_timeout(now))
        {
            self.cnp_pending = true;
        }
        for t in Timer::ALL {
            if !self.timers.take_expired(t, now) {
                continue;
            }
            match t {
                // The held packet may go now; the next poll_transmit sends it.
                Timer::Pacing => {}
                Timer::RnrWait => self.rewind(),
                Timer::Retransmit => self.on_retransmit_timeout(now, ctx),
            }
        }
    }

    /// Counts a rate cut if the controller's rate fell below `before` (`None` = unlimited).
    fn note_rate(&mut self, before: Option<u64>) {
        if let Some(after) = self.cc.rate_bps() {
            if after < before.unwrap_or(u64::MAX) {
                self.stats.rate_cuts += 1;
                if self.stats.min_rate_bps == 0 || after < self.stats.min_rate_bps {
                    self.stats.min_rate_bps = after;
                }
            }
        }
    }

    /// `true` (and the pacing timer armed) when congestion control holds a packet of `bytes`.
    fn paced(&mut self, now: Instant, bytes: usize) -> bool {
        match self.cc.next_send_time(now, bytes) {
            Some(t) if t > now => {
                self.timers.set(Timer::Pacing, t);
                true
            }
            _ => {
                self.timers.stop(Timer::Pacing);
                false
            }
        }
    }

    // ------------------------------------------------------------------ transmit

    /// Writes the next datagram into `buf`; its length, or `None` when the QP has nothing to
    /// send now. CNPs go first; then requests and responses take turns ([`TX_RUN`]).
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        let n = self.transmit(now, ctx, buf);
        if let Some(n) = n {
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += n as u64;
        }
        n
    }

    /// The INT echo of the datagram [`Qp::poll_transmit`] just wrote, if it was an ACK.
    pub(crate) fn take_int_out(&mut self) -> Option<IntStack> {
        self.int_out.take()
    }

    fn transmit(&mut self, now: Instant, ctx: &mut Ctx<'_>, buf: &mut Vec<u8>) -> Option<usize> {
        self.int_out = None;
        if self.state == QpState::Err {
            // The NAK that moved the responder to ERR still goes out.
            let (psn, syndrome) = self.resp.fatal_nak.take()?;
            return self.emit_ack(psn, syndrome, None, buf);
        }
        if !self.state.receives() {
            return None;
        }
        if self.cnp_pending {
            // CNPs are not paced and not scheduled with the rest (RoCEv2 Annex A17.9.3).
            self.cnp_pending = false;
            self.stats.cnps_sent += 1;
            if let Some(pacer) = self.cnp_pacer.as_mut() {
                pacer.on_sent(now);
            }
            let repr = cnp_repr(self.attr.dest_qpn);
            return build::emit(&repr, &self.attr.path, &mut self.seeds, buf).ok();
        }
        let responses_first = self.turn.responses;
        let first = if responses_first {
            self.poll_response(now, ctx, buf)
        } else {
            self.poll_request(now, ctx, buf)
        };
        if first.is_some() {
            self.turn.served();
            return first;
        }
        let second = if responses_first {
            self.poll_request(now, ctx, buf)
        } else {
            self.poll_response(now, ctx, buf)
        };
        if second.is_some() {
            self.turn.other_served();
        }
        second
    }

    /// A packet the QP built could not be written (an internal invariant broke): the oldest
    /// request fails with `LOC_QP_OP_ERR` and the QP moves to ERR; nothing is sent.
    fn emit_failed(&mut self, ctx: &mut Ctx<'_>) -> Option<usize> {
        debug_assert!(false, "a packet built by the QP failed to emit");
        self.fail_front(ctx, WcStatus::LocQpOpErr);
        None
    }

    /// Writes an ACK, NAK or atomic ACK carrying the responder's current MSN.
    fn emit_ack(
        &mut self,
        psn: Psn,
        syndrome: roce_proto::Syndrome,
        orig_data: Option<u64>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        self.emit_ack_with_msn(psn, syndrome, self.resp.msn, orig_data, buf)
    }

    fn emit_ack_with_msn(
        &mut self,
        psn: Psn,
        syndrome: roce_proto::Syndrome,
        msn: roce_proto::Msn,
        orig_data: Option<u64>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        self.stats.acks_sent += 1;
        self.int_out = self.int_echo;
        // NAKs count as they go on the wire: a queued sequence NAK that a newer ACK replaced
        // was never sent.
        let n = &mut self.stats.naks_sent;
        match syndrome.kind() {
            roce_proto::AethKind::RnrNak { .. } => n.rnr += 1,
            roce_proto::AethKind::Nak(code) => match code {
                roce_proto::NakCode::PsnSequenceError => n.seq_err += 1,
                roce_proto::NakCode::InvalidRequest => n.invalid_request += 1,
                roce_proto::NakCode::RemoteAccessError => n.remote_access += 1,
                _ => n.remote_op += 1,
            },
            _ => {}
        }
        let repr = build::ack(self.attr.dest_qpn, psn, syndrome, msn, orig_data);
        build::emit(&repr, &self.attr.path, &mut self.seeds, buf).ok()
    }

    // ------------------------------------------------------------------ receive

    /// Takes a datagram addressed to this QP: transport header validation (IBTA Vol 1 §9.6)
    /// and dispatch to the requester or the responder; the congestion-control packets (CE
    /// marks, CNPs) are handled here. `Ok` when it passed the transport checks and was
    /// processed (which is what counts as the peer being alive; what the requester or the
    /// responder then drops is in the QP's stats), else the check it failed (counted too).
    /// `Ok(true)` when it was also in sequence: a request at the expected PSN, or a response
    /// for a PSN sent and not yet acknowledged. A sender that does not see the traffic cannot
    /// make one without guessing a 24-bit PSN; a CNP (no PSN to check), a duplicate or a PSN
    /// outside the window is `Ok(false)`.
    pub(crate) fn handle_datagram(
        &mut self,
        now: Instant,
        meta: &RxMeta,
        bytes: &[u8],
        int: Option<&IntStack>,
        ctx: &mut Ctx<'_>,
    ) -> Result<bool, DropReason> {
        let path = &self.attr.path;
        if !self.state.receives() {
            self.stats.drops.count(DropReason::WrongState);
            return Err(DropReason::WrongState);
        }
        if !path.accepts(meta) {
            // Off-path: whatever it says (ICRC, PSN, keys), it is not the peer's.
            self.stats.drops.count(DropReason::WrongAddress);
            return Err(DropReason::WrongAddress);
        }
        if path.verify_icrc {
            match self.seeds.check_rx(path, meta, bytes) {
                IcrcVerdict::Full => self.stats.icrc_full += 1,
                IcrcVerdict::Solved => self.stats.icrc_solved += 1,
                IcrcVerdict::Bad => {
                    self.stats.drops.count(DropReason::BadIcrc);
                    return Err(DropReason::BadIcrc);
                }
            }
        }
        let pkt = match PacketRepr::parse_bytes(bytes) {
            Ok(p) if p.bth.tver == 0 => p,
            _ => {
                self.stats.drops.count(DropReason::Malformed);
                return Err(DropReason::Malformed);
            }
        };
        if pkt.bth.pkey != PKey::DEFAULT {
            self.stats.drops.count(DropReason::BadPkey);
            return Err(DropReason::BadPkey);
        }
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += bytes.len() as u64;
        let op = pkt.bth.opcode;
        if meta.ecn == Ecn::Ce {
            self.stats.ce_received += 1;
            // Notification point: a marked packet of this flow earns the sender a CNP (a
            // marked CNP does not, so two NPs cannot feed each other).
            if op != Opcode::CNP && self.cnp_pacer.as_mut().is_some_and(|p| p.on_ce_mark(now)) {
                self.cnp_pending = true;
            }
        }
        if op == Opcode::CNP {
            // Reaction point.
            self.stats.cnps_received += 1;
            let before = self.cc.rate_bps();
            self.cc.on_cnp(now);
            self.note_rate(before);
            return Ok(false);
        }
        let psn = pkt.bth.psn;
        if self.is_uc() {
            // UC opcodes are the RC ones at 0x20: SEND and WRITE requests only.
            let rc = Opcode(op.0.wrapping_sub(0x20));
            if (0x20..=0x2b).contains(&op.0) && rc.is_request() {
                let in_sequence = psn == self.resp.epsn;
                let mut pkt = pkt;
                pkt.bth.opcode = rc;
                self.on_uc_request(now, &pkt, ctx);
                return Ok(in_sequence);
            }
            self.stats.drops.count(DropReason::BadOpcode);
            return Ok(false);
        }
        let mut in_sequence = false;
        if op.0 >= 0x20 || !op.is_defined() {
            self.stats.drops.count(DropReason::BadOpcode);
        } else if op.is_request() {
            if let Some(i) = int {
                // The telemetry the next ACK echoes (the receiver's half of HPCC).
                self.int_echo = Some(*i);
            }
            in_sequence = psn == self.resp.epsn;
            self.on_request(now, &pkt, ctx);
        } else if !op.is_response() {
            self.stats.drops.count(DropReason::BadOpcode);
        } else if self.state.sends() {
            in_sequence = self.req.unacked(psn);
            self.on_response(now, &pkt, ctx);
            if let Some(i) = int {
                self.cc.on_int(now, i, psn, self.req.snd_nxt());
            }
        } else {
            self.stats.drops.count(DropReason::WrongState);
        }
        Ok(in_sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_lead_and_both_kinds_alternate_in_runs() {
        let mut t = TxTurn::default();
        assert!(!t.responses, "requests first");
        for _ in 0..TX_RUN {
            t.served();
        }
        assert!(t.responses, "after a run of requests, responses");
        t.other_served();
        assert_eq!(
            t,
            TxTurn {
                responses: false,
                run: 1
            },
            "no response ready: requests take the turn back"
        );
        t.other_served();
        assert_eq!(
            t,
            TxTurn::default(),
            "no request ready: still requests next"
        );
    }
}
