//! Errors above the sans-IO core, typed by who is at fault ([`Fault`]): the peer
//! ([`PeerFault`]), this host ([`SetupFailure`], a refused step of our own), the user's settings
//! ([`Unsupported`], an application's own typed refusal) or an application's check of what
//! happened ([`AppError`]); and why an endpoint's run stopped ([`RunError`]).
//!
//! Containment runs one way: a [`DriverError`] may hold an [`AppError`] (the
//! application stopped the run), never the reverse. Each prints as one line; its `source`
//! keeps the typed cause (an I/O error, a refused transition, a parse error). Every error type
//! of the layer is here, and this module takes nothing from the driver's others but the
//! connection failures it names ([`crate::connect::rdma_cm::CmFailure`],
//! [`crate::connect::sidr::SidrFailure`], [`crate::connect::Exchange`]).
use std::net::SocketAddr;
use std::time::Duration;

use roce_proto::Qpn;
use roce_stack::{Completion, PostError, WcStatus};

/// A boxed typed error of another crate or layer, kept as a `source`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed run or set-up: what went wrong, in one line.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Settings this layer cannot run (an application's own settings are [`Self::Invalid`]).
    #[error(transparent)]
    Config(#[from] Unsupported),
    /// This host could not set something up.
    #[error(transparent)]
    Setup(#[from] SetupFailure),
    /// The peer refused, broke or abandoned the exchange.
    #[error("peer: {0}")]
    Peer(#[from] PeerFault),
    /// The run itself failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The device refused to create a QP, CQ or SRQ.
    #[error(transparent)]
    Create(#[from] roce_stack::CreateError),
    /// A QP refused a state transition.
    #[error(transparent)]
    Modify(#[from] roce_stack::ModifyError),
    /// An application could not be set up (its regions, its first posts) or stopped.
    #[error(transparent)]
    App(#[from] AppError),
    /// A setting an application refused, as its own typed error (the CLI can downcast it,
    /// and see which setting it was).
    #[error(transparent)]
    Invalid(BoxError),
    /// A step failed (`what`), for a reason of its own type (`source`: an I/O error, a
    /// refused transition or post, ...; downcast it to tell).
    #[error("{what}: {source}")]
    Step {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: BoxError,
    },
    /// A control message could not be encoded.
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

/// Whose fault a failure is: a server gives up a set-up the peer broke and serves the next
/// peer; the other failures end it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The peer: what it sent, refused or never sent.
    Peer,
    /// This host: a socket, a resource, a step of our own.
    Local,
    /// The user's settings.
    Settings,
    /// The application's own check of what happened (a completion error, a message it
    /// cannot take: caused by the peer or the path to it).
    Check,
}

impl DriverError {
    /// Whose fault this failure is.
    pub fn fault(&self) -> Fault {
        match self {
            Self::Config(_) | Self::Invalid(_) => Fault::Settings,
            Self::Peer(_) => Fault::Peer,
            Self::Run(RunError::PeerSilent(_)) => Fault::Peer,
            Self::App(a) => a.fault(),
            Self::Run(_)
            | Self::Setup(_)
            | Self::Create(_)
            | Self::Modify(_)
            | Self::Step { .. }
            | Self::Encode(_) => Fault::Local,
        }
    }

    /// Whether a server gives the peer up and serves the next for this failure: the peer's
    /// fault, or the application's check of what the peer did.
    pub fn costs_the_peer(&self) -> bool {
        matches!(self.fault(), Fault::Peer | Fault::Check)
    }

    /// [`DriverError::Step`]: `what` failed because of `source`, which stays typed.
    pub fn step(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Step {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// [`PeerFault::Invalid`]: the peer sent `source`'s reason to refuse it.
    pub fn peer_invalid(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Peer(PeerFault::Invalid(Box::new(source)))
    }
}

/// Why an endpoint's loop stopped a run without finishing (the application's reason is an
/// [`AppError`], the stop signal's its own [`DriverError`]: `Endpoint::run` returns them as
/// they are).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A socket call failed.
    #[error("socket: {0}")]
    Io(std::io::Error),
    /// Nothing arrived from the peer for too long while work was pending.
    #[error("no packet from the peer for {0:?}: it is unreachable or stopped")]
    PeerSilent(Duration),
}

impl From<std::io::Error> for RunError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Why an application stopped a run, or could not start one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The device refused a post: a QP in ERR, a queue full that should not be.
    #[error("qp {qp}: posting {what}: {source}")]
    Post {
        /// The application's index of the QP.
        qp: usize,
        /// What was being posted.
        what: String,
        /// The device's reason.
        #[source]
        source: PostError,
    },
    /// A work request completed in error (the peer's NAK, retries exhausted, a flush).
    #[error("QP {qpn}: {what} (wr_id {wr_id}) completed with {status:?}")]
    Completion {
        /// The local QP.
        qpn: Qpn,
        /// The work request's id.
        wr_id: u64,
        /// What the request was ("a SEND", "a receive", "a control message").
        what: &'static str,
        /// The device's status.
        status: WcStatus,
    },
    /// A message of a size this end cannot take.
    #[error("QP {qpn}: a message of {got} bytes, not {want}{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Size {
        /// The local QP it arrived on.
        qpn: Qpn,
        /// Its length.
        got: u64,
        /// The length this end expects (or its most).
        want: u64,
        /// What to do about it, in the tool's terms ("both sides need the same -s").
        hint: Option<&'static str>,
    },
    /// Data that came back differs from what was sent.
    #[error("data mismatch in {what} {n}: sent {sent:?}, got back {got:?}")]
    Mismatch {
        /// What was compared ("ping").
        what: &'static str,
        /// Its number.
        n: u64,
        /// What was sent (printable).
        sent: String,
        /// What came back (printable).
        got: String,
    },
    /// The peer broke the application's protocol, left it early or refused it.
    #[error("{0}")]
    Peer(#[from] PeerFault),
    /// An application's own typed check, of what the peer sent or of its own plan (downcast
    /// `source` to tell).
    #[error("{what}: {source}")]
    Check {
        /// What was checked.
        what: String,
        /// Why it failed.
        #[source]
        source: BoxError,
    },
    /// A resource of the application's own (a region, an address handle) is gone, or a
    /// request it cannot make: a defect here, not the peer.
    #[error("{0}")]
    Defect(&'static str),
    /// A connection through the CM failed.
    #[error(transparent)]
    Cm(#[from] crate::connect::rdma_cm::CmFailure),
    /// A service ID resolution (SIDR) failed.
    #[error(transparent)]
    Sidr(#[from] crate::connect::sidr::SidrFailure),
    /// This host could not set something up for the application (its secrets).
    #[error(transparent)]
    Setup(#[from] SetupFailure),
    /// The device refused to create the application's QPs, CQs or SRQ.
    #[error(transparent)]
    Create(#[from] roce_stack::CreateError),
    /// A QP refused a state transition.
    #[error("modify QP {qpn}: {source}")]
    Modify {
        /// The QP.
        qpn: Qpn,
        /// The device's reason.
        #[source]
        source: roce_stack::ModifyError,
    },
}

impl AppError {
    /// Whose fault this failure is.
    pub fn fault(&self) -> Fault {
        match self {
            Self::Cm(_) | Self::Sidr(_) | Self::Peer(_) => Fault::Peer,
            Self::Completion { .. } | Self::Size { .. } | Self::Mismatch { .. } => Fault::Check,
            Self::Check { .. } => Fault::Check,
            Self::Post { .. }
            | Self::Defect(_)
            | Self::Setup(_)
            | Self::Create(_)
            | Self::Modify { .. } => Fault::Local,
        }
    }

    /// A refused post of `what` on the application's QP `qp`.
    pub fn post(qp: usize, what: impl Into<String>, source: PostError) -> Self {
        Self::Post {
            qp,
            what: what.into(),
            source,
        }
    }

    /// [`AppError::Completion`] for completion `c` of `what`.
    pub fn completion(what: &'static str, c: &Completion) -> Self {
        Self::Completion {
            qpn: c.qp_num,
            wr_id: c.wr_id,
            what,
            status: c.status,
        }
    }

    /// [`AppError::Check`]: `what` failed for `source`'s reason.
    pub fn check(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Check {
            what: what.into(),
            source: Box::new(source),
        }
    }
}

/// A peer's text as one printable line: control characters (a newline, an escape sequence
/// for the terminal) are shown escaped, the rest as sent.
struct Printable<'a>(&'a str);

impl std::fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// What a peer did that ends this exchange with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PeerFault {
    /// It sent another message than the one this point of the exchange needs.
    #[error("expected {0}")]
    Expected(&'static str),
    /// It sent a frame of the control channel out of turn.
    #[error("sent {0} out of turn")]
    OutOfTurn(&'static str),
    /// It gave up, and said why in its own words (printed on one line, control characters
    /// escaped).
    #[error("{}", Printable(.0))]
    Said(String),
    /// It refused this end (an application's refusal in its own words, printed as
    /// [`PeerFault::Said`]).
    #[error("refused the {who}: {}", Printable(.why))]
    Refused {
        /// Whom it refused: "client" or "server".
        who: &'static str,
        /// Its reason.
        why: String,
    },
    /// It closed a channel.
    #[error("closed the {0}")]
    Closed(&'static str),
    /// It released connection `conn` before the run's messages crossed.
    #[error("it released connection {conn} after {received} of {expected} messages received and {sent} sent")]
    ReleasedEarly {
        /// The application's index of the connection.
        conn: usize,
        /// Messages received on it.
        received: u64,
        /// Messages this end sent on it (completed).
        sent: u64,
        /// Messages each way the run needs.
        expected: u64,
    },
    /// Its REP lacks what this application's server puts there: another program answered
    /// (it was told with a REJ).
    #[error("the server's REP carries no {what} (not a {server}?{}); told it with a REJ", hint.map(|h| format!(" {h}")).unwrap_or_default())]
    Foreign {
        /// What the REP lacks.
        what: &'static str,
        /// The program that would have put it there.
        server: &'static str,
        /// What to run instead, where known.
        hint: Option<&'static str>,
    },
    /// It went away, or released the connection, before `before`.
    #[error("went away before {0}")]
    Left(&'static str),
    /// Nothing came within a bound.
    #[error("no answer on the {what} within {within:?}")]
    Silent {
        /// The channel or step waited on.
        what: &'static str,
        /// The bound.
        within: Duration,
    },
    /// A count it announced differs from this end's.
    #[error("announced {announced} {what}, this end has {here}")]
    Count {
        /// What was counted.
        what: &'static str,
        /// The peer's count.
        announced: usize,
        /// This end's.
        here: usize,
    },
    /// It speaks another version of a protocol.
    #[error("{what} protocol {got}, this end speaks {want}")]
    Protocol {
        /// The protocol.
        what: &'static str,
        /// The peer's version.
        got: u32,
        /// This end's.
        want: u32,
    },
    /// Reading from or writing to a channel it holds the other end of failed.
    #[error("{what}: {source}")]
    Channel {
        /// The channel.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A message of it cannot be read.
    #[error("unreadable {what}: {source}")]
    Unreadable {
        /// What message.
        what: &'static str,
        /// The parser's reason.
        #[source]
        source: BoxError,
    },
    /// A message longer than this end takes.
    #[error("sent a {what} longer than {limit} bytes")]
    TooLong {
        /// What message.
        what: &'static str,
        /// The limit, in bytes.
        limit: usize,
    },
    /// It sent more messages than this end holds before reading them.
    #[error("sent more than {limit} {what} before they were read")]
    Overran {
        /// What messages.
        what: &'static str,
        /// How many this end holds.
        limit: usize,
    },
    /// A value it sent that this end refuses (the typed reason as `source`).
    #[error(transparent)]
    Invalid(BoxError),
    /// Step `what` failed because of it, for `source`'s typed reason (an exchange's own
    /// refusal, an I/O error on its connection).
    #[error("{what}: {source}")]
    Step {
        /// The exchange and step ("perftest exchange, versions").
        what: String,
        /// Why.
        #[source]
        source: BoxError,
    },
    /// A peer named by its role (`who`: "client", "server") did `fault` (`before_finishing`:
    /// in the middle of a run).
    #[error("the {who} {fault}{}", if *.before_finishing { " before finishing" } else { "" })]
    Named {
        /// The peer's role.
        who: String,
        /// What it did.
        #[source]
        fault: Box<Self>,
        /// Whether it happened before the run finished.
        before_finishing: bool,
    },
    /// Its set-up was given up (silent, or past the set-up's bound), and this end does not
    /// listen again.
    #[error("the {0}'s set-up was given up")]
    GivenUp(&'static str),
}

impl PeerFault {
    /// [`PeerFault::Invalid`] for `source`'s reason.
    pub fn invalid(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Invalid(Box::new(source))
    }

    /// [`PeerFault::Step`]: step `what` failed for `source`'s reason.
    pub fn step(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Step {
            what: what.into(),
            source: Box::new(source),
        }
    }

    /// This fault, said of the peer in role `who`.
    pub fn named(self, who: &str, before_finishing: bool) -> Self {
        Self::Named {
            who: who.to_string(),
            fault: Box::new(self),
            before_finishing,
        }
    }
}

/// What this host could not set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupFailure {
    /// A TCP port could not be listened on (in use, not a local address, ...).
    #[error("cannot listen on TCP {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The server did not answer a connection within the bound.
    #[error("cannot reach server {0}: timed out")]
    Unreachable(SocketAddr),
    /// No route to a peer's address.
    #[error("no route to {0}")]
    NoRoute(std::net::IpAddr),
    /// Nobody came to a listening end within its bound.
    #[error("no {who} connected within {within:?}")]
    NobodyCame {
        /// Who was waited for: "client", "peer".
        who: &'static str,
        /// The bound.
        within: Duration,
    },
    /// The server of a run in one process never said it listens.
    #[error("the server did not start")]
    ServerDidNotStart,
    /// The server thread of a run in one process panicked.
    #[error("server thread panicked")]
    ServerPanicked,
    /// The operating system's random generator failed (start PSNs, keys, seeds).
    #[error("the operating system's random generator: {0}")]
    Random(#[source] getrandom::Error),
    /// A resource of this end's own (a region, a buffer) is gone: a defect, not the peer.
    #[error("{0} is gone")]
    Gone(&'static str),
}

/// Settings this layer does not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unsupported {
    /// A shared receive queue for QPs other than RC.
    #[error("a shared receive queue is for RC QPs")]
    SrqNotRc,
    /// Not one start PSN per QP.
    #[error("{psns} start PSNs for {qps} QPs")]
    PsnCount {
        /// PSNs given.
        psns: usize,
        /// QPs asked for.
        qps: u32,
    },
    /// An exchange that does not carry this service.
    #[error("{0}")]
    Service(&'static str),
    /// A message larger than an exchange's buffers.
    #[error("a {len}-byte message does not fit the exchange's {limit}-byte buffers")]
    MessageTooBig {
        /// Its length.
        len: usize,
        /// The buffers'.
        limit: u32,
    },
    /// An exchange an application does not run over.
    #[error("{app} does not run over {exchange}")]
    Exchange {
        /// The application.
        app: &'static str,
        /// The exchange asked for.
        exchange: crate::connect::Exchange,
    },
    /// Both ends in one process, for an application that runs one end per process.
    #[error("{0} runs one end per process: a server, or a client")]
    OneProcess(&'static str),
    /// A step of one exchange asked of another.
    #[error("{0}")]
    WrongExchange(&'static str),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_words_print_on_one_line_and_as_sent() {
        let e = DriverError::from(PeerFault::Said("the client's pool\n\x1b[2Jis short".into()));
        assert_eq!(
            e.to_string(),
            "peer: the client's pool\\n\\u{1b}[2Jis short"
        );
        let named = PeerFault::Closed("control connection").named("client", true);
        assert_eq!(
            named.to_string(),
            "the client closed the control connection before finishing"
        );
        assert!(DriverError::from(named).costs_the_peer());
        assert!(!DriverError::from(SetupFailure::ServerPanicked).costs_the_peer());
    }
}
