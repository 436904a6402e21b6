//! The BTH opcode and its table (IBTA Vol 1 §9.2, Table 35; RoCEv2 annex A17 for the CNP).
//!
//! Bits 7..5 of the opcode select the transport (RC, UC, RD, UD, CNP, XRC) and bits 4..0 the
//! operation. Every opcode value is representable: unknown and reserved ones survive a
//! parse/emit round trip, with no extended headers and everything up to the ICRC as payload.
use core::fmt;

/// The transport service an opcode belongs to (opcode bits 7..5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connection (`000`).
    Rc,
    /// Unreliable Connection (`001`).
    Uc,
    /// Reliable Datagram (`010`).
    Rd,
    /// Unreliable Datagram (`011`).
    Ud,
    /// Congestion notification (`100`; opcode 0x81 is the RoCEv2 CNP).
    Cnp,
    /// Extended Reliable Connection (`101`).
    Xrc,
    /// Manufacturer-specific (`110`, `111`).
    Vendor,
}

impl Transport {
    /// The prefix used in opcode names (`RC`, `UC`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Rc => "RC",
            Self::Uc => "UC",
            Self::Rd => "RD",
            Self::Ud => "UD",
            Self::Cnp => "CNP",
            Self::Xrc => "XRC",
            Self::Vendor => "VENDOR",
        }
    }
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// The first packet of a multi-packet message.
    First,
    /// A packet between the first and the last.
    Middle,
    /// The last packet of a multi-packet message.
    Last,
    /// A message of one packet (also READ requests, atomics, ACKs, CNPs).
    Only,
}

/// The set of extended transport headers that follow the BTH, in wire order:
/// RDETH, DETH, XRCETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders(u16);

impl ExtHeaders {
    /// No extended header.
    pub const NONE: Self = Self(0);
    /// Reliable Datagram ETH (4 bytes).
    pub const RDETH: Self = Self(1 << 0);
    /// Datagram ETH (8 bytes).
    pub const DETH: Self = Self(1 << 1);
    /// XRC ETH (4 bytes).
    pub const XRCETH: Self = Self(1 << 2);
    /// Flush ETH (4 bytes).
    pub const FETH: Self = Self(1 << 3);
    /// RDMA ETH (16 bytes).
    pub const RETH: Self = Self(1 << 4);
    /// Atomic ETH (28 bytes).
    pub const ATOMIC_ETH: Self = Self(1 << 5);
    /// ACK ETH (4 bytes).
    pub const AETH: Self = Self(1 << 6);
    /// Atomic ACK ETH (8 bytes).
    pub const ATOMIC_ACK_ETH: Self = Self(1 << 7);
    /// Immediate data (4 bytes).
    pub const IMMDT: Self = Self(1 << 8);
    /// Invalidate ETH (4 bytes).
    pub const IETH: Self = Self(1 << 9);

    /// Each header with its wire length, in wire order.
    pub const ORDER: [(Self, usize); 10] = [
        (Self::RDETH, 4),
        (Self::DETH, 8),
        (Self::XRCETH, 4),
        (Self::FETH, 4),
        (Self::RETH, 16),
        (Self::ATOMIC_ETH, 28),
        (Self::AETH, 4),
        (Self::ATOMIC_ACK_ETH, 8),
        (Self::IMMDT, 4),
        (Self::IETH, 4),
    ];

    /// The union of two sets.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
    /// `true` when every header of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    /// The raw bit set.
    pub const fn bits(self) -> u16 {
        self.0
    }
    /// Total wire length of the headers in the set.
    pub const fn len(self) -> usize {
        let mut total = 0;
        let mut i = 0;
        while i < Self::ORDER.len() {
            if self.contains(Self::ORDER[i].0) {
                total += Self::ORDER[i].1;
            }
            i += 1;
        }
        total
    }
    /// `true` for the empty set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// One row of the operation table, shared by RC, UC, RD and XRC (bits 4..0).
#[derive(Clone, Copy)]
struct Op {
    name: &'static str,
    headers: ExtHeaders,
    payload: bool,
    class: Class,
    request: bool,
}

const fn op(
    name: &'static str,
    headers: ExtHeaders,
    payload: bool,
    class: Class,
    request: bool,
) -> Option<Op> {
    Some(Op {
        name,
        headers,
        payload,
        class,
        request,
    })
}

const N: ExtHeaders = ExtHeaders::NONE;
const IMM: ExtHeaders = ExtHeaders::IMMDT;
const RETH: ExtHeaders = ExtHeaders::RETH;
const AETH: ExtHeaders = ExtHeaders::AETH;

/// Bits 4..0 → operation. `None` = reserved.
const OPS: [Option<Op>; 32] = {
    use Class::*;
    [
        op("SEND_FIRST", N, true, First, true),
        op("SEND_MIDDLE", N, true, Middle, true),
        op("SEND_LAST", N, true, Last, true),
        op("SEND_LAST_WITH_IMMEDIATE", IMM, true, Last, true),
        op("SEND_ONLY", N, true, Only, true),
        op("SEND_ONLY_WITH_IMMEDIATE", IMM, true, Only, true),
        op("RDMA_WRITE_FIRST", RETH, true, First, true),
        op("RDMA_WRITE_MIDDLE", N, true, Middle, true),
        op("RDMA_WRITE_LAST", N, true, Last, true),
        op("RDMA_WRITE_LAST_WITH_IMMEDIATE", IMM, true, Last, true),
        op("RDMA_WRITE_ONLY", RETH, true, Only, true),
        op(
            "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            RETH.union(IMM),
            true,
            Only,
            true,
        ),
        op("RDMA_READ_REQUEST", RETH, false, Only, true),
        op("RDMA_READ_RESPONSE_FIRST", AETH, true, First, false),
        op("RDMA_READ_RESPONSE_MIDDLE", N, true, Middle, false),
        op("RDMA_READ_RESPONSE_LAST", AETH, true, Last, false),
        op("RDMA_READ_RESPONSE_ONLY", AETH, true, Only, false),
        op("ACKNOWLEDGE", AETH, false, Only, false),
        op(
            "ATOMIC_ACKNOWLEDGE",
            AETH.union(ExtHeaders::ATOMIC_ACK_ETH),
            false,
            Only,
            false,
        ),
        op("COMPARE_SWAP", ExtHeaders::ATOMIC_ETH, false, Only, true),
        op("FETCH_ADD", ExtHeaders::ATOMIC_ETH, false, Only, true),
        op("RESYNC", N, false, Only, true),
        op(
            "SEND_LAST_WITH_INVALIDATE",
            ExtHeaders::IETH,
            true,
            Last,
            true,
        ),
        op(
            "SEND_ONLY_WITH_INVALIDATE",
            ExtHeaders::IETH,
            true,
            Only,
            true,
        ),
        None,
        None,
        None,
        None,
        op("FLUSH", ExtHeaders::FETH.union(RETH), false, Only, true),
        op("ATOMIC_WRITE", RETH, true, Only, true),
        None,
        None,
    ]
};

/// An 8-bit BTH opcode. An open newtype: every value, defined or not, is representable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Opcode(pub u8);

#[allow(missing_docs)] // the names are the IBTA names
impl Opcode {
    pub const RC_SEND_FIRST: Self = Self(0x00);
    pub const RC_SEND_MIDDLE: Self = Self(0x01);
    pub const RC_SEND_LAST: Self = Self(0x02);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Self = Self(0x03);
    pub const RC_SEND_ONLY: Self = Self(0x04);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Self = Self(0x05);
    pub const RC_RDMA_WRITE_FIRST: Self = Self(0x06);
    pub const RC_RDMA_WRITE_MIDDLE: Self = Self(0x07);
    pub const RC_RDMA_WRITE_LAST: Self = Self(0x08);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Self = Self(0x09);
    pub const RC_RDMA_WRITE_ONLY: Self = Self(0x0a);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Self = Self(0x0b);
    pub const RC_RDMA_READ_REQUEST: Self = Self(0x0c);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Self = Self(0x0d);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Self = Self(0x0e);
    pub const RC_RDMA_READ_RESPONSE_LAST: Self = Self(0x0f);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Self = Self(0x10);
    pub const RC_ACKNOWLEDGE: Self = Self(0x11);
    pub const RC_ATOMIC_ACKNOWLEDGE: Self = Self(0x12);
    pub const RC_COMPARE_SWAP: Self = Self(0x13);
    pub const RC_FETCH_ADD: Self = Self(0x14);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Self = Self(0x16);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Self = Self(0x17);
    pub const RC_FLUSH: Self = Self(0x1c);
    pub const RC_ATOMIC_WRITE: Self = Self(0x1d);
    pub const UC_SEND_FIRST: Self = Self(0x20);
    pub const UC_SEND_MIDDLE: Self = Self(0x21);
    pub const UC_SEND_LAST: Self = Self(0x22);
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Self = Self(0x23);
    pub const UC_SEND_ONLY: Self = Self(0x24);
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Self = Self(0x25);
    pub const UC_RDMA_WRITE_FIRST: Self = Self(0x26);
    pub const UC_RDMA_WRITE_MIDDLE: Self = Self(0x27);
    pub const UC_RDMA_WRITE_LAST: Self = Self(0x28);
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Self = Self(0x29);
    pub const UC_RDMA_WRITE_ONLY: Self = Self(0x2a);
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Self = Self(0x2b);
    pub const UD_SEND_ONLY: Self = Self(0x64);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Self = Self(0x65);
    /// RoCEv2 Congestion Notification Packet.
    pub const CNP: Self = Self(0x81);

    /// The transport service (bits 7..5).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            _ => Transport::Vendor,
        }
    }

    /// The operation (bits 4..0).
    pub const fn operation(self) -> u8 {
        self.0 & 0x1f
    }

    const fn op(self) -> Option<Op> {
        let o = self.operation();
        let valid = match self.transport() {
            Transport::Rc => o <= 0x14 || matches!(o, 0x16 | 0x17 | 0x1c | 0x1d),
            Transport::Uc => o <= 0x0b,
            Transport::Rd => o <= 0x15 || matches!(o, 0x1c | 0x1d),
            Transport::Ud => matches!(o, 0x04 | 0x05),
            Transport::Xrc => o <= 0x14 || matches!(o, 0x16 | 0x17),
            Transport::Cnp | Transport::Vendor => false,
        };
        if valid {
            OPS[o as usize]
        } else {
            None
        }
    }

    /// `true` for the opcodes the IBTA (or the RoCEv2 annex, for the CNP) defines.
    pub const fn is_defined(self) -> bool {
        self.0 == Self::CNP.0 || self.op().is_some()
    }

    /// The extended headers that follow the BTH. Empty for unknown opcodes.
    pub const fn ext_headers(self) -> ExtHeaders {
        ExtHeaders(EXT_SETS[self.0 as usize])
    }

    /// Offset from the start of the BTH of extended header `which` (one header), or `None`
    /// when this opcode does not carry it. A table lookup.
    pub const fn ext_offset(self, which: ExtHeaders) -> Option<usize> {
        if which.0.count_ones() != 1 {
            return None;
        }
        let at = EXT_OFFSETS[self.0 as usize][which.0.trailing_zeros() as usize];
        if at == 0 {
            None
        } else {
            Some(at as usize)
        }
    }

    const fn compute_ext_headers(self) -> ExtHeaders {
        let Some(op) = self.op() else {
            return ExtHeaders::NONE;
        };
        let transport_specific = match self.transport() {
            Transport::Rd if op.request => ExtHeaders::RDETH.union(ExtHeaders::DETH),
            Transport::Rd => ExtHeaders::RDETH,
            Transport::Ud => ExtHeaders::DETH,
            Transport::Xrc if op.request => ExtHeaders::XRCETH,
            _ => ExtHeaders::NONE,
        };
        transport_specific.union(op.headers)
    }

    /// Wire length of the BTH plus the extended headers this opcode carries (a table lookup).
    pub const fn header_len(self) -> usize {
        HEADER_LENS[self.0 as usize] as usize
    }

    /// `true` when the opcode carries a payload. The CNP's 16 reserved bytes and an unknown
    /// opcode's opaque body count as payload.
    pub const fn has_payload(self) -> bool {
        HAS_PAYLOAD[self.0 as usize]
    }

    const fn compute_has_payload(self) -> bool {
        match self.op() {
            Some(op) => op.payload,
            None => true,
        }
    }

    /// First / middle / last / only. CNPs and unknown opcodes are `Only`.
    pub const fn class(self) -> Class {
        match self.op() {
            Some(op) => op.class,
            None => Class::Only,
        }
    }

    /// `true` for request opcodes (requester to responder).
    pub const fn is_request(self) -> bool {
        matches!(self.op(), Some(Op { request: true, .. }))
    }

    /// `true` for response opcodes (READ responses, ACK, atomic ACK).
    pub const fn is_response(self) -> bool {
        matches!(self.op(), Some(Op { request: false, .. }))
    }

    /// `true` for the first packet of a message (class First or Only).
    pub const fn starts_message(self) -> bool {
        matches!(self.class(), Class::First | Class::Only)
    }

    /// `true` for the last packet of a message (class Last or Only).
    pub const fn ends_message(self) -> bool {
        matches!(self.class(), Class::Last | Class::Only)
    }

    /// `true` for SEND opcodes of any transport.
    pub const fn is_send(self) -> bool {
        self.op().is_some() && matches!(self.operation(), 0x00..=0x05 | 0x16 | 0x17)
    }

    /// `true` for RDMA WRITE opcodes of any transport.
    pub const fn is_write(self) -> bool {
        self.op().is_some() && matches!(self.operation(), 0x06..=0x0b)
    }

    /// `true` for RDMA READ response opcodes.
    pub const fn is_read_response(self) -> bool {
        self.op().is_some() && matches!(self.operation(), 0x0d..=0x10)
    }

    /// `true` for compare-and-swap and fetch-and-add.
    pub const fn is_atomic(self) -> bool {
        self.op().is_some() && matches!(self.operation(), 0x13 | 0x14)
    }

    /// `true` when the opcode carries immediate data.
    pub const fn has_immediate(self) -> bool {
        self.ext_headers().contains(ExtHeaders::IMMDT)
    }

    /// `true` when the responder consumes a receive work request for this packet's message:
    /// SENDs and RDMA WRITE with immediate (on its last or only packet).
    pub const fn consumes_receive(self) -> bool {
        self.is_send() || (self.is_write() && self.has_immediate())
    }

    /// The operation name without transport prefix (`SEND_FIRST`), or `None` when undefined.
    pub const fn operation_name(self) -> Option<&'static str> {
        match self.op() {
            Some(op) => Some(op.name),
            None => None,
        }
    }
}

/// Extended-header set of each of the 256 opcodes, computed at compile time.
const EXT_SETS: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).compute_ext_headers().0;
        i += 1;
    }
    t
};

/// Whether each opcode carries a payload.
const HAS_PAYLOAD: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).compute_has_payload();
        i += 1;
    }
    t
};

/// BTH + extended header length of each opcode.
const HEADER_LENS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (crate::bth::HEADER_LEN + ExtHeaders(EXT_SETS[i]).len()) as u8;
        i += 1;
    }
    t
};

/// Offset of each extended header (indexed by its bit) for each opcode; 0 = absent.
const EXT_OFFSETS: [[u8; 10]; 256] = {
    let mut t = [[0u8; 10]; 256];
    let mut i = 0;
    while i < 256 {
        let set = ExtHeaders(EXT_SETS[i]);
        let mut at = crate::bth::HEADER_LEN;
        let mut k = 0;
        while k < ExtHeaders::ORDER.len() {
            let (h, len) = ExtHeaders::ORDER[k];
            if set.contains(h) {
                t[i][h.0.trailing_zeros() as usize] = at as u8;
                at += len;
            }
            k += 1;
        }
        i += 1;
    }
    t
};

impl fmt::Display for Opcode {
    /// `RC_RDMA_WRITE_FIRST`, `CNP`, or `UNKNOWN_0xNN`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::CNP {
            return f.write_str("CNP");
        }
        match self.operation_name() {
            Some(name) => write!(f, "{}_{}", self.transport().name(), name),
            None => write!(f, "UNKNOWN_{:#04x}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn rc_table_rows() {
        assert_eq!(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.ext_headers(),
            RETH.union(IMM)
        );
        assert_eq!(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
                .ext_headers()
                .len(),
            20
        );
        assert_eq!(
            Opcode::RC_ATOMIC_ACKNOWLEDGE.ext_headers(),
            AETH.union(ExtHeaders::ATOMIC_ACK_ETH)
        );
        assert_eq!(Opcode::RC_FETCH_ADD.ext_headers().len(), 28);
        assert_eq!(Opcode::RC_FLUSH.ext_headers().len(), 20);
        assert!(!Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
            .ext_headers()
            .contains(AETH));
        assert!(Opcode::RC_RDMA_READ_REQUEST.is_request());
        assert!(!Opcode::RC_RDMA_READ_REQUEST.has_payload());
        assert!(Opcode::RC_ACKNOWLEDGE.is_response());
        assert_eq!(Opcode::RC_SEND_LAST_WITH_INVALIDATE.class(), Class::Last);
        assert!(Opcode::RC_ATOMIC_WRITE.has_payload());
        assert!(Opcode::RC_SEND_FIRST.consumes_receive());
        assert!(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE.consumes_receive());
        assert!(!Opcode::RC_RDMA_WRITE_LAST.consumes_receive());
    }

    #[test]
    fn transports_add_their_headers() {
        assert_eq!(Opcode::UD_SEND_ONLY.ext_headers(), ExtHeaders::DETH);
        assert_eq!(
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.ext_headers(),
            ExtHeaders::DETH.union(IMM)
        );
        // RD WRITE First: RDETH, DETH, RETH.
        assert_eq!(Opcode(0x46).ext_headers().len(), 4 + 8 + 16);
        // RD ACK: RDETH, AETH (responses carry no DETH).
        assert_eq!(Opcode(0x51).ext_headers(), ExtHeaders::RDETH.union(AETH));
        // XRC SEND Only: XRCETH; XRC ACK: AETH only.
        assert_eq!(Opcode(0xa4).ext_headers(), ExtHeaders::XRCETH);
        assert_eq!(Opcode(0xb1).ext_headers(), AETH);
        assert!(!Opcode(0x2c).is_defined(), "UC has no READ");
        assert!(!Opcode(0x60).is_defined(), "UD has only SEND Only (+imm)");
    }

    #[test]
    fn ext_offsets_follow_wire_order() {
        for v in 0..=255u8 {
            let op = Opcode(v);
            let set = op.ext_headers();
            let mut at = crate::bth::HEADER_LEN;
            for (h, len) in ExtHeaders::ORDER {
                if set.contains(h) {
                    assert_eq!(op.ext_offset(h), Some(at), "{op}");
                    at += len;
                } else {
                    assert_eq!(op.ext_offset(h), None, "{op}");
                }
            }
            assert_eq!(op.header_len(), at, "{op}");
        }
        assert_eq!(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.ext_offset(ExtHeaders::IMMDT),
            Some(28)
        );
        assert_eq!(Opcode::RC_ACKNOWLEDGE.ext_offset(RETH.union(AETH)), None);
    }

    #[test]
    fn names() {
        assert_eq!(
            Opcode::RC_RDMA_WRITE_FIRST.to_string(),
            "RC_RDMA_WRITE_FIRST"
        );
        assert_eq!(Opcode::UD_SEND_ONLY.to_string(), "UD_SEND_ONLY");
        assert_eq!(Opcode::CNP.to_string(), "CNP");
        assert_eq!(Opcode(0x18).to_string(), "UNKNOWN_0x18");
        assert_eq!(Opcode(0xe0).to_string(), "UNKNOWN_0xe0");
        assert_eq!(Opcode::CNP.class(), Class::Only);
        assert!(Opcode::CNP.has_payload());
    }

    #[test]
    fn unknown_opcodes_have_no_headers() {
        for v in 0..=255u8 {
            let op = Opcode(v);
            if !op.is_defined() {
                assert!(op.ext_headers().is_empty(), "{op}");
                assert!(op.has_payload());
            }
        }
    }
}
