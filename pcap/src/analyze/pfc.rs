//! PAUSE and PFC frames (IEEE 802.3 annex 31B, IEEE 802.1Qbb) against the connections: when
//! each of the eight priorities was paused, which stalls those pauses cover, pause storms
//! (a priority paused without a break for longer than [`Options::storm_ns`]), and the
//! connections that were victims of a pause they did not cause.
//!
//! A pause lasts its quanta (512 bit times each, at [`Options::link_bps`]) from the frame,
//! until a later frame of the same sender and priority renews it or ends it (quanta 0). A
//! connection's priority is its packets' (the VLAN PCP when tagged, else DSCP / 8, the usual
//! DSCP-to-priority map of RoCE NICs). Pauses from every sender of a priority count for every
//! connection on it: the capture is taken to be one link's (a host's, or one switch port's).
use roce_proto::mac_control::{pause_ns, Repr};

use super::emit::{keeps, push_event, Event, EventKind};
use super::{Connection, HashMap, Options};

/// A set with the analysis's keyed hash.
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A PAUSE or PFC frame as the analysis sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pause {
    pub(crate) frame: u64,
    pub(crate) t: u64,
    pub(crate) src: [u8; 6],
    /// Priorities it addresses (PAUSE: all eight).
    pub(crate) enable: u8,
    /// Quanta per priority (0 ends a pause).
    pub(crate) quanta: [u16; 8],
}

impl Pause {
    /// The frame's pause, when it is PAUSE or PFC.
    pub(crate) fn of(frame: u64, t: u64, src: [u8; 6], r: Repr) -> Option<Self> {
        let (enable, quanta) = match r {
            Repr::Pause { quanta } => (0xff, [quanta; 8]),
            Repr::Pfc { enable, quanta } => (enable, quanta),
            Repr::Other { .. } => return None,
        };
        Some(Self {
            frame,
            t,
            src,
            enable,
            quanta,
        })
    }
}

/// Paused intervals kept in all (16 bytes each); a capture with more counts the rest in
/// [`PriorityPfc::intervals_dropped`].
const MAX_INTERVALS: usize = 1 << 20;
/// Pausing frames whose times are kept, in all.
const MAX_FRAME_TIMES: usize = 1 << 21;
/// Senders of pauses followed (per priority each; a sender is found by hash, so the bound
/// is memory's: 65,536 senders on all eight priorities hold about 30 MB of open pauses).
/// Frames of further senders are not counted.
const MAX_SENDERS: usize = 1 << 16;

/// What a priority's pauses were, over the capture.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriorityPfc {
    /// The priority (0..=7).
    pub priority: u8,
    /// Frames addressing it (PAUSE frames count for every priority).
    pub frames: u64,
    /// Of them, frames that paused (quanta > 0; the rest resume).
    pub xoff: u64,
    /// Senders (source MACs) of its frames.
    pub senders: u64,
    /// Time it was paused in all (the union over senders), ns.
    pub paused_ns: u64,
    /// Its longest pause without a break, ns.
    pub longest_ns: u64,
    /// Pause storms: (start, length ns, first frame), paused without a break longer than
    /// the storm bound.
    pub storms: Vec<(u64, u64, u64)>,
    /// Stalls of connections on it that its pauses cover.
    pub stalls_covered: u64,
    /// Connections on it that it paused with no sign of congestion of their own.
    pub victims: u64,
    /// Paused intervals not kept (past the 1,048,576 kept in all): `paused_ns` misses them.
    pub intervals_dropped: u64,
}

/// What the capture's pauses did to one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConnectionPfc {
    /// Its priority, when it sent any packet.
    pub priority: Option<u8>,
    /// Pausing frames on its priority during its life (first to last packet).
    pub pauses: u64,
    /// Time its priority was paused during its life, ns.
    pub paused_ns: u64,
    /// Its stalls that a pause covers (the priority paused at least half of the stall).
    pub stalls_covered: u64,
    /// Pause storms on its priority during its life.
    pub storms: u64,
    /// Paused while it showed no congestion of its own (no CE mark, no CNP): a victim of
    /// another flow's pause (head-of-line blocking).
    pub victim: bool,
}

/// The pauses of a capture, as they arrive.
#[derive(Debug, Default)]
pub(super) struct PfcState {
    /// (sender, priority) -> (start of its current pause, its end as last set, first frame).
    open: HashMap<([u8; 6], u8), (u64, u64, u64)>,
    /// Senders per priority, found by hash (a capture with thousands of senders must not
    /// cost a search of them per frame).
    senders: [HashSet<[u8; 6]>; 8],
    /// Closed paused intervals per priority: (start, end, first frame).
    spans: [Vec<(u64, u64, u64)>; 8],
    /// Times of the frames that paused, per priority.
    xoff_times: [Vec<u64>; 8],
    frames: [u64; 8],
    xoff: [u64; 8],
    kept: usize,
    times_kept: usize,
    dropped: [u64; 8],
}

impl PfcState {
    /// `true` when no PAUSE or PFC frame was seen.
    pub(super) fn is_empty(&self) -> bool {
        self.frames.iter().all(|&n| n == 0)
    }

    /// Notes one frame; `link_bps` sets what a quantum lasts.
    pub(super) fn note(&mut self, p: &Pause, link_bps: u64) {
        for prio in 0..8u8 {
            if p.enable & (1 << prio) == 0 {
                continue;
            }
            let i = usize::from(prio);
            self.frames[i] += 1;
            if !self.senders[i].contains(&p.src) {
                if self.senders[i].len() >= MAX_SENDERS {
                    continue;
                }
                self.senders[i].insert(p.src);
            }
            let key = (p.src, prio);
            // A pause already over ends where it ran out.
            if let Some(&(start, end, frame)) = self.open.get(&key) {
                if p.t >= end {
                    self.close(i, start, end, frame);
                    self.open.remove(&key);
                }
            }
            let q = p.quanta[i];
            if q == 0 {
                if let Some((start, _, frame)) = self.open.remove(&key) {
                    self.close(i, start, p.t, frame);
                }
                continue;
            }
            self.xoff[i] += 1;
            if self.times_kept < MAX_FRAME_TIMES {
                self.xoff_times[i].push(p.t);
                self.times_kept += 1;
            }
            let end = p.t.saturating_add(pause_ns(q, link_bps.max(1)));
            self.open
                .entry(key)
                .and_modify(|o| o.1 = end)
                .or_insert((p.t, end, p.frame));
        }
    }

    fn close(&mut self, i: usize, start: u64, end: u64, frame: u64) {
        if self.kept < MAX_INTERVALS {
            self.spans[i].push((start, end.max(start), frame));
            self.kept += 1;
        } else {
            self.dropped[i] += 1;
        }
    }

    /// Ends the pauses still running at `end` (the capture's last packet) and ties them to
    /// the connections: fills each one's [`Connection::pfc`] and returns the priorities
    /// with frames.
    pub(super) fn finish(
        mut self,
        end: u64,
        opts: &Options,
        conns: &mut [Box<Connection>],
        kept: &mut usize,
    ) -> Vec<PriorityPfc> {
        if self.is_empty() {
            return Vec::new();
        }
        for ((_, prio), (start, until, frame)) in std::mem::take(&mut self.open) {
            self.close(usize::from(prio), start, until.min(end.max(start)), frame);
        }
        let unions: Vec<Union> = (0..8)
            .map(|i| Union::of(std::mem::take(&mut self.spans[i]), opts.storm_ns))
            .collect();
        for t in &mut self.xoff_times {
            t.sort_unstable();
        }
        let mut out: Vec<PriorityPfc> = (0..8u8)
            .filter(|&p| self.frames[usize::from(p)] > 0)
            .map(|p| {
                let i = usize::from(p);
                let u = &unions[i];
                PriorityPfc {
                    priority: p,
                    frames: self.frames[i],
                    xoff: self.xoff[i],
                    senders: self.senders[i].len() as u64,
                    paused_ns: u.total(),
                    longest_ns: u.spans.iter().map(|s| s.1 - s.0).max().unwrap_or(0),
                    storms: u.storms.iter().map(|s| (s.0, s.1 - s.0, s.2)).collect(),
                    intervals_dropped: self.dropped[i],
                    ..PriorityPfc::default()
                }
            })
            .collect();
        let ms = |ns: u64| ns as f64 / 1e6;
        for (ci, c) in conns.iter_mut().enumerate() {
            let Some(prio) = c.sides.iter().find_map(|s| s.priority) else {
                continue;
            };
            let i = usize::from(prio);
            let u = &unions[i];
            let live = c.sides.iter().filter(|s| s.packets > 0);
            let from = live.clone().map(|s| s.first_t).min().unwrap_or(0);
            let to = live.map(|s| s.last_t).max().unwrap_or(0);
            let times = &self.xoff_times[i];
            let xoffs = |a: u64, b: u64| {
                (times.partition_point(|&t| t <= b))
                    .saturating_sub(times.partition_point(|&t| t < a)) as u64
            };
            let mut events = Vec::new();
            let mut covered = 0;
            for (side, s) in c.sides.iter().enumerate() {
                for &(a, b) in &s.stall_spans {
                    let paused = u.within(a, b);
                    if b <= a || paused.saturating_mul(2) < b - a {
                        continue;
                    }
                    covered += 1;
                    let first = u.first_overlapping(a, b);
                    events.push(Event {
                        frame: first.map_or(0, |f| f.2),
                        t: b,
                        connection: ci,
                        side,
                        kind: EventKind::StallPaused,
                        psn: 0,
                        cause: None,
                        detail: format!(
                            "priority {prio} was paused {:.3} ms of this {:.3} ms stall ({} pausing frames in it, the first pause from frame {})",
                            ms(paused),
                            ms(b - a),
                            xoffs(a, b),
                            first.map_or(0, |f| f.2)
                        ),
                    });
                }
            }
            // The storms its life overlaps, found by search: the spans are disjoint and in
            // order, so a connection costs the storms it meets, not all of them.
            let storms = u.storms_within(from, to);
            let mut made = 0u64;
            for sp in storms {
                if !keeps(c, events.len(), *kept) {
                    break;
                }
                made += 1;
                events.push(Event {
                    frame: sp.2,
                    t: sp.0,
                    connection: ci,
                    side: 0,
                    kind: EventKind::PauseStorm,
                    psn: 0,
                    cause: None,
                    detail: format!(
                        "priority {prio} paused without a break for {:.3} ms (beyond {:.3} ms) from {:.6} s",
                        ms(sp.1 - sp.0),
                        ms(opts.storm_ns),
                        sp.0 as f64 / 1e9
                    ),
                });
            }
            let storms = storms.len() as u64;
            let paused_ns = u.within(from, to);
            let congested = c.sides.iter().any(|s| s.ecn_ce > 0 || s.cnps > 0);
            c.pfc = ConnectionPfc {
                priority: Some(prio),
                pauses: xoffs(from, to),
                paused_ns,
                stalls_covered: covered,
                storms,
                victim: covered > 0 && !congested,
            };
            for e in events {
                push_event(c, e, kept);
            }
            // The storm events not made: those push_event would have dropped.
            c.events_dropped += storms - made;
            if let Some(o) = out.iter_mut().find(|o| o.priority == prio) {
                o.stalls_covered += covered;
                o.victims += u64::from(c.pfc.victim);
            }
        }
        out
    }
}

/// A priority's paused time: disjoint intervals in order, with the running total, and its
/// storms (the spans longer than the storm bound), so that what overlaps a connection's life
/// is found by binary search.
struct Union {
    /// (start, end, first frame).
    spans: Vec<(u64, u64, u64)>,
    /// Paused time of the spans before each.
    before: Vec<u64>,
    /// The spans longer than the storm bound, in order.
    storms: Vec<(u64, u64, u64)>,
}

impl Union {
    fn of(mut v: Vec<(u64, u64, u64)>, storm_ns: u64) -> Self {
        v.sort_unstable();
        let mut spans: Vec<(u64, u64, u64)> = Vec::with_capacity(v.len());
        for s in v {
            match spans.last_mut() {
                Some(l) if s.0 <= l.1 => l.1 = l.1.max(s.1),
                _ => spans.push(s),
            }
        }
        let mut before = Vec::with_capacity(spans.len());
        let mut sum = 0u64;
        for s in &spans {
            before.push(sum);
            sum = sum.saturating_add(s.1 - s.0);
        }
        let storms = spans
            .iter()
            .filter(|s| s.1 - s.0 > storm_ns)
            .copied()
            .collect();
        Self {
            spans,
            before,
            storms,
        }
    }

    /// The storms overlapping [a, b] (ending at or after `a`, starting at or before `b`).
    fn storms_within(&self, a: u64, b: u64) -> &[(u64, u64, u64)] {
        let lo = self.storms.partition_point(|s| s.1 < a);
        let hi = self.storms.partition_point(|s| s.0 <= b).max(lo);
        &self.storms[lo..hi]
    }

    fn total(&self) -> u64 {
        self.spans.last().map_or(0, |l| {
            self.before[self.before.len() - 1].saturating_add(l.1 - l.0)
        })
    }

    /// Paused time before `t`.
    fn until(&self, t: u64) -> u64 {
        let i = self.spans.partition_point(|s| s.0 < t);
        if i == 0 {
            return 0;
        }
        let s = self.spans[i - 1];
        self.before[i - 1].saturating_add(t.min(s.1) - s.0)
    }

    /// The first span overlapping [a, b].
    fn first_overlapping(&self, a: u64, b: u64) -> Option<(u64, u64, u64)> {
        let i = self.spans.partition_point(|s| s.1 < a);
        self.spans.get(i).copied().filter(|s| s.0 <= b)
    }

    /// Paused time within [a, b].
    fn within(&self, a: u64, b: u64) -> u64 {
        self.until(b).saturating_sub(self.until(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_union_measures_overlapping_pauses_once() {
        let u = Union::of(vec![(10, 20, 1), (15, 30, 2), (40, 50, 3)], 12);
        assert_eq!(u.total(), 30);
        assert_eq!(u.within(0, 100), 30);
        assert_eq!(u.within(25, 45), 10);
        assert_eq!(u.within(31, 39), 0);
        assert_eq!(u.spans.len(), 2);
        // Storms: (10, 30) only.
        assert_eq!(u.storms, vec![(10, 30, 1)]);
        assert_eq!(u.storms_within(0, 9), &[]);
        assert_eq!(u.storms_within(0, 10), &[(10, 30, 1)]);
        assert_eq!(u.storms_within(30, 100), &[(10, 30, 1)]);
        assert_eq!(u.storms_within(31, 100), &[]);
    }

    /// `storms_within` finds what a walk over every storm finds, for any query.
    #[test]
    fn storms_are_found_by_search_as_by_walking() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..200 {
            let v: Vec<(u64, u64, u64)> = (0..next() % 40)
                .map(|f| {
                    let a = next() % 1000;
                    (a, a + next() % 60, f)
                })
                .collect();
            let u = Union::of(v, 20);
            for _ in 0..50 {
                let a = next() % 1100;
                let b = a + next() % 300;
                let walked: Vec<_> = u
                    .spans
                    .iter()
                    .filter(|s| s.1 - s.0 > 20 && !(s.0 > b || s.1 < a))
                    .copied()
                    .collect();
                assert_eq!(
                    u.storms_within(a, b),
                    &walked[..],
                    "round {round}, [{a}, {b}]"
                );
            }
        }
    }

    #[test]
    fn a_pause_runs_its_quanta_unless_renewed_or_ended() {
        let mut s = PfcState::default();
        let bps = 100_000_000_000;
        let pfc = |t, q| Pause {
            frame: t,
            t,
            src: [2, 0, 0, 0, 0, 1],
            enable: 1 << 3,
            quanta: [0, 0, 0, q, 0, 0, 0, 0],
        };
        // 0xffff quanta at 100 Gb/s: 335,539 ns.
        s.note(&pfc(0, 0xffff), bps);
        s.note(&pfc(100_000, 0xffff), bps); // renewed
        s.note(&pfc(200_000, 0), bps); // ended
        s.note(&pfc(1_000_000, 0xffff), bps); // runs out
        let mut none: Vec<Box<Connection>> = Vec::new();
        let opts = Options {
            storm_ns: 300_000,
            ..Options::default()
        };
        let p = s.finish(10_000_000, &opts, &mut none, &mut 0);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].priority, 3);
        assert_eq!((p[0].frames, p[0].xoff), (4, 3));
        assert_eq!(p[0].paused_ns, 200_000 + 335_539);
        assert_eq!(p[0].storms, vec![(1_000_000, 335_539, 1_000_000)]);
    }

    /// Many connections beside many pause storms: each connection's storms and events are
    /// what a walk over every storm gives (checked on a sample), the events past the bounds
    /// counted as dropped. The walk over every storm per connection was the cost that grew
    /// with connections x storms (20,000 x 60,000 here); a connection now costs the storms
    /// it meets, up to the events it may keep.
    #[test]
    fn many_connections_beside_many_storms_get_the_walks_answer() {
        use crate::analyze::emit::{MAX_EVENTS, MAX_EVENTS_TOTAL};
        let bps = 100_000_000_000;
        let mut s = PfcState::default();
        let storms = 60_000u64;
        // A storm is 4 frames 1 us apart, each 0xffff quanta (335.5 us): 338.5 us paused,
        // then 1 ms without; every 7th frame from another of 5,000 senders.
        for k in 0..storms * 4 {
            let t = (k / 4) * 1_400_000 + (k % 4) * 1_000;
            let mut src = [2, 0, 0, 0, 0, 0];
            src[4..].copy_from_slice(&((k % 5_000) as u16).to_be_bytes());
            if k % 7 != 0 {
                src = [2, 0, 0, 0, 0xff, 0xff];
            }
            s.note(
                &Pause {
                    frame: k + 1,
                    t,
                    src,
                    enable: 1 << 3,
                    quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
                },
                bps,
            );
        }
        let end = storms * 1_400_000;
        let n = 20_000usize;
        let mut conns: Vec<Box<Connection>> = (0..n)
            .map(|i| {
                let mut c = Connection::default();
                let i = i as u64;
                // Lives from i x 3 ms for (i mod 50) x 1 ms (some meet no storm at all).
                c.sides[0].priority = Some(3);
                c.sides[0].packets = 1;
                c.sides[0].first_t = (i * 3_000_000) % end;
                c.sides[0].last_t = c.sides[0].first_t + (i % 50) * 1_000_000;
                Box::new(c)
            })
            .collect();
        let opts = Options {
            storm_ns: 300_000,
            ..Options::default()
        };
        let mut kept = 0;
        let p = s.finish(end, &opts, &mut conns, &mut kept);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].storms.len() as u64, storms);
        assert_eq!(p[0].senders, 5_001);
        assert!(kept <= MAX_EVENTS_TOTAL);
        let spans: Vec<(u64, u64)> = p[0].storms.iter().map(|s| (s.0, s.0 + s.1)).collect();
        let mut events = 0u64;
        for (i, c) in conns.iter().enumerate() {
            let (from, to) = (c.sides[0].first_t, c.sides[0].last_t);
            let walked = spans.iter().filter(|s| !(s.0 > to || s.1 < from)).count() as u64;
            assert_eq!(c.pfc.storms, walked, "connection {i}");
            assert_eq!(
                c.events.len() as u64 + c.events_dropped,
                walked,
                "connection {i}"
            );
            assert!(c.events.len() <= MAX_EVENTS);
            events += c.events.len() as u64;
        }
        assert_eq!(events, kept as u64);
    }
}
