//! The communication manager (IBTA Vol 1 ch. 12), sans-IO: the active and passive sides of RC
//! connection establishment (REQ → REP → RTU, REJ, MRA) and release (DREQ → DREP, TimeWait),
//! with the retries and response timeouts of §12.4 and §12.6, over MADs on QP1
//! ([`crate::gsi`]). It never reads a clock or draws a random number on its own: it is given
//! the time, the MADs that arrived, and a seed for its communication and transaction IDs.
//!
//! What it settles is what a QP needs to be connected: the peer's QPN and starting PSN, the
//! path MTU, READ/atomic depths each way, retry and RNR retry counts and the local ACK timeout
//! ([`Negotiated`], turned into [`ConnectParams`] by [`Negotiated::connect_params`]).
//!
//! RDMA-CM (Annex A11) conventions: service IDs in the TCP port space
//! ([`rdma_cm_service_id`]) and the `cma_hdr` at the start of REQ private data
//! ([`rdma_cm_req_private`]); consumer private data is carried both ways.
//!
//! Every count a peer can choose is bounded: connections ([`MAX_CONNECTIONS`]), queued events
//! and MADs ([`MAX_QUEUED`]). A REQ beyond them is rejected with `no_resources`.
use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
#[cfg(test)]
use std::net::Ipv6Addr;

use roce_proto::cm::{
    path_mtu_bytes, path_mtu_code, timeout_ns, CmPath, Drep, Dreq, Message, MessageView, Rej, Rep,
    Req, Rtu, SidrRep, SidrReq,
};
use roce_proto::mad::{self, Method, MgmtClass, Repr as MadRepr, Status};
use roce_proto::rdma_cm::{self, CmaHdr, PortSpace, CMA_HDR_LEN};
use roce_proto::{Psn, Qpn};

use crate::qp::ConnectParams;
use crate::rng::Rng;
use crate::time::Instant;

/// The CM class version this CM speaks (IBTA 1.2 and later; what Linux sends).
pub const CM_CLASS_VERSION: u8 = 2;

/// Connections (in any state) at most.
pub const MAX_CONNECTIONS: usize = 1024;

/// Events and outgoing MADs queued at most.
pub const MAX_QUEUED: usize = 1024;

/// REJ reasons this CM sends (§12.6.7.2, Table 112).
pub mod reason {
    /// No resources (the connection table or a queue is full).
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout: the peer did not answer within its retries.
    pub const TIMEOUT: u16 = 4;
    /// No listener on the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// A transport service this CM does not connect (only RC).
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// A REQ for a connection that is gone or still in TimeWait, or from a QP already
    /// connected here.
    pub const STALE_CONNECTION: u16 = 10;
    /// A path MTU that is not one of 256..4096.
    pub const INVALID_MTU: u16 = 26;
    /// The consumer refused.
    pub const CONSUMER_REJECT: u16 = 28;
}

/// The handle of a connection: its local communication ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// How the CM behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The CA GUID this CM puts in REQ and REP.
    pub ca_guid: u64,
    /// CM response timeout code (4.096 µs × 2^code; rdma_cm uses 20, 4.3 s): how long this
    /// CM tells the peer it takes to answer, and how long it waits for an answer to a DREQ.
    pub response_timeout: u8,
    /// Max CM retries (4 bits; rdma_cm uses 15): resends of a REQ, REP or DREQ before giving
    /// up.
    pub max_retries: u8,
    /// How long a released connection's IDs stay in TimeWait, in nanoseconds.
    pub time_wait_ns: u64,
    /// Seed of the communication and transaction IDs (give it from the OS CSPRNG).
    pub seed: u64,
}

impl Default for CmConfig {
    /// Response timeout code 16 (268 ms), 7 retries, 1 s TimeWait, seed 0.
    fn default() -> Self {
        Self {
            ca_guid: 0x0002_c903_0000_0001,
            response_timeout: 16,
            max_retries: 7,
            time_wait_ns: 1_000_000_000,
            seed: 0,
        }
    }
}

/// One side's QP and what it offers for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpOffer {
    /// The QP's number.
    pub qpn: Qpn,
    /// The first PSN it expects to **receive**: the REQ's or REP's Starting PSN, from which
    /// the other side sends. This is how Linux's CM and RDMA-CM read the field (`cm.c`: the
    /// active side's `rq_psn` and the passive side's `sq_psn` come from the REQ, the other two
    /// from the REP; a Linux capture shows the passive side sending from the REQ's PSN).
    pub starting_psn: Psn,
    /// READ/atomic requests it accepts as responder.
    pub responder_resources: u8,
    /// READ/atomic requests it keeps outstanding as requester.
    pub initiator_depth: u8,
    /// RNR retries the peer's requester may do against it (3 bits; 7 = infinite).
    pub rnr_retry_count: u8,
}

/// What the active side asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Our address.
    pub local: IpAddr,
    /// The passive side's address.
    pub peer: IpAddr,
    /// The service ID to connect to ([`rdma_cm_service_id`] for an RDMA-CM port).
    pub service_id: u64,
    /// Our QP.
    pub offer: QpOffer,
    /// Path MTU in bytes (256..4096).
    pub mtu: u32,
    /// Transport retry count (3 bits) both requesters use.
    pub retry_count: u8,
    /// Local ACK timeout code (5 bits) both requesters use.
    pub local_ack_timeout: u8,
    /// Private data (at most 92 bytes; [`rdma_cm_req_private`] for RDMA-CM's).
    pub private_data: Vec<u8>,
}

/// A REQ the passive side's consumer is to accept or reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRequest {
    /// Where it came from.
    pub peer: IpAddr,
    /// The address it was sent to.
    pub local: IpAddr,
    /// The service ID asked for.
    pub service_id: u64,
    /// The active side's QP.
    pub remote_qpn: Qpn,
    /// The first PSN the active side expects: ours to send from.
    pub starting_psn: Psn,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// READ/atomic requests the active side accepts as responder.
    pub responder_resources: u8,
    /// READ/atomic requests it keeps outstanding.
    pub initiator_depth: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// RNR retry count for our requester.
    pub rnr_retry_count: u8,
    /// Local ACK timeout code.
    pub local_ack_timeout: u8,
    /// The 92 bytes of private data (with RDMA-CM's `cma_hdr` first when it is RDMA-CM).
    pub private_data: Vec<u8>,
}

impl PeerRequest {
    /// RDMA-CM's `cma_hdr` and the consumer's private data after it, when the service ID is in
    /// an RDMA-CM port space and the header parses.
    pub fn rdma_cm(&self) -> Option<(CmaHdr, &[u8])> {
        rdma_cm::service_port(self.service_id)?;
        let h = CmaHdr::parse(&self.private_data).ok()??;
        Some((h, self.private_data.get(CMA_HDR_LEN..).unwrap_or(&[])))
    }
}

/// What both sides settled: everything a QP needs to go RESET → INIT → RTR → RTS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Our address.
    pub local: IpAddr,
    /// The peer's address.
    pub peer: IpAddr,
    /// Our QP.
    pub local_qpn: Qpn,
    /// The peer's QP.
    pub remote_qpn: Qpn,
    /// The first PSN we send.
    pub sq_psn: Psn,
    /// The first PSN the peer sends.
    pub rq_psn: Psn,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// READ/atomic requests we keep outstanding (our initiator depth, at most the peer's
    /// responder resources).
    pub max_rd_atomic: u8,
    /// READ/atomic requests we accept (our responder resources).
    pub max_dest_rd_atomic: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// RNR retries our requester may do (what the peer allows).
    pub rnr_retry: u8,
    /// Local ACK timeout code.
    pub timeout: u8,
    /// The peer's private data (the REP's for the active side; the REQ's, without an
    /// RDMA-CM `cma_hdr`, for the passive side).
    pub private_data: Vec<u8>,
}

impl Negotiated {
    /// `base` (path, access, RNR timer) with every field the CM settled filled in.
    pub fn connect_params(&self, base: ConnectParams) -> ConnectParams {
        ConnectParams {
            dest_qpn: self.remote_qpn,
            rq_psn: self.rq_psn,
            sq_psn: self.sq_psn,
            mtu: self.mtu,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            ..base
        }
    }
}

/// What happened, for the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// Passive side: a REQ to a listened service; answer with [`Cm::accept`] or [`Cm::reject`].
    Request {
        /// The connection.
        conn: ConnId,
        /// What it asks.
        req: PeerRequest,
    },
    /// Both sides: the connection is established (active: REP received and RTU sent;
    /// passive: RTU received).
    Established {
        /// The connection.
        conn: ConnId,
        /// What the QP is to be connected with.
        params: Negotiated,
    },
    /// Active side: the peer refused.
    Rejected {
        /// The connection.
        conn: ConnId,
        /// The REJ reason ([`roce_proto::cm::rej_reason_name`]).
        reason: u16,
        /// Its private data.
        private_data: Vec<u8>,
    },
    /// Either side: the peer never answered (every retry of the REQ, REP or DREQ used).
    TimedOut {
        /// The connection.
        conn: ConnId,
    },
    /// Either side: the connection was released (a DREQ received, or ours answered or timed
    /// out). The QP is to be moved to the error state or destroyed.
    Disconnected {
        /// The connection.
        conn: ConnId,
    },
    /// Passive side: a SIDR_REQ (§12.11) for a listened service; answer with
    /// [`Cm::sidr_reply`]. (One for a service nobody listens to is answered with status
    /// Unsupported by the CM itself.)
    SidrRequest {
        /// What it asks, and where to answer.
        req: SidrRequest,
    },
    /// Active side: the SIDR_REP to a [`Cm::sidr_request`] (the first; later copies are
    /// ignored). A `TimedOut` event with the same handle says none came.
    SidrReply {
        /// The handle [`Cm::sidr_request`] returned.
        conn: ConnId,
        /// [`roce_proto::cm::sidr_status_name`]: 0 is success.
        status: u8,
        /// The passive side's UD QP.
        qpn: Qpn,
        /// Its Q_Key.
        qkey: u32,
        /// Its private data.
        private_data: Vec<u8>,
    },
}

/// A SIDR_REQ the passive side's consumer is to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRequest {
    /// Where it came from.
    pub peer: IpAddr,
    /// The address it was sent to.
    pub local: IpAddr,
    /// Its transaction ID (the answer echoes it).
    pub tid: u64,
    /// Its request ID.
    pub request_id: u32,
    /// The service ID asked for.
    pub service_id: u64,
    /// The 216 bytes of private data (RDMA-CM's `cma_hdr` first when it is RDMA-CM).
    pub private_data: Vec<u8>,
}

impl SidrRequest {
    /// RDMA-CM's `cma_hdr` and the consumer's bytes after it, when the service ID is in an
    /// RDMA-CM port space and the header parses.
    pub fn rdma_cm(&self) -> Option<(CmaHdr, &[u8])> {
        rdma_cm::service_port(self.service_id)?;
        let h = CmaHdr::parse(&self.private_data).ok()??;
        Some((h, self.private_data.get(CMA_HDR_LEN..).unwrap_or(&[])))
    }
}

/// An outstanding SIDR_REQ of ours.
#[derive(Debug, Clone)]
struct Sidr {
    local: IpAddr,
    peer: IpAddr,
    tid: u64,
    msg: Message,
    deadline: Instant,
    wait_ns: u64,
    retries_left: u8,
}

/// Where a connection is (§12.9: the states a consumer can see).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmState {
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Passive: REQ received, waiting for the consumer.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Established.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Released; the IDs are kept until the TimeWait ends.
    TimeWait,
}

/// CM counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CmStats {
    /// MADs sent, first transmissions.
    pub sent: u64,
    /// MADs sent again after a response timeout (REQ, REP, DREQ).
    pub retries: u64,
    /// Answers sent again because the peer repeated itself (REP for a duplicate REQ, RTU for
    /// a duplicate REP, DREP for a duplicate DREQ).
    pub resent_answers: u64,
    /// Duplicate messages that needed no answer.
    pub duplicates: u64,
    /// REJs sent.
    pub rejects_sent: u64,
    /// Connections given up after their retries.
    pub timeouts: u64,
    /// MRAs received (each extends the wait for an answer).
    pub mras_received: u64,
    /// MADs that were not CM messages this CM handles, or named no connection of ours.
    pub ignored: u64,
    /// Events or MADs dropped because a queue was full.
    pub overflow: u64,
}

/// One connection.
#[derive(Debug, Clone)]
struct Conn {
    state: CmState,
    remote_id: u32,
    local: IpAddr,
    peer: IpAddr,
    tid: u64,
    /// What a response timeout resends (REQ, REP or DREQ).
    last: Option<Message>,
    deadline: Option<Instant>,
    wait_ns: u64,
    retries_left: u8,
    /// Filled as the exchange goes.
    params: Negotiated,
    /// Private data this side puts in its DREQ or DREP.
    release: Vec<u8>,
    /// The private data of the peer's DREQ or DREP, once one arrived.
    peer_release: Option<Vec<u8>>,
    /// Active: the private data of our RTU. Passive: that of the peer's RTU, once it arrived.
    confirm: Vec<u8>,
}

/// A MAD the CM wants sent to a peer's QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmOutput {
    /// Our address.
    pub local: IpAddr,
    /// The peer's address.
    pub peer: IpAddr,
    /// The whole MAD.
    pub mad: [u8; mad::MAD_LEN],
}

/// The CM of one port.
#[derive(Debug)]
pub struct Cm {
    config: CmConfig,
    rng: Rng,
    listeners: Vec<u64>,
    conns: BTreeMap<u32, Conn>,
    /// (peer, peer's communication ID) → ours, for REQs, REJs and DREQs that name only theirs.
    by_remote: BTreeMap<(IpAddr, u32), u32>,
    events: VecDeque<CmEvent>,
    out: VecDeque<CmOutput>,
    stats: CmStats,
    /// Our SIDR_REQs waiting for their SIDR_REP, by request ID.
    sidrs: BTreeMap<u32, Sidr>,
}

/// The service ID of an RDMA-CM port in the TCP port space (`RDMA_PS_TCP`, Annex A11.3).
pub const fn rdma_cm_service_id(port: u16) -> u64 {
    rdma_cm::service_id(PortSpace::TCP, port)
}

/// REQ private data as RDMA-CM writes it: its `cma_hdr` (version 0, the IP version, the
/// active side's source port, both addresses) followed by the consumer's bytes (at most 56).
pub fn rdma_cm_req_private(src: IpAddr, dst: IpAddr, src_port: u16, consumer: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; CMA_HDR_LEN + consumer.len().min(92 - CMA_HDR_LEN)];
    CmaHdr {
        version: 0,
        ip_version: if src.is_ipv4() { 4 } else { 6 },
        port: src_port,
        src,
        dst,
    }
    .emit(&mut p);
    let n = p.len() - CMA_HDR_LEN;
    p[CMA_HDR_LEN..].copy_from_slice(&consumer[..n]);
    p
}

/// The GID of an address as RoCEv2 writes it (IPv4-mapped for IPv4).
fn gid(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The address of a GID (IPv4 when it is IPv4-mapped).
#[cfg(test)]
fn gid_addr(g: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*g);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

fn copy_into<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = src.len().min(N);
    a[..n].copy_from_slice(&src[..n]);
    a
}

impl Cm {
    /// A CM with `config`.
    pub fn new(config: CmConfig) -> Self {
        Self {
            rng: Rng::new(config.seed),
            config,
            listeners: Vec::new(),
            conns: BTreeMap::new(),
            by_remote: BTreeMap::new(),
            events: VecDeque::new(),
            out: VecDeque::new(),
            stats: CmStats::default(),
            sidrs: BTreeMap::new(),
        }
    }

    /// Accepts REQs to `service_id` from now on.
    pub fn listen(&mut self, service_id: u64) {
        if !self.listeners.contains(&service_id) {
            self.listeners.push(service_id);
        }
    }

    /// Counters.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// Where a connection is (`None` once it is gone).
    pub fn state(&self, conn: ConnId) -> Option<CmState> {
        self.conns.get(&conn.0).map(|c| c.state)
    }

    /// Sets the private data this side sends when the connection is released: in its DREQ
    /// ([`Cm::disconnect`]) or in the DREP that answers the peer's DREQ (at most 220 bytes are
    /// sent). `false` for no such connection.
    pub fn set_release_data(&mut self, conn: ConnId, data: &[u8]) -> bool {
        match self.conns.get_mut(&conn.0) {
            Some(c) => {
                c.release.clear();
                c.release.extend_from_slice(&data[..data.len().min(220)]);
                true
            }
            None => false,
        }
    }

    /// Active side: sets the private data of the RTU that will confirm the connection (at most
    /// 224 bytes; set it before the REP arrives, right after [`Cm::connect`]). `false` for no
    /// such connection.
    pub fn set_confirm_data(&mut self, conn: ConnId, data: &[u8]) -> bool {
        match self.conns.get_mut(&conn.0) {
            Some(c) => {
                c.confirm.clear();
                c.confirm.extend_from_slice(&data[..data.len().min(224)]);
                true
            }
            None => false,
        }
    }

    /// Passive side: the private data of the peer's RTU, once it arrived.
    pub fn peer_confirm_data(&self, conn: ConnId) -> Option<&[u8]> {
        let c = self.conns.get(&conn.0)?;
        (c.state != CmState::RepSent && c.state != CmState::ReqRcvd).then_some(&c.confirm[..])
    }

    /// The private data of the peer's DREQ or DREP, once one arrived (kept through TimeWait).
    pub fn peer_release_data(&self, conn: ConnId) -> Option<&[u8]> {
        self.conns.get(&conn.0)?.peer_release.as_deref()
    }

    /// Connections in any state.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<CmOutput> {
        self.out.pop_front()
    }

    /// The earliest response timeout or TimeWait end.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let sidr = self.sidrs.values().map(|s| s.deadline).min();
        let conns = self.conns.values().filter_map(|c| c.deadline).min();
        match (sidr, conns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Active side: asks `peer` which UD QP serves `service_id` (SIDR_REQ, §12.11.1),
    /// resending it on response timeouts up to Max CM Retries; [`CmEvent::SidrReply`] or
    /// [`CmEvent::TimedOut`] follows. `private` is at most 216 bytes
    /// ([`rdma_cm_req_private`] for RDMA-CM's, with the UDP port space's service ID).
    pub fn sidr_request(
        &mut self,
        now: Instant,
        local: IpAddr,
        peer: IpAddr,
        service_id: u64,
        private: &[u8],
    ) -> Result<ConnId, u16> {
        if self.sidrs.len() >= MAX_CONNECTIONS {
            return Err(reason::NO_RESOURCES);
        }
        let id = loop {
            let id = self.new_id();
            if !self.sidrs.contains_key(&id) {
                break id;
            }
        };
        let tid = self.rng.next_u64();
        let msg = Message::SidrReq(SidrReq {
            request_id: id,
            partition_key: 0xffff,
            service_id,
            private_data: copy_into(private),
        });
        self.send(local, peer, tid, &msg);
        self.stats.sent += 1;
        let wait_ns = timeout_ns(self.config.response_timeout.min(31));
        self.sidrs.insert(
            id,
            Sidr {
                local,
                peer,
                tid,
                msg,
                deadline: now.add_nanos(wait_ns),
                wait_ns,
                retries_left: self.config.max_retries & 15,
            },
        );
        Ok(ConnId(id))
    }

    /// Passive side: answers a [`CmEvent::SidrRequest`] (SIDR_REP, §12.11.2) with `status`
    /// (0: our UD QP `qpn` with Q_Key `qkey` serves it).
    pub fn sidr_reply(
        &mut self,
        req: &SidrRequest,
        status: u8,
        qpn: Qpn,
        qkey: u32,
        private: &[u8],
    ) {
        let msg = Message::SidrRep(SidrRep {
            request_id: req.request_id,
            status,
            qpn: qpn.0 & 0x00ff_ffff,
            service_id: req.service_id,
            q_key: qkey,
            private_data: copy_into(private),
            ..SidrRep::default()
        });
        self.send(req.local, req.peer, req.tid, &msg);
        self.stats.sent += 1;
    }

    fn on_sidr_req(&mut self, peer: IpAddr, local: IpAddr, tid: u64, r: &SidrReq) {
        let req = SidrRequest {
            peer,
            local,
            tid,
            request_id: r.request_id,
            service_id: r.service_id,
            private_data: r.private_data.to_vec(),
        };
        if self.listeners.contains(&r.service_id) {
            self.event(CmEvent::SidrRequest { req });
        } else {
            // Nobody serves it (§12.11.2: status 1, service ID not supported).
            self.sidr_reply(&req, 1, Qpn(0), 0, &[]);
        }
    }

    fn on_sidr_rep(&mut self, peer: IpAddr, r: &SidrRep) {
        // Only the first answer counts; a late copy finds nothing (Linux may answer a
        // resent SIDR_REQ as a new request, with another status).
        let Some(s) = self.sidrs.get(&r.request_id) else {
            self.stats.duplicates += 1;
            return;
        };
        if s.peer != peer {
            self.stats.ignored += 1;
            return;
        }
        self.sidrs.remove(&r.request_id);
        self.event(CmEvent::SidrReply {
            conn: ConnId(r.request_id),
            status: r.status,
            qpn: Qpn(r.qpn),
            qkey: r.q_key,
            private_data: r.private_data.to_vec(),
        });
    }

    fn new_id(&mut self) -> u32 {
        loop {
            let id = self.rng.next_u64() as u32;
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn event(&mut self, e: CmEvent) {
        if self.events.len() >= MAX_QUEUED {
            self.stats.overflow += 1;
        } else {
            self.events.push_back(e);
        }
    }

    /// Queues `msg` to `peer` with transaction ID `tid`.
    fn send(&mut self, local: IpAddr, peer: IpAddr, tid: u64, msg: &Message) {
        let mut m = [0u8; mad::MAD_LEN];
        MadRepr {
            base_version: 1,
            mgmt_class: MgmtClass::CM,
            class_version: CM_CLASS_VERSION,
            method: Method::SEND,
            status: Status(0),
            class_specific: 0,
            transaction_id: tid,
            attribute_id: msg.kind().attribute_id(),
            reserved: 0,
            attribute_modifier: 0,
        }
        .emit(&mut m);
        msg.emit(&mut m[mad::HEADER_LEN..]);
        if self.out.len() >= MAX_QUEUED {
            self.stats.overflow += 1;
            return;
        }
        self.out.push_back(CmOutput {
            local,
            peer,
            mad: m,
        });
    }

    fn remove(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            if self.by_remote.get(&(c.peer, c.remote_id)) == Some(&id) {
                self.by_remote.remove(&(c.peer, c.remote_id));
            }
        }
    }

    /// Active side: sends a REQ. Fails (with the REJ reason it would get) when the options
    /// are invalid or the connection table is full.
    pub fn connect(&mut self, now: Instant, o: &ConnectOptions) -> Result<ConnId, u16> {
        let Some(mtu_code) = path_mtu_code(o.mtu) else {
            return Err(reason::INVALID_MTU);
        };
        if self.conns.len() >= MAX_CONNECTIONS {
            return Err(reason::NO_RESOURCES);
        }
        let id = self.new_id();
        let tid = self.rng.next_u64();
        let rt = self.config.response_timeout.min(31);
        let req = Req {
            local_comm_id: id,
            service_id: o.service_id,
            local_ca_guid: self.config.ca_guid,
            local_qpn: o.offer.qpn.0 & 0x00ff_ffff,
            responder_resources: o.offer.responder_resources,
            initiator_depth: o.offer.initiator_depth,
            remote_cm_response_timeout: rt,
            transport_service_type: 0,
            end_to_end_flow_control: 1,
            starting_psn: o.offer.starting_psn.value(),
            local_cm_response_timeout: rt,
            retry_count: o.retry_count & 7,
            partition_key: 0xffff,
            path_packet_payload_mtu: mtu_code,
            rnr_retry_count: o.offer.rnr_retry_count & 7,
            max_cm_retries: self.config.max_retries & 15,
            primary_path: CmPath {
                local_port_lid: 0xffff,
                remote_port_lid: 0xffff,
                local_port_gid: gid(o.local),
                remote_port_gid: gid(o.peer),
                hop_limit: 64,
                local_ack_timeout: o.local_ack_timeout & 31,
                ..CmPath::default()
            },
            private_data: copy_into(&o.private_data),
            ..Req::default()
        };
        let msg = Message::Req(req);
        self.send(o.local, o.peer, tid, &msg);
        self.stats.sent += 1;
        let wait_ns = timeout_ns(rt);
        self.conns.insert(
            id,
            Conn {
                state: CmState::ReqSent,
                remote_id: 0,
                local: o.local,
                peer: o.peer,
                tid,
                last: Some(msg),
                deadline: Some(now.add_nanos(wait_ns)),
                wait_ns,
                retries_left: self.config.max_retries & 15,
                params: Negotiated {
                    local: o.local,
                    peer: o.peer,
                    local_qpn: o.offer.qpn,
                    remote_qpn: Qpn(0),
                    // From the REP.
                    sq_psn: Psn::new(0),
                    rq_psn: o.offer.starting_psn,
                    mtu: o.mtu,
                    max_rd_atomic: o.offer.initiator_depth,
                    max_dest_rd_atomic: o.offer.responder_resources,
                    retry_cnt: o.retry_count & 7,
                    rnr_retry: 0,
                    timeout: o.local_ack_timeout & 31,
                    private_data: Vec::new(),
                },
                release: Vec::new(),
                peer_release: None,
                confirm: Vec::new(),
            },
        );
        Ok(ConnId(id))
    }

    /// Passive side: accepts a REQ announced by [`CmEvent::Request`] with our QP; sends REP.
    /// Returns what the QP is to be connected with: move it to RTR (or RTS) now, before the
    /// REP leaves, as §12.9.7 has the passive side do, since the active side may send as soon
    /// as it has the REP (the RTU and the first requests can arrive together).
    /// [`CmEvent::Established`] follows on the RTU. `None` when the connection is not
    /// waiting for an answer.
    pub fn accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        offer: QpOffer,
        private: &[u8],
    ) -> Option<Negotiated> {
        let c = self.conns.get_mut(&conn.0)?;
        if c.state != CmState::ReqRcvd {
            return None;
        }
        // Depths: no more than the other side can take.
        let rr = offer.responder_resources.min(c.params.max_dest_rd_atomic);
        let id = offer.initiator_depth.min(c.params.max_rd_atomic);
        c.params.local_qpn = offer.qpn;
        c.params.rq_psn = offer.starting_psn;
        c.params.max_dest_rd_atomic = rr;
        c.params.max_rd_atomic = id;
        let rep = Rep {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_id,
            local_qpn: offer.qpn.0 & 0x00ff_ffff,
            starting_psn: offer.starting_psn.value(),
            responder_resources: rr,
            initiator_depth: id,
            end_to_end_flow_control: 1,
            rnr_retry_count: offer.rnr_retry_count & 7,
            local_ca_guid: self.config.ca_guid,
            private_data: copy_into(private),
            ..Rep::default()
        };
        let msg = Message::Rep(rep);
        c.state = CmState::RepSent;
        c.last = Some(msg);
        c.deadline = Some(now.add_nanos(c.wait_ns));
        let (local, peer, tid) = (c.local, c.peer, c.tid);
        let params = c.params.clone();
        self.send(local, peer, tid, &msg);
        self.stats.sent += 1;
        Some(params)
    }

    /// Passive side: refuses a REQ announced by [`CmEvent::Request`] (REJ with `reason`,
    /// normally [`reason::CONSUMER_REJECT`]). `false` when it is not waiting for an answer.
    pub fn reject(&mut self, conn: ConnId, why: u16, private: &[u8]) -> bool {
        let Some(c) = self.conns.get(&conn.0) else {
            return false;
        };
        if c.state != CmState::ReqRcvd {
            return false;
        }
        let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
        self.send_rej(local, peer, tid, conn.0, remote, why, 0, private);
        self.remove(conn.0);
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rej(
        &mut self,
        local: IpAddr,
        peer: IpAddr,
        tid: u64,
        local_id: u32,
        remote_id: u32,
        why: u16,
        rejected: u8,
        private: &[u8],
    ) {
        // A Timeout REJ names the CA whose timer ran out in its ARI (§12.6.7.2, Table 112:
        // the 8-byte CA GUID); Linux matches such a REJ to its connection by that GUID and
        // ignores one without it.
        let (ari, ari_len) = if why == reason::TIMEOUT {
            let mut a = [0u8; 72];
            a[..8].copy_from_slice(&self.config.ca_guid.to_be_bytes());
            (a, 8)
        } else {
            ([0u8; 72], 0)
        };
        let rej = Rej {
            local_comm_id: local_id,
            remote_comm_id: remote_id,
            message_rejected: rejected,
            reject_info_length: ari_len,
            reason: why,
            ari,
            private_data: copy_into(private),
        };
        self.send(local, peer, tid, &Message::Rej(rej));
        self.stats.rejects_sent += 1;
    }

    /// Active side: refuses the REP that just established `conn` (its private data is not
    /// what the consumer needs), as §12.6.7 lets a requester: if the RTU has not left yet, it
    /// is withdrawn and a REJ (message rejected: REP) with `why` and `private` goes instead;
    /// otherwise the connection is released with a DREQ. Either way the peer is told, never
    /// left resending its REP. `false` when `conn` is not established.
    pub fn refuse_rep(&mut self, now: Instant, conn: ConnId, why: u16, private: &[u8]) -> bool {
        let Some(c) = self.conns.get(&conn.0) else {
            return false;
        };
        if c.state != CmState::Established {
            return false;
        }
        let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
        let before = self.out.len();
        self.out.retain(|o| {
            let h = MadRepr::parse(&mad::Packet::new_unchecked(&o.mad[..]));
            let is_rtu = h.is_ok_and(|h| h.attribute_id == Rtu::ATTRIBUTE_ID);
            let ours = MessageView::parse(Rtu::ATTRIBUTE_ID, &o.mad[mad::HEADER_LEN..])
                .and_then(|m| m.ok())
                .is_some_and(|m| matches!(m, MessageView::Rtu(r) if r.local_comm_id() == conn.0));
            !(is_rtu && ours && o.peer == peer)
        });
        if self.out.len() < before {
            self.stats.sent = self.stats.sent.saturating_sub(1);
            self.send_rej(local, peer, tid, conn.0, remote, why, 1, private);
            self.remove(conn.0);
            true
        } else {
            self.disconnect(now, conn)
        }
    }

    /// Either side: releases an established connection (DREQ). `false` when it is not
    /// established.
    pub fn disconnect(&mut self, now: Instant, conn: ConnId) -> bool {
        let wait_ns = timeout_ns(self.config.response_timeout.min(31));
        let retries = self.config.max_retries & 15;
        let tid = self.rng.next_u64();
        let Some(c) = self.conns.get_mut(&conn.0) else {
            return false;
        };
        if c.state != CmState::Established {
            return false;
        }
        let msg = Message::Dreq(Dreq {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_id,
            remote_qpn_eecn: c.params.remote_qpn.0 & 0x00ff_ffff,
            private_data: copy_into(&c.release),
        });
        c.state = CmState::DreqSent;
        c.tid = tid;
        c.last = Some(msg);
        c.wait_ns = wait_ns;
        c.retries_left = retries;
        c.deadline = Some(now.add_nanos(wait_ns));
        let (local, peer) = (c.local, c.peer);
        self.send(local, peer, tid, &msg);
        self.stats.sent += 1;
        true
    }

    /// Runs response timeouts and TimeWait ends. Call once `now >= poll_timeout()`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .sidrs
            .iter()
            .filter(|(_, s)| s.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(s) = self.sidrs.get_mut(&id) else {
                continue;
            };
            if s.retries_left == 0 {
                self.sidrs.remove(&id);
                self.stats.timeouts += 1;
                self.event(CmEvent::TimedOut { conn: ConnId(id) });
                continue;
            }
            s.retries_left -= 1;
            s.deadline = now.add_nanos(s.wait_ns);
            let (local, peer, tid, msg) = (s.local, s.peer, s.tid, s.msg);
            self.send(local, peer, tid, &msg);
            self.stats.retries += 1;
        }
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            match c.state {
                CmState::TimeWait => {
                    self.remove(id);
                }
                CmState::ReqSent | CmState::RepSent | CmState::DreqSent if c.retries_left > 0 => {
                    c.retries_left -= 1;
                    c.deadline = Some(now.add_nanos(c.wait_ns));
                    let (local, peer, tid) = (c.local, c.peer, c.tid);
                    if let Some(msg) = c.last {
                        self.send(local, peer, tid, &msg);
                        self.stats.retries += 1;
                    }
                }
                CmState::ReqSent | CmState::RepSent => {
                    // Given up: tell the peer (§12.6.7.2: REJ with reason Timeout).
                    let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
                    let rejected = if c.state == CmState::ReqSent { 0 } else { 1 };
                    self.send_rej(local, peer, tid, id, remote, reason::TIMEOUT, rejected, &[]);
                    self.stats.timeouts += 1;
                    self.remove(id);
                    self.event(CmEvent::TimedOut { conn: ConnId(id) });
                }
                CmState::DreqSent => {
                    // No DREP: released anyway, after TimeWait.
                    self.stats.timeouts += 1;
                    c.state = CmState::TimeWait;
                    c.deadline = Some(now.add_nanos(self.config.time_wait_ns));
                    self.event(CmEvent::Disconnected { conn: ConnId(id) });
                }
                CmState::ReqRcvd => {
                    // The consumer never answered: refuse for it (a Timeout REJ names a
                    // timer of ours the active side cannot match to its REQ; Linux drops it).
                    let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
                    self.send_rej(
                        local,
                        peer,
                        tid,
                        id,
                        remote,
                        reason::CONSUMER_REJECT,
                        0,
                        &[],
                    );
                    self.stats.timeouts += 1;
                    self.remove(id);
                    self.event(CmEvent::TimedOut { conn: ConnId(id) });
                }
                CmState::Established => c.deadline = None,
            }
        }
    }

    /// Handles a MAD received on QP1 from `peer` to our address `local`.
    pub fn handle_mad(&mut self, now: Instant, peer: IpAddr, local: IpAddr, bytes: &[u8]) {
        let Ok(p) = mad::Packet::new_checked(bytes) else {
            self.stats.ignored += 1;
            return;
        };
        let Ok(h) = MadRepr::parse(&p) else {
            self.stats.ignored += 1;
            return;
        };
        if h.mgmt_class != MgmtClass::CM
            || h.method != Method::SEND
            || h.class_version != CM_CLASS_VERSION
            || bytes.len() < mad::MAD_LEN
        {
            self.stats.ignored += 1;
            return;
        }
        let Some(Ok(msg)) = MessageView::parse(h.attribute_id, &bytes[mad::HEADER_LEN..]) else {
            self.stats.ignored += 1;
            return;
        };
        let tid = h.transaction_id;
        match msg {
            MessageView::Req(r) => self.on_req(now, peer, local, tid, &r.to_repr()),
            MessageView::Rep(r) => self.on_rep(now, peer, &r.to_repr()),
            MessageView::Rtu(r) => self.on_rtu(peer, &r.to_repr()),
            MessageView::Rej(r) => self.on_rej(now, peer, &r.to_repr()),
            MessageView::Mra(r) => {
                let id = r.remote_comm_id();
                match self.conns.get_mut(&id) {
                    Some(c)
                        if c.peer == peer
                            && matches!(c.state, CmState::ReqSent | CmState::RepSent) =>
                    {
                        // The peer needs longer: wait its service timeout on top.
                        c.deadline =
                            Some(now.add_nanos(
                                timeout_ns(r.service_timeout()).saturating_add(c.wait_ns),
                            ));
                        self.stats.mras_received += 1;
                    }
                    _ => self.stats.ignored += 1,
                }
            }
            MessageView::Dreq(r) => self.on_dreq(now, peer, local, tid, &r.to_repr()),
            MessageView::SidrReq(r) => self.on_sidr_req(peer, local, tid, &r.to_repr()),
            MessageView::SidrRep(r) => self.on_sidr_rep(peer, &r.to_repr()),
            MessageView::Drep(r) => {
                let id = r.remote_comm_id();
                match self.conns.get_mut(&id) {
                    Some(c) if c.peer == peer && c.state == CmState::DreqSent => {
                        c.peer_release = Some(r.private_data().to_vec());
                        c.state = CmState::TimeWait;
                        c.deadline = Some(now.add_nanos(self.config.time_wait_ns));
                        self.event(CmEvent::Disconnected { conn: ConnId(id) });
                    }
                    Some(c) if c.peer == peer && c.state == CmState::TimeWait => {
                        self.stats.duplicates += 1;
                    }
                    _ => self.stats.ignored += 1,
                }
            }
            _ => self.stats.ignored += 1,
        }
    }

    fn on_req(&mut self, now: Instant, peer: IpAddr, local: IpAddr, tid: u64, r: &Req) {
        // A REQ seen before: answer as before (§12.9.8.x duplicate REQ).
        if let Some(&id) = self.by_remote.get(&(peer, r.local_comm_id)) {
            let Some(c) = self.conns.get(&id) else {
                return;
            };
            match c.state {
                CmState::RepSent => {
                    let (l, p, t) = (c.local, c.peer, c.tid);
                    if let Some(msg) = c.last {
                        self.send(l, p, t, &msg);
                        self.stats.resent_answers += 1;
                    }
                }
                CmState::TimeWait => {
                    let (l, p, t, remote) = (c.local, c.peer, c.tid, c.remote_id);
                    self.send_rej(l, p, t, id, remote, reason::STALE_CONNECTION, 0, &[]);
                }
                _ => self.stats.duplicates += 1,
            }
            return;
        }
        let refuse = |this: &mut Self, why: u16| {
            this.send_rej(local, peer, tid, 0, r.local_comm_id, why, 0, &[]);
        };
        if !self.listeners.contains(&r.service_id) {
            return refuse(self, reason::INVALID_SERVICE_ID);
        }
        if r.transport_service_type != 0 {
            return refuse(self, reason::INVALID_TRANSPORT_TYPE);
        }
        let Some(mtu) = path_mtu_bytes(r.path_packet_payload_mtu) else {
            return refuse(self, reason::INVALID_MTU);
        };
        // The same remote QP connected here under another communication ID: stale.
        if self.conns.values().any(|c| {
            c.peer == peer
                && c.params.remote_qpn.0 == r.local_qpn
                && matches!(c.state, CmState::Established | CmState::RepSent)
        }) {
            return refuse(self, reason::STALE_CONNECTION);
        }
        if self.conns.len() >= MAX_CONNECTIONS || self.events.len() >= MAX_QUEUED {
            return refuse(self, reason::NO_RESOURCES);
        }
        let id = self.new_id();
        let req = PeerRequest {
            peer,
            local,
            service_id: r.service_id,
            remote_qpn: Qpn(r.local_qpn),
            starting_psn: Psn::new(r.starting_psn),
            mtu,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            local_ack_timeout: r.primary_path.local_ack_timeout,
            private_data: r.private_data.to_vec(),
        };
        let consumer = req
            .rdma_cm()
            .map_or_else(|| req.private_data.clone(), |(_, d)| d.to_vec());
        self.conns.insert(
            id,
            Conn {
                state: CmState::ReqRcvd,
                remote_id: r.local_comm_id,
                local,
                peer,
                tid,
                last: None,
                // The consumer has as long as the active side keeps retrying: after that
                // nobody waits for the answer (and a flood of REQs nobody answers does not
                // hold the table forever).
                deadline: Some(
                    now.add_nanos(
                        timeout_ns(r.remote_cm_response_timeout)
                            .saturating_mul(u64::from(r.max_cm_retries) + 1),
                    ),
                ),
                // The active side told how long it takes to answer a REP.
                wait_ns: timeout_ns(r.local_cm_response_timeout),
                retries_left: r.max_cm_retries,
                params: Negotiated {
                    local,
                    peer,
                    local_qpn: Qpn(0),
                    remote_qpn: Qpn(r.local_qpn),
                    // The REQ's Starting PSN is what the active side expects: we send from
                    // it; what we expect goes in the REP.
                    sq_psn: Psn::new(r.starting_psn),
                    rq_psn: Psn::new(0),
                    mtu,
                    // Upper bounds until `accept`: the peer's depths the other way round.
                    max_rd_atomic: r.responder_resources,
                    max_dest_rd_atomic: r.initiator_depth,
                    retry_cnt: r.retry_count,
                    rnr_retry: r.rnr_retry_count,
                    timeout: r.primary_path.local_ack_timeout,
                    private_data: consumer,
                },
                release: Vec::new(),
                peer_release: None,
                confirm: Vec::new(),
            },
        );
        self.by_remote.insert((peer, r.local_comm_id), id);
        self.event(CmEvent::Request {
            conn: ConnId(id),
            req,
        });
    }

    fn on_rep(&mut self, _now: Instant, peer: IpAddr, r: &Rep) {
        let id = r.remote_comm_id;
        let Some(c) = self.conns.get_mut(&id) else {
            self.stats.ignored += 1;
            return;
        };
        if c.peer != peer {
            self.stats.ignored += 1;
            return;
        }
        match c.state {
            CmState::ReqSent => {
                c.remote_id = r.local_comm_id;
                c.params.remote_qpn = Qpn(r.local_qpn);
                c.params.sq_psn = Psn::new(r.starting_psn);
                // Our requester's depth: no more than the peer accepts; and the reverse.
                c.params.max_rd_atomic = c.params.max_rd_atomic.min(r.responder_resources);
                c.params.max_dest_rd_atomic = c.params.max_dest_rd_atomic.min(r.initiator_depth);
                c.params.rnr_retry = r.rnr_retry_count;
                c.params.private_data = r.private_data.to_vec();
                c.state = CmState::Established;
                c.deadline = None;
                c.last = None;
                let (local, p, tid) = (c.local, c.peer, c.tid);
                let params = c.params.clone();
                let confirm: [u8; 224] = copy_into(&c.confirm);
                self.by_remote.insert((peer, r.local_comm_id), id);
                let rtu = Message::Rtu(Rtu {
                    local_comm_id: id,
                    remote_comm_id: r.local_comm_id,
                    private_data: confirm,
                });
                self.send(local, p, tid, &rtu);
                self.stats.sent += 1;
                self.event(CmEvent::Established {
                    conn: ConnId(id),
                    params,
                });
            }
            CmState::Established if c.remote_id == r.local_comm_id => {
                // Our RTU was lost: the peer resent its REP.
                let (local, p, tid) = (c.local, c.peer, c.tid);
                let rtu = Message::Rtu(Rtu {
                    local_comm_id: id,
                    remote_comm_id: r.local_comm_id,
                    private_data: copy_into(&c.confirm),
                });
                self.send(local, p, tid, &rtu);
                self.stats.resent_answers += 1;
            }
            _ => self.stats.duplicates += 1,
        }
    }

    fn on_rtu(&mut self, peer: IpAddr, r: &Rtu) {
        let id = r.remote_comm_id;
        match self.conns.get_mut(&id) {
            Some(c) if c.peer == peer && c.remote_id == r.local_comm_id => match c.state {
                CmState::RepSent => {
                    c.state = CmState::Established;
                    c.deadline = None;
                    c.last = None;
                    c.confirm = r.private_data.to_vec();
                    let params = c.params.clone();
                    self.event(CmEvent::Established {
                        conn: ConnId(id),
                        params,
                    });
                }
                _ => self.stats.duplicates += 1,
            },
            _ => self.stats.ignored += 1,
        }
    }

    fn on_rej(&mut self, now: Instant, peer: IpAddr, r: &Rej) {
        // A REJ names our ID as its remote one (zero when it rejects a REQ it could not
        // match; then our ID is found from the peer's, which it gives as its local one).
        let id = if r.remote_comm_id != 0 {
            r.remote_comm_id
        } else {
            match self.by_remote.get(&(peer, r.local_comm_id)) {
                Some(&id) => id,
                None => {
                    self.stats.ignored += 1;
                    return;
                }
            }
        };
        match self.conns.get(&id) {
            Some(c)
                if c.peer == peer
                    && matches!(
                        c.state,
                        CmState::ReqSent | CmState::RepSent | CmState::ReqRcvd
                    ) =>
            {
                self.remove(id);
                self.event(CmEvent::Rejected {
                    conn: ConnId(id),
                    reason: r.reason,
                    private_data: r.private_data.to_vec(),
                });
            }
            // The passive side gave up waiting for our RTU (all lost) and rejected its own
            // REP: the connection we believed established is gone (as Linux's CM does).
            Some(c)
                if c.peer == peer && c.state == CmState::Established && r.message_rejected == 1 =>
            {
                let deadline = Some(now.add_nanos(self.config.time_wait_ns));
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = CmState::TimeWait;
                    c.deadline = deadline;
                }
                self.event(CmEvent::Disconnected { conn: ConnId(id) });
            }
            _ => self.stats.ignored += 1,
        }
    }

    fn on_dreq(&mut self, now: Instant, peer: IpAddr, local: IpAddr, tid: u64, r: &Dreq) {
        let id = r.remote_comm_id;
        let drep = |this: &mut Self, local: IpAddr, data: &[u8]| {
            let m = Message::Drep(Drep {
                local_comm_id: r.remote_comm_id,
                remote_comm_id: r.local_comm_id,
                private_data: copy_into(data),
            });
            this.send(local, peer, tid, &m);
        };
        match self.conns.get_mut(&id) {
            Some(c) if c.peer == peer && c.remote_id == r.local_comm_id => match c.state {
                CmState::Established | CmState::DreqSent | CmState::RepSent => {
                    // Both released at once (DreqSent), or before our RTU arrived: either way
                    // the connection is gone.
                    c.state = CmState::TimeWait;
                    c.deadline = Some(now.add_nanos(self.config.time_wait_ns));
                    c.peer_release = Some(r.private_data.to_vec());
                    let (l, data) = (c.local, c.release.clone());
                    drep(self, l, &data);
                    self.stats.sent += 1;
                    self.event(CmEvent::Disconnected { conn: ConnId(id) });
                }
                CmState::TimeWait => {
                    let (l, data) = (c.local, c.release.clone());
                    drep(self, l, &data);
                    self.stats.resent_answers += 1;
                }
                _ => self.stats.duplicates += 1,
            },
            // §12.9.8.4: a DREQ for no connection is still answered with a DREP.
            _ => {
                drep(self, local, &[]);
                self.stats.ignored += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn rdma_cm_private_data_carries_the_addresses_and_the_consumer_bytes() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 1, 16, 62));
        let b = IpAddr::V4(Ipv4Addr::new(10, 1, 16, 61));
        let p = rdma_cm_req_private(a, b, 52471, &[1, 2, 3]);
        assert_eq!(p.len(), CMA_HDR_LEN + 3);
        let h = CmaHdr::parse(&{
            let mut full = [0u8; 92];
            full[..p.len()].copy_from_slice(&p);
            full
        })
        .unwrap()
        .unwrap();
        assert_eq!((h.src, h.dst, h.port, h.ip_version), (a, b, 52471, 4));
        assert_eq!(&p[CMA_HDR_LEN..], &[1, 2, 3]);
        assert_eq!(rdma_cm_service_id(18515), 0x0000_0000_0106_4853);
        assert_eq!(gid_addr(&gid(a)), a);
    }
}
