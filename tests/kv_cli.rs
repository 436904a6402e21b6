//! `roce kv` as a user runs it: real processes, real UDP sockets on loopback. Each test uses its
//! own loopback addresses (127.0.<n>.1 / .2, n = 80..) so the tests can run in parallel.
use std::process::{Command, Stdio};

mod common;

use common::{ips, roce, BIN};

fn kv(n: u8, extra: &[&str]) -> (i32, String, String) {
    let (c, s) = ips(n);
    let mut args = vec!["kv", "--client-ip", &c, "--server-ip", &s];
    args.extend_from_slice(extra);
    roce(&args)
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A small shape, so the debug binary is quick.
const SMALL: [&str; 6] = ["--layers", "4", "--tokens", "512", "--kv-bytes", "128"];

fn plans(r: &serde_json::Value) -> &Vec<serde_json::Value> {
    r["plans"].as_array().expect("plans array")
}

#[test]
fn default_plans_verify_and_report_json() {
    let mut args = SMALL.to_vec();
    args.push("--json");
    let (code, out, err) = kv(80, &args);
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true, "{out}");
    let p = plans(&r);
    let names: Vec<&str> = p.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "page1-separate",
            "page16-separate",
            "page16-adjacent",
            "page16-adjacent-merged",
            "per-layer"
        ]
    );
    for plan in p {
        for key in [
            "name",
            "wrs",
            "packets",
            "bytes_per_wr",
            "seconds",
            "gbps",
            "model_seconds",
            "verified",
        ] {
            assert!(plan.get(key).is_some(), "missing {key} in {plan}");
        }
        assert_eq!(plan["verified"], true, "{plan}");
        assert!(plan["seconds"].as_f64().unwrap() > 0.0);
        assert!(plan["model_seconds"].as_f64().unwrap() > 0.0);
    }
    let wrs: Vec<u64> = p.iter().map(|p| p["wrs"].as_u64().unwrap()).collect();
    // 4 layers x 512 tokens: K and V per token; per page of 16; K+V per page; merged; per layer.
    assert_eq!(wrs[0], 4 * 512 * 2);
    assert_eq!(wrs[1], 4 * 32 * 2);
    assert_eq!(wrs[2], 4 * 32);
    assert!(wrs[3] < wrs[2] && wrs[3] > 4, "{wrs:?}");
    assert_eq!(wrs[4], 4);
    for plan in p {
        let b = plan["bytes_per_wr"].as_f64().unwrap() * plan["wrs"].as_f64().unwrap();
        assert_eq!(b.round() as u64, 4 * 512 * 2 * 128, "{plan}");
    }
    // 256 B WRITEs are bound by the work-request rate, 2 MiB ones by bandwidth.
    assert_eq!(p[0]["bound"], "wr", "{out}");
    assert_eq!(p[4]["bound"], "bandwidth", "{out}");
    assert!(r["bandwidth_gbps"].as_f64().unwrap() > 0.0);
    assert!(r["per_wr_seconds"].as_f64().unwrap() > 0.0);
}

#[test]
fn text_report_is_a_table() {
    let (code, out, err) = kv(81, &SMALL);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("calibration"), "{out}");
    assert!(out.contains("model ms"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.ends_with("  yes")).count(),
        5,
        "{out}"
    );
}

#[test]
fn impaired_multi_qp_scattered_merged_still_verifies() {
    let mut args = SMALL.to_vec();
    args.extend([
        "--page",
        "4",
        "--layout",
        "adjacent",
        "--merge",
        "--alloc",
        "scattered",
        "--qps",
        "3",
        "--loss",
        "0.01",
        "--reorder",
        "0.03",
        "--dup",
        "0.01",
        "--corrupt",
        "0.01",
        "--seed",
        "7",
        "--json",
    ]);
    let (code, out, err) = kv(82, &args);
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true, "{out}");
    let p = plans(&r);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0]["name"], "page4-adjacent-merged");
    assert_eq!(p[0]["verified"], true);
    let wrs = p[0]["wrs"].as_u64().unwrap();
    assert!(
        wrs < 4 * 128 && wrs > 4,
        "scattered blocks merge into runs: {wrs}"
    );
    let retx: u64 = p
        .iter()
        .chain(r["calibration"].as_array().unwrap())
        .map(|p| p["retransmitted"].as_u64().unwrap())
        .sum();
    assert!(retx > 0, "losses must cause retransmissions: {out}");
}

#[test]
fn server_and_client_as_two_processes() {
    use std::io::BufRead;
    let mut server = Command::new(BIN)
        .args([
            "kv",
            "--server",
            "--bind",
            "127.0.83.2",
            "--port",
            "18681",
            "--loss",
            "0.01",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start server");
    // It says so once it listens.
    let mut serr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    serr.read_line(&mut line).unwrap();
    assert!(line.contains("waiting for a prefill client"), "{line}");
    let mut args = vec![
        "kv",
        "--client",
        "127.0.83.2:18681",
        "--bind",
        "127.0.83.1",
        "--qps",
        "2",
        "--json",
    ];
    args.extend_from_slice(&SMALL);
    let (code, out, err) = roce(&args);
    let status = server.wait().expect("server exit");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut serr, &mut rest).unwrap();
    assert_eq!(code, 0, "{out}{err}\nserver: {rest}");
    assert!(status.success(), "server: {rest}");
    assert!(rest.contains("7 of 7 plans verified"), "{rest}");
    let r = json(&out);
    assert_eq!(r["ok"], true);
    assert!(plans(&r).iter().all(|p| p["verified"] == true));
}

#[test]
fn bad_flags_are_one_line_and_nonzero() {
    for args in [
        vec!["--layout", "diagonal"],
        vec!["--alloc", "random"],
        vec!["--page", "0"],
        vec!["--page", "2000000"],
        vec!["--tokens", "10000000", "--kv-bytes", "1"],
        vec!["--qps", "0"],
        vec!["--layers", "0"],
        vec!["--loss", "1.5"],
        vec!["--mtu", "1000"],
        vec!["--pool", "1K"],
        vec!["--repeat", "0"],
    ] {
        let (code, out, err) = kv(84, &args);
        assert_ne!(code, 0, "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("roce kv: "), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
    }
}

/// `--cm`: the QPs through the IB CM on QP1, the kv messages over a control QP.
#[test]
fn over_cm_made_connections_every_plan_verifies() {
    let mut args = SMALL.to_vec();
    args.extend_from_slice(&["--cm", "--qps", "2", "--json"]);
    let (code, out, err) = kv(86, &args);
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true, "{out}");
    assert_eq!(plans(&r).len(), 5);
    assert!(plans(&r).iter().all(|p| p["verified"] == true), "{out}");
    assert_eq!(r["calibration"].as_array().map(Vec::len), Some(2));
}

#[test]
fn over_cm_as_two_processes_and_refusals_in_one_line() {
    use std::io::BufRead;
    let (c, s) = ips(87);
    let start_server = |max_pool: &str| {
        let mut server = Command::new(BIN)
            .args([
                "kv",
                "--server",
                "--cm",
                "--bind",
                &s,
                "--port",
                "18687",
                "--max-pool",
                max_pool,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start server");
        let mut serr = std::io::BufReader::new(server.stderr.take().unwrap());
        let mut line = String::new();
        serr.read_line(&mut line).unwrap();
        assert!(
            line.contains("waiting for a prefill client's CM REQ"),
            "{line}"
        );
        (server, serr)
    };
    let client = |extra: &[&str]| {
        let mut args = vec![
            "kv", "--client", &s, "--cm", "--bind", &c, "--port", "18687",
        ];
        args.extend_from_slice(&SMALL);
        args.extend_from_slice(extra);
        roce(&args)
    };
    // Served and verified.
    let (mut server, mut serr) = start_server("1G");
    let (code, out, err) = client(&["--json"]);
    let status = server.wait().expect("server exit");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut serr, &mut rest).unwrap();
    assert_eq!(code, 0, "{out}{err}\nserver: {rest}");
    assert!(status.success(), "server: {rest}");
    assert!(rest.contains("7 of 7 plans verified"), "{rest}");
    assert_eq!(json(&out)["ok"], true);
    // A pool larger than the server allows: it releases the connections with the reason.
    let (mut server, _serr) = start_server("1M");
    let (code, out, err) = client(&[]);
    let status = server.wait().expect("server exit");
    assert_ne!(code, 0, "{out}{err}");
    assert!(!status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("refused the client: asked for a pool"),
        "{err}"
    );
    // Nobody listening on that RDMA-CM port: REJ, one line.
    let (code, out, err) = client(&[]);
    assert_ne!(code, 0, "{out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no CM answer") || err.contains("rejected the connection"),
        "{err}"
    );
}
