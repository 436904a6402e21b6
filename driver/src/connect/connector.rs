//! The connector: which end(s) of a run this process is, and over which exchange the two
//! meet. Every application's one `run` takes a [`Connector`] and its own settings, and
//! answers with what it [`Ran`]; the CLI builds the connector from its flags, so a command's
//! server, client and one-process runs over each exchange are one call.
use std::net::{IpAddr, SocketAddr};

use roce_proto::ROCEV2_UDP_PORT;

use super::AfterGivingUp;
use crate::{DriverError, LinkChoice, Secrets, SetupFailure, Unsupported};

/// How the two ends of a run meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exchange {
    /// roce's own: JSON lines over TCP ([`crate::connect::control`]), the QPs announced in them
    /// ([`crate::connect::qps`]).
    Control,
    /// RDMA-CM over the IB CM on QP1 (IBTA Vol 1 ch. 12, Annex A11): REQ, REP and RTU with
    /// private data, through a [`super::cm_session::CmSession`].
    RdmaCm,
    /// perftest's messages ([`super::perftest`]): over TCP, or (`cm`) over RDMA-CM, as
    /// perftest's `-R`.
    Perftest {
        /// Over RDMA-CM.
        cm: bool,
    },
    /// The verbs examples' records over TCP ([`super::pingpong`]).
    Pingpong,
    /// Service ID resolution, for UD ([`super::sidr`]).
    Sidr,
}

impl std::fmt::Display for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Control => "roce's control channel",
            Self::RdmaCm => "RDMA-CM",
            Self::Perftest { cm: false } => "perftest's exchange over TCP",
            Self::Perftest { cm: true } => "perftest's exchange over RDMA-CM",
            Self::Pingpong => "the verbs examples' records",
            Self::Sidr => "SIDR",
        })
    }
}

/// Which end(s) of a run this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ends {
    /// The server, listening on `listen`: a TCP address, or for the CM an address and its
    /// RDMA-CM port (the CM itself on UDP 4791). `after`: what a set-up or run its peer
    /// broke costs it.
    Server {
        /// Where it listens.
        listen: SocketAddr,
        /// After a peer it gave up.
        after: AfterGivingUp,
    },
    /// A client of `server` (a TCP address, or an address and its RDMA-CM port), from
    /// `bind`, else from the address the route to the server leaves from.
    Client {
        /// The server.
        server: SocketAddr,
        /// This end's address.
        bind: Option<IpAddr>,
    },
    /// Both ends in this process: the server at `server`, the client at `client`, the
    /// exchange's port `port`.
    Both {
        /// The client's address.
        client: IpAddr,
        /// The server's address.
        server: IpAddr,
        /// The exchange's port (TCP, or RDMA-CM).
        port: u16,
    },
}

/// What a run produced, by the end(s) this process was.
#[derive(Debug, Clone, PartialEq)]
pub enum Ran<S, C> {
    /// This process served: the server's outcome.
    Served(S),
    /// This process was the client: its outcome.
    Client(C),
    /// Both ends ran here.
    Both {
        /// The client's outcome.
        client: C,
        /// The server's.
        server: S,
    },
}

/// A run's way to its peer: the exchange, this process's end(s), and what every end needs
/// (its secrets, its link), with a hook for the moment a server listens.
pub struct Connector {
    /// The exchange.
    pub exchange: Exchange,
    /// This process's end(s).
    pub ends: Ends,
    /// Start PSNs, QPNs and keys: the OS CSPRNG, or a seed.
    pub secrets: Secrets,
    /// The RoCE link.
    pub link: LinkChoice,
    /// The UDP port of the RoCE sockets (4791); with both ends in one process on one
    /// address, the client's is the next.
    pub roce_port: u16,
    ready: Box<dyn FnOnce() + Send>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("exchange", &self.exchange)
            .field("ends", &self.ends)
            .field("secrets", &self.secrets)
            .field("link", &self.link)
            .field("roce_port", &self.roce_port)
            .finish_non_exhaustive()
    }
}

impl Connector {
    /// A connector; a server says nothing when it listens (see [`Connector::on_ready`]).
    pub fn new(exchange: Exchange, ends: Ends, secrets: Secrets, link: LinkChoice) -> Self {
        Self {
            exchange,
            ends,
            secrets,
            link,
            roce_port: ROCEV2_UDP_PORT,
            ready: Box::new(|| {}),
        }
    }

    /// The RoCE sockets on UDP `port` instead of 4791 (a test's ends on `::1`).
    pub fn with_roce_port(mut self, port: u16) -> Self {
        self.roce_port = port;
        self
    }

    /// The RoCE sockets' ports of both ends in one process at `client` and `server`: the
    /// server's [`Connector::roce_port`], the client's the same, or the next when the two
    /// share an address (IPv6 `::1`).
    pub fn roce_ports(&self, client: IpAddr, server: IpAddr) -> (u16, u16) {
        let c = if client == server {
            self.roce_port.wrapping_add(1)
        } else {
            self.roce_port
        };
        (c, self.roce_port)
    }

    /// Calls `f` once the server listens, before its first peer (a CLI says so).
    pub fn on_ready(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.ready = Box::new(f);
        self
    }

    /// Takes the hook [`Connector::on_ready`] set (a no-op afterwards).
    pub fn take_ready(&mut self) -> Box<dyn FnOnce() + Send> {
        std::mem::replace(&mut self.ready, Box::new(|| {}))
    }

    /// `Err` unless the exchange is one of `speaks`, the exchanges application `app` runs
    /// over.
    pub fn expect(&self, app: &'static str, speaks: &[Exchange]) -> Result<(), DriverError> {
        if speaks.contains(&self.exchange) {
            Ok(())
        } else {
            Err(Unsupported::Exchange {
                app,
                exchange: self.exchange,
            }
            .into())
        }
    }
}

/// The one end a [`Connector`] names, for an application that runs one end per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// The client (else the server).
    pub client: bool,
    /// This end's address: where a server listens, where a client's route leaves from.
    pub local: IpAddr,
    /// The server's address (a client's).
    pub server: Option<IpAddr>,
    /// The exchange's port (TCP, or RDMA-CM).
    pub port: u16,
}

impl Connector {
    /// The one end this connector names: `Err` for both ends in one process, which `app`
    /// does not run.
    pub fn one_end(&self, app: &'static str) -> Result<End, DriverError> {
        match self.ends {
            Ends::Server { listen, .. } => Ok(End {
                client: false,
                local: listen.ip(),
                server: None,
                port: listen.port(),
            }),
            Ends::Client { server, bind } => Ok(End {
                client: true,
                local: local_toward(server.ip(), bind)?,
                server: Some(server.ip()),
                port: server.port(),
            }),
            Ends::Both { .. } => Err(Unsupported::OneProcess(app).into()),
        }
    }
}

/// This end's address toward `server`: `bind`, else the address the route to the server
/// leaves from (a UDP socket connected to it; nothing is sent).
pub fn local_toward(server: IpAddr, bind: Option<IpAddr>) -> Result<IpAddr, DriverError> {
    if let Some(b) = bind {
        return Ok(b);
    }
    let any: IpAddr = if server.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let s = std::net::UdpSocket::bind((any, 0)).map_err(crate::setup("a UDP socket"))?;
    s.connect((server, ROCEV2_UDP_PORT))
        .map_err(|_| SetupFailure::NoRoute(server))?;
    Ok(s.local_addr().map_err(crate::setup("a UDP socket"))?.ip())
}
