//! The verified workload that `roce loopback`, `roce server` and `roce client` run: a seeded mix
//! of SEND/RECV (with and without immediate), RDMA WRITE (with and without immediate), READ,
//! compare-and-swap and fetch-and-add over several RC QPs, with every byte and every
//! completion checked against an in-order model on both sides.
//!
//! Both sides derive the same [`Plan`] from the same [`WorkloadSpec`] (the client sends the
//! spec to the server out of band), so each can verify on its own:
//! * the requester checks that every work request completes once, in order, successfully, with
//!   the right opcode and length; that READ data equals the responder's read area; that every
//!   atomic returns the value the model predicts;
//! * the responder checks every receive completion (length, immediate, SEND data) and, when the
//!   per-QP final marker (a zero-length SEND with immediate) arrives — RC executes in order, so
//!   every earlier operation of that QP has landed — that its write area and atomic area equal
//!   the model.
//!
//! Memory per QP. Requester: `depth` slots of `max_size` bytes (SEND/WRITE source, READ
//! destination, atomic result). Responder: a write area, a read area (filled with a known
//! pattern at start), 64 atomic words, and receive slots. A READ never targets bytes a WRITE
//! changes: a READ retried after a loss re-executes from current memory, which RC allows, so
//! reading written bytes would make the expected data depend on timing.
//!
//! This module does no I/O: it is driven through [`Device`] by the UDP driver or the simulator.
use std::collections::VecDeque;
use std::fmt;

use roce_proto::{Psn, Qpn, RKey};

use crate::device::{CqHandle, Device};
use crate::memory::{Access, MrHandle, SgList};
use crate::rng::Rng;
use crate::stats::QpStats;
use crate::time::Instant;
use crate::wr::{Completion, RecvRequest, RemoteAddr, WcOpcode, WcStatus, WorkRequest, WrOp};

/// What an endpoint runs on a [`Device`]: posts work requests and consumes completions. The
/// UDP driver and the simulator call it after every batch of events.
pub trait Application {
    /// Drains completion queues and posts what can be posted. An `Err` stops the run.
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), String>;
    /// `true` when the application has nothing left to do.
    fn done(&self) -> bool;
}

/// The operations a workload mixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// SEND (consumes a receive).
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate (consumes a receive).
    WriteImm,
    /// RDMA READ.
    Read,
    /// 64-bit compare-and-swap.
    CompareSwap,
    /// 64-bit fetch-and-add.
    FetchAdd,
}

impl OpKind {
    /// Every kind, in report order.
    pub const ALL: [Self; 7] = [
        Self::Send,
        Self::SendImm,
        Self::Write,
        Self::WriteImm,
        Self::Read,
        Self::CompareSwap,
        Self::FetchAdd,
    ];

    /// Name used on the command line and in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::SendImm => "send_imm",
            Self::Write => "write",
            Self::WriteImm => "write_imm",
            Self::Read => "read",
            Self::CompareSwap => "cas",
            Self::FetchAdd => "faa",
        }
    }

    /// Parses a name (`send`, `send_imm`/`send-imm`, `write`, `write_imm`, `read`, `cas`,
    /// `faa`; also `atomic` for both atomics, `all` for every kind) into kinds.
    pub fn parse_list(s: &str) -> Result<Vec<Self>, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let p = part.replace('-', "_").to_ascii_lowercase();
            match p.as_str() {
                "all" => out.extend(Self::ALL),
                "atomic" | "atomics" => out.extend([Self::CompareSwap, Self::FetchAdd]),
                "compare_swap" | "cmp_swap" => out.push(Self::CompareSwap),
                "fetch_add" => out.push(Self::FetchAdd),
                _ => match Self::ALL.iter().find(|k| k.name() == p) {
                    Some(k) => out.push(*k),
                    None => {
                        return Err(format!(
                            "unknown operation {part:?} (use send, send_imm, write, write_imm, read, cas, faa, atomic, all)"
                        ))
                    }
                },
            }
        }
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err("no operations given".into());
        }
        Ok(out)
    }

    fn is_atomic(self) -> bool {
        matches!(self, Self::CompareSwap | Self::FetchAdd)
    }

    fn consumes_receive(self) -> bool {
        matches!(self, Self::Send | Self::SendImm | Self::WriteImm)
    }
}

/// What to run. Both ends build the same [`Plan`] from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadSpec {
    /// The operations to mix (uniformly).
    pub ops: Vec<OpKind>,
    /// Smallest message (bytes; atomics are always 8).
    pub min_size: u32,
    /// Largest message (bytes).
    pub max_size: u32,
    /// Operations per QP.
    pub count: u32,
    /// Number of QPs.
    pub qps: u32,
    /// Work requests outstanding per QP.
    pub depth: u32,
    /// Seed of the plan and of the data patterns.
    pub seed: u64,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        Self {
            ops: OpKind::ALL.to_vec(),
            min_size: 0,
            max_size: 1 << 20,
            count: 250,
            qps: 4,
            depth: 16,
            seed: 1,
        }
    }
}

impl WorkloadSpec {
    /// Checks the values a user can give.
    pub fn validate(&self) -> Result<(), String> {
        if self.qps == 0 || self.qps > 1024 {
            return Err("--qps must be between 1 and 1024".into());
        }
        if self.min_size > self.max_size {
            return Err("the smallest size is larger than the largest".into());
        }
        if self.max_size > 1 << 30 {
            return Err("messages are limited to 1 GiB".into());
        }
        if self.depth == 0 || self.depth > 1024 {
            return Err("depth must be between 1 and 1024".into());
        }
        let per_qp = 4 * u64::from(self.max_size.max(4096)) * u64::from(self.depth);
        if per_qp * u64::from(self.qps) > 8 << 30 {
            return Err("qps x depth x size needs more than 8 GiB of buffers".into());
        }
        if self.ops.is_empty() {
            return Err("no operations".into());
        }
        Ok(())
    }

    /// A compact text form (`key=value;…`) for the out-of-band exchange.
    pub fn encode(&self) -> String {
        let ops: Vec<&str> = self.ops.iter().map(|o| o.name()).collect();
        format!(
            "ops={};min={};max={};count={};qps={};depth={};seed={}",
            ops.join(","),
            self.min_size,
            self.max_size,
            self.count,
            self.qps,
            self.depth,
            self.seed
        )
    }

    /// Parses [`WorkloadSpec::encode`]'s form.
    pub fn decode(s: &str) -> Result<Self, String> {
        let mut spec = Self::default();
        for kv in s.split(';') {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad field {kv:?}"))?;
            let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{k}: {e}"));
            match k {
                "ops" => spec.ops = OpKind::parse_list(v)?,
                "min" => spec.min_size = num(v)? as u32,
                "max" => spec.max_size = num(v)? as u32,
                "count" => spec.count = num(v)? as u32,
                "qps" => spec.qps = num(v)? as u32,
                "depth" => spec.depth = num(v)? as u32,
                "seed" => spec.seed = num(v)?,
                _ => return Err(format!("unknown field {k:?}")),
            }
        }
        spec.validate()?;
        Ok(spec)
    }
}

/// Parses a byte count with an optional K/M/G (binary) suffix: `4096`, `64K`, `1M`.
pub fn parse_size(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 1u64 << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 1u64 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 1u64 << 30),
        _ => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64K, 1M)"))?;
    u32::try_from(n * mul).map_err(|_| format!("{s:?} is too large"))
}

/// Parses `N` (every message N bytes) or `MIN-MAX` / `MIN..MAX` (log-uniform between).
pub fn parse_size_range(s: &str) -> Result<(u32, u32), String> {
    let split = s.split_once("..").or_else(|| s.split_once('-'));
    let (lo, hi) = match split {
        Some((a, b)) => (parse_size(a)?, parse_size(b)?),
        None => {
            let n = parse_size(s)?;
            (n, n)
        }
    };
    if lo > hi {
        return Err(format!("size range {s:?} runs backwards"));
    }
    Ok((lo, hi))
}

/// Number of 8-byte words in each QP's atomic area.
pub const ATOMIC_WORDS: usize = 64;

/// The per-QP memory layout both ends agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of one requester slot (and one receive slot).
    pub slot: u64,
    /// Requester slots per QP.
    pub slots: u64,
    /// Responder write area size.
    pub write_area: u64,
    /// Responder read area size.
    pub read_area: u64,
    /// Responder receive slots per QP.
    pub recv_slots: u64,
}

impl Layout {
    /// The layout for a spec.
    pub fn new(spec: &WorkloadSpec) -> Self {
        let slot = u64::from(spec.max_size.max(8)).next_multiple_of(64);
        Self {
            slot,
            slots: u64::from(spec.depth),
            write_area: (2 * u64::from(spec.max_size))
                .max(4096)
                .next_multiple_of(64),
            read_area: (2 * u64::from(spec.max_size))
                .max(4096)
                .next_multiple_of(64),
            recv_slots: u64::from(spec.depth) * 2,
        }
    }
    /// Requester bytes per QP.
    pub fn requester_len(&self) -> u64 {
        self.slot * self.slots
    }
    /// Offset of the read area in a responder QP block.
    pub fn read_off(&self) -> u64 {
        self.write_area
    }
    /// Offset of the atomic area.
    pub fn atomic_off(&self) -> u64 {
        self.write_area + self.read_area
    }
    /// Offset of the receive slots.
    pub fn recv_off(&self) -> u64 {
        self.atomic_off() + (ATOMIC_WORDS as u64) * 8
    }
    /// Responder bytes per QP.
    pub fn responder_len(&self) -> u64 {
        self.recv_off() + self.slot * self.recv_slots
    }
}

/// One planned operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedOp {
    /// Kind.
    pub kind: OpKind,
    /// Message length.
    pub len: u32,
    /// Offset in the responder area the op targets (write area, read area or atomic area).
    pub remote_off: u64,
    /// Immediate data (SendImm, WriteImm).
    pub imm: u32,
    /// CAS compare value.
    pub compare: u64,
    /// CAS swap value or FAA addend.
    pub operand: u64,
    /// What the atomic returns, as the in-order model computes it.
    pub expect_orig: u64,
    /// Seed of this op's data pattern.
    pub data_seed: u64,
}

/// The immediate that marks a QP's final message.
pub const FIN_IMM: u32 = 0xf1f1_0000;

/// Every QP's operations, and the model's final memory, derived from a spec.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The spec.
    pub spec: WorkloadSpec,
    /// The layout.
    pub layout: Layout,
    /// Operations per QP.
    pub ops: Vec<Vec<PlannedOp>>,
}

/// Fills `buf` with the pattern of `seed` (deterministic, fast, distinct per seed).
pub fn fill_pattern(seed: u64, buf: &mut [u8]) {
    let mut rng = Rng::new(seed);
    rng.fill(buf);
}

fn pick_len(rng: &mut Rng, min: u32, max: u32) -> u32 {
    if min == max {
        return min;
    }
    // Log-uniform: every power of two between min and max is about equally likely.
    let lo = u64::from(min.max(1));
    let hi = u64::from(max);
    let bits_lo = 64 - lo.leading_zeros();
    let bits_hi = 64 - hi.leading_zeros();
    let bits = bits_lo + rng.below(u64::from(bits_hi - bits_lo + 1)) as u32;
    let top = (1u64 << bits).min(hi + 1);
    let bottom = (1u64 << (bits - 1)).max(lo);
    let len = bottom + rng.below(top.saturating_sub(bottom).max(1));
    if min == 0 && rng.below(32) == 0 {
        0
    } else {
        len.min(hi) as u32
    }
}

impl Plan {
    /// Derives the plan of a spec.
    pub fn new(spec: &WorkloadSpec) -> Self {
        let layout = Layout::new(spec);
        let mut ops = Vec::with_capacity(spec.qps as usize);
        for q in 0..spec.qps {
            let mut rng =
                Rng::new(spec.seed ^ (u64::from(q) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut atomics = Self::initial_atomics(spec, q);
            let mut list = Vec::with_capacity(spec.count as usize);
            for i in 0..spec.count {
                let kind = spec.ops[rng.below(spec.ops.len() as u64) as usize];
                let len = if kind.is_atomic() {
                    8
                } else {
                    pick_len(&mut rng, spec.min_size, spec.max_size)
                };
                let mut op = PlannedOp {
                    kind,
                    len,
                    remote_off: 0,
                    imm: rng.next_u64() as u32 & 0x7fff_ffff, // never FIN_IMM, whose top bit is set
                    compare: 0,
                    operand: rng.next_u64(),
                    expect_orig: 0,
                    data_seed: spec.seed ^ (u64::from(q) << 40) ^ (u64::from(i) << 8) ^ 0x5a,
                };
                match kind {
                    OpKind::Write | OpKind::WriteImm => {
                        op.remote_off = rng.below((layout.write_area - u64::from(len)) / 8 + 1) * 8;
                    }
                    OpKind::Read => {
                        op.remote_off = layout.read_off()
                            + rng.below((layout.read_area - u64::from(len)) / 8 + 1) * 8;
                    }
                    OpKind::CompareSwap | OpKind::FetchAdd => {
                        let w = rng.below(ATOMIC_WORDS as u64) as usize;
                        op.remote_off = layout.atomic_off() + 8 * w as u64;
                        let cur = atomics[w];
                        op.expect_orig = cur;
                        if kind == OpKind::CompareSwap {
                            // Half succeed, half fail.
                            op.compare = if rng.chance(0.5) {
                                cur
                            } else {
                                cur ^ rng.next_u64() | 1
                            };
                            if op.compare == cur {
                                atomics[w] = op.operand;
                            }
                        } else {
                            atomics[w] = cur.wrapping_add(op.operand);
                        }
                    }
                    OpKind::Send | OpKind::SendImm => {}
                }
                list.push(op);
            }
            ops.push(list);
        }
        Self {
            spec: spec.clone(),
            layout,
            ops,
        }
    }

    fn initial_atomics(spec: &WorkloadSpec, q: u32) -> [u64; ATOMIC_WORDS] {
        let mut bytes = [0u8; ATOMIC_WORDS * 8];
        fill_pattern(spec.seed ^ 0xa70_0000 ^ u64::from(q), &mut bytes);
        let mut words = [0u64; ATOMIC_WORDS];
        for (w, c) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        }
        words
    }

    /// The read area of QP `q`: what every READ of that QP must return.
    pub fn read_area(&self, q: u32) -> Vec<u8> {
        let mut area = vec![0u8; self.layout.read_area as usize];
        fill_pattern(self.spec.seed ^ 0x4ead_0000 ^ u64::from(q), &mut area);
        area
    }

    /// The responder block of QP `q` as it must be at start (read area and atomic words set;
    /// zeros elsewhere). `block` may stop at the receive slots ([`Layout::recv_off`]).
    pub fn initial_responder_block(&self, q: u32, block: &mut [u8]) {
        let l = &self.layout;
        block.fill(0);
        block[l.read_off() as usize..l.atomic_off() as usize].copy_from_slice(&self.read_area(q));
        let words = Self::initial_atomics(&self.spec, q);
        for (i, w) in words.iter().enumerate() {
            let at = l.atomic_off() as usize + 8 * i;
            block[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
    }

    /// The write and atomic areas of QP `q` after every operation, per the in-order model.
    pub fn final_responder_block(&self, q: u32) -> Vec<u8> {
        let l = &self.layout;
        let mut block = vec![0u8; l.recv_off() as usize];
        self.initial_responder_block(q, &mut block);
        let mut data = Vec::new();
        for op in &self.ops[q as usize] {
            match op.kind {
                OpKind::Write | OpKind::WriteImm => {
                    data.resize(op.len as usize, 0);
                    fill_pattern(op.data_seed, &mut data);
                    let at = op.remote_off as usize;
                    block[at..at + data.len()].copy_from_slice(&data);
                }
                OpKind::CompareSwap | OpKind::FetchAdd => {
                    let at = op.remote_off as usize;
                    let new = if op.kind == OpKind::FetchAdd {
                        op.expect_orig.wrapping_add(op.operand)
                    } else if op.compare == op.expect_orig {
                        op.operand
                    } else {
                        op.expect_orig
                    };
                    block[at..at + 8].copy_from_slice(&new.to_le_bytes());
                }
                _ => {}
            }
        }
        block
    }
}

/// Where the requester's QP `q` writes and reads on the other side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteBlock {
    /// Virtual address of the QP's responder block.
    pub va: u64,
    /// R_Key of the responder's region.
    pub rkey: RKey,
    /// Length of the block.
    pub len: u64,
}

/// A verification failure: what differed, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Operation (kind and index in the QP's plan).
    pub op: String,
    /// QP index in the workload.
    pub qp: u32,
    /// PSN of the operation's first packet, where known.
    pub psn: Option<Psn>,
    /// Byte offset of the first difference, where it is about data.
    pub offset: Option<u64>,
    /// What was expected and what was seen.
    pub detail: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "qp {} {}", self.qp, self.op)?;
        if let Some(p) = self.psn {
            write!(f, " psn {p}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " offset {o}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<u64> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()) as u64);
    }
    a.iter().zip(b).position(|(x, y)| x != y).map(|p| p as u64)
}

/// Counts the requester reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Completed operations by kind (index = position in [`OpKind::ALL`]).
    pub ops: [u64; 7],
    /// Payload bytes moved by completed operations.
    pub bytes: u64,
    /// Bytes compared against the model.
    pub verified_bytes: u64,
}

impl Tally {
    /// Adds another tally.
    pub fn add(&mut self, o: &Self) {
        for (a, b) in self.ops.iter_mut().zip(o.ops) {
            *a += b;
        }
        self.bytes += o.bytes;
        self.verified_bytes += o.verified_bytes;
    }
    fn count(&mut self, k: OpKind, len: u32) {
        if let Some(i) = OpKind::ALL.iter().position(|x| *x == k) {
            self.ops[i] += 1;
        }
        self.bytes += u64::from(len);
    }
}

struct ReqQp {
    qpn: Qpn,
    cq: CqHandle,
    remote: RemoteBlock,
    next_post: usize,
    next_complete: usize,
    fin_posted: bool,
    fin_done: bool,
    /// PSN of each posted op, in flight.
    psns: VecDeque<Psn>,
}

/// The requester side: posts the plan on each QP and checks every completion.
pub struct Requester {
    plan: Plan,
    /// Each QP's read area, as every READ must return it.
    read_areas: Vec<Vec<u8>>,
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

/// Bound on mismatches kept (the first ones tell the story).
const MAX_MISMATCHES: usize = 16;

impl Requester {
    /// Registers the requester memory on `dev` for QPs `qpns` (with their send CQs) whose
    /// peers expose `remotes`.
    pub fn new(
        dev: &mut Device,
        pd: crate::memory::PdHandle,
        plan: Plan,
        qps: &[(Qpn, CqHandle)],
        remotes: &[RemoteBlock],
    ) -> Self {
        let len = plan.layout.requester_len() * plan.spec.qps as u64;
        let mr = dev.reg_mr(pd, len as usize, Access::LOCAL_WRITE);
        let qps = qps
            .iter()
            .zip(remotes)
            .map(|(&(qpn, cq), &remote)| ReqQp {
                qpn,
                cq,
                remote,
                next_post: 0,
                next_complete: 0,
                fin_posted: false,
                fin_done: false,
                psns: VecDeque::new(),
            })
            .collect();
        let read_areas = (0..plan.spec.qps).map(|q| plan.read_area(q)).collect();
        Self {
            plan,
            read_areas,
            mr,
            qps,
            tally: Tally::default(),
            mismatches: Vec::new(),
            scratch: Vec::new(),
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

    fn slot_off(&self, q: usize, i: usize) -> u64 {
        let l = &self.plan.layout;
        l.requester_len() * q as u64 + l.slot * (i as u64 % l.slots)
    }

    fn fail(&mut self, m: Mismatch) {
        if self.mismatches.len() < MAX_MISMATCHES {
            self.mismatches.push(m);
        }
    }

    fn post(&mut self, dev: &mut Device, q: usize) -> Result<(), String> {
        let depth = self.plan.spec.depth as usize;
        let count = self.plan.ops[q].len();
        while self.qps[q].next_post < count
            && self.qps[q].next_post - self.qps[q].next_complete < depth
        {
            let i = self.qps[q].next_post;
            let op = self.plan.ops[q][i];
            let off = self.slot_off(q, i);
            let len = op.len;
            let remote = self.qps[q].remote;
            let raddr = RemoteAddr {
                va: remote.va + op.remote_off,
                rkey: remote.rkey,
            };
            let (mr_va, lkey) = match dev.mr(self.mr) {
                Some(m) => (m.va(), m.lkey()),
                None => return Err("requester memory region vanished".into()),
            };
            if matches!(
                op.kind,
                OpKind::Send | OpKind::SendImm | OpKind::Write | OpKind::WriteImm
            ) {
                self.scratch.resize(len as usize, 0);
                fill_pattern(op.data_seed, &mut self.scratch);
                if let Some(m) = dev.mr_mut(self.mr) {
                    m.as_mut_slice()[off as usize..off as usize + len as usize]
                        .copy_from_slice(&self.scratch);
                }
            } else if let Some(m) = dev.mr_mut(self.mr) {
                // Poison the destination so a READ or atomic that writes nothing is caught.
                m.as_mut_slice()[off as usize..off as usize + len as usize].fill(0xee);
            }
            let sge = crate::memory::Sge {
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
            let psn = dev
                .qp(self.qps[q].qpn)
                .map(|qp| qp.next_send_psn())
                .unwrap_or_default();
            dev.post_send(self.qps[q].qpn, WorkRequest::new(i as u64, wop, sgl))
                .map_err(|e| format!("qp {q}: posting {} #{i}: {e}", op.kind.name()))?;
            self.qps[q].psns.push_back(psn);
            self.qps[q].next_post += 1;
        }
        let qp = &mut self.qps[q];
        if qp.next_post == count && qp.next_complete == count && !qp.fin_posted {
            let wr = WorkRequest::new(
                u64::MAX,
                WrOp::SendWithImm(FIN_IMM | q as u32),
                SgList::new(),
            );
            dev.post_send(qp.qpn, wr)
                .map_err(|e| format!("qp {q}: posting the final marker: {e}"))?;
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
        let i = self.qps[q].next_complete;
        let psn = self.qps[q].psns.pop_front();
        let Some(op) = self.plan.ops[q].get(i).copied() else {
            self.fail(Mismatch {
                op: format!("wr {}", c.wr_id),
                qp: q as u32,
                psn,
                offset: None,
                detail: "completion beyond the plan".into(),
            });
            return;
        };
        let name = format!("{} #{i}", op.kind.name());
        let bad = |detail: String, offset: Option<u64>| Mismatch {
            op: name.clone(),
            qp: q as u32,
            psn,
            offset,
            detail,
        };
        if c.wr_id != i as u64 {
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
        self.qps[q].next_complete += 1;
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
        let off = self.slot_off(q, i) as usize;
        let Some(mem) = dev.mr(self.mr).map(|m| m.as_slice()) else {
            return;
        };
        match op.kind {
            OpKind::Read => {
                let at = (op.remote_off - self.plan.layout.read_off()) as usize;
                let want = &self.read_areas[q][at..at + op.len as usize];
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
    /// and posts the receives. Returns the responder and each QP's [`RemoteBlock`].
    pub fn new(
        dev: &mut Device,
        pd: crate::memory::PdHandle,
        plan: Plan,
        qps: &[(Qpn, CqHandle)],
    ) -> Result<(Self, Vec<RemoteBlock>), String> {
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
            .ok_or("memory region vanished")?;
        let mut remotes = Vec::new();
        for q in 0..plan.spec.qps {
            let start = (l.responder_len() * u64::from(q)) as usize;
            if let Some(m) = dev.mr_mut(mr) {
                plan.initial_responder_block(
                    q,
                    &mut m.as_mut_slice()[start..start + l.responder_len() as usize],
                );
            }
            remotes.push(RemoteBlock {
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

    fn post_recv(&mut self, dev: &mut Device, q: usize, slot: u64) -> Result<(), String> {
        let l = self.plan.layout;
        let (va, lkey) = dev
            .mr(self.mr)
            .map(|m| (m.va(), m.lkey()))
            .ok_or("memory region vanished")?;
        let off = l.responder_len() * q as u64 + l.recv_off() + slot * l.slot;
        let sge = crate::memory::Sge {
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
        .map_err(|e| format!("qp {q}: posting a receive: {e}"))?;
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

    fn on_completion(&mut self, dev: &mut Device, q: usize, c: Completion) -> Result<(), String> {
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

impl Application for Requester {
    /// Drains completions and posts what the window allows. Returns an error when the device
    /// refuses a post (a QP in error, a queue full that should not be).
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), String> {
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

impl Application for Responder {
    /// Drains receive completions, verifies, re-posts receives.
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), String> {
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

/// Counters for a run's report, from the device statistics of both ends.
pub fn merge_stats(a: &QpStats, b: &QpStats) -> QpStats {
    let mut s = *a;
    s.add(b);
    s
}
