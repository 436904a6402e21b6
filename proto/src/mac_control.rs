//! MAC Control frames (IEEE 802.3 clause 31, EtherType 0x8808): PAUSE (annex 31B, opcode
//! 0x0001) and Priority-based Flow Control (IEEE 802.1Qbb, opcode 0x0101), what a lossless
//! RoCE fabric uses to stop a link or one of its eight priorities. A quantum is 512 bit
//! times of the link ([`pause_ns`]).
use crate::error::need;
use crate::{Error, Layer, Result};

/// The EtherType of MAC Control frames.
pub const ETHERTYPE: u16 = 0x8808;

/// The opcode of PAUSE.
pub const OPCODE_PAUSE: u16 = 0x0001;

/// The opcode of PFC.
pub const OPCODE_PFC: u16 = 0x0101;

/// The destination MAC of both (the slow-protocols multicast address, clause 31B.1).
pub const DESTINATION: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x01];

/// A MAC Control frame, from its opcode on (the bytes after the EtherType).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// PAUSE: stop the whole link for `quanta` (0 resumes it).
    Pause {
        /// Pause time in quanta.
        quanta: u16,
    },
    /// PFC: for each priority whose bit is set in `enable`, stop it for its `quanta`.
    Pfc {
        /// Class-enable vector (bit n: priority n).
        enable: u8,
        /// Pause time per priority in quanta (0 resumes it).
        quanta: [u16; 8],
    },
    /// Another MAC Control opcode (e.g. EPON's), kept as its number.
    Other {
        /// The opcode.
        opcode: u16,
    },
}

/// Bytes a PFC frame's fields take after the EtherType (opcode, vector, eight times).
pub const PFC_LEN: usize = 2 + 2 + 16;

impl Repr {
    /// Reads the fields after the EtherType.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ethernet, b, 2)?;
        let be = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        Ok(match be(0) {
            OPCODE_PAUSE => {
                need(Layer::Ethernet, b, 4)?;
                Self::Pause { quanta: be(2) }
            }
            OPCODE_PFC => {
                need(Layer::Ethernet, b, PFC_LEN)?;
                let vector = be(2);
                if vector > 0xff {
                    return Err(Error::Malformed {
                        layer: Layer::Ethernet,
                        reason: "PFC class-enable vector beyond priority 7",
                    });
                }
                let mut quanta = [0u16; 8];
                for (i, q) in quanta.iter_mut().enumerate() {
                    *q = be(4 + 2 * i);
                }
                Self::Pfc {
                    enable: vector as u8,
                    quanta,
                }
            }
            opcode => Self::Other { opcode },
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        match self {
            Self::Pause { .. } => 4,
            Self::Pfc { .. } => PFC_LEN,
            Self::Other { .. } => 2,
        }
    }

    /// Writes the fields after the EtherType (a frame is padded to 64 bytes by its sender).
    ///
    /// # Panics
    /// If `buf` is shorter than [`Repr::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) {
        let mut put = |i: usize, v: u16| buf[i..i + 2].copy_from_slice(&v.to_be_bytes());
        match *self {
            Self::Pause { quanta } => {
                put(0, OPCODE_PAUSE);
                put(2, quanta);
            }
            Self::Pfc { enable, quanta } => {
                put(0, OPCODE_PFC);
                put(2, u16::from(enable));
                for (i, q) in quanta.iter().enumerate() {
                    put(4 + 2 * i, *q);
                }
            }
            Self::Other { opcode } => put(0, opcode),
        }
    }
}

/// Bytes of a minimum-size Ethernet frame without its FCS, as captures hold it.
pub const MIN_FRAME: usize = 60;

/// A whole PFC frame (IEEE 802.1Qbb) from `src_mac` pausing `priority` (0..=7) for `quanta`
/// (0 resumes it), padded to the minimum frame size: destination 01:80:C2:00:00:01, EtherType
/// 0x8808, opcode 0x0101, the class-enable vector with that priority's bit, the eight times.
pub fn pfc_frame(src_mac: [u8; 6], priority: u8, quanta: u16) -> [u8; MIN_FRAME] {
    let mut f = [0u8; MIN_FRAME];
    f[..6].copy_from_slice(&DESTINATION);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    let p = usize::from(priority & 7);
    let mut times = [0u16; 8];
    times[p] = quanta;
    Repr::Pfc {
        enable: 1 << p,
        quanta: times,
    }
    .emit(&mut f[14..14 + PFC_LEN]);
    f
}

/// How long `quanta` pause a link of `bps` bits per second (a quantum is 512 bit times).
pub const fn pause_ns(quanta: u16, bps: u64) -> u64 {
    if bps == 0 {
        return 0;
    }
    (quanta as u64 * 512 * 1_000_000_000) / bps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_pfc_frame_parses_back() {
        let f = pfc_frame([2, 0, 0, 0, 0, 0xfe], 3, 0xffff);
        assert_eq!(&f[..6], &DESTINATION);
        assert_eq!(&f[12..14], &[0x88, 0x08]);
        assert_eq!(
            Repr::parse(&f[14..]).unwrap(),
            Repr::Pfc {
                enable: 0b1000,
                quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0]
            }
        );
        assert!(f[14 + PFC_LEN..].iter().all(|&b| b == 0));
    }

    #[test]
    fn pfc_and_pause_round_trip_and_bad_vectors_are_errors() {
        let pfc = Repr::Pfc {
            enable: 0b0000_1000,
            quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
        };
        let mut b = [0u8; PFC_LEN];
        pfc.emit(&mut b);
        assert_eq!(&b[..4], &[0x01, 0x01, 0x00, 0x08]);
        assert_eq!(Repr::parse(&b), Ok(pfc));
        let pause = Repr::Pause { quanta: 0x1234 };
        let mut p = [0u8; 4];
        pause.emit(&mut p);
        assert_eq!(p, [0, 1, 0x12, 0x34]);
        assert_eq!(Repr::parse(&p), Ok(pause));
        b[2] = 1;
        assert!(Repr::parse(&b).is_err());
        assert!(Repr::parse(&b[..10]).is_err());
        assert_eq!(Repr::parse(&[0x00, 0x03]), Ok(Repr::Other { opcode: 3 }));
        // 65535 quanta at 100 Gb/s: 335.5 µs.
        assert_eq!(pause_ns(0xffff, 100_000_000_000), 335_539);
    }
}
