//! The UET Semantic Sub-layer headers (UE Specification 1.0.1 §2.2; layouts as XDP2's
//! `uet/ses.h` and Wireshark's `packet-uet.c` agree, sizes 44/32/20 for requests and 12/20
//! for responses). Which one follows the PDS is the PDS prologue's `next_hdr`. Each is an
//! owned value read from and written to a byte slice, every bit kept.
use crate::error::need;
use crate::wire::{be16, be24, be32, be64, put16, put24, put32, put64};
use crate::{Layer, Result};

/// The first 12 bytes of every request: `reserved(2) opcode(6) | version(2) DC IE REL HD
/// EOM SOM | message_id u16 | ri_generation u8 | job_id u24 | reserved(4) pid_on_fep(12) |
/// reserved(4) resource_index(12)`. (In a small request, bytes 2-3 hold the request length
/// in Wireshark's reading; [`Common::message_id`] keeps them as sent.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Common {
    /// Byte 0: reserved bits and the opcode.
    pub byte0: u8,
    /// Byte 1: version and flags.
    pub flags: u8,
    /// Message ID.
    pub message_id: u16,
    /// Resource-index generation.
    pub ri_generation: u8,
    /// Job ID.
    pub job_id: u32,
    /// Reserved bits and the PID on the FEP.
    pub pid_word: u16,
    /// Reserved bits and the resource index.
    pub ri_word: u16,
}

impl Common {
    /// Wire length.
    pub const LEN: usize = 12;
    fn parse(b: &[u8]) -> Self {
        Self {
            byte0: b[0],
            flags: b[1],
            message_id: be16(&b[2..]),
            ri_generation: b[4],
            job_id: be24(&b[5..]),
            pid_word: be16(&b[8..]),
            ri_word: be16(&b[10..]),
        }
    }
    fn emit(&self, b: &mut [u8]) {
        b[0] = self.byte0;
        b[1] = self.flags;
        put16(&mut b[2..], self.message_id);
        b[4] = self.ri_generation;
        put24(&mut b[5..], self.job_id);
        put16(&mut b[8..], self.pid_word);
        put16(&mut b[10..], self.ri_word);
    }
    /// The request opcode.
    pub const fn opcode(&self) -> super::SesOpcode {
        super::SesOpcode::from_bits(self.byte0 & 0x3f)
    }
    /// The SES version.
    pub const fn version(&self) -> u8 {
        self.flags >> 6
    }
    /// DC: delivery complete.
    pub const fn delivery_complete(&self) -> bool {
        self.flags & 0x20 != 0
    }
    /// IE: initiator error.
    pub const fn initiator_error(&self) -> bool {
        self.flags & 0x10 != 0
    }
    /// REL: relative addressing.
    pub const fn relative(&self) -> bool {
        self.flags & 0x08 != 0
    }
    /// HD: header data present.
    pub const fn header_data_present(&self) -> bool {
        self.flags & 0x04 != 0
    }
    /// EOM: end of message.
    pub const fn end_of_msg(&self) -> bool {
        self.flags & 0x02 != 0
    }
    /// SOM: start of message.
    pub const fn start_of_msg(&self) -> bool {
        self.flags & 0x01 != 0
    }
    /// The PID on the fabric endpoint.
    pub const fn pid_on_fep(&self) -> u16 {
        self.pid_word & 0x0fff
    }
    /// The resource index.
    pub const fn resource_index(&self) -> u16 {
        self.ri_word & 0x0fff
    }
}

/// Standard request (44 bytes): [`Common`], `buffer_offset u64 | initiator u32 |
/// mem_key/match_bits u64 | header_data u64 (SOM) or {reserved u16, reserved(2)
/// payload_length(14), message_offset u32} | request_length u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestStd {
    /// The first 12 bytes.
    pub common: Common,
    /// Buffer offset (a deferrable send's restart token).
    pub buffer_offset: u64,
    /// Initiator.
    pub initiator: u32,
    /// Memory key, or tagged sends' match bits.
    pub mem_key: u64,
    /// Header data (SOM), else the payload length and message offset ([`RequestStd::payload_length`]).
    pub header_data: u64,
    /// The whole request's length.
    pub request_length: u32,
}

impl RequestStd {
    /// Wire length.
    pub const LEN: usize = 44;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ses, b, Self::LEN)?;
        Ok(Self {
            common: Common::parse(b),
            buffer_offset: be64(&b[12..]),
            initiator: be32(&b[20..]),
            mem_key: be64(&b[24..]),
            header_data: be64(&b[32..]),
            request_length: be32(&b[40..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`RequestStd::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        self.common.emit(b);
        put64(&mut b[12..], self.buffer_offset);
        put32(&mut b[20..], self.initiator);
        put64(&mut b[24..], self.mem_key);
        put64(&mut b[32..], self.header_data);
        put32(&mut b[40..], self.request_length);
    }
    /// Not SOM: this packet's payload length (14 bits).
    pub const fn payload_length(&self) -> u16 {
        ((self.header_data >> 32) & 0x3fff) as u16
    }
    /// Not SOM: this packet's offset in the message.
    pub const fn message_offset(&self) -> u32 {
        self.header_data as u32
    }
}

/// Small request (20 bytes): [`Common`], `buffer_offset u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestSmall {
    /// The first 12 bytes.
    pub common: Common,
    /// Buffer offset.
    pub buffer_offset: u64,
}

impl RequestSmall {
    /// Wire length.
    pub const LEN: usize = 20;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ses, b, Self::LEN)?;
        Ok(Self {
            common: Common::parse(b),
            buffer_offset: be64(&b[12..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`RequestSmall::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        self.common.emit(b);
        put64(&mut b[12..], self.buffer_offset);
    }
}

/// Medium request (32 bytes): [`Common`], `header_data or buffer_offset u64 | initiator
/// u32 | mem_key/match_bits u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestMedium {
    /// The first 12 bytes.
    pub common: Common,
    /// Header data (HD set), else the buffer offset.
    pub header_data: u64,
    /// Initiator.
    pub initiator: u32,
    /// Memory key or match bits.
    pub mem_key: u64,
}

impl RequestMedium {
    /// Wire length.
    pub const LEN: usize = 32;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ses, b, Self::LEN)?;
        Ok(Self {
            common: Common::parse(b),
            header_data: be64(&b[12..]),
            initiator: be32(&b[20..]),
            mem_key: be64(&b[24..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`RequestMedium::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        self.common.emit(b);
        put64(&mut b[12..], self.header_data);
        put32(&mut b[20..], self.initiator);
        put64(&mut b[24..], self.mem_key);
    }
}

/// The first 8 bytes of every response: `list(2) opcode(6) | version(2) return_code(6) |
/// message_id u16 | ri_generation u8 | job_id u24`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ResponseCommon {
    /// Byte 0: where it was delivered (list) and the response opcode.
    pub byte0: u8,
    /// Byte 1: version and return code.
    pub byte1: u8,
    /// The request's message ID.
    pub message_id: u16,
    /// Resource-index generation.
    pub ri_generation: u8,
    /// Job ID.
    pub job_id: u32,
}

impl ResponseCommon {
    fn parse(b: &[u8]) -> Self {
        Self {
            byte0: b[0],
            byte1: b[1],
            message_id: be16(&b[2..]),
            ri_generation: b[4],
            job_id: be24(&b[5..]),
        }
    }
    fn emit(&self, b: &mut [u8]) {
        b[0] = self.byte0;
        b[1] = self.byte1;
        put16(&mut b[2..], self.message_id);
        b[4] = self.ri_generation;
        put24(&mut b[5..], self.job_id);
    }
    /// List: 0 expected, 1 overflow, 2-3 vendor.
    pub const fn list(&self) -> u8 {
        self.byte0 >> 6
    }
    /// Response opcode: 0 default, 1 response, 2 with data, 3 none.
    pub const fn opcode(&self) -> u8 {
        self.byte0 & 0x3f
    }
    /// The return code ([`super::ReturnCode`]).
    pub const fn return_code(&self) -> super::ReturnCode {
        super::ReturnCode::from_bits(self.byte1 & 0x3f)
    }
}

/// Response (12 bytes): [`ResponseCommon`], `modified_length u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Response {
    /// The first 8 bytes.
    pub common: ResponseCommon,
    /// Bytes the request modified.
    pub modified_length: u32,
}

impl Response {
    /// Wire length.
    pub const LEN: usize = 12;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ses, b, Self::LEN)?;
        Ok(Self {
            common: ResponseCommon::parse(b),
            modified_length: be32(&b[8..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`Response::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        self.common.emit(b);
        put32(&mut b[8..], self.modified_length);
    }
}

/// Response with data (20 bytes): [`ResponseCommon`], `read_request_message_id u16 |
/// length word u16 | modified_length u32 | message_offset u32`. The payload length's width
/// is disputed (Wireshark: 14 bits; XDP2: 12 after 4 reserved): the word is kept, read
/// with [`ResponseData::payload_length`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ResponseData {
    /// The first 8 bytes.
    pub common: ResponseCommon,
    /// The READ request's message ID.
    pub read_request_message_id: u16,
    /// Reserved bits and the payload length.
    pub length_word: u16,
    /// Bytes the request modified.
    pub modified_length: u32,
    /// This packet's offset in the message.
    pub message_offset: u32,
}

impl ResponseData {
    /// Wire length.
    pub const LEN: usize = 20;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ses, b, Self::LEN)?;
        Ok(Self {
            common: ResponseCommon::parse(b),
            read_request_message_id: be16(&b[8..]),
            length_word: be16(&b[10..]),
            modified_length: be32(&b[12..]),
            message_offset: be32(&b[16..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`ResponseData::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        self.common.emit(b);
        put16(&mut b[8..], self.read_request_message_id);
        put16(&mut b[10..], self.length_word);
        put32(&mut b[12..], self.modified_length);
        put32(&mut b[16..], self.message_offset);
    }
    /// The payload length: 14 bits (`wide`, Wireshark's reading) or 12 (XDP2's).
    pub const fn payload_length(&self, wide: bool) -> u16 {
        self.length_word & if wide { 0x3fff } else { 0x0fff }
    }
}

/// Response with small data (12 bytes, XDP2's layout): `list(2) opcode(6) | version(2)
/// return_code(6) | reserved(2) payload_length(14) | reserved u8 | job_id u24 |
/// original_request_psn u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ResponseDataSmall {
    /// Byte 0: list and response opcode.
    pub byte0: u8,
    /// Byte 1: version and return code.
    pub byte1: u8,
    /// Reserved bits and the payload length.
    pub length_word: u16,
    /// Reserved byte before the job ID.
    pub reserved: u8,
    /// Job ID.
    pub job_id: u32,
    /// The PSN of the request answered.
    pub original_request_psn: u32,
}

impl ResponseDataSmall {
    /// Wire length.
    pub const LEN: usize = 12;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ses, b, Self::LEN)?;
        Ok(Self {
            byte0: b[0],
            byte1: b[1],
            length_word: be16(&b[2..]),
            reserved: b[4],
            job_id: be24(&b[5..]),
            original_request_psn: be32(&b[8..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`ResponseDataSmall::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.byte0;
        b[1] = self.byte1;
        put16(&mut b[2..], self.length_word);
        b[4] = self.reserved;
        put24(&mut b[5..], self.job_id);
        put32(&mut b[8..], self.original_request_psn);
    }
    /// The payload length.
    pub const fn payload_length(&self) -> u16 {
        self.length_word & 0x3fff
    }
}

/// Atomic extension (4 bytes), after a request (of any size) whose opcode is atomic:
/// `atomic_code u8 | datatype u8 | semantic_control u8 | reserved u8`; for the
/// compare-and-swap codes (0x0D-0x12) 16-byte compare and swap values follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Atomic {
    /// The atomic operation (0x00 MIN … 0x13 MSWAP, 0x14 INVAL).
    pub code: u8,
    /// Its datatype (0x00 INT8 … 0x11 FP16).
    pub datatype: u8,
    /// Semantic control (cacheable 0x80, CPU-coherent 0x40, vendor bits 0x07).
    pub semantic_control: u8,
    /// Reserved.
    pub reserved: u8,
    /// Compare and swap values (the compare-and-swap codes).
    pub cas: Option<([u8; 16], [u8; 16])>,
}

impl Atomic {
    /// Whether `code` is a compare-and-swap, which carries two values.
    pub const fn is_cas(code: u8) -> bool {
        matches!(code, 0x0d..=0x12)
    }
    /// Reads the extension.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::Ses, b, 4)?;
        let cas = if Self::is_cas(b[0]) {
            need(Layer::Ses, b, 36)?;
            let mut c = [0; 16];
            let mut s = [0; 16];
            c.copy_from_slice(&b[4..20]);
            s.copy_from_slice(&b[20..36]);
            Some((c, s))
        } else {
            None
        };
        Ok(Self {
            code: b[0],
            datatype: b[1],
            semantic_control: b[2],
            reserved: b[3],
            cas,
        })
    }
    /// Its length: 36 with compare and swap values, else 4.
    pub const fn buffer_len(&self) -> usize {
        if self.cas.is_some() {
            36
        } else {
            4
        }
    }
    /// Writes the extension. Panics if `b` is too short.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.code;
        b[1] = self.datatype;
        b[2] = self.semantic_control;
        b[3] = self.reserved;
        if let Some((c, s)) = &self.cas {
            b[4..20].copy_from_slice(c);
            b[20..36].copy_from_slice(s);
        }
    }
}
