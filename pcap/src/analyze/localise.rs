//! Several captures of the same traffic (both hosts, a host and a switch mirror): each RoCE
//! packet matched across two captures by what it is (addresses, destination QP, PSN, opcode,
//! and its ICRC and length, which tell resent copies of other bytes apart), each pair's clock
//! offset estimated, and every packet one capture has and the other lacks placed: lost
//! between the two capture points (seen upstream only), or dropped by the upstream capture
//! (seen downstream only).
//!
//! Two passes over each pair. The first reads the first [`PREFIX`] records of both and
//! matches them without a window: for a direction A -> B, `t_B - t_A` is the offset plus the
//! one-way delay, and for B -> A the offset minus it, so with both directions of a host pair
//! the offset is their mean (as NTP takes it), and with one direction only it is taken as
//! the smallest difference (the delay then counts as offset). The second pass merges the two
//! captures in time on the common clock and matches each packet within
//! [`LocaliseOptions::window_ns`]: memory is bounded by the packets of that window (and by
//! [`MAX_PENDING`]), not by the captures. A direction's upstream capture is the one that sees
//! its packets first.
use std::collections::VecDeque;
use std::net::IpAddr;

use super::pkt::Pkt;
use super::HashMap;

/// A set with the analysis's keyed hash.
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
use crate::reader::CaptureReader;
use crate::{link, DecodeError};

/// Records of each capture read to estimate the clock offset.
pub(super) const PREFIX: usize = 200_000;
/// Packets waiting for their match, per capture at most (the oldest are given up early).
pub(super) const MAX_PENDING: usize = 1 << 20;
/// Directions (sender, receiver) localised per pair; the packets of others are counted in
/// [`Localisation::untracked`].
pub const MAX_LOCALISED: usize = 1 << 16;
/// Frame numbers listed per direction.
const FRAMES_LISTED: usize = 100;
/// How far after a downstream packet (on the common clock) an upstream copy may be and still
/// be its copy: the error allowed to the offset's estimate, which is that of the
/// equal-delays assumption for the least-queued packets. A copy later than that was sent
/// after the packet arrived (a resend of what the upstream capture missed): not its copy.
/// Each downstream packet is decided this long after its time.
const OFFSET_ERROR_NS: i64 = 1_000;
/// Flows (direction, destination QP) whose last match is kept for [`take_likeliest`].
const FLOWS: usize = 1 << 20;
/// Waiting copies of one packet weighed against each other for a match (the latest).
const CANDIDATES: usize = 64;
/// Delay samples kept per direction (every k-th, k doubling as it fills).
const SAMPLES: usize = 1 << 14;

/// Options of [`localise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocaliseOptions {
    /// A packet not matched within this time (on the common clock) is missing from the other
    /// capture (ns).
    pub window_ns: u64,
}

impl Default for LocaliseOptions {
    fn default() -> Self {
        Self {
            window_ns: 10_000_000,
        }
    }
}

/// What two captures say about one direction of traffic (`type: loss_localisation`).
#[derive(Debug, Clone, PartialEq)]
pub struct Localisation {
    /// The upstream capture (sees the packets first), as named.
    pub from: String,
    /// The downstream capture.
    pub to: String,
    /// Sender address.
    pub src: IpAddr,
    /// Receiver address.
    pub dst: IpAddr,
    /// Packets in both.
    pub matched: u64,
    /// Packets upstream only: lost between the two capture points.
    pub lost_between: u64,
    /// Packets downstream only: the upstream capture dropped them (not a network loss).
    pub only_downstream: u64,
    /// The downstream capture's clock minus the upstream's, ns.
    pub clock_offset_ns: i64,
    /// `true` when no host pair had traffic both ways: the offset then holds the delay.
    pub offset_one_way: bool,
    /// One-way delay from `from` to `to` (on the common clock) at p50 and p99, ns.
    pub delay_ns: (i64, i64),
    /// The first frames (numbers in `from`) lost between.
    pub frames: Vec<u64>,
    /// The first frames (numbers in `to`) seen downstream only.
    pub frames_downstream: Vec<u64>,
    /// When the packets of [`Localisation::frames`] passed `from` (ns since the Unix epoch,
    /// on `from`'s clock).
    pub lost_at: Vec<i64>,
    /// Packets of this pair of captures in directions past [`MAX_LOCALISED`], not
    /// localised (the same count on every direction of the pair).
    pub untracked: u64,
}

/// What identifies a packet across captures.
type Key = (IpAddr, IpAddr, u32, u32, u8, u64);

fn key(p: &Pkt) -> Key {
    (p.src, p.dst, p.dest_qp, p.psn, p.opcode.0, p.hash)
}

/// Reads the RoCE packets of a capture: (absolute time ns, frame number, packet).
struct Source<R: std::io::Read> {
    reader: CaptureReader<R>,
    frame: u64,
}

impl<R: std::io::Read> Source<R> {
    fn next(&mut self) -> Result<Option<(i64, Pkt)>, DecodeError> {
        loop {
            let Some(rec) = self.reader.next_record().map_err(DecodeError::Read)? else {
                return Ok(None);
            };
            self.frame += 1;
            let t = rec.ts.as_ns();
            if let Ok(f) = link::parse(rec.link_type, rec.data) {
                if let Some(p) = Pkt::of(self.frame, 0, &f) {
                    return Ok(Some((t, p)));
                }
            }
        }
    }
}

fn open(path: &str) -> Result<Source<std::io::BufReader<std::fs::File>>, DecodeError> {
    let f = std::fs::File::open(path).map_err(|source| DecodeError::Open {
        name: path.to_string(),
        source,
    })?;
    Ok(Source {
        reader: CaptureReader::new(std::io::BufReader::with_capacity(1 << 20, f), path)?,
        frame: 0,
    })
}

/// Delay samples, decimated to stay bounded.
#[derive(Debug, Default)]
struct Samples {
    v: Vec<i64>,
    stride: u64,
    seen: u64,
}

impl Samples {
    fn add(&mut self, d: i64) {
        self.seen += 1;
        let stride = self.stride.max(1);
        if !self.seen.is_multiple_of(stride) {
            return;
        }
        if self.v.len() >= SAMPLES {
            // Keep every other one; take one in twice as many from now on.
            let kept: Vec<i64> = self.v.iter().copied().step_by(2).collect();
            self.v = kept;
            self.stride = stride * 2;
        }
        self.v.push(d);
    }
    fn quantile(&self, q: f64) -> i64 {
        if self.v.is_empty() {
            return 0;
        }
        let mut v = self.v.clone();
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q).round() as usize]
    }
}

/// One direction's tallies in the second pass.
#[derive(Debug)]
struct DirTally {
    src: IpAddr,
    dst: IpAddr,
    matched: u64,
    only: [u64; 2],
    frames: [Vec<u64>; 2],
    times: [Vec<i64>; 2],
    /// `t_y - t_x - offset` of matched packets.
    delays: Samples,
    /// Its upstream capture (0: x, 1: y).
    up: usize,
    /// The last copy matched, (its upstream time, its delay).
    last: Option<(i64, i64)>,
}

impl DirTally {
    fn new(src: IpAddr, dst: IpAddr, up: usize) -> Self {
        Self {
            src,
            dst,
            matched: 0,
            only: [0; 2],
            frames: [Vec::new(), Vec::new()],
            times: [Vec::new(), Vec::new()],
            delays: Samples::default(),
            up,
            last: None,
        }
    }

    fn unmatched(&mut self, side: usize, frame: u64, t: i64) {
        self.only[side] += 1;
        if self.frames[side].len() < FRAMES_LISTED {
            self.frames[side].push(frame);
            self.times[side].push(t);
        }
    }
}

/// Takes from `q` (the upstream copies of one packet waiting, in time order) the copy that
/// its downstream packet at `td` is. Resends of the same bytes (go-back-N rounds, timeouts)
/// put several in the window, and only one of them got through for each downstream copy.
/// Copies up to `slack` after `td` count (the offset's error may put the right one there).
/// `prev` is the last copy matched of the same flow (or direction): its upstream time and
/// delay. Along one path packets queue behind each other: a later downstream packet is a
/// later upstream copy, and the delay changes between two packets by little more than the
/// time between their sends (it can fall by at most that, or the later would overtake the
/// earlier). So the likeliest copy is one sent after `prev` whose change of delay is
/// smallest for the time since `prev`. With nothing matched before, the latest copy sent
/// before `td` (an original lost, its resend arrived).
fn take_likeliest(
    q: &mut VecDeque<(i64, u64)>,
    td: i64,
    slack: i64,
    prev: Option<(i64, i64)>,
) -> Option<(i64, u64)> {
    // Copies in reach; of those, the latest few only (a capture may repeat one packet
    // without end). Those sent before the packet arrived come first; one after it (by at
    // most the slack) only when there is none: the offset's error put it there.
    let end = q.partition_point(|c| c.0 <= td.saturating_add(slack));
    let start = end.saturating_sub(CANDIDATES);
    if start == end {
        return None;
    }
    let mid = q.partition_point(|c| c.0 <= td).clamp(start, end);
    if start == mid {
        return q.remove(mid);
    }
    let i = match prev {
        None => mid - 1,
        Some((pu, pd)) => {
            let after = q.range(start..mid).position(|c| c.0 >= pu);
            let from = after.map_or(start, |i| start + i);
            let score = |c: i64| {
                let change = td.saturating_sub(c).abs_diff(pd) as f64;
                change / (c.abs_diff(pu) as f64 + 1_000.0)
            };
            (from..mid)
                .min_by(|&i, &j| score(q[i].0).total_cmp(&score(q[j].0)))
                .unwrap_or(from)
        }
    };
    q.remove(i)
}

/// What identifies a packet in the second pass: its direction's index, destination QP, PSN,
/// opcode, and its bytes' hash.
type Key2 = (u32, u32, u32, u8, u64);

/// The upstream copies of one packet waiting for their downstream match, (common-clock time,
/// frame) in time order: one (the usual case, kept without allocating) or several (resends).
#[derive(Debug)]
enum Copies {
    One(i64, u64),
    Many(VecDeque<(i64, u64)>),
}

/// The state of the second pass.
struct Matching {
    dirs: Vec<DirTally>,
    waiting: HashMap<Key2, Copies>,
    /// Each flow's (direction, destination QP) last copy matched, (its upstream time, its
    /// delay), for the first [`FLOWS`].
    flows: HashMap<(u32, u32), (i64, i64)>,
    slack: i64,
}

impl Matching {
    fn wait(&mut self, k: Key2, t: i64, frame: u64) {
        match self.waiting.entry(k) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Copies::One(t, frame));
            }
            std::collections::hash_map::Entry::Occupied(mut o) => match o.get_mut() {
                Copies::Many(q) => q.push_back((t, frame)),
                &mut Copies::One(a, b) => {
                    o.insert(Copies::Many(VecDeque::from([(a, b), (t, frame)])));
                }
            },
        }
    }

    /// Decides a downstream packet: matched with the likeliest upstream copy, or seen
    /// downstream only (when the upstream capture `covers` its time).
    fn decide(&mut self, (td, frame, k): Deferred, covers: impl Fn(usize, i64) -> bool) {
        let reach = td.saturating_add(self.slack);
        let found = match self.waiting.entry(k) {
            std::collections::hash_map::Entry::Vacant(_) => None,
            std::collections::hash_map::Entry::Occupied(mut o) => match o.get_mut() {
                &mut Copies::One(c, f) => (c <= reach).then(|| {
                    o.remove();
                    (c, f)
                }),
                Copies::Many(q) => {
                    // Only resends need the flow's history.
                    let prev = self.flows.get(&(k.0, k.1)).copied();
                    let prev = prev.or(self.dirs[k.0 as usize].last);
                    let r = take_likeliest(q, td, self.slack, prev);
                    if q.is_empty() {
                        o.remove();
                    }
                    r
                }
            },
        };
        let d = &mut self.dirs[k.0 as usize];
        let up = d.up;
        let Some((tu, _)) = found else {
            if covers(1 - up, td) {
                d.unmatched(1 - up, frame, td);
            }
            return;
        };
        d.matched += 1;
        let delay = td.saturating_sub(tu);
        d.delays.add(if up == 0 {
            delay
        } else {
            delay.saturating_neg()
        });
        d.last = Some((tu, delay));
        if self.flows.len() < FLOWS {
            self.flows.insert((k.0, k.1), (tu, delay));
        } else if let Some(f) = self.flows.get_mut(&(k.0, k.1)) {
            *f = (tu, delay);
        }
    }

    /// Gives up on the upstream copy of `ke` at `te` if no downstream packet took it: lost
    /// between (when the downstream capture `covers` its time).
    fn give_up(&mut self, te: i64, ke: Key2, covers: impl Fn(usize, i64) -> bool) {
        let std::collections::hash_map::Entry::Occupied(mut o) = self.waiting.entry(ke) else {
            return;
        };
        // The oldest copy waiting is this one unless a downstream packet took it.
        let frame = match o.get_mut() {
            &mut Copies::One(c, f) => {
                if c != te {
                    return;
                }
                o.remove();
                f
            }
            Copies::Many(q) => {
                if q.front().is_none_or(|e| e.0 != te) {
                    return;
                }
                let f = q.pop_front().map_or(0, |e| e.1);
                if q.is_empty() {
                    o.remove();
                }
                f
            }
        };
        let d = &mut self.dirs[ke.0 as usize];
        if covers(d.up, te) {
            d.unmatched(d.up, frame, te);
        }
    }
}

/// What the first pass found: the clock offset of `y` against `x` (ns), whether it rests
/// on one direction only, and each direction's upstream capture (0: x, 1: y).
struct FirstPass {
    offset: i64,
    one_way: bool,
    upstream: HashMap<(IpAddr, IpAddr), usize>,
}

/// Estimates the clock offset from the first records of both captures. Each packet's first
/// copy in `x` is paired with its first copy in `y`: for a direction that `x` sees first,
/// `t_y - t_x` is the offset plus its one-way delay, for one `y` sees first the offset less
/// it. As NTP's clock filter does, the estimate takes the packets that queued least in each
/// direction (the 1st percentile of the first, the 99th of the second: queues only add
/// delay) and their mean, so that queueing on one direction only (data one way, ACKs the
/// other) does not bias it, nor do the few pairs a lost or missed first copy spoils (a resend
/// paired with the original).
fn first_pass(x: &str, y: &str) -> Result<FirstPass, DecodeError> {
    let (mut sx, mut sy) = (open(x)?, open(y)?);
    let mut first: HashMap<Key, i64> = HashMap::default();
    for _ in 0..PREFIX {
        let Some((t, p)) = sx.next()? else { break };
        first.entry(key(&p)).or_insert(t);
    }
    let mut diffs: HashMap<(IpAddr, IpAddr), Samples> = HashMap::default();
    for _ in 0..PREFIX {
        let Some((t, p)) = sy.next()? else { break };
        // Each key once: its first copy in y.
        if let Some(tx) = first.remove(&key(&p)) {
            diffs
                .entry((p.src, p.dst))
                .or_default()
                .add(t.saturating_sub(tx));
        }
    }
    let medians: HashMap<(IpAddr, IpAddr), i64> =
        diffs.iter().map(|(k, s)| (*k, s.quantile(0.5))).collect();
    let mut both: Vec<i64> = diffs
        .iter()
        .filter_map(|(&(a, b), s)| {
            let r = diffs.get(&(b, a))?;
            // Each host pair once, from the direction with the larger median (x sees it
            // first: its differences are offset + delay).
            if (medians[&(a, b)], (a, b)) < (medians[&(b, a)], (b, a)) {
                return None;
            }
            Some(s.quantile(0.01) / 2 + r.quantile(0.99) / 2)
        })
        .collect();
    let (offset, one_way) = if both.is_empty() {
        (medians.values().copied().min().unwrap_or(0), true)
    } else {
        both.sort_unstable();
        (both[both.len() / 2], false)
    };
    let upstream = medians
        .iter()
        .map(|(&k, &m)| (k, usize::from(m < offset)))
        .collect();
    Ok(FirstPass {
        offset,
        one_way,
        upstream,
    })
}

/// A downstream packet waiting for its decision: (common-clock time, frame, its key).
type Deferred = (i64, u64, Key2);

/// Matches the captures `x` and `y` (paths; names as given) and places every unmatched
/// packet, per direction with traffic.
///
/// Each direction's upstream capture comes from the first pass (a direction first seen
/// later: the capture that shows its first packet first). Upstream copies wait; each
/// downstream packet is decided a slack after its time (1 µs, the error allowed to the
/// offset's estimate), so that an upstream copy the offset's error puts just after it still
/// counts, and takes the likeliest of the copies waiting (sent after the flow's last match,
/// its delay nearest to that match's for the time between them). A downstream packet that
/// finds none was missed by the upstream capture; an upstream copy that no packet took
/// within the window (and the slack) was lost between. Near either capture's ends, where the
/// other could not have seen it, nothing is counted.
pub fn localise_pair(
    x: &str,
    y: &str,
    opts: LocaliseOptions,
) -> Result<Vec<Localisation>, DecodeError> {
    let FirstPass {
        offset,
        one_way,
        upstream,
    } = first_pass(x, y)?;
    let w = i64::try_from(opts.window_ns).unwrap_or(i64::MAX);
    let slack = OFFSET_ERROR_NS.min(w);
    let mut srcs = [open(x)?, open(y)?];
    let mut next = [srcs[0].next()?, srcs[1].next()?];
    // Common clock: x's.
    let common = |side: usize, t: i64| {
        if side == 0 {
            t
        } else {
            t.saturating_sub(offset)
        }
    };
    let mut first_t = [None::<i64>; 2];
    let mut last_t = [i64::MIN; 2];
    let mut ended = [next[0].is_none(), next[1].is_none()];
    let mut m = Matching {
        dirs: Vec::new(),
        waiting: HashMap::default(),
        flows: HashMap::default(),
        slack,
    };
    let mut index: HashMap<(IpAddr, IpAddr), u32> = HashMap::default();
    let mut expiry: VecDeque<(i64, Key2)> = VecDeque::new();
    let mut deferred: VecDeque<Deferred> = VecDeque::new();
    let mut untracked = 0u64;
    // Whether the capture other than `s` covers time `t` with a window's margin (it could
    // have seen a packet there).
    let covers =
        |s: usize, t: i64, first_t: &[Option<i64>; 2], last_t: &[i64; 2], ended: &[bool; 2]| {
            let o = 1 - s;
            first_t[o].is_some_and(|f| t >= f.saturating_add(w))
                && (!ended[o] || t.saturating_add(w) <= last_t[o])
        };
    loop {
        let side = match (&next[0], &next[1]) {
            (None, None) => break,
            (Some(_), None) => 0,
            (None, Some(_)) => 1,
            (Some(a), Some(b)) => usize::from(common(1, b.0) < common(0, a.0)),
        };
        let Some((t_raw, p)) = next[side].take() else {
            break;
        };
        next[side] = srcs[side].next()?;
        ended[side] = next[side].is_none();
        let di = match index.get(&(p.src, p.dst)) {
            Some(&i) => i,
            None if m.dirs.len() >= MAX_LOCALISED => {
                untracked += 1;
                continue;
            }
            None => {
                let up = upstream.get(&(p.src, p.dst)).copied().unwrap_or(side);
                m.dirs.push(DirTally::new(p.src, p.dst, up));
                let i = (m.dirs.len() - 1) as u32;
                index.insert((p.src, p.dst), i);
                i
            }
        };
        let t = common(side, t_raw);
        first_t[side].get_or_insert(t);
        last_t[side] = last_t[side].max(t);
        let k = (di, p.dest_qp, p.psn, p.opcode.0, p.hash);
        if side == m.dirs[di as usize].up {
            m.wait(k, t, p.frame);
            expiry.push_back((t, k));
        } else {
            deferred.push_back((t, p.frame, k));
        }
        // Decide the downstream packets whose slack has passed.
        while let Some(&dd) = deferred.front() {
            if dd.0.saturating_add(slack) > t && deferred.len() <= MAX_PENDING {
                break;
            }
            deferred.pop_front();
            m.decide(dd, |s, t| covers(s, t, &first_t, &last_t, &ended));
        }
        // Give up on upstream copies no downstream packet took.
        while let Some(&(te, ke)) = expiry.front() {
            let overdue =
                te < t.saturating_sub(w).saturating_sub(slack) || expiry.len() > MAX_PENDING;
            if !overdue {
                break;
            }
            expiry.pop_front();
            m.give_up(te, ke, |s, t| covers(s, t, &first_t, &last_t, &ended));
        }
    }
    ended = [true; 2];
    for dd in std::mem::take(&mut deferred) {
        m.decide(dd, |s, t| covers(s, t, &first_t, &last_t, &ended));
    }
    for (te, ke) in std::mem::take(&mut expiry) {
        m.give_up(te, ke, |s, t| covers(s, t, &first_t, &last_t, &ended));
    }
    let mut out: Vec<Localisation> = m
        .dirs
        .into_iter()
        // A direction only one capture holds does not pass the other capture's point.
        .filter(|d| d.matched > 0)
        .map(|mut d| {
            let (src, dst) = (d.src, d.dst);
            let x_up = d.up == 0;
            let (up, down) = if x_up { (0, 1) } else { (1, 0) };
            let sign: i64 = if x_up { 1 } else { -1 };
            let (p50, p99) = if x_up {
                (d.delays.quantile(0.5), d.delays.quantile(0.99))
            } else {
                (
                    d.delays.quantile(0.5).saturating_neg(),
                    d.delays.quantile(0.01).saturating_neg(),
                )
            };
            let names = [x.to_string(), y.to_string()];
            // Back on `from`'s own clock (the common clock is x's).
            let back = if up == 0 { 0 } else { offset };
            let lost_at = d.times[up].iter().map(|t| t.saturating_add(back)).collect();
            Localisation {
                from: names[up].clone(),
                to: names[down].clone(),
                src,
                dst,
                matched: d.matched,
                lost_between: d.only[up],
                only_downstream: d.only[down],
                clock_offset_ns: offset.saturating_mul(sign),
                offset_one_way: one_way,
                delay_ns: (p50, p99),
                frames: std::mem::take(&mut d.frames[up]),
                frames_downstream: std::mem::take(&mut d.frames[down]),
                lost_at,
                untracked,
            }
        })
        .collect();
    out.sort_by_key(|l| (l.src, l.dst));
    Ok(out)
}

/// The directions (sender, receiver) whose RoCE packets a capture holds, up to
/// [`MAX_LOCALISED`] of them (a capture with more is taken to hold every direction: it is
/// paired with every other).
fn directions(path: &str) -> Result<Option<HashSet<(IpAddr, IpAddr)>>, DecodeError> {
    let mut src = open(path)?;
    let mut held = HashSet::default();
    while let Some((_, p)) = src.next()? {
        if held.len() >= MAX_LOCALISED && !held.contains(&(p.src, p.dst)) {
            return Ok(None);
        }
        held.insert((p.src, p.dst));
    }
    Ok(Some(held))
}

/// The pairs (i, j), i < j, of captures that hold a direction in common: only those can match
/// a packet. A capture whose directions were not all followed pairs with every other.
fn sharing(held: &[Option<HashSet<(IpAddr, IpAddr)>>]) -> Vec<(usize, usize)> {
    // Each direction's captures, so that a pair is found through what it shares rather than
    // by holding every two captures' sets against each other.
    let mut holders: HashMap<(IpAddr, IpAddr), Vec<usize>> = HashMap::default();
    for (i, h) in held.iter().enumerate() {
        for d in h.iter().flatten() {
            holders.entry(*d).or_default().push(i);
        }
    }
    let mut pairs: HashSet<(usize, usize)> = HashSet::default();
    for hs in holders.values() {
        for (a, &i) in hs.iter().enumerate() {
            for &j in &hs[a + 1..] {
                pairs.insert((i, j));
            }
        }
    }
    let whole: Vec<usize> = (0..held.len()).filter(|&i| held[i].is_none()).collect();
    for &i in &whole {
        for j in 0..held.len() {
            if j != i {
                pairs.insert((i.min(j), i.max(j)));
            }
        }
    }
    let mut pairs: Vec<(usize, usize)> = pairs.into_iter().collect();
    pairs.sort_unstable();
    pairs
}

/// [`localise_pair`] for every pair of `paths` that holds a direction of traffic in common,
/// in order: captures of unrelated traffic are read once each (for their directions) and
/// never matched.
pub fn localise(paths: &[&str], opts: LocaliseOptions) -> Result<Vec<Localisation>, DecodeError> {
    let held = paths
        .iter()
        .map(|p| directions(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for (i, j) in sharing(&held) {
        out.extend(localise_pair(paths[i], paths[j], opts)?);
    }
    Ok(out)
}

/// The JSON object of a localisation (`type: loss_localisation`).
pub fn localisation_json(l: &Localisation) -> serde_json::Value {
    let us = |n: i64| n as f64 / 1e3;
    serde_json::json!({
        "type": "loss_localisation",
        "from": l.from,
        "to": l.to,
        "direction": format!("{} -> {}", l.src, l.dst),
        "matched": l.matched,
        "lost_between": l.lost_between,
        "only_downstream": l.only_downstream,
        "clock_offset_us": us(l.clock_offset_ns),
        "offset_one_way": l.offset_one_way,
        "one_way_delay_us": {"p50": us(l.delay_ns.0), "p99": us(l.delay_ns.1)},
        "frames": l.frames,
        "frames_downstream": l.frames_downstream,
        "untracked": l.untracked,
    })
}

/// The text lines of the localisations.
pub fn localisation_text(ls: &[Localisation]) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    for l in ls {
        let _ = writeln!(
            o,
            "\nloss localisation {} -> {} (from {} to {}): {} matched, {} lost between the two capture points, {} seen downstream only (dropped by the capture at {}); clock offset {:.3} us{}, one-way delay p50 {:.3} us, p99 {:.3} us",
            l.src,
            l.dst,
            l.from,
            l.to,
            l.matched,
            l.lost_between,
            l.only_downstream,
            l.from,
            l.clock_offset_ns as f64 / 1e3,
            if l.offset_one_way {
                " (traffic one way only: it holds the delay)"
            } else {
                ""
            },
            l.delay_ns.0 as f64 / 1e3,
            l.delay_ns.1 as f64 / 1e3,
        );
        if l.untracked > 0 {
            let _ = writeln!(
                o,
                "  ({} packets of directions past the first {MAX_LOCALISED} of this pair not localised)",
                l.untracked
            );
        }
        if !l.frames.is_empty() {
            let list: Vec<String> = l.frames.iter().map(u64::to_string).collect();
            let _ = writeln!(o, "  lost: frames {} of {}", list.join(", "), l.from);
        }
    }
    o
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A ladder diagram of a direction's first lost packets (SVG): the upstream capture point on
/// the left, the downstream one on the right, time going down (in order, not to scale: the
/// labels give the times). A packet both saw crosses at the median one-way delay; each lost
/// one stops between the two points.
pub(super) fn ladder_svg(l: &Localisation) -> String {
    use std::fmt::Write as _;
    const SHOWN: usize = 10;
    let (left, right, top, row) = (170.0, 530.0, 60.0, 34.0);
    let rows = l.frames.len().min(SHOWN) + 1;
    let height = top + row * rows as f64 + 30.0;
    let mut o = String::new();
    let _ = write!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"700\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = write!(
        o,
        "<text x=\"{left}\" y=\"20\" text-anchor=\"middle\">{}</text><text x=\"{right}\" y=\"20\" text-anchor=\"middle\">{}</text>",
        escape(&l.from),
        escape(&l.to)
    );
    let _ = write!(
        o,
        "<text x=\"350\" y=\"40\" text-anchor=\"middle\">{} -&gt; {}</text>",
        l.src, l.dst
    );
    for x in [left, right] {
        let _ = write!(
            o,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#444\"/>",
            top - 10.0,
            height - 10.0
        );
    }
    // A packet both saw, at the median delay.
    let y = top + row * 0.5;
    let _ = write!(
        o,
        "<line x1=\"{left}\" y1=\"{y}\" x2=\"{right}\" y2=\"{}\" stroke=\"#070\"/><text x=\"{}\" y=\"{}\" fill=\"#070\">{} matched, one-way delay p50 {:.3} us</text>",
        y + 10.0,
        right + 8.0,
        y + 14.0,
        l.matched,
        l.delay_ns.0 as f64 / 1e3
    );
    for (i, (f, t)) in l.frames.iter().zip(&l.lost_at).take(SHOWN).enumerate() {
        let y = top + row * (i as f64 + 1.5);
        let mid = (left + right) / 2.0;
        let secs = t.div_euclid(1_000_000_000);
        let ns = t.rem_euclid(1_000_000_000);
        let _ = write!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">frame {f}, {:02}.{ns:09}</text><line x1=\"{left}\" y1=\"{y}\" x2=\"{mid}\" y2=\"{}\" stroke=\"#b00\"/><text x=\"{}\" y=\"{}\" fill=\"#b00\" font-size=\"16\">&#10005;</text>",
            left - 8.0,
            y + 4.0,
            secs % 60,
            y + 5.0,
            mid - 5.0,
            y + 11.0
        );
    }
    if l.frames.len() > SHOWN {
        let _ = write!(
            o,
            "<text x=\"350\" y=\"{}\" text-anchor=\"middle\">and {} more lost</text>",
            height - 14.0,
            l.lost_between.saturating_sub(SHOWN as u64)
        );
    }
    o.push_str("</svg>");
    o
}

/// The HTML section of the localisations: one part per pair of captures, with a table of its
/// directions and the ladder of each direction that lost packets.
pub(super) fn html_section(ls: &[Localisation]) -> String {
    use std::fmt::Write as _;
    if ls.is_empty() {
        return String::new();
    }
    let mut o = String::from("<h2>Loss localisation</h2>");
    // One section per pair of captures (in the order the pairs first come), each with its
    // directions' table and the ladder of each direction that lost packets.
    let pair = |l: &Localisation| {
        if l.from <= l.to {
            (l.from.clone(), l.to.clone())
        } else {
            (l.to.clone(), l.from.clone())
        }
    };
    let mut pairs: Vec<(String, String)> = Vec::new();
    for l in ls {
        let p = pair(l);
        if !pairs.contains(&p) {
            pairs.push(p);
        }
    }
    for p in &pairs {
        let of_pair: Vec<&Localisation> = ls.iter().filter(|l| pair(l) == *p).collect();
        let _ = write!(
            o,
            "<h3>{} &#8596; {}</h3><table><tr><th>from (upstream)</th><th>to</th><th>direction</th><th>matched</th><th>lost between</th><th>downstream only</th><th>clock offset</th><th>one-way delay p50 / p99</th></tr>",
            escape(&p.0),
            escape(&p.1)
        );
        for l in &of_pair {
            let _ = write!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{} -&gt; {}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3} us{}</td><td>{:.3} / {:.3} us</td></tr>",
                escape(&l.from),
                escape(&l.to),
                l.src,
                l.dst,
                l.matched,
                l.lost_between,
                l.only_downstream,
                l.clock_offset_ns as f64 / 1e3,
                if l.offset_one_way { " (one way: holds the delay)" } else { "" },
                l.delay_ns.0 as f64 / 1e3,
                l.delay_ns.1 as f64 / 1e3
            );
        }
        o.push_str("</table>");
        for l in of_pair.iter().filter(|l| !l.frames.is_empty()) {
            o.push_str(&ladder_svg(l));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copies(ts: &[i64]) -> VecDeque<(i64, u64)> {
        ts.iter()
            .enumerate()
            .map(|(i, &t)| (t, i as u64 + 1))
            .collect()
    }

    #[test]
    fn only_captures_sharing_a_direction_are_paired() {
        let ip = |x: u8| IpAddr::from([10, 0, 0, x]);
        let set = |ds: &[(u8, u8)]| Some(ds.iter().map(|&(a, b)| (ip(a), ip(b))).collect());
        let held = vec![
            set(&[(1, 2), (2, 1)]),
            set(&[(3, 4)]),
            set(&[(2, 1)]),
            set(&[(5, 6)]),
            None,
            set(&[(3, 4), (7, 8)]),
        ];
        assert_eq!(
            sharing(&held),
            vec![(0, 2), (0, 4), (1, 4), (1, 5), (2, 4), (3, 4), (4, 5)]
        );
        // Sixty captures of unrelated traffic: no pair.
        let apart: Vec<_> = (0..60u8).map(|i| set(&[(i, i + 100)])).collect();
        assert!(sharing(&apart).is_empty());
    }

    #[test]
    fn one_copy_before_the_packet_is_its_copy() {
        let mut q = copies(&[1_000]);
        assert_eq!(take_likeliest(&mut q, 3_000, 1_000, None), Some((1_000, 1)));
        assert!(q.is_empty());
    }

    #[test]
    fn with_nothing_matched_before_the_latest_copy_sent_before_the_packet() {
        // The original (frame 1) was lost; its resend (frame 2) arrived 2 us later.
        let mut q = copies(&[1_000, 30_000]);
        assert_eq!(
            take_likeliest(&mut q, 32_000, 1_000, None),
            Some((30_000, 2))
        );
        assert_eq!(q, copies(&[1_000]));
    }

    #[test]
    fn the_copy_whose_delay_fits_the_flows_last_match() {
        // The flow's last packet left at 100 us and took 23.5 us (a full queue); the
        // packet arrives at 120.56 us. Copy 1 (left at 100.3 us) would have taken 20.3 us,
        // copy 2 (at 119.4 us) 1.2 us. The queue drained in the 19 us between: from the
        // last match, copy 1 changes the delay by 3.2 us in 0.3 us, copy 2 by 22.3 us in
        // 19.4 us, the rate at which a queue drains.
        let mut q = copies(&[100_300, 119_400]);
        let prev = Some((100_000, 23_500));
        assert_eq!(
            take_likeliest(&mut q, 120_560, 1_000, prev),
            Some((119_400, 2))
        );
        // The same copies, the packet at 123.8 us: copy 1's 23.5 us is the queue unchanged.
        let mut q = copies(&[100_300, 119_400]);
        assert_eq!(
            take_likeliest(&mut q, 123_800, 1_000, prev),
            Some((100_300, 1))
        );
    }

    #[test]
    fn a_copy_sent_after_the_packet_arrived_counts_only_within_the_slack() {
        let mut q = copies(&[5_800]);
        assert_eq!(take_likeliest(&mut q, 5_000, 1_000, None), Some((5_800, 1)));
        let mut q = copies(&[6_200]);
        assert_eq!(take_likeliest(&mut q, 5_000, 1_000, None), None);
        assert_eq!(q.len(), 1);
        // One before the packet is preferred to one after it.
        let mut q = copies(&[4_000, 5_500]);
        assert_eq!(
            take_likeliest(&mut q, 5_000, 1_000, Some((5_400, 100))),
            Some((4_000, 1))
        );
    }

    #[test]
    fn only_the_latest_copies_are_weighed() {
        // A capture repeating one packet without end: the choice looks at the last few.
        let ts: Vec<i64> = (0..10_000).map(|i| i * 10).collect();
        let mut q = copies(&ts);
        let got = take_likeliest(&mut q, 100_000, 1_000, Some((0, 0))).unwrap();
        assert!(got.1 > (10_000 - CANDIDATES) as u64, "{got:?}");
        assert_eq!(q.len(), 9_999);
    }
}
