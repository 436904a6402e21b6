//! perftest's connection exchange: the fixed-format text record each side of `ib_write_bw`,
//! `ib_read_bw`, ... writes to the other over TCP (port 18515 by default) when it does not use
//! the CM (`-R`). Formats from linux-rdma/perftest `src/perftest_communication.h`:
//!
//! | variant | format | bytes on the wire |
//! |---|---|---|
//! | [`Variant::Plain`] | `KEY_PRINT_FMT "%04x:%04x:%06x:%06x:%08x:%016llx:%08x"` | 59 (`KEY_MSG_SIZE`) |
//! | [`Variant::PlainDv`] | `KEY_PRINT_FMT_DV`, a 16-digit tail-markers address before the SRQN | 76 |
//! | [`Variant::Gid`] | `KEY_PRINT_FMT_GID`: the 16 GID bytes as `%02x:` after the address, the SRQN with a trailing `:` | 108 (`KEY_MSG_SIZE_GID`) |
//! | [`Variant::GidDv`] | `KEY_PRINT_FMT_GID_DV` | 125 |
//!
//! Fields in order: LID, outstanding reads, QPN, PSN, rkey, virtual address, (tail-markers
//! address), (GID), SRQN. `ethernet_write_keys` writes `sizeof msg` bytes: the text and its
//! terminating NUL, padded with NULs to the fixed size. RoCE (a GID index given, `-x`) uses the
//! GID variants; `-D`/data validation the DV ones. [`Dest::emit`] writes exactly those bytes;
//! [`Dest::parse`] reads them strictly (every field as many hex digits as the format prints,
//! the separators where they belong, NULs after): a peer's record is hostile input.
use core::fmt;

/// Which of perftest's four records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// No GID (native InfiniBand by LID).
    Plain,
    /// No GID, with the data-validation tail-markers address.
    PlainDv,
    /// With the GID (RoCE).
    Gid,
    /// With the GID and the tail-markers address.
    GidDv,
}

impl Variant {
    /// The record's size on the wire, NUL included (`KEY_MSG_SIZE*`).
    pub const fn wire_len(self) -> usize {
        match self {
            Self::Plain => 59,
            Self::PlainDv => 76,
            Self::Gid => 108,
            Self::GidDv => 125,
        }
    }

    /// `true` for the data-validation records.
    pub const fn dv(self) -> bool {
        matches!(self, Self::PlainDv | Self::GidDv)
    }

    /// `true` for the records with a GID.
    pub const fn gid(self) -> bool {
        matches!(self, Self::Gid | Self::GidDv)
    }

    /// The variant of a record of `len` bytes, if any has that size.
    pub const fn from_len(len: usize) -> Option<Self> {
        match len {
            59 => Some(Self::Plain),
            76 => Some(Self::PlainDv),
            108 => Some(Self::Gid),
            125 => Some(Self::GidDv),
            _ => None,
        }
    }
}

/// One side's destination record (perftest's `struct pingpong_dest`, the fields it sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA reads / atomics this side accepts (its responder resources).
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Starting PSN (24 bits).
    pub psn: u32,
    /// Remote key of the buffer.
    pub rkey: u32,
    /// Virtual address of the buffer.
    pub vaddr: u64,
    /// Data validation: the tail markers' address (the DV variants only).
    pub tail_markers_vaddr: Option<u64>,
    /// The GID (the GID variants only; on RoCEv2 an IPv4-mapped or IPv6 address).
    pub gid: Option<[u8; 16]>,
    /// SRQ number (0 without an SRQ).
    pub srqn: u32,
}

/// Why a record does not parse or cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is not the variant's size.
    Length {
        /// Bytes given.
        got: usize,
        /// Bytes the variant takes.
        want: usize,
    },
    /// A field is not the hex digits the format prints, or a separator is missing.
    Field(&'static str),
    /// Bytes after the text are not NULs.
    Trailer,
    /// A value does not fit the field's width (QPN and PSN are 24 bits).
    TooWide(&'static str),
    /// The record's variant and its GID or tail-markers address disagree.
    Variant,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length { got, want } => {
                write!(f, "perftest record: {got} bytes, the format takes {want}")
            }
            Self::Field(name) => write!(f, "perftest record: field {name} is malformed"),
            Self::Trailer => write!(f, "perftest record: bytes after the text are not NULs"),
            Self::TooWide(name) => write!(f, "perftest record: {name} does not fit its field"),
            Self::Variant => write!(f, "perftest record: the fields do not match the variant"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// The size of perftest's binary record (`sizeof(struct pingpong_dest)` on x86-64), what
/// its rdma_cm exchange sends ([`Dest::emit_binary`]).
pub const BINARY_LEN: usize = 56;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes `v` as `digits` lowercase hex digits and `sep` (if any) at `buf[*at..]`.
fn put(buf: &mut [u8], at: &mut usize, v: u64, digits: usize, sep: bool) {
    for i in 0..digits {
        let shift = 4 * (digits - 1 - i);
        buf[*at + i] = HEX[((v >> shift) & 0xf) as usize];
    }
    *at += digits;
    if sep {
        buf[*at] = b':';
        *at += 1;
    }
}

/// Reads `digits` hex digits (either case, as `sscanf` does) and `sep` at `b[*at..]`.
fn get(
    b: &[u8],
    at: &mut usize,
    digits: usize,
    sep: bool,
    name: &'static str,
) -> Result<u64, Error> {
    let field = b.get(*at..*at + digits).ok_or(Error::Field(name))?;
    let mut v = 0u64;
    for &c in field {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return Err(Error::Field(name)),
        };
        v = v << 4 | u64::from(d);
    }
    *at += digits;
    if sep {
        if b.get(*at) != Some(&b':') {
            return Err(Error::Field(name));
        }
        *at += 1;
    }
    Ok(v)
}

impl Dest {
    /// The variant this record is written as.
    pub const fn variant(&self) -> Variant {
        match (self.gid.is_some(), self.tail_markers_vaddr.is_some()) {
            (false, false) => Variant::Plain,
            (false, true) => Variant::PlainDv,
            (true, false) => Variant::Gid,
            (true, true) => Variant::GidDv,
        }
    }

    /// Writes the record as perftest does (text, NUL, NUL padding to the variant's size) into
    /// `buf`; returns the bytes written ([`Variant::wire_len`]).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let v = self.variant();
        let n = v.wire_len();
        if buf.len() < n {
            return Err(Error::Length {
                got: buf.len(),
                want: n,
            });
        }
        if self.qpn > 0xff_ffff {
            return Err(Error::TooWide("qpn"));
        }
        if self.psn > 0xff_ffff {
            return Err(Error::TooWide("psn"));
        }
        let buf = &mut buf[..n];
        buf.fill(0);
        let mut at = 0;
        put(buf, &mut at, u64::from(self.lid), 4, true);
        put(buf, &mut at, u64::from(self.out_reads), 4, true);
        put(buf, &mut at, u64::from(self.qpn), 6, true);
        put(buf, &mut at, u64::from(self.psn), 6, true);
        put(buf, &mut at, u64::from(self.rkey), 8, true);
        put(buf, &mut at, self.vaddr, 16, true);
        if let Some(t) = self.tail_markers_vaddr {
            put(buf, &mut at, t, 16, true);
        }
        match self.gid {
            Some(g) => {
                for b in g {
                    put(buf, &mut at, u64::from(b), 2, true);
                }
                // KEY_PRINT_FMT_GID ends with "%08x:".
                put(buf, &mut at, u64::from(self.srqn), 8, true);
            }
            None => put(buf, &mut at, u64::from(self.srqn), 8, false),
        }
        debug_assert_eq!(at + 1, n, "the text and its NUL fill the record");
        Ok(n)
    }

    /// Parses a record of the given variant (exactly [`Variant::wire_len`] bytes).
    pub fn parse(b: &[u8], variant: Variant) -> Result<Self, Error> {
        if b.len() != variant.wire_len() {
            return Err(Error::Length {
                got: b.len(),
                want: variant.wire_len(),
            });
        }
        let mut at = 0;
        let lid = get(b, &mut at, 4, true, "lid")? as u16;
        let out_reads = get(b, &mut at, 4, true, "out_reads")? as u16;
        let qpn = get(b, &mut at, 6, true, "qpn")? as u32;
        let psn = get(b, &mut at, 6, true, "psn")? as u32;
        let rkey = get(b, &mut at, 8, true, "rkey")? as u32;
        let vaddr = get(b, &mut at, 16, true, "vaddr")?;
        let tail_markers_vaddr = if variant.dv() {
            Some(get(b, &mut at, 16, true, "tail_markers_vaddr")?)
        } else {
            None
        };
        let gid = if variant.gid() {
            let mut g = [0u8; 16];
            for x in &mut g {
                *x = get(b, &mut at, 2, true, "gid")? as u8;
            }
            Some(g)
        } else {
            None
        };
        let srqn = get(b, &mut at, 8, variant.gid(), "srqn")? as u32;
        if b[at..].iter().any(|&c| c != 0) {
            return Err(Error::Trailer);
        }
        Ok(Self {
            lid,
            out_reads,
            qpn,
            psn,
            rkey,
            vaddr,
            tail_markers_vaddr,
            gid,
            srqn,
        })
    }

    /// Writes the record as perftest's rdma_cm exchange (`-R`, `-z`) sends it: the raw
    /// 56-byte `struct pingpong_dest` of an x86-64 build (`perftest_resources.h`), each integer
    /// big-endian (`rdma_write_keys` with `HAVE_ENDIAN`), the 4 bytes of alignment after
    /// `rkey` zero here, the GID index 0. A record without a GID sends the zero GID.
    pub fn emit_binary(&self) -> [u8; BINARY_LEN] {
        let mut b = [0u8; BINARY_LEN];
        b[0..4].copy_from_slice(&u32::from(self.lid).to_be_bytes());
        b[4..8].copy_from_slice(&u32::from(self.out_reads).to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid.unwrap_or([0; 16]));
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b
    }

    /// Reads a binary record ([`Dest::emit_binary`]'s layout) as perftest's `rdma_read_keys`
    /// does: LID, outstanding reads, QPN, PSN, rkey, address and GID; the alignment bytes (a
    /// stock sender's stack garbage), the SRQN and the GID index are not read. LID and
    /// outstanding reads must fit 16 bits, QPN and PSN 24; the zero GID reads as none.
    pub fn parse_binary(b: &[u8]) -> Result<Self, Error> {
        if b.len() != BINARY_LEN {
            return Err(Error::Length {
                got: b.len(),
                want: BINARY_LEN,
            });
        }
        let word = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let narrow = |v: u32, bits: u32, name| {
            if v >> bits == 0 {
                Ok(v)
            } else {
                Err(Error::TooWide(name))
            }
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[32..48]);
        let mut vaddr = [0u8; 8];
        vaddr.copy_from_slice(&b[24..32]);
        Ok(Self {
            lid: narrow(word(0), 16, "lid")? as u16,
            out_reads: narrow(word(4), 16, "out_reads")? as u16,
            qpn: narrow(word(8), 24, "qpn")?,
            psn: narrow(word(12), 24, "psn")?,
            rkey: word(16),
            vaddr: u64::from_be_bytes(vaddr),
            tail_markers_vaddr: None,
            gid: (gid != [0; 16]).then_some(gid),
            srqn: 0,
        })
    }

    /// The GID as an IPv4 address, when it is IPv4-mapped (`::ffff:a.b.c.d`, RoCEv2 over
    /// IPv4).
    pub fn ipv4(&self) -> Option<[u8; 4]> {
        let g = self.gid?;
        (g[..10].iter().all(|&x| x == 0) && g[10] == 0xff && g[11] == 0xff)
            .then(|| [g[12], g[13], g[14], g[15]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// These records were printed by perftest's own format strings (KEY_PRINT_FMT,
    /// KEY_PRINT_FMT_DV, KEY_PRINT_FMT_GID, KEY_PRINT_FMT_GID_DV of
    /// linux-rdma/perftest src/perftest_communication.h) with `sprintf` in C: text, then
    /// the NUL `write(..., sizeof msg)` sends.
    const PLAIN: &[u8] = b"0000:0001:00003d:7cc204:00000d48:000062ac533fd000:00000000\0";
    const PLAIN_DV: &[u8] =
        b"0003:0010:abcdef:123456:deadbeef:ffffffffffffffff:0000000000001000:00000007\0";
    const GID: &[u8] = b"0000:0001:00003d:7cc204:00000d48:000062ac533fd000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:01:10:3d:00000000:\0";
    const GID_DV: &[u8] = b"0000:0001:00003d:7cc204:00000d48:000062ac533fd000:0000000000002000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:01:10:3d:00000042:\0";

    fn base() -> Dest {
        Dest {
            lid: 0,
            out_reads: 1,
            qpn: 0x3d,
            psn: 0x7c_c204,
            rkey: 0xd48,
            vaddr: 0x62ac_533f_d000,
            ..Dest::default()
        }
    }

    const MAPPED: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 16, 61];

    #[test]
    fn the_four_records_are_byte_for_byte_perftests() {
        let cases = [
            (base(), PLAIN),
            (
                Dest {
                    lid: 3,
                    out_reads: 16,
                    qpn: 0xab_cdef,
                    psn: 0x12_3456,
                    rkey: 0xdead_beef,
                    vaddr: u64::MAX,
                    tail_markers_vaddr: Some(0x1000),
                    gid: None,
                    srqn: 7,
                },
                PLAIN_DV,
            ),
            (
                Dest {
                    gid: Some(MAPPED),
                    ..base()
                },
                GID,
            ),
            (
                Dest {
                    gid: Some(MAPPED),
                    tail_markers_vaddr: Some(0x2000),
                    srqn: 0x42,
                    ..base()
                },
                GID_DV,
            ),
        ];
        for (dest, wire) in cases {
            let v = Variant::from_len(wire.len()).expect("a record size");
            assert_eq!(dest.variant(), v);
            let mut buf = [0xaa; 200];
            let n = dest.emit(&mut buf).unwrap();
            assert_eq!(&buf[..n], wire, "{v:?}");
            assert_eq!(Dest::parse(wire, v).unwrap(), dest, "{v:?}");
        }
        assert_eq!(
            Dest::parse(GID, Variant::Gid).unwrap().ipv4(),
            Some([10, 1, 16, 61])
        );
    }

    #[test]
    fn malformed_records_are_refused_with_the_field() {
        let mut bad = PLAIN.to_vec();
        bad[10] = b'g';
        assert_eq!(Dest::parse(&bad, Variant::Plain), Err(Error::Field("qpn")));
        let mut bad = PLAIN.to_vec();
        bad[4] = b'-';
        assert_eq!(Dest::parse(&bad, Variant::Plain), Err(Error::Field("lid")));
        let mut bad = PLAIN.to_vec();
        bad[58] = b'x';
        assert_eq!(Dest::parse(&bad, Variant::Plain), Err(Error::Trailer));
        assert_eq!(
            Dest::parse(&PLAIN[..58], Variant::Plain),
            Err(Error::Length { got: 58, want: 59 })
        );
        assert_eq!(
            Dest::parse(GID, Variant::Plain),
            Err(Error::Length { got: 108, want: 59 })
        );
        // A GID record without its closing ':' after the SRQN.
        let mut bad = GID.to_vec();
        bad[106] = 0;
        assert_eq!(Dest::parse(&bad, Variant::Gid), Err(Error::Field("srqn")));
        let wide = Dest {
            qpn: 0x100_0000,
            ..base()
        };
        assert_eq!(wide.emit(&mut [0; 200]), Err(Error::TooWide("qpn")));
        assert_eq!(
            base().emit(&mut [0; 58]),
            Err(Error::Length { got: 58, want: 59 })
        );
        // Upper-case hex, as sscanf's %x accepts.
        let upper: Vec<u8> = PLAIN.iter().map(|c| c.to_ascii_uppercase()).collect();
        assert_eq!(Dest::parse(&upper, Variant::Plain).unwrap(), base());
    }

    #[test]
    fn any_bytes_parse_or_fail_without_panicking() {
        // Every record with one byte replaced by each value.
        for wire in [PLAIN, PLAIN_DV, GID, GID_DV] {
            let v = Variant::from_len(wire.len()).unwrap();
            for i in 0..wire.len() {
                for c in [0u8, b':', b'0', b'f', b'G', 0xff] {
                    let mut b = wire.to_vec();
                    b[i] = c;
                    if let Ok(d) = Dest::parse(&b, v) {
                        let mut out = [0u8; 125];
                        let n = d.emit(&mut out).unwrap();
                        assert_eq!(Dest::parse(&out[..n], v).unwrap(), d);
                    }
                }
            }
        }
    }

    #[test]
    fn binary_records() {
        // A record as perftest's rdma_write_keys lays it out (big-endian integers, 4 bytes of
        // alignment after rkey, GID raw, SRQN and GID index last).
        let mut wire = [0u8; BINARY_LEN];
        wire[4..8].copy_from_slice(&[0, 0, 0, 16]);
        wire[8..12].copy_from_slice(&[0, 0, 0x00, 0x3d]);
        wire[12..16].copy_from_slice(&[0, 0x7c, 0xc2, 0x04]);
        wire[16..20].copy_from_slice(&[0, 0, 0x0d, 0x48]);
        wire[20..24].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // stack garbage
        wire[24..32].copy_from_slice(&0x0000_62ac_533f_d000u64.to_be_bytes());
        wire[42..48].copy_from_slice(&[0xff, 0xff, 198, 51, 100, 2]);
        wire[52..56].copy_from_slice(&[0, 0, 0, 1]);
        let d = Dest::parse_binary(&wire).unwrap();
        assert_eq!(
            (d.out_reads, d.qpn, d.psn, d.rkey, d.vaddr),
            (16, 0x3d, 0x7c_c204, 0xd48, 0x0000_62ac_533f_d000)
        );
        assert_eq!(d.ipv4(), Some([198, 51, 100, 2]));
        let again = d.emit_binary();
        assert_eq!(&again[..20], &wire[..20]);
        assert_eq!(&again[24..52], &wire[24..52]);
        assert_eq!(Dest::parse_binary(&again), Ok(d));
        assert_eq!(Dest::parse_binary(&[0u8; BINARY_LEN]).unwrap().gid, None);
        let mut bad = wire;
        bad[8] = 1;
        assert_eq!(Dest::parse_binary(&bad), Err(Error::TooWide("qpn")));
        assert!(matches!(
            Dest::parse_binary(&wire[..55]),
            Err(Error::Length { got: 55, want: 56 })
        ));
    }
}
