//! The connections' control channels: RDMA applications set up their queue pairs over a TCP
//! connection between the same two hosts (perftest's exchange, NCCL's bootstrap, an rdma_cm
//! application's own socket) and close it when they end. A FIN or RST of such a connection
//! in the capture, followed by requests its peer never answers, says the peer process ended:
//! what looks like loss is a dead peer ([`EventKind::PeerProcessEnded`]).
use std::net::IpAddr;

use super::emit::{push_event, Event, EventKind};
use super::{Connection, HashMap};

/// A TCP segment that ends its connection (FIN or RST), at frame `frame`, time `t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcpEnd {
    pub(crate) frame: u64,
    pub(crate) t: u64,
    pub(crate) end: crate::link::TcpEnd,
}

/// Ends kept per sending host pair (the first ones: a process ends once).
const PER_PAIR: usize = 8;
/// Host pairs followed.
const MAX_PAIRS: usize = 1 << 16;

/// The FINs and RSTs of a capture, by (sender, receiver).
#[derive(Debug, Default)]
pub(super) struct ControlState {
    ends: HashMap<(IpAddr, IpAddr), Vec<TcpEnd>>,
}

impl ControlState {
    /// Notes one FIN or RST.
    pub(super) fn note(&mut self, e: TcpEnd) {
        let full = self.ends.len() >= MAX_PAIRS;
        match self.ends.get_mut(&(e.end.src, e.end.dst)) {
            Some(v) if v.len() < PER_PAIR => v.push(e),
            Some(_) => {}
            None if !full => {
                self.ends.insert((e.end.src, e.end.dst), vec![e]);
            }
            None => {}
        }
    }

    /// For each connection whose requester kept sending after the other host ended a TCP
    /// connection to it, and drew no response after that: an event on the requester's side.
    pub(super) fn finish(&self, conns: &mut [Box<Connection>], kept: &mut usize) {
        if self.ends.is_empty() {
            return;
        }
        for (ci, c) in conns.iter_mut().enumerate() {
            for side in 0..2 {
                let (me, peer) = (&c.sides[side], &c.sides[1 - side]);
                let (Some(a), Some(b)) = (me.addr, peer.addr) else {
                    continue;
                };
                if me.requests == 0 {
                    continue;
                }
                let Some(ends) = self.ends.get(&(b, a)) else {
                    continue;
                };
                // The first end after which this side requested and the peer was silent.
                let answered_after = |t: u64| peer.packets > 0 && peer.last_t > t;
                let Some(e) = ends
                    .iter()
                    .find(|e| me.last_t > e.t && !answered_after(e.t))
                else {
                    continue;
                };
                let detail = format!(
                    "TCP {} from {}:{} to {}:{} at {:.6} s (the control channel); this side's requests after it drew no response: the peer process ended, its requests are not lost to the network",
                    if e.end.rst { "RST" } else { "FIN" },
                    e.end.src,
                    e.end.sport,
                    e.end.dst,
                    e.end.dport,
                    e.t as f64 / 1e9
                );
                let ev = Event {
                    frame: e.frame,
                    t: e.t,
                    connection: ci,
                    side,
                    kind: EventKind::PeerProcessEnded,
                    psn: 0,
                    cause: None,
                    detail,
                };
                c.peer_ended = Some(e.t);
                push_event(c, ev, kept);
            }
        }
    }
}
