//! The Arrow-layout building blocks of a batch's columns: packed bits (validity, flags),
//! dictionary keys of the width the dictionary needs, and the dictionary of a batch's
//! distinct texts.
use std::collections::HashMap;

/// A sequence of bits packed eight to a byte, the first in the lowest bit (Arrow's bitmap
/// layout): a column's validity and a flag column's values. While every bit is set (a
/// column no row left null, the usual case) only the count is kept: the bytes are written
/// when the first unset bit comes, or when they are taken.
#[derive(Debug, Clone)]
pub struct Bits {
    /// Empty while `all_set`.
    bytes: Vec<u8>,
    len: usize,
    ones: usize,
    all_set: bool,
}

impl Default for Bits {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl PartialEq for Bits {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && (0..self.len).all(|i| self.get(i) == other.get(i))
    }
}

impl Eq for Bits {}

impl Bits {
    /// Room for `bits` bits.
    pub fn with_capacity(bits: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bits.div_ceil(8)),
            len: 0,
            ones: 0,
            all_set: true,
        }
    }
    /// Bits held.
    pub fn len(&self) -> usize {
        self.len
    }
    /// `true` with none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bits that are set.
    pub fn ones(&self) -> usize {
        self.ones
    }
    /// Bit `i` (`None` past the end).
    pub fn get(&self, i: usize) -> Option<bool> {
        (i < self.len).then(|| self.all_set || self.bytes[i / 8] >> (i % 8) & 1 == 1)
    }
    /// The indices of the set bits, in order.
    pub fn iter_ones(&self) -> impl Iterator<Item = usize> + '_ {
        // Every index while all are set (the bytes are empty then), else the bytes' ones.
        let all = if self.all_set { self.len } else { 0 };
        (0..all).chain(self.bytes.iter().enumerate().flat_map(|(at, &b)| {
            let mut b = b;
            std::iter::from_fn(move || {
                (b != 0).then(|| {
                    let bit = b.trailing_zeros() as usize;
                    b &= b - 1;
                    at * 8 + bit
                })
            })
        }))
    }
    /// The packed bytes (the bits past [`Bits::len`] in the last one are 0) and the bit count.
    pub fn into_parts(mut self) -> (Vec<u8>, usize) {
        self.write_out();
        (self.bytes, self.len)
    }
    /// Writes the bytes of the bits held as a count (all set), from here on kept as bytes.
    pub(super) fn write_out(&mut self) {
        if self.all_set {
            self.all_set = false;
            self.bytes.clear();
            self.bytes.resize(self.len / 8, 0xff);
            if !self.len.is_multiple_of(8) {
                self.bytes.push((1u8 << (self.len % 8)) - 1);
            }
        }
    }
    /// Appends a bit.
    #[inline(always)]
    pub fn push(&mut self, bit: bool) {
        if self.all_set {
            if bit {
                self.len += 1;
                self.ones += 1;
                return;
            }
            self.write_out();
        }
        let at = self.len % 8;
        if at == 0 {
            self.bytes.push(u8::from(bit));
        } else if let Some(last) = self.bytes.last_mut() {
            *last |= u8::from(bit) << at;
        }
        self.len += 1;
        self.ones += usize::from(bit);
    }
    /// Unset bits up to `len` bits (nothing if as long already).
    pub fn extend_to(&mut self, len: usize) {
        if len > self.len {
            self.write_out();
            self.bytes.resize(len.div_ceil(8), 0);
            self.len = len;
        }
    }
    pub(super) fn reserve(&mut self, bits: usize) {
        self.bytes
            .reserve((self.len + bits).div_ceil(8) - self.bytes.len());
    }
}

/// The keys of a dictionary column, in its kind's width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// [`Kind::Dict8`](super::Kind::Dict8).
    I8(Vec<i8>),
    /// [`Kind::Dict16`](super::Kind::Dict16).
    I16(Vec<i16>),
    /// [`Kind::Dict32`](super::Kind::Dict32).
    I32(Vec<i32>),
}

impl Keys {
    /// Row `i`'s key.
    pub fn get(&self, i: usize) -> Option<usize> {
        match self {
            Self::I8(k) => k.get(i).map(|&k| k as usize),
            Self::I16(k) => k.get(i).map(|&k| k as usize),
            Self::I32(k) => k.get(i).map(|&k| k as usize),
        }
    }
    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            Self::I8(k) => k.len(),
            Self::I16(k) => k.len(),
            Self::I32(k) => k.len(),
        }
    }
    /// `true` with no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends `key` (below [`Keys::limit`] of its width: the schema's widths are those of
    /// the columns' value sets).
    #[inline(always)]
    pub(super) fn push(&mut self, key: u32) {
        debug_assert!((key as usize) < self.limit());
        match self {
            Self::I8(k) => k.push(key as i8),
            Self::I16(k) => k.push(key as i16),
            Self::I32(k) => k.push(key as i32),
        }
    }
    pub(super) fn resize(&mut self, rows: usize) {
        match self {
            Self::I8(k) => k.resize(rows, 0),
            Self::I16(k) => k.resize(rows, 0),
            Self::I32(k) => k.resize(rows, 0),
        }
    }
    pub(super) fn reserve(&mut self, rows: usize) {
        match self {
            Self::I8(k) => k.reserve(rows),
            Self::I16(k) => k.reserve(rows),
            Self::I32(k) => k.reserve(rows),
        }
    }
    pub(super) fn with_capacity_of(&self) -> Self {
        match self {
            Self::I8(k) => Self::I8(Vec::with_capacity(k.len())),
            Self::I16(k) => Self::I16(Vec::with_capacity(k.len())),
            Self::I32(k) => Self::I32(Vec::with_capacity(k.len())),
        }
    }
    /// Distinct texts a column of this width can hold.
    pub(super) fn limit(&self) -> usize {
        match self {
            Self::I8(_) => 1 << 7,
            Self::I16(_) => 1 << 15,
            Self::I32(_) => 1 << 31,
        }
    }
}

/// A dictionary column's distinct texts, in the order its rows first used them (each once).
#[derive(Debug, Clone, Default)]
pub struct Dict {
    /// Text `k` is `bytes[offsets[k]..offsets[k + 1]]`.
    offsets: Vec<i32>,
    bytes: Vec<u8>,
    /// A writer's code of a text (a small dense number that says which text it is, such as
    /// an opcode) to its key plus one (0: not seen in this batch).
    by_code: Vec<u32>,
    /// Each text to its key. Seeded per map: a capture cannot choose texts that collide.
    by_text: HashMap<Box<[u8]>, u32, foldhash::fast::RandomState>,
}

impl PartialEq for Dict {
    fn eq(&self, other: &Self) -> bool {
        self.offsets() == other.offsets() && self.bytes == other.bytes
    }
}

impl Eq for Dict {}

impl Dict {
    /// Distinct texts.
    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }
    /// `true` with none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Text `key` (UTF-8).
    pub fn text(&self, key: usize) -> Option<&[u8]> {
        let (a, b) = (*self.offsets.get(key)?, *self.offsets.get(key + 1)?);
        self.bytes.get(a as usize..b as usize)
    }
    /// The offsets of the texts (one more than the texts; the first 0), Arrow's layout.
    pub fn offsets(&self) -> &[i32] {
        if self.offsets.is_empty() {
            &[0]
        } else {
            &self.offsets
        }
    }
    /// The texts, one after another.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// The offsets and the bytes, taken.
    pub fn into_parts(mut self) -> (Vec<i32>, Vec<u8>) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        (self.offsets, self.bytes)
    }
    /// The key of the text that `write` writes, added if new.
    pub(super) fn key_of_text(&mut self, write: impl FnOnce(&mut Vec<u8>)) -> u32 {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let at = self.bytes.len();
        write(&mut self.bytes);
        if let Some(&k) = self.by_text.get(&self.bytes[at..]) {
            self.bytes.truncate(at);
            return k;
        }
        let key = self.len() as u32;
        self.by_text.insert(self.bytes[at..].into(), key);
        self.offsets.push(self.bytes.len() as i32);
        key
    }
    /// The key of the text of code `code` (which `write` writes the first time), added if
    /// new.
    #[inline]
    pub(super) fn key_of_code(&mut self, code: usize, write: impl FnOnce(&mut Vec<u8>)) -> u32 {
        if let Some(&k) = self.by_code.get(code) {
            if k != 0 {
                return k - 1;
            }
        }
        let key = self.key_of_text(write);
        if self.by_code.len() <= code {
            self.by_code.resize(code + 1, 0);
        }
        self.by_code[code] = key + 1;
        key
    }
}

#[cfg(test)]
mod tests {
    use super::{Bits, Dict};

    /// Bits pushed and extended one way or another read back as the flags they are, in
    /// Arrow's layout (bit `i` in byte `i / 8`, lowest bit first), with their count of ones.
    #[test]
    fn bits_hold_the_flags_in_arrows_layout() {
        let seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut x = seed;
        for round in 0..200 {
            let mut bits = Bits::with_capacity(round % 7);
            let mut model = Vec::new();
            for _ in 0..(round * 3) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x.is_multiple_of(5) {
                    let to = model.len() + (x >> 8) as usize % 20;
                    bits.extend_to(to);
                    model.resize(to, false);
                } else {
                    bits.push(x & 2 != 0);
                    model.push(x & 2 != 0);
                }
            }
            let why = format!("seed {seed:#x}, round {round}");
            assert_eq!(bits.len(), model.len(), "{why}");
            assert_eq!(bits.ones(), model.iter().filter(|&&b| b).count(), "{why}");
            for (i, &b) in model.iter().enumerate() {
                assert_eq!(bits.get(i), Some(b), "{why}, bit {i}");
            }
            assert_eq!(bits.get(model.len()), None, "{why}");
            let ones: Vec<usize> = (0..model.len()).filter(|&i| model[i]).collect();
            assert_eq!(bits.iter_ones().collect::<Vec<_>>(), ones, "{why}");
            let (bytes, len) = bits.into_parts();
            assert_eq!(len, model.len());
            assert_eq!(bytes.len(), len.div_ceil(8), "{why}");
            for (i, &b) in model.iter().enumerate() {
                assert_eq!(
                    bytes[i / 8] >> (i % 8) & 1 == 1,
                    b,
                    "{why}, byte of bit {i}"
                );
            }
        }
    }

    /// Bits that are all set are kept as a count until written: read, compared and taken,
    /// they are the same bits as those written one by one.
    #[test]
    fn bits_all_set_are_the_same_bits_written_out() {
        for n in 0..40 {
            let mut counted = Bits::default();
            let written = Bits::default().written_out(n);
            for _ in 0..n {
                counted.push(true);
            }
            assert_eq!(counted, written, "{n} bits");
            assert_eq!(counted.ones(), n);
            assert_eq!(
                counted.iter_ones().collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
            assert_eq!(
                counted.clone().into_parts(),
                written.clone().into_parts(),
                "{n} bits"
            );
            let mut then_unset = counted.clone();
            then_unset.push(false);
            then_unset.push(true);
            assert_eq!(then_unset.get(n), Some(false), "{n} bits");
            assert_eq!(then_unset.get(n + 1), Some(true), "{n} bits");
            assert_eq!(then_unset.ones(), n + 1);
            let mut extended = counted;
            extended.extend_to(n + 9);
            assert_eq!(extended.ones(), n);
            assert_eq!(
                extended.iter_ones().collect::<Vec<_>>(),
                (0..n).collect::<Vec<_>>()
            );
        }
    }

    impl Bits {
        /// `n` set bits written out as bytes.
        fn written_out(mut self, n: usize) -> Self {
            self.write_out();
            for _ in 0..n {
                self.push(true);
            }
            assert!(!self.all_set);
            self
        }
    }

    /// A dictionary holds each text once, whether it is found by a code or by its text, and
    /// two codes that write the same text share its key.
    #[test]
    fn a_dictionary_holds_each_text_once() {
        let mut d = Dict::default();
        assert_eq!(d.offsets(), &[0]);
        let put = |b: &mut Vec<u8>, s: &str| b.extend_from_slice(s.as_bytes());
        let a = d.key_of_code(3, |b| put(b, "CNP"));
        let b = d.key_of_code(7, |b| put(b, "RC_SEND_ONLY"));
        assert_eq!(
            d.key_of_code(3, |_| panic!("a code met before is not written again")),
            a
        );
        assert_eq!(
            d.key_of_code(9, |b| put(b, "CNP")),
            a,
            "another code, the same text"
        );
        assert_eq!(d.key_of_text(|b| put(b, "RC_SEND_ONLY")), b);
        let c = d.key_of_text(|b| put(b, "10.0.0.1:4791"));
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(d.len(), 3);
        assert_eq!(d.text(2), Some(&b"10.0.0.1:4791"[..]));
        assert_eq!(d.text(3), None);
        let (offsets, bytes) = d.into_parts();
        assert_eq!(offsets, [0, 3, 15, 28]);
        assert_eq!(bytes, b"CNPRC_SEND_ONLY10.0.0.1:4791");
    }
}
