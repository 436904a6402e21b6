//! Flow completion times (`roce sim fabric`): the HPCC paper's method (Li et al., SIGCOMM
//! 2019, section 5) on the simulator's networks, every flow a real RC WRITE stream.
//!
//! * **Networks**: the one-switch model (`--topology switch`: every flow toward one receiver
//!   through the switch port in front of it), or a multi-switch fabric
//!   ([`roce_stack::sim::Fabric`]: leaf-spine, fat trees, the HPCC paper's 320 hosts) with
//!   ECMP, flows between its hosts.
//! * **Workloads**: Poisson flow arrivals at a target load (of the bottleneck link, or of
//!   every host link in a fabric, between random host pairs), sizes drawn from a
//!   piecewise-linear CDF (`../shared/docs/workloads/`: WebSearch, FB Hadoop, or any file in
//!   that format); an n:1 incast (n flows of one size starting together); in a fabric, a
//!   permutation of long flows (elephants).
//! * **Each flow is real RC RDMA WRITEs** on a QP pair of its own (reused once free): up to
//!   eight periods of its sender's pattern region per WRITE, the last one's completion at
//!   the sender (its last ACK) ending its FCT. Its bytes are checked in place at the
//!   receiver.
//! * **Metric**: FCT slowdown = FCT / ideal FCT (the flow alone: a round trip over its path
//!   plus its frame bytes at the host rate), at p50, p95 and p99 per flow-size bucket;
//!   drops, retransmissions, ECN marks, CNPs, the queues' distribution over time, PFC pauses,
//!   per-tier link utilisation (how evenly ECMP spread the load).
//!
//! PFC (`--pfc on`): the one switch pauses every sender above its XOFF threshold; a fabric's
//! switches pause the upstream port of each ingress over its threshold. Either way the
//! buffer never drops.
use core::time::Duration;
use std::fmt::Write as _;

use roce_stack::cc::hpcc::HpccParams;
use roce_stack::rng::Rng;
use roce_stack::sim::{
    FabricConfig, FabricView, LinkConfig, PfcConfig, PortKind, RedConfig, Sim, SwitchConfig,
    Topology,
};
use roce_stack::{
    Access, CcConfig, ConnectParams, Instant, MrHandle, QpCaps, SgList, WcStatus, WorkRequest, WrOp,
};

use crate::{Combination, ConfigError, Setting};

mod flows;
mod run;
mod table;
pub use flows::{poisson_flows, MAX_ACTIVE_BYTES, MAX_FLOWS};
pub use run::{run, run_many, run_tapped};
pub use table::table;

/// The WebSearch flow-size distribution (Alizadeh et al., "Data Center TCP", SIGCOMM 2010),
/// as the HPCC authors published it (alibaba-edu/High-Precision-Congestion-Control,
/// `traffic_gen/WebSearch_distribution.txt`): `<bytes> <cumulative percent>` per line.
pub const WEBSEARCH: &str = "0 0\n10000 15\n20000 20\n30000 30\n50000 40\n80000 53\n200000 60\n1000000 70\n2000000 80\n5000000 90\n10000000 97\n30000000 100\n";

/// The FB Hadoop distribution (Roy et al., "Inside the Social Network's (Datacenter)
/// Network", SIGCOMM 2015), from the same place (`traffic_gen/FbHdp_distribution.txt`).
pub const FB_HADOOP: &str = "0 0\n100 1\n200 2\n300 5\n350 15\n400 20\n500 30\n600 40\n700 50\n1000 60\n2000 67\n7000 70\n30000 72\n50000 82\n80000 87\n120000 90\n300000 95\n1000000 97.5\n2000000 99\n10000000 100\n";

/// A flow-size distribution: piecewise linear between (bytes, cumulative %) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Cdf {
    points: Vec<(f64, f64)>,
}

/// Points a CDF file may have at most.
pub const MAX_CDF_POINTS: usize = 10_000;

/// Why a flow-size CDF file was refused (its line, counted from 1, where one is to blame).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CdfError {
    /// More than [`MAX_CDF_POINTS`] points.
    #[error("more than {MAX_CDF_POINTS} points")]
    TooManyPoints,
    /// A line that is not two fields.
    #[error("line {0}: expected `<bytes> <percent>`")]
    NotTwoFields(usize),
    /// A size that is not a number.
    #[error("line {0}: bad size {1:?}")]
    BadSize(usize, String),
    /// A percent that is not a number.
    #[error("line {0}: bad percent {1:?}")]
    BadPercent(usize, String),
    /// A size or percent out of its range.
    #[error("line {0}: size 0..=1e9 bytes, percent 0..=100")]
    OutOfRange(usize),
    /// A size or percent below the one before.
    #[error("line {0}: sizes and percents must not decrease")]
    Decreasing(usize),
    /// The last point is not at 100 %.
    #[error("the last point must be at 100 %")]
    NotTo100,
    /// No point at all.
    #[error("no points")]
    Empty,
}

impl Cdf {
    /// Parses `<size in bytes> <cumulative percent>` lines: sizes increasing, percents not
    /// decreasing, the last at 100.
    pub fn parse(text: &str) -> Result<Self, CdfError> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if points.len() >= MAX_CDF_POINTS {
                return Err(CdfError::TooManyPoints);
            }
            let mut it = line.split_whitespace();
            let (Some(a), Some(b), None) = (it.next(), it.next(), it.next()) else {
                return Err(CdfError::NotTwoFields(n + 1));
            };
            let size: f64 = a
                .parse()
                .map_err(|_| CdfError::BadSize(n + 1, a.chars().take(40).collect()))?;
            let pct: f64 = b
                .parse()
                .map_err(|_| CdfError::BadPercent(n + 1, b.chars().take(40).collect()))?;
            if !(size.is_finite() && (0.0..=1e9).contains(&size) && (0.0..=100.0).contains(&pct)) {
                return Err(CdfError::OutOfRange(n + 1));
            }
            if let Some(&(ps, pp)) = points.last() {
                if size < ps || pct < pp {
                    return Err(CdfError::Decreasing(n + 1));
                }
            }
            points.push((size, pct));
        }
        match points.last() {
            Some(&(_, p)) if (p - 100.0).abs() < 1e-9 => Ok(Self { points }),
            Some(_) => Err(CdfError::NotTo100),
            None => Err(CdfError::Empty),
        }
    }

    /// A size drawn from the distribution.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit() * 100.0;
        let mut prev = (self.points[0].0, 0.0);
        for &(s, p) in &self.points {
            if u <= p {
                let f = if p > prev.1 {
                    (u - prev.1) / (p - prev.1)
                } else {
                    1.0
                };
                return (prev.0 + f * (s - prev.0)).round().max(1.0) as u64;
            }
            prev = (s, p);
        }
        self.points[self.points.len() - 1].0 as u64
    }

    /// The mean size (bytes).
    pub fn mean(&self) -> f64 {
        let mut m = 0.0;
        let mut prev = (self.points[0].0, 0.0);
        for &(s, p) in &self.points {
            m += (p - prev.1) / 100.0 * (s + prev.0) / 2.0;
            prev = (s, p);
        }
        m
    }
}

/// What flows arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// Poisson arrivals at `load` of the bottleneck, sizes from the CDF.
    Poisson {
        /// Flow sizes.
        cdf: Cdf,
        /// Target average load of the bottleneck link, 0..1.
        load: f64,
    },
    /// `n` flows of `size` bytes from `n` hosts, all starting at 0.
    Incast {
        /// Senders.
        n: usize,
        /// Bytes per flow.
        size: u64,
    },
    /// Long flows in a permutation (fabrics only): every host `h` of `n` sends `per_host`
    /// flows of `size` bytes to host `(h + n/2) mod n`, all starting at 0, each on a QP of
    /// its own.
    Elephant {
        /// Flows per host.
        per_host: usize,
        /// Bytes per flow.
        size: u64,
    },
}

/// One experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct FctSpec {
    /// The flows.
    pub workload: Workload,
    /// Sender hosts (Poisson flows pick one at random).
    pub hosts: usize,
    /// Congestion control of every flow.
    pub cc: CcConfig,
    /// Every link, bits/s.
    pub line_rate_bps: u64,
    /// Flows arrive during this long (the run goes on until they finish, at most 10×).
    pub duration: Duration,
    /// Switch buffer, bytes.
    pub buffer_bytes: u64,
    /// ECN marking.
    pub red: RedConfig,
    /// Path MTU.
    pub mtu: u32,
    /// Per-hop delay.
    pub hop_delay: Duration,
    /// Seed of arrivals, sizes and hosts.
    pub seed: u64,
    /// PFC at the switch port (pause the senders instead of dropping).
    pub pfc: bool,
    /// With [`Regions::Bytes`]: bytes of receiver regions of flows alive at once, at most
    /// ([`MAX_ACTIVE_BYTES`] by default): a flow that would go beyond waits for earlier ones
    /// to finish (counted in [`FctReport::postponed`]). Senders send from one pattern region
    /// each (1 MiB + 64 KiB per host), not counted here.
    pub max_active_bytes: u64,
    /// A victim flow of this many bytes: from the first sender, 50 µs into the run, to a
    /// second receiver whose link does not cross the switch port the workload congests (PFC's
    /// head-of-line blocking shows in its FCT). Reported apart from the workload's flows.
    pub victim: Option<u64>,
    /// A multi-switch fabric (`None`: the one-switch model, every flow toward one receiver).
    pub fabric: Option<FabricSpec>,
    /// What the flows' memory regions are.
    pub regions: Regions,
    /// Threads a fabric's simulation may use ([`Sim::set_threads`]): the same report on any
    /// number.
    pub threads: usize,
}

/// The memory regions flows are written from and to. Either way every byte of every flow is
/// verified at its receiver, and the FCTs are the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Regions {
    /// Pattern regions ([`roce_stack::Device::reg_pattern_mr`]): the bytes are generated when
    /// sent and checked as each packet is placed, never stored, so a flow costs its QPs and
    /// its packets in flight, not its size.
    #[default]
    Pattern,
    /// Regions of bytes: each receiver region is as large as its flow, checked when the flow
    /// completes; the bytes of flows alive at once are bounded by
    /// [`FctSpec::max_active_bytes`].
    Bytes,
}

/// With HPCC, the requester asks for an ACK every this many packets (each ACK echoes the
/// telemetry HPCC reacts to; the default, 64, is a fifth of a round trip at 100 Gb/s).
pub const HPCC_ACK_EVERY: u32 = 8;

/// The UDP source port of every QP with [`Ecmp::OnePort`].
pub const ONE_ENTROPY_PORT: u16 = 0xc000;

/// How the fabric's switches spread flows over equal-cost paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ecmp {
    /// By the hash of the 5-tuple, each QP pair with its own UDP source port (RoCEv2's
    /// entropy).
    On,
    /// By the hash, but every QP with the same UDP source port: only the addresses vary.
    OnePort,
    /// Every switch takes the first equal-cost port: one path per destination.
    Off,
    /// As `On`, and each sender moves a marked QP to another of [`ADAPTIVE_PATHS`] UDP
    /// source ports, the least-marked ones likelier ([`roce_stack::paths::PathChooser`]),
    /// after its packets in flight are acknowledged.
    Adaptive,
}

/// Candidate paths (UDP source ports) per QP with [`Ecmp::Adaptive`].
pub const ADAPTIVE_PATHS: usize = 4;

/// How often [`Ecmp::Adaptive`] looks at each QP's marks: just over the notification point's
/// CNP interval (50 µs), so that a congested path shows in every epoch.
pub const ADAPTIVE_EPOCH: Duration = Duration::from_micros(55);

/// A multi-switch fabric for [`FctSpec::fabric`]: hosts at [`FctSpec::line_rate_bps`],
/// links of [`FctSpec::hop_delay`]; buffers, RED and PFC thresholds as
/// [`FabricSpec::config`] says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FabricSpec {
    /// The shape.
    pub topology: Topology,
    /// Links between switches, bits/s.
    pub fabric_rate_bps: u64,
    /// Path spreading.
    pub ecmp: Ecmp,
}

impl FabricSpec {
    /// The fabric's base round trip, HPCC's `T`: its longest path's links (2 through one
    /// switch, 4 in a leaf-spine, 6 in a fat tree) there and back, plus a full frame's
    /// serialisation at the host rate on each link of the way out.
    pub fn base_rtt(&self, spec: &FctSpec) -> Duration {
        let links: u64 = match self.topology {
            Topology::Switch { .. } => 2,
            Topology::LeafSpine { .. } => 4,
            Topology::FatTree { .. } => 6,
        };
        let frame_ns = (u64::from(spec.mtu) + 100) * 8 * 1_000_000_000 / spec.line_rate_bps.max(1);
        Duration::from_nanos(2 * links * spec.hop_delay.as_nanos() as u64 + links * frame_ns)
    }

    /// One line: the shape, its size, the rate between switches and the ECMP mode.
    pub fn describe(&self) -> String {
        let shape = match self.topology {
            Topology::Switch { .. } => "one switch".to_string(),
            Topology::LeafSpine {
                leaves,
                hosts_per_leaf,
                spines,
            } => format!("leaf-spine {leaves}x{hosts_per_leaf} hosts, {spines} spines"),
            Topology::FatTree {
                pods,
                tors,
                aggs,
                hosts_per_tor,
                cores,
            } => format!(
                "fat tree {pods} pods of {tors} ToR x {hosts_per_tor} hosts and {aggs} aggregation, {cores} core"
            ),
        };
        let ecmp = match self.ecmp {
            Ecmp::On => "on",
            Ecmp::OnePort => "one UDP source port",
            Ecmp::Off => "off",
            Ecmp::Adaptive => "on, with the senders' adaptive path choice",
        };
        format!(
            "{shape}: {} hosts, {} switches, {} Gb/s between switches, ECMP {ecmp}",
            self.topology.hosts(),
            self.topology.switches(),
            self.fabric_rate_bps as f64 / 1e9
        )
    }

    /// The simulator's fabric for `spec`: [`FctSpec::buffer_bytes`] per switch, RED as
    /// [`FabricConfig::new`] has it
    /// (100 KB / 400 KB / 20 % at 100 Gb/s, scaled with port rate), and with `spec.pfc`
    /// [`FabricConfig::pfc_thresholds`] at `spec.mtu`.
    pub fn config(&self, spec: &FctSpec) -> FabricConfig {
        let mut c = FabricConfig::new(self.topology);
        c.int = matches!(spec.cc, CcConfig::Hpcc(_));
        c.host_rate_bps = spec.line_rate_bps;
        c.fabric_rate_bps = self.fabric_rate_bps;
        c.link_delay = spec.hop_delay;
        c.buffer_bytes = spec.buffer_bytes;
        c.ecmp = self.ecmp != Ecmp::Off;
        if let Some(r) = c.red.as_mut() {
            // Thresholds are for a port at the host rate: keep their queueing delay.
            let k = spec.line_rate_bps as f64 / 100e9;
            r.kmin_bytes = (r.kmin_bytes as f64 * k) as u64;
            r.kmax_bytes = (r.kmax_bytes as f64 * k) as u64;
        }
        if spec.pfc {
            c.pfc = Some(c.pfc_thresholds(spec.mtu));
        }
        c
    }
}

/// Utilisation of one tier's links (frame bytes sent over the port's capacity until the
/// last completion): how evenly ECMP spread the load.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LinkTier {
    /// Which links: `host-tor`, `tor-host`, `tor-up`, `agg-up` (a leaf-spine's spine tier is
    /// `tor-up`), `agg-down`, `core-down`.
    pub tier: String,
    /// Links in the tier.
    pub links: usize,
    /// Mean utilisation, 0..1.
    pub mean: f64,
    /// Least and most used link.
    pub min: f64,
    /// Most used link.
    pub max: f64,
    /// Coefficient of variation (standard deviation over mean): 0 is a perfect spread.
    pub cv: f64,
}

/// One link between switches: how much it carried (ECMP collisions show as the outliers).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LinkUse {
    /// Sending switch (`tor3`, `agg5`, `core2`; a leaf-spine's `leaf`/`spine`).
    pub from: String,
    /// Receiving switch.
    pub to: String,
    /// Frame bytes sent over the port's capacity until the last completion, 0..1.
    pub utilisation: f64,
    /// Deepest queue at the port, bytes.
    pub max_queue_bytes: u64,
    /// Times PFC paused the port.
    pub pauses: u64,
}

/// Frame bytes port `p` of `f` sent over its capacity during `[0, until]`.
fn utilisation(f: &FabricView<'_>, p: usize, now: Instant, until: Instant) -> f64 {
    let secs = until.as_nanos().max(1) as f64 / 1e9;
    f.port_stats(p, now).tx_bytes as f64 * 8.0 / (f.port(p).3 as f64 * secs)
}

/// Every switch-to-switch port of `f` over `[0, until]`.
fn link_uses(f: &FabricView<'_>, now: Instant, until: Instant) -> Vec<LinkUse> {
    (0..f.port_count())
        .filter_map(|p| {
            let (node, peer, kind, _) = f.port(p);
            if !matches!(kind, PortKind::Up | PortKind::Down) {
                return None;
            }
            let s = f.port_stats(p, now);
            Some(LinkUse {
                from: f.node_name(node),
                to: f.node_name(peer),
                utilisation: utilisation(f, p, now, until),
                max_queue_bytes: s.max_queue_bytes,
                pauses: s.pauses,
            })
        })
        .collect()
}

/// Per-tier utilisation of `f`'s links over `[0, until]`.
fn link_tiers(f: &FabricView<'_>, now: Instant, until: Instant) -> Vec<LinkTier> {
    let mut tiers: Vec<(String, Vec<f64>)> = Vec::new();
    for p in 0..f.port_count() {
        let (node, _, kind, _) = f.port(p);
        let name = match (kind, f.tier(node)) {
            (PortKind::HostUp, _) => "host-tor",
            (PortKind::ToHost, _) => "tor-host",
            (PortKind::Up, 1) => "tor-up",
            (PortKind::Up, _) => "agg-up",
            (PortKind::Down, 2) => "agg-down",
            (PortKind::Down, _) => "core-down",
        };
        let u = utilisation(f, p, now, until);
        match tiers.iter_mut().find(|t| t.0 == name) {
            Some(t) => t.1.push(u),
            None => tiers.push((name.to_string(), vec![u])),
        }
    }
    tiers
        .into_iter()
        .map(|(tier, v)| {
            let n = v.len() as f64;
            let mean = v.iter().sum::<f64>() / n;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
            LinkTier {
                tier,
                links: v.len(),
                mean,
                min: v.iter().copied().fold(f64::INFINITY, f64::min),
                max: v.iter().copied().fold(0.0, f64::max),
                cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
            }
        })
        .collect()
}

/// When the victim flow starts: once the workload had time to build a queue.
pub const VICTIM_START: Duration = Duration::from_micros(50);

impl FctSpec {
    /// A run on a 100 Gb/s one-switch fabric (the HPCC paper's host links): 16 sender hosts,
    /// MTU 1024, 1 µs hops, a 4 MB buffer, RED 5 KB / 200 KB / 1 %.
    pub fn new(workload: Workload, cc: CcConfig, duration: Duration, seed: u64) -> Self {
        Self {
            workload,
            hosts: 16,
            cc,
            line_rate_bps: 100_000_000_000,
            duration,
            buffer_bytes: 4_000_000,
            red: RedConfig::DCQCN_PAPER,
            mtu: 1024,
            hop_delay: Duration::from_micros(1),
            seed,
            pfc: false,
            max_active_bytes: MAX_ACTIVE_BYTES,
            victim: None,
            fabric: None,
            regions: Regions::Pattern,
            threads: 1,
        }
    }

    /// Checks what a user can get wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range(Setting::Hosts, "1..=250", self.hosts as u64, 1, 250)?;
        ConfigError::check_mtu(self.mtu)?;
        let incast_max = self.fabric.map_or(250, |f| f.topology.hosts() as u64);
        match &self.workload {
            Workload::Poisson { load, .. } if !(*load > 0.0 && *load < 1.0) => {
                Err(Combination::LoadOutOfRange.into())
            }
            Workload::Incast { n, size } => {
                ConfigError::check_range(
                    Setting::IncastSenders,
                    "1..=250 (fewer than the fabric's hosts)",
                    *n as u64,
                    1,
                    incast_max,
                )?;
                ConfigError::check_range(Setting::IncastSize, "1..=67108864", *size, 1, 64 << 20)
            }
            Workload::Elephant { per_host, size } => {
                if self.fabric.is_none() {
                    return Err(Combination::ElephantNeedsFabric.into());
                }
                ConfigError::check_range(Setting::FlowsPerHost, "1..=64", *per_host as u64, 1, 64)?;
                ConfigError::check_range(Setting::ElephantSize, "1..=67108864", *size, 1, 64 << 20)
            }
            Workload::Poisson { .. } => Ok(()),
        }?;
        if let Some(v) = self.victim {
            if self.fabric.is_some() {
                return Err(Combination::VictimNeedsSwitch.into());
            }
            ConfigError::check_range(Setting::VictimSize, "1..=67108864", v, 1, 64 << 20)?;
        }
        if matches!(self.cc, CcConfig::Hpcc(_)) && self.fabric.is_none() {
            return Err(Combination::HpccNeedsFabric.into());
        }
        if let Some(f) = &self.fabric {
            f.topology.validate().map_err(ConfigError::Conflict)?;
            if f.topology.hosts() < 2 {
                return Err(ConfigError::Conflict("a fabric needs at least 2 hosts"));
            }
            if let Workload::Incast { n, .. } = self.workload {
                if n >= f.topology.hosts() {
                    return Err(ConfigError::Conflict(
                        "an incast needs fewer senders than the fabric has hosts",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Percentiles of a set of slowdowns.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Slowdown {
    /// Flows in the set.
    pub flows: usize,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Slowdown {
    fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Self {
            flows: v.len(),
            p50: at(0.50),
            p95: at(0.95),
            p99: at(0.99),
        }
    }
}

/// The size buckets of the report (upper bounds, bytes).
pub const BUCKETS: [(u64, &str); 5] = [
    (10_000, "<10KB"),
    (100_000, "10KB-100KB"),
    (1_000_000, "100KB-1MB"),
    (10_000_000, "1MB-10MB"),
    (u64::MAX, ">10MB"),
];

/// What a run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FctReport {
    /// Congestion control.
    pub cc: String,
    /// The network: `switch` (the one-switch model) or the fabric's shape, rates and ECMP.
    pub topology: String,
    /// Flows started.
    pub flows: usize,
    /// Flows completed.
    pub completed: usize,
    /// Slowdown over every completed flow.
    pub all: Slowdown,
    /// Slowdown per size bucket (label, percentiles).
    pub buckets: Vec<(String, Slowdown)>,
    /// Mean FCT of every completed flow, µs.
    pub mean_fct_us: f64,
    /// Payload bytes delivered / virtual time until the last completion, Gb/s.
    pub goodput_gbps: f64,
    /// Frames the switch dropped (buffer full).
    pub tail_drops: u64,
    /// Packets retransmitted.
    pub retransmitted_packets: u64,
    /// Frames the switch marked CE.
    pub ce_marked: u64,
    /// CNPs the receiver sent.
    pub cnps: u64,
    /// Deepest queue, bytes.
    pub max_queue_bytes: u64,
    /// PFC pauses the switch sent (XOFF crossings).
    pub pfc_pauses: u64,
    /// PFC frames the switch sent: each pause's XOFF, its refreshes every 100 µs, its XON.
    pub pfc_frames: u64,
    /// Time the senders were paused, µs.
    pub pfc_paused_us: f64,
    /// Flows whose start waited for room under [`MAX_ACTIVE_BYTES`] (their FCT includes it;
    /// a flow still waiting at the end is not counted).
    pub postponed: u64,
    /// Virtual time until the last completion, ms.
    pub sim_ms: f64,
    /// Packets simulated, counted once per link they crossed (a datagram through the switch
    /// crosses two): what the simulator's speed is measured in.
    pub packet_hops: u64,
    /// Bytes of completed flows found in place at the receiver (every byte compared with what
    /// the sender's region held).
    pub verified_bytes: u64,
    /// Completed flows whose bytes at the receiver differ from the sender's (a bug if ever
    /// non-zero).
    pub mismatched_flows: u64,
    /// The switch queue's length over time.
    pub queue: QueueDist,
    /// Flows whose WRITE completed with an error (the retries ran out).
    pub failed_flows: u64,
    /// The simulator's bound on flow regions alive at once, bytes
    /// ([`FctSpec::max_active_bytes`]).
    pub max_active_bytes: u64,
    /// The victim flow's FCT, µs, and its slowdown, when there is one and it completed.
    pub victim: Option<(f64, f64)>,
    /// Threads the simulation ran on (not in the JSON: the results are the same on any
    /// number).
    #[serde(skip)]
    pub threads: usize,
    /// A fabric's link utilisation per tier (empty for the one-switch model).
    pub links: Vec<LinkTier>,
    /// Path moves the senders chose ([`Ecmp::Adaptive`]).
    pub repaths: u64,
    /// A fabric's switch-to-switch links one by one (JSON; the table names the busiest).
    pub fabric_links: Vec<LinkUse>,
}

/// The distribution of the switch queue's length over time, sampled at the end of every step
/// of the run (at most 2 µs of virtual time) and weighted by the step's length, in buckets
/// of powers of two from 1 KB: each figure is a bucket's upper bound.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct QueueDist {
    /// Time-weighted mean, bytes (exact samples, not buckets).
    pub mean_bytes: f64,
    /// Median, bytes (at most).
    pub p50_bytes: u64,
    /// 95th percentile, bytes (at most).
    pub p95_bytes: u64,
    /// 99th percentile, bytes (at most).
    pub p99_bytes: u64,
    /// (bucket upper bound in bytes, fraction of the time the queue was at most that), in
    /// increasing order; the last is 1.
    pub cdf: Vec<(u64, f64)>,
}

/// Upper bounds of the queue buckets: empty, then 1 KB to 16 MB by powers of two, then any.
fn queue_bounds() -> impl Iterator<Item = u64> {
    std::iter::once(0)
        .chain((0..15).map(|k| 1000u64 << k))
        .chain(std::iter::once(u64::MAX))
}

/// Time spent at each queue length bucket, ns.
#[derive(Debug, Default)]
struct QueueHistogram {
    ns: Vec<u64>,
    byte_ns: u128,
}

impl QueueHistogram {
    fn add(&mut self, bytes: u64, ns: u64) {
        if self.ns.is_empty() {
            self.ns = vec![0; queue_bounds().count()];
        }
        let b = queue_bounds().position(|hi| bytes <= hi).unwrap_or(0);
        self.ns[b] += ns;
        self.byte_ns += u128::from(bytes) * u128::from(ns);
    }

    fn dist(&self) -> QueueDist {
        let total: u64 = self.ns.iter().sum();
        if total == 0 {
            return QueueDist::default();
        }
        let mut cdf = Vec::new();
        let mut acc = 0u64;
        for (hi, &n) in queue_bounds().zip(&self.ns) {
            acc += n;
            cdf.push((hi, acc as f64 / total as f64));
        }
        let at = |q: f64| cdf.iter().find(|c| c.1 >= q).map_or(0, |c| c.0);
        QueueDist {
            mean_bytes: self.byte_ns as f64 / total as f64,
            p50_bytes: at(0.50),
            p95_bytes: at(0.95),
            p99_bytes: at(0.99),
            cdf,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::flows::*;
    use super::run::*;
    use super::*;

    #[test]
    fn the_built_in_distributions_are_the_published_ones() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/docs/workloads/");
        for (name, text) in [("websearch.cdf", WEBSEARCH), ("fb_hadoop.cdf", FB_HADOOP)] {
            let shared = std::fs::read_to_string(format!("{dir}{name}")).expect("../shared");
            assert_eq!(Cdf::parse(text), Cdf::parse(&shared), "{name}");
        }
        // Means as the shared README gives them (~1.7 MB and ~0.12 MB).
        let ws = Cdf::parse(WEBSEARCH).unwrap().mean();
        let fb = Cdf::parse(FB_HADOOP).unwrap().mean();
        assert!((1.5e6..1.9e6).contains(&ws), "{ws}");
        assert!((0.08e6..0.16e6).contains(&fb), "{fb}");
    }

    /// The generator's realised load and size distribution are within a few percent of the
    /// targets over many flows (WebSearch and FB Hadoop, 30 % and 50 %, about 40,000 flows).
    #[test]
    fn poisson_flows_realise_the_load_and_the_distribution() {
        for (text, load) in [(WEBSEARCH, 0.3), (WEBSEARCH, 0.5), (FB_HADOOP, 0.3)] {
            let cdf = Cdf::parse(text).unwrap();
            let mut rng = Rng::new(7);
            // About 40,000 flows' worth of arrivals.
            let d = Duration::from_secs_f64(40_000.0 * cdf.mean() * 8.0 / (load * 1e11));
            let flows = poisson_flows(&cdf, load, 100_000_000_000, d, 16, &mut rng);
            assert!(
                flows.len() > 10_000 && flows.len() < MAX_FLOWS,
                "{}",
                flows.len()
            );
            let bits: f64 = flows.iter().map(|f| f.2 as f64 * 8.0).sum();
            let realised = bits / (d.as_secs_f64() * 1e11);
            assert!(
                (realised / load - 1.0).abs() < 0.05,
                "load {load}: realised {realised:.4} over {} flows",
                flows.len()
            );
            // Every sender gets about its share; arrivals are in time order.
            let mut per = [0usize; 16];
            for f in &flows {
                per[f.1] += 1;
            }
            let share = flows.len() as f64 / 16.0;
            assert!(
                per.iter().all(|&n| (n as f64 / share - 1.0).abs() < 0.1),
                "{per:?}"
            );
            assert!(flows.windows(2).all(|w| w[0].0 <= w[1].0));
            // The empirical CDF at each of the distribution's points, within 2 points.
            let mut sizes: Vec<u64> = flows.iter().map(|f| f.2).collect();
            sizes.sort_unstable();
            for &(x, p) in &cdf.points {
                let below = sizes.partition_point(|&s| s as f64 <= x) as f64 / sizes.len() as f64;
                assert!(
                    (below * 100.0 - p).abs() < 2.0,
                    "at {x} bytes: {:.2} % against {p} %",
                    below * 100.0
                );
            }
        }
    }

    #[test]
    fn a_pattern_is_recognised_and_a_changed_or_misplaced_byte_is_not() {
        let mut pattern = vec![0u8; (PATTERN_PERIOD + PATTERN_SLACK) as usize];
        Rng::new(9).fill(&mut pattern);
        let period = PATTERN_PERIOD as usize;
        for (len, offset) in [
            (0usize, 0u64),
            (1, 5),
            (1000, 64),
            (period, 7),
            (3 * period + 17, 65_535),
        ] {
            let o = offset as usize;
            let mut b: Vec<u8> = (0..len).map(|i| pattern[o + i % period]).collect();
            assert!(holds_pattern(&b, &pattern, offset), "{len}");
            if len > 1 {
                assert!(!holds_pattern(&b, &pattern, offset + 1), "{len}");
                let i = len * 2 / 3;
                b[i] ^= 1;
                assert!(
                    !holds_pattern(&b, &pattern, offset),
                    "{len}: byte {i} changed"
                );
                b[i] ^= 1;
            }
            // A packet's worth of bytes (1 KB) placed a whole number of MTUs off: never the
            // same bytes (the period is odd).
            if len > 4096 {
                let mut moved = b.clone();
                moved.copy_within(0..1024, 2048);
                assert!(!holds_pattern(&moved, &pattern, offset), "{len}");
            }
        }
        assert!(
            !holds_pattern(&[0; 4], &pattern[..100], 0),
            "a short pattern region"
        );
    }

    #[test]
    fn the_queue_histogram_weights_by_time() {
        let mut h = QueueHistogram::default();
        h.add(0, 700);
        h.add(1500, 200);
        h.add(100_000, 100);
        let d = h.dist();
        // 70 % of the time empty, 90 % at most 2 KB, all of it at most 128 KB.
        assert_eq!(d.p50_bytes, 0);
        assert_eq!(d.p95_bytes, 128_000);
        assert_eq!(d.p99_bytes, 128_000);
        let at = |b: u64| d.cdf.iter().find(|c| c.0 == b).map(|c| c.1);
        assert_eq!(at(0), Some(0.7));
        assert_eq!(at(1000), Some(0.7));
        assert_eq!(at(2000), Some(0.9));
        assert_eq!(at(64_000), Some(0.9));
        assert_eq!(at(128_000), Some(1.0));
        assert!((d.mean_bytes - (1500.0 * 200.0 + 100_000.0 * 100.0) / 1000.0).abs() < 1e-6);
        assert_eq!(d.cdf.last().map(|c| c.1), Some(1.0));
        assert!(d
            .cdf
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(QueueHistogram::default().dist(), QueueDist::default());
    }

    /// Flows beyond the memory bound wait, in order, and all finish; the wait is in their FCT.
    #[test]
    fn flows_beyond_the_memory_bound_wait_their_turn() {
        let work = Workload::Incast {
            n: 8,
            size: 1 << 20,
        };
        let free = FctSpec {
            pfc: true,
            regions: Regions::Bytes,
            ..FctSpec::new(work.clone(), CcConfig::None, Duration::from_millis(5), 1)
        };
        let tight = FctSpec {
            // Room for two flows' receiver regions at a time.
            max_active_bytes: 2 << 20,
            ..free.clone()
        };
        let (a, b) = (run(&free), run(&tight));
        assert_eq!((a.completed, b.completed), (8, 8));
        assert_eq!(a.postponed, 0);
        assert_eq!(b.postponed, 6, "all but the first two waited");
        // Two at a time share the link less than eight: the tail flows' wait shows.
        assert!(b.all.p99 > a.all.p99, "{} vs {}", b.all.p99, a.all.p99);
        assert!(table(&b).contains("6 flows waited"), "{}", table(&b));
        // Pattern regions store nothing: the bound does not apply, and the run is the
        // unbounded one.
        let pattern = run(&FctSpec {
            regions: Regions::Pattern,
            ..tight.clone()
        });
        assert_eq!(pattern.postponed, 0);
        assert_eq!(pattern.all, a.all);
    }

    #[test]
    fn cdfs_parse_sample_and_refuse_nonsense() {
        let c = Cdf::parse("100 0\n1000 50\n10000 100\n").unwrap();
        let mut rng = Rng::new(1);
        let v: Vec<u64> = (0..10_000).map(|_| c.sample(&mut rng)).collect();
        assert!(v.iter().all(|&x| (100..=10_000).contains(&x)));
        let below_1000 = v.iter().filter(|&&x| x <= 1000).count();
        assert!((4500..5500).contains(&below_1000), "{below_1000}");
        assert!((c.mean() - 3025.0).abs() < 1.0, "{}", c.mean());
        for bad in [
            "",
            "1 50\n",
            "10 20\n5 100\n",
            "x 100\n",
            "1 2 3\n",
            "-1 100\n",
        ] {
            assert!(Cdf::parse(bad).is_err(), "{bad:?}");
        }
    }
}
