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
//! * [`mod@run`]: the runs over sockets (`roce loopback`, `roce server`, `roce client`) and
//!   their control messages, behind [`run()`], the one entry; [`report`]: what a run reports.
//!
//! [`Application`]: roce_driver::Application
use std::fmt;

use roce_proto::Psn;
use roce_stack::model::{AtomicOp, Model};
use roce_stack::rng::Rng;
use serde::{Deserialize, Serialize};

use crate::{Combination, ConfigError, Setting};

pub mod cm;
mod ends;
pub mod report;
pub mod requester;
pub mod responder;
pub mod run;

pub use ends::{run, WorkloadRun};
pub use report::Report;
pub use requester::Requester;
pub use responder::Responder;
pub use run::{RunConfig, ServerOutcome};

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

    /// Whether an operation of this kind consumes a receive at the responder (SEND, SEND with
    /// immediate, WRITE with immediate).
    pub const fn consumes_receive(self) -> bool {
        matches!(self, Self::Send | Self::SendImm | Self::WriteImm)
    }
}

/// The service a workload QP is: the core's [`Service`](roce_stack::Service) (RC, UC or UD),
/// named here as the workload's `--transport` and its JSON name it.
pub use roce_stack::Service as Transport;

impl OpKind {
    /// Whether a QP of service `t` carries operations of this kind: RC all of them, UC SEND
    /// and WRITE (with and without immediate), UD SEND (IBTA Vol 1 §9.8).
    pub const fn carried_by(self, t: Transport) -> bool {
        match self {
            Self::Send | Self::SendImm => true,
            Self::Write | Self::WriteImm => t.writes(),
            Self::Read | Self::CompareSwap | Self::FetchAdd => t.reads(),
        }
    }
}

fn rc_only() -> Vec<Transport> {
    vec![Transport::Rc]
}

const fn default_datagram_max() -> u32 {
    1024
}

/// What to run. Both ends build the same [`Plan`] from it (the client sends it to the server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// The operations to mix (uniformly; a QP mixes those its transport carries).
    pub ops: Vec<OpKind>,
    /// The QPs' transports, assigned in turn: QP `q` is `transports[q % len]`.
    #[serde(default = "rc_only")]
    pub transports: Vec<Transport>,
    /// Largest message of a UD QP (the path MTU: a UD message is one packet).
    #[serde(default = "default_datagram_max")]
    pub datagram_max: u32,
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
            transports: rc_only(),
            datagram_max: default_datagram_max(),
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
        ConfigError::check_range(Setting::Qps, "1..=1024", u64::from(self.qps), 1, 1024)?;
        if self.min_size > self.max_size {
            return Err(ConfigError::Conflict(
                "the smallest size is larger than the largest",
            ));
        }
        ConfigError::check_range(
            Setting::LargestMessage,
            "at most 1 GiB",
            u64::from(self.max_size),
            0,
            1 << 30,
        )?;
        ConfigError::check_range(Setting::Depth, "1..=1024", u64::from(self.depth), 1, 1024)?;
        let need = Layout::new(self).run_bytes(self.qps);
        if need > MAX_RUN_BYTES {
            return Err(ConfigError::TooBig {
                what: Setting::Buffers,
                need_mib: need >> 20,
                limit_mib: MAX_RUN_BYTES >> 20,
            });
        }
        if self.ops.is_empty() {
            return Err(ConfigError::Conflict("no operations"));
        }
        ConfigError::check_range(
            Setting::Transports,
            "1..=16",
            self.transports.len() as u64,
            1,
            16,
        )?;
        ConfigError::check_range(
            Setting::LargestDatagram,
            "256..=4096",
            u64::from(self.datagram_max),
            256,
            4096,
        )?;
        for t in &self.transports {
            if !self.ops.iter().any(|&k| k.carried_by(*t)) {
                return Err(Combination::NothingCarried(*t).into());
            }
        }
        Ok(())
    }

    /// The transport of QP `q`.
    pub fn transport_of(&self, q: u32) -> Transport {
        self.transports
            .get(q as usize % self.transports.len().max(1))
            .copied()
            .unwrap_or(Transport::Rc)
    }

    /// Whether any QP is UC or UD.
    pub fn any_lossy(&self) -> bool {
        self.transports.iter().any(|t| t.lossy())
    }
}

/// Number of 8-byte words in each QP's atomic area.
pub const ATOMIC_WORDS: usize = 64;

/// Bytes of each QP's requester ring when the messages are smaller (the ring always holds at
/// least one message of the largest size): bytes in flight per QP, plenty for any bandwidth-
/// delay product a loopback or a LAN has, and what bounds a QP's memory.
pub const RING_BYTES: u64 = 1 << 20;

/// Most receives the responder keeps posted per QP (the receive queue's depth).
pub const MAX_POSTED_RECVS: u64 = 1024;

/// Most bytes of buffers a run may need (both ends, every QP).
pub const MAX_RUN_BYTES: u64 = 4 << 30;

/// Bytes a UC or UD receive holds beyond the largest message: the 40-byte GRH area, rounded
/// up to 64.
const LOSSY_RECV_EXTRA: u64 = 64;

/// Receives a UD QP keeps posted at least: twice the driver's receive batch.
const UD_MIN_RECVS: u64 = 128;

/// The smallest message of a UC or UD QP: 8 bytes of its own data pattern, so that a
/// datagram that came late or twice is told apart from every other (two empty SENDs could not
/// be).
const LOSSY_MIN_SIZE: u32 = 8;

/// The per-QP memory both ends agree on, sized to the workload: message buffers are taken
/// from rings in posting order (completions come in order, so a ring frees them in order),
/// sized for a bounded number of bytes in flight rather than `depth` messages of the largest
/// size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The largest message, rounded up to 64 bytes.
    pub slot: u64,
    /// Bytes of each QP's requester ring (SEND and WRITE sources, READ and atomic
    /// destinations).
    pub send_ring: u64,
    /// Responder write area size.
    pub write_area: u64,
    /// Responder read area size.
    pub read_area: u64,
    /// Bytes of each QP's receive ring (SEND destinations; 0 when the mix has no SEND).
    pub recv_ring: u64,
    /// Receives the responder keeps posted per QP.
    pub recv_depth: u64,
    /// Bytes of each receive of a UD QP: the largest UD message after its GRH area.
    pub ud_recv_len: u64,
    /// Receives the responder keeps posted per UD QP: more than per RC QP, since nothing
    /// holds a UD sender back, and more than a receive batch of the driver (a receive missing
    /// when a datagram arrives loses it).
    pub ud_recv_depth: u64,
}

impl Layout {
    /// The layout for a spec.
    pub fn new(spec: &WorkloadSpec) -> Self {
        let max = u64::from(spec.max_size);
        let slot = max.max(8).next_multiple_of(64);
        let send_ring = (slot * u64::from(spec.depth.max(1))).min(slot.max(RING_BYTES));
        // Room for a message of the largest size at varied offsets.
        let area = (max + max.clamp(4096, 64 << 10)).next_multiple_of(64);
        let sends = spec
            .ops
            .iter()
            .any(|k| matches!(k, OpKind::Send | OpKind::SendImm));
        let recv_depth = (2 * u64::from(spec.depth) + 1).min(MAX_POSTED_RECVS);
        let ud_recv_len = u64::from(spec.datagram_max.min(spec.max_size).max(8))
            .next_multiple_of(64)
            + LOSSY_RECV_EXTRA;
        let ud_recv_depth = recv_depth.clamp(UD_MIN_RECVS, MAX_POSTED_RECVS);
        // What the requester can have in flight, and slack for the wrap.
        let mut recv_ring = if sends { send_ring + slot } else { 0 };
        if sends && spec.transports.contains(&Transport::Uc) {
            // A UC QP's message can land in any receive (the one before it may have been
            // lost), so each of its receives holds the largest message.
            recv_ring = recv_ring.max(recv_depth * (slot + LOSSY_RECV_EXTRA));
        }
        if spec.transports.contains(&Transport::Ud) {
            recv_ring = recv_ring.max(ud_recv_depth * ud_recv_len);
        }
        Self {
            slot,
            send_ring,
            write_area: area,
            read_area: area,
            recv_ring,
            recv_depth,
            ud_recv_len,
            ud_recv_depth,
        }
    }

    /// Bytes of one receive of a UC or UD QP: the largest message, after the GRH area a UD
    /// receive starts with (IBTA Vol 1 §11.4.1.1), rounded up to 64.
    pub fn lossy_recv_len(&self) -> u64 {
        self.slot + LOSSY_RECV_EXTRA
    }
    /// Requester bytes per QP.
    pub fn requester_len(&self) -> u64 {
        self.send_ring
    }
    /// Offset of the read area in a responder QP block.
    pub fn read_off(&self) -> u64 {
        self.write_area
    }
    /// Offset of the atomic area.
    pub fn atomic_off(&self) -> u64 {
        self.write_area + self.read_area
    }
    /// Offset of the receive ring.
    pub fn recv_off(&self) -> u64 {
        self.atomic_off() + (ATOMIC_WORDS as u64) * 8
    }
    /// Responder bytes per QP.
    pub fn responder_len(&self) -> u64 {
        self.recv_off() + self.recv_ring
    }
    /// Bytes of buffers both ends of a run of `qps` QPs hold.
    pub fn run_bytes(&self, qps: u32) -> u64 {
        (self.requester_len() + self.responder_len()) * u64::from(qps)
    }
}

/// A ring of buffer space handed out and given back in the same order (first in, first
/// out), as work requests complete in order on a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ring {
    cap: u64,
    /// Bytes handed out so far (a position that only grows; `% cap` is the offset).
    head: u64,
    /// Bytes given back so far.
    tail: u64,
}

impl Ring {
    pub(crate) const fn new(cap: u64) -> Self {
        Self {
            cap,
            head: 0,
            tail: 0,
        }
    }

    /// Space for `len` bytes, contiguous (a piece that would straddle the end starts over at
    /// the beginning): its offset and the position to give back to when it is done, or `None`
    /// while there is not room.
    pub(crate) fn take(&mut self, len: u64) -> Option<(u64, u64)> {
        let len = len.next_multiple_of(64);
        if len == 0 {
            return Some((0, self.head));
        }
        if self.head == self.tail {
            // Empty: start over at offset 0, so that a piece as large as the ring fits.
            self.head = self.head.next_multiple_of(self.cap);
            self.tail = self.head;
        }
        let at = self.head % self.cap;
        let skip = if at + len > self.cap {
            self.cap - at
        } else {
            0
        };
        if len > self.cap || self.head - self.tail + skip + len > self.cap {
            return None;
        }
        self.head += skip;
        let off = self.head % self.cap;
        self.head += len;
        Some((off, self.head))
    }

    /// Gives back everything up to `end` (what [`Ring::take`] returned for the oldest piece
    /// still out).
    pub(crate) fn give_back(&mut self, end: u64) {
        self.tail = self.tail.max(end.min(self.head));
    }
}

/// One planned operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedOp {
    /// Its index in the QP's plan.
    pub index: u32,
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

/// What both ends derive from a spec: the layout, and each QP's operations as a stream
/// ([`Plan::ops`]) generated as it is consumed, so that a plan's memory does not depend on
/// the operation count.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The spec.
    pub spec: WorkloadSpec,
    /// The layout.
    pub layout: Layout,
}

/// Fills `buf` with the pattern of `seed` (deterministic, fast, distinct per seed).
pub fn fill_pattern(seed: u64, buf: &mut [u8]) {
    let mut rng = Rng::new(seed);
    rng.fill(buf);
}

/// Word `w` of the positional pattern of `seed` (SplitMix64 of the word index).
fn pattern_word(seed: u64, w: u64) -> u64 {
    let mut z = seed ^ w.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with bytes `start..start + buf.len()` of the positional pattern of `seed`: any
/// piece of a large area can be produced (to check a READ of it) without the whole.
pub fn fill_positional(seed: u64, start: u64, buf: &mut [u8]) {
    let mut pos = start;
    let mut rest = buf;
    while !rest.is_empty() {
        let word = pattern_word(seed, pos / 8).to_le_bytes();
        let from = (pos % 8) as usize;
        let n = (8 - from).min(rest.len());
        let (head, tail) = rest.split_at_mut(n);
        head.copy_from_slice(&word[from..from + n]);
        rest = tail;
        pos += n as u64;
    }
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

/// One QP's operations, generated in order as they are taken: the seeded choices and the
/// in-order model of the QP's atomic words (which gives every atomic's result). Constant
/// memory whatever the count.
#[derive(Debug, Clone)]
pub struct OpStream {
    kinds: Vec<OpKind>,
    min_size: u32,
    max_size: u32,
    count: u32,
    seed: u64,
    q: u32,
    layout: Layout,
    rng: Rng,
    atomics: [u64; ATOMIC_WORDS],
    next: u32,
}

impl OpStream {
    /// Operations not yet taken.
    pub fn remaining(&self) -> u32 {
        self.count - self.next
    }
}

impl Iterator for OpStream {
    type Item = PlannedOp;

    fn next(&mut self) -> Option<PlannedOp> {
        if self.next >= self.count {
            return None;
        }
        let i = self.next;
        self.next += 1;
        let (rng, layout) = (&mut self.rng, &self.layout);
        let kind = self.kinds[rng.below(self.kinds.len() as u64) as usize];
        let len = if kind.is_atomic() {
            8
        } else {
            pick_len(rng, self.min_size, self.max_size)
        };
        let mut op = PlannedOp {
            index: i,
            kind,
            len,
            remote_off: 0,
            imm: rng.next_u64() as u32 & 0x7fff_ffff, // never FIN_IMM, whose top bit is set
            compare: 0,
            operand: rng.next_u64(),
            expect_orig: 0,
            data_seed: self.seed ^ (u64::from(self.q) << 40) ^ (u64::from(i) << 8) ^ 0x5a,
        };
        match kind {
            OpKind::Write | OpKind::WriteImm => {
                op.remote_off = rng.below((layout.write_area - u64::from(len)) / 8 + 1) * 8;
            }
            OpKind::Read => {
                op.remote_off =
                    layout.read_off() + rng.below((layout.read_area - u64::from(len)) / 8 + 1) * 8;
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let w = rng.below(ATOMIC_WORDS as u64) as usize;
                op.remote_off = layout.atomic_off() + 8 * w as u64;
                let cur = self.atomics[w];
                if kind == OpKind::CompareSwap {
                    // Half succeed, half fail.
                    op.compare = if rng.chance(0.5) {
                        cur
                    } else {
                        cur ^ rng.next_u64() | 1
                    };
                }
                op.expect_orig = cur;
                self.atomics[w] = op.atomic_op().apply(cur);
            }
            OpKind::Send | OpKind::SendImm => {}
        }
        Some(op)
    }
}

impl Plan {
    /// The plan of a spec (nothing is generated yet).
    pub fn new(spec: &WorkloadSpec) -> Self {
        Self {
            spec: spec.clone(),
            layout: Layout::new(spec),
        }
    }

    /// QP `q`'s operations, from the first.
    pub fn ops(&self, q: u32) -> OpStream {
        let initial = Self::initial_atomics(&self.spec, q);
        let t = self.spec.transport_of(q);
        let mut kinds: Vec<OpKind> = self
            .spec
            .ops
            .iter()
            .copied()
            .filter(|&k| k.carried_by(t))
            .collect();
        if kinds.is_empty() {
            // Refused by validation; a stream of the final marker alone otherwise.
            kinds.push(OpKind::Send);
        }
        let (mut min_size, mut max_size) = (self.spec.min_size, self.spec.max_size);
        if t == Transport::Ud {
            max_size = max_size.min(self.spec.datagram_max);
        }
        if t.lossy() {
            max_size = max_size.max(LOSSY_MIN_SIZE);
            min_size = min_size.clamp(LOSSY_MIN_SIZE, max_size);
        }
        OpStream {
            kinds,
            min_size,
            max_size,
            count: self.spec.count,
            seed: self.spec.seed,
            q,
            layout: self.layout,
            rng: Rng::new(self.spec.seed ^ (u64::from(q) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            atomics: std::array::from_fn(|w| le_word(&initial[8 * w..])),
            next: 0,
        }
    }

    /// The initial atomic words of QP `q`, as little-endian bytes.
    fn initial_atomics(spec: &WorkloadSpec, q: u32) -> [u8; ATOMIC_WORDS * 8] {
        let mut bytes = [0u8; ATOMIC_WORDS * 8];
        fill_pattern(spec.seed ^ 0xa70_0000 ^ u64::from(q), &mut bytes);
        bytes
    }

    /// Bytes `at..at + buf.len()` of QP `q`'s read area: what a READ of them must return.
    pub fn read_area(&self, q: u32, at: u64, buf: &mut [u8]) {
        fill_positional(self.spec.seed ^ 0x4ead_0000 ^ u64::from(q), at, buf);
    }

    /// Sets QP `q`'s responder block up as it must be at start: the read area and the atomic
    /// words. The rest (the write area) must already be zero, as a freshly registered region
    /// is; it is not written, so that its pages stay untouched until a WRITE lands. `block`
    /// may stop at the receive ring ([`Layout::recv_off`]).
    pub fn initial_responder_block(&self, q: u32, block: &mut [u8]) {
        let l = &self.layout;
        self.read_area(
            q,
            0,
            &mut block[l.read_off() as usize..l.atomic_off() as usize],
        );
        let at = l.atomic_off() as usize;
        block[at..at + ATOMIC_WORDS * 8].copy_from_slice(&Self::initial_atomics(&self.spec, q));
    }

    /// The write and atomic areas of QP `q` after every operation, per the in-order model
    /// (a replay of the QP's stream).
    pub fn final_responder_block(&self, q: u32) -> Vec<u8> {
        let l = &self.layout;
        let mut initial = vec![0u8; l.recv_off() as usize];
        self.initial_responder_block(q, &mut initial);
        let mut model = Model::new();
        let block = model.add_region(initial);
        let mut data = Vec::new();
        for op in self.ops(q) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    proptest! {
        /// Pieces handed out by a ring and not yet given back never overlap and lie inside
        /// it, and an empty ring takes any piece up to its size.
        #[test]
        fn ring_pieces_never_overlap(
            cap_units in 1u64..64,
            steps in proptest::collection::vec((0u64..80, any::<bool>()), 1..300),
        ) {
            let cap = cap_units * 64;
            let mut ring = Ring::new(cap);
            let mut out: VecDeque<(u64, u64, u64)> = VecDeque::new();
            for (len, give) in steps {
                if give {
                    if let Some((_, _, end)) = out.pop_front() {
                        ring.give_back(end);
                    }
                    continue;
                }
                let len = len * 16;
                let empty = out.is_empty();
                match ring.take(len) {
                    Some((off, end)) => {
                        let l = len.next_multiple_of(64);
                        prop_assert!(off + l <= cap, "piece {off}+{l} beyond {cap}");
                        for &(o, ol, _) in &out {
                            prop_assert!(l == 0 || ol == 0 || off + l <= o || o + ol <= off,
                                "{off}+{l} overlaps {o}+{ol}");
                        }
                        out.push_back((off, l, end));
                    }
                    None => prop_assert!(!(empty && len <= cap), "an empty ring refused {len}"),
                }
            }
        }
    }

    #[test]
    fn streams_are_lazy_and_repeatable() {
        let spec = WorkloadSpec {
            count: u32::MAX,
            ..WorkloadSpec::default()
        };
        let plan = Plan::new(&spec);
        let a: Vec<PlannedOp> = plan.ops(1).take(100).collect();
        let b: Vec<PlannedOp> = plan.ops(1).take(100).collect();
        assert_eq!(a, b);
        assert_ne!(a, plan.ops(2).take(100).collect::<Vec<_>>());
        assert_eq!(plan.ops(1).remaining(), u32::MAX);
        assert!(a.iter().enumerate().all(|(i, o)| o.index == i as u32));
    }

    #[test]
    fn positional_pattern_pieces_match_the_whole() {
        let mut whole = vec![0u8; 1000];
        fill_positional(7, 0, &mut whole);
        for (start, len) in [(0usize, 1000usize), (3, 17), (8, 8), (999, 1), (123, 456)] {
            let mut piece = vec![0u8; len];
            fill_positional(7, start as u64, &mut piece);
            assert_eq!(piece, whole[start..start + len]);
        }
        let mut other = vec![0u8; 1000];
        fill_positional(8, 0, &mut other);
        assert_ne!(other, whole);
    }
}
