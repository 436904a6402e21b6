//! Every output a command writes is checked: a capture, a report on stdout, an HTML page or a
//! trace that cannot be written (here: `/dev/full`, a device that refuses every write) is one
//! error line and a non-zero exit, never "wrote FILE" with exit 0.
//!
//! And no output destroys an input, nor is a failed or interrupted run's output left half
//! written: an output that is an input (by name, through a symlink or a hard link) or another
//! output is refused in one line before anything is written; every output is written beside
//! its place and renamed over it only once whole.

mod common;

use std::path::{Path, PathBuf};
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

/// `roce sim fabric` of 4 hosts for 1 ms with `extra` flags.
fn small_fabric(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["sim", "fabric", "--duration", "1", "--hosts", "4"];
    args.extend_from_slice(extra);
    roce(&args)
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

    let (code, out, err) = small_fabric(&["--pcap", full]);
    assert_ne!(code, 0, "{out}{err}");
    one_line_naming(&err, &format!("--pcap {full}"));
    assert!(!err.contains(&format!("wrote {full}")), "{err}");

    // A capture at a host's NIC too.
    let at = format!("10.0.0.1={full}");
    let (code, out, err) = small_fabric(&["--pcap-at", &at]);
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
    // perf's figures as they come, and over perftest's exchange its table at the end.
    let (c, s) = ips(147);
    for extra in [&[][..], &["--perftest"]] {
        let mut args = vec![
            "perf",
            "write",
            "-n",
            "200",
            "--client-ip",
            &c,
            "--server-ip",
            &s,
        ];
        args.extend_from_slice(extra);
        let (code, err) = to_full_stdout(&args);
        assert_ne!(code, 0, "{extra:?}: {err}");
        one_line_naming(&err, "stdout");
    }
}

#[test]
fn analysis_pages_that_cannot_be_written_fail() {
    let dir = scratch("pages");
    let pcap = capture(&dir, 200);
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

/// A directory of the test's own, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-outputs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A capture of `packets` packets of two RC connections in `dir` (`in.pcap`).
fn capture(dir: &Path, packets: u32) -> PathBuf {
    let p = dir.join("in.pcap");
    let (code, out, err) = roce(&[
        "gen-capture",
        "--rc",
        "2",
        "--packets",
        &packets.to_string(),
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    p
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let dir = scratch("input");
    let cap = capture(&dir, 20_000);
    let before = std::fs::read(&cap).unwrap();
    let link = dir.join("link.pcap");
    std::os::unix::fs::symlink(&cap, &link).unwrap();
    let hard = dir.join("hard.pcap");
    std::fs::hard_link(&cap, &hard).unwrap();
    let workload = dir.join("websearch.cdf");
    let cdf = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/docs/workloads/websearch.cdf"
    ))
    .unwrap();
    std::fs::write(&workload, &cdf).unwrap();
    let c = cap.to_str().unwrap();
    let (l, h, w) = (
        link.to_str().unwrap(),
        hard.to_str().unwrap(),
        workload.to_str().unwrap(),
    );
    let dotted = format!("{}/./in.pcap", dir.display());
    let runs: Vec<Vec<&str>> = vec![
        // The case reported: the capture truncated before it was read.
        vec!["decode", c, "--format", "parquet", "-o", c],
        vec!["decode", c, "--json", "-o", c],
        vec!["decode", c, "-o", l],
        vec!["decode", c, "--format", "parquet", "-o", h],
        vec!["decode", c, "-o", &dotted],
        vec!["analyze", c, "--html", c],
        vec!["analyze", c, "--trace", l],
        vec!["analyze", c, h, "--html", h],
        vec!["gen-capture", "--cm-from", c, "--packets", "10", c],
        vec![
            "sim",
            "fabric",
            "--duration",
            "1",
            "--hosts",
            "4",
            "--workload",
            w,
            "--pcap",
            w,
        ],
    ];
    for args in &runs {
        let (code, out, err) = roce(args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        one_line_naming(&err, "refusing to write over it");
        assert_eq!(
            std::fs::read(&cap).unwrap(),
            before,
            "{args:?} changed the capture"
        );
    }
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&workload).unwrap(), cdf);
    // Nothing was left beside them.
    assert_eq!(
        names(&dir),
        ["hard.pcap", "in.pcap", "link.pcap", "websearch.cdf"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_outputs_in_one_file_are_refused() {
    let dir = scratch("twice");
    let cap = capture(&dir, 20_000);
    let out = dir.join("out.pcap");
    std::fs::write(&out, b"old").unwrap();
    let link = dir.join("link.pcap");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let (a, b) = (
        format!("10.0.0.1={}", out.display()),
        format!("10.0.0.2={}", link.display()),
    );
    let (code, o, err) = small_fabric(&["--pcap-at", &a, "--pcap-at", &b]);
    assert_eq!(code, 1, "{o}{err}");
    one_line_naming(&err, "the same file");
    // A page and a trace into one file not yet there, named two ways.
    let page = dir.join("page.html");
    let again = format!("{}/./page.html", dir.display());
    let (code, o, err) = roce(&[
        "analyze",
        cap.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
        "--trace",
        &again,
    ]);
    assert_eq!(code, 1, "{o}{err}");
    one_line_naming(&err, "the same file");
    assert_eq!(std::fs::read(&out).unwrap(), b"old");
    assert_eq!(names(&dir), ["in.pcap", "link.pcap", "out.pcap"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `roce ARGS` under a file-size limit of `kib` KiB; `ignore` keeps the process alive past
/// it (writes then fail with EFBIG) instead of letting SIGXFSZ kill it mid-write.
fn limited(kib: u32, ignore: bool, args: &[&str]) -> (Option<i32>, String) {
    let trap = if ignore { "trap '' XFSZ; " } else { "" };
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(r#"{trap}ulimit -f {kib}; exec "$0" "$@""#))
        .arg(BIN)
        .args(args)
        .output()
        .expect("run bash");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_failed_or_killed_run_leaves_the_old_file_whole() {
    let dir = scratch("killed");
    let cap = capture(&dir, 20_000);
    let c = cap.to_str().unwrap();
    for format in ["json", "parquet"] {
        let out = dir.join(format!("out.{format}"));
        let o = out.to_str().unwrap();
        std::fs::write(&out, b"the old file").unwrap();
        // Killed by SIGXFSZ at 16 KiB, mid-file: the old file stays as it was.
        let (code, err) = limited(16, false, &["decode", c, "--format", format, "-o", o]);
        assert_eq!(code, None, "--format {format}: not killed: {err}");
        assert_eq!(
            std::fs::read(&out).unwrap(),
            b"the old file",
            "--format {format}"
        );
        // A write that fails: one line, exit 1, the old file, and no temporary file left.
        let (code, err) = limited(16, true, &["decode", c, "--format", format, "-o", o]);
        assert_eq!(code, Some(1), "--format {format}: {err}");
        one_line_naming(&err, &format!("writing {o}"));
        assert_eq!(
            std::fs::read(&out).unwrap(),
            b"the old file",
            "--format {format}"
        );
        // The run that can write replaces it whole.
        let (code, _, err) = roce(&["decode", c, "--format", format, "-o", o]);
        assert_eq!(code, 0, "--format {format}: {err}");
        assert!(std::fs::metadata(&out).unwrap().len() > 16 << 10);
    }
    // The killed runs' temporary files are the only other names, each hidden (dot) and
    // marked as temporary; the failed runs left none.
    let left: Vec<String> = names(&dir)
        .into_iter()
        .filter(|n| !["in.pcap", "out.json", "out.parquet"].contains(&n.as_str()))
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left.iter()
            .all(|n| n.starts_with(".out.") && n.ends_with(".tmp")),
        "{left:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
