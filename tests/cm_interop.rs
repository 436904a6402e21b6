//! roce's CM against captured peers (IBTA Vol 1 ch. 12): the ConnectRequest of a real
//! rdma_cm client (Linux rxe, `../shared/captures/linlinw5-rdma_ib_tutorial/rdma_cm.pcap` and
//! `rping.pcap`) goes through a device's QP1 into the passive CM, whose ConnectReply is
//! written to a capture and read back by tshark: a ConnectReply whose communication IDs, QPN,
//! starting PSN and private data answer that REQ. And roce's own REQ decodes in tshark with
//! the same fields as the captured one.
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

use roce_proto::cm::{Message, MessageView};
use roce_proto::mad;
use roce_proto::{FrameBuilder, Psn, Qpn};
use roce_stack::cm::{Cm, CmConfig, CmEvent, ConnectOptions, QpOffer};
use roce_stack::gsi::OutgoingMad;
use roce_stack::{Device, Instant, Ipv4Seen, RxMeta};

fn capture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/captures/linlinw5-rdma_ib_tutorial")
        .join(name)
}

/// The first CM REQ of a capture: its datagram (transport bytes) and what a packet link
/// would have seen of it.
fn captured_req(path: &Path) -> (Vec<u8>, RxMeta) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = roce_pcap::CaptureReader::new(&bytes[..], "capture").unwrap();
    while let Some(rec) = r.next_record().unwrap() {
        let Ok(f) = roce_pcap::link::parse(rec.link_type, rec.data) else {
            continue;
        };
        let (Some(ip), Some(udp)) = (f.ip, f.udp) else {
            continue;
        };
        let t = f.transport;
        // UD SEND ONLY to QP1 carrying a CM REQ (class 7, attribute 0x0010).
        let is_req = t.first() == Some(&0x64)
            && t.get(5..8) == Some(&[0, 0, 1][..])
            && t.get(20 + 1) == Some(&0x07)
            && t.get(20 + 16..20 + 18) == Some(&[0x00, 0x10][..]);
        if is_req {
            let meta = RxMeta::new(SocketAddr::new(ip.src, udp.src_port), ip.dst, ip.ecn)
                .with_ipv4(Ipv4Seen::Seen {
                    identification: ip.identification,
                    dont_fragment: ip.dont_fragment,
                });
            return (t.to_vec(), meta);
        }
    }
    panic!("{}: no CM REQ", path.display());
}

/// Writes `datagrams` (transport bytes with their ICRC, the addresses and source port each was
/// sent with, and the IPv4 identification and DF it had) as Ethernet frames into a pcap.
fn write_pcap(path: &Path, datagrams: &[(Vec<u8>, IpAddr, IpAddr, u16, Ipv4Seen)]) {
    let mut out = Vec::new();
    let mut w = roce_pcap::PcapWriter::new(&mut out, 1, false, 65535).unwrap();
    for (i, (d, src, dst, sport, seen)) in datagrams.iter().enumerate() {
        let (IpAddr::V4(s), IpAddr::V4(t)) = (src, dst) else {
            panic!("IPv4 captures")
        };
        let mut b = FrameBuilder::ipv4(s.octets(), t.octets(), *sport);
        if let (
            roce_proto::frame::IpParams::V4 {
                identification,
                dont_fragment,
                ..
            },
            Ipv4Seen::Seen {
                identification: id,
                dont_fragment: df,
            },
        ) = (&mut b.ip, *seen)
        {
            // The header the sender wrote: its ICRC covers the identification and DF.
            *identification = id;
            *dont_fragment = df;
        }
        let mut buf = vec![0u8; b.frame_len_for(d.len())];
        let n = b.wrap(d, &mut buf).unwrap();
        let ts = roce_pcap::Timestamp {
            secs: 1_700_000_000,
            nanos: i as u32 * 1000,
        };
        w.write_packet(ts, &buf[..n], n as u32).unwrap();
    }
    w.flush().unwrap();
    std::fs::write(path, out).unwrap();
}

/// tshark's fields of every frame: (summary line, every `infiniband.cm.*` field with its value).
fn tshark(path: &Path) -> Vec<(String, Vec<(String, String)>)> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-T", "ek"])
        .output()
        .expect("tshark (CI installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = Command::new("tshark").arg("-r").arg(path).output().unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&summary.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let mut frames = Vec::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let Some(ib) = v["layers"]["infiniband"].as_object() else {
            continue;
        };
        let mut fields: Vec<(String, String)> = ib
            .iter()
            .filter(|(k, _)| k.contains("_cm_"))
            .map(|(k, v)| (k.clone(), v.as_str().map_or(v.to_string(), str::to_string)))
            .collect();
        fields.sort();
        frames.push((lines.get(frames.len()).cloned().unwrap_or_default(), fields));
    }
    frames
}

fn field<'a>(f: &'a [(String, String)], name: &str) -> &'a str {
    f.iter()
        .find(|(k, _)| k.ends_with(name))
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {f:?}"))
}

fn hex_of(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn passive_answers(name: &str) {
    let (req_datagram, meta) = captured_req(&capture(name));
    let mut dev = Device::default();
    let now = Instant::from_nanos(0);
    dev.handle_datagram(now, &meta, &req_datagram);
    let got = dev
        .gsi()
        .take()
        .expect("the captured REQ passes QP1's checks (ICRC included)");
    assert_eq!(dev.gsi().stats().bad_icrc, 0);
    let req = match MessageView::parse(0x0010, &got.mad[mad::HEADER_LEN..]) {
        Some(Ok(MessageView::Req(r))) => r.to_repr(),
        other => panic!("{other:?}"),
    };
    let mut cm = Cm::new(CmConfig {
        seed: 7,
        ..CmConfig::default()
    });
    cm.listen(req.service_id);
    cm.handle_mad(now, got.from.ip(), got.to, &got.mad);
    let Some(CmEvent::Request { conn, req: peer }) = cm.poll_event() else {
        panic!("the REQ was not taken: {:?}", cm.stats())
    };
    assert_eq!(peer.remote_qpn, Qpn(req.local_qpn));
    assert_eq!(peer.starting_psn, Psn::new(req.starting_psn));
    let (cma, _) = peer.rdma_cm().expect("rdma_cm's cma_hdr");
    assert_eq!((cma.src, cma.dst), (got.from.ip(), got.to));
    let offer = QpOffer {
        qpn: Qpn(0x123),
        starting_psn: Psn::new(0xabcdef),
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
    };
    let neg = cm
        .accept(now, conn, offer, b"roce says hello")
        .expect("accepted");
    // Linux's reading of Starting PSN: the passive side sends from the REQ's, and puts the
    // PSN it expects in its REP.
    assert_eq!(neg.sq_psn, Psn::new(req.starting_psn));
    assert_eq!(neg.rq_psn, offer.starting_psn);
    let out = cm.poll_transmit().unwrap();
    assert!(dev.gsi().send(OutgoingMad {
        local: out.local,
        remote: out.peer,
        remote_port: 4791,
        mad: out.mad,
    }));
    let mut buf = Vec::new();
    let t = dev.poll_transmit(now, &mut buf).expect("the REP datagram");
    let dir = std::env::temp_dir().join(format!("roce-cm-interop-{}-{name}", std::process::id()));
    write_pcap(
        &dir,
        &[
            (
                req_datagram.clone(),
                meta.src.ip(),
                meta.dst,
                meta.src.port(),
                meta.ipv4,
            ),
            (
                buf[..t.len].to_vec(),
                t.path.local,
                t.path.remote,
                t.path.src_port,
                Ipv4Seen::ROCE,
            ),
        ],
    );
    // roce's own decoder: both ICRCs good.
    let dec = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "--check"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        dec.status.success(),
        "{}",
        String::from_utf8_lossy(&dec.stderr)
    );
    let frames = tshark(&dir);
    let _ = std::fs::remove_file(&dir);
    assert_eq!(frames.len(), 2);
    let (line, rep) = &frames[1];
    assert!(line.contains("CM: ConnectReply"), "{line}");
    assert!(!line.contains("Malformed"), "{line}");
    let hex = |v: u64, w: usize| format!("{v:#0w$x}", w = w + 2);
    assert_eq!(
        field(rep, "cm_rep_remotecommid"),
        hex(req.local_comm_id.into(), 8)
    );
    assert_eq!(field(rep, "cm_rep_localqpn"), hex(0x123, 6));
    assert_eq!(field(rep, "cm_rep_startpsn"), hex(0xabcdef, 6));
    let mut private = [0u8; 196];
    private[..15].copy_from_slice(b"roce says hello");
    assert_eq!(field(rep, "cm_rep_private"), hex_of(&private));
    // The depths answer the REQ's: no more than it offered.
    let rr: u64 = field(rep, "cm_rep_respres").parse().unwrap_or_else(|_| {
        u64::from_str_radix(field(rep, "cm_rep_respres").trim_start_matches("0x"), 16).unwrap()
    });
    assert!(rr <= u64::from(req.initiator_depth));
}

#[test]
fn the_passive_cm_answers_rdma_cm_pcap_with_a_reply_tshark_accepts() {
    passive_answers("rdma_cm.pcap");
}

#[test]
fn the_passive_cm_answers_rping_pcap_with_a_reply_tshark_accepts() {
    passive_answers("rping.pcap");
}

/// roce's REQ has the same tshark fields as the REQ Linux's rdma_cm sent (values aside).
#[test]
fn rocess_own_req_has_the_fields_of_a_captured_one() {
    let (req_datagram, meta) = captured_req(&capture("rdma_cm.pcap"));
    let captured = std::env::temp_dir().join(format!("roce-cm-req-{}", std::process::id()));
    write_pcap(
        &captured,
        &[(
            req_datagram,
            meta.src.ip(),
            meta.dst,
            meta.src.port(),
            meta.ipv4,
        )],
    );
    let mut cm = Cm::new(CmConfig::default());
    let (a, b) = (meta.src.ip(), meta.dst);
    let now = Instant::from_nanos(0);
    cm.connect(
        now,
        &ConnectOptions {
            local: a,
            peer: b,
            service_id: roce_stack::cm::rdma_cm_service_id(18515),
            offer: QpOffer {
                qpn: Qpn(0x77),
                starting_psn: Psn::new(0x10),
                responder_resources: 4,
                initiator_depth: 4,
                rnr_retry_count: 7,
            },
            mtu: 1024,
            retry_count: 7,
            local_ack_timeout: 14,
            private_data: roce_stack::cm::rdma_cm_req_private(a, b, 40000, b""),
        },
    )
    .unwrap();
    let out = cm.poll_transmit().unwrap();
    assert!(matches!(
        Message::parse(0x0010, &out.mad[mad::HEADER_LEN..]),
        Some(Ok(Message::Req(_)))
    ));
    let mut dev = Device::default();
    dev.gsi().send(OutgoingMad {
        local: a,
        remote: b,
        remote_port: 4791,
        mad: out.mad,
    });
    let mut buf = Vec::new();
    let t = dev.poll_transmit(now, &mut buf).unwrap();
    let ours = std::env::temp_dir().join(format!("roce-cm-req-ours-{}", std::process::id()));
    write_pcap(
        &ours,
        &[(
            buf[..t.len].to_vec(),
            t.path.local,
            t.path.remote,
            t.path.src_port,
            Ipv4Seen::ROCE,
        )],
    );
    let (theirs, mine) = (tshark(&captured), tshark(&ours));
    let _ = (std::fs::remove_file(&captured), std::fs::remove_file(&ours));
    assert!(mine[0].0.contains("CM: ConnectRequest"), "{}", mine[0].0);
    let names =
        |f: &[(String, String)]| -> BTreeSet<String> { f.iter().map(|(k, _)| k.clone()).collect() };
    assert_eq!(names(&mine[0].1), names(&theirs[0].1));
    // Values that are not addresses, IDs, QPNs, PSNs or keys agree too.
    for k in [
        "cm_req_transpsvctype",
        "cm_req_pppmtu",
        "cm_req_pkey",
        "cm_req_serviceid_dport",
        "cm_req_prim_locallid",
        "cm_req_prim_remotelid",
        "cm_req_ip_cm_ipv",
    ] {
        assert_eq!(field(&mine[0].1, k), field(&theirs[0].1, k), "{k}");
    }
}

/// In the capture of Linux's rping (both ends the kernel's), each side's first RC request
/// carries the PSN of the CM message the *other* side sent: a REQ's or REP's Starting PSN is
/// what its sender expects to receive. roce's CM reads the field the same way (the test above).
#[test]
fn linux_sends_from_the_starting_psn_the_other_side_announced() {
    let out = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "--json"])
        .arg(capture("rping.pcap"))
        .output()
        .unwrap();
    let pkts: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let cm = |name: &str| {
        pkts.iter()
            .find(|p| p["cm"]["message"] == name)
            .unwrap_or_else(|| panic!("no CM {name}"))
            .clone()
    };
    let (req, rep) = (cm("REQ"), cm("REP"));
    let host = |p: &serde_json::Value| {
        let a = p["src"].as_str().unwrap();
        a[..a.rfind(':').unwrap()].to_string()
    };
    let first_from = |src: &str| {
        pkts.iter()
            .find(|p| {
                let op = p["bth"]["opcode_name"].as_str().unwrap_or("");
                // A request: not QP1, not an ACK or a READ response.
                host(p) == src
                    && p["bth"]["dest_qp"] != 1
                    && !op.contains("ACKNOWLEDGE")
                    && !op.contains("RESPONSE")
            })
            .map(|p| p["bth"]["psn"].as_u64().unwrap())
            .unwrap()
    };
    let (active, passive) = (host(&req), host(&rep));
    assert_ne!(active, passive);
    assert_eq!(
        first_from(&passive),
        req["cm"]["starting_psn"].as_u64().unwrap()
    );
    assert_eq!(
        first_from(&active),
        rep["cm"]["starting_psn"].as_u64().unwrap()
    );
}
