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
    }
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
