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
    /// Congestion control: dcqcn (= paper), none, or any `--cc` of `roce loopback`.
    #[arg(long, default_value = "dcqcn")]
    cc: String,
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
    let cc = flag("--cc", &a.cc, cc::parse)?;
    let mut rows = Vec::new();
    for n in [2usize, 4, 8, 16, 32, 64, 128] {
        let mut spec = FctSpec::new(
            Workload::Incast { n, size },
            cc,
            std::time::Duration::from_millis(a.duration),
            a.seed,
        );
        spec.pfc = pfc;
        spec.validate()?;
        rows.push((n, congestion::fct::run(&spec)));
    }
    if a.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(n, r)| serde_json::json!({"senders": n, "report": r}))
            .collect();
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "{:>8} {:>12} {:>9} {:>9} {:>8} {:>8} {:>7}",
            "senders", "goodput", "p50", "p99", "drops", "retx", "pauses"
        );
        for (n, r) in &rows {
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
    Ok(ExitCode::SUCCESS)
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
    let cc = flag("--cc", &a.cc, cc::parse)?;
    let mut spec = FctSpec::new(
        workload,
        cc,
        std::time::Duration::from_millis(a.duration),
        a.seed,
    );
    spec.hosts = a.hosts;
    spec.pfc = pfc;
    spec.validate()?;
    let r = congestion::fct::run(&spec);
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", congestion::fct::table(&r));
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
