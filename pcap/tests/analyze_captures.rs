//! `roce analyze` on every shared capture (../shared/captures): each analyzes to its end, and
//! what `docs/analyze.md` says it finds there is checked here.
mod common;
use common::*;

use roce_pcap::analyze::{self, Analysis, Connection, Options};

fn analyze_capture(rel: &str) -> Analysis {
    let path = captures_dir().join(rel);
    let a = analyze::analyze_path(path.to_str().unwrap(), Options::default())
        .unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(a.error.is_none(), "{rel}: {:?}", a.error);
    a
}

fn qpns(c: &Connection) -> [Option<u32>; 2] {
    [c.sides[0].qpn, c.sides[1].qpn]
}

fn total(a: &Analysis, f: impl Fn(&analyze::Side) -> u64) -> u64 {
    a.connections
        .iter()
        .flat_map(|c| c.sides.iter())
        .map(f)
        .sum()
}

#[test]
fn every_shared_capture_analyzes_and_none_breaks_a_rule() {
    let mut n = 0;
    for path in all_captures() {
        let rel = path
            .strip_prefix(captures_dir())
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let a = analyze_capture(&rel);
        assert!(a.roce > 0, "{rel}");
        // Every RoCE packet is in a connection or is a datagram.
        let in_conns = total(&a, |s| s.packets);
        assert_eq!(in_conns + a.datagrams + a.untracked, a.roce, "{rel}");
        for c in &a.connections {
            assert!(!c.violated(), "{rel}: {}", analyze::text(&a, false));
        }
        // The soft-RoCE and perftest runs here are clean: no loss, no retransmission.
        assert_eq!(total(&a, |s| s.retransmitted_packets), 0, "{rel}");
        assert_eq!(total(&a, |s| s.naks.iter().sum()), 0, "{rel}");
        // Every report renders.
        assert!(analyze::text(&a, true).contains("connections"));
        assert!(analyze::json_lines(&a, true).lines().count() >= a.connections.len());
        n += 1;
    }
    assert!(n >= 25, "{n} captures");
}

#[test]
fn connections_are_paired_the_way_the_readme_says() {
    // The CM exchange pairs rdma_cm.pcap's two connections (QPs 0x3d/0x3b and 0x3e/0x3c)...
    let a = analyze_capture("linlinw5-rdma_ib_tutorial/rdma_cm.pcap");
    assert_eq!(a.connections.len(), 2);
    for c in &a.connections {
        assert_eq!(c.paired_by, "cm");
    }
    let mut pairs: Vec<_> = a.connections.iter().map(|c| qpns(c)).collect();
    pairs.sort();
    assert_eq!(pairs, [[Some(0x3d), Some(0x3b)], [Some(0x3e), Some(0x3c)]]);
    // ... and rping.pcap's, and the native InfiniBand capture's three (endpoints by LID).
    let a = analyze_capture("linlinw5-rdma_ib_tutorial/rping.pcap");
    assert_eq!((a.connections.len(), a.connections[0].paired_by), (1, "cm"));
    let ib = analyze_capture("rdma-softroce-demo/infiniband.pcap");
    assert_eq!(ib.connections.len(), 3);
    assert!(ib.connections.iter().all(|c| c.paired_by == "cm"));
    assert_eq!(ib.datagrams, 24, "the MADs and the UD traffic");
    // perftest over rxe: both directions use one UDP source port.
    for rel in [
        "linlinw5-rdma_ib_tutorial/rdma_write_bw.pcap",
        "linlinw5-rdma_ib_tutorial/rdma_read_bw.pcap",
        "linlinw5-rdma_ib_tutorial/rdma_atomic_bw.pcap",
        "linlinw5-rdma_ib_tutorial/pingpong_rc.pcap",
    ] {
        let a = analyze_capture(rel);
        assert_eq!(a.connections.len(), 1, "{rel}");
        assert_eq!(a.connections[0].paired_by, "udp_sport", "{rel}");
    }
    // The proxy capture uses other ports each way: paired by the PSNs its responses echo.
    let a = analyze_capture("oferby-proxy/roce.pcap");
    assert_eq!(
        (a.connections.len(), a.connections[0].paired_by),
        (1, "psn")
    );
    // UD only: datagrams, no connection.
    let a = analyze_capture("linlinw5-rdma_ib_tutorial/pingpong_ud.pcap");
    assert_eq!((a.connections.len(), a.datagrams), (0, 10));
}

#[test]
fn what_the_captures_did() {
    // rdma_read_bw: 5 READs of 3,000 bytes, 3 response packets each (MTU 1024), all answered.
    let a = analyze_capture("linlinw5-rdma_ib_tutorial/rdma_read_bw.pcap");
    let c = &a.connections[0];
    let req = c.sides.iter().find(|s| s.requests > 0).unwrap();
    assert_eq!((req.messages[4], req.message_bytes[4]), (5, 15_000));
    assert_eq!(req.read_latency.count(), 5);
    let v = c.verdicts();
    assert!(v
        .iter()
        .any(|v| v.rule == "read_responses_cover_request" && v.result == "ok"));
    // NCCL all-reduce (ring of 3): each node's capture holds its two ring neighbours'
    // connections, 32 messages each.
    for node in 0..3 {
        let a = analyze_capture(&format!(
            "linlinw5-rdma_ib_tutorial/nccl/ring2_node{node}.pcap"
        ));
        assert_eq!(a.connections.len(), 2);
        for c in &a.connections {
            assert_eq!(c.paired_by, "udp_sport");
            assert_eq!(
                c.sides
                    .iter()
                    .map(|s| s.messages.iter().sum::<u64>())
                    .sum::<u64>(),
                32
            );
        }
    }
    // The atomic capture: 5 atomics, each answered (ACK RTT is not measured for atomics).
    let a = analyze_capture("linlinw5-rdma_ib_tutorial/rdma_atomic_bw.pcap");
    let req = a.connections[0]
        .sides
        .iter()
        .find(|s| s.requests > 0)
        .unwrap();
    assert_eq!(req.messages[5], 5);
    // The hex vectors: one CNP among unrelated packets.
    let a = analyze_capture("hexvectors/hexvectors-derived.pcap");
    assert_eq!(total(&a, |s| s.cnps), 1);
    // The ECN lab capture: ECT-capable, nothing marked CE.
    let a = analyze_capture("rdma-roce-lab/roce_capture_read-write-ecn.pcap");
    assert_eq!(total(&a, |s| s.ecn_ce), 0);
    assert_eq!(a.connections[0].paired_by, "cm");
}

/// The JSON lines are written straight from the analysis (serde's `Serialize`, not
/// `serde_json::Value` trees): every line must be byte for byte what its `Value` form writes
/// (keys in sorted order, the numbers formatted alike), as the reports always were, and every
/// connection and event must be there, in order.
#[test]
fn json_lines_are_their_values_byte_for_byte() {
    let (mut lines_checked, mut events) = (0, 0);
    for path in all_captures() {
        let a = analyze::analyze_path(path.to_str().unwrap(), Options::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut out = Vec::new();
        analyze::write_json_lines(&a, true, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut lines = text.lines();
        let mut expect = |v: serde_json::Value| {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("{}: lines missing", path.display()));
            assert_eq!(
                line,
                serde_json::to_string(&v).unwrap(),
                "{}",
                path.display()
            );
            lines_checked += 1;
        };
        for c in &a.connections {
            expect(analyze::connection_json(c));
        }
        let q = a.capture_quality();
        if q.is_notable() {
            expect(analyze::capture_quality_json(&q));
        }
        for f in &a.findings() {
            expect(analyze::finding_json(f));
        }
        for g in &a.agreed {
            expect(analyze::agreed_json(g));
        }
        for p in &a.pfc {
            expect(analyze::pfc_json(p));
        }
        for c in &a.connections {
            for e in &c.events {
                expect(analyze::event_json(e));
                events += 1;
            }
        }
        assert_eq!(lines.next(), None, "{}: lines left over", path.display());
    }
    assert!(
        lines_checked >= 40 && events >= 1,
        "{lines_checked} lines, {events} events"
    );
}

/// The analysis of `bytes` by one analyzer given every record in turn
/// ([`analyze::analyze_in_turn`]), and by [`analyze::analyze`] (its packets split over
/// threads by host pair).
fn sequential_and_sharded(bytes: &[u8], opts: Options) -> (Analysis, Analysis) {
    let mut r = roce_pcap::CaptureReader::new(bytes, "capture").unwrap();
    let one = analyze::analyze_in_turn(&mut r, opts);
    assert!(one.error.is_none(), "{:?}", one.error);
    let mut r = roce_pcap::CaptureReader::new(bytes, "capture").unwrap();
    (one, analyze::analyze(&mut r, opts))
}

/// Every report of `a` and `b` is the same, byte for byte.
fn same_reports(what: &str, a: &Analysis, b: &Analysis) {
    assert_eq!(a.packets, b.packets, "{what}");
    assert_eq!(
        analyze::json_lines(a, true),
        analyze::json_lines(b, true),
        "{what}: JSON"
    );
    assert_eq!(
        analyze::text(a, true),
        analyze::text(b, true),
        "{what}: text"
    );
}

#[test]
fn analysis_split_by_host_pair_is_the_one_threads_analysis() {
    for path in all_captures() {
        let bytes = std::fs::read(&path).unwrap();
        let (one, split) = sequential_and_sharded(&bytes, Options::default());
        same_reports(&path.display().to_string(), &one, &split);
    }
    // 400 connections (400 host pairs: both threads have some), every other request lost,
    // and every stall reported at the end: more events than are kept, so that which ones
    // are kept (the first in capture order, then the stalls at the end in the order of
    // their directions) shows.
    let mut lossy = Vec::new();
    roce_pcap::synth::write_rc_capture(&mut lossy, 300_000, 400, 2).unwrap();
    let opts = Options {
        stall_ns: 1,
        ..Options::default()
    };
    let (one, split) = sequential_and_sharded(&lossy, opts);
    let kept: usize = split.connections.iter().map(|c| c.events.len()).sum();
    let dropped: u64 = split.connections.iter().map(|c| c.events_dropped).sum();
    assert_eq!(kept, analyze::MAX_EVENTS_TOTAL, "{dropped} dropped");
    assert!(dropped > 50_000, "{dropped} dropped");
    same_reports("300,000 packets of 400 lossy connections", &one, &split);
    // Hostile PSNs on one connection.
    let mut jumps = Vec::new();
    roce_pcap::synth::write_psn_jumps_capture(&mut jumps, 200_000).unwrap();
    let (one, split) = sequential_and_sharded(&jumps, Options::default());
    same_reports("PSN jumps", &one, &split);
}
