//! Verifying a RoCEv2/IPv4 ICRC when the IPv4 identification and DF bit are not known.
//!
//! A receiver on a plain UDP socket learns the addresses, the ports and the lengths of every
//! datagram, but not the IPv4 identification (16 bits) or the flags, and the ICRC covers both
//! (IBTA Vol 1 Annex A17.4.4: of the IPv4 header only TOS, TTL and the header checksum are
//! masked). Senders choose them freely: Linux writes identification 0 with DF for an
//! unconnected UDP socket, rxe and NICs a counter, some peers no DF.
//!
//! The CRC is linear over GF(2): flipping message bits changes the CRC by a fixed linear
//! function of the flipped bits, whatever the other bytes are. So with `c0` the ICRC computed
//! with identification 0 and no DF, and `s` the ICRC the packet carries, `s ^ c0` must be a
//! combination of the 17 vectors that the 17 unknown bits contribute; [`solve_ipv4_id_df`]
//! finds the combination (there is at most one: those bits lie within 24 consecutive bits of
//! the message, and CRC-32 changes for every non-zero error burst of up to 32 bits) or says
//! there is none.
//!
//! What this leaves of the check: a packet corrupted in transit passes only if the corruption
//! happens to look like one of the 2^17 combinations, a chance of 2^17 / 2^32 = 2^-15 per
//! corrupted packet instead of 2^-32: the check keeps 15 of its 32 bits. (Errors that, with the
//! identification and flags, fit in a 32-bit window are still always caught.)
//!
//! The arithmetic: the CRC register is shifted by one zero byte with the linear map `M`; the
//! vectors of the unknown bits are first moved to the end of the message with `M^n`, which is
//! done the other way round (the difference is moved back to the flags byte with `M^-n`,
//! using the precomputed matrices `M^-(2^k)`), then solved by elimination against the 17 fixed
//! vectors.
use crate::icrc::{stored, Icrc, Ipv4Fields, UdpFields};
use crate::ICRC_LEN;

/// The reflected CRC-32 polynomial (IEEE 802.3; zlib, crc32fast).
const POLY: u32 = 0xedb8_8320;

/// A 32 × 32 matrix over GF(2), as the images of the 32 unit vectors.
type Matrix = [u32; 32];

/// One zero byte through the CRC register.
const fn step(mut r: u32) -> u32 {
    let mut i = 0;
    while i < 8 {
        r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
        i += 1;
    }
    r
}

/// The inverse of [`step`]: which register gives `r` after one zero byte. Each of the 8 bit
/// steps is undone from the top bit (set exactly when the polynomial was XORed in).
const fn unstep(mut r: u32) -> u32 {
    let mut i = 0;
    while i < 8 {
        r = if r & 0x8000_0000 != 0 {
            ((r ^ POLY) << 1) | 1
        } else {
            r << 1
        };
        i += 1;
    }
    r
}

const fn apply(m: &Matrix, v: u32) -> u32 {
    let mut out = 0;
    let mut i = 0;
    while i < 32 {
        if v >> i & 1 != 0 {
            out ^= m[i];
        }
        i += 1;
    }
    out
}

const fn square(m: &Matrix) -> Matrix {
    let mut out = [0u32; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = apply(m, m[i]);
        i += 1;
    }
    out
}

/// Doubling steps: `M^-(2^k)` for `k < 17` moves back up to 128 KiB.
const POWERS: usize = 17;

/// `M^-(2^k)` for every `k < POWERS`.
const UNSHIFT: [Matrix; POWERS] = {
    let mut base = [0u32; 32];
    let mut i = 0;
    while i < 32 {
        base[i] = unstep(1 << i);
        i += 1;
    }
    let mut out = [[0u32; 32]; POWERS];
    out[0] = base;
    let mut k = 1;
    while k < POWERS {
        out[k] = square(&out[k - 1]);
        k += 1;
    }
    out
};

/// `M^-n v`.
fn unshift(mut v: u32, n: usize) -> u32 {
    let mut k = 0;
    let mut rest = n;
    while rest != 0 && k < POWERS {
        if rest & 1 != 0 {
            v = apply(&UNSHIFT[k], v);
        }
        rest >>= 1;
        k += 1;
    }
    v
}

/// The register difference, just after the IPv4 flags byte, of each unknown bit: bits 0..16
/// are the identification (bit 15 its most significant), bit 16 is DF. The identification's
/// two bytes come two and one bytes before the flags byte.
const BASIS: [u32; 17] = {
    let mut out = [0u32; 17];
    let mut b = 0;
    while b < 17 {
        // Which byte the bit is in, counted back from the flags byte, and its bit there
        // (the CRC is reflected: bit 0 of a byte enters first).
        let (back, bit) = if b < 8 {
            (1, b) // identification low byte
        } else if b < 16 {
            (2, b - 8) // identification high byte
        } else {
            (0, 6) // DF is 0x40 of the flags byte
        };
        let mut r = step(1 << bit);
        let mut j = 0;
        while j < back {
            r = step(r);
            j += 1;
        }
        out[b] = r;
        b += 1;
    }
    out
};

/// [`BASIS`] reduced for elimination: each entry has a pivot bit no later entry has, and the
/// unknown bits it stands for.
const REDUCED: [(u32, u32, u32); 17] = {
    // (vector, pivot mask, combination of unknown bits)
    let mut rows = [(0u32, 0u32, 0u32); 17];
    let mut n = 0;
    let mut b = 0;
    while b < 17 {
        let mut v = BASIS[b];
        let mut combo = 1u32 << b;
        let mut j = 0;
        while j < n {
            if v & rows[j].1 != 0 {
                v ^= rows[j].0;
                combo ^= rows[j].2;
            }
            j += 1;
        }
        // Independent by the burst property; a zero here would be a bug caught by the tests.
        let pivot = if v == 0 { 0 } else { v & v.wrapping_neg() };
        rows[n] = (v, pivot, combo);
        n += 1;
        b += 1;
    }
    rows
};

/// Bytes of the IPv4 ICRC pseudo-header after the flags byte: the 8 × `FF` prefix and 6 bytes
/// of the IPv4 header come before it (byte 14), 13 IPv4 and 8 UDP bytes after.
const AFTER_FLAGS: usize = 13 + 8;

/// Finds the IPv4 identification and DF bit for which the ICRC of `packet` (BTH through
/// ICRC, as received from `ip.src`/`udp.src_port` at `ip.dst`/`udp.dst_port` in an IPv4
/// header of 20 bytes) is valid. `ip.identification` and `ip.dont_fragment` are ignored.
/// `None` when no identification and DF make it valid: the packet was corrupted (or its
/// header had options, or other flags set).
pub fn solve_ipv4_id_df(ip: &Ipv4Fields, udp: &UdpFields, packet: &[u8]) -> Option<(u16, bool)> {
    let covered = packet.len().checked_sub(ICRC_LEN)?;
    if covered < crate::bth::HEADER_LEN {
        return None;
    }
    let zero = Ipv4Fields {
        identification: 0,
        dont_fragment: false,
        ..*ip
    };
    let c0 = Icrc::rocev2_ipv4_fields(&zero, udp, packet.len()).compute(packet);
    let mut u = unshift(c0 ^ stored(packet), AFTER_FLAGS + covered);
    let mut bits = 0u32;
    for &(v, pivot, combo) in &REDUCED {
        if u & pivot != 0 {
            u ^= v;
            bits ^= combo;
        }
    }
    (u == 0).then_some(((bits & 0xffff) as u16, bits >> 16 & 1 == 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    fn fields(id: u16, df: bool) -> (Ipv4Fields, UdpFields) {
        (
            Ipv4Fields {
                src: [10, 1, 2, 3],
                dst: [10, 4, 5, 6],
                identification: id,
                dont_fragment: df,
            },
            UdpFields {
                src_port: 0xc123,
                dst_port: 4791,
            },
        )
    }

    fn packet(len: usize, id: u16, df: bool, seed: u8) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect();
        let (ip, udp) = fields(id, df);
        Icrc::rocev2_ipv4_fields(&ip, &udp, len).fill(&mut p);
        p
    }

    #[test]
    fn unstep_undoes_step_and_the_basis_is_independent() {
        for r in [0u32, 1, 0x8000_0000, 0xdead_beef, 0xffff_ffff] {
            assert_eq!(unstep(step(r)), r);
            assert_eq!(step(unstep(r)), r);
        }
        for (v, pivot, _) in REDUCED {
            assert_ne!(v, 0);
            assert_ne!(pivot, 0);
        }
    }

    #[test]
    fn recovers_every_identification_and_df_at_many_lengths() {
        for len in [16usize, 17, 33, 300, 1040, 4124, 9000] {
            for (id, df) in [
                (0, true),
                (0, false),
                (14849, true),
                (0xffff, false),
                (1, true),
            ] {
                let p = packet(len, id, df, len as u8);
                let (ip, udp) = fields(0, false);
                assert_eq!(solve_ipv4_id_df(&ip, &udp, &p), Some((id, df)), "len {len}");
            }
        }
    }

    #[test]
    fn corruption_outside_the_unknowns_is_caught() {
        let (ip, udp) = fields(0, false);
        let mut accepted = 0;
        let mut tried = 0;
        for len in [20usize, 64, 1052] {
            let good = packet(len, 777, true, 3);
            // Every byte but BTH byte 4 (FECN, BECN, resv6a: masked, so not covered).
            for at in (0..len).filter(|&at| at != 4) {
                for bit in [0u8, 3, 7] {
                    let mut p = good.clone();
                    p[at] ^= 1 << bit;
                    tried += 1;
                    accepted += u32::from(solve_ipv4_id_df(&ip, &udp, &p).is_some());
                }
            }
            // A different address or port is a different packet too.
            let other = UdpFields {
                src_port: 0xc124,
                ..udp
            };
            assert_eq!(solve_ipv4_id_df(&ip, &other, &good), None);
        }
        // Each passes with probability 2^-15 (expected: 0.1 of these 3,399).
        assert!(
            accepted <= 3,
            "{accepted} of {tried} single-bit errors passed"
        );
    }

    #[test]
    fn random_corruption_passes_about_once_in_2_pow_15() {
        // Overwrite the stored ICRC with arbitrary values: each passes with probability
        // 2^17 / 2^32.
        let (ip, udp) = fields(0, false);
        let mut p = packet(256, 5, true, 9);
        let n = p.len();
        let mut x = 0x1234_5678u32;
        let mut passed = 0;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            p[n - 4..].copy_from_slice(&x.to_le_bytes());
            passed += u32::from(solve_ipv4_id_df(&ip, &udp, &p).is_some());
        }
        // Expected 200,000 / 32,768 = 6.1.
        assert!((1..=20).contains(&passed), "{passed} of 200,000 passed");
    }
}
