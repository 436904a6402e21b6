//! The small generated captures committed in `pcap/tests/data/` (every opcode, IPv4 and IPv6,
//! VLAN tags, bad ICRCs, cut headers, a snaplen-cut frame, every link type, a two-interface
//! pcapng, nanosecond and big-endian pcap).
//!
//! Everything is built with `roce_proto`'s `FrameBuilder`/`PacketRepr`, so the fixtures are
//! deterministic: `tests/fixtures.rs` regenerates them and fails if the committed bytes drift.
#![allow(dead_code, unreachable_pub)]
use roce_pcap::link;
use roce_pcap::reader::Timestamp;
use roce_pcap::synth::{packet_for, payload, v4};
use roce_pcap::writer::PcapWriter;
use roce_proto::cm::MessageKind;
use roce_proto::frame::{IpParams, VlanTag};
use roce_proto::mad::{Method, MgmtClass, Repr as MadRepr, MAD_LEN};
use roce_proto::{Ecn, FrameBuilder, Opcode, PacketRepr};

/// Every opcode the table defines but RD's (0x40-0x5f, which decode as DC by default: see
/// [`rd_opcodes`]), then the CNP and two unknown ones.
pub fn all_opcodes() -> Vec<Opcode> {
    let mut v: Vec<Opcode> = (0..=255u8)
        .map(Opcode)
        .filter(|o| o.is_defined() && *o != Opcode::CNP && o.0 >> 5 != 2)
        .collect();
    v.extend([Opcode::CNP, Opcode(0x18), Opcode(0xc0)]);
    v
}

/// The opcodes IBTA gives to RD (0x40-0x5f) that its table defines.
pub fn rd_opcodes() -> Vec<Opcode> {
    (0x40..=0x5fu8)
        .map(Opcode)
        .filter(|o| o.is_defined())
        .collect()
}

/// A DC packet in the layout Wireshark decodes (and roce by default): the BTH, 8 DC bytes, then
/// the RD extended headers of the opcode and the payload; opcode 0x55 without SE carries a
/// 16-byte connect header after the 8.
fn dc_frame(op: Opcode, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = packet_for(op, seq, payload);
    if op.0 == 0x55 {
        p.bth.solicited = seq % 2 == 1;
    }
    let mut rd = vec![0u8; p.buffer_len()];
    let n = p.emit(&mut rd).expect("RD packet builds");
    rd.truncate(n);
    let connect = op.0 == 0x55 && !p.bth.solicited;
    let mut t = rd[..12].to_vec();
    t.extend_from_slice(&[0xdc, 0x0b, 0xad, 0x00, 0x00, 0x00, 0x00, 0x40 + seq as u8]);
    if connect {
        t.extend((0..16).map(|i| 0xc0 + i as u8));
    }
    t.extend_from_slice(&rd[12..]);
    let b = v4();
    let len = t.len();
    b.icrc_seed(len).fill(&mut t);
    let mut frame = vec![0u8; b.frame_len_for(len)];
    let n = b.wrap(&t, &mut frame).expect("wraps");
    frame.truncate(n);
    frame
}

fn v6() -> FrameBuilder {
    let mut b = FrameBuilder::ipv6(
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        0xc123,
    );
    if let IpParams::V6 {
        flow_label,
        traffic_class,
        ..
    } = &mut b.ip
    {
        *flow_label = 0x1_2345;
        *traffic_class = (26 << 2) | Ecn::Ce.bits();
    }
    b
}

/// Builds one frame.
///
/// # Panics
/// If the packet cannot be built (a bug in the fixture table).
pub fn build(b: &FrameBuilder, p: &PacketRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; b.frame_len(p)];
    let n = b.build(p, &mut buf).expect("fixture packet builds");
    buf.truncate(n);
    buf
}

fn ts(i: u32) -> Timestamp {
    Timestamp {
        secs: 1_700_000_000 + i64::from(i / 4),
        nanos: (i % 4) * 250_000_000 + i * 1_001,
    }
}

fn pcap(link_type: u32, nanos: bool, frames: &[Vec<u8>]) -> Vec<u8> {
    pcap_snap(link_type, nanos, 262_144, frames)
}

fn pcap_snap(link_type: u32, nanos: bool, snaplen: u32, frames: &[Vec<u8>]) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), link_type, nanos, snaplen).expect("vec write");
    for (i, f) in frames.iter().enumerate() {
        w.write_packet(ts(i as u32), f, f.len() as u32)
            .expect("vec write");
    }
    w.into_inner()
}

/// Offset of the IPv4 header in an untagged Ethernet frame.
const IP: usize = 14;

/// Cuts an untagged IPv4 frame to `transport_len` bytes of UDP payload and fixes the IPv4
/// total length, header checksum and UDP length, so only the RoCE layer is short.
fn shrink_v4(mut f: Vec<u8>, transport_len: usize) -> Vec<u8> {
    f.truncate(IP + 20 + 8 + transport_len);
    claim_v4(f, transport_len)
}

/// Makes an untagged IPv4 frame's IPv4 total length, header checksum and UDP length claim
/// `transport_len` bytes of UDP payload, whatever follows (trailing bytes stay).
fn claim_v4(mut f: Vec<u8>, transport_len: usize) -> Vec<u8> {
    let udp = IP + 20;
    let total = (20 + 8 + transport_len) as u16;
    f[IP + 2..IP + 4].copy_from_slice(&total.to_be_bytes());
    f[IP + 10..IP + 12].fill(0);
    let mut sum = 0u32;
    for c in f[IP..IP + 20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[IP + 10..IP + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[udp + 4..udp + 6].copy_from_slice(&((8 + transport_len) as u16).to_be_bytes());
    f
}

fn non_roce() -> Vec<Vec<u8>> {
    // ARP request.
    let mut arp = vec![0xff; 6];
    arp.extend([0x02, 0, 0, 0, 0, 1, 0x08, 0x06]);
    arp.extend([0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend([0x02, 0, 0, 0, 0, 1, 192, 168, 10, 1]);
    arp.extend([0, 0, 0, 0, 0, 0, 192, 168, 10, 2]);
    // UDP to another port: a RoCE frame with its destination port changed.
    let mut other = build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 1, b"hello"));
    other[IP + 20 + 2..IP + 20 + 4].copy_from_slice(&53u16.to_be_bytes());
    // TCP: protocol changed (the rest is junk to a TCP parser, which is not ours).
    let mut tcp = build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 2, b"hello"));
    tcp[IP + 9] = 6;
    vec![arp, other, tcp]
}

/// Wraps an Ethernet frame's EtherType payload in a Linux SLL (v1) header.
fn sll(f: &[u8]) -> Vec<u8> {
    let mut v = vec![0, 0, 0, 1, 0, 6];
    v.extend(&f[6..12]);
    v.extend([0, 0]);
    v.extend(&f[12..]);
    v
}

/// Wraps an Ethernet frame's EtherType payload in a Linux SLL2 header.
fn sll2(f: &[u8]) -> Vec<u8> {
    let mut v = f[12..14].to_vec();
    v.extend([0, 0, 0, 0, 0, 2, 0, 1, 0, 6]);
    v.extend(&f[6..12]);
    v.extend([0, 0]);
    v.extend(&f[14..]);
    v
}

/// A minimal little-endian pcapng writer: SHB, IDBs, EPBs and SPBs.
struct PcapNg(Vec<u8>);

impl PcapNg {
    fn block(&mut self, ty: u32, body: &[u8]) {
        let pad = (4 - body.len() % 4) % 4;
        let len = (12 + body.len() + pad) as u32;
        self.0.extend(ty.to_le_bytes());
        self.0.extend(len.to_le_bytes());
        self.0.extend(body);
        self.0.extend(std::iter::repeat_n(0u8, pad));
        self.0.extend(len.to_le_bytes());
    }
    fn new() -> Self {
        let mut s = Self(Vec::new());
        let mut b = Vec::new();
        b.extend(0x1a2b_3c4du32.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend((-1i64).to_le_bytes());
        s.block(0x0a0d_0d0a, &b);
        s
    }
    fn idb(&mut self, link_type: u16, snaplen: u32, tsresol: Option<u8>) {
        let mut b = Vec::new();
        b.extend(link_type.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend(snaplen.to_le_bytes());
        if let Some(r) = tsresol {
            b.extend(9u16.to_le_bytes());
            b.extend(1u16.to_le_bytes());
            b.extend([r, 0, 0, 0]);
            b.extend([0, 0, 0, 0]);
        }
        self.block(1, &b);
    }
    fn epb(&mut self, iface: u32, t: u64, data: &[u8]) {
        let mut b = Vec::new();
        b.extend(iface.to_le_bytes());
        b.extend(((t >> 32) as u32).to_le_bytes());
        b.extend((t as u32).to_le_bytes());
        b.extend((data.len() as u32).to_le_bytes());
        b.extend((data.len() as u32).to_le_bytes());
        b.extend(data);
        self.block(6, &b);
    }
    fn spb(&mut self, data: &[u8]) {
        let mut b = Vec::new();
        b.extend((data.len() as u32).to_le_bytes());
        b.extend(data);
        self.block(3, &b);
    }
}

/// Converts a little-endian microsecond pcap into its big-endian twin.
fn to_big_endian(le: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(le.len());
    let sw32 = |b: &[u8]| [b[3], b[2], b[1], b[0]];
    out.extend(sw32(&le[0..4]));
    out.extend([le[5], le[4], le[7], le[6]]);
    for i in (8..24).step_by(4) {
        out.extend(sw32(&le[i..i + 4]));
    }
    let mut at = 24;
    while at + 16 <= le.len() {
        let cap = u32::from_le_bytes([le[at + 8], le[at + 9], le[at + 10], le[at + 11]]) as usize;
        for i in (0..16).step_by(4) {
            out.extend(sw32(&le[at + i..at + i + 4]));
        }
        out.extend(&le[at + 16..at + 16 + cap]);
        at += 16 + cap;
    }
    out
}

/// Every fixture: file name and bytes.
/// A MAD frame: a UD SEND ONLY to QP1 from QP1 (Q_Key 0x80010000) carrying the 256-byte MAD
/// made of `header` and the `body` written after it.
fn mad_frame(b: &FrameBuilder, seq: u32, header: MadRepr, body: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut mad = [0u8; MAD_LEN];
    header.emit(&mut mad);
    body(&mut mad);
    let mut p = packet_for(Opcode::UD_SEND_ONLY, seq, &mad);
    p.bth.dest_qp = roce_proto::Qpn(1);
    p.bth.pad_count = 0;
    p.deth = Some(roce_proto::DethRepr {
        qkey: roce_proto::deth::GSI_QKEY,
        resv: 0,
        src_qp: roce_proto::Qpn(1),
    });
    build(b, &p)
}

fn cm_header(kind: MessageKind, tid: u64) -> MadRepr {
    MadRepr {
        base_version: 1,
        mgmt_class: MgmtClass::CM,
        class_version: 2,
        method: Method::SEND,
        transaction_id: tid,
        attribute_id: kind.attribute_id(),
        ..MadRepr::default()
    }
}

fn v4_gid(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// One of every CM message (REJ with several reason classes, an RDMA-CM REQ over IPv4 and one
/// over IPv6 with an alternate path), ClassPortInfo, a directed-route SMP and an SA query.
fn cm_frames() -> Vec<Vec<u8>> {
    use roce_proto::cm::*;
    let b4 = v4();
    let b6 = v6();
    let mut frames = Vec::new();
    let mut seq = 0;
    let mut push = |b: &FrameBuilder, h: MadRepr, m: Option<Message>, extra: &dyn Fn(&mut [u8])| {
        frames.push(mad_frame(b, seq, h, |mad| {
            if let Some(m) = m {
                m.emit(&mut mad[24..]);
            }
            extra(mad);
        }));
        seq += 1;
    };
    let path4 = CmPath {
        local_port_lid: 0xffff,
        remote_port_lid: 0xffff,
        local_port_gid: v4_gid([192, 168, 10, 1]),
        remote_port_gid: v4_gid([192, 168, 10, 2]),
        flow_label: 0x91a3c,
        packet_rate: 16,
        traffic_class: 0x68,
        hop_limit: 64,
        sl: 3,
        subnet_local: 0,
        local_ack_timeout: 17,
    };
    let mut req = Req {
        local_comm_id: 0x64c0_c56d,
        service_id: roce_proto::rdma_cm::service_id(roce_proto::rdma_cm::PortSpace::TCP, 18515),
        local_ca_guid: 0x0250_56ff_fea7_7d03,
        local_qpn: 0x3d,
        responder_resources: 4,
        initiator_depth: 4,
        remote_cm_response_timeout: 20,
        starting_psn: 0x7c_c204,
        local_cm_response_timeout: 20,
        retry_count: 7,
        partition_key: 0xffff,
        path_packet_payload_mtu: 3,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        primary_path: path4,
        ..Req::default()
    };
    roce_proto::rdma_cm::CmaHdr {
        version: 0,
        ip_version: 4,
        port: 52471,
        src: "192.168.10.1".parse().unwrap(),
        dst: "192.168.10.2".parse().unwrap(),
    }
    .emit(&mut req.private_data);
    req.private_data[36..40].copy_from_slice(b"user");
    push(
        &b4,
        cm_header(MessageKind::Req, 0x2_6dc5_c064),
        Some(Message::Req(req)),
        &|_| {},
    );
    push(
        &b4,
        cm_header(MessageKind::Mra, 0x2_6dc5_c064),
        Some(Message::Mra(Mra {
            local_comm_id: 0x8988_f456,
            remote_comm_id: 0x64c0_c56d,
            message_mraed: 0,
            service_timeout: 24,
            ..Mra::default()
        })),
        &|_| {},
    );
    let rep = Rep {
        local_comm_id: 0x8988_f456,
        remote_comm_id: 0x64c0_c56d,
        local_qpn: 0x3b,
        starting_psn: 0x72_7d6d,
        responder_resources: 4,
        initiator_depth: 4,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        local_ca_guid: 0x0250_56ff_fea7_129f,
        ..Rep::default()
    };
    push(
        &b4,
        cm_header(MessageKind::Rep, 0x2_6dc5_c064),
        Some(Message::Rep(rep)),
        &|_| {},
    );
    push(
        &b4,
        cm_header(MessageKind::Rtu, 0x2_6dc5_c064),
        Some(Message::Rtu(Rtu {
            local_comm_id: 0x64c0_c56d,
            remote_comm_id: 0x8988_f456,
            ..Rtu::default()
        })),
        &|_| {},
    );
    // REJ of a REQ for each reason class: no resources, bad parameters, redirect, consumer.
    for (i, (reason, rejected)) in [
        (1u16, 0u8),
        (8, 0),
        (26, 0),
        (24, 0),
        (28, 1),
        (10, 2),
        (33, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rej = Rej {
            local_comm_id: 0x1000 + i as u32,
            remote_comm_id: 0x2000 + i as u32,
            message_rejected: rejected,
            reason,
            ..Rej::default()
        };
        if reason == 24 {
            rej.reject_info_length = 16; // the ARI holds the redirect GID
            rej.ari[..16].copy_from_slice(&v4_gid([10, 0, 0, 9]));
        }
        push(
            &b4,
            cm_header(MessageKind::Rej, 0x3_0000 + i as u64),
            Some(Message::Rej(rej)),
            &|_| {},
        );
    }
    push(
        &b4,
        cm_header(MessageKind::Dreq, 0x2_6dc5_c065),
        Some(Message::Dreq(Dreq {
            local_comm_id: 0x64c0_c56d,
            remote_comm_id: 0x8988_f456,
            remote_qpn_eecn: 0x3b,
            ..Dreq::default()
        })),
        &|_| {},
    );
    push(
        &b4,
        cm_header(MessageKind::Drep, 0x2_6dc5_c065),
        Some(Message::Drep(Drep {
            local_comm_id: 0x8988_f456,
            remote_comm_id: 0x64c0_c56d,
            ..Drep::default()
        })),
        &|_| {},
    );
    let mut sidr = SidrReq {
        request_id: 0x5151,
        partition_key: 0xffff,
        service_id: roce_proto::rdma_cm::service_id(roce_proto::rdma_cm::PortSpace::UDP, 7471),
        ..SidrReq::default()
    };
    roce_proto::rdma_cm::CmaHdr {
        version: 0,
        ip_version: 4,
        port: 40000,
        src: "192.168.10.1".parse().unwrap(),
        dst: "192.168.10.2".parse().unwrap(),
    }
    .emit(&mut sidr.private_data);
    push(
        &b4,
        cm_header(MessageKind::SidrReq, 0x4_0001),
        Some(Message::SidrReq(sidr)),
        &|_| {},
    );
    push(
        &b4,
        cm_header(MessageKind::SidrRep, 0x4_0001),
        Some(Message::SidrRep(SidrRep {
            request_id: 0x5151,
            status: 0,
            qpn: 0x99,
            service_id: sidr.service_id,
            q_key: 0x0123_4567,
            ..SidrRep::default()
        })),
        &|_| {},
    );
    push(
        &b4,
        cm_header(MessageKind::Lap, 0x5_0001),
        Some(Message::Lap(Lap {
            local_comm_id: 0x64c0_c56d,
            remote_comm_id: 0x8988_f456,
            remote_qpn_eecn: 0x3b,
            remote_cm_response_timeout: 20,
            alternate_path: CmPath {
                flow_label: 0x12345,
                traffic_class: 0x20,
                hop_limit: 64,
                packet_rate: 3,
                sl: 1,
                local_ack_timeout: 16,
                ..path4
            },
            ..Lap::default()
        })),
        &|_| {},
    );
    push(
        &b4,
        cm_header(MessageKind::Apr, 0x5_0001),
        Some(Message::Apr(Apr {
            local_comm_id: 0x8988_f456,
            remote_comm_id: 0x64c0_c56d,
            ap_status: 3,
            ..Apr::default()
        })),
        &|_| {},
    );
    push(
        &b4,
        MadRepr {
            method: Method::GET_RESP,
            ..cm_header(MessageKind::ClassPortInfo, 0x6_0001)
        },
        Some(Message::ClassPortInfo(ClassPortInfo {
            base_version: 1,
            class_version: 2,
            capability_mask: 0x0080,
            resp_time_value: 18,
            redirect_lid: 7,
            redirect_qp: 1,
            redirect_q_key: 0x8001_0000,
            trap_hl: 64,
            ..ClassPortInfo::default()
        })),
        &|_| {},
    );
    // An RDMA-CM REQ over IPv6 with an alternate path and a consumer-rejected answer.
    let g6 = |last: u8| {
        let mut g = [0u8; 16];
        g[0] = 0xfd;
        g[15] = last;
        g
    };
    let mut req6 = Req {
        local_comm_id: 0x7777_0001,
        primary_path: CmPath {
            local_port_gid: g6(1),
            remote_port_gid: g6(2),
            flow_label: 0x0badc,
            ..path4
        },
        alternate_path: CmPath {
            local_port_lid: 5,
            remote_port_lid: 6,
            local_port_gid: g6(3),
            remote_port_gid: g6(4),
            flow_label: 0x54321,
            ..path4
        },
        ..req
    };
    req6.private_data = [0; 92];
    roce_proto::rdma_cm::CmaHdr {
        version: 0,
        ip_version: 6,
        port: 51000,
        src: "fd00::1".parse().unwrap(),
        dst: "fd00::2".parse().unwrap(),
    }
    .emit(&mut req6.private_data);
    push(
        &b6,
        cm_header(MessageKind::Req, 0x7_0001),
        Some(Message::Req(req6)),
        &|_| {},
    );
    // Subnet management: a directed-route SubnGet(NodeInfo) and an SA GetTable(PathRecord).
    push(
        &b4,
        MadRepr {
            base_version: 1,
            mgmt_class: MgmtClass::SUBN_DIRECTED_ROUTE,
            class_version: 1,
            method: Method::GET,
            class_specific: 0x0102,
            transaction_id: 0x0001_509c_0001_25c8,
            attribute_id: 0x0011,
            ..MadRepr::default()
        },
        None,
        &|mad| {
            roce_proto::mad::SmpRepr {
                directed: true,
                m_key: 0,
                direction: false,
                hop_pointer: 1,
                hop_count: 2,
                dr_slid: 0xffff,
                dr_dlid: 0xffff,
            }
            .emit(mad);
            mad[128..131].copy_from_slice(&[0, 2, 3]);
        },
    );
    push(
        &b4,
        MadRepr {
            base_version: 1,
            mgmt_class: MgmtClass::SUBN_ADM,
            class_version: 2,
            method: Method::GET_TABLE,
            transaction_id: 0x0000_000b_b964_7f9e,
            attribute_id: 0x0035,
            ..MadRepr::default()
        },
        None,
        &|mad| {
            roce_proto::mad::SaRepr {
                component_mask: 0x340c,
                ..roce_proto::mad::SaRepr::default()
            }
            .emit(mad);
        },
    );
    frames
}

pub fn all() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

    // Every CM message, ClassPortInfo, a directed-route SMP and an SA query, on QP1.
    out.push(("cm.pcap", pcap(link::ETHERNET, false, &cm_frames())));

    // Every opcode over IPv4, payload lengths cycling through all four pad counts.
    let ops = all_opcodes();
    let frames: Vec<Vec<u8>> = ops
        .iter()
        .enumerate()
        .map(|(i, &op)| {
            let pl = payload(if op == Opcode::CNP { 16 } else { 5 + i }, i as u32);
            build(&v4(), &packet_for(op, i as u32, &pl))
        })
        .collect();
    out.push(("opcodes.pcap", pcap(link::ETHERNET, false, &frames)));

    // The RD opcodes in IBTA's RD layout (decoded with --rd), and the same opcodes as
    // Mellanox DC packets (the default reading).
    let rd: Vec<Vec<u8>> = rd_opcodes()
        .iter()
        .enumerate()
        .map(|(i, &op)| build(&v4(), &packet_for(op, i as u32, &payload(8 + i, i as u32))))
        .collect();
    out.push(("rd_opcodes.pcap", pcap(link::ETHERNET, false, &rd)));
    let mut dc_ops = rd_opcodes();
    dc_ops.push(Opcode(0x55));
    dc_ops.push(Opcode(0x55));
    let dc: Vec<Vec<u8>> = dc_ops
        .iter()
        .enumerate()
        .map(|(i, &op)| dc_frame(op, i as u32, &payload(16, i as u32)))
        .collect();
    out.push(("dc.pcap", pcap(link::ETHERNET, false, &dc)));

    // IPv6, with a flow label and CE marking, and a UDP checksum on one of them.
    let pl = payload(33, 6);
    let mut b6 = v6();
    let mut frames = vec![];
    for (i, op) in [
        Opcode::RC_SEND_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::UD_SEND_ONLY,
        Opcode::CNP,
    ]
    .into_iter()
    .enumerate()
    {
        b6.udp_checksum = i == 1;
        frames.push(build(&b6, &packet_for(op, i as u32, &pl)));
    }
    out.push(("ipv6.pcap", pcap(link::ETHERNET, false, &frames)));

    // VLAN: one 802.1Q tag, then 802.1ad + 802.1Q.
    let mut b1 = v4();
    b1.vlans[0] = Some(VlanTag {
        tpid: 0x8100,
        pcp: 3,
        dei: false,
        vid: 100,
    });
    let mut b2 = b1;
    b2.vlans = [
        Some(VlanTag {
            tpid: 0x88a8,
            pcp: 5,
            dei: true,
            vid: 20,
        }),
        Some(VlanTag {
            tpid: 0x8100,
            pcp: 3,
            dei: false,
            vid: 100,
        }),
    ];
    let pl = payload(64, 7);
    let frames = vec![
        build(&b1, &packet_for(Opcode::RC_RDMA_WRITE_ONLY, 0, &pl)),
        build(&b1, &packet_for(Opcode::RC_ACKNOWLEDGE, 1, &[])),
        build(&b2, &packet_for(Opcode::RC_SEND_ONLY, 2, &pl)),
        build(&b2, &packet_for(Opcode::RC_ACKNOWLEDGE, 3, &[])),
        {
            let mut b6 = v6();
            b6.vlans = b2.vlans;
            build(&b6, &packet_for(Opcode::RC_RDMA_READ_REQUEST, 4, &[]))
        },
    ];
    out.push(("vlan.pcap", pcap(link::ETHERNET, false, &frames)));

    // Bad ICRCs: a flipped ICRC bit, a flipped payload bit, a changed (covered) TTL... and a
    // changed masked field (ECN, FECN) that must NOT break the ICRC.
    let pl = payload(40, 9);
    let good = build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 0, &pl));
    let mut icrc_flip = good.clone();
    let n = icrc_flip.len();
    icrc_flip[n - 1] ^= 0x01;
    let mut payload_flip = good.clone();
    payload_flip[n - 10] ^= 0x80;
    let mut qp_flip = good.clone();
    qp_flip[IP + 28 + 7] ^= 0x01;
    let mut masked = good.clone();
    masked[IP + 1] |= 3; // ECN -> CE (masked: ICRC still good)
    masked[IP + 8] = 17; // TTL (masked)
    masked[IP + 10..IP + 12].fill(0); // checksum (masked)
    masked[IP + 28 + 4] |= 0x80; // FECN (masked)
    out.push((
        "bad_icrc.pcap",
        pcap(
            link::ETHERNET,
            false,
            &[good, icrc_flip, payload_flip, qp_flip, masked],
        ),
    ));

    // Headers cut short inside consistent IP/UDP lengths, and other malformed packets.
    let pl = payload(8, 3);
    let unknown = build(&v4(), &packet_for(Opcode(0x18), 0, &pl));
    let mut reth_cut = unknown.clone();
    reth_cut[IP + 28] = Opcode::RC_RDMA_WRITE_FIRST.0; // needs 16 + 4 more bytes than present
    let bth_cut = shrink_v4(unknown.clone(), 8);
    let ack = build(&v4(), &packet_for(Opcode::RC_ACKNOWLEDGE, 0, &[]));
    let icrc_cut = shrink_v4(ack.clone(), 12 + 4);
    let atomic = build(&v4(), &packet_for(Opcode::RC_COMPARE_SWAP, 1, &[]));
    let atomic_cut = shrink_v4(atomic, 12 + 20);
    let mut pad_big = build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 2, &[]));
    pad_big[IP + 28 + 1] |= 0x30; // pad count 3 with an empty body
    let mut ack_extra = build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 0, &[1; 8]));
    ack_extra[IP + 28] = Opcode::RC_ACKNOWLEDGE.0; // 4 stray bytes after the AETH
    ack_extra[IP + 28 + 1] &= !0x30;
    let mut udp_long = ack.clone();
    udp_long[IP + 24..IP + 26].copy_from_slice(&200u16.to_be_bytes());
    let mut tver = build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 1, &pl));
    tver[IP + 28 + 1] |= 1; // TVer 1: decodable, non-conformant, ICRC now bad
    out.push((
        "truncated_headers.pcap",
        pcap(
            link::ETHERNET,
            false,
            &[
                reth_cut, bth_cut, icrc_cut, atomic_cut, pad_big, ack_extra, udp_long, tver,
            ],
        ),
    ));

    // A snap length of 96 cuts the payload of the long frames (but not the ACK).
    let pl = payload(200, 4);
    let frames = vec![
        build(&v4(), &packet_for(Opcode::RC_RDMA_WRITE_FIRST, 0, &pl)),
        build(&v4(), &packet_for(Opcode::RC_ACKNOWLEDGE, 1, &[])),
        build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 2, &pl)),
        build(
            &v4(),
            &packet_for(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 3, &pl),
        ),
        // Cut by the snap length too, but its own IP/UDP lengths leave 20 bytes for a
        // WRITE FIRST that needs 32 (BTH, RETH, ICRC): malformed, not merely cut.
        claim_v4(
            build(&v4(), &packet_for(Opcode::RC_RDMA_WRITE_FIRST, 4, &pl)),
            20,
        ),
    ];
    out.push((
        "snaplen.pcap",
        pcap_snap(link::ETHERNET, false, 96, &frames),
    ));

    // The same traffic over each link type.
    let pl = payload(20, 5);
    let eth4 = build(&v4(), &packet_for(Opcode::RC_SEND_ONLY, 0, &pl));
    let eth6 = build(&v6(), &packet_for(Opcode::RC_RDMA_WRITE_ONLY, 1, &pl));
    let eth_ack = build(&v4(), &packet_for(Opcode::RC_ACKNOWLEDGE, 2, &[]));
    let arp = non_roce().swap_remove(0);
    out.push((
        "sll.pcap",
        pcap(
            link::LINUX_SLL,
            false,
            &[sll(&eth4), sll(&eth6), sll(&eth_ack), sll(&arp)],
        ),
    ));
    out.push((
        "sll2.pcap",
        pcap(
            link::LINUX_SLL2,
            false,
            &[sll2(&eth4), sll2(&eth6), sll2(&eth_ack), sll2(&arp)],
        ),
    ));
    out.push((
        "raw.pcap",
        pcap(
            link::RAW,
            false,
            &[
                eth4[14..].to_vec(),
                eth6[14..].to_vec(),
                eth_ack[14..].to_vec(),
            ],
        ),
    ));
    out.push((
        "ipv4.pcap",
        pcap(
            link::IPV4,
            false,
            &[eth4[14..].to_vec(), eth_ack[14..].to_vec()],
        ),
    ));
    out.push((
        "ipv6raw.pcap",
        pcap(link::IPV6, false, &[eth6[14..].to_vec()]),
    ));
    let null = |family: [u8; 4], f: &[u8]| {
        let mut v = family.to_vec();
        v.extend(&f[14..]);
        v
    };
    out.push((
        "loopback.pcap",
        pcap(
            link::NULL,
            false,
            &[
                null(2u32.to_le_bytes(), &eth4),
                null(30u32.to_be_bytes(), &eth6),
                null(2u32.to_be_bytes(), &eth_ack),
                null(7u32.to_le_bytes(), &eth4),
            ],
        ),
    ));

    // ERF (link type 197) Ethernet records, one with an extension header, and an HDLC record.
    let erf = |ty: u8, ext: bool, frame: &[u8]| {
        let mut v = 0x6553_f100_0000_0000u64.to_le_bytes().to_vec();
        let ty = if ext { ty | 0x80 } else { ty };
        let rlen = 16 + if ext { 8 } else { 0 } + 2 + frame.len();
        v.extend([ty, 0x04]);
        v.extend((rlen as u16).to_be_bytes());
        v.extend([0, 0]);
        v.extend((frame.len() as u16).to_be_bytes());
        if ext {
            v.extend([0x01, 0, 0, 0, 0, 0, 0, 0x2a]);
        }
        v.extend([0, 0]);
        v.extend(frame);
        v
    };
    out.push((
        "erf.pcap",
        pcap(
            link::ERF,
            false,
            &[
                erf(link::ERF_TYPE_ETH, false, &eth4),
                erf(link::ERF_TYPE_ETH, true, &eth_ack),
                erf(1, false, &eth4),
            ],
        ),
    ));

    // pcapng: two interfaces (Ethernet, µs; raw IP, ns), EPBs on both, and an SPB.
    let mut ng = PcapNg::new();
    ng.idb(1, 0, None);
    ng.idb(101, 0, Some(9));
    ng.epb(0, 1_700_000_000_000_000, &eth4);
    ng.epb(1, 1_700_000_000_000_500_123, &eth6[14..]);
    ng.epb(0, 1_700_000_000_001_000, &eth_ack);
    ng.spb(&eth4);
    ng.epb(1, 1_700_000_000_002_000_001, &eth_ack[14..]);
    out.push(("two_interfaces.pcapng", ng.0));

    // Nanosecond time stamps, and a big-endian microsecond file.
    let frames = vec![eth4.clone(), eth_ack.clone()];
    out.push(("nanosecond.pcap", pcap(link::ETHERNET, true, &frames)));
    out.push((
        "big_endian.pcap",
        to_big_endian(&pcap(link::ETHERNET, false, &frames)),
    ));

    // RoCE mixed with other traffic (for --all and the skipped counter).
    let mut frames = non_roce();
    frames.insert(1, eth4);
    frames.push(eth_ack);
    out.push(("mixed.pcap", pcap(link::ETHERNET, false, &frames)));

    out
}
