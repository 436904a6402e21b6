//! `roce sim`: experiments in the deterministic simulator.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use roce_apps::congestion;

use crate::args::flag;
use crate::cc;

#[derive(Debug, Subcommand)]
pub(crate) enum SimCommand {
    /// N long WRITE flows through one switch bottleneck (RED ECN marking, tail drop): 2 and 8
    /// flows with DCQCN and without congestion control, and a flow joining late. Prints a
    /// table (or JSON) and can plot per-flow rates and the queue depth.
    Congestion(CongestionArgs),
    /// Flow completion times (FCT slowdown at p50/p95/p99 per flow-size bucket) of Poisson
    /// flows with WebSearch / FB Hadoop sizes, or of an n:1 incast, each flow a real RC
    /// WRITE, on the one-switch fabric (every flow toward one receiver).
    Fabric(FabricArgs),
}

#[derive(Debug, Args)]
pub(crate) struct FabricArgs {
    /// Topology: switch (one switch, every flow to one receiver). leaf-spine and fat-tree are
    /// not implemented yet.
    #[arg(long, default_value = "switch")]
    topology: String,
    /// websearch, fbhadoop, `incast:N[:SIZE]` (N senders, SIZE bytes each, default 64K),
    /// `incast-sweep[:SIZE]` (goodput and slowdown for 2 to 128 senders), or a CDF file
    /// (`<bytes> <cumulative percent>` per line).
    #[arg(long, default_value = "websearch")]
    workload: String,
    /// Target average load of the bottleneck link (Poisson workloads).
    #[arg(long, default_value_t = 0.3)]
    load: f64,
    /// Congestion control: dcqcn (= paper), none, or any `--cc` of `roce loopback`; several,
    /// separated by `;` or `/` (dcqcn/none), run the same flows once each.
    #[arg(long, default_value = "dcqcn")]
    cc: String,
    /// Write figures into this directory: `fct.svg` (slowdown by flow size, p50/p95/p99 per
    /// congestion control) and `queue.svg` (the switch queue's CDF over time) or, for an
    /// incast sweep, `incast.svg` (goodput and p99 against the number of senders).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Write the run's traffic to this pcap file, as it reaches each receiver (with the
    /// switch's PFC frames; one congestion control only). Every packet: large for long runs.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Add a victim flow of SIZE bytes (K = 1024) from the first sender to a second receiver
    /// whose link does not cross the congested switch port, 50 us in: with PFC, the pauses
    /// of its sender block it too (head-of-line blocking). Reported apart.
    #[arg(long, value_name = "SIZE")]
    victim: Option<String>,
    /// PFC at the switch port: on (pause the senders above XOFF, never drop) or off (tail drop).
    #[arg(long, default_value = "off")]
    pfc: String,
    /// Sender hosts.
    #[arg(long, default_value_t = 16)]
    hosts: usize,
    /// Flows arrive during this many ms of virtual time.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Seed of arrivals, sizes and hosts.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CongestionArgs {
    /// Print one JSON object (`runs`: name, cc, flows, fairness, utilization, tail_drops,
    /// retransmitted_packets, max_queue_bytes, mean_queue_bytes, cnps, ...).
    #[arg(long)]
    json: bool,
    /// Write an SVG plot of per-flow rate and queue depth over time.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
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

pub(crate) fn run(c: SimCommand) -> anyhow::Result<ExitCode> {
    match c {
        SimCommand::Congestion(a) => sim_congestion(&a),
        SimCommand::Fabric(a) => sim_fabric(&a),
    }
}

/// `--workload incast-sweep[:SIZE]`: n:1 incasts of SIZE-byte flows (default 256K) for n = 2
/// to 128: goodput and FCT slowdown against n, one row (or JSON object) per n.
fn incast_sweep(a: &FabricArgs, size: Option<&str>, pfc: bool) -> anyhow::Result<ExitCode> {
    use congestion::fct::{FctSpec, Workload};
    let size = match size {
        Some(v) => crate::units::size(v)
            .map_err(|e| anyhow::anyhow!("--workload incast-sweep:SIZE: {e}"))?,
        None => 256 * 1024,
    };
    const SENDERS: [usize; 7] = [2, 4, 8, 16, 32, 64, 128];
    let ccs = ccs(&a.cc)?;
    let mut specs = Vec::new();
    for &cc in &ccs {
        for n in SENDERS {
            let mut spec = FctSpec::new(
                Workload::Incast { n, size },
                cc,
                std::time::Duration::from_millis(a.duration),
                a.seed,
            );
            spec.pfc = pfc;
            spec.validate()?;
            specs.push(spec);
        }
    }
    let clock = Clock::start();
    let reports = congestion::fct::run_many(&specs);
    let sweeps: Vec<(String, Vec<(usize, congestion::fct::FctReport)>)> = reports
        .chunks(SENDERS.len())
        .map(|rs| {
            let label = rs.first().map_or_else(String::new, |r| r.cc.clone());
            (
                label,
                SENDERS.iter().copied().zip(rs.iter().cloned()).collect(),
            )
        })
        .collect();
    clock.report(sweeps.iter().flat_map(|(_, v)| v.iter().map(|(_, r)| r)));
    if a.json {
        let v: Vec<_> = sweeps
            .iter()
            .flat_map(|(_, rows)| rows.iter())
            .map(|(n, r)| serde_json::json!({"senders": n, "report": r}))
            .collect();
        println!("{}", serde_json::to_string(&v)?);
    } else {
        for (label, rows) in &sweeps {
            println!("cc {label}");
            println!(
                "{:>8} {:>12} {:>9} {:>9} {:>8} {:>8} {:>7}",
                "senders", "goodput", "p50", "p99", "drops", "retx", "pauses"
            );
            for (n, r) in rows {
                println!(
                    "{:>8} {:>7.2} Gb/s {:>9.2} {:>9.2} {:>8} {:>8} {:>7}",
                    n,
                    r.goodput_gbps,
                    r.all.p50,
                    r.all.p99,
                    r.tail_drops,
                    r.retransmitted_packets,
                    r.pfc_pauses
                );
            }
        }
    }
    if let Some(dir) = &a.plot {
        let svg = congestion::fct_plot::incast_svg(&sweeps)
            .ok_or_else(|| anyhow::anyhow!("--plot: nothing to draw"))?;
        write_figure(dir, "incast.svg", &svg)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The congestion controls of `--cc` (`;`- or `/`-separated; a comma belongs to one's
/// `:key=value,...` overrides).
fn ccs(s: &str) -> anyhow::Result<Vec<roce_stack::CcConfig>> {
    let v: Vec<_> = s
        .split([';', '/'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| flag("--cc", p, cc::parse))
        .collect::<Result<_, _>>()?;
    if v.is_empty() || v.len() > 4 {
        bail!("--cc: one to four congestion controls");
    }
    Ok(v)
}

/// A simulator tap writing what reaches each receiver, and the switch's PFC frames, to a pcap
/// file (closed when the simulator drops the tap).
fn capture_tap(path: &std::path::Path) -> anyhow::Result<Box<dyn roce_stack::sim::Tap>> {
    use roce_stack::sim::{TapEvent, TapKind};
    struct Capture(roce_pcap::tap::DatagramCapture);
    fn at(t: roce_stack::Instant) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_nanos(t.as_nanos())
    }
    impl roce_stack::sim::Tap for Capture {
        fn on_datagram(&mut self, ev: &TapEvent<'_>) {
            if ev.kind == TapKind::Delivered {
                let src = std::net::SocketAddr::new(ev.src, ev.src_port);
                let dst = std::net::SocketAddr::new(ev.dst, ev.dst_port);
                let _ = self.0.record(at(ev.time), src, dst, ev.ecn, ev.datagram);
            }
        }
        fn on_frame(&mut self, time: roce_stack::Instant, frame: &[u8]) {
            let _ = self.0.record_frame(at(time), frame);
        }
    }
    let cap = roce_pcap::tap::DatagramCapture::create(path)
        .with_context(|| format!("--pcap {}", path.display()))?;
    Ok(Box::new(Capture(cap)))
}

/// Writes figure `name` into `dir` (created if missing).
fn write_figure(dir: &std::path::Path, name: &str, svg: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("roce sim fabric: wrote {}", path.display());
    Ok(())
}

/// Wall time of the experiments, and the simulator's speed in packet-hops per second (one
/// core: the simulator runs on the calling thread), on stderr so that the results on stdout
/// stay the same for the same seed.
struct Clock(std::time::Instant);

impl Clock {
    fn start() -> Self {
        Self(std::time::Instant::now())
    }

    fn report<'a>(&self, runs: impl Iterator<Item = &'a congestion::fct::FctReport>) {
        let s = self.0.elapsed().as_secs_f64();
        let (n, hops) = runs.fold((0, 0u64), |(n, h), r| (n + 1, h + r.packet_hops));
        let cores = std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .min(n.max(1));
        let rss = peak_rss_mib().map_or_else(String::new, |m| format!(", peak RSS {m} MiB"));
        eprintln!(
            "roce sim fabric: {n} run(s) on {cores} core(s), {hops} packet-hops in {s:.2} s of wall time: {:.2} M packet-hops/s per core{rss}",
            hops as f64 / s.max(1e-9) / 1e6 / cores as f64
        );
    }
}

/// The process's peak resident set (Linux `VmHWM`), MiB.
fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024)
}

/// The workloads shipped with the repository's shared docs, by name.
fn workload_cdf(name: &str) -> anyhow::Result<congestion::fct::Cdf> {
    let text = match name {
        "websearch" => congestion::fct::WEBSEARCH.to_string(),
        "fbhadoop" => congestion::fct::FB_HADOOP.to_string(),
        path => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
    };
    congestion::fct::Cdf::parse(&text).map_err(|e| anyhow::anyhow!("--workload {name}: {e}"))
}

fn sim_fabric(a: &FabricArgs) -> anyhow::Result<ExitCode> {
    use congestion::fct::{FctSpec, Workload};
    if a.topology != "switch" {
        bail!(
            "--topology {}: only `switch` is implemented (leaf-spine and fat-tree are not yet)",
            a.topology
        );
    }
    let pfc = match a.pfc.as_str() {
        "on" => true,
        "off" => false,
        other => bail!("--pfc {other}: on or off"),
    };
    if a.duration == 0 || a.duration > 1000 {
        bail!("--duration must be 1..=1000 ms");
    }
    if let Some(rest) = a.workload.strip_prefix("incast-sweep") {
        return incast_sweep(a, rest.strip_prefix(':'), pfc);
    }
    let workload = match a.workload.strip_prefix("incast:") {
        Some(rest) => {
            let mut it = rest.split(':');
            let n: usize = it
                .next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("--workload incast:N[:SIZE]: N is a number"))?;
            let size = match it.next() {
                Some(v) => crate::units::size(v)
                    .map_err(|e| anyhow::anyhow!("--workload incast SIZE: {e}"))?,
                None => 64 * 1024,
            };
            Workload::Incast { n, size }
        }
        None => Workload::Poisson {
            cdf: workload_cdf(&a.workload)?,
            load: a.load,
        },
    };
    let ccs = ccs(&a.cc)?;
    let victim = a
        .victim
        .as_deref()
        .map(|v| crate::units::size(v).map_err(|e| anyhow::anyhow!("--victim: {e}")))
        .transpose()?;
    let mut specs = Vec::new();
    for cc in ccs {
        let mut spec = FctSpec::new(
            workload.clone(),
            cc,
            std::time::Duration::from_millis(a.duration),
            a.seed,
        );
        spec.hosts = a.hosts;
        spec.pfc = pfc;
        spec.victim = victim;
        spec.validate()?;
        specs.push(spec);
    }
    let clock = Clock::start();
    let runs = match &a.pcap {
        Some(_) if specs.len() > 1 => bail!("--pcap takes one --cc"),
        Some(p) => {
            let r = congestion::fct::run_tapped(&specs[0], Some(capture_tap(p)?));
            eprintln!("roce sim fabric: wrote {}", p.display());
            vec![r]
        }
        // Each congestion control on its own core.
        None => congestion::fct::run_many(&specs),
    };
    clock.report(runs.iter());
    if a.json {
        // One congestion control: its report; several: an array of them.
        match runs.as_slice() {
            [r] => println!("{}", serde_json::to_string(r)?),
            rs => println!("{}", serde_json::to_string(rs)?),
        }
    } else {
        for r in &runs {
            print!("{}", congestion::fct::table(r));
        }
    }
    if let Some(dir) = &a.plot {
        let svg = congestion::fct_plot::fct_svg(&runs)
            .ok_or_else(|| anyhow::anyhow!("--plot: no flow completed, nothing to draw"))?;
        write_figure(dir, "fct.svg", &svg)?;
        if let Some(q) = congestion::fct_plot::queue_svg(&runs) {
            write_figure(dir, "queue.svg", &q)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn sim_congestion(a: &CongestionArgs) -> anyhow::Result<ExitCode> {
    let cc = flag("--cc", &a.cc, cc::parse)?;
    if a.duration == 0 {
        bail!("--duration must be at least 1 ms");
    }
    let scenarios = congestion::suite(cc, std::time::Duration::from_millis(a.duration), a.seed);
    let runs = congestion::run_all(&scenarios);
    if a.json {
        println!("{}", congestion::to_json(&runs));
    } else {
        print!("{}", congestion::table(&runs));
    }
    if let Some(path) = &a.plot {
        std::fs::write(path, congestion::to_svg(&runs))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
