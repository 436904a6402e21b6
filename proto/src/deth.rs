//! Datagram Extended Transport Header (IBTA Vol 1 §9.3.2; 8 bytes): Q_Key u32, reserved u8,
//! SrcQP u24. Follows the BTH (and RDETH) on UD and RD requests.
use crate::wire::{be24, be32, fixed_view, put24, put32};
use crate::{Layer, QKey, Qpn, Result};

mod field {
    use crate::Field;
    pub(super) const QKEY: Field = 0..4;
    pub(super) const RESV: usize = 4;
    pub(super) const SRC_QP: Field = 5..8;
}

/// Wire length of the DETH.
pub const HEADER_LEN: usize = field::SRC_QP.end;
/// The Q_Key of the GSI QP (QP1).
pub const GSI_QKEY: QKey = QKey(0x8001_0000);

/// A view of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::Deth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Queue key.
    pub fn qkey(&self) -> QKey {
        QKey(be32(&self.buffer.as_ref()[field::QKEY]))
    }
    /// The reserved byte.
    pub fn resv(&self) -> u8 {
        self.buffer.as_ref()[field::RESV]
    }
    /// Source QP.
    pub fn src_qp(&self) -> Qpn {
        Qpn(be24(&self.buffer.as_ref()[field::SRC_QP]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the queue key.
    pub fn set_qkey(&mut self, v: QKey) {
        put32(&mut self.buffer.as_mut()[field::QKEY], v.0);
    }
    /// Sets the reserved byte.
    pub fn set_resv(&mut self, v: u8) {
        self.buffer.as_mut()[field::RESV] = v;
    }
    /// Sets the source QP.
    pub fn set_src_qp(&mut self, v: Qpn) {
        put24(&mut self.buffer.as_mut()[field::SRC_QP], v.0);
    }
}

/// An owned DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// Queue key.
    pub qkey: QKey,
    /// The reserved byte (send 0).
    pub resv: u8,
    /// Source QP.
    pub src_qp: Qpn,
}

impl Repr {
    /// Reads a DETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            qkey: p.qkey(),
            resv: p.resv(),
            src_qp: p.src_qp(),
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
        p.set_qkey(self.qkey);
        p.set_resv(self.resv);
        p.set_src_qp(self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    // DETH of an ibv_ud_pingpong packet: Q_Key 0x11111111, SrcQP 0x12.
    static BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x12];

    #[test]
    fn getters_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(
            (p.qkey(), p.resv(), p.src_qp()),
            (QKey(0x1111_1111), 0, Qpn(0x12))
        );
        let r = Repr::parse(&p).unwrap();
        let mut buf = [0xffu8; 8];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn every_truncated_prefix_is_an_error() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]),
                Err(Error::Truncated {
                    layer: Layer::Deth,
                    needed: 8,
                    got: n
                })
            );
        }
    }
}
