//! Servers outlive hostile peers: a set-up never confirmed, one confirmed and then silent,
//! a peer that breaks the exchange half-way, for every server that connects through the CM
//! (roce's `--cm` perf, workload and kv servers; rping, ucmatose, rdma-server; udaddy over
//! SIDR). Each costs the server that set-up, said in one line naming the peer; the next
//! client is served and verifies. Each test has its own loopback addresses (127.0.n.x).
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{ips, roce, BIN};

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
        .filter(|l| l.contains("gave up a"))
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

/// Waits up to 20 s for `srv` to end; its stderr, after checking that it exited 0 and gave
/// up exactly one set-up or run, with `from`, for a reason containing `why`.
fn served_after_one_give_up(mut srv: Server, from: &str, why: &str) -> String {
    let mut srv = srv.0.take().unwrap();
    let t0 = Instant::now();
    while srv.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = srv.kill();
    let out = srv.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "server: {err}");
    let gave_up: Vec<&str> = err.lines().filter(|l| l.contains("gave up a")).collect();
    assert_eq!(gave_up.len(), 1, "{err}");
    assert!(
        gave_up[0].contains(&format!(" {from} ")) && gave_up[0].contains(why),
        "{err}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A server process, killed if the test fails before it is waited for.
struct Server(Option<std::process::Child>);

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str]) -> Server {
    let c = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    Server(Some(c))
}

#[test]
fn a_req_never_confirmed_does_not_end_rping() {
    a_req_never_confirmed_does_not_end_the_server(
        160,
        &["rping", "-s", "-a", "127.0.160.2", "-p", "21460"],
        &[
            "rping",
            "-c",
            "-a",
            "127.0.160.2",
            "-I",
            "127.0.160.1",
            "-C",
            "3",
            "-p",
            "21460",
        ],
    );
}

#[test]
fn a_req_never_confirmed_does_not_end_ucmatose() {
    a_req_never_confirmed_does_not_end_the_server(
        161,
        &["ucmatose", "-b", "127.0.161.2", "-p", "21461"],
        &[
            "ucmatose",
            "-s",
            "127.0.161.2",
            "-b",
            "127.0.161.1",
            "-p",
            "21461",
        ],
    );
}

#[test]
fn a_req_never_confirmed_does_not_end_rdma_server() {
    a_req_never_confirmed_does_not_end_the_server(
        162,
        &["rdma-server", "-s", "127.0.162.2", "-p", "21462"],
        &[
            "rdma-client",
            "-s",
            "127.0.162.2",
            "-b",
            "127.0.162.1",
            "-p",
            "21462",
        ],
    );
}

/// A client that connects (REQ, REP, RTU) and then says nothing, here another tool that
/// waits for the server to speak first: the server gives it up after its silence bound
/// (10 s), not a year later, and serves the next client.
fn a_client_silent_after_its_rtu_costs_the_server_that_client(
    n: u8,
    server: &[&str],
    silent: &[&str],
    client: &[&str],
) {
    let (c, _) = ips(n);
    let srv = spawn(server);
    let t0 = Instant::now();
    let (code, out, err) = roce(silent);
    assert_ne!(
        code, 0,
        "the silent client cannot have verified: {out}{err}"
    );
    // The server's bound runs from the RTU, the silent client's from its start.
    std::thread::sleep(Duration::from_millis(1500));
    let (code, out, err) = roce(client);
    assert_eq!(code, 0, "the next client: {out}{err}");
    served_after_one_give_up(srv, &c, "silent for 10 s");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

#[test]
fn a_client_silent_after_its_rtu_does_not_hold_rping() {
    a_client_silent_after_its_rtu_costs_the_server_that_client(
        167,
        &["rping", "-s", "-a", "127.0.167.2", "-p", "21467"],
        // ucmatose's client waits for the server's messages; rping's server for the client's.
        &[
            "ucmatose",
            "-s",
            "127.0.167.2",
            "-b",
            "127.0.167.1",
            "-p",
            "21467",
        ],
        &[
            "rping",
            "-c",
            "-a",
            "127.0.167.2",
            "-I",
            "127.0.167.1",
            "-C",
            "3",
            "-p",
            "21467",
        ],
    );
}

#[test]
fn a_client_silent_after_its_rtu_does_not_hold_rdma_server() {
    a_client_silent_after_its_rtu_costs_the_server_that_client(
        168,
        &["rdma-server", "-s", "127.0.168.2", "-p", "21468"],
        &[
            "ucmatose",
            "-s",
            "127.0.168.2",
            "-b",
            "127.0.168.1",
            "-p",
            "21468",
        ],
        &[
            "rdma-client",
            "-s",
            "127.0.168.2",
            "-b",
            "127.0.168.1",
            "-p",
            "21468",
        ],
    );
}

/// A client that connects and then breaks the exchange (here rdma_client's 16-byte SEND
/// where ucmatose's server takes 100-byte messages, and receives too small for the
/// server's) costs a ucmatose server that client, not its life (it used to end after its
/// SENDs' retries to the broken peer).
#[test]
fn a_client_that_breaks_the_exchange_does_not_end_ucmatose() {
    let (c, s) = ips(165);
    let srv = spawn(&["ucmatose", "-b", &s, "-p", "21465"]);
    let (code, out, err) = roce(&["rdma-client", "-s", &s, "-b", &c, "-p", "21465"]);
    assert_ne!(code, 0, "{out}{err}");
    let (code, out, err) = roce(&["ucmatose", "-s", &s, "-b", &c, "-p", "21465"]);
    assert_eq!(code, 0, "the next client: {out}{err}");
    // Its message of the wrong size, or the completion error of our SENDs to its small
    // receives, whichever comes first.
    served_after_one_give_up(srv, &c, "(QP 0x");
}

/// udaddy's server takes UD messages only from a peer whose SIDR_REQ it answered; one that
/// sends messages of the wrong size is given up (and its later messages dropped as a
/// stranger's), and another client, served while the first still waits, verifies.
#[test]
fn a_udaddy_peer_that_breaks_the_exchange_costs_the_server_that_peer() {
    let (c, s) = ips(166);
    let other = "127.0.166.3";
    let srv = spawn(&["udaddy", "-b", &s, "-p", "21466", "--json"]);
    let hostile = Command::new(BIN)
        .args(["udaddy", "-s", &s, "-b", &c, "-p", "21466", "-S", "7"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let (code, out, err) = roce(&["udaddy", "-s", &s, "-b", other, "-p", "21466"]);
    assert_eq!(code, 0, "the next client: {out}{err}");
    let out = served_after_one_give_up(srv, &c, "a message of 7 bytes");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["peer"].as_str(), Some(other), "{out}");
    assert_eq!(r["received"].as_u64(), Some(10), "{out}");
    assert_eq!(r["given_up"].as_u64(), Some(1), "{out}");
    // The first of the hostile client's ten messages ended its set-up; the other nine
    // came from a peer no exchange named any more.
    assert_eq!(r["strangers"].as_u64(), Some(9), "{out}");
    let mut hostile = hostile;
    let _ = hostile.kill();
    let _ = hostile.wait();
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

/// A `--cm` client that connects, starts its run and then stops (SIGSTOP: silent, its
/// sockets still open) costs a server that run: given up after the session's silence
/// bound, said in one line, and the next client, from another address, verifies. `stops`
/// and `next` are the two clients' arguments, each taking its address last (`--bind`).
fn a_client_that_stops_mid_run_costs_the_server_that_run(
    n: u8,
    server: &[&str],
    stops: &[&str],
    next: &[&str],
    why: &str,
) {
    let (c, _) = ips(n);
    let other = format!("127.0.{n}.3");
    let srv = spawn(server);
    let mut args = stops.to_vec();
    args.push(&c);
    let mut stopped = Command::new(BIN)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let pid = stopped.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    // The server's bound: 10 s without a datagram or a CM message.
    std::thread::sleep(Duration::from_secs(12));
    let mut args = next.to_vec();
    args.push(&other);
    let (code, out, err) = roce(&args);
    let _ = stopped.kill();
    let _ = stopped.wait();
    assert_eq!(code, 0, "the next client: {out}{err}");
    served_after_one_give_up(srv, &c, why);
}

#[test]
fn a_client_that_stops_mid_run_costs_a_perf_server_that_run() {
    a_client_that_stops_mid_run_costs_the_server_that_run(
        169,
        &[
            "perf",
            "write",
            "--cm",
            "--server",
            "--bind",
            "127.0.169.2",
            "--port",
            "21469",
        ],
        &[
            "perf",
            "write",
            "--cm",
            "-D",
            "30",
            "--client",
            "127.0.169.2:21469",
            "--bind",
        ],
        &[
            "perf",
            "write",
            "--cm",
            "-n",
            "200",
            "--client",
            "127.0.169.2:21469",
            "--bind",
        ],
        "silent for 10 s",
    );
}

#[test]
fn a_client_that_stops_mid_run_costs_a_workload_server_that_run() {
    a_client_that_stops_mid_run_costs_the_server_that_run(
        170,
        &["server", "--cm", "--bind", "127.0.170.2", "--port", "21470"],
        &[
            "client",
            "--cm",
            "127.0.170.2:21470",
            "--count",
            "5000000",
            "--bind",
        ],
        &[
            "client",
            "--cm",
            "127.0.170.2:21470",
            "--count",
            "40",
            "--bind",
        ],
        "silent for 10 s",
    );
}

#[test]
fn a_client_that_stops_mid_run_costs_a_kv_server_that_run() {
    a_client_that_stops_mid_run_costs_the_server_that_run(
        171,
        &[
            "kv",
            "--server",
            "--cm",
            "--bind",
            "127.0.171.2",
            "--port",
            "21471",
        ],
        &[
            "kv",
            "--client",
            "127.0.171.2",
            "--cm",
            "--port",
            "21471",
            "--layers",
            "32",
            "--tokens",
            "4096",
            "--kv-bytes",
            "1024",
            "--bind",
        ],
        &[
            "kv",
            "--client",
            "127.0.171.2",
            "--cm",
            "--port",
            "21471",
            "--layers",
            "4",
            "--tokens",
            "512",
            "--kv-bytes",
            "128",
            "--bind",
        ],
        // Silent, or its control QP failed first: the server sends to the client, whose
        // QPs no longer answer.
        "",
    );
}

#[test]
fn a_req_never_confirmed_does_not_end_a_perftest_rdma_cm_server() {
    a_req_never_confirmed_does_not_end_the_server(
        172,
        &[
            "perf",
            "write",
            "--perftest",
            "--cm",
            "--server",
            "--bind",
            "127.0.172.2",
            "--port",
            "21472",
            "-n",
            "50",
        ],
        &[
            "perf",
            "write",
            "--perftest",
            "--cm",
            "--client",
            "127.0.172.2:21472",
            "--bind",
            "127.0.172.1",
            "-n",
            "50",
        ],
    );
}
