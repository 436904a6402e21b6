//! `roce pingpong`: the verbs examples' exchange and SEND ping-pong, roce at both ends in one
//! process (the stock tools are the other end in `tests/rxe.rs`), and its refusals.
mod common;

use common::{ips, roce};

#[test]
fn every_tool_runs_both_ends_in_one_process() {
    for (i, (tool, extra)) in [
        ("rc", vec!["-s", "10000", "-m", "2048"]),
        ("uc", vec![]),
        ("ud", vec!["-s", "2048"]),
        ("srq", vec!["-q", "5", "-n", "300"]),
    ]
    .into_iter()
    .enumerate()
    {
        let port = (21400 + i).to_string();
        let (c, s) = ips(110 + i as u8);
        let mut args = vec![
            "pingpong",
            tool,
            "--loopback",
            "--json",
            "--link",
            "udp",
            "-p",
            &port,
        ];
        args.extend(["--client-ip", &c, "--server-ip", &s]);
        args.extend(&extra);
        let (code, out, err) = roce(&args);
        assert_eq!(code, 0, "{tool}: {out}{err}");
        let ends: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(ends.len(), 2, "{out}");
        let iters = if tool == "srq" { 300 } else { 1000 };
        for e in &ends {
            let got = e["received"].as_u64().unwrap();
            assert!((iters..iters + 5).contains(&got), "{tool}: {e}");
            assert_eq!(e["retransmitted_packets"], 0, "{tool}: {e}");
        }
        assert_eq!(ends[0]["role"], "client");
        assert_eq!(ends[1]["peer"], c);
    }
}

#[test]
fn chk_verifies_the_buffer() {
    let (code, out, err) = roce(&[
        "pingpong",
        "rc",
        "--loopback",
        "-c",
        "-s",
        "20000",
        "-n",
        "50",
        "--json",
        "-p",
        "21410",
        "--link",
        "udp",
        "--client-ip",
        "127.0.115.1",
        "--server-ip",
        "127.0.115.2",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let server: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
    assert_eq!(server["validated"], true, "{out}");
}

#[test]
fn bad_flags_get_one_line() {
    for (args, want) in [
        (vec!["pingpong", "xx"], "unknown tool"),
        (
            vec!["pingpong", "ud", "--loopback", "-s", "8192"],
            "one packet",
        ),
        (
            vec!["pingpong", "rc", "--loopback", "-m", "1000"],
            "-m 1000",
        ),
        (vec!["pingpong", "srq", "--loopback", "-q", "300"], "-q 300"),
    ] {
        let (code, out, err) = roce(&args);
        assert_ne!(code, 0, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_server_that_is_not_there_is_one_line() {
    let (code, out, err) = roce(&["pingpong", "rc", "127.0.0.1", "-p", "21411"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("cannot reach"), "{err}");
    assert_eq!(
        err.trim().lines().count(),
        2,
        "the client line and the error: {err}"
    );
}

#[test]
fn rping_at_both_ends() {
    let (c, s) = ips(116);
    let mut server = std::process::Command::new(common::BIN)
        .args([
            "rping", "-s", "-a", &s, "-S", "100", "--json", "--link", "udp", "-p", "21416",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(400));
    let (code, out, err) = roce(&[
        "rping", "-c", "-a", &s, "-I", &c, "-C", "7", "-S", "100", "-v", "--json", "--link", "udp",
        "-p", "21416",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        (r["pings"].as_u64(), r["verified"].as_u64()),
        (Some(7), Some(7)),
        "{out}"
    );
    assert_eq!(r["data"][6].as_str().unwrap().len(), 99);
    let status = server.wait().unwrap();
    assert!(status.success());
    let mut so = String::new();
    std::io::Read::read_to_string(server.stdout.as_mut().unwrap(), &mut so).unwrap();
    let sr: serde_json::Value = serde_json::from_str(so.lines().last().unwrap()).unwrap();
    assert_eq!(sr["pings"].as_u64(), Some(7), "{so}");
}

#[test]
fn udaddy_and_ucmatose_at_both_ends() {
    for (i, (server, client)) in [
        (
            vec!["udaddy", "-C", "20", "-S", "500"],
            vec!["udaddy", "-C", "20", "-S", "500"],
        ),
        (
            vec!["ucmatose", "-c", "3", "-C", "5"],
            vec!["ucmatose", "-c", "3", "-C", "5"],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let (c, s) = ips(117 + i as u8);
        let port = (21417 + i).to_string();
        let mut sargs = server.clone();
        sargs.extend(["-b", &s, "-p", &port, "--json", "--link", "udp"]);
        let mut srv = std::process::Command::new(common::BIN)
            .args(&sargs)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(400));
        let mut cargs = client.clone();
        cargs.extend(["-s", &s, "-b", &c, "-p", &port, "--json", "--link", "udp"]);
        let (code, out, err) = roce(&cargs);
        assert_eq!(code, 0, "{cargs:?}: {out}{err}");
        let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let want = if i == 0 { 20 } else { 15 };
        assert_eq!(
            (r["sent"].as_u64(), r["received"].as_u64()),
            (Some(want), Some(want)),
            "{out}"
        );
        assert!(srv.wait().unwrap().success());
    }
}

/// Hostile clients of `roce pingpong`'s server: records that are not the format's, one
/// whose GID is zero, one whose GID names another host than the one it connects from, one
/// that names a multicast group. Each costs the server that client, in one line, never a
/// hang or a panic, and the next client is served: a stranger who speaks first does not
/// end the server.
#[test]
fn a_hostile_exchange_costs_the_server_that_client_only() {
    use std::io::Write;
    let (c, s) = ips(119);
    let port = "21419";
    let cases: [(&[u8], &str); 5] = [
        (
            b"0000:zzzzzz:000000:00000000000000000000000000000000\0",
            "pingpong record",
        ),
        (&[0xff; 52], "pingpong record"),
        (
            b"0000:000011:000001:00000000000000000000000000000000\0",
            "run the peer with -g",
        ),
        // ::ffff:10.9.9.9, a third host.
        (
            b"0000:000011:000001:00000000000000000000ffff0a090909\0",
            "10.9.9.9, but the exchange came from",
        ),
        // ::ffff:224.0.0.1, a multicast group.
        (
            b"0000:000011:000001:00000000000000000000ffffe0000001\0",
            "not a unicast address",
        ),
    ];
    let srv = std::process::Command::new(common::BIN)
        .args(["pingpong", "rc", "--bind", &s, "-p", port, "--link", "udp"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    for (payload, _) in &cases {
        let local = std::net::SocketAddr::new(c.parse().unwrap(), 0);
        let sock = connect_from(local, &s, 21419);
        let mut t = sock;
        t.write_all(payload).unwrap();
        // The server reads the record, refuses it and closes the connection.
        let mut rest = Vec::new();
        let _ = std::io::Read::read_to_end(&mut t, &mut rest);
    }
    let (code, out, err) = roce(&[
        "pingpong", "rc", &s, "-p", port, "--bind", &c, "--link", "udp",
    ]);
    assert_eq!(code, 0, "the next client: {out}{err}");
    let out = srv.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("gave up a run with"))
        .collect();
    assert_eq!(lines.len(), cases.len(), "{err}");
    for ((_, why), line) in cases.iter().zip(&lines) {
        assert!(
            line.starts_with("roce pingpong: ") && line.contains(why),
            "{why}: {err}"
        );
        assert!(line.contains(&c), "{err}");
    }
}

/// A TCP connection to `s:port` from `local` (the test's client address, so that the
/// server sees where the records came from).
fn connect_from(local: std::net::SocketAddr, s: &str, port: u16) -> std::net::TcpStream {
    use rustix::net::{bind, connect, socket, AddressFamily, SocketType};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    bind(&fd, &local).unwrap();
    let to = std::net::SocketAddr::new(s.parse().unwrap(), port);
    connect(&fd, &to).unwrap();
    std::net::TcpStream::from(fd)
}
