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
//! * this module: the spec, the layout and the [`Plan`] both ends derive from it, with the
//!   expected results from the in-order [`Model`];
//! * [`requester`] and [`responder`]: the two [`Application`]s (no I/O: the driver or a
//!   simulation loop runs them on a [`Device`](roce_stack::Device));
//! * [`run`]: the runs over sockets (`roce loopback`, `roce server`, `roce client`) and their
//!   control messages; [`report`]: what a run reports.
//!
//! [`Application`]: roce_driver::Application
use std::fmt;

use roce_proto::Psn;
use roce_stack::model::{AtomicOp, Model};
use roce_stack::rng::Rng;
use serde::{Deserialize, Serialize};

use crate::ConfigError;

pub mod report;
pub mod requester;
pub mod responder;
pub mod run;

pub use report::Report;
pub use requester::Requester;
pub use responder::Responder;
pub use run::{loopback, loopback_between, run_client, serve, RunConfig, ServerOutcome};

/// The operations a workload mixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OpKind {
    /// SEND (consumes a receive).
    #[serde(rename = "send")]
    Send,
    /// SEND with immediate.
    #[serde(rename = "send_imm")]
    SendImm,
    /// RDMA WRITE.
    #[serde(rename = "write")]
    Write,
    /// RDMA WRITE with immediate (consumes a receive).
    #[serde(rename = "write_imm")]
    WriteImm,
    /// RDMA READ.
    #[serde(rename = "read")]
    Read,
    /// 64-bit compare-and-swap.
    #[serde(rename = "cas")]
    CompareSwap,
    /// 64-bit fetch-and-add.
    #[serde(rename = "faa")]
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

    fn is_atomic(self) -> bool {
        matches!(self, Self::CompareSwap | Self::FetchAdd)
    }

    pub(crate) fn consumes_receive(self) -> bool {
        matches!(self, Self::Send | Self::SendImm | Self::WriteImm)
    }
}

/// What to run. Both ends build the same [`Plan`] from it (the client sends it to the server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Checks the values a user (or a peer) can give.
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::check_range("--qps", "1..=1024", u64::from(self.qps), 1, 1024)?;
        if self.min_size > self.max_size {
            return Err(ConfigError::Conflict(
                "the smallest size is larger than the largest",
            ));
        }
        ConfigError::check_range(
            "the largest message",
            "at most 1 GiB",
            u64::from(self.max_size),
            0,
            1 << 30,
        )?;
        ConfigError::check_range("--depth", "1..=1024", u64::from(self.depth), 1, 1024)?;
        let per_qp = 4 * u64::from(self.max_size.max(4096)) * u64::from(self.depth);
        let need = per_qp * u64::from(self.qps);
        if need > 8 << 30 {
            return Err(ConfigError::TooBig {
                what: "qps x depth x size of buffers",
                need_mib: need >> 20,
                limit_mib: 8 << 10,
            });
        }
        if self.ops.is_empty() {
            return Err(ConfigError::Conflict("no operations"));
        }
        Ok(())
    }
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

impl PlannedOp {
    /// The atomic operation of a CAS or FAA (a FAA for anything else).
    pub const fn atomic_op(&self) -> AtomicOp {
        match self.kind {
            OpKind::CompareSwap => AtomicOp::CompareSwap {
                compare: self.compare,
                swap: self.operand,
            },
            _ => AtomicOp::FetchAdd { add: self.operand },
        }
    }
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
            // The in-order model of the QP's atomic words gives every atomic's result.
            let mut model = Model::new();
            let atomics = model.add_region(Self::initial_atomics(spec, q).to_vec());
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
                        if kind == OpKind::CompareSwap {
                            // Half succeed, half fail.
                            let cur = le_word(model.read(atomics, 8 * w, 8));
                            op.compare = if rng.chance(0.5) {
                                cur
                            } else {
                                cur ^ rng.next_u64() | 1
                            };
                        }
                        op.expect_orig = model.atomic(atomics, 8 * w, op.atomic_op());
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

    /// The initial atomic words of QP `q`, as little-endian bytes.
    fn initial_atomics(spec: &WorkloadSpec, q: u32) -> [u8; ATOMIC_WORDS * 8] {
        let mut bytes = [0u8; ATOMIC_WORDS * 8];
        fill_pattern(spec.seed ^ 0xa70_0000 ^ u64::from(q), &mut bytes);
        bytes
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
        let at = l.atomic_off() as usize;
        block[at..at + ATOMIC_WORDS * 8].copy_from_slice(&Self::initial_atomics(&self.spec, q));
    }

    /// The write and atomic areas of QP `q` after every operation, per the in-order model.
    pub fn final_responder_block(&self, q: u32) -> Vec<u8> {
        let l = &self.layout;
        let mut initial = vec![0u8; l.recv_off() as usize];
        self.initial_responder_block(q, &mut initial);
        let mut model = Model::new();
        let block = model.add_region(initial);
        let mut data = Vec::new();
        for op in &self.ops[q as usize] {
            let at = op.remote_off as usize;
            match op.kind {
                OpKind::Write | OpKind::WriteImm => {
                    data.resize(op.len as usize, 0);
                    fill_pattern(op.data_seed, &mut data);
                    model.write(block, at, &data);
                }
                OpKind::CompareSwap | OpKind::FetchAdd => {
                    model.atomic(block, at, op.atomic_op());
                }
                _ => {}
            }
        }
        model.region(block).to_vec()
    }
}

/// A little-endian 64-bit word.
fn le_word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
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

pub(crate) fn first_difference(a: &[u8], b: &[u8]) -> Option<u64> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()) as u64);
    }
    a.iter().zip(b).position(|(x, y)| x != y).map(|p| p as u64)
}

/// Counts the requester reports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub(crate) fn count(&mut self, k: OpKind, len: u32) {
        if let Some(i) = OpKind::ALL.iter().position(|x| *x == k) {
            self.ops[i] += 1;
        }
        self.bytes += u64::from(len);
    }
}

/// Bound on mismatches kept (the first ones tell the story).
pub(crate) const MAX_MISMATCHES: usize = 16;
