//! The responder end of the verified workload: keeps receives posted (for the plan's next
//! SENDs, each with a buffer of its exact length from the QP's receive ring), checks every receive
//! completion (length, immediate, SEND data), and when a QP's final marker (a zero-length
//! SEND with immediate) arrives, checks its write and atomic areas against the in-order model:
//! RC executes in order, so every earlier operation of that QP has landed.
use std::collections::VecDeque;
use std::fmt;

use roce_driver::qps::RemoteBuffer;
use roce_driver::{AppError, Application};
use roce_proto::Qpn;
use roce_stack::{
    Access, Completion, CqHandle, Device, Instant, MrHandle, PdHandle, RecvRequest, SgList, Sge,
    WcOpcode, WcStatus,
};

use super::{
    fill_pattern, first_difference, Mismatch, OpKind, OpStream, Plan, PlannedOp, Ring, Tally,
    FIN_IMM, MAX_MISMATCHES,
};

/// A posted receive, until it completes.
struct Posted {
    /// The operation it is for (`None`: the final marker).
    op: Option<PlannedOp>,
    /// Offset of its buffer in the region, and the ring position it gives back.
    off: u64,
    end: u64,
}

struct RespQp {
    qpn: Qpn,
    cq: CqHandle,
    /// The plan, read ahead as far as receives are posted.
    ops: OpStream,
    /// The next receive-consuming operation, taken from the stream but not posted yet (its
    /// buffer did not fit).
    pending: Option<PlannedOp>,
    ring: Ring,
    /// Offset of this QP's block in the region.
    base: u64,
    posted: VecDeque<Posted>,
    fin_posted: bool,
    verified: bool,
}

/// The responder side: keeps receives posted, checks every receive completion, and verifies
/// each QP's memory when its final marker arrives.
pub struct Responder {
    plan: Plan,
    mr: MrHandle,
    qps: Vec<RespQp>,
    tally: Tally,
    mismatches: Vec<Mismatch>,
    scratch: Vec<u8>,
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("qps", &self.qps.len())
            .finish_non_exhaustive()
    }
}

impl Responder {
    /// Registers the responder memory (remote write, read and atomic access), initialises it,
    /// and posts the receives. Returns the responder and each QP's [`RemoteBuffer`].
    pub fn new(
        dev: &mut Device,
        pd: PdHandle,
        plan: Plan,
        qps: &[(Qpn, CqHandle)],
    ) -> Result<(Self, Vec<RemoteBuffer>), AppError> {
        let l = plan.layout;
        let len = l.responder_len() * plan.spec.qps as u64;
        let mr = dev.reg_mr(
            pd,
            len as usize,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        );
        let (va, rkey) = dev
            .mr(mr)
            .map(|m| (m.va(), m.rkey()))
            .ok_or_else(|| AppError::Failed("responder memory region vanished".into()))?;
        let mut remotes = Vec::new();
        for q in 0..plan.spec.qps {
            let start = (l.responder_len() * u64::from(q)) as usize;
            if let Some(m) = dev.mr_mut(mr) {
                // A fresh region: zero where the plan wants zeros.
                plan.initial_responder_block(
                    q,
                    &mut m.as_mut_slice()[start..start + l.recv_off() as usize],
                );
            }
            remotes.push(RemoteBuffer {
                va: va + start as u64,
                rkey,
                len: l.responder_len(),
            });
        }
        let mut r = Self {
            qps: qps
                .iter()
                .enumerate()
                .map(|(q, &(qpn, cq))| RespQp {
                    qpn,
                    cq,
                    ops: plan.ops(q as u32),
                    pending: None,
                    ring: Ring::new(l.recv_ring.max(64)),
                    base: l.responder_len() * q as u64,
                    posted: VecDeque::new(),
                    fin_posted: false,
                    verified: false,
                })
                .collect(),
            plan,
            mr,
            tally: Tally::default(),
            mismatches: Vec::new(),
            scratch: Vec::new(),
        };
        for q in 0..r.qps.len() {
            r.post_recvs(dev, q)?;
        }
        Ok((r, remotes))
    }

    /// Posts receives for the plan's next receive-consuming operations (each with a buffer of
    /// exactly its length) and, after the last, for the final marker: as many as the receive
    /// depth and the ring allow.
    fn post_recvs(&mut self, dev: &mut Device, q: usize) -> Result<(), AppError> {
        let l = self.plan.layout;
        let (va, lkey) = dev
            .mr(self.mr)
            .map(|m| (m.va(), m.lkey()))
            .ok_or_else(|| AppError::Failed("responder memory region vanished".into()))?;
        let qp = &mut self.qps[q];
        while (qp.posted.len() as u64) < l.recv_depth && !qp.fin_posted {
            let next = qp
                .pending
                .take()
                .or_else(|| qp.ops.by_ref().find(|o| o.kind.consumes_receive()));
            let (op, len) = match next {
                // A WRITE with immediate places its data in the write area, not here.
                Some(op) if op.kind == OpKind::WriteImm => (Some(op), 0),
                Some(op) => (Some(op), op.len),
                None => (None, 0),
            };
            let Some((ring_off, end)) = qp.ring.take(u64::from(len)) else {
                qp.pending = op;
                break;
            };
            let off = qp.base + l.recv_off() + ring_off;
            let sgl = if len == 0 {
                SgList::new()
            } else {
                SgList::one(Sge {
                    addr: va + off,
                    length: len,
                    lkey,
                })
            };
            let wr_id = op.map_or(u64::MAX, |o| u64::from(o.index));
            dev.post_recv(qp.qpn, RecvRequest { wr_id, sgl })
                .map_err(|e| AppError::post(q, "a receive", e))?;
            qp.posted.push_back(Posted { op, off, end });
            qp.fin_posted = op.is_none();
        }
        Ok(())
    }

    /// `true` once every QP's memory verified at its final marker, with no mismatch.
    pub fn verified(&self) -> bool {
        self.mismatches.is_empty() && self.qps.iter().all(|q| q.verified)
    }

    /// Counts so far.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Mismatches found.
    pub fn mismatches(&self) -> &[Mismatch] {
        &self.mismatches
    }

    fn fail(&mut self, m: Mismatch) {
        if self.mismatches.len() < MAX_MISMATCHES {
            self.mismatches.push(m);
        }
    }

    fn on_completion(&mut self, dev: &mut Device, q: usize, c: Completion) -> Result<(), AppError> {
        let receive = |detail: String| Mismatch {
            op: "receive".into(),
            qp: q as u32,
            psn: None,
            offset: None,
            detail,
        };
        let Some(posted) = self.qps[q].posted.pop_front() else {
            self.fail(receive(format!(
                "completion of receive {} with none posted",
                c.wr_id
            )));
            return Ok(());
        };
        self.qps[q].ring.give_back(posted.end);
        if c.imm_data.is_some_and(|i| i == FIN_IMM | q as u32) && c.opcode == WcOpcode::Recv {
            if let Some(op) = posted.op {
                self.fail(Mismatch {
                    op: "final marker".into(),
                    qp: q as u32,
                    psn: None,
                    offset: None,
                    detail: format!(
                        "arrived before {} #{} the plan still expects",
                        op.kind.name(),
                        op.index
                    ),
                });
                return Ok(());
            }
            if c.status != WcStatus::Success {
                self.fail(receive(format!("final marker: status {:?}", c.status)));
                return Ok(());
            }
            self.verify_final(dev, q);
            return Ok(());
        }
        let Some(op) = posted.op else {
            self.fail(receive(format!(
                "more receive completions than the plan has ({:?} len {} imm {:?})",
                c.opcode, c.byte_len, c.imm_data
            )));
            return Ok(());
        };
        let name = format!("{} #{}", op.kind.name(), op.index);
        if c.status != WcStatus::Success {
            self.fail(Mismatch {
                op: name,
                qp: q as u32,
                psn: None,
                offset: None,
                detail: format!("receive status {:?}", c.status),
            });
            return Ok(());
        }
        if c.wr_id != u64::from(op.index) {
            self.fail(receive(format!(
                "receive {} completed while {} was next",
                c.wr_id, op.index
            )));
            return Ok(());
        }
        let want_opcode = if op.kind == OpKind::WriteImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        let want_imm = matches!(op.kind, OpKind::SendImm | OpKind::WriteImm).then_some(op.imm);
        if c.opcode != want_opcode || c.byte_len != op.len || c.imm_data != want_imm {
            self.fail(Mismatch {
                op: name,
                qp: q as u32,
                psn: None,
                offset: None,
                detail: format!(
                    "receive completion {:?} len {} imm {:?}, expected {want_opcode:?} len {} imm {want_imm:?}",
                    c.opcode, c.byte_len, c.imm_data, op.len
                ),
            });
            return Ok(());
        }
        if op.kind != OpKind::WriteImm {
            let at = posted.off as usize;
            self.scratch.resize(op.len as usize, 0);
            fill_pattern(op.data_seed, &mut self.scratch);
            let diff = dev.mr(self.mr).and_then(|m| {
                first_difference(&self.scratch, &m.as_slice()[at..at + op.len as usize])
            });
            if let Some(d) = diff {
                self.fail(Mismatch {
                    op: name,
                    qp: q as u32,
                    psn: None,
                    offset: Some(d),
                    detail: "SEND data differs".into(),
                });
                return Ok(());
            }
            self.tally.verified_bytes += u64::from(op.len);
        }
        self.tally.count(op.kind, op.len);
        self.post_recvs(dev, q)
    }

    /// QP `q`'s final marker arrived: RC executed everything before it, so its write and
    /// atomic areas must equal the in-order model's.
    fn verify_final(&mut self, dev: &Device, q: usize) {
        let l = self.plan.layout;
        let base = self.qps[q].base as usize;
        let want = self.plan.final_responder_block(q as u32);
        let Some(got) = dev
            .mr(self.mr)
            .map(|m| &m.as_slice()[base..base + want.len()])
        else {
            return;
        };
        if let Some(d) = first_difference(&want, got) {
            let area = if d < l.write_area {
                "write area"
            } else if d < l.atomic_off() {
                "read area"
            } else {
                "atomic area"
            };
            let detail = format!(
                "{area} differs from the in-order model (got {:#04x}, expected {:#04x})",
                got[d as usize], want[d as usize]
            );
            self.fail(Mismatch {
                op: "final memory".into(),
                qp: q as u32,
                psn: None,
                offset: Some(d),
                detail,
            });
        } else {
            self.tally.verified_bytes += want.len() as u64;
            self.qps[q].verified = true;
        }
    }
}

impl Application for Responder {
    /// Drains receive completions, verifies, re-posts receives.
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), AppError> {
        for q in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[q].cq) {
                self.on_completion(dev, q, c)?;
            }
        }
        Ok(())
    }

    /// `true` once every QP's memory verified (or a mismatch stopped the run).
    fn done(&self) -> bool {
        !self.mismatches.is_empty() || self.qps.iter().all(|q| q.verified)
    }
}
