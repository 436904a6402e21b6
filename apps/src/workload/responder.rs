//! The responder end of the verified workload: keeps receives posted, checks every receive
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
    fill_pattern, first_difference, Mismatch, OpKind, Plan, Tally, FIN_IMM, MAX_MISMATCHES,
};

struct RespQp {
    qpn: Qpn,
    cq: CqHandle,
    /// Index into the plan of the next receive-consuming op.
    next_recv_op: usize,
    /// Receive slot of each posted receive, in order.
    slots: VecDeque<u64>,
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
                plan.initial_responder_block(
                    q,
                    &mut m.as_mut_slice()[start..start + l.responder_len() as usize],
                );
            }
            remotes.push(RemoteBuffer {
                va: va + start as u64,
                rkey,
                len: l.responder_len(),
            });
        }
        let mut r = Self {
            plan,
            mr,
            qps: qps
                .iter()
                .map(|&(qpn, cq)| RespQp {
                    qpn,
                    cq,
                    next_recv_op: 0,
                    slots: VecDeque::new(),
                    verified: false,
                })
                .collect(),
            tally: Tally::default(),
            mismatches: Vec::new(),
            scratch: Vec::new(),
        };
        for q in 0..r.qps.len() {
            for s in 0..l.recv_slots {
                r.post_recv(dev, q, s)?;
            }
        }
        Ok((r, remotes))
    }

    fn post_recv(&mut self, dev: &mut Device, q: usize, slot: u64) -> Result<(), AppError> {
        let l = self.plan.layout;
        let (va, lkey) = dev
            .mr(self.mr)
            .map(|m| (m.va(), m.lkey()))
            .ok_or_else(|| AppError::Failed("responder memory region vanished".into()))?;
        let off = l.responder_len() * q as u64 + l.recv_off() + slot * l.slot;
        let sge = Sge {
            addr: va + off,
            length: l.slot as u32,
            lkey,
        };
        dev.post_recv(
            self.qps[q].qpn,
            RecvRequest {
                wr_id: slot,
                sgl: SgList::one(sge),
            },
        )
        .map_err(|e| AppError::post(q, "a receive", e))?;
        self.qps[q].slots.push_back(slot);
        Ok(())
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
        let slot = self.qps[q].slots.pop_front();
        if c.status != WcStatus::Success {
            self.fail(Mismatch {
                op: "receive".into(),
                qp: q as u32,
                psn: None,
                offset: None,
                detail: format!("status {:?}", c.status),
            });
            return Ok(());
        }
        if slot != Some(c.wr_id) {
            self.fail(Mismatch {
                op: "receive".into(),
                qp: q as u32,
                psn: None,
                offset: None,
                detail: format!("receive {} completed out of order", c.wr_id),
            });
            return Ok(());
        }
        let l = self.plan.layout;
        let base = (l.responder_len() * q as u64) as usize;
        if c.imm_data.is_some_and(|i| i == FIN_IMM | q as u32) && c.opcode == WcOpcode::Recv {
            let ops = &self.plan.ops[q];
            if let Some(rest) = ops[self.qps[q].next_recv_op..]
                .iter()
                .find(|o| o.kind.consumes_receive())
            {
                self.fail(Mismatch {
                    op: "final marker".into(),
                    qp: q as u32,
                    psn: None,
                    offset: None,
                    detail: format!(
                        "arrived before a {} the plan still expects",
                        rest.kind.name()
                    ),
                });
                return Ok(());
            }
            let want = self.plan.final_responder_block(q as u32);
            let got = dev
                .mr(self.mr)
                .map(|m| m.as_slice()[base..base + want.len()].to_vec())
                .unwrap_or_default();
            if let Some(d) = first_difference(&want, &got) {
                let area = if d < l.write_area {
                    "write area"
                } else if d < l.atomic_off() {
                    "read area"
                } else {
                    "atomic area"
                };
                self.fail(Mismatch {
                    op: "final memory".into(),
                    qp: q as u32,
                    psn: None,
                    offset: Some(d),
                    detail: format!(
                        "{area} differs from the in-order model (got {:#04x}, expected {:#04x})",
                        got[d as usize], want[d as usize]
                    ),
                });
            } else {
                self.tally.verified_bytes += want.len() as u64;
                self.qps[q].verified = true;
            }
            return Ok(());
        }
        // The next receive-consuming op of the plan.
        let ops = &self.plan.ops[q];
        let mut i = self.qps[q].next_recv_op;
        while i < ops.len() && !ops[i].kind.consumes_receive() {
            i += 1;
        }
        let Some(op) = ops.get(i).copied() else {
            self.fail(Mismatch {
                op: "receive".into(),
                qp: q as u32,
                psn: None,
                offset: None,
                detail: "more receive completions than the plan has".into(),
            });
            return Ok(());
        };
        self.qps[q].next_recv_op = i + 1;
        let name = format!("{} #{i}", op.kind.name());
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
            let at = base + (l.recv_off() + c.wr_id * l.slot) as usize;
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
        self.post_recv(dev, q, c.wr_id)
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
