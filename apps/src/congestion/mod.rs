//! `roce sim congestion`: N long RDMA WRITE flows from N hosts through one
//! [`Switch`](roce_stack::sim::Switch) bottleneck to one receiver, with a chosen congestion
//! control, in the simulator.
//!
//! [`run`] drives one [`Scenario`] in virtual time with real [`Qp`](roce_stack::Qp)s on both ends
//! (CE marks → CNPs from the receiver's notification point → the sender's controller → its
//! pacing), samples every [`Scenario::sample`] the per-flow rate at the switch egress, each
//! sender's congestion-control rate and the queue depth, and summarises the second half of
//! the run in a [`Run`]. [`suite`] is the default set behind `roce sim congestion`;
//! [`render`] draws runs as a table, JSON or SVG.
//!
//! Measures (second half of the run, `[duration/2, duration)`):
//! * `fairness`: Jain's index of the per-flow goodput (payload bytes of completed WRITEs);
//! * `utilization`: the fraction of the time the bottleneck port was sending;
//! * `goodput_gbps`: completed WRITE payload over all flows, Gb/s;
//! * `mean_queue_bytes` (time-weighted) and `queue_in_band` (fraction of the time with
//!   Kmin ≤ queue ≤ Kmax); `max_queue_bytes`, `tail_drops`, `retransmitted_packets` and
//!   `cnps` cover the whole run.
use core::time::Duration;

use roce_proto::Qpn;
use roce_stack::sim::{LinkConfig, RedConfig, Sim, SwitchConfig};
use roce_stack::{
    Access, CcConfig, ConnectParams, Instant, MrHandle, QpCaps, RemoteAddr, SgList, WcStatus,
    WorkRequest, WrOp,
};

pub mod fct;
pub mod fct_plot;
pub mod fit;
pub mod render;

pub use render::{table, to_json, to_svg};

/// One experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Name in reports.
    pub name: String,
    /// Congestion control of every sender.
    pub cc: CcConfig,
    /// Number of senders (one flow each).
    pub flows: usize,
    /// When each flow starts (missing entries: at 0).
    pub starts: Vec<Duration>,
    /// Every NIC link and the bottleneck port, bits/s.
    pub line_rate_bps: u64,
    /// Virtual time the run lasts.
    pub duration: Duration,
    /// Switch buffer (tail drop above it), bytes.
    pub buffer_bytes: u64,
    /// ECN marking at the switch.
    pub red: RedConfig,
    /// Path MTU.
    pub mtu: u32,
    /// Outstanding-PSN window of each QP.
    pub window: u32,
    /// Size of each WRITE.
    pub message_bytes: u32,
    /// WRITEs each sender keeps posted.
    pub depth: u32,
    /// Sender → switch and switch → receiver propagation delay (the way back takes both).
    pub hop_delay: Duration,
    /// Sampling interval of the time series.
    pub sample: Duration,
    /// RNG seed (RED coins, start jitter).
    pub seed: u64,
}

impl Scenario {
    /// `flows` flows with `cc` through a 40 Gb/s bottleneck: RED 5 KB / 200 KB / 1 % (the
    /// DCQCN paper's), a 2 MB buffer, 1 µs hops, MTU 1024, 64 KiB WRITEs (16 posted per
    /// QP), a 2048-PSN window, an ACK timeout of 16.8 ms, samples every 50 µs, every flow
    /// starting at 0 (set [`Scenario::starts`] to stagger them).
    pub fn new(name: &str, cc: CcConfig, flows: usize, duration: Duration, seed: u64) -> Self {
        Self {
            name: name.to_string(),
            cc,
            flows,
            starts: Vec::new(),
            line_rate_bps: 40_000_000_000,
            duration,
            buffer_bytes: 2_000_000,
            red: RedConfig::DCQCN_PAPER,
            mtu: 1024,
            window: 2048,
            message_bytes: 64 * 1024,
            depth: 16,
            hop_delay: Duration::from_micros(1),
            sample: Duration::from_micros(50),
            seed,
        }
    }

    fn start(&self, i: usize) -> Duration {
        self.starts.get(i).copied().unwrap_or(Duration::ZERO)
    }
}

/// Time series of a run, one point per sample interval.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// End of each interval, ms.
    pub t_ms: Vec<f64>,
    /// Per flow: frame bytes it got through the bottleneck in the interval, as Gb/s.
    pub flow_gbps: Vec<Vec<f64>>,
    /// Per flow: its congestion control's current rate at the sample, Gb/s (line rate if
    /// unlimited).
    pub cc_gbps: Vec<Vec<f64>>,
    /// Deepest queue in the interval, bytes.
    pub queue_bytes: Vec<u64>,
}

/// The result of one [`Scenario`].
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Scenario name.
    pub name: String,
    /// Controller kind (`"dcqcn"`, `"none"`, `"fixed"`).
    pub cc: String,
    /// The full congestion-control configuration.
    pub cc_config: String,
    /// Number of flows.
    pub flows: usize,
    /// Seed.
    pub seed: u64,
    /// Run length, ms.
    pub duration_ms: f64,
    /// Jain's fairness index of per-flow goodput over the second half.
    pub fairness: f64,
    /// Bottleneck busy fraction over the second half.
    pub utilization: f64,
    /// Completed WRITE payload over the second half, Gb/s (all flows).
    pub goodput_gbps: f64,
    /// Per-flow goodput over the second half, Gb/s.
    pub flow_goodput_gbps: Vec<f64>,
    /// Frames the switch dropped for want of buffer.
    pub tail_drops: u64,
    /// Request packets the senders sent again.
    pub retransmitted_packets: u64,
    /// Deepest queue of the run, bytes.
    pub max_queue_bytes: u64,
    /// Deepest queue over the second half, bytes.
    pub max_queue_bytes_second_half: u64,
    /// Time-weighted mean queue over the second half, bytes.
    pub mean_queue_bytes: f64,
    /// Fraction of the second half with Kmin ≤ queue ≤ Kmax.
    pub queue_in_band: f64,
    /// Fraction of the second half with the queue above Kmax.
    pub queue_above_kmax: f64,
    /// Packets the switch marked CE.
    pub ce_marked: u64,
    /// CNPs the receiver sent.
    pub cnps: u64,
    /// CNPs the senders received.
    pub cnps_received: u64,
    /// Rate cuts the senders' controllers made.
    pub rate_cuts: u64,
    /// The last-starting flow, if it started at least 1 ms after every other flow.
    pub late_join: Option<LateJoin>,
    /// The switch's Kmin and Kmax, bytes.
    pub kmin_kmax: (u64, u64),
    /// Time series.
    pub series: Series,
}

/// How a flow that joined late converged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LateJoin {
    /// When it started, ms.
    pub at_ms: f64,
    /// Time from its start until its rate (1 ms moving average at the bottleneck) first came
    /// within ±10 % of the fair share of what the bottleneck carried, ms (`None`: never).
    pub convergence_ms: Option<f64>,
    /// Its share of the bottleneck over the second half, relative to the fair share (1.0 =
    /// exactly fair).
    pub share_second_half: f64,
}

/// Jain's fairness index of `x` (1 = all equal, 1/n = one takes everything).
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if s2 == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * s2)
}

struct Flow {
    host: usize,
    qpn: Qpn,
    mr: MrHandle,
    remote: RemoteAddr,
    posted: u32,
    next_id: u64,
    started: bool,
    goodput_bytes: u64,
}

/// The scenario's network: `sc.flows` sender hosts, each with a QP toward its own QP on the
/// receiver, their regions registered, behind the one switch in front of the receiver; the
/// hosts' endpoint indices too.
fn build(sc: &Scenario) -> (Sim, usize, Vec<usize>, Vec<Flow>) {
    let mut sim = Sim::new(sc.seed);
    let rx = sim.add_endpoint("10.0.0.1".parse().expect("literal address"));
    let hosts: Vec<usize> = (0..sc.flows)
        .map(|i| {
            sim.add_endpoint(
                format!("10.0.1.{}", i + 1)
                    .parse()
                    .expect("generated address"),
            )
        })
        .collect();
    let caps = QpCaps {
        max_unacked_psns: sc.window,
        infinite_retry_at_7: true,
        ..QpCaps::default()
    };
    let region = (u64::from(sc.message_bytes) * 4).max(1 << 16) as usize;
    let opts = ConnectParams {
        mtu: sc.mtu,
        timeout: 12,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectParams::default()
    };
    let mut flows = Vec::with_capacity(sc.flows);
    for &h in &hosts {
        let (rq, rmr) = {
            let d = sim.device(rx);
            let pd = d.alloc_pd();
            let cq = d.create_cq();
            let mr = d.reg_mr(pd, region, Access::ALL);
            let q = d.create_qp(pd, cq, cq, caps).expect("receiver QP");
            (q, mr)
        };
        let (sq, smr) = {
            let d = sim.device(h);
            let pd = d.alloc_pd();
            let cq = d.create_cq();
            let mr = d.reg_mr(pd, region, Access::ALL);
            let q = d.create_qp(pd, cq, cq, caps).expect("sender QP");
            (q, mr)
        };
        sim.connect(h, sq, rx, rq, &opts).expect("connect");
        sim.device(h)
            .set_congestion_control(sq, sc.cc.build(sc.line_rate_bps));
        let m = sim.device(rx).mr(rmr).expect("receiver region");
        let remote = m.remote_addr(0);
        *sim.link(h, rx) = LinkConfig {
            delay: sc.hop_delay,
            bandwidth_bps: Some(sc.line_rate_bps),
            ..LinkConfig::default()
        };
        *sim.link(rx, h) = LinkConfig {
            delay: sc.hop_delay * 2,
            ..LinkConfig::default()
        };
        flows.push(Flow {
            host: h,
            qpn: sq,
            mr: smr,
            remote,
            posted: 0,
            next_id: 0,
            started: false,
            goodput_bytes: 0,
        });
    }
    sim.set_switch(SwitchConfig {
        port: rx,
        bandwidth_bps: sc.line_rate_bps,
        delay: sc.hop_delay,
        buffer_bytes: sc.buffer_bytes,
        red: Some(sc.red),
        pfc: None,
    });
    (sim, rx, hosts, flows)
}

/// Runs one scenario.
///
/// # Panics
/// If the scenario cannot be set up (zero flows, or more than 250) — a caller bug.
pub fn run(sc: &Scenario) -> Run {
    assert!(
        (1..=250).contains(&sc.flows),
        "flows must be in 1..=250, got {}",
        sc.flows
    );
    let (mut sim, rx, hosts, mut flows) = build(sc);

    let end = Instant::ZERO + sc.duration;
    let half = Instant::ZERO + sc.duration / 2;
    let step = sc.sample.max(Duration::from_micros(1));
    let mut series = Series {
        flow_gbps: vec![Vec::new(); sc.flows],
        cc_gbps: vec![Vec::new(); sc.flows],
        ..Series::default()
    };
    let mut last_bytes = vec![0u64; sc.flows];
    let mut half_stats = None;
    let mut half_flow_bytes = vec![0u64; sc.flows];
    let mut max_q_second_half = 0u64;
    let mut t = Instant::ZERO;
    let msg = sc.message_bytes;
    while t < end {
        // Start flows and keep every started sender backlogged.
        for (i, f) in flows.iter_mut().enumerate() {
            if !f.started && t >= Instant::ZERO + sc.start(i) {
                f.started = true;
            }
            if !f.started {
                continue;
            }
            while f.posted < sc.depth {
                let d = sim.device(f.host);
                let Some(m) = d.mr(f.mr) else { break };
                let sgl = SgList::one(m.sge(0, msg));
                let off = (f.next_id % 4) * u64::from(msg);
                let wr = WorkRequest::new(
                    f.next_id,
                    WrOp::Write(RemoteAddr {
                        va: f.remote.va + off,
                        rkey: f.remote.rkey,
                    }),
                    sgl,
                );
                if d.post_send(f.qpn, wr).is_err() {
                    break;
                }
                f.next_id += 1;
                f.posted += 1;
            }
        }
        let next = (t + step).min(end);
        sim.run_until(next);
        t = next;
        // Completions and samples.
        for f in flows.iter_mut() {
            while let Some(c) = sim.device(f.host).poll_completion() {
                f.posted = f.posted.saturating_sub(1);
                if c.status == WcStatus::Success && t > half {
                    f.goodput_bytes += u64::from(c.byte_len);
                }
            }
        }
        let dt_s = step.as_secs_f64();
        let mut cur = vec![0u64; sc.flows];
        if let Some(sw) = sim.switch() {
            for (k, b) in sw.flows() {
                if let Some(i) = hosts.iter().position(|&h| h == k.from) {
                    cur[i] += b;
                }
            }
        }
        series.t_ms.push(t.as_nanos() as f64 / 1e6);
        for i in 0..sc.flows {
            let d = cur[i] - last_bytes[i];
            series.flow_gbps[i].push(d as f64 * 8.0 / dt_s / 1e9);
            let f = &flows[i];
            let rate = (f.host < sim.endpoint_count())
                .then(|| sim.endpoint(f.host))
                .and_then(|e| e.device.qp(f.qpn))
                .and_then(|q| q.rate_bps())
                .unwrap_or(sc.line_rate_bps);
            series.cc_gbps[i].push(rate as f64 / 1e9);
        }
        last_bytes.clone_from(&cur);
        let qmax = sim.switch_mut().map_or(0, |s| s.take_interval_max());
        series.queue_bytes.push(qmax);
        if t > half {
            max_q_second_half = max_q_second_half.max(qmax);
        }
        if half_stats.is_none() && t >= half {
            half_stats = sim.switch().map(|s| s.stats_at(t));
            half_flow_bytes.clone_from(&cur);
            // The interval straddling the half is counted in the second half's maximum.
            max_q_second_half = qmax;
        }
    }
    let now = sim.now();
    let sw_end = sim.switch().map(|s| s.stats_at(now)).unwrap_or_default();
    let sw_half = half_stats.unwrap_or_default();
    let second_ns = (sc.duration - sc.duration / 2).as_nanos().max(1) as f64;
    let busy = sw_end.busy_ns - sw_half.busy_ns;
    let band: Vec<u64> = (0..3)
        .map(|k| sw_end.band_ns[k] - sw_half.band_ns[k])
        .collect();
    let band_total = band.iter().sum::<u64>().max(1) as f64;
    let goodput: Vec<f64> = flows
        .iter()
        .map(|f| f.goodput_bytes as f64 * 8.0 / second_ns)
        .collect();
    let mut stats = roce_stack::QpStats::default();
    let mut rx_stats = roce_stack::QpStats::default();
    for f in &flows {
        if let Some(q) = sim.endpoint(f.host).device.qp(f.qpn) {
            stats.add(q.stats());
        }
    }
    for q in sim.endpoint(rx).device.qps() {
        rx_stats.add(q.stats());
    }
    let late_join = late_join(sc, &series, &cur_bytes_delta(&half_flow_bytes, &last_bytes));
    Run {
        name: sc.name.clone(),
        cc: sc.cc.kind().to_string(),
        cc_config: sc.cc.to_string(),
        flows: sc.flows,
        seed: sc.seed,
        duration_ms: sc.duration.as_secs_f64() * 1e3,
        fairness: jain(&goodput),
        utilization: busy as f64 / second_ns,
        goodput_gbps: goodput.iter().sum(),
        flow_goodput_gbps: goodput,
        tail_drops: sw_end.tail_drops,
        retransmitted_packets: stats.retransmitted_packets,
        max_queue_bytes: sw_end.max_queue_bytes,
        max_queue_bytes_second_half: max_q_second_half,
        mean_queue_bytes: (sw_end.queue_byte_ns - sw_half.queue_byte_ns) as f64 / second_ns,
        queue_in_band: band[1] as f64 / band_total,
        queue_above_kmax: band[2] as f64 / band_total,
        ce_marked: sw_end.marked,
        cnps: rx_stats.cnps_sent,
        cnps_received: stats.cnps_received,
        rate_cuts: stats.rate_cuts,
        late_join,
        kmin_kmax: (sc.red.kmin_bytes, sc.red.kmax_bytes),
        series,
    }
}

fn cur_bytes_delta(half: &[u64], end: &[u64]) -> Vec<u64> {
    half.iter().zip(end).map(|(h, e)| e - h).collect()
}

/// Convergence of the last flow, if it starts after every other flow.
fn late_join(sc: &Scenario, s: &Series, second_half_bytes: &[u64]) -> Option<LateJoin> {
    let n = sc.flows;
    if n < 2 {
        return None;
    }
    let join = sc.start(n - 1);
    if (0..n - 1).any(|i| sc.start(i) + Duration::from_millis(1) > join) {
        return None;
    }
    let at_ms = join.as_secs_f64() * 1e3;
    // 1 ms moving average, starting at the join.
    let w = ((1e-3 / sc.sample.as_secs_f64()).round() as usize).max(1);
    let first = s.t_ms.iter().position(|&t| t > at_ms)?;
    let mut convergence_ms = None;
    for k in first + w - 1..s.t_ms.len() {
        let avg = |f: usize| s.flow_gbps[f][k + 1 - w..=k].iter().sum::<f64>() / w as f64;
        let total: f64 = (0..n).map(avg).sum();
        let fair = total / n as f64;
        if total > 0.0 && (avg(n - 1) - fair).abs() <= 0.1 * fair {
            convergence_ms = Some(s.t_ms[k] - at_ms);
            break;
        }
    }
    let total: u64 = second_half_bytes.iter().sum();
    let share = if total == 0 {
        0.0
    } else {
        second_half_bytes[n - 1] as f64 * n as f64 / total as f64
    };
    Some(LateJoin {
        at_ms,
        convergence_ms,
        share_second_half: share,
    })
}

/// The default experiments of `roce sim congestion`: 2 and 8 flows with `dcqcn` and with no
/// congestion control (same 2 MB buffer), and 3 `dcqcn` flows of which the last joins at a
/// quarter of the run. The 8-flow runs start their flows 500 µs apart (the first CNP
/// needs a marked packet and a round trip, so eight flows starting together at line rate
/// would overflow the buffer before any controller reacts).
pub fn suite(dcqcn: CcConfig, duration: Duration, seed: u64) -> Vec<Scenario> {
    let stagger = |n: usize, gap: Duration| -> Vec<Duration> {
        (0..n)
            .map(|i| gap * u32::try_from(i).unwrap_or(0))
            .collect()
    };
    let jitter = |n: usize, s: u64| -> Vec<Duration> {
        // Up to 10 µs of start jitter per flow, from the seed.
        let mut r = roce_stack::rng::Rng::new(s ^ 0x5747_a7e5);
        (0..n)
            .map(|_| Duration::from_nanos(r.below(10_000)))
            .collect()
    };
    let mut v = Vec::new();
    for (flows, seed) in [(2usize, seed), (8, seed.wrapping_add(1))] {
        for (name, cc) in [("dcqcn", dcqcn), ("none", CcConfig::None)] {
            let mut sc =
                Scenario::new(&format!("{flows} flows, {name}"), cc, flows, duration, seed);
            sc.starts = if flows > 2 {
                stagger(flows, Duration::from_micros(500))
            } else {
                jitter(flows, seed)
            };
            v.push(sc);
        }
    }
    let mut late = Scenario::new(
        "late join (3rd flow)",
        dcqcn,
        3,
        duration,
        seed.wrapping_add(2),
    );
    late.starts = vec![Duration::ZERO, Duration::from_micros(3), duration / 4];
    v.push(late);
    v
}

/// Runs every scenario.
pub fn run_all(scenarios: &[Scenario]) -> Vec<Run> {
    scenarios.iter().map(run).collect()
}
