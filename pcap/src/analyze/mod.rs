//! `roce analyze`: what happened on every RC connection of a capture, in one streaming pass with
//! per-QP state only.
//!
//! * Connections: a direction is (sender IP, receiver IP, destination QPN); the two directions
//!   of a connection are paired by the CM exchange (REQ/REP carry both QPNs), else by the
//!   RoCEv2 UDP source port (both ends of an RC connection use the same entropy port), else
//!   by PSN agreement (responses echo request PSNs). [`Connection::paired_by`] says which.
//! * Events ([`EventKind`]), defined in the README: retransmission (with its episode's cause),
//!   psn_gap, out_of_order, duplicate, nak, ghost_ack, stale_ack, cnp, ecn_ce, icrc_bad, stall,
//!   read_response_mismatch.
//! * Measures ([`crate::analyze::stats::Dist`]): ACK RTT, READ latency, NAK generation and
//!   response latency, retransmission timeout, RNR wait, CNP interval, CE-to-CNP latency.
//! * Verdicts ([`Verdict`]): the behaviour rules of go-back-N RC (IBTA Vol 1 §9.7, the set
//!   Lumina (SIGCOMM 2023) checks on hardware), each `ok`, `violated` (with frames) or
//!   `not_applicable`.
//!
//! Submodules: `pkt` (what a packet contributes), `stats` (distributions), `report` (text and
//! JSON), `plot` (SVG via plotters), `html`, `trace` (Perfetto).
mod pkt;
mod plot;
mod report;
pub mod stats;
mod trace;

use std::collections::VecDeque;

/// Maps keyed by what a capture names (addresses, QPNs): a fast hash with a per-process
/// random seed, so that a crafted capture cannot choose colliding keys.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::io::{Read, Write};
use std::net::IpAddr;

use roce_proto::aeth::{AethKind, NakCode};
use roce_proto::Opcode;

use crate::reader::{CaptureReader, Timestamp};
use crate::{link, DecodeError};
pub(crate) use pkt::Pkt;
pub use report::{
    connection_json, event_flag_json, event_json, json_lines, text, write_json_lines, write_text,
};
use stats::Dist;

/// What to analyze and the thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Only connections with this QPN on either side.
    pub qp: Option<u32>,
    /// Only packets at or after this many seconds from the capture's first packet.
    pub from: Option<f64>,
    /// Only packets before this many seconds from the capture's first packet.
    pub to: Option<f64>,
    /// No progress for longer than this while requests are outstanding is a stall (ns).
    pub stall_ns: u64,
    /// The same PSN and bytes again within this time (and no rewind) is a network duplicate,
    /// not a retransmission (ns).
    pub duplicate_ns: u64,
    /// A missing PSN arriving within this time of the gap is out of order, not a
    /// retransmission (ns).
    pub reorder_ns: u64,
    /// CNPs of one QP closer than this violate the CNP interval rule (ns).
    pub cnp_interval_ns: u64,
    /// Keep what the plots, the HTML page and the trace draw (PSN points, rate windows,
    /// message slices; bounded per side). Off, the analysis keeps counters only.
    pub pictures: bool,
    /// A retransmission this soon after a NAK (or an implied NAK; after an RNR NAK: after its
    /// timer) answers it; later, the requester never got it and its timer fired (ns).
    pub nak_window_ns: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            qp: None,
            from: None,
            to: None,
            stall_ns: 100_000_000,
            duplicate_ns: 100_000,
            reorder_ns: 1_000_000,
            cnp_interval_ns: 50_000,
            nak_window_ns: 500_000,
            pictures: false,
        }
    }
}

/// The kind of a per-packet event (names as in the README and the JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// A request whose PSN does not advance past the highest already seen on its QP.
    Retransmission,
    /// Request PSNs skipped.
    PsnGap,
    /// A missing PSN that arrived soon after its gap: reordered, not resent.
    OutOfOrder,
    /// The same PSN and bytes again, without a rewind: duplicated by the network.
    Duplicate,
    /// A NAK (`nak_seq`, `nak_rnr`, `nak_invalid_request`, `nak_remote_access`, `nak_remote_op`).
    Nak(u8),
    /// An ACK for a PSN never sent.
    GhostAck,
    /// An ACK for a PSN older than one already acknowledged (not answering a duplicate).
    StaleAck,
    /// A congestion notification packet.
    Cnp,
    /// A packet marked congestion experienced.
    EcnCe,
    /// A packet whose ICRC is wrong.
    IcrcBad,
    /// No progress while requests are outstanding for longer than the stall threshold.
    Stall,
    /// READ responses that do not cover the requested PSN span and length.
    ReadResponseMismatch,
}

/// NAK kinds, as [`EventKind::Nak`] numbers them.
pub const NAK_KINDS: [&str; 6] = [
    "seq_err",
    "rnr",
    "invalid_request",
    "remote_access",
    "remote_op",
    "other",
];

impl EventKind {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Retransmission => "retransmission",
            Self::PsnGap => "psn_gap",
            Self::OutOfOrder => "out_of_order",
            Self::Duplicate => "duplicate",
            Self::Nak(0) => "nak_seq",
            Self::Nak(1) => "nak_rnr",
            Self::Nak(2) => "nak_invalid_request",
            Self::Nak(3) => "nak_remote_access",
            Self::Nak(4) => "nak_remote_op",
            Self::Nak(_) => "nak_other",
            Self::GhostAck => "ghost_ack",
            Self::StaleAck => "stale_ack",
            Self::Cnp => "cnp",
            Self::EcnCe => "ecn_ce",
            Self::IcrcBad => "icrc_bad",
            Self::Stall => "stall",
            Self::ReadResponseMismatch => "read_response_mismatch",
        }
    }
}

/// Why a retransmission episode happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// A NAK sequence error for the restart PSN preceded it.
    NakSeq,
    /// An RNR NAK preceded it.
    Rnr,
    /// No NAK: the local ACK timer expired.
    Timeout,
    /// An ACK or READ response for a later PSN implied the loss.
    ImpliedNak,
    /// None of those could be told (the other direction is not in the capture).
    Unknown,
}

impl Cause {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::NakSeq => "nak_seq",
            Self::Rnr => "rnr",
            Self::Timeout => "timeout",
            Self::ImpliedNak => "implied_nak",
            Self::Unknown => "unknown",
        }
    }
    /// Every cause.
    pub const ALL: [Self; 5] = [
        Self::NakSeq,
        Self::Rnr,
        Self::Timeout,
        Self::ImpliedNak,
        Self::Unknown,
    ];
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Frame number.
    pub frame: u64,
    /// Time since the first packet, ns.
    pub t: u64,
    /// The connection.
    pub connection: usize,
    /// Which side sent the packet (0 or 1).
    pub side: usize,
    /// What.
    pub kind: EventKind,
    /// The packet's PSN.
    pub psn: u32,
    /// The retransmission episode's cause (first packet of an episode).
    pub cause: Option<Cause>,
    /// Details (a number of PSNs, a latency, …).
    pub detail: String,
}

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

/// The rules, in report order.
pub const RULES: [&str; 8] = [
    "gbn_restart_at_naked_psn",
    "timeout_restart_at_oldest_unacked",
    "one_nak_per_sequence_error",
    "no_ack_past_hole",
    "monotonic_msn_and_ack_psn",
    "read_responses_cover_request",
    "duplicate_read_reexecuted_from_requested_psn",
    "cnp_min_interval",
];

#[derive(Debug, Clone, Default)]
struct Rule {
    checked: u64,
    frames: Vec<u64>,
    violations: u64,
    note: String,
    /// What the first violation was.
    first: String,
    /// Checks that passed only because the capture point may not see everything (a
    /// restart earlier than asked for).
    early: u64,
}

impl Rule {
    fn check(&mut self, ok: bool, frame: u64) {
        self.checked += 1;
        if !ok {
            self.violations += 1;
            if self.frames.len() < 16 {
                self.frames.push(frame);
            }
        }
    }
    /// [`Rule::check`], and the first violation says what was seen.
    fn check_why(&mut self, ok: bool, frame: u64, why: impl FnOnce() -> String) {
        if !ok && self.violations == 0 {
            self.first = format!("first at frame {frame}: {}", why());
        }
        self.check(ok, frame);
    }
}

/// Counters and measures of one side of a connection (what it sent).
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// Sender address.
    pub addr: Option<IpAddr>,
    /// This side's QPN (the destination QPN of the other side's packets), when known.
    pub qpn: Option<u32>,
    /// Packets sent.
    pub packets: u64,
    /// Transport bytes sent.
    pub bytes: u64,
    /// Request packets sent.
    pub requests: u64,
    /// Response packets sent (ACK, NAK, READ responses, atomic ACKs).
    pub responses: u64,
    /// Messages by operation: send, send_imm, write, write_imm, read, atomic, other.
    pub messages: [u64; 7],
    /// Payload bytes of those messages (READ: the requested length).
    pub message_bytes: [u64; 7],
    /// First and last packet time, ns.
    pub first_t: u64,
    /// Last packet time.
    pub last_t: u64,
    /// First and last request PSN (24-bit).
    pub psn_first: Option<u32>,
    /// Highest request PSN.
    pub psn_last: Option<u32>,
    /// PSN wraps seen.
    pub psn_wraps: u64,
    /// Request packets sent again.
    pub retransmitted_packets: u64,
    /// Retransmission episodes by [`Cause`] (index of `Cause::ALL`).
    pub episodes: [u64; 5],
    /// NAKs this side sent, by kind (index of [`NAK_KINDS`]).
    pub naks: [u64; 6],
    /// PSN gaps in its requests.
    pub psn_gaps: u64,
    /// PSNs of its requests never seen at all (lost before the capture point).
    pub never_seen_psns: u64,
    /// Out-of-order requests.
    pub out_of_order: u64,
    /// Network duplicates.
    pub duplicates: u64,
    /// ACKs it sent for PSNs never sent.
    pub ghost_acks: u64,
    /// Stale ACKs it sent.
    pub stale_acks: u64,
    /// CNPs it sent.
    pub cnps: u64,
    /// Its packets marked CE.
    pub ecn_ce: u64,
    /// Its packets with a bad ICRC.
    pub icrc_bad: u64,
    /// Stalls of its requests.
    pub stalls: u64,
    /// READ responses of its that did not match the request.
    pub read_response_mismatches: u64,
    /// ACK RTT of its requests.
    pub ack_rtt: Dist,
    /// READ latency of its READ requests.
    pub read_latency: Dist,
    /// Time from the first out-of-sequence request it received to its NAK.
    pub nak_generation: Dist,
    /// Time from a NAK it received to its first retransmitted packet.
    pub nak_response: Dist,
    /// Observed retransmission timeouts of its requests.
    pub retransmission_timeout: Dist,
    /// Observed waits after RNR NAKs it received.
    pub rnr_wait: Dist,
    /// Intervals between the CNPs it sent.
    pub cnp_interval: Dist,
    /// Its rate in the window after each CNP it received, in percent of the rate in the
    /// window before (with pictures: from the rate windows).
    pub rate_after_cnp_pct: Dist,
    /// Time from a CE-marked packet it received to the CNP it sent.
    pub ce_to_cnp: Dist,
    /// Request bytes per rate window (for the rate plot), ns window start → bytes, with
    /// pictures ([`Options::pictures`]).
    pub rate: Vec<(u64, u64)>,
    /// The rate windows' length, ns.
    pub rate_window_ns: u64,
    /// Times of the CNPs it received.
    pub cnps_received_at: Vec<u64>,
    /// (time, PSN, kind) of its packets for the PSN plot: 0 request, 1 retransmission,
    /// 2 ACK, 3 NAK, 4 CNP (bounded).
    pub trace: Vec<(u64, u32, u8)>,
    /// Messages as (start, end, operation index of [`OPS`]) for the trace (bounded).
    pub slices: Vec<(u64, u64, u8)>,
    /// Requests and ACKs go into `trace` one in `trace_stride` (it doubles when `trace`
    /// fills; marks are all kept).
    trace_stride: u64,
    trace_seen: u64,
}

impl Side {
    /// Fills [`Side::rate_after_cnp_pct`] from the rate windows and the CNPs received.
    fn note_rate_around_cnps(&mut self) {
        let win = self.rate_window_ns.max(1);
        let bytes_at = |rate: &[(u64, u64)], w: u64| {
            rate.binary_search_by_key(&w, |r| r.0)
                .map_or(0, |i| rate[i].1)
        };
        for &t in &self.cnps_received_at {
            let w = t / win * win;
            let (Some(before_w), after_w) = (w.checked_sub(win), w + win) else {
                continue;
            };
            let before = bytes_at(&self.rate, before_w);
            if let Some(pct) = (bytes_at(&self.rate, after_w) * 100).checked_div(before) {
                self.rate_after_cnp_pct.add(pct);
            }
        }
    }

    /// Adds `bytes` sent at `t` to the rate windows (halving their number, by merging
    /// neighbours, whenever [`RATE_MAX`] are kept).
    fn add_rate(&mut self, t: u64, bytes: u64) {
        if self.rate_window_ns == 0 {
            self.rate_window_ns = RATE_WINDOW_NS;
        }
        loop {
            let w = t / self.rate_window_ns * self.rate_window_ns;
            let n = self.rate.len();
            match self.rate.last_mut() {
                Some(last) if last.0 == w => {
                    last.1 += bytes;
                    return;
                }
                _ if n < RATE_MAX => {
                    self.rate.push((w, bytes));
                    return;
                }
                _ => {
                    self.rate_window_ns *= 2;
                    let win = self.rate_window_ns;
                    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(RATE_MAX);
                    for &(start, b) in &self.rate {
                        let ws = start / win * win;
                        match merged.last_mut() {
                            Some(m) if m.0 == ws => m.1 += b,
                            _ => merged.push((ws, b)),
                        }
                    }
                    self.rate = merged;
                }
            }
        }
    }
}

/// Operation index of [`Side::messages`].
pub const OPS: [&str; 7] = [
    "send",
    "send_imm",
    "write",
    "write_imm",
    "read",
    "atomic",
    "other",
];

/// One connection: two sides (or one, when only one direction was captured).
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// Its number, from 1 in order of first packet.
    pub id: usize,
    /// How the directions were paired: `cm`, `udp_sport`, `psn`, or `none`.
    pub paired_by: &'static str,
    /// The two sides.
    pub sides: [Side; 2],
    rules: Vec<Rule>,
    /// Events of this connection (the first [`MAX_EVENTS`]).
    pub events: Vec<Event>,
    /// Events not kept.
    pub events_dropped: u64,
    /// NAKs sent (either side), and how many of them a CNP from the same side followed within
    /// [`NAK_CNP_NS`] (does this NIC's notification point send CNPs on NAKs?).
    pub naks_and_cnps: (u64, u64),
}

/// A CNP this soon after a NAK from the same side counts as following it.
pub const NAK_CNP_NS: u64 = 100_000;

/// Events kept per connection for the report (every event still goes to the callback).
pub const MAX_EVENTS: usize = 1024;
/// Events kept for the report in all (each event still goes to the callback, and is
/// counted).
pub const MAX_EVENTS_TOTAL: usize = 200_000;

impl Connection {
    /// The verdict of every rule.
    pub fn verdicts(&self) -> Vec<Verdict> {
        RULES
            .iter()
            .zip(&self.rules)
            .map(|(name, r)| Verdict {
                rule: name,
                result: if r.checked == 0 {
                    "not_applicable"
                } else if r.violations > 0 {
                    "violated"
                } else {
                    "ok"
                },
                frames: r.frames.clone(),
                detail: {
                    let mut d = format!("{} checked, {} violated", r.checked, r.violations);
                    let early = if r.early > 0 {
                        format!(
                            "{} earlier than asked (what a response lost after the capture point looks like)",
                            r.early
                        )
                    } else {
                        String::new()
                    };
                    for extra in [&r.note, &early, &r.first] {
                        if !extra.is_empty() {
                            d.push_str("; ");
                            d.push_str(extra);
                        }
                    }
                    d
                },
            })
            .collect()
    }

    /// `true` when a rule was violated.
    pub fn violated(&self) -> bool {
        self.rules.iter().any(|r| r.violations > 0)
    }
}

/// The shortest local ACK timeout, 4.096 us x 2^1: a retransmission sooner after the last
/// progress is not a timeout.
const MIN_ACK_TIMEOUT_NS: u64 = 8_192;

/// The length [`ReqState::done_reads`] gives an atomic.
const ATOMIC: u32 = u32::MAX;

/// A network duplicate comes within this many request packets of its original.
const DUPLICATE_SPAN: u64 = 8;

/// The first rate window: 10 us (it doubles whenever 512 windows are kept).
pub const RATE_WINDOW_NS: u64 = 10_000;
/// Rate windows kept per side.
const RATE_MAX: usize = 512;
/// Message slices kept per side for the trace.
const SLICES_MAX: usize = 2_048;
/// Points kept per side for the PSN plot.
const TRACE_MAX: usize = 4_096;

/// One outstanding request (for RTT, READ latency and restart checks).
#[derive(Debug, Clone, Copy)]
struct Out {
    psn: u64,
    t: u64,
    retx: bool,
    read_len: Option<u32>,
    read_span: u64,
    frame: u64,
    /// An atomic (answered by an atomic ACK), not a READ.
    atomic: bool,
}

/// The request stream of one direction.
#[derive(Debug, Default)]
struct ReqState {
    started: bool,
    /// Highest request PSN, unwrapped.
    highest: u64,
    /// PSNs [first, highest] seen: a ring of the last `RING` (psn, t, hash, times sent,
    /// request number) by psn.
    ring: Vec<(u64, u64, u64, u16, u32)>,
    /// Request packets of this direction so far (the ring's last field: which one it was).
    count: u64,
    /// Open gaps: (first missing, last missing, time seen, frame).
    gaps: VecDeque<(u64, u64, u64, u64)>,
    /// Highest PSN acknowledged (unwrapped), when an ACK was seen.
    acked: Option<u64>,
    last_ack_t: u64,
    in_episode: bool,
    last_nak_seq: Option<(u64, u64, u64)>, // (psn, t, frame)
    /// Time of the previous request packet.
    last_req_t: u64,
    /// Time of the last response to these requests that acknowledged nothing new.
    last_resp_t: Option<u64>,
    /// The last network duplicate: (the PSN after it, frame), until the next request packet shows
    /// whether it began a run of resent packets.
    last_dup: Option<(u64, u64, u64)>,
    /// PSNs of the sequence NAKs since the last episode began (a requester answers the
    /// first it gets; a second may cross its restart).
    nak_psns: VecDeque<u64>,
    last_rnr: Option<(u64, u64)>, // (t, timer ns)
    last_implied: Option<u64>,
    last_episode_t: u64,
    outstanding: VecDeque<Out>,
    last_progress_t: u64,
    first_ce_since_cnp: Option<u64>,
    /// Bytes of the current message.
    msg_bytes: u64,
    /// Time of the current message's first packet.
    msg_start: Option<u64>,
    /// When the highest request is a READ: the fewest and the most further PSNs its
    /// responses use (its length over the largest and the smallest path MTU, 4096 and 256).
    read_extra: Option<(u64, u64)>,
    /// READs answered recently: (PSN, span, length), for duplicate READs and READ restarts.
    done_reads: VecDeque<(u64, u64, u32)>,
    /// Recent READ requests: (PSN, most PSNs its span can take, end address, length).
    read_ends: VecDeque<(u64, u64, u64, u32)>,
}

const RING: usize = 128;

impl ReqState {
    fn unwrap(&self, psn: u32) -> u64 {
        let d = (((psn.wrapping_sub(self.highest as u32)) << 8) as i32) >> 8;
        self.highest.wrapping_add(d as i64 as u64)
    }
    fn slot(&mut self, psn: u64) -> &mut (u64, u64, u64, u16, u32) {
        if self.ring.is_empty() {
            self.ring = vec![(u64::MAX, 0, 0, 0, 0); RING];
        }
        &mut self.ring[(psn % RING as u64) as usize]
    }
    /// PSNs the request at `psn` takes: a READ's span, else 1.
    fn span_at(&self, psn: u64) -> u64 {
        self.done_reads
            .iter()
            .rev()
            .map(|d| (d.0, d.1))
            .chain(
                self.outstanding
                    .iter()
                    .filter(|o| o.read_len.is_some())
                    .map(|o| (o.psn, o.read_span)),
            )
            .find(|&(p, _)| p == psn)
            .map_or(1, |(_, span)| span.max(1))
    }

    /// The last PSN the requests used: the highest request's, or the last of its span when
    /// it is a READ.
    fn span_end(&self) -> u64 {
        if let Some((_, most)) = self.read_extra {
            return self.highest + most;
        }
        let h = self.highest;
        self.outstanding
            .iter()
            .rev()
            .map(|o| (o.psn, o.read_span))
            .chain(self.done_reads.iter().rev().map(|d| (d.0, d.1)))
            .find(|&(psn, _)| psn == h)
            .map_or(h, |(psn, span)| psn + span.max(1) - 1)
    }

    /// `true` when `psn` lies in the span of a READ (outstanding or answered recently) or is
    /// a recent atomic's: a requester may restart there, asking again for an answer it did
    /// not get (IBTA 9.7.5.1.5).
    fn in_read(&self, psn: u64) -> bool {
        self.read_containing(psn).is_some()
    }

    /// The first PSN of the READ (or atomic) whose span holds `psn`.
    fn read_containing(&self, psn: u64) -> Option<u64> {
        self.outstanding
            .iter()
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
    fn packets_since(&mut self, psn: u64) -> u64 {
        let count = self.count as u32;
        let s = *self.slot(psn);
        u64::from(count.wrapping_sub(s.4))
    }
    /// How many times request PSN `psn` was sent (0: not in the ring).
    fn times_sent(&mut self, psn: u64) -> u16 {
        let s = *self.slot(psn);
        if s.0 == psn {
            s.3
        } else {
            0
        }
    }
    fn seen(&mut self, psn: u64) -> Option<(u64, u64)> {
        let s = *self.slot(psn);
        (s.0 == psn).then_some((s.1, s.2))
    }
}

/// The response stream of one direction (answers to the other direction's requests).
#[derive(Debug, Default)]
struct RespState {
    last_ack: Option<u64>,
    last_msn: Option<u32>,
    /// The last sequence NAK: (PSN, time).
    last_nak_psn: Option<(u64, u64)>,
    reads: VecDeque<(u64, u32, u64, u64, u64)>, // (psn, len, expected next psn, bytes so far, frame)
    last_cnp_t: Option<u64>,
    /// A NAK this side sent that no CNP has followed yet.
    nak_waiting_cnp: Option<u64>,
}

/// One direction: requests and responses from one sender to one QP.
#[derive(Debug)]
struct Dir {
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    conn: usize,
    side: usize,
    peer: Option<usize>,
    req: ReqState,
    resp: RespState,
    mtu: u32,
}

/// What a record contributes, worked out from its bytes (the part of the analysis that can
/// run on another thread: link parsing, the ICRC check, the time filter).
#[derive(Debug)]
struct Prep {
    first_ts: Option<Timestamp>,
    from: Option<f64>,
    to: Option<f64>,
}

impl Prep {
    fn new(opts: Options) -> Self {
        Self {
            first_ts: None,
            from: opts.from,
            to: opts.to,
        }
    }

    fn prepare(
        &mut self,
        frame_no: u64,
        ts: Timestamp,
        link_type: u32,
        data: &[u8],
    ) -> Option<Pkt> {
        let t = self.time(ts)?;
        let f = link::parse(link_type, data).ok()?;
        Pkt::of(frame_no, t, &f)
    }

    /// The record's time since the first record, ns; `None` outside `--from`/`--to`.
    fn time(&mut self, ts: Timestamp) -> Option<u64> {
        let first = *self.first_ts.get_or_insert(ts);
        let rel = ts.since(first);
        // Saturating: a capture may claim any time stamp.
        let t = (rel.secs as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(rel.nanos));
        let secs = t as f64 / 1e9;
        if self.from.is_some_and(|f| secs < f) || self.to.is_some_and(|to| secs >= to) {
            return None;
        }
        Some(t)
    }
}

/// Packets handed from the reading thread to the analyzing one at a time.
const BATCH: usize = 2048;

/// The streaming analyzer.
#[derive(Debug)]
pub struct Analyzer {
    opts: Options,
    dirs: Vec<Dir>,
    by_key: HashMap<(IpAddr, IpAddr, u32), usize>,
    /// (sender, receiver) → its directions not paired yet.
    by_hosts: HashMap<(IpAddr, IpAddr), Vec<usize>>,
    /// CM: (address, QPN) → the peer's (address, QPN).
    cm_peer: HashMap<(IpAddr, u32), (IpAddr, u32)>,
    cm_req: HashMap<u32, (IpAddr, u32)>,
    conns: Vec<Connection>,
    prep: Prep,
    last_t: u64,
    /// Packets read, RoCE packets analyzed.
    pub packets: u64,
    /// RoCE packets analyzed.
    pub roce: u64,
    /// RoCE packets of directions past [`MAX_DIRECTIONS`], not analyzed.
    pub untracked: u64,
    /// UD packets (datagrams, not connections: not analyzed).
    pub datagrams: u64,
    events_kept: usize,
}

/// Directions (sender, receiver, destination QP) followed; a capture naming more gets the
/// rest counted as untracked: memory is bounded by this, not by the capture.
pub const MAX_DIRECTIONS: usize = 1 << 15;
/// CM requests remembered for pairing.
const MAX_CM: usize = 1 << 16;

impl Analyzer {
    /// An analyzer with `opts`.
    pub fn new(opts: Options) -> Self {
        Self {
            opts,
            dirs: Vec::new(),
            by_key: HashMap::default(),
            by_hosts: HashMap::default(),
            cm_peer: HashMap::default(),
            cm_req: HashMap::default(),
            untracked: 0,
            datagrams: 0,
            events_kept: 0,
            conns: Vec::new(),
            prep: Prep::new(opts),
            last_t: 0,
            packets: 0,
            roce: 0,
        }
    }

    /// Analyzes one captured record; `on_event` gets every event it causes.
    pub fn record(
        &mut self,
        frame_no: u64,
        ts: Timestamp,
        link_type: u32,
        data: &[u8],
        on_event: &mut dyn FnMut(&Event),
    ) {
        self.packets += 1;
        if let Some(p) = self.prep.prepare(frame_no, ts, link_type, data) {
            self.packet(&p, on_event);
        }
    }

    /// [`Analyzer::record`] for a record its caller already parsed (`None`: not a frame the
    /// link layer reads), so that `decode --analyze` parses each record once.
    pub(crate) fn record_frame(
        &mut self,
        frame_no: u64,
        ts: Timestamp,
        frame: Option<&roce_proto::Frame<'_>>,
        on_event: &mut dyn FnMut(&Event),
    ) {
        self.packets += 1;
        let Some(t) = self.prep.time(ts) else {
            return;
        };
        if let Some(p) = frame.and_then(|f| Pkt::of(frame_no, t, f)) {
            self.packet(&p, on_event);
        }
    }

    pub(crate) fn packet(&mut self, p: &Pkt, on_event: &mut dyn FnMut(&Event)) {
        self.roce += 1;
        self.last_t = self.last_t.max(p.t);
        if let Some(cm) = p.cm {
            self.note_cm(p, cm);
        }
        // Datagrams (UD: MADs on QP0/QP1 and the rest) are not connections.
        if p.opcode.transport() == roce_proto::Transport::Ud {
            self.datagrams += 1;
            return;
        }
        let Some(d) = self.dir(p) else {
            self.untracked += 1;
            return;
        };
        if p.opcode.is_response() && self.dirs[d].peer.is_none() {
            self.pair_by_psn(d, p.psn);
        }
        let (conn, side) = (self.dirs[d].conn, self.dirs[d].side);
        let opts = self.opts;
        let dirs = &mut self.dirs;
        let mut ev = Emitter {
            conn,
            side,
            conns: &mut self.conns,
            on_event,
            pictures: opts.pictures,
            kept: &mut self.events_kept,
        };
        {
            let s = &mut ev.conns[conn].sides[side];
            s.packets += 1;
            s.bytes += u64::from(p.payload_len);
            if s.first_t == 0 && s.packets == 1 {
                s.first_t = p.t;
            }
            s.last_t = p.t;
        }
        if p.icrc_ok == Some(false) {
            ev.conns[conn].sides[side].icrc_bad += 1;
            ev.emit(p, EventKind::IcrcBad, None, String::new());
        }
        if p.ecn == roce_proto::Ecn::Ce {
            ev.conns[conn].sides[side].ecn_ce += 1;
            ev.emit(p, EventKind::EcnCe, None, String::new());
            let r = &mut dirs[d].req;
            r.first_ce_since_cnp.get_or_insert(p.t);
        }
        if p.opcode == Opcode::CNP {
            cnp(dirs, d, &opts, p, &mut ev);
        } else if p.opcode.is_request() {
            request(dirs, d, &opts, p, &mut ev);
        } else if p.opcode.is_response() {
            response(dirs, d, p, &mut ev);
        }
    }

    fn note_cm(&mut self, p: &Pkt, cm: pkt::CmFacts) {
        if self.cm_req.len() >= MAX_CM || self.cm_peer.len() >= 2 * MAX_CM {
            return;
        }
        if !cm.rep {
            self.cm_req.insert(cm.local_comm_id, (p.src, cm.local_qpn));
        } else if let Some(&(req_addr, req_qpn)) = self.cm_req.get(&cm.remote_comm_id) {
            let rep = (p.src, cm.local_qpn);
            self.cm_peer.insert((req_addr, req_qpn), rep);
            self.cm_peer.insert(rep, (req_addr, req_qpn));
        }
    }

    /// The direction of `p`, created (and paired if it can be) on its first packet.
    fn dir(&mut self, p: &Pkt) -> Option<usize> {
        if let Some(&d) = self.by_key.get(&(p.src, p.dst, p.dest_qp)) {
            return Some(d);
        }
        let d = self.dirs.len();
        if d >= MAX_DIRECTIONS {
            return None;
        }
        // The reverse direction: by the CM, else by the UDP source port.
        let mut peer = None;
        let mut by = "none";
        if let Some(&(addr, qpn)) = self.cm_peer.get(&(p.dst, p.dest_qp)) {
            if addr == p.src {
                peer = self
                    .by_key
                    .get(&(p.dst, p.src, qpn))
                    .copied()
                    .filter(|&r| self.dirs[r].peer.is_none());
                by = "cm";
            }
        }
        if peer.is_none() && p.sport != 0 {
            let cands: Vec<usize> = self
                .by_hosts
                .get(&(p.dst, p.src))
                .into_iter()
                .flatten()
                .copied()
                .filter(|&r| {
                    let x = &self.dirs[r];
                    x.peer.is_none() && x.sport == p.sport
                })
                .take(2)
                .collect();
            if cands.len() == 1 {
                peer = Some(cands[0]);
                by = "udp_sport";
            }
        }
        let (conn, side) = match peer {
            Some(r) => {
                self.dirs[r].peer = Some(d);
                let c = self.dirs[r].conn;
                self.conns[c].paired_by = by;
                (c, 1 - self.dirs[r].side)
            }
            None => {
                let c = self.conns.len();
                self.conns.push(Connection {
                    id: c + 1,
                    paired_by: "none",
                    rules: vec![Rule::default(); RULES.len()],
                    ..Connection::default()
                });
                (c, 0)
            }
        };
        self.conns[conn].sides[side].addr = Some(p.src);
        self.conns[conn].sides[1 - side].qpn = Some(p.dest_qp);
        self.conns[conn].sides[1 - side].addr.get_or_insert(p.dst);
        self.dirs.push(Dir {
            src: p.src,
            dst: p.dst,
            sport: p.sport,
            conn,
            side,
            peer,
            req: ReqState::default(),
            resp: RespState::default(),
            mtu: 0,
        });
        self.by_key.insert((p.src, p.dst, p.dest_qp), d);
        match peer {
            Some(r) => self.unlist(r),
            None => self.by_hosts.entry((p.src, p.dst)).or_default().push(d),
        }
        Some(d)
    }

    /// Takes a direction that found its pair out of [`Analyzer::by_hosts`] (which lists the
    /// unpaired ones).
    fn unlist(&mut self, d: usize) {
        let key = (self.dirs[d].src, self.dirs[d].dst);
        if let Some(v) = self.by_hosts.get_mut(&key) {
            v.retain(|&x| x != d);
            if v.is_empty() {
                self.by_hosts.remove(&key);
            }
        }
    }

    /// Pairs an unpaired response direction with the request direction whose PSNs it
    /// answers.
    fn pair_by_psn(&mut self, d: usize, psn: u32) {
        if self.dirs[d].peer.is_some() {
            return;
        }
        let (src, dst) = (self.dirs[d].src, self.dirs[d].dst);
        let Some(back) = self.by_hosts.get(&(dst, src)) else {
            return;
        };
        // The first few unpaired candidates only: a crafted capture with many QPs between two
        // hosts must not make every response a scan.
        let cand = back.iter().copied().take(64).find(|&r| {
            let x = &self.dirs[r];
            if r == d || x.peer.is_some() || !x.req.started {
                return false;
            }
            let u = x.req.unwrap(psn);
            let lo = x.req.outstanding.front().map_or(x.req.highest, |o| o.psn);
            u >= lo.saturating_sub(1) && u <= x.req.highest
        });
        let Some(r) = cand else {
            return;
        };
        // Merge d's connection into r's.
        let (old, new) = (self.dirs[d].conn, self.dirs[r].conn);
        let side = 1 - self.dirs[r].side;
        let moved = std::mem::take(&mut self.conns[old].sides[0]);
        let events = std::mem::take(&mut self.conns[old].events);
        let s = &mut self.conns[new].sides[side];
        *s = Side {
            qpn: s.qpn.or(moved.qpn),
            ..moved
        };
        self.conns[new]
            .events
            .extend(events.into_iter().map(|mut e| {
                e.connection = new;
                e.side = side;
                e
            }));
        self.conns[old].paired_by = "merged";
        self.dirs[d].conn = new;
        self.dirs[d].side = side;
        self.dirs[d].peer = Some(r);
        self.dirs[r].peer = Some(d);
        self.unlist(r);
        self.unlist(d);
        self.conns[new].paired_by = "psn";
    }

    /// Ends the analysis: stalls still open, PSNs never seen; returns the connections.
    pub fn finish(mut self, on_event: &mut dyn FnMut(&Event)) -> Vec<Connection> {
        let end = self.last_t;
        for d in 0..self.dirs.len() {
            let (conn, side) = (self.dirs[d].conn, self.dirs[d].side);
            let r = &self.dirs[d].req;
            let never: u64 = r.gaps.iter().map(|g| g.1 - g.0 + 1).sum();
            let stall = !r.outstanding.is_empty()
                && end.saturating_sub(r.last_progress_t) > self.opts.stall_ns;
            let last = r.last_progress_t;
            let s = &mut self.conns[conn].sides[side];
            s.never_seen_psns += never;
            if stall {
                s.stalls += 1;
                let e = Event {
                    frame: 0,
                    t: end,
                    connection: conn,
                    side,
                    kind: EventKind::Stall,
                    psn: 0,
                    cause: None,
                    detail: format!(
                        "{:.3} ms without progress at the end of the capture",
                        (end - last) as f64 / 1e6
                    ),
                };
                on_event(&e);
                push_event(&mut self.conns[conn], e, &mut self.events_kept);
            }
        }
        let mut conns: Vec<Connection> = self
            .conns
            .into_iter()
            .filter(|c| c.paired_by != "merged")
            .collect();
        if let Some(q) = self.opts.qp {
            conns.retain(|c| c.sides.iter().any(|s| s.qpn == Some(q)));
        }
        for (i, c) in conns.iter_mut().enumerate() {
            c.id = i + 1;
            for e in &mut c.events {
                e.connection = i;
            }
            if let Some(m) = c
                .sides
                .iter()
                .filter(|s| s.cnp_interval.count() > 0)
                .map(|s| s.cnp_interval.quantile(0.0))
                .min()
            {
                c.rules[7].note = format!("observed minimum {:.1} us", m as f64 / 1e3);
            }
            let (naks, followed) = c.naks_and_cnps;
            if naks > 0 && c.sides.iter().any(|s| s.cnps > 0) {
                let sep = if c.rules[7].note.is_empty() { "" } else { "; " };
                c.rules[7].note += &format!(
                    "{sep}{followed} of {naks} NAKs followed by a CNP within {} us",
                    NAK_CNP_NS / 1000
                );
            }
            for s in &mut c.sides {
                s.note_rate_around_cnps();
            }
        }
        conns
    }
}

/// Two distinct directions, mutably: (requests of `req`, responses of `resp`).
fn pair_mut(dirs: &mut [Dir], req: usize, resp: usize) -> (&mut Dir, &mut Dir) {
    if req < resp {
        let (a, b) = dirs.split_at_mut(resp);
        (&mut a[req], &mut b[0])
    } else {
        let (a, b) = dirs.split_at_mut(req);
        (&mut b[0], &mut a[resp])
    }
}

fn request(dirs: &mut [Dir], d: usize, opts: &Options, p: &Pkt, ev: &mut Emitter<'_, '_>) {
    let dir = &mut dirs[d];
    // The path MTU: the payload of First and Middle packets (IBTA 9.7.1, C9-93).
    if matches!(
        p.opcode.class(),
        roce_proto::opcode::Class::First | roce_proto::opcode::Class::Middle
    ) && p.payload_len > dir.mtu
    {
        dir.mtu = p.payload_len;
    }
    let mtu = if dir.mtu == 0 { 4096 } else { dir.mtu };
    let r = &mut dir.req;
    let idle =
        p.t.saturating_sub(std::mem::replace(&mut r.last_req_t, p.t));
    r.count += 1;
    ev.side_mut().requests += 1;
    if !r.started {
        r.started = true;
        r.highest = (1u64 << 32) + u64::from(p.psn);
        let h = r.highest;
        r.sent(h, p.t, p.hash);
        r.last_progress_t = p.t;
        let s = ev.side_mut();
        s.psn_first = Some(p.psn);
        s.psn_last = Some(p.psn);
        new_request(r, p, r.highest, mtu, ev);
        return;
    }
    let u = r.unwrap(p.psn);
    // A stall: nothing moved for too long while requests were outstanding.
    if !r.outstanding.is_empty() && p.t.saturating_sub(r.last_progress_t) > opts.stall_ns {
        ev.side_mut().stalls += 1;
        let gap = p.t.saturating_sub(r.last_progress_t);
        ev.emit(
            p,
            EventKind::Stall,
            None,
            format!("{:.3} ms without progress", gap as f64 / 1e6),
        );
    }
    // A READ re-issued from the middle of a READ's span (ending where it ended) is a
    // retransmission even when its PSN is past the highest request PSN seen.
    let resumed_read = p.opcode.operation() == 0x0c
        && p.read_end.is_some_and(|end| {
            r.read_ends.iter().any(|&(psn, most, e, len)| {
                // Shorter, from further in, to the same end.
                e == end && u > psn && u < psn + most && p.dma_len.is_some_and(|l| l < len)
            })
        });
    if u > r.highest && !resumed_read {
        r.last_dup = None;
        let mut skipped = u - r.highest - 1;
        let mut gap_from = r.highest + 1;
        // A READ takes one PSN per response packet (IBTA 9.7.1): the next request's PSN
        // follows its span, which tells the span.
        if let Some((least, most)) = r.read_extra.take() {
            if skipped <= most {
                let h = r.highest;
                if let Some(o) = r.outstanding.iter_mut().rev().find(|o| o.psn == h) {
                    o.read_span = skipped + 1;
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
        if (u as u32) < (r.highest as u32) & 0xff_ffff || (u >> 24) > (r.highest >> 24) {
            ev.side_mut().psn_wraps += 1;
        }
        r.highest = u;
        r.in_episode = false;
        r.last_progress_t = p.t;
        r.sent(u, p.t, p.hash);
        ev.side_mut().psn_last = Some(p.psn);
        new_request(r, p, u, mtu, ev);
        return;
    }
    // Not past the highest: seen before (a duplicate or a retransmission), or a missing
    // PSN arriving (out of order, or resent after a loss before the capture point).
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
        if h0 == p.hash
            && !run
            && r.last_resp_t.is_none_or(|rt| rt <= t0)
            && r.packets_since(u) <= DUPLICATE_SPAN
            && p.t.saturating_sub(t0) < opts.duplicate_ns
            && !r.in_episode
            && !resend_cause
        {
            let next = u + r.span_at(u);
            r.last_dup = Some((next, p.frame, u));
            r.sent(u, p.t, p.hash);
            ev.side_mut().duplicates += 1;
            ev.emit(p, EventKind::Duplicate, None, String::new());
            return;
        }
    } else if let Some(i) = r.gaps.iter().position(|g| u >= g.0 && u <= g.1) {
        let g = r.gaps[i];
        // Fill the PSN in its gap.
        if g.0 == g.1 {
            r.gaps.remove(i);
        } else if u == g.0 {
            r.gaps[i].0 += 1;
        } else if u == g.1 {
            r.gaps[i].1 -= 1;
        } else {
            r.gaps[i].1 = u - 1;
            r.gaps.insert(i + 1, (u + 1, g.1, g.2, g.3));
        }
        r.sent(u, p.t, p.hash);
        // Resent (a NAK or a resend trigger since the gap showed) or reordered.
        let resend_cause = r.last_nak_seq.is_some_and(|n| n.1 >= g.2)
            || r.last_rnr.is_some_and(|x| x.0 >= g.2)
            || r.last_implied.is_some_and(|x| x >= g.2);
        if p.t.saturating_sub(g.2) < opts.reorder_ns && !r.in_episode && !resend_cause {
            ev.side_mut().out_of_order += 1;
            ev.emit(p, EventKind::OutOfOrder, None, String::new());
            return;
        }
    }
    r.sent(u, p.t, p.hash);
    if p.opcode.operation() == 0x0c {
        // A READ again, whole or from the middle of its span: what the responses answer.
        let len = p.dma_len.unwrap_or(0);
        let span = u64::from(len.div_ceil(mtu).max(1));
        r.outstanding.retain(|o| o.psn != u);
        let at = r
            .outstanding
            .iter()
            .position(|o| o.psn > u)
            .unwrap_or(r.outstanding.len());
        r.outstanding.insert(
            at,
            Out {
                psn: u,
                t: p.t,
                retx: true,
                read_len: Some(len),
                read_span: span,
                frame: p.frame,
                atomic: false,
            },
        );
    }
    ev.side_mut().retransmitted_packets += 1;
    for o in r.outstanding.iter_mut().filter(|o| o.psn == u) {
        o.retx = true;
    }
    let mut cause = None;
    let mut rnr_note = None;
    let quiet_since = p.t.saturating_sub(
        r.last_ack_t
            .max(r.outstanding.front().map_or(r.last_ack_t, |o| o.t)),
    );
    if !r.in_episode {
        r.in_episode = true;
        // After an RNR NAK the responder also NAKs the packets that followed as out of
        // sequence: a requester that waited out the RNR timer answers the RNR NAK.
        let waited_rnr = r.last_rnr.is_some_and(|(rt, timer)| {
            rt > r.last_episode_t
                && p.t.saturating_sub(rt) >= timer / 2
                && p.t.saturating_sub(rt) <= 2 * timer + opts.nak_window_ns
        });
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
                    ev.rule(0).early += 1;
                }
                let (rp, np) = (restart as u32 & 0xff_ffff, npsn as u32 & 0xff_ffff);
                ev.rule(0).check_why(ok, p.frame, || {
                    format!("restarted at PSN {rp}, the NAK asked for {np}")
                });
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
                let since = p.t.saturating_sub(
                    r.last_ack_t
                        .max(r.outstanding.front().map_or(r.last_ack_t, |o| o.t)),
                );
                ev.side_mut().retransmission_timeout.add(since);
                let oldest = r.acked.map_or_else(
                    || r.outstanding.front().map_or(restart, |o| o.psn),
                    |a| a + 1,
                );
                // Not past the oldest unacknowledged PSN (earlier is what an ACK lost
                // after the capture point looks like).
                let (rp, op) = (restart as u32 & 0xff_ffff, oldest as u32 & 0xff_ffff);
                if restart < oldest {
                    ev.rule(1).early += 1;
                }
                ev.rule(1).check_why(restart <= oldest, p.frame, || {
                    format!("restarted at PSN {rp}, past the oldest unacknowledged {op}")
                });
                Cause::Timeout
            }
            _ => Cause::Unknown,
        };
        r.last_episode_t = p.t;
        r.nak_psns.clear();
        let ci = Cause::ALL.iter().position(|x| *x == c).unwrap_or(4);
        ev.side_mut().episodes[ci] += 1;
        cause = Some(c);
    }
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

fn response(dirs: &mut [Dir], d: usize, p: &Pkt, ev: &mut Emitter<'_, '_>) {
    ev.side_mut().responses += 1;
    let peer = dirs[d].peer;
    let Some(pr) = peer else {
        // The requests are not in the capture: count what can be counted.
        if let Some(AethKind::Nak(c)) = p.aeth {
            let k = nak_index(Some(c));
            ev.side_mut().naks[k] += 1;
            ev.emit(p, EventKind::Nak(k as u8), None, String::new());
        } else if let Some(AethKind::RnrNak { .. }) = p.aeth {
            ev.side_mut().naks[1] += 1;
            ev.emit(p, EventKind::Nak(1), None, String::new());
        }
        return;
    };
    let (req_dir, resp_dir) = pair_mut(dirs, pr, d);
    let r = &mut req_dir.req;
    let resp = &mut resp_dir.resp;
    if !r.started {
        return;
    }
    let u = r.unwrap(p.psn);
    let read_resp = p.opcode.is_read_response();
    if read_resp || r.acked.is_some_and(|a| u <= a) {
        // A response that acknowledges nothing new (a duplicate ACK answering a
        // duplicate), or a READ response (whose predecessor may be missing at the
        // requester): one a requester may resend on.
        r.last_resp_t = Some(p.t);
    }
    // Responses acknowledge up to their PSN (READ responses: their packets).
    let acks = match p.aeth {
        Some(AethKind::Ack { .. }) => true,
        _ => read_resp || p.opcode.operation() == 0x12,
    };
    if acks {
        if u > r.span_end() && !read_resp {
            ev.side_mut().ghost_acks += 1;
            ev.emit(
                p,
                EventKind::GhostAck,
                None,
                format!("PSN {} never sent", p.psn),
            );
        } else {
            if let Some(last) = resp.last_ack {
                if u < last && !read_resp {
                    // Allowed only as the answer to a duplicate request of that PSN.
                    // An answer again is right when the request was sent again.
                    // An atomic ACK again is the responder answering a duplicate atomic
                    // with its saved result (IBTA 9.7.5.1.7.4), whether or not the
                    // duplicate was made before the capture point.
                    let atomic_again = p.opcode.operation() == 0x12
                        && r.done_reads.iter().any(|d| d.0 == u && d.2 == ATOMIC);
                    let answered_dup = r.in_episode || atomic_again || r.times_sent(u) >= 2;
                    let (ap, lp) = (p.psn, last as u32 & 0xff_ffff);
                    ev.rule(4).check_why(answered_dup, p.frame, || {
                        format!("ACK PSN {ap} after {lp}, and PSN {ap} was sent only once")
                    });
                    if !answered_dup {
                        ev.side_mut().stale_acks += 1;
                        ev.emit(p, EventKind::StaleAck, None, String::new());
                    }
                }
            }
            if p.aeth.is_some() {
                if let Some(m) = resp.last_msn {
                    let back = (m.wrapping_sub(p.msn) & 0xff_ffff) < 0x80_0000 && m != p.msn;
                    let msn = p.msn;
                    ev.rule(4)
                        .check_why(!back, p.frame, || format!("MSN {msn} after {m}"));
                }
                resp.last_msn = Some(p.msn);
            }
            // While a hole is open (PSNs skipped and not seen since), an ACK must stay
            // before it: the responder cannot have what never passed the capture point.
            if let Some(g) = r.gaps.front().copied().filter(|_| !read_resp) {
                let (ap, hp) = (p.psn, g.0 as u32 & 0xff_ffff);
                ev.rule(3).check_why(u < g.0, p.frame, || {
                    format!("ACK PSN {ap} with PSN {hp} never seen")
                });
            }
            if resp.last_ack.is_none_or(|l| u > l) {
                resp.last_ack = Some(u);
            }
            if r.acked.is_none_or(|a| u > a) {
                r.acked = Some(u);
                r.last_ack_t = p.t;
                r.last_progress_t = p.t;
            }
            // A READ response acknowledges what precedes its READ; the READ itself is
            // done at its last response (in `read_response`).
            let cur_read = if read_resp {
                use roce_proto::opcode::Class;
                match p.opcode.class() {
                    Class::First | Class::Only => Some(u),
                    _ => Some(
                        resp.reads
                            .iter()
                            .rev()
                            .find(|x| x.2 == u)
                            .map_or(u, |x| x.0),
                    ),
                }
            } else {
                None
            };
            // Covered: what precedes the READ being answered, or everything up to the
            // ACK's PSN. A READ is answered only by its responses and an atomic by its
            // atomic ACK: one covered but unanswered stays outstanding, and the response
            // for a later PSN implies its answer was lost (IBTA 9.7.5.1.3).
            let limit = cur_read.unwrap_or(u + 1);
            let atomic_ack = p.opcode.operation() == 0x12;
            let mut i = 0;
            while let Some(&o) = r.outstanding.get(i) {
                if o.psn >= limit {
                    break;
                }
                let answered = o.read_len.is_none() || (o.atomic && atomic_ack && o.psn == u);
                if !answered {
                    r.last_implied = Some(p.t);
                    i += 1;
                    continue;
                }
                r.outstanding.remove(i);
                if !o.retx && o.read_len.is_none() {
                    ev.side_other_mut().ack_rtt.add(p.t.saturating_sub(o.t));
                }
            }
        }
        ev.trace(p.t, p.psn, 2);
    }
    // A sequence or RNR NAK for PSN n acknowledges everything before n (IBTA 9.7.5.1.2).
    if matches!(
        p.aeth,
        Some(AethKind::Nak(NakCode::PsnSequenceError) | AethKind::RnrNak { .. })
    ) && u <= r.highest + 1
    {
        if r.acked.is_none_or(|a| u - 1 > a) {
            r.acked = Some(u - 1);
            r.last_ack_t = p.t;
        }
        while r
            .outstanding
            .front()
            .is_some_and(|o| o.psn < u && o.read_len.is_none())
        {
            r.outstanding.pop_front();
        }
    }
    if matches!(p.aeth, Some(AethKind::Nak(_) | AethKind::RnrNak { .. })) {
        resp.nak_waiting_cnp = Some(p.t);
        ev.conns[ev.conn].naks_and_cnps.0 += 1;
    }
    match p.aeth {
        Some(AethKind::Nak(code)) => {
            let k = nak_index(Some(code));
            ev.side_mut().naks[k] += 1;
            ev.trace(p.t, p.psn, 3);
            if code == NakCode::PsnSequenceError {
                // One NAK per out-of-sequence episode.
                // Again for the same PSN with that PSN not sent since the last one: the
                // responder NAKs each out-of-sequence packet (a NAK storm). Once the
                // requester sent it again (and it was lost again, or RNR NAKed), a new
                // episode may have its NAK.
                // (An RNR NAK since shows the responder took the PSN in sequence again.)
                let storm = resp.last_nak_psn.is_some_and(|(np, nt)| {
                    np == u
                        && r.seen(u).is_none_or(|(t, _)| t < nt)
                        && r.last_rnr.is_none_or(|(rt, _)| rt < nt)
                });
                ev.rule(2).check(!storm, p.frame);
                resp.last_nak_psn = Some((u, p.t));
                r.last_nak_seq = Some((u, p.t, p.frame));
                if r.nak_psns.len() < 16 {
                    r.nak_psns.push_back(u);
                }
                if let Some(g) = r.gaps.iter().find(|g| g.0 == u) {
                    ev.side_mut().nak_generation.add(p.t.saturating_sub(g.2));
                }
            }
            ev.emit(p, EventKind::Nak(k as u8), None, format!("PSN {}", p.psn));
        }
        Some(AethKind::RnrNak { timer }) => {
            ev.side_mut().naks[1] += 1;
            r.last_rnr = Some((p.t, roce_proto::aeth::rnr_timer_ns(timer)));
            ev.trace(p.t, p.psn, 3);
            ev.emit(
                p,
                EventKind::Nak(1),
                None,
                format!("timer {} us", roce_proto::aeth::rnr_timer_ns(timer) / 1000),
            );
        }
        _ => {}
    }
    if read_resp {
        read_response(dirs, d, pr, p, u, ev);
    }
}

fn read_response(dirs: &mut [Dir], d: usize, pr: usize, p: &Pkt, u: u64, ev: &mut Emitter<'_, '_>) {
    use roce_proto::opcode::Class;
    let class = p.opcode.class();
    let (req_dir, resp_dir) = pair_mut(dirs, pr, d);
    let reads = &mut resp_dir.resp.reads;
    // A READ re-issued from the middle of its span is answered from that PSN on with Middle
    // and Last opcodes (as rxe does, IBTA 9.7.5.1.5): that starts a response too.
    let resumed = matches!(class, Class::Middle | Class::Last)
        && !reads.iter().any(|x| x.2 == u)
        && (req_dir
            .req
            .outstanding
            .iter()
            .any(|o| o.psn == u && o.read_len.is_some() && !o.atomic && o.retx)
            || req_dir
                .req
                .done_reads
                .iter()
                .any(|d| d.0 == u && d.2 != ATOMIC));
    if matches!(class, Class::First | Class::Only) || resumed {
        // It answers the READ request at this PSN (the latest one, for a re-executed
        // duplicate).
        let req = req_dir
            .req
            .outstanding
            .iter()
            .rev()
            .find(|o| o.psn == u && o.read_len.is_some() && !o.atomic)
            .copied();
        match req {
            Some(o) => {
                if !o.retx {
                    ev.side_other_mut()
                        .read_latency
                        .add(p.t.saturating_sub(o.t));
                } else {
                    ev.rule(6).check(true, p.frame);
                }
                reads.push_back((
                    u,
                    o.read_len.unwrap_or(0),
                    u + 1,
                    u64::from(p.payload_len),
                    o.frame,
                ));
                if reads.len() > 1024 {
                    reads.pop_front();
                }
            }
            None if req_dir.req.done_reads.iter().any(|d| d.0 == u) => {
                // The responder answering a duplicate READ again, from its first PSN.
                let &(_, _, len) = req_dir
                    .req
                    .done_reads
                    .iter()
                    .rev()
                    .find(|d| d.0 == u)
                    .unwrap_or(&(u, 1, 0));
                ev.rule(6).check(true, p.frame);
                reads.push_back((u, len, u + 1, u64::from(p.payload_len), p.frame));
                if reads.len() > 1024 {
                    reads.pop_front();
                }
            }
            None => {
                // A response that starts at a PSN no READ request has: inside a READ's
                // span is a duplicate READ not re-executed from its requested PSN.
                if req_dir.req.in_read(u) {
                    ev.rule(6).check(false, p.frame);
                }
                ev.rule(5).check(false, p.frame);
                ev.side_mut().read_response_mismatches += 1;
                ev.emit(
                    p,
                    EventKind::ReadResponseMismatch,
                    None,
                    "no READ request at this PSN".into(),
                );
                return;
            }
        }
    } else if let Some(rd) = reads.iter_mut().rev().find(|x| x.2 == u) {
        rd.2 += 1;
        rd.3 += u64::from(p.payload_len);
    } else if class == Class::Middle || class == Class::Last {
        // Inside a READ's span but not continuing a response: a duplicate READ answered
        // from another PSN than the one requested.
        if req_dir.req.in_read(u) {
            ev.rule(6).check(false, p.frame);
        }
        ev.rule(5).check(false, p.frame);
        ev.side_mut().read_response_mismatches += 1;
        ev.emit(
            p,
            EventKind::ReadResponseMismatch,
            None,
            "PSN outside any READ's span".into(),
        );
        return;
    }
    if matches!(class, Class::Last | Class::Only) {
        if let Some(i) = reads.iter().rposition(|x| x.2 == u + 1) {
            let (rpsn, len, _, bytes, _) = reads[i];
            reads.remove(i);
            let span = u - rpsn + 1;
            let rq = &mut req_dir.req;
            // This READ is answered; another READ before it (re-issued, its answer still
            // on the way) is not.
            if let Some(i) = rq
                .outstanding
                .iter()
                .position(|o| o.psn == rpsn && o.read_len.is_some() && !o.atomic)
            {
                rq.outstanding.remove(i);
            }
            while rq
                .outstanding
                .front()
                .is_some_and(|o| o.psn < rpsn && o.read_len.is_none())
            {
                rq.outstanding.pop_front();
            }
            rq.done_reads.push_back((rpsn, span, len));
            if rq.done_reads.len() > 64 {
                rq.done_reads.pop_front();
            }
            if req_dir.req.highest == rpsn {
                // Its responses told its span exactly.
                req_dir.req.read_extra = Some((span - 1, span - 1));
            }
            let ok = bytes == u64::from(len);
            ev.rule(5).check(ok, p.frame);
            if !ok {
                ev.side_mut().read_response_mismatches += 1;
                ev.emit(
                    p,
                    EventKind::ReadResponseMismatch,
                    None,
                    format!("{bytes} bytes for a READ of {len}"),
                );
            }
        }
    }
}

fn cnp(dirs: &mut [Dir], d: usize, opts: &Options, p: &Pkt, ev: &mut Emitter<'_, '_>) {
    ev.side_mut().cnps += 1;
    let last = dirs[d].resp.last_cnp_t;
    if let Some(l) = last {
        let gap = p.t.saturating_sub(l);
        ev.side_mut().cnp_interval.add(gap);
        ev.rule(7).check(gap >= opts.cnp_interval_ns, p.frame);
    }
    dirs[d].resp.last_cnp_t = Some(p.t);
    if let Some(nt) = dirs[d].resp.nak_waiting_cnp.take() {
        if p.t.saturating_sub(nt) <= NAK_CNP_NS {
            ev.conns[ev.conn].naks_and_cnps.1 += 1;
        }
    }
    if let Some(pr) = dirs[d].peer {
        if let Some(ce) = dirs[pr].req.first_ce_since_cnp.take() {
            ev.side_mut().ce_to_cnp.add(p.t.saturating_sub(ce));
        }
        let pictures = ev.pictures;
        let s = ev.side_other_mut();
        if pictures && s.cnps_received_at.len() < TRACE_MAX {
            s.cnps_received_at.push(p.t);
        }
    }
    // Marked at the PSN the notified requester had reached (a CNP's own PSN means nothing).
    if let Some(pr) = dirs[d].peer.filter(|&pr| dirs[pr].req.started) {
        ev.trace_other(p.t, dirs[pr].req.highest as u32 & 0xff_ffff, 4);
    }
    ev.emit(p, EventKind::Cnp, None, String::new());
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

fn nak_index(c: Option<NakCode>) -> usize {
    match c {
        Some(NakCode::PsnSequenceError) => 0,
        Some(NakCode::InvalidRequest) => 2,
        Some(NakCode::RemoteAccessError) => 3,
        Some(NakCode::RemoteOperationalError) => 4,
        _ => 5,
    }
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
    r.read_extra = match (read, p.dma_len) {
        (true, Some(l)) => Some((
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
            frame: p.frame,
            atomic,
        });
        if r.outstanding.len() > 8192 {
            r.outstanding.pop_front();
        }
    }
    ev.trace(p.t, p.psn, 0);
}

/// Emits events into a connection and to the caller.
struct Emitter<'a, 'b> {
    conn: usize,
    side: usize,
    /// Keep the plot and trace data ([`Options::pictures`]).
    pictures: bool,
    /// Events kept so far, all connections.
    kept: &'a mut usize,
    conns: &'a mut Vec<Connection>,
    on_event: &'b mut dyn FnMut(&Event),
}

fn push_event(c: &mut Connection, e: Event, kept: &mut usize) {
    if c.events.len() < MAX_EVENTS && *kept < MAX_EVENTS_TOTAL {
        c.events.push(e);
        *kept += 1;
    } else {
        c.events_dropped += 1;
    }
}

impl Emitter<'_, '_> {
    fn side_mut(&mut self) -> &mut Side {
        &mut self.conns[self.conn].sides[self.side]
    }
    fn side_other_mut(&mut self) -> &mut Side {
        &mut self.conns[self.conn].sides[1 - self.side]
    }
    fn rule(&mut self, i: usize) -> &mut Rule {
        &mut self.conns[self.conn].rules[i]
    }
    fn peer_seen(&self) -> bool {
        self.conns[self.conn].sides[1 - self.side].packets > 0
    }
    /// Changes the kind of the stored event of `frame` (a later packet told what it was).
    fn retag(&mut self, frame: u64, from: EventKind, to: EventKind) {
        let c = &mut self.conns[self.conn];
        if let Some(e) = c
            .events
            .iter_mut()
            .rev()
            .find(|e| e.frame == frame && e.kind == from)
        {
            e.kind = to;
        }
    }
    /// A CNP mark on the PSN line of the other side (the requester it notifies).
    fn trace_other(&mut self, t: u64, psn: u32, kind: u8) {
        self.side = 1 - self.side;
        self.trace(t, psn, kind);
        self.side = 1 - self.side;
    }
    /// A point of the PSN plot: the whole capture, thinned (every mark, one request or ACK
    /// in a stride that doubles whenever the points fill up).
    fn trace(&mut self, t: u64, psn: u32, kind: u8) {
        if !self.pictures {
            return;
        }
        let s = self.side_mut();
        let thin = kind == 0 || kind == 2;
        if thin {
            s.trace_seen += 1;
            if !s.trace_seen.is_multiple_of(s.trace_stride.max(1)) {
                return;
            }
        }
        if s.trace.len() >= TRACE_MAX {
            let mut keep = false;
            s.trace.retain(|p| {
                if p.2 == 0 || p.2 == 2 {
                    keep = !keep;
                    keep
                } else {
                    true
                }
            });
            s.trace_stride = s.trace_stride.max(1) * 2;
            if s.trace.len() >= TRACE_MAX {
                return;
            }
        }
        s.trace.push((t, psn, kind));
    }
    fn emit(&mut self, p: &Pkt, kind: EventKind, cause: Option<Cause>, detail: String) {
        let e = Event {
            frame: p.frame,
            t: p.t,
            connection: self.conn,
            side: self.side,
            kind,
            psn: p.psn,
            cause,
            detail,
        };
        (self.on_event)(&e);
        push_event(&mut self.conns[self.conn], e, self.kept);
    }
}

/// A whole capture's analysis.
#[derive(Debug)]
pub struct Analysis {
    /// The connections.
    pub connections: Vec<Connection>,
    /// Records read.
    pub packets: u64,
    /// RoCE packets analyzed.
    pub roce: u64,
    /// RoCE packets of directions past [`MAX_DIRECTIONS`], not analyzed.
    pub untracked: u64,
    /// UD packets (datagrams, not connections: not analyzed).
    pub datagrams: u64,
    /// The read error that ended the input early (what was read before it is analyzed).
    pub error: Option<DecodeError>,
}

impl Analysis {
    /// `true` when any connection violated a rule.
    pub fn violated(&self) -> bool {
        self.connections.iter().any(Connection::violated)
    }
}

impl Analyzer {
    /// Ends the analysis ([`Analyzer::finish`]) and wraps it up.
    pub fn into_analysis(self, on_event: &mut dyn FnMut(&Event)) -> Analysis {
        let (packets, roce, untracked, datagrams) =
            (self.packets, self.roce, self.untracked, self.datagrams);
        Analysis {
            connections: self.finish(on_event),
            packets,
            roce,
            untracked,
            datagrams,
            error: None,
        }
    }
}

/// Analyzes a capture read from `reader`; every event also goes to `on_event`. A read error
/// ends the input: the records before it are analyzed and the error is in
/// [`Analysis::error`]. Reading and parsing run on a second thread, the analysis on this one
/// (the order of packets is kept: batches go through a bounded channel).
pub fn analyze<R: Read + Send>(
    reader: &mut CaptureReader<R>,
    opts: Options,
    on_event: &mut dyn FnMut(&Event),
) -> Analysis {
    let mut a = Analyzer::new(opts);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Pkt>>(4);
    let (records, error) = std::thread::scope(|scope| {
        let producer = scope.spawn(move || {
            let mut prep = Prep::new(opts);
            let mut batch = Vec::with_capacity(BATCH);
            let mut n = 0u64;
            let error = loop {
                match reader.next_record() {
                    Ok(Some(rec)) => {
                        n += 1;
                        if let Some(p) = prep.prepare(n, rec.ts, rec.link_type, rec.data) {
                            batch.push(p);
                            if batch.len() == BATCH {
                                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                                if tx.send(full).is_err() {
                                    break None;
                                }
                            }
                        }
                    }
                    Ok(None) => break None,
                    Err(e) => break Some(DecodeError::Read(e)),
                }
            };
            if !batch.is_empty() {
                let _ = tx.send(batch);
            }
            (n, error)
        });
        for batch in rx {
            for p in &batch {
                a.packet(p, on_event);
            }
        }
        match producer.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    });
    a.packets = records;
    Analysis {
        error,
        ..a.into_analysis(on_event)
    }
}

/// Analyzes the capture at `path` (`-` for stdin); `Err` when it cannot be opened or is not
/// a capture.
pub fn analyze_path(
    path: &str,
    opts: Options,
    on_event: &mut dyn FnMut(&Event),
) -> Result<Analysis, DecodeError> {
    if path == "-" {
        let mut r = CaptureReader::new(std::io::stdin(), "-")?;
        return Ok(analyze(&mut r, opts, on_event));
    }
    let f = std::fs::File::open(path).map_err(|source| DecodeError::Open {
        name: path.to_string(),
        source,
    })?;
    let mut r = CaptureReader::new(std::io::BufReader::new(f), path)?;
    Ok(analyze(&mut r, opts, on_event))
}

/// Writes the per-connection PSN and rate plots of `a` into `dir` (SVG); the analysis must
/// have kept them ([`Options::pictures`]).
pub fn write_plots(
    a: &Analysis,
    dir: &std::path::Path,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    plot::write_all(a, dir)
}

/// Writes one self-contained HTML report (tables and the SVGs inline).
pub fn write_html<W: Write + ?Sized>(a: &Analysis, out: &mut W) -> std::io::Result<()> {
    report::html(a, out)
}

/// Writes a Chrome/Perfetto trace-event JSON: one track per QP.
pub fn write_trace<W: Write + ?Sized>(a: &Analysis, out: &mut W) -> std::io::Result<()> {
    trace::write(a, out)
}
