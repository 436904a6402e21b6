//! Bodies of the fuzz targets, compiled into the library so that `cargo test` replays the
//! committed seed corpus on stable (see `fuzz/`). Each function must never panic.
use crate::{Frame, PacketRepr, RocePacket};

/// Parses a RoCE transport packet (a RoCEv2 UDP payload) and touches every accessor.
pub fn packet(data: &[u8]) {
    if let Ok(p) = RocePacket::new_checked(data) {
        let _ = p.conformance();
        let _ = (p.payload(), p.pad(), p.icrc(), p.bth().psn());
        let _ = (
            p.reth().map(|r| r.va()),
            p.aeth().map(|a| a.syndrome().kind()),
        );
        let _ = (
            p.atomic_eth().map(|a| a.compare()),
            p.atomic_ack_eth().map(|a| a.orig_data()),
        );
        let _ = (
            p.deth().map(|d| d.src_qp()),
            p.immdt(),
            p.ieth(),
            p.rdeth(),
            p.xrceth(),
            p.feth(),
        );
        let repr = PacketRepr::parse(&p).expect("a checked packet always parses into a Repr");
        assert_eq!(
            repr.buffer_len(),
            data.len(),
            "repr length must equal the input length"
        );
    }
}

/// Parses an Ethernet frame, a raw IP packet, a RoCE v1 GRH packet and a native IB packet
/// from the same bytes, and verifies the ICRC of whatever parses.
pub fn frame(data: &[u8]) {
    let parsed = [
        Frame::parse_ethernet(data),
        Frame::parse_ip(data),
        Frame::parse_grh(data),
        Frame::parse_ib(data),
    ];
    for f in parsed.into_iter().flatten() {
        {
            let _ = (f.ecn(), f.bth());
            assert!(f.transport.len() <= data.len());
            if let Ok(p) = f.packet() {
                let _ = p.payload();
                let _ = f.verify_icrc();
            }
        }
    }
}

/// parse → emit → parse must give the same Repr and the same bytes (ICRC field aside, which
/// emit zeroes and the caller fills).
pub fn roundtrip(data: &[u8]) {
    let Ok(first) = PacketRepr::parse_bytes(data) else {
        return;
    };
    let mut buf = [0u8; 9000];
    let Some(out) = buf.get_mut(..first.buffer_len()) else {
        return;
    };
    let n = first.emit(out).expect("a parsed Repr always emits");
    assert_eq!(n, data.len());
    let icrc_at = n - crate::ICRC_LEN;
    out[icrc_at..].copy_from_slice(&data[icrc_at..]);
    let pad_ok = RocePacket::new_unchecked(data)
        .pad()
        .iter()
        .all(|&b| b == 0);
    if pad_ok {
        assert_eq!(&out[..], data, "emit must reproduce the parsed bytes");
    }
    let second = PacketRepr::parse_bytes(out).expect("emitted bytes parse");
    assert_eq!(first, second);
}

/// Decodes arbitrary bytes as a MAD: the common header, the SMP and SA headers, the CM
/// message its attribute names (each of the eleven kinds in turn when the first byte asks for
/// it) and an RDMA-CM `cma_hdr`; then checks that emitting each parsed message and parsing it
/// again gives the same message (every field lives where the parser read it).
pub fn mad(data: &[u8]) {
    use crate::cm::{Message, MessageKind};
    use crate::mad::{self, SaRepr, SmpRepr};
    // The connection bootstrap outside the CM: perftest's key records parse strictly and
    // round-trip.
    if let Some(v) = crate::perftest::Variant::from_len(data.len()) {
        if let Ok(d) = crate::perftest::Dest::parse(data, v) {
            let mut out = [0u8; 125];
            let n = d.emit(&mut out).expect("a parsed record writes");
            assert_eq!(crate::perftest::Dest::parse(&out[..n], v), Ok(d));
        }
    }
    let Ok(p) = mad::Packet::new_checked(data) else {
        return;
    };
    let h = mad::Repr::parse(&p).expect("a checked header parses");
    let _ = (h.attribute_name(), h.mgmt_class.name(), h.method.name());
    let _ = (h.status.invalid_field_name(), h.status.class_specific());
    let mut out = [0u8; mad::HEADER_LEN];
    h.emit(&mut out);
    assert_eq!(
        out,
        data[..mad::HEADER_LEN],
        "the common header round-trips"
    );
    if let Ok(s) = SmpRepr::parse(data) {
        let _ = s.hop_count;
    }
    if let Ok(s) = SaRepr::parse(data) {
        let mut buf = [0u8; mad::SA_HEADER_LEN];
        s.emit(&mut buf);
        assert_eq!(
            SaRepr::parse(&buf).ok(),
            Some(s),
            "the SA header round-trips"
        );
    }
    let body = p.data();
    let kinds: &[MessageKind] = if data[0] & 1 == 1 {
        &MessageKind::ALL
    } else {
        &[]
    };
    let ids = core::iter::once(h.attribute_id).chain(kinds.iter().map(|k| k.attribute_id()));
    for id in ids {
        let Some(Ok(m)) = Message::parse(id, body) else {
            continue;
        };
        let view = crate::cm::MessageView::parse(id, body)
            .expect("a CM kind")
            .expect("the view reads what the message read");
        assert_eq!(view.to_repr(), m, "the view agrees with the message");
        assert_eq!(view.local_comm_id(), m.local_comm_id());
        assert_eq!(view.remote_comm_id(), m.remote_comm_id());
        let mut buf = [0u8; mad::DATA_LEN];
        m.emit(&mut buf);
        let again = Message::parse(id, &buf)
            .expect("a CM kind")
            .expect("emitted bytes parse");
        assert_eq!(again, m, "{:?} round-trips", m.kind());
        let mut n = 0;
        m.visit(&mut |_, _| n += 1);
        assert!(n > 0);
        if let Message::Req(r) = m {
            let _ = crate::rdma_cm::CmaHdr::parse(&r.private_data);
            let _ = crate::rdma_cm::service_port(r.service_id);
        }
    }
}

/// Decodes arbitrary bytes as the headers after an MRC BTH: the first byte picks the opcode
/// (of the twelve), BTH byte 8's flags and the reading (each flag reading, each TSETH rule),
/// the rest is what follows the BTH. What parses emits back to exactly the bytes it was read
/// from (every bit, reserved ones included, is kept).
pub fn mrc(data: &[u8]) {
    use crate::mrc::{FlagReading, Headers, MrcOpcode, Reading, TsethRule};
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let op = MrcOpcode::ALL[usize::from(sel) % MrcOpcode::ALL.len()];
    let flags = sel & 0x30 | 0x80;
    for reading in [
        Reading::default(),
        Reading {
            flags: FlagReading::Ns3,
            tseth: TsethRule::Flag,
        },
        Reading {
            flags: FlagReading::Emulator,
            tseth: TsethRule::Present,
        },
        Reading {
            flags: FlagReading::Emulator,
            tseth: TsethRule::Absent,
        },
    ] {
        let Ok(h) = Headers::parse(op, flags, rest, reading) else {
            continue;
        };
        assert!(h.len <= rest.len());
        let mut out = [0u8; 64];
        let n = h.body.emit(&mut out).expect("parsed headers emit");
        assert_eq!(n, h.len);
        assert_eq!(
            &out[..n],
            &rest[..n],
            "{}: emit gives other bytes",
            op.name()
        );
    }
}

/// Decodes arbitrary bytes as UET headers: the first byte picks UDP or IP (an entropy
/// header first) and the CCX reading, the rest is the packet. What parses emits back to
/// exactly the bytes it was read from.
pub fn uet(data: &[u8]) {
    use crate::uet::{CcxReading, Headers, Reading};
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let reading = Reading {
        ccx: if sel & 2 == 0 {
            CcxReading::Xdp2
        } else {
            CcxReading::Wireshark
        },
    };
    let Ok(h) = Headers::parse(rest, sel & 1 == 1, reading) else {
        return;
    };
    assert_eq!(h.len, h.buffer_len());
    let mut out = [0u8; 160];
    let n = h.emit(&mut out).expect("parsed headers emit");
    assert_eq!(&out[..n], &rest[..n], "emit gives other bytes");
    assert_eq!(Headers::parse(&out[..n], sel & 1 == 1, reading), Ok(h));
}
