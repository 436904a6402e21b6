//! `roce rping`: librdmacm's rping over RDMA-CM, against the stock `rping` or roce itself.
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use clap::Args;
use roce_apps::rping::{self, RpingResult, RpingSpec};
use roce_driver::connect::{AfterGivingUp, Connector, Ends, Exchange};
use roce_driver::Secrets;

use crate::args::LinkArgs;

#[derive(Debug, Args)]
pub(crate) struct RpingArgs {
    /// Serve one client (rping -s).
    #[arg(short = 's', long, conflicts_with = "client")]
    server: bool,
    /// Ping a server (rping -c).
    #[arg(short = 'c', long)]
    client: bool,
    /// Server: the address to listen on; client: the server's address.
    #[arg(short = 'a', long = "addr")]
    addr: IpAddr,
    /// Client: the local address to connect from (default: the route to the server's).
    #[arg(short = 'I', long = "src-addr")]
    src: Option<IpAddr>,
    /// RDMA-CM port (the TCP port space).
    #[arg(short = 'p', long, default_value_t = rping::RPING_PORT)]
    port: u16,
    /// Pings (client; 0 = until interrupted).
    #[arg(short = 'C', long, default_value_t = 10)]
    count: u64,
    /// Ping buffer size, 26 to 65535.
    #[arg(short = 'S', long, default_value_t = 64)]
    size: u32,
    /// Print each ping's data.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Check each ping's data (the client always does unless --no-validate).
    #[arg(short = 'V', long)]
    validate: bool,
    /// Do not check the data that comes back.
    #[arg(long, conflicts_with = "validate")]
    no_validate: bool,
    /// One JSON object at the end.
    #[arg(long)]
    json: bool,
    /// Derive the start PSN, QPN and keys from this seed instead of the OS random generator.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    link: LinkArgs,
}

fn report(r: &RpingResult, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string(r).unwrap_or_default())?;
    } else {
        eprintln!(
            "roce rping: {} pings of {} bytes with {} ({} verified)",
            r.pings, r.size, r.peer, r.verified
        );
    }
    Ok(())
}

pub(crate) fn run(a: RpingArgs) -> anyhow::Result<ExitCode> {
    if !a.server && !a.client {
        anyhow::bail!("give -s (server) or -c (client), as rping");
    }
    let spec = RpingSpec {
        size: a.size,
        count: a.count,
        verbose: a.verbose,
        validate: !a.no_validate,
        port: a.port,
    };
    let secrets = Secrets::from_seed(a.seed);
    let port = a.port;
    let ends = if a.server {
        if a.addr.is_unspecified() {
            anyhow::bail!(
                "-a {}: give the address rping's client reaches (roce binds it)",
                a.addr
            );
        }
        Ends::Server {
            listen: SocketAddr::new(a.addr, port),
            after: AfterGivingUp::ListenAgain,
        }
    } else {
        Ends::Client {
            server: SocketAddr::new(a.addr, port),
            bind: a.src,
        }
    };
    let addr = a.addr;
    let c = Connector::new(Exchange::RdmaCm, ends, secrets, a.link.link).on_ready(move || {
        eprintln!("roce rping: waiting on {addr} (RDMA-CM port {port}, UDP 4791)");
    });
    let r = rping::run(c, spec)?;
    report(&r, a.json)?;
    Ok(ExitCode::SUCCESS)
}
