//! Local Route Header (IBTA Vol 1 §7.7; 8 bytes): the link header of native InfiniBand. Only
//! decoded for captures of native IB (ERF); RoCE never carries it.
//!
//! ```text
//! | VL:4 | LVer:4 | SL:4 | Rsv:2 | LNH:2 | DLID:16 | Rsv:5 | PktLen:11 | SLID:16 |
//! ```
use crate::wire::{be16, fixed_view};
use crate::{Layer, Result};

mod field {
    use crate::Field;
    pub(super) const VL_LVER: usize = 0;
    pub(super) const SL_LNH: usize = 1;
    pub(super) const DLID: Field = 2..4;
    pub(super) const PKT_LEN: Field = 4..6;
    pub(super) const SLID: Field = 6..8;
}

/// Wire length of the LRH.
pub const HEADER_LEN: usize = field::SLID.end;
/// Length of the variant CRC that ends a native IB packet.
pub const VCRC_LEN: usize = 2;

/// Link Next Header values.
pub mod lnh {
    /// Raw packet (no IBA transport).
    pub const RAW: u8 = 0;
    /// IPv6 (raw IP over IB).
    pub const IPV6: u8 = 1;
    /// IBA local: a BTH follows the LRH.
    pub const IBA_LOCAL: u8 = 2;
    /// IBA global: a GRH, then a BTH.
    pub const IBA_GLOBAL: u8 = 3;
}

/// A view of an LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::Lrh, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Virtual lane.
    pub fn vl(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] >> 4
    }
    /// Link version.
    pub fn lver(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] & 0xf
    }
    /// Service level.
    pub fn sl(&self) -> u8 {
        self.buffer.as_ref()[field::SL_LNH] >> 4
    }
    /// Link next header ([`lnh`]).
    pub fn lnh(&self) -> u8 {
        self.buffer.as_ref()[field::SL_LNH] & 3
    }
    /// Destination LID.
    pub fn dlid(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::DLID])
    }
    /// Packet length in 4-byte words, LRH through ICRC (the VCRC excluded).
    pub fn pkt_len(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::PKT_LEN]) & 0x7ff
    }
    /// Source LID.
    pub fn slid(&self) -> u16 {
        be16(&self.buffer.as_ref()[field::SLID])
    }
}

/// An owned LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Virtual lane.
    pub vl: u8,
    /// Link version.
    pub lver: u8,
    /// Service level.
    pub sl: u8,
    /// Link next header.
    pub lnh: u8,
    /// Destination LID.
    pub dlid: u16,
    /// Packet length in words.
    pub pkt_len: u16,
    /// Source LID.
    pub slid: u16,
}

impl Repr {
    /// Reads an LRH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            vl: p.vl(),
            lver: p.lver(),
            sl: p.sl(),
            lnh: p.lnh(),
            dlid: p.dlid(),
            pkt_len: p.pkt_len(),
            slid: p.slid(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    // VL 5, LVer 1, SL 9, LNH IBA global, DLID 0x1234, PktLen 0x7ab (reserved bits set around
    // it), SLID 0xbeef.
    static BYTES: [u8; 8] = [0x51, 0x93, 0x12, 0x34, 0xff, 0xab, 0xbe, 0xef];

    #[test]
    fn every_field() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.vl(), p.lver(), p.sl(), p.lnh()),
            (5, 1, 9, lnh::IBA_GLOBAL)
        );
        assert_eq!((p.dlid(), p.pkt_len(), p.slid()), (0x1234, 0x7ab, 0xbeef));
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr {
                vl: 5,
                lver: 1,
                sl: 9,
                lnh: lnh::IBA_GLOBAL,
                dlid: 0x1234,
                pkt_len: 0x7ab,
                slid: 0xbeef,
            }
        );
        let local = [0x00, 0x02, 0x00, 0x05, 0x00, 0x0b, 0x00, 0x01];
        let r = Repr::parse(&Packet::new_checked(&local[..]).unwrap()).unwrap();
        assert_eq!(
            (r.vl, r.lver, r.sl, r.lnh, r.dlid, r.pkt_len, r.slid),
            (0, 0, 0, lnh::IBA_LOCAL, 5, 11, 1)
        );
    }

    #[test]
    fn every_truncation_is_the_exact_error() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]),
                Err(Error::Truncated {
                    layer: Layer::Lrh,
                    needed: HEADER_LEN,
                    got: n
                }),
                "{n} bytes"
            );
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&BYTES[..n])),
                Err(Error::Truncated {
                    layer: Layer::Lrh,
                    needed: HEADER_LEN,
                    got: n
                })
            );
        }
    }
}
