//! The in-order reference model of RC semantics that tests, the verified workload and the fuzz
//! body check the transport against, whatever the network did to the packets.
//!
//! An RC QP executes each of its requests exactly once and in the order posted (IBTA Vol 1
//! §9.5, §9.7: go-back-N retransmission never re-executes a SEND, WRITE or atomic; a READ may
//! re-read, which changes nothing), and completes work requests in order on each queue. So
//! the effect of a run on memory and on the completion queues can be computed from the posted
//! work alone:
//!
//! * [`Model`] keeps byte images of the regions that matter ([`RegionId`]) and applies WRITEs,
//!   SEND placements and atomics to them in order; [`Model::read`] is what a READ must return.
//! * Each queue ([`QueueId`]: a send or receive queue) lists what must complete, in order:
//!   [`Model::expect`] an exact completion, or [`Model::posted`] a request whose outcome is
//!   unknown (the fuzz body posts requests that may fail) but whose order is not.
//!   [`Model::check`] takes a completion that appeared and says whether it was allowed.
//!
//! The model is plain data and does no I/O; it knows nothing of packets.
use core::fmt;
use std::collections::VecDeque;

use roce_proto::RKey;

use crate::wr::{Completion, WcOpcode, WcStatus};

/// A byte image the model keeps (index of [`Model::add_region`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegionId(pub usize);

/// A completion queue's worth of expectations (index of [`Model::add_queue`]): one send or
/// one receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueueId(pub usize);

/// An atomic operation on an 8-byte little-endian word (IBTA Vol 1 §9.4: compare-and-swap and
/// fetch-and-add).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Stores `swap` if the word equals `compare`.
    CompareSwap {
        /// Compared with the word.
        compare: u64,
        /// Stored when equal.
        swap: u64,
    },
    /// Adds `add` (wrapping).
    FetchAdd {
        /// The addend.
        add: u64,
    },
}

impl AtomicOp {
    /// The word after the operation on `orig`.
    pub const fn apply(self, orig: u64) -> u64 {
        match self {
            Self::CompareSwap { compare, swap } => {
                if orig == compare {
                    swap
                } else {
                    orig
                }
            }
            Self::FetchAdd { add } => orig.wrapping_add(add),
        }
    }
}

/// A completion the model requires: every field but the QP number, with status `SUCCESS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// The work request.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WcOpcode,
    /// Bytes.
    pub byte_len: u32,
    /// Immediate data (receives).
    pub imm_data: Option<u32>,
    /// The rkey a SEND with invalidate invalidated (receives).
    pub invalidated_rkey: Option<RKey>,
}

impl Expected {
    /// A successful completion of `wr_id` with no immediate and no invalidation.
    pub const fn new(wr_id: u64, opcode: WcOpcode, byte_len: u32) -> Self {
        Self {
            wr_id,
            opcode,
            byte_len,
            imm_data: None,
            invalidated_rkey: None,
        }
    }
}

/// One entry of a queue's expectations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// Must complete exactly so.
    Exact(Expected),
    /// Posted, outcome unknown: if it completes, it completes in order; `must_complete`
    /// (signaled sends, every receive) forbids completing a later request first.
    Posted { wr_id: u64, must_complete: bool },
}

impl Entry {
    const fn wr_id(&self) -> u64 {
        match self {
            Self::Exact(e) => e.wr_id,
            Self::Posted { wr_id, .. } => *wr_id,
        }
    }
}

/// A completion the model did not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// It names a request not (or no longer) expected on this queue: never posted, or
    /// completed twice.
    Unexpected(Completion),
    /// A request that had to complete first did not.
    OutOfOrder {
        /// The completion that came.
        got: Completion,
        /// The request that had to come before it.
        skipped: u64,
    },
    /// It is the expected request, but with other values.
    Differs {
        /// What came.
        got: Completion,
        /// What the model requires.
        want: Expected,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unexpected(c) => write!(f, "completion for wr {} never expected: {c:?}", c.wr_id),
            Self::OutOfOrder { got, skipped } => write!(
                f,
                "completion for wr {} before wr {skipped}, which had to complete first",
                got.wr_id
            ),
            Self::Differs { got, want } => {
                write!(f, "completion {got:?}, the in-order model says {want:?}")
            }
        }
    }
}

/// The reference model: region images and per-queue expectations. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Model {
    regions: Vec<Vec<u8>>,
    queues: Vec<VecDeque<Entry>>,
}

impl Model {
    /// An empty model.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tracks a region that starts as `initial`.
    pub fn add_region(&mut self, initial: Vec<u8>) -> RegionId {
        self.regions.push(initial);
        RegionId(self.regions.len() - 1)
    }

    /// Tracks a queue with nothing expected yet.
    pub fn add_queue(&mut self) -> QueueId {
        self.queues.push(VecDeque::new());
        QueueId(self.queues.len() - 1)
    }

    /// The image of a region.
    ///
    /// # Panics
    /// If `r` is not a region of this model.
    pub fn region(&self, r: RegionId) -> &[u8] {
        &self.regions[r.0]
    }

    /// Bytes `off .. off + len` of a region: what a READ of them returns.
    ///
    /// # Panics
    /// If the range is outside the region (a test's own mistake).
    pub fn read(&self, r: RegionId, off: usize, len: usize) -> &[u8] {
        &self.regions[r.0][off..off + len]
    }

    /// A WRITE, or a SEND's placement, of `data` at `off`.
    ///
    /// # Panics
    /// If the range is outside the region.
    pub fn write(&mut self, r: RegionId, off: usize, data: &[u8]) {
        self.regions[r.0][off..off + data.len()].copy_from_slice(data);
    }

    /// An atomic on the little-endian word at `off`; returns the original value (what the
    /// requester gets back).
    ///
    /// # Panics
    /// If the word is outside the region.
    pub fn atomic(&mut self, r: RegionId, off: usize, op: AtomicOp) -> u64 {
        let word = &mut self.regions[r.0][off..off + 8];
        let mut b = [0u8; 8];
        b.copy_from_slice(word);
        let orig = u64::from_le_bytes(b);
        word.copy_from_slice(&op.apply(orig).to_le_bytes());
        orig
    }

    /// `q` must next (after what is already expected) complete exactly as `e`.
    pub fn expect(&mut self, q: QueueId, e: Expected) {
        self.queues[q.0].push_back(Entry::Exact(e));
    }

    /// `wr_id` was posted on `q` with an unknown outcome; `must_complete` for a request that
    /// always completes (a signaled send, any receive).
    pub fn posted(&mut self, q: QueueId, wr_id: u64, must_complete: bool) {
        self.queues[q.0].push_back(Entry::Posted {
            wr_id,
            must_complete,
        });
    }

    /// Requests still expected on `q`.
    pub fn outstanding(&self, q: QueueId) -> usize {
        self.queues[q.0].len()
    }

    /// `c` appeared on `q`: checks it against the expectations and consumes them.
    pub fn check(&mut self, q: QueueId, c: &Completion) -> Result<(), Violation> {
        let queue = &mut self.queues[q.0];
        let Some(at) = queue.iter().position(|e| e.wr_id() == c.wr_id) else {
            return Err(Violation::Unexpected(*c));
        };
        // Whatever was expected before it completed silently (an unsignaled success) or had
        // to complete first.
        let skipped = queue.iter().take(at).find_map(|e| match e {
            Entry::Exact(e) => Some(e.wr_id),
            Entry::Posted {
                wr_id,
                must_complete: true,
            } => Some(*wr_id),
            Entry::Posted { .. } => None,
        });
        if let Some(skipped) = skipped {
            return Err(Violation::OutOfOrder { got: *c, skipped });
        }
        let entry = queue.drain(..=at).next_back();
        match entry {
            Some(Entry::Exact(want)) => {
                let same = c.status == WcStatus::Success
                    && c.opcode == want.opcode
                    && c.byte_len == want.byte_len
                    && c.imm_data == want.imm_data
                    && c.invalidated_rkey == want.invalidated_rkey;
                if same {
                    Ok(())
                } else {
                    Err(Violation::Differs { got: *c, want })
                }
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_proto::Qpn;

    fn done(wr_id: u64, opcode: WcOpcode, byte_len: u32) -> Completion {
        Completion {
            wr_id,
            status: WcStatus::Success,
            opcode,
            byte_len,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: Qpn(1),
            src_qp: None,
            src: None,
        }
    }

    #[test]
    fn memory_applies_writes_and_atomics_in_order() {
        let mut m = Model::new();
        let r = m.add_region(vec![0; 24]);
        m.write(r, 8, &5u64.to_le_bytes());
        let cas = AtomicOp::CompareSwap {
            compare: 5,
            swap: 9,
        };
        assert_eq!(m.atomic(r, 8, cas), 5);
        assert_eq!(
            m.atomic(r, 8, cas),
            9,
            "the second CAS compares with 9 and fails"
        );
        assert_eq!(m.atomic(r, 8, AtomicOp::FetchAdd { add: u64::MAX }), 9);
        assert_eq!(m.read(r, 8, 8), &8u64.to_le_bytes());
        assert_eq!(m.region(r)[..8], [0; 8]);
    }

    #[test]
    fn exact_expectations_fail_on_order_values_and_strangers() {
        let mut m = Model::new();
        let q = m.add_queue();
        m.expect(q, Expected::new(1, WcOpcode::Send, 10));
        m.expect(q, Expected::new(2, WcOpcode::RdmaWrite, 20));
        let early = m.check(q, &done(2, WcOpcode::RdmaWrite, 20));
        assert!(matches!(
            early,
            Err(Violation::OutOfOrder { skipped: 1, .. })
        ));
        assert_eq!(m.check(q, &done(1, WcOpcode::Send, 10)), Ok(()));
        let wrong = m.check(q, &done(2, WcOpcode::RdmaWrite, 21));
        assert!(matches!(wrong, Err(Violation::Differs { .. })), "{wrong:?}");
        assert!(matches!(
            m.check(q, &done(2, WcOpcode::RdmaWrite, 20)),
            Err(Violation::Unexpected(_))
        ));
        assert_eq!(m.outstanding(q), 0);
    }

    #[test]
    fn posted_requests_may_complete_silently_but_not_out_of_order() {
        let mut m = Model::new();
        let q = m.add_queue();
        m.posted(q, 1, false);
        m.posted(q, 2, true);
        m.posted(q, 3, true);
        let mut failed = done(2, WcOpcode::Send, 0);
        failed.status = WcStatus::WrFlushErr;
        assert_eq!(m.check(q, &failed), Ok(()), "1 was unsignaled, 2 may fail");
        assert!(m.check(q, &done(2, WcOpcode::Send, 0)).is_err(), "twice");
        let mut m2 = Model::new();
        let q2 = m2.add_queue();
        m2.posted(q2, 1, true);
        m2.posted(q2, 2, true);
        assert!(m2.check(q2, &done(2, WcOpcode::Send, 0)).is_err());
    }
}
