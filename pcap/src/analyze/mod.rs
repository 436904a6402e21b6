//! `roce analyze`: what happened on every RC connection of a capture, in one streaming pass with
//! per-QP state only.
//!
//! * Connections: a direction is (sender IP, receiver IP, destination QPN); the two directions
//!   of a connection are paired by the CM exchange (REQ/REP carry both QPNs), else by the
//!   RoCEv2 UDP source port (both ends of an RC connection use the same entropy port), else
//!   by PSN agreement (responses echo request PSNs). [`Connection::paired_by`] says which.
//! * Events ([`EventKind`]), defined in `docs/analyze.md`: retransmission (with its episode's cause),
//!   psn_gap, out_of_order, duplicate, nak, ghost_ack, stale_ack, cnp, ecn_ce, icrc_bad, stall,
//!   read_response_mismatch.
//! * Measures ([`crate::analyze::stats::Dist`]): ACK RTT, READ latency, NAK generation and
//!   response latency, retransmission timeout, RNR wait, CNP interval, CE-to-CNP latency.
//! * Verdicts ([`Verdict`], one per [`Rule`]): the behaviour rules of go-back-N RC (IBTA Vol 1 §9.7, the set
//!   Lumina (SIGCOMM 2023) checks on hardware), each `ok`, `violated` (with frames) or
//!   `not_applicable`.
//!
//! Submodules, bottom up: `pkt` (what a packet contributes), `stats` (distributions), `rules`
//! (the rules, their names and tallies), `side` (one side's counters and measures), `emit`
//! (events and the `Emitter`), `requester` and `responder` (the packet handlers and the
//! per-direction request and response state), `pairing` (directions paired into
//! connections), `quality` (what the capture itself missed), `report` (text, JSON and HTML),
//! `plot` (SVG via plotters), `trace` (Perfetto).

// Connections are boxed (`Vec<Box<Connection>>`): over a kilobyte each, they are moved when
// the analyzing threads' shares are merged and sorted, and 100,000 of them moved took 60 ms.
#![allow(clippy::vec_box)]
mod cm;
mod control;
pub mod counters;
mod diagnose;
mod diagnose_setup;
mod emit;
mod finding;
mod json;
mod localise;
mod pairing;
mod pfc;
mod pkt;
mod plot;
mod prep;
mod quality;
mod report;
mod requester;
mod responder;
mod rules;
mod side;
pub mod stats;
mod terms;
mod text;
mod trace;
mod unresponsive;

/// Maps keyed by what a capture names (addresses, QPNs): a fast hash with a per-process
/// random seed, so that a crafted capture cannot choose colliding keys.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::io::{Read, Write};
use std::net::IpAddr;

use prep::{Item, Other, Prep};
use roce_proto::Opcode;

use crate::reader::{CaptureReader, Timestamp};
use crate::DecodeError;
pub use cm::{CmOutcome, CmReject};
use emit::{push_event, Emitter};
pub use emit::{Cause, Event, EventKind, MAX_EVENTS, MAX_EVENTS_TOTAL, NAK_KINDS};
pub use finding::Finding;
pub use localise::{
    localisation_json, localisation_text, localise, localise_pair, Localisation, LocaliseOptions,
    MAX_LOCALISED,
};
use pairing::Dir;
pub use pfc::{ConnectionPfc, PriorityPfc};
pub(crate) use pkt::Pkt;
pub use quality::CaptureQuality;
pub use report::{
    agreed_json, capture_quality_json, connection_json, counter_json, event_flag_json, event_json,
    finding_json, json_lines, pfc_json, text, write_json_lines, write_text,
};
pub use responder::NAK_CNP_NS;
use rules::Tallies;
pub use rules::{Rule, Verdict, RULES};
pub use side::{RetryRun, Side, OPS, RATE_WINDOW_NS};
pub use terms::{gid_addr, Agreed, AgreedEnd};

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
    /// The link rate PAUSE and PFC quanta are counted at (a quantum: 512 bit times), b/s.
    pub link_bps: u64,
    /// A priority paused without a break for longer than this is a pause storm (ns).
    pub storm_ns: u64,
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
            link_bps: 100_000_000_000,
            storm_ns: 100_000_000,
        }
    }
}

/// One connection: two sides (or one, when only one direction was captured).
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// Its number, from 1 in order of first packet.
    pub id: usize,
    /// How the directions were paired: `cm`, `udp_sport`, `psn`, or `none`.
    pub paired_by: &'static str,
    /// The two sides.
    pub sides: [Side; 2],
    rules: Tallies,
    /// Events of this connection (the first [`MAX_EVENTS`]).
    pub events: Vec<Event>,
    /// Events not kept.
    pub events_dropped: u64,
    /// NAKs sent (either side), and how many of them a CNP from the same side followed within
    /// [`NAK_CNP_NS`] (does this NIC's notification point send CNPs on NAKs?).
    pub naks_and_cnps: (u64, u64),
    /// What the capture's PAUSE and PFC frames did to it.
    pub pfc: ConnectionPfc,
    /// When the peer host ended a TCP connection to it and its requests went unanswered
    /// after ([`EventKind::PeerProcessEnded`]), ns.
    pub peer_ended: Option<u64>,
    /// The frame that made it (connections are numbered in this order).
    first_frame: u64,
}

impl Connection {
    /// The verdict of every rule.
    pub fn verdicts(&self) -> Vec<Verdict> {
        self.rules.verdicts()
    }

    /// `true` when a rule was violated.
    pub fn violated(&self) -> bool {
        self.rules.violated()
    }
}

/// A whole capture's analysis.
#[derive(Debug)]
pub struct Analysis {
    /// The connections, in order of first packet (boxed: over a kilobyte each, they are
    /// merged from the analyzing threads by moving pointers).
    pub connections: Vec<Box<Connection>>,
    /// Records read.
    pub packets: u64,
    /// RoCE packets analyzed.
    pub roce: u64,
    /// RoCE packets of directions past [`MAX_DIRECTIONS`], not analyzed.
    pub untracked: u64,
    /// UD packets (datagrams, not connections: not analyzed).
    pub datagrams: u64,
    /// The PAUSE and PFC frames, per priority that had any.
    pub pfc: Vec<PriorityPfc>,
    /// With several captures of the same traffic: each pair's localisation per direction
    /// ([`localise`]; the caller sets it, the reports show it).
    pub localised: Vec<Localisation>,
    /// The captures [`Analysis::localised`] matched, as named, in the order given (the first
    /// is the one analyzed).
    pub captures: Vec<String>,
    /// When the first record was captured, ns since the Unix epoch (`None`: no record): the
    /// origin of every time of the analysis.
    pub first_ns: Option<i64>,
    /// The read error that ended the input early (what was read before it is analyzed).
    pub error: Option<DecodeError>,
    /// What became of the capture's CM requests (answered, rejected, unanswered).
    pub cm: CmOutcome,
    /// What the capture file itself says the capture dropped (pcapng interface statistics;
    /// `None`: it does not say, as a pcap file never does).
    pub file_dropped: Option<u64>,
    /// What the ends of connections told each other before them (the CM's REQ and REP,
    /// perftest's records), in capture order.
    pub agreed: Vec<Agreed>,
    /// The time of the last packet analyzed (RoCE, PAUSE or PFC), ns after the first record.
    pub end_ns: u64,
    /// The NICs' counters given beside the capture (the caller sets them; [`counters`]).
    pub counters: Vec<counters::HostCounters>,
}

impl Analysis {
    /// `true` when any connection violated a rule.
    pub fn violated(&self) -> bool {
        self.connections.iter().any(|c| c.violated())
    }
}

/// Packets handed from the reading thread to an analyzing one at a time.
const BATCH: usize = 2048;
/// Analyzing threads of [`analyze`], each the connections of its share of the host pairs
/// (by a fixed hash of the two addresses). A constant, not the machine's cores: what an
/// analysis follows within its limits ([`MAX_DIRECTIONS`] directions and CM requests, per
/// share) must not depend on the machine it ran on.
pub const SHARDS: usize = 2;
/// Batches queued for each analyzing thread at most (128 of [`BATCH`] packets of 128
/// bytes are 32 MiB). Deep, so that the three threads on two cores
/// rarely wait for each other: with 4, the reading thread spent half of a 100,000-QP
/// capture's analysis blocked on a full queue while an analyzing thread sat idle.
const QUEUED: usize = 128;
/// Packets whose state is looked up ahead of their analysis ([`Analyzer::packets`]).
const AHEAD: usize = 128;

/// A stall open at the end of a share of the analysis ([`Analyzer::close_shard`]): the
/// first frames of its direction and of its connection, and the event.
type EndStall = (u64, u64, Event);

/// The streaming analyzer.
#[derive(Debug)]
pub struct Analyzer {
    opts: Options,
    dirs: Vec<Dir>,
    by_key: pairing::DirIndex,
    /// (sender, receiver) → its directions not paired yet.
    by_hosts: HashMap<(IpAddr, IpAddr), Vec<usize>>,
    /// CM: (address, QPN) → the peer's (address, QPN).
    cm_peer: HashMap<(IpAddr, u32), (IpAddr, u32)>,
    cm_req: HashMap<u32, (IpAddr, u32)>,
    /// What became of the CM requests.
    cm: cm::CmTally,
    conns: Vec<Box<Connection>>,
    /// Slots of `conns` that merges freed.
    free_conns: Vec<usize>,
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
    pfc: pfc::PfcState,
    control: control::ControlState,
    /// What the connections' ends agreed ([`Analyzer::finish_connections`] fills it).
    agreed: Vec<Agreed>,
}

/// Directions (sender, receiver, destination QP) one analyzer follows; a capture naming more
/// gets the rest counted as untracked: memory is bounded by this, not by the capture.
/// [`analyze`] has [`SHARDS`] analyzers, each following this many of its share of the
/// host pairs.
pub const MAX_DIRECTIONS: usize = 1 << 18;

impl Analyzer {
    /// An analyzer with `opts`.
    pub fn new(opts: Options) -> Self {
        Self {
            opts,
            dirs: Vec::new(),
            by_key: pairing::DirIndex::default(),
            by_hosts: HashMap::default(),
            cm_peer: HashMap::default(),
            cm_req: HashMap::default(),
            cm: cm::CmTally::default(),
            untracked: 0,
            datagrams: 0,
            events_kept: 0,
            pfc: pfc::PfcState::default(),
            control: control::ControlState::default(),
            agreed: Vec::new(),
            conns: Vec::new(),
            free_conns: Vec::new(),
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
        match self.prep.prepare(frame_no, ts, link_type, data) {
            Some(Item::Roce(p)) => self.packet(&p, on_event),
            Some(Item::Other(o)) => self.other(o),
            None => {}
        }
    }

    /// Notes a record that is not RoCE.
    fn other(&mut self, o: Other) {
        match o {
            Other::Pause(p) => {
                self.last_t = self.last_t.max(p.t);
                self.pfc.note(&p, self.opts.link_bps);
            }
            Other::TcpEnd(e) => self.control.note(e),
        }
    }

    /// [`Analyzer::record`] for a record its caller already parsed (`None`: not a frame the
    /// link layer reads), so that `decode --analyze` parses each record once.
    pub(crate) fn record_frame(
        &mut self,
        frame_no: u64,
        ts: Timestamp,
        frame: Option<&roce_proto::Frame<'_>>,
        (link_type, data): (u32, &[u8]),
        on_event: &mut dyn FnMut(&Event),
    ) {
        self.packets += 1;
        let Some(t) = self.prep.time(ts) else {
            return;
        };
        match frame {
            Some(f) => {
                if let Some(p) = self.prep.roce(frame_no, t, f) {
                    self.packet(&p, on_event);
                }
            }
            None => {
                if let Some(Item::Other(o)) = self.prep.other(frame_no, t, link_type, data) {
                    self.other(o);
                }
            }
        }
    }

    /// Analyzes packets in order, a few at a time: the state of the next [`AHEAD`] is read
    /// ([`Analyzer::look_ahead`]) before the first of them is analyzed, so that the memory
    /// reads of a capture with many connections overlap instead of waiting one after
    /// another (the result is the same as [`Analyzer::packet`] on each in turn).
    fn packets(&mut self, pkts: &[Pkt], on_event: &mut dyn FnMut(&Event)) {
        for chunk in pkts.chunks(AHEAD) {
            let known = self.look_ahead(chunk);
            for (p, d) in chunk.iter().zip(known) {
                self.packet_of(p, d, on_event);
            }
        }
    }

    /// The directions of `chunk`'s packets (`None`: not seen yet), after reading what
    /// analyzing them reads first. The reads go in stages, each over the whole chunk: the
    /// table entries, then the directions, then the request state and the sides, then the
    /// PSN slots and the tallies. Within a stage no read waits for another, so the
    /// processor has many cache misses in flight at once; one packet's chain of dependent
    /// reads (entry, direction, request state, slot) would have them one at a time.
    fn look_ahead(&self, chunk: &[Pkt]) -> [Option<usize>; AHEAD] {
        let mut known = [None; AHEAD];
        for (k, p) in known.iter_mut().zip(chunk) {
            *k = self.by_key.get(&self.dirs, (p.src, p.dst, p.dest_qp));
        }
        // The direction, and the one whose requests a response answers.
        let mut dirs: [Option<(&Dir, &Dir)>; AHEAD] = [None; AHEAD];
        for ((slot, k), p) in dirs.iter_mut().zip(&known).zip(chunk) {
            *slot = k.and_then(|d| self.dirs.get(d)).map(|dir| (dir, dir));
            if let (Some((_, req_dir)), true) = (slot.as_mut(), p.opcode.is_response()) {
                if let Some(r) = req_dir.peer() {
                    *req_dir = &self.dirs[r];
                }
            }
        }
        let mut sum = 0u64;
        let mut reqs: [Option<(&requester::ReqState, &Connection)>; AHEAD] = [None; AHEAD];
        for (slot, d) in reqs.iter_mut().zip(&dirs) {
            if let Some((dir, req_dir)) = d {
                let c = &self.conns[dir.conn()];
                let side = &c.sides[dir.side()];
                let req = req_dir.req();
                // A field on each cache line of the side's leading counters
                // ([`Side`]): reading one line of several left the others to miss later.
                sum ^= side.packets ^ side.last_t ^ side.messages[0] ^ req.touch();
                sum ^= side.messages[6] ^ side.message_bytes[6];
                *slot = Some((req, c));
            }
        }
        for (r, p) in reqs.iter().zip(chunk) {
            if let Some((req, c)) = r {
                sum ^= req.touch_slot(p.psn) ^ c.rules.touch();
            }
        }
        std::hint::black_box(sum);
        known
    }

    pub(crate) fn packet(&mut self, p: &Pkt, on_event: &mut dyn FnMut(&Event)) {
        self.packet_of(p, None, on_event);
    }

    /// [`Analyzer::packet`] with its direction when already looked up.
    fn packet_of(&mut self, p: &Pkt, known: Option<usize>, on_event: &mut dyn FnMut(&Event)) {
        self.roce += 1;
        self.last_t = self.last_t.max(p.t);
        if let Some(cm) = p.cm {
            self.cm.note(p, &cm);
            self.note_cm(p, cm);
        }
        // Datagrams (UD: MADs on QP0/QP1 and the rest) are not connections.
        if p.opcode.transport() == roce_proto::Transport::Ud {
            self.datagrams += 1;
            return;
        }
        let Some(d) = known.or_else(|| self.dir(p)) else {
            self.untracked += 1;
            return;
        };
        if p.opcode.is_response() && self.dirs[d].peer().is_none() {
            self.pair_by_psn(d, p.psn);
        }
        let (conn, side) = (self.dirs[d].conn(), self.dirs[d].side());
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
            s.priority = Some(p.prio);
            // A cold field: touched only by the packets that need it.
            if p.v1 {
                s.roce_v1 += 1;
            }
            // CNPs excepted: NICs send them in a class of their own (mlx5's cnp_dscp).
            if let Some(d) = p.dscp.filter(|_| p.opcode != Opcode::CNP) {
                match s.dscp {
                    None => s.dscp = Some(d),
                    Some(x) if x != d => s.dscp_varied = true,
                    Some(_) => {}
                }
            }
        }
        if p.icrc_ok == Some(false) {
            ev.conns[conn].sides[side].icrc_bad += 1;
            ev.emit(p, EventKind::IcrcBad, None, String::new());
        }
        if p.ecn == roce_proto::Ecn::Ce {
            ev.conns[conn].sides[side].ecn_ce += 1;
            ev.emit(p, EventKind::EcnCe, None, String::new());
            let r = dirs[d].req_mut();
            r.first_ce_since_cnp.get_or_insert(p.t);
        }
        if p.opcode == Opcode::CNP {
            let (resp, requests) = pairing::answering(dirs, d);
            responder::cnp(resp, requests, &opts, p, &mut ev);
        } else if p.opcode.is_request() {
            requester::request(dirs[d].req_mut(), &opts, p, &mut ev);
        } else if p.opcode.is_response() {
            let (resp, requests) = pairing::answering(dirs, d);
            responder::response(requests, resp, p, &mut ev);
        }
    }

    /// Ends the analysis: stalls still open, PSNs never seen; returns the connections.
    pub fn finish(self, on_event: &mut dyn FnMut(&Event)) -> Vec<Box<Connection>> {
        self.finish_all(on_event).0
    }

    /// [`Analyzer::finish`], with the pauses per priority.
    fn finish_all(
        mut self,
        on_event: &mut dyn FnMut(&Event),
    ) -> (Vec<Box<Connection>>, Vec<PriorityPfc>, Vec<Agreed>) {
        let end = self.last_t;
        for (_, conn, e) in self.close_dirs(end) {
            on_event(&e);
            push_event(&mut self.conns[conn], e, &mut self.events_kept);
        }
        let (conns, pfc) = self.finish_connections(end);
        (conns, pfc, self.agreed)
    }

    /// What the end of the capture (at `end`) tells about every direction: PSNs never seen,
    /// the peer-responds rule, and the stalls still open, returned as events in the order
    /// of their directions' first frames (with each one's frame and connection slot) for the
    /// caller to keep.
    fn close_dirs(&mut self, end: u64) -> Vec<(u64, usize, Event)> {
        let mut stalls = Vec::new();
        for d in 0..self.dirs.len() {
            let (conn, side) = (self.dirs[d].conn(), self.dirs[d].side());
            let r = self.dirs[d].req();
            let never: u64 = r.gaps.iter().map(|g| g.1 - g.0 + 1).sum();
            let answers_missed = {
                let resp = self.dirs[d].peer().map(|pr| &self.dirs[pr].resp);
                responder::answers_missed(r, resp)
            };
            let stall = !r.outstanding.is_empty()
                && end.saturating_sub(r.last_progress_t) > self.opts.stall_ns;
            let last = r.last_progress_t;
            if r.started {
                unresponsive::check_peer_responds(&mut self.conns[conn], side, r, end);
            }
            self.conns[conn].sides[1 - side].missed_by_capture += answers_missed;
            quality::ghost_at_end(&mut self.conns[conn], side, r);
            let (req_mtu, resp_mtu) = r.mtus();
            let c = &mut self.conns[conn];
            c.sides[side].path_mtu = c.sides[side].path_mtu.max(req_mtu);
            c.sides[1 - side].path_mtu = c.sides[1 - side].path_mtu.max(resp_mtu);
            let s = &mut self.conns[conn].sides[side];
            s.never_seen_psns += never;
            if r.in_episode && r.rounds >= 1 {
                s.retrying_at_end = Some(Box::new(RetryRun {
                    psn: requester::wire(r.round_psn).value(),
                    rounds: r.rounds,
                    first_frame: r.first_round_frame,
                    first_t: r.first_round_t,
                    last_t: r.last_round_t,
                }));
            }
            if stall {
                s.note_stall(last, end);
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
                stalls.push((self.dirs[d].first_frame, conn, e));
            }
        }
        stalls
    }

    /// [`Analyzer::close_dirs`] for one share of a capture ([`analyze`], at the capture's
    /// `end`), on its own thread: its connections left in order of first frame, merged ones
    /// out, and its stalls at the end returned with their directions' and connections' first
    /// frames (which name them across shares).
    fn close_shard(&mut self, end: u64) -> Vec<EndStall> {
        let stalls: Vec<_> = self
            .close_dirs(end)
            .into_iter()
            .map(|(first, c, e)| (first, self.conns[c].first_frame, e))
            .collect();
        self.conns.retain(|c| c.paired_by != "merged");
        self.conns.sort_unstable_by_key(|c| c.first_frame);
        // The directions and their tables are done with: freed here, beside the other
        // shares, rather than one share after another on the merging thread.
        self.dirs = Vec::new();
        self.by_key = pairing::DirIndex::default();
        self.by_hosts = HashMap::default();
        stalls
    }

    /// Takes in the connections of analyzers that each analyzed a share of the capture's
    /// host pairs and closed it ([`Analyzer::close_shard`]; this one had the records that
    /// are not RoCE): the result is the one analyzer that had every record would have, as
    /// long as no share reached a limit one analyzer has for all ([`MAX_DIRECTIONS`], CM
    /// requests). Events are kept as one analyzer keeps them: the first
    /// [`MAX_EVENTS_TOTAL`] in capture order, then the stalls at the end in the order of
    /// their directions.
    fn absorb(&mut self, shards: Vec<(Self, Vec<EndStall>)>) {
        let mut stalls = Vec::new();
        let mut lists = Vec::with_capacity(shards.len());
        for (s, st) in shards {
            self.last_t = self.last_t.max(s.last_t);
            self.roce += s.roce;
            self.untracked += s.untracked;
            self.datagrams += s.datagrams;
            self.cm.absorb(s.cm);
            stalls.extend(st);
            lists.push(s.conns.into_iter().peekable());
        }
        // Each list is in order of first frame: merged, they are.
        let n = lists.iter().map(|l| l.len()).sum();
        let mut conns = Vec::with_capacity(n);
        loop {
            let next = lists
                .iter_mut()
                .enumerate()
                .filter_map(|(i, l)| l.peek().map(|c| (c.first_frame, i)))
                .min();
            let Some((_, i)) = next else { break };
            conns.extend(lists[i].next());
        }
        self.events_kept = emit::keep_first_events(&mut conns, MAX_EVENTS_TOTAL);
        // Directions are numbered by their first frame, and no two share one.
        stalls.sort_unstable_by_key(|s| s.0);
        for (_, conn, e) in stalls {
            if let Ok(c) = conns.binary_search_by_key(&conn, |c| c.first_frame) {
                push_event(&mut conns[c], e, &mut self.events_kept);
            }
        }
        self.conns = conns;
    }

    /// The end of the analysis that is not per direction: merged connections left out, the
    /// rest numbered by first packet, pauses and TCP ends, the `--qp` filter, the CNP rules.
    fn finish_connections(&mut self, end: u64) -> (Vec<Box<Connection>>, Vec<PriorityPfc>) {
        let mut conns = std::mem::take(&mut self.conns);
        conns.retain(|c| c.paired_by != "merged");
        // In order of first packet (merges reuse slots; each connection's first packet is
        // its own, so the order is total). The events say which connection by slot until
        // they are renumbered below.
        conns.sort_unstable_by_key(|c| c.first_frame);
        let pfc = std::mem::take(&mut self.pfc).finish(
            end,
            &self.opts,
            &mut conns,
            &mut self.events_kept,
        );
        self.control.finish(&mut conns, &mut self.events_kept);
        if let Some(q) = self.opts.qp {
            conns.retain(|c| c.sides.iter().any(|s| s.qpn == Some(q)));
        }
        for (i, c) in conns.iter_mut().enumerate() {
            c.id = i + 1;
            for e in &mut c.events {
                e.connection = i;
            }
            responder::note_cnp_rule(c);
            for s in &mut c.sides {
                s.note_rate_around_cnps();
            }
        }
        self.agreed = std::mem::take(&mut self.prep.terms).finish(&conns);
        (conns, pfc)
    }

    /// Ends the analysis ([`Analyzer::finish`]) and wraps it up.
    pub fn into_analysis(self, on_event: &mut dyn FnMut(&Event)) -> Analysis {
        let (packets, roce, untracked, datagrams) =
            (self.packets, self.roce, self.untracked, self.datagrams);
        let first_ns = self.prep.first_ts.map(|t| t.as_ns());
        let cm = self.cm.outcome();
        let end_ns = self.last_t;
        let (connections, pfc, agreed) = self.finish_all(on_event);
        Analysis {
            agreed,
            end_ns,
            counters: Vec::new(),
            connections,
            pfc,
            localised: Vec::new(),
            captures: Vec::new(),
            first_ns,
            packets,
            roce,
            untracked,
            datagrams,
            error: None,
            file_dropped: None,
            cm,
        }
    }
}

/// Analyzes a capture read from `reader`. A read error ends the input: the records before it
/// are analyzed and the error is in [`Analysis::error`].
///
/// This thread reads and parses the records (and follows the PAUSE and PFC frames and TCP
/// ends); [`SHARDS`] threads analyze the RoCE packets, each those of its share of the host
/// pairs (a fixed hash of the two addresses: every pairing rule and every event stays
/// between two hosts), in capture order: each gets batches of its share's packets through
/// a bounded channel. Their connections are merged at the end in order of first frame. The
/// result is what one [`Analyzer`] given every record in turn finds, byte for byte in every
/// report, unless a share passes a limit ([`MAX_DIRECTIONS`] directions, CM requests) that
/// one analyzer would count for all.
pub fn analyze<R: Read + Send>(reader: &mut CaptureReader<R>, opts: Options) -> Analysis {
    let mut a = Analyzer::new(opts);
    let (records, error, shards) = std::thread::scope(|scope| {
        let mut txs = Vec::with_capacity(SHARDS);
        let mut ends = Vec::with_capacity(SHARDS);
        let mut workers = Vec::with_capacity(SHARDS);
        for _ in 0..SHARDS {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Pkt>>(QUEUED);
            txs.push(tx);
            let (last_tx, last_rx) = std::sync::mpsc::sync_channel::<u64>(1);
            let (end_tx, end_rx) = std::sync::mpsc::sync_channel::<u64>(1);
            ends.push((last_rx, end_tx));
            workers.push(scope.spawn(move || {
                let mut shard = Analyzer::new(opts);
                for batch in rx {
                    shard.packets(&batch, &mut |_| {});
                }
                // The capture ends at the latest time any thread saw.
                let _ = last_tx.send(shard.last_t);
                let end = end_rx.recv().unwrap_or(shard.last_t);
                shard.last_t = end;
                let stalls = shard.close_shard(end);
                (shard, stalls)
            }));
        }
        // Each packet goes to its share's batch (the share is taken where the packet is
        // parsed, from the addresses at hand: reading them back here stalled on the packet
        // just stored).
        let mut batches: [Vec<Pkt>; SHARDS] = std::array::from_fn(|_| Vec::with_capacity(BATCH));
        let mut n = 0u64;
        let error = loop {
            match reader.next_record() {
                Ok(Some(rec)) => {
                    n += 1;
                    match a.prep.prepare(n, rec.ts, rec.link_type, rec.data) {
                        Some(Item::Roce(p)) => {
                            let share = usize::from(p.share);
                            let batch = &mut batches[share];
                            batch.push(p);
                            // An analyzing thread that panicked takes nothing: its join
                            // says why.
                            if batch.len() >= BATCH
                                && txs[share]
                                    .send(std::mem::replace(batch, Vec::with_capacity(BATCH)))
                                    .is_err()
                            {
                                break None;
                            }
                        }
                        Some(Item::Other(o)) => a.other(o),
                        None => {}
                    }
                }
                Ok(None) => break None,
                Err(e) => break Some(DecodeError::Read(e)),
            }
        };
        for (tx, batch) in txs.iter().zip(batches) {
            if !batch.is_empty() {
                let _ = tx.send(batch);
            }
        }
        drop(txs);
        // A thread that panicked sends nothing; its join below says why.
        let end = ends
            .iter()
            .filter_map(|(last, _)| last.recv().ok())
            .fold(a.last_t, u64::max);
        for (_, tx) in &ends {
            let _ = tx.send(end);
        }
        let shards: Vec<_> = workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect();
        (n, error, shards)
    });
    a.absorb(shards);
    a.packets = records;
    Analysis {
        error,
        file_dropped: reader.dropped(),
        ..a.into_analysis(&mut |_| {})
    }
}

/// [`analyze`] by one [`Analyzer`] on the calling thread, given every record in turn (as
/// `decode --analyze` runs it): the reference the split analysis is checked against, and
/// the analysis to measure with a counter that sees one thread's allocations. A read error
/// ends the input, as in [`analyze`].
pub fn analyze_in_turn<R: Read>(reader: &mut CaptureReader<R>, opts: Options) -> Analysis {
    let mut one = Analyzer::new(opts);
    let mut n = 0u64;
    let error = loop {
        match reader.next_record() {
            Ok(Some(rec)) => {
                n += 1;
                one.record(n, rec.ts, rec.link_type, rec.data, &mut |_| {});
            }
            Ok(None) => break None,
            Err(e) => break Some(DecodeError::Read(e)),
        }
    };
    Analysis {
        error,
        file_dropped: reader.dropped(),
        ..one.into_analysis(&mut |_| {})
    }
}

/// The share of the analysis (of [`SHARDS`]) that the packets between hosts `a` and `b`
/// go to: the same both ways, and fixed (not seeded), so that an analysis is the same on
/// every run.
fn shard_of(a: IpAddr, b: IpAddr) -> usize {
    fn fold(ip: IpAddr) -> u64 {
        match ip {
            IpAddr::V4(v) => u64::from(u32::from(v)),
            IpAddr::V6(v) => {
                let x = u128::from(v);
                (x as u64) ^ (x >> 64) as u64
            }
        }
    }
    // A sum, not an exclusive or: hosts numbered alike on two subnets (10.1.x.y and
    // 10.2.x.y) would all have the same exclusive or.
    let x = fold(a)
        .wrapping_add(fold(b))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 32) as usize) % SHARDS
}

/// Analyzes the capture at `path` (`-` for stdin); `Err` when it cannot be opened or is not
/// a capture.
pub fn analyze_path(path: &str, opts: Options) -> Result<Analysis, DecodeError> {
    if path == "-" {
        let mut r = CaptureReader::new(std::io::stdin(), "-")?;
        return Ok(analyze(&mut r, opts));
    }
    let f = std::fs::File::open(path).map_err(|source| DecodeError::Open {
        name: path.to_string(),
        source,
    })?;
    let mut r = CaptureReader::new(std::io::BufReader::new(f), path)?;
    Ok(analyze(&mut r, opts))
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

#[cfg(test)]
mod tests {
    use super::{shard_of, SHARDS};
    use std::net::IpAddr;

    /// Both directions of a host pair go to one share, and the host pairs of the usual
    /// address plans (hosts numbered alike on two subnets, IPv4 and IPv6) spread over all
    /// shares about evenly.
    #[test]
    fn host_pairs_spread_over_the_shares_and_both_ways_meet() {
        type Plan = fn(u32) -> (IpAddr, IpAddr);
        let plans: [(&str, Plan); 3] = [
            ("10.1.x.y to 10.2.x.y", |q| {
                let (h, l) = ((q >> 8) as u8, q as u8);
                (IpAddr::from([10, 1, h, l]), IpAddr::from([10, 2, h, l]))
            }),
            ("one client to many servers", |q| {
                (
                    IpAddr::from([192, 168, 0, 1]),
                    IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + q)),
                )
            }),
            ("IPv6 hosts on one prefix", |q| {
                let a = 0xfd00_u128 << 112;
                (
                    IpAddr::from(std::net::Ipv6Addr::from(a + 1)),
                    IpAddr::from(std::net::Ipv6Addr::from(a + u128::from(q) + 2)),
                )
            }),
        ];
        for (what, pair) in plans {
            let mut count = [0usize; SHARDS];
            for q in 0..4096 {
                let (a, b) = pair(q);
                assert_eq!(shard_of(a, b), shard_of(b, a), "{what}: {a} and {b}");
                count[shard_of(a, b)] += 1;
            }
            for c in count {
                assert!(
                    (4096 / SHARDS * 8 / 10..=4096 / SHARDS * 12 / 10).contains(&c),
                    "{what}: {count:?}"
                );
            }
        }
    }
}
