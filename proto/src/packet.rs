//! A whole InfiniBand transport packet: BTH, extended headers (chosen by the opcode), payload,
//! pad (BTH PadCnt) and ICRC. This is the UDP payload of a RoCEv2 datagram, and what follows
//! the GRH in RoCE v1.
//!
//! [`Packet`] is the zero-copy view; [`PacketRepr`] the owned header values plus a borrowed
//! payload. Structural checks (`Packet::new_checked`) are fatal: a packet that fails them has
//! no well-defined payload or ICRC. Conformance issues that do not stop decoding (TVer ≠ 0,
//! a length that is not a multiple of four, non-zero pad bytes) come from
//! [`Packet::conformance`].
use crate::aeth::{self, Packet as AethPacket};
use crate::atomic::{self, AckPacket as AtomicAckPacket, Packet as AtomicPacket};
use crate::bth::{self, Packet as BthPacket};
use crate::deth::{self, Packet as DethPacket};
use crate::error::need;
use crate::icrc::{self, Icrc};
use crate::opcode::ExtHeaders;
use crate::reth::{self, Packet as RethPacket};
use crate::small::{FethRepr, IethRepr, ImmDt, RdethRepr, XrcethRepr};
use crate::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, Error, Layer, Opcode, Result,
    RethRepr, ICRC_LEN,
};

/// Smallest possible transport packet: a BTH and an ICRC.
pub const MIN_LEN: usize = bth::HEADER_LEN + ICRC_LEN;

fn layer_of(h: ExtHeaders) -> Layer {
    match h {
        ExtHeaders::RDETH => Layer::Rdeth,
        ExtHeaders::DETH => Layer::Deth,
        ExtHeaders::XRCETH => Layer::Xrceth,
        ExtHeaders::FETH => Layer::Feth,
        ExtHeaders::RETH => Layer::Reth,
        ExtHeaders::ATOMIC_ETH => Layer::AtomicEth,
        ExtHeaders::AETH => Layer::Aeth,
        ExtHeaders::ATOMIC_ACK_ETH => Layer::AtomicAckEth,
        ExtHeaders::IMMDT => Layer::ImmDt,
        _ => Layer::Ieth,
    }
}

/// A view of a transport packet. After `check_len` is `Ok`, no accessor panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps bytes without any check.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps bytes after the structural checks of [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Structural checks: a BTH; every extended header the opcode calls for; four bytes
    /// of ICRC; a pad count no larger than the bytes between headers and ICRC; and, for an
    /// opcode without payload, nothing but the ICRC after the headers.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::Bth, b, bth::HEADER_LEN)?;
        let opcode = Opcode(b[0]);
        let header_len = opcode.header_len();
        if b.len() < header_len {
            let set = opcode.ext_headers();
            let mut end = bth::HEADER_LEN;
            for (h, len) in ExtHeaders::ORDER {
                if set.contains(h) {
                    end += len;
                    if b.len() < end {
                        return Err(Error::Truncated {
                            layer: layer_of(h),
                            needed: end,
                            got: b.len(),
                        });
                    }
                }
            }
        }
        need(Layer::Icrc, b, header_len + ICRC_LEN)?;
        let body = b.len() - header_len - ICRC_LEN;
        let pad = usize::from((b[1] >> 4) & 3);
        if !opcode.has_payload() && body != 0 {
            return Err(Error::Malformed {
                layer: Layer::Icrc,
                reason: "bytes after the headers of an opcode without payload",
            });
        }
        if pad > body {
            return Err(Error::Malformed {
                layer: Layer::Pad,
                reason: "pad count larger than the payload",
            });
        }
        Ok(())
    }

    /// Non-fatal conformance checks, worst first: TVer must be 0; the packet length must be a
    /// multiple of four; pad bytes must be zero.
    pub fn conformance(&self) -> Result<()> {
        if self.bth().tver() != 0 {
            return Err(Error::Malformed {
                layer: Layer::Bth,
                reason: "TVer is not 0",
            });
        }
        if self.buffer.as_ref().len() % 4 != 0 {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                reason: "length is not a multiple of 4",
            });
        }
        if self.pad().iter().any(|&b| b != 0) {
            return Err(Error::Malformed {
                layer: Layer::Pad,
                reason: "pad bytes are not zero",
            });
        }
        Ok(())
    }

    /// The whole packet (BTH through ICRC).
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The BTH.
    pub fn bth(&self) -> BthPacket<&[u8]> {
        BthPacket::new_unchecked(&self.buffer.as_ref()[..bth::HEADER_LEN])
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[0])
    }

    /// Length of the BTH and the extended headers.
    pub fn header_len(&self) -> usize {
        self.opcode().header_len()
    }

    fn ext(&self, which: ExtHeaders, len: usize) -> Option<&[u8]> {
        let at = self.opcode().ext_offset(which)?;
        Some(&self.buffer.as_ref()[at..at + len])
    }

    /// The RDETH, if the opcode carries one.
    pub fn rdeth(&self) -> Option<RdethRepr> {
        self.ext(ExtHeaders::RDETH, 4)
            .and_then(|b| RdethRepr::parse(b).ok())
    }
    /// The DETH, if the opcode carries one.
    pub fn deth(&self) -> Option<DethPacket<&[u8]>> {
        self.ext(ExtHeaders::DETH, deth::HEADER_LEN)
            .map(DethPacket::new_unchecked)
    }
    /// The XRCETH, if the opcode carries one.
    pub fn xrceth(&self) -> Option<XrcethRepr> {
        self.ext(ExtHeaders::XRCETH, 4)
            .and_then(|b| XrcethRepr::parse(b).ok())
    }
    /// The FETH, if the opcode carries one.
    pub fn feth(&self) -> Option<FethRepr> {
        self.ext(ExtHeaders::FETH, 4)
            .and_then(|b| FethRepr::parse(b).ok())
    }
    /// The RETH, if the opcode carries one.
    pub fn reth(&self) -> Option<RethPacket<&[u8]>> {
        self.ext(ExtHeaders::RETH, reth::HEADER_LEN)
            .map(RethPacket::new_unchecked)
    }
    /// The AtomicETH, if the opcode carries one.
    pub fn atomic_eth(&self) -> Option<AtomicPacket<&[u8]>> {
        self.ext(ExtHeaders::ATOMIC_ETH, atomic::HEADER_LEN)
            .map(AtomicPacket::new_unchecked)
    }
    /// The AETH, if the opcode carries one.
    pub fn aeth(&self) -> Option<AethPacket<&[u8]>> {
        self.ext(ExtHeaders::AETH, aeth::HEADER_LEN)
            .map(AethPacket::new_unchecked)
    }
    /// The AtomicAckETH, if the opcode carries one.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckPacket<&[u8]>> {
        self.ext(ExtHeaders::ATOMIC_ACK_ETH, atomic::ACK_HEADER_LEN)
            .map(AtomicAckPacket::new_unchecked)
    }
    /// The immediate data, if the opcode carries it.
    pub fn immdt(&self) -> Option<ImmDt> {
        self.ext(ExtHeaders::IMMDT, 4)
            .and_then(|b| ImmDt::parse(b).ok())
    }
    /// The IETH, if the opcode carries one.
    pub fn ieth(&self) -> Option<IethRepr> {
        self.ext(ExtHeaders::IETH, 4)
            .and_then(|b| IethRepr::parse(b).ok())
    }

    fn payload_range(&self) -> core::ops::Range<usize> {
        let len = self.buffer.as_ref().len();
        let start = self.header_len();
        let end = len - ICRC_LEN - usize::from(self.bth().pad_count());
        start..end
    }

    /// The payload (without pad).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    /// The pad bytes (`pad_count` of them).
    pub fn pad(&self) -> &[u8] {
        let len = self.buffer.as_ref().len();
        &self.buffer.as_ref()[self.payload_range().end..len - ICRC_LEN]
    }

    /// The four ICRC bytes in wire order.
    pub fn icrc_bytes(&self) -> [u8; 4] {
        let b = self.buffer.as_ref();
        let n = b.len();
        [b[n - 4], b[n - 3], b[n - 2], b[n - 1]]
    }

    /// The stored ICRC as a CRC-32 value (wire bytes read little-endian).
    pub fn icrc(&self) -> u32 {
        icrc::stored(self.buffer.as_ref())
    }

    /// Checks the stored ICRC against one computed from `seed` (the pseudo-header state).
    pub fn verify_icrc(&self, seed: &Icrc) -> bool {
        seed.clone().verify(self.buffer.as_ref())
    }
}

impl<'a> Packet<&'a [u8]> {
    /// The payload, borrowed for the lifetime of the underlying bytes.
    pub fn payload_ref(&self) -> &'a [u8] {
        let r = self.payload_range();
        &self.buffer[r]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let r = self.payload_range();
        &mut self.buffer.as_mut()[r]
    }

    /// Computes the ICRC from `seed` and stores it.
    pub fn fill_icrc(&mut self, seed: &Icrc) {
        seed.clone().fill(self.buffer.as_mut());
    }
}

/// The headers of a transport packet as owned values, plus the borrowed payload.
///
/// The extended headers present must be exactly those `bth.opcode` calls for
/// ([`Opcode::ext_headers`]); [`PacketRepr::check`] enforces it and `emit` refuses otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacketRepr<'a> {
    /// Base Transport Header. `pad_count` is emitted as given (see [`PacketRepr::pad_for`]).
    pub bth: BthRepr,
    /// RDETH (RD).
    pub rdeth: Option<RdethRepr>,
    /// DETH (UD, RD requests).
    pub deth: Option<DethRepr>,
    /// XRCETH (XRC requests).
    pub xrceth: Option<XrcethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (WRITE First/Only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (compare-and-swap, fetch-and-add).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (READ responses First/Last/Only, ACK, atomic ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (atomic ACK).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<ImmDt>,
    /// IETH (SEND with invalidate).
    pub ieth: Option<IethRepr>,
    /// Payload (without pad).
    pub payload: &'a [u8],
}

impl<'a> PacketRepr<'a> {
    /// A packet of `bth` and `payload` only, no extended header: what a builder of a
    /// transport the opcode table does not know (MRC's manufacturer-range opcodes) hands the
    /// frame builder, its own headers at the start of `payload`.
    pub const fn bare(bth: BthRepr, payload: &'a [u8]) -> Self {
        Self {
            bth,
            rdeth: None,
            deth: None,
            xrceth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            payload,
        }
    }

    /// The pad count that makes `payload_len` a multiple of four.
    pub const fn pad_for(payload_len: usize) -> u8 {
        (payload_len.wrapping_neg() & 3) as u8
    }

    /// Reads every header of a checked packet.
    pub fn parse(p: &Packet<&'a [u8]>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            bth: BthRepr::parse(&p.bth())?,
            rdeth: p.rdeth(),
            deth: p.deth().map(|h| DethRepr::parse(&h)).transpose()?,
            xrceth: p.xrceth(),
            feth: p.feth(),
            reth: p.reth().map(|h| RethRepr::parse(&h)).transpose()?,
            atomic_eth: p
                .atomic_eth()
                .map(|h| AtomicEthRepr::parse(&h))
                .transpose()?,
            aeth: p.aeth().map(|h| AethRepr::parse(&h)).transpose()?,
            atomic_ack_eth: p
                .atomic_ack_eth()
                .map(|h| AtomicAckEthRepr::parse(&h))
                .transpose()?,
            immdt: p.immdt(),
            ieth: p.ieth(),
            payload: p.payload_ref(),
        })
    }

    /// Parses transport bytes (BTH through ICRC) in one step.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Self> {
        Self::parse(&Packet::new_checked(bytes)?)
    }

    /// The set of extended headers present.
    pub fn present(&self) -> ExtHeaders {
        let mut s = ExtHeaders::NONE;
        let flags = [
            (self.rdeth.is_some(), ExtHeaders::RDETH),
            (self.deth.is_some(), ExtHeaders::DETH),
            (self.xrceth.is_some(), ExtHeaders::XRCETH),
            (self.feth.is_some(), ExtHeaders::FETH),
            (self.reth.is_some(), ExtHeaders::RETH),
            (self.atomic_eth.is_some(), ExtHeaders::ATOMIC_ETH),
            (self.aeth.is_some(), ExtHeaders::AETH),
            (self.atomic_ack_eth.is_some(), ExtHeaders::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), ExtHeaders::IMMDT),
            (self.ieth.is_some(), ExtHeaders::IETH),
        ];
        for (on, h) in flags {
            if on {
                s = s.union(h);
            }
        }
        s
    }

    /// Checks that the packet can be emitted: BTH fields fit their bits, the headers present
    /// are those the opcode calls for, and an opcode without payload has none.
    pub fn check(&self) -> Result<()> {
        self.bth.check()?;
        let want = self.bth.opcode.ext_headers();
        let have = self.present();
        if want != have {
            for (h, _) in ExtHeaders::ORDER {
                if want.contains(h) != have.contains(h) {
                    return Err(Error::Malformed {
                        layer: layer_of(h),
                        reason: if want.contains(h) {
                            "header the opcode calls for is missing"
                        } else {
                            "header the opcode does not carry is present"
                        },
                    });
                }
            }
        }
        if !self.bth.opcode.has_payload() && (!self.payload.is_empty() || self.bth.pad_count != 0) {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                reason: "opcode carries no payload",
            });
        }
        Ok(())
    }

    /// Length of the emitted packet: headers, payload, pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        self.bth.opcode.header_len()
            + self.payload.len()
            + usize::from(self.bth.pad_count & 3)
            + ICRC_LEN
    }

    /// Writes headers, payload and zero pad into `buf[..buffer_len()]` and zeroes the ICRC
    /// field. Returns the length written. The ICRC is a separate step ([`Packet::fill_icrc`]
    /// or [`PacketRepr::emit_with_icrc`]).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.check()?;
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::Truncated {
                layer: Layer::Buffer,
                needed: len,
                got: buf.len(),
            });
        }
        let buf = &mut buf[..len];
        self.bth.emit(&mut BthPacket::new_unchecked(&mut buf[..]));
        let mut at = bth::HEADER_LEN;
        if let Some(h) = self.rdeth {
            h.emit(&mut buf[at..]);
            at += 4;
        }
        if let Some(h) = self.deth {
            h.emit(&mut DethPacket::new_unchecked(&mut buf[at..]));
            at += deth::HEADER_LEN;
        }
        if let Some(h) = self.xrceth {
            h.emit(&mut buf[at..]);
            at += 4;
        }
        if let Some(h) = self.feth {
            h.emit(&mut buf[at..]);
            at += 4;
        }
        if let Some(h) = self.reth {
            h.emit(&mut RethPacket::new_unchecked(&mut buf[at..]));
            at += reth::HEADER_LEN;
        }
        if let Some(h) = self.atomic_eth {
            h.emit(&mut AtomicPacket::new_unchecked(&mut buf[at..]));
            at += atomic::HEADER_LEN;
        }
        if let Some(h) = self.aeth {
            h.emit(&mut AethPacket::new_unchecked(&mut buf[at..]));
            at += aeth::HEADER_LEN;
        }
        if let Some(h) = self.atomic_ack_eth {
            h.emit(&mut AtomicAckPacket::new_unchecked(&mut buf[at..]));
            at += atomic::ACK_HEADER_LEN;
        }
        if let Some(h) = self.immdt {
            h.emit(&mut buf[at..]);
            at += 4;
        }
        if let Some(h) = self.ieth {
            h.emit(&mut buf[at..]);
            at += 4;
        }
        buf[at..at + self.payload.len()].copy_from_slice(self.payload);
        at += self.payload.len();
        buf[at..].fill(0);
        Ok(len)
    }

    /// [`emit`](Self::emit), then compute the ICRC from `seed` and store it.
    pub fn emit_with_icrc(&self, buf: &mut [u8], seed: &Icrc) -> Result<usize> {
        let len = self.emit(buf)?;
        seed.clone().fill(&mut buf[..len]);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Msn, PKey, Psn, Qpn, RKey, Syndrome};

    fn write_only(payload: &[u8]) -> PacketRepr<'_> {
        PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_RDMA_WRITE_ONLY,
                pad_count: PacketRepr::pad_for(payload.len()),
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
            payload,
            ..PacketRepr::default()
        }
    }

    #[test]
    fn emit_then_parse() {
        let repr = write_only(b"hello");
        let mut buf = [0xaau8; 64];
        let n = repr.emit(&mut buf).unwrap();
        assert_eq!(n, 12 + 16 + 5 + 3 + 4);
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.pad(), [0, 0, 0]);
        assert_eq!(p.reth().unwrap().dma_len(), 5);
        assert!(p.aeth().is_none());
        assert_eq!(PacketRepr::parse(&p).unwrap(), repr);
        p.conformance().unwrap();
    }

    #[test]
    fn emit_refuses_headers_that_do_not_match_the_opcode() {
        let mut r = write_only(b"x");
        r.reth = None;
        assert_eq!(
            r.emit(&mut [0; 64]),
            Err(Error::Malformed {
                layer: Layer::Reth,
                reason: "header the opcode calls for is missing"
            })
        );
        let mut r = write_only(b"x");
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: Msn(0),
        });
        assert_eq!(r.emit(&mut [0; 64]).unwrap_err().layer(), Some(Layer::Aeth));
        assert_eq!(
            write_only(b"x").emit(&mut [0; 10]),
            Err(Error::Truncated {
                layer: Layer::Buffer,
                needed: 36,
                got: 10
            })
        );
    }

    #[test]
    fn structural_errors_name_the_layer() {
        let repr = write_only(b"hello");
        let mut buf = [0u8; 64];
        let n = repr.emit(&mut buf).unwrap();
        let cut = |k: usize| Packet::new_checked(&buf[..k]).unwrap_err();
        assert_eq!(
            cut(11),
            Error::Truncated {
                layer: Layer::Bth,
                needed: 12,
                got: 11
            }
        );
        assert_eq!(
            cut(20),
            Error::Truncated {
                layer: Layer::Reth,
                needed: 28,
                got: 20
            }
        );
        assert_eq!(
            cut(30),
            Error::Truncated {
                layer: Layer::Icrc,
                needed: 32,
                got: 30
            }
        );
        // 33 bytes: 1 byte between headers and ICRC, but PadCnt says 3.
        assert_eq!(
            cut(33),
            Error::Malformed {
                layer: Layer::Pad,
                reason: "pad count larger than the payload"
            }
        );
        for k in 0..n {
            // Every prefix fails, except those where the cut lands so the pad still fits.
            let r = Packet::new_checked(&buf[..k]);
            if k < 35 {
                assert!(r.is_err(), "prefix {k}");
            }
        }
    }

    #[test]
    fn opcode_without_payload_rejects_trailing_bytes() {
        let ack = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_ACKNOWLEDGE,
                ..BthRepr::default()
            },
            aeth: Some(AethRepr {
                syndrome: Syndrome::ACK_UNLIMITED,
                msn: Msn(1),
            }),
            ..PacketRepr::default()
        };
        let mut buf = [0u8; 24];
        let n = ack.emit(&mut buf).unwrap();
        assert_eq!(n, 20);
        assert!(Packet::new_checked(&buf[..20]).is_ok());
        assert_eq!(
            Packet::new_checked(&buf[..24]).unwrap_err().layer(),
            Some(Layer::Icrc)
        );
    }

    #[test]
    fn unknown_opcode_round_trips_as_opaque_payload() {
        let body = [0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4];
        let mut bytes = [0u8; 24];
        bytes[0] = 0xe5;
        bytes[12..20].copy_from_slice(&body);
        let repr = PacketRepr::parse_bytes(&bytes).unwrap();
        assert_eq!(repr.payload, body);
        let mut out = [0u8; 24];
        repr.emit(&mut out).unwrap();
        assert_eq!(out, bytes);
    }

    #[test]
    fn conformance_reports_tver_and_alignment() {
        let mut bytes = [0u8; 20];
        bytes[0] = Opcode::RC_SEND_ONLY.0;
        bytes[1] = 0x01; // TVer 1
        let p = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(
            p.conformance().unwrap_err(),
            Error::Malformed {
                layer: Layer::Bth,
                reason: "TVer is not 0"
            }
        );
        bytes[1] = 0;
        let p = Packet::new_checked(&bytes[..19]).unwrap();
        assert_eq!(p.conformance().unwrap_err().layer(), Some(Layer::Payload));
    }
}
