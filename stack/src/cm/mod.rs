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
//! and MADs ([`MAX_QUEUED`]). A REQ beyond them is rejected with `no_resources`. So is every
//! time: a peer's response timeout codes (§12.6: 4.096 µs × 2^code, up to 2.4 hours) and MRAs
//! set the wait between resends within [`MIN_RESPONSE_WAIT_NS`] and a connection's whole
//! set-up within [`MAX_SETUP_NS`]; answers to messages that name no connection (a REJ to a
//! REQ, a DREP to a DREQ) and SIDR_REQs (which make no state, and whose every answer a
//! spoofed source could aim elsewhere) share one limit, [`MAX_UNSOLICITED_PER_S`] a second,
//! so the CM is no reflector for spoofed sources. A REQ naming a QPN a connection cannot have (0, 1, the
//! all-ones 0xffffff) or an invalid P_Key (§10.9.1.2: no key bits) is refused with
//! `unsupported_request`.
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

mod connection;
mod receive;
mod sidr;

/// The shortest wait between resends of a REQ, REP or DREQ (100 ms), whatever the peer's
/// timeout code asks: a REQ with zero timeouts does not make a set-up give up in microseconds.
pub const MIN_RESPONSE_WAIT_NS: u64 = 100_000_000;

/// The longest a connection stays in set-up (30 s), from its REQ until it is established,
/// rejected or given up, whatever the peer's timeout codes, retry counts and MRAs ask (a REQ's
/// codes can ask for 15 retries of 2.4 hours each). rdma_cm's own REQs (code 20, 15
/// retries) resend every 4.3 s: seven tries fit.
pub const MAX_SETUP_NS: u64 = 30_000_000_000;

/// Answers to messages that name no connection (a REJ refusing a REQ, a DREP to a DREQ for
/// nothing), at most this many a second; the rest are counted in
/// [`CmStats::rate_limited`] and dropped.
pub const MAX_UNSOLICITED_PER_S: u32 = 100;

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
    /// A request this CM does not support (a QPN or P_Key no connection can have).
    pub const UNSUPPORTED_REQUEST: u16 = 5;
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
    /// Answers to messages that named no connection, not sent: over
    /// [`MAX_UNSOLICITED_PER_S`].
    pub rate_limited: u64,
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
    /// When set-up ends whatever the timers say ([`MAX_SETUP_NS`] after the REQ).
    give_up: Instant,
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
    /// The second unsolicited answers are counted in, and how many were sent in it.
    unsolicited: (Instant, u32),
}

/// The wait between resends a timeout code asks for, at least [`MIN_RESPONSE_WAIT_NS`] and
/// at most [`MAX_SETUP_NS`].
fn response_wait_ns(code: u8) -> u64 {
    timeout_ns(code).clamp(MIN_RESPONSE_WAIT_NS, MAX_SETUP_NS)
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
            unsolicited: (Instant::from_nanos(0), 0),
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

    fn new_id(&mut self) -> u32 {
        loop {
            let id = self.rng.next_u64() as u32;
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// Whether one more answer to a message that named no connection may leave now (at most
    /// [`MAX_UNSOLICITED_PER_S`] in any second counted from the first of its answers); counts
    /// the ones that may not.
    fn unsolicited_allowed(&mut self, now: Instant) -> bool {
        let (start, sent) = &mut self.unsolicited;
        if now.saturating_duration_since(*start).as_nanos() >= 1_000_000_000 || *sent == 0 {
            *start = now;
            *sent = 0;
        }
        if *sent >= MAX_UNSOLICITED_PER_S {
            self.stats.rate_limited += 1;
            return false;
        }
        *sent += 1;
        true
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
