//! `roce ucmatose`, `roce rdma-server`, `roce rdma-client`: librdmacm's SEND exchanges over
//! RDMA-CM, against the stock tools or roce.
use std::net::IpAddr;
use std::process::ExitCode;

use clap::Args;
use roce_apps::cmatose::{self, SendsResult, SendsSpec, Tool};
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

fn serve(addr: IpAddr, spec: SendsSpec, c: &Common) -> anyhow::Result<ExitCode> {
    if addr.is_unspecified() {
        anyhow::bail!("{addr}: give the address the client reaches (roce binds it)");
    }
    let r = cmatose::serve(addr, spec, Secrets::from_seed(c.seed), c.link.link, || {
        eprintln!(
            "roce: waiting on {addr} (RDMA-CM port {}, UDP 4791)",
            spec.port
        );
    })?;
    report(&r, c.json)?;
    Ok(ExitCode::SUCCESS)
}

fn client(
    server: IpAddr,
    bind: Option<IpAddr>,
    spec: SendsSpec,
    c: &Common,
) -> anyhow::Result<ExitCode> {
    let local = match bind {
        Some(b) => b,
        None => crate::args::route_source(server)?,
    };
    let r = cmatose::client(server, local, spec, Secrets::from_seed(c.seed), c.link.link)?;
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
    spec.validate()?;
    match a.server {
        Some(s) => client(s, a.bind, spec, &a.common),
        None => {
            let Some(b) = a.bind else {
                anyhow::bail!("the server needs -b ADDR, the address the client reaches");
            };
            serve(b, spec, &a.common)
        }
    }
}

pub(crate) fn rdma_server(a: RdmaServerArgs) -> anyhow::Result<ExitCode> {
    let spec = SendsSpec {
        port: a.port,
        ..SendsSpec::new(Tool::RdmaServer)
    };
    serve(a.addr, spec, &a.common)
}

pub(crate) fn rdma_client(a: RdmaClientArgs) -> anyhow::Result<ExitCode> {
    let spec = SendsSpec {
        port: a.port,
        ..SendsSpec::new(Tool::RdmaServer)
    };
    client(a.server, a.bind, spec, &a.common)
}
