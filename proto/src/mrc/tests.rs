extern crate std;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::{BthRepr, Error, Frame, FrameBuilder, PacketRepr, Psn, Qpn, RKey};

fn sack_body() -> Body {
    let mut seth = Seth {
        ack_psn_offset: -17,
        entropy: 0x1234_5678,
        spdcid: 0x1122,
        dpdcid: 0x3344,
        cack_psn: Psn::new(0xab_cdef),
        mpr: 32,
        sack_offset: 7,
        sack_bitmap: 0x8040_2010_0804_0201,
        ..Seth::default()
    };
    seth.set_flags(SkipMode::AlwaysSkip, true);
    let cc = CcState {
        tx_timestamp: 0x1234,
        reserved: false,
        ooo_count: 0x2345,
        restore_cwnd: true,
        rcv_cwnd_pen: 0x45,
        rcvd_bytes: 0xab_cdef,
    };
    Body::Sack(seth, cc)
}

/// A whole frame: Ethernet, IPv4, UDP to `port`, BTH with `op` and byte 8 `flags`, `body`,
/// `payload`, pad and the ICRC. Returns the frame and where its IP header starts.
fn frame(op: MrcOpcode, flags: u8, body: &Body, payload: &[u8], port: u16) -> Vec<u8> {
    let mut transport = vec![0u8; body.buffer_len() + payload.len()];
    let n = body.emit(&mut transport).unwrap();
    transport[n..].copy_from_slice(payload);
    let p = PacketRepr::bare(
        BthRepr {
            opcode: op.opcode(),
            pad_count: PacketRepr::pad_for(transport.len()),
            dest_qp: Qpn::new(0x11),
            ack_req: flags & 0x80 != 0,
            resv7: flags & 0x7f,
            psn: Psn::new(0x42),
            ..BthRepr::default()
        },
        &transport,
    );
    let mut b = FrameBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0xc000);
    b.dst_port = port;
    let mut buf = vec![0u8; b.frame_len(&p)];
    let len = b.build(&p, &mut buf).unwrap();
    buf.truncate(len);
    buf
}

/// Decodes a frame built by [`frame`]: the ICRC checks, the headers come back.
fn decode(buf: &[u8], port: u16, reading: Reading) -> Result<(Headers, Vec<u8>)> {
    let f = Frame::parse_ip_port(&buf[14..], port)?;
    assert!(f.verify_icrc()?, "ICRC");
    let p = f.packet()?;
    let bth = p.bth();
    let op = MrcOpcode::from_opcode(bth.opcode()).expect("an MRC opcode");
    let flags = p.as_bytes()[8];
    let h = Headers::parse(op, flags, p.payload(), reading)?;
    Ok((h, p.payload()[h.len..].to_vec()))
}

#[test]
fn a_sack_packet_builds_and_decodes_with_its_icrc() {
    let body = sack_body();
    let buf = frame(MrcOpcode::Sack, 0, &body, &[], MRC_UDP_PORT);
    let (h, rest) = decode(&buf, MRC_UDP_PORT, Reading::default()).unwrap();
    assert_eq!(h.body, body);
    assert!(rest.is_empty());
    // The golden bytes of both serialisers, right after the 12-byte BTH.
    let at = 14 + 20 + 8 + 12;
    assert_eq!(
        &buf[at..at + 36],
        &[
            0x00, 0x42, 0xff, 0xef, 0x12, 0x34, 0x56, 0x78, 0x11, 0x22, 0x33, 0x44, 0x00, 0xab,
            0xcd, 0xef, 0x00, 0x20, 0x00, 0x07, 0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01,
            0x12, 0x34, 0x23, 0x45, 0xc5, 0xab, 0xcd, 0xef
        ]
    );
    // A flipped bit anywhere in the headers fails the ICRC.
    let mut bad = buf.clone();
    bad[at + 20] ^= 1;
    let f = Frame::parse_ip_port(&bad[14..], MRC_UDP_PORT).unwrap();
    assert!(!f.verify_icrc().unwrap());
}

fn write_body(tseth: bool, imm: bool) -> Body {
    Body::Write {
        meth: Meth { rqmsn: 1, msn: 2 },
        tseth: tseth.then_some(Tseth {
            tx_timestamp: 0x1234,
            word: TsWord::DEFAULT,
        }),
        reth: RethRepr {
            va: 0x7f00_0000_1000,
            rkey: RKey(0x77),
            dma_len: 1 << 20,
        },
        imm: imm.then_some(ImmDt(0xdead_beef)),
    }
}

#[test]
fn writes_with_and_without_tseth_as_the_flag_says() {
    let payload: Vec<u8> = (0..=255u8).collect();
    for (op, imm) in [
        (MrcOpcode::WriteFirst, false),
        (MrcOpcode::WriteMiddle, false),
        (MrcOpcode::WriteLastImm, true),
        (MrcOpcode::WriteOnlyImm, true),
    ] {
        for tseth in [false, true] {
            let body = write_body(tseth, imm);
            // The emulator's TSETH flag (0x10) and its rtx (0x20).
            let flags = if tseth { 0x90 | 0x20 } else { 0x80 };
            let buf = frame(op, flags, &body, &payload, MRC_UDP_PORT);
            let (h, rest) = decode(&buf, MRC_UDP_PORT, Reading::default()).unwrap();
            assert_eq!(h.body, body, "{op:?} tseth={tseth}");
            assert_eq!(rest, payload, "{op:?}");
            assert_eq!(h.flags.rtx(FlagReading::Emulator), tseth);
            assert!(h.flags.ack_req());
            // Read as ns-3 (no TSETH flag): the TSETH's bytes become the RETH's, and the
            // output says which rule decided.
            let r = Reading {
                flags: FlagReading::Ns3,
                tseth: TsethRule::Flag,
            };
            let (h3, _) = decode(&buf, MRC_UDP_PORT, r).unwrap();
            assert_eq!(h3.tseth_rule, TsethRule::Flag);
            if let Body::Write { tseth: t, .. } = h3.body {
                assert!(t.is_none());
            }
            assert_eq!(h3.body == body, !tseth);
            let forced = Reading {
                tseth: if tseth {
                    TsethRule::Present
                } else {
                    TsethRule::Absent
                },
                ..r
            };
            assert_eq!(decode(&buf, MRC_UDP_PORT, forced).unwrap().0.body, body);
        }
    }
}

#[test]
fn every_opcode_round_trips_and_every_prefix_is_an_error() {
    let bodies = [
        write_body(true, false),
        Body::Ack(
            AethRepr::parse(&AethPacket::new_checked(&[0x1f, 0, 0, 5][..]).unwrap()).unwrap(),
        ),
        Body::EndpointRequest(Erth {
            word0: 0x0001,
            port_status_mask: 0xa5a5_5a5a,
            word: TsWord::DEFAULT,
            ..Erth::default()
        }),
        Body::EndpointResponse(Eeth::default()),
        sack_body(),
        Body::Nack(Neth {
            nack_reason: NackReason::Trimmed.value(),
            nack_psn: Psn::new(9),
            cc_type: 2,
            ..Neth::default()
        }),
        Body::Probe(Peth {
            probe_id: 0x7788,
            word: TsWord::DEFAULT,
            ..Peth::default()
        }),
    ];
    let ops = [
        MrcOpcode::WriteOnly,
        MrcOpcode::Ack,
        MrcOpcode::EndpointRequest,
        MrcOpcode::EndpointResponse,
        MrcOpcode::Sack,
        MrcOpcode::Nack,
        MrcOpcode::ProbeRequest,
    ];
    let reading = Reading {
        tseth: TsethRule::Present,
        ..Reading::default()
    };
    for (op, body) in ops.into_iter().zip(bodies) {
        let mut b = vec![0u8; body.buffer_len()];
        assert_eq!(body.emit(&mut b).unwrap(), b.len());
        let h = Headers::parse(op, 0, &b, reading).unwrap();
        assert_eq!((h.body, h.len), (body, b.len()), "{}", op.name());
        for n in 0..b.len() {
            match Headers::parse(op, 0, &b[..n], reading) {
                Err(Error::Truncated { got, .. }) => assert!(got < b.len()),
                other => panic!("{} with {n} bytes: {other:?}", op.name()),
            }
        }
        assert!(body.emit(&mut vec![0u8; b.len() - 1]).is_err());
    }
}

#[test]
fn opcodes_are_the_manufacturer_range_ones_and_nothing_else() {
    for v in 0..=255u8 {
        let m = MrcOpcode::from_opcode(Opcode(v));
        assert_eq!(m.map(|m| m.opcode().0), m.map(|_| v));
        assert_eq!(
            m.is_some(),
            MrcOpcode::ALL.iter().any(|o| o.opcode().0 == v)
        );
        if let Some(m) = m {
            assert!((0xc6..=0xde).contains(&v), "{}", m.name());
        }
    }
    assert!(!MrcOpcode::ProbeRequest.takes_psn() && MrcOpcode::Sack.takes_psn());
}
