//! Known-answer tests: four ICRC vectors (a ConnectX-4 Lx CNP and a UC SEND Only from scapy's
//! test/contrib/roce.uts; an IPv6 ACK and an IPv4 WRITE Only checked against scapy 2.8.0), and
//! the scapy and PcapPlusPlus frames under ../shared/captures/hexvectors. Each frame must parse, verify its
//! ICRC, and be rebuilt byte for byte from its field values.
mod common;

use common::{captures_dir, hex};
use roce_proto::frame::{IpParams, VlanTag};
use roce_proto::{
    AethRepr, BthRepr, Ecn, Frame, FrameBuilder, Icrc, Msn, Opcode, PKey, PacketRepr, Psn, Qpn,
    RKey, RethRepr, RoceVersion, Syndrome,
};

fn check_parses_and_verifies(frame: &[u8]) -> Frame<'_> {
    let f = Frame::parse_ethernet(frame).expect("frame parses");
    assert!(!f.truncated);
    assert_eq!(f.verify_icrc(), Ok(true), "ICRC verifies");
    // Round trip of the transport packet through its Repr, ICRC recomputed.
    let p = f.packet().unwrap();
    let repr = PacketRepr::parse(&p).unwrap();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit_with_icrc(&mut out, &f.icrc_seed().unwrap())
        .unwrap();
    assert_eq!(out, f.transport, "transport round trip");
    f
}

fn build(b: &FrameBuilder, p: &PacketRepr<'_>) -> Vec<u8> {
    let mut out = vec![0u8; b.frame_len(p)];
    let n = b.build(p, &mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

/// Vector A: a CNP captured on a ConnectX-4 Lx.
#[test]
fn vector_a_hardware_cnp() {
    let wire = hex("e41d2dab2bc2 7cfe90643b32 0800
         45 c2 003c 718c 4000 40 11 9161 0a001101 0a001201
         0000 12b7 0028 0000
         81 00 ffff 40 000118 00 000000
         00000000000000000000000000000000
         82 fd 00 2a");
    let f = check_parses_and_verifies(&wire);
    assert_eq!(f.ecn(), Ecn::Ect0);
    let bth = f.bth().unwrap();
    assert_eq!(
        (bth.opcode, bth.becn, bth.dest_qp),
        (Opcode::CNP, true, Qpn(0x118))
    );

    let zeros = [0u8; 16];
    let cnp = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::CNP,
            pkey: PKey::DEFAULT,
            becn: true,
            dest_qp: Qpn(0x118),
            ..BthRepr::default()
        },
        payload: &zeros,
        ..PacketRepr::default()
    };
    let b = FrameBuilder {
        dst_mac: [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2],
        src_mac: [0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32],
        vlans: [None, None],
        ip: IpParams::V4 {
            src: [10, 0, 17, 1],
            dst: [10, 0, 18, 1],
            dscp: 48,
            ecn: Ecn::Ect0,
            ttl: 64,
            identification: 0x718c,
            dont_fragment: true,
        },
        src_port: 0,
        dst_port: 4791,
        udp_checksum: false,
    };
    assert_eq!(build(&b, &cnp), wire);
    // The seed a socket sender computes from fields alone gives the same ICRC.
    let seed = b.icrc_seed(cnp.buffer_len());
    assert_eq!(seed.compute(f.transport), 0x2a00_fd82);
}

/// Vector B: IPv4 UC SEND Only, PadCnt 2, UDP checksum covering the ICRC.
#[test]
fn vector_b_uc_send_only_ipv4() {
    let wire = hex("248a07a8fa22 248a07a8fa22 0800
         45 01 0040 0478 4000 40 11 b4d5 c0a80007 c0a80007
         c000 12b7 002c aca2
         24 60 ffff 00 0000d3 00 cf1710
         4630818be28935d90e9a95505401be885e50 0000
         78 f3 53 f3");
    check_parses_and_verifies(&wire);
    let payload = hex("4630818be28935d90e9a95505401be885e50");
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::UC_SEND_ONLY,
            migreq: true,
            pad_count: PacketRepr::pad_for(payload.len()),
            pkey: PKey::DEFAULT,
            dest_qp: Qpn(211),
            psn: Psn::new(0xcf1710),
            ..BthRepr::default()
        },
        payload: &payload,
        ..PacketRepr::default()
    };
    let mac = [0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22];
    let b = FrameBuilder {
        dst_mac: mac,
        src_mac: mac,
        vlans: [None, None],
        ip: IpParams::V4 {
            src: [192, 168, 0, 7],
            dst: [192, 168, 0, 7],
            dscp: 0,
            ecn: Ecn::Ect1,
            ttl: 64,
            identification: 0x0478,
            dont_fragment: true,
        },
        src_port: 0xc000,
        dst_port: 4791,
        udp_checksum: true,
    };
    assert_eq!(build(&b, &p), wire);
    // Wrapping the transport bytes a socket saw gives the same frame.
    let t = 14 + 20 + 8;
    let mut out = vec![0u8; b.frame_len_for(wire.len() - t)];
    assert_eq!(b.wrap(&wire[t..], &mut out), Ok(wire.len()));
    assert_eq!(out, wire);
}

/// Vector C: IPv6 RC ACK; traffic class and flow label are masked in the ICRC.
#[test]
fn vector_c_rc_ack_ipv6() {
    let wire = hex("020000000002 020000000001 86dd
         66212345 001c 1140 fd000000000000000000000000000001 fd000000000000000000000000000002
         c123 12b7 001c 470a
         11 00 ffff 00 000112 00 00abcd
         1f 000007
         ab a6 62 3f");
    let f = check_parses_and_verifies(&wire);
    assert_eq!(f.ip.unwrap().flow_label, 0x12345);
    let ack = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            pkey: PKey::DEFAULT,
            dest_qp: Qpn(0x112),
            psn: Psn::new(0xabcd),
            ..BthRepr::default()
        },
        aeth: Some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: Msn(7),
        }),
        ..PacketRepr::default()
    };
    let mut a1 = [0u8; 16];
    a1[0] = 0xfd;
    let mut a2 = a1;
    a1[15] = 1;
    a2[15] = 2;
    let b = FrameBuilder {
        dst_mac: [2, 0, 0, 0, 0, 2],
        src_mac: [2, 0, 0, 0, 0, 1],
        vlans: [None, None],
        ip: IpParams::V6 {
            src: a1,
            dst: a2,
            traffic_class: 0x62,
            flow_label: 0x12345,
            hop_limit: 0x40,
        },
        src_port: 0xc123,
        dst_port: 4791,
        udp_checksum: true,
    };
    assert_eq!(build(&b, &ack), wire);
    // A socket sender knows every covered IPv6 field.
    assert_eq!(
        b.icrc_seed(ack.buffer_len()).compute(f.transport),
        0x3f62_a6ab
    );
}

/// Vector D: IPv4 RC RDMA WRITE Only, AckReq, 5-byte payload, PadCnt 3.
#[test]
fn vector_d_rc_write_only_ipv4() {
    let wire = hex("020000000002 020000000001 0800
         45 02 0044 1111 4000 40 11 1594 0a000001 0a000002
         c001 12b7 0030 0000
         0a 30 ffff 00 000011 80 000100
         00007f0000001000 00001234 00000005
         68656c6c6f 000000
         2e 81 9e 6c");
    check_parses_and_verifies(&wire);
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_ONLY,
            pad_count: 3,
            pkey: PKey::DEFAULT,
            dest_qp: Qpn(0x11),
            ack_req: true,
            psn: Psn::new(0x100),
            ..BthRepr::default()
        },
        reth: Some(RethRepr {
            va: 0x7f00_0000_1000,
            rkey: RKey(0x1234),
            dma_len: 5,
        }),
        payload: b"hello",
        ..PacketRepr::default()
    };
    let mut b = FrameBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0xc001);
    b.ip = IpParams::V4 {
        src: [10, 0, 0, 1],
        dst: [10, 0, 0, 2],
        dscp: 0,
        ecn: Ecn::Ect0,
        ttl: 64,
        identification: 0x1111,
        dont_fragment: true,
    };
    assert_eq!(build(&b, &p), wire);
}

/// A VLAN-tagged (QinQ) frame built by the builder parses back with both tags and a valid
/// ICRC: Ethernet bytes are outside the ICRC.
#[test]
fn double_vlan_frame() {
    let mut b = FrameBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0xc001);
    b.vlans = [
        Some(VlanTag {
            tpid: 0x88a8,
            pcp: 3,
            dei: false,
            vid: 100,
        }),
        Some(VlanTag {
            tpid: 0x8100,
            pcp: 5,
            dei: true,
            vid: 42,
        }),
    ];
    let p = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            pad_count: 1,
            ..BthRepr::default()
        },
        payload: b"abc",
        ..PacketRepr::default()
    };
    let bytes = build(&b, &p);
    let f = check_parses_and_verifies(&bytes);
    assert_eq!(f.link.unwrap().vlans, b.vlans);
}

/// The five frames of scapy's RoCE test file (CNP from a ConnectX-4 Lx, RoCE v1 WRITE and ACK
/// between Mellanox NICs, UC SEND over IPv4 and IPv6).
#[test]
fn scapy_vectors() {
    let text =
        std::fs::read_to_string(captures_dir().join("hexvectors/scapy-roce-uts-vectors.txt"))
            .expect("../shared/captures/hexvectors/scapy-roce-uts-vectors.txt");
    let mut seen = 0;
    let mut frame = None;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("frame: ") {
            frame = Some(hex(h));
        }
        if let Some(icrc) = line.strip_prefix("icrc_wire: ") {
            let bytes = frame.take().expect("frame before icrc_wire");
            let f = check_parses_and_verifies(&bytes);
            assert_eq!(f.packet().unwrap().icrc_bytes().to_vec(), hex(icrc));
            if f.version == RoceVersion::V1 {
                assert!(f.grh.is_some());
            }
            seen += 1;
        }
    }
    assert_eq!(seen, 5);
}

/// PcapPlusPlus PR 1603: an RC READ request from rxe.
#[test]
fn pcapplusplus_read_request() {
    let text = std::fs::read_to_string(
        captures_dir().join("hexvectors/pcapplusplus-pr1603-InfiniBandPacket.dat"),
    )
    .expect("hex file");
    let bytes = hex(&text);
    let f = check_parses_and_verifies(&bytes);
    let p = f.packet().unwrap();
    assert_eq!(p.opcode(), Opcode::RC_RDMA_READ_REQUEST);
    let reth = p.reth().unwrap();
    assert_eq!(
        (reth.va(), reth.rkey(), reth.dma_len()),
        (0x7fee_260f_b000, RKey(0x2b8), 65536)
    );
}

/// A flipped bit in a masked field leaves the ICRC valid; in a covered field it breaks it.
#[test]
fn masked_and_covered_fields() {
    let mut wire = hex("020000000002 020000000001 0800
         45 02 0044 1111 4000 40 11 1594 0a000001 0a000002
         c001 12b7 0030 0000
         0a 30 ffff 00 000011 80 000100
         00007f0000001000 00001234 00000005
         68656c6c6f 000000
         2e 81 9e 6c");
    let ip = 14;
    let udp = ip + 20;
    let bth = udp + 8;
    for (at, masked) in [
        (ip + 1, true),   // TOS / ECN: CE marking must not break the ICRC
        (ip + 8, true),   // TTL
        (ip + 10, true),  // IP checksum
        (udp + 6, true),  // UDP checksum
        (bth + 4, true),  // FECN/BECN
        (ip + 4, false),  // identification
        (ip + 5, false),  // identification, low byte
        (udp, false),     // source port
        (bth + 8, false), // AckReq
        (bth + 30, false),
    ] {
        wire[at] ^= 0x01;
        let f = Frame::parse_ethernet(&wire).unwrap();
        let seed = Icrc::rocev2_ipv4(f.ip.unwrap().header, f.udp.unwrap().header).unwrap();
        assert_eq!(f.packet().unwrap().verify_icrc(&seed), masked, "byte {at}");
        wire[at] ^= 0x01;
    }
}
