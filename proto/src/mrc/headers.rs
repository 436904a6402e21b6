//! The MRC extended transport headers, each an owned `Copy` value read from and written to
//! a byte slice, every bit kept (reserved fields included, so that a crafted packet and a
//! captured one round-trip byte for byte).
//!
//! Layouts: OCP Multipath Reliable Connection 1.0 (21 March 2026), as the two public
//! serialisers of it agree (the ns-3 model's `mrc-header.cc` and the MRC emulator's
//! `mrc_headers.py`); the specification text itself is not public. Offsets are from the
//! header's first byte, fields big-endian, bit 0 the most significant of its byte.
use crate::error::need;
use crate::wire::{be16, be24, be32, be64, get_bits, put16, put24, put32, put64, set_bits};
use crate::{Layer, Psn, Result};

/// The 4-bit type and 1-bit TSR flag that end the TSETH, PETH and ERTH: `TSR(1) |
/// reserved(11) | ftype(4)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TsWord(pub u16);

impl TsWord {
    /// The word ns-3 writes: no TSR, ftype 1.
    pub const DEFAULT: Self = Self(0x0001);
    /// Timestamp-response flag.
    pub const fn tsr(self) -> bool {
        self.0 & 0x8000 != 0
    }
    /// The frame type (1 in every known writer).
    pub const fn ftype(self) -> u8 {
        (self.0 & 0xf) as u8
    }
    /// The 11 reserved bits between them.
    pub const fn reserved(self) -> u16 {
        (self.0 >> 4) & 0x7ff
    }
}

/// METH (4 bytes), after the BTH of every MRC WRITE packet: `RQMSN u16 | MSN u16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Meth {
    /// Receive-queue message sequence number (allocated only for WRITE with immediate).
    pub rqmsn: u16,
    /// Message sequence number.
    pub msn: u16,
}

impl Meth {
    /// Wire length.
    pub const LEN: usize = 4;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Meth, b, Self::LEN)?;
        Ok(Self {
            rqmsn: be16(b),
            msn: be16(&b[2..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Meth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.rqmsn);
        put16(&mut b[2..], self.msn);
    }
}

/// TSETH (4 bytes), the sender's timestamp: `tx_timestamp u16 | TSR(1) reserved(11)
/// ftype(4)`. ns-3 counts the timestamp in 128 ns units, modulo 2^16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tseth {
    /// Transmit timestamp.
    pub tx_timestamp: u16,
    /// TSR, reserved bits and ftype.
    pub word: TsWord,
}

impl Tseth {
    /// Wire length.
    pub const LEN: usize = 4;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Tseth, b, Self::LEN)?;
        Ok(Self {
            tx_timestamp: be16(b),
            word: TsWord(be16(&b[2..])),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Tseth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.tx_timestamp);
        put16(&mut b[2..], self.word.0);
    }
}

/// What a SACK's receiver asks of the sender's entropy value (SETH `M`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipMode {
    /// 0: keep using it.
    None,
    /// 1: skip it once (the forward path was ECN-marked).
    SkipOnce,
    /// 2: skip it always.
    AlwaysSkip,
    /// 3: not defined (ns-3 refuses it).
    Reserved,
}

impl SkipMode {
    /// From the 2-bit field.
    pub const fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => Self::None,
            1 => Self::SkipOnce,
            2 => Self::AlwaysSkip,
            _ => Self::Reserved,
        }
    }
    /// The 2-bit field.
    pub const fn bits(self) -> u8 {
        match self {
            Self::None => 0,
            Self::SkipOnce => 1,
            Self::AlwaysSkip => 2,
            Self::Reserved => 3,
        }
    }
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::SkipOnce => "skip_once",
            Self::AlwaysSkip => "always_skip",
            Self::Reserved => "reserved",
        }
    }
}

/// SETH (28 bytes), opcode 0xDC, always followed by a [`CcState`].
///
/// Byte 0-1: `res_type(4) | res_nxt(5) | M(2) | reserved(3) | PR(1) | reserved(1)` (the first
/// two fields mirror UET's PDS prologue and are zero in MRC); @2 ack_psn_offset i16 (the
/// triggering PSN is cack_psn + offset); @4 the entropy value of the data packet that
/// triggered the SACK; @8 SPDCID; @10 DPDCID; @12 reserved u8; @13 cack_psn u24; @16
/// cc_type(4) | cc_flags(4); @17 MPR (units of 128 PSNs); @18 sack_offset i16 (the bitmap's
/// base PSN is cack_psn + sack_offset); @20 the 64-bit SACK bitmap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seth {
    /// The first 16 bits as sent (reserved bits included); see [`Seth::skip`] and
    /// [`Seth::probe_response`].
    pub word0: u16,
    /// Offset of the triggering PSN from `cack_psn`.
    pub ack_psn_offset: i16,
    /// Entropy value of the data packet that triggered this SACK (reflected).
    pub entropy: u32,
    /// Source PDC/QP identifier.
    pub spdcid: u16,
    /// Destination PDC/QP identifier.
    pub dpdcid: u16,
    /// Reserved byte before `cack_psn`.
    pub reserved: u8,
    /// Cumulative ACK PSN: every PSN before it was received.
    pub cack_psn: Psn,
    /// Congestion-control type (high nibble of byte 16).
    pub cc_type: u8,
    /// Congestion-control flags (low nibble).
    pub cc_flags: u8,
    /// Maximum PSN range, in units of 128 PSNs.
    pub mpr: u8,
    /// Offset of the bitmap's base PSN from `cack_psn`.
    pub sack_offset: i16,
    /// The SACK bitmap: bit `i` (least significant = 0) set means PSN base + `i` arrived
    /// (the ns-3 model's order; the specification's is not public).
    pub sack_bitmap: u64,
}

impl Seth {
    /// Wire length.
    pub const LEN: usize = 28;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Seth, b, Self::LEN)?;
        Ok(Self {
            word0: be16(b),
            ack_psn_offset: be16(&b[2..]) as i16,
            entropy: be32(&b[4..]),
            spdcid: be16(&b[8..]),
            dpdcid: be16(&b[10..]),
            reserved: b[12],
            cack_psn: Psn::new(be24(&b[13..])),
            cc_type: b[16] >> 4,
            cc_flags: b[16] & 0xf,
            mpr: b[17],
            sack_offset: be16(&b[18..]) as i16,
            sack_bitmap: be64(&b[20..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Seth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.word0);
        put16(&mut b[2..], self.ack_psn_offset as u16);
        put32(&mut b[4..], self.entropy);
        put16(&mut b[8..], self.spdcid);
        put16(&mut b[10..], self.dpdcid);
        b[12] = self.reserved;
        put24(&mut b[13..], self.cack_psn.value());
        b[16] = (self.cc_type << 4) | (self.cc_flags & 0xf);
        b[17] = self.mpr;
        put16(&mut b[18..], self.sack_offset as u16);
        put64(&mut b[20..], self.sack_bitmap);
    }
    /// `res_type` (bits 15:12 of the first word; 0 in MRC).
    pub const fn res_type(&self) -> u8 {
        (self.word0 >> 12) as u8
    }
    /// `res_nxt` (bits 11:7; 0 in MRC).
    pub const fn res_nxt(&self) -> u8 {
        ((self.word0 >> 7) & 0x1f) as u8
    }
    /// `M`: what to do with the entropy value the SACK reflects.
    pub const fn skip(&self) -> SkipMode {
        SkipMode::from_bits((self.word0 >> 5) as u8)
    }
    /// `PR`: this SACK answers a reliability probe.
    pub const fn probe_response(&self) -> bool {
        self.word0 & 0x2 != 0
    }
    /// Sets `M` and `PR`, keeping the other bits.
    pub fn set_flags(&mut self, skip: SkipMode, probe_response: bool) {
        self.word0 = (self.word0 & !0x62)
            | (u16::from(skip.bits()) << 5)
            | if probe_response { 0x2 } else { 0 };
    }
    /// The PSN that triggered this SACK: `cack_psn + ack_psn_offset` (24-bit arithmetic).
    pub fn ack_psn(&self) -> Psn {
        self.cack_psn.add(self.ack_psn_offset as i32 as u32)
    }
    /// The PSN of the bitmap's bit 0: `cack_psn + sack_offset`.
    pub fn sack_base(&self) -> Psn {
        self.cack_psn.add(self.sack_offset as i32 as u32)
    }
    /// The PSNs the bitmap says arrived, in order.
    pub fn sacked(&self) -> impl Iterator<Item = Psn> + '_ {
        let base = self.sack_base();
        (0..64u32)
            .filter(move |i| self.sack_bitmap >> i & 1 == 1)
            .map(move |i| base.add(i))
    }
    /// The PSN window the MPR allows beyond `cack_psn`: MPR x 128 PSNs.
    pub const fn window(&self) -> u32 {
        self.mpr as u32 * 128
    }
}

/// CC_STATE (8 bytes), after the SETH: `tx_timestamp u16 | reserved(1) ooo_count(15) |
/// R_C(1) rcv_cwnd_pen(7) | rcvd_bytes u24`. Not the field order of UET's NSCC state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CcState {
    /// The TSETH timestamp of the packet acknowledged (reflected).
    pub tx_timestamp: u16,
    /// Reserved bit before `ooo_count`.
    pub reserved: bool,
    /// Packets received out of order.
    pub ooo_count: u16,
    /// R_C: restore the window.
    pub restore_cwnd: bool,
    /// The receiver's window penalty, 0..=127 (127: one packet per RTT).
    pub rcv_cwnd_pen: u8,
    /// Bytes received, in 256-byte units (ns-3's "received256"), modulo 2^24.
    pub rcvd_bytes: u32,
}

impl CcState {
    /// Wire length.
    pub const LEN: usize = 8;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::CcState, b, Self::LEN)?;
        let w = be16(&b[2..]);
        Ok(Self {
            tx_timestamp: be16(b),
            reserved: w & 0x8000 != 0,
            ooo_count: w & 0x7fff,
            restore_cwnd: b[4] & 0x80 != 0,
            rcv_cwnd_pen: b[4] & 0x7f,
            rcvd_bytes: be24(&b[5..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`CcState::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.tx_timestamp);
        put16(
            &mut b[2..],
            (u16::from(self.reserved) << 15) | (self.ooo_count & 0x7fff),
        );
        b[4] = (u8::from(self.restore_cwnd) << 7) | (self.rcv_cwnd_pen & 0x7f);
        put24(&mut b[5..], self.rcvd_bytes);
    }
}

/// Why a receiver NACKs (NETH `nack_reason`): the values MRC shares with UET's NACK codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NackReason {
    /// 0x01: a switch trimmed the packet's payload.
    Trimmed,
    /// 0x02: trimmed at the last hop.
    TrimmedLastHop,
    /// 0x06: no SACK bitmap for the PSN.
    NoBitmap,
    /// 0x07: no packet buffer.
    NoPktBuffer,
    /// 0x0A: no resource.
    NoResource,
    /// 0x0B: the PSN is outside the window the MPR allows.
    PsnOutOfWindow,
    /// 0x19: an unexpected event (fatal).
    UnexpectedEvent,
    /// Any other value.
    Other(u8),
}

impl NackReason {
    /// From the byte.
    pub const fn from_u8(v: u8) -> Self {
        match v {
            0x01 => Self::Trimmed,
            0x02 => Self::TrimmedLastHop,
            0x06 => Self::NoBitmap,
            0x07 => Self::NoPktBuffer,
            0x0a => Self::NoResource,
            0x0b => Self::PsnOutOfWindow,
            0x19 => Self::UnexpectedEvent,
            v => Self::Other(v),
        }
    }
    /// The byte.
    pub const fn value(self) -> u8 {
        match self {
            Self::Trimmed => 0x01,
            Self::TrimmedLastHop => 0x02,
            Self::NoBitmap => 0x06,
            Self::NoPktBuffer => 0x07,
            Self::NoResource => 0x0a,
            Self::PsnOutOfWindow => 0x0b,
            Self::UnexpectedEvent => 0x19,
            Self::Other(v) => v,
        }
    }
    /// The name the public sources use (`None` for a value none of them names).
    pub const fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::Trimmed => "TRIMMED",
            Self::TrimmedLastHop => "TRIMMED_LASTHOP",
            Self::NoBitmap => "NO_BITMAP",
            Self::NoPktBuffer => "NO_PKT_BUFFER",
            Self::NoResource => "NO_RESOURCE",
            Self::PsnOutOfWindow => "PSN_OOR_WINDOW",
            Self::UnexpectedEvent => "UNEXP_EVENT",
            Self::Other(_) => return None,
        })
    }
    /// Whether the QP cannot go on after it.
    pub const fn is_fatal(self) -> bool {
        matches!(self, Self::UnexpectedEvent)
    }
}

/// NETH (20 bytes), opcode 0xDD: `reserved u16 | nack_reason u8 | vendor_info u8 | entropy
/// u32 | SPDCID u16 | DPDCID u16 | reserved u8 | nack_psn u24 | cc_type(4) cc_flags(4) |
/// reserved u8 | tx_timestamp u16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Neth {
    /// The first two bytes (UET's prologue's place; reserved in MRC).
    pub reserved0: u16,
    /// The reason, as sent ([`Neth::reason`]).
    pub nack_reason: u8,
    /// Vendor information.
    pub vendor_info: u8,
    /// Entropy value of the packet NACKed (reflected).
    pub entropy: u32,
    /// Source PDC/QP identifier.
    pub spdcid: u16,
    /// Destination PDC/QP identifier.
    pub dpdcid: u16,
    /// Reserved byte before `nack_psn`.
    pub reserved1: u8,
    /// The PSN NACKed.
    pub nack_psn: Psn,
    /// Congestion-control type (2 by default).
    pub cc_type: u8,
    /// Congestion-control flags.
    pub cc_flags: u8,
    /// Reserved byte before the timestamp.
    pub reserved2: u8,
    /// The NACKed packet's TSETH timestamp (reflected).
    pub tx_timestamp: u16,
}

impl Neth {
    /// Wire length.
    pub const LEN: usize = 20;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Neth, b, Self::LEN)?;
        Ok(Self {
            reserved0: be16(b),
            nack_reason: b[2],
            vendor_info: b[3],
            entropy: be32(&b[4..]),
            spdcid: be16(&b[8..]),
            dpdcid: be16(&b[10..]),
            reserved1: b[12],
            nack_psn: Psn::new(be24(&b[13..])),
            cc_type: b[16] >> 4,
            cc_flags: b[16] & 0xf,
            reserved2: b[17],
            tx_timestamp: be16(&b[18..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Neth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.reserved0);
        b[2] = self.nack_reason;
        b[3] = self.vendor_info;
        put32(&mut b[4..], self.entropy);
        put16(&mut b[8..], self.spdcid);
        put16(&mut b[10..], self.dpdcid);
        b[12] = self.reserved1;
        put24(&mut b[13..], self.nack_psn.value());
        b[16] = (self.cc_type << 4) | (self.cc_flags & 0xf);
        b[17] = self.reserved2;
        put16(&mut b[18..], self.tx_timestamp);
    }
    /// The reason, named.
    pub const fn reason(&self) -> NackReason {
        NackReason::from_u8(self.nack_reason)
    }
}

/// PETH (16 bytes), opcode 0xDE, a reliability probe (it takes no PSN and draws a SETH with
/// PR set): `reserved u16 | reserved u8 | vendor_info u8 | probe_id u16 | reserved u16 |
/// SPDCID u16 | DPDCID u16 | tx_timestamp u16 | TSR(1) reserved(11) ftype(4)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Peth {
    /// Bytes 0-2, reserved.
    pub reserved0: u32,
    /// Vendor information.
    pub vendor_info: u8,
    /// The probe's identifier.
    pub probe_id: u16,
    /// Bytes 6-7, reserved.
    pub reserved1: u16,
    /// Source PDC/QP identifier.
    pub spdcid: u16,
    /// Destination PDC/QP identifier.
    pub dpdcid: u16,
    /// Transmit timestamp.
    pub tx_timestamp: u16,
    /// TSR, reserved bits and ftype.
    pub word: TsWord,
}

impl Peth {
    /// Wire length.
    pub const LEN: usize = 16;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Peth, b, Self::LEN)?;
        Ok(Self {
            reserved0: be24(b),
            vendor_info: b[3],
            probe_id: be16(&b[4..]),
            reserved1: be16(&b[6..]),
            spdcid: be16(&b[8..]),
            dpdcid: be16(&b[10..]),
            tx_timestamp: be16(&b[12..]),
            word: TsWord(be16(&b[14..])),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Peth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put24(b, self.reserved0);
        b[3] = self.vendor_info;
        put16(&mut b[4..], self.probe_id);
        put16(&mut b[6..], self.reserved1);
        put16(&mut b[8..], self.spdcid);
        put16(&mut b[10..], self.dpdcid);
        put16(&mut b[12..], self.tx_timestamp);
        put16(&mut b[14..], self.word.0);
    }
}

/// What an endpoint request asks (ERTH `op`, byte 1 bits 1:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointOp {
    /// 0: the sender's ports' status.
    PortStatusUpdate,
    /// 1: an entropy-value probe.
    EvProbe,
    /// 2 or 3: not named by any public source.
    Other(u8),
}

impl EndpointOp {
    /// From the 2-bit field.
    pub const fn from_bits(v: u8) -> Self {
        match v & 3 {
            0 => Self::PortStatusUpdate,
            1 => Self::EvProbe,
            v => Self::Other(v),
        }
    }
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::PortStatusUpdate => "port_status_update",
            Self::EvProbe => "ev_probe",
            Self::Other(_) => "unknown",
        }
    }
}

/// ERTH (16 bytes), opcode 0xD8, to the reserved DQPN 2; takes no PSN. Its size is agreed
/// on; its fields come from one source (the ns-3 model): byte 1 bits 1:0 the op, @3
/// vendor_info, @4 a port-status mask (one bit per local port), @12 tx_timestamp, @14 TSR |
/// ftype. The other bits are kept as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Erth {
    /// Bytes 0-2 as sent (the op in byte 1's low bits).
    pub word0: u32,
    /// Vendor information.
    pub vendor_info: u8,
    /// One bit per local port.
    pub port_status_mask: u32,
    /// Bytes 8-11, reserved.
    pub reserved: u32,
    /// Transmit timestamp.
    pub tx_timestamp: u16,
    /// TSR, reserved bits and ftype.
    pub word: TsWord,
}

impl Erth {
    /// Wire length.
    pub const LEN: usize = 16;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Erth, b, Self::LEN)?;
        Ok(Self {
            word0: be24(b),
            vendor_info: b[3],
            port_status_mask: be32(&b[4..]),
            reserved: be32(&b[8..]),
            tx_timestamp: be16(&b[12..]),
            word: TsWord(be16(&b[14..])),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Erth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put24(b, self.word0);
        b[3] = self.vendor_info;
        put32(&mut b[4..], self.port_status_mask);
        put32(&mut b[8..], self.reserved);
        put16(&mut b[12..], self.tx_timestamp);
        put16(&mut b[14..], self.word.0);
    }
    /// The request.
    pub const fn op(&self) -> EndpointOp {
        EndpointOp::from_bits((self.word0 >> 8) as u8)
    }
}

/// EETH (36 bytes), opcode 0xD9, the answer to an endpoint request. Only its size is
/// agreed on; one source (the MRC emulator) puts an op in byte 1 bits 5:4 and a timestamp
/// at 28. The whole header is kept as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Eeth {
    /// The header's bytes.
    pub bytes: [u8; 36],
}

impl Default for Eeth {
    fn default() -> Self {
        Self { bytes: [0; 36] }
    }
}

impl Eeth {
    /// Wire length.
    pub const LEN: usize = 36;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Eeth, b, Self::LEN)?;
        let mut bytes = [0; 36];
        bytes.copy_from_slice(&b[..36]);
        Ok(Self { bytes })
    }
    /// Writes the header. Panics if `b` is shorter than [`Eeth::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[..36].copy_from_slice(&self.bytes);
    }
    /// The op, as the emulator reads it (byte 1 bits 5:4).
    pub fn op(&self) -> u8 {
        get_bits(&self.bytes, 1, 2, 2) as u8
    }
    /// Sets the op the emulator reads.
    pub fn set_op(&mut self, v: u8) {
        set_bits(&mut self.bytes, 1, 2, 2, u64::from(v));
    }
    /// The timestamp, as the emulator reads it (@28).
    pub fn tx_timestamp(&self) -> u16 {
        be16(&self.bytes[28..])
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::Error;
    use std::vec;
    use std::vec::Vec;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// Every prefix shorter than `len` is `Truncated` naming `layer`; the whole parses.
    fn prefixes<T>(bytes: &[u8], len: usize, layer: Layer, parse: fn(&[u8]) -> Result<T>) {
        assert_eq!(bytes.len(), len);
        for n in 0..len {
            match parse(&bytes[..n]) {
                Err(Error::Truncated {
                    layer: l,
                    needed,
                    got,
                }) => assert_eq!((l, needed, got), (layer, len, n)),
                Err(e) => panic!("{layer}: {n} bytes: {e}"),
                Ok(_) => panic!("{layer}: {n} bytes parsed"),
            }
        }
        assert!(parse(bytes).is_ok());
    }

    // The golden vectors: the ns-3 model's header test values (`mrc-header-test-suite.cc`),
    // serialised by both public layouts.
    #[test]
    fn seth_golden_vector() {
        let b = hex(
            "00 42 ff ef 12 34 56 78 11 22 33 44 00 ab cd ef 00 20 00 07 80 40 20 10 08 04 02 01",
        );
        let s = Seth::parse(&b).unwrap();
        assert_eq!(s.skip(), SkipMode::AlwaysSkip);
        assert!(s.probe_response());
        assert_eq!((s.res_type(), s.res_nxt()), (0, 0));
        assert_eq!(s.ack_psn_offset, -17);
        assert_eq!(s.entropy, 0x1234_5678);
        assert_eq!((s.spdcid, s.dpdcid), (0x1122, 0x3344));
        assert_eq!(s.cack_psn, Psn::new(0xab_cdef));
        assert_eq!((s.cc_type, s.cc_flags, s.mpr), (0, 0, 32));
        assert_eq!(s.sack_offset, 7);
        assert_eq!(s.sack_bitmap, 0x8040_2010_0804_0201);
        assert_eq!(s.ack_psn(), Psn::new(0xab_cdef - 17));
        assert_eq!(s.sack_base(), Psn::new(0xab_cdef + 7));
        assert_eq!(s.window(), 4096);
        // Bits 0, 9, 18, ... 63 of the bitmap.
        let got: Vec<u32> = s.sacked().map(|p| p.value() - 0xab_cdf6).collect();
        assert_eq!(got, vec![0, 9, 18, 27, 36, 45, 54, 63]);
        let mut out = [0u8; Seth::LEN];
        s.emit(&mut out);
        assert_eq!(&out[..], &b[..]);
        let mut built = Seth {
            ack_psn_offset: -17,
            entropy: 0x1234_5678,
            spdcid: 0x1122,
            dpdcid: 0x3344,
            cack_psn: Psn::new(0xab_cdef),
            mpr: 32,
            sack_offset: 7,
            sack_bitmap: 0x8040_2010_0804_0201,
            ..Seth::default()
        };
        built.set_flags(SkipMode::AlwaysSkip, true);
        assert_eq!(built, s);
        prefixes(&b, Seth::LEN, Layer::Seth, Seth::parse);
    }

    #[test]
    fn cack_psn_wraps_in_24_bits() {
        let s = Seth {
            cack_psn: Psn::new(0xff_fffe),
            sack_offset: 3,
            ack_psn_offset: -0x7fff,
            ..Seth::default()
        };
        assert_eq!(s.sack_base(), Psn::new(1));
        assert_eq!(s.ack_psn(), Psn::new(0xff_fffe - 0x7fff));
    }

    #[test]
    fn cc_state_golden_vector() {
        let b = hex("12 34 23 45 c5 ab cd ef");
        let c = CcState::parse(&b).unwrap();
        assert_eq!(
            c,
            CcState {
                tx_timestamp: 0x1234,
                reserved: false,
                ooo_count: 0x2345,
                restore_cwnd: true,
                rcv_cwnd_pen: 0x45,
                rcvd_bytes: 0xab_cdef,
            }
        );
        let mut out = [0u8; CcState::LEN];
        c.emit(&mut out);
        assert_eq!(&out[..], &b[..]);
        prefixes(&b, CcState::LEN, Layer::CcState, CcState::parse);
    }

    #[test]
    fn neth_golden_vector() {
        let b = hex("00 00 0b 00 fe dc ba 98 00 01 00 02 00 65 43 21 20 00 56 78");
        let n = Neth::parse(&b).unwrap();
        assert_eq!(n.reason(), NackReason::PsnOutOfWindow);
        assert_eq!(n.reason().name(), Some("PSN_OOR_WINDOW"));
        assert_eq!(n.entropy, 0xfedc_ba98);
        assert_eq!((n.spdcid, n.dpdcid), (1, 2));
        assert_eq!(n.nack_psn, Psn::new(0x65_4321));
        assert_eq!((n.cc_type, n.tx_timestamp), (2, 0x5678));
        let mut out = [0u8; Neth::LEN];
        n.emit(&mut out);
        assert_eq!(&out[..], &b[..]);
        prefixes(&b, Neth::LEN, Layer::Neth, Neth::parse);
    }

    #[test]
    fn peth_golden_vector() {
        let b = hex("00 00 00 00 77 88 00 00 00 03 00 04 9a bc 00 01");
        let p = Peth::parse(&b).unwrap();
        assert_eq!(p.probe_id, 0x7788);
        assert_eq!((p.spdcid, p.dpdcid, p.tx_timestamp), (3, 4, 0x9abc));
        assert_eq!(p.word, TsWord::DEFAULT);
        assert_eq!((p.word.tsr(), p.word.ftype()), (false, 1));
        let mut out = [0u8; Peth::LEN];
        p.emit(&mut out);
        assert_eq!(&out[..], &b[..]);
        prefixes(&b, Peth::LEN, Layer::Peth, Peth::parse);
    }

    #[test]
    fn meth_and_tseth_golden_vectors() {
        let m = hex("00 01 00 02");
        assert_eq!(Meth::parse(&m).unwrap(), Meth { rqmsn: 1, msn: 2 });
        let t = hex("12 34 00 01");
        let ts = Tseth::parse(&t).unwrap();
        assert_eq!((ts.tx_timestamp, ts.word.ftype()), (0x1234, 1));
        let mut out = [0u8; 4];
        ts.emit(&mut out);
        assert_eq!(&out[..], &t[..]);
        Meth { rqmsn: 1, msn: 2 }.emit(&mut out);
        assert_eq!(&out[..], &m[..]);
        prefixes(&m, Meth::LEN, Layer::Meth, Meth::parse);
        prefixes(&t, Tseth::LEN, Layer::Tseth, Tseth::parse);
    }

    #[test]
    fn erth_and_eeth_keep_every_bit() {
        // ns-3 round-trips the port-status mask 0xa5a55a5a; an EV probe.
        let b = hex("ff 01 fe 07 a5 a5 5a 5a 11 22 33 44 ab cd 80 01");
        let e = Erth::parse(&b).unwrap();
        assert_eq!(e.op(), EndpointOp::EvProbe);
        assert_eq!((e.vendor_info, e.port_status_mask), (7, 0xa5a5_5a5a));
        assert!(e.word.tsr());
        let mut out = [0u8; Erth::LEN];
        e.emit(&mut out);
        assert_eq!(&out[..], &b[..]);
        prefixes(&b, Erth::LEN, Layer::Erth, Erth::parse);
        let mut x: Vec<u8> = (0..36u8).collect();
        x[1] = 0x30;
        let mut ee = Eeth::parse(&x).unwrap();
        assert_eq!(ee.op(), 3);
        assert_eq!(ee.tx_timestamp(), 0x1c1d);
        ee.set_op(1);
        assert_eq!(ee.bytes[1], 0x10);
        let mut out = [0u8; Eeth::LEN];
        ee.emit(&mut out);
        assert_eq!(&out[2..], &x[2..]);
        prefixes(&x, Eeth::LEN, Layer::Eeth, Eeth::parse);
    }

    #[test]
    fn every_reason_round_trips() {
        for v in 0..=255u8 {
            let r = NackReason::from_u8(v);
            assert_eq!(r.value(), v);
            assert_eq!(r.name().is_some(), !matches!(r, NackReason::Other(_)));
        }
        assert!(NackReason::UnexpectedEvent.is_fatal() && !NackReason::Trimmed.is_fatal());
    }
}
