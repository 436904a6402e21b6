//! The text decoder's low-level writers: decimal and hex numbers, IPv4 addresses, appended
//! to a byte buffer without formatting machinery (the decoder's hot path; shared by the
//! packet lines of [`crate::format`] and the MAD lines of [`crate::madfmt`]).

pub(crate) const HEX: &[u8; 16] = b"0123456789abcdef";

/// "00".."99", for writing two decimal digits per division.
const PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Decimal digits of `v`, left-padded with `fill` to `width`. Twenty bytes are appended at
/// once (a fixed-size store the compiler inlines), the digits written in place two at a time,
/// and the rest cut back: no `memcpy` call and no capacity check per digit.
#[inline]
pub(crate) fn dec_pad(out: &mut Vec<u8>, v: u64, width: usize, fill: u8) {
    if v < 10 && width <= 1 {
        // The commonest number of all (flags, counts, reserved fields).
        out.push(b'0' + v as u8);
        return;
    }
    let n = v.checked_ilog10().map_or(1, |l| l as usize + 1);
    for _ in n..width {
        out.push(fill);
    }
    let at = out.len();
    out.extend_from_slice(&[b'0'; 20]);
    let digits = &mut out[at..at + n];
    let mut x = v;
    let mut i = n;
    while i >= 2 {
        let p = (x % 100) as usize * 2;
        digits[i - 2] = PAIRS[p];
        digits[i - 1] = PAIRS[p + 1];
        x /= 100;
        i -= 2;
    }
    if i == 1 {
        digits[0] = b'0' + x as u8;
    }
    out.truncate(at + n);
}

/// An IPv4 address in dotted decimal.
#[inline]
pub(crate) fn ipv4(out: &mut Vec<u8>, o: [u8; 4]) {
    let at = out.len();
    out.extend_from_slice(&[0u8; 16]);
    let b = &mut out[at..at + 16];
    let mut k = 0;
    for (j, &x) in o.iter().enumerate() {
        if j > 0 {
            b[k] = b'.';
            k += 1;
        }
        if x >= 100 {
            b[k] = b'0' + x / 100;
            k += 1;
        }
        if x >= 10 {
            b[k] = b'0' + (x / 10) % 10;
            k += 1;
        }
        b[k] = b'0' + x % 10;
        k += 1;
    }
    out.truncate(at + k);
}

#[inline]
pub(crate) fn dec(out: &mut Vec<u8>, v: u64) {
    dec_pad(out, v, 0, b'0');
}

/// `digits` lower-case hex digits, zero-padded, no prefix.
/// Eight lower-case hex digits of `x`, most significant first, without a loop: the nibbles are
/// spread one per byte, and each byte becomes its ASCII digit arithmetically.
#[inline]
pub(crate) fn hex8(x: u32) -> [u8; 8] {
    let mut v = u64::from(x);
    v = (v | (v << 16)) & 0x0000_ffff_0000_ffff;
    v = (v | (v << 8)) & 0x00ff_00ff_00ff_00ff;
    v = (v | (v << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // 1 in each byte whose nibble is 10 or more: those go to 'a'..'f', 0x27 past '0' + n.
    let letters = ((v + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    (v + 0x3030_3030_3030_3030 + letters * 0x27).to_be_bytes()
}

/// The low `digits` hex digits of `v`, zero-padded, lower case (more than 16: zero-padded to
/// that width). Fixed-size stores and a cut back, as [`dec_pad`] does: no `memcpy` call and
/// no capacity check per digit.
#[inline]
pub(crate) fn hex_digits(out: &mut Vec<u8>, v: u64, digits: u32) {
    for _ in 16..digits {
        out.push(b'0');
    }
    let n = digits.min(16);
    if n == 0 {
        return;
    }
    let at = out.len();
    out.extend_from_slice(&[0u8; 16]);
    let b = &mut out[at..at + 16];
    if n <= 8 {
        // The wanted digits moved to the top of the word, then the first `n` kept.
        let top = hex8((v as u32) << (4 * (8 - n)));
        b[..8].copy_from_slice(&top);
    } else {
        let k = (n - 8) as usize;
        let hi = hex8(((v >> 32) as u32) << (4 * (16 - n)));
        b[..8].copy_from_slice(&hi);
        let lo = hex8(v as u32);
        b[k..k + 8].copy_from_slice(&lo);
    }
    out.truncate(at + n as usize);
}

/// `0x` and `digits` hex digits.
#[inline]
pub(crate) fn hex(out: &mut Vec<u8>, v: u64, digits: u32) {
    out.extend_from_slice(b"0x");
    hex_digits(out, v, digits);
}

#[inline]
pub(crate) fn hex_bytes(out: &mut Vec<u8>, b: &[u8]) {
    for &x in b {
        out.push(HEX[usize::from(x >> 4)]);
        out.push(HEX[usize::from(x & 0xf)]);
    }
}
