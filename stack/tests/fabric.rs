//! The simulator's multi-switch fabric: real RC WRITEs over leaf-spine and fat trees, with
//! ECMP, PFC, tail drop and ECN, every byte checked at its receiver. Seeds come from
//! `SIM_SEED` (or a fixed list) and a failure prints its seed.
#![cfg(feature = "sim")]

use roce_proto::{Ecn, Qpn};
use roce_stack::rng::Rng;
use roce_stack::sim::{FabricConfig, PfcConfig, PortKind, SeedGuard, Sim, Topology};
use roce_stack::{
    Access, CcConfig, ConnectParams, MrHandle, PathConfig, QpCaps, SgList, WcStatus, WorkRequest,
    WrOp,
};

struct Flow {
    from: usize,
    to: usize,
    size: usize,
    mrs: (MrHandle, MrHandle),
    seed: u64,
}

/// A sim with `cfg`'s hosts on its fabric.
fn fabric_sim(seed: u64, cfg: FabricConfig) -> Sim {
    let mut sim = Sim::new(seed);
    for i in 0..cfg.topology.hosts() {
        sim.add_endpoint(format!("10.1.{}.{}", i / 200, 1 + i % 200).parse().unwrap());
    }
    sim.set_fabric(cfg).unwrap();
    sim
}

/// Starts flow `n`: one WRITE of `size` random bytes from `from` to `to` on a QP pair of its
/// own with `caps`, connected with `p`, under `cc` (none: no congestion control).
fn start_flow(
    sim: &mut Sim,
    n: usize,
    (from, to, size): (usize, usize, usize),
    caps: QpCaps,
    p: &ConnectParams,
    cc: Option<CcConfig>,
) -> (Flow, Qpn) {
    let rate = sim.fabric().unwrap().config().host_rate_bps;
    let seed = sim.seed() ^ (n as u64 + 1).wrapping_mul(0x9e37_79b9);
    let (pa, ca) = {
        let d = sim.device(from);
        (d.alloc_pd(), d.create_cq())
    };
    let (pb, cb) = {
        let d = sim.device(to);
        (d.alloc_pd(), d.create_cq())
    };
    let ma = sim.device(from).reg_mr(pa, size, Access::ALL);
    Rng::new(seed).fill(sim.device(from).mr_mut(ma).unwrap().as_mut_slice());
    let mb = sim.device(to).reg_mr(pb, size, Access::ALL);
    let qa = sim.device(from).create_qp(pa, ca, ca, caps).unwrap();
    let qb = sim.device(to).create_qp(pb, cb, cb, caps).unwrap();
    sim.connect(from, qa, to, qb, p).unwrap();
    if let Some(cc) = cc {
        sim.device(from).set_congestion_control(qa, cc.build(rate));
    }
    let remote = sim.device(to).mr(mb).unwrap().remote_addr(0);
    let sge = sim.device(from).mr(ma).unwrap().sge(0, size as u32);
    sim.device(from)
        .post_send(
            qa,
            WorkRequest::new(n as u64, WrOp::Write(remote), SgList::one(sge)),
        )
        .unwrap();
    let flow = Flow {
        from,
        to,
        size,
        mrs: (ma, mb),
        seed,
    };
    (flow, qa)
}

/// The flows' QP caps, connection and congestion control: DCQCN over ECN when `cc`.
fn flow_setup(cc: bool) -> (QpCaps, ConnectParams, Option<CcConfig>) {
    let caps = QpCaps {
        max_unacked_psns: 256,
        infinite_retry_at_7: true,
        ..QpCaps::default()
    };
    let p = ConnectParams {
        mtu: 1024,
        timeout: 12,
        retry_cnt: 7,
        rnr_retry: 7,
        path: PathConfig {
            ecn: if cc { Ecn::Ect0 } else { Ecn::NotEct },
            ..PathConfig::default()
        },
        ..ConnectParams::default()
    };
    (caps, p, cc.then(|| CcConfig::Dcqcn(Default::default())))
}

/// Starts one WRITE of `size` random bytes per (from, to, size) on QPs of its own, with
/// DCQCN when `cc`; runs until every one completed (or 1 s of virtual time) and checks each
/// region landed byte for byte. Returns the flows.
fn run_flows(sim: &mut Sim, flows: &[(usize, usize, usize)], cc: bool) -> Vec<Flow> {
    let (caps, p, dcqcn) = flow_setup(cc);
    let mut out = Vec::new();
    let mut cqs = Vec::new();
    for (n, &f) in flows.iter().enumerate() {
        let (flow, qa) = start_flow(sim, n, f, caps, &p, dcqcn);
        cqs.push((flow.from, qa));
        out.push(flow);
    }
    sim.time_limit = roce_stack::Instant::from_micros(1_000_000);
    let mut done = vec![false; flows.len()];
    while done.iter().any(|d| !d) {
        assert!(sim.step(), "the fabric went idle with flows unfinished");
        assert!(sim.now() < sim.time_limit, "flows still running after 1 s");
        for &(h, _) in &cqs {
            while let Some(c) = sim.device(h).poll_completion() {
                assert_eq!(c.status, WcStatus::Success, "flow {}", c.wr_id);
                done[c.wr_id as usize] = true;
            }
        }
    }
    // What is still on the wire (a last ACK, a CNP) lands too.
    assert!(sim.run_until_idle(), "the fabric never went idle");
    for (n, f) in out.iter().enumerate() {
        let mut want = vec![0u8; f.size];
        Rng::new(f.seed).fill(&mut want);
        let got = sim.device(f.to).mr(f.mrs.1).unwrap().as_slice().to_vec();
        assert!(
            got == want,
            "flow {n} ({} -> {}): bytes differ",
            f.from,
            f.to
        );
    }
    out
}

fn seeds() -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(_) => vec![roce_stack::sim::seed_from_env(0)],
        Err(_) => vec![1, 2, 3],
    }
}

fn leaf_spine(spines: usize) -> FabricConfig {
    FabricConfig::new(Topology::LeafSpine {
        leaves: 2,
        hosts_per_leaf: 8,
        spines,
    })
}

#[test]
fn pfc_never_drops_and_every_port_resumes() {
    for seed in seeds() {
        let _g = SeedGuard(seed);
        // A 7:1 incast into host 15 under a small buffer: without PFC it drops.
        let mut cfg = leaf_spine(2);
        cfg.buffer_bytes = 300_000;
        let flows: Vec<_> = (0..7).map(|h| (h, 15, 400_000)).collect();
        let mut lossy = fabric_sim(seed, cfg);
        run_flows(&mut lossy, &flows, false);
        let f = lossy.fabric().unwrap();
        assert!(f.drops() > 0, "seed {seed}: the incast never overflowed");

        cfg.pfc = Some(cfg.pfc_thresholds(1024));
        let mut sim = fabric_sim(seed, cfg);
        run_flows(&mut sim, &flows, false);
        let now = sim.now();
        let f = sim.fabric().unwrap();
        assert_eq!(f.drops(), 0, "seed {seed}: PFC dropped");
        let pauses: u64 = (0..f.port_count())
            .map(|p| f.port_stats(p, now).pauses)
            .sum();
        assert!(pauses > 0, "seed {seed}: nothing was paused");
        assert!(
            f.pfc_frames() >= 2 * pauses,
            "an XON for every XOFF at least"
        );
        for h in 0..f.hosts() {
            assert!(!f.host_paused(h), "seed {seed}: host {h} still paused");
        }
        let retx: u64 = (0..16)
            .flat_map(|h| sim.endpoint(h).device.qps().map(|q| q.stats()))
            .map(|s| s.retransmitted_packets)
            .sum();
        assert_eq!(retx, 0, "seed {seed}: lossless, yet retransmitted");
    }
}

#[test]
fn ecmp_spreads_one_host_pairs_qps_and_one_entropy_port_does_not() {
    for seed in seeds() {
        let _g = SeedGuard(seed);
        // 32 QPs from host 0 to host 8 (other leaf), 4 spines.
        let flows: Vec<_> = (0..32).map(|_| (0, 8, 64_000)).collect();
        let uplinks = |sim: &Sim| -> Vec<u64> {
            let f = sim.fabric().unwrap();
            let now = sim.now();
            (0..f.port_count())
                .filter(|&p| {
                    let (node, _, kind, _) = f.port(p);
                    kind == PortKind::Up && node == 16
                })
                .map(|p| f.port_stats(p, now).tx_bytes)
                .collect()
        };
        let mut sim = fabric_sim(seed, leaf_spine(4));
        run_flows(&mut sim, &flows, false);
        let spread = uplinks(&sim);
        assert_eq!(spread.len(), 4);
        assert!(
            spread.iter().all(|&b| b > 0),
            "seed {seed}: a spine unused: {spread:?}"
        );
        let mut one = fabric_sim(seed, leaf_spine(4));
        one.set_entropy_port(Some(0xc000));
        run_flows(&mut one, &flows, false);
        let one = uplinks(&one);
        assert_eq!(
            one.iter().filter(|&&b| b > 0).count(),
            1,
            "seed {seed}: {one:?}"
        );
        // The same frames crossed the leaf's uplinks either way, each exactly once.
        assert_eq!(spread.iter().sum::<u64>(), one.iter().sum::<u64>());
    }
}

#[test]
fn a_fat_tree_carries_random_pairs_exactly_once() {
    for seed in seeds() {
        let _g = SeedGuard(seed);
        let mut cfg = FabricConfig::new(Topology::k_ary(4));
        cfg.pfc = Some(cfg.pfc_thresholds(1024));
        let mut sim = fabric_sim(seed, cfg);
        let mut rng = Rng::new(seed);
        let flows: Vec<_> = (0..40)
            .map(|_| {
                let a = rng.below(16) as usize;
                let b = (a + 1 + rng.below(15) as usize) % 16;
                (a, b, 1 + rng.below(200_000) as usize)
            })
            .collect();
        run_flows(&mut sim, &flows, true);
        let now = sim.now();
        let f = sim.fabric().unwrap();
        assert_eq!(f.drops(), 0);
        // Conservation at the edge: every frame a host sent reached a host.
        let (mut up, mut down) = (0, 0);
        for p in 0..f.port_count() {
            let (_, _, kind, _) = f.port(p);
            let s = f.port_stats(p, now);
            match kind {
                PortKind::HostUp => up += s.tx_frames,
                PortKind::ToHost => down += s.tx_frames,
                _ => {}
            }
        }
        assert_eq!(up, down, "seed {seed}");
        assert!(up > 0);
    }
}

#[test]
fn pfc_thresholds_leave_the_headroom() {
    let cfg = FabricConfig::new(Topology::HPCC);
    let p: PfcConfig = cfg.pfc_thresholds(1024);
    // The ToR has 20 ports: 20 × (XOFF + headroom) fits its buffer.
    let headroom = cfg.pfc_headroom(cfg.fabric_rate_bps, 1024);
    assert!(20 * (p.xoff_bytes + headroom) <= cfg.buffer_bytes);
    assert!(p.xon_bytes < p.xoff_bytes);
}

/// HPCC on the fabric's telemetry: four long flows into one host. Once the first round
/// trips are over, the bottleneck (the ToR's port to the receiver) stays busy while its queue
/// stays near empty; without congestion control the same flows pile megabytes up there.
#[test]
fn hpcc_keeps_the_bottleneck_busy_and_its_queue_near_empty() {
    use roce_stack::cc::hpcc::HpccParams;
    for seed in seeds() {
        let _g = SeedGuard(seed);
        let run = |cc: Option<CcConfig>| {
            let mut cfg = leaf_spine(2);
            cfg.int = cc.is_some();
            let mut sim = fabric_sim(seed, cfg);
            let caps = QpCaps {
                max_unacked_psns: 256,
                ack_req_every: 8,
                ..QpCaps::default()
            };
            // The ToR port toward host 15.
            let f = sim.fabric().unwrap();
            let bottleneck = (0..f.port_count())
                .find(|&p| f.port(p).1 == 15 && f.port(p).2 == PortKind::ToHost)
                .unwrap();
            let size = 4 << 20;
            let p = ConnectParams {
                mtu: 1024,
                path: PathConfig {
                    ecn: Ecn::NotEct,
                    ..PathConfig::default()
                },
                ..ConnectParams::default()
            };
            for (n, from) in [0usize, 1, 8, 9].into_iter().enumerate() {
                start_flow(&mut sim, n, (from, 15, size), caps, &p, cc);
            }
            // 100 µs to settle, then 600 µs sampled every µs.
            sim.run_until(roce_stack::Instant::from_micros(100));
            let tx0 = sim
                .fabric()
                .unwrap()
                .port_stats(bottleneck, sim.now())
                .tx_bytes;
            let mut q = Vec::new();
            for us in 101..=700 {
                sim.run_until(roce_stack::Instant::from_micros(us));
                q.push(sim.fabric().unwrap().queue_bytes(bottleneck));
            }
            let tx = sim
                .fabric()
                .unwrap()
                .port_stats(bottleneck, sim.now())
                .tx_bytes
                - tx0;
            let util = tx as f64 * 8.0 / (100e9 * 600e-6);
            q.sort_unstable();
            (util, q[q.len() / 2], q[q.len() * 99 / 100])
        };
        let hpcc = CcConfig::Hpcc(HpccParams {
            base_rtt: core::time::Duration::from_micros(9),
            ..HpccParams::paper()
        });
        let (u, p50, p99) = run(Some(hpcc));
        let (u_none, p50_none, _) = run(None);
        assert!(
            u > 0.8,
            "seed {seed}: HPCC left the bottleneck idle ({u:.3})"
        );
        assert!(u_none > 0.95, "seed {seed}");
        assert!(
            p50 < 20_000 && p99 < 100_000,
            "seed {seed}: HPCC queue p50 {p50} B, p99 {p99} B"
        );
        assert!(p50_none > 1_000_000, "seed {seed}: {p50_none}");
    }
}

/// A tap call as the test keeps it: (kind, 9 for a frame; time; id; from; to; ECN; length;
/// digest of the bytes).
type TapCall = (u8, u64, u64, usize, usize, u8, usize, u64);

/// Everything a run shows from outside: each tap call in order (datagrams with a digest of
/// their bytes, PFC frames), each completion with its time, the link counters and every
/// port's counters at the end.
#[derive(Debug, PartialEq)]
struct Seen {
    taps: Vec<TapCall>,
    completions: Vec<(u64, u64, u64)>,
    stats: roce_stack::sim::SimStats,
    ports: Vec<roce_stack::sim::PortStats>,
    totals: (u64, u64, u64),
}

/// A digest of `b` (FNV-1a).
fn digest(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// `flows` over `cfg` on `threads` threads: what the run showed, and the parts it made.
fn run_split(
    seed: u64,
    cfg: FabricConfig,
    flows: &[(usize, usize, usize)],
    threads: usize,
) -> (Seen, usize) {
    use std::sync::{Arc, Mutex};
    let mut sim = fabric_sim(seed, cfg);
    struct Log(Arc<Mutex<Vec<TapCall>>>);
    impl roce_stack::sim::Tap for Log {
        fn on_datagram(&mut self, ev: &roce_stack::sim::TapEvent<'_>) {
            self.0.lock().unwrap().push((
                ev.kind as u8,
                ev.time.as_nanos(),
                ev.id,
                ev.from,
                ev.to,
                ev.ecn as u8,
                ev.datagram.len(),
                digest(ev.datagram),
            ));
        }
        fn on_frame(&mut self, time: roce_stack::Instant, frame: &[u8]) {
            self.0.lock().unwrap().push((
                9,
                time.as_nanos(),
                0,
                0,
                0,
                0,
                frame.len(),
                digest(frame),
            ));
        }
    }
    let log = Arc::new(Mutex::new(Vec::new()));
    // The tap before the split for one run, after it for another: both are kept.
    if threads.is_multiple_of(2) {
        sim.set_tap(Box::new(Log(log.clone())));
    }
    let parts = sim.set_threads(threads);
    if !threads.is_multiple_of(2) {
        sim.set_tap(Box::new(Log(log.clone())));
    }
    let (caps, p, dcqcn) = flow_setup(true);
    let mut senders = Vec::new();
    for (n, &f) in flows.iter().enumerate() {
        let (flow, _) = start_flow(&mut sim, n, f, caps, &p, dcqcn);
        senders.push(flow.from);
    }
    senders.sort_unstable();
    senders.dedup();
    let mut completions = Vec::new();
    // Steps of 3 µs, as a driver polls its completions.
    let step = core::time::Duration::from_micros(3);
    while completions.len() < flows.len() {
        let t = sim.now() + step;
        sim.run_until(t);
        assert!(
            sim.now().as_nanos() < 1_000_000_000,
            "flows still running after 1 s"
        );
        for &h in &senders {
            while let Some(c) = sim.device(h).poll_completion() {
                completions.push((c.wr_id, c.status as u64, sim.now().as_nanos()));
            }
        }
    }
    assert!(sim.run_until_idle(), "the fabric never went idle");
    let now = sim.now();
    let f = sim.fabric().unwrap();
    let ports = (0..f.port_count()).map(|p| f.port_stats(p, now)).collect();
    let totals = (f.hops(), f.drops(), f.pfc_frames());
    let taps = core::mem::take(&mut *log.lock().unwrap());
    let seen = Seen {
        taps,
        completions,
        stats: sim.stats(),
        ports,
        totals,
    };
    (seen, parts)
}

/// The fabric split across threads (conservative parallel simulation) gives exactly what
/// it gives whole: every tap call in the same order, the same completions at the same
/// times, the same counters. With PFC (pause frames crossing parts), and without on a
/// small buffer (drops).
#[test]
fn a_split_fabric_runs_exactly_as_a_whole_one() {
    for seed in seeds() {
        let _g = SeedGuard(seed);
        let mut rng = Rng::new(seed);
        let flows: Vec<_> = (0..30)
            .map(|_| {
                let a = rng.below(16) as usize;
                let b = (a + 1 + rng.below(15) as usize) % 16;
                (a, b, 1 + rng.below(150_000) as usize)
            })
            .collect();
        let mut pfc = FabricConfig::new(Topology::k_ary(4));
        pfc.pfc = Some(PfcConfig {
            xoff_bytes: 20_000,
            xon_bytes: 10_000,
        });
        pfc.fabric_rate_bps = pfc.host_rate_bps;
        let mut lossy = FabricConfig::new(Topology::k_ary(4));
        lossy.buffer_bytes = 40_000;
        for (name, cfg) in [("pfc", pfc), ("lossy", lossy)] {
            let (whole, parts) = run_split(seed, cfg, &flows, 1);
            assert_eq!(parts, 1);
            assert_eq!(whole.completions.len(), flows.len());
            if name == "pfc" {
                assert!(
                    whole.totals.2 > 0,
                    "seed {seed}: no pause frame to cross parts"
                );
            } else {
                assert!(whole.totals.1 > 0, "seed {seed}: nothing dropped");
            }
            for threads in [2, 3, 8] {
                let (split, parts) = run_split(seed, cfg, &flows, threads);
                assert_eq!(parts, threads, "a fat tree of 8 ToRs splits {threads} ways");
                assert!(
                    split == whole,
                    "seed {seed}, {name}, {threads} threads: the run differs ({} and {} tap calls, first difference at {:?})",
                    split.taps.len(),
                    whole.taps.len(),
                    split.taps.iter().zip(&whole.taps).position(|(a, b)| a != b)
                );
            }
        }
    }
}
