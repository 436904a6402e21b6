//! The `roce` command line: argument parsing and dispatch only. Every behaviour lives in the
//! library crates (`roce-pcap` for `decode`, `roce-stack` for `loopback`, `server`, `client`).
use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use roce_pcap::{decode::OutputFormat, live, Options};
use std::io::{BufWriter, Write};
use std::process::ExitCode;

/// RoCEv2 packet codec, capture decoder and userspace RC transport.
#[derive(Debug, Parser)]
#[command(name = "roce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run two RC endpoints over loopback UDP sockets and verify every byte and completion.
    Loopback(LoopbackArgs),
    /// Serve one client's workload as the responder (the remote end of `roce client`).
    Server(ServerArgs),
    /// Run the workload against `roce server` as the requester and report.
    Client(ClientArgs),
    /// Decode RoCE packets from a capture file, stdin (`-`) or a live interface.
    Decode(DecodeArgs),
    /// perftest-style bandwidth, message rate and latency (write, read, send, atomic), and the
    /// plain-UDP baseline (udp) of the same wire size through the same sockets.
    Perf(PerfArgs),
    /// KV-cache push of prefill/decode disaggregation: the decode side registers a pool once
    /// and allocates blocks, the prefill side WRITEs the KV layer by layer (the last WRITE per QP
    /// with an immediate); plan by plan, with the model max(bytes/bandwidth, WRs x per-WR cost).
    Kv(KvArgs),
    /// Simulated experiments (virtual time, deterministic by seed).
    #[command(subcommand)]
    Sim(SimCommand),
    /// Write a synthetic capture of N RoCE packets (for benchmarks).
    #[command(hide = true)]
    GenCapture {
        /// Number of packets.
        #[arg(long, default_value_t = 1_000_000)]
        packets: u64,
        /// Output pcap file.
        file: String,
    },
}

#[derive(Debug, Subcommand)]
enum SimCommand {
    /// N long WRITE flows through one switch bottleneck (RED ECN marking, tail drop): 2 and 8
    /// flows with DCQCN and without congestion control, and a flow joining late. Prints a
    /// table (or JSON) and can plot per-flow rates and the queue depth.
    Congestion(CongestionArgs),
}

#[derive(Debug, Args)]
struct CongestionArgs {
    /// Print one JSON object (`runs`: name, cc, flows, fairness, utilization, tail_drops,
    /// retransmitted_packets, max_queue_bytes, mean_queue_bytes, cnps, ...).
    #[arg(long)]
    json: bool,
    /// Write an SVG plot of per-flow rate and queue depth over time.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
    /// Seed of the runs (RED marking, start jitter).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Virtual duration of each run, ms.
    #[arg(long, default_value_t = 100)]
    duration: u64,
    /// The congestion control of the DCQCN runs (e.g. `paper`, `nvidia:b=0`).
    #[arg(long, default_value = "dcqcn")]
    cc: String,
}

/// The workload and the transport settings, shared by loopback and client.
#[derive(Debug, Args)]
struct RunArgs {
    /// Operations to mix: send, send_imm, write, write_imm, read, cas, faa, atomic, all.
    #[arg(long, default_value = "all")]
    ops: String,
    /// Message size: N, or MIN-MAX for a log-uniform mix (K/M suffixes).
    #[arg(long, default_value = "0-1M")]
    size: String,
    /// Operations per QP.
    #[arg(long, default_value_t = 250)]
    count: u32,
    /// Queue pairs.
    #[arg(long, default_value_t = 4)]
    qps: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 1024)]
    mtu: u32,
    /// Work requests outstanding per QP.
    #[arg(long, default_value_t = 16)]
    depth: u32,
    /// Seed of the workload, the data and the impairments.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    impair: ImpairArgs,
    /// Congestion control: none, dcqcn (= paper), nvidia, fixed:rate=10Gbps, with
    /// `:key=value,...` overrides.
    #[arg(long, default_value = "none")]
    cc: String,
    /// Local ACK timeout code: 4.096 us x 2^N (14 = 67 ms).
    #[arg(long, default_value_t = 14)]
    timeout: u8,
    /// Write every datagram sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Impairments applied to received datagrams at each end (probabilities 0..1).
#[derive(Debug, Args)]
struct ImpairArgs {
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

#[derive(Debug, Args)]
struct LoopbackArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Use IPv6 (both ends on ::1; the client's RoCE port is 4792).
    #[arg(long, conflicts_with_all = ["client_ip", "server_ip"])]
    ipv6: bool,
    /// Address of the client (requester) end.
    #[arg(long, default_value = "127.0.0.1", requires = "server_ip")]
    client_ip: Option<std::net::IpAddr>,
    /// Address of the server (responder) end.
    #[arg(long, default_value = "127.0.0.2")]
    server_ip: Option<std::net::IpAddr>,
}

#[derive(Debug, Args)]
struct ServerArgs {
    /// Address of the control listener; the RoCE socket binds the address clients reach.
    #[arg(long, default_value = "0.0.0.0")]
    bind: std::net::IpAddr,
    /// TCP port of the out-of-band connection set-up.
    #[arg(long, default_value_t = roce_stack::driver::DEFAULT_CONTROL_PORT)]
    port: u16,
    #[command(flatten)]
    impair: ImpairArgs,
    /// Seed of the impairments.
    #[arg(long, default_value_t = 2)]
    seed: u64,
    /// Write every datagram sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
struct ClientArgs {
    /// The server: HOST or HOST:PORT (port of the control connection, default 18515).
    server: String,
    /// Local address to use.
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Args)]
struct KvArgs {
    /// Transformer layers.
    #[arg(long, default_value_t = 8)]
    layers: u32,
    /// Prompt tokens.
    #[arg(long, default_value_t = 4096)]
    tokens: u32,
    /// Bytes of K per token per layer (V is the same).
    #[arg(long, default_value_t = 256)]
    kv_bytes: u32,
    /// Tokens per block (one plan instead of the five default plans).
    #[arg(long)]
    page: Option<u32>,
    /// K and V of a page: separate or adjacent (one plan).
    #[arg(long)]
    layout: Option<String>,
    /// Merge runs contiguous at both ends into one WRITE (one plan).
    #[arg(long)]
    merge: bool,
    /// Block allocation at the decode side: contiguous or scattered (a busy pool).
    #[arg(long, default_value = "scattered")]
    alloc: String,
    /// Size of the decode side's pool (K/M/G suffixes; default 3x the request's KV).
    #[arg(long)]
    pool: Option<String>,
    /// Queue pairs the WRITEs are spread over.
    #[arg(long, default_value_t = 1)]
    qps: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 4096)]
    mtu: u32,
    /// Seed of the allocation, the data and the impairments.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    impair: ImpairArgs,
    /// Local ACK timeout code: 4.096 us x 2^N (14 = 67 ms).
    #[arg(long, default_value_t = 14)]
    timeout: u8,
    /// Run every plan N times and report the fastest run of each.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    ends: Ends,
}

#[derive(Debug, Args)]
struct PerfArgs {
    /// write, read, send, atomic, or udp (the baseline).
    test: String,
    /// Latency (ping-pong) instead of bandwidth.
    #[arg(long)]
    lat: bool,
    /// Message size (K/M suffixes); udp: datagram size. Default 65536 (bw), 8 (lat).
    #[arg(short = 's', long, conflicts_with = "all")]
    size: Option<String>,
    /// Sweep sizes 2 B .. 8 MiB in powers of two.
    #[arg(short = 'a', long)]
    all: bool,
    /// Messages (default 5000 bw, 1000 lat; -a caps each size at 256 MiB of traffic).
    #[arg(short = 'n', long, conflicts_with = "duration")]
    iters: Option<u64>,
    /// Run each size for this many seconds instead.
    #[arg(short = 'D', long)]
    duration: Option<f64>,
    /// Queue pairs (bandwidth).
    #[arg(short = 'q', long, default_value_t = 1)]
    qps: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 4096)]
    mtu: u32,
    /// Work requests outstanding per QP (bandwidth).
    #[arg(short = 't', long, default_value_t = 128)]
    tx_depth: u32,
    /// READs/atomics outstanding per QP (default 128); udp --request: requests outstanding.
    #[arg(short = 'o', long)]
    outs: Option<u8>,
    /// udp: a request/response exchange instead of a blast: requests of this size, each
    /// answered by one datagram of -s bytes, --outs outstanding (the shape of a READ).
    #[arg(long, value_name = "SIZE")]
    request: Option<String>,
    /// Also run the plain-UDP baseline of the same wire size and print the ratios (READ and
    /// atomic bandwidth: also the UDP request/response exchange of the same shape).
    #[arg(long)]
    baseline: bool,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    ends: Ends,
}

/// Where the two ends of `roce kv` and `roce perf` run: one process by default, or a server and
/// a client (the client, as requester, sends every setting; the server only serves).
#[derive(Debug, Args)]
struct Ends {
    /// Serve one client (`--client HOST` on the other side) and exit.
    #[arg(long, conflicts_with = "client")]
    server: bool,
    /// Run against `--server` on HOST (HOST or HOST:PORT).
    #[arg(long, value_name = "HOST")]
    client: Option<String>,
    /// TCP port of the control connection (server mode).
    #[arg(long, default_value_t = roce_stack::driver::DEFAULT_CONTROL_PORT)]
    port: u16,
    /// Local address: server mode listens here; client mode binds it.
    #[arg(long)]
    bind: Option<std::net::IpAddr>,
    /// One process: address of the client (requester) end.
    #[arg(long, default_value = "127.0.0.1")]
    client_ip: std::net::IpAddr,
    /// One process: address of the server (responder) end.
    #[arg(long, default_value = "127.0.0.2")]
    server_ip: std::net::IpAddr,
}

impl Ends {
    /// Server mode: the listener on `--bind` (default all addresses) and `--port`, RoCE on 4791.
    fn listener(&self) -> anyhow::Result<roce_stack::driver::Listener> {
        Ok(roce_stack::driver::Listener::bind(
            roce_stack::driver::ServerConfig {
                listen: std::net::SocketAddr::new(
                    self.bind.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into()),
                    self.port,
                ),
                roce_port: roce_proto::ROCEV2_UDP_PORT,
                accept_timeout: None,
            },
        )?)
    }
}

/// An optional size flag (K/M suffixes), named in its error.
fn size_arg(flag: &str, value: Option<&str>) -> anyhow::Result<Option<u64>> {
    value
        .map(|s| {
            roce_stack::workload::parse_size(s)
                .map(u64::from)
                .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
        })
        .transpose()
}

#[derive(Debug, Args)]
struct DecodeArgs {
    /// Capture file (pcap or pcapng); `-` for stdin.
    #[arg(required_unless_present = "interface", conflicts_with = "interface")]
    file: Option<String>,
    /// Capture live from this interface (needs root or CAP_NET_RAW).
    #[arg(short, long)]
    interface: Option<String>,
    /// Live capture: stop after this many seconds.
    #[arg(long, requires = "interface")]
    duration: Option<f64>,
    /// Live capture: also save every packet seen to this pcap file.
    #[arg(short, long, requires = "interface")]
    write: Option<String>,
    /// Every field of every header as a tree.
    #[arg(short, long, conflicts_with = "json")]
    verbose: bool,
    /// One JSON object per packet per line.
    #[arg(long)]
    json: bool,
    /// Only packets to this destination QP (decimal or 0x hex).
    #[arg(long, value_parser = parse_u32)]
    qp: Option<u32>,
    /// Only packets with this opcode (name such as RC_SEND_ONLY, or number).
    #[arg(long, value_name = "NAME")]
    opcode: Option<String>,
    /// Only packets with a bad ICRC or that are malformed.
    #[arg(long)]
    errors: bool,
    /// Stop after N packets are printed.
    #[arg(short, long, value_name = "N")]
    count: Option<u64>,
    /// Also list packets that are not RoCE, one line each.
    #[arg(long)]
    all: bool,
    /// Exit 1 also when a RoCE packet is malformed or fails its ICRC.
    #[arg(long)]
    check: bool,
    /// Decoding threads for files (default: available parallelism; 1 = sequential).
    #[arg(long, hide = true)]
    threads: Option<usize>,
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| e.to_string())
}

fn decode(a: DecodeArgs) -> anyhow::Result<ExitCode> {
    let opcode = match &a.opcode {
        Some(n) => {
            Some(roce_pcap::parse_opcode(n).with_context(|| format!("unknown opcode name {n:?}"))?)
        }
        None => None,
    };
    let opts = Options {
        format: if a.json {
            OutputFormat::Json
        } else if a.verbose {
            OutputFormat::Verbose
        } else {
            OutputFormat::Summary
        },
        qp: a.qp,
        opcode,
        errors: a.errors,
        count: a.count,
        all: a.all,
        quiet: false,
    };
    // The decoder buffers its output and writes it in large chunks: no second buffer here.
    let mut out = std::io::stdout().lock();
    let outcome = match (&a.interface, &a.file) {
        (Some(iface), _) => {
            let live_opts = live::LiveOptions {
                interface: iface.clone(),
                duration: a.duration.map(std::time::Duration::from_secs_f64),
                write: a.write.clone(),
                stop: Some(live::interrupt_flag().map_err(anyhow::Error::msg)?),
            };
            live::capture(&live_opts, opts, &mut out)
        }
        (None, Some(path)) => roce_pcap::decode_path_with(
            path,
            opts,
            &mut out,
            a.threads.unwrap_or_else(roce_pcap::decode::default_workers),
        ),
        (None, None) => bail!("give a capture file, `-`, or --interface"),
    };
    drop(out);
    eprintln!("{}", outcome.stats.line());
    match &outcome.error {
        // The reader of our output went away (`| head`): stop quietly, like other tools.
        Some(roce_pcap::DecodeError::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Some(e) => eprintln!("roce decode: {e}"),
        None => {}
    }
    Ok(ExitCode::from(outcome.exit_code(a.check) as u8))
}

fn impairment(a: &ImpairArgs, seed: u64) -> roce_stack::driver::impair::Impairment {
    roce_stack::driver::impair::Impairment {
        loss: a.loss,
        reorder: a.reorder,
        duplicate: a.dup,
        corrupt: a.corrupt,
        ce: a.ce,
        seed,
        ..Default::default()
    }
}

fn run_config(a: &RunArgs) -> anyhow::Result<roce_stack::driver::RunConfig> {
    use roce_stack::workload::{parse_size_range, OpKind, WorkloadSpec};
    let (min_size, max_size) = parse_size_range(&a.size).map_err(anyhow::Error::msg)?;
    let cfg = roce_stack::driver::RunConfig {
        spec: WorkloadSpec {
            ops: OpKind::parse_list(&a.ops).map_err(anyhow::Error::msg)?,
            min_size,
            max_size,
            count: a.count,
            qps: a.qps,
            depth: a.depth,
            seed: a.seed,
        },
        mtu: a.mtu,
        impairment: impairment(&a.impair, a.seed),
        cc: a.cc.parse().map_err(|e| anyhow::anyhow!("--cc: {e}"))?,
        timeout: a.timeout,
        ..Default::default()
    };
    cfg.validate().map_err(anyhow::Error::msg)?;
    Ok(cfg)
}

/// A tap writing every datagram into `path` (pcap, Ethernet frames as on the wire).
fn pcap_tap(
    path: &Option<std::path::PathBuf>,
) -> anyhow::Result<Option<roce_stack::driver::endpoint::Tap>> {
    let Some(path) = path else { return Ok(None) };
    let mut cap = roce_pcap::tap::DatagramCapture::create(path)?;
    Ok(Some(Box::new(
        move |r: &roce_stack::driver::endpoint::TapRecord<'_>| {
            let _ = cap.record(r.time, r.src, r.dst, r.ecn, r.data);
        },
    )))
}

/// Prints a run's report (text or one JSON object); exit status 0 only when it verified.
fn report<R: serde::Serialize + std::fmt::Display>(
    r: &R,
    ok: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        print!("{r}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Loopback(a) => {
            let cfg = run_config(&a.run)?;
            let tap = pcap_tap(&a.run.pcap)?;
            let r = match (a.ipv6, a.client_ip, a.server_ip) {
                (false, Some(c), Some(s)) => roce_stack::driver::loopback_between(
                    &cfg,
                    (c, roce_proto::ROCEV2_UDP_PORT),
                    (s, roce_proto::ROCEV2_UDP_PORT),
                    tap,
                )?,
                _ => roce_stack::driver::loopback(&cfg, a.ipv6, tap)?,
            };
            report(&r, r.ok, a.run.json)
        }
        Command::Server(a) => {
            let cfg = roce_stack::driver::ServerConfig {
                listen: std::net::SocketAddr::new(a.bind, a.port),
                roce_port: roce_proto::ROCEV2_UDP_PORT,
                accept_timeout: None,
            };
            let imp = impairment(&a.impair, a.seed);
            imp.validate().map_err(anyhow::Error::msg)?;
            let listener = roce_stack::driver::Listener::bind(cfg)?;
            eprintln!(
                "roce server: waiting for a client on {}",
                listener.local_addr()
            );
            let o = listener.serve(imp, pcap_tap(&a.pcap)?)?;
            for m in &o.mismatches {
                eprintln!("roce server: {m}");
            }
            eprintln!(
                "roce server: client finished, {} bytes verified here",
                o.verified_bytes
            );
            Ok(if o.mismatches.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Client(a) => {
            let cfg = run_config(&a.run)?;
            let server = resolve(&a.server)?;
            let client = roce_stack::driver::ClientConfig {
                server,
                bind: a.bind,
                roce_port: roce_proto::ROCEV2_UDP_PORT,
            };
            let r = roce_stack::driver::run_client(client, &cfg, pcap_tap(&a.run.pcap)?)?;
            report(&r, r.ok, a.run.json)
        }
        Command::Decode(a) => decode(a),
        Command::Perf(a) => perf(a),
        Command::Kv(a) => kv(a),
        Command::Sim(SimCommand::Congestion(a)) => sim_congestion(&a),
        Command::GenCapture { packets, file } => {
            let f = std::fs::File::create(&file).with_context(|| format!("creating {file}"))?;
            let mut w = BufWriter::new(f);
            roce_pcap::fixtures::write_benchmark_capture(&mut w, packets)
                .with_context(|| format!("writing {file}"))?;
            w.flush()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn kv(a: KvArgs) -> anyhow::Result<ExitCode> {
    use roce_stack::driver::kv;
    use roce_stack::kv::{AllocKind, KvLayout, KvSpec, ModelShape, PlanSpec};
    let imp = impairment(&a.impair, a.seed);
    if a.ends.server {
        imp.validate().map_err(anyhow::Error::msg)?;
        let listener = a.ends.listener()?;
        eprintln!(
            "roce kv: decode side waiting for a prefill client on {}",
            listener.local_addr()
        );
        let o = listener.serve_kv(imp)?;
        for m in &o.mismatches {
            eprintln!("roce kv: {m}");
        }
        eprintln!("roce kv: {} of {} plans verified here", o.verified, o.plans);
        return Ok(if o.verified == o.plans {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let shape = ModelShape {
        layers: a.layers,
        tokens: a.tokens,
        kv_bytes: a.kv_bytes,
    };
    shape.validate()?;
    let alloc = AllocKind::parse(&a.alloc).map_err(|e| anyhow::anyhow!("--alloc: {e}"))?;
    let plans = if a.page.is_some() || a.layout.is_some() || a.merge {
        let layout = match &a.layout {
            Some(l) => KvLayout::parse(l).map_err(|e| anyhow::anyhow!("--layout: {e}"))?,
            None => KvLayout::Separate,
        };
        vec![PlanSpec::kv(a.page.unwrap_or(16), layout, a.merge, alloc)]
    } else {
        PlanSpec::defaults(alloc)
    };
    let pool_bytes = size_arg("--pool", a.pool.as_deref())?.unwrap_or(3 * shape.total_bytes());
    let cfg = kv::KvConfig {
        spec: KvSpec {
            shape,
            pool_bytes,
            qps: a.qps,
            seed: a.seed,
        },
        plans,
        mtu: a.mtu,
        impairment: imp,
        timeout: a.timeout,
        repeat: a.repeat,
        ..Default::default()
    };
    cfg.validate().map_err(anyhow::Error::msg)?;
    let r = match &a.ends.client {
        Some(host) => kv::run_kv_client(
            kv::KvClient {
                server: resolve(host)?,
                bind: a.ends.bind,
                roce_port: roce_proto::ROCEV2_UDP_PORT,
            },
            &cfg,
        )?,
        None => kv::run_kv_loopback(a.ends.client_ip, a.ends.server_ip, &cfg)?,
    };
    report(&r, r.ok, a.json)
}

fn perf(a: PerfArgs) -> anyhow::Result<ExitCode> {
    use roce_stack::driver::perf;
    let test = perf::PerfTest::parse(&a.test).map_err(anyhow::Error::msg)?;
    let specs = perf::specs(&perf::PerfOptions {
        test,
        lat: a.lat,
        size: size_arg("-s", a.size.as_deref())?,
        sweep: a.all,
        iters: a.iters,
        duration: a.duration,
        qps: a.qps,
        mtu: a.mtu,
        tx_depth: a.tx_depth,
        outs: a.outs,
        request: size_arg("--request", a.request.as_deref())?,
    })
    .map_err(anyhow::Error::msg)?;
    if a.ends.server {
        let listener = a.ends.listener()?;
        eprintln!(
            "roce perf: waiting for a client on {}",
            listener.local_addr()
        );
        let runs = listener.serve_perf()?;
        eprintln!("roce perf: client finished after {runs} runs");
        return Ok(ExitCode::SUCCESS);
    }
    let json = a.json;
    let mut first = true;
    // A reader that went away (`| head`) ends the run quietly, as with `decode`.
    let out = |r: &perf::PerfResult| {
        let mut o = std::io::stdout().lock();
        let written = if json {
            writeln!(o, "{}", serde_json::to_string(r).unwrap_or_default())
        } else if std::mem::take(&mut first) {
            writeln!(o, "{}\n{r}", perf::PerfResult::header(a.lat))
        } else {
            writeln!(o, "{r}")
        };
        written.and_then(|()| o.flush()).is_ok()
    };
    match &a.ends.client {
        Some(host) => perf::run_perf_client(
            perf::PerfClient {
                server: resolve(host)?,
                bind: a.ends.bind,
                roce_port: roce_proto::ROCEV2_UDP_PORT,
            },
            &specs,
            a.baseline,
            out,
        )?,
        None => {
            perf::run_perf_loopback(a.ends.client_ip, a.ends.server_ip, &specs, a.baseline, out)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `HOST`, `HOST:PORT`, `IP` or `[IPv6]:PORT` to a socket address (default port 18515).
fn resolve(s: &str) -> anyhow::Result<std::net::SocketAddr> {
    use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
    let port = roce_stack::driver::DEFAULT_CONTROL_PORT;
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

fn sim_congestion(a: &CongestionArgs) -> anyhow::Result<ExitCode> {
    use roce_stack::sim::experiments;
    let cc: roce_stack::CcConfig = a.cc.parse().context("--cc")?;
    if a.duration == 0 {
        bail!("--duration must be at least 1 ms");
    }
    let scenarios = experiments::suite(cc, std::time::Duration::from_millis(a.duration), a.seed);
    let runs = experiments::run_all(&scenarios);
    if a.json {
        println!("{}", experiments::to_json(&runs));
    } else {
        print!("{}", experiments::table(&runs));
    }
    if let Some(path) = &a.plot {
        std::fs::write(path, experiments::to_svg(&runs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let name = match &cli.command {
        Command::Loopback(_) => "loopback",
        Command::Server(_) => "server",
        Command::Client(_) => "client",
        Command::Decode(_) => "decode",
        Command::Perf(_) => "perf",
        Command::Kv(_) => "kv",
        Command::Sim(_) => "sim",
        Command::GenCapture { .. } => "gen-capture",
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roce {name}: {e:#}");
            ExitCode::FAILURE
        }
    }
}
