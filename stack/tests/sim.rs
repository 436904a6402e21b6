//! Simulator-level tests: whole connections over impaired links, with the seed printed on
//! failure (`SIM_SEED` picks it).
use roce_proto::ROCEV2_UDP_PORT;
use roce_stack::sim::{seed_from_env, LinkConfig, SeedGuard, Sim, TapKind};
use roce_stack::{
    Access, ConnectParams, CqHandle, MrHandle, QpCaps, QpState, RecvRequest, RemoteAddr, SgList,
    WcOpcode, WcStatus, WorkRequest, WrOp,
};
use std::sync::{Arc, Mutex};

struct Two {
    sim: Sim,
    qa: roce_proto::Qpn,
    qb: roce_proto::Qpn,
    cqa: CqHandle,
    cqb: CqHandle,
    ma: MrHandle,
    mb: MrHandle,
}

fn two(seed: u64, link: LinkConfig, opts: ConnectParams) -> Two {
    let mut sim = Sim::new(seed);
    let a = sim.add_endpoint("192.168.1.1".parse().unwrap());
    let b = sim.add_endpoint("192.168.1.2".parse().unwrap());
    sim.set_default_link(link);
    let mut mk = |h| {
        let d = sim.device(h);
        let pd = d.alloc_pd();
        let cq = d.create_cq();
        let mr = d.reg_mr(pd, 1 << 20, Access::ALL);
        let q = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        (q, cq, mr)
    };
    let (qa, cqa, ma) = mk(a);
    let (qb, cqb, mb) = mk(b);
    sim.connect(a, qa, b, qb, &opts).unwrap();
    Two {
        sim,
        qa,
        qb,
        cqa,
        cqb,
        ma,
        mb,
    }
}

#[test]
fn write_completes_once_despite_loss_reorder_dup_and_ce() {
    let seed = seed_from_env(7);
    let _g = SeedGuard(seed);
    let link = LinkConfig {
        loss: 0.05,
        reorder: 0.1,
        duplicate: 0.02,
        ce_mark: 0.10,
        bandwidth_bps: Some(25_000_000_000),
        ..LinkConfig::default()
    };
    let mut t = two(seed, link, ConnectParams::default());
    let seen = Arc::new(Mutex::new((0u64, 0u64, 0u64, true)));
    let s2 = seen.clone();
    t.sim
        .set_tap(Box::new(move |ev: &roce_stack::sim::TapEvent<'_>| {
            let mut s = s2.lock().unwrap();
            match ev.kind {
                TapKind::Sent => s.0 += 1,
                TapKind::Delivered => s.1 += 1,
                TapKind::Lost => s.2 += 1,
            }
            s.3 &= ev.dst_port == ROCEV2_UDP_PORT && ev.src_port >= 0xc000 && ev.from != ev.to;
        }));
    for (i, b) in t
        .sim
        .device(0)
        .mr_mut(t.ma)
        .unwrap()
        .as_mut_slice()
        .iter_mut()
        .enumerate()
    {
        *b = (i % 253) as u8;
    }
    let sgl = SgList::one(t.sim.device(0).mr(t.ma).unwrap().sge(0, 64 * 1024));
    let m = t.sim.device(1).mr(t.mb).unwrap();
    let remote = m.remote_addr(4096);
    t.sim
        .device(0)
        .post_send(t.qa, WorkRequest::new(1, WrOp::Write(remote), sgl))
        .unwrap();
    assert!(t.sim.run_until_idle());
    let c = t.sim.device(0).poll_cq(t.cqa).unwrap();
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (1, WcStatus::Success, 64 * 1024)
    );
    assert!(
        t.sim.device(0).poll_cq(t.cqa).is_none(),
        "completes exactly once"
    );
    let src = t.sim.device(0).mr(t.ma).unwrap().as_slice()[..64 * 1024].to_vec();
    assert_eq!(
        &t.sim.device(1).mr(t.mb).unwrap().as_slice()[4096..4096 + 64 * 1024],
        &src[..]
    );
    let (sent, delivered, lost, ok) = *seen.lock().unwrap();
    assert!(ok);
    assert_eq!(sent, t.sim.stats().sent);
    assert!(
        lost > 0 && delivered > 0,
        "tap saw {sent} sent, {delivered} delivered, {lost} lost"
    );
    let sa = t.sim.device(0).stats();
    let sb = t.sim.device(1).stats();
    assert!(
        sb.ce_received > 0 && sb.cnps_sent > 0,
        "CE marks turn into CNPs: {sb:?}"
    );
    assert!(sa.cnps_received > 0);
    assert!(sa.retransmitted_packets > 0);
}

#[test]
fn retry_exhaustion_when_the_link_dies() {
    let seed = seed_from_env(1);
    let _g = SeedGuard(seed);
    let opts = ConnectParams {
        retry_cnt: 2,
        timeout: 10,
        ..ConnectParams::default()
    };
    let mut t = two(seed, LinkConfig::default(), opts);
    t.sim.link(0, 1).loss = 1.0;
    let sgl = SgList::one(t.sim.device(0).mr(t.ma).unwrap().sge(0, 100));
    for id in 0..3 {
        t.sim
            .device(0)
            .post_send(t.qa, WorkRequest::new(id, WrOp::Send, sgl))
            .unwrap();
    }
    assert!(t.sim.run_until_idle());
    let d = t.sim.device(0);
    let got: Vec<_> = std::iter::from_fn(|| d.poll_cq(t.cqa))
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        [
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(d.qp(t.qa).unwrap().state(), QpState::Err);
    // 3 transmissions of 3 packets; the timer is 4.096 µs × 2^10 per try.
    assert_eq!(d.stats().timeouts, 3);
    let elapsed = t.sim.now().as_nanos();
    assert!(
        (3 * (4096 << 10)..4 * (4096 << 10)).contains(&elapsed),
        "{elapsed}"
    );
}

#[test]
fn many_qps_are_demultiplexed_by_qpn() {
    let seed = seed_from_env(3);
    let _g = SeedGuard(seed);
    let mut sim = Sim::new(seed);
    let a = sim.add_endpoint("fd00::1".parse().unwrap());
    let b = sim.add_endpoint("fd00::2".parse().unwrap());
    sim.set_default_link(LinkConfig {
        reorder: 0.3,
        loss: 0.02,
        ..LinkConfig::default()
    });
    let (pa, pb) = (sim.device(a).alloc_pd(), sim.device(b).alloc_pd());
    let ma = sim.device(a).reg_mr(pa, 4096, Access::ALL);
    let mb = sim.device(b).reg_mr(pb, 64 * 64, Access::ALL);
    let (ca, cb) = (sim.device(a).create_cq(), sim.device(b).create_cq());
    let mut pairs = Vec::new();
    for i in 0..64u32 {
        let qa = sim
            .device(a)
            .create_qp(pa, ca, ca, QpCaps::default())
            .unwrap();
        let qb = sim
            .device(b)
            .create_qp(pb, cb, cb, QpCaps::default())
            .unwrap();
        let opts = ConnectParams {
            sq_psn: roce_proto::Psn::new(i * 0x4_0000),
            mtu: 256,
            ..ConnectParams::default()
        };
        sim.connect(a, qa, b, qb, &opts).unwrap();
        let r = SgList::one(sim.device(b).mr(mb).unwrap().sge(u64::from(i) * 64, 64));
        sim.device(b)
            .post_recv(
                qb,
                RecvRequest {
                    wr_id: u64::from(i),
                    sgl: r,
                },
            )
            .unwrap();
        sim.device(a).mr_mut(ma).unwrap().as_mut_slice()[i as usize] = i as u8;
        let s = SgList::one(sim.device(a).mr(ma).unwrap().sge(u64::from(i), 1));
        sim.device(a)
            .post_send(qa, WorkRequest::new(u64::from(i), WrOp::SendWithImm(i), s))
            .unwrap();
        pairs.push((qa, qb));
    }
    assert!(sim.run_until_idle());
    let mut recvs = 0;
    while let Some(c) = sim.device(b).poll_cq(cb) {
        let i = c.wr_id as usize;
        assert_eq!(
            (c.status, c.opcode, c.byte_len, c.imm_data),
            (WcStatus::Success, WcOpcode::Recv, 1, Some(i as u32))
        );
        assert_eq!(c.qp_num, pairs[i].1);
        assert_eq!(sim.device(b).mr(mb).unwrap().as_slice()[i * 64], i as u8);
        recvs += 1;
    }
    assert_eq!(recvs, 64);
    assert_eq!(
        std::iter::from_fn(|| sim.device(a).poll_completion()).count(),
        64
    );
}

#[test]
fn corrupted_datagrams_are_dropped_by_icrc_and_recovered() {
    let seed = seed_from_env(11);
    let _g = SeedGuard(seed);
    let mut t = two(
        seed,
        LinkConfig {
            corrupt: 0.2,
            ..LinkConfig::default()
        },
        ConnectParams::default(),
    );
    let sgl = SgList::one(t.sim.device(1).mr(t.mb).unwrap().sge(0, 32 * 1024));
    let m = t.sim.device(0).mr(t.ma).unwrap();
    let remote = m.remote_addr(0);
    t.sim.device(0).mr_mut(t.ma).unwrap().as_mut_slice()[..32 * 1024].fill(0x5a);
    t.sim
        .device(1)
        .post_send(t.qb, WorkRequest::new(9, WrOp::Read(remote), sgl))
        .unwrap();
    assert!(t.sim.run_until_idle());
    assert_eq!(
        t.sim.device(1).poll_cq(t.cqb).map(|c| c.status),
        Some(WcStatus::Success)
    );
    assert!(t.sim.device(1).mr(t.mb).unwrap().as_slice()[..32 * 1024]
        .iter()
        .all(|&b| b == 0x5a));
    let drops = t.sim.device(0).stats().drops.total() + t.sim.device(1).stats().drops.total();
    assert!(drops > 0 && t.sim.stats().corrupted > 0);
}

/// Posts 64 KiB operations `op(B's region)` back to back from A for `dur` of virtual time,
/// keeping `depth` posted; every one must succeed. Returns how many were posted.
fn stream(t: &mut Two, dur: core::time::Duration, depth: u32, op: fn(RemoteAddr) -> WrOp) -> u64 {
    let end = roce_stack::Instant::ZERO + dur;
    let m = t.sim.device(1).mr(t.mb).unwrap();
    let remote = m.remote_addr(0);
    let (mut posted, mut id, mut now) = (0u32, 0u64, roce_stack::Instant::ZERO);
    while now < end {
        while posted < depth {
            let sgl = SgList::one(t.sim.device(0).mr(t.ma).unwrap().sge(0, 64 * 1024));
            t.sim
                .device(0)
                .post_send(t.qa, WorkRequest::new(id, op(remote), sgl))
                .unwrap();
            id += 1;
            posted += 1;
        }
        now = (now + core::time::Duration::from_micros(20)).min(end);
        t.sim.run_until(now);
        while let Some(c) = t.sim.device(0).poll_cq(t.cqa) {
            assert_eq!(c.status, WcStatus::Success);
            posted -= 1;
        }
    }
    id
}

/// Sends 64 KiB WRITEs back to back from A for `dur` of virtual time (keeping 16 posted) and
/// returns the transport bytes A's QP sent (BTH..ICRC, the bytes its controller paces).
fn stream_writes(t: &mut Two, dur: core::time::Duration) -> u64 {
    stream(t, dur, 16, WrOp::Write);
    t.sim.device(0).qp(t.qa).unwrap().stats().tx_bytes
}

/// Pacing through the QP (not only the pacer): a QP with a fixed-rate controller over an
/// infinitely fast link sends at the set rate within 2 % over 50 ms, for several rates.
#[test]
fn qp_paces_to_the_set_rate_within_two_percent() {
    let seed = seed_from_env(3);
    let _g = SeedGuard(seed);
    for rate in [
        1_000_000_000u64,
        3_333_333_333,
        10_000_000_000,
        25_000_000_000,
    ] {
        let mut t = two(seed, LinkConfig::default(), ConnectParams::default());
        t.sim
            .device(0)
            .set_congestion_control(t.qa, Box::new(roce_stack::FixedRate::new(rate)));
        let dur = core::time::Duration::from_millis(50);
        let bytes = stream_writes(&mut t, dur);
        let got = bytes as f64 * 8.0 / dur.as_secs_f64();
        let err = got / rate as f64 - 1.0;
        assert!(
            err.abs() < 0.02,
            "rate {rate}: sent {got:.0} bit/s ({:+.2} %)",
            err * 100.0
        );
        assert_eq!(
            t.sim.device(0).qp(t.qa).unwrap().rate_bps(),
            Some(rate),
            "the QP exposes its rate"
        );
    }
}

/// An uncongested DCQCN QP is not throttled by pacing: over a 40 Gb/s link it keeps the link
/// busy (≥ 98 % of the frame bytes the link can carry), and no CNP means no cut.
#[test]
fn uncongested_dcqcn_qp_runs_at_line_rate() {
    let seed = seed_from_env(4);
    let _g = SeedGuard(seed);
    let line = 40_000_000_000u64;
    let link = LinkConfig {
        bandwidth_bps: Some(line),
        ..LinkConfig::default()
    };
    let mut t = two(seed, link, ConnectParams::default());
    t.sim
        .device(0)
        .set_congestion_control(t.qa, roce_stack::CcConfig::PAPER.build(line));
    let dur = core::time::Duration::from_millis(20);
    let bytes = stream_writes(&mut t, dur);
    let st = *t.sim.device(0).qp(t.qa).unwrap().stats();
    let frames = bytes + st.tx_packets * roce_stack::sim::FRAME_OVERHEAD;
    let util = frames as f64 * 8.0 / (line as f64 * dur.as_secs_f64());
    assert!(util >= 0.98, "link utilisation {util:.4}");
    assert_eq!((st.rate_cuts, st.cnps_received), (0, 0));
    assert_eq!(t.sim.device(0).qp(t.qa).unwrap().rate_bps(), Some(line));
}

/// READ responses are paced too: the responder's fixed-rate controller holds the responses
/// to a stream of 64 KiB READs within 2 % of its rate over 50 ms.
#[test]
fn read_responses_are_paced_to_the_set_rate() {
    let seed = seed_from_env(5);
    let _g = SeedGuard(seed);
    let rate = 5_000_000_000u64;
    let mut t = two(seed, LinkConfig::default(), ConnectParams::default());
    t.sim
        .device(1)
        .set_congestion_control(t.qb, Box::new(roce_stack::FixedRate::new(rate)));
    let dur = core::time::Duration::from_millis(50);
    let id = stream(&mut t, dur, 8, WrOp::Read);
    let st = *t.sim.device(1).qp(t.qb).unwrap().stats();
    let got = st.tx_bytes as f64 * 8.0 / dur.as_secs_f64();
    let err = got / rate as f64 - 1.0;
    assert!(
        err.abs() < 0.02,
        "READ responses at {got:.0} bit/s ({:+.2} %)",
        err * 100.0
    );
    assert!(id > 400, "the READs kept the responder busy: {id}");
}
