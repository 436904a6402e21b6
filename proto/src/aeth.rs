//! ACK Extended Transport Header (IBTA Vol 1 §9.3.5; 4 bytes): Syndrome u8, MSN u24.
//!
//! The syndrome says what kind of acknowledgement this is:
//!
//! | bits 6..5 | kind | bits 4..0 |
//! |---|---|---|
//! | `00` | ACK | credit code ([`credits`]) |
//! | `01` | RNR NAK | RNR timer code ([`rnr_timer_ns`]) |
//! | `10` | reserved | |
//! | `11` | NAK | [`NakCode`] |
use crate::wire::{be24, fixed_view, put24};
use crate::{Layer, Msn, Result};
use core::fmt;

mod field {
    use crate::Field;
    pub(super) const SYNDROME: usize = 0;
    pub(super) const MSN: Field = 1..4;
}

/// Wire length of the AETH.
pub const HEADER_LEN: usize = field::MSN.end;

/// A NAK code (syndrome bits 4..0 when bits 6..5 are `11`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error; the requester goes back to the NAK's PSN.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error (R_Key, bounds, access flags).
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request (RD only).
    InvalidRdRequest,
    /// 5..=31: reserved.
    Reserved(u8),
}

impl NakCode {
    /// From the five-bit code.
    pub const fn from_code(c: u8) -> Self {
        match c & 0x1f {
            0 => Self::PsnSequenceError,
            1 => Self::InvalidRequest,
            2 => Self::RemoteAccessError,
            3 => Self::RemoteOperationalError,
            4 => Self::InvalidRdRequest,
            c => Self::Reserved(c),
        }
    }
    /// The five-bit code.
    pub const fn code(self) -> u8 {
        match self {
            Self::PsnSequenceError => 0,
            Self::InvalidRequest => 1,
            Self::RemoteAccessError => 2,
            Self::RemoteOperationalError => 3,
            Self::InvalidRdRequest => 4,
            Self::Reserved(c) => c & 0x1f,
        }
    }
    /// Short name, e.g. `psn_seq_error`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::PsnSequenceError => "psn_seq_error",
            Self::InvalidRequest => "invalid_request",
            Self::RemoteAccessError => "remote_access_error",
            Self::RemoteOperationalError => "remote_op_error",
            Self::InvalidRdRequest => "invalid_rd_request",
            Self::Reserved(_) => "reserved",
        }
    }
}

/// What a syndrome means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethKind {
    /// Positive acknowledgement with an end-to-end credit code (31 = no credit information).
    Ack {
        /// Five-bit credit code.
        credit: u8,
    },
    /// Receiver not ready: retry after the coded time.
    RnrNak {
        /// Five-bit RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Bits 6..5 = `10`: reserved.
    Reserved {
        /// Bits 4..0.
        value: u8,
    },
}

impl AethKind {
    /// `ack`, `rnr_nak`, `nak` or `reserved`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Ack { .. } => "ack",
            Self::RnrNak { .. } => "rnr_nak",
            Self::Nak(_) => "nak",
            Self::Reserved { .. } => "reserved",
        }
    }
    /// The five-bit value: credit code, timer code or NAK code.
    pub const fn value(self) -> u8 {
        match self {
            Self::Ack { credit } => credit,
            Self::RnrNak { timer } => timer,
            Self::Nak(c) => c.code(),
            Self::Reserved { value } => value,
        }
    }
}

/// The 8-bit AETH syndrome. Open: every value round-trips, including bit 7 (reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Syndrome(pub u8);

impl Syndrome {
    /// The ACK rxe (and most software) sends: credit code 31, "no credit information".
    pub const ACK_UNLIMITED: Self = Self(0x1f);

    /// An ACK with the given credit code.
    pub const fn ack(credit: u8) -> Self {
        Self(credit & 0x1f)
    }
    /// An RNR NAK with the given timer code.
    pub const fn rnr_nak(timer: u8) -> Self {
        Self(0x20 | (timer & 0x1f))
    }
    /// A NAK with the given code.
    pub const fn nak(code: NakCode) -> Self {
        Self(0x60 | code.code())
    }
    /// The decoded meaning.
    pub const fn kind(self) -> AethKind {
        let v = self.0 & 0x1f;
        match (self.0 >> 5) & 3 {
            0 => AethKind::Ack { credit: v },
            1 => AethKind::RnrNak { timer: v },
            2 => AethKind::Reserved { value: v },
            _ => AethKind::Nak(NakCode::from_code(v)),
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            AethKind::Ack { credit: 31 } => f.write_str("ACK"),
            AethKind::Ack { credit } => write!(f, "ACK credit={}", credits(credit).unwrap_or(0)),
            AethKind::RnrNak { timer } => write!(f, "RNR_NAK timer={timer}"),
            AethKind::Nak(c) => write!(f, "NAK {}", c.name()),
            AethKind::Reserved { value } => write!(f, "RESERVED {value:#x}"),
        }
    }
}

const CREDITS: [u16; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// Credits a credit code grants; `None` for code 31 ("invalid": no credit information).
pub const fn credits(code: u8) -> Option<u16> {
    let c = (code & 0x1f) as usize;
    if c < CREDITS.len() {
        Some(CREDITS[c])
    } else {
        None
    }
}

/// RNR NAK timer codes in units of 10 µs (code 0 = 655.36 ms).
const RNR_10US: [u32; 32] = [
    65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
];

/// The minimum time an RNR NAK with this timer code asks the requester to wait, in ns.
pub const fn rnr_timer_ns(code: u8) -> u64 {
    RNR_10US[(code & 0x1f) as usize] as u64 * 10_000
}

/// A view of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::Aeth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Syndrome.
    pub fn syndrome(&self) -> Syndrome {
        Syndrome(self.buffer.as_ref()[field::SYNDROME])
    }
    /// Message sequence number.
    pub fn msn(&self) -> Msn {
        Msn(be24(&self.buffer.as_ref()[field::MSN]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the syndrome.
    pub fn set_syndrome(&mut self, v: Syndrome) {
        self.buffer.as_mut()[field::SYNDROME] = v.0;
    }
    /// Sets the MSN.
    pub fn set_msn(&mut self, v: Msn) {
        put24(&mut self.buffer.as_mut()[field::MSN], v.0);
    }
}

/// An owned AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// MSN.
    pub msn: Msn,
}

impl Repr {
    /// Reads an AETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            syndrome: p.syndrome(),
            msn: p.msn(),
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
        p.set_syndrome(self.syndrome);
        p.set_msn(self.msn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    // AETH of vector C: ACK, no credit information, MSN 7.
    static BYTES: [u8; 4] = [0x1f, 0x00, 0x00, 0x07];

    #[test]
    fn getters_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.syndrome(), Syndrome::ACK_UNLIMITED);
        assert_eq!(p.msn(), Msn(7));
        let r = Repr::parse(&p).unwrap();
        let mut buf = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn syndromes_decode() {
        assert_eq!(Syndrome(0x1f).kind(), AethKind::Ack { credit: 31 });
        assert_eq!(Syndrome(0x05).kind(), AethKind::Ack { credit: 5 });
        assert_eq!(Syndrome(0x2e).kind(), AethKind::RnrNak { timer: 14 });
        assert_eq!(
            Syndrome(0x60).kind(),
            AethKind::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome(0x62).kind(),
            AethKind::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(Syndrome(0x67).kind(), AethKind::Nak(NakCode::Reserved(7)));
        assert_eq!(Syndrome(0x41).kind(), AethKind::Reserved { value: 1 });
        assert_eq!(Syndrome::nak(NakCode::InvalidRequest), Syndrome(0x61));
        assert_eq!(Syndrome::rnr_nak(18), Syndrome(0x32));
        for s in 0..=0x7f_u8 {
            let k = Syndrome(s).kind();
            let back = match k {
                AethKind::Ack { credit } => Syndrome::ack(credit),
                AethKind::RnrNak { timer } => Syndrome::rnr_nak(timer),
                AethKind::Nak(c) => Syndrome::nak(c),
                AethKind::Reserved { value } => Syndrome(0x40 | value),
            };
            assert_eq!(back, Syndrome(s));
        }
    }

    #[test]
    fn tables() {
        assert_eq!(credits(0), Some(0));
        assert_eq!(credits(5), Some(6));
        assert_eq!(credits(30), Some(32768));
        assert_eq!(credits(31), None);
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(25), 61_440_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
    }

    #[test]
    fn every_truncated_prefix_is_an_error() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]),
                Err(Error::Truncated {
                    layer: Layer::Aeth,
                    needed: 4,
                    got: n
                })
            );
        }
    }
}
