//! What a QP writes: the opcode of each packet of a message (IBTA Vol 1 §9.7, packet
//! sequencing: FIRST, MIDDLE*, LAST or ONLY), the ACK and READ response headers, the emit step
//! that writes a packet and its ICRC, and the work completions (`ibv_wc`) it reports.
use roce_proto::{
    AethRepr, AtomicAckEthRepr, BthRepr, Msn, NakCode, Opcode, PKey, PacketRepr, Psn, Qpn, Syndrome,
};

use crate::path::{PathConfig, SeedCache};
use crate::wr::{Completion, WcOpcode, WcStatus, WrOp};

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    /// The first packet of the message.
    pub(crate) first: bool,
    /// The last packet of the message.
    pub(crate) last: bool,
}

impl Position {
    /// Packet `k` (0-based) of a message of `npkts` packets.
    pub(crate) const fn of(k: u32, npkts: u32) -> Self {
        Self {
            first: k == 0,
            last: k + 1 == npkts,
        }
    }
}

/// The opcode of a SEND or WRITE packet at `pos` (IBTA Vol 1 §9.2, the RC opcodes);
/// `None` for the operations that are not segmented (READ, atomics).
pub(crate) const fn request_opcode(op: &WrOp, pos: Position) -> Option<Opcode> {
    let [first, middle, last, only] = match op {
        WrOp::Send => [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST,
            Opcode::RC_SEND_ONLY,
        ],
        WrOp::SendWithImm(_) => [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        ],
        WrOp::SendWithInv(_) => [
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_MIDDLE,
            Opcode::RC_SEND_LAST_WITH_INVALIDATE,
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        ],
        WrOp::Write(_) => [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_LAST,
            Opcode::RC_RDMA_WRITE_ONLY,
        ],
        WrOp::WriteWithImm(..) => [
            Opcode::RC_RDMA_WRITE_FIRST,
            Opcode::RC_RDMA_WRITE_MIDDLE,
            Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        ],
        WrOp::Read(_) => return Some(Opcode::RC_RDMA_READ_REQUEST),
        WrOp::CompareSwap { .. } => return Some(Opcode::RC_COMPARE_SWAP),
        WrOp::FetchAdd { .. } => return Some(Opcode::RC_FETCH_ADD),
        WrOp::AtomicWrite { .. } => return Some(Opcode::RC_ATOMIC_WRITE),
        WrOp::Flush { .. } => return Some(Opcode::RC_FLUSH),
    };
    Some(match (pos.first, pos.last) {
        (true, true) => only,
        (true, false) => first,
        (false, true) => last,
        (false, false) => middle,
    })
}

/// The opcode of a READ response packet at `pos` of the responses of one request.
pub(crate) const fn read_response_opcode(pos: Position) -> Opcode {
    match (pos.first, pos.last) {
        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
    }
}

/// The BTH every packet of a connection carries, for `opcode` and `psn`.
pub(crate) fn bth(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> BthRepr {
    BthRepr {
        opcode,
        pkey: PKey::DEFAULT,
        dest_qp,
        psn,
        ..BthRepr::default()
    }
}

/// An ACK, NAK or atomic ACK (when `orig_data` is given) for `psn` with `msn`.
pub(crate) fn ack(
    dest_qp: Qpn,
    psn: Psn,
    syndrome: Syndrome,
    msn: Msn,
    orig_data: Option<u64>,
) -> PacketRepr<'static> {
    let opcode = if orig_data.is_some() {
        Opcode::RC_ATOMIC_ACKNOWLEDGE
    } else {
        Opcode::RC_ACKNOWLEDGE
    };
    PacketRepr {
        bth: bth(opcode, dest_qp, psn),
        aeth: Some(AethRepr { syndrome, msn }),
        atomic_ack_eth: orig_data.map(|orig_data| AtomicAckEthRepr { orig_data }),
        ..PacketRepr::default()
    }
}

/// The packet `emit` could not write. It never happens for the reprs a QP builds (they match
/// their opcodes and get a buffer of their own length); if it does, the QP fails with
/// `LOC_QP_OP_ERR` instead of sending anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EmitFailed;

/// Writes `repr` and its ICRC into `buf` (resized to the packet length); returns the length.
pub(crate) fn emit(
    repr: &PacketRepr<'_>,
    path: &PathConfig,
    seeds: &mut SeedCache,
    buf: &mut Vec<u8>,
) -> Result<usize, EmitFailed> {
    let len = repr.buffer_len();
    buf.clear();
    buf.resize(len, 0);
    match repr.emit(buf) {
        Ok(n) if n > 0 => {
            seeds.tx(path, n).fill(&mut buf[..n]);
            buf.truncate(n);
            Ok(n)
        }
        _ => {
            buf.clear();
            Err(EmitFailed)
        }
    }
}

/// The completion status of a NAK code (IBTA Vol 1 §9.7, NAK codes; verbs' `ibv_wc_status`).
pub(crate) const fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
        _ => WcStatus::RemOpErr,
    }
}

impl Completion {
    /// A send-queue completion of `op` on `qp`: `byte_len` bytes on success, 0 on error.
    pub(crate) const fn send(
        qp: Qpn,
        wr_id: u64,
        op: &WrOp,
        status: WcStatus,
        byte_len: u32,
    ) -> Self {
        Self {
            wr_id,
            status,
            opcode: op.wc_opcode(),
            byte_len: if matches!(status, WcStatus::Success) {
                byte_len
            } else {
                0
            },
            imm_data: None,
            invalidated_rkey: None,
            qp_num: qp,
            src_qp: None,
            src: None,
        }
    }

    /// A receive completion with no data: an error, or a flush.
    pub(crate) const fn recv_status(qp: Qpn, wr_id: u64, status: WcStatus) -> Self {
        Self {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: qp,
            src_qp: None,
            src: None,
        }
    }

    /// A successful receive completion.
    pub(crate) const fn received(qp: Qpn, wr_id: u64, opcode: WcOpcode, byte_len: u32) -> Self {
        Self {
            byte_len,
            opcode,
            ..Self::recv_status(qp, wr_id, WcStatus::Success)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::RemoteAddr;
    use roce_proto::Class;

    #[test]
    fn segmented_opcodes_follow_the_position() {
        let remote = RemoteAddr::default();
        for op in [
            WrOp::Send,
            WrOp::SendWithImm(1),
            WrOp::SendWithInv(roce_proto::RKey(1)),
            WrOp::Write(remote),
            WrOp::WriteWithImm(remote, 1),
        ] {
            for (k, n, class) in [
                (0, 1, Class::Only),
                (0, 3, Class::First),
                (1, 3, Class::Middle),
                (2, 3, Class::Last),
            ] {
                let o = request_opcode(&op, Position::of(k, n)).unwrap();
                assert_eq!(o.class(), class, "{op:?} packet {k} of {n}");
                assert_eq!(o.is_send(), op.wc_opcode() == WcOpcode::Send, "{op:?}");
                let ends = matches!(class, Class::Last | Class::Only);
                let imm = matches!(op, WrOp::SendWithImm(_) | WrOp::WriteWithImm(..));
                assert_eq!(o.has_immediate(), ends && imm, "{op:?} {o:?}");
            }
        }
        assert_eq!(
            read_response_opcode(Position::of(1, 3)),
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE
        );
        assert_eq!(
            read_response_opcode(Position::of(0, 1)),
            Opcode::RC_RDMA_READ_RESPONSE_ONLY
        );
    }
}
