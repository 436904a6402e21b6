//! A peer that is not roce: `tests/peer/scapy_peer.py` builds every datagram with scapy
//! (`scapy.contrib.roce` computes the ICRC independently) with the headers other stacks write
//! (rxe's DF and counting identification and flow-label source port, no DF, source ports 2 and
//! 69), and drives a QP of a roce endpoint over loopback, on the UDP link and on the packet
//! link, over IPv4 and IPv6. Every intact datagram must be accepted and executed (the WRITEs
//! land, the READ is answered with their bytes), the one with a flipped byte dropped as
//! `bad_icrc`, and each ICRC counted under the check it got.
//!
//! Needs root (scapy sends through a raw socket, the packet link opens a packet socket) and
//! scapy; outside CI a missing one is reported and the test passes, under `CI=true` it fails.
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use roce_driver::impair::Impairment;
use roce_driver::{AppError, Application, Endpoint, LinkChoice};
use roce_proto::{Ecn, Psn, Qpn};
use roce_stack::{
    Access, ConnectParams, Device, DeviceConfig, Instant, PathConfig, QpCaps, QpStats,
};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn have_scapy() -> bool {
    Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `false` (after saying why) when this machine cannot run the peer; panics under CI.
fn can_run() -> bool {
    let why = if !is_root() {
        "not root"
    } else if !have_scapy() {
        "python3 with scapy not found"
    } else {
        return true;
    };
    assert!(
        std::env::var("CI").is_err(),
        "the scapy peer cannot run under CI: {why}"
    );
    eprintln!("SKIPPED: the scapy peer needs root and scapy ({why})");
    false
}

/// Serves until told to stop.
struct Target;
impl Application for Target {
    fn poll(&mut self, _dev: &mut Device, _now: Instant) -> Result<(), AppError> {
        Ok(())
    }
    fn done(&self) -> bool {
        false
    }
}

struct Outcome {
    peer: serde_json::Value,
    region: Vec<u8>,
    stats: QpStats,
    link: roce_driver::Link,
}

/// A roce endpoint at `server` with one QP (peer QPN 0x77 at `peer`), driven by the scapy
/// peer; returns what the peer saw, the region and the QP's counters.
fn drive(server: IpAddr, peer: IpAddr, link: LinkChoice) -> Outcome {
    let v6 = server.is_ipv6();
    let reply_port = if v6 { 4792 } else { 4791 };
    let mut dev = Device::new(DeviceConfig {
        key_seed: 7,
        ..DeviceConfig::default()
    });
    let pd = dev.alloc_pd();
    let mr = dev.reg_mr(
        pd,
        4096,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let cq = dev.create_cq();
    let qpn = dev.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
    let psn = 0xff_fffe; // crosses the 2^24 wrap
    let c = ConnectParams {
        dest_qpn: Qpn(0x77),
        rq_psn: Psn::new(psn),
        sq_psn: Psn::new(100),
        access: Access::REMOTE_WRITE | Access::REMOTE_READ,
        path: PathConfig {
            local: server,
            remote: peer,
            remote_port: reply_port,
            ecn: Ecn::Ect0,
            ..PathConfig::default()
        },
        ..ConnectParams::default()
    };
    dev.connect_qp(qpn, &c).unwrap();
    let (va, rkey) = dev.mr(mr).map(|m| (m.va(), m.rkey().0)).unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let endpoint = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut ep = Endpoint::bind_with(
                dev,
                SocketAddr::new(server, 4791),
                Impairment::default(),
                link,
            )
            .unwrap();
            ep.set_peer_port(reply_port);
            ready_tx.send(ep.link()).unwrap();
            let stop = async move {
                let _ = stop_rx.await;
                Ok::<(), roce_driver::DriverError>(())
            };
            ep.run(&mut Target, false, stop, Duration::from_secs(30))
                .await
                .unwrap();
            ep
        })
    });
    let link = ready_rx.recv().unwrap();
    let cfg = serde_json::json!({
        "server": server.to_string(),
        "peer": peer.to_string(),
        "reply_port": reply_port,
        "qpn": qpn.0,
        "psn": psn,
        "peer_qpn": 0x77,
        "va": va,
        "rkey": rkey,
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peer/scapy_peer.py");
    let out = Command::new("python3")
        .args([script, &cfg.to_string()])
        .output()
        .unwrap();
    stop_tx.send(()).unwrap();
    let ep = endpoint.join().unwrap();
    assert!(
        out.status.success(),
        "the scapy peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peer: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    Outcome {
        peer,
        region: ep.dev.mr(mr).unwrap().as_slice()[..64].to_vec(),
        stats: ep.dev.stats(),
        link,
    }
}

fn check(o: &Outcome, full: bool) {
    let want: Vec<u8> = (0..4u8).flat_map(|n| [0x40 + n; 16]).collect();
    assert_eq!(o.region, want, "the WRITEs did not all land: {}", o.peer);
    assert_eq!(
        o.peer["read"].as_str(),
        Some(hex(&want).as_str()),
        "the READ was not answered with the written bytes: {}",
        o.peer
    );
    assert_eq!(o.stats.drops.bad_icrc, 1, "{:?}", o.stats.drops);
    assert!(o.peer["naks"].as_array().unwrap().is_empty(), "{}", o.peer);
    let checked = o.stats.icrc_full + o.stats.icrc_solved;
    assert_eq!(checked, 5, "5 intact datagrams: {:?}", o.stats);
    if full {
        assert_eq!(o.stats.icrc_full, 5, "{:?}", o.stats);
    } else {
        // Only the datagram with identification 0 and DF matches without solving.
        assert_eq!(o.stats.icrc_solved, 4, "{:?}", o.stats);
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn scapy_peer_over_the_udp_link() {
    if !can_run() {
        return;
    }
    let o = drive(
        "127.0.95.2".parse().unwrap(),
        "127.0.95.1".parse().unwrap(),
        LinkChoice::Udp,
    );
    assert_eq!(o.link, roce_driver::Link::Udp);
    // The UDP socket does not show the identification and DF: solved for.
    check(&o, false);
}

#[test]
fn scapy_peer_over_the_packet_link() {
    if !can_run() {
        return;
    }
    let o = drive(
        "127.0.96.2".parse().unwrap(),
        "127.0.96.1".parse().unwrap(),
        LinkChoice::Packet,
    );
    assert_eq!(o.link, roce_driver::Link::Packet);
    check(&o, true);
}

#[test]
fn scapy_peer_over_the_packet_ring() {
    if !can_run() {
        return;
    }
    let o = drive(
        "127.0.97.2".parse().unwrap(),
        "127.0.97.1".parse().unwrap(),
        LinkChoice::PacketRing,
    );
    assert_eq!(o.link, roce_driver::Link::PacketRing);
    check(&o, true);
}

#[test]
fn scapy_peer_over_ipv6() {
    if !can_run() {
        return;
    }
    let o = drive(
        "::1".parse().unwrap(),
        "::1".parse().unwrap(),
        LinkChoice::Auto,
    );
    // Over IPv6 every covered field is known from the UDP socket.
    check(&o, true);
}

#[test]
fn real_captures_readdressed_by_scapy_pass_the_icrc_check() {
    if !have_scapy() {
        assert!(std::env::var("CI").is_err(), "scapy missing under CI");
        eprintln!("SKIPPED: python3 with scapy not found");
        return;
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/captures");
    let mut files = Vec::new();
    let mut todo = vec![std::path::PathBuf::from(dir)];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "pcap" || x == "pcapng") {
                files.push(p.display().to_string());
            }
        }
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peer/readdress.py");
    let out = Command::new("python3")
        .arg(script)
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut per_file = std::collections::BTreeMap::<String, u64>::new();
    let mut with_id = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let bytes: Vec<u8> = (0..v["ip"].as_str().unwrap().len() / 2)
            .map(|i| u8::from_str_radix(&v["ip"].as_str().unwrap()[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let where_ = format!("{} frame {}", v["file"], v["frame"]);
        // What the packet link hands the device: the real header.
        let (meta, payload) = roce_driver::packet::parse(&bytes)
            .unwrap_or_else(|| panic!("{where_}: not a whole IPv4/UDP datagram"));
        let roce_stack::Ipv4Seen::Seen {
            identification,
            dont_fragment,
        } = meta.ipv4
        else {
            panic!("{where_}: the packet link did not report the header");
        };
        with_id += u64::from(identification != 0);
        let path = PathConfig {
            local: meta.dst,
            remote: meta.src.ip(),
            ..PathConfig::default()
        };
        assert_eq!(
            path.check_icrc(&meta, payload),
            roce_stack::IcrcVerdict::Full,
            "{where_}: the packet link's check refused scapy's ICRC"
        );
        // What the UDP link hands it: no identification, no DF. Only (0, DF) matches
        // without solving.
        let unseen = roce_stack::RxMeta::new(meta.src, meta.dst, meta.ecn);
        let want = if identification == 0 && dont_fragment {
            roce_stack::IcrcVerdict::Full
        } else {
            roce_stack::IcrcVerdict::Solved
        };
        assert_eq!(
            path.check_icrc(&unseen, payload),
            want,
            "{where_}: the UDP link's check refused scapy's ICRC"
        );
        *per_file.entry(v["file"].to_string()).or_default() += 1;
    }
    let total: u64 = per_file.values().sum();
    assert!(total > 1000, "only {total} packets replayed: {per_file:?}");
    assert!(per_file.len() >= 15, "{per_file:?}");
    assert!(
        with_id > 500,
        "most rxe packets carry an identification: {with_id}"
    );
}
