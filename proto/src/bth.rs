//! Base Transport Header (IBTA Vol 1 §9.2; 12 bytes, big-endian).
//!
//! ```text
//!  byte 0      byte 1                 bytes 2-3     byte 4                 bytes 5-7
//! | OpCode | SE|M|PadCnt:2|TVer:4 |    P_Key    | FECN|BECN|Resv6a |      DestQP       |
//!  byte 8                 bytes 9-11
//! | A | Resv7:7 |           PSN           |
//! ```
use crate::wire::{be16, be24, fixed_view, put16, put24};
use crate::{Error, Layer, Opcode, PKey, Psn, Qpn, Result};

mod field {
    use crate::Field;
    pub(super) const OPCODE: usize = 0;
    /// SE | M | PadCnt:2 | TVer:4
    pub(super) const FLAGS: usize = 1;
    pub(super) const PKEY: Field = 2..4;
    /// FECN | BECN | Resv6a:6 (masked in the ICRC)
    pub(super) const CN: usize = 4;
    pub(super) const DEST_QP: Field = 5..8;
    /// A | Resv7:7
    pub(super) const ACK_REQ: usize = 8;
    pub(super) const PSN: Field = 9..12;
}

/// Wire length of the BTH.
pub const HEADER_LEN: usize = field::PSN.end;
/// Offset of the byte holding FECN, BECN and Resv6a, which the ICRC masks.
pub const CN_BYTE_OFFSET: usize = field::CN;

/// A view of a BTH. After `check_len` is `Ok`, no accessor panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fixed_view!(Layer::Bth, HEADER_LEN);

impl<T: AsRef<[u8]>> Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// SE: solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// M: migration request (APM).
    pub fn migreq(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// PadCnt: pad bytes between the payload and the ICRC (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 3
    }
    /// TVer: transport header version, 0 for every current packet.
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// P_Key.
    pub fn pkey(&self) -> PKey {
        PKey(be16(&self.b()[field::PKEY]))
    }
    /// FECN: forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::CN] & 0x80 != 0
    }
    /// BECN: backward explicit congestion notification (set in CNPs).
    pub fn becn(&self) -> bool {
        self.b()[field::CN] & 0x40 != 0
    }
    /// The six reserved bits after BECN (Resv6a).
    pub fn resv6a(&self) -> u8 {
        self.b()[field::CN] & 0x3f
    }
    /// DestQP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn(be24(&self.b()[field::DEST_QP]))
    }
    /// A: acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK_REQ] & 0x80 != 0
    }
    /// The seven reserved bits after AckReq (Resv7).
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK_REQ] & 0x7f
    }
    /// PSN.
    pub fn psn(&self) -> Psn {
        Psn::new(be24(&self.b()[field::PSN]))
    }
}

fn set_bit(byte: &mut u8, mask: u8, on: bool) {
    if on {
        *byte |= mask;
    } else {
        *byte &= !mask;
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets OpCode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.m()[field::OPCODE] = v.0;
    }
    /// Sets SE.
    pub fn set_solicited(&mut self, v: bool) {
        set_bit(&mut self.m()[field::FLAGS], 0x80, v);
    }
    /// Sets M.
    pub fn set_migreq(&mut self, v: bool) {
        set_bit(&mut self.m()[field::FLAGS], 0x40, v);
    }
    /// Sets PadCnt (low two bits of `v`).
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.m()[field::FLAGS];
        *b = (*b & !0x30) | ((v & 3) << 4);
    }
    /// Sets TVer (low four bits of `v`).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.m()[field::FLAGS];
        *b = (*b & !0x0f) | (v & 0x0f);
    }
    /// Sets P_Key.
    pub fn set_pkey(&mut self, v: PKey) {
        put16(&mut self.m()[field::PKEY], v.0);
    }
    /// Sets FECN.
    pub fn set_fecn(&mut self, v: bool) {
        set_bit(&mut self.m()[field::CN], 0x80, v);
    }
    /// Sets BECN.
    pub fn set_becn(&mut self, v: bool) {
        set_bit(&mut self.m()[field::CN], 0x40, v);
    }
    /// Sets Resv6a (low six bits of `v`).
    pub fn set_resv6a(&mut self, v: u8) {
        let b = &mut self.m()[field::CN];
        *b = (*b & 0xc0) | (v & 0x3f);
    }
    /// Sets DestQP.
    pub fn set_dest_qp(&mut self, v: Qpn) {
        put24(&mut self.m()[field::DEST_QP], v.0);
    }
    /// Sets A.
    pub fn set_ack_req(&mut self, v: bool) {
        set_bit(&mut self.m()[field::ACK_REQ], 0x80, v);
    }
    /// Sets Resv7 (low seven bits of `v`).
    pub fn set_resv7(&mut self, v: u8) {
        let b = &mut self.m()[field::ACK_REQ];
        *b = (*b & 0x80) | (v & 0x7f);
    }
    /// Sets PSN.
    pub fn set_psn(&mut self, v: Psn) {
        self.m()[field::PSN].copy_from_slice(&v.to_be24());
    }
}

/// An owned, validated BTH. Reserved fields are kept so that any header round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// OpCode.
    pub opcode: Opcode,
    /// SE.
    pub solicited: bool,
    /// M (MigReq).
    pub migreq: bool,
    /// PadCnt (0..=3).
    pub pad_count: u8,
    /// TVer (0..=15; only 0 is conformant).
    pub tver: u8,
    /// P_Key.
    pub pkey: PKey,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Resv6a (0..=63; send 0).
    pub resv6a: u8,
    /// DestQP (24 bits).
    pub dest_qp: Qpn,
    /// A (AckReq).
    pub ack_req: bool,
    /// Resv7 (0..=127; send 0).
    pub resv7: u8,
    /// PSN.
    pub psn: Psn,
}

impl Repr {
    /// Reads a BTH. Every bit pattern is a valid BTH; TVer is checked by the packet layer.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            opcode: p.opcode(),
            solicited: p.solicited(),
            migreq: p.migreq(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            resv6a: p.resv6a(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            resv7: p.resv7(),
            psn: p.psn(),
        })
    }

    /// The wire length (always [`HEADER_LEN`]).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Checks that every field fits its wire width.
    pub fn check(&self) -> Result<()> {
        let bad = |reason| {
            Err(Error::Malformed {
                layer: Layer::Bth,
                reason,
            })
        };
        if self.pad_count > 3 {
            return bad("pad count above 3");
        }
        if self.tver > 15 {
            return bad("tver above 15");
        }
        if self.resv6a > 63 || self.resv7 > 127 {
            return bad("reserved field wider than its bits");
        }
        if self.dest_qp.0 > 0xff_ffff {
            return bad("dest QP above 24 bits");
        }
        Ok(())
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of the packet's buffer.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.buffer.as_mut();
        b[field::OPCODE] = self.opcode.0;
        b[field::FLAGS] = (u8::from(self.solicited) << 7)
            | (u8::from(self.migreq) << 6)
            | ((self.pad_count & 3) << 4)
            | (self.tver & 0x0f);
        put16(&mut b[field::PKEY], self.pkey.0);
        b[field::CN] =
            (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6) | (self.resv6a & 0x3f);
        put24(&mut b[field::DEST_QP], self.dest_qp.0);
        b[field::ACK_REQ] = (u8::from(self.ack_req) << 7) | (self.resv7 & 0x7f);
        b[field::PSN].copy_from_slice(&self.psn.to_be24());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // BTH of scapy's test/contrib/roce.uts "RoCE layer" frame: UC SEND Only, M=1, PadCnt 2, PSN 0xCF1710.
    static BYTES: [u8; 12] = [
        0x24, // opcode: UC SEND Only
        0x60, // SE 0, M 1, PadCnt 2, TVer 0
        0xff, 0xff, // P_Key
        0x00, // FECN 0, BECN 0, resv 0
        0x00, 0x00, 0xd3, // DestQP 211
        0x00, // A 0
        0xcf, 0x17, 0x10, // PSN
    ];

    fn repr() -> Repr {
        Repr {
            opcode: Opcode::UC_SEND_ONLY,
            migreq: true,
            pad_count: 2,
            pkey: PKey::DEFAULT,
            dest_qp: Qpn(211),
            psn: Psn::new(0xcf1710),
            ..Repr::default()
        }
    }

    #[test]
    fn getters() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.opcode(), Opcode::UC_SEND_ONLY);
        assert!(!p.solicited());
        assert!(p.migreq());
        assert_eq!(p.pad_count(), 2);
        assert_eq!(p.tver(), 0);
        assert_eq!(p.pkey(), PKey(0xffff));
        assert!(!p.fecn() && !p.becn());
        assert_eq!(p.dest_qp(), Qpn(211));
        assert!(!p.ack_req());
        assert_eq!(p.psn(), Psn::new(0xcf1710));
    }

    #[test]
    fn setters() {
        let mut buf = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_opcode(Opcode::UC_SEND_ONLY);
        p.set_migreq(true);
        p.set_pad_count(2);
        p.set_pkey(PKey::DEFAULT);
        p.set_dest_qp(Qpn(211));
        p.set_psn(Psn::new(0xcf1710));
        assert_eq!(buf, BYTES);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_becn(true);
        p.set_fecn(true);
        p.set_resv6a(0xff);
        p.set_ack_req(true);
        p.set_resv7(0x01);
        p.set_tver(0x1f);
        p.set_solicited(true);
        assert_eq!(buf[4], 0xff);
        assert_eq!(buf[8], 0x81);
        assert_eq!(buf[1], 0xef);
    }

    #[test]
    fn parse_and_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        let mut buf = [0xaau8; 12];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn every_truncated_prefix_is_an_error() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]),
                Err(Error::Truncated {
                    layer: Layer::Bth,
                    needed: 12,
                    got: n
                })
            );
        }
    }
}
