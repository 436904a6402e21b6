//! Work requests, completions and the errors returned to the application (verbs in spirit:
//! `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`).
use roce_proto::{Qpn, RKey};

pub use crate::memory::RemoteAddr;
use crate::memory::SgList;

/// The operation of a send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOp {
    /// SEND: consumes a receive request at the responder.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// SEND with invalidate: the responder invalidates this rkey of its own.
    SendWithInv(RKey),
    /// RDMA WRITE of the gather list to `remote`.
    Write(RemoteAddr),
    /// RDMA WRITE with immediate: also consumes a receive request at the responder.
    WriteWithImm(RemoteAddr, u32),
    /// RDMA READ from `remote` into the scatter list (LOCAL_WRITE).
    Read(RemoteAddr),
    /// Compare-and-swap on the 8-byte word at `remote` (8-byte aligned); the original value
    /// lands in the 8-byte scatter list.
    CompareSwap {
        /// Target word.
        remote: RemoteAddr,
        /// Value compared with the target.
        compare: u64,
        /// Value stored when equal.
        swap: u64,
    },
    /// Fetch-and-add on the 8-byte word at `remote`; the original value lands in the list.
    FetchAdd {
        /// Target word.
        remote: RemoteAddr,
        /// Value added (wrapping).
        add: u64,
    },
    /// RDMA ATOMIC WRITE (IBA 1.5, IBTA Vol 1 annex A19): these 8 bytes stored at once at the
    /// 8-byte aligned `remote` (REMOTE_WRITE), acknowledged like a READ of nothing.
    AtomicWrite {
        /// Target word.
        remote: RemoteAddr,
        /// The bytes stored, as they are.
        data: [u8; 8],
    },
    /// RDMA FLUSH (IBA 1.5, annex A19): makes earlier writes to `remote..remote + len` visible
    /// (global placement) at the responder, acknowledged like a READ of nothing.
    Flush {
        /// Start of the range (with selectivity "range").
        remote: RemoteAddr,
        /// Bytes of the range.
        len: u32,
        /// Selectivity: whole memory region instead of the range.
        whole_region: bool,
    },
}

impl WrOp {
    /// `true` for READ and the atomics (they need responder resources).
    pub const fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            Self::Read(_)
                | Self::CompareSwap { .. }
                | Self::FetchAdd { .. }
                | Self::AtomicWrite { .. }
                | Self::Flush { .. }
        )
    }

    /// `true` for ATOMIC WRITE and FLUSH: answered by an empty READ response.
    pub const fn is_placement(&self) -> bool {
        matches!(self, Self::AtomicWrite { .. } | Self::Flush { .. })
    }
    /// `true` for the atomics.
    pub const fn is_atomic(&self) -> bool {
        matches!(self, Self::CompareSwap { .. } | Self::FetchAdd { .. })
    }
    /// The completion opcode.
    pub const fn wc_opcode(&self) -> WcOpcode {
        match self {
            Self::Send | Self::SendWithImm(_) | Self::SendWithInv(_) => WcOpcode::Send,
            Self::Write(_) | Self::WriteWithImm(..) => WcOpcode::RdmaWrite,
            Self::Read(_) => WcOpcode::RdmaRead,
            Self::CompareSwap { .. } => WcOpcode::CompSwap,
            Self::FetchAdd { .. } => WcOpcode::FetchAdd,
            Self::AtomicWrite { .. } => WcOpcode::AtomicWrite,
            Self::Flush { .. } => WcOpcode::Flush,
        }
    }
}

/// A send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: WrOp,
    /// Gather list (SEND/WRITE source), scatter list (READ destination, atomic result).
    pub sgl: SgList,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// Set the solicited-event bit on the last packet (SEND, WRITE with immediate).
    pub solicited: bool,
    /// Wait until every earlier READ/atomic has completed before starting.
    pub fence: bool,
}

impl WorkRequest {
    /// A signaled request with no flags.
    pub fn new(wr_id: u64, op: WrOp, sgl: SgList) -> Self {
        Self {
            wr_id,
            op,
            sgl,
            signaled: true,
            solicited: false,
            fence: false,
        }
    }
}

/// A receive-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvRequest {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an incoming SEND lands (LOCAL_WRITE).
    pub sgl: SgList,
}

/// `ibv_wc_status` (numeric values as in verbs.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    /// Success.
    Success = 0,
    /// Local length error (receive buffer too small).
    LocLenErr = 1,
    /// Local QP operation error.
    LocQpOpErr = 2,
    /// Local EE context operation error (RD only).
    LocEecOpErr = 3,
    /// Local protection error (bad lkey / bounds / rights in a local list).
    LocProtErr = 4,
    /// Flushed: the QP is in the error state.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// Bad response (unexpected opcode or length).
    BadRespErr = 7,
    /// Local access error.
    LocAccessErr = 8,
    /// Remote invalid request (NAK code 1).
    RemInvReqErr = 9,
    /// Remote access error (NAK code 2).
    RemAccessErr = 10,
    /// Remote operational error (NAK code 3 and unknown codes).
    RemOpErr = 11,
    /// Transport retry counter exhausted.
    RetryExcErr = 12,
    /// RNR retry counter exhausted.
    RnrRetryExcErr = 13,
    /// Local RDD violation (RD only).
    LocRddViolErr = 14,
    /// Remote invalid RD request (RD only).
    RemInvRdReqErr = 15,
    /// The responder aborted the message.
    RemAbortErr = 16,
    /// Invalid EE context number (RD only).
    InvEecnErr = 17,
    /// Invalid EE context state (RD only).
    InvEecStateErr = 18,
    /// Fatal error.
    FatalErr = 19,
    /// Response timeout (RD only).
    RespTimeoutErr = 20,
    /// General error.
    GeneralErr = 21,
}

/// `ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// SEND (any flavour).
    Send = 0,
    /// RDMA WRITE (with or without immediate).
    RdmaWrite = 1,
    /// RDMA READ.
    RdmaRead = 2,
    /// Compare-and-swap.
    CompSwap = 3,
    /// Fetch-and-add.
    FetchAdd = 4,
    /// RDMA FLUSH (`IBV_WC_FLUSH`).
    Flush = 8,
    /// RDMA ATOMIC WRITE (`IBV_WC_ATOMIC_WRITE`).
    AtomicWrite = 9,
    /// An incoming SEND.
    Recv = 128,
    /// An incoming WRITE with immediate.
    RecvRdmaWithImm = 129,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Which operation.
    pub opcode: WcOpcode,
    /// Bytes transferred (receive: bytes placed; WRITE with immediate: the RETH length).
    pub byte_len: u32,
    /// Immediate data of an incoming SEND/WRITE with immediate.
    pub imm_data: Option<u32>,
    /// The rkey an incoming SEND with invalidate invalidated.
    pub invalidated_rkey: Option<RKey>,
    /// The local QP.
    pub qp_num: Qpn,
    /// UD receives: the sender's QPN (its DETH source QP).
    pub src_qp: Option<Qpn>,
    /// UD receives: the sender's address and UDP source port.
    pub src: Option<std::net::SocketAddr>,
}
