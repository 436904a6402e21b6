//! `roce udaddy`: librdmacm's udaddy (SIDR, then UD SENDs both ways), against the stock
//! udaddy or roce.
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use clap::Args;
use roce_apps::udaddy::{self, UdaddySpec};
use roce_driver::connect::{AfterGivingUp, Connector, Ends, Exchange};
use roce_driver::Secrets;

use crate::args::LinkArgs;

#[derive(Debug, Args)]
pub(crate) struct UdaddyArgs {
    /// The server's address: run as the client (without it, serve, as udaddy does).
    #[arg(short = 's', long = "server")]
    server: Option<IpAddr>,
    /// Local address: the server listens here (required), the client sends from it.
    #[arg(short = 'b', long = "bind")]
    bind: Option<IpAddr>,
    /// Messages each way.
    #[arg(short = 'C', long, default_value_t = 10)]
    count: u32,
    /// Bytes per message (at most the MTU).
    #[arg(short = 'S', long, default_value_t = 100)]
    size: u32,
    /// The UD QP's MTU: the largest message.
    #[arg(short = 'm', long, default_value_t = 4096)]
    mtu: u32,
    /// RDMA-CM port (the UDP port space; udaddy's is fixed at 7174).
    #[arg(short = 'p', long, default_value_t = udaddy::PORT)]
    port: u16,
    /// One JSON object at the end.
    #[arg(long)]
    json: bool,
    /// Derive the QPN and keys from this seed instead of the OS random generator.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    link: LinkArgs,
}

pub(crate) fn run(a: UdaddyArgs) -> anyhow::Result<ExitCode> {
    let spec = UdaddySpec {
        count: a.count,
        size: a.size,
        mtu: a.mtu,
        port: a.port,
    };
    spec.validate()?;
    let secrets = Secrets::from_seed(a.seed);
    let port = a.port;
    let ends = match a.server {
        Some(s) => Ends::Client {
            server: SocketAddr::new(s, port),
            bind: a.bind,
        },
        None => {
            let Some(b) = a.bind.filter(|b| !b.is_unspecified()) else {
                anyhow::bail!("the server needs -b ADDR, the address the client reaches");
            };
            Ends::Server {
                listen: SocketAddr::new(b, port),
                after: AfterGivingUp::ListenAgain,
            }
        }
    };
    let c = Connector::new(Exchange::Sidr, ends, secrets, a.link.link).on_ready(move || {
        if let Ends::Server { listen, .. } = ends {
            eprintln!(
                "roce udaddy: waiting on {} (RDMA-CM UDP port {port}, UDP 4791)",
                listen.ip()
            );
        }
    });
    let r = udaddy::run(c, spec)?;
    if a.json {
        outln!("{}", serde_json::to_string(&r).unwrap_or_default())?;
    } else {
        outln!(
            "{} messages sent to, {} received from {} (UD QP {:#x})",
            r.sent,
            r.received,
            r.peer,
            r.peer_qpn
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
