//! Live capture on `lo`: RoCE packets built by proto are sent through an ordinary UDP socket
//! to 127.0.0.1:4791 while `roce decode --interface lo` runs; every one must be seen with a
//! valid ICRC, and the `--write` file must hold them too.
//!
//! A UDP socket does not let us write the IP header, so the ICRC is computed from header
//! fields (`FrameBuilder::icrc_seed`): identification 0 and DF, which is what Linux writes for
//! an unconnected UDP socket with `IP_MTU_DISCOVER = IP_PMTUDISC_DO` (in the default "want"
//! mode the kernel may fragment, so it picks a random identification).
//!
//! Needs root (or CAP_NET_RAW); without it the test prints why and passes.
use roce_pcap::live::{self, LiveOptions};
use roce_pcap::{Options, OutputFormat};
use roce_proto::{FrameBuilder, Opcode, Psn, Qpn};
use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::time::Duration;

const QP: u32 = 0xab_cdef;
const N: u32 = 20;

#[test]
fn live_capture_on_loopback_sees_every_packet_with_a_valid_icrc() {
    if !live::is_root() {
        println!(
            "SKIPPED: live capture needs root or CAP_NET_RAW; this test is not running as root"
        );
        return;
    }
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    rustix::net::sockopt::set_ip_mtu_discover(
        &sock,
        rustix::net::sockopt::Ipv4PathMtuDiscovery::DO,
    )
    .unwrap();
    let src_port = sock.local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("roce-live-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("lo.pcap");
    let lo = LiveOptions {
        interface: "lo".into(),
        duration: Some(Duration::from_secs(10)),
        write: Some(saved.to_str().unwrap().into()),
        stop: None,
        one_copy_on_loopback: false,
    };
    let opts = Options {
        format: OutputFormat::Json,
        qp: Some(QP),
        // pnet sees each loopback packet twice (outgoing and incoming).
        count: Some(u64::from(2 * N)),
        ..Default::default()
    };
    let capture = std::thread::spawn(move || {
        let mut out = Vec::new();
        let outcome = live::capture(&lo, opts, &mut out);
        (out, outcome)
    });
    // The capture opens its socket asynchronously: send the whole set in rounds until it has
    // seen enough (each round starts again at PSN 0, so a late start still sees every PSN).
    let builder = FrameBuilder::ipv4([127, 0, 0, 1], [127, 0, 0, 1], src_port);
    let payload = [0x5a_u8; 40];
    let mut buf = [0u8; 256];
    for _round in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        if capture.is_finished() {
            break;
        }
        for i in 0..N {
            let mut p = roce_pcap::synth::packet_for(Opcode::RC_SEND_ONLY, i, &payload);
            p.bth.dest_qp = Qpn(QP);
            p.bth.psn = Psn::new(i);
            let len = p.buffer_len();
            let seed = builder.icrc_seed(len);
            p.emit_with_icrc(&mut buf[..len], &seed).unwrap();
            sock.send_to(&buf[..len], "127.0.0.1:4791").unwrap();
        }
    }

    let (out, outcome) = capture.join().unwrap();
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    let text = String::from_utf8(out).unwrap();
    let mut psns = BTreeSet::new();
    for line in text.lines() {
        let o: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(o["bth"]["dest_qp"], QP);
        assert_eq!(o["icrc_ok"], true, "{o}");
        assert_eq!(o["src"], format!("127.0.0.1:{src_port}"));
        psns.insert(o["bth"]["psn"].as_u64().unwrap());
    }
    assert_eq!(
        psns,
        (0..u64::from(N)).collect(),
        "every packet seen:\n{text}"
    );

    // The saved pcap decodes to the same packets.
    let (objs, o) = {
        let mut out = Vec::new();
        let o = roce_pcap::decode_path(saved.to_str().unwrap(), opts, &mut out);
        (String::from_utf8(out).unwrap(), o)
    };
    assert!(o.error.is_none());
    assert_eq!(objs.lines().count(), text.lines().count());
    assert_eq!(o.stats.icrc_failures, 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_interface_is_a_clear_error() {
    let lo = LiveOptions {
        interface: "no-such-if0".into(),
        duration: Some(Duration::from_millis(100)),
        write: None,
        stop: None,
        one_copy_on_loopback: false,
    };
    let o = live::capture(&lo, Options::default(), &mut Vec::new());
    assert_eq!(
        o.error.as_ref().unwrap().to_string(),
        "no network interface named \"no-such-if0\""
    );
    assert_eq!(o.exit_code(false), 1);
}

#[test]
fn the_stop_flag_ends_a_capture_cleanly() {
    if !live::is_root() {
        println!(
            "SKIPPED: live capture needs root or CAP_NET_RAW; this test is not running as root"
        );
        return;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lo = LiveOptions {
        interface: "lo".into(),
        duration: Some(Duration::from_secs(20)),
        write: None,
        stop: Some(stop.clone()),
        one_copy_on_loopback: false,
    };
    let t = std::time::Instant::now();
    let capture =
        std::thread::spawn(move || live::capture(&lo, Options::default(), &mut Vec::new()));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let o = capture.join().unwrap();
    assert!(o.error.is_none(), "{:?}", o.error);
    assert!(t.elapsed() < Duration::from_secs(5), "stopped promptly");
}
