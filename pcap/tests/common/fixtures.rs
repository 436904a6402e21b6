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
use roce_proto::frame::{IpParams, VlanTag};
use roce_proto::{Ecn, FrameBuilder, Opcode, PacketRepr};

/// Every opcode the table defines, then the CNP and two unknown ones.
pub fn all_opcodes() -> Vec<Opcode> {
    let mut v: Vec<Opcode> = (0..=255u8)
        .map(Opcode)
        .filter(|o| o.is_defined() && *o != Opcode::CNP)
        .collect();
    v.extend([Opcode::CNP, Opcode(0x18), Opcode(0xc0)]);
    v
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
pub fn all() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

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
