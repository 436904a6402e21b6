//! `roce analyze` on scripted captures, built with `roce_proto`: one per event and one per
//! verdict (each violation included). Each checks the facts it is about, and its whole text
//! report against a golden file in `tests/golden/analyze/` (`UPDATE_GOLDEN=1` rewrites them;
//! review the diff).
mod common;

use common::script::*;
use roce_pcap::analyze::{self, Connection, Options};
use roce_pcap::CaptureReader;
use roce_proto::aeth::NakCode;
use roce_proto::Opcode;

#[test]
fn clean_connection_has_no_events_and_keeps_every_rule() {
    let mut s = Script::default();
    s.write(0.0, 100, 3).ack(5.0, 102, 1);
    s.req(10.0, Opcode::RC_SEND_ONLY, 103, 100)
        .ack(12.0, 103, 2);
    s.req(20.0, Opcode::RC_RDMA_READ_REQUEST, 104, 2048)
        .read_resp(22.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 104, 1024, 3)
        .read_resp(23.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 105, 1024, 3);
    s.req(30.0, Opcode::RC_SEND_ONLY, 106, 10).ack(31.0, 106, 4);
    let a = s.analyze();
    let c = one(&a);
    assert_eq!(c.paired_by, "udp_sport");
    assert!(c.events.is_empty(), "{:?}", kinds(c));
    let (ra, _) = sides(c);
    assert_eq!(ra.messages, [2, 0, 1, 0, 1, 0, 0]);
    assert_eq!(ra.message_bytes[4], 2048);
    assert_eq!(ra.ack_rtt.count(), 3);
    assert_eq!(ra.read_latency.count(), 1);
    assert_eq!(verdict(c, "read_responses_cover_request").result, "ok");
    assert_eq!(verdict(c, "monotonic_msn_and_ack_psn").result, "ok");
    assert_eq!(
        verdict(c, "gbn_restart_at_naked_psn").result,
        "not_applicable"
    );
    clean(c);
    golden("clean", &a);
}

#[test]
fn nak_sequence_error_episode_restarts_at_the_naked_psn() {
    let mut s = Script::default();
    // PSN 2 is lost before the capture point: 3 and 4 arrive out of sequence.
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .req(4.0, Opcode::RC_SEND_ONLY, 4, 64)
        .nak(5.0, 2, NakCode::PsnSequenceError, 2)
        .req(7.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(8.0, Opcode::RC_SEND_ONLY, 3, 64)
        .req(9.0, Opcode::RC_SEND_ONLY, 4, 64)
        .ack(11.0, 4, 5);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!(ra.psn_gaps, 1);
    assert_eq!(ra.never_seen_psns, 0, "the resent PSN 2 filled the gap");
    assert_eq!(ra.retransmitted_packets, 3);
    assert_eq!(ra.episodes, [1, 0, 0, 0, 0]);
    assert_eq!(rb.naks, [1, 0, 0, 0, 0, 0]);
    assert_eq!(ra.nak_response.count(), 1);
    assert_eq!(rb.nak_generation.count(), 1);
    assert_eq!(verdict(c, "gbn_restart_at_naked_psn").result, "ok");
    assert_eq!(verdict(c, "one_nak_per_sequence_error").result, "ok");
    clean(c);
    golden("nak_seq", &a);
}

#[test]
fn timeout_episode_restarts_at_the_oldest_unacknowledged_psn() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 10, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 11, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 12, 64)
        .ack(4.0, 10, 1)
        // Silence: the ACKs for 11 and 12 are lost; A's timer (about 16 ms) fires.
        .req(16_800.0, Opcode::RC_SEND_ONLY, 11, 64)
        .req(16_801.0, Opcode::RC_SEND_ONLY, 12, 64)
        .ack(16_803.0, 12, 3);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.episodes, [0, 0, 1, 0, 0]);
    assert_eq!(ra.retransmitted_packets, 2);
    let rto = ra.retransmission_timeout.quantile(0.5);
    assert!(
        (16_700_000..16_900_000).contains(&rto),
        "observed timeout {rto} ns"
    );
    assert_eq!(verdict(c, "timeout_restart_at_oldest_unacked").result, "ok");
    clean(c);
    golden("timeout", &a);
}

#[test]
fn rnr_episode_reports_the_wait_beside_the_naks_timer() {
    let mut s = Script::default();
    // Timer code 14: 1.28 ms.
    s.req(0.0, Opcode::RC_SEND_ONLY, 5, 64)
        .rnr(2.0, 5, 14, 0)
        .req(1_400.0, Opcode::RC_SEND_ONLY, 5, 64)
        .ack(1_402.0, 5, 1);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!(rb.naks, [0, 1, 0, 0, 0, 0]);
    assert_eq!(ra.episodes, [0, 1, 0, 0, 0]);
    assert_eq!(ra.rnr_wait.quantile(0.5), 1_398_000);
    let e = c
        .events
        .iter()
        .find(|e| e.kind.name() == "retransmission")
        .unwrap();
    assert!(
        e.detail.contains("1398.0 us") && e.detail.contains("1280.0 us"),
        "{}",
        e.detail
    );
    clean(c);
    golden("rnr", &a);
}

#[test]
fn implied_nak_episode_after_an_ack_past_an_unanswered_read() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_RDMA_READ_REQUEST, 20, 512)
        .req(1.0, Opcode::RC_SEND_ONLY, 21, 64)
        // The READ response is lost before the capture point; the ACK for 21 implies it.
        .ack(3.0, 21, 2)
        .req(4.0, Opcode::RC_RDMA_READ_REQUEST, 20, 512)
        .read_resp(6.0, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 20, 512, 2);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.episodes, [0, 0, 0, 1, 0]);
    assert_eq!(ra.retransmitted_packets, 1);
    assert_eq!(
        verdict(c, "duplicate_read_reexecuted_from_requested_psn").result,
        "ok"
    );
    assert_eq!(verdict(c, "read_responses_cover_request").result, "ok");
    clean(c);
    golden("implied_nak", &a);
}

#[test]
fn unknown_cause_when_only_one_direction_is_captured() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 1, 64);
    let a = s.analyze();
    let c = one(&a);
    assert_eq!(c.paired_by, "none");
    let ra = c.sides.iter().find(|s| s.requests > 0).unwrap();
    assert_eq!(ra.retransmitted_packets, 2);
    assert_eq!(ra.episodes, [0, 0, 0, 0, 1]);
    golden("unknown", &a);
}

#[test]
fn out_of_order_gap_and_never_seen() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 1, 64)
        // 4 and 5 never appear.
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .req(4.0, Opcode::RC_SEND_ONLY, 6, 64);
    let a = s.analyze();
    let c = one(&a);
    let ra = &c.sides[0];
    assert_eq!(ra.out_of_order, 1);
    assert_eq!(ra.psn_gaps, 2);
    assert_eq!(ra.never_seen_psns, 2);
    assert_eq!(ra.retransmitted_packets, 0);
    golden("out_of_order", &a);
}

#[test]
fn network_duplicate_is_not_a_retransmission() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(1.2, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(4.0, 2, 3);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!((ra.duplicates, ra.retransmitted_packets), (1, 0));
    clean(c);
    golden("duplicate", &a);
}

#[test]
fn naks_by_code() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .nak(1.0, 0, NakCode::InvalidRequest, 0)
        .req(2.0, Opcode::RC_SEND_ONLY, 1, 64)
        .nak(3.0, 1, NakCode::RemoteAccessError, 0)
        .req(4.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(5.0, 2, NakCode::RemoteOperationalError, 0);
    let a = s.analyze();
    let c = one(&a);
    let (_, rb) = sides(c);
    assert_eq!(rb.naks, [0, 0, 1, 1, 1, 0]);
    let names: Vec<_> = kinds(c).into_iter().map(|k| k.0).collect();
    assert_eq!(
        names,
        ["nak_invalid_request", "nak_remote_access", "nak_remote_op"]
    );
    golden("naks", &a);
}

#[test]
fn ghost_and_stale_acks() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(2.0, 1, 2)
        .ack(3.0, 0, 2)
        .ack(4.0, 9, 2);
    let a = s.analyze();
    let c = one(&a);
    let (_, rb) = sides(c);
    assert_eq!((rb.ghost_acks, rb.stale_acks), (1, 1));
    let v = verdict(c, "monotonic_msn_and_ack_psn");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[4u64][..]));
    golden("ghost_stale", &a);
}

#[test]
fn ecn_marks_cnps_and_their_latency() {
    let mut s = Script::default();
    s.req_with(0.0, Opcode::RC_SEND_ONLY, 0, 64, true, false)
        .cnp(3.0)
        .req(60.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req_with(61.0, Opcode::RC_SEND_ONLY, 2, 64, true, false)
        .cnp(62.0)
        .ack(63.0, 2, 3);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!((ra.ecn_ce, rb.cnps), (2, 2));
    assert_eq!(rb.ce_to_cnp.count(), 2);
    assert_eq!(rb.ce_to_cnp.quantile(1.0), 3_000);
    assert_eq!(rb.cnp_interval.quantile(0.5), 59_000);
    assert!(ra.cnps_received_at.is_empty(), "kept for pictures only");
    let pictured = s.analyze_with(Options {
        pictures: true,
        ..Options::default()
    });
    let (pa, _) = sides(one(&pictured));
    assert_eq!(pa.cnps_received_at.len(), 2);
    assert!(
        pa.trace.iter().filter(|p| p.2 == 4).count() == 2,
        "CNP marks on A's PSN line"
    );
    let v = verdict(c, "cnp_min_interval");
    assert_eq!(v.result, "ok");
    assert!(
        v.detail.contains("observed minimum 59.0 us"),
        "{}",
        v.detail
    );
    golden("cnp", &a);
}

#[test]
fn bad_icrc_is_flagged() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req_with(1.0, Opcode::RC_SEND_ONLY, 1, 64, false, true)
        .ack(2.0, 1, 2);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.icrc_bad, 1);
    assert_eq!(kinds(c), [("icrc_bad", 2)]);
    golden("icrc_bad", &a);
}

#[test]
fn stall_mid_capture_and_at_the_end() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        // 150 ms without an ACK, then more requests, and no ACK until the end.
        .req(150_000.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(150_002.0, 0, 1)
        .req(150_003.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(400_000.0, 0, 1);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.stalls, 2, "{:?}", kinds(c));
    golden("stall", &a);
}

#[test]
fn short_read_response_violates_the_read_rule() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_RDMA_READ_REQUEST, 50, 3000)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 50, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 51, 500, 1);
    let a = s.analyze();
    let c = one(&a);
    let (_, rb) = sides(c);
    assert_eq!(rb.read_response_mismatches, 1);
    let v = verdict(c, "read_responses_cover_request");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[3u64][..]));
    golden("read_short", &a);
}

#[test]
fn restart_at_the_wrong_psn_after_a_nak_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .nak(4.0, 1, NakCode::PsnSequenceError, 1)
        // Restarts at 2, skipping the NAKed PSN 1.
        .req(6.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(7.0, Opcode::RC_SEND_ONLY, 3, 64);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "gbn_restart_at_naked_psn");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[6u64][..]));
    assert!(
        v.detail.contains("restarted at PSN 2, the NAK asked for 1"),
        "{}",
        v.detail
    );
    assert!(a.violated());
    golden("violation_wrong_restart", &a);
}

#[test]
fn restart_past_the_oldest_unacknowledged_after_a_timeout_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(3.0, 0, 1)
        .req(20_000.0, Opcode::RC_SEND_ONLY, 2, 64);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "timeout_restart_at_oldest_unacked");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[5u64][..]));
    golden("violation_timeout_restart", &a);
}

#[test]
fn nak_storm_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(2.0, 1, NakCode::PsnSequenceError, 1)
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .nak(4.0, 1, NakCode::PsnSequenceError, 1)
        .req(5.0, Opcode::RC_SEND_ONLY, 4, 64)
        .nak(6.0, 1, NakCode::PsnSequenceError, 1);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "one_nak_per_sequence_error");
    assert_eq!(
        (v.result, v.frames.as_slice()),
        ("violated", &[5u64, 7][..])
    );
    golden("violation_nak_storm", &a);
}

#[test]
fn an_ack_past_a_hole_the_responder_nakked_is_a_violation() {
    // The responder said it lacked PSN 1 (a sequence NAK), the requester never went back,
    // and the responder acknowledged PSN 3: it acknowledged what it knew it did not have.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 3, 64)
        .nak(3.0, 1, NakCode::PsnSequenceError, 1)
        .ack(4.0, 3, 3);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "no_ack_past_hole");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[5u64][..]));
    assert_eq!(sides(c).0.missed_by_capture, 0);
    golden("violation_ack_past_hole", &a);
}

#[test]
fn an_ack_past_a_hole_is_a_capture_drop_not_a_violation() {
    // PSN 1 never seen, and the responder acknowledged it: a responder acknowledges only
    // what it received in order, so the requester sent it and the capture missed it. The
    // hole rule is not judged on it, and the report says the capture dropped a packet.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 3, 64)
        .ack(3.0, 3, 3);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "no_ack_past_hole");
    assert_eq!(v.result, "not_judged", "{v:?}");
    let (ra, rb) = sides(c);
    assert_eq!((ra.missed_by_capture, ra.never_seen_psns), (1, 0));
    assert_eq!(rb.missed_by_capture, 0);
    assert!(!c.violated());
    golden("capture_missed_request", &a);
}

#[test]
fn a_read_the_capture_missed_is_known_by_its_responses() {
    // Two READs; the capture missed the second READ request and a SEND before it, and one
    // response in the middle of the first READ's answer. The responses show the READ was
    // sent (and the SEND before it, which they acknowledge); the first answer is not judged
    // (a response of it is missing), and nothing is violated.
    let mut s = Script::default();
    s.read_at(0.0, 10, 0x1000, 3072)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 10, 1024, 1)
        // PSN 11's response (Middle) is not in the capture.
        .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 12, 1024, 1)
        // SEND 13 and READ 14 (2048 bytes) are not in the capture.
        .read_resp(8.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 14, 1024, 3)
        .read_resp(9.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 15, 1024, 3)
        .req(10.0, Opcode::RC_SEND_ONLY, 16, 64)
        .ack(12.0, 16, 4);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!(ra.missed_by_capture, 2, "{:?}", kinds(c));
    assert_eq!(rb.unseen_read_responses, 1, "{:?}", kinds(c));
    assert_eq!((ra.psn_gaps, ra.never_seen_psns), (0, 0), "{:?}", kinds(c));
    assert_eq!(ra.retransmitted_packets, 0);
    let v = verdict(c, "read_responses_cover_request");
    assert_eq!(v.result, "not_judged", "{v:?}");
    for v in c.verdicts() {
        assert_ne!(v.result, "violated", "{v:?}");
    }
}

#[test]
fn msn_going_back_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(1.0, 0, 5)
        .req(2.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(3.0, 1, 4);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "monotonic_msn_and_ack_psn");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[4u64][..]));
    assert!(v.detail.contains("MSN 4 after 5"), "{}", v.detail);
    golden("violation_msn", &a);
}

#[test]
fn duplicate_read_answered_from_another_psn_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_RDMA_READ_REQUEST, 30, 3072)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 32, 1024, 1)
        // The same READ again (its responses lost after the capture point)...
        .req(20_000.0, Opcode::RC_RDMA_READ_REQUEST, 30, 3072)
        // ... answered from PSN 31, not from the requested 30.
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 32, 1024, 1);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "duplicate_read_reexecuted_from_requested_psn");
    assert_eq!(v.result, "violated", "{v:?}");
    assert_eq!(v.frames.first(), Some(&6));
    golden("violation_duplicate_read", &a);
}

#[test]
fn cnps_too_close_are_a_violation() {
    let mut s = Script::default();
    s.req_with(0.0, Opcode::RC_SEND_ONLY, 0, 64, true, false)
        .cnp(1.0)
        .req_with(2.0, Opcode::RC_SEND_ONLY, 1, 64, true, false)
        .cnp(11.0)
        .ack(12.0, 1, 2);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "cnp_min_interval");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[4u64][..]));
    assert!(
        v.detail.contains("observed minimum 10.0 us"),
        "{}",
        v.detail
    );
    // --cnp-interval lower than what was seen: no violation.
    let relaxed = s.analyze_with(Options {
        cnp_interval_ns: 5_000,
        ..Options::default()
    });
    assert_eq!(verdict(one(&relaxed), "cnp_min_interval").result, "ok");
    golden("violation_cnp_interval", &a);
}

#[test]
fn psn_wrap_is_not_a_gap() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0xff_fffe, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 0xff_ffff, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(4.0, 1, 4);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(
        (ra.psn_gaps, ra.psn_wraps, ra.retransmitted_packets),
        (0, 1, 0)
    );
    assert_eq!((ra.psn_first, ra.psn_last), (Some(0xff_fffe), Some(1)));
    clean(c);
}

#[test]
fn time_and_qp_filters() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1_000.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2_000.0, Opcode::RC_SEND_ONLY, 2, 64);
    let a = s.analyze_with(Options {
        from: Some(0.0005),
        to: Some(0.0015),
        ..Options::default()
    });
    assert_eq!(one(&a).sides[0].requests, 1);
    let none = s.analyze_with(Options {
        qp: Some(0x999),
        ..Options::default()
    });
    assert!(none.connections.is_empty());
    let b = s.analyze_with(Options {
        qp: Some(QB),
        ..Options::default()
    });
    assert_eq!(b.connections.len(), 1);
}

#[test]
fn naks_followed_by_cnps_are_counted() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(2.0, 1, NakCode::PsnSequenceError, 1)
        // This NIC's notification point answers the NAK with a CNP...
        .cnp(3.0)
        .req(4.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(5.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(6.0, 2, 3)
        .req(300.0, Opcode::RC_SEND_ONLY, 4, 64)
        .nak(301.0, 3, NakCode::PsnSequenceError, 3)
        // ... but not this one (the CNP comes 200 us later).
        .cnp(501.0);
    let a = s.analyze();
    let c = one(&a);
    assert_eq!(c.naks_and_cnps, (2, 1));
    let v = verdict(c, "cnp_min_interval");
    assert!(
        v.detail
            .contains("1 of 2 NAKs followed by a CNP within 100 us"),
        "{}",
        v.detail
    );
}

#[test]
fn time_going_back_and_far_jumps_are_survived() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(50.0, 1, NakCode::PsnSequenceError, 1)
        // Earlier than the NAK: a capture merged from two taps, or a hostile one.
        .req(10.0, Opcode::RC_SEND_ONLY, 1, 64)
        .rnr(60.0, 2, 31, 1)
        .req(5.0, Opcode::RC_SEND_ONLY, 2, 64)
        .cnp(3.0)
        .ack(1.0e15, 2, 3)
        .req(2.0, Opcode::RC_SEND_ONLY, 3, 64);
    let a = s.analyze_with(Options {
        pictures: true,
        ..Options::default()
    });
    assert_eq!(a.connections.len(), 1);
    let _ = analyze::text(&a, true);
    let mut html = Vec::new();
    analyze::write_html(&a, &mut html).unwrap();
}

/// The READ of the `a_read_resumed_*` scripts: one READ message and one SEND, `retx`
/// request packets resent in one episode, no gap and no rule violated.
fn one_read_resumed(s: &Script, retx: u64) {
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.retransmitted_packets, retx, "{:?}", kinds(c));
    // The resumed READ is not a second READ message.
    assert_eq!(ra.messages, [1, 0, 0, 0, 1, 0, 0], "{:?}", ra.message_bytes);
    assert_eq!((ra.psn_gaps, ra.out_of_order), (0, 0), "{:?}", kinds(c));
    assert_eq!(ra.episodes.iter().sum::<u64>(), 1, "{:?}", kinds(c));
    for v in c.verdicts() {
        assert_ne!(v.result, "violated", "{v:?}");
    }
}

#[test]
fn a_read_resumed_from_the_middle_is_a_retransmission() {
    // IBTA 9.4.4: a requester may retry a READ from any PSN inside it. The last two of four
    // responses are lost before the capture point; after its timeout the requester asks
    // again for the remaining 2048 bytes, at the PSN of the first missing response.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_at(20_000.0, 32, 0x1000 + 2048, 2048)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .req(20_010.0, Opcode::RC_SEND_ONLY, 34, 64)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 1);
}

#[test]
fn a_read_resumed_from_the_middle_behind_later_requests_is_a_retransmission() {
    // As above, with a SEND sent after the READ: the timeout resends the READ's remaining
    // part from its first missing response's PSN, then the SEND.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .req(1.0, Opcode::RC_SEND_ONLY, 34, 64)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_at(20_000.0, 32, 0x1000 + 2048, 2048)
        .req(20_001.0, Opcode::RC_SEND_ONLY, 34, 64)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 2);
}

#[test]
fn a_read_resumed_after_responses_lost_past_the_capture_point_is_a_retransmission() {
    // Every response was captured, the last two lost after the capture point: the requester
    // resumes from the first it did not get.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 32, 1024, 1)
        .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .read_at(20_000.0, 32, 0x1000 + 2048, 2048)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .req(20_010.0, Opcode::RC_SEND_ONLY, 34, 64)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 1);
}

#[test]
fn a_read_resumed_is_judged_by_its_psns_whatever_its_reth_says() {
    // The resumed READ's RETH asks for the rest from the READ's first address, not from
    // where the rest begins: its PSN, inside the span the first responses took (1,024-byte
    // packets: four PSNs), is what makes it the same READ again.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_at(20_000.0, 32, 0x1000, 2048)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .req(20_010.0, Opcode::RC_SEND_ONLY, 34, 64)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 1);
}

#[test]
fn back_to_back_reads_of_one_buffer_are_two_reads() {
    // perftest's READs: the same buffer again, the next READ right behind the first one's
    // span, before any response showed the path MTU (4,096: two PSNs each). Not a resume.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 8192)
        .read_at(1.0, 32, 0x1000, 8192)
        .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 4096, 1)
        .read_resp(6.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 31, 4096, 1)
        .read_resp(7.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 4096, 2)
        .read_resp(8.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 4096, 2)
        // Then the same again once the MTU is known.
        .read_at(10.0, 34, 0x1000, 8192)
        .read_resp(15.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 34, 4096, 3)
        .read_resp(16.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 35, 4096, 3)
        .read_at(17.0, 36, 0x1000, 8192)
        .read_resp(25.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 36, 4096, 4)
        .read_resp(26.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 37, 4096, 4);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.messages, [0, 0, 0, 0, 4, 0, 0], "{:?}", kinds(c));
    assert_eq!(ra.retransmitted_packets, 0, "{:?}", kinds(c));
    for v in c.verdicts() {
        assert_ne!(v.result, "violated", "{v:?}");
    }
}

#[test]
fn a_requester_nothing_answers_is_a_peer_unresponsive_verdict() {
    // Three SENDs, then three rounds of the same three, 1 ms apart, and not one response:
    // the peer is unreachable (or gone, or the GID or QPN is wrong).
    let mut s = Script::default();
    for round in 0..4u32 {
        let t = f64::from(round) * 1000.0;
        for (i, psn) in (10..13).enumerate() {
            s.req(t + i as f64, Opcode::RC_SEND_ONLY, psn, 64);
        }
    }
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "peer_unresponsive");
    assert_eq!(v.result, "violated", "{v:?}");
    assert_eq!(v.frames, [1]);
    for part in [
        "no response to 12 requests",
        "went back to PSN 10 3 times, 1.000 ms apart",
        "local ACK timeout code about 8",
        "`retry exceeded` at",
    ] {
        assert!(v.detail.contains(part), "{part:?} in {}", v.detail);
    }
    golden("peer_unresponsive", &a);
}

#[test]
fn one_direction_of_a_healthy_connection_is_not_unresponsive() {
    // A capture of the requests only (the ACKs took another path): the PSNs move on, nothing
    // goes back, so the missing responses are the capture's, not the peer's.
    let mut s = Script::default();
    for psn in 0..40u32 {
        s.req(f64::from(psn) * 10.0, Opcode::RC_SEND_ONLY, psn, 64);
    }
    let a = s.analyze();
    let v = verdict(one(&a), "peer_unresponsive");
    assert_eq!(v.result, "ok", "{v:?}");
}

/// Three SENDs answered, then (at 100 us) `end` from `from_b` (B's TCP channel to A, or A's
/// to B) when given, then three rounds of three more SENDs 1 ms apart; B answers those
/// when `answered`.
fn after_tcp_end(end: Option<(bool, u8)>, answered: bool) -> Script {
    let mut s = Script::default();
    for psn in 0..3u32 {
        s.req(f64::from(psn), Opcode::RC_SEND_ONLY, psn, 64);
    }
    s.ack(5.0, 2, 3);
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    if let Some((from_b, flags)) = end {
        let f = if from_b {
            tcp_frame(b, a, 18515, 40000, flags)
        } else {
            tcp_frame(a, b, 40000, 18515, flags)
        };
        s.raw(100.0, &f);
    }
    for round in 0..3u32 {
        let t = 200.0 + f64::from(round) * 1000.0;
        for (i, psn) in (3..6).enumerate() {
            s.req(t + i as f64, Opcode::RC_SEND_ONLY, psn, 64);
        }
        if answered {
            s.ack(t + 10.0, 5, 6 + round);
        }
    }
    s
}

fn ended(c: &Connection) -> Vec<&analyze::Event> {
    c.events
        .iter()
        .filter(|e| e.kind.name() == "peer_process_ended")
        .collect()
}

#[test]
fn requests_after_the_peer_closed_its_tcp_channel_are_a_peer_process_ended() {
    for (flags, what) in [(0x11, "TCP FIN"), (0x04, "TCP RST")] {
        let a = after_tcp_end(Some((true, flags)), false).analyze();
        let c = one(&a);
        let e = ended(c);
        assert_eq!(e.len(), 1, "{}", analyze::text(&a, true));
        assert_eq!(e[0].frame, 5, "the FIN's frame");
        assert_eq!(c.sides[e[0].side].qpn, Some(QA), "on the requester's side");
        for part in [
            what,
            "from 10.0.0.2:18515 to 10.0.0.1:40000",
            "peer process ended",
        ] {
            assert!(e[0].detail.contains(part), "{part:?} in {}", e[0].detail);
        }
        assert_eq!(c.peer_ended, Some(100_000));
        let j = analyze::connection_json(c);
        assert_eq!(j["peer_process_ended"], serde_json::json!(0.0001), "{j}");
    }
    golden(
        "peer_process_ended",
        &after_tcp_end(Some((true, 0x11)), false).analyze(),
    );
}

#[test]
fn a_tcp_close_is_not_a_peer_process_ended_when_the_peer_still_answers_or_closed_nothing() {
    for (end, answered, why) in [
        (None, false, "no TCP end in the capture"),
        (Some((false, 0x11)), false, "the requester's own FIN"),
        (Some((true, 0x11)), true, "the peer answers after its FIN"),
        (Some((true, 0x10)), false, "a plain ACK ends nothing"),
    ] {
        let a = after_tcp_end(end, answered).analyze();
        let c = one(&a);
        assert!(ended(c).is_empty(), "{why}: {}", analyze::text(&a, true));
        assert_eq!(c.peer_ended, None, "{why}");
    }
}

/// A 10-packet WRITE held back after its 5th packet for 220 ms; with `pause`, the switch
/// pauses `pause` (priority, refreshing XOFF every 100 us) through the wait.
fn held_write(pause: Option<u8>) -> Script {
    let mut s = Script::default();
    let op = |i: u32| match i {
        0 => Opcode::RC_RDMA_WRITE_FIRST,
        9 => Opcode::RC_RDMA_WRITE_LAST,
        _ => Opcode::RC_RDMA_WRITE_MIDDLE,
    };
    for i in 0..5u32 {
        s.req_full(f64::from(i), op(i), i, 1024, 10 * 1024, false, false);
    }
    if let Some(prio) = pause {
        let mut t = 10.0;
        while t < 219_000.0 {
            s.pfc(t, prio, 0xffff);
            t += 100.0;
        }
        s.pfc(219_000.0, prio, 0);
    }
    for i in 5..10u32 {
        s.req_full(
            220_000.0 + f64::from(i),
            op(i),
            i,
            1024,
            10 * 1024,
            false,
            false,
        );
    }
    s.ack(220_020.0, 9, 1);
    s
}

#[test]
fn a_stall_under_pfc_is_covered_with_its_storm_and_the_connection_is_a_victim() {
    // DSCP 0, untagged: priority 0.
    let a = held_write(Some(0)).analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(
        ra.stalls,
        1,
        "held back mid-message: {}",
        analyze::text(&a, true)
    );
    assert_eq!(c.pfc.priority, Some(0));
    assert_eq!(c.pfc.stalls_covered, 1, "{:?}", c.pfc);
    assert_eq!(
        c.pfc.storms, 1,
        "paused 219 ms without a break: {:?}",
        c.pfc
    );
    assert!(c.pfc.victim, "no CE, no CNP of its own: {:?}", c.pfc);
    assert_eq!(c.pfc.pauses, 2190, "{:?}", c.pfc);
    assert!(
        (c.pfc.paused_ns as i64 - 218_990_000).abs() < 1_000,
        "{:?}",
        c.pfc
    );
    let covered: Vec<_> = c
        .events
        .iter()
        .filter(|e| e.kind.name() == "stall_paused")
        .collect();
    assert_eq!(covered.len(), 1);
    assert_eq!(covered[0].frame, 6, "the first pausing frame");
    assert!(
        covered[0].detail.contains("priority 0 was paused"),
        "{}",
        covered[0].detail
    );
    assert_eq!(a.pfc.len(), 1);
    let p = &a.pfc[0];
    assert_eq!(
        (p.priority, p.frames, p.xoff, p.senders),
        (0, 2191, 2190, 1)
    );
    assert_eq!((p.storms.len(), p.stalls_covered, p.victims), (1, 1, 1));
    let j = analyze::connection_json(c);
    assert_eq!(j["pfc"]["stalls_covered"], 1, "{j}");
    assert_eq!(j["pfc"]["victim"], true, "{j}");
    let lines = analyze::json_lines(&a, false);
    let pfc: serde_json::Value = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "pfc")
        .expect("a pfc line");
    assert_eq!(pfc["pausing_frames"], 2190, "{pfc}");
    golden("pfc_stall", &a);
}

#[test]
fn a_stall_without_pfc_or_under_another_priority_is_not_covered() {
    for (pause, why) in [
        (None, "no PFC frame"),
        (Some(5), "priority 5 paused, not 0"),
    ] {
        let a = held_write(pause).analyze();
        let c = one(&a);
        assert_eq!(sides(c).0.stalls, 1, "{why}");
        assert_eq!(c.pfc.stalls_covered, 0, "{why}: {:?}", c.pfc);
        assert_eq!(
            (c.pfc.pauses, c.pfc.paused_ns),
            (0, 0),
            "{why}: {:?}",
            c.pfc
        );
        assert!(!c.pfc.victim, "{why}");
        assert!(
            c.events.iter().all(|e| e.kind.name() != "stall_paused"),
            "{why}"
        );
    }
}

/// `s`'s frames as a pcapng file (one interface, microseconds) with an interface
/// statistics block at the end saying the capture dropped `ifdrop` and `osdrop` packets.
fn pcapng_with_drops(s: &Script, ifdrop: u64, osdrop: u64) -> Vec<u8> {
    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let len = (12 + body.len().div_ceil(4) * 4) as u32;
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.resize(out.len() + (4 - body.len() % 4) % 4, 0);
        out.extend_from_slice(&len.to_le_bytes());
    }
    let mut out = Vec::new();
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    block(&mut out, 0x0a0d_0d0a, &shb);
    let mut idb = vec![1, 0, 0, 0];
    idb.extend_from_slice(&262_144u32.to_le_bytes());
    block(&mut out, 1, &idb);
    for (t, f) in &s.frames {
        let us = 1_800_000_000_000_000u64 + t / 1000;
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((us >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(us as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(f);
        block(&mut out, 6, &epb);
    }
    let mut isb = vec![0u8; 12];
    for (code, v) in [(5u16, ifdrop), (7, osdrop)] {
        isb.extend_from_slice(&code.to_le_bytes());
        isb.extend_from_slice(&8u16.to_le_bytes());
        isb.extend_from_slice(&v.to_le_bytes());
    }
    isb.extend_from_slice(&[0, 0, 0, 0]);
    block(&mut out, 5, &isb);
    out
}

#[test]
fn a_pcapng_file_that_says_it_dropped_packets_is_reported() {
    // What dumpcap writes when the kernel dropped packets: its interface statistics.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(3.0, 2, 2);
    let bytes = pcapng_with_drops(&s, 25, 3);
    let mut r = CaptureReader::new(&bytes[..], "dropped.pcapng").unwrap();
    let a = analyze::analyze(&mut r, Options::default());
    assert_eq!(a.packets, 3);
    assert_eq!(a.file_dropped, Some(28));
    let q = a.capture_quality();
    assert_eq!((q.missed, q.file_dropped), (1, Some(28)));
    let text = analyze::text(&a, false);
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("capture quality: 1 packets")
                && l.ends_with("the file says the capture dropped 28")),
        "{text}"
    );
    // The same packets as a pcap file: no count to report.
    let plain = s.pcap();
    let mut r = CaptureReader::new(&plain[..], "dropped.pcap").unwrap();
    assert_eq!(
        analyze::analyze(&mut r, Options::default()).file_dropped,
        None
    );
}

#[test]
fn a_read_window_resent_after_a_silent_responder_is_a_timeout_episode() {
    // Four READs of two responses each outstanding; the first answered, the second half
    // answered, then the responder falls silent. 67 ms (perftest's timeout) after the last
    // response the requester resumes the second READ from its missing response and sends
    // the two after it again; then everything is answered.
    let mut s = Script::default();
    s.read_at(0.0, 10, 0x1000, 2048)
        .read_at(1.0, 12, 0x2000, 2048)
        .read_at(2.0, 14, 0x3000, 2048)
        .read_at(3.0, 16, 0x4000, 2048)
        .read_resp(100.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 10, 1024, 1)
        .read_resp(101.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 11, 1024, 1)
        .read_at(102.0, 18, 0x5000, 2048)
        .read_resp(200.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 12, 1024, 2)
        .read_at(67_200.0, 13, 0x2000 + 1024, 1024)
        .read_at(67_201.0, 14, 0x3000, 2048)
        .read_at(67_202.0, 16, 0x4000, 2048)
        .read_at(67_203.0, 18, 0x5000, 2048);
    let mut t = 67_300.0;
    for psn in 13..20u32 {
        let op = match psn {
            13 => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            p if p % 2 == 0 => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            _ => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        };
        s.read_resp(t, op, psn, 1024, 2 + (psn - 12) / 2);
        t += 1.0;
    }
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.retransmitted_packets, 4, "{}", analyze::text(&a, true));
    // nak_seq, rnr, timeout, implied_nak, unknown
    assert_eq!(ra.episodes, [0, 0, 1, 0, 0], "{}", analyze::text(&a, true));
    clean(c);
    // The same with the second READ not answered at all: it is sent again whole, and its
    // sending again is not the progress the timer ran from (the wait is 67 ms, not 0).
    let mut s = Script::default();
    s.read_at(0.0, 10, 0x1000, 2048)
        .read_at(1.0, 12, 0x2000, 2048)
        .read_resp(100.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 10, 1024, 1)
        .read_resp(101.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 11, 1024, 1)
        .read_at(67_101.0, 12, 0x2000, 2048)
        .read_resp(67_200.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 12, 1024, 2)
        .read_resp(67_201.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 13, 1024, 2);
    let a = s.analyze();
    let (ra, _) = sides(one(&a));
    assert_eq!(ra.episodes, [0, 0, 1, 0, 0], "{}", analyze::text(&a, true));
    let waited = ra.retransmission_timeout.max();
    assert_eq!(waited, 67_000_000, "{}", analyze::text(&a, true));
}
