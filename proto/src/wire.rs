//! Big-endian field access shared by the header views. Callers have checked the length.

#[inline]
pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

#[inline]
pub(crate) fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

#[inline]
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[inline]
pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[inline]
pub(crate) fn put16(b: &mut [u8], v: u16) {
    b[..2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put24(b: &mut [u8], v: u32) {
    b[..3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline]
pub(crate) fn put32(b: &mut [u8], v: u32) {
    b[..4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put64(b: &mut [u8], v: u64) {
    b[..8].copy_from_slice(&v.to_be_bytes());
}

/// The `width`-bit field (at most 64) starting at bit `bit` (0 = the most significant) of byte
/// `byte`, read big-endian across byte boundaries: the field convention of IBTA Vol 1 ch. 13
/// and 16 (and Linux's `IBA_FIELD*_LOC`). Callers have checked the length.
#[inline]
pub(crate) fn get_bits(b: &[u8], byte: usize, bit: u32, width: u32) -> u64 {
    // The (at most 9) bytes the field touches, as one big-endian number, shifted and masked.
    let n = (bit + width).div_ceil(8) as usize;
    let acc = b[byte..byte + n]
        .iter()
        .fold(0u128, |acc, &x| acc << 8 | u128::from(x));
    let shift = n as u32 * 8 - bit - width;
    ((acc >> shift) & ((1u128 << width) - 1)) as u64
}

/// Writes the low `width` bits of `v` into the field [`get_bits`] reads.
#[inline]
pub(crate) fn set_bits(b: &mut [u8], byte: usize, bit: u32, width: u32, v: u64) {
    let n = (bit + width).div_ceil(8) as usize;
    let bytes = &mut b[byte..byte + n];
    let acc = bytes.iter().fold(0u128, |acc, &x| acc << 8 | u128::from(x));
    let shift = n as u32 * 8 - bit - width;
    let mask = ((1u128 << width) - 1) << shift;
    let acc = (acc & !mask) | ((u128::from(v) << shift) & mask);
    for (i, x) in bytes.iter_mut().enumerate() {
        *x = (acc >> (8 * (n - 1 - i))) as u8;
    }
}

/// The boilerplate every fixed-size header view shares: construction, the length check and
/// access to the buffer. `$layer` names the header in errors, `$len` is its wire length.
macro_rules! fixed_view {
    ($layer:expr, $len:expr) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            /// Wraps a buffer without checking its length; accessors may panic if it is short.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }

            /// Wraps a buffer after checking that it holds the whole header.
            pub fn new_checked(buffer: T) -> $crate::Result<Self> {
                let packet = Self::new_unchecked(buffer);
                packet.check_len()?;
                Ok(packet)
            }

            /// `Err(Truncated)` when the buffer is shorter than the header.
            pub fn check_len(&self) -> $crate::Result<()> {
                $crate::error::need($layer, self.buffer.as_ref(), $len)
            }

            /// Gives the buffer back.
            pub fn into_inner(self) -> T {
                self.buffer
            }

            /// The header's bytes (exactly its wire length).
            pub fn header_bytes(&self) -> &[u8] {
                &self.buffer.as_ref()[..$len]
            }
        }
    };
}
pub(crate) use fixed_view;

#[cfg(test)]
mod tests {
    use super::{get_bits, set_bits};

    /// The definition, one bit at a time (bit 0 the most significant of its byte).
    fn bit(b: &[u8], at: usize) -> u64 {
        u64::from(b[at / 8] >> (7 - at % 8) & 1)
    }

    #[test]
    fn fields_read_and_write_bit_by_bit_as_defined() {
        let src: [u8; 12] = [
            0x9a, 0x3c, 0xf1, 0x07, 0x5e, 0xb2, 0x68, 0xd4, 0x21, 0xcf, 0x80, 0x3b,
        ];
        for byte in 0..3 {
            for off in 0..8u32 {
                for width in 0..=64u32 {
                    let first = byte * 8 + off as usize;
                    let want = (0..width as usize).fold(0u64, |v, i| v << 1 | bit(&src, first + i));
                    assert_eq!(
                        get_bits(&src, byte, off, width),
                        want,
                        "{byte} {off} {width}"
                    );
                    // Writing a pattern changes those bits and no others.
                    let mut b = src;
                    let v = 0xa5c3_5a3c_96e1_0ff0u64;
                    set_bits(&mut b, byte, off, width, v);
                    for at in 0..b.len() * 8 {
                        let inside = at >= first && at < first + width as usize;
                        let expect = if inside {
                            v >> (width as usize - 1 - (at - first)) & 1
                        } else {
                            bit(&src, at)
                        };
                        assert_eq!(bit(&b, at), expect, "{byte} {off} {width} bit {at}");
                    }
                }
            }
        }
    }
}
