//! `roce analyze` on captures that dropped packets: packets are taken out of a capture of
//! a healthy `roce loopback` run (every operation of the mix, 4 QPs), as a busy tcpdump
//! drops them, and the analysis must account for every one it can know of (the responses
//! that acknowledge or answer it) and judge no rule on the evidence it lost: no rule
//! violated, where before one missing packet made the responder look as if it acknowledged
//! what it never received, or poisoned every later READ's checks.
use std::path::{Path, PathBuf};
use std::process::Command;

use roce_pcap::analyze::{self, Analysis, Options};
use roce_pcap::{CaptureReader, PcapWriter};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-capture-quality-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The capture of a healthy loopback run (made once per test binary).
fn healthy() -> &'static Path {
    static PCAP: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PCAP.get_or_init(|| {
        let pcap = tmp("healthy.pcap");
        let o = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args([
                "loopback", "--seed", "5", "--size", "0-64K", "--count", "150",
            ])
            .arg("--pcap")
            .arg(&pcap)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        pcap
    })
}

/// What a dropped packet was, by its BTH opcode.
#[derive(Debug, Default)]
struct Dropped {
    requests: u64,
    read_responses: u64,
    atomic_acks: u64,
    /// Plain ACKs: coalesced by design (one ACK covers many requests), so a missing one
    /// leaves no trace to infer it by.
    acks: u64,
}

/// `healthy()` without a fraction `p` of its RoCE packets (requests only, or any but CNPs),
/// chosen by `seed`; the capture left and what was dropped.
fn drop_packets(p: f64, requests_only: bool, seed: u64) -> (Vec<u8>, Dropped) {
    let bytes = std::fs::read(healthy()).unwrap();
    let mut r = CaptureReader::new(&bytes[..], "healthy").unwrap();
    let mut w = PcapWriter::new(Vec::new(), roce_pcap::link::ETHERNET, true, 262_144).unwrap();
    let mut dropped = Dropped::default();
    // A QP's first request is kept: a capture that missed it looks like one that began
    // after it (nothing before it says it was sent).
    let mut started = std::collections::HashSet::new();
    while let Some(rec) = r.next_record().unwrap() {
        let d = rec.data;
        // Ethernet, IPv4 without options, UDP to 4791: the BTH's opcode at 42.
        let roce = d.len() > 42
            && d[12..14] == [0x08, 0x00]
            && d[14] == 0x45
            && d[23] == 17
            && d[36..38] == [0x12, 0xb7];
        if roce && d[42] != 0x81 {
            let op = d[42] & 0x1f;
            let response = (0x0d..=0x12).contains(&op);
            let first = !response && started.insert(d[47..50].to_vec());
            // Chosen by the packet's opcode, QPN and PSN (not by its place in the capture,
            // which the run's timing moves): the same packets on every run.
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for &b in &d[42..54] {
                x = (x ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
            x ^= x >> 29;
            if !first && (!response || !requests_only) && (x % 1_000_000) as f64 / 1e6 < p {
                match op {
                    0x0d..=0x10 => dropped.read_responses += 1,
                    0x11 => dropped.acks += 1,
                    0x12 => dropped.atomic_acks += 1,
                    _ => dropped.requests += 1,
                }
                continue;
            }
        }
        w.write_packet(rec.ts, rec.data, rec.orig_len).unwrap();
    }
    w.flush().unwrap();
    (w.into_inner(), dropped)
}

fn analysis(bytes: &[u8]) -> Analysis {
    let mut r = CaptureReader::new(bytes, "dropped").unwrap();
    analyze::analyze(&mut r, Options::default())
}

/// No rule violated, and the rules that lost their evidence say so.
fn nothing_violated(a: &Analysis, ctx: &str) {
    for c in &a.connections {
        for v in c.verdicts() {
            assert_ne!(v.result, "violated", "{ctx}: {v:?}");
        }
    }
}

#[test]
fn the_healthy_capture_misses_nothing() {
    let bytes = std::fs::read(healthy()).unwrap();
    let a = analysis(&bytes);
    assert_eq!(a.connections.len(), 4);
    let q = a.capture_quality();
    assert_eq!(
        (q.missed, q.unseen_read_responses, q.connections),
        (0, 0, 0)
    );
    assert!(!q.is_notable());
    assert!(!analyze::text(&a, false).contains("capture quality"));
    nothing_violated(&a, "healthy");
}

#[test]
fn every_request_the_capture_dropped_is_accounted_for() {
    for seed in 1..=3u64 {
        for p in [0.01, 0.05] {
            let (bytes, dropped) = drop_packets(p, true, seed);
            let ctx = format!("seed {seed}, {p} of the requests: dropped {dropped:?}");
            assert!(dropped.requests > 20, "{ctx}");
            let a = analysis(&bytes);
            let q = a.capture_quality();
            assert_eq!(q.missed, dropped.requests, "{ctx}");
            assert_eq!(q.unseen_read_responses, 0, "{ctx}");
            let never: u64 = a
                .connections
                .iter()
                .flat_map(|c| &c.sides)
                .map(|s| s.never_seen_psns)
                .sum();
            assert_eq!(never, 0, "{ctx}: every gap was explained");
            nothing_violated(&a, &ctx);
            let text = analyze::text(&a, false);
            assert!(
                text.contains(&format!("capture quality: {} packets", dropped.requests)),
                "{ctx}: {text}"
            );
            // The hole rule was not judged where its evidence was lost.
            assert!(
                a.connections.iter().any(|c| c
                    .verdicts()
                    .iter()
                    .any(|v| v.rule == "no_ack_past_hole" && v.detail.contains("not judged"))),
                "{ctx}"
            );
        }
    }
}

#[test]
fn every_packet_the_capture_dropped_is_accounted_for_but_coalesced_acks() {
    for seed in 1..=3u64 {
        let (bytes, dropped) = drop_packets(0.01, false, seed);
        let ctx = format!("seed {seed}, 1% of every kind: dropped {dropped:?}");
        assert!(dropped.read_responses > 2 && dropped.requests > 10, "{ctx}");
        let a = analysis(&bytes);
        let q = a.capture_quality();
        assert_eq!(
            q.missed + q.unseen_read_responses,
            dropped.requests + dropped.read_responses + dropped.atomic_acks,
            "{ctx}: {q:?}"
        );
        nothing_violated(&a, &ctx);
        // The JSON says it too, on a line of its own.
        let json = analyze::json_lines(&a, false);
        let line = json
            .lines()
            .find(|l| l.contains("\"capture_quality\""))
            .unwrap_or_else(|| panic!("{ctx}: no capture_quality line"));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["missed_by_capture"], q.missed, "{ctx}");
        assert_eq!(v["unseen_read_responses"], q.unseen_read_responses, "{ctx}");
    }
}
