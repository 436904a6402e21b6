//! The impairment stage between a socket and the device: seeded loss, reordering, duplication,
//! bit corruption and CE marking of received datagrams, so that real-socket runs can be
//! stressed the way the simulator is. It sits on the receive side of each endpoint, so a
//! two-endpoint run impairs both directions.
use std::collections::VecDeque;
use std::time::Duration;

use roce_proto::Ecn;

use roce_stack::rng::Rng;
use roce_stack::{Instant, RxMeta};

/// Most datagrams held back for reordering at once; beyond it a datagram chosen for reordering
/// is delivered at once, so a flood cannot grow the stage without bound.
const MAX_HELD: usize = 4096;

/// Probabilities (0..1) of each impairment per received datagram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// Drop the datagram.
    pub loss: f64,
    /// Hold the datagram back for `reorder_delay` so later ones overtake it.
    pub reorder: f64,
    /// How long a reordered datagram is held.
    pub reorder_delay: Duration,
    /// Deliver the datagram twice.
    pub duplicate: f64,
    /// Flip one random bit (the ICRC then fails and the QP drops it).
    pub corrupt: f64,
    /// Set the ECN codepoint to CE (congestion experienced).
    pub ce: f64,
    /// RNG seed.
    pub seed: u64,
}

impl Default for Impairment {
    fn default() -> Self {
        Self {
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(200),
            duplicate: 0.0,
            corrupt: 0.0,
            ce: 0.0,
            seed: 1,
        }
    }
}

impl Impairment {
    /// `true` when nothing is impaired (the stage is then a pass-through).
    pub fn is_none(&self) -> bool {
        self.loss <= 0.0
            && self.reorder <= 0.0
            && self.duplicate <= 0.0
            && self.corrupt <= 0.0
            && self.ce <= 0.0
    }

    /// Checks that every probability is in [0, 1] and that something gets through.
    pub fn validate(&self) -> Result<(), ImpairmentError> {
        for (what, value) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
            ("ce", self.ce),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ImpairmentError::NotAProbability { what, value });
            }
        }
        if self.loss >= 1.0 {
            return Err(ImpairmentError::DropsEverything);
        }
        Ok(())
    }
}

/// An [`Impairment`] that cannot be run.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum ImpairmentError {
    /// A probability outside [0, 1].
    #[error("the {what} probability must be between 0 and 1, not {value}")]
    NotAProbability {
        /// Which impairment.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// A loss of 1.
    #[error("a loss probability of 1 would drop everything")]
    DropsEverything,
}

/// What the stage did, for the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct ImpairStats {
    /// Datagrams dropped.
    pub lost: u64,
    /// Datagrams held back.
    pub reordered: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Datagrams with a flipped bit.
    pub corrupted: u64,
    /// Datagrams marked CE.
    pub ce_marked: u64,
}

impl ImpairStats {
    /// Adds another endpoint's counts.
    pub fn add(&mut self, o: &Self) {
        self.lost += o.lost;
        self.reordered += o.reordered;
        self.duplicated += o.duplicated;
        self.corrupted += o.corrupted;
        self.ce_marked += o.ce_marked;
    }
}

/// The stage: decides the fate of each datagram and holds reordered ones.
#[derive(Debug)]
pub struct ImpairStage {
    cfg: Impairment,
    rng: Rng,
    held: VecDeque<(Instant, RxMeta, Vec<u8>)>,
    /// Spare buffers for held datagrams (no allocation once warmed up).
    spare: Vec<Vec<u8>>,
    /// What was done.
    pub stats: ImpairStats,
}

impl ImpairStage {
    /// A stage for `cfg`.
    pub fn new(cfg: Impairment) -> Self {
        Self {
            rng: Rng::new(cfg.seed),
            cfg,
            held: VecDeque::new(),
            spare: Vec::new(),
            stats: ImpairStats::default(),
        }
    }

    /// Passes one received datagram through the stage; `deliver` gets what survives now.
    pub fn process(
        &mut self,
        now: Instant,
        meta: &RxMeta,
        data: &[u8],
        mut deliver: impl FnMut(&RxMeta, &[u8]),
    ) {
        if self.cfg.is_none() {
            deliver(meta, data);
            return;
        }
        if self.rng.chance(self.cfg.loss) {
            self.stats.lost += 1;
            return;
        }
        let mut meta = *meta;
        if self.rng.chance(self.cfg.ce) {
            meta.ecn = Ecn::Ce;
            self.stats.ce_marked += 1;
        }
        let copies = if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let corrupt_bit = if self.rng.chance(self.cfg.corrupt) && !data.is_empty() {
            self.stats.corrupted += 1;
            Some(self.rng.below(data.len() as u64 * 8) as usize)
        } else {
            None
        };
        for _ in 0..copies {
            let mut buf = self.spare.pop().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(data);
            if let Some(bit) = corrupt_bit {
                buf[bit / 8] ^= 1 << (bit % 8);
            }
            if self.rng.chance(self.cfg.reorder) && self.held.len() < MAX_HELD {
                self.stats.reordered += 1;
                let at = now + self.cfg.reorder_delay;
                self.held.push_back((at, meta, buf));
            } else {
                deliver(&meta, &buf);
                self.spare.push(buf);
            }
        }
    }

    /// Delivers the held datagrams whose time has come.
    pub fn release(&mut self, now: Instant, mut deliver: impl FnMut(&RxMeta, &[u8])) {
        while self.held.front().is_some_and(|h| h.0 <= now) {
            if let Some((_, meta, buf)) = self.held.pop_front() {
                deliver(&meta, &buf);
                self.spare.push(buf);
            }
        }
    }

    /// When the next held datagram is due.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.front().map(|h| h.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ecn: Ecn) -> RxMeta {
        RxMeta::new(
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
            ecn,
        )
    }

    #[test]
    fn pass_through_when_unimpaired() {
        let mut s = ImpairStage::new(Impairment::default());
        let mut got = Vec::new();
        let m = meta(Ecn::Ect0);
        s.process(Instant::ZERO, &m, b"abc", |e, d| got.push((*e, d.to_vec())));
        assert_eq!(got, vec![(m, b"abc".to_vec())]);
    }

    #[test]
    fn rates_are_roughly_the_probabilities() {
        let cfg = Impairment {
            loss: 0.1,
            duplicate: 0.1,
            ce: 0.2,
            corrupt: 0.05,
            reorder: 0.1,
            seed: 9,
            ..Impairment::default()
        };
        let mut s = ImpairStage::new(cfg);
        let (mut delivered, mut ce) = (0u64, 0u64);
        let data = [0u8; 64];
        let n = 20_000u64;
        for i in 0..n {
            let now = Instant::from_nanos(i * 1000);
            s.process(now, &meta(Ecn::Ect0), &data, |e, _| {
                delivered += 1;
                ce += u64::from(e.ecn == Ecn::Ce);
            });
            s.release(now, |e, _| {
                delivered += 1;
                ce += u64::from(e.ecn == Ecn::Ce);
            });
        }
        s.release(Instant::from_nanos(u64::MAX / 2), |_, _| delivered += 1);
        let st = s.stats;
        let near = |x: u64, p: f64| (x as f64 - p * n as f64).abs() < 0.2 * p * n as f64;
        assert!(near(st.lost, 0.1), "{st:?}");
        assert!(near(st.ce_marked, 0.2 * 0.9), "{st:?}");
        assert_eq!(delivered, n - st.lost + st.duplicated);
        assert!(ce >= st.ce_marked);
        assert!(st.corrupted > 0 && st.reordered > 0);
    }

    #[test]
    fn a_flood_cannot_grow_the_reorder_queue() {
        let mut s = ImpairStage::new(Impairment {
            reorder: 1.0,
            reorder_delay: Duration::from_secs(3600),
            ..Impairment::default()
        });
        let mut delivered = 0u64;
        for _ in 0..(MAX_HELD as u64 + 1000) {
            s.process(Instant::ZERO, &meta(Ecn::NotEct), &[0u8; 32], |_, _| {
                delivered += 1
            });
        }
        assert_eq!(s.held.len(), MAX_HELD);
        assert_eq!(
            delivered, 1000,
            "beyond the bound, datagrams go through at once"
        );
    }

    #[test]
    fn bad_probabilities_are_refused() {
        assert!(Impairment {
            loss: 1.5,
            ..Impairment::default()
        }
        .validate()
        .is_err());
        assert!(Impairment {
            ce: -0.1,
            ..Impairment::default()
        }
        .validate()
        .is_err());
        assert!(Impairment {
            loss: 0.05,
            ..Impairment::default()
        }
        .validate()
        .is_ok());
    }
}
