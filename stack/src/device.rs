//! The device context: protection domains, memory regions, completion queues and queue pairs,
//! and the sans-IO surface a driver or the simulator calls (the crate docs state the contract).
//!
//! One `Device` is one RoCEv2 endpoint: datagrams handed to [`Device::handle_datagram`] are
//! demultiplexed by the BTH destination QPN; [`Device::poll_transmit`] decides the order in
//! which the QPs' datagrams go on the wire, so the simulator and the sockets see one stream.
use std::collections::VecDeque;

use roce_proto::{Qpn, RocePacket};

use crate::cc::hpcc::IntStack;
use crate::cc::CongestionControl;
use crate::handle::{CqHandle, MrHandle, PdHandle};
use crate::memory::{Access, MemoryRegion, MrTable};
use crate::path::RxMeta;
use crate::qp::{
    ConnectParams, Ctx, ModifyError, PostError, Qp, QpAttr, QpCaps, QpState, Service, Transmit,
};
use crate::stats::{DropReason, QpStats};
use crate::time::Instant;
use crate::wr::{Completion, RecvRequest, WorkRequest};

/// Device-wide settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceConfig {
    /// QPN of the first QP created (QPNs are `qpn_base`, `qpn_base + 1`, …).
    pub qpn_base: u32,
    /// Most QPs.
    pub max_qps: u32,
    /// Datagrams one QP may send in a row before the next QP with output is served (a
    /// transmit scheduler's quantum). Runs of one QP's datagrams share addresses and ports,
    /// which is what lets a socket driver hand a whole run to one `sendmmsg`.
    pub tx_quantum: u32,
    /// Seed of the memory regions' key bytes and virtual addresses. The default (0) is
    /// deterministic, for simulations and tests; a device that talks to a network gets it from
    /// the operating system's CSPRNG (`roce-driver` does), so that an off-path sender cannot
    /// predict an rkey or an address.
    pub key_seed: u64,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            qpn_base: 0x11,
            max_qps: 1 << 16,
            tx_quantum: 16,
            key_seed: 0,
        }
    }
}

/// Why a QP could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateError {
    /// Unknown protection domain.
    #[error("no such protection domain")]
    NoSuchPd,
    /// Unknown completion queue.
    #[error("no such completion queue")]
    NoSuchCq,
    /// `max_qps` reached.
    #[error("too many queue pairs")]
    TooManyQps,
}

/// What [`Device::handle_datagram`] did with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// An RC or UC QP took it in sequence: from the one peer address it is connected to, to
    /// its own, through the transport checks of IBTA Vol 1 §9.6 (state, ICRC, header, P_Key),
    /// and at the PSN it expected (a request) or for a PSN it sent and has not seen
    /// acknowledged (a response). A sender that does not see the traffic cannot produce one
    /// without the QPN and a PSN in the window.
    Connected(Qpn),
    /// An RC or UC QP took it through the same checks, but not in sequence: a CNP (it has no
    /// PSN), a duplicate, a request out of sequence, a stale response. The QP handles it as
    /// §9.7 says and counts it; anyone who claims the peer's address can send one, so a link
    /// does not trust where it came from.
    OutOfSequence(Qpn),
    /// A UD QP placed it in a posted receive. Anyone with the Q_Key can send one.
    Datagram(Qpn),
    /// A MAD for the GSI QP (QP1), queued for the CM. Anyone can send one.
    Management,
    /// Dropped, and counted where it stopped (the device's, the QP's, the UD QP's or the
    /// GSI's counters).
    Dropped(Refusal),
}

impl Delivery {
    /// A QP took it (connected or UD): a sign of life of some peer. A MAD is not: anyone
    /// can send one.
    pub const fn accepted(&self) -> bool {
        matches!(
            self,
            Self::Connected(_) | Self::OutOfSequence(_) | Self::Datagram(_)
        )
    }

    /// A connected QP took it in sequence: the link may trust where it came from.
    pub const fn connected(&self) -> bool {
        matches!(self, Self::Connected(_))
    }
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// No base transport header to read.
    Malformed,
    /// No QP with the destination QPN.
    UnknownQp(Qpn),
    /// The RC or UC QP refused it in its transport checks.
    Qp {
        /// The QP.
        qpn: Qpn,
        /// The check it failed.
        reason: DropReason,
    },
    /// The UD QP refused it.
    Ud {
        /// The QP.
        qpn: Qpn,
        /// Why.
        reason: crate::qp::ud::UdRefusal,
    },
    /// QP1 refused it.
    Management(crate::qp::gsi::MadRefusal),
}

/// Which of the device's QP collections a QPN names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// QP1.
    Gsi,
    /// An RC or UC QP: index into `qps`.
    Connected(usize),
    /// A UD QP: index into `uds`.
    Datagram(usize),
}

/// A device context: owns every verbs object and is the sans-IO endpoint.
#[derive(Debug)]
pub struct Device {
    config: DeviceConfig,
    pds: u32,
    mrs: MrTable,
    cqs: Vec<VecDeque<Completion>>,
    qps: Vec<Qp>,
    /// QPs that may have something to send, in round-robin order (each at most once); the
    /// front one is being served.
    active: VecDeque<usize>,
    /// `in_active[i]`: QP `i` is in `active`.
    in_active: Vec<bool>,
    /// Datagrams the front QP of `active` has sent in its current turn.
    served: u32,
    /// Each QP's next deadline ([`Qp::poll_timeout`]) as of its last change, unless it is in
    /// `stale`: the device's deadline is the least of a short array, not a call into every
    /// QP and its congestion controller (asked after every datagram in a simulation).
    deadlines: Vec<Option<Instant>>,
    /// QPs changed since their `deadlines` entry was taken, each once (`is_stale`).
    stale: Vec<usize>,
    is_stale: Vec<bool>,
    /// Drops of datagrams that reached no QP.
    drops: QpStats,
    /// Datagrams accepted by a QP.
    accepted: u64,
    /// Of those, datagrams accepted by a connected (RC or UC) QP: from its one peer, in its
    /// PSN window.
    accepted_connected: u64,
    /// QP1: MADs in and out.
    gsi: crate::qp::gsi::Gsi,
    /// UD QPs, by index; their QPNs follow the RC range ([`Device::create_ud_qp`]).
    uds: Vec<crate::qp::ud::UdQp>,
    /// Shared receive queues.
    srqs: Vec<crate::srq::Srq>,
    /// Asynchronous events not yet taken.
    events: VecDeque<crate::srq::AsyncEvent>,
}

impl Default for Device {
    fn default() -> Self {
        Self::new(DeviceConfig::default())
    }
}

impl Device {
    /// An empty device.
    pub fn new(config: DeviceConfig) -> Self {
        Self {
            config,
            pds: 0,
            mrs: MrTable::new(config.key_seed),
            cqs: Vec::new(),
            qps: Vec::new(),
            active: VecDeque::new(),
            in_active: Vec::new(),
            served: 0,
            deadlines: Vec::new(),
            stale: Vec::new(),
            is_stale: Vec::new(),
            drops: QpStats::default(),
            accepted: 0,
            accepted_connected: 0,
            gsi: crate::qp::gsi::Gsi::default(),
            uds: Vec::new(),
            srqs: Vec::new(),
            events: VecDeque::new(),
        }
    }

    /// QP1, the general services interface: MADs received ([`crate::qp::gsi::Gsi::take`]) and to
    /// send ([`crate::qp::gsi::Gsi::send`]; they go out first from [`Device::poll_transmit`]).
    pub fn gsi(&mut self) -> &mut crate::qp::gsi::Gsi {
        &mut self.gsi
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> PdHandle {
        self.pds += 1;
        PdHandle(self.pds - 1)
    }

    /// Registers `len` zeroed bytes in `pd` with `access`.
    pub fn reg_mr(&mut self, pd: PdHandle, len: usize, access: Access) -> MrHandle {
        self.mrs.register(pd, len, access)
    }

    /// [`Device::reg_mr`] for a length a caller outside the program chose (a script, a
    /// testbench): `Err` instead of aborting the process when the bytes cannot be had.
    pub fn try_reg_mr(
        &mut self,
        pd: PdHandle,
        len: usize,
        access: Access,
    ) -> Result<MrHandle, std::collections::TryReserveError> {
        self.mrs.try_register(pd, len, access)
    }

    /// Registers a pattern region of `len` bytes in `pd` with `access`: reads (local sends,
    /// peers' READs) give the pattern's bytes, the transport's writes are checked against
    /// them and not stored ([`MemoryRegion::pattern_check`] says what was written and how
    /// much of it differed). It costs its bookkeeping, not its length: what a simulator
    /// needs to move and verify every byte of large flows. `None` when the pattern's period
    /// is 0 or runs past its bytes.
    pub fn reg_pattern_mr(
        &mut self,
        pd: PdHandle,
        len: usize,
        access: Access,
        pattern: crate::memory::Pattern,
    ) -> Option<MrHandle> {
        self.mrs.register_pattern(pd, len, access, pattern)
    }

    /// Deregisters a region; later accesses through its keys fail. `false` if unknown.
    pub fn dereg_mr(&mut self, mr: MrHandle) -> bool {
        self.mrs.deregister(mr)
    }

    /// A region (keys, address, bytes).
    pub fn mr(&self, mr: MrHandle) -> Option<&MemoryRegion> {
        self.mrs.get(mr)
    }

    /// A region, writable by the application.
    pub fn mr_mut(&mut self, mr: MrHandle) -> Option<&mut MemoryRegion> {
        self.mrs.get_mut(mr)
    }

    /// Makes a region's rkey valid again after a SEND with invalidate.
    pub fn revalidate_rkey(&mut self, mr: MrHandle) -> bool {
        self.mrs.revalidate(mr)
    }

    /// Creates a completion queue (unbounded; poll it regularly).
    pub fn create_cq(&mut self) -> CqHandle {
        self.cqs.push(VecDeque::with_capacity(256));
        CqHandle(self.cqs.len() as u32 - 1)
    }

    /// Creates a QP in RESET.
    pub fn create_qp(
        &mut self,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        caps: QpCaps,
    ) -> Result<Qpn, CreateError> {
        if pd.0 >= self.pds {
            return Err(CreateError::NoSuchPd);
        }
        if send_cq.0 as usize >= self.cqs.len() || recv_cq.0 as usize >= self.cqs.len() {
            return Err(CreateError::NoSuchCq);
        }
        if self.qps.len() as u32 >= self.config.max_qps
            || self.config.qpn_base + self.qps.len() as u32 > 0xff_fffe
        {
            return Err(CreateError::TooManyQps);
        }
        let qpn = Qpn(self.config.qpn_base + self.qps.len() as u32);
        self.qps.push(Qp::new(qpn, pd, send_cq, recv_cq, caps));
        self.in_active.push(false);
        // In RESET: no deadline.
        self.deadlines.push(None);
        self.is_stale.push(false);
        Ok(qpn)
    }

    /// Allocates a memory window of `pd` (IBTA Vol 1 §10.6.7): type 1 is bound with
    /// [`Device::bind_mw`], type 2 through a QP with [`Device::bind_mw_qp`]. Returns its
    /// first rkey (nothing can use it before a bind).
    pub fn alloc_mw(
        &mut self,
        pd: PdHandle,
        kind: crate::memory::MwType,
    ) -> Option<roce_proto::RKey> {
        (pd.0 < self.pds)
            .then(|| self.mrs.alloc_mw(pd, kind))
            .flatten()
    }

    /// Binds a type 1 window (named by its current rkey) to `[va, va + len)` of `mr` with
    /// remote `access`; the region must allow binding (`Access::MW_BIND`). Returns the new
    /// rkey (the key byte incremented). A length of 0 unbinds it.
    pub fn bind_mw(
        &mut self,
        rkey: roce_proto::RKey,
        mr: MrHandle,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<roce_proto::RKey, crate::memory::MwError> {
        self.mrs.bind_mw(rkey, mr, (va, len, access), None)
    }

    /// Binds a free type 2 window through `qpn` (only that QP may then use it, and only that
    /// QP's peer may invalidate it remotely), with the key byte `key_byte`. Done at once here,
    /// where a HCA executes it as a send-queue work request in order with the others.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw_qp(
        &mut self,
        qpn: Qpn,
        rkey: roce_proto::RKey,
        mr: MrHandle,
        va: u64,
        len: u64,
        access: Access,
        key_byte: u8,
    ) -> Result<roce_proto::RKey, crate::memory::MwError> {
        let pd = self
            .qp(qpn)
            .map(|q| q.pd())
            .ok_or(crate::memory::MwError::NoSuchWindow)?;
        self.mrs
            .bind_mw(rkey, mr, (va, len, access), Some((qpn, pd, key_byte)))
    }

    /// Invalidates a type 2 window of `pd` locally (verbs' local invalidate).
    pub fn invalidate_mw(
        &mut self,
        pd: PdHandle,
        rkey: roce_proto::RKey,
    ) -> Result<(), crate::memory::MwError> {
        self.mrs.invalidate_mw(pd, rkey, None)
    }

    /// Creates an unreliable connected QP (IBTA Vol 1 §9.8): SEND, SEND with immediate, WRITE
    /// and WRITE with immediate only, connected and moved to RTS like an RC QP
    /// ([`Device::connect_qp`]), with nothing acknowledged or retransmitted: a send completes
    /// once its last packet left, and a message cut by a lost packet is dropped by the peer.
    pub fn create_uc_qp(
        &mut self,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        caps: QpCaps,
    ) -> Result<Qpn, CreateError> {
        let qpn = self.create_qp(pd, send_cq, recv_cq, caps)?;
        if let Some(i) = self.idx(qpn) {
            self.qps[i].set_uc();
        }
        Ok(qpn)
    }

    /// Creates a shared receive queue of `pd` holding at most `max_wr` receive requests.
    pub fn create_srq(
        &mut self,
        pd: PdHandle,
        max_wr: u32,
    ) -> Result<crate::srq::SrqHandle, CreateError> {
        if pd.0 >= self.pds {
            return Err(CreateError::NoSuchPd);
        }
        self.srqs.push(crate::srq::Srq {
            pd,
            max_wr: max_wr.clamp(1, 1 << 20) as usize,
            queue: VecDeque::new(),
            limit: None,
        });
        Ok(crate::srq::SrqHandle(self.srqs.len() as u32 - 1))
    }

    /// Posts a receive request to a shared receive queue.
    pub fn post_srq_recv(
        &mut self,
        srq: crate::srq::SrqHandle,
        r: RecvRequest,
    ) -> Result<(), PostError> {
        let s = self
            .srqs
            .get_mut(srq.0 as usize)
            .ok_or(PostError::NoSuchSrq)?;
        if s.queue.len() >= s.max_wr {
            return Err(PostError::QueueFull);
        }
        if !self.mrs.check_sgl(s.pd, &r.sgl, true) {
            return Err(PostError::InvalidSge);
        }
        s.queue.push_back(r);
        Ok(())
    }

    /// Arms an SRQ's limit: the first time fewer than `limit` requests remain after one is
    /// taken, [`crate::srq::AsyncEvent::SrqLimitReached`] is raised and the limit disarmed.
    /// `false` for no such SRQ.
    pub fn arm_srq_limit(&mut self, srq: crate::srq::SrqHandle, limit: u32) -> bool {
        match self.srqs.get_mut(srq.0 as usize) {
            Some(s) => {
                s.limit = Some(limit as usize);
                true
            }
            None => false,
        }
    }

    /// Receive requests waiting on an SRQ.
    pub fn srq_len(&self, srq: crate::srq::SrqHandle) -> usize {
        self.srqs.get(srq.0 as usize).map_or(0, |s| s.queue.len())
    }

    /// The next asynchronous event.
    pub fn poll_async_event(&mut self) -> Option<crate::srq::AsyncEvent> {
        self.events.pop_front()
    }

    /// Creates an RC QP that takes its receive requests from `srq` (of the same PD).
    pub fn create_qp_with_srq(
        &mut self,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        caps: QpCaps,
        srq: crate::srq::SrqHandle,
    ) -> Result<Qpn, CreateError> {
        if self.srqs.get(srq.0 as usize).is_none_or(|s| s.pd != pd) {
            return Err(CreateError::NoSuchPd);
        }
        let qpn = self.create_qp(pd, send_cq, recv_cq, caps)?;
        if let Some(i) = self.idx(qpn) {
            self.qps[i].set_srq(srq);
        }
        Ok(qpn)
    }

    /// Creates a UD QP with Q_Key `qkey` whose messages are at most `mtu` bytes (one packet
    /// each) and whose queues hold `max_wr` requests each. It can be posted to at once (a UD
    /// QP needs no connection). Its QPN follows the RC QPNs' range, so the two never meet.
    pub fn create_ud_qp(
        &mut self,
        pd: PdHandle,
        send_cq: CqHandle,
        recv_cq: CqHandle,
        qkey: roce_proto::QKey,
        mtu: u32,
        max_wr: u32,
    ) -> Result<Qpn, CreateError> {
        if pd.0 >= self.pds {
            return Err(CreateError::NoSuchPd);
        }
        if send_cq.0 as usize >= self.cqs.len() || recv_cq.0 as usize >= self.cqs.len() {
            return Err(CreateError::NoSuchCq);
        }
        if self.uds.len() as u32 >= self.config.max_qps || !crate::qp::PATH_MTUS.contains(&mtu) {
            return Err(CreateError::TooManyQps);
        }
        let qpn = self.ud_qpn(self.uds.len());
        self.uds.push(crate::qp::ud::UdQp::new(
            qpn,
            pd,
            (send_cq, recv_cq),
            qkey,
            mtu,
            max_wr.clamp(1, 1 << 16) as usize,
        ));
        Ok(qpn)
    }

    /// The QPN of UD QP `i`: after the RC range, wrapping below 2^24 and past QPs 0 and 1.
    fn ud_qpn(&self, i: usize) -> Qpn {
        let n = (u64::from(self.config.qpn_base) + u64::from(self.config.max_qps) + i as u64)
            % 0x00ff_fffe;
        Qpn(n.max(2) as u32)
    }

    fn ud_idx(&self, qpn: Qpn) -> Option<usize> {
        // The inverse of `ud_qpn`, checked.
        const M: u64 = 0x00ff_fffe;
        let start = (u64::from(self.config.qpn_base) + u64::from(self.config.max_qps)) % M;
        let i = ((u64::from(qpn.0) + M - start) % M) as usize;
        (i < self.uds.len() && self.ud_qpn(i) == qpn).then_some(i)
    }

    /// A UD QP.
    pub fn ud_qp(&self, qpn: Qpn) -> Option<&crate::qp::ud::UdQp> {
        self.ud_idx(qpn).map(|i| &self.uds[i])
    }

    /// Posts a send to a UD QP.
    pub fn post_ud_send(&mut self, qpn: Qpn, wr: crate::qp::ud::UdSend) -> Result<(), PostError> {
        let i = self.ud_idx(qpn).ok_or(PostError::NoSuchQp)?;
        self.uds[i].post_send(&self.mrs, wr)
    }

    fn idx(&self, qpn: Qpn) -> Option<usize> {
        let i = qpn.0.checked_sub(self.config.qpn_base)? as usize;
        (i < self.qps.len()).then_some(i)
    }

    /// Where QP `qpn` lives: the one lookup every datagram and receive goes through. The
    /// connected range is checked first; UD QPNs follow it ([`Device::create_ud_qp`]).
    fn slot(&self, qpn: Qpn) -> Option<Slot> {
        if qpn == crate::qp::gsi::GSI_QPN {
            return Some(Slot::Gsi);
        }
        self.idx(qpn)
            .map(Slot::Connected)
            .or_else(|| self.ud_idx(qpn).map(Slot::Datagram))
    }

    /// The service of QP `qpn` (the GSI is UD); `None` for an unknown QP.
    pub fn service(&self, qpn: Qpn) -> Option<Service> {
        Some(match self.slot(qpn)? {
            Slot::Connected(i) => self.qps[i].service(),
            Slot::Datagram(_) | Slot::Gsi => Service::Ud,
        })
    }

    /// A QP (state, counters, path).
    pub fn qp(&self, qpn: Qpn) -> Option<&Qp> {
        self.qps.get(self.idx(qpn)?)
    }

    /// Every QP.
    pub fn qps(&self) -> impl Iterator<Item = &Qp> {
        self.qps.iter()
    }

    /// QP `i` may have changed: it may have something to send, and its deadline is taken
    /// again.
    fn mark(&mut self, i: usize) {
        if !self.in_active[i] {
            self.in_active[i] = true;
            self.active.push_back(i);
        }
        self.mark_stale(i);
    }

    /// QP `i`'s entry of `deadlines` is to be taken again.
    fn mark_stale(&mut self, i: usize) {
        if !self.is_stale[i] {
            self.is_stale[i] = true;
            self.stale.push(i);
        }
    }

    /// Brings `deadlines` up to date.
    fn refresh_deadlines(&mut self) {
        for i in self.stale.drain(..) {
            self.is_stale[i] = false;
            self.deadlines[i] = self.qps[i].poll_timeout();
        }
    }

    /// The QP and what it may touch; the QP is marked as possibly having output.
    fn split(&mut self, qpn: Qpn) -> Option<(&mut Qp, Ctx<'_>)> {
        let i = self.idx(qpn)?;
        self.mark(i);
        Some((
            &mut self.qps[i],
            Ctx {
                mrs: &mut self.mrs,
                cqs: &mut self.cqs,
                srq: crate::srq::SrqCtx {
                    srqs: &mut self.srqs,
                    events: &mut self.events,
                },
            },
        ))
    }

    /// Replaces a QP's congestion controller.
    pub fn set_congestion_control(&mut self, qpn: Qpn, cc: Box<dyn CongestionControl>) -> bool {
        match self.idx(qpn) {
            Some(i) => {
                self.qps[i].set_congestion_control(cc);
                self.mark(i);
                true
            }
            None => false,
        }
    }

    /// `ibv_modify_qp`: a state transition with its attributes. On error nothing changes.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr) -> Result<(), ModifyError> {
        let (qp, mut ctx) = self.split(qpn).ok_or(ModifyError::NoSuchQp)?;
        qp.modify(attr, &mut ctx)
    }

    /// Brings a QP to RTS connected as `c` says: RESET→INIT (when still in RESET), INIT→RTR,
    /// RTR→RTS. Stops at the first refused transition.
    pub fn connect_qp(&mut self, qpn: Qpn, c: &ConnectParams) -> Result<(), ModifyError> {
        if self.qp(qpn).ok_or(ModifyError::NoSuchQp)?.state() == QpState::Reset {
            self.modify_qp(qpn, &c.init_attr())?;
        }
        self.modify_qp(qpn, &c.rtr_attr())?;
        self.modify_qp(qpn, &c.rts_attr())
    }

    /// Posts a send-queue work request (RTS, SQD; in ERR it completes at once as flushed).
    pub fn post_send(&mut self, qpn: Qpn, wr: WorkRequest) -> Result<(), PostError> {
        let (qp, mut ctx) = self.split(qpn).ok_or(PostError::NoSuchQp)?;
        qp.post_send(wr, &mut ctx)
    }

    /// Posts a receive request (any state but RESET; in ERR it completes at once as flushed).
    pub fn post_recv(&mut self, qpn: Qpn, r: RecvRequest) -> Result<(), PostError> {
        match self.slot(qpn) {
            Some(Slot::Datagram(i)) => self.uds[i].post_recv(&self.mrs, r),
            Some(Slot::Connected(_)) => {
                let (qp, mut ctx) = self.split(qpn).ok_or(PostError::NoSuchQp)?;
                qp.post_recv(r, &mut ctx)
            }
            // QP1's receives are the device's own (its bounded MAD queue).
            Some(Slot::Gsi) | None => Err(PostError::NoSuchQp),
        }
    }

    /// Takes the oldest completion of a CQ.
    #[must_use]
    pub fn poll_cq(&mut self, cq: CqHandle) -> Option<Completion> {
        self.cqs.get_mut(cq.0 as usize)?.pop_front()
    }

    /// Takes the oldest completion of the first non-empty CQ (for callers that use one CQ or
    /// do not care which; [`Completion::qp_num`] tells the QP).
    #[must_use]
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cqs.iter_mut().find_map(VecDeque::pop_front)
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqHandle) -> usize {
        self.cqs.get(cq.0 as usize).map_or(0, VecDeque::len)
    }

    /// A received RoCEv2 UDP payload (BTH through ICRC) with what the link knows of its
    /// headers (addresses, ECN). Datagrams from anyone but the QP's peer, malformed datagrams,
    /// bad ICRCs, unknown QPs and wrong states are dropped and counted. Returns what happened
    /// to it: which kind of QP took it, or why it was dropped.
    pub fn handle_datagram(&mut self, now: Instant, meta: &RxMeta, datagram: &[u8]) -> Delivery {
        self.handle_datagram_int(now, meta, datagram, None)
    }

    /// Moves QP `qpn` to UDP source port `port` (another ECMP path) once its packets in
    /// flight are acknowledged; new request packets wait for that, so none overtakes on the
    /// new path. `false` for an unknown QP.
    pub fn repath_qp(&mut self, qpn: Qpn, port: u16) -> bool {
        match self.idx(qpn) {
            Some(i) => {
                self.qps[i].repath(port);
                self.mark(i);
                true
            }
            None => false,
        }
    }

    /// [`Device::handle_datagram`] for a datagram that carries in-network telemetry (the
    /// simulator's fabric stamps it): a request's is kept and echoed in the QP's next ACK; an
    /// ACK's goes to the QP's congestion control ([`CongestionControl::on_int`]).
    ///
    /// [`CongestionControl::on_int`]: crate::CongestionControl::on_int
    pub fn handle_datagram_int(
        &mut self,
        now: Instant,
        meta: &RxMeta,
        datagram: &[u8],
        int: Option<&IntStack>,
    ) -> Delivery {
        let qpn = match RocePacket::new_checked(datagram) {
            Ok(p) => p.bth().dest_qp(),
            Err(_) => {
                self.drops.drops.count(DropReason::Malformed);
                return Delivery::Dropped(Refusal::Malformed);
            }
        };
        match self.slot(qpn) {
            Some(Slot::Gsi) => match self.gsi.receive(meta, datagram) {
                Ok(()) => Delivery::Management,
                Err(why) => Delivery::Dropped(Refusal::Management(why)),
            },
            Some(Slot::Datagram(i)) => {
                let (mrs, cqs) = (&mut self.mrs, &mut self.cqs[..]);
                match self.uds[i].receive(mrs, cqs, meta, datagram) {
                    Ok(()) => {
                        self.accepted += 1;
                        Delivery::Datagram(qpn)
                    }
                    Err(reason) => Delivery::Dropped(Refusal::Ud { qpn, reason }),
                }
            }
            Some(Slot::Connected(_)) => {
                let Some((qp, mut ctx)) = self.split(qpn) else {
                    unreachable!("slot() found it")
                };
                match qp.handle_datagram(now, meta, datagram, int, &mut ctx) {
                    Ok(true) => {
                        self.accepted += 1;
                        self.accepted_connected += 1;
                        Delivery::Connected(qpn)
                    }
                    Ok(false) => {
                        self.accepted += 1;
                        Delivery::OutOfSequence(qpn)
                    }
                    Err(reason) => Delivery::Dropped(Refusal::Qp { qpn, reason }),
                }
            }
            None => {
                self.drops.drops.count(DropReason::UnknownQp);
                Delivery::Dropped(Refusal::UnknownQp(qpn))
            }
        }
    }

    /// Datagrams a QP accepted so far (from its peer, valid, in a receiving state): what a
    /// driver counts as a sign of life of the peer, where junk from elsewhere is not.
    pub fn accepted_datagrams(&self) -> u64 {
        self.accepted
    }

    /// Datagrams a connected (RC or UC) QP accepted in sequence so far
    /// ([`Delivery::Connected`]): from the one peer address it was connected to, to its own,
    /// in its PSN window. Unlike a UD datagram (anyone with the
    /// Q_Key) or a MAD (anyone), an off-path sender cannot produce one without guessing the
    /// QPN and PSN, so a driver may trust where such a datagram came from on the link.
    pub fn accepted_connected_datagrams(&self) -> u64 {
        self.accepted_connected
    }

    /// Runs expired timers. Call once `now >= poll_timeout()`; early calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.refresh_deadlines();
        for i in 0..self.qps.len() {
            if self.deadlines[i].is_some_and(|t| t <= now) {
                let mut ctx = Ctx {
                    mrs: &mut self.mrs,
                    cqs: &mut self.cqs,
                    srq: crate::srq::SrqCtx {
                        srqs: &mut self.srqs,
                        events: &mut self.events,
                    },
                };
                self.qps[i].handle_timeout(now, &mut ctx);
                self.mark(i);
            }
        }
    }

    /// The next datagram to send, written into `buf` (resized to its length). Call after any
    /// `handle_*`/`post_*` until `None`; the datagrams come in wire order.
    ///
    /// The order: QPs with output are served round robin, each for a run of up to
    /// [`DeviceConfig::tx_quantum`] datagrams; inside a QP, CNPs first, then requests and
    /// responses in turns ([`TX_RUN`](crate::qp::TX_RUN)). Idle QPs cost nothing.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        // Management datagrams first: few, small, and what connections wait on.
        if self.gsi.has_output() {
            if let Some(path) = self.gsi.poll_transmit(buf) {
                return Some(Transmit {
                    qpn: crate::qp::gsi::GSI_QPN,
                    len: buf.len(),
                    ecn: path.ecn,
                    path,
                    int: None,
                });
            }
        }
        for ud in &mut self.uds {
            if ud.has_output() {
                if let Some(path) = ud.poll_transmit(&self.mrs, &mut self.cqs, buf) {
                    return Some(Transmit {
                        qpn: ud.qpn(),
                        len: buf.len(),
                        ecn: path.ecn,
                        path,
                        int: None,
                    });
                }
            }
        }
        let quantum = self.config.tx_quantum.max(1);
        for _ in 0..=self.active.len() {
            let &i = self.active.front()?;
            if self.served >= quantum {
                // Its turn is over: to the back of the line.
                self.active.rotate_left(1);
                self.served = 0;
                continue;
            }
            self.mark_stale(i);
            let mut ctx = Ctx {
                mrs: &mut self.mrs,
                cqs: &mut self.cqs,
                srq: crate::srq::SrqCtx {
                    srqs: &mut self.srqs,
                    events: &mut self.events,
                },
            };
            let qp = &mut self.qps[i];
            match qp.poll_transmit(now, &mut ctx, buf) {
                Some(len) => {
                    self.served += 1;
                    return Some(Transmit {
                        qpn: qp.qpn(),
                        len,
                        ecn: qp.path().ecn,
                        path: *qp.path(),
                        int: qp.take_int_out(),
                    });
                }
                None => {
                    self.active.pop_front();
                    self.in_active[i] = false;
                    self.served = 0;
                }
            }
        }
        None
    }

    /// The earliest deadline of any QP (retransmit, RNR, pacing, congestion control).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let kept = self
            .deadlines
            .iter()
            .zip(&self.is_stale)
            .filter_map(|(&d, &stale)| if stale { None } else { d });
        let changed = self
            .stale
            .iter()
            .filter_map(|&i| self.qps[i].poll_timeout());
        let t = kept.chain(changed).min();
        debug_assert_eq!(
            t,
            self.qps.iter().filter_map(Qp::poll_timeout).min(),
            "the deadline cache missed a change"
        );
        t
    }

    /// Counters summed over every QP, plus the drops that reached no QP.
    pub fn stats(&self) -> QpStats {
        let mut s = self.drops;
        for qp in &self.qps {
            s.add(qp.stats());
        }
        s
    }

    /// The CQs a QP reports to: (send, receive).
    pub fn qp_cqs(&self, qpn: Qpn) -> Option<(CqHandle, CqHandle)> {
        self.qp(qpn).map(|q| (q.send_cq(), q.recv_cq()))
    }
}
