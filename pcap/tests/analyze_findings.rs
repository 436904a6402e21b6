//! `roce analyze`'s findings (`Analysis::findings`) on scripted captures: each question of
//! `docs/analyze.md`'s Findings, the capture that shows it, and one like it that does not.
mod common;

use common::script::*;
use roce_pcap::analyze;
use roce_proto::Opcode;

#[test]
fn an_rnr_nak_with_timer_zero_is_an_rnr_stall_finding() {
    // rdma_cm leaves min_rnr_timer at 0: 655.36 ms for every receive the responder lacked.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .rnr(2.0, 0, 0, 0)
        .req(655_400.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(655_402.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "rnr_stall");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].connection, f[0].side, f[0].frames.as_slice()),
        (Some(1), Some(1), &[2u64][..])
    );
    assert!(
        f[0].detail.contains("1 with timer code 0 (655.36 ms"),
        "{}",
        f[0].detail
    );
    assert!(f[0].detail.contains("waited 655.398 ms"), "{}", f[0].detail);
    assert!(f[0].advice.contains("min_rnr_timer"));
    // With a short timer, the stall is named without the timer advice.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .rnr(2.0, 0, 14, 0)
        .req(1_000.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(1_002.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "rnr_stall");
    assert!(!f[0].detail.contains("timer code 0") && !f[0].advice.contains("min_rnr_timer"));
    // No RNR NAK, no finding.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64).ack(2.0, 0, 1);
    assert!(s.analyze().findings().is_empty());
}

#[test]
fn sides_segmenting_at_different_mtus_are_a_pmtu_asymmetry_finding() {
    // A writes in 4,096-byte packets; B answers A's READ in 1,024-byte ones.
    let mut s = Script::default();
    s.req_full(
        0.0,
        Opcode::RC_RDMA_WRITE_FIRST,
        0,
        4096,
        5000,
        false,
        false,
    )
    .req_full(1.0, Opcode::RC_RDMA_WRITE_LAST, 1, 904, 5000, false, false)
    .read_at(2.0, 2, 0x1000, 2048)
    .ack(3.0, 1, 1)
    .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 2, 1024, 2)
    .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, 1024, 2);
    let a = s.analyze();
    let f = findings(&a, "pmtu_asymmetry");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(f[0].detail, "side a segments at 4096 bytes, side b at 1024");
    let (ra, rb) = sides(one(&a));
    assert_eq!((ra.path_mtu, rb.path_mtu), (4096, 1024));
    // The same MTU both ways: nothing to say.
    let mut s = Script::default();
    s.req_full(
        0.0,
        Opcode::RC_RDMA_WRITE_FIRST,
        0,
        1024,
        1100,
        false,
        false,
    )
    .req_full(1.0, Opcode::RC_RDMA_WRITE_LAST, 1, 76, 1100, false, false)
    .read_at(2.0, 2, 0x1000, 2048)
    .ack(3.0, 1, 1)
    .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 2, 1024, 2)
    .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, 1024, 2);
    assert!(findings(&s.analyze(), "pmtu_asymmetry").is_empty());
}

#[test]
fn ce_marks_no_cnp_answers_and_cnps_no_ce_explains_are_findings() {
    let mut s = Script::default();
    for psn in 0..4u32 {
        s.req_with(
            f64::from(psn),
            Opcode::RC_SEND_ONLY,
            psn,
            64,
            psn % 2 == 1,
            false,
        );
    }
    s.ack(10.0, 3, 4);
    let a = s.analyze();
    let f = findings(&a, "ce_without_cnp");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].side, f[0].frames.as_slice()),
        (Some(0), &[2u64, 4][..])
    );
    assert!(f[0]
        .detail
        .starts_with("2 of its packets arrived marked CE"));
    assert!(findings(&a, "cnp_without_ce").is_empty());
    // The CE marks answered: no finding.
    s.cnp(3.0);
    assert!(findings(&s.analyze(), "ce_without_cnp").is_empty());
    // CNPs and no CE mark anywhere.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .cnp(1.0)
        .ack(2.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "cnp_without_ce");
    assert_eq!(
        (f.len(), f[0].side),
        (1, Some(1)),
        "{}",
        analyze::text(&a, true)
    );
}

#[test]
fn reads_held_to_a_window_are_a_read_window_limited_finding() {
    // 40 READs, a new one only when one of the two outstanding is answered: a window of 2.
    let window = |w: u32| {
        let mut s = Script::default();
        let mut t = 0.0;
        let mut next_resp = 0u32;
        for psn in 0..40u32 {
            if psn >= w {
                s.read_resp(
                    t,
                    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    next_resp,
                    64,
                    next_resp + 1,
                );
                next_resp += 1;
                t += 1.0;
            }
            s.read_at(t, psn, 0x1000, 64);
            t += 1.0;
        }
        while next_resp < 40 {
            s.read_resp(
                t,
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                next_resp,
                64,
                next_resp + 1,
            );
            next_resp += 1;
            t += 1.0;
        }
        s.analyze()
    };
    let a = window(2);
    let f = findings(&a, "read_window_limited");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "never more than 2 READs and atomics outstanding, and at 2 for 39 of its 40"
    );
    assert!(f[0].advice.contains("max_rd_atomic"));
    // All 40 outstanding at once: no window held them.
    assert!(findings(&window(40), "read_window_limited").is_empty());
}

#[test]
fn pauses_on_a_priority_no_roce_uses_are_a_finding() {
    // The RoCE traffic is on priority 0 (DSCP 0); PFC pauses priority 3.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .pfc(1.0, 3, 0xffff)
        .ack(2.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "pfc_priority_without_roce");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail.starts_with("priority 3 paused by 1 frames"),
        "{}",
        f[0].detail
    );
    assert!(f[0].detail.ends_with("(RoCE on [0])"), "{}", f[0].detail);
    let json = analyze::json_lines(&a, false);
    assert!(
        json.contains("\"name\":\"pfc_priority_without_roce\""),
        "{json}"
    );
    // Pausing RoCE's own priority: no finding.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .pfc(1.0, 0, 0xffff)
        .ack(2.0, 0, 1);
    assert!(findings(&s.analyze(), "pfc_priority_without_roce").is_empty());
}

#[test]
fn timer_driven_episodes_are_a_retx_timeout_finding_with_the_code_they_imply() {
    // Two episodes, each after about 16.8 ms of silence: 4.096 us x 2^12 = 16.777 ms.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 10, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(4.0, 10, 1)
        .req(16_800.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(16_803.0, 11, 2)
        .req(16_900.0, Opcode::RC_SEND_ONLY, 12, 64)
        .req(33_700.0, Opcode::RC_SEND_ONLY, 12, 64)
        .ack(33_703.0, 12, 3);
    let a = s.analyze();
    let f = findings(&a, "retx_timeout");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].side, f[0].frames.as_slice()),
        (Some(0), &[4u64, 7][..])
    );
    assert!(
        f[0].detail
            .starts_with("2 retransmission episodes began when the timer fired")
            && f[0]
                .detail
                .contains("a local ACK timeout code of about 12 (4.096 us x 2^12 = 16.777 ms)")
            && !f[0].detail.contains("grow"),
        "{}",
        f[0].detail
    );
    // One timeout is not a schedule.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 10, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(4.0, 10, 1)
        .req(16_800.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(16_803.0, 11, 2);
    assert!(findings(&s.analyze(), "retx_timeout").is_empty());
}

#[test]
fn ends_marking_different_traffic_classes_are_a_tclass_mismatch_finding() {
    // A's requests in DSCP 26 (the lossless class), B's ACKs in DSCP 0.
    let script = |b: u8| {
        let mut s = Script {
            dscp: [Some(26), Some(b)],
            ..Script::default()
        };
        s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
            .ack(2.0, 0, 1)
            .cnp(3.0);
        s.analyze()
    };
    let a = script(0);
    let f = findings(&a, "tclass_mismatch");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(f[0].detail, "side a marks DSCP 26, side b DSCP 0");
    // The same class both ways (the CNP, in its own class, does not count).
    assert!(findings(&script(26), "tclass_mismatch").is_empty());
}

#[test]
fn requests_with_a_wrong_icrc_and_no_answer_are_a_finding() {
    // An FPGA's requests, their ICRC computed wrong: the NIC drops them, nothing answers.
    let mut s = Script::default();
    for psn in 0..3u32 {
        s.req_with(f64::from(psn), Opcode::RC_SEND_ONLY, psn, 64, false, true);
    }
    let a = s.analyze();
    let f = findings(&a, "icrc_bad_unanswered");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "3 of its 3 requests carry a wrong ICRC and nothing answered them"
    );
    assert_eq!(f[0].frames, [1, 2, 3]);
    // Answered, or with a good ICRC: not this.
    s.ack(5.0, 2, 3);
    assert!(findings(&s.analyze(), "icrc_bad_unanswered").is_empty());
    let mut s = Script::default();
    for psn in 0..3u32 {
        s.req(f64::from(psn), Opcode::RC_SEND_ONLY, psn, 64);
    }
    assert!(findings(&s.analyze(), "icrc_bad_unanswered").is_empty());
}

#[test]
fn cm_requests_unanswered_and_rejected_are_findings() {
    use roce_proto::cm::{Message, Rej, Rep, Req};
    let req = |id: u32| {
        Message::Req(Req {
            local_comm_id: id,
            local_qpn: QA,
            ..Req::default()
        })
    };
    let mut s = Script::default();
    // Request 1 answered; request 2 sent twice (a retry) and never answered; request 3
    // rejected (reason 28, consumer_reject).
    s.cm(0.0, true, req(1), Req::ATTRIBUTE_ID)
        .cm(
            1.0,
            false,
            Message::Rep(Rep {
                local_comm_id: 9,
                remote_comm_id: 1,
                local_qpn: QB,
                ..Rep::default()
            }),
            Rep::ATTRIBUTE_ID,
        )
        .cm(2.0, true, req(2), Req::ATTRIBUTE_ID)
        .cm(3.0, true, req(3), Req::ATTRIBUTE_ID)
        .cm(
            4.0,
            false,
            Message::Rej(Rej {
                local_comm_id: 10,
                remote_comm_id: 3,
                reason: 28,
                ..Rej::default()
            }),
            Rej::ATTRIBUTE_ID,
        )
        .cm(2000.0, true, req(2), Req::ATTRIBUTE_ID);
    let a = s.analyze();
    assert_eq!(
        (
            a.cm.requests,
            a.cm.unanswered,
            a.cm.unanswered_frames.as_slice()
        ),
        (3, 1, &[3u64][..])
    );
    let f = findings(&a, "cm_unanswered_req");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "1 of the capture's 3 CM connection requests got no reply or reject"
    );
    let f = findings(&a, "cm_rejected");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].detail.as_str(), f[0].frames.as_slice()),
        ("1 REJs with reason 28 (consumer_reject)", &[5u64][..])
    );
    // Every request answered: nothing to say.
    let mut s = Script::default();
    s.cm(0.0, true, req(1), Req::ATTRIBUTE_ID).cm(
        1.0,
        false,
        Message::Rep(Rep {
            local_comm_id: 9,
            remote_comm_id: 1,
            local_qpn: QB,
            ..Rep::default()
        }),
        Rep::ATTRIBUTE_ID,
    );
    let a = s.analyze();
    assert_eq!((a.cm.requests, a.cm.unanswered), (1, 0));
    assert!(a.findings().is_empty(), "{:?}", a.findings());
}

/// An IPv4-mapped GID of 10.0.0.`x`.
fn v4_gid(x: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10..12].copy_from_slice(&[0xff, 0xff]);
    g[12..].copy_from_slice(&[10, 0, 0, x]);
    g
}

/// A REQ from A (QP 0x11, communication ID 7) whose path names `local` and `remote`, with
/// local ACK timeout `timeout` and retry count `retries`, and B's REP (QP 0x22).
fn cm_setup(s: &mut Script, local: [u8; 16], remote: [u8; 16], timeout: u8, retries: u8) {
    use roce_proto::cm::{CmPath, Message, Rep, Req};
    let req = Req {
        local_comm_id: 7,
        local_qpn: QA,
        retry_count: retries,
        primary_path: CmPath {
            local_port_gid: local,
            remote_port_gid: remote,
            local_ack_timeout: timeout,
            ..CmPath::default()
        },
        ..Req::default()
    };
    let rep = Rep {
        local_comm_id: 9,
        remote_comm_id: 7,
        local_qpn: QB,
        ..Rep::default()
    };
    s.cm(0.0, true, Message::Req(req), Req::ATTRIBUTE_ID).cm(
        10.0,
        false,
        Message::Rep(rep),
        Rep::ATTRIBUTE_ID,
    );
}

#[test]
fn a_req_naming_a_gid_its_host_does_not_use_is_a_gid_mismatch() {
    // A's REQ comes from 10.0.0.1 and names its link-local IPv6 GID (mlx5's index 0 or 1):
    // B answers a GID of another kind than its own.
    let mut ll = [0u8; 16];
    ll[..2].copy_from_slice(&[0xfe, 0x80]);
    ll[15] = 1;
    let mut s = Script::default();
    cm_setup(&mut s, ll, v4_gid(2), 14, 7);
    s.req(100.0, Opcode::RC_SEND_ONLY, 0, 64).ack(102.0, 0, 1);
    let a = s.analyze();
    assert_eq!(a.agreed.len(), 1, "{:?}", a.agreed);
    let g = &a.agreed[0];
    assert_eq!(
        (g.by, g.frame, g.ends[0].qpn, g.ends[1].qpn, g.retry_count),
        ("cm", 1, Some(QA), Some(QB), Some(7))
    );
    // Tied to the connection, A being its side that sends to QP 0x22.
    let c = &a.connections[0];
    let a_side = c.sides.iter().position(|s| s.qpn == Some(QA)).unwrap();
    assert_eq!(g.connections, vec![(1, a_side)]);
    let f = findings(&a, "gid_mismatch");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    for want in [
        "the ends' GIDs are of different kinds: fe80::1 (IPv6 link-local) and ::ffff:10.0.0.2 (IPv4)",
        "the REQ names the local GID fe80::1, and that end's CM messages come from 10.0.0.1",
        "connection 1: QP 0x11 said GID fe80::1 and sends from 10.0.0.1",
    ] {
        assert!(f[0].detail.contains(want), "{want}: {}", f[0].detail);
    }
    assert_eq!(
        (f[0].connection, f[0].frames.as_slice()),
        (Some(1), &[1u64][..])
    );
    // The report says what was agreed, in text and JSON.
    let text = analyze::text(&a, false);
    assert!(
        text.contains("\nset up:\n  the CM at frame 1 (connection 1): 10.0.0.1 QP 0x11 GID fe80::1 reads 0 <-> 10.0.0.2 QP 0x22 GID ::ffff:10.0.0.2 reads 0; ACK timeout code 14 (67.109 ms), retry 7, RNR retry 0, traffic class 0\n"),
        "{text}"
    );
    let json = analyze::json_lines(&a, false);
    assert!(
        json.contains("{\"ack_timeout\":14,\"by\":\"cm\",\"connections\":[1],"),
        "{json}"
    );
    // GIDs of the hosts' own addresses: nothing to say.
    let mut s = Script::default();
    cm_setup(&mut s, v4_gid(1), v4_gid(2), 14, 7);
    s.req(100.0, Opcode::RC_SEND_ONLY, 0, 64).ack(102.0, 0, 1);
    let a = s.analyze();
    assert_eq!(a.agreed.len(), 1);
    assert!(
        findings(&a, "gid_mismatch").is_empty(),
        "{:?}",
        a.findings()
    );
}

/// perftest's record for QP `qpn` with GID `gid`, as it writes it to its TCP peer.
fn perftest_record(qpn: u32, gid: [u8; 16]) -> Vec<u8> {
    use roce_proto::perftest::{Dest, Variant};
    let d = Dest {
        qpn,
        psn: 0,
        out_reads: 16,
        gid: Some(gid),
        ..Dest::default()
    };
    let mut b = vec![0u8; Variant::Gid.wire_len()];
    d.emit(&mut b).unwrap();
    b
}

/// perftest's exchange between A (its record names GID 10.0.0.1) and B (its record names
/// `b_gid`) over TCP, then a SEND from A that B acknowledges.
fn perftest_exchange(b_gid: [u8; 16]) -> Script {
    let mut s = Script::default();
    let ports = (40000, 18515);
    let rec = |from: [u8; 4], to: [u8; 4], ports, qpn, gid| {
        tcp_frame_with(from, to, ports, 0x18, &perftest_record(qpn, gid))
    };
    s.raw(
        0.0,
        &rec([10, 0, 0, 1], [10, 0, 0, 2], ports, QA, v4_gid(1)),
    )
    .raw(
        5.0,
        &rec([10, 0, 0, 2], [10, 0, 0, 1], (ports.1, ports.0), QB, b_gid),
    )
    .req(100.0, Opcode::RC_SEND_ONLY, 0, 64)
    .ack(102.0, 0, 1);
    s
}

#[test]
fn a_perftest_record_naming_another_gid_than_the_qps_address_is_a_gid_mismatch() {
    // perftest -x picked, on B, the GID of another address (10.0.0.9) than the one its
    // RoCE traffic leaves from (10.0.0.2).
    let s = perftest_exchange(v4_gid(9));
    let a = s.analyze();
    assert_eq!(a.agreed.len(), 1, "{:?}", a.agreed);
    assert_eq!(
        (a.agreed[0].by, a.agreed[0].ends[1].reads_accepted),
        ("perftest", Some(16))
    );
    let f = findings(&a, "gid_mismatch");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "perftest's exchange at frame 1: connection 1: QP 0x22 said GID ::ffff:10.0.0.9 and sends from 10.0.0.2"
    );
    // The right GID: nothing.
    let s = perftest_exchange(v4_gid(2));
    let a = s.analyze();
    assert_eq!(a.agreed[0].connections.len(), 1);
    assert!(
        findings(&a, "gid_mismatch").is_empty(),
        "{:?}",
        a.findings()
    );
}

#[test]
fn roce_v1_packets_beside_v2_are_a_finding() {
    // A speaks RoCE v2 on one QP and, from its IPv4-mapped GID, RoCE v1 on another.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(2.0, 0, 1)
        .req_v1(10.0, Opcode::RC_SEND_ONLY, 100, 64)
        .req_v1(20.0, Opcode::RC_SEND_ONLY, 101, 64);
    let a = s.analyze();
    let f = findings(&a, "roce_v1_beside_v2");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "2 packets sent as RoCE v1 (EtherType 0x8915) in a capture whose other RoCE is v2 (UDP 4791): connection 2 side ::ffff:10.0.0.1 (as 10.0.0.1, it sends RoCE v2 too)"
    );
    // A sends only v1 and B answers only v2 (each end's GID index of another type): A's
    // requests get nothing back in v1.
    let mut s = Script::default();
    s.req_v1(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(2.0, 0, 1)
        .req_v1(10.0, Opcode::RC_SEND_ONLY, 1, 64);
    let a = s.analyze();
    let f = findings(&a, "roce_v1_beside_v2");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail
            .ends_with("connection 1 side ::ffff:10.0.0.1 (nothing answered it)"),
        "{}",
        f[0].detail
    );
    // All v1, or all v2: nothing.
    let mut s = Script::default();
    s.req_v1(10.0, Opcode::RC_SEND_ONLY, 100, 64);
    assert!(s.analyze().findings().is_empty());
}

#[test]
fn a_requester_retrying_to_the_end_is_retry_exceeded_with_its_cause() {
    let rounds = |s: &mut Script, from: f64, psn: u32, n: u32| {
        for k in 1..=n {
            s.req(
                from + 16_777.0 * f64::from(k),
                Opcode::RC_SEND_ONLY,
                psn,
                64,
            );
        }
    };
    // Nothing ever answers: unreachable from the start.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64);
    rounds(&mut s, 0.0, 0, 3);
    let a = s.analyze();
    let f = findings(&a, "retry_exceeded");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail.starts_with(
            "cause unreachable_from_start: went back to PSN 0 3 times, 16.777 ms apart"
        ),
        "{}",
        f[0].detail
    );
    assert!(
        f[0].detail
            .contains("3 of 7 retries (the largest retry count) spent"),
        "{}",
        f[0].detail
    );
    // Answered, then silent, with the REQ's retry count 3 spent and the requester quiet
    // after: the peer died, and the error came.
    let mut s = Script::default();
    cm_setup(&mut s, v4_gid(1), v4_gid(2), 12, 3);
    s.req(100.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(102.0, 0, 1)
        .req(200.0, Opcode::RC_SEND_ONLY, 1, 64);
    rounds(&mut s, 200.0, 1, 3);
    // The capture goes on 200 ms (a PFC XON, pausing nothing): the requester was quiet.
    s.pfc(200_000.0, 3, 0);
    let a = s.analyze();
    let f = findings(&a, "retry_exceeded");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail.starts_with("cause peer_dead: "),
        "{}",
        f[0].detail
    );
    assert!(
        f[0].detail.contains(
            "the 3 retries the REQ's retry count allows were spent and the requester stopped"
        ),
        "{}",
        f[0].detail
    );
    // Episodes that recovered, then one that did not: a loss storm.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64);
    rounds(&mut s, 0.0, 0, 1);
    s.ack(16_800.0, 0, 1)
        .req(16_900.0, Opcode::RC_SEND_ONLY, 1, 64);
    rounds(&mut s, 16_900.0, 1, 1);
    s.ack(33_700.0, 1, 2)
        .req(33_800.0, Opcode::RC_SEND_ONLY, 2, 64);
    rounds(&mut s, 33_800.0, 2, 2);
    let a = s.analyze();
    let f = findings(&a, "retry_exceeded");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail.starts_with("cause loss_storm: ")
            && f[0].detail.contains("2 earlier retransmission episodes"),
        "{}",
        f[0].detail
    );
    // One resend that was answered: nothing.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64);
    rounds(&mut s, 0.0, 0, 1);
    s.ack(16_800.0, 0, 1);
    assert!(findings(&s.analyze(), "retry_exceeded").is_empty());
}

#[test]
fn a_timer_firing_sooner_than_the_req_set_is_said() {
    // The REQ sets code 18 (1.07 s); the requester's timer fires after 16.8 ms.
    let mut s = Script::default();
    cm_setup(&mut s, v4_gid(1), v4_gid(2), 18, 7);
    s.req(50.0, Opcode::RC_SEND_ONLY, 9, 64)
        .ack(60.0, 9, 1)
        .req(100.0, Opcode::RC_SEND_ONLY, 10, 64)
        .req(16_877.0, Opcode::RC_SEND_ONLY, 10, 64)
        .ack(16_900.0, 10, 1)
        .req(17_000.0, Opcode::RC_SEND_ONLY, 11, 64)
        .req(33_777.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(33_800.0, 11, 2);
    let a = s.analyze();
    let f = findings(&a, "retx_timeout");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail.ends_with("; the REQ set code 18 (1073.742 ms), and the timer fired sooner: the NIC's adaptive retransmission or a timeout of its own"),
        "{}",
        f[0].detail
    );
}

#[test]
fn counters_are_set_beside_the_capture_and_their_misreadings_named() {
    use analyze::counters::{parse, HostCounters};
    // B answers A's CE-marked SENDs with CNPs: 2 CE marks, 2 CNPs.
    let mut s = Script::default();
    for psn in 0..2u32 {
        s.req_with(
            f64::from(psn) * 100.0,
            Opcode::RC_SEND_ONLY,
            psn,
            64,
            true,
            false,
        )
        .cnp(f64::from(psn) * 100.0 + 5.0)
        .ack(f64::from(psn) * 100.0 + 10.0, psn, psn + 1);
    }
    let mut a = s.analyze();
    let host = |ip: &str, text: &str| HostCounters {
        addr: ip.parse().unwrap(),
        counts: parse(text).unwrap(),
    };
    // The sender's counters, as sonic-buildimage #21891's user read them: NP counters 0
    // at the sender, CNPs handled; and one counter the capture does not account for.
    a.counters = vec![
        host(
            "10.0.0.1",
            "np_cnp_sent: 0\nnp_ecn_marked_roce_packets: 0\nrp_cnp_handled: 2\nlocal_ack_timeout_err: 3\n",
        ),
        host("10.0.0.2", "np_cnp_sent: 2\nnp_ecn_marked_roce_packets: 2\n"),
        host("10.0.0.9", "np_cnp_sent: 1\n"),
    ];
    let checks = analyze::counters::reconcile(&a);
    let row = |addr: &str, name: &str| {
        checks
            .iter()
            .find(|c| c.addr.to_string() == addr && c.counter == name)
            .map(|c| (c.value, c.capture, c.agrees()))
            .unwrap()
    };
    assert_eq!(row("10.0.0.1", "rp_cnp_handled"), (2, 2, true));
    assert_eq!(row("10.0.0.1", "local_ack_timeout_err"), (3, 0, false));
    assert_eq!(row("10.0.0.2", "np_cnp_sent"), (2, 2, true));
    assert_eq!(row("10.0.0.2", "np_ecn_marked_roce_packets"), (2, 2, true));
    let names: Vec<&str> = a.findings().iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        [
            "np_counters_at_the_sender",
            "counters_disagree",
            "counters_host_not_in_capture"
        ],
        "{}",
        analyze::text(&a, false)
    );
    let f = findings(&a, "counters_disagree");
    assert_eq!(
        f[0].detail,
        "10.0.0.1: local_ack_timeout_err 3 where the capture has 0 (its retransmission episodes after its ACK timer fired)"
    );
    let text = analyze::text(&a, false);
    assert!(
        text.contains("\ncounters:\n  10.0.0.1 np_cnp_sent 0, the capture 0 (CNPs it sent (as the receiver, the notification point))\n"),
        "{text}"
    );
    assert!(text.contains("local_ack_timeout_err 3, the capture 0 (its retransmission episodes after its ACK timer fired): DIFFERS"), "{text}");
    assert!(analyze::json_lines(&a, false).contains(r#"{"addr":"10.0.0.2","agrees":true,"capture":2,"counter":"np_cnp_sent","type":"counter","value":2,"what":"#));
    // The receiver's counters agreeing, alone: no finding.
    a.counters.retain(|h| h.addr.to_string() == "10.0.0.2");
    assert!(
        a.findings().iter().all(|f| !f.name.contains("counter")),
        "{:?}",
        a.findings()
    );
}
