//! Property tests over every opcode, random header fields, payloads of 0..4096 bytes and both
//! IP versions. proptest prints the failing case and persists its seed on failure.
use proptest::prelude::*;
use roce_proto::frame::IpParams;
use roce_proto::opcode::ExtHeaders;
use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, Ecn, FethRepr, Frame,
    FrameBuilder, Icrc, IethRepr, ImmDt, Msn, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RKey,
    RdethRepr, RethRepr, Syndrome, XrcethRepr,
};

/// Random values for every header field; the opcode decides which headers are used.
#[derive(Debug, Clone)]
struct Fields {
    opcode: u8,
    flags: (bool, bool, u8),
    pkey: u16,
    cn: (bool, bool, u8),
    dest_qp: u32,
    ack_req: bool,
    resv7: u8,
    psn: u32,
    words: [u64; 8],
    payload: Vec<u8>,
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        any::<u8>(),
        (any::<bool>(), any::<bool>(), 0u8..16),
        any::<u16>(),
        (any::<bool>(), any::<bool>(), 0u8..64),
        0u32..1 << 24,
        any::<bool>(),
        0u8..128,
        0u32..1 << 24,
        any::<[u64; 8]>(),
        prop::collection::vec(any::<u8>(), 0..4096),
    )
        .prop_map(
            |(opcode, flags, pkey, cn, dest_qp, ack_req, resv7, psn, words, payload)| Fields {
                opcode,
                flags,
                pkey,
                cn,
                dest_qp,
                ack_req,
                resv7,
                psn,
                words,
                payload,
            },
        )
}

fn repr(f: &Fields) -> PacketRepr<'_> {
    let op = Opcode(f.opcode);
    let h = op.ext_headers();
    let w = f.words;
    let on = |x: ExtHeaders| h.contains(x);
    let payload: &[u8] = if op.has_payload() { &f.payload } else { &[] };
    PacketRepr {
        bth: BthRepr {
            opcode: op,
            solicited: f.flags.0,
            migreq: f.flags.1,
            pad_count: PacketRepr::pad_for(payload.len()),
            tver: f.flags.2,
            pkey: PKey(f.pkey),
            fecn: f.cn.0,
            becn: f.cn.1,
            resv6a: f.cn.2,
            dest_qp: Qpn(f.dest_qp),
            ack_req: f.ack_req,
            resv7: f.resv7,
            psn: Psn::new(f.psn),
        },
        rdeth: on(ExtHeaders::RDETH).then(|| RdethRepr {
            resv: w[0] as u8,
            ee_context: (w[0] >> 8) as u32 & 0xff_ffff,
        }),
        deth: on(ExtHeaders::DETH).then(|| DethRepr {
            qkey: QKey(w[1] as u32),
            resv: (w[1] >> 32) as u8,
            src_qp: Qpn((w[1] >> 40) as u32 & 0xff_ffff),
        }),
        xrceth: on(ExtHeaders::XRCETH).then(|| XrcethRepr {
            resv: w[2] as u8,
            xrc_srq: Qpn((w[2] >> 8) as u32 & 0xff_ffff),
        }),
        feth: on(ExtHeaders::FETH).then(|| FethRepr { word: w[3] as u32 }),
        reth: on(ExtHeaders::RETH).then(|| RethRepr {
            va: w[4],
            rkey: RKey(w[5] as u32),
            dma_len: (w[5] >> 32) as u32,
        }),
        atomic_eth: on(ExtHeaders::ATOMIC_ETH).then(|| AtomicEthRepr {
            va: w[6],
            rkey: RKey(w[7] as u32),
            swap_add: w[4].rotate_left(7),
            compare: w[5].rotate_left(13),
        }),
        aeth: on(ExtHeaders::AETH).then(|| AethRepr {
            syndrome: Syndrome(w[3] as u8),
            msn: Msn((w[3] >> 8) as u32 & 0xff_ffff),
        }),
        atomic_ack_eth: on(ExtHeaders::ATOMIC_ACK_ETH)
            .then(|| AtomicAckEthRepr { orig_data: w[7] }),
        immdt: on(ExtHeaders::IMMDT).then(|| ImmDt((w[2] >> 32) as u32)),
        ieth: on(ExtHeaders::IETH).then(|| IethRepr {
            rkey: RKey((w[6] >> 32) as u32),
        }),
        payload,
    }
}

fn builder(v6: bool, addr: u64, ecn: u8, port: u16) -> FrameBuilder {
    let a = addr.to_be_bytes();
    if v6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s[..8].copy_from_slice(&a);
        d[8..].copy_from_slice(&a);
        let mut b = FrameBuilder::ipv6(s, d, port);
        b.ip = IpParams::V6 {
            src: s,
            dst: d,
            traffic_class: ecn,
            flow_label: u32::from(port) << 4,
            hop_limit: a[0],
        };
        b
    } else {
        let mut b = FrameBuilder::ipv4([a[0], a[1], a[2], a[3]], [a[4], a[5], a[6], a[7]], port);
        b.ip = IpParams::V4 {
            src: [a[0], a[1], a[2], a[3]],
            dst: [a[4], a[5], a[6], a[7]],
            dscp: ecn >> 2,
            ecn: Ecn::from_bits(ecn),
            ttl: a[1],
            identification: port.rotate_left(3),
            dont_fragment: port & 1 == 0,
        };
        b.udp_checksum = port & 2 == 0;
        b
    }
}

fn frame_bytes(b: &FrameBuilder, p: &PacketRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; b.frame_len(p)];
    b.build(p, &mut buf).expect("builds");
    buf
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any Repr emits, parses back equal, and its ICRC verifies (from the header bytes and
    /// from header fields alone).
    #[test]
    fn emit_parse_identity_and_icrc(f in fields(), v6 in any::<bool>(), addr in any::<u64>(), ecn in any::<u8>(), port in any::<u16>()) {
        let p = repr(&f);
        let b = builder(v6, addr, ecn, port);
        let bytes = frame_bytes(&b, &p);
        let frame = Frame::parse_ethernet(&bytes).expect("built frame parses");
        prop_assert!(!frame.truncated);
        let parsed = PacketRepr::parse(&frame.packet().unwrap()).unwrap();
        prop_assert_eq!(parsed, p);
        prop_assert_eq!(frame.verify_icrc(), Ok(true));
        let from_fields = b.icrc_seed(p.buffer_len());
        prop_assert!(frame.packet().unwrap().verify_icrc(&from_fields));
    }

    /// The ICRC check of a received frame, which hashes the pseudo-header and the BTH in one
    /// piece, says what the seed and `verify` say, on any transport bytes after any IPv4
    /// (options too), IPv6 or GRH header, however short or damaged.
    #[test]
    fn the_one_piece_icrc_check_is_the_seeds(
        f in fields(), v6 in any::<bool>(), addr in any::<u64>(),
        flip in any::<u64>(), cut in any::<u16>(), options in 0usize..11, grh in any::<bool>(),
    ) {
        let p = repr(&f);
        let b = builder(v6, addr, 0, 0xc000);
        let mut bytes = frame_bytes(&b, &p);
        if !v6 && options > 0 {
            // Grow the IPv4 header by `options` words of options (IHL up to 15).
            let at = 14 + 20;
            bytes.splice(at..at, std::iter::repeat_n(1u8, options * 4));
            bytes[14] = 0x40 | (5 + options as u8);
            let total = u16::from_be_bytes([bytes[16], bytes[17]]) + options as u16 * 4;
            bytes[16..18].copy_from_slice(&total.to_be_bytes());
        }
        if flip % 3 == 0 {
            let at = (flip >> 8) as usize % bytes.len();
            bytes[at] ^= 1 << ((flip >> 40) % 8);
        }
        let keep = bytes.len() - (usize::from(cut) % 64).min(bytes.len() - 14);
        bytes.truncate(keep);
        let whole = flip % 3 != 0 && cut % 64 == 0;
        let Ok(frame) = Frame::parse_ethernet(&bytes) else {
            prop_assert!(!whole, "an untouched frame parses");
            return Ok(());
        };
        if whole && !v6 {
            prop_assert_eq!(frame.ip.map(|ip| ip.header.len()), Some(20 + options * 4));
            prop_assert_eq!(frame.icrc_matches(), Ok(options == 0), "options change the ICRC");
        }
        let want = frame.icrc_seed().map(|s| s.verify(frame.transport));
        prop_assert_eq!(frame.icrc_matches(), want);
        if grh {
            // The same bytes after a GRH (RoCE v1's pseudo-header).
            let mut g = [0u8; 40];
            g[0] = 0x60;
            g[8..16].copy_from_slice(&addr.to_be_bytes());
            let want = Icrc::grh(&g).map(|s| s.verify(frame.transport));
            prop_assert_eq!(Icrc::verify_grh(&g, frame.transport), want);
        }
    }

    /// Any single flipped bit in a byte the ICRC covers breaks it.
    #[test]
    fn any_covered_bit_flip_breaks_the_icrc(f in fields(), v6 in any::<bool>(), addr in any::<u64>(), pick in any::<u64>()) {
        let p = repr(&f);
        let b = builder(v6, addr, 0, 0xc000);
        let mut bytes = frame_bytes(&b, &p);
        let ip_at = 14;
        let ip_len = if v6 { 40 } else { 20 };
        let udp_at = ip_at + ip_len;
        let t_at = udp_at + 8;
        // Covered bytes: IP (but the masked ones), UDP ports and length, BTH but byte 4, the rest.
        let masked_ip: &[usize] = if v6 { &[1, 2, 3, 7] } else { &[1, 8, 10, 11] };
        let mut covered: Vec<usize> = (0..ip_len).filter(|i| !masked_ip.contains(i)).map(|i| ip_at + i).collect();
        covered.extend(udp_at..udp_at + 6);
        covered.extend((t_at..bytes.len() - 4).filter(|&i| i != t_at + 4));
        let at = covered[(pick % covered.len() as u64) as usize];
        let bit = 1u8 << ((pick >> 32) % 8);
        if v6 && at == ip_at { prop_assume!(bit & 0x0f == 0); } // low nibble of byte 0 is traffic class
        bytes[at] ^= bit;
        let seed = if v6 {
            Icrc::rocev2_ipv6(&bytes[ip_at..udp_at], &bytes[udp_at..t_at])
        } else {
            Icrc::rocev2_ipv4(&bytes[ip_at..udp_at], &bytes[udp_at..t_at])
        };
        // A flip of the version or IHL bits makes the header unusable: detected too.
        if let Ok(seed) = seed {
            prop_assert!(!seed.verify(&bytes[t_at..]), "flip at {} bit {:#x} went unnoticed", at, bit);
        }
    }

    /// Every truncated prefix of a valid frame is an error — never a panic, never a packet.
    #[test]
    fn every_truncated_prefix_is_an_error(f in fields(), v6 in any::<bool>(), addr in any::<u64>()) {
        let mut f = f;
        f.payload.truncate(300);
        let p = repr(&f);
        let bytes = frame_bytes(&builder(v6, addr, 2, 0xc001), &p);
        for n in 0..bytes.len() {
            let r = Frame::parse_ethernet(&bytes[..n]).and_then(|fr| fr.packet().map(|_| ()));
            prop_assert!(r.is_err(), "prefix of {} bytes (of {}) accepted", n, bytes.len());
        }
    }

    /// Arbitrary bytes never panic any parser.
    #[test]
    fn arbitrary_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
        roce_proto::fuzzing::packet(&data);
        roce_proto::fuzzing::frame(&data);
        roce_proto::fuzzing::roundtrip(&data);
        roce_proto::fuzzing::mrc(&data);
        roce_proto::fuzzing::uet(&data);
    }
}

mod mad_props {
    use proptest::prelude::*;
    use roce_proto::cm::{Message, MessageKind, MessageView};
    use roce_proto::mad::{self, Method, MgmtClass, Repr, Status};

    proptest! {
        /// Every CM message read from any bytes writes back to bytes that read as the same
        /// message, and emitting twice gives the same bytes.
        #[test]
        fn every_cm_message_round_trips(data in proptest::collection::vec(any::<u8>(), 232)) {
            for kind in MessageKind::ALL {
                let Some(m) = Message::parse(kind.attribute_id(), &data) else { continue };
                let m = m.unwrap();
                let mut a = [0u8; mad::DATA_LEN];
                m.emit(&mut a);
                let again = Message::parse(kind.attribute_id(), &a).unwrap().unwrap();
                prop_assert_eq!(again, m);
                let mut b = [0xffu8; mad::DATA_LEN];
                again.emit(&mut b);
                prop_assert_eq!(a, b, "{:?}: emit zeroes what no field covers", kind);
            }
        }

        /// The zero-copy view reads every field as the owned message does, in the same order
        /// with the same values, and the same communication IDs.
        #[test]
        fn every_cm_view_agrees_with_its_message(data in proptest::collection::vec(any::<u8>(), 232)) {
            for kind in MessageKind::ALL {
                let m = Message::parse(kind.attribute_id(), &data).unwrap().unwrap();
                let v = MessageView::parse(kind.attribute_id(), &data).unwrap().unwrap();
                prop_assert_eq!(v.kind(), kind);
                prop_assert_eq!(v.to_repr(), m);
                prop_assert_eq!(v.local_comm_id(), m.local_comm_id(), "{:?}", kind);
                prop_assert_eq!(v.remote_comm_id(), m.remote_comm_id(), "{:?}", kind);
                let mut from_m = Vec::new();
                m.visit(&mut |k, x| from_m.push(format!("{k}={x:?}")));
                let mut from_v = Vec::new();
                v.visit(&mut |k, x| from_v.push(format!("{k}={x:?}")));
                prop_assert!(from_m.len() > 1);
                prop_assert_eq!(from_v, from_m);
            }
        }

        /// The common header: Repr -> bytes -> Repr.
        #[test]
        fn mad_header_round_trips(
            class in any::<u8>(), method in any::<u8>(), status in any::<u16>(),
            cs in any::<u16>(), tid in any::<u64>(), attr in any::<u16>(), modif in any::<u32>(),
        ) {
            let r = Repr {
                base_version: 1,
                mgmt_class: MgmtClass(class),
                class_version: 2,
                method: Method(method),
                status: Status(status),
                class_specific: cs,
                transaction_id: tid,
                attribute_id: attr,
                reserved: 0,
                attribute_modifier: modif,
            };
            let mut buf = [0u8; mad::MAD_LEN];
            r.emit(&mut buf);
            let p = mad::Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p).unwrap(), r);
        }
    }
}
