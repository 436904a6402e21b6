//! A read-only view of a simulation's fabric, whole or split across threads.
use std::net::IpAddr;

use super::fabric::{Fabric, FabricConfig, PortKind, PortStats};
use super::Sim;
use crate::time::Instant;

/// What a view of a fabric reads: the simulation's own, or a split one's parts.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fabrics<'a> {
    One(&'a Fabric),
    Split(&'a [Sim]),
}

/// A fabric as the simulation runs it, whole or split across threads
/// ([`Sim::set_threads`]): its shape, and its counters read from the part that keeps them.
#[derive(Debug, Clone, Copy)]
pub struct FabricView<'a> {
    pub(super) first: &'a Fabric,
    pub(super) all: Fabrics<'a>,
}

impl<'a> FabricView<'a> {
    fn part_fabric(s: &'a Sim) -> &'a Fabric {
        s.fabric.as_ref().expect("a part has its fabric")
    }

    /// The fabric that keeps node `n`'s counters.
    fn of_node(&self, n: usize) -> &'a Fabric {
        match self.all {
            Fabrics::One(f) => f,
            Fabrics::Split(parts) => parts
                .get(self.first.part_of_node(n))
                .map_or(self.first, Self::part_fabric),
        }
    }

    fn sum(&self, f: impl Fn(&Fabric) -> u64) -> u64 {
        match self.all {
            Fabrics::One(x) => f(x),
            Fabrics::Split(parts) => parts.iter().map(|p| f(Self::part_fabric(p))).sum(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &'a FabricConfig {
        self.first.config()
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.first.hosts()
    }

    /// Number of ports (two per link).
    pub fn port_count(&self) -> usize {
        self.first.port_count()
    }

    /// Port `p`: (node, peer node, kind, rate in bits/s), as [`Fabric::port`].
    pub fn port(&self, p: usize) -> (usize, usize, PortKind, u64) {
        self.first.port(p)
    }

    /// Tier of node `n`, as [`Fabric::tier`].
    pub fn tier(&self, n: usize) -> u8 {
        self.first.tier(n)
    }

    /// A name for node `n`, as [`Fabric::node_name`].
    pub fn node_name(&self, n: usize) -> String {
        self.first.node_name(n)
    }

    /// The equal-cost egress ports of switch node `s` toward host `d`.
    pub fn next_hops(&self, s: usize, d: usize) -> &'a [u32] {
        self.first.next_hops(s, d)
    }

    /// The ports a datagram with this 5-tuple leaves on from host `from` to host `to`.
    pub fn path(&self, from: usize, to: usize, src: IpAddr, dst: IpAddr, sport: u16) -> Vec<usize> {
        self.first.path(from, to, src, dst, sport)
    }

    /// Counters of port `p` with its paused time brought up to `now`.
    pub fn port_stats(&self, p: usize, now: Instant) -> PortStats {
        self.of_node(self.first.port_node(p)).port_stats(p, now)
    }

    /// Bytes queued at port `p` now.
    pub fn queue_bytes(&self, p: usize) -> u64 {
        self.of_node(self.first.port_node(p)).queue_bytes(p)
    }

    /// `true` while PFC pauses host `h`'s port.
    pub fn host_paused(&self, h: usize) -> bool {
        self.of_node(h).host_paused(h)
    }

    /// Frames sent on any port so far.
    pub fn hops(&self) -> u64 {
        self.sum(Fabric::hops)
    }

    /// Frames dropped at any switch.
    pub fn drops(&self) -> u64 {
        self.sum(Fabric::drops)
    }

    /// PFC frames sent.
    pub fn pfc_frames(&self) -> u64 {
        self.sum(Fabric::pfc_frames)
    }
}
