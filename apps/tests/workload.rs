//! The socket workload (`roce loopback`) run on the simulator: both sides verify every byte
//! and every completion, on clean and on impaired links. Seeds print on failure.
#[path = "../../stack/tests/common/mod.rs"]
mod common;

use roce_apps::workload::{OpKind, Plan, Requester, Responder, Transport, WorkloadSpec};
use roce_driver::Application;
use roce_stack::sim::{seed_from_env, LinkConfig, SeedGuard, Sim};
use roce_stack::ConnectParams;

/// What the network and the transport did in a run.
struct Net {
    /// Datagrams the links lost.
    lost: u64,
    /// Datagrams the links delivered twice.
    duplicated: u64,
    /// Request packets the requester sent again.
    retransmitted: u64,
}

fn run(spec: &WorkloadSpec, link: LinkConfig, seed: u64) -> (Requester, Responder, Net) {
    let mut sim = Sim::new(seed);
    common::pcap_from_env(&mut sim);
    sim.set_default_link(link);
    let plan = Plan::new(spec);
    let p = common::connect_pairs(&mut sim, spec.qps, |_| ConnectParams {
        mtu: 1024,
        ..ConnectParams::default()
    });
    let (a, b, (pa, pb), qa, qb) = (p.a, p.b, p.pd, p.send, p.recv);
    let (mut resp, remotes) = Responder::new(sim.device(b), pb, plan.clone(), &qb).unwrap();
    let mut req = Requester::new(sim.device(a), pa, plan, &qa, &remotes);
    for _ in 0..50_000_000u64 {
        let now = sim.now();
        req.poll(sim.device(a), now).unwrap();
        resp.poll(sim.device(b), now).unwrap();
        if req.done() && resp.done() {
            break;
        }
        if !sim.step() {
            // Idle: let the apps post once more, then stop if nothing moves.
            req.poll(sim.device(a), now).unwrap();
            resp.poll(sim.device(b), now).unwrap();
            if !sim.step() {
                break;
            }
        }
    }
    let net = Net {
        lost: sim.stats().lost,
        duplicated: sim.stats().duplicated,
        retransmitted: sim.device(a).stats().retransmitted_packets,
    };
    (req, resp, net)
}

fn check(req: &Requester, resp: &Responder, spec: &WorkloadSpec) {
    assert!(
        req.mismatches().is_empty(),
        "requester: {:?}",
        req.mismatches()
    );
    assert!(
        resp.mismatches().is_empty(),
        "responder: {:?}",
        resp.mismatches()
    );
    assert!(req.done() && resp.done(), "workload did not finish");
    let ops: u64 = req.tally().ops.iter().sum();
    assert_eq!(ops, u64::from(spec.count * spec.qps));
    assert!(resp.tally().verified_bytes > 0);
}

#[test]
fn clean_link_every_operation() {
    let seed = seed_from_env(11);
    let _g = SeedGuard(seed);
    let spec = WorkloadSpec {
        count: 60,
        max_size: 200_000,
        seed,
        ..WorkloadSpec::default()
    };
    let (req, resp, net) = run(&spec, LinkConfig::default(), seed);
    check(&req, &resp, &spec);
    assert_eq!((net.lost, net.retransmitted), (0, 0), "a clean link");
    for (i, k) in OpKind::ALL.iter().enumerate() {
        assert!(req.tally().ops[i] > 0, "no {} in the mix", k.name());
    }
}

/// `runs` workloads of 40 messages up to 100 kB over `qps` QPs across `link`, seeds
/// `first_seed..`, each verified in full.
fn impaired_runs(first_seed: u64, runs: u64, qps: u32, link: LinkConfig) {
    for s in 0..runs {
        let seed = first_seed + s;
        let _g = SeedGuard(seed);
        let spec = WorkloadSpec {
            count: 40,
            max_size: 100_000,
            qps,
            seed,
            ..WorkloadSpec::default()
        };
        let (req, resp, net) = run(&spec, link, seed);
        check(&req, &resp, &spec);
        // The impairments were real: the workload verified in spite of them, not without them.
        if link.loss > 0.0 {
            assert!(net.lost > 0, "seed {seed}: the link lost nothing");
            assert!(
                net.retransmitted > 0,
                "seed {seed}: losses but no retransmission"
            );
        }
        if link.duplicate > 0.0 {
            assert!(net.duplicated > 0, "seed {seed}: nothing duplicated");
        }
    }
}

#[test]
fn impaired_link_still_verifies() {
    let link = LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        duplicate: 0.02,
        corrupt: 0.01,
        ..LinkConfig::default()
    };
    impaired_runs(seed_from_env(100), 4, 3, link);
}

#[test]
fn a_corrupted_responder_region_is_reported() {
    // The check must be able to fail: flip the plan the responder verifies against.
    let seed = seed_from_env(5);
    let _g = SeedGuard(seed);
    let spec = WorkloadSpec {
        count: 30,
        max_size: 10_000,
        qps: 1,
        ops: vec![OpKind::Write],
        seed,
        ..WorkloadSpec::default()
    };
    let mut other = spec.clone();
    other.seed ^= 1;
    let mut sim = Sim::new(seed);
    let p = common::connect_pairs(&mut sim, 1, |_| ConnectParams::default());
    let (a, b, (pa, pb)) = (p.a, p.b, p.pd);
    let (mut resp, remotes) =
        Responder::new(sim.device(b), pb, Plan::new(&other), &p.recv).unwrap();
    let mut req = Requester::new(sim.device(a), pa, Plan::new(&spec), &p.send, &remotes);
    for _ in 0..1_000_000 {
        let now = sim.now();
        req.poll(sim.device(a), now).unwrap();
        resp.poll(sim.device(b), now).unwrap();
        if resp.done() || !sim.step() {
            break;
        }
    }
    assert!(
        !resp.mismatches().is_empty(),
        "different data must not verify"
    );
    assert!(
        resp.mismatches()[0].to_string().contains("write area"),
        "{}",
        resp.mismatches()[0]
    );
}

#[test]
fn spec_round_trips_through_its_wire_form() {
    let spec = WorkloadSpec {
        ops: vec![OpKind::Read, OpKind::FetchAdd, OpKind::Send],
        transports: vec![Transport::Rc, Transport::Ud],
        datagram_max: 2048,
        min_size: 3,
        max_size: 77,
        count: 9,
        qps: 2,
        depth: 5,
        seed: 42,
    };
    let text = serde_json::to_string(&spec).unwrap();
    assert_eq!(serde_json::from_str::<WorkloadSpec>(&text).unwrap(), spec);
    assert!(text.contains(r#""ops":["read","faa","send"]"#), "{text}");
    assert!(text.contains(r#""transports":["rc","ud"]"#), "{text}");
    assert!(serde_json::from_str::<WorkloadSpec>(r#"{"ops":["bogus"]}"#).is_err());
}

#[test]
fn impaired_link_with_slow_reordering() {
    let link = LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        reorder_delay: std::time::Duration::from_micros(200),
        delay: std::time::Duration::from_micros(20),
        duplicate: 0.02,
        corrupt: 0.01,
        ..LinkConfig::default()
    };
    impaired_runs(seed_from_env(200), 8, 2, link);
}

/// The simulator's traffic, written as a pcap by the capture tap, decodes with every ICRC valid:
/// what the simulated QPs put on the wire is what a NIC would.
#[test]
fn simulated_traffic_as_pcap_decodes_with_valid_icrcs() {
    let seed = seed_from_env(17);
    let _g = SeedGuard(seed);
    let dir = std::env::temp_dir().join(format!("roce-sim-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sim.pcap");
    let spec = WorkloadSpec {
        count: 30,
        max_size: 20_000,
        qps: 2,
        seed,
        ..WorkloadSpec::default()
    };
    let mut sim = Sim::new(seed);
    assert!(common::write_pcap(&mut sim, &path));
    let p = common::connect_pairs(&mut sim, spec.qps, |_| ConnectParams::default());
    let (a, b, (pa, pb), qa, qb) = (p.a, p.b, p.pd, p.send, p.recv);
    let (mut resp, remotes) = Responder::new(sim.device(b), pb, Plan::new(&spec), &qb).unwrap();
    let mut req = Requester::new(sim.device(a), pa, Plan::new(&spec), &qa, &remotes);
    for _ in 0..10_000_000u64 {
        let now = sim.now();
        req.poll(sim.device(a), now).unwrap();
        resp.poll(sim.device(b), now).unwrap();
        if (req.done() && resp.done()) || !sim.step() {
            break;
        }
    }
    check(&req, &resp, &spec);
    drop(sim); // flushes the capture
    let opts = roce_pcap::Options {
        quiet: true,
        ..roce_pcap::Options::default()
    };
    let mut sink = Vec::new();
    let out = roce_pcap::decode_path(path.to_str().unwrap(), opts, &mut sink);
    assert!(out.error.is_none(), "{:?}", out.error);
    assert!(out.stats.roce > 100, "{:?}", out.stats);
    assert_eq!(out.stats.icrc_failures, 0, "{:?}", out.stats);
    assert_eq!(out.stats.malformed, 0, "{:?}", out.stats);
    std::fs::remove_dir_all(&dir).unwrap();
}
