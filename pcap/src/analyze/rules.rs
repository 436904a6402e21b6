//! The behaviour rules a connection is checked against: [`Rule`] (each one's wire name and
//! what it checks, in one table), the per-connection tallies the handlers feed, and the
//! [`Verdict`]s made of them.
use super::text::{pad_right, push_u64};
use std::fmt::Write as _;

/// Declares [`Rule`] from one table: variant, wire name (the `rule` of the text and JSON
/// reports), and the one-sentence description that is also the variant's doc.
macro_rules! rules {
    ($($variant:ident => $name:literal, $desc:literal;)*) => {
        /// A behaviour rule of go-back-N RC (IBTA Vol 1 §9.7, the set Lumina (SIGCOMM 2023)
        /// checks on hardware), in report order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Rule {
            $(#[doc = $desc] $variant,)*
        }

        impl Rule {
            /// Every rule, in report order.
            pub const ALL: [Self; [$(Self::$variant),*].len()] = [$(Self::$variant),*];

            /// Its wire name, as the reports print it (`gbn_restart_at_naked_psn`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }

            /// What it checks, in one sentence (with the IBTA section it checks).
            pub const fn description(self) -> &'static str {
                match self {
                    $(Self::$variant => $desc,)*
                }
            }
        }
    };
}

rules! {
    GbnRestartAtNakedPsn => "gbn_restart_at_naked_psn",
        "The retransmission episode after a sequence NAK restarts at the NAKed PSN, not past \
         it nor past the oldest unacknowledged PSN (go-back-N, IBTA Vol 1 §9.7; a NAK for PSN n \
         acknowledges everything before n, §9.7.5.1.2).";
    TimeoutRestartAtOldestUnacked => "timeout_restart_at_oldest_unacked",
        "The retransmission episode after the local ACK timer expired (IBTA Vol 1 §9.7.6.1.3) \
         restarts no later than the oldest unacknowledged PSN.";
    OneNakPerSequenceError => "one_nak_per_sequence_error",
        "A responder sends one sequence NAK per out-of-sequence episode: the same NAK again \
         before the PSN was resent is a NAK storm (IBTA Vol 1 §9.7).";
    NoAckPastHole => "no_ack_past_hole",
        "No ACK covers a request PSN the responder NAKed as missing and never got again \
         (IBTA Vol 1 §9.7). An ACK past a PSN never seen without such a NAK is what a capture \
         that dropped it looks like (a responder acknowledges only what it received in order, \
         §9.7.5.1.2): not judged, counted as missed by the capture.";
    MonotonicMsnAndAckPsn => "monotonic_msn_and_ack_psn",
        "ACK PSNs and MSNs do not go back, except in answer to a request sent again (a resent \
         atomic ACK is the responder's saved result, IBTA Vol 1 §9.7.5.1.7.4).";
    ReadResponsesCoverRequest => "read_responses_cover_request",
        "READ responses take one PSN per packet over the requested span and carry the \
         requested length (IBTA Vol 1 §9.7.1).";
    DuplicateReadReexecutedFromRequestedPsn => "duplicate_read_reexecuted_from_requested_psn",
        "A duplicate READ is answered from the PSN it asks for (IBTA Vol 1 §9.7.5.1.5).";
    CnpMinInterval => "cnp_min_interval",
        "CNPs of one QP are at least the CNP interval apart (`Options::cnp_interval_ns`; a \
         notification point's setting, no IBTA section).";
    PeerUnresponsive => "peer_unresponsive",
        "No requester goes unanswered: one that goes back to the same PSN round after round \
         with nothing coming back (the peer unreachable, a wrong GID or QPN, the peer gone) \
         ends in `retry exceeded` after its retry count, at most 7, of local ACK timeouts \
         (IBTA Vol 1 §9.7.6.1.3).";
}

/// How many rules there are.
const COUNT: usize = Rule::ALL.len();

/// The rules' wire names, in report order (the names of [`Rule::ALL`]).
pub const RULES: [&str; COUNT] = {
    let mut names = [""; COUNT];
    let mut i = 0;
    while i < COUNT {
        names[i] = Rule::ALL[i].name();
        i += 1;
    }
    names
};

/// A behaviour rule's outcome on one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The rule.
    pub rule: &'static str,
    /// `ok`, `violated` or `not_applicable`.
    pub result: &'static str,
    /// Frames that show a violation (the first 16).
    pub frames: Vec<u64>,
    /// What was seen.
    pub detail: String,
}

/// What one connection showed of one rule (the counts inline, the rarely filled rest boxed:
/// every connection of a capture has a tally of every rule).
#[derive(Debug, Clone, Default)]
pub(super) struct Tally {
    checked: u64,
    violations: u64,
    /// Checks that passed only because the capture point may not see everything (a
    /// restart earlier than asked for).
    pub(super) early: u64,
    /// Checks not made: the evidence they need is packets the capture missed (the peer's
    /// answers show they were sent).
    pub(super) unjudged: u64,
    more: Option<Box<TallyMore>>,
}

/// A [`Tally`]'s frames and words.
#[derive(Debug, Clone, Default)]
struct TallyMore {
    frames: Vec<u64>,
    /// Said after the counts (the CNP rule: what was observed).
    note: String,
    /// What the first violation was.
    first: String,
}

impl TallyMore {
    /// Nothing kept.
    fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.note.is_empty() && self.first.is_empty()
    }
}

impl Tally {
    /// One check of the rule at `frame`: passed when `ok`.
    pub(super) fn check(&mut self, ok: bool, frame: u64) {
        self.checked += 1;
        if !ok {
            self.violations += 1;
            let frames = &mut self.more_mut().frames;
            if frames.len() < 16 {
                frames.push(frame);
            }
        }
    }
    /// [`Tally::check`], and the first violation says what was seen.
    pub(super) fn check_why(&mut self, ok: bool, frame: u64, why: impl FnOnce() -> String) {
        if !ok && self.violations == 0 {
            self.more_mut().first = format!("first at frame {frame}: {}", why());
        }
        self.check(ok, frame);
    }

    fn more_mut(&mut self) -> &mut TallyMore {
        self.more.get_or_insert_with(Box::default)
    }
    /// What is said after the counts (the CNP rule: what was observed).
    pub(super) fn note_mut(&mut self) -> &mut String {
        &mut self.more_mut().note
    }
    /// Frames that show a violation (the first 16).
    fn frames(&self) -> &[u64] {
        self.more.as_ref().map_or(&[], |m| &m.frames)
    }
    /// `not_applicable`, `not_judged` (every check needed packets the capture missed),
    /// `violated` or `ok`.
    fn result(&self) -> &'static str {
        if self.checked == 0 && self.unjudged > 0 {
            "not_judged"
        } else if self.checked == 0 {
            "not_applicable"
        } else if self.violations > 0 {
            "violated"
        } else {
            "ok"
        }
    }

    /// Writes the verdict's detail: the counts, then what else is known.
    fn detail_into(&self, d: &mut String) {
        push_u64(d, self.checked);
        d.push_str(" checked, ");
        push_u64(d, self.violations);
        d.push_str(" violated");
        let (note, first) = self
            .more
            .as_ref()
            .map_or(("", ""), |m| (m.note.as_str(), m.first.as_str()));
        if !note.is_empty() {
            d.push_str("; ");
            d.push_str(note);
        }
        if self.early > 0 {
            let _ = write!(
                d,
                "; {} earlier than asked (what a response lost after the capture point looks like)",
                self.early
            );
        }
        if self.unjudged > 0 {
            let _ = write!(
                d,
                "; {} not judged (they need packets the capture missed)",
                self.unjudged
            );
        }
        if !first.is_empty() {
            d.push_str("; ");
            d.push_str(first);
        }
    }

    fn verdict(&self, rule: Rule) -> Verdict {
        let mut detail = String::new();
        self.detail_into(&mut detail);
        Verdict {
            rule: rule.name(),
            result: self.result(),
            frames: self.frames().to_vec(),
            detail,
        }
    }
}

/// One connection's tallies, by [`Rule`]. The default has none (a connection the analyzer
/// did not make has no verdicts); the analyzer's connections have [`Tallies::all`].
#[derive(Debug, Clone, Default)]
pub(super) struct Tallies(Vec<Tally>);

impl Tallies {
    /// A fresh tally of every rule.
    pub(super) fn all() -> Self {
        Self(vec![Tally::default(); COUNT])
    }
    /// The tally of `rule`.
    pub(super) fn get_mut(&mut self, rule: Rule) -> &mut Tally {
        &mut self.0[rule as usize]
    }
    /// The verdict of every rule, in report order.
    pub(super) fn verdicts(&self) -> Vec<Verdict> {
        Rule::ALL
            .iter()
            .zip(&self.0)
            .map(|(&rule, t)| t.verdict(rule))
            .collect()
    }
    /// Reads the tallies' first counts (for [`Analyzer::packets`](super::Analyzer)'s lookahead).
    pub(super) fn touch(&self) -> u64 {
        self.0.first().map_or(0, |t| t.checked)
    }
    /// The rules violated, in report order.
    pub(super) fn violated_rules(&self) -> impl Iterator<Item = Rule> + '_ {
        Rule::ALL
            .iter()
            .zip(&self.0)
            .filter(|(_, t)| t.violations > 0)
            .map(|(&r, _)| r)
    }
    /// Writes the text report's verdict lines, one per rule in report order, except that
    /// the rules with nothing to check and nothing to say share one `not applicable` line.
    pub(super) fn write_verdicts(&self, o: &mut String) {
        let plain = |t: &Tally| {
            t.checked == 0
                && t.early == 0
                && t.unjudged == 0
                && t.more.as_ref().is_none_or(|m| m.is_empty())
        };
        for (&rule, t) in Rule::ALL.iter().zip(&self.0).filter(|(_, t)| !plain(t)) {
            o.push_str("  verdict ");
            let at = o.len();
            o.push_str(rule.name());
            pad_right(o, at, 46);
            o.push(' ');
            let at = o.len();
            o.push_str(t.result());
            pad_right(o, at, 14);
            o.push(' ');
            t.detail_into(o);
            if !t.frames().is_empty() {
                let _ = write!(o, " frames {:?}", t.frames());
            }
            o.push('\n');
        }
        let mut first = true;
        for (&rule, _) in Rule::ALL.iter().zip(&self.0).filter(|(_, t)| plain(t)) {
            o.push_str(if first { "  not applicable: " } else { ", " });
            o.push_str(rule.name());
            first = false;
        }
        if !first {
            o.push('\n');
        }
    }
    /// `true` when a rule was violated.
    pub(super) fn violated(&self) -> bool {
        self.0.iter().any(|t| t.violations > 0)
    }
}
