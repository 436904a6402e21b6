//! RDMA Extended Transport Header (IBTA Vol 1 §9.3.3; 16 bytes): VA u64, R_Key u32, DMA Length u32.
//!
//! Follows the BTH on RDMA WRITE First/Only, READ requests, FLUSH and ATOMIC WRITE.
use crate::wire::{be32, be64, fixed_view, put32, put64};
use crate::{Layer, RKey, Result};

mod field {
    use crate::Field;
    pub(super) const VA: Field = 0..8;
    pub(super) const RKEY: Field = 8..12;
    pub(super) const DMA_LEN: Field = 12..16;
}

/// Wire length of the RETH.
pub const HEADER_LEN: usize = field::DMA_LEN.end;

/// A view of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::Reth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Virtual address.
    pub fn va(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::VA])
    }
    /// Remote key.
    pub fn rkey(&self) -> RKey {
        RKey(be32(&self.buffer.as_ref()[field::RKEY]))
    }
    /// DMA length: the whole message length (for a retried READ, the bytes still missing).
    pub fn dma_len(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::DMA_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        put64(&mut self.buffer.as_mut()[field::VA], v);
    }
    /// Sets the remote key.
    pub fn set_rkey(&mut self, v: RKey) {
        put32(&mut self.buffer.as_mut()[field::RKEY], v.0);
    }
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        put32(&mut self.buffer.as_mut()[field::DMA_LEN], v);
    }
}

/// An owned RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: RKey,
    /// DMA length.
    pub dma_len: u32,
}

impl Repr {
    /// Reads a RETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            va: p.va(),
            rkey: p.rkey(),
            dma_len: p.dma_len(),
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
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    // RETH of the PcapPlusPlus READ request vector.
    static BYTES: [u8; 16] = [
        0x00, 0x00, 0x7f, 0xee, 0x26, 0x0f, 0xb0, 0x00, // VA 0x7fee260fb000
        0x00, 0x00, 0x02, 0xb8, // R_Key 0x2b8
        0x00, 0x01, 0x00, 0x00, // DMA length 65536
    ];
    const REPR: Repr = Repr {
        va: 0x7fee_260f_b000,
        rkey: RKey(0x2b8),
        dma_len: 65536,
    };

    #[test]
    fn getters_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.va(), p.rkey(), p.dma_len()),
            (0x7fee_260f_b000, RKey(0x2b8), 65536)
        );
        assert_eq!(Repr::parse(&p).unwrap(), REPR);
        let mut buf = [0u8; 16];
        REPR.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn every_truncated_prefix_is_an_error() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]),
                Err(Error::Truncated {
                    layer: Layer::Reth,
                    needed: 16,
                    got: n
                })
            );
        }
    }
}
