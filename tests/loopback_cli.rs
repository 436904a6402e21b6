//! `roce loopback`, `roce server` and `roce client` as a user runs them: real processes, real
//! UDP sockets on loopback. Each test uses its own loopback addresses (127.0.<n>.1 / .2) so the
//! tests can run in parallel.
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{ips, BIN};

/// The live-capture test holds this exclusively: a capture socket that falls behind the
/// traffic of the other tests drops packets, which would hide the ones it looks for.
static TRAFFIC: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn roce(args: &[&str]) -> (i32, String, String) {
    let _shared = TRAFFIC.read().unwrap_or_else(|e| e.into_inner());
    common::roce(args)
}

fn loopback(n: u8, extra: &[&str]) -> (i32, String, String) {
    let (c, s) = ips(n);
    let mut args = vec!["loopback", "--client-ip", &c, "--server-ip", &s];
    args.extend_from_slice(extra);
    roce(&args)
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn default_mix_verifies_and_reports_json() {
    let (code, out, err) = loopback(20, &["--count", "60", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true);
    for key in [
        "ops",
        "bytes",
        "seconds",
        "gbps",
        "msgs_per_sec",
        "retransmitted_packets",
        "naks",
        "rnr_naks",
        "cnps_sent",
        "cnps_received",
        "drops",
        "verified_bytes",
    ] {
        assert!(r.get(key).is_some(), "missing {key} in {out}");
    }
    let ops: u64 = r["ops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(ops, 4 * 60);
    for kind in [
        "send",
        "send_imm",
        "write",
        "write_imm",
        "read",
        "cas",
        "faa",
    ] {
        assert!(r["ops"][kind].as_u64().unwrap() > 0, "no {kind}: {out}");
    }
    assert!(r["verified_bytes"].as_u64().unwrap() > 0);
    // A clean run drops nothing: in particular responses leave in PSN order, so no ACK arrives
    // after a READ response that already acknowledged it (a stale response).
    for (reason, n) in r["drops"].as_object().unwrap() {
        assert_eq!(n.as_u64(), Some(0), "{reason} drops in a clean run: {out}");
    }
    assert_eq!(r["retransmitted_packets"].as_u64(), Some(0), "{out}");
}

#[test]
fn impaired_run_still_verifies() {
    let (code, out, err) = loopback(
        21,
        &[
            "--count",
            "40",
            "--size",
            "0-200K",
            "--loss",
            "0.05",
            "--reorder",
            "0.05",
            "--dup",
            "0.02",
            "--corrupt",
            "0.01",
            "--timeout",
            "12",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true);
    assert!(r["retransmitted_packets"].as_u64().unwrap() > 0, "{out}");
    assert!(r["drops"]["bad_icrc"].as_u64().unwrap() > 0, "{out}");
    assert!(r["impairment"]["lost"].as_u64().unwrap() > 0, "{out}");
}

#[test]
fn ce_marks_make_cnps_and_cut_the_rate() {
    let (code, out, err) = loopback(
        22,
        &["--count", "40", "--ce", "0.05", "--cc", "dcqcn", "--json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert!(
        r["cnps_sent"].as_u64().unwrap() > 0 && r["cnps_received"].as_u64().unwrap() > 0,
        "{out}"
    );
    // The server's notification point answers the marked requests, the client's DCQCN
    // reaction point cuts its rate below the 100 Gb/s line rate.
    let (client, server) = (&r["client"], &r["server"]);
    assert!(server["ce_received"].as_u64().unwrap() > 0, "{out}");
    assert!(server["cnps_sent"].as_u64().unwrap() > 0, "{out}");
    assert!(client["cnps_received"].as_u64().unwrap() > 0, "{out}");
    assert!(client["rate_cuts"].as_u64().unwrap() > 0, "{out}");
    assert!(r["rate_cuts"].as_u64().unwrap() > 0, "{out}");
    let min = r["min_rate_bps"].as_u64().unwrap();
    assert!(min > 0 && min < 100_000_000_000, "{out}");
    // The text report says so too.
    let (code, out, err) = loopback(22, &["--count", "40", "--ce", "0.05", "--cc", "dcqcn"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("CNPs            sent "), "{out}");
    assert!(out.contains("rate cut        "), "{out}");
}

#[test]
fn ipv6_loopback_verifies() {
    // ::1 is shared by every IPv6 test; only this one uses it.
    let dir = std::env::temp_dir().join(format!("roce-ipv6-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("v6.pcap");
    let args = ["loopback", "--ipv6", "--count", "30", "--pcap"];
    let (code, out, err) = roce(&[&args[..], &[file.to_str().unwrap()]].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("OK"), "{out}");
    // It really ran over IPv6: every datagram of the client's capture is ::1 to ::1, between
    // UDP ports 4791 and 4792, with a valid ICRC (the IPv6 pseudo-header).
    let (code, dec, err) = roce(&["decode", "--check", "--json", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let frames: Vec<serde_json::Value> = dec.lines().map(json).collect();
    assert!(frames.len() > 100, "{err}");
    for f in &frames {
        let (src, dst) = (f["src"].as_str().unwrap(), f["dst"].as_str().unwrap());
        assert!(
            src.starts_with("[::1]:") && dst.starts_with("[::1]:"),
            "not IPv6 loopback: {f}"
        );
        assert_eq!(f["icrc_ok"], true, "{f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn server_and_client_as_two_processes() {
    let _shared = TRAFFIC.read().unwrap_or_else(|e| e.into_inner());
    let (c, s) = ips(23);
    let mut server = Command::new(BIN)
        .args(["server", "--bind", &s, "--port", "21023"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (code, out, err) = common::roce(&[
        "client",
        &format!("{s}:21023"),
        "--bind",
        &c,
        "--count",
        "40",
        "--json",
    ]);
    let status = server.wait().unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(status.success(), "server failed");
    assert_eq!(json(&out)["ok"], true);
}

#[test]
fn killing_the_server_fails_the_client_quickly() {
    let _shared = TRAFFIC.read().unwrap_or_else(|e| e.into_inner());
    let (c, s) = ips(24);
    let mut server = Command::new(BIN)
        .args(["server", "--bind", &s, "--port", "21024"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Command::new(BIN)
        .args([
            "client",
            &format!("{s}:21024"),
            "--bind",
            &c,
            "--count",
            "100000",
            "--size",
            "64K-1M",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    server.kill().unwrap();
    let _ = server.wait();
    let killed = Instant::now();
    let status = loop {
        if let Some(st) = client.try_wait().unwrap() {
            break st;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "client still running 10 s after the server died"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    client
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success());
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    assert!(err.contains("server"), "{err}");
}

#[test]
fn unreachable_server_is_one_line_and_nonzero() {
    let started = Instant::now();
    let (code, out, err) = roce(&["client", "127.0.25.2:1", "--bind", "127.0.25.1"]);
    assert_ne!(code, 0, "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot reach server"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn port_in_use_is_one_line_and_nonzero() {
    let (_, s) = ips(26);
    let _hold = std::net::UdpSocket::bind(format!("{s}:4791")).unwrap();
    let (code, out, err) = loopback(26, &["--count", "3"]);
    assert_ne!(code, 0, "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("4791") && err.contains("in use"), "{err}");
}

#[test]
fn bad_flags_are_refused() {
    for args in [
        vec!["--mtu", "1000"],
        vec!["--ops", "teleport"],
        vec!["--size", "2M-1M"],
        vec!["--loss", "1.5"],
        vec!["--cc", "bbr"],
    ] {
        let (code, out, err) = loopback(27, &args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn pcap_tap_decodes_with_valid_icrcs() {
    let dir = std::env::temp_dir().join(format!("roce-tap-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("run.pcap");
    let (code, out, err) = loopback(
        28,
        &[
            "--count",
            "30",
            "--ce",
            "0.05",
            "--cc",
            "dcqcn",
            "--pcap",
            file.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let report = json(&out);
    let (code, out, err) = roce(&["decode", "--check", "--json", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert!(lines.len() > 100, "{err}");
    assert!(lines.iter().all(|l| l["icrc_ok"] == true));
    // The capture is the client's: every CNP it received (and sent) is in it, each with
    // BECN set and a valid ICRC.
    let cnps: Vec<_> = lines
        .iter()
        .filter(|l| l["bth"]["opcode_name"] == "CNP")
        .collect();
    let c = &report["client"];
    let want = c["cnps_received"].as_u64().unwrap() + c["cnps_sent"].as_u64().unwrap();
    assert!(want > 0, "{report}");
    assert_eq!(cnps.len() as u64, want, "the CNPs are in the capture");
    assert!(cnps
        .iter()
        .all(|l| l["bth"]["becn"] == true && l["icrc_ok"] == true));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A live capture on `lo` during a run (as root, which CI is): every RoCE packet of the run
/// decodes with a valid ICRC, i.e. the ICRC covers the IPv4 header Linux really wrote and the
/// UDP source port the packet really left from. tcpdump captures with a kernel filter on the
/// run's addresses, so other traffic on `lo` cannot crowd the run's packets out; the capture
/// is then decoded by `roce decode --check`.
#[test]
fn live_capture_of_a_run_verifies() {
    if !is_root() {
        eprintln!("skipped: live capture needs root (CI runs as root)");
        return;
    }
    let tcpdump = ["/usr/bin/tcpdump", "/usr/sbin/tcpdump"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(tcpdump) = tcpdump else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install tcpdump (.ci/run does)"
        );
        eprintln!("skipped: tcpdump is not installed");
        return;
    };
    let _alone = TRAFFIC.write().unwrap_or_else(|e| e.into_inner());
    let (c, s) = ips(29);
    let dir = std::env::temp_dir().join(format!("roce-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lo.pcap");
    let mut cap = Command::new(tcpdump)
        .args([
            "-i",
            "lo",
            "-U",
            "-s",
            "262144",
            "-w",
            file.to_str().unwrap(),
            "udp and host",
            &c,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // tcpdump says "listening on lo" once its filter is attached.
    let mut err = cap.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("listening on") {
        assert!(
            err.read(&mut byte).unwrap() == 1,
            "tcpdump failed: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.push(byte[0]);
    }
    let (code, out, err_text) = common::roce(&[
        "loopback",
        "--client-ip",
        &c,
        "--server-ip",
        &s,
        "--count",
        "30",
        "--size",
        "0-64K",
    ]);
    assert_eq!(code, 0, "{out}{err_text}");
    std::thread::sleep(Duration::from_millis(300));
    // SIGTERM: tcpdump flushes and exits.
    let _ = Command::new("kill").arg(cap.id().to_string()).status();
    let _ = cap.wait();
    let (code, out, err_text) =
        common::roce(&["decode", "--check", "--json", file.to_str().unwrap()]);
    assert_eq!(code, 0, "decode --check failed: {err_text}");
    let packets: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert!(
        packets.len() > 100,
        "only {} packets captured: {err_text}",
        packets.len()
    );
    assert!(packets.iter().all(|l| l["icrc_ok"] == true));
    assert!(packets.iter().any(|l| l["src"]
        .as_str()
        .is_some_and(|a| a.starts_with(&format!("{s}:")))));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
