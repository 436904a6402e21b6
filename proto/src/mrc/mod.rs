//! MRC, OCP Multipath Reliable Connection 1.0 (March 2026): RoCEv2 with opcodes in the
//! manufacturer range (IBTA Vol 1 §9.2 leaves 0xC0-0xFF to vendors) for per-packet multipath
//! WRITEs, selective ACKs, NACKs with reasons, reliability probes and endpoint messages.
//! Every packet is BTH, the headers of its opcode ([`MrcOpcode::stack`]), payload, pad and
//! the ICRC, computed as for RoCEv2.
//!
//! The specification's text is not public. The layouts here are those the two public
//! serialisers agree on (the ns-3 model in `HanGuTalker/uet-simulator`, `src/mrc/model/`,
//! and the MRC emulator's `core/mrc_headers.py`), checked against the ns-3 model's header
//! test values. Where they disagree, nothing is guessed silently:
//! * **the BTH flag bits** of byte 8 (the emulator: `rtx` 0x20, TSETH present 0x10; ns-3:
//!   `rtx` 0x40): [`BthFlags`] keeps the byte and reads it as a named [`FlagReading`];
//! * **whether a WRITE carries a TSETH**: [`TsethRule`] says how a decoder decides, and
//!   [`Headers::tseth_rule`] which rule decided;
//! * **the UDP port**: both serialisers use [`MRC_UDP_PORT`] (4971); on 4791 the opcodes
//!   0xC6-0xDE are MRC only when the user says so (they are any vendor's there).
mod headers;

pub use headers::{
    CcState, Eeth, EndpointOp, Erth, Meth, NackReason, Neth, Peth, Seth, SkipMode, TsWord, Tseth,
};

use crate::error::need;
use crate::reth::{Packet as RethPacket, Repr as RethRepr, HEADER_LEN as RETH_LEN};
use crate::small::ImmDt;
use crate::{AethPacket, AethRepr, Layer, Opcode, Result};

/// The UDP destination port both public MRC implementations use.
pub const MRC_UDP_PORT: u16 = 4971;

/// The destination QP of endpoint requests and responses (they take no PSN).
pub const ENDPOINT_QPN: u32 = 2;

/// An MRC opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MrcOpcode {
    /// 0xC6.
    WriteFirst,
    /// 0xC7 (a full RETH in every packet).
    WriteMiddle,
    /// 0xC8.
    WriteLast,
    /// 0xC9.
    WriteLastImm,
    /// 0xCA.
    WriteOnly,
    /// 0xCB.
    WriteOnlyImm,
    /// 0xD1: the transport ACK (an IBTA AETH).
    Ack,
    /// 0xD8: to the endpoint (DQPN 2).
    EndpointRequest,
    /// 0xD9: from the endpoint.
    EndpointResponse,
    /// 0xDC: selective ACK.
    Sack,
    /// 0xDD: NACK.
    Nack,
    /// 0xDE: reliability probe.
    ProbeRequest,
}

/// The headers an MRC opcode puts after the BTH, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stack {
    /// METH, TSETH (when present), RETH, ImmDt (`*_IMM`), payload.
    Write {
        /// ImmDt after the RETH.
        imm: bool,
    },
    /// AETH.
    Ack,
    /// ERTH.
    EndpointRequest,
    /// EETH.
    EndpointResponse,
    /// SETH, CC_STATE.
    Sack,
    /// NETH.
    Nack,
    /// PETH.
    Probe,
}

impl MrcOpcode {
    /// Every MRC opcode.
    pub const ALL: [Self; 12] = [
        Self::WriteFirst,
        Self::WriteMiddle,
        Self::WriteLast,
        Self::WriteLastImm,
        Self::WriteOnly,
        Self::WriteOnlyImm,
        Self::Ack,
        Self::EndpointRequest,
        Self::EndpointResponse,
        Self::Sack,
        Self::Nack,
        Self::ProbeRequest,
    ];

    /// The MRC opcode `op` is, if any.
    pub const fn from_opcode(op: Opcode) -> Option<Self> {
        Some(match op.0 {
            0xc6 => Self::WriteFirst,
            0xc7 => Self::WriteMiddle,
            0xc8 => Self::WriteLast,
            0xc9 => Self::WriteLastImm,
            0xca => Self::WriteOnly,
            0xcb => Self::WriteOnlyImm,
            0xd1 => Self::Ack,
            0xd8 => Self::EndpointRequest,
            0xd9 => Self::EndpointResponse,
            0xdc => Self::Sack,
            0xdd => Self::Nack,
            0xde => Self::ProbeRequest,
            _ => return None,
        })
    }

    /// Its BTH opcode.
    pub const fn opcode(self) -> Opcode {
        Opcode(match self {
            Self::WriteFirst => 0xc6,
            Self::WriteMiddle => 0xc7,
            Self::WriteLast => 0xc8,
            Self::WriteLastImm => 0xc9,
            Self::WriteOnly => 0xca,
            Self::WriteOnlyImm => 0xcb,
            Self::Ack => 0xd1,
            Self::EndpointRequest => 0xd8,
            Self::EndpointResponse => 0xd9,
            Self::Sack => 0xdc,
            Self::Nack => 0xdd,
            Self::ProbeRequest => 0xde,
        })
    }

    /// Its name, as the public sources write it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::WriteFirst => "MRC_RDMA_WRITE_FIRST",
            Self::WriteMiddle => "MRC_RDMA_WRITE_MIDDLE",
            Self::WriteLast => "MRC_RDMA_WRITE_LAST",
            Self::WriteLastImm => "MRC_RDMA_WRITE_LAST_IMM",
            Self::WriteOnly => "MRC_RDMA_WRITE_ONLY",
            Self::WriteOnlyImm => "MRC_RDMA_WRITE_ONLY_IMM",
            Self::Ack => "MRC_ACKNOWLEDGE",
            Self::EndpointRequest => "MRC_ENDPOINT_REQUEST",
            Self::EndpointResponse => "MRC_ENDPOINT_RESPONSE",
            Self::Sack => "MRC_RELIABILITY_SACK",
            Self::Nack => "MRC_RELIABILITY_NACK",
            Self::ProbeRequest => "MRC_RELIABILITY_PROBE_REQ",
        }
    }

    /// The headers it carries.
    pub const fn stack(self) -> Stack {
        match self {
            Self::WriteFirst | Self::WriteMiddle | Self::WriteLast | Self::WriteOnly => {
                Stack::Write { imm: false }
            }
            Self::WriteLastImm | Self::WriteOnlyImm => Stack::Write { imm: true },
            Self::Ack => Stack::Ack,
            Self::EndpointRequest => Stack::EndpointRequest,
            Self::EndpointResponse => Stack::EndpointResponse,
            Self::Sack => Stack::Sack,
            Self::Nack => Stack::Nack,
            Self::ProbeRequest => Stack::Probe,
        }
    }

    /// Whether it takes a PSN (endpoint messages and probes do not).
    pub const fn takes_psn(self) -> bool {
        !matches!(
            self,
            Self::EndpointRequest | Self::EndpointResponse | Self::ProbeRequest
        )
    }
}

/// How BTH byte 8's flag bits are read: the sources disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FlagReading {
    /// The MRC emulator's: `rtx` 0x20, TSETH present 0x10 (0x80 is IBTA's AckReq).
    #[default]
    Emulator,
    /// The ns-3 model's: `rtx` 0x40; no TSETH flag found.
    Ns3,
}

impl FlagReading {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Emulator => "emulator",
            Self::Ns3 => "ns3",
        }
    }
}

/// BTH byte 8 of an MRC packet as sent (IBTA: AckReq and 7 reserved bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BthFlags(pub u8);

impl BthFlags {
    /// IBTA's AckReq (0x80), which both readings keep.
    pub const fn ack_req(self) -> bool {
        self.0 & 0x80 != 0
    }
    /// The retransmission flag, as `reading` places it.
    pub const fn rtx(self, reading: FlagReading) -> bool {
        self.0
            & match reading {
                FlagReading::Emulator => 0x20,
                FlagReading::Ns3 => 0x40,
            }
            != 0
    }
    /// The TSETH-present flag, as `reading` places it (`None`: it has none).
    pub const fn tseth(self, reading: FlagReading) -> Option<bool> {
        match reading {
            FlagReading::Emulator => Some(self.0 & 0x10 != 0),
            FlagReading::Ns3 => None,
        }
    }
}

/// How a decoder decides whether a WRITE packet carries a TSETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TsethRule {
    /// The BTH flag, as [`FlagReading::Emulator`] places it; absent where the reading has none.
    #[default]
    Flag,
    /// Never.
    Absent,
    /// Always.
    Present,
}

impl TsethRule {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Flag => "flag",
            Self::Absent => "absent",
            Self::Present => "present",
        }
    }
}

/// How MRC is read: the two choices the public sources leave open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Reading {
    /// BTH byte 8.
    pub flags: FlagReading,
    /// TSETH presence.
    pub tseth: TsethRule,
}

/// The headers of one MRC packet after its BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body {
    /// A WRITE packet.
    Write {
        /// METH.
        meth: Meth,
        /// TSETH, when the rule says it is there.
        tseth: Option<Tseth>,
        /// The RETH every WRITE packet carries (VA advances by the MTU per packet).
        reth: RethRepr,
        /// Immediate data (`*_IMM`).
        imm: Option<ImmDt>,
    },
    /// The transport ACK.
    Ack(AethRepr),
    /// Endpoint request.
    EndpointRequest(Erth),
    /// Endpoint response.
    EndpointResponse(Eeth),
    /// Selective ACK.
    Sack(Seth, CcState),
    /// NACK.
    Nack(Neth),
    /// Reliability probe.
    Probe(Peth),
}

/// An MRC packet's headers after the BTH, with what decided the ambiguous ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Headers {
    /// The opcode.
    pub opcode: MrcOpcode,
    /// BTH byte 8.
    pub flags: BthFlags,
    /// The headers.
    pub body: Body,
    /// Their length in bytes (the payload follows).
    pub len: usize,
    /// The rule that decided TSETH presence (WRITEs).
    pub tseth_rule: TsethRule,
}

impl Headers {
    /// Reads the headers `op` puts after the BTH from `after_bth` (which may run on into
    /// the payload), `flags` being BTH byte 8.
    pub fn parse(op: MrcOpcode, flags: u8, after_bth: &[u8], reading: Reading) -> Result<Self> {
        let flags = BthFlags(flags);
        let b = after_bth;
        let (body, len) = match op.stack() {
            Stack::Write { imm } => {
                let meth = Meth::parse(b)?;
                let tseth_here = match reading.tseth {
                    TsethRule::Flag => flags.tseth(reading.flags).unwrap_or(false),
                    TsethRule::Absent => false,
                    TsethRule::Present => true,
                };
                let mut at = Meth::LEN;
                let tseth = if tseth_here {
                    let t = Tseth::parse(&b[at..])?;
                    at += Tseth::LEN;
                    Some(t)
                } else {
                    None
                };
                need(Layer::Reth, &b[at..], RETH_LEN)?;
                let reth = RethRepr::parse(&RethPacket::new_unchecked(&b[at..]))?;
                at += RETH_LEN;
                let imm = if imm {
                    let i = ImmDt::parse(&b[at..])?;
                    at += ImmDt::LEN;
                    Some(i)
                } else {
                    None
                };
                (
                    Body::Write {
                        meth,
                        tseth,
                        reth,
                        imm,
                    },
                    at,
                )
            }
            Stack::Ack => {
                let p = AethPacket::new_checked(b)?;
                (Body::Ack(AethRepr::parse(&p)?), crate::aeth::HEADER_LEN)
            }
            Stack::EndpointRequest => (Body::EndpointRequest(Erth::parse(b)?), Erth::LEN),
            Stack::EndpointResponse => (Body::EndpointResponse(Eeth::parse(b)?), Eeth::LEN),
            Stack::Sack => {
                let s = Seth::parse(b)?;
                let c = CcState::parse(&b[Seth::LEN..])?;
                (Body::Sack(s, c), Seth::LEN + CcState::LEN)
            }
            Stack::Nack => (Body::Nack(Neth::parse(b)?), Neth::LEN),
            Stack::Probe => (Body::Probe(Peth::parse(b)?), Peth::LEN),
        };
        Ok(Self {
            opcode: op,
            flags,
            body,
            len,
            tseth_rule: reading.tseth,
        })
    }
}

impl Body {
    /// Its wire length.
    pub const fn buffer_len(&self) -> usize {
        match self {
            Self::Write { tseth, imm, .. } => {
                Meth::LEN
                    + if tseth.is_some() { Tseth::LEN } else { 0 }
                    + RETH_LEN
                    + if imm.is_some() { ImmDt::LEN } else { 0 }
            }
            Self::Ack(_) => crate::aeth::HEADER_LEN,
            Self::EndpointRequest(_) => Erth::LEN,
            Self::EndpointResponse(_) => Eeth::LEN,
            Self::Sack(..) => Seth::LEN + CcState::LEN,
            Self::Nack(_) => Neth::LEN,
            Self::Probe(_) => Peth::LEN,
        }
    }

    /// Writes the headers into `buf` (the payload of a RoCE packet builder whose BTH holds
    /// the MRC opcode) and returns their length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        need(Layer::Buffer, buf, n)?;
        match self {
            Self::Write {
                meth,
                tseth,
                reth,
                imm,
            } => {
                meth.emit(buf);
                let mut at = Meth::LEN;
                if let Some(t) = tseth {
                    t.emit(&mut buf[at..]);
                    at += Tseth::LEN;
                }
                reth.emit(&mut RethPacket::new_unchecked(&mut buf[at..at + RETH_LEN]));
                at += RETH_LEN;
                if let Some(i) = imm {
                    i.emit(&mut buf[at..]);
                }
            }
            Self::Ack(a) => a.emit(&mut AethPacket::new_unchecked(&mut buf[..n])),
            Self::EndpointRequest(e) => e.emit(buf),
            Self::EndpointResponse(e) => e.emit(buf),
            Self::Sack(s, c) => {
                s.emit(buf);
                c.emit(&mut buf[Seth::LEN..]);
            }
            Self::Nack(h) => h.emit(buf),
            Self::Probe(p) => p.emit(buf),
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
