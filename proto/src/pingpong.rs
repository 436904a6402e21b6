//! The verbs examples' connection exchange: the text record `ibv_rc_pingpong`,
//! `ibv_uc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong` (rdma-core
//! `libibverbs/examples/`) write to each other over TCP (port 18515 by default) before their
//! SEND ping-pong.
//!
//! One record is `sprintf("%04x:%06x:%06x:%s", lid, qpn, psn, gid)` and its NUL: exactly
//! [`RECORD_LEN`] (52) bytes, sent in one `write`. The GID is its 16 bytes in wire order as 32
//! lowercase hex digits (`gid_to_wire_gid` prints each big-endian 32-bit word); a tool run
//! without `-g` sends 16 zero bytes there. The client writes first, the server answers with
//! its record and the client closes with [`DONE`] (`"done"` and its NUL, 5 bytes).
//! `ibv_srq_pingpong` sends [`SRQ_RECORDS`] records each way whatever its `-q`, the unused
//! ones all zero. [`Record::parse`] is strict (every field as many hex digits as the format
//! prints, the separators where they belong, a NUL after the GID): a peer's record is hostile
//! input.
use core::fmt;

use crate::types::{Psn, Qpn};

/// Bytes of one record, NUL included (`sizeof "0000:000000:000000:" + 32 hex digits`).
pub const RECORD_LEN: usize = 52;

/// What the client writes after the server's records: `"done"` and its NUL.
pub const DONE: &[u8; 5] = b"done\0";

/// Records `ibv_srq_pingpong` sends each way (its `MAX_QP`).
pub const SRQ_RECORDS: usize = 256;

/// The Q_Key `ibv_ud_pingpong` gives its QP and every send.
pub const UD_QKEY: u32 = 0x1111_1111;

/// One side's address record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Record {
    /// Local identifier (0 on RoCE).
    pub lid: u16,
    /// QP number.
    pub qpn: Qpn,
    /// The first PSN this side sends.
    pub psn: Psn,
    /// The GID (on RoCEv2 an IPv4-mapped or IPv6 address; zero when the tool had no `-g`).
    pub gid: [u8; 16],
}

/// Why a record does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Not [`RECORD_LEN`] bytes.
    Length(usize),
    /// A field is not the hex digits the format prints, or a separator is missing.
    Field(&'static str),
    /// The byte after the GID is not the NUL.
    Trailer,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "pingpong record: {n} bytes, the format takes 52"),
            Self::Field(name) => write!(f, "pingpong record: field {name} is malformed"),
            Self::Trailer => write!(f, "pingpong record: no NUL after the GID"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn put(buf: &mut [u8], at: &mut usize, v: u64, digits: usize) {
    for i in 0..digits {
        buf[*at + i] = HEX[((v >> (4 * (digits - 1 - i))) & 0xf) as usize];
    }
    *at += digits;
}

fn get(b: &[u8], at: &mut usize, digits: usize, name: &'static str) -> Result<u64, Error> {
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
    Ok(v)
}

fn sep(b: &[u8], at: &mut usize, name: &'static str) -> Result<(), Error> {
    if b.get(*at) != Some(&b':') {
        return Err(Error::Field(name));
    }
    *at += 1;
    Ok(())
}

impl Record {
    /// The record of an unused `ibv_srq_pingpong` slot (all fields zero).
    pub const ZERO: Self = Self {
        lid: 0,
        qpn: Qpn(0),
        psn: Psn::new(0),
        gid: [0; 16],
    };

    /// The record as the tools write it: text and NUL, [`RECORD_LEN`] bytes. QPN and PSN are
    /// taken to their 24 bits.
    pub fn emit(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        let mut at = 0;
        put(&mut b, &mut at, u64::from(self.lid), 4);
        b[at] = b':';
        at += 1;
        put(&mut b, &mut at, u64::from(self.qpn.0 & 0xff_ffff), 6);
        b[at] = b':';
        at += 1;
        put(&mut b, &mut at, u64::from(self.psn.value()), 6);
        b[at] = b':';
        at += 1;
        for g in self.gid {
            put(&mut b, &mut at, u64::from(g), 2);
        }
        debug_assert_eq!(at, RECORD_LEN - 1);
        b
    }

    /// Parses one record of exactly [`RECORD_LEN`] bytes.
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() != RECORD_LEN {
            return Err(Error::Length(b.len()));
        }
        let mut at = 0;
        let lid = get(b, &mut at, 4, "lid")? as u16;
        sep(b, &mut at, "lid")?;
        let qpn = get(b, &mut at, 6, "qpn")? as u32;
        sep(b, &mut at, "qpn")?;
        let psn = get(b, &mut at, 6, "psn")? as u32;
        sep(b, &mut at, "psn")?;
        let mut gid = [0u8; 16];
        for g in &mut gid {
            *g = get(b, &mut at, 2, "gid")? as u8;
        }
        if b[at] != 0 {
            return Err(Error::Trailer);
        }
        Ok(Self {
            lid,
            qpn: Qpn(qpn),
            psn: Psn::new(psn),
            gid,
        })
    }

    /// `true` for an all-zero GID: the peer ran without `-g` and cannot be reached on RoCE.
    pub fn gid_is_zero(&self) -> bool {
        self.gid == [0; 16]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emits_what_the_tools_print() {
        // The worked example: LID 0, QPN 0x11, PSN 0x3a2b1c, GID ::ffff:192.168.122.10.
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[192, 168, 122, 10]);
        let r = Record {
            lid: 0,
            qpn: Qpn(0x11),
            psn: Psn::new(0x3a2b1c),
            gid,
        };
        let b = r.emit();
        assert_eq!(
            &b[..51],
            b"0000:000011:3a2b1c:00000000000000000000ffffc0a87a0a"
        );
        assert_eq!(b[51], 0);
        assert_eq!(Record::parse(&b), Ok(r));
        assert_eq!(
            &Record::ZERO.emit()[..],
            b"0000:000000:000000:00000000000000000000000000000000\0"
        );
        assert!(Record::ZERO.gid_is_zero() && !r.gid_is_zero());
    }

    #[test]
    fn refuses_what_the_format_cannot_print() {
        let good = *b"0000:000011:3a2b1c:00000000000000000000ffffc0a87a0a\0";
        assert_eq!(Record::parse(&good[..51]), Err(Error::Length(51)));
        let mut b = good;
        b[4] = b'-';
        assert_eq!(Record::parse(&b), Err(Error::Field("lid")));
        let mut b = good;
        b[7] = b'g';
        assert_eq!(Record::parse(&b), Err(Error::Field("qpn")));
        let mut b = good;
        b[30] = b' ';
        assert_eq!(Record::parse(&b), Err(Error::Field("gid")));
        let mut b = good;
        b[51] = b'x';
        assert_eq!(Record::parse(&b), Err(Error::Trailer));
        // Upper case parses, as sscanf's %x does.
        let mut b = good;
        b[15] = b'B';
        assert_eq!(Record::parse(&b).map(|r| r.psn.value()), Ok(0x3a2b1c));
    }

    #[test]
    fn any_bytes_parse_or_fail_without_panic() {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..20_000 {
            let mut b = [0u8; RECORD_LEN];
            for v in &mut b {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = b"0123456789abcdef:\0z"[(x % 19) as usize];
            }
            if let Ok(r) = Record::parse(&b) {
                assert_eq!(Record::parse(&r.emit()), Ok(r));
            }
        }
    }
}
