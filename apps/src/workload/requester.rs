//! The requester end of the verified workload: posts each QP's plan (at most `depth`
//! outstanding, their buffers taken from the QP's ring in order; a UD QP's to its address
//! handle) and checks every completion against the plan: once, in order, successful,
//! with the right opcode and length; READ data equal to the responder's read area; atomic
//! results as the in-order model predicts.
use std::collections::VecDeque;
use std::fmt;

use roce_driver::connect::qps::RemoteBuffer;
use roce_driver::{AppError, Application};
use roce_proto::{Psn, Qpn};
use roce_stack::ud::{AddressHandle, UdSend};
use roce_stack::{
    Access, Completion, CqHandle, Device, Instant, MrHandle, PdHandle, SgList, Sge, WcOpcode,
    WcStatus, WorkRequest, WrOp,
};

use super::{
    fill_pattern, first_difference, Mismatch, OpKind, OpStream, Plan, PlannedOp, Ring, Tally,
    FIN_IMM, MAX_MISMATCHES,
};

/// A posted operation, until it completes.
struct InFlight {
    op: PlannedOp,
    /// Offset of its buffer in the QP's ring, and the ring position it gives back.
    off: u64,
    end: u64,
    /// PSN of its first packet.
    psn: Psn,
}

struct ReqQp {
    qpn: Qpn,
    cq: CqHandle,
    remote: RemoteBuffer,
    ops: OpStream,
    /// The next operation, taken from the stream but not posted yet (its buffer did not fit).
    pending: Option<PlannedOp>,
    ring: Ring,
    /// Offset of this QP's ring in the region.
    base: u64,
    in_flight: VecDeque<InFlight>,
    fin_posted: bool,
    fin_done: bool,
    /// Where a UD QP sends.
    ah: Option<AddressHandle>,
}

/// The requester side: posts the plan on each QP and checks every completion.
pub struct Requester {
    plan: Plan,
    mr: MrHandle,
    qps: Vec<ReqQp>,
    tally: Tally,
    mismatches: Vec<Mismatch>,
    scratch: Vec<u8>,
}

impl fmt::Debug for Requester {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Requester")
            .field("qps", &self.qps.len())
            .finish_non_exhaustive()
    }
}

impl Requester {
    /// Registers the requester memory on `dev` for QPs `qpns` (with their send CQs) whose
    /// peers expose `remotes`.
    pub fn new(
        dev: &mut Device,
        pd: PdHandle,
        plan: Plan,
        qps: &[(Qpn, CqHandle)],
        remotes: &[RemoteBuffer],
    ) -> Self {
        let l = plan.layout;
        let len = l.requester_len() * plan.spec.qps as u64;
        let mr = dev.reg_mr(pd, len as usize, Access::LOCAL_WRITE);
        let qps = qps
            .iter()
            .zip(remotes)
            .enumerate()
            .map(|(q, (&(qpn, cq), &remote))| ReqQp {
                qpn,
                cq,
                remote,
                ops: plan.ops(q as u32),
                pending: None,
                ring: Ring::new(l.send_ring),
                base: l.requester_len() * q as u64,
                in_flight: VecDeque::new(),
                fin_posted: false,
                fin_done: false,
                ah: None,
            })
            .collect();
        Self {
            plan,
            mr,
            qps,
            tally: Tally::default(),
            mismatches: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Makes QP `q` a UD QP that sends to `ah` (its QPN must be a UD QP's).
    pub fn set_address_handle(&mut self, q: usize, ah: AddressHandle) {
        if let Some(qp) = self.qps.get_mut(q) {
            qp.ah = Some(ah);
        }
    }

    /// Counts so far.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// Mismatches found (empty when everything verified).
    pub fn mismatches(&self) -> &[Mismatch] {
        &self.mismatches
    }

    fn fail(&mut self, m: Mismatch) {
        if self.mismatches.len() < MAX_MISMATCHES {
            self.mismatches.push(m);
        }
    }

    fn post(&mut self, dev: &mut Device, q: usize) -> Result<(), AppError> {
        let depth = self.plan.spec.depth as usize;
        let (mr_va, lkey) = match dev.mr(self.mr) {
            Some(m) => (m.va(), m.lkey()),
            None => return Err(AppError::Defect("the requester's memory region vanished")),
        };
        while self.qps[q].in_flight.len() < depth {
            let qp = &mut self.qps[q];
            let Some(op) = qp.pending.take().or_else(|| qp.ops.next()) else {
                break;
            };
            let Some((ring_off, end)) = qp.ring.take(u64::from(op.len)) else {
                // Wait for completions to give space back.
                qp.pending = Some(op);
                break;
            };
            let off = qp.base + ring_off;
            let len = op.len;
            let raddr = qp.remote.at(op.remote_off);
            let qpn = qp.qpn;
            let i = op.index;
            let range = off as usize..off as usize + len as usize;
            if matches!(
                op.kind,
                OpKind::Send | OpKind::SendImm | OpKind::Write | OpKind::WriteImm
            ) {
                if let Some(m) = dev.mr_mut(self.mr) {
                    fill_pattern(op.data_seed, &mut m.as_mut_slice()[range]);
                }
            } else if let Some(m) = dev.mr_mut(self.mr) {
                // Poison the destination so a READ or atomic that writes nothing is caught.
                m.as_mut_slice()[range].fill(0xee);
            }
            let sge = Sge {
                addr: mr_va + off,
                length: len,
                lkey,
            };
            let sgl = if len == 0 {
                SgList::new()
            } else {
                SgList::one(sge)
            };
            let wop = match op.kind {
                OpKind::Send => WrOp::Send,
                OpKind::SendImm => WrOp::SendWithImm(op.imm),
                OpKind::Write => WrOp::Write(raddr),
                OpKind::WriteImm => WrOp::WriteWithImm(raddr, op.imm),
                OpKind::Read => WrOp::Read(raddr),
                OpKind::CompareSwap => WrOp::CompareSwap {
                    remote: raddr,
                    compare: op.compare,
                    swap: op.operand,
                },
                OpKind::FetchAdd => WrOp::FetchAdd {
                    remote: raddr,
                    add: op.operand,
                },
            };
            let psn = dev.qp(qpn).map(|qp| qp.next_send_psn()).unwrap_or_default();
            let posted = match self.qps[q].ah {
                Some(ah) => dev.post_ud_send(
                    qpn,
                    UdSend {
                        wr_id: u64::from(i),
                        sgl,
                        ah,
                        imm: (op.kind == OpKind::SendImm).then_some(op.imm),
                        signaled: true,
                    },
                ),
                None => dev.post_send(qpn, WorkRequest::new(u64::from(i), wop, sgl)),
            };
            posted.map_err(|e| AppError::post(q, format!("{} #{i}", op.kind.name()), e))?;
            self.qps[q]
                .in_flight
                .push_back(InFlight { op, off, end, psn });
        }
        let qp = &mut self.qps[q];
        if qp.pending.is_none()
            && qp.ops.remaining() == 0
            && qp.in_flight.is_empty()
            && !qp.fin_posted
        {
            let posted = match qp.ah {
                Some(ah) => dev.post_ud_send(
                    qp.qpn,
                    UdSend {
                        wr_id: u64::MAX,
                        sgl: SgList::new(),
                        ah,
                        imm: Some(FIN_IMM | q as u32),
                        signaled: true,
                    },
                ),
                None => dev.post_send(
                    qp.qpn,
                    WorkRequest::new(
                        u64::MAX,
                        WrOp::SendWithImm(FIN_IMM | q as u32),
                        SgList::new(),
                    ),
                ),
            };
            posted.map_err(|e| AppError::post(q, "the final marker", e))?;
            qp.fin_posted = true;
        }
        Ok(())
    }

    fn on_completion(&mut self, dev: &Device, q: usize, c: Completion) {
        if c.wr_id == u64::MAX {
            if c.status == WcStatus::Success {
                self.qps[q].fin_done = true;
            } else {
                self.fail(Mismatch {
                    op: "final marker".into(),
                    qp: q as u32,
                    psn: None,
                    offset: None,
                    detail: format!("status {:?}", c.status),
                });
            }
            return;
        }
        let Some(f) = self.qps[q].in_flight.pop_front() else {
            self.fail(Mismatch {
                op: format!("wr {}", c.wr_id),
                qp: q as u32,
                psn: None,
                offset: None,
                detail: "completion with nothing outstanding (beyond the plan, or twice)".into(),
            });
            return;
        };
        self.qps[q].ring.give_back(f.end);
        let (op, i, psn) = (f.op, f.op.index, Some(f.psn));
        let name = format!("{} #{i}", op.kind.name());
        let bad = |detail: String, offset: Option<u64>| Mismatch {
            op: name.clone(),
            qp: q as u32,
            psn,
            offset,
            detail,
        };
        if c.wr_id != u64::from(i) {
            let m = bad(
                format!(
                    "completion for wr {} while wr {i} was next (out of order or twice)",
                    c.wr_id
                ),
                None,
            );
            self.fail(m);
            return;
        }
        if c.status != WcStatus::Success {
            let m = bad(format!("status {:?}", c.status), None);
            self.fail(m);
            return;
        }
        let want_opcode = match op.kind {
            OpKind::Send | OpKind::SendImm => WcOpcode::Send,
            OpKind::Write | OpKind::WriteImm => WcOpcode::RdmaWrite,
            OpKind::Read => WcOpcode::RdmaRead,
            OpKind::CompareSwap => WcOpcode::CompSwap,
            OpKind::FetchAdd => WcOpcode::FetchAdd,
        };
        if c.opcode != want_opcode {
            let m = bad(
                format!("opcode {:?}, expected {want_opcode:?}", c.opcode),
                None,
            );
            self.fail(m);
            return;
        }
        let off = f.off as usize;
        let Some(mem) = dev.mr(self.mr).map(|m| m.as_slice()) else {
            return;
        };
        match op.kind {
            OpKind::Read => {
                let at = op.remote_off - self.plan.layout.read_off();
                self.scratch.resize(op.len as usize, 0);
                self.plan.read_area(q as u32, at, &mut self.scratch);
                let want = &self.scratch[..];
                let got = &mem[off..off + op.len as usize];
                if let Some(d) = first_difference(want, got) {
                    let m = bad(
                        format!(
                            "READ data differs (got {:#04x}, expected {:#04x})",
                            got[d as usize], want[d as usize]
                        ),
                        Some(d),
                    );
                    self.fail(m);
                    return;
                }
                self.tally.verified_bytes += u64::from(op.len);
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let got = u64::from_le_bytes(mem[off..off + 8].try_into().unwrap_or([0; 8]));
                if got != op.expect_orig {
                    let m = bad(
                        format!("returned {got:#x}, the model says {:#x}", op.expect_orig),
                        None,
                    );
                    self.fail(m);
                    return;
                }
                self.tally.verified_bytes += 8;
            }
            _ => {}
        }
        self.tally.count(op.kind, op.len);
    }
}

impl Application for Requester {
    /// Drains completions and posts what the window allows. Returns an error when the device
    /// refuses a post (a QP in error, a queue full that should not be).
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), AppError> {
        for q in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[q].cq) {
                self.on_completion(dev, q, c);
            }
            self.post(dev, q)?;
        }
        Ok(())
    }

    /// `true` once every QP's final marker completed (or a mismatch stopped the run).
    fn done(&self) -> bool {
        !self.mismatches.is_empty() || self.qps.iter().all(|q| q.fin_done)
    }
}
