//! `roce pingpong`: the verbs examples' SEND ping-pong, against rdma-core's stock
//! `ibv_{rc,uc,ud,srq}_pingpong` or roce itself.
use std::net::IpAddr;
use std::process::ExitCode;

use clap::Args;
use roce_apps::pingpong::{self, PingPongResult, PingPongSpec, Tool};
use roce_driver::connect::{AfterGivingUp, Connector, Ends, Exchange, Ran};
use roce_driver::Secrets;

use crate::args::{size_flag, LinkArgs};

#[derive(Debug, Args)]
pub(crate) struct PingPongArgs {
    /// rc, uc, ud or srq: which of ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and
    /// ibv_srq_pingpong to speak.
    tool: String,
    /// The server (HOST or HOST:PORT): run as the client. Without it, serve one client, as the
    /// tools do.
    host: Option<String>,
    /// TCP port of the exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size (default 4096; ud 1024).
    #[arg(short = 's', long)]
    size: Option<String>,
    /// Exchanges: messages each side sends and receives.
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default 1024; ud: the largest message,
    /// default 4096, as the tool's port MTU on a jumbo-frame link).
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    /// Receives posted at a time.
    #[arg(short = 'r', long, default_value_t = 500)]
    rx_depth: u32,
    /// srq: QPs on the shared receive queue.
    #[arg(short = 'q', long, default_value_t = 16)]
    num_qp: u32,
    /// Validate the received buffer (a 0 at every 4 KiB offset), as the tools' -c.
    #[arg(short = 'c', long)]
    chk: bool,
    /// GID index, as the tools' -g: accepted for the same command line; roce's GID is the
    /// address it binds (IPv4-mapped).
    #[arg(short = 'g', long = "gid-idx")]
    gid_idx: Option<u32>,
    /// Local address: the server listens here (default all), the client binds it.
    #[arg(long)]
    bind: Option<IpAddr>,
    /// The peer's RoCE address, when the exchange reaches it at another (a management
    /// network): the GID in its record must name this address. Without it, the GID must
    /// name the address the exchange came from (either family may differ: the stock
    /// servers listen on IPv4 only).
    #[arg(long, value_name = "ADDR")]
    peer_roce: Option<IpAddr>,
    /// Both ends in this process (--client-ip <-> --server-ip).
    #[arg(long, conflicts_with = "host")]
    loopback: bool,
    /// --loopback: the client's address.
    #[arg(long, default_value = "127.0.0.1")]
    client_ip: IpAddr,
    /// --loopback: the server's address.
    #[arg(long, default_value = "127.0.0.2")]
    server_ip: IpAddr,
    /// One JSON object (each end's with --loopback).
    #[arg(long)]
    json: bool,
    /// Derive the start PSNs, QPNs and keys from this seed instead of the OS random generator.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    link: LinkArgs,
}

fn print(r: &PingPongResult, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string(r).unwrap_or_default())?;
    } else {
        outln!("{r}")?;
    }
    Ok(())
}

fn verified(r: &PingPongResult) -> anyhow::Result<()> {
    if r.validated == Some(false) {
        anyhow::bail!("invalid data in the received buffer (a 4 KiB offset is not 0)");
    }
    Ok(())
}

pub(crate) fn run(a: PingPongArgs) -> anyhow::Result<ExitCode> {
    let tool = match a.tool.as_str() {
        "rc" => Tool::Rc,
        "uc" => Tool::Uc,
        "ud" => Tool::Ud,
        "srq" => Tool::Srq,
        t => anyhow::bail!("unknown tool {t:?}: rc, uc, ud or srq"),
    };
    let _ = a.gid_idx;
    let mut spec = PingPongSpec::new(tool);
    if let Some(s) = size_flag("-s", a.size.as_deref())? {
        spec.size = u32::try_from(s).map_err(|_| anyhow::anyhow!("-s {s}: at most 1 GiB"))?;
    }
    spec.iters = a.iters;
    spec.mtu = a.mtu.unwrap_or(if tool == Tool::Ud { 4096 } else { 1024 });
    spec.rx_depth = a.rx_depth;
    if tool == Tool::Srq {
        spec.num_qp = a.num_qp;
    }
    spec.chk = a.chk;
    spec.peer_roce = a.peer_roce;
    spec.validate()?;
    let secrets = Secrets::from_seed(a.seed);
    let link = a.link.link;
    let name = tool.name();
    let ends = if a.loopback {
        Ends::Both {
            client: a.client_ip,
            server: a.server_ip,
            port: a.port,
        }
    } else if let Some(h) = &a.host {
        let mut server = crate::args::resolve(h)?;
        if !h.contains(':') || h.starts_with('[') && !h.contains("]:") {
            server.set_port(a.port);
        }
        eprintln!("roce pingpong: {name} client of {server}");
        Ends::Client {
            server,
            bind: a.bind,
        }
    } else {
        let bind = a.bind.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
        Ends::Server {
            listen: std::net::SocketAddr::new(bind, a.port),
            after: AfterGivingUp::ListenAgain,
        }
    };
    let c = Connector::new(Exchange::Pingpong, ends, secrets, link).on_ready(move || {
        if let Ends::Server { listen, .. } = ends {
            eprintln!("roce pingpong: {name} server waiting on TCP {listen}");
        }
    });
    let r = match pingpong::run(c, spec)? {
        Ran::Both { client, server } => {
            print(&client, a.json)?;
            print(&server, a.json)?;
            verified(&server)?;
            return Ok(ExitCode::SUCCESS);
        }
        Ran::Client(r) | Ran::Served(r) => r,
    };
    eprintln!("  remote address: {}", r.peer);
    print(&r, a.json)?;
    verified(&r)?;
    Ok(ExitCode::SUCCESS)
}
