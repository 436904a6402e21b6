//! Atomic Extended Transport Header (IBTA Vol 1 §9.3.4; 28 bytes: VA u64, R_Key u32,
//! Swap-or-Add u64, Compare u64) and Atomic ACK Extended Transport Header (§9.3.6; 8 bytes:
//! original remote data u64).
use crate::wire::{be32, be64, fixed_view, put32, put64};
use crate::{Layer, RKey, Result};

mod field {
    use crate::Field;
    pub(super) const VA: Field = 0..8;
    pub(super) const RKEY: Field = 8..12;
    pub(super) const SWAP_ADD: Field = 12..20;
    pub(super) const COMPARE: Field = 20..28;
    pub(super) const ORIG: Field = 0..8;
}

/// Wire length of the AtomicETH.
pub const HEADER_LEN: usize = field::COMPARE.end;
/// Wire length of the AtomicAckETH.
pub const ACK_HEADER_LEN: usize = field::ORIG.end;

/// A view of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::AtomicEth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Virtual address (8-byte aligned for a valid request).
    pub fn va(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::VA])
    }
    /// Remote key.
    pub fn rkey(&self) -> RKey {
        RKey(be32(&self.buffer.as_ref()[field::RKEY]))
    }
    /// Swap data (compare-and-swap) or add data (fetch-and-add).
    pub fn swap_add(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::SWAP_ADD])
    }
    /// Compare data (compare-and-swap only).
    pub fn compare(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::COMPARE])
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
    /// Sets the swap/add data.
    pub fn set_swap_add(&mut self, v: u64) {
        put64(&mut self.buffer.as_mut()[field::SWAP_ADD], v);
    }
    /// Sets the compare data.
    pub fn set_compare(&mut self, v: u64) {
        put64(&mut self.buffer.as_mut()[field::COMPARE], v);
    }
}

/// An owned AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: RKey,
    /// Swap or add data.
    pub swap_add: u64,
    /// Compare data.
    pub compare: u64,
}

impl Repr {
    /// Reads an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            va: p.va(),
            rkey: p.rkey(),
            swap_add: p.swap_add(),
            compare: p.compare(),
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
        p.set_swap_add(self.swap_add);
        p.set_compare(self.compare);
    }
}

/// A view of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AckPacket<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }
    /// Wraps a buffer after checking that it holds the whole header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        crate::error::need(Layer::AtomicAckEth, buffer.as_ref(), ACK_HEADER_LEN)?;
        Ok(Self { buffer })
    }
    /// The value the target held before the atomic operation.
    pub fn orig_data(&self) -> u64 {
        be64(&self.buffer.as_ref()[field::ORIG])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AckPacket<T> {
    /// Sets the original data.
    pub fn set_orig_data(&mut self, v: u64) {
        put64(&mut self.buffer.as_mut()[field::ORIG], v);
    }
}

/// An owned AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AckRepr {
    /// Original remote data.
    pub orig_data: u64,
}

impl AckRepr {
    /// Reads an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(p: &AckPacket<T>) -> Result<Self> {
        crate::error::need(Layer::AtomicAckEth, p.buffer.as_ref(), ACK_HEADER_LEN)?;
        Ok(Self {
            orig_data: p.orig_data(),
        })
    }
    /// The wire length (always [`ACK_HEADER_LEN`]).
    pub const fn buffer_len(&self) -> usize {
        ACK_HEADER_LEN
    }
    /// Writes the header.
    ///
    /// # Panics
    /// If the buffer is shorter than [`ACK_HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AckPacket<T>) {
        p.set_orig_data(self.orig_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    static ATOMIC: [u8; 28] = [
        0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x08, // VA
        0x00, 0x00, 0x12, 0x34, // R_Key
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // add 1
        0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x00, 0x00, // compare
    ];

    #[test]
    fn atomic_eth() {
        let p = Packet::new_checked(&ATOMIC[..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                va: 0x7f00_0000_1008,
                rkey: RKey(0x1234),
                swap_add: 1,
                compare: 0xdead_beef_0000_0000
            }
        );
        let mut buf = [0u8; 28];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ATOMIC);
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&ATOMIC[..n]),
                Err(Error::Truncated {
                    layer: Layer::AtomicEth,
                    needed: 28,
                    got: n
                })
            );
        }
    }

    #[test]
    fn atomic_ack_eth() {
        let bytes = [0, 0, 0, 0, 0, 0, 0x01, 0x02];
        let r = AckRepr::parse(&AckPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.orig_data, 0x0102);
        let mut buf = [0xffu8; 8];
        r.emit(&mut AckPacket::new_unchecked(&mut buf[..]));
        assert_eq!(buf, bytes);
        for n in 0..ACK_HEADER_LEN {
            assert_eq!(
                AckPacket::new_checked(&bytes[..n]),
                Err(Error::Truncated {
                    layer: Layer::AtomicAckEth,
                    needed: 8,
                    got: n
                })
            );
        }
    }
}
