//! `roce loopback`, `roce server`, `roce client`: the verified workload.
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use roce_apps::workload::{self, OpKind, RunConfig, Transport, WorkloadRun, WorkloadSpec};
use roce_driver::connect::{AfterGivingUp, Connector, Ends, Exchange, Ran};
use roce_driver::{Secrets, Taps, DEFAULT_CONTROL_PORT};
use roce_proto::ROCEV2_UDP_PORT;
use roce_stack::ConnectParams;

use crate::args::{flag, resolve, ImpairArgs, LinkArgs};
use crate::output::{pcap_tap, pcap_taps_at_departure, report};
use crate::{cc, units};

/// The workload and the transport settings, shared by loopback and client.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Operations to mix: send, send_imm, write, write_imm, read, cas, faa, atomic, all.
    #[arg(long, default_value = "all")]
    ops: String,
    /// Message size: N, or MIN-MAX for a log-uniform mix (K = 1024, as in 64K).
    #[arg(long, default_value = "0-1M")]
    size: String,
    /// Operations per QP.
    #[arg(long, default_value_t = 250)]
    count: u32,
    /// Queue pairs.
    #[arg(long, default_value_t = 4)]
    qps: u32,
    /// QP transports, given to the QPs in turn (rc,uc,ud: QP 0 RC, 1 UC, 2 UD, 3 RC, ...).
    /// UC carries the SENDs and WRITEs of the mix, UD the SENDs of at most one MTU; what they
    /// lose is counted, what arrives is verified.
    #[arg(long, default_value = "rc")]
    transport: String,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 1024)]
    mtu: u32,
    /// Work requests outstanding per QP.
    #[arg(long, default_value_t = 16)]
    depth: u32,
    /// Seed of the workload, the data, the impairments and the secrets (start PSNs, QPNs,
    /// memory keys), for a reproducible run. Without it the workload uses seed 1 and the
    /// secrets come from the OS random generator, so that no one off the path can guess them.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    impair: ImpairArgs,
    #[command(flatten)]
    link: LinkArgs,
    /// Congestion control: none, dcqcn (= paper), nvidia, fixed:rate=10Gbps, with
    /// `:key=value,...` overrides.
    #[arg(long, default_value = "none")]
    cc: String,
    /// Local ACK timeout code: 4.096 us x 2^N (14 = 67 ms).
    #[arg(long, default_value_t = 14)]
    timeout: u8,
    /// Write every datagram sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LoopbackArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Use IPv6 (both ends on ::1; the client's RoCE port is 4792).
    #[arg(long, conflicts_with_all = ["client_ip", "server_ip"])]
    ipv6: bool,
    /// Address of the client (requester) end.
    #[arg(long, default_value = "127.0.0.1", requires = "server_ip")]
    client_ip: Option<IpAddr>,
    /// Address of the server (responder) end.
    #[arg(long, default_value = "127.0.0.2")]
    server_ip: Option<IpAddr>,
    /// Connect the QPs through the IB CM on QP1 (REQ/REP/RTU over UDP 4791, RDMA-CM service
    /// ID of port 18515) instead of the TCP control connection.
    #[arg(long, conflicts_with = "ipv6")]
    cm: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ServerArgs {
    /// Address of the control listener; the RoCE socket binds the address clients reach.
    #[arg(long, default_value = "0.0.0.0")]
    bind: IpAddr,
    /// TCP port of the out-of-band connection set-up.
    #[arg(long, default_value_t = DEFAULT_CONTROL_PORT)]
    port: u16,
    #[command(flatten)]
    impair: ImpairArgs,
    #[command(flatten)]
    link: LinkArgs,
    /// Seed of the impairments (default 2) and of the secrets (start PSNs, QPNs, memory
    /// keys; without it they come from the OS random generator).
    #[arg(long)]
    seed: Option<u64>,
    /// Write every datagram sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Accept the client's QPs through the IB CM on QP1 (UDP 4791 at --bind; --port is then
    /// the RDMA-CM port whose service ID is listened on) instead of the TCP control
    /// connection.
    #[arg(long)]
    cm: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ClientArgs {
    /// The server: HOST or HOST:PORT (port of the control connection, or with --cm the
    /// RDMA-CM port; default 18515).
    server: String,
    /// Local address to use.
    #[arg(long)]
    bind: Option<IpAddr>,
    /// Connect through the IB CM on QP1 (REQ/REP/RTU over UDP 4791) instead of the TCP
    /// control connection.
    #[arg(long)]
    cm: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// `--transport`: `rc`, `uc`, `ud`, comma-separated, in the order given.
pub(crate) fn parse_transports(s: &str) -> Result<Vec<Transport>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let p = part.to_ascii_lowercase();
        match Transport::ALL.iter().find(|t| t.token() == p) {
            Some(t) => out.push(*t),
            None => return Err(format!("unknown transport {part:?} (rc, uc, ud)")),
        }
    }
    if out.is_empty() {
        return Err("no transport given".into());
    }
    Ok(out)
}

/// `--ops`: names (`send`, `send_imm`/`send-imm`, `write`, `write_imm`, `read`, `cas`, `faa`;
/// `atomic` for both atomics, `all` for every kind), comma-separated.
pub(crate) fn parse_ops(s: &str) -> Result<Vec<OpKind>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let p = part.replace('-', "_").to_ascii_lowercase();
        match p.as_str() {
            "all" => out.extend(OpKind::ALL),
            "atomic" | "atomics" => out.extend([OpKind::CompareSwap, OpKind::FetchAdd]),
            "compare_swap" | "cmp_swap" => out.push(OpKind::CompareSwap),
            "fetch_add" => out.push(OpKind::FetchAdd),
            _ => match OpKind::ALL.iter().find(|k| k.name() == p) {
                Some(k) => out.push(*k),
                None => {
                    return Err(
                        "unknown operation (use send, send_imm, write, write_imm, read, cas, \
                         faa, atomic, all)"
                            .into(),
                    )
                }
            },
        }
    }
    out.sort();
    out.dedup();
    if out.is_empty() {
        return Err("no operations given".into());
    }
    Ok(out)
}

fn run_config(a: &RunArgs) -> anyhow::Result<RunConfig> {
    let (min_size, max_size) = flag("--size", &a.size, units::size_range)?;
    let seed = a.seed.unwrap_or(1);
    let cfg = RunConfig {
        spec: WorkloadSpec {
            ops: flag("--ops", &a.ops, parse_ops)?,
            transports: flag("--transport", &a.transport, parse_transports)?,
            datagram_max: a.mtu,
            min_size,
            max_size,
            count: a.count,
            qps: a.qps,
            depth: a.depth,
            seed,
        },
        transport: ConnectParams {
            mtu: a.mtu,
            timeout: a.timeout,
            ..ConnectParams::default()
        },
        impairment: a.impair.impairment(seed)?,
        cc: flag("--cc", &a.cc, cc::parse_no_int)?,
        secrets: Secrets::from_seed(a.seed),
        link: a.link.link,
        ..RunConfig::default()
    };
    cfg.validate()?;
    Ok(cfg)
}

fn exchange(cm: bool) -> Exchange {
    if cm {
        Exchange::RdmaCm
    } else {
        Exchange::Control
    }
}

pub(crate) fn loopback(a: LoopbackArgs) -> anyhow::Result<ExitCode> {
    let cfg = run_config(&a.run)?;
    let (taps, pcap) = pcap_taps_at_departure(&a.run.pcap)?;
    let (client, server) = match (a.ipv6 && !a.cm, a.client_ip, a.server_ip) {
        (false, Some(c), Some(s)) => (c, s),
        (ipv6, _, _) => roce_driver::connect::loopback_addrs(ipv6),
    };
    let ends = Ends::Both {
        client,
        server,
        port: DEFAULT_CONTROL_PORT,
    };
    let c = Connector::new(exchange(a.cm), ends, cfg.secrets, cfg.link);
    let w = WorkloadRun {
        cfg: &cfg,
        impairment: cfg.impairment,
        taps,
    };
    let r = workload::run(c, w)?;
    pcap.finish()?;
    match r {
        Ran::Client(r) | Ran::Both { client: r, .. } => report(&r, r.ok, a.run.json),
        Ran::Served(_) => unreachable!("both ends ran"),
    }
}

pub(crate) fn server(a: ServerArgs) -> anyhow::Result<ExitCode> {
    let imp = a.impair.impairment(a.seed.unwrap_or(2))?;
    let (tap, pcap) = pcap_tap(&a.pcap)?;
    let secrets = Secrets::from_seed(a.seed);
    let (bind, port, cm) = (a.bind, a.port, a.cm);
    let ends = Ends::Server {
        listen: SocketAddr::new(bind, port),
        after: AfterGivingUp::ListenAgain,
    };
    let c = Connector::new(exchange(cm), ends, secrets, a.link.link).on_ready(move || {
        if cm {
            eprintln!(
                "roce server: waiting for a client's CM REQ on {bind} UDP {ROCEV2_UDP_PORT} (RDMA-CM port {port})"
            );
        } else {
            eprintln!("roce server: waiting for a client on {}", SocketAddr::new(bind, port));
        }
    });
    let cfg = RunConfig::default();
    let w = WorkloadRun {
        cfg: &cfg,
        impairment: imp,
        taps: Taps {
            client: None,
            server: tap,
        },
    };
    let Ran::Served(o) = workload::run(c, w)? else {
        unreachable!("a server serves")
    };
    pcap.finish()?;
    for m in &o.mismatches {
        eprintln!("roce server: {m}");
    }
    let who = o.peer.map_or_else(|| "?".to_string(), |p| p.to_string());
    if o.complete {
        eprintln!(
            "roce server: client {who} finished, every QP verified, {} bytes verified here",
            o.verified_bytes
        );
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "roce server: FAILED: client {who} stopped before every QP's memory verified ({} bytes verified here)",
            o.verified_bytes
        );
        Ok(ExitCode::FAILURE)
    }
}

pub(crate) fn client(a: ClientArgs) -> anyhow::Result<ExitCode> {
    let cfg = run_config(&a.run)?;
    let (tap, pcap) = pcap_tap(&a.run.pcap)?;
    let ends = Ends::Client {
        server: resolve(&a.server)?,
        bind: a.bind,
    };
    let c = Connector::new(exchange(a.cm), ends, cfg.secrets, cfg.link);
    let w = WorkloadRun {
        cfg: &cfg,
        impairment: cfg.impairment,
        taps: Taps {
            client: tap,
            server: None,
        },
    };
    let r = workload::run(c, w)?;
    pcap.finish()?;
    match r {
        Ran::Client(r) | Ran::Both { client: r, .. } => report(&r, r.ok, a.run.json),
        Ran::Served(_) => unreachable!("a client runs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_lists() {
        assert_eq!(
            parse_ops("atomic,send-imm").unwrap(),
            vec![OpKind::SendImm, OpKind::CompareSwap, OpKind::FetchAdd]
        );
        assert_eq!(parse_ops("all").unwrap(), OpKind::ALL.to_vec());
        assert!(parse_ops("teleport").is_err());
        assert!(parse_ops(" , ").is_err());
    }

    #[test]
    fn transport_lists() {
        assert_eq!(
            parse_transports("rc, UD,rc").unwrap(),
            vec![Transport::Rc, Transport::Ud, Transport::Rc]
        );
        assert!(parse_transports("xrc").is_err());
        assert!(parse_transports(",").is_err());
    }
}
