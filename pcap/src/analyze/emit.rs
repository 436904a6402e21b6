//! Events: what they are ([`EventKind`], [`Cause`], [`Event`]), and the [`Emitter`] through
//! which the packet handlers raise them (into their connection, bounded, and to the caller's
//! callback) and reach the counters, rule tallies and plot points of the packet's connection.
use roce_proto::aeth::NakCode;

use super::pkt::Pkt;
use super::rules::{Rule, Tally};
use super::side::Side;
use super::Connection;

/// The kind of a per-packet event (names as in `docs/analyze.md` and the JSON).
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
    /// A stall that PAUSE or PFC frames on the connection's priority cover (at its end: the
    /// frame is the first covering pause's).
    StallPaused,
    /// The connection's priority paused without a break for longer than the storm bound.
    PauseStorm,
    /// The peer host ended a TCP connection (FIN or RST: the control channel) and this
    /// side's requests after it drew no response.
    PeerProcessEnded,
    /// A packet that shows the other side sent packets the capture did not see (a response
    /// acknowledging or answering requests never seen, READ responses missing inside an
    /// answer): the capture dropped them (or, for READ responses, they were lost before
    /// the capture point).
    CaptureMissed,
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

/// The index of [`NAK_KINDS`] (the number [`EventKind::Nak`] carries) of a NAK code (`other`
/// for `None` and the codes the kinds do not name).
pub(super) fn nak_index(c: Option<NakCode>) -> usize {
    match c {
        Some(NakCode::PsnSequenceError) => 0,
        Some(NakCode::InvalidRequest) => 2,
        Some(NakCode::RemoteAccessError) => 3,
        Some(NakCode::RemoteOperationalError) => 4,
        _ => 5,
    }
}

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
            Self::StallPaused => "stall_paused",
            Self::PauseStorm => "pause_storm",
            Self::PeerProcessEnded => "peer_process_ended",
            Self::CaptureMissed => "capture_missed",
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

/// Events kept per connection for the report (every event still goes to the callback).
pub const MAX_EVENTS: usize = 1024;
/// Events kept for the report in all (each event still goes to the callback, and is
/// counted).
pub const MAX_EVENTS_TOTAL: usize = 200_000;

/// Emits events into a connection and to the caller: what a packet handler holds of the
/// packet's connection and side.
pub(super) struct Emitter<'a, 'b> {
    /// The packet's connection (an index of `conns`).
    pub(super) conn: usize,
    /// The side that sent the packet (0 or 1).
    pub(super) side: usize,
    /// Keep the plot and trace data ([`Options::pictures`](super::Options::pictures)).
    pub(super) pictures: bool,
    /// Events kept so far, all connections.
    pub(super) kept: &'a mut usize,
    /// Every connection.
    pub(super) conns: &'a mut Vec<Box<Connection>>,
    /// The caller's callback, which gets every event.
    pub(super) on_event: &'b mut dyn FnMut(&Event),
}

/// Whether [`push_event`] keeps an event of `c` pushed after `pending` more (each of them
/// kept), `kept` events being kept in all so far: once one would not be, no later one is.
pub(super) fn keeps(c: &Connection, pending: usize, kept: usize) -> bool {
    c.events.len() + pending < MAX_EVENTS && kept + pending < MAX_EVENTS_TOTAL
}

/// Keeps `e` in `c` unless [`MAX_EVENTS`] or [`MAX_EVENTS_TOTAL`] are kept (then counts it
/// as dropped).
pub(super) fn push_event(c: &mut Connection, e: Event, kept: &mut usize) {
    if keeps(c, 0, *kept) {
        c.events.push(e);
        *kept += 1;
    } else {
        c.events_dropped += 1;
    }
}

/// Keeps the first `total` events of `conns` in the order they were raised (by frame, and
/// in a connection's order within a frame: a frame's events are all its connection's), the
/// rest counted as dropped; returns how many are kept. Analyzers that each kept up to
/// `total` of their own share of the connections' events ([`super::analyze`]) then keep
/// what one analyzer of them all would have.
pub(super) fn keep_first_events(conns: &mut [Box<Connection>], total: usize) -> usize {
    let n: usize = conns.iter().map(|c| c.events.len()).sum();
    if n <= total {
        return n;
    }
    let mut order: Vec<(u64, usize, usize)> = conns
        .iter()
        .enumerate()
        .flat_map(|(c, conn)| {
            conn.events
                .iter()
                .enumerate()
                .map(move |(i, e)| (e.frame, c, i))
        })
        .collect();
    let (_, &mut first_dropped, _) = order.select_nth_unstable(total);
    for (c, conn) in conns.iter_mut().enumerate() {
        let before = conn.events.len();
        let mut i = 0;
        conn.events.retain(|e| {
            i += 1;
            (e.frame, c, i - 1) < first_dropped
        });
        conn.events_dropped += (before - conn.events.len()) as u64;
    }
    total
}

impl Emitter<'_, '_> {
    /// The side that sent the packet.
    pub(super) fn side_mut(&mut self) -> &mut Side {
        &mut self.conns[self.conn].sides[self.side]
    }
    /// The other side (the one the packet went to).
    pub(super) fn side_other_mut(&mut self) -> &mut Side {
        &mut self.conns[self.conn].sides[1 - self.side]
    }
    /// The tally of `rule` on this connection.
    pub(super) fn rule(&mut self, rule: Rule) -> &mut Tally {
        self.conns[self.conn].rules.get_mut(rule)
    }
    /// `true` once the other side sent a packet.
    pub(super) fn peer_seen(&self) -> bool {
        self.conns[self.conn].sides[1 - self.side].packets > 0
    }
    /// Changes the kind of the stored event of `frame` (a later packet told what it was).
    pub(super) fn retag(&mut self, frame: u64, from: EventKind, to: EventKind) {
        self.retell(frame, from, to, None);
    }
    /// [`Emitter::retag`], and a new detail when given.
    pub(super) fn retell(
        &mut self,
        frame: u64,
        from: EventKind,
        to: EventKind,
        detail: Option<String>,
    ) {
        let c = &mut self.conns[self.conn];
        if let Some(e) = c
            .events
            .iter_mut()
            .rev()
            .find(|e| e.frame == frame && e.kind == from)
        {
            e.kind = to;
            if let Some(d) = detail {
                e.detail = d;
            }
        }
    }
    /// A CNP mark on the PSN line of the other side (the requester it notifies).
    pub(super) fn trace_other(&mut self, t: u64, psn: u32, kind: u8) {
        self.side = 1 - self.side;
        self.trace(t, psn, kind);
        self.side = 1 - self.side;
    }
    /// A point of the PSN plot of this side ([`Side::add_trace_point`]), with pictures.
    pub(super) fn trace(&mut self, t: u64, psn: u32, kind: u8) {
        if self.pictures {
            self.side_mut().add_trace_point(t, psn, kind);
        }
    }
    /// Raises an event of `kind` for `p`: to the callback, and kept in the connection.
    pub(super) fn emit(&mut self, p: &Pkt, kind: EventKind, cause: Option<Cause>, detail: String) {
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
