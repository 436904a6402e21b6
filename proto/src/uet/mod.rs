//! UET, the Ultra Ethernet Transport (UE Specification 1.0.1, 1.0.3): a PDS header
//! (delivery: RUD, ROD, RUDI, UUD, with ACKs, SACKs, NACKs and control packets) and an SES
//! header (semantics: writes, reads, sends, atomics) over UDP [`UET_UDP_PORT`] (the
//! entropy in the UDP source port, the UDP checksum zero), or over IP protocol
//! [`UET_IP_PROTO`] behind a 4-byte [`EntropyHeader`]. An optional security header
//! ([`pds::Tss`]) comes first.
//!
//! The specification's text is not openly readable; the layouts are those Wireshark's
//! `packet-uet.c`, XDP2's `uet/pds.h`/`ses.h` and the UEC reference provider's Lua dissector
//! agree on. Where they disagree the bits are kept and the reading is named: the length of
//! the ACK_CCX and NACK_CCX extensions ([`pds::CcxReading`]), the width of a data
//! response's payload length ([`ses::ResponseData::payload_length`]).
pub mod pds;
pub mod ses;

use crate::error::need;
use crate::wire::{be16, put16};
use crate::{Layer, Result};

pub use pds::CcxReading;

/// UET's UDP destination port.
pub const UET_UDP_PORT: u16 = 4793;

/// UET's IP protocol number when it runs over IP without UDP (an [`EntropyHeader`] first).
pub const UET_IP_PROTO: u8 = 253;

/// The entropy header of UET over IP (4 bytes): `entropy u16 | reserved u16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EntropyHeader {
    /// The entropy value (over UDP it is the source port).
    pub entropy: u16,
    /// Reserved.
    pub reserved: u16,
}

impl EntropyHeader {
    /// Wire length.
    pub const LEN: usize = 4;
    /// Reads the header.
    pub fn parse(b: &[u8]) -> Result<Self> {
        need(Layer::UetEntropy, b, Self::LEN)?;
        Ok(Self {
            entropy: be16(b),
            reserved: be16(&b[2..]),
        })
    }
    /// Writes the header. Panics if `b` is shorter than [`EntropyHeader::LEN`].
    pub fn emit(&self, b: &mut [u8]) {
        put16(b, self.entropy);
        put16(&mut b[2..], self.reserved);
    }
}

/// The 2-byte prologue of every PDS header: `type(5) | next_hdr or ctl_type(4) | flags(7)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Prologue(pub u16);

impl Prologue {
    /// A prologue of these parts.
    pub const fn new(ty: PdsType, next_hdr: u8, flags: u8) -> Self {
        Self(((ty.value() as u16) << 11) | ((next_hdr as u16 & 0xf) << 7) | (flags as u16 & 0x7f))
    }
    /// The packet type.
    pub const fn pds_type(self) -> PdsType {
        PdsType::from_bits((self.0 >> 11) as u8)
    }
    /// The SES header that follows (the control type, in a CONTROL packet).
    pub const fn next_hdr(self) -> u8 {
        ((self.0 >> 7) & 0xf) as u8
    }
    /// The 7 flag bits (their meaning is the type's).
    pub const fn flags(self) -> u8 {
        (self.0 & 0x7f) as u8
    }
    /// RETX: a retransmission (every type that has flags).
    pub const fn retx(self) -> bool {
        self.0 & 0x10 != 0
    }
    /// The SES header that follows, named.
    pub const fn next_header(self) -> NextHeader {
        NextHeader::from_bits(self.next_hdr())
    }
}

macro_rules! code_enum {
    ($(#[$m:meta])* $name:ident, $width:expr, { $($(#[$vm:meta])* $v:ident = $n:expr, $s:expr;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A value no public source names.
            Other(u8),
        }

        impl $name {
            /// From the field.
            pub const fn from_bits(v: u8) -> Self {
                match v & $width {
                    $($n => Self::$v,)*
                    v => Self::Other(v),
                }
            }
            /// The field's value.
            pub const fn value(self) -> u8 {
                match self {
                    $(Self::$v => $n,)*
                    Self::Other(v) => v,
                }
            }
            /// The name the public sources use (`None` for [`Self::Other`]).
            pub const fn name(self) -> Option<&'static str> {
                match self {
                    $(Self::$v => Some($s),)*
                    Self::Other(_) => None,
                }
            }
        }
    };
}

code_enum!(
    /// The PDS packet type (5 bits).
    PdsType, 0x1f, {
    /// 1: security header.
    Tss = 1, "TSS";
    /// 2: reliable unordered request.
    RudReq = 2, "RUD_REQ";
    /// 3: reliable ordered request.
    RodReq = 3, "ROD_REQ";
    /// 4: reliable unordered idempotent request.
    RudiReq = 4, "RUDI_REQ";
    /// 5: its response.
    RudiResp = 5, "RUDI_RESP";
    /// 6: unreliable unordered request.
    UudReq = 6, "UUD_REQ";
    /// 7: ACK.
    Ack = 7, "ACK";
    /// 8: ACK with congestion control (SACK bitmap, CC state).
    AckCc = 8, "ACK_CC";
    /// 9: ACK with an extended CC.
    AckCcx = 9, "ACK_CCX";
    /// 10: NACK.
    Nack = 10, "NACK";
    /// 11: control.
    Control = 11, "CONTROL";
    /// 12: NACK with an extended CC.
    NackCcx = 12, "NACK_CCX";
    /// 13: RUD request with congestion control.
    RudCcReq = 13, "RUD_CC_REQ";
    /// 14: ROD request with congestion control.
    RodCcReq = 14, "ROD_CC_REQ";
});

code_enum!(
    /// The SES header after the PDS (`next_hdr`, 4 bits).
    NextHeader, 0xf, {
    /// 0: none.
    None = 0, "NONE";
    /// 1: small request (20 bytes).
    RequestSmall = 1, "REQUEST_SMALL";
    /// 2: medium request (32 bytes).
    RequestMedium = 2, "REQUEST_MEDIUM";
    /// 3: standard request (44 bytes).
    RequestStd = 3, "REQUEST_STD";
    /// 4: response (12 bytes).
    Response = 4, "RESPONSE";
    /// 5: response with data (20 bytes).
    ResponseData = 5, "RESPONSE_DATA";
    /// 6: response with small data.
    ResponseDataSmall = 6, "RESPONSE_DATA_SMALL";
});

code_enum!(
    /// A CONTROL packet's type (4 bits).
    ControlType, 0xf, {
    /// 0.
    Noop = 0, "NOOP";
    /// 1: asks for an ACK.
    AckReq = 1, "ACK_REQ";
    /// 2: clear a PSN.
    Clear = 2, "CLEAR";
    /// 3: asks for a clear.
    ClearReq = 3, "CLEAR_REQ";
    /// 4: close the PDC.
    Close = 4, "CLOSE";
    /// 5: asks for a close.
    CloseReq = 5, "CLOSE_REQ";
    /// 6: a probe (the payload is the SACK base PSN).
    Probe = 6, "PROBE";
    /// 7: credit.
    Credit = 7, "CREDIT";
    /// 8: asks for credit.
    CreditReq = 8, "CREDIT_REQ";
    /// 9: negotiation (XDP2 and the reference dissector).
    Negotiation = 9, "NEGOTIATION";
});

code_enum!(
    /// A NACK's code.
    NackCode, 0xff, {
    /// 0x01.
    Trimmed = 0x01, "TRIMMED";
    /// 0x02.
    TrimmedLastHop = 0x02, "TRIMMED_LASTHOP";
    /// 0x03.
    TrimmedAck = 0x03, "TRIMMED_ACK";
    /// 0x04.
    NoPdcAvail = 0x04, "NO_PDC_AVAIL";
    /// 0x05.
    NoCccAvail = 0x05, "NO_CCC_AVAIL";
    /// 0x06.
    NoBitmap = 0x06, "NO_BITMAP";
    /// 0x07.
    NoPktBuffer = 0x07, "NO_PKT_BUFFER";
    /// 0x08.
    NoGtdDelAvail = 0x08, "NO_GTD_DEL_AVAIL";
    /// 0x09.
    NoSesMsgAvail = 0x09, "NO_SES_MSG_AVAIL";
    /// 0x0A.
    NoResource = 0x0a, "NO_RESOURCE";
    /// 0x0B.
    PsnOorWindow = 0x0b, "PSN_OOR_WINDOW";
    /// 0x0D.
    RodOoo = 0x0d, "ROD_OOO";
    /// 0x0E.
    InvDpdcid = 0x0e, "INV_DPDCID";
    /// 0x0F.
    PdcHdrMismatch = 0x0f, "PDC_HDR_MISMATCH";
    /// 0x10.
    Closing = 0x10, "CLOSING";
    /// 0x11.
    ClosingInErr = 0x11, "CLOSING_IN_ERR";
    /// 0x12.
    PktNotRcvd = 0x12, "PKT_NOT_RCVD";
    /// 0x13.
    GtdDelRespUnavail = 0x13, "GTD_DEL_RESP_UNAVAIL";
    /// 0x14.
    AckWithData = 0x14, "ACK_WITH_DATA";
    /// 0x15.
    InvalidSyn = 0x15, "INVALID_SYN";
    /// 0x16.
    PdcModeMismatch = 0x16, "PDC_MODE_MISMATCH";
    /// 0x17.
    NewStartPsn = 0x17, "NEW_START_PSN";
    /// 0x18.
    RcvdSesProcg = 0x18, "RCVD_SES_PROCG";
    /// 0x19.
    UnexpEvent = 0x19, "UNEXP_EVENT";
    /// 0x1A.
    RcvrInferLoss = 0x1a, "RCVR_INFER_LOSS";
    /// 0xFD: experimental, normal.
    ExpNormal = 0xfd, "EXP_NACK_NORMAL";
    /// 0xFE: experimental, error.
    ExpError = 0xfe, "EXP_NACK_ERR";
    /// 0xFF: experimental, fatal.
    ExpFatal = 0xff, "EXP_NACK_FATAL";
});

impl NackCode {
    /// From the byte.
    pub const fn from_u8(v: u8) -> Self {
        Self::from_bits(v)
    }
}

code_enum!(
    /// An SES request opcode (6 bits).
    SesOpcode, 0x3f, {
    /// 0.
    NoOp = 0, "NO_OP";
    /// 1.
    Write = 1, "WRITE";
    /// 2.
    Read = 2, "READ";
    /// 3.
    Atomic = 3, "ATOMIC";
    /// 4.
    FetchingAtomic = 4, "FETCHING_ATOMIC";
    /// 5.
    Send = 5, "SEND";
    /// 6.
    RendezvousSend = 6, "RENDEZVOUS_SEND";
    /// 7.
    DatagramSend = 7, "DATAGRAM_SEND";
    /// 8.
    DeferrableSend = 8, "DEFERRABLE_SEND";
    /// 9.
    TaggedSend = 9, "TAGGED_SEND";
    /// 10.
    RendezvousTsend = 10, "RENDEZVOUS_TSEND";
    /// 11.
    DeferrableTsend = 11, "DEFERRABLE_TSEND";
    /// 12.
    DeferrableRtr = 12, "DEFERRABLE_RTR";
    /// 13.
    TsendAtomic = 13, "TSEND_ATOMIC";
    /// 14.
    TsendFetchAtomic = 14, "TSEND_FETCH_ATOMIC";
    /// 15.
    MsgError = 15, "MSG_ERROR";
    /// 63.
    Extended = 63, "EXTENDED";
});

impl SesOpcode {
    /// Whether a request of this opcode carries the atomic extension.
    pub const fn is_atomic(self) -> bool {
        matches!(
            self,
            Self::Atomic | Self::FetchingAtomic | Self::TsendAtomic | Self::TsendFetchAtomic
        )
    }
}

code_enum!(
    /// An SES response's return code (6 bits).
    ReturnCode, 0x3f, {
    /// 0.
    Null = 0x00, "NULL";
    /// 1.
    Ok = 0x01, "OK";
    /// 2.
    BadGeneration = 0x02, "BAD_GENERATION";
    /// 3.
    Disabled = 0x03, "DISABLED";
    /// 4.
    DisabledGen = 0x04, "DISABLED_GEN";
    /// 5.
    NoMatch = 0x05, "NO_MATCH";
    /// 6.
    UnsupportedOp = 0x06, "UNSUPPORTED_OP";
    /// 7.
    UnsupportedSize = 0x07, "UNSUPPORTED_SIZE";
    /// 8.
    AtInvalid = 0x08, "AT_INVALID";
    /// 9.
    AtPerm = 0x09, "AT_PERM";
    /// 10.
    AtAtsError = 0x0a, "AT_ATS_ERROR";
    /// 11.
    AtNoTrans = 0x0b, "AT_NO_TRANS";
    /// 12.
    AtOutOfRange = 0x0c, "AT_OUT_OF_RANGE";
    /// 13.
    HostPoisoned = 0x0d, "HOST_POISONED";
    /// 14.
    HostUnsuccessCmpl = 0x0e, "HOST_UNSUCCESS_CMPL";
    /// 15.
    AmoUnsupportedOp = 0x0f, "AMO_UNSUPPORTED_OP";
    /// 16.
    AmoUnsupportedDt = 0x10, "AMO_UNSUPPORTED_DT";
    /// 17.
    AmoUnsupportedSize = 0x11, "AMO_UNSUPPORTED_SIZE";
    /// 18.
    AmoUnaligned = 0x12, "AMO_UNALIGNED";
    /// 19.
    AmoFpNan = 0x13, "AMO_FP_NAN";
    /// 20.
    AmoFpUnderflow = 0x14, "AMO_FP_UNDERFLOW";
    /// 21.
    AmoFpOverflow = 0x15, "AMO_FP_OVERFLOW";
    /// 22.
    AmoFpInexact = 0x16, "AMO_FP_INEXACT";
    /// 23.
    PermViolation = 0x17, "PERM_VIOLATION";
    /// 24.
    OpViolation = 0x18, "OP_VIOLATION";
    /// 25.
    BadIndex = 0x19, "BAD_INDEX";
    /// 26.
    BadPid = 0x1a, "BAD_PID";
    /// 27.
    BadJobId = 0x1b, "BAD_JOB_ID";
    /// 28.
    BadMkey = 0x1c, "BAD_MKEY";
    /// 29.
    BadAddr = 0x1d, "BAD_ADDR";
    /// 30.
    Cancelled = 0x1e, "CANCELLED";
    /// 31.
    Undeliverable = 0x1f, "UNDELIVERABLE";
    /// 32.
    Uncor = 0x20, "UNCOR";
    /// 33.
    UncorTrnsnt = 0x21, "UNCOR_TRNSNT";
    /// 34.
    TooLong = 0x22, "TOO_LONG";
    /// 35.
    InitiatorError = 0x23, "INITIATOR_ERROR";
    /// 36.
    Dropped = 0x24, "DROPPED";
});

/// A PDS header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pds {
    /// RUD/ROD request, with its CC part for the `_CC` types.
    Request(pds::Request, Option<pds::RequestCc>),
    /// RUDI request or response.
    Rudi(pds::Rudi),
    /// UUD request.
    Uud(pds::Uud),
    /// ACK, with the ACK_CC extension.
    Ack(pds::Ack, Option<pds::AckCc>),
    /// ACK_CCX.
    AckCcx(pds::Ack, pds::Ccx),
    /// NACK, with the NACK_CCX extension.
    Nack(pds::Nack, Option<pds::Ccx>),
    /// CONTROL.
    Control(pds::Control),
}

/// An SES header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ses {
    /// Standard request, with the atomic extension for atomic opcodes.
    RequestStd(ses::RequestStd, Option<ses::Atomic>),
    /// Small request, with the atomic extension for atomic opcodes.
    RequestSmall(ses::RequestSmall, Option<ses::Atomic>),
    /// Medium request, with the atomic extension for atomic opcodes.
    RequestMedium(ses::RequestMedium, Option<ses::Atomic>),
    /// Response.
    Response(ses::Response),
    /// Response with data.
    ResponseData(ses::ResponseData),
    /// Response with small data.
    ResponseDataSmall(ses::ResponseDataSmall),
}

/// How UET is read where the public sources disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reading {
    /// The ACK_CCX/NACK_CCX extension lengths.
    pub ccx: CcxReading,
}

/// The headers of one UET packet (after UDP, or after IP for protocol 253).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Headers {
    /// The entropy header (over IP).
    pub entropy: Option<EntropyHeader>,
    /// The security header.
    pub tss: Option<pds::Tss>,
    /// The PDS header.
    pub pds: Pds,
    /// The SES header, when the PDS names one.
    pub ses: Option<Ses>,
    /// Their length in bytes (the payload follows).
    pub len: usize,
}

impl Headers {
    /// Reads the headers from the start of a UDP payload to port 4793 (`over_ip` false), or
    /// of an IP payload of protocol 253 (`over_ip`: an entropy header first).
    pub fn parse(b: &[u8], over_ip: bool, reading: Reading) -> Result<Self> {
        let mut at = 0;
        let entropy = if over_ip {
            at += EntropyHeader::LEN;
            Some(EntropyHeader::parse(b)?)
        } else {
            None
        };
        need(Layer::Pds, &b[at..], 2)?;
        let tss = if Prologue(be16(&b[at..])).pds_type() == PdsType::Tss {
            let t = pds::Tss::parse(&b[at..])?;
            at += t.buffer_len();
            Some(t)
        } else {
            None
        };
        need(Layer::Pds, &b[at..], 2)?;
        let pro = Prologue(be16(&b[at..]));
        let rest = &b[at..];
        let (p, n) = match pro.pds_type() {
            PdsType::RudReq | PdsType::RodReq => {
                (Pds::Request(pds::Request::parse(rest)?, None), 12)
            }
            PdsType::RudCcReq | PdsType::RodCcReq => {
                let r = pds::Request::parse(rest)?;
                (
                    Pds::Request(r, Some(pds::RequestCc::parse(&rest[12..])?)),
                    16,
                )
            }
            PdsType::RudiReq | PdsType::RudiResp => (Pds::Rudi(pds::Rudi::parse(rest)?), 8),
            PdsType::UudReq => (Pds::Uud(pds::Uud::parse(rest)?), 4),
            PdsType::Ack => (Pds::Ack(pds::Ack::parse(rest)?, None), 12),
            PdsType::AckCc => {
                let a = pds::Ack::parse(rest)?;
                (Pds::Ack(a, Some(pds::AckCc::parse(&rest[12..])?)), 32)
            }
            PdsType::AckCcx => {
                let a = pds::Ack::parse(rest)?;
                let x = pds::Ccx::parse(&rest[12..], true, reading.ccx)?;
                (Pds::AckCcx(a, x), 12 + usize::from(x.len))
            }
            PdsType::Nack => (Pds::Nack(pds::Nack::parse(rest)?, None), 16),
            PdsType::NackCcx => {
                let h = pds::Nack::parse(rest)?;
                let x = pds::Ccx::parse(&rest[16..], false, reading.ccx)?;
                (Pds::Nack(h, Some(x)), 16 + usize::from(x.len))
            }
            PdsType::Control => (Pds::Control(pds::Control::parse(rest)?), 16),
            PdsType::Tss => {
                return Err(crate::Error::Malformed {
                    layer: Layer::Pds,
                    reason: "a second security header",
                })
            }
            PdsType::Other(_) => {
                return Err(crate::Error::Malformed {
                    layer: Layer::Pds,
                    reason: "unknown PDS type",
                })
            }
        };
        at += n;
        let ses = if matches!(p, Pds::Control(_)) {
            None
        } else {
            parse_ses(pro.next_header(), &b[at..])?
        };
        if let Some(s) = &ses {
            at += s.buffer_len();
        }
        Ok(Self {
            entropy,
            tss,
            pds: p,
            ses,
            len: at,
        })
    }

    /// Writes the headers into `b` and returns their length.
    pub fn emit(&self, b: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        need(Layer::Buffer, b, n)?;
        let mut at = 0;
        if let Some(e) = &self.entropy {
            e.emit(b);
            at += EntropyHeader::LEN;
        }
        if let Some(t) = &self.tss {
            t.emit(&mut b[at..]);
            at += t.buffer_len();
        }
        at += self.pds.emit(&mut b[at..]);
        if let Some(s) = &self.ses {
            s.emit(&mut b[at..]);
        }
        Ok(n)
    }

    /// Their wire length.
    pub fn buffer_len(&self) -> usize {
        self.entropy.map_or(0, |_| EntropyHeader::LEN)
            + self.tss.map_or(0, |t| t.buffer_len())
            + self.pds.buffer_len()
            + self.ses.map_or(0, |s| s.buffer_len())
    }
}

/// The atomic extension after a request whose opcode is atomic (any of the three sizes).
fn atomic(c: &ses::Common, rest: &[u8]) -> Result<Option<ses::Atomic>> {
    if c.opcode().is_atomic() {
        ses::Atomic::parse(rest).map(Some)
    } else {
        Ok(None)
    }
}

fn parse_ses(next: NextHeader, b: &[u8]) -> Result<Option<Ses>> {
    Ok(Some(match next {
        NextHeader::None => return Ok(None),
        NextHeader::RequestSmall => {
            let r = ses::RequestSmall::parse(b)?;
            Ses::RequestSmall(r, atomic(&r.common, &b[ses::RequestSmall::LEN..])?)
        }
        NextHeader::RequestMedium => {
            let r = ses::RequestMedium::parse(b)?;
            Ses::RequestMedium(r, atomic(&r.common, &b[ses::RequestMedium::LEN..])?)
        }
        NextHeader::RequestStd => {
            let r = ses::RequestStd::parse(b)?;
            Ses::RequestStd(r, atomic(&r.common, &b[ses::RequestStd::LEN..])?)
        }
        NextHeader::Response => Ses::Response(ses::Response::parse(b)?),
        NextHeader::ResponseData => Ses::ResponseData(ses::ResponseData::parse(b)?),
        NextHeader::ResponseDataSmall => Ses::ResponseDataSmall(ses::ResponseDataSmall::parse(b)?),
        NextHeader::Other(_) => {
            return Err(crate::Error::Malformed {
                layer: Layer::Ses,
                reason: "unknown next header",
            })
        }
    }))
}

impl Pds {
    /// Its wire length.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::Request(_, cc) => 12 + cc.map_or(0, |_| 4),
            Self::Rudi(_) => 8,
            Self::Uud(_) => 4,
            Self::Ack(_, cc) => 12 + cc.map_or(0, |_| 20),
            Self::AckCcx(_, x) => 12 + usize::from(x.len),
            Self::Nack(_, x) => 16 + x.map_or(0, |x| usize::from(x.len)),
            Self::Control(_) => 16,
        }
    }

    /// The prologue.
    pub const fn prologue(&self) -> Prologue {
        match self {
            Self::Request(r, _) => r.prologue,
            Self::Rudi(r) => r.prologue,
            Self::Uud(u) => u.prologue,
            Self::Ack(a, _) | Self::AckCcx(a, _) => a.prologue,
            Self::Nack(n, _) => n.prologue,
            Self::Control(c) => c.prologue,
        }
    }

    fn emit(&self, b: &mut [u8]) -> usize {
        match self {
            Self::Request(r, cc) => {
                r.emit(b);
                if let Some(c) = cc {
                    c.emit(&mut b[12..]);
                }
            }
            Self::Rudi(r) => r.emit(b),
            Self::Uud(u) => u.emit(b),
            Self::Ack(a, cc) => {
                a.emit(b);
                if let Some(c) = cc {
                    c.emit(&mut b[12..]);
                }
            }
            Self::AckCcx(a, x) => {
                a.emit(b);
                x.emit(&mut b[12..]);
            }
            Self::Nack(n, x) => {
                n.emit(b);
                if let Some(x) = x {
                    x.emit(&mut b[16..]);
                }
            }
            Self::Control(c) => c.emit(b),
        }
        self.buffer_len()
    }
}

impl Ses {
    /// Its wire length.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::RequestStd(_, a) => ses::RequestStd::LEN + a.map_or(0, |a| a.buffer_len()),
            Self::RequestSmall(_, a) => ses::RequestSmall::LEN + a.map_or(0, |a| a.buffer_len()),
            Self::RequestMedium(_, a) => ses::RequestMedium::LEN + a.map_or(0, |a| a.buffer_len()),
            Self::Response(_) => ses::Response::LEN,
            Self::ResponseData(_) => ses::ResponseData::LEN,
            Self::ResponseDataSmall(_) => ses::ResponseDataSmall::LEN,
        }
    }

    fn emit(&self, b: &mut [u8]) {
        match self {
            Self::RequestStd(r, a) => {
                r.emit(b);
                if let Some(a) = a {
                    a.emit(&mut b[ses::RequestStd::LEN..]);
                }
            }
            Self::RequestSmall(r, a) => {
                r.emit(b);
                if let Some(a) = a {
                    a.emit(&mut b[ses::RequestSmall::LEN..]);
                }
            }
            Self::RequestMedium(r, a) => {
                r.emit(b);
                if let Some(a) = a {
                    a.emit(&mut b[ses::RequestMedium::LEN..]);
                }
            }
            Self::Response(r) => r.emit(b),
            Self::ResponseData(r) => r.emit(b),
            Self::ResponseDataSmall(r) => r.emit(b),
        }
    }
}

#[cfg(test)]
mod tests;
