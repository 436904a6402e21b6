//! How complete the capture was: what its connections' own packets show it missed
//! ([`CaptureQuality`]), and the inferences made at its end (a ghost ACK whose MSN shows the
//! requests were sent). The inferences made packet by packet are the handlers'
//! (`requester`, `responder`); `docs/analyze.md` (Capture quality) lists them all.
use super::emit::EventKind;
use super::requester::ReqState;
use super::{Analysis, Connection};

/// How complete the capture was, as far as it shows: packets its connections' own answers
/// prove were sent and it did not see, and what the file says it dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureQuality {
    /// Requests (and READs) the peers' answers show were sent and received, not in the
    /// capture ([`Side::missed_by_capture`](super::Side::missed_by_capture), over every connection).
    pub missed: u64,
    /// READ responses missing from inside answers whose later responses were seen
    /// ([`Side::unseen_read_responses`](super::Side::unseen_read_responses)).
    pub unseen_read_responses: u64,
    /// Connections with either.
    pub connections: usize,
    /// [`Analysis::file_dropped`].
    pub file_dropped: Option<u64>,
}

impl CaptureQuality {
    /// `true` when there is something to say: packets missed or a drop count in the file.
    pub fn is_notable(&self) -> bool {
        self.missed > 0 || self.unseen_read_responses > 0 || self.file_dropped.is_some()
    }
}

impl Analysis {
    /// How complete the capture was ([`CaptureQuality`]).
    pub fn capture_quality(&self) -> CaptureQuality {
        let mut q = CaptureQuality {
            file_dropped: self.file_dropped,
            ..CaptureQuality::default()
        };
        for c in &self.connections {
            let missed: u64 = c.sides.iter().map(|s| s.missed_by_capture).sum();
            let unseen: u64 = c.sides.iter().map(|s| s.unseen_read_responses).sum();
            q.missed += missed;
            q.unseen_read_responses += unseen;
            q.connections += usize::from(missed + unseen > 0);
        }
        q
    }
}

/// At the end of the capture, for the requests of `conn`'s side `side` (`r`): a ghost ACK
/// still unexplained whose MSN moved on from the last ACK's (IBTA Vol 1 §9.7.5.1.2: the MSN
/// counts completed messages) acknowledged the last requests, which the capture missed.
pub(super) fn ghost_at_end(conn: &mut Connection, side: usize, r: &ReqState) {
    let Some((g, frame, _)) = r.ghost.filter(|g| g.2 && g.0 > r.span_end()) else {
        return;
    };
    let n = g - r.span_end();
    let peer = &mut conn.sides[1 - side];
    peer.ghost_acks = peer.ghost_acks.saturating_sub(1);
    conn.sides[side].missed_by_capture += n;
    if let Some(e) = conn
        .events
        .iter_mut()
        .rev()
        .find(|e| e.frame == frame && e.kind == EventKind::GhostAck)
    {
        e.kind = EventKind::CaptureMissed;
        e.detail = format!(
            "acknowledges {n} request PSNs to {} the capture did not see (its MSN counts them)",
            g as u32 & 0xff_ffff
        );
    }
}
