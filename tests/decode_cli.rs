//! The `roce decode` command end to end: files and stdin, exit codes, the closing summary on
//! stderr, and argument errors.
use std::io::Write;
use std::process::{Command, Output, Stdio};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/pcap/tests/data");

fn roce(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(b) = stdin {
        input.write_all(b).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn data(name: &str) -> String {
    format!("{DATA}/{name}")
}

#[test]
fn summary_from_file_matches_the_golden_file_and_exits_0() {
    let o = roce(&["decode", &data("opcodes.pcap")], None);
    assert_eq!(o.status.code(), Some(0));
    let golden = std::fs::read_to_string(data("opcodes.pcap.summary.txt")).unwrap();
    let stdout = String::from_utf8(o.stdout).unwrap();
    let stats = golden.lines().last().unwrap().trim_start_matches("# ");
    assert!(golden.starts_with(&stdout));
    assert_eq!(String::from_utf8(o.stderr).unwrap().trim_end(), stats);
}

#[test]
fn stdin_json_and_verbose() {
    let bytes = std::fs::read(data("two_interfaces.pcapng")).unwrap();
    let o = roce(&["decode", "--json", "-"], Some(&bytes));
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        o.stdout,
        std::fs::read(data("two_interfaces.pcapng.jsonl")).unwrap()
    );
    let o = roce(&["decode", "--verbose", "-"], Some(&bytes));
    assert_eq!(
        o.stdout,
        std::fs::read(data("two_interfaces.pcapng.verbose.txt")).unwrap()
    );
}

#[test]
fn check_fails_on_bad_icrc_and_malformed_packets() {
    for f in ["bad_icrc.pcap", "truncated_headers.pcap"] {
        assert_eq!(
            roce(&["decode", &data(f)], None).status.code(),
            Some(0),
            "{f}"
        );
        assert_eq!(
            roce(&["decode", "--check", &data(f)], None).status.code(),
            Some(1),
            "{f}"
        );
    }
    assert_eq!(
        roce(&["decode", "--check", &data("vlan.pcap")], None)
            .status
            .code(),
        Some(0)
    );
}

#[test]
fn truncated_and_non_capture_inputs_exit_1_with_name_and_offset() {
    let bytes = std::fs::read(data("opcodes.pcap")).unwrap();
    let o = roce(&["decode", "-"], Some(&bytes[..bytes.len() - 7]));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.contains("roce decode: -: truncated record at byte "),
        "{err}"
    );
    assert!(
        !o.stdout.is_empty(),
        "what was decoded before the cut is printed"
    );

    let o = roce(
        &["decode", concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.contains("Cargo.toml: not a pcap or pcapng capture (at byte 0"),
        "{err}"
    );

    let o = roce(&["decode", "/no/such/file.pcap"], None);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn filters_and_argument_errors() {
    let o = roce(&["decode", "--opcode", "CNP", &data("opcodes.pcap")], None);
    let s = String::from_utf8(o.stdout).unwrap();
    assert_eq!(s.lines().count(), 1);
    assert!(s.contains(" CNP "));
    let o = roce(
        &[
            "decode",
            "--qp",
            "0x13",
            "--count",
            "2",
            &data("opcodes.pcap"),
        ],
        None,
    );
    let s = String::from_utf8(o.stdout).unwrap();
    assert_eq!(s.lines().count(), 2);
    assert!(s.lines().all(|l| l.contains("qp=0x000013")));
    let o = roce(&["decode", "--opcode", "NOPE", &data("opcodes.pcap")], None);
    assert_ne!(o.status.code(), Some(0));
    assert!(String::from_utf8(o.stderr)
        .unwrap()
        .contains("unknown opcode name"));
    let o = roce(&["decode"], None);
    assert_ne!(o.status.code(), Some(0));
}

#[test]
fn live_capture_without_cap_net_raw_says_so_in_one_line() {
    // Drop CAP_NET_RAW from the bounding set (uid stays 0, so the binary stays readable).
    let probe = Command::new("setpriv")
        .args(["--bounding-set", "-net_raw", "true"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        println!("SKIPPED: setpriv cannot drop CAP_NET_RAW here (not root, or no util-linux)");
        return;
    }
    let o = Command::new("setpriv")
        .args(["--bounding-set", "-net_raw", env!("CARGO_BIN_EXE_roce")])
        .args(["decode", "--interface", "lo", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    let line = err.lines().find(|l| l.starts_with("roce decode:")).unwrap();
    assert!(
        line.contains("capturing on lo needs root or the CAP_NET_RAW capability"),
        "{err}"
    );
}

/// Peak resident memory so far of a running process, MiB (`VmHWM`).
fn peak_mib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

#[test]
fn parallel_decode_of_16_mib_records_holds_bounded_memory() {
    // 96 records of 16 MiB each (1.5 GiB) streamed through stdin to 4 decoding threads: the
    // bytes in flight are bounded, so the peak stays near the budget (64 MiB) plus one
    // record's buffers, whatever the input's size.
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "-", "--threads", "4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut input = child.stdin.take().unwrap();
    let mut header = Vec::new();
    header.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&4u16.to_le_bytes());
    header.extend_from_slice(&[0; 8]);
    header.extend_from_slice(&(16u32 << 20).to_le_bytes()); // snaplen
    header.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
    input.write_all(&header).unwrap();
    let len = 16u32 << 20;
    let record = vec![0x42u8; len as usize];
    let mut peak = 0f64;
    for i in 0..96u32 {
        let mut rh = Vec::new();
        rh.extend_from_slice(&i.to_le_bytes());
        rh.extend_from_slice(&0u32.to_le_bytes());
        rh.extend_from_slice(&len.to_le_bytes());
        rh.extend_from_slice(&len.to_le_bytes());
        input.write_all(&rh).unwrap();
        input.write_all(&record).unwrap();
        peak = peak.max(peak_mib(pid).unwrap_or(0.0));
    }
    drop(input);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{err}");
    assert!(err.contains("96 packets read"), "{err}");
    assert!(
        peak < 128.0,
        "parallel decode of 16 MiB records peaked at {peak:.0} MiB"
    );
}
