//! One RC queue pair: requester and responder state machines (IBTA Vol 1 §9.7, §10.3, §11.4;
//! ../shared/docs/protocol.md §4-7).
//!
//! The QP is sans-IO: [`Device`](crate::Device) hands it datagrams, the time and the memory
//! table, and asks it for datagrams to send, completions and its next deadline.
use core::time::Duration;
use std::collections::VecDeque;

use roce_proto::aeth::{rnr_timer_ns, AethKind};
use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, Class, Ecn, IethRepr, ImmDt, Msn, NakCode,
    Opcode, PKey, PacketRepr, Psn, Qpn, RKey, RethRepr, Syndrome,
};

use crate::cc::{CongestionControl, NoCc};
use crate::cnp::{cnp_repr, CnpPacer};
use crate::device::{CqHandle, Ctx};
use crate::memory::{Access, MemError, PdHandle};
use crate::path::{PathConfig, SeedCache};
use crate::stats::{DropReason, QpStats};
use crate::time::{min_opt, Instant};
use crate::wr::{
    Completion, ModifyError, PostError, RecvRequest, WcOpcode, WcStatus, WorkRequest, WrOp,
};

/// QP states (`ibv_qp_state`, numeric values as in verbs.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created or reset: nothing is processed.
    Reset = 0,
    /// Receive requests may be posted; packets are dropped.
    Init = 1,
    /// Ready to receive: the responder runs.
    Rtr = 2,
    /// Ready to send: requester and responder run.
    Rts = 3,
    /// Send queue drain: messages already started finish, no new ones start.
    Sqd = 4,
    /// Send queue error (UC/UD only; an RC QP never enters it by itself).
    Sqe = 5,
    /// Error: everything completes with `WR_FLUSH_ERR`.
    Err = 6,
}

/// Capacities and transport knobs fixed at QP creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth (posted, not yet completed).
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Largest message in bytes (at most 2^30, so a message always fits half the PSN space).
    pub max_msg_size: u32,
    /// Bound on PSNs sent and not yet acknowledged (rxe: 128; clamped to 1..=2^20).
    pub max_unacked_psns: u32,
    /// Request an ACK at least every this many packets (rxe: 64) besides each message end.
    pub ack_req_every: u32,
    /// Minimum interval between CNPs this QP sends on CE marks (`None`: never send CNPs).
    /// The first mark is answered at once; marks inside the interval after a CNP earn one
    /// deferred CNP at its end ([`CnpPacer`], the DCQCN paper's rule). Default 50 µs.
    pub cnp_interval: Option<Duration>,
    /// Treat `retry_cnt = 7` as infinite, as Linux rxe does (protocol.md §5.2). Off by
    /// default: the IBA reads 7 as a plain count.
    pub infinite_retry_at_7: bool,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_msg_size: 1 << 30,
            max_unacked_psns: 128,
            ack_req_every: 64,
            cnp_interval: Some(crate::cnp::DEFAULT_CNP_INTERVAL),
            infinite_retry_at_7: false,
        }
    }
}

/// Attributes of a `modify_qp` call: the target state plus the attributes the transition
/// needs (protocol.md §6.2); `None` = not in the attribute mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub state: QpState,
    /// Remote rights the responder grants (RESET→INIT, optional later).
    pub access_flags: Option<Access>,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096 (INIT→RTR).
    pub path_mtu: Option<u32>,
    /// Peer QPN (INIT→RTR).
    pub dest_qpn: Option<Qpn>,
    /// Responder's first expected PSN (INIT→RTR).
    pub rq_psn: Option<Psn>,
    /// Requester's first PSN (RTR→RTS).
    pub sq_psn: Option<Psn>,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout, 0 = infinite (RTR→RTS).
    pub timeout: Option<u8>,
    /// Transport retries, 0..=7 (RTR→RTS).
    pub retry_cnt: Option<u8>,
    /// RNR retries, 0..=7, 7 = infinite (RTR→RTS).
    pub rnr_retry: Option<u8>,
    /// RNR timer code this responder puts in its RNR NAKs (INIT→RTR).
    pub min_rnr_timer: Option<u8>,
    /// Outstanding READ/atomic requests this requester may have (RTR→RTS).
    pub max_rd_atomic: Option<u8>,
    /// READ/atomic responder resources (INIT→RTR).
    pub max_dest_rd_atomic: Option<u8>,
    /// Address vector (INIT→RTR).
    pub path: Option<PathConfig>,
}

impl QpAttr {
    /// Attributes with only the target state set.
    pub const fn to(state: QpState) -> Self {
        Self {
            state,
            access_flags: None,
            path_mtu: None,
            dest_qpn: None,
            rq_psn: None,
            sq_psn: None,
            timeout: None,
            retry_cnt: None,
            rnr_retry: None,
            min_rnr_timer: None,
            max_rd_atomic: None,
            max_dest_rd_atomic: None,
            path: None,
        }
    }
}

/// A datagram the caller must send: `buf[..len]` to `remote`, UDP port 4791.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// The local QP that produced it.
    pub qpn: Qpn,
    /// Length of the datagram written at the start of the buffer.
    pub len: usize,
    /// ECN codepoint to send it with.
    pub ecn: Ecn,
    /// The path (addresses and UDP source port).
    pub path: PathConfig,
}

#[derive(Debug, Clone, Copy)]
struct SendWqe {
    wr: WorkRequest,
    len: u32,
    first_psn: Psn,
    npkts: u32,
}

impl SendWqe {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
}

#[derive(Debug, Clone, Copy)]
enum InMsg {
    None,
    Send {
        wqe: RecvRequest,
        offset: u32,
    },
    Write {
        va: u64,
        rkey: RKey,
        remaining: u32,
        total: u32,
    },
}

#[derive(Debug, Clone, Copy)]
enum Resource {
    Read {
        first: Psn,
        last: Psn,
        va: u64,
        rkey: RKey,
        len: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

#[derive(Debug, Clone, Copy)]
struct ReadJob {
    psn: Psn,
    first_psn: Psn,
    va: u64,
    rkey: RKey,
    remaining: u32,
    started: bool,
}

#[derive(Debug, Clone, Copy)]
enum RespItem {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: Msn,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: Msn,
    },
    Read(ReadJob),
}

fn le(a: Psn, b: Psn) -> bool {
    a == b || a.precedes(b)
}

/// `p` in `[lo, hi)` modulo 2^24.
fn in_range(p: Psn, lo: Psn, hi: Psn) -> bool {
    p.distance_from(lo) < hi.distance_from(lo)
}

fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        _ => WcStatus::RemOpErr,
    }
}

/// Writes `repr` and its ICRC into `buf` (resized to the packet length); returns the length.
fn emit(
    repr: &PacketRepr<'_>,
    path: &PathConfig,
    seeds: &mut SeedCache,
    buf: &mut Vec<u8>,
) -> usize {
    let len = repr.buffer_len();
    buf.clear();
    buf.resize(len, 0);
    // The reprs built here always match their opcodes and fit the buffer.
    match repr.emit(buf) {
        Ok(n) => {
            seeds.tx(path, n).fill(&mut buf[..n]);
            n
        }
        Err(_) => {
            debug_assert!(false, "a repr built by the QP failed to emit");
            buf.clear();
            0
        }
    }
}

/// Responder error: NAK code, plus the status of the receive request it hit, if any.
struct Fatal(NakCode, Option<WcStatus>);

enum Exec {
    Done,
    Rnr,
    Fatal(Fatal),
}

/// One RC queue pair. Created and driven through [`Device`](crate::Device).
#[derive(Debug)]
pub struct Qp {
    qpn: Qpn,
    pd: PdHandle,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    caps: QpCaps,
    state: QpState,
    // attributes
    access: Access,
    mtu: u32,
    dest_qpn: Qpn,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    path: PathConfig,
    seeds: SeedCache,
    // requester
    sq: VecDeque<SendWqe>,
    psn_alloc: Psn,
    send_idx: usize,
    started: usize,
    req_psn: Psn,
    una: Psn,
    high_psn: Psn,
    retry_left: u8,
    rnr_left: u8,
    rd_atomic_inflight: u32,
    rnr_until: Option<Instant>,
    retx_at: Option<Instant>,
    rewound_at: Option<Psn>,
    since_ack_req: u32,
    paced_until: Option<Instant>,
    // responder
    rq: VecDeque<RecvRequest>,
    epsn: Psn,
    msn: Msn,
    nak_sent: bool,
    in_msg: InMsg,
    resources: VecDeque<Resource>,
    resp_out: VecDeque<RespItem>,
    fatal_nak: Option<(Psn, Syndrome)>,
    cnp_pending: bool,
    cnp_pacer: Option<CnpPacer>,
    // misc
    stats: QpStats,
    cc: Box<dyn CongestionControl>,
    scratch: Vec<u8>,
    resp_turn: bool,
}

impl Qp {
    pub(crate) fn new(
        qpn: Qpn,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        caps: QpCaps,
    ) -> Self {
        Self {
            qpn,
            pd,
            send_cq,
            recv_cq,
            caps,
            state: QpState::Reset,
            access: Access::NONE,
            mtu: 1024,
            dest_qpn: Qpn(0),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            path: PathConfig::default(),
            seeds: SeedCache::default(),
            sq: VecDeque::with_capacity(caps.max_send_wr.min(64) as usize),
            psn_alloc: Psn::new(0),
            send_idx: 0,
            started: 0,
            req_psn: Psn::new(0),
            una: Psn::new(0),
            high_psn: Psn::new(0),
            retry_left: 7,
            rnr_left: 7,
            rd_atomic_inflight: 0,
            rnr_until: None,
            retx_at: None,
            rewound_at: None,
            since_ack_req: 0,
            paced_until: None,
            rq: VecDeque::with_capacity(caps.max_recv_wr.min(64) as usize),
            epsn: Psn::new(0),
            msn: Msn(0),
            nak_sent: false,
            in_msg: InMsg::None,
            resources: VecDeque::new(),
            resp_out: VecDeque::with_capacity(64),
            fatal_nak: None,
            cnp_pending: false,
            cnp_pacer: caps.cnp_interval.map(CnpPacer::new),
            stats: QpStats::default(),
            cc: Box::new(NoCc),
            scratch: Vec::new(),
            resp_turn: false,
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
        &self.path
    }
    /// Path MTU in bytes.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }
    /// Peer QPN.
    pub fn dest_qpn(&self) -> Qpn {
        self.dest_qpn
    }
    /// Next PSN a newly posted request will get.
    pub fn next_send_psn(&self) -> Psn {
        self.psn_alloc
    }
    /// The responder's expected PSN.
    pub fn expected_psn(&self) -> Psn {
        self.epsn
    }
    /// Send requests posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }
    /// Receive requests posted and not yet consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
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

    fn timeout_ns(&self) -> Option<u64> {
        (self.timeout != 0).then(|| 4096u64 << self.timeout)
    }

    // ------------------------------------------------------------------ modify

    pub(crate) fn modify(&mut self, a: &QpAttr, ctx: &mut Ctx<'_>) -> Result<(), ModifyError> {
        use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};
        let from = self.state;
        let to = a.state;
        let legal = matches!(
            (from, to),
            (_, Reset)
                | (_, QpState::Err)
                | (Reset, Init)
                | (Init, Init)
                | (Init, Rtr)
                | (Rtr, Rts)
                | (Rts, Rts)
                | (Rts, Sqd)
                | (Sqd, Sqd)
                | (Sqd, Rts)
                | (Sqe, Rts)
        );
        if !legal {
            return Err(ModifyError::IllegalTransition { from, to });
        }
        // Validate every value first: nothing changes on error.
        if let Some(m) = a.path_mtu {
            if !matches!(m, 256 | 512 | 1024 | 2048 | 4096) {
                return Err(ModifyError::InvalidValue("path_mtu"));
            }
        }
        // The 8-bit attributes and their largest values (5-bit, 3-bit and rd_atomic fields).
        let limits = [
            (a.timeout, 31, "timeout"),
            (a.retry_cnt, 7, "retry_cnt"),
            (a.rnr_retry, 7, "rnr_retry"),
            (a.min_rnr_timer, 31, "min_rnr_timer"),
            (a.max_rd_atomic, 128, "max_rd_atomic"),
            (a.max_dest_rd_atomic, 128, "max_dest_rd_atomic"),
        ];
        if let Some((_, _, name)) = limits
            .iter()
            .find(|(v, max, _)| v.is_some_and(|v| v > *max))
        {
            return Err(ModifyError::InvalidValue(name));
        }
        if a.dest_qpn.is_some_and(|q| q.0 > 0xff_ffff) {
            return Err(ModifyError::InvalidValue("dest_qpn"));
        }
        if a.path.is_some_and(|p| !p.is_consistent()) {
            return Err(ModifyError::InvalidValue("path"));
        }
        let need = |present: bool, name: &'static str| {
            if present {
                Ok(())
            } else {
                Err(ModifyError::MissingAttribute(name))
            }
        };
        match (from, to) {
            (Reset, Init) => need(a.access_flags.is_some(), "access_flags")?,
            (Init, Rtr) => {
                need(a.path.is_some(), "path")?;
                need(a.path_mtu.is_some(), "path_mtu")?;
                need(a.dest_qpn.is_some(), "dest_qpn")?;
                need(a.rq_psn.is_some(), "rq_psn")?;
                need(a.max_dest_rd_atomic.is_some(), "max_dest_rd_atomic")?;
                need(a.min_rnr_timer.is_some(), "min_rnr_timer")?;
            }
            (Rtr, Rts) => {
                need(a.sq_psn.is_some(), "sq_psn")?;
                need(a.timeout.is_some(), "timeout")?;
                need(a.retry_cnt.is_some(), "retry_cnt")?;
                need(a.rnr_retry.is_some(), "rnr_retry")?;
                need(a.max_rd_atomic.is_some(), "max_rd_atomic")?;
            }
            _ => {}
        }
        // Apply.
        if to == Reset {
            self.reset();
            return Ok(());
        }
        if to == QpState::Err {
            self.enter_error(ctx);
            return Ok(());
        }
        fn set<T: Copy>(field: &mut T, value: Option<T>) {
            if let Some(v) = value {
                *field = v;
            }
        }
        set(&mut self.access, a.access_flags);
        set(&mut self.mtu, a.path_mtu);
        set(&mut self.dest_qpn, a.dest_qpn);
        if let Some(v) = a.path {
            self.path = v;
            self.seeds = SeedCache::default();
        }
        set(&mut self.min_rnr_timer, a.min_rnr_timer);
        set(&mut self.max_dest_rd_atomic, a.max_dest_rd_atomic);
        set(&mut self.epsn, a.rq_psn);
        set(&mut self.timeout, a.timeout);
        set(&mut self.retry_cnt, a.retry_cnt);
        set(&mut self.retry_left, a.retry_cnt);
        set(&mut self.rnr_retry, a.rnr_retry);
        set(&mut self.rnr_left, a.rnr_retry);
        set(&mut self.max_rd_atomic, a.max_rd_atomic);
        if let Some(v) = a.sq_psn {
            if from == Rtr {
                self.psn_alloc = v;
                self.req_psn = v;
                self.una = v;
                self.high_psn = v;
            }
        }
        self.state = to;
        Ok(())
    }

    fn reset(&mut self) {
        let (qpn, pd, scq, rcq, caps) = (self.qpn, self.pd, self.send_cq, self.recv_cq, self.caps);
        let cc = core::mem::replace(&mut self.cc, Box::new(NoCc));
        let stats = self.stats;
        *self = Self::new(qpn, pd, scq, rcq, caps);
        self.cc = cc;
        self.stats = stats;
    }

    /// Moves to ERR and flushes both queues with `WR_FLUSH_ERR`.
    fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        self.state = QpState::Err;
        while let Some(w) = self.sq.pop_front() {
            ctx.push(
                self.send_cq,
                Completion {
                    wr_id: w.wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: w.wr.op.wc_opcode(),
                    byte_len: 0,
                    imm_data: None,
                    invalidated_rkey: None,
                    qp_num: self.qpn,
                },
            );
        }
        if let InMsg::Send { wqe, .. } = self.in_msg {
            self.flush_recv(ctx, wqe);
        }
        self.in_msg = InMsg::None;
        while let Some(r) = self.rq.pop_front() {
            self.flush_recv(ctx, r);
        }
        self.send_idx = 0;
        self.started = 0;
        self.rd_atomic_inflight = 0;
        self.rnr_until = None;
        self.retx_at = None;
        self.paced_until = None;
        self.resp_out.clear();
        self.cnp_pending = false;
    }

    fn flush_recv(&self, ctx: &mut Ctx<'_>, r: RecvRequest) {
        ctx.push(
            self.recv_cq,
            self.recv_completion(r.wr_id, WcStatus::WrFlushErr),
        );
    }

    fn recv_completion(&self, wr_id: u64, status: WcStatus) -> Completion {
        Completion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: self.qpn,
        }
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
        if self.sq.len() >= self.caps.max_send_wr as usize {
            return Err(PostError::QueueFull);
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
                Completion {
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: wr.op.wc_opcode(),
                    byte_len: 0,
                    imm_data: None,
                    invalidated_rkey: None,
                    qp_num: self.qpn,
                },
            );
            return Ok(());
        }
        let npkts = if wr.op.is_atomic() {
            1
        } else {
            len.div_ceil(self.mtu).max(1)
        };
        self.sq.push_back(SendWqe {
            wr,
            len,
            first_psn: self.psn_alloc,
            npkts,
        });
        self.psn_alloc = self.psn_alloc.add(npkts);
        Ok(())
    }

    pub(crate) fn post_recv(&mut self, r: RecvRequest, ctx: &mut Ctx<'_>) -> Result<(), PostError> {
        if self.state == QpState::Reset {
            return Err(PostError::WrongState(self.state));
        }
        if self.rq.len() >= self.caps.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if !ctx.mrs.check_sgl(self.pd, &r.sgl, true) {
            return Err(PostError::InvalidSge);
        }
        if self.state == QpState::Err {
            self.flush_recv(ctx, r);
            return Ok(());
        }
        self.rq.push_back(r);
        Ok(())
    }

    // ------------------------------------------------------------------ timers

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        if !matches!(
            self.state,
            QpState::Rts | QpState::Sqd | QpState::Rtr | QpState::Sqe
        ) {
            return None;
        }
        min_opt(
            min_opt(self.retx_at, self.rnr_until),
            min_opt(
                min_opt(self.paced_until, self.cc.poll_timeout()),
                self.cnp_pacer.as_ref().and_then(CnpPacer::poll_timeout),
            ),
        )
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant, ctx: &mut Ctx<'_>) {
        if !matches!(
            self.state,
            QpState::Rts | QpState::Sqd | QpState::Rtr | QpState::Sqe
        ) {
            return;
        }
        if self.paced_until.is_some_and(|t| t <= now) {
            self.paced_until = None;
        }
        if self.cc.poll_timeout().is_some_and(|t| t <= now) {
            let before = self.cc.rate_bps();
            self.cc.handle_timeout(now);
            self.note_rate(before);
        }
        if let Some(p) = self.cnp_pacer.as_mut() {
            if p.handle_timeout(now) {
                self.cnp_pending = true;
            }
        }
        if self.rnr_until.is_some_and(|t| t <= now) {
            self.rnr_until = None;
            self.rewind();
        }
        if self.retx_at.is_some_and(|t| t <= now) {
            self.retx_at = None;
            if self.una != self.high_psn && !self.sq.is_empty() {
                self.stats.timeouts += 1;
                self.cc.on_retransmit_timeout(now);
                self.go_back_n(ctx);
            }
        }
    }

    fn use_retry(&mut self) {
        if !(self.caps.infinite_retry_at_7 && self.retry_cnt == 7) {
            self.retry_left -= 1;
        }
    }

    fn arm_retx(&mut self, now: Instant) {
        self.retx_at = self.timeout_ns().map(|t| now.add_nanos(t));
    }

    /// Go back to the oldest unacknowledged PSN.
    fn rewind(&mut self) {
        self.stats.rewinds += 1;
        self.req_psn = self.una;
        self.send_idx = 0;
        self.retx_at = None;
    }

    // ------------------------------------------------------------------ transmit

    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        if self.state == QpState::Err {
            let (psn, syndrome) = self.fatal_nak.take()?;
            return Some(self.emit_ack(psn, syndrome, None, buf));
        }
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return None;
        }
        if self.cnp_pending {
            // CNPs go first and are not paced (protocol.md §8.1).
            self.cnp_pending = false;
            self.stats.cnps_sent += 1;
            let n = emit(&cnp_repr(self.dest_qpn), &self.path, &mut self.seeds, buf);
            self.count_tx(n);
            return Some(n);
        }
        self.resp_turn = !self.resp_turn;
        let n = if self.resp_turn {
            match self.poll_response(now, ctx, buf) {
                Some(n) => Some(n),
                None => self.poll_request(now, ctx, buf),
            }
        } else {
            match self.poll_request(now, ctx, buf) {
                Some(n) => Some(n),
                None => self.poll_response(now, ctx, buf),
            }
        };
        if let Some(n) = n {
            self.count_tx(n);
        }
        n
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

    fn count_tx(&mut self, n: usize) {
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += n as u64;
    }

    fn paced(&mut self, now: Instant, bytes: usize) -> bool {
        match self.cc.next_send_time(now, bytes) {
            Some(t) if t > now => {
                self.paced_until = Some(t);
                true
            }
            _ => false,
        }
    }

    fn poll_request(
        &mut self,
        now: Instant,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.rnr_until.is_some() {
            return None;
        }
        let w = *self.sq.get(self.send_idx)?;
        if self.req_psn.distance_from(self.una) >= self.window() {
            return None;
        }
        let starting = self.send_idx >= self.started;
        if starting {
            if self.state == QpState::Sqd {
                return None;
            }
            if w.wr.op.is_read_or_atomic()
                && self.rd_atomic_inflight >= u32::from(self.max_rd_atomic.max(1))
            {
                return None;
            }
            if w.wr.fence && self.rd_atomic_inflight > 0 {
                return None;
            }
        }
        let k = self.req_psn.distance_from(w.first_psn);
        let off = k * self.mtu;
        let plen = match w.wr.op {
            WrOp::Read(_) | WrOp::CompareSwap { .. } | WrOp::FetchAdd { .. } => 0,
            _ => (w.len - off.min(w.len)).min(self.mtu),
        };
        if self.paced(now, plen as usize + 64) {
            return None;
        }
        self.paced_until = None;
        let psn = self.req_psn;
        let last = k + 1 == w.npkts;
        let outstanding = self.req_psn.distance_from(self.una) + 1;
        let mut bth = BthRepr {
            pkey: PKey::DEFAULT,
            dest_qp: self.dest_qpn,
            psn,
            ..BthRepr::default()
        };
        let mut repr = PacketRepr::default();
        let payload;
        match w.wr.op {
            WrOp::Read(remote) => {
                bth.opcode = Opcode::RC_RDMA_READ_REQUEST;
                bth.ack_req = true;
                repr.reth = Some(RethRepr {
                    va: remote.va.wrapping_add(u64::from(off)),
                    rkey: remote.rkey,
                    dma_len: w.len - off.min(w.len),
                });
                payload = &[][..];
            }
            WrOp::CompareSwap {
                remote,
                compare,
                swap,
            } => {
                bth.opcode = Opcode::RC_COMPARE_SWAP;
                bth.ack_req = true;
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote.va,
                    rkey: remote.rkey,
                    swap_add: swap,
                    compare,
                });
                payload = &[][..];
            }
            WrOp::FetchAdd { remote, add } => {
                bth.opcode = Opcode::RC_FETCH_ADD;
                bth.ack_req = true;
                repr.atomic_eth = Some(AtomicEthRepr {
                    va: remote.va,
                    rkey: remote.rkey,
                    swap_add: add,
                    compare: 0,
                });
                payload = &[][..];
            }
            op => {
                let first = k == 0;
                let only = w.npkts == 1;
                let (f, m, l, o) = match op {
                    WrOp::Send => (0x00, 0x01, 0x02, 0x04),
                    WrOp::SendWithImm(_) => (0x00, 0x01, 0x03, 0x05),
                    WrOp::SendWithInv(_) => (0x00, 0x01, 0x16, 0x17),
                    WrOp::Write(_) => (0x06, 0x07, 0x08, 0x0a),
                    _ => (0x06, 0x07, 0x09, 0x0b),
                };
                bth.opcode = Opcode(if only {
                    o
                } else if first {
                    f
                } else if last {
                    l
                } else {
                    m
                });
                if last {
                    match op {
                        WrOp::SendWithImm(imm) | WrOp::WriteWithImm(_, imm) => {
                            repr.immdt = Some(ImmDt(imm));
                        }
                        WrOp::SendWithInv(rkey) => repr.ieth = Some(IethRepr { rkey }),
                        _ => {}
                    }
                    bth.solicited = w.wr.solicited
                        && matches!(
                            op,
                            WrOp::Send
                                | WrOp::SendWithImm(_)
                                | WrOp::SendWithInv(_)
                                | WrOp::WriteWithImm(..)
                        );
                }
                if first {
                    if let WrOp::Write(remote) | WrOp::WriteWithImm(remote, _) = op {
                        repr.reth = Some(RethRepr {
                            va: remote.va,
                            rkey: remote.rkey,
                            dma_len: w.len,
                        });
                    }
                }
                bth.ack_req = last
                    || self.since_ack_req + 1 >= self.caps.ack_req_every.max(1)
                    || outstanding + 1 >= self.window();
                bth.pad_count = PacketRepr::pad_for(plen as usize);
                match ctx.mrs.gather(
                    self.pd,
                    &w.wr.sgl,
                    u64::from(off),
                    plen as usize,
                    &mut self.scratch,
                ) {
                    Ok(p) => payload = p,
                    Err(_) => {
                        // The region went away after posting: local protection error.
                        self.fail_at(ctx, self.send_idx, WcStatus::LocProtErr);
                        return None;
                    }
                }
            }
        }
        repr.bth = bth;
        repr.payload = payload;
        let n = emit(&repr, &self.path, &mut self.seeds, buf);
        if bth.ack_req {
            self.since_ack_req = 0;
        } else {
            self.since_ack_req += 1;
        }
        if starting {
            self.started = self.send_idx + 1;
            if w.wr.op.is_read_or_atomic() {
                self.rd_atomic_inflight += 1;
            }
        }
        if self.req_psn.precedes(self.high_psn) {
            self.stats.retransmitted_packets += 1;
        }
        if w.wr.op.is_read_or_atomic() {
            self.req_psn = w.last_psn().next();
            self.send_idx += 1;
        } else {
            self.req_psn = self.req_psn.next();
            if last {
                self.send_idx += 1;
            }
        }
        if self.high_psn.precedes(self.req_psn) {
            self.high_psn = self.req_psn;
        }
        if self.retx_at.is_none() {
            self.arm_retx(now);
        }
        self.cc.on_packet_sent(now, n);
        Some(n)
    }

    fn emit_ack(
        &mut self,
        psn: Psn,
        syndrome: Syndrome,
        atomic: Option<u64>,
        buf: &mut Vec<u8>,
    ) -> usize {
        self.stats.acks_sent += 1;
        let repr = PacketRepr {
            bth: BthRepr {
                opcode: if atomic.is_some() {
                    Opcode::RC_ATOMIC_ACKNOWLEDGE
                } else {
                    Opcode::RC_ACKNOWLEDGE
                },
                pkey: PKey::DEFAULT,
                dest_qp: self.dest_qpn,
                psn,
                ..BthRepr::default()
            },
            aeth: Some(AethRepr {
                syndrome,
                msn: self.msn,
            }),
            atomic_ack_eth: atomic.map(|orig_data| AtomicAckEthRepr { orig_data }),
            ..PacketRepr::default()
        };
        emit(&repr, &self.path, &mut self.seeds, buf)
    }

    fn poll_response(
        &mut self,
        now: Instant,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        let item = *self.resp_out.front()?;
        match item {
            RespItem::Ack { psn, syndrome, msn } => {
                self.resp_out.pop_front();
                let cur = self.msn;
                self.msn = msn;
                let n = self.emit_ack(psn, syndrome, None, buf);
                self.msn = cur;
                Some(n)
            }
            RespItem::AtomicAck { psn, orig, msn } => {
                self.resp_out.pop_front();
                let cur = self.msn;
                self.msn = msn;
                let n = self.emit_ack(psn, Syndrome::ACK_UNLIMITED, Some(orig), buf);
                self.msn = cur;
                Some(n)
            }
            RespItem::Read(mut job) => {
                let mtu = self.mtu;
                let plen = job.remaining.min(mtu);
                if self.paced(now, plen as usize + 64) {
                    return None;
                }
                self.paced_until = None;
                let fits = job.remaining <= mtu;
                let opcode = if !job.started {
                    match (job.psn == job.first_psn, fits) {
                        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
                        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                    }
                } else if fits {
                    Opcode::RC_RDMA_READ_RESPONSE_LAST
                } else {
                    Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
                };
                let payload: &[u8] = if plen == 0 {
                    &[]
                } else {
                    match ctx.mrs.remote(
                        job.rkey,
                        self.pd,
                        Access::REMOTE_READ,
                        job.va,
                        u64::from(plen),
                    ) {
                        Ok((idx, off)) => ctx.mrs.bytes(idx, off, plen as usize),
                        Err(_) => {
                            // The region was invalidated or deregistered mid-READ.
                            self.resp_out.clear();
                            self.responder_fatal(
                                ctx,
                                job.psn,
                                Fatal(NakCode::RemoteAccessError, None),
                            );
                            let (psn, syn) = self.fatal_nak.take()?;
                            return Some(self.emit_ack(psn, syn, None, buf));
                        }
                    }
                };
                let repr = PacketRepr {
                    bth: BthRepr {
                        opcode,
                        pkey: PKey::DEFAULT,
                        dest_qp: self.dest_qpn,
                        psn: job.psn,
                        pad_count: PacketRepr::pad_for(plen as usize),
                        ..BthRepr::default()
                    },
                    aeth: (opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(AethRepr {
                        syndrome: Syndrome::ACK_UNLIMITED,
                        msn: self.msn,
                    }),
                    payload,
                    ..PacketRepr::default()
                };
                let n = emit(&repr, &self.path, &mut self.seeds, buf);
                job.started = true;
                job.remaining -= plen;
                job.va = job.va.wrapping_add(u64::from(plen));
                job.psn = job.psn.next();
                if fits {
                    self.resp_out.pop_front();
                } else if let Some(RespItem::Read(j)) = self.resp_out.front_mut() {
                    *j = job;
                }
                self.cc.on_packet_sent(now, n);
                Some(n)
            }
        }
    }

    // ------------------------------------------------------------------ receive

    pub(crate) fn handle_datagram(
        &mut self,
        now: Instant,
        ecn: Ecn,
        bytes: &[u8],
        ctx: &mut Ctx<'_>,
    ) {
        if self.path.verify_icrc && !self.seeds.rx(&self.path, bytes.len()).verify(bytes) {
            self.stats.drops.count(DropReason::BadIcrc);
            return;
        }
        let pkt = match PacketRepr::parse_bytes(bytes) {
            Ok(p) if p.bth.tver == 0 => p,
            _ => {
                self.stats.drops.count(DropReason::Malformed);
                return;
            }
        };
        if pkt.bth.pkey != PKey::DEFAULT {
            self.stats.drops.count(DropReason::BadPkey);
            return;
        }
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            self.stats.drops.count(DropReason::WrongState);
            return;
        }
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += bytes.len() as u64;
        let op = pkt.bth.opcode;
        if ecn == Ecn::Ce {
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
            return;
        }
        if op.0 >= 0x20 || !op.is_defined() {
            self.stats.drops.count(DropReason::BadOpcode);
            return;
        }
        if op.is_request() {
            self.on_request(now, &pkt, ctx);
        } else if op.is_response() {
            if matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
                self.on_response(now, &pkt, ctx);
            } else {
                self.stats.drops.count(DropReason::WrongState);
            }
        } else {
            self.stats.drops.count(DropReason::BadOpcode);
        }
    }

    // ----------------------------------------------------------- requester side

    fn complete_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus, now: Option<Instant>) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        if self.started > 0 && w.wr.op.is_read_or_atomic() {
            self.rd_atomic_inflight = self.rd_atomic_inflight.saturating_sub(1);
        }
        self.send_idx = self.send_idx.saturating_sub(1);
        self.started = self.started.saturating_sub(1);
        if let Some(now) = now {
            self.cc.on_ack(now, u64::from(w.len));
        }
        if w.wr.signaled || status != WcStatus::Success {
            ctx.push(
                self.send_cq,
                Completion {
                    wr_id: w.wr.wr_id,
                    status,
                    opcode: w.wr.op.wc_opcode(),
                    byte_len: if status == WcStatus::Success {
                        w.len
                    } else {
                        0
                    },
                    imm_data: None,
                    invalidated_rkey: None,
                    qp_num: self.qpn,
                },
            );
        }
    }

    fn fail_front(&mut self, ctx: &mut Ctx<'_>, status: WcStatus) {
        self.complete_front(ctx, status, None);
        self.enter_error(ctx);
    }

    /// The WQE at `idx` failed locally: earlier ones are flushed, it completes with `status`.
    fn fail_at(&mut self, ctx: &mut Ctx<'_>, idx: usize, status: WcStatus) {
        for _ in 0..idx {
            self.complete_front(ctx, WcStatus::WrFlushErr, None);
        }
        self.fail_front(ctx, status);
    }

    fn progress(&mut self, now: Instant) {
        self.retry_left = self.retry_cnt;
        self.rnr_left = self.rnr_retry;
        self.rewound_at = None;
        if self.req_psn.precedes(self.una) {
            self.req_psn = self.una;
            self.send_idx = 0;
        }
        if self.una != self.high_psn {
            self.arm_retx(now);
        } else {
            self.retx_at = None;
        }
    }

    /// Go-back-N for a sequence NAK or an implied NAK (one retry sequence at a time).
    fn retry(&mut self, ctx: &mut Ctx<'_>) {
        if self.rewound_at == Some(self.una) {
            return;
        }
        self.go_back_n(ctx);
    }

    /// Spends one retry and resends from the oldest unacknowledged PSN, or fails the oldest
    /// request with `RETRY_EXC_ERR` when none is left.
    fn go_back_n(&mut self, ctx: &mut Ctx<'_>) {
        if self.retry_left == 0 {
            self.fail_front(ctx, WcStatus::RetryExcErr);
            return;
        }
        self.use_retry();
        self.rewound_at = Some(self.una);
        self.rewind();
    }

    /// Acknowledges every PSN up to and including `p`. Returns `false` when that revealed a
    /// lost READ response / atomic ACK (implied NAK) or failed the QP.
    fn ack_upto(&mut self, now: Instant, p: Psn, ctx: &mut Ctx<'_>) -> bool {
        let mut moved = false;
        while let Some(w) = self.sq.front().copied() {
            if self.started == 0 {
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
                self.una = last.next();
                self.complete_front(ctx, WcStatus::Success, Some(now));
                moved = true;
            } else {
                if le(self.una, p) {
                    self.una = p.next();
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

    /// Acknowledges every PSN strictly before `p`.
    fn ack_before(&mut self, now: Instant, p: Psn, ctx: &mut Ctx<'_>) -> bool {
        if p == self.una {
            return true;
        }
        self.ack_upto(now, p.sub(1), ctx)
    }

    fn on_response(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        if !in_range(p, self.una, self.high_psn) {
            let r = if p.precedes(self.una) {
                DropReason::StaleResponse
            } else {
                DropReason::GhostResponse
            };
            self.stats.drops.count(r);
            return;
        }
        let op = pkt.bth.opcode;
        let Some(aeth) = pkt.aeth.or(if op == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
            Some(AethRepr {
                syndrome: Syndrome::ACK_UNLIMITED,
                msn: Msn(0),
            })
        } else {
            None
        }) else {
            self.stats.drops.count(DropReason::Malformed);
            return;
        };
        match op {
            Opcode::RC_ACKNOWLEDGE => match aeth.syndrome.kind() {
                AethKind::Ack { .. } => {
                    self.ack_upto(now, p, ctx);
                }
                AethKind::RnrNak { timer } => {
                    self.stats.naks_received.rnr += 1;
                    if !self.ack_before(now, p, ctx) || self.state == QpState::Err {
                        return;
                    }
                    if self.rnr_left == 0 {
                        self.fail_front(ctx, WcStatus::RnrRetryExcErr);
                        return;
                    }
                    if self.rnr_retry != 7 {
                        self.rnr_left -= 1;
                    }
                    self.rnr_until = Some(now.add_nanos(rnr_timer_ns(timer)));
                    self.retx_at = None;
                    self.req_psn = self.una;
                    self.send_idx = 0;
                }
                AethKind::Nak(NakCode::PsnSequenceError) => {
                    self.stats.naks_received.seq_err += 1;
                    if !self.ack_before(now, p, ctx) || self.state == QpState::Err {
                        return;
                    }
                    self.retry(ctx);
                }
                AethKind::Nak(code) => {
                    match code {
                        NakCode::InvalidRequest => self.stats.naks_received.invalid_request += 1,
                        NakCode::RemoteAccessError => self.stats.naks_received.remote_access += 1,
                        _ => self.stats.naks_received.remote_op += 1,
                    }
                    if !self.ack_before(now, p, ctx) || self.state == QpState::Err {
                        return;
                    }
                    self.fail_front(ctx, nak_status(code));
                }
                _ => self.stats.drops.count(DropReason::Malformed),
            },
            Opcode::RC_ATOMIC_ACKNOWLEDGE => {
                let Some(ack) = pkt.atomic_ack_eth else {
                    self.stats.drops.count(DropReason::Malformed);
                    return;
                };
                if !self.ack_before(now, p, ctx) || self.state == QpState::Err {
                    return;
                }
                let Some(w) = self.sq.front().copied() else {
                    return;
                };
                if !w.wr.op.is_atomic() || w.first_psn != p {
                    self.stats.drops.count(DropReason::StaleResponse);
                    return;
                }
                if ctx
                    .mrs
                    .scatter(self.pd, &w.wr.sgl, 0, &ack.orig_data.to_le_bytes())
                    .is_err()
                {
                    self.fail_front(ctx, WcStatus::LocProtErr);
                    return;
                }
                self.una = p.next();
                self.complete_front(ctx, WcStatus::Success, Some(now));
                self.progress(now);
            }
            _ => self.on_read_response(now, pkt, ctx),
        }
    }

    fn on_read_response(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        // Everything before the READ holding `p` is acknowledged by this response.
        let Some(pos) = self
            .sq
            .iter()
            .take(self.started)
            .position(|w| in_range(p, w.first_psn, w.last_psn().next()))
        else {
            self.stats.drops.count(DropReason::StaleResponse);
            return;
        };
        let w = self.sq[pos];
        if !matches!(w.wr.op, WrOp::Read(_)) {
            self.stats.drops.count(DropReason::StaleResponse);
            return;
        }
        if pos > 0 && (!self.ack_before(now, w.first_psn, ctx) || self.state == QpState::Err) {
            return;
        }
        if self.sq.front().map(|f| f.first_psn) != Some(w.first_psn) {
            return;
        }
        if p != self.una {
            if p.precedes(self.una) {
                self.stats.drops.count(DropReason::StaleResponse);
            } else {
                // A response before this one was lost.
                self.stats.implied_naks += 1;
                self.retry(ctx);
            }
            return;
        }
        let k = p.distance_from(w.first_psn);
        let off = k * self.mtu;
        let expect = (w.len - off).min(self.mtu);
        let is_last = k + 1 == w.npkts;
        let op = pkt.bth.opcode;
        let class_ok = match op.class() {
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
        self.una = p.next();
        if is_last {
            self.complete_front(ctx, WcStatus::Success, Some(now));
        } else {
            self.cc.on_ack(now, u64::from(expect));
        }
        self.progress(now);
    }

    // ----------------------------------------------------------- responder side

    fn push_resp(&mut self, item: RespItem) {
        if let RespItem::Ack { syndrome, .. } = item {
            let coalescable = |s: Syndrome| {
                matches!(
                    s.kind(),
                    AethKind::Ack { .. } | AethKind::Nak(NakCode::PsnSequenceError)
                )
            };
            if coalescable(syndrome) {
                if let Some(RespItem::Ack { syndrome: s, .. }) = self.resp_out.back() {
                    if coalescable(*s) {
                        *self.resp_out.back_mut().unwrap_or_else(|| unreachable!()) = item;
                        return;
                    }
                }
            }
        }
        let cap = 4 * usize::from(self.max_dest_rd_atomic.max(1)) + 64;
        if self.resp_out.len() >= cap {
            self.stats.drops.count(DropReason::ResponseQueueFull);
            return;
        }
        self.resp_out.push_back(item);
    }

    fn push_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        self.push_resp(RespItem::Ack {
            psn,
            syndrome,
            msn: self.msn,
        });
    }

    fn push_resource(&mut self, r: Resource) {
        if self.resources.len() >= usize::from(self.max_dest_rd_atomic.max(1)) {
            self.resources.pop_front();
        }
        self.resources.push_back(r);
    }

    fn responder_fatal(&mut self, ctx: &mut Ctx<'_>, psn: Psn, f: Fatal) {
        let Fatal(code, recv_status) = f;
        match code {
            NakCode::InvalidRequest => self.stats.naks_sent.invalid_request += 1,
            NakCode::RemoteAccessError => self.stats.naks_sent.remote_access += 1,
            _ => self.stats.naks_sent.remote_op += 1,
        }
        if let Some(st) = recv_status {
            let wqe = match self.in_msg {
                InMsg::Send { wqe, .. } => Some(wqe),
                _ => self.rq.pop_front(),
            };
            self.in_msg = InMsg::None;
            if let Some(wqe) = wqe {
                ctx.push(self.recv_cq, self.recv_completion(wqe.wr_id, st));
            }
        }
        self.enter_error(ctx);
        self.fatal_nak = Some((psn, Syndrome::nak(code)));
    }

    fn on_request(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        let op = pkt.bth.opcode;
        if op == Opcode::RC_FLUSH || op == Opcode::RC_ATOMIC_WRITE {
            if p == self.epsn {
                self.responder_fatal(ctx, p, Fatal(NakCode::InvalidRequest, None));
            }
            return;
        }
        if p == self.epsn {
            self.nak_sent = false;
            match self.execute(now, pkt, ctx) {
                Exec::Done => {}
                Exec::Rnr => {
                    self.stats.naks_sent.rnr += 1;
                    self.push_ack(p, Syndrome::rnr_nak(self.min_rnr_timer));
                }
                Exec::Fatal(f) => self.responder_fatal(ctx, p, f),
            }
        } else if self.epsn.precedes(p) {
            self.stats.out_of_sequence_requests += 1;
            if self.nak_sent {
                self.stats.drops.count(DropReason::OutOfSequence);
            } else {
                self.nak_sent = true;
                self.stats.naks_sent.seq_err += 1;
                self.push_ack(self.epsn, Syndrome::nak(NakCode::PsnSequenceError));
            }
        } else {
            self.stats.duplicate_requests += 1;
            self.on_duplicate(pkt);
        }
    }

    fn on_duplicate(&mut self, pkt: &PacketRepr<'_>) {
        let p = pkt.bth.psn;
        let op = pkt.bth.opcode;
        if op == Opcode::RC_RDMA_READ_REQUEST {
            let Some(reth) = pkt.reth else { return };
            let found = self.resources.iter().rev().find_map(|r| match *r {
                Resource::Read {
                    first,
                    last,
                    va,
                    rkey,
                    len,
                } if in_range(p, first, last.next())
                    && rkey == reth.rkey
                    && reth.va >= va
                    && (reth.va - va).saturating_add(u64::from(reth.dma_len)) <= u64::from(len) =>
                {
                    Some(first)
                }
                _ => None,
            });
            let Some(first) = found else {
                self.stats.drops.count(DropReason::NoResource);
                return;
            };
            // A replay supersedes any queued replay of the same READ.
            self.resp_out
                .retain(|i| !matches!(i, RespItem::Read(j) if j.first_psn == first));
            self.push_resp(RespItem::Read(ReadJob {
                psn: p,
                first_psn: first,
                va: reth.va,
                rkey: reth.rkey,
                remaining: reth.dma_len,
                started: false,
            }));
        } else if op.is_atomic() {
            let found = self.resources.iter().rev().find_map(|r| match *r {
                Resource::Atomic { psn, orig } if psn == p => Some(orig),
                _ => None,
            });
            match found {
                Some(orig) => self.push_resp(RespItem::AtomicAck {
                    psn: p,
                    orig,
                    msn: self.msn,
                }),
                None => self.stats.drops.count(DropReason::NoResource),
            }
        } else {
            self.push_ack(self.epsn.sub(1), Syndrome::ACK_UNLIMITED);
        }
    }

    /// The responder's check of a RETH before any byte moves: a DMA length over 2^31 is an
    /// invalid request; a non-empty range the rkey does not grant `access` to is a remote
    /// access error.
    fn check_reth(&self, ctx: &Ctx<'_>, reth: &RethRepr, access: Access) -> Result<(), Exec> {
        if reth.dma_len > 1 << 31 {
            return Err(Exec::Fatal(Fatal(NakCode::InvalidRequest, None)));
        }
        if reth.dma_len > 0
            && ctx
                .mrs
                .remote(reth.rkey, self.pd, access, reth.va, u64::from(reth.dma_len))
                .is_err()
        {
            return Err(Exec::Fatal(Fatal(NakCode::RemoteAccessError, None)));
        }
        Ok(())
    }

    fn execute(&mut self, _now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) -> Exec {
        let inv = |st| Exec::Fatal(Fatal(NakCode::InvalidRequest, st));
        let op = pkt.bth.opcode;
        let p = pkt.bth.psn;
        let class = op.class();
        let plen = pkt.payload.len() as u32;
        let is_send = op.is_send();
        let is_write = op.is_write();
        // Opcode sequence.
        let seq_ok = match (self.in_msg, class) {
            (InMsg::None, Class::First | Class::Only) => true,
            (InMsg::Send { .. }, Class::Middle | Class::Last) => is_send,
            (InMsg::Write { .. }, Class::Middle | Class::Last) => is_write,
            _ => false,
        };
        if !seq_ok {
            return inv(None);
        }
        // Rights granted on this QP.
        let need = if is_write {
            Access::REMOTE_WRITE
        } else if op == Opcode::RC_RDMA_READ_REQUEST {
            Access::REMOTE_READ
        } else if op.is_atomic() {
            Access::REMOTE_ATOMIC
        } else {
            Access::NONE
        };
        if !self.access.contains(need) {
            return inv(None);
        }
        // Receive queue.
        let needs_recv = (is_send && matches!(class, Class::First | Class::Only))
            || (is_write && op.has_immediate());
        if needs_recv && self.rq.is_empty() {
            return Exec::Rnr;
        }
        // Lengths.
        if is_send || is_write {
            let len_ok = match class {
                Class::First | Class::Middle => plen == self.mtu,
                Class::Last => plen >= 1 && plen <= self.mtu,
                Class::Only => plen <= self.mtu,
            };
            if !len_ok || pkt.bth.pad_count != PacketRepr::pad_for(plen as usize) {
                return inv(None);
            }
        }
        let ends = matches!(class, Class::Last | Class::Only);
        if is_send {
            let (wqe, offset) = match self.in_msg {
                InMsg::Send { wqe, offset } => (wqe, offset),
                _ => match self.rq.pop_front() {
                    Some(w) => (w, 0),
                    None => return Exec::Rnr,
                },
            };
            self.in_msg = InMsg::Send { wqe, offset };
            match ctx
                .mrs
                .scatter(self.pd, &wqe.sgl, u64::from(offset), pkt.payload)
            {
                Ok(()) => {}
                Err(MemError::Length) => return inv(Some(WcStatus::LocLenErr)),
                Err(MemError::Protection) => {
                    return Exec::Fatal(Fatal(
                        NakCode::RemoteOperationalError,
                        Some(WcStatus::LocProtErr),
                    ))
                }
            }
            let offset = offset.saturating_add(plen);
            if ends {
                let mut invalidated = None;
                if let Some(ieth) = pkt.ieth {
                    if !ctx.mrs.invalidate(self.pd, ieth.rkey) {
                        return inv(Some(WcStatus::RemInvReqErr));
                    }
                    invalidated = Some(ieth.rkey);
                }
                self.in_msg = InMsg::None;
                ctx.push(
                    self.recv_cq,
                    Completion {
                        wr_id: wqe.wr_id,
                        status: WcStatus::Success,
                        opcode: WcOpcode::Recv,
                        byte_len: offset,
                        imm_data: pkt.immdt.map(|i| i.0),
                        invalidated_rkey: invalidated,
                        qp_num: self.qpn,
                    },
                );
                self.msn = self.msn.next();
            } else {
                self.in_msg = InMsg::Send { wqe, offset };
            }
        } else if is_write {
            let (va, rkey, remaining, total) = match self.in_msg {
                InMsg::Write {
                    va,
                    rkey,
                    remaining,
                    total,
                } => (va, rkey, remaining, total),
                _ => {
                    let Some(reth) = pkt.reth else {
                        return inv(None);
                    };
                    if class == Class::First && reth.dma_len <= plen {
                        return inv(None);
                    }
                    if let Err(e) = self.check_reth(ctx, &reth, Access::REMOTE_WRITE) {
                        return e;
                    }
                    (reth.va, reth.rkey, reth.dma_len, reth.dma_len)
                }
            };
            if plen > remaining || (ends && plen != remaining) {
                return inv(None);
            }
            if plen > 0 {
                match ctx
                    .mrs
                    .remote(rkey, self.pd, Access::REMOTE_WRITE, va, u64::from(plen))
                {
                    Ok((idx, off)) => ctx
                        .mrs
                        .bytes_mut(idx, off, plen as usize)
                        .copy_from_slice(pkt.payload),
                    Err(_) => return Exec::Fatal(Fatal(NakCode::RemoteAccessError, None)),
                }
            }
            if ends {
                self.in_msg = InMsg::None;
                if let Some(imm) = pkt.immdt {
                    let Some(wqe) = self.rq.pop_front() else {
                        return Exec::Rnr;
                    };
                    ctx.push(
                        self.recv_cq,
                        Completion {
                            wr_id: wqe.wr_id,
                            status: WcStatus::Success,
                            opcode: WcOpcode::RecvRdmaWithImm,
                            byte_len: total,
                            imm_data: Some(imm.0),
                            invalidated_rkey: None,
                            qp_num: self.qpn,
                        },
                    );
                }
                self.msn = self.msn.next();
            } else {
                self.in_msg = InMsg::Write {
                    va: va.wrapping_add(u64::from(plen)),
                    rkey,
                    remaining: remaining - plen,
                    total,
                };
            }
        } else if op == Opcode::RC_RDMA_READ_REQUEST {
            let Some(reth) = pkt.reth else {
                return inv(None);
            };
            if let Err(e) = self.check_reth(ctx, &reth, Access::REMOTE_READ) {
                return e;
            }
            let npkts = reth.dma_len.div_ceil(self.mtu).max(1);
            let last = p.add(npkts - 1);
            self.push_resource(Resource::Read {
                first: p,
                last,
                va: reth.va,
                rkey: reth.rkey,
                len: reth.dma_len,
            });
            self.msn = self.msn.next();
            self.push_resp(RespItem::Read(ReadJob {
                psn: p,
                first_psn: p,
                va: reth.va,
                rkey: reth.rkey,
                remaining: reth.dma_len,
                started: false,
            }));
            self.epsn = last.next();
            return Exec::Done;
        } else if op.is_atomic() {
            let Some(a) = pkt.atomic_eth else {
                return inv(None);
            };
            if a.va % 8 != 0 {
                return inv(None);
            }
            let Ok((idx, off)) = ctx
                .mrs
                .remote(a.rkey, self.pd, Access::REMOTE_ATOMIC, a.va, 8)
            else {
                return Exec::Fatal(Fatal(NakCode::RemoteAccessError, None));
            };
            let word = ctx.mrs.bytes_mut(idx, off, 8);
            let mut b = [0u8; 8];
            b.copy_from_slice(word);
            let orig = u64::from_le_bytes(b);
            let new = if op == Opcode::RC_COMPARE_SWAP {
                if orig == a.compare {
                    a.swap_add
                } else {
                    orig
                }
            } else {
                orig.wrapping_add(a.swap_add)
            };
            word.copy_from_slice(&new.to_le_bytes());
            self.push_resource(Resource::Atomic { psn: p, orig });
            self.msn = self.msn.next();
            self.push_resp(RespItem::AtomicAck {
                psn: p,
                orig,
                msn: self.msn,
            });
            self.epsn = p.next();
            return Exec::Done;
        } else {
            return inv(None);
        }
        self.epsn = p.next();
        if pkt.bth.ack_req {
            self.push_ack(p, Syndrome::ACK_UNLIMITED);
        }
        Exec::Done
    }
}
