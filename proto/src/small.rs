//! The 4-byte extended headers: ImmDt, IETH, RDETH, XRCETH and FETH (IBTA Vol 1 §9.3).
//!
//! They are one or two fields wide, so each is an owned `Copy` value with `parse` from and
//! `emit` into a byte slice, without a separate view type.
use crate::error::need;
use crate::wire::{be32, put32};
use crate::{Layer, Qpn, RKey, Result};

/// Wire length of each header in this module.
pub const HEADER_LEN: usize = 4;

macro_rules! four_byte_header {
    ($name:ident, $layer:expr) => {
        impl $name {
            /// Wire length.
            pub const LEN: usize = HEADER_LEN;

            /// Reads the header from the first four bytes of `buf`.
            pub fn parse(buf: &[u8]) -> Result<Self> {
                need($layer, buf, HEADER_LEN)?;
                Ok(Self::from_word(be32(buf)))
            }

            /// Writes the header into the first four bytes of `buf`.
            ///
            /// # Panics
            /// If `buf` is shorter than four bytes.
            pub fn emit(&self, buf: &mut [u8]) {
                put32(buf, self.to_word());
            }

            /// The wire length (always 4).
            pub const fn buffer_len(&self) -> usize {
                HEADER_LEN
            }
        }
    };
}

/// Immediate data: 32 opaque bits, carried big-endian as the application gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDt(pub u32);

impl ImmDt {
    const fn from_word(w: u32) -> Self {
        Self(w)
    }
    const fn to_word(self) -> u32 {
        self.0
    }
}
four_byte_header!(ImmDt, Layer::ImmDt);

/// Invalidate ETH: the R_Key the responder invalidates (SEND with invalidate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IethRepr {
    /// R_Key to invalidate.
    pub rkey: RKey,
}

impl IethRepr {
    const fn from_word(w: u32) -> Self {
        Self { rkey: RKey(w) }
    }
    const fn to_word(self) -> u32 {
        self.rkey.0
    }
}
four_byte_header!(IethRepr, Layer::Ieth);

/// Reliable Datagram ETH: reserved u8, EE-context u24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdethRepr {
    /// Reserved byte (send 0).
    pub resv: u8,
    /// End-to-end context.
    pub ee_context: u32,
}

impl RdethRepr {
    const fn from_word(w: u32) -> Self {
        Self {
            resv: (w >> 24) as u8,
            ee_context: w & 0xff_ffff,
        }
    }
    const fn to_word(self) -> u32 {
        ((self.resv as u32) << 24) | (self.ee_context & 0xff_ffff)
    }
}
four_byte_header!(RdethRepr, Layer::Rdeth);

/// XRC ETH: reserved u8, XRC shared receive queue number u24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct XrcethRepr {
    /// Reserved byte (send 0).
    pub resv: u8,
    /// XRC SRQ number.
    pub xrc_srq: Qpn,
}

impl XrcethRepr {
    const fn from_word(w: u32) -> Self {
        Self {
            resv: (w >> 24) as u8,
            xrc_srq: Qpn(w & 0xff_ffff),
        }
    }
    const fn to_word(self) -> u32 {
        ((self.resv as u32) << 24) | (self.xrc_srq.0 & 0xff_ffff)
    }
}
four_byte_header!(XrcethRepr, Layer::Xrceth);

/// Flush ETH (memory placement extension): bits 5..4 selectivity level, bits 3..0 placement
/// type; the other 26 bits are reserved and kept as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// The whole 32-bit word.
    pub word: u32,
}

impl FethRepr {
    const fn from_word(w: u32) -> Self {
        Self { word: w }
    }
    const fn to_word(self) -> u32 {
        self.word
    }
    /// Selectivity level (0: the RETH's range of the memory region, 1: the whole memory
    /// region).
    pub const fn selectivity(self) -> u8 {
        ((self.word >> 4) & 3) as u8
    }
    /// Placement type (bit 0: global visibility, bit 1: persistence).
    pub const fn placement_type(self) -> u8 {
        (self.word & 0xf) as u8
    }
}
four_byte_header!(FethRepr, Layer::Feth);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn round_trips() {
        let bytes = [0x12, 0x34, 0x56, 0x78];
        let mut out = [0u8; 4];
        let imm = ImmDt::parse(&bytes).unwrap();
        assert_eq!(imm, ImmDt(0x1234_5678));
        imm.emit(&mut out);
        assert_eq!(out, bytes);
        let ieth = IethRepr::parse(&bytes).unwrap();
        assert_eq!(
            ieth,
            IethRepr {
                rkey: RKey(0x1234_5678)
            }
        );
        ieth.emit(&mut out);
        assert_eq!(out, bytes);
        let rd = RdethRepr::parse(&bytes).unwrap();
        assert_eq!(
            rd,
            RdethRepr {
                resv: 0x12,
                ee_context: 0x34_5678
            }
        );
        rd.emit(&mut out);
        assert_eq!(out, bytes);
        let x = XrcethRepr::parse(&bytes).unwrap();
        assert_eq!(
            x,
            XrcethRepr {
                resv: 0x12,
                xrc_srq: Qpn(0x34_5678)
            }
        );
        x.emit(&mut out);
        assert_eq!(out, bytes);
        // FETH: selectivity 1, placement type 3; the reserved bits are kept.
        let word = [0xde, 0xad, 0xbe, 0x13];
        let f = FethRepr::parse(&word).unwrap();
        assert_eq!(f, FethRepr { word: 0xdead_be13 });
        assert_eq!((f.selectivity(), f.placement_type()), (1, 3));
        f.emit(&mut out);
        assert_eq!(out, word);
        for h in [
            imm.buffer_len(),
            ieth.buffer_len(),
            rd.buffer_len(),
            x.buffer_len(),
        ] {
            assert_eq!(h, HEADER_LEN);
        }
    }

    #[test]
    fn truncated() {
        for n in 0..4 {
            let short = &[0x12u8, 0x34, 0x56][..n];
            let want = |layer| Error::Truncated {
                layer,
                needed: 4,
                got: n,
            };
            assert_eq!(ImmDt::parse(short), Err(want(Layer::ImmDt)), "{n} bytes");
            assert_eq!(IethRepr::parse(short), Err(want(Layer::Ieth)));
            assert_eq!(RdethRepr::parse(short), Err(want(Layer::Rdeth)));
            assert_eq!(XrcethRepr::parse(short), Err(want(Layer::Xrceth)));
            assert_eq!(FethRepr::parse(short), Err(want(Layer::Feth)));
        }
    }
}
