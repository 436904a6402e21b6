//! The requester's side of a direction: its request stream ([`ReqState`]: PSNs unwrapped,
//! what is outstanding, gaps, READ spans, the last NAKs and responses), and the request
//! handler: new PSNs and messages ([`new_request`]), gaps, stalls, network duplicates,
//! reordering, and retransmissions with their episode's cause and the two restart rules.
use std::collections::VecDeque;

use roce_proto::opcode::Class;
use roce_proto::Psn;

use super::emit::{Cause, Emitter, EventKind};
use super::pkt::Pkt;
use super::rules::Rule;
use super::side::SLICES_MAX;
use super::Options;

/// The shortest local ACK timeout, 4.096 us x 2^1: a retransmission sooner after the last
/// progress is not a timeout.
const MIN_ACK_TIMEOUT_NS: u64 = 8_192;

/// The length [`ReqState::done_reads`] gives an atomic.
pub(super) const ATOMIC: u32 = u32::MAX;

/// A network duplicate comes within this many request packets of its original.
const DUPLICATE_SPAN: u64 = 8;

/// One outstanding request (for RTT, READ latency and restart checks).
#[derive(Debug, Clone, Copy)]
pub(super) struct Out {
    pub(super) psn: u64,
    pub(super) t: u64,
    pub(super) retx: bool,
    pub(super) read_len: Option<u32>,
    pub(super) read_span: u64,
    /// An atomic (answered by an atomic ACK), not a READ.
    pub(super) atomic: bool,
}

/// The request stream of one direction.
///
/// In declaration order (`repr(C)`): what every request packet reads comes first, through
/// `max_read_span` (192 bytes, three or four cache lines, all read ahead by
/// [`ReqState::touch`]); the rest only on losses, READs and responses. Left to the
/// compiler, the fields every packet reads lay over six lines of the eight.
#[derive(Debug, Default)]
#[repr(C)]
pub(super) struct ReqState {
    /// Highest request PSN, unwrapped.
    pub(super) highest: u64,
    /// Request packets of this direction so far (the ring's last field: which one it was).
    count: u64,
    /// Time of the previous request packet.
    last_req_t: u64,
    pub(super) last_progress_t: u64,
    /// Bytes of the current message.
    msg_bytes: u64,
    /// Rounds of the current retransmission episode with no new PSN since it began: how
    /// often the requester went back to the episode's first PSN (its retries, when nothing
    /// answers), with that PSN and the first and last round's times (`round_psn` and
    /// after).
    pub(super) rounds: u64,
    /// Time of the current message's first packet.
    msg_start: Option<u64>,
    /// When the highest request is a READ: the fewest and the most further PSNs its
    /// responses use (its length over the largest and the smallest path MTU, 4096 and 256).
    pub(super) read_extra: Option<(u64, u64)>,
    /// The last network duplicate: (the PSN after it, frame), until the next request packet shows
    /// whether it began a run of resent packets.
    last_dup: Option<(u64, u64, u64)>,
    /// The path MTU: the largest payload of a First or Middle packet so far (0: none yet).
    mtu: u32,
    pub(super) started: bool,
    pub(super) in_episode: bool,
    /// PSNs [first, highest] seen: a ring of the last `RING` (psn, t, hash, times sent,
    /// request number) by psn.
    ring: Vec<(u64, u64, u64, u16, u32)>,
    /// Requests not yet answered, in PSN order, one per PSN (so found by binary search).
    pub(super) outstanding: VecDeque<Out>,
    /// No outstanding READ or atomic spans more PSNs than this (an upper bound, never
    /// lowered: it limits how far back a search for the READ holding a PSN looks).
    max_read_span: u64,
    /// Open gaps: (first missing, last missing, time seen, frame).
    pub(super) gaps: VecDeque<(u64, u64, u64, u64)>,
    /// Highest PSN acknowledged (unwrapped), when an ACK was seen.
    pub(super) acked: Option<u64>,
    pub(super) last_ack_t: u64,
    pub(super) last_nak_seq: Option<(u64, u64, u64)>, // (psn, t, frame)
    /// Time of the last response to these requests that acknowledged nothing new.
    pub(super) last_resp_t: Option<u64>,
    /// PSNs of the sequence NAKs since the last episode began (a requester answers the
    /// first it gets; a second may cross its restart).
    pub(super) nak_psns: VecDeque<u64>,
    pub(super) last_rnr: Option<(u64, u64)>, // (t, timer ns)
    pub(super) last_implied: Option<u64>,
    pub(super) last_episode_t: u64,
    pub(super) first_ce_since_cnp: Option<u64>,
    /// READs answered recently: (PSN, span, length), for duplicate READs and READ restarts.
    pub(super) done_reads: VecDeque<(u64, u64, u32)>,
    /// Recent READ requests: (PSN, most PSNs its span can take, end address, length).
    read_ends: VecDeque<(u64, u64, u64, u32)>,
    /// The path MTU the READ responses show: the payload of their First and Middle packets
    /// (0: none seen yet).
    pub(super) resp_mtu: u32,
    /// The highest ghost ACK (PSN, frame, whether its MSN moved on) not yet explained: when
    /// the requester's PSNs go past it, or the capture ends with its MSN showing messages
    /// completed, the ACK was real and the capture missed the requests it acknowledged.
    pub(super) ghost: Option<(u64, u64, bool)>,
    /// The frame of its first request.
    pub(super) first_frame: u64,
    pub(super) round_psn: u64,
    pub(super) first_round_t: u64,
    pub(super) last_round_t: u64,
    /// The frame of the current episode's first round (`rounds`).
    pub(super) first_round_frame: u64,
}

/// Slots of a direction's PSN ring at most ...
const RING: usize = 128;
/// ... and at first.
const RING_FIRST: usize = 8;
/// An empty ring slot.
const EMPTY: (u64, u64, u64, u16, u32) = (u64::MAX, 0, 0, 0, 0);

impl ReqState {
    /// The unwrapped PSN nearest the highest request PSN whose 24 bits are `psn`.
    pub(super) fn unwrap(&self, psn: u32) -> u64 {
        let d = Psn::new(psn).diff(wire(self.highest));
        self.highest.wrapping_add(d as i64 as u64)
    }
    /// The index in [`ReqState::gaps`] of the open gap holding `psn` (they are disjoint and
    /// in PSN order).
    pub(super) fn gap_at(&self, psn: u64) -> Option<usize> {
        let i = self.gaps.partition_point(|g| g.1 < psn);
        self.gaps.get(i).filter(|g| g.0 <= psn).map(|_| i)
    }
    /// Closes the open gaps' PSNs up to `upto` that a response acknowledged (an ACK, a NAK
    /// for a later PSN, a READ response for a later READ): the requester sent them and the
    /// responder got them, only the capture did not see them (IBTA Vol 1 §9.7.5.1.2: a
    /// responder acknowledges only what it received in order). Returns how many.
    pub(super) fn missed_up_to(&mut self, upto: u64) -> u64 {
        let mut n = 0;
        while let Some(g) = self.gaps.front_mut() {
            if g.0 > upto {
                break;
            }
            let last = g.1.min(upto);
            n += last - g.0 + 1;
            if last == g.1 {
                self.gaps.pop_front();
            } else {
                g.0 = last + 1;
            }
        }
        n
    }
    /// A READ's answer ended at `end`, below the highest request: the request PSNs from
    /// `end + 1` to the next one seen (within the ring) that no gap holds yet are missing
    /// from the capture; opened as a gap (seen at `t`, `frame`).
    pub(super) fn open_gap_after(&mut self, end: u64, t: u64, frame: u64) {
        let reach = self.highest.min(end + RING as u64);
        let Some(next) = (end + 1..=reach).find(|&k| self.find(k).is_some()) else {
            return;
        };
        if next == end + 1 || self.gap_at(end + 1).is_some() || self.in_read(end + 1) {
            return;
        }
        let at = self.gaps.partition_point(|g| g.1 < end + 1);
        if self.gaps.get(at).is_some_and(|g| g.0 < next) {
            return;
        }
        self.gaps.insert(at, (end + 1, next - 1, t, frame));
        if self.gaps.len() > 4096 {
            self.gaps.pop_front();
        }
    }
    /// Takes PSN `u` out of the gap `gaps[i]` holding it.
    pub(super) fn fill(&mut self, u: u64, i: usize) {
        let g = self.gaps[i];
        if g.0 == g.1 {
            self.gaps.remove(i);
        } else if u == g.0 {
            self.gaps[i].0 += 1;
        } else if u == g.1 {
            self.gaps[i].1 -= 1;
        } else {
            self.gaps[i].1 = u - 1;
            self.gaps.insert(i + 1, (u + 1, g.1, g.2, g.3));
        }
    }
    /// `true` when the responder said it lacked a PSN of the gap `g` (a sequence NAK for it
    /// since the gap showed) and the requester has not gone back since: an ACK past the gap
    /// then acknowledges what the responder knew it did not have.
    pub(super) fn hole_nakked(&self, g: (u64, u64, u64, u64)) -> bool {
        self.last_nak_seq.is_some_and(|(np, nt, _)| {
            np >= g.0 && np <= g.1 && nt >= g.2 && self.last_episode_t < nt && !self.in_episode
        })
    }
    /// The ring's slot for writing `psn`. The ring starts at [`RING_FIRST`] slots and doubles
    /// (up to [`RING`]) instead of overwriting a PSN a [`RING`]-slot ring would keep, so a
    /// direction with few requests costs few slots and the ring always holds what the full
    /// one would: the last PSN sent of every residue modulo [`RING`].
    fn slot(&mut self, psn: u64) -> &mut (u64, u64, u64, u16, u32) {
        if self.ring.is_empty() {
            self.ring = vec![EMPTY; RING_FIRST];
        }
        loop {
            let n = self.ring.len() as u64;
            let q = self.ring[(psn % n) as usize].0;
            if n == RING as u64 || q == u64::MAX || q % RING as u64 == psn % RING as u64 {
                break;
            }
            self.grow();
        }
        let n = self.ring.len() as u64;
        &mut self.ring[(psn % n) as usize]
    }
    /// Doubles the ring until no two PSNs it holds share a slot.
    fn grow(&mut self) {
        let mut n = self.ring.len() * 2;
        'size: while n < RING {
            let mut bigger = vec![EMPTY; n];
            for e in self.ring.iter().filter(|e| e.0 != u64::MAX) {
                let b = &mut bigger[(e.0 % n as u64) as usize];
                if b.0 != u64::MAX {
                    n *= 2;
                    continue 'size;
                }
                *b = *e;
            }
            self.ring = bigger;
            return;
        }
        let mut full = vec![EMPTY; RING];
        for e in self.ring.iter().filter(|e| e.0 != u64::MAX) {
            full[(e.0 % RING as u64) as usize] = *e;
        }
        self.ring = full;
    }
    /// Reads the state a request packet reads (for the analyzer's lookahead): a field on
    /// every cache line of the leading part, returning something of them so that the
    /// reads are made.
    pub(super) fn touch(&self) -> u64 {
        self.count
            ^ self.highest
            ^ self.outstanding.len() as u64
            ^ self.ring.len() as u64
            ^ u64::from(self.mtu)
            ^ self.read_extra.map_or(0, |r| r.0)
            ^ self.last_progress_t
            ^ self.msg_start.unwrap_or(0)
            ^ self.last_req_t
            ^ self.max_read_span
            ^ self.last_dup.map_or(0, |r| r.0)
    }
    /// Reads the ring slot of the 24-bit `psn` (the unwrapped PSN's residue is the wire
    /// PSN's, the ring's length dividing 2^24), so that it is in the cache when the packet
    /// comes to be analyzed.
    pub(super) fn touch_slot(&self, psn: u32) -> u64 {
        let n = self.ring.len().max(1);
        // Both ends: a 32-byte slot can straddle two cache lines.
        self.ring
            .get(psn as usize % n)
            .map_or(0, |e| e.0 ^ u64::from(e.4))
    }
    /// What the ring holds for `psn`, when it does.
    fn find(&self, psn: u64) -> Option<(u64, u64, u64, u16, u32)> {
        let n = self.ring.len() as u64;
        let e = *self.ring.get((psn % n.max(1)) as usize)?;
        (e.0 == psn).then_some(e)
    }
    /// The index in [`ReqState::outstanding`] of the request at `psn`.
    pub(super) fn out_at(&self, psn: u64) -> Option<usize> {
        self.outstanding.binary_search_by_key(&psn, |o| o.psn).ok()
    }

    /// Notes that an outstanding READ or atomic spans `span` PSNs.
    fn note_read_span(&mut self, span: u64) {
        self.max_read_span = self.max_read_span.max(span);
    }

    /// PSNs the request at `psn` takes: a READ's span, else 1.
    fn span_at(&self, psn: u64) -> u64 {
        self.done_reads
            .iter()
            .rev()
            .map(|d| (d.0, d.1))
            .find(|&(p, _)| p == psn)
            .or_else(|| {
                let o = self.outstanding[self.out_at(psn)?];
                o.read_len.map(|_| (o.psn, o.read_span))
            })
            .map_or(1, |(_, span)| span.max(1))
    }

    /// The last PSN the requests used: the highest request's, or the last of its span when
    /// it is a READ.
    pub(super) fn span_end(&self) -> u64 {
        if let Some((_, most)) = self.read_extra {
            return self.highest + most;
        }
        let h = self.highest;
        self.out_at(h)
            .map(|i| (h, self.outstanding[i].read_span))
            .or_else(|| {
                self.done_reads
                    .iter()
                    .rev()
                    .map(|d| (d.0, d.1))
                    .find(|&(psn, _)| psn == h)
            })
            .map_or(h, |(psn, span)| psn + span.max(1) - 1)
    }

    /// `true` when `psn` lies in the span of a READ (outstanding or answered recently) or is
    /// a recent atomic's: a requester may restart there, asking again for an answer it did
    /// not get (IBTA 9.7.5.1.5).
    pub(super) fn in_read(&self, psn: u64) -> bool {
        self.read_containing(psn).is_some()
    }

    /// The first PSN of the READ (or atomic) whose span holds `psn`.
    fn read_containing(&self, psn: u64) -> Option<u64> {
        // Outstanding requests are in PSN order: a READ holding `psn` starts at or before
        // it, and no further back than the longest span.
        let end = self.outstanding.partition_point(|o| o.psn <= psn);
        let reach = self.max_read_span.max(1);
        self.outstanding
            .range(..end)
            .rev()
            .take_while(|o| psn - o.psn < reach)
            .filter(|o| o.read_len.is_some() && !o.atomic)
            .map(|o| (o.psn, o.read_span))
            .chain(self.done_reads.iter().map(|d| (d.0, d.1)))
            .filter(|&(first, span)| psn >= first && psn < first + span.max(1))
            .map(|(first, _)| first)
            .min()
    }
    /// Notes request PSN `psn` sent at `t` with bytes hashing to `hash`.
    fn sent(&mut self, psn: u64, t: u64, hash: u64) {
        let count = self.count as u32;
        let s = self.slot(psn);
        let n = if s.0 == psn { s.3.saturating_add(1) } else { 1 };
        *s = (psn, t, hash, n, count);
    }
    /// Request packets since PSN `psn` was last seen.
    /// (`u64::MAX`: not in the ring.)
    fn packets_since(&self, psn: u64) -> u64 {
        let count = self.count as u32;
        self.find(psn)
            .map_or(u64::MAX, |s| u64::from(count.wrapping_sub(s.4)))
    }
    /// How many times request PSN `psn` was sent (0: not in the ring).
    pub(super) fn times_sent(&self, psn: u64) -> u16 {
        self.find(psn).map_or(0, |s| s.3)
    }
    /// Notes the path MTU `p` shows (the payload of First and Middle packets, IBTA 9.7.1,
    /// C9-93) and returns the one to assume (4096 until one is seen).
    fn note_mtu(&mut self, p: &Pkt) -> u32 {
        if matches!(p.opcode.class(), Class::First | Class::Middle) && p.payload_len > self.mtu {
            self.mtu = p.payload_len;
        }
        if self.mtu == 0 {
            4096
        } else {
            self.mtu
        }
    }
    /// The path MTUs the packets showed: the requests' and the READ responses' (0: not
    /// seen).
    pub(super) fn mtus(&self) -> (u32, u32) {
        (self.mtu, self.resp_mtu)
    }
    /// The path MTU a READ's responses take, once a multi-packet answer showed it (the
    /// requests' own MTU may differ: the two sides' path MTUs need not agree).
    fn read_mtu(&self) -> Option<u32> {
        (self.resp_mtu > 0).then_some(self.resp_mtu)
    }
    /// When request PSN `psn` was last sent, and its bytes' hash (`None`: not in the ring).
    pub(super) fn seen(&self, psn: u64) -> Option<(u64, u64)> {
        self.find(psn).map(|s| (s.1, s.2))
    }
}

/// The 24-bit PSN of an unwrapped one.
pub(super) fn wire(u: u64) -> Psn {
    Psn::new(u as u32)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// A request packet: a new PSN (gaps, the highest request), or one not past the highest (a
/// network duplicate, a reordered packet, or a retransmission and its episode's cause).
pub(super) fn request(r: &mut ReqState, opts: &Options, p: &Pkt, ev: &mut Emitter<'_, '_>) {
    let mtu = r.note_mtu(p);
    let idle =
        p.t.saturating_sub(std::mem::replace(&mut r.last_req_t, p.t));
    r.count += 1;
    ev.side_mut().requests += 1;
    if !r.started {
        first_request(r, p, mtu, ev);
        return;
    }
    let u = r.unwrap(p.psn);
    check_stall(r, opts, p, ev);
    // A READ re-issued from the middle of a READ's span (ending where it ended) is a
    // retransmission even when its PSN is past the highest request PSN seen.
    if u > r.highest && !resumed_read(r, p, u) {
        advance(r, p, u, mtu, ev);
        return;
    }
    // Not past the highest: seen before (a duplicate or a retransmission), or a missing
    // PSN arriving (out of order, or resent after a loss before the capture point).
    let Some(restart) = repeated(r, opts, p, u, ev) else {
        return;
    };
    // How long nothing moved, taken before the resend renews its request's time.
    let quiet = quiet_since(r, p.t);
    resent(r, p, u, mtu, ev);
    if !r.in_episode {
        (r.rounds, r.round_psn, r.first_round_t, r.last_round_t) = (1, u, p.t, p.t);
        r.first_round_frame = p.frame;
    } else if u == r.round_psn && p.t.saturating_sub(r.last_round_t) >= MIN_ACK_TIMEOUT_NS {
        r.rounds += 1;
        r.last_round_t = p.t;
    }
    // The first packet of an episode carries its cause.
    let (cause, rnr_note) = if r.in_episode {
        (None, None)
    } else {
        r.in_episode = true;
        let (c, note) = episode_cause(r, opts, p, restart, (idle, quiet), ev);
        r.last_episode_t = p.t;
        r.nak_psns.clear();
        let ci = Cause::ALL.iter().position(|x| *x == c).unwrap_or(4);
        ev.side_mut().episodes[ci] += 1;
        (Some(c), note)
    };
    let detail = match (cause, rnr_note) {
        (Some(c), Some((wait, timer))) => format!(
            "episode: {}; waited {:.1} us, the NAK's timer {:.1} us",
            c.name(),
            us(wait),
            us(timer)
        ),
        (Some(c), None) => format!("episode: {}", c.name()),
        _ => String::new(),
    };
    ev.trace(p.t, p.psn, 1);
    ev.emit(p, EventKind::Retransmission, cause, detail);
}

/// The first request of the direction: where its PSNs start.
fn first_request(r: &mut ReqState, p: &Pkt, mtu: u32, ev: &mut Emitter<'_, '_>) {
    r.started = true;
    r.first_frame = p.frame;
    r.highest = (1u64 << 32) + u64::from(p.psn);
    let h = r.highest;
    r.sent(h, p.t, p.hash);
    r.last_progress_t = p.t;
    let s = ev.side_mut();
    s.psn_first = Some(p.psn);
    s.psn_last = Some(p.psn);
    new_request(r, p, r.highest, mtu, ev);
}

/// A stall: nothing moved for too long while requests were outstanding, or while the
/// requester was in the middle of a message (a First or Middle packet and no Last yet: it had
/// more to send, so it was held back, by PFC say, or starved).
fn check_stall(r: &ReqState, opts: &Options, p: &Pkt, ev: &mut Emitter<'_, '_>) {
    let waiting = !r.outstanding.is_empty();
    let mid_message = r.msg_start.is_some();
    if (waiting || mid_message) && p.t.saturating_sub(r.last_progress_t) > opts.stall_ns {
        ev.side_mut().note_stall(r.last_progress_t, p.t);
        let gap = p.t.saturating_sub(r.last_progress_t);
        let what = if waiting {
            ""
        } else {
            " (nothing outstanding, in the middle of a message: the requester held back)"
        };
        ev.emit(
            p,
            EventKind::Stall,
            None,
            format!("{:.3} ms without progress{what}", gap as f64 / 1e6),
        );
    }
}

/// `true` when `p` (at unwrapped PSN `u`) is a READ re-issued from inside a recent READ's
/// response PSNs: a requester that got the first responses of a READ may ask again for the
/// rest at the PSN of the first one it did not get (IBTA Vol 1 §9.7.5.1.5, §9.4.4). Judged
/// by the PSN range the READ's responses take, whatever the new RETH says (rxe before
/// 5.18 asked again for the whole length from the advanced address): with the path MTU
/// known, the span is exact; not known, the span at the smallest MTU bounds it and the RETH
/// must ask for less, from inside the READ's buffer (a new READ right behind a long one, of
/// the same buffer as perftest's are, is otherwise indistinguishable).
fn resumed_read(r: &ReqState, p: &Pkt, u: u64) -> bool {
    if p.opcode.operation() != 0x0c {
        return false;
    }
    let mtu = r.read_mtu();
    r.read_ends.iter().any(|&(psn, most, end, len)| {
        u > psn
            && match mtu {
                Some(m) => u < psn + u64::from(len.div_ceil(m).max(1)),
                None => {
                    u < psn + most
                        && p.read_end.zip(p.dma_len).is_some_and(|(e, l)| {
                            let va = e.wrapping_sub(u64::from(l));
                            l < len && va > end.wrapping_sub(u64::from(len)) && va < end
                        })
                }
            }
    })
}

/// A request past the highest PSN: the PSNs skipped (a READ's span excepted), wraps, and the
/// new highest.
fn advance(r: &mut ReqState, p: &Pkt, u: u64, mtu: u32, ev: &mut Emitter<'_, '_>) {
    r.last_dup = None;
    let mut skipped = u - r.highest - 1;
    let mut gap_from = r.highest + 1;
    // A READ takes one PSN per response packet (IBTA 9.7.1): the next request's PSN
    // follows its span, which tells the span.
    if let Some((least, most)) = r.read_extra.take() {
        if skipped <= most {
            let h = r.highest;
            if let Some(i) = r.out_at(h) {
                r.outstanding[i].read_span = skipped + 1;
                r.note_read_span(skipped + 1);
            }
            skipped = 0;
        } else {
            skipped -= least;
            gap_from += least;
        }
    }
    if skipped > 0 {
        ev.side_mut().psn_gaps += 1;
        r.gaps.push_back((gap_from, u - 1, p.t, p.frame));
        if r.gaps.len() > 4096 {
            r.gaps.pop_front();
        }
        ev.emit(
            p,
            EventKind::PsnGap,
            None,
            format!("{skipped} PSNs skipped"),
        );
    }
    if let Some((g, frame, _)) = r.ghost.filter(|g| g.0 < u) {
        // The ACK past every request seen was for requests the capture missed: the
        // requester went on past them.
        r.ghost = None;
        let n = r.missed_up_to(g);
        let s = ev.side_other_mut();
        s.ghost_acks = s.ghost_acks.saturating_sub(1);
        ev.side_mut().missed_by_capture += n;
        if r.acked.is_none_or(|a| a < g) {
            r.acked = Some(g);
        }
        ev.retell(
            frame,
            EventKind::GhostAck,
            EventKind::CaptureMissed,
            Some(format!(
                "acknowledges {n} request PSNs to {} the capture did not see",
                wire(g)
            )),
        );
    }
    if (u as u32) < wire(r.highest).value() || (u >> 24) > (r.highest >> 24) {
        ev.side_mut().psn_wraps += 1;
    }
    r.highest = u;
    r.in_episode = false;
    r.rounds = 0;
    r.last_progress_t = p.t;
    r.sent(u, p.t, p.hash);
    ev.side_mut().psn_last = Some(p.psn);
    new_request(r, p, u, mtu, ev);
}

/// A request at unwrapped PSN `u`, not past the highest: a network duplicate or a missing
/// PSN arriving out of order (handled: `None`), else a retransmission restarting at the
/// returned PSN (the first packet of its run).
fn repeated(
    r: &mut ReqState,
    opts: &Options,
    p: &Pkt,
    u: u64,
    ev: &mut Emitter<'_, '_>,
) -> Option<u64> {
    let mut run = false;
    // The PSN the requester went back to (the run's first packet).
    let mut restart = u;
    if let Some((next, dframe, dpsn)) = r.last_dup.take() {
        if u == next {
            run = true;
            restart = dpsn;
            // The "duplicate" began a run of resent packets: it was a retransmission.
            let s = ev.side_mut();
            s.duplicates -= 1;
            s.retransmitted_packets += 1;
            ev.retag(dframe, EventKind::Duplicate, EventKind::Retransmission);
        }
    }
    let seen = r.seen(u);
    if let Some((t0, h0)) = seen {
        if duplicate(r, opts, p, u, run, t0, h0) {
            let next = u + r.span_at(u);
            r.last_dup = Some((next, p.frame, u));
            r.sent(u, p.t, p.hash);
            ev.side_mut().duplicates += 1;
            ev.emit(p, EventKind::Duplicate, None, String::new());
            return None;
        }
    } else if let Some(i) = r.gap_at(u) {
        if fill_gap(r, opts, p, u, i) {
            ev.side_mut().out_of_order += 1;
            ev.emit(p, EventKind::OutOfOrder, None, String::new());
            return None;
        }
    }
    Some(restart)
}

/// `true` when a request at `u`, last sent at `t0` with hash `h0`, is a network duplicate.
fn duplicate(
    r: &mut ReqState,
    opts: &Options,
    p: &Pkt,
    u: u64,
    run: bool,
    t0: u64,
    h0: u64,
) -> bool {
    // The same bytes again soon, with nothing since the original that would make the
    // requester resend (a NAK, an RNR NAK, a response implying a loss): the network
    // duplicated it.
    let resend_cause = r.last_nak_seq.is_some_and(|n| n.1 >= t0)
        || r.last_rnr.is_some_and(|x| x.0 >= t0)
        || r.last_implied.is_some_and(|x| x >= t0);
    // A duplicating switch or link delivers the copy next to its original: within a
    // few packets of it.
    // And no duplicate response came between them (one may have made the requester
    // resend).
    h0 == p.hash
        && !run
        && r.last_resp_t.is_none_or(|rt| rt <= t0)
        && r.packets_since(u) <= DUPLICATE_SPAN
        && p.t.saturating_sub(t0) < opts.duplicate_ns
        && !r.in_episode
        && !resend_cause
}

/// Fills PSN `u` in its gap (`gaps[i]`); `true` when it arrived out of order rather than
/// resent.
fn fill_gap(r: &mut ReqState, opts: &Options, p: &Pkt, u: u64, i: usize) -> bool {
    let g = r.gaps[i];
    r.fill(u, i);
    r.sent(u, p.t, p.hash);
    // Resent (a NAK or a resend trigger since the gap showed) or reordered.
    let resend_cause = r.last_nak_seq.is_some_and(|n| n.1 >= g.2)
        || r.last_rnr.is_some_and(|x| x.0 >= g.2)
        || r.last_implied.is_some_and(|x| x >= g.2);
    p.t.saturating_sub(g.2) < opts.reorder_ns && !r.in_episode && !resend_cause
}

/// A request at `u` sent again: counted, its outstanding entry marked (a READ again, whole
/// or from the middle of its span, is what the responses answer).
fn resent(r: &mut ReqState, p: &Pkt, u: u64, mtu: u32, ev: &mut Emitter<'_, '_>) {
    r.sent(u, p.t, p.hash);
    if p.opcode.operation() == 0x0c {
        // A READ again, whole or from the middle of its span: what the responses answer.
        let len = p.dma_len.unwrap_or(0);
        let span = u64::from(len.div_ceil(mtu).max(1));
        if let Some(i) = r.out_at(u) {
            r.outstanding.remove(i);
        }
        // Asked again from inside a READ: that READ was sent again too (its answer is not
        // one the requester acted on without).
        if let Some(i) = r.read_containing(u).and_then(|first| r.out_at(first)) {
            r.outstanding[i].retx = true;
        }
        let at = r.outstanding.partition_point(|o| o.psn < u);
        r.note_read_span(span);
        r.outstanding.insert(
            at,
            Out {
                psn: u,
                t: p.t,
                retx: true,
                read_len: Some(len),
                read_span: span,
                atomic: false,
            },
        );
    }
    ev.side_mut().retransmitted_packets += 1;
    if let Some(i) = r.out_at(u) {
        r.outstanding[i].retx = true;
    }
}

/// Time at `t` since the last progress: the last ACK, or the oldest outstanding request's
/// sending when later (a requester's timer runs from either).
fn quiet_since(r: &ReqState, t: u64) -> u64 {
    t.saturating_sub(
        r.last_ack_t
            .max(r.outstanding.front().map_or(r.last_ack_t, |o| o.t)),
    )
}

/// Why the retransmission episode that `p` begins (restarting at `restart`, `idle` after the
/// previous request, `quiet_since` after the last progress) happened, and, after an RNR NAK,
/// (wait, the NAK's timer); the restart rules are checked here.
fn episode_cause(
    r: &ReqState,
    opts: &Options,
    p: &Pkt,
    restart: u64,
    (idle, quiet_since): (u64, u64),
    ev: &mut Emitter<'_, '_>,
) -> (Cause, Option<(u64, u64)>) {
    // After an RNR NAK the responder also NAKs the packets that followed as out of
    // sequence: a requester that waited out the RNR timer answers the RNR NAK.
    let waited_rnr = r.last_rnr.is_some_and(|(rt, timer)| {
        rt > r.last_episode_t
            && p.t.saturating_sub(rt) >= timer / 2
            && p.t.saturating_sub(rt) <= 2 * timer + opts.nak_window_ns
    });
    let mut rnr_note = None;
    let c = match (r.last_nak_seq, r.last_rnr, r.last_implied) {
        (_, Some((rt, timer)), _) if waited_rnr => {
            let wait = p.t.saturating_sub(rt);
            ev.side_mut().rnr_wait.add(wait);
            rnr_note = Some((wait, timer));
            Cause::Rnr
        }
        (Some((npsn, nt, _)), _, _)
            if nt > r.last_episode_t && p.t.saturating_sub(nt) <= opts.nak_window_ns =>
        {
            ev.side_mut().nak_response.add(p.t.saturating_sub(nt));
            check_nak_restart(r, p, restart, npsn, ev);
            Cause::NakSeq
        }
        (_, Some((rt, timer)), _)
            if rt > r.last_episode_t
                && p.t.saturating_sub(rt) <= 2 * timer + opts.nak_window_ns =>
        {
            let wait = p.t.saturating_sub(rt);
            ev.side_mut().rnr_wait.add(wait);
            rnr_note = Some((wait, timer));
            Cause::Rnr
        }
        (_, _, Some(it))
            if it > r.last_episode_t && p.t.saturating_sub(it) <= opts.nak_window_ns =>
        {
            Cause::ImpliedNak
        }
        // No NAK: a timeout if the requester had gone quiet, waiting (silent for at
        // least half the time since the last progress); a requester still busy
        // sending went back for a reason the capture does not show.
        // The shortest local ACK timeout is 4.096 us x 2^1 (IBTA 9.7.6.1.3, C9-141).
        _ if (r.acked.is_some() || ev.peer_seen())
            && quiet_since >= MIN_ACK_TIMEOUT_NS
            && 2 * idle >= quiet_since =>
        {
            check_timeout_restart(r, p, restart, quiet_since, ev);
            Cause::Timeout
        }
        _ => Cause::Unknown,
    };
    (c, rnr_note)
}

/// [`Rule::GbnRestartAtNakedPsn`]: the episode answering a sequence NAK for `npsn` restarts
/// at `restart`.
fn check_nak_restart(r: &ReqState, p: &Pkt, restart: u64, npsn: u64, ev: &mut Emitter<'_, '_>) {
    // At the NAKed PSN, or earlier inside a READ whose responses the requester
    // may not have got (lost after the capture point).
    // Or inside a READ (or at an atomic) that starts at or before it: the
    // requester asks again for what of it it did not get.
    // An ACK after the NAK may have moved the oldest unacknowledged PSN past it.
    // Past the NAKed PSN (and past the oldest unacknowledged one, when ACKs
    // moved it): the requester skips what the responder asked for. Before it:
    // what an ACK or NAK lost after the capture point looks like (or a READ
    // re-issued from inside its span), noted, not a violation.
    let una = r.acked.map_or(npsn, |a| a + 1).max(npsn);
    let ok = restart <= una
        || r.read_containing(restart)
            .is_some_and(|first| first <= npsn);
    if ok && restart < npsn && !r.in_read(restart) {
        ev.rule(Rule::GbnRestartAtNakedPsn).early += 1;
    }
    let (rp, np) = (wire(restart), wire(npsn));
    ev.rule(Rule::GbnRestartAtNakedPsn)
        .check_why(ok, p.frame, || {
            format!("restarted at PSN {rp}, the NAK asked for {np}")
        });
}

/// [`Rule::TimeoutRestartAtOldestUnacked`]: the episode after a timeout restarts at
/// `restart`; measures the timeout (`since` the last progress).
fn check_timeout_restart(
    r: &ReqState,
    p: &Pkt,
    restart: u64,
    since: u64,
    ev: &mut Emitter<'_, '_>,
) {
    ev.side_mut().retransmission_timeout.add(since);
    let oldest = r.acked.map_or_else(
        || r.outstanding.front().map_or(restart, |o| o.psn),
        |a| a + 1,
    );
    // Not past the oldest unacknowledged PSN (earlier is what an ACK lost
    // after the capture point looks like).
    let (rp, op) = (wire(restart), wire(oldest));
    if restart < oldest {
        ev.rule(Rule::TimeoutRestartAtOldestUnacked).early += 1;
    }
    ev.rule(Rule::TimeoutRestartAtOldestUnacked)
        .check_why(restart <= oldest, p.frame, || {
            format!("restarted at PSN {rp}, past the oldest unacknowledged {op}")
        });
}

/// A request packet that advances the PSN: messages, outstanding requests, the rate.
fn new_request(r: &mut ReqState, p: &Pkt, u: u64, mtu: u32, ev: &mut Emitter<'_, '_>) {
    let op = p.opcode;
    let read = op.operation() == 0x0c;
    let atomic = op.is_atomic();
    r.msg_bytes += u64::from(p.payload_len);
    let start = *r.msg_start.get_or_insert(p.t);
    let pictures = ev.pictures;
    let s = ev.side_mut();
    if pictures {
        s.add_rate(p.t, u64::from(p.payload_len));
    }
    if op.ends_message() {
        let k = if read {
            4
        } else if atomic {
            5
        } else if op.is_send() {
            usize::from(op.has_immediate())
        } else if op.is_write() {
            2 + usize::from(op.has_immediate())
        } else {
            6
        };
        s.messages[k] += 1;
        s.message_bytes[k] += if read {
            u64::from(p.dma_len.unwrap_or(0))
        } else if atomic {
            8
        } else {
            r.msg_bytes
        };
        r.msg_bytes = 0;
        r.msg_start = None;
        if pictures && s.slices.len() < SLICES_MAX {
            s.slices.push((start, p.t, k as u8));
        }
    }
    if read || atomic {
        // The READs and atomics outstanding with this one (the last 64 requests looked at:
        // a window is at most 255, and what matters is one filled, up to 16 in practice).
        let n = 1 + r
            .outstanding
            .iter()
            .rev()
            .take(64)
            .filter(|o| o.read_len.is_some())
            .count() as u32;
        let s = ev.side_mut();
        if n > s.reads_outstanding_max {
            s.reads_outstanding_max = n;
            s.reads_at_max = 0;
        }
        if n == s.reads_outstanding_max {
            s.reads_at_max += 1;
        }
    }
    if atomic {
        // An atomic's answer can be lost after the capture point too: a requester may go
        // back to it (see `in_read`).
        r.done_reads.push_back((u, 1, ATOMIC));
        if r.done_reads.len() > 64 {
            r.done_reads.pop_front();
        }
    }
    if let (true, Some(l), Some(end)) = (read, p.dma_len, p.read_end) {
        r.read_ends
            .push_back((u, u64::from(l.div_ceil(256).max(1)), end, l));
        if r.read_ends.len() > 64 {
            r.read_ends.pop_front();
        }
    }
    // The further PSNs its responses take: exactly, once a packet showed the path MTU;
    // else between its length over the largest MTU and over the smallest.
    r.read_extra = match (read, p.dma_len, r.read_mtu()) {
        (true, Some(l), Some(m)) => {
            let extra = u64::from(l.div_ceil(m).max(1)) - 1;
            Some((extra, extra))
        }
        (true, Some(l), None) => Some((
            u64::from(l.div_ceil(4096).max(1)) - 1,
            u64::from(l.div_ceil(256).max(1)) - 1,
        )),
        _ => None,
    };
    if p.ack_req || op.ends_message() || read || atomic {
        let span = match (read, p.dma_len) {
            (true, Some(l)) => u64::from(l.div_ceil(mtu).max(1)),
            _ => 1,
        };
        if read || atomic {
            r.note_read_span(span);
        }
        r.outstanding.push_back(Out {
            psn: u,
            t: p.t,
            retx: false,
            read_len: if read {
                p.dma_len
            } else if atomic {
                Some(8)
            } else {
                None
            },
            read_span: span,
            atomic,
        });
        if r.outstanding.len() > 8192 {
            r.outstanding.pop_front();
        }
    }
    ev.trace(p.t, p.psn, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring that starts small holds exactly what a full-size one would, on PSN streams
    /// in order, with resends, and jumping about.
    #[test]
    fn the_growing_ring_answers_as_a_full_one() {
        for seed in 1..=200u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut r = ReqState::default();
            let mut full = vec![EMPTY; RING];
            let mut psn = 1_000u64;
            for step in 0..600u32 {
                psn = match next() % 8 {
                    0 => psn.saturating_sub(next() % 40),
                    1 => psn + next() % 300,
                    _ => psn + 1,
                };
                let t = u64::from(step);
                r.count += 1;
                r.sent(psn, t, psn ^ 7);
                let f = &mut full[(psn % RING as u64) as usize];
                let n = if f.0 == psn { f.3.saturating_add(1) } else { 1 };
                *f = (psn, t, psn ^ 7, n, r.count as u32);
                for probe in psn.saturating_sub(260)..psn + 4 {
                    let f = full[(probe % RING as u64) as usize];
                    let want = (f.0 == probe).then_some(f);
                    assert_eq!(r.find(probe), want, "seed {seed}, step {step}, psn {probe}");
                }
            }
            assert!(r.ring.len() <= RING, "seed {seed}");
        }
    }
}
