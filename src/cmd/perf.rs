//! `roce perf`: perftest-style bandwidth, message rate and latency, and the UDP baselines.
use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use roce_apps::perf::{self, PerfResult, PerfTest};
use roce_driver::connect::{self, Connector, Exchange};
use roce_driver::Secrets;
use roce_stack::Service;

use crate::args::{size_flag, Ends, LinkArgs};

#[derive(Debug, Args)]
pub(crate) struct PerfArgs {
    /// write, read, send, atomic, or udp (the baseline).
    test: String,
    /// Latency (ping-pong) instead of bandwidth.
    #[arg(long)]
    lat: bool,
    /// Message size (K = 1024); udp: datagram size. Default 65536 (bw), 8 (lat); udp 65507
    /// (bw), 16 (lat).
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
    /// Derive the start PSNs, QPNs and memory keys from this seed (reproducible, and so
    /// predictable) instead of the OS random generator.
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    link: LinkArgs,
    #[command(flatten)]
    ends: Ends,
    /// Connect each run's QPs through the IB CM on QP1 (UDP 4791 only, no TCP connection;
    /// with --server/--client, --port is the RDMA-CM port). Not with --baseline or udp. With
    /// --perftest: perftest's -R (its exchange over an RDMA-CM connection of its own, the
    /// data QPs through RDMA-CM; RC, or UD through SIDR).
    #[arg(long, conflicts_with = "baseline")]
    cm: bool,
    /// Speak perftest's TCP exchange (port 18515: versions, MTU, key records, reports), so a
    /// stock perftest can be the other end: ib_{write,read,send,atomic}_bw and
    /// ib_{write,read,send,atomic}_lat (with --lat). `--server` is the side started without a host,
    /// `--client HOST` the side with one. One size.
    #[arg(long, conflicts_with = "baseline")]
    perftest: bool,
    /// --perftest: bandwidth in Gb/sec (10^9 bits/s) instead of perftest's MB/sec (2^20
    /// bytes/s), in the reports exchanged and printed; give the stock tool the same flag.
    #[arg(long = "report_gbits", alias = "report-gbits", requires = "perftest")]
    report_gbits: bool,
    /// --perftest: the peer's RoCE address, when the exchange reaches it at another (a
    /// management network): the GID in its key record must name this address. Without it,
    /// the GID must name the address the exchange came from (an IPv6 GID over an IPv4
    /// exchange is taken).
    #[arg(long, value_name = "ADDR", requires = "perftest")]
    peer_roce: Option<std::net::IpAddr>,
    /// Connection type, as perftest's -c: RC, UC (send and write, nothing acknowledged or
    /// retransmitted) or UD (send only, sizes up to the MTU, lost messages not retransmitted).
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    connection: String,
}

/// `write`, `read`, `send`, `atomic` or `udp`.
fn parse_test(s: &str) -> anyhow::Result<PerfTest> {
    Ok(match s {
        "write" => PerfTest::Write,
        "read" => PerfTest::Read,
        "send" => PerfTest::Send,
        "atomic" => PerfTest::Atomic,
        "udp" => PerfTest::Udp,
        _ => anyhow::bail!("unknown test {s:?}: write, read, send, atomic or udp"),
    })
}

pub(crate) fn run(a: PerfArgs) -> anyhow::Result<ExitCode> {
    let Ok(service) = a.connection.parse::<Service>() else {
        anyhow::bail!("-c {:?}: use RC, UC or UD", a.connection);
    };
    let test = parse_test(&a.test)?;
    if a.perftest && a.all && test == PerfTest::Atomic {
        anyhow::bail!("--perftest atomic takes no -a: perftest's atomics are 8 bytes");
    }
    // perftest's own defaults, so that both sides of a stock pair run as many (5000 for
    // ib_write_bw, 1000 for every other test; every size of -a too).
    let iters = match (a.iters, a.perftest && a.duration.is_none()) {
        (None, true) if test == PerfTest::Write && !a.lat => Some(5000),
        (None, true) => Some(1000),
        (n, _) => n,
    };
    let specs = perf::specs(&perf::PerfOptions {
        test,
        lat: a.lat,
        size: size_flag("-s", a.size.as_deref())?,
        sweep: a.all,
        iters,
        duration: a.duration,
        qps: a.qps,
        mtu: a.mtu,
        tx_depth: a.tx_depth,
        outs: a.outs,
        request: size_flag("--request", a.request.as_deref())?,
        service,
    })?;
    if a.cm && (service == Service::Uc || (service == Service::Ud && !a.perftest)) {
        anyhow::bail!(
            "-c {service} with --cm: roce's CM connects RC, and UD through SIDR with --perftest"
        );
    }
    let secrets = Secrets::from_seed(a.seed);
    if let Some(s) = a.seed {
        eprintln!("roce perf: secrets derived from seed {s} (PSNs, QPNs and keys are predictable)");
    }
    let exchange = match (a.perftest, a.cm) {
        (true, cm) => Exchange::Perftest { cm },
        (false, true) => Exchange::RdmaCm,
        (false, false) => Exchange::Control,
    };
    // A one-process run over roce's control channel takes any free TCP port.
    let ends = a.ends.connect(exchange == Exchange::Control)?;
    let how = match exchange {
        Exchange::Control => "a client on TCP".to_string(),
        Exchange::RdmaCm => "a client's CM REQ on".to_string(),
        e => format!("a client of {e} on"),
    };
    let c = Connector::new(exchange, ends, secrets, a.link.link).on_ready(move || {
        if let connect::Ends::Server { listen, .. } = ends {
            match exchange {
                Exchange::RdmaCm => eprintln!(
                    "roce perf: waiting for {how} {} UDP 4791 (RDMA-CM port {})",
                    listen.ip(),
                    listen.port()
                ),
                _ => eprintln!("roce perf: waiting for {how} {listen}"),
            }
        }
    });
    let gbits = a.report_gbits;
    let run = perf::PerfRun {
        specs: &specs,
        baseline: a.baseline,
        perftest: perf::perftest::PerftestOpts {
            gbits,
            peer_roce: a.peer_roce,
        },
    };
    let (json, lat, perftest) = (a.json, a.lat, a.perftest);
    let mut rows = 0usize;
    // A reader that went away (`| head`) ends the run quietly, as with `decode`; any other
    // failed write ends it with an error. perftest's shape: its header once, a row per size.
    let mut failed: Option<std::io::Error> = None;
    let mut out = |r: &PerfResult| {
        let mut o = std::io::stdout().lock();
        let first = rows == 0;
        rows += 1;
        let written = if json {
            writeln!(o, "{}", serde_json::to_string(r).unwrap_or_default())
        } else if perftest {
            let text = r.perftest_report(gbits);
            let skip = usize::from(!first);
            text.lines()
                .skip(skip)
                .try_for_each(|line| writeln!(o, "{line}"))
        } else if first {
            writeln!(o, "{}\n{r}", PerfResult::header(lat))
        } else {
            writeln!(o, "{r}")
        };
        match written.and_then(|()| o.flush()) {
            Ok(()) => true,
            Err(e) => {
                failed.get_or_insert(e);
                false
            }
        }
    };
    match perf::run(c, run, &mut out)? {
        Some(perf::Served::Runs(n)) => eprintln!("roce perf: client finished after {n} runs"),
        Some(perf::Served::Figures(rs)) => {
            if specs[0].test == PerfTest::Send || specs[0].lat {
                eprintln!("roce perf: this server's figures:");
            } else {
                eprintln!("roce perf: the client's figures:");
            }
            for r in &rs {
                if !out(r) {
                    break;
                }
            }
        }
        None => {}
    }
    match failed {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("writing the output to stdout"))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
