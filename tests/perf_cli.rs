//! `roce perf` as a user runs it: real processes, real UDP sockets on loopback. Each test uses
//! its own loopback addresses (127.0.<n>.1 / .2, n = 70..=80) so the tests can run in parallel
//! with each other and with the loopback tests. Speeds are printed, never asserted.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::Value;

mod common;

use common::{ips, roce, BIN};

/// `roce perf ARGS` between 127.0.n.1 (client) and 127.0.n.2 (server) in one process.
fn perf(n: u8, args: &[&str]) -> (i32, String, String) {
    let (c, s) = ips(n);
    let mut v = vec!["perf"];
    v.extend_from_slice(args);
    v.extend_from_slice(&["--client-ip", &c, "--server-ip", &s]);
    roce(&v)
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

const BW_KEYS: [&str; 7] = [
    "test",
    "mode",
    "size",
    "iterations",
    "bw_peak_gbps",
    "bw_avg_gbps",
    "msg_rate_mpps",
];
const LAT_KEYS: [&str; 9] = [
    "test",
    "mode",
    "size",
    "iterations",
    "t_min_us",
    "t_typical_us",
    "t_avg_us",
    "t_p99_us",
    "t_p999_us",
];

fn has_keys(v: &Value, keys: &[&str]) {
    for k in keys {
        assert!(!v[k].is_null(), "no {k} in {v}");
    }
    for k in ["bw_avg_gbps", "msg_rate_mpps", "t_typical_us"] {
        if let Some(x) = v[k].as_f64() {
            assert!(x.is_finite() && x > 0.0, "{k} = {x} in {v}");
        }
    }
}

#[test]
fn write_bw_json_has_the_perftest_keys() {
    let (code, out, err) = perf(70, &["write", "-s", "4096", "-n", "300", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let l = json_lines(&out);
    assert_eq!(l.len(), 1, "{out}");
    has_keys(&l[0], &BW_KEYS);
    assert_eq!(l[0]["test"], "write");
    assert_eq!(l[0]["mode"], "bw");
    assert_eq!(l[0]["size"], 4096);
    assert_eq!(l[0]["iterations"], 300);
    assert!(l[0]["baseline"].is_null() && l[0]["ratio"].is_null());
    eprintln!("{out}");
}

#[test]
fn baseline_adds_the_udp_figures_and_the_ratios() {
    let (code, out, err) = perf(
        71,
        &[
            "write",
            "-s",
            "8192",
            "-n",
            "200",
            "--mtu",
            "4096",
            "--baseline",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let l = &json_lines(&out)[0];
    has_keys(l, &BW_KEYS);
    let b = &l["baseline"];
    has_keys(b, &BW_KEYS);
    assert_eq!(b["test"], "udp");
    // The baseline's datagram is the WRITE's data datagram: BTH + payload (one MTU) + ICRC.
    assert_eq!(b["size"], 12 + 4096 + 4);
    for k in ["bw_avg_gbps", "msg_rate_mpps"] {
        let r = l["ratio"][k]
            .as_f64()
            .unwrap_or_else(|| panic!("ratio.{k}: {l}"));
        let want = l[k].as_f64().unwrap() / b[k].as_f64().unwrap();
        assert!((r - want).abs() <= 1e-9 * want.abs().max(1.0), "{l}");
    }

    let (code, out, err) = perf(
        71,
        &[
            "write",
            "--lat",
            "-s",
            "8",
            "-n",
            "200",
            "--baseline",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let l = &json_lines(&out)[0];
    has_keys(l, &LAT_KEYS);
    assert_eq!(l["mode"], "lat");
    assert_eq!(l["iterations"], 200);
    has_keys(&l["baseline"], &LAT_KEYS);
    assert_eq!(l["baseline"]["test"], "udp");
    assert_eq!(
        l["baseline"]["size"],
        12 + 16 + 8 + 4,
        "BTH + RETH + 8 B + ICRC"
    );
    assert!(l["ratio"]["t_typical_us"].as_f64().is_some(), "{l}");
    eprintln!("{out}");
}

#[test]
fn read_send_and_atomic_in_both_modes() {
    for (args, test, mode, size) in [
        (
            vec!["read", "-s", "20000", "-n", "100"],
            "read",
            "bw",
            20000,
        ),
        (vec!["send", "-s", "5000", "-n", "300"], "send", "bw", 5000),
        (vec!["atomic", "-n", "300"], "atomic", "bw", 8),
        (
            vec!["read", "--lat", "-s", "64", "-n", "100"],
            "read",
            "lat",
            64,
        ),
        (
            vec!["send", "--lat", "-s", "3000", "-n", "100"],
            "send",
            "lat",
            3000,
        ),
        (vec!["atomic", "--lat", "-n", "100"], "atomic", "lat", 8),
        (
            vec![
                "write",
                "-s",
                "1000",
                "-n",
                "400",
                "--qps",
                "4",
                "--tx-depth",
                "8",
            ],
            "write",
            "bw",
            1000,
        ),
    ] {
        let mut a = args.clone();
        a.push("--json");
        let (code, out, err) = perf(73, &a);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let l = &json_lines(&out)[0];
        has_keys(
            l,
            if mode == "bw" {
                &BW_KEYS[..]
            } else {
                &LAT_KEYS[..]
            },
        );
        assert_eq!(l["test"], test, "{l}");
        assert_eq!(l["mode"], mode, "{l}");
        assert_eq!(l["size"], size, "{l}");
        assert_eq!(l["retransmitted_packets"], 0, "loopback loses nothing: {l}");
        eprintln!("{out}");
    }
}

#[test]
fn all_sweeps_2_bytes_to_8_mib() {
    let (code, out, err) = perf(74, &["write", "-a", "-n", "3", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let sizes: Vec<u64> = json_lines(&out)
        .iter()
        .map(|l| {
            has_keys(l, &BW_KEYS);
            l["size"].as_u64().unwrap()
        })
        .collect();
    let want: Vec<u64> = (1..=23).map(|k| 1u64 << k).collect();
    assert_eq!(sizes, want);
}

#[test]
fn text_output_has_perftest_columns() {
    let (code, out, err) = perf(75, &["send", "-s", "1024", "-n", "100"]);
    assert_eq!(code, 0, "{out}{err}");
    let mut lines = out.lines();
    let head = lines.next().unwrap();
    for col in [
        "#bytes",
        "#iterations",
        "BW peak[Gb/sec]",
        "BW average[Gb/sec]",
        "MsgRate[Mpps]",
    ] {
        assert!(head.contains(col), "{head}");
    }
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row.len(), 5, "{out}");
    assert_eq!(row[..2], ["1024", "100"]);

    let (code, out, err) = perf(75, &["write", "--lat", "-n", "100", "--baseline"]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    for col in [
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99% percentile[usec]",
        "99.9% percentile[usec]",
    ] {
        assert!(lines[0].contains(col), "{out}");
    }
    assert_eq!(lines[1].split_whitespace().count(), 9, "{out}");
    assert!(
        lines[2].contains("udp baseline") && lines[2].contains("ratio"),
        "{out}"
    );
}

#[test]
fn udp_baseline_on_its_own() {
    let (code, out, err) = perf(76, &["udp", "-s", "1000", "-n", "2000", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let l = &json_lines(&out)[0];
    has_keys(l, &BW_KEYS);
    assert_eq!(l["test"], "udp");
    assert!(l["iterations"].as_u64().unwrap() <= 2000);
    let (code, out, err) = perf(76, &["udp", "--lat", "-s", "100", "-n", "200", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let l = &json_lines(&out)[0];
    has_keys(l, &LAT_KEYS);
    assert_eq!(l["iterations"], 200);
}

#[test]
fn udp_exchange_answers_every_request() {
    let (code, out, err) = perf(
        80,
        &[
            "udp",
            "--request",
            "32",
            "-s",
            "84",
            "-o",
            "16",
            "-n",
            "3000",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let l = &json_lines(&out)[0];
    has_keys(l, &BW_KEYS);
    assert_eq!(l["test"], "udp");
    assert_eq!(l["request_size"], 32, "{l}");
    assert_eq!(l["replies"], 1, "{l}");
    assert_eq!(l["size"], 84, "{l}");
    // Loopback with 16 outstanding loses nothing: every request was answered.
    assert_eq!(l["iterations"], 3000, "{l}");
    assert_eq!(l["retransmitted_packets"], 0, "{l}");
}

#[test]
fn read_and_atomic_baselines_include_the_exchange_of_their_shape() {
    for (args, request, reply, replies) in [
        // A 64 B READ: request BTH + RETH + ICRC; response BTH + AETH + 64 + ICRC.
        (vec!["read", "-s", "64", "-n", "2000"], 32, 84, 1),
        // A 10000 B READ at MTU 4096: three response packets, the fullest one MTU of payload.
        (
            vec!["read", "-s", "10000", "-n", "200", "--mtu", "4096"],
            32,
            12 + 4096 + 4,
            3,
        ),
        // FETCH_ADD: BTH + AtomicETH + ICRC; atomic ACK: BTH + AETH + AtomicAckETH + ICRC.
        (vec!["atomic", "-n", "2000"], 44, 28, 1),
    ] {
        let mut a = args.clone();
        a.extend_from_slice(&["--baseline", "--json"]);
        let (code, out, err) = perf(72, &a);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let l = &json_lines(&out)[0];
        let x = &l["exchange_baseline"];
        has_keys(x, &BW_KEYS);
        assert_eq!(x["test"], "udp", "{l}");
        assert_eq!(x["request_size"], request, "{args:?}: {l}");
        assert_eq!(x["size"], reply, "{args:?}: {l}");
        assert_eq!(x["replies"], replies, "{args:?}: {l}");
        assert_eq!(x["iterations"], l["iterations"], "{args:?}: {l}");
        let r = l["exchange_ratio"]["msg_rate_mpps"].as_f64().unwrap();
        let want = l["msg_rate_mpps"].as_f64().unwrap() / x["msg_rate_mpps"].as_f64().unwrap();
        assert!((r - want).abs() <= 1e-9 * want.max(1.0), "{l}");
        // The blast baseline is still there, and WRITE has no exchange.
        has_keys(&l["baseline"], &BW_KEYS);
    }
    let (code, out, err) = perf(
        72,
        &["write", "-s", "64", "-n", "500", "--baseline", "--json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(json_lines(&out)[0]["exchange_baseline"].is_null(), "{out}");
}

#[test]
fn server_and_client_as_two_processes() {
    let (c, s) = ("127.0.77.1", "127.0.77.2");
    let mut server = Command::new(BIN)
        .args(["perf", "write", "--server", "--bind", s, "--port", "21077"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Start the client once the server says it listens.
    let mut err = BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("waiting for a client"), "{line}");
    let (code, out, cerr) = roce(&[
        "perf",
        "write",
        "--client",
        &format!("{s}:21077"),
        "--bind",
        c,
        "-s",
        "4096",
        "-n",
        "500",
        "--baseline",
        "--json",
    ]);
    let status = server.wait().unwrap();
    assert_eq!(code, 0, "{out}{cerr}");
    assert!(status.success(), "server failed");
    let l = &json_lines(&out)[0];
    has_keys(l, &BW_KEYS);
    assert_eq!(l["iterations"], 500);
    has_keys(&l["baseline"], &BW_KEYS);
    assert!(l["ratio"]["bw_avg_gbps"].as_f64().is_some(), "{l}");
}

#[test]
fn duration_bounds_the_run() {
    let (code, out, err) = perf(79, &["write", "-s", "4096", "--duration", "0.3", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let l = &json_lines(&out)[0];
    has_keys(l, &BW_KEYS);
    assert!(l["iterations"].as_u64().unwrap() > 0);
}

#[test]
fn bad_flags_are_refused() {
    for args in [
        vec!["write", "--mtu", "1000"],
        vec!["teleport"],
        vec!["write", "-s", "0"],
        vec!["write", "-s", "16M"],
        vec!["write", "-s", "lots"],
        vec!["write", "--tx-depth", "0"],
        vec!["write", "--qps", "0"],
        vec!["write", "-n", "0"],
        vec!["write", "--duration=-1"],
        vec!["udp", "-s", "70000"],
        vec!["read", "--outs", "0"],
        vec!["read", "--outs", "200"],
        vec!["udp", "--request", "8"],
        vec!["udp", "--lat", "--request", "32"],
        vec!["write", "--request", "32"],
    ] {
        let (code, out, err) = perf(78, &args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

/// `--cm`: each run's QPs connected through the IB CM (no TCP connection); every test kind in
/// both modes, several runs in a row (the server binds a fresh endpoint for each), and the
/// flags it does not take refused in one line.
#[test]
fn perf_over_cm_made_connections_runs_every_test() {
    for (k, args) in [
        vec!["write", "-n", "300", "-s", "4096", "--qps", "2"],
        vec!["read", "-n", "300", "-s", "4096"],
        vec!["send", "-n", "300", "-s", "4096"],
        vec!["atomic", "-n", "300"],
        vec!["write", "--lat", "-n", "200"],
        vec!["read", "--lat", "-n", "200"],
        vec!["send", "--lat", "-n", "200"],
    ]
    .into_iter()
    .enumerate()
    {
        let mut a = args.clone();
        a.extend(["--cm", "--json"]);
        let (code, out, err) = perf(66, &a);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {out}");
        let keys: &[&str] = if args.contains(&"--lat") {
            &LAT_KEYS
        } else {
            &BW_KEYS
        };
        for key in keys {
            assert!(
                lines[0].get(*key).is_some(),
                "{args:?} {k}: no {key} in {out}"
            );
        }
        assert_eq!(
            lines[0]["iterations"].as_u64(),
            Some(if args.contains(&"--lat") { 200 } else { 300 })
        );
    }
    // The whole size sweep: 23 runs in a row, each on connections of its own.
    let (code, out, err) = perf(66, &["write", "-a", "-n", "20", "--cm", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let sizes: Vec<u64> = json_lines(&out)
        .iter()
        .map(|l| l["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes.len(), 23, "{out}");
    assert_eq!(sizes.last(), Some(&(8 << 20)));
    let (code, _, err) = perf(66, &["write", "--cm", "--baseline"]);
    assert_ne!(code, 0);
    assert!(err.contains("--baseline"), "{err}");
}

/// `-c UD`: SEND over UD QPs, bandwidth and latency, and the sizes and tests UD cannot do
/// refused in one line.
#[test]
fn perf_over_ud_qps() {
    for args in [
        vec![
            "send", "-c", "UD", "-n", "2000", "-s", "1024", "--mtu", "1024",
        ],
        vec!["send", "-c", "ud", "--lat", "-n", "300"],
        vec!["send", "-c", "UD", "-n", "500", "-q", "2"],
    ] {
        let mut a = args.clone();
        a.push("--json");
        let (code, out, err) = perf(69, &a);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let l = json_lines(&out);
        assert_eq!(l.len(), 1, "{out}");
        has_keys(
            &l[0],
            if args.contains(&"--lat") {
                &LAT_KEYS
            } else {
                &BW_KEYS
            },
        );
    }
    // UC: send and write, bandwidth and latency.
    for args in [
        vec!["write", "-c", "UC", "-n", "500", "-s", "16384"],
        vec!["send", "-c", "UC", "-n", "500"],
        vec!["write", "-c", "UC", "--lat", "-n", "300"],
    ] {
        let mut a = args.clone();
        a.push("--json");
        let (code, out, err) = perf(69, &a);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let l = json_lines(&out);
        has_keys(
            &l[0],
            if args.contains(&"--lat") {
                &LAT_KEYS
            } else {
                &BW_KEYS
            },
        );
    }
    // The default size with -c UD is the MTU.
    let (code, out, err) = perf(69, &["send", "-c", "UD", "-n", "100", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json_lines(&out)[0]["size"], 4096);
    for (args, want) in [
        (vec!["write", "-c", "UD"], "send only"),
        (vec!["send", "-c", "UD", "-s", "8000"], "at most the MTU"),
        (vec!["send", "-c", "XY"], "use RC, UC or UD"),
        (vec!["read", "-c", "UC"], "send and write only"),
        (
            vec!["send", "-c", "UD", "--cm"],
            "UD through SIDR with --perftest",
        ),
    ] {
        let (code, _, err) = perf(69, &args);
        assert_ne!(code, 0, "{args:?}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
