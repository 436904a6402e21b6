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

/// Writes a pcap of `n` frames of `qps` RC connections taking turns (the analysis
/// benchmark, `roce gen-capture --rc`): each QP WRITEs 8-packet messages of 256-byte packets
/// (the last with AckReq, answered by an ACK), and one request packet in `loss_every` is lost
/// before the capture point: the responder NAKs it (PSN sequence error) and the requester
/// goes back to it (go-back-N), so the capture holds gaps, NAKs and retransmission episodes.
/// Captured in the middle of the path: both directions, 100 ns apart.
pub fn write_rc_capture<W: Write>(out: W, n: u64, qps: u32, loss_every: u64) -> io::Result<()> {
    write_rc_capture_paused(out, n, qps, loss_every, Pauses::default())
}

/// PFC frames mixed into [`write_rc_capture_paused`]'s capture (`roce gen-capture --rc
/// --pause-every K --pause-senders S`): the analysis's cost with pauses beside connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pauses {
    /// One PFC frame after every this many RoCE frames (0: none).
    pub every: u64,
    /// Senders (source MACs 02:00:00:xx:xx:xx) taking turns, at least 1.
    pub senders: u32,
}

/// [`write_rc_capture`] with PFC frames on the connections' priority (0) among its frames,
/// each counting as one of the `n`: from `pauses.senders` senders in turn, each pausing for 8
/// quanta (41 ns at 100 Gb/s, over before the next frame) except in every 64th run of 64
/// frames, which pause for 0xffff quanta (335.5 µs) and so join into one pause of about as
/// long (the runs are more than that apart while a pause comes at most every other frame):
/// many short paused intervals and a few long ones (storms for a `--pfc-storm` below them).
pub fn write_rc_capture_paused<W: Write>(
    out: W,
    n: u64,
    qps: u32,
    loss_every: u64,
    pauses: Pauses,
) -> io::Result<()> {
    struct Qp {
        /// Next new PSN, the PSN of the message being sent, packets of it sent.
        psn: u32,
        /// Resending from here up to `psn` (go-back-N), after a NAK.
        resend: Option<u32>,
        /// A NAK is owed for this PSN, after this many more packets out of sequence.
        nak: Option<(u32, u8)>,
        sent: u64,
        msn: u32,
    }
    const MSG: u32 = 8;
    let qps = qps.max(1);
    let loss_every = loss_every.max(2);
    let mut w = PcapWriter::new(out, link::ETHERNET, true, 262_144)?;
    let pl = payload(256, 7);
    let mut frame = vec![0u8; 2048];
    let mut state: Vec<Qp> = (0..qps)
        .map(|q| Qp {
            psn: q.wrapping_mul(0x9e37_79b1) & 0xff_fff8,
            resend: None,
            nak: None,
            sent: 0,
            msn: 0,
        })
        .collect();
    let mut written = 0u64;
    let mut i = 0u64;
    let mut emit = |w: &mut PcapWriter<W>,
                    i: &mut u64,
                    q: u32,
                    to_b: bool,
                    p: &PacketRepr<'_>|
     -> io::Result<()> {
        let (a, b) = (
            [10, 1, (q >> 8) as u8, q as u8],
            [10, 2, (q >> 8) as u8, q as u8],
        );
        let fb = if to_b {
            FrameBuilder::ipv4(a, b, 0xc000 | (q as u16 & 0x3fff))
        } else {
            FrameBuilder::ipv4(b, a, 0xc000 | (q as u16 & 0x3fff))
        };
        let len = fb
            .build(p, &mut frame)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let t = 1_700_000_000_000_000_000u64 + *i * 100;
        *i += 1;
        let ts = Timestamp {
            secs: (t / 1_000_000_000) as i64,
            nanos: (t % 1_000_000_000) as u32,
        };
        w.write_packet(ts, &frame[..len], len as u32)
    };
    let mut turn = 0u32;
    let mut paused = 0u64;
    let mut since_pause = 0u64;
    while written < n {
        if pauses.every > 0 && since_pause >= pauses.every {
            since_pause = 0;
            let k = paused;
            paused += 1;
            let who = (k % u64::from(pauses.senders.max(1))) as u32;
            let src = [2, 0, 0, (who >> 16) as u8, (who >> 8) as u8, who as u8];
            let quanta = if (k / 64).is_multiple_of(64) {
                0xffff
            } else {
                8
            };
            let f = roce_proto::mac_control::pfc_frame(src, 0, quanta);
            let t = 1_700_000_000_000_000_000u64 + i * 100;
            i += 1;
            let ts = Timestamp {
                secs: (t / 1_000_000_000) as i64,
                nanos: (t % 1_000_000_000) as u32,
            };
            w.write_packet(ts, &f, f.len() as u32)?;
            written += 1;
            continue;
        }
        since_pause += 1;
        let q = turn % qps;
        turn = turn.wrapping_add(1);
        let s = &mut state[q as usize];
        let (qa, qb) = (Qpn(0x100 + q), Qpn(0x10_0000 + q));
        // The responder's NAK, then the requester's go-back-N.
        if let Some((np, 0)) = s.nak {
            s.nak = None;
            let mut p = packet_for(Opcode::RC_ACKNOWLEDGE, 0, &[]);
            p.bth.dest_qp = qa;
            p.bth.psn = Psn::new(np);
            p.bth.ack_req = false;
            p.aeth = Some(AethRepr {
                syndrome: Syndrome::nak(NakCode::PsnSequenceError),
                msn: Msn(s.msn),
            });
            emit(&mut w, &mut i, q, false, &p)?;
            written += 1;
            s.resend = Some(np);
            continue;
        }
        let psn = match s.resend {
            Some(r) if r != s.psn => {
                s.resend = Some((r + 1) & 0xff_ffff);
                r
            }
            _ => {
                s.resend = None;
                let p = s.psn;
                s.psn = (s.psn + 1) & 0xff_ffff;
                p
            }
        };
        let resending = s.resend.is_some();
        let k = psn % MSG;
        let op = match k {
            0 => Opcode::RC_RDMA_WRITE_FIRST,
            k if k == MSG - 1 => Opcode::RC_RDMA_WRITE_LAST,
            _ => Opcode::RC_RDMA_WRITE_MIDDLE,
        };
        let mut p = packet_for(op, 0, &pl);
        p.bth.dest_qp = qb;
        p.bth.psn = Psn::new(psn);
        p.bth.ack_req = k == MSG - 1;
        p.bth.solicited = false;
        p.bth.migreq = false;
        if let Some(r) = p.reth.as_mut() {
            r.dma_len = 256 * MSG;
        }
        s.sent += 1;
        if let Some((_, left)) = s.nak.as_mut() {
            // The requester keeps sending until the NAK reaches it.
            *left -= 1;
        } else if !resending && s.sent.is_multiple_of(loss_every) {
            // Lost before the capture point: the next packets arrive out of sequence.
            s.nak = Some((psn, 3));
            continue;
        }
        emit(&mut w, &mut i, q, true, &p)?;
        written += 1;
        if k == MSG - 1 && s.nak.is_none() && written < n {
            s.msn = s.msn.wrapping_add(1);
            let mut a = packet_for(Opcode::RC_ACKNOWLEDGE, 0, &[]);
            a.bth.dest_qp = qa;
            a.bth.psn = Psn::new(psn);
            a.bth.ack_req = false;
            a.aeth = Some(AethRepr {
                syndrome: Syndrome::ACK_UNLIMITED,
                msn: Msn(s.msn),
            });
            emit(&mut w, &mut i, q, false, &a)?;
            written += 1;
        }
    }
    w.flush()
}

/// Writes `n` records cycling through the records of `input` that are CM MADs (a UD packet
/// whose MAD has management class 0x07), 1 µs apart: the all-CM capture of the MAD decode
/// benchmark (`roce gen-capture --cm-from FILE`). Fails when `input` holds no CM MAD.
///
/// With `plain_ud`, each packet is moved from QP1 to QP 2 on both sides (BTH destination QP,
/// DETH source QP; ICRC recomputed), so it decodes as an ordinary UD SEND: the same bytes
/// without the management-plane decode, the baseline of that benchmark.
pub fn write_cm_capture<R: io::Read, W: Write>(
    input: &mut crate::reader::CaptureReader<R>,
    out: W,
    n: u64,
    plain_ud: bool,
) -> io::Result<()> {
    let mut cm: Vec<(u32, Vec<u8>)> = Vec::new();
    while let Some(rec) = input
        .next_record()
        .map_err(|e| io::Error::other(e.to_string()))?
    {
        let is_cm = link::parse(rec.link_type, rec.data)
            .ok()
            .and_then(|f| {
                f.packet()
                    .ok()
                    .map(|p| p.payload_ref().get(1) == Some(&0x07))
            })
            .unwrap_or(false);
        if is_cm && cm.len() < 4096 {
            let mut data = rec.data.to_vec();
            if plain_ud {
                off_qp1(rec.link_type, &mut data)?;
            }
            cm.push((rec.link_type, data));
        }
    }
    let Some(&(link_type, _)) = cm.first() else {
        return Err(io::Error::other("no CM MAD in the input"));
    };
    let mut w = PcapWriter::new(out, link_type, true, 262_144)?;
    for i in 0..n {
        let (_, data) = &cm[(i % cm.len() as u64) as usize];
        let ts = Timestamp {
            secs: 1_700_000_000 + (i / 1_000_000) as i64,
            nanos: ((i % 1_000_000) * 1000) as u32,
        };
        w.write_packet(ts, data, data.len() as u32)?;
    }
    w.flush()
}

/// Readdresses a UD packet between QP1s to QP 2 on both ends and recomputes its ICRC.
fn off_qp1(link_type: u32, data: &mut [u8]) -> io::Result<()> {
    let bad = |why: &str| io::Error::other(format!("--plain-ud: {why}"));
    let (at, len, seed) = {
        let f = link::parse(link_type, data).map_err(|e| bad(&e.to_string()))?;
        let t = f.transport;
        // Where the transport bytes start in the record (a sub-slice of it).
        let at = t.as_ptr() as usize - data.as_ptr() as usize;
        let seed = f.icrc_seed().map_err(|e| bad(&e.to_string()))?;
        (at, t.len(), seed)
    };
    // BTH destination QP is bytes 5..8; the DETH follows the 12-byte BTH, source QP at 5..8.
    let t = data
        .get_mut(at..at + len)
        .filter(|t| t.len() >= 12 + 8 + 4)
        .ok_or_else(|| bad("shorter than BTH + DETH + ICRC"))?;
    t[5..8].copy_from_slice(&[0, 0, 2]);
    t[12 + 5..12 + 8].copy_from_slice(&[0, 0, 2]);
    seed.fill(t);
    Ok(())
}

/// Writes a pcap of `n` request frames of one RC QP at PSNs drawn at random (a fixed seed):
/// WRITE Only and SEND Only in turn, 64 bytes each, 1 µs apart, no responses. The analyzer's
/// worst case (`roce gen-capture --psn-jumps`): nearly every packet opens a PSN gap, fills one
/// or is a retransmission, so its gap and outstanding-request lookups run on full tables.
pub fn write_psn_jumps_capture<W: Write>(out: W, n: u64) -> io::Result<()> {
    let mut w = PcapWriter::new(out, link::ETHERNET, true, 262_144)?;
    let pl = payload(64, 11);
    let fb = v4();
    let mut frame = vec![0u8; 2048];
    // xorshift64*: reproducible benchmark data, not a secret.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let op = if i % 2 == 0 {
            Opcode::RC_RDMA_WRITE_ONLY
        } else {
            Opcode::RC_SEND_ONLY
        };
        let mut p = packet_for(op, 0, &pl);
        p.bth.psn = Psn::new((r >> 40) as u32);
        let len = fb
            .build(&p, &mut frame)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let t = Timestamp {
            secs: 1_700_000_000 + (i / 1_000_000) as i64,
            nanos: ((i % 1_000_000) * 1000) as u32,
        };
        w.write_packet(t, &frame[..len], len as u32)?;
    }
    w.flush()
}
