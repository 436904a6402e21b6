//! The responder half of an RC QP (IBTA Vol 1 §9.7): classifies each request by PSN against
//! the expected PSN (in sequence, out of sequence: one sequence NAK per episode, duplicate),
//! validates an in-sequence request (opcode sequence, the QP's access rights, a receive
//! request where one is consumed, lengths, the R_Key and range) and executes it, then queues
//! what it owes the requester: ACKs (coalesced), atomic ACKs, READ responses, NAKs. Duplicate
//! READs are re-executed from the requested PSN, duplicate atomics answered from the saved
//! result, duplicate SENDs and WRITEs acknowledged without touching memory.
use std::collections::VecDeque;

use roce_proto::aeth::AethKind;
use roce_proto::{Class, Msn, NakCode, Opcode, PacketRepr, Psn, RKey, RethRepr, Syndrome};

use super::attr::QpCaps;
use super::build::{self, Position};
use super::requester::in_range;
use super::{Ctx, Qp};
use crate::memory::{Access, MemError};
use crate::stats::DropReason;
use crate::time::Instant;
use crate::wr::{Completion, RecvRequest, WcOpcode, WcStatus};

/// The message being received, between its FIRST and its LAST packet.
#[derive(Debug, Clone, Copy)]
enum InMsg {
    /// None: the next request must be a FIRST or an ONLY.
    None,
    /// A SEND landing in this receive request, `offset` bytes placed so far.
    Send {
        /// The receive request it consumes.
        wqe: RecvRequest,
        /// Bytes placed.
        offset: u32,
    },
    /// A WRITE: where the next byte goes, what is left of the RETH length.
    Write {
        /// Virtual address of the next byte.
        va: u64,
        /// The R_Key of the RETH.
        rkey: RKey,
        /// Bytes still expected.
        remaining: u32,
        /// The RETH length.
        total: u32,
    },
}

/// A responder resource (IBTA Vol 1 §9.7: kept for `max_dest_rd_atomic` READ and atomic
/// requests, so a duplicate can be answered).
#[derive(Debug, Clone, Copy)]
enum Resource {
    /// A READ: its PSN span and the range it read.
    Read {
        first: Psn,
        last: Psn,
        va: u64,
        rkey: RKey,
        len: u32,
    },
    /// An atomic: its PSN and the value it returned.
    Atomic { psn: Psn, orig: u64 },
}

/// A READ whose responses are being sent.
#[derive(Debug, Clone, Copy)]
struct ReadJob {
    /// PSN of the next response.
    psn: Psn,
    /// PSN of the request (its first response).
    first_psn: Psn,
    /// Address of the next byte.
    va: u64,
    rkey: RKey,
    /// Bytes still to send.
    remaining: u32,
    /// A response of this job was sent (later ones are MIDDLE or LAST).
    started: bool,
    /// The MSN its responses carry: the responder's when the READ was queued. Requests
    /// executed while the responses wait must not show in them, or the requester would see
    /// the MSN go back at the next ACK (C9-148: the MSN never decreases).
    msn: Msn,
}

/// What the responder owes the requester, in order.
#[derive(Debug, Clone, Copy)]
enum RespItem {
    /// An ACK or NAK with the MSN of the moment it was queued.
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: Msn,
    },
    /// An atomic ACK.
    AtomicAck { psn: Psn, orig: u64, msn: Msn },
    /// READ responses.
    Read(ReadJob),
}

/// Responder state.
#[derive(Debug)]
pub(super) struct Responder {
    /// Posted receive requests, oldest first.
    pub(super) rq: VecDeque<RecvRequest>,
    /// The expected PSN.
    pub(super) epsn: Psn,
    /// Messages completed (IBTA Vol 1 §9.7, C9-148): every AETH carries it.
    pub(super) msn: Msn,
    /// A sequence NAK was sent for the current out-of-sequence episode.
    nak_sent: bool,
    /// The message in progress.
    in_msg: InMsg,
    /// READ and atomic resources, oldest first.
    resources: VecDeque<Resource>,
    /// Responses waiting to be sent.
    out: VecDeque<RespItem>,
    /// The NAK that moved the QP to ERR, sent once from ERR.
    pub(super) fatal_nak: Option<(Psn, Syndrome)>,
}

impl Responder {
    pub(super) fn new(caps: &QpCaps) -> Self {
        Self {
            rq: VecDeque::with_capacity(caps.max_recv_wr.min(64) as usize),
            epsn: Psn::new(0),
            msn: Msn(0),
            nak_sent: false,
            in_msg: InMsg::None,
            resources: VecDeque::new(),
            out: VecDeque::with_capacity(64),
            fatal_nak: None,
        }
    }

    /// Entering ERR: the receive in progress and every posted one, oldest first.
    pub(super) fn drain_receives(&mut self) -> impl Iterator<Item = RecvRequest> + '_ {
        let current = match core::mem::replace(&mut self.in_msg, InMsg::None) {
            InMsg::Send { wqe, .. } => Some(wqe),
            _ => None,
        };
        current.into_iter().chain(self.rq.drain(..))
    }

    /// Entering ERR: nothing more is owed.
    pub(super) fn clear_responses(&mut self) {
        self.out.clear();
    }
}

/// A responder error: the NAK code, and the status of the receive request it hit, if any.
struct Fatal(NakCode, Option<WcStatus>);

/// The outcome of executing an in-sequence request.
enum Exec {
    Done,
    Rnr,
    Fatal(Fatal),
}

/// A NAK invalid request (with the receive status, if a receive is involved).
fn invalid(recv_status: Option<WcStatus>) -> Exec {
    Exec::Fatal(Fatal(NakCode::InvalidRequest, recv_status))
}

const REMOTE_ACCESS: Exec = Exec::Fatal(Fatal(NakCode::RemoteAccessError, None));

impl Qp {
    fn push_resp(&mut self, item: RespItem) {
        let coalescable = |s: Syndrome| {
            matches!(
                s.kind(),
                AethKind::Ack { .. } | AethKind::Nak(NakCode::PsnSequenceError)
            )
        };
        let out = &mut self.resp.out;
        if let RespItem::Ack { syndrome, .. } = item {
            if coalescable(syndrome) {
                if let Some(back) = out.back_mut() {
                    // A newer ACK (or sequence NAK) replaces the queued one: it says more.
                    if matches!(back, RespItem::Ack { syndrome: s, .. } if coalescable(*s)) {
                        *back = item;
                        return;
                    }
                }
            }
        }
        let cap = 4 * self.attr.responder_resources() + 64;
        if out.len() >= cap {
            self.stats.drops.count(DropReason::ResponseQueueFull);
            return;
        }
        out.push_back(item);
    }

    fn push_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        if self.is_uc() {
            // UC acknowledges nothing.
            return;
        }
        self.push_resp(RespItem::Ack {
            psn,
            syndrome,
            msn: self.resp.msn,
        });
    }

    fn push_resource(&mut self, r: Resource) {
        if self.resp.resources.len() >= self.attr.responder_resources() {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    fn responder_fatal(&mut self, ctx: &mut Ctx<'_>, psn: Psn, f: Fatal) {
        let Fatal(code, recv_status) = f;
        if let Some(st) = recv_status {
            let wqe = match core::mem::replace(&mut self.resp.in_msg, InMsg::None) {
                InMsg::Send { wqe, .. } => Some(wqe),
                _ => self.take_recv(ctx),
            };
            if let Some(wqe) = wqe {
                ctx.push(
                    self.recv_cq,
                    Completion::recv_status(self.qpn, wqe.wr_id, st),
                );
            }
        }
        self.enter_error(ctx);
        self.resp.fatal_nak = Some((psn, Syndrome::nak(code)));
    }

    /// A request packet (the state receives).
    pub(super) fn on_request(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        if p == self.resp.epsn {
            self.resp.nak_sent = false;
            match self.execute(now, pkt, ctx) {
                Exec::Done => {}
                Exec::Rnr => {
                    self.push_ack(p, Syndrome::rnr_nak(self.attr.min_rnr_timer));
                }
                Exec::Fatal(f) => self.responder_fatal(ctx, p, f),
            }
        } else if self.resp.epsn.precedes(p) {
            self.stats.out_of_sequence_requests += 1;
            if self.resp.nak_sent {
                self.stats.drops.count(DropReason::OutOfSequence);
            } else {
                self.resp.nak_sent = true;
                self.push_ack(self.resp.epsn, Syndrome::nak(NakCode::PsnSequenceError));
            }
        } else {
            self.stats.duplicate_requests += 1;
            self.on_duplicate(pkt);
        }
    }

    /// A UC request (opcode already mapped to its RC twin): in sequence it executes; a PSN
    /// gap abandons the message in progress (its receive request is kept for the next) and
    /// resynchronises at the next FIRST or ONLY (IBTA Vol 1 §9.7.5.1); behind the expected
    /// PSN it is dropped. A message that cannot be placed is dropped. Nothing is answered.
    pub(super) fn on_uc_request(&mut self, now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) {
        let p = pkt.bth.psn;
        if p != self.resp.epsn {
            if !self.resp.epsn.precedes(p) {
                self.stats.duplicate_requests += 1;
                self.stats.drops.count(DropReason::StaleResponse);
                return;
            }
            self.stats.out_of_sequence_requests += 1;
            self.abandon_uc_message(ctx);
            self.resp.epsn = p;
            if !pkt.bth.opcode.starts_message() {
                // The rest of a message whose start was lost.
                self.resp.epsn = p.next();
                self.stats.drops.count(DropReason::OutOfSequence);
                return;
            }
        }
        match self.execute(now, pkt, ctx) {
            Exec::Done => {}
            Exec::Rnr | Exec::Fatal(_) => {
                // No receive request, an access violation, a bad length or sequence: the
                // message is dropped, the QP goes on (UC has no NAKs).
                self.abandon_uc_message(ctx);
                self.resp.epsn = p.next();
                self.stats.drops.count(DropReason::NoResource);
            }
        }
    }

    fn abandon_uc_message(&mut self, ctx: &mut Ctx<'_>) {
        if let InMsg::Send { wqe, .. } = core::mem::replace(&mut self.resp.in_msg, InMsg::None) {
            self.give_back_recv(wqe, ctx);
        }
    }

    fn on_duplicate(&mut self, pkt: &PacketRepr<'_>) {
        let p = pkt.bth.psn;
        let op = pkt.bth.opcode;
        if op == Opcode::RC_ATOMIC_WRITE || op == Opcode::RC_FLUSH {
            // Answered again from its resource, never executed twice.
            let found = self
                .resp
                .resources
                .iter()
                .rev()
                .any(|r| matches!(*r, Resource::Read { first, len: 0, .. } if first == p));
            if !found {
                self.stats.drops.count(DropReason::NoResource);
                return;
            }
            self.resp
                .out
                .retain(|i| !matches!(i, RespItem::Read(j) if j.first_psn == p));
            self.push_resp(RespItem::Read(ReadJob {
                psn: p,
                first_psn: p,
                va: 0,
                rkey: pkt.reth.map_or(RKey(0), |r| r.rkey),
                remaining: 0,
                started: false,
                msn: self.resp.msn,
            }));
            return;
        }
        if op == Opcode::RC_RDMA_READ_REQUEST {
            let Some(reth) = pkt.reth else { return };
            let found = self.resp.resources.iter().rev().find_map(|r| match *r {
                Resource::Read {
                    first,
                    last,
                    va,
                    rkey,
                    len,
                } if in_range(p, first, last.next())
                    && rkey == reth.rkey
                    && reth.va >= va
                    && (reth.va - va).saturating_add(u64::from(reth.dma_len)) <= u64::from(len) =>
                {
                    Some(first)
                }
                _ => None,
            });
            let Some(first) = found else {
                self.stats.drops.count(DropReason::NoResource);
                return;
            };
            // A replay supersedes any queued replay of the same READ.
            self.resp
                .out
                .retain(|i| !matches!(i, RespItem::Read(j) if j.first_psn == first));
            self.push_resp(RespItem::Read(ReadJob {
                psn: p,
                first_psn: first,
                va: reth.va,
                rkey: reth.rkey,
                remaining: reth.dma_len,
                started: false,
                msn: self.resp.msn,
            }));
        } else if op.is_atomic() {
            let found = self.resp.resources.iter().rev().find_map(|r| match *r {
                Resource::Atomic { psn, orig } if psn == p => Some(orig),
                _ => None,
            });
            match found {
                Some(orig) => self.push_resp(RespItem::AtomicAck {
                    psn: p,
                    orig,
                    msn: self.resp.msn,
                }),
                None => self.stats.drops.count(DropReason::NoResource),
            }
        } else {
            self.push_ack(self.resp.epsn.sub(1), Syndrome::ACK_UNLIMITED);
        }
    }

    /// The responder's check of a RETH before any byte moves: a DMA length over 2^31 is an
    /// invalid request; a non-empty range the rkey does not grant `access` to is a remote
    /// access error.
    fn check_reth(&self, ctx: &Ctx<'_>, reth: &RethRepr, access: Access) -> Result<(), Exec> {
        if reth.dma_len > 1 << 31 {
            return Err(invalid(None));
        }
        if reth.dma_len > 0
            && ctx
                .mrs
                .remote(
                    reth.rkey,
                    (self.pd, self.qpn),
                    access,
                    reth.va,
                    u64::from(reth.dma_len),
                )
                .is_err()
        {
            return Err(REMOTE_ACCESS);
        }
        Ok(())
    }

    /// The checks every in-sequence request passes before it executes, in rxe's order: opcode
    /// sequence, the QP's access rights, a receive request where one is consumed, lengths.
    fn validate_request(&self, pkt: &PacketRepr<'_>, ctx: &Ctx<'_>) -> Result<(), Exec> {
        let op = pkt.bth.opcode;
        let class = op.class();
        let (is_send, is_write) = (op.is_send(), op.is_write());
        let seq_ok = match (self.resp.in_msg, class) {
            (InMsg::None, Class::First | Class::Only) => true,
            (InMsg::Send { .. }, Class::Middle | Class::Last) => is_send,
            (InMsg::Write { .. }, Class::Middle | Class::Last) => is_write,
            _ => false,
        };
        if !seq_ok {
            return Err(invalid(None));
        }
        // ATOMIC WRITE needs REMOTE_WRITE (rxe's rule); FLUSH has its own access flags in
        // verbs (FLUSH_GLOBAL / FLUSH_PERSISTENT), which this stack folds into REMOTE_WRITE.
        let placement = op == Opcode::RC_ATOMIC_WRITE || op == Opcode::RC_FLUSH;
        let need = if is_write || placement {
            Access::REMOTE_WRITE
        } else if op == Opcode::RC_RDMA_READ_REQUEST {
            Access::REMOTE_READ
        } else if op.is_atomic() {
            Access::REMOTE_ATOMIC
        } else {
            Access::NONE
        };
        if !self.attr.access.contains(need) {
            return Err(invalid(None));
        }
        let needs_recv = (is_send && matches!(class, Class::First | Class::Only))
            || (is_write && op.has_immediate());
        if needs_recv && !self.has_recv(ctx) {
            return Err(Exec::Rnr);
        }
        if is_send || is_write {
            let plen = pkt.payload.len() as u32;
            let mtu = self.attr.mtu;
            let len_ok = match class {
                Class::First | Class::Middle => plen == mtu,
                Class::Last => plen >= 1 && plen <= mtu,
                Class::Only => plen <= mtu,
            };
            if !len_ok || pkt.bth.pad_count != PacketRepr::pad_for(plen as usize) {
                return Err(invalid(None));
            }
        }
        Ok(())
    }

    /// Validates and executes the in-sequence request `pkt`.
    fn execute(&mut self, _now: Instant, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) -> Exec {
        if let Err(e) = self.validate_request(pkt, ctx) {
            return e;
        }
        let op = pkt.bth.opcode;
        let result = if op.is_send() {
            self.execute_send(pkt, ctx)
        } else if op.is_write() {
            self.execute_write(pkt, ctx)
        } else if op == Opcode::RC_RDMA_READ_REQUEST {
            return self.execute_read(pkt, ctx);
        } else if op == Opcode::RC_ATOMIC_WRITE || op == Opcode::RC_FLUSH {
            return self.execute_placement(pkt, ctx);
        } else if op.is_atomic() {
            return self.execute_atomic(pkt, ctx);
        } else {
            return invalid(None);
        };
        if let Exec::Done = result {
            self.resp.epsn = pkt.bth.psn.next();
            if pkt.bth.ack_req {
                self.push_ack(pkt.bth.psn, Syndrome::ACK_UNLIMITED);
            }
        }
        result
    }

    /// A SEND packet: its payload goes into the receive request at the message offset; the last
    /// packet completes the receive (and invalidates the IETH rkey).
    fn execute_send(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) -> Exec {
        let plen = pkt.payload.len() as u32;
        let (wqe, offset) = match self.resp.in_msg {
            InMsg::Send { wqe, offset } => (wqe, offset),
            _ => match self.take_recv(ctx) {
                Some(w) => (w, 0),
                None => return Exec::Rnr,
            },
        };
        self.resp.in_msg = InMsg::Send { wqe, offset };
        match ctx
            .mrs
            .scatter(self.pd, &wqe.sgl, u64::from(offset), pkt.payload)
        {
            Ok(()) => {}
            Err(MemError::Length) => return invalid(Some(WcStatus::LocLenErr)),
            Err(MemError::Protection) => {
                return Exec::Fatal(Fatal(
                    NakCode::RemoteOperationalError,
                    Some(WcStatus::LocProtErr),
                ))
            }
        }
        let offset = offset.saturating_add(plen);
        if !pkt.bth.opcode.ends_message() {
            self.resp.in_msg = InMsg::Send { wqe, offset };
            return Exec::Done;
        }
        let mut c = Completion::received(self.qpn, wqe.wr_id, WcOpcode::Recv, offset);
        if let Some(ieth) = pkt.ieth {
            // A type 2 window bound through this QP, or a region (IBTA Vol 1 §10.6.7.2.5).
            let ok = if ieth.rkey.0 >> 8 > 0x80_0000 {
                ctx.mrs
                    .invalidate_mw(self.pd, ieth.rkey, Some(self.qpn))
                    .is_ok()
            } else {
                ctx.mrs.invalidate(self.pd, ieth.rkey)
            };
            if !ok {
                return invalid(Some(WcStatus::RemInvReqErr));
            }
            c.invalidated_rkey = Some(ieth.rkey);
        }
        c.imm_data = pkt.immdt.map(|i| i.0);
        self.resp.in_msg = InMsg::None;
        ctx.push(self.recv_cq, c);
        self.resp.msn = self.resp.msn.next();
        Exec::Done
    }

    /// A WRITE packet: the FIRST or ONLY carries the RETH, checked once; every payload byte
    /// lands at its address; the last packet of a WRITE with immediate consumes a receive.
    fn execute_write(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) -> Exec {
        let plen = pkt.payload.len() as u32;
        let class = pkt.bth.opcode.class();
        let (va, rkey, remaining, total) = match self.resp.in_msg {
            InMsg::Write {
                va,
                rkey,
                remaining,
                total,
            } => (va, rkey, remaining, total),
            _ => {
                let Some(reth) = pkt.reth else {
                    return invalid(None);
                };
                if class == Class::First && reth.dma_len <= plen {
                    return invalid(None);
                }
                if let Err(e) = self.check_reth(ctx, &reth, Access::REMOTE_WRITE) {
                    return e;
                }
                (reth.va, reth.rkey, reth.dma_len, reth.dma_len)
            }
        };
        let ends = pkt.bth.opcode.ends_message();
        if plen > remaining || (ends && plen != remaining) {
            return invalid(None);
        }
        if plen > 0 {
            match ctx.mrs.remote(
                rkey,
                (self.pd, self.qpn),
                Access::REMOTE_WRITE,
                va,
                u64::from(plen),
            ) {
                Ok((idx, off)) => ctx.mrs.write(idx, off, pkt.payload),
                Err(_) => return REMOTE_ACCESS,
            }
        }
        if !ends {
            self.resp.in_msg = InMsg::Write {
                va: va.wrapping_add(u64::from(plen)),
                rkey,
                remaining: remaining - plen,
                total,
            };
            return Exec::Done;
        }
        self.resp.in_msg = InMsg::None;
        if let Some(imm) = pkt.immdt {
            let Some(wqe) = self.take_recv(ctx) else {
                return Exec::Rnr;
            };
            let mut c = Completion::received(self.qpn, wqe.wr_id, WcOpcode::RecvRdmaWithImm, total);
            c.imm_data = Some(imm.0);
            ctx.push(self.recv_cq, c);
        }
        self.resp.msn = self.resp.msn.next();
        Exec::Done
    }

    /// A READ request: checked, remembered as a resource, its responses queued; the expected
    /// PSN moves past all of them.
    fn execute_read(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) -> Exec {
        let p = pkt.bth.psn;
        let Some(reth) = pkt.reth else {
            return invalid(None);
        };
        if let Err(e) = self.check_reth(ctx, &reth, Access::REMOTE_READ) {
            return e;
        }
        let npkts = reth.dma_len.div_ceil(self.attr.mtu).max(1);
        let last = p.add(npkts - 1);
        self.push_resource(Resource::Read {
            first: p,
            last,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
        });
        // The MSN counts the READ when it is accepted (C9-148).
        self.resp.msn = self.resp.msn.next();
        self.push_resp(RespItem::Read(ReadJob {
            psn: p,
            first_psn: p,
            va: reth.va,
            rkey: reth.rkey,
            remaining: reth.dma_len,
            started: false,
            msn: self.resp.msn,
        }));
        self.resp.epsn = last.next();
        Exec::Done
    }

    /// ATOMIC WRITE (the 8 payload bytes stored at once at an aligned address) or FLUSH (a
    /// placement barrier: this stack's memory is always globally visible, so global placement
    /// needs nothing more; persistent placement has no persistent memory here and is a remote
    /// access error), both answered by an empty READ RESPONSE ONLY with an ACK (IBA 1.5, annex
    /// A19; as rxe does). Each takes a responder resource, so a duplicate is answered again
    /// without executing twice.
    fn execute_placement(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) -> Exec {
        let p = pkt.bth.psn;
        let Some(reth) = pkt.reth else {
            return invalid(None);
        };
        if self.attr.responder_resources() == 0 {
            return invalid(None);
        }
        if pkt.bth.opcode == Opcode::RC_ATOMIC_WRITE {
            if reth.dma_len != 8 || pkt.payload.len() != 8 || reth.va % 8 != 0 {
                return invalid(None);
            }
            let Ok((idx, off)) = ctx.mrs.remote(
                reth.rkey,
                (self.pd, self.qpn),
                Access::REMOTE_WRITE,
                reth.va,
                8,
            ) else {
                return REMOTE_ACCESS;
            };
            ctx.mrs.write(idx, off, &pkt.payload[..8]);
        } else {
            let Some(feth) = pkt.feth else {
                return invalid(None);
            };
            if feth.placement_type() & 2 != 0 {
                // Persistence asked of memory that has none.
                return REMOTE_ACCESS;
            }
            if feth.selectivity() == 0 {
                if let Err(e) = self.check_reth(ctx, &reth, Access::REMOTE_WRITE) {
                    return e;
                }
            } else if ctx
                .mrs
                .remote(
                    reth.rkey,
                    (self.pd, self.qpn),
                    Access::REMOTE_WRITE,
                    reth.va,
                    0,
                )
                .is_err()
            {
                return REMOTE_ACCESS;
            }
        }
        self.push_resource(Resource::Read {
            first: p,
            last: p,
            va: reth.va,
            rkey: reth.rkey,
            len: 0,
        });
        self.resp.msn = self.resp.msn.next();
        self.push_resp(RespItem::Read(ReadJob {
            psn: p,
            first_psn: p,
            va: reth.va,
            rkey: reth.rkey,
            remaining: 0,
            started: false,
            msn: self.resp.msn,
        }));
        self.resp.epsn = p.next();
        Exec::Done
    }

    /// A compare-and-swap or fetch-and-add on an aligned 8-byte word (little-endian in memory),
    /// executed once; the original value is kept for a duplicate.
    fn execute_atomic(&mut self, pkt: &PacketRepr<'_>, ctx: &mut Ctx<'_>) -> Exec {
        let p = pkt.bth.psn;
        let Some(a) = pkt.atomic_eth else {
            return invalid(None);
        };
        if a.va % 8 != 0 {
            return invalid(None);
        }
        let Ok((idx, off)) =
            ctx.mrs
                .remote(a.rkey, (self.pd, self.qpn), Access::REMOTE_ATOMIC, a.va, 8)
        else {
            return REMOTE_ACCESS;
        };
        let word = ctx.mrs.word_mut(idx, off);
        let mut b = [0u8; 8];
        b.copy_from_slice(word);
        let orig = u64::from_le_bytes(b);
        let new = if pkt.bth.opcode == Opcode::RC_COMPARE_SWAP {
            if orig == a.compare {
                a.swap_add
            } else {
                orig
            }
        } else {
            orig.wrapping_add(a.swap_add)
        };
        word.copy_from_slice(&new.to_le_bytes());
        self.push_resource(Resource::Atomic { psn: p, orig });
        self.resp.msn = self.resp.msn.next();
        self.push_resp(RespItem::AtomicAck {
            psn: p,
            orig,
            msn: self.resp.msn,
        });
        self.resp.epsn = p.next();
        Exec::Done
    }

    /// Writes the oldest response owed, if congestion control lets it go now.
    pub(super) fn poll_response(
        &mut self,
        now: Instant,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        let item = *self.resp.out.front()?;
        match item {
            RespItem::Ack { psn, syndrome, msn } => {
                self.resp.out.pop_front();
                self.emit_ack_with_msn(psn, syndrome, msn, None, buf)
                    .or_else(|| self.emit_failed(ctx))
            }
            RespItem::AtomicAck { psn, orig, msn } => {
                self.resp.out.pop_front();
                self.emit_ack_with_msn(psn, Syndrome::ACK_UNLIMITED, msn, Some(orig), buf)
                    .or_else(|| self.emit_failed(ctx))
            }
            RespItem::Read(job) => self.poll_read_response(now, job, ctx, buf),
        }
    }

    /// The next response packet of a READ (at most one MTU of its range).
    fn poll_read_response(
        &mut self,
        now: Instant,
        mut job: ReadJob,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        let mtu = self.attr.mtu;
        let plen = job.remaining.min(mtu);
        if self.paced(now, plen as usize + 64) {
            return None;
        }
        let fits = job.remaining <= mtu;
        let opcode = build::read_response_opcode(Position {
            first: !job.started && job.psn == job.first_psn,
            last: fits,
        });
        let payload: std::borrow::Cow<'_, [u8]> = if plen == 0 {
            std::borrow::Cow::Borrowed(&[])
        } else {
            match ctx.mrs.remote(
                job.rkey,
                (self.pd, self.qpn),
                Access::REMOTE_READ,
                job.va,
                u64::from(plen),
            ) {
                Ok((idx, off)) => ctx.mrs.bytes(idx, off, plen as usize),
                Err(_) => {
                    // The region was invalidated or deregistered mid-READ.
                    self.resp.out.clear();
                    self.responder_fatal(ctx, job.psn, Fatal(NakCode::RemoteAccessError, None));
                    let (psn, syn) = self.resp.fatal_nak.take()?;
                    return self.emit_ack(psn, syn, None, buf);
                }
            }
        };
        let mut bth = build::bth(opcode, self.attr.dest_qpn, job.psn);
        bth.pad_count = PacketRepr::pad_for(plen as usize);
        let repr = PacketRepr {
            bth,
            aeth: (opcode != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(
                roce_proto::AethRepr {
                    syndrome: Syndrome::ACK_UNLIMITED,
                    msn: job.msn,
                },
            ),
            payload: &payload,
            ..PacketRepr::default()
        };
        let Ok(n) = build::emit(&repr, &self.attr.path, &mut self.seeds, buf) else {
            return self.emit_failed(ctx);
        };
        job.started = true;
        job.remaining -= plen;
        job.va = job.va.wrapping_add(u64::from(plen));
        job.psn = job.psn.next();
        if fits {
            self.resp.out.pop_front();
        } else if let Some(RespItem::Read(j)) = self.resp.out.front_mut() {
            *j = job;
        }
        self.cc.on_packet_sent(now, n);
        Some(n)
    }
}
