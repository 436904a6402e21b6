//! Synthetic MRC and UET conversations (`roce gen-capture --mrc`, `--uet`): what a capture
//! point between two NICs of an AI fabric sees, for tests and for users without hardware.
//!
//! MRC (UDP 4971): a WRITE sprayed over four entropy values (the UDP source port) with a
//! TSETH on every packet; one packet trimmed by a switch (its payload cut, DSCP 9) and NACKed
//! `TRIMMED` with its entropy reflected; selective ACKs whose bitmap shows the hole; the
//! retransmission (the emulator's `rtx` flag) on another entropy value; a reliability probe
//! and the SACK that answers it (PR).
//!
//! UET (UDP 4793): a RUD conversation on one PDC pair, its first request with SYN; standard
//! SES WRITE requests sprayed over entropy values; ACK_CC with NSCC state and a SACK bitmap;
//! one request trimmed and NACKed `TRIMMED`, then retransmitted (RETX); a CONTROL ACK_REQ
//! and the final cumulative ACK.
use std::io::{self, Write};

use roce_proto::frame::IpParams;
use roce_proto::mrc::{self, Body, CcState, Meth, MrcOpcode, Neth, Peth, Seth, SkipMode, Tseth};
use roce_proto::uet::{self, pds, ses, Pds, PdsType, Prologue, Ses};
use roce_proto::{BthRepr, FrameBuilder, PacketRepr, Psn, Qpn, RKey, RethRepr};

use crate::link;
use crate::reader::Timestamp;
use crate::writer::PcapWriter;

/// The payload of a full packet when the caller does not say (`gen-capture`'s default).
pub const DEFAULT_MTU: usize = 1024;
/// The DSCP the ns-3 MRC model recognises trimmed packets by.
const DSCP_TRIMMED: u8 = 9;

fn err(e: roce_proto::Error) -> io::Error {
    io::Error::other(e.to_string())
}

fn builder(a_to_b: bool, sport: u16, dport: u16, dscp: u8) -> FrameBuilder {
    let (s, d) = if a_to_b {
        ([10, 0, 0, 1], [10, 0, 0, 2])
    } else {
        ([10, 0, 0, 2], [10, 0, 0, 1])
    };
    let mut b = FrameBuilder::ipv4(s, d, sport);
    b.dst_port = dport;
    if let IpParams::V4 { dscp: d, .. } = &mut b.ip {
        *d = dscp;
    }
    b
}

struct Out<W: Write> {
    w: PcapWriter<W>,
    frame: Vec<u8>,
    n: u64,
    limit: u64,
}

impl<W: Write> Out<W> {
    /// A pcap of Ethernet frames on `out` that takes `limit` of them.
    fn new(out: W, limit: u64) -> io::Result<Self> {
        Ok(Self {
            w: PcapWriter::new(out, link::ETHERNET, false, 65_535)?,
            frame: Vec::new(),
            n: 0,
            limit,
        })
    }
    fn time(&self) -> Timestamp {
        Timestamp {
            secs: 1_790_000_000 + (self.n / 1_000_000) as i64,
            nanos: ((self.n % 1_000_000) * 1000) as u32,
        }
    }
    fn full(&self) -> bool {
        self.n >= self.limit
    }
    fn put(&mut self, len: usize) -> io::Result<()> {
        let t = self.time();
        self.w.write_packet(t, &self.frame[..len], len as u32)?;
        self.n += 1;
        Ok(())
    }
    /// An MRC packet: BTH (`op`, `psn`, byte 8 `flags`), `body`, `payload`, ICRC.
    #[allow(clippy::too_many_arguments)]
    fn mrc(
        &mut self,
        b: &FrameBuilder,
        op: MrcOpcode,
        qp: u32,
        psn: u32,
        flags: u8,
        body: &Body,
        payload: &[u8],
    ) -> io::Result<()> {
        if self.full() {
            return Ok(());
        }
        let mut t = vec![0u8; body.buffer_len() + payload.len()];
        let n = body.emit(&mut t).map_err(err)?;
        t[n..].copy_from_slice(payload);
        let p = PacketRepr::bare(
            BthRepr {
                opcode: op.opcode(),
                pad_count: PacketRepr::pad_for(t.len()),
                pkey: roce_proto::PKey(0xffff),
                dest_qp: Qpn::new(qp),
                ack_req: flags & 0x80 != 0,
                resv7: flags & 0x7f,
                psn: Psn::new(psn),
                ..BthRepr::default()
            },
            &t,
        );
        self.frame.resize(b.frame_len(&p), 0);
        let len = b.build(&p, &mut self.frame).map_err(err)?;
        self.put(len)
    }
    /// A UET packet: `h` and `payload` after UDP.
    fn uet(&mut self, b: &FrameBuilder, h: &uet::Headers, payload: &[u8]) -> io::Result<()> {
        if self.full() {
            return Ok(());
        }
        let mut t = vec![0u8; h.buffer_len() + payload.len()];
        let n = h.emit(&mut t).map_err(err)?;
        t[n..].copy_from_slice(payload);
        self.frame.resize(b.frame_len_for(t.len()), 0);
        let len = b.wrap(&t, &mut self.frame).map_err(err)?;
        self.put(len)
    }
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len).map(|i| ((i as u32 * 31) ^ seed) as u8).collect()
}

/// Writes `n` frames of MRC conversations (see the module) to `out`, `mtu` bytes of payload
/// in a full packet.
pub fn write_mrc_capture<W: Write>(out: W, n: u64, mtu: usize) -> io::Result<()> {
    let mut o = Out::new(out, n)?;
    let port = mrc::MRC_UDP_PORT;
    let (qp_a, qp_b) = (0x11u32, 0x22u32);
    let evs = [0xc001u16, 0xc417, 0xd2a9, 0xe5f3];
    let mut round = 0u32;
    while !o.full() {
        let base = round.wrapping_mul(16) & 0xff_ffff;
        let va = 0x7f00_0000_0000u64 + u64::from(round) * 8 * mtu as u64;
        let trimmed = 5u32;
        for k in 0..8u32 {
            let ev = evs[(k % 4) as usize];
            let cut = k == trimmed;
            let b = builder(true, ev, port, if cut { DSCP_TRIMMED } else { 26 });
            let body = Body::Write {
                meth: Meth {
                    rqmsn: 0,
                    msn: round as u16,
                },
                tseth: Some(Tseth {
                    tx_timestamp: (k * 8) as u16,
                    word: mrc::TsWord::DEFAULT,
                }),
                reth: RethRepr {
                    va: va + u64::from(k) * mtu as u64,
                    rkey: RKey(0x1234),
                    dma_len: 8 * mtu as u32,
                },
                imm: None,
            };
            let op = match k {
                0 => MrcOpcode::WriteFirst,
                7 => MrcOpcode::WriteLast,
                _ => MrcOpcode::WriteMiddle,
            };
            // TSETH present (0x10); the last packet asks for an ACK.
            let flags = 0x10 | if k == 7 { 0x80 } else { 0 };
            let pl = data(if cut { 0 } else { mtu }, k);
            o.mrc(&b, op, qp_b, base + k, flags, &body, &pl)?;
            if cut {
                // The receiver sees the trimmed header and NACKs it at once.
                let back = builder(false, ev, port, 46);
                let nack = Body::Nack(Neth {
                    nack_reason: mrc::NackReason::Trimmed.value(),
                    entropy: u32::from(ev) << 16,
                    spdcid: qp_b as u16,
                    dpdcid: qp_a as u16,
                    nack_psn: Psn::new(base + k),
                    cc_type: 2,
                    tx_timestamp: (k * 8) as u16,
                    ..Neth::default()
                });
                o.mrc(&back, MrcOpcode::Nack, qp_a, base + k, 0, &nack, &[])?;
            }
        }
        // SACK: everything but the trimmed packet; cumulative up to it.
        let back = builder(false, evs[3], port, 46);
        // Bit i is PSN cack + 1 + i: the hole is bit 0, the packets after it the next bits.
        let bitmap = (0..8u32)
            .filter(|k| *k > trimmed)
            .fold(0u64, |m, k| m | 1 << (k - trimmed));
        let sack = |ack_off: i16, cack: u32, bitmap: u64, pr: bool, ev: u16| {
            let mut s = Seth {
                ack_psn_offset: ack_off,
                entropy: u32::from(ev) << 16,
                spdcid: qp_b as u16,
                dpdcid: qp_a as u16,
                cack_psn: Psn::new(cack),
                mpr: 4,
                sack_offset: 1,
                sack_bitmap: bitmap,
                ..Seth::default()
            };
            s.set_flags(SkipMode::None, pr);
            Body::Sack(
                s,
                CcState {
                    tx_timestamp: 56,
                    ooo_count: 2,
                    rcv_cwnd_pen: 0,
                    rcvd_bytes: (7 * mtu / 256) as u32,
                    ..CcState::default()
                },
            )
        };
        // Triggered by the last packet (cack + 3).
        let s = sack(3, base + trimmed - 1, bitmap, false, evs[3]);
        o.mrc(&back, MrcOpcode::Sack, qp_a, base + 7, 0, &s, &[])?;
        // The retransmission, on another entropy value, flagged rtx (0x20).
        let ev = evs[(trimmed as usize + 1) % 4];
        let b = builder(true, ev, port, 26);
        let body = Body::Write {
            meth: Meth {
                rqmsn: 0,
                msn: round as u16,
            },
            tseth: Some(Tseth {
                tx_timestamp: 80,
                word: mrc::TsWord::DEFAULT,
            }),
            reth: RethRepr {
                va: va + u64::from(trimmed) * mtu as u64,
                rkey: RKey(0x1234),
                dma_len: 8 * mtu as u32,
            },
            imm: None,
        };
        let pl = data(mtu, trimmed);
        o.mrc(
            &b,
            MrcOpcode::WriteMiddle,
            qp_b,
            base + trimmed,
            0x30,
            &body,
            &pl,
        )?;
        // A probe (no PSN consumed) and the SACK that answers it: all in, cumulative.
        let probe = Body::Probe(Peth {
            probe_id: round as u16,
            spdcid: qp_a as u16,
            dpdcid: qp_b as u16,
            tx_timestamp: 90,
            word: mrc::TsWord::DEFAULT,
            ..Peth::default()
        });
        o.mrc(&b, MrcOpcode::ProbeRequest, qp_b, base + 8, 0, &probe, &[])?;
        let s = sack(0, base + 7, 0, true, ev);
        o.mrc(&back, MrcOpcode::Sack, qp_a, base + 8, 0, &s, &[])?;
        round += 1;
    }
    o.w.flush()
}

/// Writes `n` frames of UET RUD conversations (see the module) to `out`, `mtu` bytes of
/// payload in a full request.
pub fn write_uet_capture<W: Write>(out: W, n: u64, mtu: usize) -> io::Result<()> {
    let mut o = Out::new(out, n)?;
    let port = uet::UET_UDP_PORT;
    let (pdc_a, pdc_b) = (0x0101u16, 0x0202u16);
    let evs = [0x9101u16, 0x9b37, 0xa4c9, 0xb25d];
    let mut round = 0u32;
    while !o.full() {
        let start = 1000u32.wrapping_add(round.wrapping_mul(16));
        let trimmed = 3u32;
        for k in 0..6u32 {
            let ev = evs[(k % 4) as usize];
            let cut = k == trimmed;
            let b = builder(true, ev, port, if cut { DSCP_TRIMMED } else { 26 });
            let syn = round == 0 && k == 0;
            let req = pds::Request {
                prologue: Prologue::new(PdsType::RudReq, 3, if syn { 0x04 } else { 0 }),
                clear_psn_offset: -1,
                psn: start + k,
                spdcid: pdc_a,
                dpdcid: if syn { 0 } else { pdc_b },
            };
            let som = k == 0;
            let eom = k == 5;
            let mut common = ses::Common {
                byte0: uet::SesOpcode::Write.value(),
                flags: 0x20 | u8::from(eom) << 1 | u8::from(som),
                message_id: round as u16,
                ri_generation: 1,
                job_id: 0x42,
                pid_word: 7,
                ri_word: 3,
            };
            if !som {
                common.flags &= !0x04;
            }
            let payload_len = if cut { 0 } else { mtu };
            let header_data = if som {
                0
            } else {
                (u64::from(mtu as u32) << 32) | u64::from(k * mtu as u32)
            };
            let h = uet::Headers {
                entropy: None,
                tss: None,
                pds: Pds::Request(req, None),
                ses: Some(Ses::RequestStd(
                    ses::RequestStd {
                        common,
                        buffer_offset: 0,
                        initiator: 0x10,
                        mem_key: 0xfeed,
                        header_data,
                        request_length: 6 * mtu as u32,
                    },
                    None,
                )),
                len: 0,
            };
            o.uet(&b, &h, &data(payload_len, k))?;
            if cut {
                let back = builder(false, ev, port, 46);
                let nack = uet::Headers {
                    entropy: None,
                    tss: None,
                    pds: Pds::Nack(
                        pds::Nack {
                            prologue: Prologue::new(PdsType::Nack, 0, 0),
                            nack_code: uet::NackCode::Trimmed.value(),
                            vendor_code: 0,
                            nack_psn: start + k,
                            spdcid: pdc_b,
                            dpdcid: pdc_a,
                            payload: start + k,
                        },
                        None,
                    ),
                    ses: None,
                    len: 0,
                };
                o.uet(&back, &nack, &[])?;
            }
        }
        // ACK_CC: cumulative up to the hole, the rest in the bitmap.
        let back = builder(false, evs[1], port, 46);
        let ack = |cack: u32, off: u16, bitmap: u64| uet::Headers {
            entropy: None,
            tss: None,
            pds: Pds::Ack(
                pds::Ack {
                    prologue: Prologue::new(PdsType::AckCc, 0, 0),
                    ack_psn_offset: off,
                    cack_psn: cack,
                    spdcid: pdc_b,
                    dpdcid: pdc_a,
                },
                Some(pds::AckCc {
                    cc_type: 0,
                    cc_flags: 0,
                    mpr: 8,
                    sack_psn_offset: 1,
                    sack_bitmap: bitmap,
                    // NSCC: service time 12, rcvd bytes, ooo 2.
                    cc_state: (12u64 << 48) | ((5 * mtu as u64 / 256) << 16) | 2,
                }),
            ),
            ses: None,
            len: 0,
        };
        // Bit i is PSN cack + 1 + i: the hole (bit 0), then the two requests after it.
        o.uet(&back, &ack(start + trimmed - 1, 3, 0b110), &[])?;
        // The retransmission, RETX, on another entropy value.
        let ev = evs[(trimmed as usize + 2) % 4];
        let b = builder(true, ev, port, 26);
        let req = pds::Request {
            prologue: Prologue::new(PdsType::RudReq, 3, 0x10),
            clear_psn_offset: -1,
            psn: start + trimmed,
            spdcid: pdc_a,
            dpdcid: pdc_b,
        };
        let h = uet::Headers {
            entropy: None,
            tss: None,
            pds: Pds::Request(req, None),
            ses: Some(Ses::RequestStd(
                ses::RequestStd {
                    common: ses::Common {
                        byte0: uet::SesOpcode::Write.value(),
                        flags: 0x20,
                        message_id: round as u16,
                        ri_generation: 1,
                        job_id: 0x42,
                        pid_word: 7,
                        ri_word: 3,
                    },
                    buffer_offset: 0,
                    initiator: 0x10,
                    mem_key: 0xfeed,
                    header_data: (u64::from(mtu as u32) << 32) | u64::from(trimmed * mtu as u32),
                    request_length: 6 * mtu as u32,
                },
                None,
            )),
            len: 0,
        };
        o.uet(&b, &h, &data(mtu, trimmed))?;
        // A CONTROL asking for an ACK, and the final cumulative ACK.
        let ctl = uet::Headers {
            entropy: None,
            tss: None,
            pds: Pds::Control(pds::Control {
                prologue: Prologue::new(PdsType::Control, uet::ControlType::AckReq.value(), 0),
                probe_opaque: 0,
                psn: start + 6,
                spdcid: pdc_a,
                dpdcid: pdc_b,
                payload: u32::from(round as u16),
            }),
            ses: None,
            len: 0,
        };
        o.uet(&b, &ctl, &[])?;
        o.uet(&back, &ack(start + 5, 0, 0), &[])?;
        round += 1;
    }
    o.w.flush()
}

/// Every MRC and UET packet of the two synthetic conversations and of XDP2's UET captures
/// (`proto/tests/data/uet`), classified: the packet kinds the columns' tests walk.
#[cfg(test)]
pub(crate) fn every_packet_kind() -> Vec<crate::fabric::Packet> {
    use crate::fabric::{classify, FabricOptions};
    use crate::reader::CaptureReader;
    let mut captures = Vec::new();
    for mrc in [true, false] {
        let mut b = Vec::new();
        let made = if mrc {
            write_mrc_capture(&mut b, 64, 4096)
        } else {
            write_uet_capture(&mut b, 64, 4096)
        };
        made.expect("a synthetic capture");
        captures.push(b);
    }
    let xdp2 = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/tests/data/uet");
    for f in ["uet_pds.pcap", "uet_ses.pcap"] {
        captures.push(std::fs::read(xdp2.join(f)).expect("XDP2's UET captures"));
    }
    let opts = FabricOptions::default();
    let mut out = Vec::new();
    for c in captures {
        let mut r = CaptureReader::new(&c[..], "test").expect("a capture");
        while let Some(rec) = r.next_record().expect("a record") {
            out.extend(classify(rec.link_type, rec.data, &opts));
        }
    }
    out
}
