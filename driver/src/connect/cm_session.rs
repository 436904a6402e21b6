//! The CM session: the one place where connections through the IB CM (IBTA Vol 1 ch. 12)
//! and RDMA-CM (Annex A11) are asked for, accepted, confirmed, released and given up, for
//! applications whose QPs exist before the exchange ([`Side`]: `rping`, `ucmatose`,
//! `rdma_server`/`rdma_client`).
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

use roce_proto::Psn;
use roce_stack::cm::{
    rdma_cm_req_private, rdma_cm_service_id, reason, Cm, CmEvent, ConnId, ConnectOptions,
    PeerRequest, QpOffer,
};
use roce_stack::{CcConfig, ConnectParams, Device, Instant, QpAttr, QpState};

use super::rdma_cm::{connect_qp, flush, pump, CmFailure};
use super::Side;
use crate::qps::LocalQp;
use crate::{AppError, Secrets};

/// What both ends' QPs are offered and asked for, besides what the [`Side`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// The RDMA-CM port (TCP port space).
    pub port: u16,
    /// READ/atomic requests offered each way (responder resources and initiator depth).
    pub rd_atomic: u8,
    /// The path MTU a client asks for.
    pub mtu: u32,
    /// The transport retry count a client asks for.
    pub retry_count: u8,
    /// The local ACK timeout code a client asks for.
    pub local_ack_timeout: u8,
    /// The attributes the CM does not settle (RNR timer, access).
    pub base: ConnectParams,
}

impl Default for Terms {
    /// librdmacm's examples: port 0 (set it), one READ each way, MTU 1024, retry count 7,
    /// timeout 18, RNR timer 12.
    fn default() -> Self {
        Self {
            port: 0,
            rd_atomic: 1,
            mtu: 1024,
            retry_count: 7,
            local_ack_timeout: 18,
            base: ConnectParams {
                min_rnr_timer: 12,
                ..ConnectParams::default()
            },
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
    /// application posts before a peer connects.
    Restarted,
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

#[derive(Debug, Clone, Copy)]
struct Slot {
    qp: LocalQp,
    psn: Psn,
    conn: Option<ConnId>,
    state: SlotState,
}

/// The session's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Client { peer: IpAddr },
}

/// The CM of one end and its connections, one per QP of the [`Side`] (see the module).
pub struct CmSession {
    cm: Cm,
    role: Role,
    local: IpAddr,
    terms: Terms,
    slots: Vec<Slot>,
    /// The peer of the set-up under way.
    peer: Option<IpAddr>,
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
        let mut s = Self::new(side, terms, secrets, salt, name, Role::Server)?;
        s.cm.listen(rdma_cm_service_id(terms.port));
        Ok(s)
    }

    /// A client of `peer` on `side`'s address: one REQ per QP, each with RDMA-CM's header
    /// naming source port `src_port(i)` and nothing else, sent now (the first [`flush`]).
    pub fn client(
        side: &Side,
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
        peer: IpAddr,
        src_port: impl Fn(usize) -> u16,
    ) -> Result<Self, crate::DriverError> {
        let mut s = Self::new(side, terms, secrets, salt, name, Role::Client { peer })?;
        let now = side.ep.now();
        s.peer = Some(peer);
        for i in 0..s.slots.len() {
            let o = ConnectOptions {
                local: s.local,
                peer,
                service_id: rdma_cm_service_id(terms.port),
                offer: s.offer(i),
                mtu: terms.mtu,
                retry_count: terms.retry_count,
                local_ack_timeout: terms.local_ack_timeout,
                private_data: rdma_cm_req_private(s.local, peer, src_port(i), &[]),
            };
            let conn = s.cm.connect(now, &o).map_err(CmFailure::CannotAsk)?;
            s.slots[i].conn = Some(conn);
            s.slots[i].state = SlotState::Asked;
        }
        Ok(s)
    }

    fn new(
        side: &Side,
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
        role: Role,
    ) -> Result<Self, crate::DriverError> {
        let now = side.ep.now();
        Ok(Self {
            cm: Cm::new(super::rdma_cm::cm_config(secrets, salt)?),
            role,
            local: side.ep.local_addr().ip(),
            terms,
            slots: side
                .qps
                .iter()
                .zip(&side.psns)
                .map(|(&qp, &psn)| Slot {
                    qp,
                    psn,
                    conn: None,
                    state: SlotState::Idle,
                })
                .collect(),
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
            responder_resources: self.terms.rd_atomic,
            initiator_depth: self.terms.rd_atomic,
            rnr_retry_count: 7,
        }
    }

    /// The peer of the set-up under way (the client's: its server).
    pub fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    /// Set-ups given up so far.
    pub fn given_up(&self) -> u64 {
        self.given_up
    }

    /// The next thing that happened, in order.
    pub fn next_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    /// Whether every connection was released.
    pub fn all_released(&self) -> bool {
        self.slots.iter().all(|s| s.state == SlotState::Released)
    }

    /// Whether connection `i` is up (established, not yet closing).
    pub fn is_up(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| s.state == SlotState::Up)
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
        if self.role == Role::Server && self.under_way() {
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
            // These sessions resolve no service IDs and listen only in the TCP port space.
            CmEvent::SidrRequest { .. } | CmEvent::SidrReply { .. } => {}
            CmEvent::Request { conn, req } => self.on_request(dev, now, conn, &req)?,
            CmEvent::Established { conn, params } => {
                let Some(i) = self.find(conn) else {
                    return Ok(());
                };
                if matches!(self.role, Role::Client { .. }) {
                    let q = self.slots[i].qp;
                    connect_qp(dev, &q, &params, &self.terms.base, CcConfig::None, 0)?;
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
                    return Err(CmFailure::rejected(
                        Some(peer),
                        Some(self.terms.port),
                        reason,
                        &private_data,
                    )
                    .into())
                }
                Role::Server if self.find(conn).is_some() => {
                    self.give_up(dev, now, "it refused our REP");
                }
                Role::Server => {}
            },
            CmEvent::TimedOut { conn } => {
                let Some(i) = self.find(conn) else {
                    return Ok(());
                };
                match (self.role, self.slots[i].state) {
                    // Our DREQ went unanswered: released all the same (§12.9.8.4).
                    (_, SlotState::Closing) => self.release(i),
                    (Role::Client { peer }, SlotState::Asked) => {
                        return Err(CmFailure::no_answer(peer).into())
                    }
                    (Role::Client { .. }, _) => return Err(CmFailure::Stopped.into()),
                    (Role::Server, _) => {
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
            cm.reject(conn, reason::CONSUMER_REJECT, why);
        };
        if self.role != Role::Server || req.rdma_cm().is_none() {
            // Not a client of this server, or not RDMA-CM's.
            refuse(&mut self.cm, &[]);
            return Ok(());
        }
        if self.peer.is_some_and(|p| p != req.peer) && self.under_way() {
            refuse(&mut self.cm, b"busy");
            return Ok(());
        }
        let Some(i) = self.slots.iter().position(|s| s.state == SlotState::Idle) else {
            refuse(&mut self.cm, b"busy");
            return Ok(());
        };
        if !self.under_way() {
            self.began = now;
        }
        self.peer = Some(req.peer);
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
        let psns = self
            .secrets
            .start_psns(self.slots.len() as u32, self.salt ^ self.given_up)
            .unwrap_or_else(|_| self.slots.iter().map(|s| s.psn.add(0x0012_3457)).collect());
        for (s, psn) in self.slots.iter_mut().zip(psns) {
            if let Some(c) = s.conn.take() {
                // Released (DREQ) when up, refused (REJ) while being set up: either way
                // forgotten, so that nothing the peer sends later revives it.
                self.cm.abandon(now, c, reason::CONSUMER_REJECT);
            }
            let reset = QpAttr::to(QpState::Reset);
            let _ = dev.modify_qp(s.qp.qpn, &reset);
            let _ = dev.modify_qp(s.qp.qpn, &self.terms.base.init_attr());
            while dev.poll_cq(s.qp.send_cq).is_some() {}
            while dev.poll_cq(s.qp.recv_cq).is_some() {}
            s.psn = psn;
            s.state = SlotState::Idle;
        }
        self.peer = None;
        self.events.push_back(SessionEvent::Restarted);
    }

    /// Whether this is the server's end.
    pub fn is_server(&self) -> bool {
        self.role == Role::Server
    }
}
