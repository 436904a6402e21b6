//! Shared receive queues in the simulator: several RC QPs of one device take their receives
//! from one SRQ, under loss, reordering and duplication; an empty SRQ is RNR for every QP on
//! it until receives are posted again; the limit event fires once when armed; a QP on an SRQ
//! refuses receives of its own. A failing case prints its seed.
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use roce_stack::sim::{LinkConfig, Sim};
use roce_stack::srq::{AsyncEvent, SrqHandle};
use roce_stack::{
    Access, ConnectParams, CqHandle, MrHandle, PostError, QpCaps, RecvRequest, SgList, WcOpcode,
    WcStatus, WorkRequest, WrOp,
};

/// What a run set up.
struct Setup {
    sim: Sim,
    /// The requester's send CQs.
    send_cqs: Vec<CqHandle>,
    /// The responder's receive CQ (all three QPs).
    rcq: CqHandle,
    srq: SrqHandle,
    mr_b: MrHandle,
}

/// Three QP pairs, the responder's three on one SRQ; `sends` SENDs of 100..1100 bytes per QP.
fn run(seed: u64, loss: f64, sends: u64, srq_posts: u64) -> Setup {
    let mut sim = Sim::new(seed);
    sim.set_default_link(LinkConfig {
        delay: Duration::from_micros(2),
        loss,
        reorder: loss / 2.0,
        reorder_delay: Duration::from_micros(5),
        duplicate: loss / 2.0,
        ..LinkConfig::default()
    });
    let a = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let b = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let (pa, pb) = (sim.device(a).alloc_pd(), sim.device(b).alloc_pd());
    let srq = sim.device(b).create_srq(pb, 4096).unwrap();
    let rcq = sim.device(b).create_cq();
    let mr_b = sim.device(b).reg_mr(pb, 1 << 22, Access::LOCAL_WRITE);
    let mr_a = sim.device(a).reg_mr(pa, 1 << 16, Access::LOCAL_WRITE);
    let mut pairs = Vec::new();
    for q in 0..3u32 {
        let (sa, ra) = (sim.device(a).create_cq(), sim.device(a).create_cq());
        let sb = sim.device(b).create_cq();
        let x = sim
            .device(a)
            .create_qp(pa, sa, ra, QpCaps::default())
            .unwrap();
        let y = sim
            .device(b)
            .create_qp_with_srq(pb, sb, rcq, QpCaps::default(), srq)
            .unwrap();
        let c = ConnectParams {
            rq_psn: roce_proto::Psn::new(100 * q),
            sq_psn: roce_proto::Psn::new(1000 + q),
            rnr_retry: 7,
            ..ConnectParams::default()
        };
        sim.connect(a, x, b, y, &c).unwrap();
        pairs.push((x, sa, y));
    }
    // A QP on an SRQ has no receive queue of its own.
    let sge = sim.device(b).mr(mr_b).unwrap().sge(0, 64);
    assert_eq!(
        sim.device(b).post_recv(
            pairs[0].2,
            RecvRequest {
                wr_id: 0,
                sgl: SgList::one(sge)
            }
        ),
        Err(PostError::HasSrq)
    );
    for i in 0..srq_posts {
        let sge = sim.device(b).mr(mr_b).unwrap().sge((i % 3000) * 1200, 1200);
        sim.device(b)
            .post_srq_recv(
                srq,
                RecvRequest {
                    wr_id: i,
                    sgl: SgList::one(sge),
                },
            )
            .unwrap();
    }
    sim.device(b).arm_srq_limit(srq, 10);
    for k in 0..sends {
        for (q, &(x, _, _)) in pairs.iter().enumerate() {
            let len = 100 + ((k * 37 + q as u64 * 11) % 1000) as u32;
            let sge = sim.device(a).mr(mr_a).unwrap().sge(0, len);
            sim.device(a)
                .post_send(x, WorkRequest::new(k, WrOp::Send, SgList::one(sge)))
                .unwrap();
        }
    }
    Setup {
        sim,
        send_cqs: pairs.iter().map(|p| p.1).collect(),
        rcq,
        srq,
        mr_b,
    }
}

#[test]
fn qps_on_one_srq_share_its_receives_under_impairment() {
    for seed in 0..50u64 {
        let Setup {
            mut sim,
            send_cqs,
            rcq,
            srq,
            ..
        } = run(seed, 0.05, 30, 90);
        assert!(sim.run_until_idle(), "seed {seed}: never idle");
        let (a, b) = (0, 1);
        // Every send completed successfully.
        let mut done = 0;
        for &cq in &send_cqs {
            while let Some(c) = sim.device(a).poll_cq(cq) {
                assert_eq!(c.status, WcStatus::Success, "seed {seed}: {c:?}");
                done += 1;
            }
        }
        assert_eq!(done, 90, "seed {seed}");
        // 90 receives, each SRQ request used once, spread over the three QPs.
        let mut ids = BTreeSet::new();
        let mut qps = BTreeSet::new();
        while let Some(c) = sim.device(b).poll_cq(rcq) {
            assert_eq!(
                (c.status, c.opcode),
                (WcStatus::Success, WcOpcode::Recv),
                "seed {seed}"
            );
            assert!(
                ids.insert(c.wr_id),
                "seed {seed}: request {} used twice",
                c.wr_id
            );
            qps.insert(c.qp_num);
        }
        assert_eq!(ids.len(), 90, "seed {seed}");
        assert_eq!(qps.len(), 3, "seed {seed}");
        assert_eq!(sim.device(b).srq_len(srq), 0);
        // The limit (10) was crossed once: one event.
        assert_eq!(
            sim.device(b).poll_async_event(),
            Some(AsyncEvent::SrqLimitReached(srq)),
            "seed {seed}"
        );
        assert_eq!(sim.device(b).poll_async_event(), None, "seed {seed}");
    }
}

#[test]
fn an_empty_srq_is_rnr_for_every_qp_until_receives_come() {
    let Setup {
        mut sim,
        rcq,
        srq,
        mr_b,
        ..
    } = run(7, 0.0, 10, 12);
    // 30 sends, 12 receives: the rest wait in RNR retries.
    let t = sim.now() + Duration::from_millis(5);
    sim.run_until(t);
    let b = 1;
    let mut got = 0;
    while sim.device(b).poll_cq(rcq).is_some() {
        got += 1;
    }
    assert_eq!(got, 12);
    assert!(
        sim.device(b).stats().naks_sent.rnr > 0,
        "RNR NAKs while the SRQ was empty"
    );
    for i in 0..18 {
        let sge = sim.device(b).mr(mr_b).unwrap().sge(i * 1200, 1200);
        sim.device(b)
            .post_srq_recv(
                srq,
                RecvRequest {
                    wr_id: 100 + i,
                    sgl: SgList::one(sge),
                },
            )
            .unwrap();
    }
    assert!(sim.run_until_idle());
    while sim.device(b).poll_cq(rcq).is_some() {
        got += 1;
    }
    assert_eq!(got, 30, "every send delivered once receives came");
}
