//! Newtypes for the numbers that travel in transport headers.
//!
//! 24-bit quantities (PSN, QPN, MSN) keep the invariant `value < 1 << 24`; constructors mask.
//! PSN arithmetic wraps modulo 2^24 and ordering is only meaningful within half the space
//! (IBTA Vol 1 §9.7.1), so [`Psn`] deliberately has no `PartialOrd`.
use core::fmt;

const MASK24: u32 = 0x00ff_ffff;

/// A 24-bit Packet Sequence Number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Psn(u32);

impl Psn {
    /// The number of distinct PSNs (2^24).
    pub const MODULUS: u32 = 1 << 24;
    /// Half the PSN space: the largest distance over which order is defined.
    pub const HALF: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `v`.
    pub const fn new(v: u32) -> Self {
        Self(v & MASK24)
    }
    /// The PSN as a number below 2^24.
    pub const fn value(self) -> u32 {
        self.0
    }
    /// `self + n` modulo 2^24.
    pub const fn add(self, n: u32) -> Self {
        Self(self.0.wrapping_add(n) & MASK24)
    }
    /// `self - n` modulo 2^24.
    pub const fn sub(self, n: u32) -> Self {
        Self(self.0.wrapping_sub(n) & MASK24)
    }
    /// The PSN after this one.
    pub const fn next(self) -> Self {
        self.add(1)
    }
    /// Forward distance from `earlier` to `self`, modulo 2^24.
    pub const fn distance_from(self, earlier: Self) -> u32 {
        self.0.wrapping_sub(earlier.0) & MASK24
    }
    /// Signed distance `self - other` as rxe computes it: in `-2^23 ..= 2^23 - 1`.
    pub const fn diff(self, other: Self) -> i32 {
        ((self.0.wrapping_sub(other.0)) << 8) as i32 >> 8
    }
    /// `true` when `self` comes strictly before `other` (within half the space).
    pub const fn precedes(self, other: Self) -> bool {
        let d = other.0.wrapping_sub(self.0) & MASK24;
        d != 0 && d < Self::HALF
    }
    /// The 3 big-endian bytes of the wire encoding.
    pub const fn to_be24(self) -> [u8; 3] {
        let b = self.0.to_be_bytes();
        [b[1], b[2], b[3]]
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

macro_rules! int_newtype {
    ($(#[$m:meta])* $name:ident, $ty:ty, $mask:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $ty);

        impl $name {
            /// From the low bits of `v` that fit the wire field.
            pub const fn new(v: $ty) -> Self {
                Self(v & $mask)
            }
            /// The value.
            pub const fn value(self) -> $ty {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }
    };
}

int_newtype!(
    /// A 24-bit Queue Pair Number. `Qpn(1)` is the GSI QP; `0xFFFFFF` is the multicast QPN.
    Qpn, u32, MASK24
);
int_newtype!(
    /// A 16-bit partition key. `0xFFFF` is the default full-member key.
    PKey, u16, 0xffff
);
int_newtype!(
    /// A 32-bit remote memory key.
    RKey, u32, 0xffff_ffff
);
int_newtype!(
    /// A 32-bit queue key (UD, RD).
    QKey, u32, 0xffff_ffff
);
int_newtype!(
    /// A 24-bit Message Sequence Number (AETH).
    Msn, u32, MASK24
);

impl Qpn {
    /// The General Services Interface QP (connection management MADs).
    pub const GSI: Self = Self(1);
    /// The multicast destination QPN.
    pub const MULTICAST: Self = Self(MASK24);
}

impl PKey {
    /// The default, full-member partition key.
    pub const DEFAULT: Self = Self(0xffff);
}

impl Msn {
    /// The MSN after this one, modulo 2^24.
    pub const fn next(self) -> Self {
        Self(self.0.wrapping_add(1) & MASK24)
    }
}

/// The two ECN bits of the IP header (RFC 3168).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ecn {
    /// `00`: not ECN-capable transport.
    #[default]
    NotEct,
    /// `01`: ECN-capable, ECT(1).
    Ect1,
    /// `10`: ECN-capable, ECT(0) (what RoCE NICs send).
    Ect0,
    /// `11`: congestion experienced.
    Ce,
}

impl Ecn {
    /// From the low two bits of the IPv4 TOS / IPv6 traffic class.
    pub const fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => Self::NotEct,
            1 => Self::Ect1,
            2 => Self::Ect0,
            _ => Self::Ce,
        }
    }
    /// The two-bit codepoint.
    pub const fn bits(self) -> u8 {
        match self {
            Self::NotEct => 0,
            Self::Ect1 => 1,
            Self::Ect0 => 2,
            Self::Ce => 3,
        }
    }
    /// Lower-case name: `not-ect`, `ect1`, `ect0`, `ce`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NotEct => "not-ect",
            Self::Ect1 => "ect1",
            Self::Ect0 => "ect0",
            Self::Ce => "ce",
        }
    }
}

impl fmt::Display for Ecn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps_and_orders_within_half_space() {
        let top = Psn::new(0xff_ffff);
        assert_eq!(top.next(), Psn::new(0));
        assert!(top.precedes(Psn::new(0)));
        assert!(!Psn::new(0).precedes(top));
        assert_eq!(Psn::new(5).diff(top), 6);
        assert_eq!(top.diff(Psn::new(5)), -6);
        // Exactly half the space ahead counts as behind (rxe's signed 24-bit compare).
        assert!(!Psn::new(0).precedes(Psn::new(1 << 23)));
        assert_eq!(Psn::new(1 << 23).diff(Psn::new(0)), -(1 << 23));
        assert_eq!(Psn::new(3).distance_from(Psn::new(0xff_fffe)), 5);
        assert_eq!(Psn::new(0x12_3456).to_be24(), [0x12, 0x34, 0x56]);
        assert_eq!(Psn::new(0x1ff_ffff).value(), 0xff_ffff);
    }

    #[test]
    fn ecn_codepoints() {
        for b in 0..4 {
            assert_eq!(Ecn::from_bits(b).bits(), b);
        }
        assert_eq!(Ecn::from_bits(0xc3), Ecn::Ce);
        assert_eq!(Ecn::Ect0.name(), "ect0");
    }
}
