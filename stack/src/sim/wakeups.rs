//! Each endpoint's next wake-up, one at most: a binary min-heap over (time, endpoint) that
//! knows where each endpoint's entry is, so re-arming an endpoint moves its entry instead of
//! leaving a stale one behind (a device re-arms on nearly every packet; stale entries piled
//! up by the million on large fabrics, and every pop paid for them).
use crate::time::Instant;

/// Not in the heap.
const ABSENT: usize = usize::MAX;

#[derive(Debug, Default)]
pub(super) struct Wakeups {
    /// (time, endpoint), ordered as a min-heap: the earliest time, then the lowest endpoint.
    heap: Vec<(Instant, usize)>,
    /// Each endpoint's index in `heap`, or [`ABSENT`].
    pos: Vec<usize>,
}

impl Wakeups {
    /// The earliest wake-up.
    pub(super) fn peek(&self) -> Option<(Instant, usize)> {
        self.heap.first().copied()
    }

    /// Removes and returns the earliest wake-up.
    pub(super) fn pop(&mut self) -> Option<(Instant, usize)> {
        let top = self.peek()?;
        self.remove_at(0);
        Some(top)
    }

    /// Sets endpoint `i`'s wake-up (`None`: none).
    pub(super) fn set(&mut self, i: usize, t: Option<Instant>) {
        if self.pos.len() <= i {
            self.pos.resize(i + 1, ABSENT);
        }
        let at = self.pos[i];
        match (t, at) {
            (None, ABSENT) => {}
            (None, at) => self.remove_at(at),
            (Some(t), ABSENT) => {
                self.heap.push((t, i));
                self.pos[i] = self.heap.len() - 1;
                self.up(self.heap.len() - 1);
            }
            (Some(t), at) => {
                let old = self.heap[at].0;
                self.heap[at].0 = t;
                if t < old {
                    self.up(at);
                } else {
                    self.down(at);
                }
            }
        }
    }

    fn remove_at(&mut self, at: usize) {
        let last = self.heap.len() - 1;
        self.swap(at, last);
        let (_, i) = self.heap.pop().expect("not empty");
        self.pos[i] = ABSENT;
        if at < self.heap.len() {
            self.down(at);
            self.up(at);
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].1] = a;
        self.pos[self.heap[b].1] = b;
    }

    fn up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[at] >= self.heap[parent] {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    fn down(&mut self, mut at: usize) {
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if l < self.heap.len() && self.heap[l] < self.heap[least] {
                least = l;
            }
            if r < self.heap.len() && self.heap[r] < self.heap[least] {
                least = r;
            }
            if least == at {
                break;
            }
            self.swap(at, least);
            at = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Against the obvious model (the minimum of every endpoint's current wake-up) under
    /// random sets, clears and pops.
    #[test]
    fn pops_in_time_then_endpoint_order_whatever_the_updates() {
        for seed in 0..50u64 {
            let mut rng = Rng::new(seed);
            let mut w = Wakeups::default();
            let mut model: Vec<Option<Instant>> = vec![None; 40];
            for _ in 0..2000 {
                let i = rng.below(40) as usize;
                match rng.below(4) {
                    0 => {
                        w.set(i, None);
                        model[i] = None;
                    }
                    1 => {
                        let want = model
                            .iter()
                            .enumerate()
                            .filter_map(|(i, t)| t.map(|t| (t, i)))
                            .min();
                        assert_eq!(w.pop(), want, "seed {seed}");
                        if let Some((_, j)) = want {
                            model[j] = None;
                        }
                    }
                    _ => {
                        let t = Instant::from_nanos(rng.below(100));
                        w.set(i, Some(t));
                        model[i] = Some(t);
                    }
                }
                let want = model
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| t.map(|t| (t, i)))
                    .min();
                assert_eq!(w.peek(), want, "seed {seed}");
            }
        }
    }
}
