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
pub(crate) fn get_bits(b: &[u8], byte: usize, bit: u32, width: u32) -> u64 {
    let first = byte * 8 + bit as usize;
    let mut v = 0u64;
    for i in 0..width as usize {
        let at = first + i;
        v = v << 1 | u64::from(b[at / 8] >> (7 - at % 8) & 1);
    }
    v
}

/// Writes the low `width` bits of `v` into the field [`get_bits`] reads.
pub(crate) fn set_bits(b: &mut [u8], byte: usize, bit: u32, width: u32, v: u64) {
    let first = byte * 8 + bit as usize;
    for i in 0..width as usize {
        let at = first + i;
        let on = v >> (width as usize - 1 - i) & 1 == 1;
        let mask = 1u8 << (7 - at % 8);
        if on {
            b[at / 8] |= mask;
        } else {
            b[at / 8] &= !mask;
        }
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
