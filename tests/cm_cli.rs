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

/// The first datagram a `roce ARGS` client sends toward `s`:4791 (its REQ), caught on a
/// socket standing in for the server; the client is then stopped. Replayed later from the
/// client's address and source port, it is the same REQ with a valid ICRC: what an attacker who sends
/// one REQ and never confirms does.
fn a_real_req(s: &str, args: &[&str]) -> (Vec<u8>, std::net::SocketAddr) {
    let catcher = std::net::UdpSocket::bind(format!("{s}:4791")).unwrap();
    catcher
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut client = Command::new(BIN)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, from) = catcher.recv_from(&mut buf).expect("the client sent no REQ");
    let _ = client.kill();
    let _ = client.wait();
    buf.truncate(n);
    (buf, from)
}

/// Sends `req` from `from` (the client's address and source port) to `s`:4791, as roce's
/// sockets send (DF and identification 0: the IPv4 header the REQ's ICRC was computed over,
/// which a packet link checks), and waits up to 5 s for an answer at `c`:4791 (where the
/// server's CM answers). `true` when one came; the socket the answers come to, to keep
/// while the server may resend (unbound, they would draw ICMP errors).
fn replay(req: &[u8], from: std::net::SocketAddr, c: &str, s: &str) -> (bool, std::net::UdpSocket) {
    let answers = std::net::UdpSocket::bind(format!("{c}:4791")).unwrap();
    let attacker = std::net::UdpSocket::bind(from).unwrap();
    rustix::net::sockopt::set_ip_mtu_discover(
        &attacker,
        rustix::net::sockopt::Ipv4PathMtuDiscovery::PROBE,
    )
    .unwrap();
    attacker.send_to(req, format!("{s}:4791")).unwrap();
    answers
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 4096];
    (answers.recv(&mut buf).is_ok(), answers)
}

/// One REQ from any address that never comes back with an RTU costs a `--cm` server that
/// set-up (given up within the CM's bound, what it made for it dropped), not its life: it says
/// so in one line naming the sender, listens again, and serves the next client, which
/// verifies. `server` and `client` are the two ends' arguments; the client reaches
/// `127.0.n.2`.
fn a_req_never_confirmed_does_not_end_the_server(n: u8, server: &[&str], client: &[&str]) {
    let (c, s) = ips(n);
    let (req, from) = a_real_req(&s, client);
    let mut srv = Command::new(BIN)
        .args(server)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    {
        // The attacker: the client's address and source port, the REQ, then silence.
        // The REP comes back and is resent; no RTU ever goes.
        let (answered, _answers) = replay(&req, from, &c, &s);
        if !answered {
            let _ = srv.kill();
            let out = srv.wait_with_output().unwrap();
            panic!(
                "{server:?}: no REP for the replayed REQ: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The CM gives the set-up up after the REQ's retries (8 × 268 ms here).
        std::thread::sleep(Duration::from_secs(4));
        assert!(
            srv.try_wait().unwrap().is_none(),
            "{server:?} ended with the set-up"
        );
    }
    let (code, out, err) = roce(client);
    let t0 = Instant::now();
    while srv.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = srv.kill();
    let srv = srv.wait_with_output().unwrap();
    let server_err = String::from_utf8_lossy(&srv.stderr);
    assert_eq!(code, 0, "the next client: {out}{err}\nserver: {server_err}");
    assert!(srv.status.success(), "server: {server_err}");
    let gave_up: Vec<&str> = server_err
        .lines()
        .filter(|l| l.contains("gave up a CM set-up from"))
        .collect();
    assert_eq!(gave_up.len(), 1, "{server_err}");
    assert!(gave_up[0].contains(&c), "{server_err}");
}

#[test]
fn a_req_never_confirmed_does_not_end_a_perf_server() {
    a_req_never_confirmed_does_not_end_the_server(
        62,
        &[
            "perf",
            "write",
            "--cm",
            "--server",
            "--bind",
            "127.0.62.2",
            "--port",
            "21062",
        ],
        &[
            "perf",
            "write",
            "--cm",
            "--client",
            "127.0.62.2:21062",
            "--bind",
            "127.0.62.1",
            "-n",
            "200",
        ],
    );
}

#[test]
fn a_req_never_confirmed_does_not_end_a_workload_server() {
    a_req_never_confirmed_does_not_end_the_server(
        66,
        &["server", "--cm", "--bind", "127.0.66.2", "--port", "21066"],
        &[
            "client",
            "--cm",
            "127.0.66.2:21066",
            "--bind",
            "127.0.66.1",
            "--count",
            "40",
        ],
    );
}

#[test]
fn a_req_never_confirmed_does_not_end_a_kv_server() {
    a_req_never_confirmed_does_not_end_the_server(
        69,
        &[
            "kv",
            "--server",
            "--cm",
            "--bind",
            "127.0.69.2",
            "--port",
            "21069",
        ],
        &[
            "kv",
            "--client",
            "127.0.69.2",
            "--cm",
            "--bind",
            "127.0.69.1",
            "--port",
            "21069",
            "--layers",
            "4",
            "--tokens",
            "512",
            "--kv-bytes",
            "128",
        ],
    );
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

/// The resident memory of process `pid`, KiB (Linux `VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// One REQ naming a large run (1,024 QPs with 128 KiB read areas each, 128 MiB in all)
/// costs a `--cm` workload server the QP it connects, not the whole run: each QP's memory
/// is made ready when that QP's own REQ comes.
#[test]
fn one_req_for_a_large_run_costs_the_server_one_qp() {
    let n = 155u8;
    let (c, s) = ips(n);
    let port = format!("21{n}");
    let target = format!("{s}:{port}");
    let (req, from) = a_real_req(
        &s,
        &[
            "client", "--cm", &target, "--bind", &c, "--qps", "1024", "--size", "64K", "--ops",
            "read", "--count", "1",
        ],
    );
    let mut srv = Command::new(BIN)
        .args(["server", "--cm", "--bind", &s, "--port", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_kib(srv.id());
    let (rep, _answers) = replay(&req, from, &c, &s);
    let after = rss_kib(srv.id());
    let _ = srv.kill();
    let out = srv.wait_with_output().unwrap();
    assert!(
        rep,
        "no REP for the replayed REQ: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let grown = after.saturating_sub(before);
    eprintln!("server RSS {before} KiB before the REQ, {after} KiB after its REP");
    assert!(
        grown < 32 << 10,
        "one REQ grew the server by {grown} KiB ({before} -> {after})"
    );
}
