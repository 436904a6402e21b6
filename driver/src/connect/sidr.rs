//! Service ID resolution (IBTA Vol 1 §12.11) for one UD QP, on the layer's
//! [`super::cm_session`] (the one place the CM's events are handled): a client asks which
//! UD QP serves an RDMA-CM port (UDP port space) and gets an [`AddressHandle`]; a server
//! answers with its QP and Q_Key and remembers who asked, so that the application takes UD
//! messages only from a peer the exchange named.
//!
//! The CM rate-limits the SIDR_REQs it answers together with the REQs (one budget for
//! every message that names no connection). A server remembers the last
//! [`SidrSession::ASKERS`] peers it answered, each for [`SidrSession::REMEMBERED`]; a UD
//! message from anyone else has no exchange behind it.
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use roce_proto::{QKey, Qpn, ROCEV2_UDP_PORT};
use roce_stack::ud::AddressHandle;
use roce_stack::{Device, Instant};

use super::cm_session::{CmSession, SessionEvent, Terms};
use super::qps::LocalQp;
use crate::{AppError, DriverError, Secrets};

/// The session's terms for RDMA-CM port `port`: SIDR asks for nothing else.
fn terms(port: u16) -> Terms {
    Terms {
        port,
        ..Terms::default()
    }
}

pub use super::rdma_cm::SidrFailure;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Client { peer: IpAddr },
}

/// One end of a SIDR exchange for one UD QP, on the layer's [`CmSession`] (which runs the
/// CM: the SIDR_REQ's retries, its answer's status, the rate limit).
pub struct SidrSession {
    session: CmSession,
    role: Role,
    local: IpAddr,
    qpn: Qpn,
    qkey: QKey,
    /// Server: the peers answered, oldest first, with when.
    askers: VecDeque<(IpAddr, Instant)>,
    resolved: Option<AddressHandle>,
    given_up: u64,
    name: &'static str,
}

impl std::fmt::Debug for SidrSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SidrSession")
            .field("role", &self.role)
            .field("askers", &self.askers)
            .finish_non_exhaustive()
    }
}

impl SidrSession {
    /// How many peers a server remembers having answered.
    pub const ASKERS: usize = 16;
    /// How long it remembers each.
    pub const REMEMBERED: Duration = Duration::from_secs(30);

    /// A server of UD QP `qp` (Q_Key `qkey`) on RDMA-CM port `port` (UDP port space), at
    /// `local`, from `now`. `salt` draws the CM's IDs from `secrets`; `name` begins its
    /// lines.
    #[allow(clippy::too_many_arguments)]
    pub fn server(
        local: IpAddr,
        qp: LocalQp,
        qkey: QKey,
        port: u16,
        now: Instant,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
    ) -> Result<Self, DriverError> {
        let session = CmSession::ud_listener(now, terms(port), secrets, salt, name)?;
        Ok(Self::new(session, local, qp.qpn, qkey, name, Role::Server))
    }

    /// A client at `local` asking `peer` for the UD QP on RDMA-CM port `port` (the SIDR_REQ
    /// leaves with the first [`SidrSession::flush`]); its own QP is `qp`.
    #[allow(clippy::too_many_arguments)]
    pub fn client(
        local: IpAddr,
        qp: LocalQp,
        qkey: QKey,
        port: u16,
        peer: IpAddr,
        now: Instant,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
    ) -> Result<Self, DriverError> {
        let mut session = CmSession::client_with(
            local,
            now,
            &[],
            terms(port),
            secrets,
            salt,
            name,
            peer,
            |_| Vec::new(),
        )?;
        // RDMA-CM's header names the source port udaddy's rdma_resolve_route binds.
        session
            .resolve(now, qp, 0xc000 | (port & 0x3fff))
            .map_err(|_| DriverError::App(AppError::Sidr(SidrFailure::CannotAsk)))?;
        Ok(Self::new(
            session,
            local,
            qp.qpn,
            qkey,
            name,
            Role::Client { peer },
        ))
    }

    fn new(
        session: CmSession,
        local: IpAddr,
        qpn: Qpn,
        qkey: QKey,
        name: &'static str,
        role: Role,
    ) -> Self {
        Self {
            session,
            role,
            local,
            qpn,
            qkey,
            askers: VecDeque::new(),
            resolved: None,
            given_up: 0,
            name,
        }
    }

    /// The MADs that came in and the CM's timers. A server answers each SIDR_REQ in
    /// RDMA-CM's form (the session refuses any other) and remembers who asked; a client's
    /// answer is [`SidrSession::resolved`], its failure the `Err`.
    pub fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        let polled = self.session.poll(dev, now);
        let remembered = Self::REMEMBERED;
        while self
            .askers
            .front()
            .is_some_and(|&(_, t)| now.saturating_duration_since(t) >= remembered)
        {
            self.askers.pop_front();
        }
        while let Some(e) = self.session.next_event() {
            match (e, self.role) {
                (SessionEvent::Resolve(r), Role::Server) => {
                    self.session.answer(&r, Some((self.qpn, self.qkey.0)));
                    self.askers.retain(|&(p, _)| p != r.peer);
                    if self.askers.len() >= Self::ASKERS {
                        self.askers.pop_front();
                    }
                    self.askers.push_back((r.peer, now));
                }
                (SessionEvent::Resolved { qpn, qkey, .. }, Role::Client { peer }) => {
                    self.resolved = Some(AddressHandle {
                        local: self.local,
                        remote: peer,
                        remote_port: ROCEV2_UDP_PORT,
                        dest_qpn: qpn,
                        qkey: QKey(qkey),
                    });
                }
                _ => {}
            }
        }
        polled
    }

    /// Hands the MADs the session made to QP1. Call last in the application's `poll`.
    pub fn flush(&mut self, dev: &mut Device) {
        self.session.flush(dev);
    }

    /// Client: the server's UD QP, once its SIDR_REP came.
    pub fn resolved(&self) -> Option<AddressHandle> {
        self.resolved
    }

    /// Server: where to answer a UD message that came from `src` naming QP `qpn` (its
    /// immediate, as udaddy's): `None` unless `src` is a peer the server answered a SIDR_REQ
    /// of (and still remembers). A client takes messages only from its server.
    pub fn reply_to(&self, src: IpAddr, qpn: Qpn) -> Option<AddressHandle> {
        let known = match self.role {
            Role::Server => self.askers.iter().any(|&(p, _)| p == src),
            Role::Client { peer } => peer == src,
        };
        known.then_some(AddressHandle {
            local: self.local,
            remote: src,
            remote_port: ROCEV2_UDP_PORT,
            dest_qpn: Qpn(qpn.0 & 0x00ff_ffff),
            qkey: self.qkey,
        })
    }

    /// Server: gives up the exchange with `peer` (`why`, in the line it prints) and forgets
    /// that it asked: its messages are no longer taken until it asks again.
    pub fn give_up(&mut self, peer: IpAddr, why: &str) {
        eprintln!(
            "{}: gave up a SIDR set-up from {peer} ({why}); listening again",
            self.name
        );
        self.given_up += 1;
        self.askers.retain(|&(p, _)| p != peer);
    }

    /// Set-ups given up so far.
    pub fn given_up(&self) -> u64 {
        self.given_up
    }
}
