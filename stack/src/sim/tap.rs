//! What a [`Tap`] sees of a simulation, and the order its calls keep when the simulation is
//! split across threads: each call's [`TapKey`] is where the whole simulation would have made
//! it, and the parts' calls merge in that order.
use std::net::IpAddr;

use roce_proto::Ecn;

use super::{Arrival, Sim};
use crate::time::Instant;

/// What happened to a datagram a [`Tap`] sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapKind {
    /// As it left the sender.
    Sent,
    /// As it reached the receiver (after any corruption or CE mark).
    Delivered,
    /// Lost on the link.
    Lost,
}

/// One datagram crossing a link.
#[derive(Debug, Clone, Copy)]
pub struct TapEvent<'a> {
    /// Virtual time.
    pub time: Instant,
    /// What happened.
    pub kind: TapKind,
    /// The datagram's number: its send, and its delivery or loss, carry the same (a
    /// duplicate too). Unique in a run: the sending endpoint's index in the high 24 bits,
    /// from 1 in the order that endpoint sent them in the low 40 (the same however a
    /// fabric's simulation is split across threads, [`Sim::set_threads`]).
    pub id: u64,
    /// Sending endpoint index.
    pub from: usize,
    /// Receiving endpoint index.
    pub to: usize,
    /// Source IP address.
    pub src: IpAddr,
    /// Destination IP address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port (4791).
    pub dst_port: u16,
    /// ECN codepoint of the IP header.
    pub ecn: Ecn,
    /// The UDP payload (BTH through ICRC).
    pub datagram: &'a [u8],
}

/// Receives every datagram the simulator moves.
pub trait Tap {
    /// Called for each send, delivery and loss.
    fn on_datagram(&mut self, ev: &TapEvent<'_>);

    /// Called for each link-level frame a node sends that is not a datagram: the switch's
    /// PFC frames (a whole Ethernet frame without FCS, [`roce_proto::mac_control`]). Ignored
    /// unless implemented.
    fn on_frame(&mut self, time: Instant, frame: &[u8]) {
        let _ = (time, frame);
    }

    /// Called for each host added after the tap was installed (its index and address).
    /// Ignored unless implemented.
    fn on_host(&mut self, index: usize, addr: IpAddr) {
        let _ = (index, addr);
    }
}

impl<F: FnMut(&TapEvent<'_>)> Tap for F {
    fn on_datagram(&mut self, ev: &TapEvent<'_>) {
        self(ev)
    }
}

/// Where in a run a tap call is made: the [`Sim::run_until`] call, the time, the round at
/// that time (a step, or the run's first sends), what the round was doing (processing fabric
/// events, or asking devices for datagrams), the event's key or the endpoint, and the call's
/// number within. One simulation makes its tap calls in the order of their keys, and the
/// parts of a split one make each of theirs with the key the whole would have given it, so
/// sorting the parts' calls by key gives the whole's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(super) struct TapKey {
    pub(super) epoch: u64,
    pub(super) time: Instant,
    pub(super) round: u32,
    pub(super) phase: u8,
    pub(super) item: u64,
    pub(super) n: u32,
}

/// [`TapKey::phase`]: processing fabric events.
pub(super) const PHASE_EVENTS: u8 = 1;
/// [`TapKey::phase`]: asking the devices for datagrams.
pub(super) const PHASE_SENDS: u8 = 2;

/// A tap call a part of a split simulation keeps for the merge.
#[derive(Debug)]
pub(super) struct TapRecord {
    pub(super) key: TapKey,
    pub(super) what: TapWhat,
}

#[derive(Debug)]
pub(super) enum TapWhat {
    Datagram(TapKind, Arrival),
    Frame(Vec<u8>),
}

impl Sim {
    /// The key of the next tap call here ([`TapKey`]).
    pub(super) fn next_tap_key(&mut self) -> TapKey {
        let k = self.tap_at;
        self.tap_at.n += 1;
        k
    }

    /// A new round at `now` doing `phase`: the first at this time in this run, or the next.
    pub(super) fn round(&mut self, phase: u8) {
        let t = &mut self.tap_at;
        if t.epoch == self.epoch && t.time == self.now {
            t.round += 1;
        } else {
            t.epoch = self.epoch;
            t.time = self.now;
            t.round = 0;
        }
        t.phase = phase;
        t.item = 0;
        t.n = 0;
    }

    /// The tap calls from here on are about `item` (an event's key, or an endpoint).
    pub(super) fn tap_item(&mut self, item: u64) {
        self.tap_at.item = item;
        self.tap_at.n = 0;
    }

    /// A link-level frame for the tap.
    pub(super) fn tap_frame(&mut self, time: Instant, frame: &[u8]) {
        if self.tap_log.is_some() {
            let key = self.next_tap_key();
            if let Some(log) = self.tap_log.as_mut() {
                log.push(TapRecord {
                    key,
                    what: TapWhat::Frame(frame.to_vec()),
                });
            }
        } else if let Some(t) = self.tap.as_mut() {
            t.on_frame(time, frame);
        }
    }

    pub(super) fn tap(&mut self, kind: TapKind, a: &Arrival, time: Instant) {
        if self.tap_log.is_some() {
            let key = self.next_tap_key();
            if let Some(log) = self.tap_log.as_mut() {
                log.push(TapRecord {
                    key,
                    what: TapWhat::Datagram(kind, a.clone()),
                });
            }
            return;
        }
        if let Some(t) = self.tap.as_mut() {
            t.on_datagram(&a.tap_event(kind, time));
        }
    }
}
