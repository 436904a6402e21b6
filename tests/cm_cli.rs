//! The verified workload with its QPs connected through the IB CM on QP1 (`--cm`), as a user
//! runs it: in one process, as two processes, against no server and against a server that
//! listens elsewhere; and what such a run puts on the wire, read back by `roce decode` and
//! tshark. Each test has its own loopback addresses (127.0.6n.x).
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{ips, roce, BIN};

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn loopback_over_cm_made_connections_verifies_everything() {
    let (c, s) = ips(60);
    let (code, out, err) = roce(&[
        "loopback",
        "--cm",
        "--client-ip",
        &c,
        "--server-ip",
        &s,
        "--count",
        "60",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true, "{out}");
    assert_eq!(r["errors"].as_array().map(Vec::len), Some(0));
    let ops: u64 = r["ops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(ops, 4 * 60);
    // The server's side came back in its DREPs: it received what the client sent.
    assert_eq!(
        r["server"]["rx_packets"], r["client"]["tx_packets"],
        "{out}"
    );
    assert!(r["server"]["acks_sent"].as_u64().unwrap() > 0);
}

#[test]
fn server_and_client_as_two_processes_connect_through_the_cm() {
    let (c, s) = ips(61);
    let mut server = Command::new(BIN)
        .args(["server", "--cm", "--bind", &s, "--port", "21061"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (code, out, err) = roce(&[
        "client",
        "--cm",
        &format!("{s}:21061"),
        "--bind",
        &c,
        "--count",
        "40",
        "--json",
    ]);
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = server.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the server never exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut server_err = String::new();
    use std::io::Read;
    server
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut server_err)
        .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(status.success(), "server: {server_err}");
    assert_eq!(json(&out)["ok"], true);
    assert!(server_err.contains("every QP verified"), "{server_err}");
}

#[test]
fn a_client_without_a_server_fails_with_one_line() {
    let (c, s) = ips(62);
    let t0 = Instant::now();
    let (code, out, err) = roce(&["client", "--cm", &s, "--bind", &c, "--count", "5"]);
    assert_ne!(code, 0, "{out}{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("no CM answer from"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_server_on_another_port_rejects_with_the_reason() {
    let (c, s) = ips(63);
    let mut server = Command::new(BIN)
        .args(["server", "--cm", "--bind", &s, "--port", "21999"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (code, out, err) = roce(&["client", "--cm", &format!("{s}:21063"), "--bind", &c]);
    let _ = server.kill();
    let _ = server.wait();
    assert_ne!(code, 0, "{out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("rejected the connection: invalid_service_id (8)")
            && err.contains("port 21063"),
        "{err}"
    );
}

/// A capture of a CM run: `roce decode` verifies every ICRC and names the CM messages;
/// tshark sees ConnectRequest, ConnectReply, ReadyToUse, DisconnectRequest and
/// DisconnectReply, one per QP each.
#[test]
fn a_capture_of_a_cm_run_decodes_as_the_cm_exchange() {
    let (c, s) = ips(64);
    let pcap = std::env::temp_dir().join(format!("roce-cm-run-{}.pcap", std::process::id()));
    let p = pcap.to_str().unwrap();
    let (code, out, err) = roce(&[
        "loopback",
        "--cm",
        "--client-ip",
        &c,
        "--server-ip",
        &s,
        "--qps",
        "2",
        "--count",
        "10",
        "--pcap",
        p,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = roce(&["decode", "--check", "--mad-class", "cm", p]);
    assert_eq!(code, 0, "{err}");
    for m in ["CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"] {
        assert_eq!(out.matches(m).count(), 2, "{m} in {out}");
    }
    let t = Command::new("tshark")
        .args(["-r", p, "-Y", "infiniband.mad"])
        .output()
        .expect("tshark (CI installs it)");
    let _ = std::fs::remove_file(&pcap);
    let text = String::from_utf8_lossy(&t.stdout);
    for m in [
        "CM: ConnectRequest",
        "CM: ConnectReply",
        "CM: ReadyToUse",
        "CM: DisconnectRequest",
        "CM: DisconnectReply",
    ] {
        assert_eq!(text.matches(m).count(), 2, "{m} in {text}");
    }
    assert!(!text.contains("Malformed"), "{text}");
}

/// `--allow`: a server takes a TCP connection or a CM REQ only from the peers it names; a
/// stranger is refused at once (its TCP connection closed, its REQ unanswered) with one line
/// on the server, which goes on waiting and serves the allowed client.
#[test]
fn allow_lets_only_the_named_peers_connect() {
    for (n, cm) in [(153u8, false), (154, true)] {
        let (c, s) = ips(n);
        let stranger = format!("127.0.{n}.3");
        let port = format!("21{n}");
        let mut args = vec!["server", "--bind", &s, "--port", &port, "--allow", &c];
        if cm {
            args.push("--cm");
        }
        let mut srv = Command::new(BIN)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let client = |from: &str| {
            let target = format!("{s}:{port}");
            let mut a = vec!["client", target.as_str(), "--bind", from, "--count", "20"];
            if cm {
                a.push("--cm");
            }
            roce(&a)
        };
        let (code, out, err) = client(&stranger);
        assert_ne!(code, 0, "the stranger was served: {out}{err}");
        assert!(
            srv.try_wait().unwrap().is_none(),
            "the server ended on the stranger"
        );
        let (code, out, err) = client(&c);
        assert_eq!(code, 0, "cm {cm}: the allowed client: {out}{err}");
        let t0 = Instant::now();
        while srv.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = srv.kill();
        let out = srv.wait_with_output().unwrap();
        let server_err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "cm {cm}: server: {server_err}");
        let what = if cm { "a CM REQ" } else { "a TCP connection" };
        let refusals: Vec<&str> = server_err
            .lines()
            .filter(|l| l.contains("not an allowed peer"))
            .collect();
        assert_eq!(refusals.len(), 1, "cm {cm}: {server_err}");
        assert!(
            refusals[0].contains(&format!("refused {what} from {stranger}")),
            "{server_err}"
        );
    }
}
