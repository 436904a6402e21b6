//! `roce ucmatose`, `roce rdma-server`, `roce rdma-client`: librdmacm's SEND exchanges over
//! RDMA-CM, against the stock tools or roce.
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use clap::Args;
use roce_apps::cmatose::{self, SendsResult, SendsSpec, Tool};
use roce_driver::connect::{AfterGivingUp, Connector, Ends, Exchange};
use roce_driver::Secrets;

use crate::args::LinkArgs;

#[derive(Debug, Args)]
pub(crate) struct UcmatoseArgs {
    /// The server's address: run as the client (without it, serve, as ucmatose does).
    #[arg(short = 's', long = "server")]
    server: Option<IpAddr>,
    /// Local address: the server listens here (required), the client connects from it.
    #[arg(short = 'b', long = "bind")]
    bind: Option<IpAddr>,
    /// Connections.
    #[arg(short = 'c', long, default_value_t = 1)]
    connections: u32,
    /// Messages each way per connection.
    #[arg(short = 'C', long, default_value_t = 10)]
    count: u32,
    /// Bytes per message.
    #[arg(short = 'S', long, default_value_t = 100)]
    size: u32,
    /// RDMA-CM port.
    #[arg(short = 'p', long, default_value_t = cmatose::PORT)]
    port: u16,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct RdmaServerArgs {
    /// The address to listen on (roce binds it).
    #[arg(short = 's', long = "server")]
    addr: IpAddr,
    /// RDMA-CM port.
    #[arg(short = 'p', long, default_value_t = cmatose::PORT)]
    port: u16,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct RdmaClientArgs {
    /// The server's address.
    #[arg(short = 's', long = "server")]
    server: IpAddr,
    /// Local address to connect from (default: the route to the server's).
    #[arg(short = 'b', long = "bind")]
    bind: Option<IpAddr>,
    /// RDMA-CM port.
    #[arg(short = 'p', long, default_value_t = cmatose::PORT)]
    port: u16,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
pub(crate) struct Common {
    /// One JSON object at the end.
    #[arg(long)]
    json: bool,
    /// Derive the start PSNs, QPNs and keys from this seed instead of the OS random generator.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    link: LinkArgs,
}

fn report(r: &SendsResult, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string(r).unwrap_or_default())?;
    } else {
        outln!(
            "{} connection(s) with {}: {} messages sent, {} received",
            r.connections,
            r.peer,
            r.sent,
            r.received
        )?;
    }
    Ok(())
}

/// Serves one client (`server` None, at `bind`) or connects to `server`.
fn run(
    server: Option<IpAddr>,
    bind: Option<IpAddr>,
    spec: SendsSpec,
    c: &Common,
) -> anyhow::Result<ExitCode> {
    let port = spec.port;
    let ends = match server {
        Some(s) => Ends::Client {
            server: SocketAddr::new(s, port),
            bind,
        },
        None => {
            let addr = bind.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
            if addr.is_unspecified() {
                anyhow::bail!("{addr}: give the address the client reaches (roce binds it)");
            }
            Ends::Server {
                listen: SocketAddr::new(addr, port),
                after: AfterGivingUp::ListenAgain,
            }
        }
    };
    let secrets = Secrets::from_seed(c.seed);
    let connector =
        Connector::new(Exchange::RdmaCm, ends, secrets, c.link.link).on_ready(move || {
            if let Ends::Server { listen, .. } = ends {
                eprintln!(
                    "roce: waiting on {} (RDMA-CM port {port}, UDP 4791)",
                    listen.ip()
                );
            }
        });
    let r = cmatose::run(connector, spec)?;
    report(&r, c.json)?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn ucmatose(a: UcmatoseArgs) -> anyhow::Result<ExitCode> {
    let spec = SendsSpec {
        connections: a.connections,
        count: a.count,
        size: a.size,
        port: a.port,
        ..SendsSpec::new(Tool::Ucmatose)
    };
    if a.server.is_none() && a.bind.is_none() {
        anyhow::bail!("the server needs -b ADDR, the address the client reaches");
    }
    run(a.server, a.bind, spec, &a.common)
}

pub(crate) fn rdma_server(a: RdmaServerArgs) -> anyhow::Result<ExitCode> {
    let spec = SendsSpec {
        port: a.port,
        ..SendsSpec::new(Tool::RdmaServer)
    };
    run(None, Some(a.addr), spec, &a.common)
}

pub(crate) fn rdma_client(a: RdmaClientArgs) -> anyhow::Result<ExitCode> {
    let spec = SendsSpec {
        port: a.port,
        ..SendsSpec::new(Tool::RdmaServer)
    };
    run(Some(a.server), a.bind, spec, &a.common)
}
