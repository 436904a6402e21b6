//! The two ends of a KV push on a device: [`KvSender`] (prefill) posts each QP's WRITEs, the
//! last one with an immediate; [`KvReceiver`] (decode) counts the immediates and verifies.
use std::fmt;

use roce_driver::{AppError, Application};
use roce_proto::{Qpn, RKey};
use roce_stack::{
    CqHandle, Device, Instant, MrHandle, PostError, RecvRequest, RemoteAddr, SgList, Sge, WcOpcode,
    WcStatus, WorkRequest, WrOp,
};

use super::{BlockCopy, KvMismatch, Transfer};

struct SendQp {
    qpn: Qpn,
    cq: CqHandle,
    next: usize,
    posted_last: bool,
    done: bool,
    held: bool,
}

/// The prefill side: posts each QP's WRITEs in order as the send queue allows, the last one
/// with the immediate and the only signaled one (selective signaling).
pub struct KvSender {
    transfer: Transfer,
    qps: Vec<SendQp>,
    src_va: u64,
    lkey: u32,
    remote_va: u64,
    rkey: RKey,
    error: Option<String>,
}

impl fmt::Debug for KvSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvSender")
            .field("transfer", &self.transfer.name)
            .finish_non_exhaustive()
    }
}

impl KvSender {
    /// A sender of `transfer` from region `src` (holding [`Transfer::source`] at offset 0)
    /// over `qps` (QPN and send CQ, one per transfer QP) into the peer's pool at `remote_va`.
    pub fn new(
        dev: &Device,
        transfer: Transfer,
        src: MrHandle,
        qps: &[(Qpn, CqHandle)],
        remote_va: u64,
        rkey: RKey,
    ) -> Result<Self, AppError> {
        let bad = AppError::Defect;
        let m = dev.mr(src).ok_or_else(|| bad("source region unknown"))?;
        if (m.len() as u64) < transfer.source_len {
            return Err(bad("source region smaller than the transfer's source"));
        }
        if qps.len() != transfer.per_qp.len() {
            return Err(bad("QP count differs from the transfer's"));
        }
        Ok(Self {
            src_va: m.va(),
            lkey: m.lkey(),
            transfer,
            qps: qps
                .iter()
                .map(|&(qpn, cq)| SendQp {
                    qpn,
                    cq,
                    next: 0,
                    posted_last: false,
                    done: false,
                    held: false,
                })
                .collect(),
            remote_va,
            rkey,
            error: None,
        })
    }

    /// Holds back (or releases) QP `q`: nothing more is posted on it while held. Models a
    /// straggling QP (a slower NIC or path); tests use it to check the receiver's counting.
    pub fn hold(&mut self, q: usize, held: bool) {
        if let Some(s) = self.qps.get_mut(q) {
            s.held = held;
        }
    }

    /// The transfer.
    pub fn transfer(&self) -> &Transfer {
        &self.transfer
    }

    /// The error that stopped the sender, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn post(&mut self, dev: &mut Device, q: usize) -> Result<(), AppError> {
        let list = &self.transfer.per_qp[q];
        let s = &mut self.qps[q];
        while !s.held && !s.posted_last {
            let last = s.next + 1 >= list.len();
            let (sgl, dst) = match list.get(s.next) {
                Some(c) => (
                    SgList::one(Sge {
                        addr: self.src_va + c.src,
                        length: c.len as u32,
                        lkey: self.lkey,
                    }),
                    c.dst,
                ),
                // A QP that got no data still reports, with a zero-length WRITE.
                None => (SgList::new(), 0),
            };
            let remote = RemoteAddr {
                va: self.remote_va + dst,
                rkey: self.rkey,
            };
            let mut wr = WorkRequest::new(
                s.next as u64,
                if last {
                    WrOp::WriteWithImm(remote, self.transfer.imm(q))
                } else {
                    WrOp::Write(remote)
                },
                sgl,
            );
            wr.signaled = last;
            match dev.post_send(s.qpn, wr) {
                Ok(()) => {
                    s.next += 1;
                    s.posted_last = last;
                }
                Err(PostError::QueueFull) => break,
                Err(e) => return Err(AppError::post(q, format!("WRITE #{}", s.next), e)),
            }
        }
        Ok(())
    }
}

impl Application for KvSender {
    /// Takes the signaled completions and posts what the send queues accept.
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), AppError> {
        for q in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[q].cq) {
                if c.status != WcStatus::Success {
                    let e = format!("qp {q}: WRITE #{} completed with {:?}", c.wr_id, c.status);
                    self.error = Some(e);
                    return Err(AppError::completion("a WRITE", &c));
                }
                self.qps[q].done = true;
            }
            self.post(dev, q)?;
        }
        Ok(())
    }

    /// `true` once every QP's last (signaled) WRITE completed.
    fn done(&self) -> bool {
        self.error.is_some() || self.qps.iter().all(|q| q.done)
    }
}

struct RecvQp {
    qpn: Qpn,
    cq: CqHandle,
    arrived: bool,
}

/// Bound on mismatches kept.
const MAX_MISMATCHES: usize = 16;

/// The decode side: one receive per QP; when a QP's immediate arrives, checks every byte that
/// QP wrote; the request is complete when every QP's immediate has arrived (counted: there is
/// no order across QPs). [`KvReceiver::finish`] then checks every byte of the request again
/// and that the rest of the pool is still zero.
pub struct KvReceiver {
    transfer: Transfer,
    source: Vec<u8>,
    pool: MrHandle,
    qps: Vec<RecvQp>,
    arrived: usize,
    complete: bool,
    verified_bytes: u64,
    mismatches: Vec<KvMismatch>,
}

impl fmt::Debug for KvReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvReceiver")
            .field("transfer", &self.transfer.name)
            .field("arrived", &self.arrived)
            .finish_non_exhaustive()
    }
}

impl KvReceiver {
    /// Zeroes what the transport wrote into the pool `pool` before (the previous request's
    /// bytes must not pass for this one's; the application never writes the pool itself) and
    /// posts one receive on each QP (QPN and receive CQ, one per transfer QP).
    pub fn new(
        dev: &mut Device,
        transfer: Transfer,
        pool: MrHandle,
        qps: &[(Qpn, CqHandle)],
    ) -> Result<Self, AppError> {
        let bad = AppError::Defect;
        if qps.len() != transfer.per_qp.len() {
            return Err(bad("QP count differs from the transfer's"));
        }
        let m = dev.mr_mut(pool).ok_or_else(|| bad("pool region unknown"))?;
        if (m.len() as u64) < transfer.pool_len {
            return Err(bad("pool region smaller than the transfer's pool"));
        }
        // Only what the transport wrote since the last request: the rest is still zero, and
        // a large pool's untouched pages stay unallocated.
        m.zero_dirty();
        for (i, &(qpn, _)) in qps.iter().enumerate() {
            dev.post_recv(
                qpn,
                RecvRequest {
                    wr_id: i as u64,
                    sgl: SgList::new(),
                },
            )
            .map_err(|e| AppError::post(i, "the receive", e))?;
        }
        Ok(Self {
            source: transfer.source(),
            transfer,
            pool,
            qps: qps
                .iter()
                .map(|&(qpn, cq)| RecvQp {
                    qpn,
                    cq,
                    arrived: false,
                })
                .collect(),
            arrived: 0,
            complete: false,
            verified_bytes: 0,
            mismatches: Vec::new(),
        })
    }

    /// QPs whose immediate has arrived.
    pub fn arrived(&self) -> usize {
        self.arrived
    }

    /// `true` once every QP's immediate arrived and every byte verified.
    pub fn complete(&self) -> bool {
        self.complete && self.mismatches.is_empty()
    }

    /// Bytes compared (each QP's at its immediate, then all of them again in `finish`).
    pub fn verified_bytes(&self) -> u64 {
        self.verified_bytes
    }

    /// Mismatches found.
    pub fn mismatches(&self) -> &[KvMismatch] {
        &self.mismatches
    }

    /// The QPN of transfer QP `q`.
    pub fn qpn(&self, q: usize) -> Option<Qpn> {
        self.qps.get(q).map(|s| s.qpn)
    }

    fn fail(&mut self, m: KvMismatch) {
        if self.mismatches.len() < MAX_MISMATCHES {
            self.mismatches.push(m);
        }
    }

    /// Compares the destination of `copies` with the source; returns bytes checked.
    fn check(&mut self, mem: &[u8], q: Option<usize>, copies: &[BlockCopy]) -> u64 {
        let mut n = 0;
        for c in copies {
            let (s, d, l) = (c.src as usize, c.dst as usize, c.len as usize);
            let got = &mem[d..d + l];
            let want = &self.source[s..s + l];
            if got != want {
                let p = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                self.fail(KvMismatch {
                    qp: q,
                    offset: Some((d + p) as u64),
                    detail: format!(
                        "byte {:#04x}, expected {:#04x} (WRITE of {l} B to offset {d})",
                        got[p], want[p]
                    ),
                });
                return n;
            }
            n += c.len;
        }
        n
    }

    /// QP `q`'s immediate arrived: every byte it wrote must be in place now. Once every QP
    /// has reported, the request is complete.
    fn on_imm(&mut self, dev: &Device, q: usize) {
        let Some(mem) = dev.mr(self.pool).map(|m| m.as_slice()) else {
            return;
        };
        let copies = std::mem::take(&mut self.transfer.per_qp[q]);
        let n = self.check(mem, Some(q), &copies);
        self.transfer.per_qp[q] = copies;
        self.verified_bytes += n;
        self.complete = self.arrived == self.qps.len();
    }

    /// After the transfer (outside the timed part): checks every byte of the request again
    /// and that no byte of the pool outside the request's blocks changed. Returns
    /// [`KvReceiver::complete`] afterwards.
    pub fn finish(&mut self, dev: &Device) -> bool {
        let Some(mem) = dev.mr(self.pool).map(|m| m.as_slice()) else {
            return false;
        };
        if !self.complete {
            return false;
        }
        let mut all: Vec<BlockCopy> = self.transfer.per_qp.iter().flatten().copied().collect();
        let n = self.check(mem, None, &all);
        self.verified_bytes += n;
        // Bytes outside the request's blocks must still be zero. Only pages the transport
        // wrote since the pool was zeroed can differ, so only those are read.
        all.sort_unstable_by_key(|c| c.dst);
        let mut covered: Vec<(usize, usize)> = Vec::with_capacity(all.len());
        for c in &all {
            let (s, e) = (c.dst as usize, (c.dst + c.len) as usize);
            match covered.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => covered.push((s, e)),
            }
        }
        let Some(mr) = dev.mr(self.pool) else {
            return false;
        };
        let mut ci = 0;
        let mut stray = None;
        'ranges: for r in mr.dirty_ranges() {
            let mut at = r.start;
            while at < r.end {
                while covered.get(ci).is_some_and(|c| c.1 <= at) {
                    ci += 1;
                }
                let end = match covered.get(ci) {
                    Some(&(s, e)) if s <= at => {
                        at = e;
                        continue;
                    }
                    Some(&(s, _)) => s.min(r.end),
                    None => r.end,
                };
                if let Some(p) = mem[at..end].iter().position(|&b| b != 0) {
                    stray = Some(at + p);
                    break 'ranges;
                }
                at = end;
            }
        }
        if let Some(at) = stray {
            self.fail(KvMismatch {
                qp: None,
                offset: Some(at as u64),
                detail: "a byte outside the request's blocks changed".into(),
            });
        }
        self.complete()
    }
}

impl Application for KvReceiver {
    /// Takes receive completions: each must be a WRITE with immediate carrying its QP's
    /// immediate, once per QP.
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), AppError> {
        for q in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[q].cq) {
                let want = self.transfer.imm(q);
                if c.status != WcStatus::Success
                    || c.opcode != WcOpcode::RecvRdmaWithImm
                    || c.imm_data != Some(want)
                    || self.qps[q].arrived
                {
                    let detail = format!(
                        "receive completion {:?} {:?} imm {:?}{}, expected one RecvRdmaWithImm with imm {want:#x}",
                        c.status,
                        c.opcode,
                        c.imm_data,
                        if self.qps[q].arrived { " (a second one)" } else { "" }
                    );
                    self.fail(KvMismatch {
                        qp: Some(q),
                        offset: None,
                        detail,
                    });
                    continue;
                }
                self.qps[q].arrived = true;
                self.arrived += 1;
                self.on_imm(dev, q);
            }
        }
        Ok(())
    }

    /// `true` once complete (or a mismatch was found).
    fn done(&self) -> bool {
        self.complete || !self.mismatches.is_empty()
    }
}
