//! perftest's RDMA-CM "comm" connection (`perftest_communication.c`: `rdma_client_connect`,
//! `rdma_server_connect`, `rdma_write_keys`/`rdma_read_keys`) and, for `-R`, its data QPs'
//! RDMA-CM connections (`create_rdma_cm_connection`): the CM on QP1 and the comm QP's SENDs
//! and receives, run inside the endpoint's loop whenever the session waits for the peer.
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_proto::cm::rej_reason_name;
use roce_proto::rdma_cm::{service_id, PortSpace, RDMA_UDP_QKEY};
use roce_proto::{Psn, QKey, Qpn};
use roce_stack::cm::{
    rdma_cm_req_private, reason, Cm, CmEvent, ConnId, ConnectOptions, QpOffer, SidrRequest,
};
use roce_stack::ud::{AddressHandle, UdSend, GRH_LEN};
use roce_stack::{
    Access, CcConfig, ConnectParams, Device, Instant, MrHandle, QpCaps, RecvRequest, Service,
    SgList, WcStatus, WorkRequest, WrOp,
};

use super::STEP_TIMEOUT;
use crate::connect::qps::LocalQp;
use crate::connect::rdma_cm::{cm_config, connect_qp, flush, pump, CmFailure};
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
    pub(super) id: Option<ConnId>,
    pub(super) up: bool,
    pub(super) released: bool,
    /// UD: the peer's QP (the SIDR_REP's, or the server's from the client's first SEND).
    pub(super) remote_qpn: Option<Qpn>,
}

/// perftest's comm connection, and its data connections for `-R`.
pub(super) struct Comm {
    pub(super) cm: Cm,
    pub(super) client: bool,
    pub(super) local: IpAddr,
    pub(super) peer: Option<IpAddr>,
    pub(super) port: u16,
    pub(super) qp: LocalQp,
    pub(super) psn: Psn,
    /// Two receive slots of [`SLOT`] bytes, one send slot, then one slot per data QP (UD
    /// latency: the client's 4-byte SEND and its GRH).
    pub(super) mr: MrHandle,
    pub(super) conn: Option<ConnId>,
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
    pub(super) retry: Option<(Instant, u32)>,
    pub(super) closing: bool,
    /// The closing record is being exchanged: the peer may release the connections as soon
    /// as it has ours (perftest destroys its ids right after `ctx_close_connection`'s
    /// exchange), so its DREQ can overtake the ACK of our last SEND.
    pub(super) last: bool,
    /// The peer released the connection before the closing exchange (a failure, unless the
    /// test running beside it had already ended: see [`Beside`]).
    pub(super) left_early: bool,
    pub(super) failure: Option<CommFault>,
}

/// Which of the exchange's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The comm connection the records cross.
    Comm,
    /// Data QP `n`'s.
    Data(usize),
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Comm => write!(f, "the exchange's connection"),
            Self::Data(i) => write!(f, "data QP {i}'s connection"),
        }
    }
}

/// Why perftest's exchange over RDMA-CM failed (a peer's doing, seen by this end's check).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommFault {
    /// The server refused a data QP's REQs as not listening, every retry.
    #[error("the server refused data QP {qp}'s {what} {tries} times (not listening)")]
    NotListening {
        /// The data QP.
        qp: usize,
        /// What it refused.
        what: &'static str,
        /// The tries.
        tries: u32,
    },
    /// The server rejected a connection (IBTA Vol 1 Table 112).
    #[error("the server rejected {which}: {} ({reason})", rej_reason_name(*.reason).unwrap_or("unknown reason"))]
    Rejected {
        /// Which connection.
        which: Which,
        /// The REJ's reason.
        reason: u16,
    },
    /// The peer stopped answering the CM.
    #[error("{} stopped answering the CM (no REP, RTU or DREP)", .0.map_or_else(|| "the peer".to_string(), |p| p.to_string()))]
    Stopped(Option<IpAddr>),
    /// The peer released a connection before the end of the test.
    #[error("the peer disconnected before the end of the test")]
    LeftEarly,
    /// A SIDR_REP with a status other than 0 (IBTA Vol 1 Table 122).
    #[error("the server answered data QP {qp}'s SIDR_REQ with status {}", roce_proto::cm::sidr_status_name(*.status).unwrap_or("unknown"))]
    Sidr {
        /// The data QP.
        qp: usize,
        /// The status.
        status: u8,
    },
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
    /// This end has no server to ask (a client without one).
    #[error("no server to connect to")]
    NoServer,
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
/// REQ retries while a server is not listening yet (perftest's `rdma_cm_client_connection`).
const DATA_RETRIES: u32 = 10;
/// Their interval.
const RETRY_NS: u64 = 100_000_000;

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
        let psn = secrets
            .start_psns(1, salt ^ 0xc0de)?
            .first()
            .copied()
            .unwrap_or(Psn::new(0));
        let n = side.qps.len() as u32;
        let dev = &mut side.ep.dev;
        let mr = dev.reg_mr(side.pd, (DATA_AT + n * SLOT) as usize, Access::LOCAL_WRITE);
        for slot in 0..2u32 {
            let sgl = SgList::one(
                dev.mr(mr)
                    .expect("registered")
                    .sge(u64::from(slot * SLOT), SLOT),
            );
            dev.post_recv(
                qp.qpn,
                RecvRequest {
                    wr_id: u64::from(slot),
                    sgl,
                },
            )
            .map_err(|e| DriverError::step("comm QP receive", e))?;
        }
        let mut cm = Cm::new(cm_config(secrets, salt)?);
        if server.is_none() {
            cm.listen(service_id(PortSpace::TCP, port));
        }
        Ok(Self {
            cm,
            client: server.is_some(),
            local: side.ep.local_addr().ip(),
            peer: server.map(|s| s.ip()),
            port: server.map_or(port, |s| s.port()),
            qp,
            psn,
            mr,
            conn: None,
            up: false,
            comm_released: false,
            inbox: VecDeque::new(),
            sends_posted: 0,
            sends_done: 0,
            data: Vec::new(),
            service: side.request().service,
            base: side.request().params,
            ud_hello: false,
            data_phase: false,
            accepted: 0,
            retry: None,
            closing: false,
            last: false,
            left_early: false,
            failure: None,
        })
    }

    /// The comm QP: SEND/RECV only.
    fn comm_offer(&self) -> QpOffer {
        QpOffer {
            qpn: self.qp.qpn,
            starting_psn: self.psn,
            responder_resources: 0,
            initiator_depth: 0,
            rnr_retry_count: 7,
        }
    }

    fn data_offer(&self, i: usize) -> QpOffer {
        let d = &self.data[i];
        QpOffer {
            qpn: d.qp.qpn,
            starting_psn: d.psn,
            responder_resources: self.base.max_dest_rd_atomic,
            initiator_depth: self.base.max_rd_atomic,
            rnr_retry_count: 7,
        }
    }

    fn options(&self, offer: QpOffer, mtu: u32, src_port: u16) -> Option<ConnectOptions> {
        let peer = self.peer?;
        Some(ConnectOptions {
            local: self.local,
            peer,
            service_id: service_id(PortSpace::TCP, self.port),
            offer,
            mtu,
            retry_count: 7,
            local_ack_timeout: self.base.timeout,
            private_data: rdma_cm_req_private(self.local, peer, src_port, &[]),
        })
    }

    pub(super) fn connect_comm(&mut self, now: Instant) -> Result<(), DriverError> {
        let o = self
            .options(self.comm_offer(), 1024, 0xc000)
            .ok_or(CommFault::NoServer)?;
        let id = self.cm.connect(now, &o).map_err(CmFailure::CannotAsk)?;
        self.conn = Some(id);
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
            self.cm.listen(service_id(PortSpace::UDP, self.port));
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

    /// Client: a REQ (or SIDR_REQ) for every data QP not connected yet.
    pub(super) fn connect_data(&mut self, now: Instant) -> Result<(), CommFault> {
        for i in 0..self.data.len() {
            if self.data[i].id.is_some() {
                continue;
            }
            let src_port = 0xc001u16.wrapping_add(i as u16);
            let id = match self.service {
                Service::Ud => {
                    let peer = self.peer.unwrap_or(self.local);
                    let private = rdma_cm_req_private(self.local, peer, src_port, &[]);
                    self.cm.sidr_request(
                        now,
                        self.local,
                        peer,
                        service_id(PortSpace::UDP, self.port),
                        &private,
                    )
                }
                _ => {
                    let o = self
                        .options(self.data_offer(i), self.base.mtu, src_port)
                        .ok_or(CommFault::NoServer)?;
                    self.cm.connect(now, &o)
                }
            }
            .map_err(CmFailure::CannotAsk)?;
            self.data[i].id = Some(id);
        }
        Ok(())
    }

    fn find(&self, id: ConnId) -> Option<usize> {
        self.data.iter().position(|d| d.id == Some(id))
    }

    pub(super) fn mark_released(&mut self, id: ConnId) {
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

    /// Retries the REQs a server refused because it was not listening yet, or fails.
    fn refused(&mut self, now: Instant, i: usize, what: &'static str) {
        let attempts = self.retry.map_or(0, |(_, n)| n);
        if attempts >= DATA_RETRIES {
            self.fail(CommFault::NotListening {
                qp: i,
                what,
                tries: DATA_RETRIES,
            });
            return;
        }
        self.data[i].id = None;
        self.retry = Some((now.add_nanos(RETRY_NS), attempts + 1));
    }

    fn on_event(&mut self, dev: &mut Device, now: Instant, e: CmEvent) -> Result<(), AppError> {
        match e {
            CmEvent::Request { conn, req } => {
                let refuse = |cm: &mut Cm| {
                    cm.reject(conn, reason::CONSUMER_REJECT, &[]);
                };
                if self.client || req.rdma_cm().is_none() {
                    refuse(&mut self.cm);
                } else if self.conn.is_none() {
                    // The first REQ is the exchange's.
                    self.peer = Some(req.peer);
                    self.local = req.local;
                    self.conn = Some(conn);
                    // Ready to receive before the REP leaves; up only once the RTU (or
                    // the CM's established event) says the client is there: a REQ never
                    // confirmed must not start the session (the server gives it up).
                    if let Some(n) = self.cm.accept(now, conn, self.comm_offer(), &[]) {
                        connect_qp(dev, &self.qp, &n, &comm_base(), CcConfig::None, 0)?;
                    }
                } else if Some(req.peer) != self.peer
                    || !self.data_phase
                    || self.accepted >= self.data.len()
                    || self.service != Service::Rc
                {
                    refuse(&mut self.cm);
                } else {
                    let i = self.accepted;
                    let offer = QpOffer {
                        responder_resources: self
                            .base
                            .max_dest_rd_atomic
                            .min(req.initiator_depth.max(1)),
                        initiator_depth: self.base.max_rd_atomic.min(req.responder_resources),
                        ..self.data_offer(i)
                    };
                    if let Some(n) = self.cm.accept(now, conn, offer, &[]) {
                        let q = self.data[i].qp;
                        connect_qp(dev, &q, &n, &self.base, CcConfig::None, 0)?;
                        self.data[i].id = Some(conn);
                        self.data[i].up = true;
                        self.accepted += 1;
                    }
                }
            }
            CmEvent::Established { conn, params } => {
                if Some(conn) == self.conn {
                    if self.client {
                        connect_qp(dev, &self.qp, &params, &comm_base(), CcConfig::None, 0)?;
                    }
                    self.up = true;
                } else if let Some(i) = self.find(conn) {
                    if self.client {
                        let q = self.data[i].qp;
                        connect_qp(dev, &q, &params, &self.base, CcConfig::None, 0)?;
                    }
                    self.data[i].up = true;
                }
            }
            CmEvent::Rejected { conn, reason, .. } => {
                if Some(conn) == self.conn {
                    self.fail(CommFault::Rejected {
                        which: Which::Comm,
                        reason,
                    });
                } else if let Some(i) = self.find(conn) {
                    if reason == reason::INVALID_SERVICE_ID {
                        self.refused(now, i, "REQ");
                    } else {
                        self.fail(CommFault::Rejected {
                            which: Which::Data(i),
                            reason,
                        });
                    }
                }
            }
            CmEvent::TimedOut { conn } => {
                let released =
                    self.closing && (Some(conn) == self.conn || self.find(conn).is_some());
                if released {
                    self.mark_released(conn);
                } else if Some(conn) == self.conn || self.find(conn).is_some() {
                    self.fail(CommFault::Stopped(self.peer));
                }
            }
            CmEvent::Disconnected { conn } => {
                let ours = Some(conn) == self.conn || self.find(conn).is_some();
                self.mark_released(conn);
                if ours && !self.closing && !self.last {
                    self.left_early = true;
                    self.fail(CommFault::LeftEarly);
                }
            }
            CmEvent::SidrRequest { req } => self.on_sidr_request(dev, &req)?,
            CmEvent::SidrReply {
                conn,
                status,
                qpn,
                qkey,
                ..
            } => self.on_sidr_reply(dev, now, conn, status, qpn, qkey)?,
        }
        Ok(())
    }

    /// Server, UD: a SIDR_REQ for the next data QP (in arrival order), answered with its QPN
    /// and RDMA-CM's Q_Key; for a latency test, a receive posted first for the client's QPN.
    fn on_sidr_request(&mut self, dev: &mut Device, req: &SidrRequest) -> Result<(), AppError> {
        let i = self.accepted;
        let ok = !self.client
            && self.data_phase
            && Some(req.peer) == self.peer
            && self.service == Service::Ud
            && i < self.data.len()
            && req.rdma_cm().is_some();
        if !ok {
            // Status 2: rejected by the consumer.
            self.cm.sidr_reply(req, 2, Qpn(0), 0, &[]);
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
                    wr_id: u64::MAX,
                    sgl,
                },
            )
            .map_err(|e| AppError::post(i, "the UD hello's receive", e))?;
        } else {
            self.data[i].up = true;
        }
        self.cm.sidr_reply(req, 0, q.qpn, RDMA_UDP_QKEY, &[]);
        self.accepted += 1;
        Ok(())
    }

    /// Client, UD: the server's answer for data QP `conn`: its QPN (and for a latency test, a
    /// SEND with immediate telling it ours), or a retry while it is not listening yet.
    fn on_sidr_reply(
        &mut self,
        dev: &mut Device,
        now: Instant,
        conn: ConnId,
        status: u8,
        qpn: Qpn,
        qkey: u32,
    ) -> Result<(), AppError> {
        let Some(i) = self.find(conn) else {
            return Ok(());
        };
        if status == 1 {
            // Unsupported service: the server is not listening yet.
            self.refused(now, i, "SIDR_REQ");
            return Ok(());
        }
        if status != 0 {
            self.fail(CommFault::Sidr { qp: i, status });
            return Ok(());
        }
        if qkey != RDMA_UDP_QKEY {
            self.fail(CommFault::QKey(qkey));
            return Ok(());
        }
        self.data[i].remote_qpn = Some(qpn);
        if self.ud_hello {
            let Some(peer) = self.peer else {
                return Ok(());
            };
            let q = self.data[i].qp;
            let at = DATA_AT + i as u32 * SLOT;
            let sgl = SgList::one(dev.mr(self.mr).expect("registered").sge(u64::from(at), 4));
            dev.post_ud_send(
                q.qpn,
                UdSend {
                    wr_id: u64::MAX,
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
        } else {
            self.data[i].up = true;
        }
        Ok(())
    }

    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        pump(&mut self.cm, dev, now);
        while let Some(e) = self.cm.poll_event() {
            self.on_event(dev, now, e)?;
        }
        if let Some((at, _)) = self.retry {
            if at <= now {
                self.retry = self.retry.map(|(_, n)| (Instant::from_nanos(u64::MAX), n));
                if let Err(e) = self.connect_data(now) {
                    self.fail(e);
                }
            }
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
            let sgl = SgList::one(
                dev.mr(self.mr)
                    .expect("registered")
                    .sge(u64::from(slot * SLOT), SLOT),
            );
            if let Err(e) = dev.post_recv(
                self.qp.qpn,
                RecvRequest {
                    wr_id: u64::from(slot),
                    sgl,
                },
            ) {
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
        flush(&mut self.cm, dev);
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
