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
//! * [`connect`]: the connection layer, the only door: QPs of a kind, connected over an
//!   exchange (roce's own control channel, [`connect::control`] and [`connect::qps`]; RDMA-CM;
//!   perftest's; the verbs examples' records; SIDR) on an endpoint already listening, as a
//!   [`connect::Connector`] names the ends.
//! * [`error`]: the errors above the core, typed by who is at fault.
//! * This module: the runtime of one end, and binding an end's RoCE socket.
//!
//! Every application (in `roce-apps`) defines its own control messages and report; none of
//! them lives here.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod allow;
pub mod app;
pub mod connect;
pub mod endpoint;
pub mod error;
pub mod impair;
mod neigh;
pub mod packet;
pub mod secrets;
pub mod socket;
mod writable;

use std::net::SocketAddr;

use roce_stack::Device;

pub use app::{AppError, Application};
pub use endpoint::{Direction, Endpoint, LoopStats, RunError, Tap, TapRecord, Taps};
pub use error::{DriverError, Fault, PeerFault, SetupFailure, Unsupported};
pub use impair::{ImpairStats, Impairment};
pub use secrets::Secrets;
pub use socket::{Link, LinkChoice};

/// TCP port of the control connection (perftest's default).
pub const DEFAULT_CONTROL_PORT: u16 = 18515;

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
