//! Argument groups several commands share, and reading flag values into library types with
//! one-line errors that name the flag.
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use clap::Args;
use roce_driver::impair::Impairment;
use roce_driver::{LinkChoice, DEFAULT_CONTROL_PORT};

use crate::units;

/// `value` read by `read`, or an error naming `flag`.
pub(crate) fn flag<T, E: std::fmt::Display>(
    flag: &str,
    value: &str,
    read: impl FnOnce(&str) -> Result<T, E>,
) -> anyhow::Result<T> {
    read(value).map_err(|e| anyhow::anyhow!("{flag} {value:?}: {e}"))
}

/// `--link`: how an endpoint receives RoCE datagrams.
#[derive(Debug, Args)]
pub(crate) struct LinkArgs {
    /// How RoCE datagrams are received (and sent): auto (packet-ring when the process has
    /// CAP_NET_RAW and the address is IPv4; else udp), udp (a UDP socket: over IPv4 the ICRC
    /// check solves for the identification and DF it does not see), packet (a packet socket,
    /// which sees the real IPv4 header, read with recvmmsg), packet-ring (the same socket's
    /// memory-mapped ring, polled 50 us before sleeping: the fastest). Both packet links send
    /// Ethernet frames they build through a packet socket, to the next hop the kernel's route
    /// and neighbour tables name for the peer, once a datagram of the connection was taken in
    /// sequence; until then, where no neighbour entry resolves, and on lo (where Linux refuses
    /// them) they send through UDP.
    #[arg(long, default_value = "auto", value_parser = parse_link)]
    pub(crate) link: LinkChoice,
}

fn parse_link(s: &str) -> Result<LinkChoice, String> {
    match s {
        "auto" => Ok(LinkChoice::Auto),
        "udp" => Ok(LinkChoice::Udp),
        "packet" => Ok(LinkChoice::Packet),
        "packet-ring" => Ok(LinkChoice::PacketRing),
        _ => Err("use auto, udp, packet or packet-ring".into()),
    }
}

/// An optional size flag (see [`units::size`]).
pub(crate) fn size_flag(name: &str, value: Option<&str>) -> anyhow::Result<Option<u64>> {
    value.map(|v| flag(name, v, units::size)).transpose()
}

/// Impairments applied to received datagrams at each end (probabilities 0..1).
#[derive(Debug, Args)]
pub(crate) struct ImpairArgs {
    /// Drop probability.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Reordering probability (a datagram is held back 200 us).
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Duplication probability.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Probability of one flipped bit (caught by the ICRC).
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// Probability of an ECN CE mark.
    #[arg(long, default_value_t = 0.0)]
    ce: f64,
}

impl ImpairArgs {
    /// The impairment stage's settings, checked (`seed` drives its RNG).
    pub(crate) fn impairment(&self, seed: u64) -> anyhow::Result<Impairment> {
        for (name, p) in [
            ("--loss", self.loss),
            ("--reorder", self.reorder),
            ("--dup", self.dup),
            ("--corrupt", self.corrupt),
            ("--ce", self.ce),
        ] {
            flag(name, &p.to_string(), units::probability)?;
        }
        let imp = Impairment {
            loss: self.loss,
            reorder: self.reorder,
            duplicate: self.dup,
            corrupt: self.corrupt,
            ce: self.ce,
            seed,
            ..Impairment::default()
        };
        imp.validate()?;
        Ok(imp)
    }
}

/// Where the two ends of `roce kv` and `roce perf` run: one process by default, or a server and
/// a client (the client, as requester, sends every setting; the server only serves).
#[derive(Debug, Args)]
pub(crate) struct Ends {
    /// Serve one client (`--client HOST` on the other side) and exit.
    #[arg(long, conflicts_with = "client")]
    pub(crate) server: bool,
    /// Run against `--server` on HOST (HOST or HOST:PORT).
    #[arg(long, value_name = "HOST")]
    pub(crate) client: Option<String>,
    /// TCP port of the control connection (server mode).
    #[arg(long, default_value_t = DEFAULT_CONTROL_PORT)]
    pub(crate) port: u16,
    /// Local address: server mode listens here; client mode binds it.
    #[arg(long)]
    pub(crate) bind: Option<IpAddr>,
    /// One process: address of the client (requester) end.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) client_ip: IpAddr,
    /// One process: address of the server (responder) end.
    #[arg(long, default_value = "127.0.0.2")]
    pub(crate) server_ip: IpAddr,
}

impl Ends {
    /// This process's end(s) for a connector: the server on `--bind` (default all
    /// addresses) and `--port`; the client of `--client`'s host (its port, else `--port`'s
    /// default); else both ends in one process on `--client-ip`/`--server-ip` and `--port`
    /// (any free port with `any_port`).
    pub(crate) fn connect(&self, any_port: bool) -> anyhow::Result<roce_driver::connect::Ends> {
        use roce_driver::connect::{AfterGivingUp, Ends};
        Ok(if self.server {
            let bind = self.bind.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
            Ends::Server {
                listen: SocketAddr::new(bind, self.port),
                after: AfterGivingUp::ListenAgain,
            }
        } else if let Some(host) = &self.client {
            Ends::Client {
                server: resolve(host)?,
                bind: self.bind,
            }
        } else {
            Ends::Both {
                client: self.client_ip,
                server: self.server_ip,
                port: if any_port { 0 } else { self.port },
            }
        })
    }
}

/// `HOST`, `HOST:PORT`, `IP` or `[IPv6]:PORT` to a socket address (default port 18515).
pub(crate) fn resolve(s: &str) -> anyhow::Result<SocketAddr> {
    let port = DEFAULT_CONTROL_PORT;
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = s.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let found = match s.rsplit_once(':') {
        Some((_, p)) if p.parse::<u16>().is_ok() => s.to_socket_addrs().map(|mut i| i.next()),
        _ => (s, port).to_socket_addrs().map(|mut i| i.next()),
    };
    found
        .map_err(|e| anyhow::anyhow!("cannot resolve {s}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("cannot resolve {s}"))
}
