//! The fabric's event queue: a radix heap, the monotone priority queue of event-driven
//! simulation (Ahuja, Mehlhorn, Orlin and Tarjan, "Faster algorithms for the shortest path
//! problem", 1990).
//!
//! A simulation only ever removes its earliest event, and only ever adds events at or after
//! the last one removed, so keys need not be fully ordered: an item waits in the bucket of
//! the highest bit in which its key differs from the last key removed, and is sorted further
//! only when its bucket is the lowest non-empty one. Each item moves down a few buckets in
//! its life, through vectors read front to back, where a binary heap of the fabric's
//! hundreds of thousands of pending events pays a cache miss per level on every removal.
//!
//! Keys are 128 bits: the event's time in the high half and its sequence number (its order
//! among events of the same time) in the low half, so items come out in exactly the order
//! of a heap of `(time, seq)`: the simulation's results do not change.
//!
//! Not the `radix-heap` crate: it has no way to look at the earliest item without taking
//! it, and the simulator asks when the next event is due between adding events earlier than
//! that one (a host's frame arriving before the fabric's next departure).
use crate::time::Instant;

/// Buckets: 0 for keys equal to the last removed, `b` for keys whose highest bit differing
/// from it is bit `b - 1`.
const BUCKETS: usize = 129;

/// A min-queue of `(time, seq)` keys with a value each; every key added must be at least the
/// last one removed.
#[derive(Debug)]
pub(super) struct RadixQueue<V> {
    /// The last key removed (0 at first): a lower bound of every key in the queue.
    last: u128,
    buckets: Vec<Vec<(u128, V)>>,
    /// Bit `b` set when bucket `b` is not empty: the lowest non-empty bucket is found by
    /// counting trailing zeros, not by reading the buckets in turn.
    nonempty: [u64; 3],
    len: usize,
    /// The smallest key in the queue, when it is not empty.
    min: Option<u128>,
}

impl<V> Default for RadixQueue<V> {
    fn default() -> Self {
        Self {
            last: 0,
            buckets: (0..BUCKETS).map(|_| Vec::new()).collect(),
            nonempty: [0; 3],
            len: 0,
            min: None,
        }
    }
}

fn key(at: Instant, seq: u64) -> u128 {
    u128::from(at.as_nanos()) << 64 | u128::from(seq)
}

fn time_of(k: u128) -> Instant {
    Instant::from_nanos((k >> 64) as u64)
}

impl<V> RadixQueue<V> {
    /// The bucket of key `k`.
    fn bucket(&self, k: u128) -> usize {
        (128 - (k ^ self.last).leading_zeros()) as usize
    }

    fn mark(&mut self, b: usize) {
        self.nonempty[b / 64] |= 1 << (b % 64);
    }

    fn unmark(&mut self, b: usize) {
        self.nonempty[b / 64] &= !(1 << (b % 64));
    }

    /// The lowest non-empty bucket.
    fn lowest(&self) -> Option<usize> {
        self.nonempty
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }

    /// Items waiting.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The earliest item's time.
    pub(super) fn peek_time(&self) -> Option<Instant> {
        self.min.map(time_of)
    }

    /// Adds `v` at `(at, seq)`. A key below the last one removed breaks the order: the
    /// fabric never schedules into the past.
    pub(super) fn push(&mut self, at: Instant, seq: u64, v: V) {
        let k = key(at, seq);
        debug_assert!(k >= self.last, "an event before the last one processed");
        // Kept in order all the same: such a key waits in bucket 0 with the last removed
        // and comes out next (in release builds, where the assertion is off).
        let b = if k < self.last { 0 } else { self.bucket(k) };
        self.buckets[b].push((k, v));
        self.mark(b);
        self.len += 1;
        self.min = Some(self.min.map_or(k, |m| m.min(k)));
    }

    /// Removes and returns the earliest item (time, seq, value).
    pub(super) fn pop(&mut self) -> Option<(Instant, u64, V)> {
        let m = self.min?;
        if self.buckets[0].is_empty() {
            // The lowest non-empty bucket holds the minimum: spread it out around it.
            let i = self.lowest()?;
            self.last = m;
            let mut items = std::mem::take(&mut self.buckets[i]);
            self.unmark(i);
            for (k, v) in items.drain(..) {
                let b = self.bucket(k);
                self.buckets[b].push((k, v));
                self.mark(b);
            }
            // Hand the emptied vector back to keep its capacity.
            self.buckets[i] = items;
        }
        // Bucket 0 holds only keys equal to `last` (the minimum); a key pushed below `last`
        // (see `push`) is the smallest of them.
        let zero = &mut self.buckets[0];
        let j = zero
            .iter()
            .enumerate()
            .min_by_key(|(_, (k, _))| *k)
            .map(|(j, _)| j)?;
        let (k, v) = zero.swap_remove(j);
        if zero.is_empty() {
            self.unmark(0);
        }
        self.len -= 1;
        self.min = self.find_min();
        Some((time_of(k), k as u64, v))
    }

    /// The smallest key left: in bucket 0 if any, else the lowest non-empty bucket's least.
    fn find_min(&self) -> Option<u128> {
        self.buckets[self.lowest()?].iter().map(|(k, _)| *k).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// Against a binary heap of the same keys, under the simulator's pattern: removals of the
    /// earliest item interleaved with additions at or after the last removal, some at the
    /// same time, some far ahead.
    #[test]
    fn pops_in_the_order_of_a_binary_heap() {
        for seed in 0..20u64 {
            let mut rng = Rng::new(seed);
            let mut q = RadixQueue::default();
            let mut h = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for step in 0..20_000u32 {
                if rng.below(3) > 0 || h.is_empty() {
                    for _ in 0..=rng.below(3) {
                        seq += 1;
                        let ahead = match rng.below(4) {
                            0 => 0,
                            1 => rng.below(100),
                            2 => rng.below(10_000),
                            _ => rng.below(1 << 40),
                        };
                        let at = Instant::from_nanos(now + ahead);
                        q.push(at, seq, step);
                        h.push(Reverse((at, seq, step)));
                    }
                }
                assert_eq!(
                    q.peek_time(),
                    h.peek().map(|r| r.0 .0),
                    "seed {seed} step {step}"
                );
                if rng.below(2) == 0 {
                    let want = h.pop().map(|r| r.0);
                    let got = q.pop();
                    assert_eq!(got, want, "seed {seed} step {step}");
                    if let Some((t, _, _)) = got {
                        now = t.as_nanos();
                    }
                }
                assert_eq!(q.len(), h.len(), "seed {seed}");
                for (b, items) in q.buckets.iter().enumerate() {
                    let marked = q.nonempty[b / 64] >> (b % 64) & 1 == 1;
                    assert_eq!(
                        marked,
                        !items.is_empty(),
                        "seed {seed} step {step} bucket {b}"
                    );
                }
            }
            while let Some(Reverse(want)) = h.pop() {
                assert_eq!(q.pop(), Some(want), "seed {seed} draining");
            }
            assert_eq!(q.pop(), None);
        }
    }
}
