//! The UET Packet Delivery Sub-layer headers (UE Specification 1.0.1 §3.5; layouts as
//! Wireshark's `packet-uet.c`, XDP2's `uet/pds.h` and the UEC reference provider's Lua
//! dissector agree). Every header begins with the 2-byte [`Prologue`]; offsets below count
//! it. Each is an owned value read from and written to a byte slice, every bit kept.
use crate::error::need;
use crate::wire::{be16, be24, be32, be64, put16, put24, put32, put64};
use crate::{Layer, Result};

use super::Prologue;

fn prologue(b: &[u8], len: usize) -> Result<Prologue> {
    need(Layer::Pds, b, len)?;
    Ok(Prologue(be16(b)))
}

/// RUD/ROD request (12 bytes), types 2, 3, 13, 14: `prologue | clear_psn_offset i16 | psn
/// u32 | SPDCID u16 | DPDCID u16`. With SYN set the last field is `use_rsv_pdc(1)
/// reserved(3) psn_offset(12)` and the PDC's start PSN is `psn - psn_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Request {
    /// Type, next header, flags (RETX 0x10, AR 0x08, SYN 0x04).
    pub prologue: Prologue,
    /// The clear PSN is `psn + clear_psn_offset`.
    pub clear_psn_offset: i16,
    /// The packet's PSN (32 bits).
    pub psn: u32,
    /// Source PDC.
    pub spdcid: u16,
    /// Destination PDC, or (SYN) `use_rsv_pdc | reserved | psn_offset`.
    pub dpdcid: u16,
}

impl Request {
    /// Wire length.
    pub const LEN: usize = 12;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let prologue = prologue(b, Self::LEN)?;
        Ok(Self {
            prologue,
            clear_psn_offset: be16(&b[2..]) as i16,
            psn: be32(&b[4..]),
            spdcid: be16(&b[8..]),
            dpdcid: be16(&b[10..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Request::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.prologue.0);
        put16(&mut b[2..], self.clear_psn_offset as u16);
        put32(&mut b[4..], self.psn);
        put16(&mut b[8..], self.spdcid);
        put16(&mut b[10..], self.dpdcid);
    }
    /// The clear PSN (every PSN before it may be forgotten).
    pub const fn clear_psn(&self) -> u32 {
        self.psn.wrapping_add(self.clear_psn_offset as i32 as u32)
    }
    /// SYN only: the offset of this PSN from the PDC's start.
    pub const fn psn_offset(&self) -> u16 {
        self.dpdcid & 0x0fff
    }
    /// SYN only: use a reserved PDC.
    pub const fn use_rsv_pdc(&self) -> bool {
        self.dpdcid & 0x8000 != 0
    }
    /// SYN only: the PDC's start PSN, `psn - psn_offset`.
    pub const fn start_psn(&self) -> u32 {
        self.psn.wrapping_sub(self.psn_offset() as u32)
    }
}

/// The congestion-control part of a RUD_CC/ROD_CC request (4 bytes): `ccc_id u8 |
/// credit_target u24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestCc {
    /// Congestion-control context.
    pub ccc_id: u8,
    /// Credit target.
    pub credit_target: u32,
}

impl RequestCc {
    /// Wire length.
    pub const LEN: usize = 4;
    /// Reads it.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Pds, b, Self::LEN)?;
        Ok(Self {
            ccc_id: b[0],
            credit_target: be24(&b[1..]),
        })
    }
    /// Writes it. Panics if `b` is shorter than [`RequestCc::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.ccc_id;
        put24(&mut b[1..], self.credit_target);
    }
}

/// ACK (12 bytes), types 7, 8, 9: `prologue | ack_psn_offset i16 (probe_opaque when P) |
/// cack_psn u32 | SPDCID | DPDCID`. Flags: M (ECN seen) 0x20, RETX 0x10, P (probe) 0x08,
/// REQ 0x06 (0 none, 1 clear, 2 close).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Ack {
    /// Type, next header (an SES response follows when non-zero), flags.
    pub prologue: Prologue,
    /// The ACKed PSN's offset from `cack_psn`, or a probe's opaque value.
    pub ack_psn_offset: u16,
    /// Cumulative ACK PSN.
    pub cack_psn: u32,
    /// Source PDC.
    pub spdcid: u16,
    /// Destination PDC.
    pub dpdcid: u16,
}

impl Ack {
    /// Wire length.
    pub const LEN: usize = 12;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let prologue = prologue(b, Self::LEN)?;
        Ok(Self {
            prologue,
            ack_psn_offset: be16(&b[2..]),
            cack_psn: be32(&b[4..]),
            spdcid: be16(&b[8..]),
            dpdcid: be16(&b[10..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Ack::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.prologue.0);
        put16(&mut b[2..], self.ack_psn_offset);
        put32(&mut b[4..], self.cack_psn);
        put16(&mut b[8..], self.spdcid);
        put16(&mut b[10..], self.dpdcid);
    }
    /// Whether it answers a probe (`ack_psn_offset` is then the probe's opaque value).
    pub const fn probe(&self) -> bool {
        self.prologue.flags() & 0x08 != 0
    }
    /// The ACKed PSN, `cack_psn + ack_psn_offset` (`None` for a probe's answer).
    pub const fn ack_psn(&self) -> Option<u32> {
        if self.probe() {
            None
        } else {
            Some(
                self.cack_psn
                    .wrapping_add(self.ack_psn_offset as i16 as i32 as u32),
            )
        }
    }
    /// REQ: 0 none, 1 clear PSN, 2 close the PDC.
    pub const fn request(&self) -> u8 {
        (self.prologue.flags() >> 1) & 3
    }
}

/// The congestion-control type of an ACK_CC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcType {
    /// 0: NSCC (network-signalled).
    Nscc,
    /// 1: credit-based.
    Credit,
    /// Another value.
    Other(u8),
}

impl CcType {
    /// From the 4-bit field.
    pub const fn from_bits(v: u8) -> Self {
        match v {
            0 => Self::Nscc,
            1 => Self::Credit,
            v => Self::Other(v),
        }
    }
}

/// The ACK_CC extension (20 bytes after the [`Ack`]): `cc_type(4) cc_flags(4) | MPR u8 |
/// sack_psn_offset i16 | sack_bitmap u64 | cc_state u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AckCc {
    /// Congestion-control type ([`AckCc::kind`]).
    pub cc_type: u8,
    /// Congestion-control flags.
    pub cc_flags: u8,
    /// Maximum PSN range.
    pub mpr: u8,
    /// The bitmap's base PSN is `cack_psn + sack_psn_offset`.
    pub sack_psn_offset: i16,
    /// The SACK bitmap.
    pub sack_bitmap: u64,
    /// The state of [`AckCc::kind`]: NSCC's or credit's.
    pub cc_state: u64,
}

/// NSCC's state in an ACK_CC: `service_time u16 | restore_cwnd(1) rcv_cwnd_pend(7) |
/// rcvd_bytes u24 | ooo_count u16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NsccState {
    /// The receiver's service time.
    pub service_time: u16,
    /// Restore the window.
    pub restore_cwnd: bool,
    /// The receiver's window penalty.
    pub rcv_cwnd_pend: u8,
    /// Bytes received.
    pub rcvd_bytes: u32,
    /// Packets received out of order.
    pub ooo_count: u16,
}

impl AckCc {
    /// Wire length.
    pub const LEN: usize = 20;
    /// Reads it.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Pds, b, Self::LEN)?;
        Ok(Self {
            cc_type: b[0] >> 4,
            cc_flags: b[0] & 0xf,
            mpr: b[1],
            sack_psn_offset: be16(&b[2..]) as i16,
            sack_bitmap: be64(&b[4..]),
            cc_state: be64(&b[12..]),
        })
    }
    /// Writes it. Panics if `b` is shorter than [`AckCc::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = (self.cc_type << 4) | (self.cc_flags & 0xf);
        b[1] = self.mpr;
        put16(&mut b[2..], self.sack_psn_offset as u16);
        put64(&mut b[4..], self.sack_bitmap);
        put64(&mut b[12..], self.cc_state);
    }
    /// The congestion-control type.
    pub const fn kind(&self) -> CcType {
        CcType::from_bits(self.cc_type)
    }
    /// The state read as NSCC's.
    pub const fn nscc(&self) -> NsccState {
        let s = self.cc_state;
        NsccState {
            service_time: (s >> 48) as u16,
            restore_cwnd: (s >> 47) & 1 == 1,
            rcv_cwnd_pend: ((s >> 40) & 0x7f) as u8,
            rcvd_bytes: ((s >> 16) & 0xff_ffff) as u32,
            ooo_count: s as u16,
        }
    }
    /// The state read as credit's: `(credit u24, ooo_count u16)`.
    pub const fn credit(&self) -> (u32, u16) {
        ((self.cc_state >> 40) as u32, self.cc_state as u16)
    }
    /// The bitmap's base PSN for an ACK whose cumulative PSN is `cack_psn`.
    pub const fn sack_base(&self, cack_psn: u32) -> u32 {
        cack_psn.wrapping_add(self.sack_psn_offset as i32 as u32)
    }
}

/// How long an ACK_CCX or NACK_CCX extension is: the public sources disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CcxReading {
    /// XDP2's: an 8-byte CCX state (ACK_CCX extension 20 bytes, NACK_CCX 8).
    #[default]
    Xdp2,
    /// Wireshark's: a 16-byte state (ACK_CCX extension 28 bytes, NACK_CCX 16).
    Wireshark,
}

impl CcxReading {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Xdp2 => "xdp2",
            Self::Wireshark => "wireshark",
        }
    }
}

/// An ACK_CCX or NACK_CCX extension, kept as sent: its length is the reading's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ccx {
    /// Its bytes (the first `len`).
    pub bytes: [u8; 28],
    /// Its length.
    pub len: u8,
}

impl Ccx {
    /// The extension of an ACK_CCX (`ack`) or NACK_CCX under `reading`, from `b`.
    pub fn parse(b: &[u8], ack: bool, reading: CcxReading) -> Result<Self> {
        let len = match (ack, reading) {
            (true, CcxReading::Xdp2) => 20,
            (true, CcxReading::Wireshark) => 28,
            (false, CcxReading::Xdp2) => 8,
            (false, CcxReading::Wireshark) => 16,
        };
        need(Layer::Pds, b, len)?;
        let mut bytes = [0; 28];
        bytes[..len].copy_from_slice(&b[..len]);
        Ok(Self {
            bytes,
            len: len as u8,
        })
    }
    /// Writes it. Panics if `b` is shorter than its length.
    pub fn emit(&self, b: &mut [u8]) {
        b[..self.len as usize].copy_from_slice(self.as_bytes());
    }
    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
    /// The CCX type (the first byte's high nibble).
    pub const fn ccx_type(&self) -> u8 {
        self.bytes[0] >> 4
    }
}

/// NACK (16 bytes), types 10 and 12: `prologue | nack_code u8 | vendor_code u8 | nack_psn
/// (or pkt_id, RUDI) u32 | SPDCID | DPDCID | payload u32`. Flags: M 0x20, RETX 0x10, NT
/// 0x08 (0 RUD/ROD, 1 RUDI).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Nack {
    /// Type, next header, flags.
    pub prologue: Prologue,
    /// The code ([`super::NackCode`]).
    pub nack_code: u8,
    /// Vendor code.
    pub vendor_code: u8,
    /// The PSN (or RUDI packet ID) NACKed.
    pub nack_psn: u32,
    /// Source PDC.
    pub spdcid: u16,
    /// Destination PDC.
    pub dpdcid: u16,
    /// Code-specific: the highest PSN received + 1 (Wireshark), the expected PSN (ROD).
    pub payload: u32,
}

impl Nack {
    /// Wire length.
    pub const LEN: usize = 16;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let prologue = prologue(b, Self::LEN)?;
        Ok(Self {
            prologue,
            nack_code: b[2],
            vendor_code: b[3],
            nack_psn: be32(&b[4..]),
            spdcid: be16(&b[8..]),
            dpdcid: be16(&b[10..]),
            payload: be32(&b[12..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Nack::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.prologue.0);
        b[2] = self.nack_code;
        b[3] = self.vendor_code;
        put32(&mut b[4..], self.nack_psn);
        put16(&mut b[8..], self.spdcid);
        put16(&mut b[10..], self.dpdcid);
        put32(&mut b[12..], self.payload);
    }
    /// The code, named.
    pub const fn code(&self) -> super::NackCode {
        super::NackCode::from_u8(self.nack_code)
    }
    /// NT: a RUDI NACK (`nack_psn` is a packet ID).
    pub const fn rudi(&self) -> bool {
        self.prologue.flags() & 0x08 != 0
    }
}

/// CONTROL (16 bytes), type 11: `prologue (next_hdr = ctl_type) | probe_opaque u16 | psn u32
/// | SPDCID | DPDCID (or SYN's psn_offset) | payload u32` (meaning per control type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Control {
    /// Type, control type, flags (RETX 0x10, AR 0x08, SYN 0x04).
    pub prologue: Prologue,
    /// Opaque value a probe's answer returns.
    pub probe_opaque: u16,
    /// PSN.
    pub psn: u32,
    /// Source PDC.
    pub spdcid: u16,
    /// Destination PDC.
    pub dpdcid: u16,
    /// Per control type (the PSN to clear, the SACK base a probe asks about, …).
    pub payload: u32,
}

impl Control {
    /// Wire length.
    pub const LEN: usize = 16;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let prologue = prologue(b, Self::LEN)?;
        Ok(Self {
            prologue,
            probe_opaque: be16(&b[2..]),
            psn: be32(&b[4..]),
            spdcid: be16(&b[8..]),
            dpdcid: be16(&b[10..]),
            payload: be32(&b[12..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Control::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.prologue.0);
        put16(&mut b[2..], self.probe_opaque);
        put32(&mut b[4..], self.psn);
        put16(&mut b[8..], self.spdcid);
        put16(&mut b[10..], self.dpdcid);
        put32(&mut b[12..], self.payload);
    }
    /// The control type, named.
    pub const fn control_type(&self) -> super::ControlType {
        super::ControlType::from_bits(self.prologue.next_hdr())
    }
}

/// RUDI request or response (8 bytes), types 4 and 5: `prologue | reserved u16 | pkt_id
/// u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Rudi {
    /// Type, next header, flags (M 0x20 on responses, RETX 0x10).
    pub prologue: Prologue,
    /// Reserved.
    pub reserved: u16,
    /// Packet ID.
    pub pkt_id: u32,
}

impl Rudi {
    /// Wire length.
    pub const LEN: usize = 8;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let prologue = prologue(b, Self::LEN)?;
        Ok(Self {
            prologue,
            reserved: be16(&b[2..]),
            pkt_id: be32(&b[4..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Rudi::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.prologue.0);
        put16(&mut b[2..], self.reserved);
        put32(&mut b[4..], self.pkt_id);
    }
}

/// UUD request (4 bytes), type 6: `prologue | reserved u16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Uud {
    /// Type, next header, flags (ignored).
    pub prologue: Prologue,
    /// Reserved.
    pub reserved: u16,
}

impl Uud {
    /// Wire length.
    pub const LEN: usize = 4;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let prologue = prologue(b, Self::LEN)?;
        Ok(Self {
            prologue,
            reserved: be16(&b[2..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Uud::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.prologue.0);
        put16(&mut b[2..], self.reserved);
    }
}

/// The security header (TSS, PDS type 1), 12 or 16 bytes before the PDS: `type(5) SP(1)
/// reserved(1) AN(1) SDI(24) | SSI u32 when SP | TSC u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tss {
    /// The first word as sent.
    pub word0: u32,
    /// Secure source identifier (when SP is set).
    pub ssi: Option<u32>,
    /// Transmit security counter.
    pub tsc: u64,
}

impl Tss {
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Tss, b, 12)?;
        let word0 = be32(b);
        let sp = word0 & (1 << 26) != 0;
        if sp {
            need(Layer::Tss, b, 16)?;
        }
        let at = if sp { 8 } else { 4 };
        Ok(Self {
            word0,
            ssi: sp.then(|| be32(&b[4..])),
            tsc: be64(&b[at..]),
        })
    }
    /// Its length: 16 with an SSI, else 12.
    pub const fn buffer_len(&self) -> usize {
        if self.ssi.is_some() {
            16
        } else {
            12
        }
    }
    /// Writes the header (SP follows `ssi`). Panics if `b` is too short.
    pub fn emit(&self, b: &mut [u8]) {
        let sp = if self.ssi.is_some() { 1 << 26 } else { 0 };
        put32(b, (self.word0 & !(1 << 26)) | sp);
        let mut at = 4;
        if let Some(s) = self.ssi {
            put32(&mut b[4..], s);
            at = 8;
        }
        put64(&mut b[at..], self.tsc);
    }
    /// AN: the association number.
    pub const fn an(&self) -> bool {
        self.word0 & (1 << 24) != 0
    }
    /// The secure domain index.
    pub const fn sdi(&self) -> u32 {
        self.word0 & 0xff_ffff
    }
}
