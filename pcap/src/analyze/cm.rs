//! The CM exchanges the capture shows (IBTA Vol 1 §12.6): each connection request (REQ) is
//! answered by a reply (REP), rejected (REJ, with its reason), or left unanswered until the
//! capture ends: "CM connects fail after many connections" is a count of the last two.
use std::collections::BTreeMap;
use std::net::IpAddr;

use roce_proto::cm::rej_reason_name;

use super::pkt::{CmFacts, Pkt};
use super::HashMap;

/// Requests followed at most (a REQ's sender and communication ID each).
const MAX_OPEN: usize = 1 << 16;

/// What became of the capture's CM requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmOutcome {
    /// REQs (each sender's communication ID once: a retried REQ is the same request).
    pub requests: u64,
    /// Of them, REQs no REP or REJ answered in the capture.
    pub unanswered: u64,
    /// The first frames of the unanswered ones (up to 8, in capture order).
    pub unanswered_frames: Vec<u64>,
    /// REQs rejected, by reason.
    pub rejects: Vec<CmReject>,
}

/// The REJs of one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmReject {
    /// The reason code (IBTA Vol 1 §12.6.7.2, Table 112).
    pub reason: u16,
    /// Its name, when the code is one IBTA defines.
    pub name: Option<&'static str>,
    /// REJs with it.
    pub count: u64,
    /// The first one's frame.
    pub first_frame: u64,
}

/// The CM exchanges as an analyzer follows them (its share of the host pairs).
#[derive(Debug, Default)]
pub(super) struct CmTally {
    /// REQs not answered yet: (sender, its communication ID) → first frame.
    open: HashMap<(IpAddr, u32), u64>,
    requests: u64,
    /// Reason → (REJs, first frame).
    rejects: BTreeMap<u16, (u64, u64)>,
}

impl CmTally {
    /// Notes a REQ, REP or REJ.
    pub(super) fn note(&mut self, p: &Pkt, cm: &CmFacts) {
        if let Some((reason, rejected)) = cm.rej {
            // A REJ of a REQ (message rejected 0) answers it: it names the REQ's sender's
            // communication ID as its remote one.
            if rejected == 0 {
                self.open.remove(&(p.dst, cm.remote_comm_id));
            }
            if self.rejects.len() < 256 || self.rejects.contains_key(&reason) {
                let e = self.rejects.entry(reason).or_insert((0, p.frame));
                e.0 += 1;
            }
        } else if cm.rep {
            self.open.remove(&(p.dst, cm.remote_comm_id));
        } else {
            let key = (p.src, cm.local_comm_id);
            if !self.open.contains_key(&key) && self.open.len() < MAX_OPEN {
                self.open.insert(key, p.frame);
                self.requests += 1;
            }
        }
    }

    /// Takes in another share's tally (the shares' host pairs are apart).
    pub(super) fn absorb(&mut self, other: Self) {
        self.requests += other.requests;
        for (k, f) in other.open {
            if self.open.len() < MAX_OPEN {
                self.open.entry(k).or_insert(f);
            }
        }
        for (reason, (n, f)) in other.rejects {
            let e = self.rejects.entry(reason).or_insert((0, f));
            e.0 += n;
            e.1 = e.1.min(f);
        }
    }

    /// What became of the requests, at the end of the capture.
    pub(super) fn outcome(&self) -> CmOutcome {
        let mut frames: Vec<u64> = self.open.values().copied().collect();
        frames.sort_unstable();
        frames.truncate(8);
        CmOutcome {
            requests: self.requests,
            unanswered: self.open.len() as u64,
            unanswered_frames: frames,
            rejects: self
                .rejects
                .iter()
                .map(|(&reason, &(count, first_frame))| CmReject {
                    reason,
                    name: rej_reason_name(reason),
                    count,
                    first_frame,
                })
                .collect(),
        }
    }
}
