//! `roce perf --perftest` against a scripted stock perftest client: a peer written from
//! perftest's source (linux-rdma/perftest 6.29, `src/perftest_communication.c`:
//! `exchange_versions`, `check_sys_data`, `check_mtu`, `ctx_hand_shake` with
//! `KEY_PRINT_FMT_GID`, `xchg_bw_reports`, `ctx_close_connection`), byte for byte and in
//! lock step (the client writes first in every step), independently of roce's own session
//! code. It checks every message roce's server sends and that the server reports the figures
//! the client sent. Then roce's own client and server, in one process, run a real test.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use roce_proto::perftest::{Dest, Variant};

mod common;
use common::{ips, roce, BIN};

/// One lock-step step as perftest's client does it: write ours, read theirs (same length).
fn step(t: &mut TcpStream, mine: &[u8]) -> Vec<u8> {
    t.write_all(mine).unwrap();
    let mut theirs = vec![0u8; mine.len()];
    t.read_exact(&mut theirs).unwrap();
    theirs
}

/// A key record as perftest 6.29's client prints it (`KEY_PRINT_FMT_GID`, NUL sent).
fn record(qpn: u32, psn: u32, rkey: u32, vaddr: u64, gid: [u8; 16]) -> Vec<u8> {
    let mut s = format!(
        "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}",
        0, 1, qpn, psn, rkey, vaddr
    );
    for b in gid {
        s.push_str(&format!(":{b:02x}"));
    }
    s.push_str(&format!(":{:08x}:", 0));
    let mut v = s.into_bytes();
    v.push(0);
    assert_eq!(v.len(), 108, "KEY_MSG_SIZE_GID");
    v
}

#[test]
fn the_server_speaks_what_a_stock_client_expects() {
    let (c, s) = ips(65);
    let port = "21065";
    let server = Command::new(BIN)
        .args([
            "perf",
            "write",
            "--perftest",
            "--server",
            "--bind",
            &s,
            "--port",
            port,
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut t = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(x) = connect_from(&c, &format!("{s}:{port}")) {
            t = Some(x);
            break;
        }
    }
    let mut t = t.expect("the server never listened");
    t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // 1. Versions: 16 bytes, NUL-padded.
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(b"6.29");
    let theirs = step(&mut t, &v);
    assert_eq!(&theirs[..5], b"6.27\0");
    assert!(theirs[5..].iter().all(|&b| b == 0));
    // 2. Page size and cache line size, big-endian.
    assert_eq!(step(&mut t, &4096u32.to_be_bytes()), 4096u32.to_be_bytes());
    assert_eq!(step(&mut t, &64u32.to_be_bytes()), 64u32.to_be_bytes());
    // 3. MTU as ibv_mtu text: we offer 4096 ("5"), roce's default is 4096 too.
    assert_eq!(step(&mut t, b"5\0"), b"5\0");
    // 4. Key records: one per QP, one per QP again, one after RTR (one QP).
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    let cip: std::net::Ipv4Addr = c.parse().unwrap();
    gid[12..].copy_from_slice(&cip.octets());
    let mine = record(0x1234, 0x00ab_cdef, 0x77, 0x7f00_0000_0000, gid);
    let mut server_keys = Vec::new();
    for _ in 0..3 {
        let r = step(&mut t, &mine);
        let d = Dest::parse(&r, Variant::Gid)
            .unwrap_or_else(|e| panic!("{e:?}: {:?}", String::from_utf8_lossy(&r)));
        server_keys.push(d);
    }
    let d = server_keys[0];
    assert!(
        server_keys.iter().all(|k| *k == d),
        "the same record each time"
    );
    let sip: std::net::Ipv4Addr = s.parse().unwrap();
    assert_eq!(
        d.ipv4(),
        Some(sip.octets()),
        "the server's GID is its address"
    );
    assert_eq!(d.lid, 0);
    assert!(d.qpn > 1 && d.qpn <= 0xff_ffff && d.rkey != 0 && d.vaddr != 0);
    // 5. The test (a scripted client sends no RDMA traffic), then the end-of-test record.
    let r = step(&mut t, &mine);
    assert_eq!(Dest::parse(&r, Variant::Gid).unwrap(), d);
    // 6. Reports: size, iterations (8 bytes each, big-endian), three doubles: peak and
    //    average in MB/sec (perftest's unit without --report_gbits), Mpps.
    step(&mut t, &65536u64.to_be_bytes());
    step(&mut t, &5000u64.to_be_bytes());
    for x in [12.5f64, 11.25, 0.021] {
        step(&mut t, &x.to_be_bytes());
    }
    // 7. Closing record, then close.
    let r = step(&mut t, &mine);
    assert_eq!(Dest::parse(&r, Variant::Gid).unwrap(), d);
    drop(t);
    let out = server.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    // The JSON keeps Gb/s: MB/sec x 2^20 x 8 / 10^9.
    let gbps = |mb: f64| mb * 1_048_576.0 * 8.0 / 1e9;
    assert!(
        (j["bw_peak_gbps"].as_f64().unwrap() - gbps(12.5)).abs() < 1e-9,
        "{j}"
    );
    assert!(
        (j["bw_avg_gbps"].as_f64().unwrap() - gbps(11.25)).abs() < 1e-9,
        "{j}"
    );
    assert_eq!(j["msg_rate_mpps"], 0.021);
    // The server measures nothing: size and iterations are the client's.
    assert_eq!(j["size"], 65536);
    assert_eq!(j["iterations"], 5000);
}

#[test]
fn an_old_or_foreign_peer_is_refused_in_one_line() {
    let (_, s) = ips(67);
    let port = "21067";
    let server = Command::new(BIN)
        .args([
            "perf",
            "write",
            "--perftest",
            "--server",
            "--bind",
            &s,
            "--port",
            port,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut t = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(x) = TcpStream::connect(format!("{s}:{port}")) {
            t = Some(x);
            break;
        }
    }
    let mut t = t.expect("the server never listened");
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(b"5.10");
    let _ = step(&mut t, &v);
    // One line, and the server listens again.
    let line = gave_up(server, Duration::from_secs(10));
    assert!(line.contains("5.70 or newer"), "{line}");
    assert!(line.contains("perftest exchange, versions"), "{line}");
}

#[test]
fn roces_perftest_client_and_server_run_a_real_test() {
    let (c, s) = ips(68);
    for test in ["write", "read"] {
        let (code, out, err) = roce(&[
            "perf",
            test,
            "--perftest",
            "-n",
            "500",
            "--client-ip",
            &c,
            "--server-ip",
            &s,
            "--port",
            "21068",
            "--json",
        ]);
        assert_eq!(code, 0, "{out}{err}");
        let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(j["iterations"], 500);
        assert!(j["bw_avg_gbps"].as_f64().unwrap() > 0.0);
    }
}

/// `roce perf write --perftest --server` on `s:port` with `extra` flags, and a TCP connection
/// to it that has gone through perftest's client side up to the test (versions, page and
/// cache line sizes, MTU, three key records).
fn served(s: &str, c: &str, port: &str, extra: &[&str]) -> (Child, TcpStream, Vec<u8>) {
    let mut args = vec![
        "perf",
        "write",
        "--perftest",
        "--server",
        "--bind",
        s,
        "--port",
        port,
    ];
    args.extend_from_slice(extra);
    let server = Command::new(BIN)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut t = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        if let Ok(x) = connect_from(c, &format!("{s}:{port}")) {
            t = Some(x);
            break;
        }
    }
    let mut t = t.expect("the server never listened");
    t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut v = [0u8; 16];
    v[..4].copy_from_slice(b"6.29");
    step(&mut t, &v);
    step(&mut t, &4096u32.to_be_bytes());
    step(&mut t, &64u32.to_be_bytes());
    step(&mut t, b"5\0");
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    let cip: std::net::Ipv4Addr = c.parse().unwrap();
    gid[12..].copy_from_slice(&cip.octets());
    let mine = record(0x1234, 0x00ab_cdef, 0x77, 0x7f00_0000_0000, gid);
    for _ in 0..3 {
        step(&mut t, &mine);
    }
    (server, t, mine)
}

/// Waits up to `limit` for `server` to say, in one line, that it gave a client up, checks
/// that it still runs (it listens again: a client's fault does not end it), and stops it.
/// Returns that line.
fn gave_up(mut server: Child, limit: Duration) -> String {
    use std::io::BufRead;
    let stderr = server.stderr.take().expect("the server's stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(l);
        }
    });
    let t0 = Instant::now();
    let mut seen = String::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
                if l.contains("gave up a run with") {
                    std::thread::sleep(Duration::from_millis(200));
                    let running = server.try_wait().unwrap().is_none();
                    let _ = server.kill();
                    let _ = server.wait();
                    assert!(running, "the server ended after giving a client up: {seen}");
                    return l;
                }
            }
            Err(_) if t0.elapsed() > limit => {
                let _ = server.kill();
                panic!("no client given up within {limit:?}: {seen}");
            }
            Err(_) => {}
        }
    }
}

#[test]
fn a_client_that_reports_what_no_test_measures_costs_the_server_that_client() {
    let (c, s) = ips(144);
    for (i, (iters, figures, why)) in [
        (
            5000u64,
            [f64::NAN, 11.25, 0.021],
            "its peak bandwidth is NaN",
        ),
        (
            5000,
            [12.5, f64::INFINITY, 0.021],
            "its average bandwidth is inf",
        ),
        (5000, [12.5, 11.25, -1.0], "its message rate is -1"),
        (
            0,
            [12.5, 11.25, 0.021],
            "0 iterations of 65536 bytes: it ran no test",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let port = format!("{}", 21144 + i);
        let (server, mut t, mine) = served(&s, &c, &port, &[]);
        step(&mut t, &mine);
        step(&mut t, &65536u64.to_be_bytes());
        step(&mut t, &iters.to_be_bytes());
        for x in figures {
            t.write_all(&x.to_be_bytes()).unwrap();
            let mut back = [0u8; 8];
            // The server answers each figure with its own, then refuses the report.
            let _ = t.read_exact(&mut back);
        }
        let line = gave_up(server, Duration::from_secs(30));
        assert!(
            line.contains("the client's report: ") && line.contains(why),
            "{line}"
        );
    }
}

#[test]
fn a_client_silent_after_the_keys_holds_the_server_only_the_tests_length() {
    let (c, s) = ips(145);
    // Ten 1 KiB messages: the test's length is 10 ms, the server waits that and the
    // exchange's 30 s margin for the end-of-test record, not an hour.
    let (server, t, _) = served(&s, &c, "21150", &["-n", "10", "-s", "1024"]);
    let t0 = Instant::now();
    let line = gave_up(server, Duration::from_secs(60));
    let took = t0.elapsed();
    drop(t);
    assert!(line.contains("did not come within 30 s"), "{line}");
    assert!(
        took >= Duration::from_secs(25),
        "gave up early: {took:?}: {line}"
    );
}

/// A TCP connection to `to` from address `from` (the scripted client's GID is `from`: a
/// server takes a key record whose GID names the host the exchange came from).
fn connect_from(from: &str, to: &str) -> std::io::Result<TcpStream> {
    use rustix::net::{bind, connect, socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
    let local: std::net::SocketAddr = format!("{from}:0").parse().expect("an address");
    bind(&fd, &local)?;
    let to: std::net::SocketAddr = to.parse().expect("an address");
    connect(&fd, &to)?;
    Ok(TcpStream::from(fd))
}

/// One lock-step step as perftest's server does it: read theirs, write ours (same length).
fn server_step(t: &mut TcpStream, mine: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut theirs = vec![0u8; mine.len()];
    t.read_exact(&mut theirs)?;
    t.write_all(mine)?;
    Ok(theirs)
}

/// A perftest server answers roce's client with a GID that is not unicast, or one naming
/// another host than the one its TCP connection reached: the client refuses in one line
/// before anything is sent (a key record may not aim its traffic at a third host). With
/// `--peer-roce` naming that host (the exchange over a management network, RoCE over the
/// fabric), it goes on.
#[test]
fn a_servers_gid_is_checked_and_a_redirect_needs_peer_roce() {
    let (c, s) = ips(146);
    let cases = [
        ("224.0.0.9", None, Some("which is not a unicast address")),
        (
            "127.0.146.9",
            None,
            Some("but the exchange came from 127.0.146.2: refused"),
        ),
        ("127.0.146.9", Some("127.0.146.9"), None),
    ];
    for (k, (named, peer_roce, refused)) in cases.into_iter().enumerate() {
        let port = 21146 + k as u16;
        let listener = std::net::TcpListener::bind(format!("{s}:{port}")).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["perf", "write", "--perftest", "--client"])
            .arg(format!("{s}:{port}"))
            .args(["--bind", &c]);
        if let Some(p) = peer_roce {
            cmd.args(["--peer-roce", p]);
        }
        let client = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        listener.set_nonblocking(true).unwrap();
        let t0 = Instant::now();
        let mut t = loop {
            match listener.accept() {
                Ok((t, _)) => break t,
                Err(_) if t0.elapsed() < Duration::from_secs(20) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("the client never connected: {e}"),
            }
        };
        t.set_nonblocking(false).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut v = [0u8; 16];
        v[..4].copy_from_slice(b"6.29");
        server_step(&mut t, &v).unwrap();
        server_step(&mut t, &4096u32.to_be_bytes()).unwrap();
        server_step(&mut t, &64u32.to_be_bytes()).unwrap();
        server_step(&mut t, b"5\0").unwrap();
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        let ip: std::net::Ipv4Addr = named.parse().unwrap();
        gid[12..].copy_from_slice(&ip.octets());
        let mine = record(0x4321, 0x0012_3456, 0x99, 0x7f00_0000_1000, gid);
        server_step(&mut t, &mine).unwrap();
        let next = server_step(&mut t, &mine);
        drop(t);
        let mut client = client;
        if refused.is_none() {
            // The client went on to the next record; this scripted server stops there.
            let r = next.as_ref().expect("the client's second record");
            assert!(Dest::parse(r, Variant::Gid).is_ok());
            let _ = client.kill();
        }
        let out = client.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("roce ")).collect();
        if let Some(why) = refused {
            assert!(
                next.is_err(),
                "the client went on with a GID naming {named}"
            );
            assert!(!out.status.success(), "{err}");
            assert_eq!(lines.len(), 1, "{err}");
            assert!(
                lines[0].contains(&format!("the peer's GID names {named}"))
                    && lines[0].contains(why),
                "{err}"
            );
        }
    }
}
