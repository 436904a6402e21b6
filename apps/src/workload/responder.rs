//! The responder end of the verified workload: keeps receives posted (for the plan's next
//! SENDs, each with a buffer of its exact length from the QP's receive ring), checks every receive
//! completion (length, immediate, SEND data), and when a QP's final marker (a zero-length
//! SEND with immediate) arrives, checks its write and atomic areas against the in-order model:
//! RC executes in order, so every earlier operation of that QP has landed.
//!
//! A UC or UD QP may lose messages (IBTA Vol 1 §9.8): its receives all hold the largest
//! message (a message can land in the receive meant for a lost one), each receive completion
//! is matched to the first operation of the plan, at or after the last one matched, with its
//! opcode, length, immediate and data — the ones skipped were lost — and only what arrived is
//! verified. A UC QP's write area is compared with the model at its final marker when nothing
//! of that QP was lost (no receive skipped, no PSN gap, no message dropped: UC executes in
//! order too); otherwise it is reported as not verifiable. A UD receiver checks no PSN, so a
//! datagram may also come late (after a later one) or twice: the latest skipped and delivered
//! operations are remembered for those.
use std::collections::VecDeque;
use std::fmt;

use roce_driver::connect::qps::RemoteBuffer;
use roce_driver::{AppError, Application};
use roce_proto::Qpn;
use roce_stack::{
    Access, Completion, CqHandle, Device, Instant, MrHandle, PdHandle, RecvRequest, SgList, Sge,
    WcOpcode, WcStatus,
};

use roce_stack::ud::GRH_LEN;
use serde::{Deserialize, Serialize};

use super::{
    fill_pattern, first_difference, Mismatch, OpKind, OpStream, Plan, PlannedOp, Ring, Tally,
    Transport, FIN_IMM, MAX_MISMATCHES,
};

/// Most operations of the plan a UC or UD receive may skip over (lost messages) to find the one
/// it carries: bounds the work a message that matches nothing costs.
const MAX_SKIP: u64 = 1 << 20;

/// Most operations of the plan counted at the end of a UC or UD QP (those after its last
/// delivered message); beyond it the count also takes in the operations that use no receive.
const MAX_TAIL: u64 = 1 << 24;

/// What a UC or UD QP delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The QP's index in the workload.
    pub qp: u32,
    /// Its transport.
    pub transport: Option<Transport>,
    /// Receive-consuming messages (SEND, SEND with immediate, WRITE with immediate) that
    /// arrived and verified.
    pub delivered: u64,
    /// Receive-consuming messages of the plan that never arrived.
    pub lost: u64,
    /// Whether the final marker arrived.
    pub final_marker: bool,
    /// Whether the QP's memory (write and atomic areas) was compared with the model and
    /// matched; `false` when something of the QP was lost, which leaves it unknowable.
    pub memory_verified: bool,
    /// UD: messages delivered after a later one (counted in `delivered`).
    #[serde(default)]
    pub late: u64,
    /// UD: messages delivered again (not counted in `delivered`).
    #[serde(default)]
    pub duplicates: u64,
}

/// Operations a UD QP remembers as skipped (a late datagram may still bring one).
const MAX_MISSING: usize = 512;
/// Operations a UD QP remembers as delivered (a duplicate may follow).
const MAX_RECENT: usize = 128;

/// A UC or UD QP's progress through its plan.
#[derive(Debug, Clone, Default)]
struct Lossy {
    next_wr: u64,
    delivered: u64,
    lost: u64,
    fin: bool,
    /// UD (no PSN check at the receiver, IBTA Vol 1 §9.7.5.1.1): delivered after a later
    /// one, and delivered again.
    late: u64,
    duplicates: u64,
    /// UD: the latest operations skipped, and the latest delivered.
    missing: VecDeque<PlannedOp>,
    recent: VecDeque<PlannedOp>,
}

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
    transport: Transport,
    lossy: Lossy,
    /// Its block initialised and its receives posted ([`Responder::prepare`]).
    prepared: bool,
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
        let (mut r, remotes) = Self::unprepared(dev, pd, plan, qps)?;
        for q in 0..r.qps.len() {
            r.prepare(dev, q)?;
        }
        Ok((r, remotes))
    }

    /// [`Responder::new`] without any QP's block initialised or receives posted: a server
    /// that connects QPs one request at a time prepares each with [`Responder::prepare`]
    /// when its connection is asked for, so that a request for many QPs costs only the QPs
    /// actually connected (the region is reserved, its pages untouched until written).
    pub fn unprepared(
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
            .ok_or(AppError::Defect("the responder's memory region vanished"))?;
        let remotes = (0..plan.spec.qps)
            .map(|q| RemoteBuffer {
                va: va + l.responder_len() * u64::from(q),
                rkey,
                len: l.responder_len(),
            })
            .collect();
        let r = Self {
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
                    transport: plan.spec.transport_of(q as u32),
                    lossy: Lossy::default(),
                    prepared: false,
                })
                .collect(),
            plan,
            mr,
            tally: Tally::default(),
            mismatches: Vec::new(),
            scratch: Vec::new(),
        };
        Ok((r, remotes))
    }

    /// Initialises QP `q`'s block (its read area and atomic words) and posts its receives;
    /// once per QP (again: nothing).
    pub fn prepare(&mut self, dev: &mut Device, q: usize) -> Result<(), AppError> {
        let Some(qp) = self.qps.get_mut(q).filter(|qp| !qp.prepared) else {
            return Ok(());
        };
        qp.prepared = true;
        let l = self.plan.layout;
        let start = qp.base as usize;
        if let Some(m) = dev.mr_mut(self.mr) {
            // A fresh region: zero where the plan wants zeros.
            self.plan.initial_responder_block(
                q as u32,
                &mut m.as_mut_slice()[start..start + l.recv_off() as usize],
            );
        }
        self.post_recvs(dev, q)
    }

    /// Posts receives for the plan's next receive-consuming operations (each with a buffer of
    /// exactly its length) and, after the last, for the final marker: as many as the receive
    /// depth and the ring allow.
    fn post_recvs(&mut self, dev: &mut Device, q: usize) -> Result<(), AppError> {
        let l = self.plan.layout;
        let (va, lkey) = dev
            .mr(self.mr)
            .map(|m| (m.va(), m.lkey()))
            .ok_or(AppError::Defect("the responder's memory region vanished"))?;
        let qp = &mut self.qps[q];
        if qp.transport.lossy() {
            // Receives of the largest size, numbered in posting order.
            let (len, depth) = match qp.transport {
                Transport::Ud => (l.ud_recv_len, l.ud_recv_depth),
                _ if l.recv_ring > 0 => (l.lossy_recv_len(), l.recv_depth),
                _ => (0, l.recv_depth),
            };
            while (qp.posted.len() as u64) < depth && !qp.lossy.fin {
                let Some((ring_off, end)) = qp.ring.take(len) else {
                    break;
                };
                let off = qp.base + l.recv_off() + ring_off;
                let sgl = if len == 0 {
                    SgList::new()
                } else {
                    SgList::one(Sge {
                        addr: va + off,
                        length: len as u32,
                        lkey,
                    })
                };
                let wr_id = qp.lossy.next_wr;
                dev.post_recv(qp.qpn, RecvRequest { wr_id, sgl })
                    .map_err(|e| AppError::post(q, "a receive", e))?;
                qp.lossy.next_wr += 1;
                qp.posted.push_back(Posted { op: None, off, end });
            }
            return Ok(());
        }
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

    /// `true` once every RC QP's memory verified at its final marker, with no mismatch (a UC
    /// or UD QP only needs what it delivered to verify).
    pub fn verified(&self) -> bool {
        self.mismatches.is_empty() && self.qps.iter().all(|q| q.verified || q.transport.lossy())
    }

    /// What each UC and UD QP delivered and lost (the messages after the last that arrived
    /// count as lost until the final marker comes).
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.qps
            .iter()
            .enumerate()
            .filter(|(_, qp)| qp.transport.lossy())
            .map(|(q, qp)| {
                let tail = if qp.lossy.fin {
                    0
                } else {
                    Self::receives_left(&qp.ops).unwrap_or(u64::from(qp.ops.remaining()))
                };
                Delivery {
                    qp: q as u32,
                    transport: Some(qp.transport),
                    delivered: qp.lossy.delivered,
                    lost: qp.lossy.lost + tail,
                    final_marker: qp.lossy.fin,
                    memory_verified: qp.verified,
                    late: qp.lossy.late,
                    duplicates: qp.lossy.duplicates,
                }
            })
            .collect()
    }

    /// The receive-consuming operations left in `ops` (`None` beyond [`MAX_TAIL`]).
    fn receives_left(ops: &OpStream) -> Option<u64> {
        if u64::from(ops.remaining()) > MAX_TAIL {
            return None;
        }
        Some(ops.clone().filter(|o| o.kind.consumes_receive()).count() as u64)
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

    /// Whether receive completion `c`, whose data starts at `at` in the region, is what `op`
    /// sent.
    fn carries(&mut self, dev: &Device, op: &PlannedOp, c: &Completion, at: u64) -> bool {
        let want_opcode = if op.kind == OpKind::WriteImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        let want_imm = matches!(op.kind, OpKind::SendImm | OpKind::WriteImm).then_some(op.imm);
        if c.opcode != want_opcode || c.byte_len != op.len || c.imm_data != want_imm {
            return false;
        }
        if op.kind == OpKind::WriteImm {
            return true;
        }
        self.scratch.resize(op.len as usize, 0);
        fill_pattern(op.data_seed, &mut self.scratch);
        let at = at as usize;
        dev.mr(self.mr)
            .and_then(|m| m.as_slice().get(at..at + op.len as usize))
            .is_some_and(|got| got == &self.scratch[..])
    }

    /// A receive completion of UC or UD QP `q`.
    fn on_lossy_completion(
        &mut self,
        dev: &mut Device,
        q: usize,
        c: Completion,
    ) -> Result<(), AppError> {
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
        if c.status != WcStatus::Success {
            self.fail(receive(format!("receive status {:?}", c.status)));
            return Ok(());
        }
        let ud = self.qps[q].transport == Transport::Ud;
        let mut c = c;
        if ud {
            // A UD receive's length counts the GRH area in front of the data (IBTA Vol 1
            // §11.4.2.1).
            let Some(n) = c.byte_len.checked_sub(GRH_LEN as u32) else {
                self.fail(receive(format!(
                    "UD receive of {} bytes, shorter than the GRH",
                    c.byte_len
                )));
                return Ok(());
            };
            c.byte_len = n;
        }
        if c.opcode == WcOpcode::Recv && c.imm_data == Some(FIN_IMM | q as u32) && c.byte_len == 0 {
            if self.qps[q].lossy.fin {
                self.qps[q].lossy.duplicates += 1;
                return Ok(());
            }
            let Some(left) = Self::receives_left(&self.qps[q].ops) else {
                self.fail(receive(format!(
                    "final marker with {} operations of the plan still to come",
                    self.qps[q].ops.remaining()
                )));
                return Ok(());
            };
            let qp = &mut self.qps[q];
            qp.lossy.lost += left;
            qp.lossy.fin = true;
            for op in qp.ops.by_ref().filter(|o| o.kind.consumes_receive()) {
                // A UD datagram the final marker overtook may still come.
                if ud {
                    if qp.lossy.missing.len() == MAX_MISSING {
                        qp.lossy.missing.pop_front();
                    }
                    qp.lossy.missing.push_back(op);
                }
            }
            let s = dev.qp(qp.qpn).map(|x| *x.stats()).unwrap_or_default();
            let whole = qp.lossy.lost == 0
                && s.out_of_sequence_requests == 0
                && s.drops.no_resource == 0
                && s.drops.out_of_sequence == 0;
            // Nothing writes a UD QP's areas, so they must be as they started whatever was lost.
            if whole || qp.transport == Transport::Ud {
                self.verify_final(dev, q);
            }
            return Ok(());
        }
        let grh = if ud { GRH_LEN as u64 } else { 0 };
        let at = posted.off + grh;
        // The next operation of the plan: the common case, taken first so that two messages
        // alike (empty SENDs) are counted in order.
        let mut ahead = self.qps[q].ops.clone();
        let next = ahead.by_ref().find(|o| o.kind.consumes_receive());
        let mut found = next.filter(|op| self.carries(dev, op, &c, at));
        let mut skipped = Vec::new();
        if found.is_none() && ud {
            // A UD datagram overtaken by a later one, or delivered twice.
            let qp = &self.qps[q];
            let (missing, recent) = (qp.lossy.missing.clone(), qp.lossy.recent.clone());
            if let Some(i) = missing.iter().position(|op| self.carries(dev, op, &c, at)) {
                let qp = &mut self.qps[q].lossy;
                let op = qp.missing.remove(i).unwrap_or(missing[i]);
                qp.lost = qp.lost.saturating_sub(1);
                qp.late += 1;
                return self.delivered(dev, q, op);
            }
            if recent.iter().any(|op| self.carries(dev, op, &c, at)) {
                self.qps[q].lossy.duplicates += 1;
                return self.post_recvs(dev, q);
            }
        }
        if found.is_none() {
            skipped.extend(next);
            while (skipped.len() as u64) <= MAX_SKIP {
                let Some(op) = ahead.by_ref().find(|o| o.kind.consumes_receive()) else {
                    break;
                };
                if self.carries(dev, &op, &c, at) {
                    found = Some(op);
                    break;
                }
                skipped.push(op);
            }
        }
        let Some(op) = found else {
            self.fail(receive(format!(
                "{:?} of {} bytes (immediate {:?}) that no operation of the plan sent",
                c.opcode, c.byte_len, c.imm_data
            )));
            return Ok(());
        };
        let qp = &mut self.qps[q];
        qp.ops = ahead;
        qp.lossy.lost += skipped.len() as u64;
        if ud {
            for s in skipped {
                if qp.lossy.missing.len() == MAX_MISSING {
                    qp.lossy.missing.pop_front();
                }
                qp.lossy.missing.push_back(s);
            }
        }
        self.delivered(dev, q, op)
    }

    /// UC or UD QP `q` delivered `op`, verified.
    fn delivered(&mut self, dev: &mut Device, q: usize, op: PlannedOp) -> Result<(), AppError> {
        let qp = &mut self.qps[q];
        qp.lossy.delivered += 1;
        if qp.transport == Transport::Ud {
            if qp.lossy.recent.len() == MAX_RECENT {
                qp.lossy.recent.pop_front();
            }
            qp.lossy.recent.push_back(op);
        }
        if op.kind != OpKind::WriteImm {
            self.tally.verified_bytes += u64::from(op.len);
        }
        self.tally.count(op.kind, op.len);
        self.post_recvs(dev, q)
    }

    fn on_completion(&mut self, dev: &mut Device, q: usize, c: Completion) -> Result<(), AppError> {
        if self.qps[q].transport.lossy() {
            return self.on_lossy_completion(dev, q, c);
        }
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

    /// `true` once every QP's memory verified, or its final marker arrived (UC, UD), or a
    /// mismatch stopped the run.
    fn done(&self) -> bool {
        !self.mismatches.is_empty()
            || self
                .qps
                .iter()
                .all(|q| q.verified || (q.transport.lossy() && q.lossy.fin))
    }
}
