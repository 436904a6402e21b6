//! One run: the network built (the one switch, or a fabric), the flows started on their
//! schedule, every event of the simulation until the last flow completes, and the report.
use super::flows::*;
use super::*;

/// Runs one experiment. Deterministic for a seed.
pub fn run(spec: &FctSpec) -> FctReport {
    run_tapped(spec, None)
}

/// Runs independent experiments on every core (each on its own thread, at most
/// `available_parallelism` at once); the reports come back in the order of `specs`.
pub fn run_many(specs: &[FctSpec]) -> Vec<FctReport> {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut out = Vec::with_capacity(specs.len());
    for chunk in specs.chunks(cores.max(1)) {
        std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|spec| s.spawn(move || run(spec)))
                .collect();
            for h in handles {
                // A panic in a run is a bug: let it surface as one.
                out.push(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
            }
        });
    }
    out
}

/// A run's network, set up: who sends, what arrives, and how each flow's ideal FCT is
/// computed.
pub(super) struct Net {
    /// Hosts whose completions are polled (every sender).
    pub(super) senders: Vec<usize>,
    /// Hosts whose CNPs are counted (every receiver).
    pub(super) receivers: Vec<usize>,
    /// (arrival, sender, receiver, size, is the victim), in time order.
    pub(super) arrivals: Vec<(Instant, usize, usize, u64, bool)>,
}

/// The one-switch model: every workload flow to endpoint 0 through the switch port in front
/// of it.
pub(super) fn one_switch(sim: &mut Sim, spec: &FctSpec, rng: &mut Rng) -> Net {
    let rx = sim.add_endpoint("10.0.0.1".parse().expect("literal"));
    let nhosts = match spec.workload {
        Workload::Incast { n, .. } => n,
        _ => spec.hosts,
    };
    let hosts: Vec<usize> = (0..nhosts)
        .map(|i| {
            sim.add_endpoint(
                format!("10.0.{}.{}", 1 + i / 250, 1 + i % 250)
                    .parse()
                    .expect("generated"),
            )
        })
        .collect();
    for &h in &hosts {
        *sim.link(h, rx) = LinkConfig {
            delay: spec.hop_delay,
            bandwidth_bps: Some(spec.line_rate_bps),
            ..LinkConfig::default()
        };
        *sim.link(rx, h) = LinkConfig {
            delay: spec.hop_delay * 2,
            ..LinkConfig::default()
        };
    }
    sim.set_switch(SwitchConfig {
        port: rx,
        bandwidth_bps: spec.line_rate_bps,
        delay: spec.hop_delay,
        buffer_bytes: spec.buffer_bytes,
        red: Some(spec.red),
        // Headroom for what is on the wire when the pause starts: per sender, a frame in
        // serialisation and a hop of propagation at line rate, twice over.
        pfc: spec.pfc.then(|| {
            let hop_bytes =
                spec.line_rate_bps / 8 * spec.hop_delay.as_nanos() as u64 / 1_000_000_000;
            let headroom = nhosts as u64 * 2 * (hop_bytes + u64::from(spec.mtu) + 100);
            let xoff = spec
                .buffer_bytes
                .saturating_sub(headroom)
                .max(spec.buffer_bytes / 4);
            PfcConfig {
                xoff_bytes: xoff,
                xon_bytes: xoff / 2,
            }
        }),
    });
    // The victim's receiver: reached from the first sender over a link of its own, not
    // through the switch port.
    let victim_rx = spec.victim.and(hosts.first().copied()).map(|h0| {
        let v = sim.add_endpoint("10.0.0.2".parse().expect("literal"));
        *sim.link(h0, v) = LinkConfig {
            delay: spec.hop_delay * 2,
            bandwidth_bps: Some(spec.line_rate_bps),
            ..LinkConfig::default()
        };
        *sim.link(v, h0) = LinkConfig {
            delay: spec.hop_delay * 2,
            ..LinkConfig::default()
        };
        v
    });
    let mut arrivals: Vec<(Instant, usize, u64)> = Vec::new();
    match &spec.workload {
        Workload::Incast { n, size } => {
            for &h in hosts.iter().take(*n) {
                arrivals.push((Instant::ZERO, h, *size));
            }
        }
        Workload::Poisson { cdf, load } => {
            let flows = poisson_flows(
                cdf,
                *load,
                spec.line_rate_bps,
                spec.duration,
                hosts.len(),
                rng,
            );
            arrivals.extend(flows.into_iter().map(|(t, h, size)| (t, hosts[h], size)));
        }
        Workload::Elephant { .. } => {}
    }
    let mut arrivals: Vec<(Instant, usize, usize, u64, bool)> = arrivals
        .into_iter()
        .map(|(t, h, size)| (t, h, rx, size, false))
        .collect();
    if let (Some(v), Some(size)) = (victim_rx, spec.victim) {
        let at = Instant::ZERO + VICTIM_START;
        let i = arrivals.partition_point(|a| a.0 <= at);
        arrivals.insert(i, (at, hosts[0], v, size, true));
    }
    Net {
        senders: hosts,
        receivers: vec![rx],
        arrivals,
    }
}

/// A multi-switch fabric: flows between its hosts.
pub(super) fn multi_switch(sim: &mut Sim, spec: &FctSpec, f: &FabricSpec, rng: &mut Rng) -> Net {
    let cfg = f.config(spec);
    let n = cfg.topology.hosts();
    for i in 0..n {
        sim.add_endpoint(
            format!("10.{}.{}.{}", 1 + i / 64_000, (i / 250) % 256, 1 + i % 250)
                .parse()
                .expect("generated"),
        );
    }
    sim.set_fabric(cfg).expect("a validated topology");
    if f.ecmp == Ecmp::OnePort {
        sim.set_entropy_port(Some(ONE_ENTROPY_PORT));
    }
    let mut arrivals = Vec::new();
    match &spec.workload {
        // Random pairs: the sender uniformly, the receiver uniformly among the others; the
        // arrival rate loads every host link at `load` on average.
        Workload::Poisson { cdf, load } => {
            let flows = poisson_flows(
                cdf,
                *load,
                spec.line_rate_bps.saturating_mul(n as u64),
                spec.duration,
                n,
                rng,
            );
            for (t, h, size) in flows {
                let d = if n > 1 {
                    (h + 1 + rng.below(n as u64 - 1) as usize) % n
                } else {
                    h
                };
                arrivals.push((t, h, d, size, false));
            }
        }
        // Into host 0 from the last `n` hosts (other racks first).
        Workload::Incast { n: k, size } => {
            for h in (n - (*k).min(n - 1)..n).rev() {
                arrivals.push((Instant::ZERO, h, 0, *size, false));
            }
        }
        // A permutation of long flows: host h to host h + n/2.
        Workload::Elephant { per_host, size } => {
            for h in 0..n {
                for _ in 0..*per_host {
                    arrivals.push((Instant::ZERO, h, (h + n / 2) % n, *size, false));
                }
            }
        }
    }
    let all: Vec<usize> = (0..n).collect();
    Net {
        senders: all.clone(),
        receivers: all,
        arrivals,
    }
}

/// [`run`] with `tap` seeing every datagram and the switches' PFC frames (for a capture).
pub fn run_tapped(spec: &FctSpec, tap: Option<Box<dyn roce_stack::sim::Tap + Send>>) -> FctReport {
    let mut sim = Sim::new(spec.seed);
    if let Some(t) = tap {
        sim.set_tap(t);
    }
    let mut rng = Rng::new(spec.seed ^ 0xfc7);
    let net = match &spec.fabric {
        None => one_switch(&mut sim, spec, &mut rng),
        Some(f) => multi_switch(&mut sim, spec, f, &mut rng),
    };
    let threads = sim.set_threads(spec.threads);
    let arrivals = &net.arrivals;
    // HPCC: telemetry instead of ECN, ACKs often enough to react within a round trip, and
    // T the fabric's base round trip (unless `t=` changed it from the paper's).
    let cc = match spec.cc {
        CcConfig::Hpcc(mut p) => {
            if p.base_rtt == HpccParams::paper().base_rtt {
                p.base_rtt = spec.fabric.map_or(p.base_rtt, |f| f.base_rtt(spec));
            }
            CcConfig::Hpcc(p)
        }
        c => c,
    };
    let hpcc = matches!(cc, CcConfig::Hpcc(_));
    let adaptive = spec.fabric.is_some_and(|f| f.ecmp == Ecmp::Adaptive);
    let mut next_epoch = Instant::ZERO + ADAPTIVE_EPOCH;
    let mut path_rng = Rng::new(spec.seed ^ 0xada9);
    let mut repaths = 0u64;
    let caps = QpCaps {
        max_unacked_psns: 256,
        infinite_retry_at_7: true,
        ack_req_every: if hpcc {
            HPCC_ACK_EVERY
        } else {
            QpCaps::default().ack_req_every
        },
        ..QpCaps::default()
    };
    let mut opts = ConnectParams {
        mtu: spec.mtu,
        timeout: 12,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectParams::default()
    };
    if hpcc {
        opts.path.ecn = roce_proto::Ecn::NotEct;
    }
    let mut flows: Vec<Flow> = Vec::new();
    // The fabric's switch egress queues (sampled for the queue distribution).
    let switch_ports: Vec<usize> = sim.fabric().map_or_else(Vec::new, |f| {
        (0..f.port_count())
            .filter(|&p| f.port(p).2 != PortKind::HostUp)
            .collect()
    });
    let mut next = 0;
    let (mut active_bytes, mut postponed) = (0u64, 0u64);
    let mut pools = Pools::default();
    let mut queue = QueueHistogram::default();
    let (mut verified_bytes, mut mismatched_flows) = (0u64, 0u64);
    let (mut finished, mut failed_flows) = (0usize, 0u64);
    let step = Duration::from_micros(2);
    let limit = Instant::ZERO + spec.duration * 10;
    let setup = FlowSetup {
        spec,
        caps,
        opts: &opts,
        cc: &cc,
        adaptive,
    };
    loop {
        let now = sim.now();
        // Start the flows whose time has come, while their regions (both ends) fit the
        // simulator's memory bound; a flow that waits for room keeps its arrival time, so
        // the wait is in its FCT.
        while next < arrivals.len() && arrivals[next].0 <= now {
            let (start, _, _, size, _) = arrivals[next];
            if spec.regions == Regions::Bytes
                && active_bytes > 0
                && active_bytes + size > spec.max_active_bytes
            {
                break;
            }
            // Flows start at their arrival unless they waited here.
            postponed += u64::from(now > start);
            active_bytes += size;
            next += 1;
            let f = start_flow(
                &mut sim,
                &mut pools,
                flows.len(),
                arrivals[next - 1],
                &setup,
            );
            flows.push(f);
        }
        let t = now + step;
        // Up to the next arrival if it comes sooner (one that is due but waits for room
        // waits a step).
        let t = match arrivals.get(next) {
            Some(a) if a.0 < t && a.0 > now => a.0,
            _ => t,
        };
        sim.run_until(t);
        // The queue as the step leaves it, for the step's length: the switch port's, or each
        // of the fabric's switch egress queues.
        let ns = t.saturating_duration_since(now).as_nanos() as u64;
        sample_queues(&sim, &switch_ports, &mut queue, ns);
        if adaptive && sim.now() >= next_epoch {
            next_epoch = sim.now() + ADAPTIVE_EPOCH;
            repaths += adaptive_epoch(&mut sim, &mut flows, &mut path_rng);
        }
        for &h in &net.senders {
            while let Some(c) = sim.device(h).poll_completion() {
                let (fi, wi) = (c.wr_id / WRS_PER_FLOW, c.wr_id % WRS_PER_FLOW);
                if let Some(f) = flows.get_mut(fi as usize) {
                    // An earlier WRITE of the flow that succeeded: the last one will tell.
                    let more = wi + 1 < f.wrs && c.status == WcStatus::Success;
                    if f.done.is_none() && !f.failed && !more {
                        // Its one (signaled) WRITE completed: done, or failed (a QP in error
                        // after its retries ran out); its regions and QPs are given back
                        // either way.
                        finished += 1;
                        active_bytes -= f.size;
                        match end_flow(&mut sim, &mut pools, f, c.status == WcStatus::Success) {
                            FlowEnd::Verified => verified_bytes += f.size,
                            FlowEnd::Mismatched => mismatched_flows += 1,
                            FlowEnd::Failed => failed_flows += 1,
                        }
                    }
                }
            }
        }
        let all_done = next == arrivals.len() && finished == flows.len();
        if all_done || sim.now() >= limit {
            break;
        }
    }
    let counts = RunCounts {
        threads,
        postponed,
        repaths,
        verified_bytes,
        mismatched_flows,
        failed_flows,
        queue: queue.dist(),
    };
    report(spec, &sim, &net, &flows, counts)
}

/// What every flow of a run is set up with.
struct FlowSetup<'a> {
    spec: &'a FctSpec,
    caps: QpCaps,
    opts: &'a ConnectParams,
    cc: &'a CcConfig,
    adaptive: bool,
}

/// Flow `k` of `arrival` (start, sender, receiver, size, victim): its receive region and
/// QPs from the hosts' pools, connected with start PSNs of its own, its WRITEs posted.
fn start_flow(
    sim: &mut Sim,
    pools: &mut Pools,
    k: usize,
    arrival: (Instant, usize, usize, u64, bool),
    setup: &FlowSetup<'_>,
) -> Flow {
    let (start, h, dst, size, is_victim) = arrival;
    // The flow's bytes: its sender's pattern from an offset of its own, repeated
    // every PATTERN_PERIOD bytes; checked at the receiver as each packet is placed (pattern
    // regions) or in place when the flow completes (regions of bytes).
    let offset = (setup.spec.seed ^ (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) % PATTERN_SLACK;
    let shared = match setup.spec.regions {
        Regions::Pattern => Some(pools.shared(setup.spec.seed)),
        Regions::Bytes => None,
    };
    let (rq, rmr) = {
        let mut pool = pools.of(sim, dst);
        let d = sim.device(dst);
        let mr = match shared {
            Some(bytes) => {
                let p = roce_stack::Pattern {
                    bytes,
                    start: offset as usize,
                    period: PATTERN_PERIOD as usize,
                };
                d.reg_pattern_mr(pool.pd, size as usize, Access::ALL, p)
                    .expect("a valid pattern")
            }
            None => d.reg_mr(pool.pd, size as usize, Access::ALL),
        };
        let qp = pool.free.pop().unwrap_or_else(|| {
            d.create_qp(pool.pd, pool.cq, pool.cq, setup.caps)
                .expect("receiver QP")
        });
        (qp, mr)
    };
    let (sq, smr) = {
        let mut pool = pools.of(sim, h);
        let smr = pools.pattern(sim, h, setup.spec.seed, setup.spec.regions);
        let d = sim.device(h);
        let qp = pool.free.pop().unwrap_or_else(|| {
            d.create_qp(pool.pd, pool.cq, pool.cq, setup.caps)
                .expect("sender QP")
        });
        (qp, smr)
    };
    // Start PSNs of its own (QPs are reused: what is left on the wire of a QP's
    // earlier flow falls outside the new one's window).
    let psn = (k as u32).wrapping_mul(0x9e37_79b1) & 0x00ff_ffff;
    let flow_opts = ConnectParams {
        sq_psn: roce_proto::Psn::new(psn),
        rq_psn: roce_proto::Psn::new(psn ^ 0x0080_0000),
        ..*setup.opts
    };
    sim.connect(h, sq, dst, rq, &flow_opts).expect("connect");
    let links = match sim.fabric() {
        Some(f) => {
            let (a, b) = (sim.endpoint(h).ip, sim.endpoint(dst).ip);
            f.path(h, dst, a, b, 0).len() as u32
        }
        None => 2,
    };
    sim.device(h)
        .set_congestion_control(sq, setup.cc.build(setup.spec.line_rate_bps));
    // WRITEs of up to MAX_SGE periods each, in order on the QP: the last one's
    // completion is the flow's.
    let wrs = post_flow(sim, k, (h, sq, smr), (dst, rmr), size, offset);
    Flow {
        size,
        start,
        done: None,
        mrs: (smr, rmr),
        qps: (h, sq, rq),
        pattern: offset,
        wrs,
        failed: false,
        dst,
        victim: is_victim,
        links,
        paths: setup.adaptive.then(|| {
            let q = sim.endpoint(h).device.qp(sq);
            let port = q.map_or(0, |q| q.path().src_port);
            let s = q.map(|q| *q.stats()).unwrap_or_default();
            roce_stack::paths::PathChooser::new(port, ADAPTIVE_PATHS)
                .with_baseline(s.cnps_received, s.tx_packets)
        }),
    }
}

/// The queues as a step of `ns` nanoseconds leaves them: the switch port's, or each of the
/// fabric's switch egress queues (`switch_ports`).
fn sample_queues(sim: &Sim, switch_ports: &[usize], queue: &mut QueueHistogram, ns: u64) {
    match sim.fabric() {
        Some(fab) => {
            for &p in switch_ports {
                queue.add(fab.queue_bytes(p), ns);
            }
        }
        None => queue.add(
            sim.switch().map_or(0, roce_stack::sim::Switch::queue_bytes),
            ns,
        ),
    }
}

/// Adaptive routing's epoch: each running flow's path chooser sees its CNPs and packets since
/// the last, and may move the flow to another path. Returns the moves.
fn adaptive_epoch(sim: &mut Sim, flows: &mut [Flow], rng: &mut Rng) -> u64 {
    let mut repaths = 0;
    for f in flows.iter_mut().filter(|f| f.done.is_none() && !f.failed) {
        let (h, sq, _) = f.qps;
        let Some(s) = sim.endpoint(h).device.qp(sq).map(|q| *q.stats()) else {
            continue;
        };
        if let Some(port) = f
            .paths
            .as_mut()
            .and_then(|p| p.on_epoch(s.cnps_received, s.tx_packets, rng))
        {
            sim.device(h).repath_qp(sq, port);
            repaths += 1;
        }
    }
    repaths
}

/// How a flow ended.
enum FlowEnd {
    /// Its bytes landed as sent.
    Verified,
    /// Its last WRITE completed, but the receiver's region does not hold the pattern.
    Mismatched,
    /// Its QP went to error (retries ran out).
    Failed,
}

/// Flow `f` has ended (its last WRITE `ok`, or not): checks its bytes at the receiver, and
/// gives back its receive region and its QPs (to RESET and to their hosts' pools, for later
/// flows: the devices hold as many QPs as flows run at once, whatever the run's length). The
/// sender's pattern stays for its later flows.
fn end_flow(sim: &mut Sim, pools: &mut Pools, f: &mut Flow, ok: bool) -> FlowEnd {
    let (smr, rmr) = f.mrs;
    let (sh, sq, rq) = f.qps;
    let end = if ok {
        f.done = Some(sim.now());
        let checked = sim
            .device(f.dst)
            .mr_mut(rmr)
            .and_then(|m| m.pattern_check());
        let landed = match (
            checked,
            sim.endpoint(sh).device.mr(smr),
            sim.endpoint(f.dst).device.mr(rmr),
        ) {
            (Some(c), ..) => c.verified() && c.written == f.size,
            (None, Some(p), Some(m)) => holds_pattern(m.as_slice(), p.as_slice(), f.pattern),
            _ => false,
        };
        if landed {
            FlowEnd::Verified
        } else {
            FlowEnd::Mismatched
        }
    } else {
        f.failed = true;
        FlowEnd::Failed
    };
    sim.device(f.dst).dereg_mr(rmr);
    let reset = roce_stack::QpAttr::to(roce_stack::QpState::Reset);
    let _ = sim.device(sh).modify_qp(sq, &reset);
    let _ = sim.device(f.dst).modify_qp(rq, &reset);
    pools.give_back(sh, sq);
    pools.give_back(f.dst, rq);
    end
}

/// What the run's loop counted, for [`report`].
pub(super) struct RunCounts {
    pub(super) threads: usize,
    pub(super) postponed: u64,
    pub(super) repaths: u64,
    pub(super) verified_bytes: u64,
    pub(super) mismatched_flows: u64,
    pub(super) failed_flows: u64,
    pub(super) queue: QueueDist,
}

/// The report of a finished run: each flow's slowdown against its ideal FCT, by size bucket;
/// the switches', links' and QPs' counters.
pub(super) fn report(
    spec: &FctSpec,
    sim: &Sim,
    net: &Net,
    flows: &[Flow],
    c: RunCounts,
) -> FctReport {
    let mut all = Vec::new();
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); BUCKETS.len()];
    let (mut fct_sum, mut bytes, mut last) = (0.0, 0u64, Instant::ZERO);
    let mut victim = None;
    for f in flows {
        let Some(done) = f.done else { continue };
        let fct = done.saturating_duration_since(f.start).as_nanos() as f64;
        // The flow alone: a round trip over its path's links, its frames at the host rate.
        let rtt_ns = 2.0 * f64::from(f.links) * spec.hop_delay.as_nanos() as f64;
        let ideal =
            rtt_ns + frame_bytes(f.size, spec.mtu) as f64 * 8.0 * 1e9 / spec.line_rate_bps as f64;
        let s = (fct / ideal).max(1.0);
        if f.victim {
            victim = Some((fct / 1e3, s));
            continue;
        }
        all.push(s);
        let b = BUCKETS
            .iter()
            .position(|(hi, _)| f.size <= *hi)
            .unwrap_or(BUCKETS.len() - 1);
        per[b].push(s);
        fct_sum += fct;
        bytes += f.size;
        last = last.max(done);
    }
    let completed = all.len();
    let workload_flows = flows.iter().filter(|f| !f.victim).count();
    let now = sim.now();
    let mut sw = sim.switch().map(|s| s.stats_at(now)).unwrap_or_default();
    let mut links = Vec::new();
    let mut fabric_links = Vec::new();
    if let Some(fab) = sim.fabric() {
        // The fabric's switches as one: drops, marks, pauses and frames over every port.
        for p in 0..fab.port_count() {
            let ps = fab.port_stats(p, now);
            sw.tail_drops += ps.drops;
            sw.marked += ps.marked;
            sw.max_queue_bytes = sw.max_queue_bytes.max(ps.max_queue_bytes);
            sw.pauses += ps.pauses;
            sw.paused_ns += ps.paused_ns;
        }
        sw.departed = fab.hops();
        links = link_tiers(&fab, now, last);
        fabric_links = link_uses(&fab, now, last);
    }
    let mut stats = roce_stack::QpStats::default();
    for &h in &net.senders {
        for q in sim.endpoint(h).device.qps() {
            stats.add(q.stats());
        }
    }
    let cnps = net
        .receivers
        .iter()
        .flat_map(|&r| sim.endpoint(r).device.qps())
        .map(|q| q.stats().cnps_sent)
        .sum();
    let last_s = last.as_nanos() as f64 / 1e9;
    let topology = match &spec.fabric {
        None => "switch".to_string(),
        Some(f) => f.describe(),
    };
    FctReport {
        cc: spec.cc.kind().to_string(),
        topology,
        flows: workload_flows,
        completed,
        all: Slowdown::of(all),
        buckets: BUCKETS
            .iter()
            .zip(per)
            .map(|((_, l), v)| (l.to_string(), Slowdown::of(v)))
            .collect(),
        mean_fct_us: if completed > 0 {
            fct_sum / completed as f64 / 1e3
        } else {
            0.0
        },
        goodput_gbps: if last_s > 0.0 {
            bytes as f64 * 8.0 / last_s / 1e9
        } else {
            0.0
        },
        tail_drops: sw.tail_drops,
        retransmitted_packets: stats.retransmitted_packets,
        ce_marked: sw.marked,
        cnps,
        max_queue_bytes: sw.max_queue_bytes,
        pfc_pauses: sw.pauses,
        pfc_frames: sim.stats().pfc_frames,
        pfc_paused_us: sw.paused_ns as f64 / 1e3,
        postponed: c.postponed,
        sim_ms: last_s * 1e3,
        // A fabric counts every hop, hosts' included; the one-switch model its links and
        // the switch port.
        packet_hops: if spec.fabric.is_some() {
            sw.departed
        } else {
            sim.stats().sent + sw.departed
        },
        links,
        fabric_links,
        repaths: c.repaths,
        verified_bytes: c.verified_bytes,
        mismatched_flows: c.mismatched_flows,
        queue: c.queue,
        failed_flows: c.failed_flows,
        max_active_bytes: spec.max_active_bytes,
        victim,
        threads: c.threads,
    }
}
