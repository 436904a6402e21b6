//! Every output a command writes is checked: a capture, a report on stdout, an HTML page or a
//! trace that cannot be written (here: `/dev/full`, a device that refuses every write) is one
//! error line and a non-zero exit, never "wrote FILE" with exit 0.

mod common;

use std::process::{Command, Stdio};

use common::{full_device, ips, roce, BIN};

/// The full device's path (`/dev/full`, or one the tests made: `common::full_device`).
fn full() -> String {
    full_device().to_string_lossy().into_owned()
}

/// Exit status and stderr of `roce args` with its stdout written to the full device.
fn to_full_stdout(args: &[&str]) -> (i32, String) {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open(full_device())
        .expect("the full device");
    let out = Command::new(BIN)
        .args(args)
        .stdout(Stdio::from(full))
        .output()
        .expect("run roce");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One error line, naming what could not be written, and no panic.
fn one_line_naming(err: &str, what: &str) {
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("roce ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(what), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_capture_that_cannot_be_written_fails_the_run() {
    let full = full();
    let full = full.as_str();
    let (c, s) = ips(141);
    let (code, out, err) = roce(&[
        "loopback",
        "--count",
        "20",
        "--qps",
        "1",
        "--link",
        "udp",
        "--client-ip",
        &c,
        "--server-ip",
        &s,
        "--pcap",
        full,
    ]);
    assert_ne!(code, 0, "{out}{err}");
    one_line_naming(&err, &format!("--pcap {full}"));

    let (code, out, err) = roce(&[
        "sim",
        "fabric",
        "--duration",
        "1",
        "--hosts",
        "4",
        "--pcap",
        full,
    ]);
    assert_ne!(code, 0, "{out}{err}");
    one_line_naming(&err, &format!("--pcap {full}"));
    assert!(!err.contains(&format!("wrote {full}")), "{err}");

    // A capture at a host's NIC too.
    let at = format!("10.0.0.1={full}");
    let (code, out, err) = roce(&[
        "sim",
        "fabric",
        "--duration",
        "1",
        "--hosts",
        "4",
        "--pcap-at",
        &at,
    ]);
    assert_ne!(code, 0, "{out}{err}");
    one_line_naming(&err, &format!("--pcap-at {full}"));
    assert!(!err.contains(&format!("wrote {full}")), "{err}");
}

#[test]
fn a_report_that_cannot_reach_stdout_fails_the_run() {
    let (c, s) = ips(142);
    let (code, err) = to_full_stdout(&[
        "loopback",
        "--count",
        "20",
        "--qps",
        "1",
        "--link",
        "udp",
        "--json",
        "--client-ip",
        &c,
        "--server-ip",
        &s,
    ]);
    assert_ne!(code, 0, "{err}");
    one_line_naming(&err, "stdout");

    let (code, err) = to_full_stdout(&["sim", "congestion", "--duration", "5"]);
    assert_ne!(code, 0, "{err}");
    one_line_naming(&err, "stdout");
}

#[test]
fn analysis_pages_that_cannot_be_written_fail() {
    let dir = std::env::temp_dir().join(format!("roce-outputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("small.pcap");
    let (code, out, err) = roce(&[
        "gen-capture",
        "--rc",
        "2",
        "--packets",
        "200",
        pcap.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let full = full();
    for flag in ["--html", "--trace"] {
        let (code, out, err) = roce(&["analyze", pcap.to_str().unwrap(), flag, &full]);
        assert_ne!(code, 0, "{flag}: {out}{err}");
        one_line_naming(&err, &full);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_decoded_table_or_listing_that_cannot_be_written_fails_the_run() {
    let cap = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/captures/linlinw5-rdma_ib_tutorial/rdma_write_bw.pcap"
    );
    let full = full();
    for format in ["parquet", "json", "summary"] {
        let (code, _, err) = roce(&["decode", "--format", format, "-o", &full, cap]);
        assert_eq!(code, 1, "--format {format}: {err}");
        one_line_naming(&err, &format!("writing {full}"));
    }
}
