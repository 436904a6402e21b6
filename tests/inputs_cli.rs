//! Every file and every size a command reads is bounded before it is used: a `--workload`
//! file is refused at its limit (a device that never ends included), the simulators' lengths
//! and ratios are checked whatever the topology, and a refusal states the figures it refused
//! without rounding them away.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

/// `roce args` with a deadline: exit code, stderr, and how long it ran. A run still going
/// after `limit` is killed and fails the test (the unbounded read it stands for).
fn bounded(args: &[&str], limit: Duration) -> (i32, String, Duration) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start roce");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("roce {} still running after {limit:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    (status.code().unwrap_or(-1), err, t0.elapsed())
}

/// One `roce ...:` error line containing `what`, no backtrace.
fn refused(code: i32, err: &str, what: &str) {
    assert_ne!(code, 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("roce ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(what), "{err}");
}

#[test]
fn an_endless_workload_file_is_refused_at_its_bound() {
    // /dev/zero never ends: the read stops at the bound, long before memory does.
    let (code, err, took) = bounded(
        &[
            "sim",
            "fabric",
            "--workload",
            "/dev/zero",
            "--duration",
            "1",
        ],
        Duration::from_secs(20),
    );
    refused(code, &err, "--workload /dev/zero: longer than");
    assert!(took < Duration::from_secs(20));
    // A regular file over the bound is refused the same way, before it is parsed.
    let dir = std::env::temp_dir().join(format!("roce-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let big = dir.join("big.cdf");
    let line = "1000 50\n".repeat(200_000);
    std::fs::write(&big, &line).unwrap();
    let (code, err, _) = bounded(
        &["sim", "fabric", "--workload", big.to_str().unwrap()],
        Duration::from_secs(20),
    );
    refused(code, &err, "longer than");
    // A file that is not text says so.
    let bin = dir.join("bin.cdf");
    std::fs::write(&bin, [0xff, 0xfe, 0x00, 0x80]).unwrap();
    let (code, err, _) = bounded(
        &["sim", "fabric", "--workload", bin.to_str().unwrap()],
        Duration::from_secs(20),
    );
    refused(code, &err, "not text");
    // Within the bound, a CDF file runs.
    let ok = dir.join("ok.cdf");
    std::fs::write(&ok, "0 0\n1000 50\n100000 100\n").unwrap();
    let (code, err, _) = bounded(
        &[
            "sim",
            "fabric",
            "--workload",
            ok.to_str().unwrap(),
            "--duration",
            "2",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_congestion_suite_has_a_longest_run() {
    let (code, err, _) = bounded(
        &["sim", "congestion", "--duration", "100000000"],
        Duration::from_secs(20),
    );
    refused(code, &err, "--duration must be 1..=1000 ms");
    let (code, err, _) = bounded(
        &["sim", "congestion", "--duration", "0"],
        Duration::from_secs(20),
    );
    refused(code, &err, "--duration");
}

#[test]
fn oversubscription_is_checked_on_every_topology() {
    for (topology, r, what) in [
        ("switch", "0", "--oversub 0: must be 0.25..=64"),
        ("switch", "NaN", "--oversub NaN: must be 0.25..=64"),
        ("leaf-spine", "0", "--oversub 0: must be 0.25..=64"),
        ("leaf-spine", "inf", "--oversub inf: must be 0.25..=64"),
        ("fat-tree:4", "-2", "--oversub -2: must be 0.25..=64"),
        // A ratio the one-switch model has no uplinks for is refused, not ignored.
        ("switch", "2", "--oversub sets a fabric's uplinks"),
    ] {
        let (code, err, _) = bounded(
            &[
                "sim",
                "fabric",
                "--topology",
                topology,
                &format!("--oversub={r}"),
                "--duration",
                "1",
            ],
            Duration::from_secs(20),
        );
        refused(code, &err, what);
    }
}

#[test]
fn a_refused_pool_states_both_sizes_exactly() {
    let (c, s) = common::ips(143);
    let mut server = Command::new(BIN)
        .args([
            "kv",
            "--server",
            "--bind",
            &s,
            "--port",
            "21143",
            "--max-pool",
            "1000",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    std::thread::sleep(Duration::from_millis(300));
    let (code, err, _) = bounded(
        &[
            "kv",
            "--client",
            &format!("{s}:21143"),
            "--bind",
            &c,
            "--pool",
            "3M",
            "--layers",
            "1",
            "--tokens",
            "16",
        ],
        Duration::from_secs(30),
    );
    let _ = server.kill();
    let _ = server.wait();
    assert_ne!(code, 0, "{err}");
    // Not "a pool of 3 MiB; at most 0 MiB".
    assert!(
        err.contains("asked for a pool of 3 MiB; this server allows at most 1000 bytes"),
        "{err}"
    );
}

/// `--allow` on a command that accepts no peer (a capture, a simulation, a client) would be
/// ignored: it is refused in one line instead, and a server still takes it.
#[test]
fn allow_is_refused_where_no_peer_connects() {
    for args in [
        &["decode", "--allow", "10.0.0.1", "x.pcap"][..],
        &["analyze", "--allow", "10.0.0.0/8", "x.pcap"],
        &["sim", "--allow", "10.0.0.1", "fabric"],
        &["client", "--allow", "10.0.0.1", "127.0.0.1"],
    ] {
        let (code, err, _) = bounded(args, Duration::from_secs(20));
        assert_ne!(code, 0, "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(
            lines[0].contains("--allow") && lines[0].contains("accepts none"),
            "{args:?}: {err}"
        );
    }
    // A server's `--help` with --allow parses (the flag is the server's).
    let (code, err, _) = bounded(
        &["server", "--allow", "10.0.0.1", "--help"],
        Duration::from_secs(20),
    );
    assert_eq!(code, 0, "{err}");
}
