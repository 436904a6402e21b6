//! No output destroys an input, and no failed or interrupted run leaves half a file: an output
//! that is an input (by name, through a symlink or a hard link) or another output is refused
//! in one line before anything is written; every output is written beside its place and
//! renamed over it only once whole.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{roce, BIN};

/// A directory of the test's own, emptied first.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-overwrite-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small capture of two RC connections in `dir`.
fn capture(dir: &Path) -> PathBuf {
    let p = dir.join("in.pcap");
    let (code, out, err) = roce(&[
        "gen-capture",
        "--rc",
        "2",
        "--packets",
        "20000",
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    p
}

/// Exactly one error line, containing `what`, and no panic.
fn one_line(err: &str, what: &str) {
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("roce ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(what), "{err}");
    assert!(!err.contains("panicked"), "{err}");
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
    let cap = capture(&dir);
    let before = std::fs::read(&cap).unwrap();
    let link = dir.join("link.pcap");
    std::os::unix::fs::symlink(&cap, &link).unwrap();
    let hard = dir.join("hard.pcap");
    std::fs::hard_link(&cap, &hard).unwrap();
    let workload = dir.join("websearch.cdf");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/docs/workloads/websearch.cdf"
        ),
        &workload,
    )
    .unwrap();
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
        one_line(&err, "refusing to write over it");
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
    assert_eq!(std::fs::read(&workload).unwrap().len(), {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/docs/workloads/websearch.cdf"
        ))
        .unwrap()
        .len()
    });
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
    let cap = capture(&dir);
    let out = dir.join("out.pcap");
    std::fs::write(&out, b"old").unwrap();
    let link = dir.join("link.pcap");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    let (a, b) = (
        format!("10.0.0.1={}", out.display()),
        format!("10.0.0.2={}", link.display()),
    );
    let (code, o, err) = roce(&[
        "sim",
        "fabric",
        "--duration",
        "1",
        "--hosts",
        "4",
        "--pcap-at",
        &a,
        "--pcap-at",
        &b,
    ]);
    assert_eq!(code, 1, "{o}{err}");
    one_line(&err, "the same file");
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
    one_line(&err, "the same file");
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
    let cap = capture(&dir);
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
        one_line(&err, &format!("writing {o}"));
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
