//! The deadlines of one QP, kept in one table (the shape of quinn-proto's
//! `connection/timer.rs`): the QP's `poll_timeout` is its minimum (with the congestion
//! controller's and the CNP pacer's own deadlines), and `handle_timeout` runs each expired entry
//! once.
use crate::time::Instant;

/// What a QP waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Local ACK timeout of the oldest unacknowledged request (IBTA Vol 1 §9.7).
    Retransmit = 0,
    /// The wait an RNR NAK asked for; while it runs the requester sends nothing.
    RnrWait = 1,
    /// The congestion controller's pacing holds the next packet until then.
    Pacing = 2,
}

impl Timer {
    /// Every timer, in the order `handle_timeout` runs them.
    pub(crate) const ALL: [Self; 3] = [Self::Pacing, Self::RnrWait, Self::Retransmit];
}

/// One optional deadline per [`Timer`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TimerTable {
    data: [Option<Instant>; 3],
}

impl TimerTable {
    /// Arms `timer` for `at` (replacing any earlier deadline).
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.data[timer as usize] = Some(at);
    }

    /// Arms or stops `timer`.
    pub(crate) fn set_opt(&mut self, timer: Timer, at: Option<Instant>) {
        self.data[timer as usize] = at;
    }

    /// The deadline of `timer`, if armed.
    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.data[timer as usize]
    }

    /// `true` while `timer` is armed.
    pub(crate) fn is_armed(&self, timer: Timer) -> bool {
        self.get(timer).is_some()
    }

    /// Stops `timer`.
    pub(crate) fn stop(&mut self, timer: Timer) {
        self.data[timer as usize] = None;
    }

    /// Stops every timer.
    pub(crate) fn stop_all(&mut self) {
        self.data = [None; 3];
    }

    /// `true` when `timer` is armed for `now` or earlier.
    pub(crate) fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|t| t <= now)
    }

    /// Stops `timer` and returns `true` if it had expired at `now`.
    pub(crate) fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        let expired = self.is_expired(timer, now);
        if expired {
            self.stop(timer);
        }
        expired
    }

    /// The earliest armed deadline.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        self.data.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_armed_deadline_wins_and_expiry_is_taken_once() {
        let mut t = TimerTable::default();
        assert_eq!(t.next_timeout(), None);
        t.set(Timer::Retransmit, Instant(50));
        t.set(Timer::Pacing, Instant(20));
        t.set_opt(Timer::RnrWait, None);
        assert_eq!(t.next_timeout(), Some(Instant(20)));
        assert!(!t.take_expired(Timer::Pacing, Instant(19)));
        assert!(t.take_expired(Timer::Pacing, Instant(20)));
        assert!(!t.take_expired(Timer::Pacing, Instant(20)));
        assert_eq!(t.next_timeout(), Some(Instant(50)));
        assert!(t.is_armed(Timer::Retransmit));
        t.stop_all();
        assert_eq!(t.next_timeout(), None);
    }
}
