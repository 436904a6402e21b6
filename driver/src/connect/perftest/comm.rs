//! perftest's RDMA-CM "comm" connection (`perftest_communication.c`: `rdma_client_connect`,
//! `rdma_server_connect`, `rdma_write_keys`/`rdma_read_keys`) and, for `-R`, its data QPs'
//! RDMA-CM connections (`create_rdma_cm_connection`), through the layer's
//! [`CmSession`]: the session runs the CM (REQ/REP/RTU/REJ, SIDR, DREQ/DREP, the timeouts,
//! a set-up given up); this module decides which QP a request is for and moves the comm
//! QP's SENDs and receives, inside the endpoint's loop whenever the exchange waits for the
//! peer.
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_proto::rdma_cm::RDMA_UDP_QKEY;
use roce_proto::{Psn, QKey, Qpn};
use roce_stack::ud::{AddressHandle, UdSend, GRH_LEN};
use roce_stack::{
    Access, CcConfig, ConnectParams, Device, Instant, MrHandle, QpCaps, RecvRequest, Service,
    SgList, WcStatus, WorkRequest, WrOp,
};

use super::STEP_TIMEOUT;
use crate::connect::cm_session::{Ask, Asked, CmSession, Resolve, SessionEvent, Terms};
use crate::connect::qps::LocalQp;
use crate::connect::rdma_cm::{back_to_init, CmFailure};
use crate::connect::Side;
use crate::{
    AppError, Application, DriverError, Endpoint, PeerFault, Secrets, SetupFailure, Unsupported,
};

/// What [`Comm::wait`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// The comm connection is usable.
    Up,
    /// A message is in the inbox.
    Message,
    /// Every SEND posted completed.
    SendsDone,
    /// Every data QP is connected (client) or accepted (server).
    DataReady,
    /// Every connection is released.
    Released,
}

/// One data QP's RDMA-CM connection.
#[derive(Debug, Clone)]
pub(super) struct DataConn {
    pub(super) qp: LocalQp,
    pub(super) psn: Psn,
    /// Its connection (or resolution) in the session.
    pub(super) id: Option<usize>,
    pub(super) up: bool,
    pub(super) released: bool,
    /// UD: the peer's QP (the SIDR_REP's, or the server's from the client's first SEND).
    pub(super) remote_qpn: Option<Qpn>,
}

/// perftest's comm connection, and its data connections for `-R`.
pub(super) struct Comm {
    pub(super) session: CmSession,
    pub(super) client: bool,
    pub(super) local: IpAddr,
    pub(super) peer: Option<IpAddr>,
    pub(super) qp: LocalQp,
    pub(super) psn: Psn,
    /// Two receive slots of [`SLOT`] bytes, one send slot, then one slot per data QP (UD
    /// latency: the client's 4-byte SEND and its GRH).
    pub(super) mr: MrHandle,
    /// The comm connection in the session.
    pub(super) conn: Option<usize>,
    pub(super) up: bool,
    pub(super) comm_released: bool,
    pub(super) inbox: VecDeque<Vec<u8>>,
    pub(super) sends_posted: u64,
    pub(super) sends_done: u64,
    pub(super) data: Vec<DataConn>,
    pub(super) service: Service,
    pub(super) base: ConnectParams,
    /// UD with `-R` latency: the client's QPN travels in a SEND with immediate.
    pub(super) ud_hello: bool,
    /// Connecting the data QPs: their CQs are this module's until the application's.
    pub(super) data_phase: bool,
    pub(super) accepted: usize,
    pub(super) closing: bool,
    /// The closing record is being exchanged: the peer may release the connections as soon
    /// as it has ours (perftest destroys its ids right after `ctx_close_connection`'s
    /// exchange), so its DREQ can overtake the ACK of our last SEND.
    pub(super) last: bool,
    /// The peer released the connection before the closing exchange (a failure, unless the
    /// test running beside it had already ended: see [`Beside`]).
    pub(super) left_early: bool,
    pub(super) failure: Option<CommFault>,
    /// The comm QP's first PSNs are drawn from these (again after a set-up given up).
    secrets: Secrets,
    salt: u64,
    restarts: u64,
}

/// Why perftest's exchange over RDMA-CM failed (a peer's doing, seen by this end's check).
/// The CM's own failures (a REJ, no answer, a SIDR refusal) are the session's
/// ([`CmFailure`], [`crate::connect::sidr::SidrFailure`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommFault {
    /// The peer released a connection before the end of the test.
    #[error("the peer disconnected before the end of the test")]
    LeftEarly,
    /// The session gave the set-up up after the exchange had begun (it said why).
    #[error("the CM set-up was given up")]
    GivenUp,
    /// A UD QP whose Q_Key is not RDMA-CM's.
    #[error("the server's UD QP has Q_Key {0:#x}, not rdma_cm's {RDMA_UDP_QKEY:#x}")]
    QKey(u32),
    /// More messages than the exchange's turns allow.
    #[error("the peer sent messages out of turn")]
    OutOfTurn,
    /// A work request of the exchange (or a data QP's UD hello) completed in error.
    #[error("{what} failed: {status:?}")]
    Completion {
        /// Which request.
        what: &'static str,
        /// The device's status.
        status: WcStatus,
    },
    /// The exchange's receive could not be posted.
    #[error("the exchange's receive: {0}")]
    Post(#[source] roce_stack::PostError),
    /// The local CM would not send a request (its reason code).
    #[error(transparent)]
    CannotAsk(#[from] CmFailure),
}

impl From<CommFault> for AppError {
    fn from(f: CommFault) -> Self {
        Self::check("perftest's exchange over RDMA-CM", f)
    }
}

impl From<CommFault> for DriverError {
    fn from(f: CommFault) -> Self {
        AppError::from(f).into()
    }
}

/// Bytes of each of the comm QP's buffers: a binary key record and room to spare.
const SLOT: u32 = 64;
/// The send slot's offset.
const SEND_AT: u32 = 2 * SLOT;
/// The first data QP's slot.
const DATA_AT: u32 = 3 * SLOT;
/// REQ retries while a server is not listening yet (perftest's `rdma_cm_client_connection`;
/// the session waits [`CmSession::RETRY`] between them).
const DATA_RETRIES: u32 = 10;
/// The comm QP's receive `wr_id`s are its two slots; this one is a data QP's UD hello.
const HELLO_WR: u64 = u64::MAX;

impl Comm {
    pub(super) fn new(
        side: &mut Side,
        secrets: &Secrets,
        salt: u64,
        server: Option<SocketAddr>,
        port: u16,
    ) -> Result<Self, DriverError> {
        let qp = side.extra_rc_qp(QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            ..QpCaps::default()
        })?;
        let n = side.qps.len() as u32;
        let local = side.ep.local_addr().ip();
        let now = side.ep.now();
        let base = side.request().params;
        let terms = Terms {
            port: server.map_or(port, |s| s.port()),
            rnr_retry: 7,
            retry_count: 7,
            local_ack_timeout: base.timeout,
            base: comm_base(),
            not_listening_retries: DATA_RETRIES,
            ..Terms::default()
        };
        let name = "roce perf";
        let session = match server {
            Some(s) => {
                CmSession::client_with(local, now, &[], terms, secrets, salt, name, s.ip(), |_| {
                    Vec::new()
                })?
            }
            None => CmSession::listener(now, terms, secrets, salt, name)?,
        };
        let service = side.request().service;
        let dev = &mut side.ep.dev;
        let mr = dev.reg_mr(side.pd, (DATA_AT + n * SLOT) as usize, Access::LOCAL_WRITE);
        let mut comm = Self {
            session,
            client: server.is_some(),
            local,
            peer: server.map(|s| s.ip()),
            qp,
            psn: Psn::new(0),
            mr,
            conn: None,
            up: false,
            comm_released: false,
            inbox: VecDeque::new(),
            sends_posted: 0,
            sends_done: 0,
            data: Vec::new(),
            service,
            base,
            ud_hello: false,
            data_phase: false,
            accepted: 0,
            closing: false,
            last: false,
            left_early: false,
            failure: None,
            secrets: *secrets,
            salt,
            restarts: 0,
        };
        comm.psn = comm.draw_psn()?;
        comm.post_receives(dev)
            .map_err(|e| DriverError::step("comm QP receive", e))?;
        Ok(comm)
    }

    fn draw_psn(&self) -> Result<Psn, DriverError> {
        Ok(self
            .secrets
            .start_psns(1, self.salt ^ 0xc0de ^ (self.restarts << 32))?
            .first()
            .copied()
            .unwrap_or(Psn::new(0)))
    }

    /// The comm QP's two receives.
    fn post_receives(&self, dev: &mut Device) -> Result<(), roce_stack::PostError> {
        for slot in 0..2u32 {
            self.post_receive(dev, slot)?;
        }
        Ok(())
    }

    fn post_receive(&self, dev: &mut Device, slot: u32) -> Result<(), roce_stack::PostError> {
        let sgl = SgList::one(
            dev.mr(self.mr)
                .expect("registered")
                .sge(u64::from(slot * SLOT), SLOT),
        );
        dev.post_recv(
            self.qp.qpn,
            RecvRequest {
                wr_id: u64::from(slot),
                sgl,
            },
        )
    }

    /// Server: the session gave up a set-up before the exchange began (a REQ never
    /// confirmed, a REP refused): the comm QP back to INIT with a new first PSN and its
    /// receives, for the next client. Whoever saw the REP cannot speak into the next
    /// connection.
    fn listen_again(&mut self, dev: &mut Device) -> Result<(), AppError> {
        self.restarts += 1;
        back_to_init(dev, &self.qp, &comm_base());
        self.psn = self.draw_psn().map_err(|_| CommFault::GivenUp)?;
        self.post_receives(dev).map_err(CommFault::Post)?;
        self.conn = None;
        self.peer = None;
        self.inbox.clear();
        (self.sends_posted, self.sends_done) = (0, 0);
        Ok(())
    }

    pub(super) fn connect_comm(&mut self, now: Instant) -> Result<(), DriverError> {
        let ask = Ask {
            qp: self.qp,
            psn: self.psn,
            responder_resources: 0,
            initiator_depth: 0,
            mtu: 1024,
            local_ack_timeout: self.base.timeout,
            base: comm_base(),
            src_port: 0xc000,
            data: Vec::new(),
        };
        self.conn = Some(self.session.ask(now, ask)?);
        Ok(())
    }

    /// The data QPs this session connects, from `side`.
    pub(super) fn plan_data(&mut self, side: &Side, latency: bool) -> Result<(), DriverError> {
        if side.request().service == Service::Uc {
            return Err(Unsupported::Service(
                "-c UC with rdma_cm: roce's CM connects RC (REQ/REP) and UD (SIDR)",
            )
            .into());
        }
        self.service = side.request().service;
        self.base = side.request().params;
        self.ud_hello = latency && self.service == Service::Ud;
        if !self.client && self.service == Service::Ud {
            // UD QPs are resolved through SIDR in the UDP port space, on the same port.
            self.session.listen_ud();
        }
        self.data = side
            .qps
            .iter()
            .zip(&side.psns)
            .map(|(&qp, &psn)| DataConn {
                qp,
                psn,
                id: None,
                up: false,
                released: false,
                remote_qpn: None,
            })
            .collect();
        self.data_phase = true;
        Ok(())
    }

    /// Client: a REQ (or SIDR_REQ) for every data QP not connected yet; the session asks
    /// again while the server is not listening yet.
    pub(super) fn connect_data(&mut self, now: Instant) -> Result<(), CommFault> {
        for i in 0..self.data.len() {
            if self.data[i].id.is_some() {
                continue;
            }
            let d = &self.data[i];
            let src_port = 0xc001u16.wrapping_add(i as u16);
            let id = match self.service {
                Service::Ud => self.session.resolve(now, d.qp, src_port)?,
                _ => self.session.ask(
                    now,
                    Ask {
                        qp: d.qp,
                        psn: d.psn,
                        responder_resources: self.base.max_dest_rd_atomic,
                        initiator_depth: self.base.max_rd_atomic,
                        mtu: self.base.mtu,
                        local_ack_timeout: self.base.timeout,
                        base: self.base,
                        src_port,
                        data: Vec::new(),
                    },
                )?,
            };
            self.data[i].id = Some(id);
        }
        Ok(())
    }

    fn find(&self, id: usize) -> Option<usize> {
        self.data.iter().position(|d| d.id == Some(id))
    }

    fn ours(&self, id: usize) -> bool {
        self.conn == Some(id) || self.find(id).is_some()
    }

    pub(super) fn mark_released(&mut self, id: usize) {
        if self.conn == Some(id) {
            self.comm_released = true;
        }
        if let Some(i) = self.find(id) {
            self.data[i].released = true;
        }
    }

    fn fail(&mut self, why: CommFault) {
        self.failure.get_or_insert(why);
    }

    fn on_event(
        &mut self,
        dev: &mut Device,
        now: Instant,
        e: SessionEvent,
    ) -> Result<(), AppError> {
        match e {
            SessionEvent::Asked(a) => self.on_asked(dev, now, &a)?,
            SessionEvent::Resolve(r) => self.on_resolve(dev, &r)?,
            SessionEvent::Resolved { i, qpn, qkey } => self.on_resolved(dev, i, qpn, qkey)?,
            SessionEvent::Up(i) => {
                if self.conn == Some(i) {
                    self.up = true;
                    if !self.client {
                        // From here every step of the exchange has its own limit.
                        self.session.bounded_by_the_application();
                    }
                } else if let Some(k) = self.find(i) {
                    self.data[k].up = true;
                }
            }
            SessionEvent::Released(i) => {
                let ours = self.ours(i);
                self.mark_released(i);
                if ours && !self.closing && !self.last {
                    self.left_early = true;
                    self.fail(CommFault::LeftEarly);
                }
            }
            // A server whose set-up the session gave up (it said why): before the exchange
            // began it listens again; after, the exchange has failed.
            SessionEvent::Restarted if !self.up => self.listen_again(dev)?,
            SessionEvent::Restarted => self.fail(CommFault::GivenUp),
            SessionEvent::Accepted(_) => {}
        }
        Ok(())
    }

    /// Server: the first REQ is the exchange's; later ones, from the same peer during the
    /// data phase, connect the data QPs in arrival order (RC).
    fn on_asked(&mut self, dev: &mut Device, now: Instant, a: &Asked) -> Result<(), AppError> {
        if self.conn.is_none() {
            self.peer = Some(a.peer);
            self.local = a.local;
            // Ready to receive before the REP leaves; up only once the RTU says the client
            // is there: a REQ never confirmed does not start the exchange.
            let (qp, psn) = (self.qp, self.psn);
            let i = self.session.accept(
                dev,
                now,
                a,
                qp,
                psn,
                &comm_base(),
                (0, 0),
                CcConfig::None,
                0,
                &[],
            )?;
            self.conn = Some(i);
            return Ok(());
        }
        let i = self.accepted;
        if Some(a.peer) != self.peer
            || !self.data_phase
            || i >= self.data.len()
            || self.service != Service::Rc
        {
            self.session.refuse(a, &[]);
            return Ok(());
        }
        let depths = (
            self.base.max_dest_rd_atomic.min(a.initiator_depth.max(1)),
            self.base.max_rd_atomic.min(a.responder_resources),
        );
        let (qp, psn, base) = (self.data[i].qp, self.data[i].psn, self.base);
        let k = self
            .session
            .accept(dev, now, a, qp, psn, &base, depths, CcConfig::None, 0, &[])?;
        self.data[i].id = Some(k);
        self.data[i].up = true;
        self.accepted += 1;
        Ok(())
    }

    /// Server, UD: a SIDR_REQ for the next data QP (in arrival order), answered with its QPN
    /// and RDMA-CM's Q_Key; for a latency test, a receive posted first for the client's QPN.
    fn on_resolve(&mut self, dev: &mut Device, r: &Resolve) -> Result<(), AppError> {
        let i = self.accepted;
        let ok = self.data_phase
            && Some(r.peer) == self.peer
            && self.service == Service::Ud
            && i < self.data.len();
        if !ok {
            self.session.answer(r, None);
            return Ok(());
        }
        let q = self.data[i].qp;
        if self.ud_hello {
            // Room for the client's 4-byte SEND and the GRH before it.
            let at = DATA_AT + i as u32 * SLOT;
            let sgl = SgList::one(
                dev.mr(self.mr)
                    .expect("registered")
                    .sge(u64::from(at), GRH_LEN as u32 + 4),
            );
            dev.post_recv(
                q.qpn,
                RecvRequest {
                    wr_id: HELLO_WR,
                    sgl,
                },
            )
            .map_err(|e| AppError::post(i, "the UD hello's receive", e))?;
        } else {
            self.data[i].up = true;
        }
        self.session.answer(r, Some((q.qpn, RDMA_UDP_QKEY)));
        self.accepted += 1;
        Ok(())
    }

    /// Client, UD: the server's QP for data QP `id` (and for a latency test, a SEND with
    /// immediate telling it ours).
    fn on_resolved(
        &mut self,
        dev: &mut Device,
        id: usize,
        qpn: Qpn,
        qkey: u32,
    ) -> Result<(), AppError> {
        let Some(i) = self.find(id) else {
            return Ok(());
        };
        if qkey != RDMA_UDP_QKEY {
            self.fail(CommFault::QKey(qkey));
            return Ok(());
        }
        self.data[i].remote_qpn = Some(qpn);
        if !self.ud_hello {
            self.data[i].up = true;
            return Ok(());
        }
        let Some(peer) = self.peer else {
            return Ok(());
        };
        let q = self.data[i].qp;
        let at = DATA_AT + i as u32 * SLOT;
        let sgl = SgList::one(dev.mr(self.mr).expect("registered").sge(u64::from(at), 4));
        dev.post_ud_send(
            q.qpn,
            UdSend {
                wr_id: HELLO_WR,
                sgl,
                ah: AddressHandle {
                    local: self.local,
                    remote: peer,
                    remote_port: roce_proto::ROCEV2_UDP_PORT,
                    dest_qpn: qpn,
                    qkey: QKey(qkey),
                },
                imm: Some(q.qpn.0),
                signaled: true,
            },
        )
        .map_err(|e| AppError::post(i, "the UD hello", e))?;
        Ok(())
    }

    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        let cm = self.session.poll(dev, now);
        while let Some(e) = self.session.next_event() {
            if let Err(e) = self.on_event(dev, now, e) {
                self.session.flush(dev);
                return Err(e);
            }
        }
        if let Err(e) = cm {
            self.session.flush(dev);
            return Err(e);
        }
        while let Some(c) = dev.poll_cq(self.qp.recv_cq) {
            if c.status != WcStatus::Success {
                if !self.closing && !self.gone() {
                    self.fail(CommFault::Completion {
                        what: "the exchange's receive",
                        status: c.status,
                    });
                }
                continue;
            }
            let slot = (c.wr_id as u32).min(1);
            let len = c.byte_len.min(SLOT) as usize;
            let at = (slot * SLOT) as usize;
            let bytes = dev
                .mr(self.mr)
                .map(|m| m.as_slice()[at..at + len].to_vec())
                .unwrap_or_default();
            if self.inbox.len() >= 2 {
                self.fail(CommFault::OutOfTurn);
            }
            self.inbox.push_back(bytes);
            if let Err(e) = self.post_receive(dev, slot) {
                self.fail(CommFault::Post(e));
            }
        }
        while let Some(c) = dev.poll_cq(self.qp.send_cq) {
            if c.status != WcStatus::Success && !self.closing && !self.gone() {
                self.fail(CommFault::Completion {
                    what: "the exchange's SEND",
                    status: c.status,
                });
            }
            self.sends_done += 1;
        }
        if self.data_phase {
            self.poll_data(dev);
        }
        self.session.flush(dev);
        match self.failure.take() {
            Some(f) => Err(f.into()),
            None => Ok(()),
        }
    }

    /// UD latency with `-R`: the client's SEND with its QPN, on either side.
    fn poll_data(&mut self, dev: &mut Device) {
        for i in 0..self.data.len() {
            let q = self.data[i].qp;
            while let Some(c) = dev.poll_cq(q.send_cq).or_else(|| dev.poll_cq(q.recv_cq)) {
                if c.status != WcStatus::Success {
                    self.fail(CommFault::Completion {
                        what: "a data QP's UD hello",
                        status: c.status,
                    });
                    continue;
                }
                if self.client {
                    self.data[i].up = true;
                } else {
                    let src = c.src_qp.or(c.imm_data.map(Qpn));
                    self.data[i].remote_qpn = src;
                    self.data[i].up = src.is_some();
                }
            }
        }
    }

    /// The peer released the connection during the closing exchange: nothing more comes.
    pub(super) fn gone(&self) -> bool {
        self.last && self.comm_released
    }

    fn reached(&self, until: Until) -> bool {
        match until {
            Until::Up => self.up,
            Until::Message => !self.inbox.is_empty() || self.gone(),
            Until::SendsDone => self.sends_done >= self.sends_posted || self.gone(),
            Until::DataReady => {
                !self.data.is_empty()
                    && self.data.iter().all(|d| d.up)
                    && (self.client || self.accepted == self.data.len())
            }
            Until::Released => {
                (self.conn.is_none() || self.comm_released)
                    && self.data.iter().all(|d| d.released || d.id.is_none())
            }
        }
    }

    pub(super) async fn wait(
        &mut self,
        ep: &mut Endpoint,
        until: Until,
        silence: Duration,
    ) -> Result<(), DriverError> {
        if self.reached(until) {
            return Ok(());
        }
        let mut step = Step { comm: self, until };
        ep.run(&mut step, true, std::future::pending(), silence)
            .await?;
        Ok(())
    }

    pub(super) async fn send(
        &mut self,
        ep: &mut Endpoint,
        bytes: &[u8],
    ) -> Result<(), DriverError> {
        if self.gone() {
            // It has left; it needs nothing more from us.
            return Ok(());
        }
        if bytes.len() > SLOT as usize {
            return Err(Unsupported::MessageTooBig {
                len: bytes.len(),
                limit: SLOT,
            }
            .into());
        }
        let dev = &mut ep.dev;
        let mr = dev
            .mr_mut(self.mr)
            .ok_or(SetupFailure::Gone("the exchange's buffer"))?;
        mr.as_mut_slice()[SEND_AT as usize..SEND_AT as usize + bytes.len()].copy_from_slice(bytes);
        let sgl = SgList::one(mr.sge(u64::from(SEND_AT), bytes.len() as u32));
        dev.post_send(self.qp.qpn, WorkRequest::new(0, WrOp::Send, sgl))
            .map_err(|e| DriverError::step("the exchange's SEND", e))?;
        self.sends_posted += 1;
        self.wait(ep, Until::SendsDone, STEP_TIMEOUT).await
    }

    pub(super) async fn recv(&mut self, ep: &mut Endpoint) -> Result<Vec<u8>, DriverError> {
        self.wait(ep, Until::Message, STEP_TIMEOUT).await?;
        self.inbox
            .pop_front()
            .ok_or_else(|| PeerFault::invalid(super::ExchangeFault::NoClosingRecord).into())
    }
}

/// The comm QP's attributes around what the CM settles.
fn comm_base() -> ConnectParams {
    ConnectParams {
        min_rnr_timer: 12,
        ..ConnectParams::default()
    }
}

/// The comm connection alone, until `until`.
struct Step<'a> {
    comm: &'a mut Comm,
    until: Until,
}

impl Application for Step<'_> {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.comm.poll(dev, now)
    }

    fn done(&self) -> bool {
        self.comm.reached(self.until)
    }
}

/// A test's application with the comm connection beside it.
pub(super) struct Beside<'a, A> {
    pub(super) app: &'a mut A,
    pub(super) comm: &'a mut Comm,
    pub(super) until_message: bool,
}

impl<A: Application> Application for Beside<'_, A> {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.app.poll(dev, now)?;
        match self.comm.poll(dev, now) {
            // The test ended with the datagrams that came with the peer's DREQ (its last
            // ACK, its last message): the peer's leaving is then the end, not a failure.
            Err(_) if self.comm.left_early && !self.until_message && self.app.done() => Ok(()),
            r => r,
        }
    }

    fn done(&self) -> bool {
        if self.until_message {
            !self.comm.inbox.is_empty() || self.comm.gone()
        } else {
            self.app.done()
        }
    }
}
