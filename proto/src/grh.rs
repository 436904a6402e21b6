//! Global Route Header (IBTA Vol 1 §8.3; 40 bytes, laid out like an IPv6 header). RoCE v1
//! puts it directly after the Ethernet header (EtherType 0x8915); native IB after the LRH.
//!
//! ```text
//! | IPVer:4 | TClass:8 | FlowLabel:20 | PayLen:16 | NxtHdr:8 | HopLmt:8 | SGID:128 | DGID:128 |
//! ```
use crate::wire::{be16, be32, fixed_view, put16};
use crate::{Error, Layer, Result};

mod field {
    use crate::Field;
    pub(super) const VER_TC_FL: Field = 0..4;
    pub(super) const PAY_LEN: Field = 4..6;
    pub(super) const NXT_HDR: usize = 6;
    pub(super) const HOP_LMT: usize = 7;
    pub(super) const SGID: Field = 8..24;
    pub(super) const DGID: Field = 24..40;
}

/// Wire length of the GRH.
pub const HEADER_LEN: usize = field::DGID.end;
/// The GRH NxtHdr value that announces an IBA transport header (BTH).
pub const NXT_HDR_IBA: u8 = 0x1b;

/// A view of a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::Grh, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn word0(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::VER_TC_FL])
    }
    /// IP version (6).
    pub fn ip_ver(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xf_ffff
    }
    /// Payload length: bytes after the GRH up to and including the ICRC.
    pub fn pay_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::PAY_LEN])
    }
    /// Next header (0x1B for an IBA transport header).
    pub fn nxt_hdr(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    /// Hop limit.
    pub fn hop_lmt(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LMT]
    }
    /// Source GID.
    pub fn sgid(&self) -> [u8; 16] {
        let mut g = [0; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::SGID]);
        g
    }
    /// Destination GID.
    pub fn dgid(&self) -> [u8; 16] {
        let mut g = [0; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::DGID]);
        g
    }
}

/// An owned GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// IP version (6 for every conformant GRH).
    pub ip_ver: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length.
    pub pay_len: u16,
    /// Next header.
    pub nxt_hdr: u8,
    /// Hop limit.
    pub hop_lmt: u8,
    /// Source GID.
    pub sgid: [u8; 16],
    /// Destination GID.
    pub dgid: [u8; 16],
}

impl Repr {
    /// Reads a GRH. `Malformed` unless the IP version is 6.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        if p.ip_ver() != 6 {
            return Err(Error::Malformed {
                layer: Layer::Grh,
                reason: "IP version is not 6",
            });
        }
        Ok(Self {
            ip_ver: p.ip_ver(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            pay_len: p.pay_len(),
            nxt_hdr: p.nxt_hdr(),
            hop_lmt: p.hop_lmt(),
            sgid: p.sgid(),
            dgid: p.dgid(),
        })
    }
    /// The wire length (always [`HEADER_LEN`]).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.buffer.as_mut();
        let w = (u32::from(self.ip_ver & 0xf) << 28)
            | (u32::from(self.traffic_class) << 20)
            | (self.flow_label & 0xf_ffff);
        b[field::VER_TC_FL].copy_from_slice(&w.to_be_bytes());
        put16(&mut b[field::PAY_LEN], self.pay_len);
        b[field::NXT_HDR] = self.nxt_hdr;
        b[field::HOP_LMT] = self.hop_lmt;
        b[field::SGID].copy_from_slice(&self.sgid);
        b[field::DGID].copy_from_slice(&self.dgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // GRH of the scapy RoCE v1 WRITE Only vector.
    static BYTES: [u8; 40] = [
        0x60, 0x20, 0x00, 0x00, // ver 6, tclass 2, flow 0
        0x00, 0x28, 0x1b, 0x40, // paylen 40, nxthdr 0x1b, hoplimit 64
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x0f, 0x00, 0x00,
        0x02, // SGID ::ffff:15.0.0.2
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x0f, 0x00, 0x00, 0x02, // DGID
    ];

    const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x0f, 0, 0, 2];

    #[test]
    fn parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                ip_ver: 6,
                traffic_class: 2,
                flow_label: 0,
                pay_len: 40,
                nxt_hdr: NXT_HDR_IBA,
                hop_lmt: 64,
                sgid: GID,
                dgid: GID,
            }
        );
        assert_eq!(r.buffer_len(), HEADER_LEN);
        let mut out = [0u8; 40];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
    }

    #[test]
    fn every_field_round_trips_at_its_extremes() {
        let r = Repr {
            ip_ver: 6,
            traffic_class: 0xa5,
            flow_label: 0xf_edcb,
            pay_len: 0xfffe,
            nxt_hdr: 0x11,
            hop_lmt: 1,
            sgid: [0x11; 16],
            dgid: [0xee; 16],
        };
        let mut out = [0u8; 40];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        let p = Packet::new_checked(&out[..]).unwrap();
        assert_eq!(
            (p.ip_ver(), p.traffic_class(), p.flow_label(), p.pay_len()),
            (6, 0xa5, 0xf_edcb, 0xfffe)
        );
        assert_eq!((p.nxt_hdr(), p.hop_lmt()), (0x11, 1));
        assert_eq!((p.sgid(), p.dgid()), ([0x11; 16], [0xee; 16]));
        assert_eq!(Repr::parse(&p), Ok(r));
    }

    #[test]
    fn exact_errors() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]),
                Err(Error::Truncated {
                    layer: Layer::Grh,
                    needed: HEADER_LEN,
                    got: n
                }),
                "{n} bytes"
            );
        }
        let mut bad = BYTES;
        bad[0] = 0x40;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&bad[..])),
            Err(Error::Malformed {
                layer: Layer::Grh,
                reason: "IP version is not 6"
            })
        );
    }
}
