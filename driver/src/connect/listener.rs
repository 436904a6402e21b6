//! roce's own exchange, its ends: where a server listens ([`ServerConfig`]), the
//! [`Listener`] that accepts one client on the control channel ([`super::control`]) and runs
//! a session for it, where a client runs ([`ClientConfig`]), and both ends in one process
//! ([`in_one_process`]).
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use roce_proto::ROCEV2_UDP_PORT;

use super::control::{self, Control};
use crate::{runtime, setup, DriverError, SetupFailure};

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
        let listener =
            std::net::TcpListener::bind(cfg.listen).map_err(|source| SetupFailure::Listen {
                addr: cfg.listen,
                source,
            })?;
        listener.set_nonblocking(true).map_err(setup("listener"))?;
        Ok(Self { listener, cfg })
    }

    /// A server's listener on `listen`, its RoCE socket on UDP `roce_port`, with no accept
    /// timeout (a server waits for its client).
    pub fn at(listen: SocketAddr, roce_port: u16) -> Result<Self, DriverError> {
        Self::bind(ServerConfig {
            listen,
            roce_port,
            accept_timeout: None,
        })
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
    let (c, _) = super::one_process(
        name,
        move |ready| {
            ready();
            serve(listener)
        },
        || client(control),
    )?;
    Ok(c)
}
