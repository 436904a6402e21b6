//! Synthetic captures, built with `roce_proto`'s `FrameBuilder`/`PacketRepr`: a packet of any
//! opcode with every extended header the opcode calls for ([`packet_for`]), and the large
//! capture the decode benchmark reads ([`write_benchmark_capture`], `roce gen-capture`).
use crate::link;
use crate::reader::Timestamp;
use crate::writer::PcapWriter;
use roce_proto::aeth::NakCode;
use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, FethRepr,
    FrameBuilder, IethRepr, ImmDt, Msn, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RKey, RdethRepr,
    RethRepr, Syndrome, XrcethRepr,
};
use std::io::{self, Write};

/// A packet for `op` with every extended header the opcode calls for (fields derived from
/// `seq`) and `payload` (ignored if the opcode carries none).
pub fn packet_for(op: Opcode, seq: u32, payload: &[u8]) -> PacketRepr<'_> {
    let h = op.ext_headers();
    let payload: &[u8] = if op.has_payload() { payload } else { &[] };
    let s = u64::from(seq);
    PacketRepr {
        bth: BthRepr {
            opcode: op,
            solicited: seq.is_multiple_of(5) && op.has_payload(),
            migreq: seq.is_multiple_of(3),
            pad_count: PacketRepr::pad_for(payload.len()),
            pkey: PKey(0xffff),
            becn: op == Opcode::CNP,
            dest_qp: Qpn(0x11 + (seq % 4)),
            ack_req: seq.is_multiple_of(2),
            psn: Psn::new(1000 + seq),
            ..BthRepr::default()
        },
        rdeth: h.contains(ExtHeaders::RDETH).then_some(RdethRepr {
            resv: 0,
            ee_context: 0x1234,
        }),
        deth: h.contains(ExtHeaders::DETH).then_some(DethRepr {
            qkey: QKey(0x1111_1111),
            resv: 0,
            src_qp: Qpn(0x42 + seq),
        }),
        xrceth: h.contains(ExtHeaders::XRCETH).then_some(XrcethRepr {
            resv: 0,
            xrc_srq: Qpn(0x77),
        }),
        feth: h
            .contains(ExtHeaders::FETH)
            .then_some(FethRepr { word: 0x11 }),
        reth: h.contains(ExtHeaders::RETH).then_some(RethRepr {
            va: 0x7f00_0000_1000 + s * 0x1000,
            rkey: RKey(0x2b8 + seq),
            dma_len: 3000 + seq,
        }),
        atomic_eth: h.contains(ExtHeaders::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: 0x7f00_0000_2000 + s * 8,
            rkey: RKey(0x300 + seq),
            swap_add: 0x1_0000_0001 + s,
            compare: 0xdead_beef_0000_0000 | s,
        }),
        aeth: h.contains(ExtHeaders::AETH).then_some(AethRepr {
            syndrome: match seq % 4 {
                0 => Syndrome::ACK_UNLIMITED,
                1 => Syndrome::ack(5),
                2 => Syndrome::rnr_nak(14),
                _ => Syndrome::nak(NakCode::PsnSequenceError),
            },
            msn: Msn(seq),
        }),
        atomic_ack_eth: h
            .contains(ExtHeaders::ATOMIC_ACK_ETH)
            .then_some(AtomicAckEthRepr {
                orig_data: 0x0102_0304_0506_0708 + s,
            }),
        immdt: h
            .contains(ExtHeaders::IMMDT)
            .then_some(ImmDt(0xcafe_0000 + seq)),
        ieth: h.contains(ExtHeaders::IETH).then_some(IethRepr {
            rkey: RKey(0x4242_0000 + seq),
        }),
        payload,
    }
}

/// `len` bytes derived from `seed`.
pub fn payload(len: usize, seed: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u32 ^ seed) as u8).collect()
}

/// IPv4 frames from 192.168.10.1 to 192.168.10.2, UDP source port 0xc000.
pub fn v4() -> FrameBuilder {
    FrameBuilder::ipv4([192, 168, 10, 1], [192, 168, 10, 2], 0xc000)
}

/// Writes a pcap of `n` RoCEv2 frames (a repeating mix of RC WRITE, SEND, READ, ACK, atomic,
/// UD and CNP packets with 0–256-byte payloads) for decode benchmarks.
pub fn write_benchmark_capture<W: Write>(out: W, n: u64) -> io::Result<()> {
    let mut w = PcapWriter::new(out, link::ETHERNET, false, 262_144)?;
    let pl = payload(256, 1);
    let mix: [(Opcode, usize); 12] = [
        (Opcode::RC_RDMA_WRITE_FIRST, 256),
        (Opcode::RC_RDMA_WRITE_MIDDLE, 256),
        (Opcode::RC_RDMA_WRITE_LAST, 100),
        (Opcode::RC_ACKNOWLEDGE, 0),
        (Opcode::RC_SEND_ONLY, 64),
        (Opcode::RC_ACKNOWLEDGE, 0),
        (Opcode::RC_RDMA_READ_REQUEST, 0),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, 128),
        (Opcode::RC_FETCH_ADD, 0),
        (Opcode::RC_ATOMIC_ACKNOWLEDGE, 0),
        (Opcode::UD_SEND_ONLY, 32),
        (Opcode::CNP, 16),
    ];
    // Every frame is built (with its ICRC) into one reused buffer.
    let b = v4();
    let mut frame = vec![0u8; 2048];
    for i in 0..n {
        let (op, len) = mix[(i % mix.len() as u64) as usize];
        let mut p = packet_for(op, (i % 4096) as u32, &pl[..len]);
        p.bth.psn = Psn::new((i & 0xff_ffff) as u32);
        let flen = b
            .build(&p, &mut frame)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let t = Timestamp {
            secs: 1_700_000_000 + (i / 1_000_000) as i64,
            nanos: ((i % 1_000_000) * 1000) as u32,
        };
        w.write_packet(t, &frame[..flen], flen as u32)?;
    }
    w.flush()
}
