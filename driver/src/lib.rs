//! # roce-driver: real sockets under the sans-IO transport
//!
//! `roce-stack` decides everything about packets; this crate only moves bytes and time between
//! it and the operating system, and sets runs up:
//!
//! * [`endpoint`]: the event loop of one end: a [`roce_stack::Device`], its UDP
//!   socket, the system clock, an impairment stage, a capture tap, and the [`Application`]
//!   that posts work and consumes completions ([`app`]).
//! * [`socket`]: the UDP sockets (quinn-udp receive with ECN and recvmmsg, sendmmsg from one
//!   socket per RoCEv2 entropy source port), and [`packet`]: the packet link (a packet socket
//!   that sees each datagram's real IPv4 header and, on Ethernet, sends frames it builds).
//! * [`impair`]: seeded loss, reordering, duplication, corruption and CE marking of what an end
//!   receives, so real-socket runs can be stressed the way the simulator is.
//! * [`control`]: the TCP control channel (bounded JSON lines, session signals, timeouts) and
//!   [`qps`]: the QP half of a handshake (QPNs, PSNs, buffers; RESET→INIT→RTR→RTS).
//! * [`connect`]: the connection layer: QPs of a kind, connected over an exchange other
//!   stacks speak (the verbs examples' records, perftest's), on an endpoint already listening.
//! * This module: errors, the server's [`Listener`], and [`in_one_process`] for runs whose two
//!   ends share a process.
//!
//! Every application (in `roce-apps`) defines its own control messages and report; none of
//! them lives here.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod allow;
pub mod app;
pub mod connect;
pub mod control;
pub mod endpoint;
pub mod impair;
mod neigh;
pub mod packet;
pub mod qps;
pub mod secrets;
pub mod socket;
mod writable;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use roce_proto::ROCEV2_UDP_PORT;
use roce_stack::Device;

pub use app::{AppError, Application};
pub use control::Control;
pub use endpoint::{Direction, Endpoint, LoopStats, RunError, Tap, TapRecord, Taps};
pub use impair::{ImpairStats, Impairment};
pub use secrets::Secrets;
pub use socket::{Link, LinkChoice};

/// TCP port of the control connection (perftest's default).
pub const DEFAULT_CONTROL_PORT: u16 = 18515;

/// A failed run: what went wrong, in one line.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
    /// Setting up sockets or the control connection failed.
    #[error("{0}")]
    Setup(String),
    /// The peer refused or broke the protocol.
    #[error("peer: {0}")]
    Peer(String),
    /// The run itself failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The device refused to create a QP, CQ or SRQ.
    #[error(transparent)]
    Create(#[from] roce_stack::CreateError),
    /// A QP refused a state transition.
    #[error(transparent)]
    Modify(#[from] roce_stack::ModifyError),
    /// An application could not be set up (its regions, its first posts).
    #[error(transparent)]
    App(#[from] AppError),
    /// A setting an application refused, as its own typed error (the CLI can downcast it,
    /// and see which setting it was).
    #[error(transparent)]
    Invalid(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// What the peer sent is not valid (the typed reason as `source`).
    #[error("peer: {source}")]
    PeerInvalid {
        /// Why it is not.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A step failed (`what`), for a reason of its own type (`source`: an I/O error, a
    /// refused transition or post, ...; downcast it to tell).
    #[error("{what}: {source}")]
    Step {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
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
            Self::Peer(_) | Self::PeerInvalid { .. } => Fault::Peer,
            Self::Run(RunError::PeerSilent(_)) => Fault::Peer,
            Self::Run(RunError::Stopped(e)) => e.fault(),
            Self::Run(RunError::App(a)) | Self::App(a) => a.fault(),
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
}

/// Maps an I/O error to a [`DriverError::Step`] naming `what` failed.
pub fn setup(what: &str) -> impl Fn(std::io::Error) -> DriverError + '_ {
    move |e| DriverError::step(what, e)
}

/// A single-threaded tokio runtime for one end.
pub fn runtime() -> Result<tokio::runtime::Runtime, DriverError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(setup("tokio runtime"))
}

/// Binds an end's RoCE socket at `local` around `dev`, sending to the peer's UDP port
/// `peer_port`. Inside a tokio runtime.
pub fn bind_endpoint(
    dev: Device,
    local: SocketAddr,
    peer_port: u16,
    impairment: Impairment,
    link: LinkChoice,
) -> Result<Endpoint, DriverError> {
    let mut ep = Endpoint::bind_with(dev, local, impairment, link).map_err(setup("RoCE socket"))?;
    ep.set_peer_port(peer_port);
    Ok(ep)
}

/// Where a server listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// TCP address of the control connection (the RoCE socket binds the IP a client reaches).
    pub listen: SocketAddr,
    /// UDP port of the RoCE socket (4791).
    pub roce_port: u16,
    /// How long to wait for a client.
    pub accept_timeout: Option<Duration>,
}

/// A client the [`Listener`] accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The local address the client reached: the RoCE socket binds it, on `roce_port`.
    pub local_ip: IpAddr,
    /// The client's control address.
    pub peer: SocketAddr,
    /// UDP port of this end's RoCE socket.
    pub roce_port: u16,
}

/// A bound control listener: [`Listener::serve`] accepts one client and runs a server session.
#[derive(Debug)]
pub struct Listener {
    listener: std::net::TcpListener,
    cfg: ServerConfig,
}

impl Listener {
    /// Binds the control port (errors: address in use, not local, …).
    pub fn bind(cfg: ServerConfig) -> Result<Self, DriverError> {
        let listener = std::net::TcpListener::bind(cfg.listen)
            .map_err(|e| DriverError::Setup(format!("cannot listen on TCP {}: {e}", cfg.listen)))?;
        listener.set_nonblocking(true).map_err(setup("listener"))?;
        Ok(Self { listener, cfg })
    }

    /// The bound control address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.cfg.listen)
    }

    /// Accepts one client and runs `session` for it on a runtime of its own (blocking). If the
    /// session fails, the client is told why before the error is returned.
    pub fn serve<T, F, Fut>(self, session: F) -> Result<T, DriverError>
    where
        F: FnOnce(Control, Accepted) -> Fut,
        Fut: Future<Output = (Control, Result<T, DriverError>)>,
    {
        runtime()?.block_on(async move {
            let (ctl, local_ip, peer) =
                control::accept(self.listener, self.cfg.accept_timeout).await?;
            let accepted = Accepted {
                local_ip,
                peer,
                roce_port: self.cfg.roce_port,
            };
            let (mut ctl, r) = session(ctl, accepted).await;
            if let Err(e) = &r {
                ctl.send_error(&e.to_string()).await;
            }
            r
        })
    }
}

/// Where a client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// The server's control address.
    pub server: SocketAddr,
    /// Local IP to use (default: what the route to the server picks).
    pub bind: Option<IpAddr>,
    /// UDP port of this end's RoCE socket.
    pub roce_port: u16,
}

/// Loopback addresses of the two ends: 127.0.0.1 and 127.0.0.2, or ::1 twice (the second end
/// then needs another UDP port, since ::1 is the only IPv6 loopback address).
pub fn loopback_addrs(ipv6: bool) -> (IpAddr, IpAddr) {
    if ipv6 {
        (
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        )
    } else {
        (
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        )
    }
}

/// The client's RoCE UDP port when both ends run in one process: 4791, or 4792 when the two
/// share one address (IPv6 `::1`), where the server has 4791.
pub fn client_roce_port(client_ip: IpAddr, server_ip: IpAddr) -> u16 {
    if client_ip == server_ip {
        ROCEV2_UDP_PORT + 1
    } else {
        ROCEV2_UDP_PORT
    }
}

/// Both ends in one process: a [`Listener`] on `server` (control on an ephemeral TCP port,
/// RoCE on UDP `server.1`) handed to `serve` on a thread named `name`, and `client` on the
/// calling thread with the listener's control address. The client's error is reported first,
/// then the server's.
pub fn in_one_process<T, S: Send + 'static>(
    name: &str,
    server: (IpAddr, u16),
    serve: impl FnOnce(Listener) -> Result<S, DriverError> + Send + 'static,
    client: impl FnOnce(SocketAddr) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    let listener = Listener::bind(ServerConfig {
        listen: SocketAddr::new(server.0, 0),
        roce_port: server.1,
        accept_timeout: Some(Duration::from_secs(10)),
    })?;
    let control = listener.local_addr();
    // Listening already: the server is ready the moment its thread starts.
    let (c, _) = connect::one_process(
        name,
        move |ready| {
            ready();
            serve(listener)
        },
        || client(control),
    )?;
    Ok(c)
}
