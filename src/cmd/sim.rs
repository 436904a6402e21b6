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
    /// flows with WebSearch / FB Hadoop sizes, of an n:1 incast or of long flows, each flow a
    /// real RC WRITE, through one switch port or over a leaf-spine or fat-tree fabric with
    /// ECMP.
    Fabric(Box<FabricArgs>),
}

#[derive(Debug, Args)]
pub(crate) struct FabricArgs {
    /// Topology: `switch` (one switch port in front of one receiver, every flow toward it,
    /// --hosts senders); `leaf-spine[:LEAVES:HOSTS:SPINES]` (default 4:16:4, flows between
    /// random host pairs); `fat-tree` (the HPCC paper's: 320 hosts, 20 ToR, 20 aggregation,
    /// 16 core switches) or `fat-tree:K` (the k-ary fat tree, k³/4 hosts).
    #[arg(long, default_value = "switch")]
    topology: String,
    /// Oversubscription at the ToR of a leaf-spine or fat tree: its hosts' bandwidth over
    /// its uplinks' (sets the rate between switches; default 1: 400 Gb/s on the presets;
    /// 0.25..=64).
    #[arg(long, value_name = "R")]
    oversub: Option<f64>,
    /// ECMP in a fabric: `on` (the 5-tuple hash, each QP its own UDP source port),
    /// `adaptive` (as on, and senders move a QP whose path is marked to another of 4 source
    /// ports, weighted toward the least-marked), `one-port` (every QP the same UDP source
    /// port: only the addresses spread flows), `off` (one path per destination).
    #[arg(long, default_value = "on")]
    ecmp: String,
    /// websearch, fbhadoop, `incast:N[:SIZE]` (N senders, SIZE bytes each, default 64K; in
    /// a fabric the last N hosts into host 0), `incast-sweep[:SIZE]` (goodput and slowdown
    /// for 2 to 128 senders), `elephant[:N[:SIZE]]` (fabrics: every host sends N flows of
    /// SIZE, default 4 of 4M, to the host half the fabric away), or a CDF file (`<bytes>
    /// <cumulative percent>` per line).
    #[arg(long, default_value = "websearch")]
    workload: String,
    /// Target average load of the bottleneck link, or in a fabric of every host link
    /// (Poisson workloads).
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
    /// Capture at one host's NIC: what ADDR sends as it leaves, what it receives as it
    /// arrives, stamped by a clock OFFSET_US off the simulation's (negative: behind) with up
    /// to JITTER_NS of noise either way (seeded; the stamps stay in order), missing a share
    /// MISS (0 to below 1) of the datagrams as an overflowing capture would. Repeat for
    /// several points (at most 8; one congestion control), then `roce analyze A.pcap B.pcap`
    /// places each loss; with --json, `captures.directions` lists per direction what was lost
    /// after the sender's capture saw it and what either capture missed (frame numbers): the
    /// truth to compare.
    #[arg(long, value_name = "ADDR=FILE[@OFFSET_US[:JITTER_NS[:MISS]]]")]
    pcap_at: Vec<String>,
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
    /// The flows' memory regions: `pattern` (the default: bytes generated when sent and
    /// checked as each packet is placed, never stored; a flow costs its QPs and packets in
    /// flight, not its size) or `bytes` (real regions as large as the flows, checked when each
    /// completes, bounded by --memory). Same FCTs either way.
    #[arg(long, value_name = "KIND", default_value = "pattern")]
    regions: String,
    /// With --regions bytes: bytes of flows' receiver regions alive at once in each run (K/M/G suffixes): a flow
    /// that would go beyond waits for earlier ones (counted: its FCT includes the wait).
    /// Default 1 GiB; in a fabric of more than 64 hosts up to 8 GiB, within 60 % of the
    /// memory available, shared by the runs that go at once.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// Switch buffer (K/M suffixes): the switch port's in the one-switch model (default 4M),
    /// each switch's shared buffer in a fabric (default 32M).
    #[arg(long, value_name = "SIZE")]
    buffer: Option<String>,
    /// Threads per run for a fabric (1 to 64): the fabric is split into as many parts (runs
    /// of ToR switches with their hosts, or leaves of a leaf-spine), each simulated on its
    /// own thread in step with the others; the results (FCTs, JSON, captures) are the same
    /// on any number. Default: the cores, shared among the runs of several --cc, for
    /// fabrics of at least 256 hosts (smaller ones run faster on one)
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
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
    /// Virtual duration of each run, ms (1..=1000).
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
fn incast_sweep(
    a: &FabricArgs,
    size: Option<&str>,
    pfc: bool,
    fabric: Option<congestion::fct::FabricSpec>,
) -> anyhow::Result<ExitCode> {
    use congestion::fct::{FctSpec, Workload};
    let size = match size {
        Some(v) => crate::units::size(v)
            .map_err(|e| anyhow::anyhow!("--workload incast-sweep:SIZE: {e}"))?,
        None => 256 * 1024,
    };
    // In a fabric, as many as it has hosts to send.
    let senders: Vec<usize> = [2, 4, 8, 16, 32, 64, 128]
        .into_iter()
        .filter(|&n| fabric.is_none_or(|f| n < f.topology.hosts()))
        .collect();
    let ccs = ccs(&a.cc)?;
    let mut specs = Vec::new();
    for &cc in &ccs {
        for &n in &senders {
            let mut spec = FctSpec::new(
                Workload::Incast { n, size },
                cc,
                std::time::Duration::from_millis(a.duration),
                a.seed,
            );
            spec.pfc = pfc;
            spec.fabric = fabric;
            spec.buffer_bytes = buffer_bytes(a, fabric, spec.buffer_bytes)?;
            spec.validate()?;
            specs.push(spec);
        }
    }
    let threads = threads_per_run(a, specs.len(), fabric)?;
    for s in &mut specs {
        s.threads = threads;
    }
    let clock = Clock::start();
    let reports = congestion::fct::run_many(&specs);
    let sweeps: Vec<(String, Vec<(usize, congestion::fct::FctReport)>)> = reports
        .chunks(senders.len().max(1))
        .map(|rs| {
            let label = rs.first().map_or_else(String::new, |r| r.cc.clone());
            (
                label,
                senders.iter().copied().zip(rs.iter().cloned()).collect(),
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
        outln!("{}", serde_json::to_string(&v)?)?;
    } else {
        for (label, rows) in &sweeps {
            outln!("cc {label}")?;
            outln!(
                "{:>8} {:>12} {:>9} {:>9} {:>8} {:>8} {:>7}",
                "senders",
                "goodput",
                "p50",
                "p99",
                "drops",
                "retx",
                "pauses"
            )?;
            for (n, r) in rows {
                outln!(
                    "{:>8} {:>7.2} Gb/s {:>9.2} {:>9.2} {:>8} {:>8} {:>7}",
                    n,
                    r.goodput_gbps,
                    r.all.p50,
                    r.all.p99,
                    r.tail_drops,
                    r.retransmitted_packets,
                    r.pfc_pauses
                )?;
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

/// Writes figure `name` into `dir` (created if missing).
fn write_figure(dir: &std::path::Path, name: &str, svg: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    write_whole(&path, svg)?;
    eprintln!("roce sim fabric: wrote {}", path.display());
    Ok(())
}

/// Fabrics with fewer hosts run on one thread unless `--threads` says otherwise: their
/// parts have too little to do between meetings for a second thread to pay (the 64-host
/// leaf-spine ran 1.2x slower on two).
const PARALLEL_HOSTS: usize = 256;

/// `--threads`, or the cores shared among `runs` that go at once, for a fabric of at least
/// [`PARALLEL_HOSTS`] hosts.
fn threads_per_run(
    a: &FabricArgs,
    runs: usize,
    fabric: Option<congestion::fct::FabricSpec>,
) -> anyhow::Result<usize> {
    match a.threads {
        Some(n) if (1..=64).contains(&n) => Ok(n),
        Some(n) => bail!("--threads {n}: 1 to 64"),
        None if fabric.is_none_or(|f| f.topology.hosts() < PARALLEL_HOSTS) => Ok(1),
        None => {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
            Ok((cores / runs.max(1)).max(1))
        }
    }
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
        let (n, hops, threads) = runs.fold((0, 0u64, 0), |(n, h, t), r| {
            (n + 1, h + r.packet_hops, t + r.threads.max(1))
        });
        let cores = std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .min(threads.max(1));
        let rss = peak_rss_mib().map_or_else(String::new, |m| format!(", peak RSS {m} MiB"));
        eprintln!(
            "roce sim fabric: {n} run(s) on {cores} core(s), {hops} packet-hops in {s:.2} s of wall time: {:.2} M packet-hops/s per core{rss}",
            hops as f64 / s.max(1e-9) / 1e6 / cores as f64
        );
    }
}

/// The process's peak resident set (Linux `VmHWM`), MiB.
fn peak_rss_mib() -> Option<u64> {
    proc_kib("/proc/self/status", "VmHWM:").map(|k| k / 1024)
}

/// The `KEY: N kB` line of a Linux `/proc` file, in KiB.
fn proc_kib(file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The workloads shipped with the repository's shared docs, by name.
fn workload_cdf(name: &str) -> anyhow::Result<congestion::fct::Cdf> {
    let text = match name {
        "websearch" => congestion::fct::WEBSEARCH.to_string(),
        "fbhadoop" => congestion::fct::FB_HADOOP.to_string(),
        path => read_workload_file(path)?,
    };
    congestion::fct::Cdf::parse(&text).map_err(|e| anyhow::anyhow!("--workload {name}: {e}"))
}

/// The most a `--workload FILE` may hold: [`congestion::fct::MAX_CDF_POINTS`] lines of up to
/// 100 bytes each.
const MAX_WORKLOAD_FILE: u64 = congestion::fct::MAX_CDF_POINTS as u64 * 100;

/// A CDF file's text, refused (without reading further) past [`MAX_WORKLOAD_FILE`] bytes: a
/// device or a pipe (`/dev/zero`) ends at the bound like a file does.
fn read_workload_file(path: &str) -> anyhow::Result<String> {
    use std::io::Read;
    let f =
        std::fs::File::open(path).with_context(|| format!("--workload {path}: reading {path}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_WORKLOAD_FILE + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("--workload {path}: reading"))?;
    if bytes.len() as u64 > MAX_WORKLOAD_FILE {
        bail!(
            "--workload {path}: longer than {} KiB; a CDF has at most {} points",
            MAX_WORKLOAD_FILE / 1024,
            congestion::fct::MAX_CDF_POINTS
        );
    }
    String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("--workload {path}: not text (UTF-8)"))
}

/// `--topology`, `--oversub` and `--ecmp`: `None` for the one-switch model.
fn fabric_spec(a: &FabricArgs) -> anyhow::Result<Option<congestion::fct::FabricSpec>> {
    use congestion::fct::{Ecmp, FabricSpec};
    use roce_stack::sim::Topology;
    let nums = |rest: &str, n: usize| -> anyhow::Result<Vec<usize>> {
        let v: Vec<usize> = rest
            .split(':')
            .map(|x| {
                x.parse()
                    .map_err(|_| anyhow::anyhow!("--topology {}: {x} is not a count", a.topology))
            })
            .collect::<Result<_, _>>()?;
        if v.len() != n {
            bail!("--topology {}: {n} counts expected", a.topology);
        }
        Ok(v)
    };
    let ecmp = match a.ecmp.as_str() {
        "on" => Ecmp::On,
        "one-port" => Ecmp::OnePort,
        "off" => Ecmp::Off,
        "adaptive" => Ecmp::Adaptive,
        other => bail!("--ecmp {other}: on, adaptive, one-port or off"),
    };
    let oversub = match a.oversub {
        Some(r) if !(0.25..=64.0).contains(&r) => bail!("--oversub {r}: must be 0.25..=64"),
        Some(_) if a.topology == "switch" => {
            bail!(
                "--oversub sets a fabric's uplinks: give it with --topology leaf-spine or fat-tree"
            )
        }
        r => r.unwrap_or(1.0),
    };
    let (topology, tor_hosts, uplinks) = match a.topology.split_once(':') {
        _ if a.topology == "switch" => return Ok(None),
        None if a.topology == "leaf-spine" => (
            Topology::LeafSpine {
                leaves: 4,
                hosts_per_leaf: 16,
                spines: 4,
            },
            16,
            4,
        ),
        None if a.topology == "fat-tree" => (Topology::HPCC, 16, 4),
        Some(("leaf-spine", rest)) => {
            let v = nums(rest, 3)?;
            (
                Topology::LeafSpine {
                    leaves: v[0],
                    hosts_per_leaf: v[1],
                    spines: v[2],
                },
                v[1],
                v[2],
            )
        }
        Some(("fat-tree", rest)) => {
            let k = nums(rest, 1)?[0];
            if k < 2 || k % 2 != 0 || k > 24 {
                bail!("--topology fat-tree:K: K must be even, 2..=24");
            }
            (Topology::k_ary(k), k / 2, k / 2)
        }
        _ => bail!(
            "--topology {}: switch, leaf-spine[:LEAVES:HOSTS:SPINES], fat-tree or fat-tree:K",
            a.topology
        ),
    };
    topology
        .validate()
        .map_err(|e| anyhow::anyhow!("--topology {}: {e}", a.topology))?;
    let host_bps = 100e9;
    let fabric_rate_bps =
        (tor_hosts as f64 * host_bps / (uplinks.max(1) as f64 * oversub)).round() as u64;
    Ok(Some(FabricSpec {
        topology,
        fabric_rate_bps: fabric_rate_bps.max(1_000_000),
        ecmp,
    }))
}

/// An optional size flag that must lie in `lo..=hi` (`range` says so in the error).
fn bounded_size(
    name: &str,
    value: Option<&str>,
    lo: u64,
    hi: u64,
    range: &str,
) -> anyhow::Result<Option<u64>> {
    let v = crate::args::size_flag(name, value)?;
    if v.is_some_and(|b| !(lo..=hi).contains(&b)) {
        bail!("{name} must be {range}");
    }
    Ok(v)
}

/// `--buffer`, or its default: `one_switch` there, 32 MB per switch in a fabric.
fn buffer_bytes(
    a: &FabricArgs,
    f: Option<congestion::fct::FabricSpec>,
    one_switch: u64,
) -> anyhow::Result<u64> {
    match bounded_size(
        "--buffer",
        a.buffer.as_deref(),
        16 << 10,
        1 << 30,
        "16K..=1G",
    )? {
        Some(b) => Ok(b),
        None if f.is_some() => Ok(32_000_000),
        None => Ok(one_switch),
    }
}

/// `--memory`, or its default for the fabric.
fn memory_bound(a: &FabricArgs, f: Option<congestion::fct::FabricSpec>) -> anyhow::Result<u64> {
    match bounded_size(
        "--memory",
        a.memory.as_deref(),
        16 << 20,
        256 << 30,
        "16M..=256G",
    )? {
        Some(b) => Ok(b),
        None if f.is_some_and(|f| f.topology.hosts() > 64) => {
            // Large fabrics: up to 8 GiB per run, within 60 % of the memory available now,
            // shared by the runs that go at once.
            let runs =
                a.cc.split([';', '/'])
                    .filter(|c| !c.trim().is_empty())
                    .count();
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
            let at_once = runs.clamp(1, cores.max(1)) as u64;
            let avail = mem_available().unwrap_or(8 << 30);
            Ok((avail / 10 * 6 / at_once).clamp(congestion::fct::MAX_ACTIVE_BYTES, 8 << 30))
        }
        None => Ok(congestion::fct::MAX_ACTIVE_BYTES),
    }
}

/// The memory the kernel says is available (Linux `MemAvailable`), bytes.
fn mem_available() -> Option<u64> {
    proc_kib("/proc/meminfo", "MemAvailable:").map(|k| k * 1024)
}

fn sim_fabric(a: &FabricArgs) -> anyhow::Result<ExitCode> {
    use congestion::fct::{FctSpec, Workload};
    let fabric = fabric_spec(a)?;
    let pfc = match a.pfc.as_str() {
        "on" => true,
        "off" => false,
        other => bail!("--pfc {other}: on or off"),
    };
    if a.duration == 0 || a.duration > 1000 {
        bail!("--duration must be 1..=1000 ms");
    }
    if let Some(rest) = a.workload.strip_prefix("incast-sweep") {
        return incast_sweep(a, rest.strip_prefix(':'), pfc, fabric);
    }
    let elephant = a
        .workload
        .strip_prefix("elephant")
        .filter(|r| r.is_empty() || r.starts_with(':'));
    let workload = match a.workload.strip_prefix("incast:") {
        _ if elephant.is_some() => {
            let mut it = elephant.unwrap_or_default().split(':').skip(1);
            let per_host = match it.next() {
                Some(v) => v
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--workload elephant:N[:SIZE]: N is a number"))?,
                None => 4,
            };
            let size = match it.next() {
                Some(v) => crate::units::size(v)
                    .map_err(|e| anyhow::anyhow!("--workload elephant SIZE: {e}"))?,
                None => 4 << 20,
            };
            Workload::Elephant { per_host, size }
        }
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
        spec.fabric = fabric;
        spec.regions = match a.regions.as_str() {
            "pattern" => congestion::fct::Regions::Pattern,
            "bytes" => congestion::fct::Regions::Bytes,
            other => bail!("--regions {other:?}: use pattern or bytes"),
        };
        if a.memory.is_some() && spec.regions == congestion::fct::Regions::Pattern {
            bail!("--memory bounds regions of bytes: give --regions bytes with it");
        }
        spec.max_active_bytes = memory_bound(a, fabric)?;
        spec.buffer_bytes = buffer_bytes(a, fabric, spec.buffer_bytes)?;
        spec.validate()?;
        specs.push(spec);
    }
    let points = a
        .pcap_at
        .iter()
        .map(|p| super::sim_capture::parse_point(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if specs.len() > 1 && (a.pcap.is_some() || !points.is_empty()) {
        let flag = if a.pcap.is_some() {
            "--pcap"
        } else {
            "--pcap-at"
        };
        bail!("{flag} takes one --cc");
    }
    // No capture over the workload file read, and one file per capture, whatever names,
    // links or hard links say.
    let outputs: Vec<(&str, &std::path::Path)> = a
        .pcap
        .as_deref()
        .map(|p| ("--pcap", p))
        .into_iter()
        .chain(points.iter().map(|p| ("--pcap-at", &*p.path)))
        .collect();
    roce_pcap::outfile::check_distinct(
        &[("the --workload", std::path::Path::new(&a.workload))],
        &outputs,
    )?;
    let threads = threads_per_run(a, specs.len(), fabric)?;
    for s in &mut specs {
        s.threads = threads;
    }
    let clock = Clock::start();
    let mut captured = None;
    let runs = match super::sim_capture::Captures::create(a.pcap.as_deref(), &points, a.seed)? {
        Some((captures, tap)) => {
            let r = congestion::fct::run_tapped(&specs[0], Some(tap));
            captured = Some(captures.finish()?);
            vec![r]
        }
        // Each congestion control on its own core.
        None => congestion::fct::run_many(&specs),
    };
    clock.report(runs.iter());
    if a.json {
        // One congestion control: its report (with what its captures hold); several: an
        // array of them.
        match (runs.as_slice(), captured) {
            ([r], Some(c)) => {
                let mut v = serde_json::to_value(r)?;
                if let Some(o) = v.as_object_mut() {
                    o.insert("captures".into(), c);
                }
                outln!("{}", serde_json::to_string(&v)?)?;
            }
            ([r], None) => outln!("{}", serde_json::to_string(r)?)?,
            (rs, _) => outln!("{}", serde_json::to_string(rs)?)?,
        }
    } else {
        for r in &runs {
            out!("{}", congestion::fct::table(r))?;
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

/// The longest `sim congestion` run, virtual ms: each of the suite's runs simulates every
/// packet of it (100 ms take about 5 s on one core).
const MAX_CONGESTION_MS: u64 = 1000;

fn sim_congestion(a: &CongestionArgs) -> anyhow::Result<ExitCode> {
    let cc = flag("--cc", &a.cc, cc::parse_no_int)?;
    if a.duration == 0 || a.duration > MAX_CONGESTION_MS {
        bail!("--duration must be 1..={MAX_CONGESTION_MS} ms");
    }
    let scenarios = congestion::suite(cc, std::time::Duration::from_millis(a.duration), a.seed);
    let runs = congestion::run_all(&scenarios);
    if a.json {
        outln!("{}", congestion::to_json(&runs))?;
    } else {
        out!("{}", congestion::table(&runs))?;
    }
    if let Some(path) = &a.plot {
        write_whole(path, &congestion::to_svg(&runs))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` as the whole of `path`, in place of the old file only once written.
fn write_whole(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    roce_pcap::outfile::write_whole(path, |w| w.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}
