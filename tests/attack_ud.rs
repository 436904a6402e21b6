//! `roce perf -c UD` under an off-path sender: a UDP socket on a third loopback address that
//! is handed the server's UD QPN (a sniffer on `lo` reads it off the run, standing in for a
//! 2^24 sweep) and sends 1 KiB UD SENDs with perftest's well-known Q_Key, each with the ICRC
//! its own headers give. roce's own runs draw their Q_Key from the OS CSPRNG, so none of them
//! lands: the ping-pong's 64-byte receives never see a 1 KiB SEND (which used to end the run
//! with `LocLenErr` on both ends). A sender who has the Q_Key as well meets the receiver's
//! source check: only the peer's address and QPN count. Needs root and tcpdump for the
//! sniffer; under CI a missing one fails the test.
mod common;

use std::io::Read;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;
use roce_driver::Secrets;
use roce_proto::{BthRepr, DethRepr, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, ROCEV2_UDP_PORT};
use roce_stack::PathConfig;

/// The destination QPN of the first RoCEv2 datagram from `src` to `dst` on `lo`, read from
/// tcpdump's pcap output (Ethernet framing on `lo`: BTH at byte 42 of the frame).
fn sniff_dest_qpn(src: &str, dst: &str) -> Option<u32> {
    let filter = format!("udp and dst port 4791 and src host {src} and dst host {dst}");
    let mut td = Command::new("tcpdump")
        .args(["-i", "lo", "-c", "1", "-U", "-w", "-", &filter])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut out = Vec::new();
    let mut stdout = td.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_end(&mut out);
        out
    });
    let t0 = Instant::now();
    while td.try_wait().ok()?.is_none() {
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = td.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = reader.join().ok()?;
    // 24-byte file header, 16-byte record header, then the frame.
    let bth = 24 + 16 + 14 + 20 + 8;
    let q = out.get(bth + 5..bth + 8)?;
    Some(u32::from_be_bytes([0, q[0], q[1], q[2]]))
}

/// Root and tcpdump, for the sniffer; under CI their absence fails the test.
fn can_sniff() -> bool {
    let have_tcpdump = Command::new("tcpdump")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    });
    if !(have_tcpdump && root) {
        assert!(std::env::var("CI").is_err(), "CI runs as root with tcpdump");
        eprintln!("SKIPPED: the sniffer needs root and tcpdump");
    }
    have_tcpdump && root
}

/// A `perf send -c UD --lat` run on `127.0.n.x` (the client with `--seed` when `seed`) under
/// 1 KiB UD SENDs from `127.0.n.3` to the server's QP with Q_Key `qkey`; both ends must exit 0.
fn attacked(n: u8, seed: Option<&str>, qkey: QKey) {
    let (client, server) = (format!("127.0.{n}.1"), format!("127.0.{n}.2"));
    let attacker = UdpSocket::bind(format!("127.0.{n}.3:0")).unwrap();
    let srv = Command::new(BIN)
        .args([
            "perf", "send", "-c", "UD", "--lat", "--server", "--bind", &server,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let sniffer = {
        let (c, s) = (client.clone(), server.clone());
        std::thread::spawn(move || sniff_dest_qpn(&c, &s))
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut args = vec![
        "perf", "send", "-c", "UD", "--lat", "-s", "64", "-D", "3", "--client", &server, "--bind",
        &client,
    ];
    if let Some(s) = seed {
        args.extend(["--seed", s]);
    }
    let cl = Command::new(BIN)
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let qpn = sniffer
        .join()
        .unwrap()
        .expect("no datagram of the run seen on lo");
    // 1 KiB UD SENDs to the server's QP, a valid ICRC for the attacker's own addresses
    // (which is all a UD QP can check).
    let from = attacker.local_addr().unwrap();
    let path = PathConfig {
        local: server.parse::<IpAddr>().unwrap(),
        remote: from.ip(),
        remote_src_port: from.port(),
        ..PathConfig::default()
    };
    let payload = vec![0x5a; 1024];
    let mut buf = vec![0u8; 2048];
    let mut sent = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1500) {
        let p = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                dest_qp: Qpn(qpn),
                psn: Psn::new(sent as u32),
                pkey: PKey::DEFAULT,
                ..BthRepr::default()
            },
            deth: Some(DethRepr {
                qkey,
                resv: 0,
                src_qp: Qpn(0x77),
            }),
            payload: &payload,
            ..PacketRepr::default()
        };
        let n = p.emit(&mut buf).unwrap();
        path.rx_icrc(n).fill(&mut buf[..n]);
        let to = SocketAddr::new(path.local, ROCEV2_UDP_PORT);
        if attacker.send_to(&buf[..n], to).is_ok() {
            sent += 1;
        }
        if sent.is_multiple_of(16) {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let out = cl.wait_with_output().unwrap();
    let srv = srv.wait_with_output().unwrap();
    assert!(sent > 1000, "the attacker sent only {sent}");
    assert!(
        out.status.success() && srv.status.success(),
        "{sent} forged UD SENDs to QP {qpn:#x} (Q_Key {:#x}) broke the run: client: {}{}\nserver: {}",
        qkey.0,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&srv.stderr)
    );
}

/// perftest's well-known Q_Key: roce's own runs draw theirs, so the datagrams are dropped at
/// the Q_Key check.
#[test]
fn a_forged_ud_send_with_perftests_qkey_lands_nowhere() {
    if can_sniff() {
        attacked(151, None, QKey(0x1111_1111));
    }
}

/// A sender who has the Q_Key too (here: the client's `--seed` gives it away): the perf
/// receiver takes only its peer's datagrams (address and QPN), counts the rest as foreign and
/// posts their receives again.
#[test]
fn a_ud_send_with_the_right_qkey_from_a_stranger_ends_nothing() {
    if can_sniff() {
        let qkey = Secrets::from_seed(Some(7)).qkey(0xc11e).unwrap();
        attacked(152, Some("7"), qkey);
    }
}
