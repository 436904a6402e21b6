//! The CM session: the one place where connections through the IB CM (IBTA Vol 1 ch. 12)
//! and RDMA-CM (Annex A11) are asked for, accepted, confirmed, released and given up, and
//! UD QPs resolved (SIDR, §12.11): for applications whose QPs exist before the exchange
//! ([`Side`]: `rping`, `ucmatose`, `rdma_server`/`rdma_client`), for roce's own `--cm`
//! runs ([`super::cm_group`]), perftest's `-R` ([`super::perftest`]) and `udaddy`
//! ([`super::sidr`]). No other module matches the CM's events.
//!
//! A client asks for its connections when it is made ([`CmSession::client_with`]) or one
//! at a time ([`CmSession::ask`], [`CmSession::resolve`]); a request the server refuses as
//! not listening is asked again [`Terms::not_listening_retries`] times.
//!
//! A [`CmSession::listener`] makes no QPs of its own: each REQ is handed to the
//! application ([`SessionEvent::Asked`], with the consumer's private data), which makes the
//! QP it asks for and [`CmSession::accept`]s or [`CmSession::refuse`]s it (roce's own
//! `--cm` servers, whose REQs say how many QPs a run has). [`CmSession::client_with`] sends
//! private data of the application's in each REQ (and RTU, DREQ).
//!
//! An application hands a [`CmSession`] its QPs and its terms, calls [`CmSession::poll`]
//! from its own `poll` (the MADs in, the CM's timers, the silence bounds), acts on the
//! [`SessionEvent`]s it then holds, and ends its `poll` with [`CmSession::flush`] (the MADs
//! out). It never sees a REQ, REP, RTU or REJ.
//!
//! A server outlives its peers. A set-up that is never confirmed (no RTU; our REP refused),
//! one confirmed and then silent, and one the application finds broken
//! ([`CmSession::give_up`]: a completion error, a message it cannot take) each cost the
//! server that set-up only: the session releases what it can (DREQ), puts every QP back
//! to INIT with fresh start PSNs (so whoever saw the REP cannot speak into the next
//! connection), says so in one line naming the peer, and listens again
//! ([`SessionEvent::Restarted`]). A server serves one peer at a time: a REQ from anyone
//! else while a set-up is under way is refused (REJ consumer reject, "busy").
//! Every wait a peer controls is bounded: a set-up in progress that makes no progress (no
//! CM message, no datagram a connected QP took) for [`CmSession::SILENCE`] is given up,
//! and so is one not complete within [`CmSession::SETUP`] of its first REQ, whatever the
//! peer does.
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use roce_proto::rdma_cm::{service_id, PortSpace};
use roce_proto::{Psn, Qpn};
use roce_stack::cm::{rdma_cm_service_id, Cm, CmEvent, ConnId, PeerRequest, QpOffer, SidrRequest};
use roce_stack::{CcConfig, ConnectParams, Device, Instant};

use roce_stack::cm::reason::{CONSUMER_REJECT, INVALID_SERVICE_ID};

mod client;

pub use client::Ask;
use client::Request;

use super::rdma_cm::{back_to_init, connect_qp, flush, pump, CmFailure, SidrFailure};
use super::Side;
use crate::connect::qps::LocalQp;
use crate::{AppError, Secrets};

/// SIDR_REP status "service ID not supported" (IBTA Vol 1 Table 122): nothing listens.
const SIDR_NOT_LISTENING: u8 = 1;
/// SIDR_REP status "rejected by the consumer".
const SIDR_REJECTED: u8 = 2;

/// What both ends' QPs are offered and asked for, besides what the [`Side`] says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Terms {
    /// The RDMA-CM port (TCP port space).
    pub port: u16,
    /// READ/atomic requests this end's QPs take as responders (the REQ's or REP's
    /// responder resources).
    pub responder_resources: u8,
    /// READ/atomic requests they keep outstanding (initiator depth).
    pub initiator_depth: u8,
    /// RNR retries the peer may make against them (3 bits; 7: without end).
    pub rnr_retry: u8,
    /// The path MTU a client asks for.
    pub mtu: u32,
    /// The transport retry count a client asks for.
    pub retry_count: u8,
    /// The local ACK timeout code a client asks for.
    pub local_ack_timeout: u8,
    /// The attributes the CM does not settle (RNR timer, access).
    pub base: ConnectParams,
    /// Congestion control of the connected QPs (a client's; a listener's are given to
    /// [`CmSession::accept`]).
    pub cc: CcConfig,
    /// The line rate `cc` is clamped to, bits/s.
    pub line_rate_bps: u64,
    /// The source port in a client's REQs' RDMA-CM header.
    pub src_port: SourcePort,
    /// Client: how many times a request the server refused as not listening (a REJ with
    /// reason "invalid service ID", a SIDR_REP with status "service not supported") is
    /// asked again, [`CmSession::RETRY`] apart, before the refusal is the failure: a server
    /// that listens on a port only once the exchange before it says so (perftest's data
    /// QPs' with `-R`). librdmacm's examples: none.
    pub not_listening_retries: u32,
}

/// The source port a client's REQ names in RDMA-CM's header (Annex A11: the port of the
/// active side's address; nothing is sent from it over RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePort {
    /// One of the ephemeral range per connection, as librdmacm's examples bind.
    Ephemeral,
    /// This one for every connection (roce's own: 4791).
    Fixed(u16),
}

impl SourcePort {
    fn of(self, i: usize) -> u16 {
        match self {
            Self::Ephemeral => 0xc000 | (i as u16 & 0x3fff),
            Self::Fixed(p) => p,
        }
    }
}

impl Default for Terms {
    /// librdmacm's examples: port 0 (set it), one READ each way, RNR retries without end,
    /// MTU 1024, retry count 7, timeout 18, RNR timer 12.
    fn default() -> Self {
        Self {
            port: 0,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry: 7,
            mtu: 1024,
            retry_count: 7,
            local_ack_timeout: 18,
            base: ConnectParams {
                min_rnr_timer: 12,
                ..ConnectParams::default()
            },
            cc: CcConfig::None,
            line_rate_bps: 0,
            src_port: SourcePort::Ephemeral,
            not_listening_retries: 0,
        }
    }
}

/// What happened to the session, for the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// Server: connection `i` was accepted; its QP is ready to receive and the REP is about
    /// to leave. Post now what must be there before the peer sends.
    Accepted(usize),
    /// Connection `i` is established (client: the REP came and the RTU leaves; server: the
    /// RTU came); its QP sends.
    Up(usize),
    /// Connection `i` was released: the peer's DREQ, or the answer to ours.
    Released(usize),
    /// Server: the set-up with the last peer was given up. Every QP is back in INIT with
    /// new start PSNs, its queues empty and its completions drained; post again what the
    /// application posts before a peer connects. A listener's connections are forgotten:
    /// drop what was made for them.
    Restarted,
    /// Listener: a peer asks for a connection (a REQ from the peer of the set-up under way,
    /// or from anyone when none is): [`CmSession::accept`] or [`CmSession::refuse`] it.
    Asked(Asked),
    /// Listener on a UDP port ([`CmSession::listen_ud`]): a peer asks which UD QP serves it
    /// (a SIDR_REQ in RDMA-CM's form): [`CmSession::answer`] it, with a QP or a refusal.
    Resolve(Resolve),
    /// Client: the server answered resolution `i` ([`CmSession::resolve`]) with its UD QP.
    Resolved {
        /// The resolution.
        i: usize,
        /// The server's UD QP.
        qpn: Qpn,
        /// Its Q_Key.
        qkey: u32,
    },
}

/// A SIDR_REQ a listener hands its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolve {
    req: SidrRequest,
    /// Where it came from.
    pub peer: IpAddr,
    /// The address it was sent to.
    pub local: IpAddr,
}

/// A REQ a listener hands its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    conn: ConnId,
    /// Where it came from.
    pub peer: IpAddr,
    /// The consumer's private data (after RDMA-CM's header).
    pub data: Vec<u8>,
    /// The path MTU it asks for.
    pub mtu: u32,
    /// The address it was sent to.
    pub local: IpAddr,
    /// READ/atomic requests the peer takes as a responder.
    pub responder_resources: u8,
    /// READ/atomic requests the peer keeps outstanding.
    pub initiator_depth: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Idle,
    /// Server: accepted, waiting for the RTU. Client: REQ sent.
    Asked,
    Up,
    Closing,
    Released,
}

#[derive(Debug, Clone)]
struct Slot {
    qp: LocalQp,
    psn: Psn,
    conn: Option<ConnId>,
    state: SlotState,
    /// The peer's private data: its REP's (client) or REQ's (listener).
    data: Vec<u8>,
    /// The attributes the CM does not settle.
    base: ConnectParams,
    /// Client: what was asked, to ask again while the server is not listening.
    asked: Option<Request>,
    /// Client: the refusals as not listening so far, and when to ask again.
    refusals: u32,
    again_at: Option<Instant>,
}

impl Slot {
    fn new(qp: LocalQp, psn: Psn, base: ConnectParams) -> Self {
        Self {
            qp,
            psn,
            conn: None,
            state: SlotState::Idle,
            data: Vec::new(),
            base,
            asked: None,
            refusals: 0,
            again_at: None,
        }
    }
}

/// A side's QPs, each with its first PSN.
fn qps_of(side: &Side) -> Vec<(LocalQp, Psn)> {
    side.qps
        .iter()
        .copied()
        .zip(side.psns.iter().copied())
        .collect()
}

/// The session's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Listener,
    Client { peer: IpAddr },
}

/// The CM of one end and its connections, one per QP of the [`Side`] (see the module).
pub struct CmSession {
    cm: Cm,
    role: Role,
    terms: Terms,
    slots: Vec<Slot>,
    /// The peer of the set-up under way.
    peer: Option<IpAddr>,
    /// A client's address.
    local: IpAddr,
    /// The silence and set-up bounds apply (until the application takes them over).
    bounded: bool,
    events: VecDeque<SessionEvent>,
    secrets: Secrets,
    salt: u64,
    /// Set-ups given up.
    given_up: u64,
    /// When the set-up under way began, and last made progress.
    began: Instant,
    progress: Instant,
    /// `dev.accepted_connected_datagrams()` when last looked at.
    accepted: u64,
    /// The application's name for its lines ("roce rping").
    name: &'static str,
}

impl std::fmt::Debug for CmSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmSession")
            .field("role", &self.role)
            .field("peer", &self.peer)
            .field("given_up", &self.given_up)
            .finish_non_exhaustive()
    }
}

impl CmSession {
    /// How long a set-up under way may make no progress.
    pub const SILENCE: Duration = Duration::from_secs(10);
    /// How long a server's set-up may take from its first REQ until every connection is up.
    pub const SETUP: Duration = Duration::from_secs(30);
    /// How long a client waits before asking again a server that was not listening
    /// (perftest's `rdma_cm_client_connection`: 100 ms).
    pub const RETRY: Duration = Duration::from_millis(100);

    /// A server on `side`'s address, listening on RDMA-CM port `terms.port`, one connection
    /// per QP. `secrets` and `salt` draw the CM's IDs and, after a set-up is given up, the
    /// QPs' new start PSNs; `name` begins the lines it prints.
    pub fn server(
        side: &Side,
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
    ) -> Result<Self, crate::DriverError> {
        let (qps, now) = (qps_of(side), side.ep.now());
        let mut s = Self::new(now, &qps, terms, secrets, salt, name, Role::Server)?;
        s.cm.listen(rdma_cm_service_id(terms.port));
        Ok(s)
    }

    /// A client of `peer` on `side`'s address: one REQ per QP, each with RDMA-CM's header
    /// and nothing else, sent with the first [`CmSession::flush`].
    pub fn client(
        side: &Side,
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
        peer: IpAddr,
    ) -> Result<Self, crate::DriverError> {
        let qps = qps_of(side);
        Self::client_with(
            side.ep.local_addr().ip(),
            side.ep.now(),
            &qps,
            terms,
            secrets,
            salt,
            name,
            peer,
            |_| Vec::new(),
        )
    }

    /// A listener of SIDR_REQs only: RDMA-CM port `terms.port` in the UDP port space, each
    /// request a [`SessionEvent::Resolve`] (a REQ finds nothing listening).
    pub fn ud_listener(
        now: Instant,
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
    ) -> Result<Self, crate::DriverError> {
        Self::listening(now, terms, (secrets, salt), name, PortSpace::UDP)
    }

    /// A listener on `terms.port` of RDMA-CM port space `space`.
    fn listening(
        now: Instant,
        terms: Terms,
        (secrets, salt): (&Secrets, u64),
        name: &'static str,
        space: PortSpace,
    ) -> Result<Self, crate::DriverError> {
        let mut s = Self::new(now, &[], terms, secrets, salt, name, Role::Listener)?;
        s.cm.listen(service_id(space, terms.port));
        Ok(s)
    }

    /// Listener: answers SIDR_REQs for RDMA-CM port `terms.port` in the UDP port space too
    /// (IBTA Vol 1 §12.11; each is [`SessionEvent::Resolve`]).
    pub fn listen_ud(&mut self) {
        self.cm.listen(service_id(PortSpace::UDP, self.terms.port));
    }

    /// Listener: answers `r` with UD QP `qpn` and Q_Key `qkey`, or (`None`) refuses it
    /// (status 2, rejected).
    pub fn answer(&mut self, r: &Resolve, qp: Option<(Qpn, u32)>) {
        match qp {
            Some((qpn, qkey)) => self.cm.sidr_reply(&r.req, 0, qpn, qkey, &[]),
            None => self.cm.sidr_reply(&r.req, SIDR_REJECTED, Qpn(0), 0, &[]),
        }
    }

    /// A server listening on RDMA-CM port `terms.port` with no QPs of its own:
    /// each REQ is the application's to accept ([`SessionEvent::Asked`]).
    pub fn listener(
        now: Instant,
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
    ) -> Result<Self, crate::DriverError> {
        Self::listening(now, terms, (secrets, salt), name, PortSpace::TCP)
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        now: Instant,
        qps: &[(LocalQp, Psn)],
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
        role: Role,
    ) -> Result<Self, crate::DriverError> {
        Ok(Self {
            cm: Cm::new(super::rdma_cm::cm_config(secrets, salt)?),
            role,
            terms,
            slots: qps
                .iter()
                .map(|&(qp, psn)| Slot::new(qp, psn, terms.base))
                .collect(),
            local: IpAddr::from([0, 0, 0, 0]),
            bounded: true,
            peer: None,
            events: VecDeque::new(),
            secrets: *secrets,
            salt,
            given_up: 0,
            began: now,
            progress: now,
            accepted: 0,
            name,
        })
    }

    fn offer(&self, i: usize) -> QpOffer {
        QpOffer {
            qpn: self.slots[i].qp.qpn,
            starting_psn: self.slots[i].psn,
            responder_resources: self.terms.responder_resources,
            initiator_depth: self.terms.initiator_depth,
            rnr_retry_count: self.terms.rnr_retry,
        }
    }

    /// The peer of the set-up under way (the client's: its server).
    pub fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    /// The next thing that happened, in order.
    pub fn next_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// The MADs that came in and the timers that are due, then the silence bounds; what
    /// happened waits in [`CmSession::next_event`]. A client's failure (a REJ, no answer, a
    /// server gone quiet) is the `Err`; a server's is a set-up given up.
    pub fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        pump(&mut self.cm, dev, now);
        let accepted = dev.accepted_connected_datagrams();
        if accepted != self.accepted {
            self.accepted = accepted;
            self.progress = now;
        }
        while let Some(e) = self.cm.poll_event() {
            self.progress = now;
            self.on_event(dev, now, e)?;
        }
        for i in 0..self.slots.len() {
            if self.slots[i].again_at.is_some_and(|t| t <= now) {
                self.send_request(now, i)?;
            }
        }
        if self.bounded && self.is_server() && self.under_way() {
            let quiet = now.saturating_duration_since(self.progress);
            let long = now.saturating_duration_since(self.began);
            if quiet >= Self::SILENCE {
                self.give_up(dev, now, "silent for 10 s");
            } else if long >= Self::SETUP && !self.all_up_or_after() {
                self.give_up(dev, now, "not connected within 30 s of its REQ");
            }
        }
        Ok(())
    }

    /// Hands the MADs the session made to QP1. Call last in the application's `poll`.
    pub fn flush(&mut self, dev: &mut Device) {
        flush(&mut self.cm, dev);
    }

    /// Ends an application's `poll` whose own turn came out as `turn`: a server gives up
    /// the client the turn failed on ([`CmSession::give_up`], the error as the reason) and
    /// listens again; a client fails with it. The MADs leave either way.
    pub fn finish(
        &mut self,
        dev: &mut Device,
        now: Instant,
        turn: Result<(), AppError>,
    ) -> Result<(), AppError> {
        if let Err(e) = turn {
            if !self.is_server() {
                self.flush(dev);
                return Err(e);
            }
            // A client that broke the exchange costs the server that client only.
            self.give_up(dev, now, &e.to_string());
        }
        self.flush(dev);
        Ok(())
    }

    /// Releases connection `i` (DREQ). `false` when it was not up: a crossing DREQ from the
    /// peer already released it, and [`SessionEvent::Released`] was or will be said.
    pub fn disconnect(&mut self, now: Instant, i: usize) -> bool {
        let Some(s) = self.slots.get_mut(i) else {
            return false;
        };
        if s.state != SlotState::Up {
            return false;
        }
        s.state = SlotState::Closing;
        s.conn.is_some_and(|c| self.cm.disconnect(now, c))
    }

    /// A connection with `peer` is being accepted: its set-up's clock starts with the first.
    fn begin(&mut self, now: Instant, peer: IpAddr) {
        if !self.under_way() {
            self.began = now;
        }
        self.peer = Some(peer);
    }

    fn under_way(&self) -> bool {
        self.slots.iter().any(|s| {
            matches!(
                s.state,
                SlotState::Asked | SlotState::Up | SlotState::Closing
            )
        })
    }

    fn all_up_or_after(&self) -> bool {
        self.slots
            .iter()
            .all(|s| s.state != SlotState::Idle && s.state != SlotState::Asked)
    }

    fn find(&self, conn: ConnId) -> Option<usize> {
        self.slots.iter().position(|s| s.conn == Some(conn))
    }

    fn on_event(&mut self, dev: &mut Device, now: Instant, e: CmEvent) -> Result<(), AppError> {
        match e {
            CmEvent::SidrRequest { req } => {
                if self.role != Role::Listener || req.rdma_cm().is_none() {
                    // Not RDMA-CM's, or a session that resolves nothing.
                    self.cm.sidr_reply(&req, SIDR_REJECTED, Qpn(0), 0, &[]);
                } else {
                    self.events.push_back(SessionEvent::Resolve(Resolve {
                        peer: req.peer,
                        local: req.local,
                        req,
                    }));
                }
            }
            CmEvent::SidrReply {
                conn,
                status,
                qpn,
                qkey,
                ..
            } => {
                let (Some(i), Role::Client { peer }) = (self.find(conn), self.role) else {
                    return Ok(());
                };
                match status {
                    0 => {
                        self.slots[i].state = SlotState::Up;
                        self.events
                            .push_back(SessionEvent::Resolved { i, qpn, qkey });
                    }
                    SIDR_NOT_LISTENING if self.not_listening(now, i) => {}
                    _ => return Err(AppError::Sidr(SidrFailure::Refused { peer, status })),
                }
            }
            CmEvent::Request { conn, req } => self.on_request(dev, now, conn, &req)?,
            CmEvent::Established { conn, params } => {
                let Some(i) = self.find(conn) else {
                    return Ok(());
                };
                if matches!(self.role, Role::Client { .. }) {
                    let (q, base) = (self.slots[i].qp, self.slots[i].base);
                    let t = &self.terms;
                    connect_qp(dev, &q, &params, &base, t.cc, t.line_rate_bps)?;
                    self.slots[i].data = params.private_data;
                }
                self.slots[i].state = SlotState::Up;
                self.events.push_back(SessionEvent::Up(i));
            }
            CmEvent::Rejected {
                conn,
                reason,
                private_data,
            } => match self.role {
                Role::Client { peer } => {
                    let slot = self.find(conn);
                    if reason == INVALID_SERVICE_ID
                        && slot.is_some_and(|i| self.not_listening(now, i))
                    {
                        return Ok(());
                    }
                    return Err(CmFailure::rejected(
                        Some(peer),
                        Some(self.terms.port),
                        reason,
                        &private_data,
                    )
                    .into());
                }
                Role::Server | Role::Listener if self.find(conn).is_some() => {
                    self.give_up(dev, now, "it refused our REP");
                }
                Role::Server | Role::Listener => {}
            },
            CmEvent::TimedOut { conn } => {
                let Some(i) = self.find(conn) else {
                    return Ok(());
                };
                match (self.role, self.slots[i].state) {
                    // Our DREQ went unanswered: released all the same (§12.9.8.4).
                    (_, SlotState::Closing) => self.release(i),
                    (Role::Client { peer }, SlotState::Asked) => {
                        if matches!(self.slots[i].asked, Some(Request::Resolve { .. })) {
                            return Err(AppError::Sidr(SidrFailure::NoAnswer(peer)));
                        }
                        return Err(CmFailure::no_answer(peer).into());
                    }
                    (Role::Client { .. }, _) => return Err(CmFailure::Stopped.into()),
                    (Role::Server | Role::Listener, _) => {
                        self.give_up(dev, now, "no RTU");
                    }
                }
            }
            CmEvent::Disconnected { conn } => {
                if let Some(i) = self.find(conn) {
                    self.release(i);
                }
            }
        }
        Ok(())
    }

    fn release(&mut self, i: usize) {
        if self.slots[i].state != SlotState::Released {
            self.slots[i].state = SlotState::Released;
            self.events.push_back(SessionEvent::Released(i));
        }
    }

    fn on_request(
        &mut self,
        dev: &mut Device,
        now: Instant,
        conn: ConnId,
        req: &PeerRequest,
    ) -> Result<(), AppError> {
        let refuse = |cm: &mut Cm, why: &[u8]| {
            cm.reject(conn, CONSUMER_REJECT, why);
        };
        let consumer = match (self.role, req.rdma_cm()) {
            (Role::Server | Role::Listener, Some((_, data))) => data.to_vec(),
            // Not a client of this server, or not RDMA-CM's.
            _ => {
                refuse(&mut self.cm, &[]);
                return Ok(());
            }
        };
        if self.peer.is_some_and(|p| p != req.peer) && self.under_way() {
            refuse(&mut self.cm, b"busy");
            return Ok(());
        }
        if self.role == Role::Listener {
            self.events.push_back(SessionEvent::Asked(Asked {
                conn,
                peer: req.peer,
                data: consumer,
                mtu: req.mtu,
                local: req.local,
                responder_resources: req.responder_resources,
                initiator_depth: req.initiator_depth,
            }));
            return Ok(());
        }
        let Some(i) = self.slots.iter().position(|s| s.state == SlotState::Idle) else {
            refuse(&mut self.cm, b"busy");
            return Ok(());
        };
        self.begin(now, req.peer);
        let offer = self.offer(i);
        let Some(n) = self.cm.accept(now, conn, offer, &[]) else {
            return Ok(());
        };
        self.slots[i].conn = Some(conn);
        self.slots[i].state = SlotState::Asked;
        // Ready before the REP leaves: the client sends once it has it.
        let q = self.slots[i].qp;
        connect_qp(dev, &q, &n, &self.terms.base, CcConfig::None, 0)?;
        self.events.push_back(SessionEvent::Accepted(i));
        Ok(())
    }

    /// Server: gives the set-up under way up (`why`, for the line it prints): releases each
    /// connection still up (DREQ), puts every QP back to INIT with new start PSNs, drains
    /// their completions, and listens again ([`SessionEvent::Restarted`]). The application
    /// calls it when the peer broke the exchange (a completion error, a message it cannot
    /// take, a release in the middle). A client has nothing to listen again for: it
    /// returns its error instead.
    pub fn give_up(&mut self, dev: &mut Device, now: Instant, why: &str) {
        let peer = self
            .peer
            .map_or_else(|| "a peer".to_string(), |p| p.to_string());
        eprintln!(
            "{}: gave up a CM set-up from {peer} ({why}); listening again",
            self.name
        );
        self.given_up += 1;
        self.bounded = true;
        let psns = self
            .secrets
            .start_psns(self.slots.len() as u32, self.salt ^ self.given_up)
            .unwrap_or_else(|_| self.slots.iter().map(|s| s.psn.add(0x0012_3457)).collect());
        if self.role == Role::Listener {
            for s in self.slots.drain(..) {
                if let Some(c) = s.conn {
                    self.cm.abandon(now, c, CONSUMER_REJECT);
                }
            }
            self.peer = None;
            self.events.push_back(SessionEvent::Restarted);
            return;
        }
        for (s, psn) in self.slots.iter_mut().zip(psns) {
            if let Some(c) = s.conn.take() {
                // Released (DREQ) when up, refused (REJ) while being set up: either way
                // forgotten, so that nothing the peer sends later revives it.
                self.cm.abandon(now, c, CONSUMER_REJECT);
            }
            back_to_init(dev, &s.qp, &self.terms.base);
            s.psn = psn;
            s.state = SlotState::Idle;
        }
        self.peer = None;
        self.events.push_back(SessionEvent::Restarted);
    }

    /// Server: the application bounds every wait of this set-up from here on (an exchange
    /// whose every step has its own limit, over UD QPs the session cannot see progress
    /// on): [`CmSession::SILENCE`] and [`CmSession::SETUP`] no longer apply, until a set-up
    /// is given up.
    pub fn bounded_by_the_application(&mut self) {
        self.bounded = false;
    }

    /// Whether this is the server's end.
    pub fn is_server(&self) -> bool {
        matches!(self.role, Role::Server | Role::Listener)
    }

    /// Listener: accepts `asked` on QP `qp` (first PSN `psn`), connected with `base` (its
    /// MTU, READ depths and timers; the CM settles the rest), `rd_atomic` READs (as responder, as initiator)
    /// offered, congestion control `cc` clamped to `line_rate_bps`; `reply` goes in the REP.
    /// The QP is ready to receive before the REP leaves. Returns the connection's index.
    #[allow(clippy::too_many_arguments)]
    pub fn accept(
        &mut self,
        dev: &mut Device,
        now: Instant,
        asked: &Asked,
        qp: LocalQp,
        psn: Psn,
        base: &ConnectParams,
        rd_atomic: (u8, u8),
        cc: CcConfig,
        line_rate_bps: u64,
        reply: &[u8],
    ) -> Result<usize, AppError> {
        self.begin(now, asked.peer);
        let offer = QpOffer {
            qpn: qp.qpn,
            starting_psn: psn,
            responder_resources: rd_atomic.0,
            initiator_depth: rd_atomic.1,
            rnr_retry_count: 7,
        };
        let i = self.slots.len();
        let mut slot = Slot::new(qp, psn, *base);
        slot.conn = Some(asked.conn);
        slot.state = SlotState::Asked;
        slot.data = asked.data.clone();
        self.slots.push(slot);
        if let Some(n) = self.cm.accept(now, asked.conn, offer, reply) {
            connect_qp(dev, &qp, &n, base, cc, line_rate_bps)?;
        }
        Ok(i)
    }

    /// Listener: refuses `asked` (REJ, consumer reject, with `why` as its private data).
    pub fn refuse(&mut self, asked: &Asked, why: &[u8]) {
        self.cm.reject(asked.conn, CONSUMER_REJECT, why);
    }

    /// The peer's private data of connection `i`: its REP's (client, once up) or its REQ's
    /// (listener).
    pub fn peer_data(&self, i: usize) -> &[u8] {
        self.slots.get(i).map_or(&[], |s| &s.data)
    }

    /// The private data of the RTU that established connection `i` (server).
    pub fn confirm_data(&self, i: usize) -> Option<&[u8]> {
        self.cm.peer_confirm_data(self.slots.get(i)?.conn?)
    }

    /// Client: what connection `i`'s RTU carries.
    pub fn set_confirm_data(&mut self, i: usize, data: &[u8]) {
        if let Some(c) = self.slots.get(i).and_then(|s| s.conn) {
            self.cm.set_confirm_data(c, data);
        }
    }

    /// What this end's DREQ or DREP of connection `i` carries.
    pub fn set_release_data(&mut self, i: usize, data: &[u8]) {
        if let Some(c) = self.slots.get(i).and_then(|s| s.conn) {
            self.cm.set_release_data(c, data);
        }
    }

    /// The private data of the peer's DREQ or DREP of connection `i`.
    pub fn release_data(&self, i: usize) -> Option<&[u8]> {
        self.cm.peer_release_data(self.slots.get(i)?.conn?)
    }

    /// Client: refuses the REP that brought connection `i` up (its data is not what this
    /// end needs): the peer is told (a REJ in the RTU's place, or a DREQ) rather than left
    /// resending.
    pub fn refuse_reply(&mut self, now: Instant, i: usize, why: &[u8]) {
        if let Some(c) = self.slots.get(i).and_then(|s| s.conn) {
            self.cm.refuse_rep(now, c, CONSUMER_REJECT, why);
        }
    }
}
