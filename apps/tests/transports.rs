//! The verified workload with RC, UC and UD QPs mixed (`roce loopback --transport rc,uc,ud`), on
//! the simulator: RC verifies everything in spite of the impairments; UC and UD verify every
//! message that arrived and count every one that did not, and the two add up to the plan.
//! Seeds print on failure (`SIM_SEED` replays one).
use std::net::{IpAddr, Ipv4Addr};

use roce_apps::workload::{OpKind, Plan, Requester, Responder, Transport, WorkloadSpec};
use roce_driver::Application;
use roce_proto::QKey;
use roce_stack::sim::{seed_from_env, LinkConfig, SeedGuard, Sim};
use roce_stack::ud::AddressHandle;
use roce_stack::{ConnectParams, QpCaps};

const QKEY: QKey = QKey(0x5eed);

fn run(
    spec: &WorkloadSpec,
    link: LinkConfig,
    seed: u64,
    requester_seed: u64,
) -> (Requester, Responder) {
    let mut sim = Sim::new(seed);
    sim.set_default_link(link);
    let (ip_a, ip_b) = (
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    );
    let (a, b) = (sim.add_endpoint(ip_a), sim.add_endpoint(ip_b));
    let (pa, pb) = (sim.device(a).alloc_pd(), sim.device(b).alloc_pd());
    let (mut send, mut recv, mut ahs) = (Vec::new(), Vec::new(), Vec::new());
    let params = ConnectParams {
        mtu: spec.datagram_max,
        ..ConnectParams::default()
    };
    for q in 0..spec.qps {
        let (sa, ra) = (sim.device(a).create_cq(), sim.device(a).create_cq());
        let (sb, rb) = (sim.device(b).create_cq(), sim.device(b).create_cq());
        let caps = QpCaps::default();
        let t = spec.transport_of(q);
        let (x, y) = match t {
            Transport::Rc => (
                sim.device(a).create_qp(pa, sa, ra, caps).unwrap(),
                sim.device(b).create_qp(pb, sb, rb, caps).unwrap(),
            ),
            Transport::Uc => (
                sim.device(a).create_uc_qp(pa, sa, ra, caps).unwrap(),
                sim.device(b).create_uc_qp(pb, sb, rb, caps).unwrap(),
            ),
            Transport::Ud => {
                let mtu = spec.datagram_max;
                (
                    sim.device(a)
                        .create_ud_qp(pa, sa, ra, QKEY, mtu, 1024)
                        .unwrap(),
                    sim.device(b)
                        .create_ud_qp(pb, sb, rb, QKEY, mtu, 1024)
                        .unwrap(),
                )
            }
        };
        if t == Transport::Ud {
            ahs.push((
                q as usize,
                AddressHandle {
                    local: ip_a,
                    remote: ip_b,
                    remote_port: 4791,
                    dest_qpn: y,
                    qkey: QKEY,
                },
            ));
        } else {
            sim.connect(a, x, b, y, &params).unwrap();
        }
        send.push((x, sa));
        recv.push((y, rb));
    }
    let (mut resp, remotes) = Responder::new(sim.device(b), pb, Plan::new(spec), &recv).unwrap();
    let req_spec = WorkloadSpec {
        seed: requester_seed,
        ..spec.clone()
    };
    let mut req = Requester::new(sim.device(a), pa, Plan::new(&req_spec), &send, &remotes);
    for (q, ah) in ahs {
        req.set_address_handle(q, ah);
    }
    for _ in 0..20_000_000u64 {
        let now = sim.now();
        req.poll(sim.device(a), now).unwrap();
        resp.poll(sim.device(b), now).unwrap();
        if req.done() && resp.done() {
            break;
        }
        if !sim.step() {
            req.poll(sim.device(a), now).unwrap();
            resp.poll(sim.device(b), now).unwrap();
            if !sim.step() {
                break;
            }
        }
    }
    (req, resp)
}

fn spec(seed: u64, qps: u32) -> WorkloadSpec {
    WorkloadSpec {
        transports: vec![Transport::Rc, Transport::Uc, Transport::Ud],
        datagram_max: 1024,
        count: 60,
        max_size: 20_000,
        qps,
        seed,
        ..WorkloadSpec::default()
    }
}

/// Receive-consuming operations in QP `q`'s plan.
fn planned_receives(spec: &WorkloadSpec, q: u32) -> u64 {
    Plan::new(spec)
        .ops(q)
        .filter(|o| o.kind.consumes_receive())
        .count() as u64
}

#[test]
fn a_clean_link_delivers_every_message_of_every_transport() {
    let seed = seed_from_env(1);
    let _g = SeedGuard(seed);
    let spec = spec(seed, 6);
    let (req, resp) = run(&spec, LinkConfig::default(), seed, seed);
    assert!(req.mismatches().is_empty(), "{:?}", req.mismatches());
    assert!(resp.mismatches().is_empty(), "{:?}", resp.mismatches());
    assert!(req.done() && resp.done() && resp.verified());
    let d = resp.deliveries();
    assert_eq!(d.len(), 4, "two UC and two UD QPs: {d:?}");
    for x in &d {
        assert_eq!(x.lost, 0, "{x:?}");
        assert_eq!(x.delivered, planned_receives(&spec, x.qp), "{x:?}");
        assert!(x.final_marker && x.memory_verified, "{x:?}");
    }
    // Every kind the transports carry ran, and UD never ran a WRITE.
    for k in OpKind::ALL {
        assert!(req.tally().ops[k as usize] > 0, "no {}", k.name());
    }
    // A UC or UD message is never empty: each carries a pattern of its own, so that one that
    // comes late or twice is told apart from the others.
    for q in [1, 2] {
        assert!(Plan::new(&spec).ops(q).all(|o| o.len >= 8), "QP {q}");
    }
    let ud_ops: Vec<_> = Plan::new(&spec).ops(2).map(|o| o.kind).collect();
    assert!(ud_ops
        .iter()
        .all(|k| matches!(k, OpKind::Send | OpKind::SendImm)));
    assert!(Plan::new(&spec).ops(2).all(|o| o.len <= 1024));
}

/// A shallow send queue (depth 2) does not starve the UD receiver: it keeps more receives
/// posted than a requester can have outstanding, so a clean link loses nothing.
#[test]
fn a_shallow_queue_loses_nothing_on_a_clean_link() {
    let seed = seed_from_env(3);
    let _g = SeedGuard(seed);
    let spec = WorkloadSpec {
        depth: 2,
        count: 300,
        ..spec(seed, 3)
    };
    let (req, resp) = run(&spec, LinkConfig::default(), seed, seed);
    assert!(req.mismatches().is_empty() && resp.mismatches().is_empty());
    for x in resp.deliveries() {
        assert_eq!(x.lost, 0, "{x:?}");
        assert!(x.final_marker, "{x:?}");
    }
}

/// 40 seeds at 8 % loss, 5 % reordering, 5 % duplication, 1 % corruption.
#[test]
fn under_impairment_rc_verifies_and_uc_ud_count_what_they_lose() {
    let link = LinkConfig {
        loss: 0.08,
        reorder: 0.05,
        duplicate: 0.05,
        corrupt: 0.01,
        ..LinkConfig::default()
    };
    let first = seed_from_env(100);
    let (mut lost, mut late_or_twice) = ([0u64; 2], 0u64);
    for seed in first..first + 40 {
        let _g = SeedGuard(seed);
        let spec = spec(seed, 3);
        let (req, resp) = run(&spec, link, seed, seed);
        assert!(
            req.mismatches().is_empty(),
            "seed {seed}: {:?}",
            req.mismatches()
        );
        assert!(
            resp.mismatches().is_empty(),
            "seed {seed}: {:?}",
            resp.mismatches()
        );
        assert!(req.done(), "seed {seed}: the requester did not finish");
        assert!(resp.verified(), "seed {seed}: the RC QP did not verify");
        for x in resp.deliveries() {
            assert_eq!(
                x.delivered + x.lost,
                planned_receives(&spec, x.qp),
                "seed {seed}: {x:?}"
            );
            let i = usize::from(x.transport == Some(Transport::Ud));
            lost[i] += x.lost;
            late_or_twice += x.late + x.duplicates;
            if x.lost > 0 && x.transport == Some(Transport::Uc) {
                assert!(
                    !x.memory_verified,
                    "seed {seed}: UC memory verified after a loss"
                );
            }
        }
    }
    eprintln!(
        "UC and UD messages lost over the seeds: {lost:?}; UD late or twice: {late_or_twice}"
    );
    assert!(lost[0] > 0 && lost[1] > 0, "nothing lost: {lost:?}");
    assert!(late_or_twice > 0, "no UD datagram came late or twice");
}

/// A responder whose plan differs from what the requester sends finds every UC and UD message
/// foreign: the matching is a real check.
#[test]
fn messages_the_plan_did_not_send_are_mismatches() {
    let seed = seed_from_env(7);
    let _g = SeedGuard(seed);
    let spec = WorkloadSpec {
        transports: vec![Transport::Uc, Transport::Ud],
        ops: vec![OpKind::Send, OpKind::SendImm],
        min_size: 8,
        qps: 2,
        ..spec(seed, 2)
    };
    let (_req, resp) = run(&spec, LinkConfig::default(), seed, seed + 1);
    assert!(!resp.mismatches().is_empty());
    assert!(!resp.verified());
    assert!(resp
        .mismatches()
        .iter()
        .any(|m| m.to_string().contains("no operation of the plan sent")));
}
