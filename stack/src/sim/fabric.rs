//! A multi-switch fabric for the simulator: hosts and switches joined by point-to-point links,
//! per-port egress queues over a per-switch shared buffer, RED ECN marking per queue, tail
//! drop, PFC (IEEE 802.1Qbb) per ingress port, and ECMP over the shortest paths by a hash of
//! each datagram's 5-tuple, so the RoCEv2 UDP source port (the QP's entropy) picks the path.
//!
//! # Model
//!
//! Every link is two directed *ports*, one per end. A port sends one frame at a time at its
//! rate and the frame reaches the other end one link delay after its last bit. Frames are the
//! datagram plus [`FRAME_OVERHEAD`] bytes.
//!
//! - **Hosts** keep what they have not sent yet inside the device (the transport may still
//!   change its mind, as on a real NIC): a host port never queues. The simulator asks a host's
//!   device for its next datagram only when the port is free and not paused.
//! - **Switches** route each arriving frame to an egress port on a shortest path to its
//!   destination host. When there are several, the choice is `hash(5-tuple, switch) % n`
//!   ([`ecmp_hash`]); with [`FabricConfig::ecmp`] off every switch takes the first.
//! - **Buffer**: every frame queued at a switch counts against that switch's shared buffer
//!   ([`FabricConfig::buffer_bytes`]); a frame that does not fit is dropped (tail drop).
//! - **ECN**: RED on the egress queue's depth at arrival ([`RedConfig`]), its thresholds
//!   scaled by the port's rate over the host rate (a 400 Gb/s port marks at four times the
//!   depth of a 100 Gb/s one).
//! - **PFC**: a switch counts, per ingress port, the bytes in its buffer that came in through
//!   it. Above [`PfcConfig::xoff_bytes`] it sends an XOFF upstream; the upstream port stops
//!   after the frame it is sending, one link delay later (the pause frame's flight). The XOFF
//!   is repeated every [`PFC_REFRESH_NS`] while the count stays above `xon_bytes`; at or below
//!   it an XON resumes the port, again a link delay later. Buffer above `xoff_bytes` is the
//!   headroom for what is on the wire meanwhile: at least two link delays at the upstream
//!   port's rate plus a frame ([`FabricConfig::pfc_headroom`]).
//!
//! One priority carries all RoCE traffic (the PFC frames pause [`PFC_PRIORITY`]).
//!
//! **INT** ([`FabricConfig::int`]): each switch egress port stamps the data packets it sends
//! with its queue length, transmitted bytes, time and rate ([`IntHop`]), as per-packet
//! metadata beside the frame (the bytes, ICRCs and captures are unchanged); the receiving
//! device echoes the last stamps in its next ACK, which carries them back unchanged.
//!
//! # Topologies
//!
//! [`Topology::Switch`] (one switch), [`Topology::LeafSpine`] (every leaf to every spine) and
//! [`Topology::FatTree`] (pods of ToR and aggregation switches, every ToR to every
//! aggregation switch of its pod, aggregation switch `j` of every pod to core group `j`), with
//! [`Topology::k_ary`] and the HPCC paper's fabric ([`Topology::HPCC`]) as presets.
use core::time::Duration;
use std::collections::VecDeque;
use std::net::IpAddr;

use roce_proto::Ecn;

use super::radix::RadixQueue;
use super::switch::{PfcConfig, RedConfig, FRAME_OVERHEAD};
use super::{Arrival, PFC_PRIORITY, PFC_REFRESH_NS, PFC_XOFF_QUANTA};
use crate::cc::hpcc::IntHop;
use crate::rng::Rng;
use crate::time::Instant;

pub use super::topology::Topology;

/// A fabric: its shape, rates, buffers and the switches' ECN, PFC and ECMP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FabricConfig {
    /// The shape.
    pub topology: Topology,
    /// Host links, bits/s (both directions).
    pub host_rate_bps: u64,
    /// Links between switches, bits/s.
    pub fabric_rate_bps: u64,
    /// Propagation delay of every link.
    pub link_delay: Duration,
    /// Each switch's shared buffer, bytes.
    pub buffer_bytes: u64,
    /// ECN marking per egress queue, thresholds for a port at the host rate (scaled with
    /// each port's rate); `None`: never mark.
    pub red: Option<RedConfig>,
    /// PFC thresholds per ingress port; `None`: off (the buffer tail-drops).
    pub pfc: Option<PfcConfig>,
    /// ECMP: spread over the equal-cost next hops by the 5-tuple's hash; off: always the
    /// first (one path per destination).
    pub ecmp: bool,
    /// In-network telemetry: every switch egress port stamps an [`IntHop`] on each data
    /// packet it sends (HPCC's input); receivers echo it in their ACKs.
    pub int: bool,
}

impl FabricConfig {
    /// `topology` at 100 Gb/s to hosts and 400 Gb/s between switches, 1 µs links, 32 MB of
    /// buffer per switch, RED at 100 KB / 400 KB / 20 % for a 100 Gb/s port, PFC off, ECMP
    /// on.
    pub fn new(topology: Topology) -> Self {
        Self {
            topology,
            host_rate_bps: 100_000_000_000,
            fabric_rate_bps: 400_000_000_000,
            link_delay: Duration::from_micros(1),
            buffer_bytes: 32_000_000,
            red: Some(RedConfig {
                kmin_bytes: 100_000,
                kmax_bytes: 400_000,
                pmax: 0.2,
            }),
            pfc: None,
            ecmp: true,
            int: false,
        }
    }

    /// The PFC headroom an ingress port at `rate_bps` needs: what can arrive after its XOFF
    /// is sent (the pause's flight and the frames in flight back, two link delays at that
    /// rate) plus the frame the upstream port was sending when the pause reached it, and one
    /// more that had started.
    pub fn pfc_headroom(&self, rate_bps: u64, mtu: u32) -> u64 {
        let delay_bytes = rate_bps / 8 * self.link_delay.as_nanos() as u64 / 1_000_000_000;
        2 * delay_bytes + 2 * (u64::from(mtu) + 100 + FRAME_OVERHEAD)
    }

    /// PFC thresholds for this fabric with frames of at most `mtu` payload: XOFF where the
    /// switch with the most ports could still absorb every ingress port's headroom at the
    /// fastest rate, XON at half of it.
    pub fn pfc_thresholds(&self, mtu: u32) -> PfcConfig {
        let ports = self.max_switch_ports();
        let headroom = self.pfc_headroom(self.host_rate_bps.max(self.fabric_rate_bps), mtu);
        let per_port = (self.buffer_bytes / ports.max(1) as u64).saturating_sub(headroom);
        let xoff = per_port.max(4 * (u64::from(mtu) + 100));
        PfcConfig {
            xoff_bytes: xoff,
            xon_bytes: xoff / 2,
        }
    }

    /// Ports of the switch with the most.
    fn max_switch_ports(&self) -> usize {
        let hosts = self.topology.hosts();
        let mut deg = vec![0usize; hosts + self.topology.switches()];
        for (a, b, _) in self.topology.links() {
            deg[a] += 1;
            deg[b] += 1;
        }
        deg[hosts..].iter().copied().max().unwrap_or(0)
    }
}

/// The ECMP hash of a datagram's 5-tuple (UDP, so the protocol is fixed) at the switch
/// `salt` identifies: stable (the same tuple always gives the same value, so a QP's packets
/// stay in order on one path) and spread (a change of any bit, the UDP source port above
/// all, changes about half the bits). Switches salt it with their own index, so that
/// consecutive tiers do not make the same choice (hash polarisation).
pub fn ecmp_hash(src: IpAddr, dst: IpAddr, src_port: u16, dst_port: u16, salt: u32) -> u32 {
    fn fold(ip: IpAddr) -> u64 {
        match ip {
            IpAddr::V4(a) => u64::from(u32::from(a)),
            IpAddr::V6(a) => {
                let v = u128::from(a);
                (v as u64) ^ ((v >> 64) as u64).rotate_left(17)
            }
        }
    }
    // splitmix64's finaliser over the fields, one round each.
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let mut h = mix(u64::from(salt) ^ 0x9e37_79b9_7f4a_7c15);
    h = mix(h ^ fold(src));
    h = mix(h ^ fold(dst).rotate_left(32));
    h = mix(h ^ (u64::from(src_port) << 16 | u64::from(dst_port)));
    (h >> 32) as u32
}

/// Where a port leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    /// A host's link to its ToR.
    HostUp,
    /// A switch's link down to a host.
    ToHost,
    /// A switch's link to a switch of the next tier up.
    Up,
    /// A switch's link to a switch of the tier below.
    Down,
}

/// Counters of one port (diff two snapshots for a window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Frames sent.
    pub tx_frames: u64,
    /// Frame bytes sent.
    pub tx_bytes: u64,
    /// Frames dropped at this egress queue: the switch's buffer was full.
    pub drops: u64,
    /// Frames marked CE at this queue.
    pub marked: u64,
    /// Deepest queue, bytes.
    pub max_queue_bytes: u64,
    /// Times PFC paused this port.
    pub pauses: u64,
    /// Nanoseconds this port was paused.
    pub paused_ns: u64,
}

/// A frame in an egress queue, with what its departure reads of it: the departure then
/// leaves the frame itself alone (by the time a frame leaves, its line is long out of the
/// cache, and so is the next head's, whose length the next departure's time needs).
#[derive(Debug)]
struct Queued {
    /// Its length on the wire, bytes.
    len: u64,
    /// The port it came in through.
    ingress: u32,
    /// Collecting telemetry ([`Arrival::stamp`]).
    stamp: bool,
    frame: Box<Arrival>,
}

/// One directed port.
#[derive(Debug)]
struct Port {
    node: u32,
    peer: u32,
    /// The port at `peer` back to `node`.
    back: u32,
    kind: PortKind,
    rate_bps: u64,
    red: Option<RedConfig>,
    queue: VecDeque<Queued>,
    queue_bytes: u64,
    /// Sending the head frame (its departure event is pending).
    busy: bool,
    paused_since: Option<Instant>,
    /// Ingress side (this port's peer sends into our node through it): bytes in our node's
    /// buffer that came in through here, and whether we are pausing the peer.
    ingress_bytes: u64,
    pausing: bool,
    stats: PortStats,
}

#[derive(Debug)]
enum Ev {
    /// The port finished sending its head frame.
    Depart(u32),
    /// A frame sent on the port reached the port's peer.
    Arrive(u32, Box<Arrival>),
    /// A PFC frame reached the port: pause (`true`) or resume it.
    Pause(u32, bool),
    /// Repeat the XOFF of the ingress port while it pauses.
    Refresh(u32),
}

/// What processing a fabric event gave the simulator.
#[derive(Debug)]
pub(super) enum Out {
    /// A frame reached its host.
    Deliver(Box<Arrival>),
    /// A switch dropped a frame (buffer full).
    Drop(Box<Arrival>),
    /// A switch sent a PFC frame (the whole Ethernet frame, no FCS).
    Pfc([u8; roce_proto::mac_control::MIN_FRAME]),
    /// A host's port was resumed: its device may send again.
    HostResumed(usize),
}

/// The fabric (see the module docs).
#[derive(Debug)]
pub struct Fabric {
    cfg: FabricConfig,
    hosts: usize,
    ports: Vec<Port>,
    /// Ports of each node.
    node_ports: Vec<Vec<u32>>,
    /// Tier of each node (hosts 0).
    tiers: Vec<u8>,
    /// Buffer in use per node (switches).
    buffer: Vec<u64>,
    /// Egress candidates of switch `s` to host `d`: `routes[(s - hosts) * hosts + d]` is an
    /// index of `route_lists`, a range of `route_ports`. Equal lists are stored once (a
    /// fat tree's switch has a handful: up, or down to one of its pods or hosts), so that
    /// looking up a hop reads a small table that stays in the cache.
    routes: Vec<u32>,
    route_lists: Vec<(u32, u32)>,
    route_ports: Vec<u32>,
    /// Pending events by (time, key): slots of `slab`, so that the queue moves a few bytes
    /// per item, not a frame. The key is the scheduling node's count of events it scheduled
    /// and its number, so that among events at one time the order does not depend on how
    /// the fabric is split.
    events: RadixQueue<u32>,
    /// The pending events' payloads, and the free slots.
    slab: Vec<Option<Ev>>,
    free_slots: Vec<u32>,
    /// Events each node has scheduled (the keys' order among events at one time).
    node_seq: Vec<u64>,
    /// The node whose event (or host send) is being processed: it schedules what follows.
    actor: u32,
    /// One random stream per node (RED's coins), so that what a switch draws does not depend
    /// on what other switches did first.
    rngs: Vec<Rng>,
    /// Which part of a split fabric each node belongs to, and this fabric's part: events for
    /// another part's nodes go to `outbox` (see [`Fabric::split`]).
    owner: std::sync::Arc<[u8]>,
    part: u8,
    outbox: Vec<Pending>,
    hops: u64,
    drops: u64,
    pfc_frames: u64,
}

impl Fabric {
    /// Builds the fabric and its routes. Errors on a shape [`Topology::validate`] refuses.
    pub fn new(cfg: FabricConfig) -> Result<Self, &'static str> {
        cfg.topology.validate()?;
        let hosts = cfg.topology.hosts();
        let nodes = hosts + cfg.topology.switches();
        let mut tiers = vec![0u8; nodes];
        let mut node_ports: Vec<Vec<u32>> = vec![Vec::new(); nodes];
        let mut ports = Vec::new();
        for (a, b, tier) in cfg.topology.links() {
            tiers[b] = tier;
            let rate = if a < hosts {
                cfg.host_rate_bps
            } else {
                cfg.fabric_rate_bps
            };
            let (pa, pb) = (ports.len() as u32, ports.len() as u32 + 1);
            let (ka, kb) = if a < hosts {
                (PortKind::HostUp, PortKind::ToHost)
            } else {
                (PortKind::Up, PortKind::Down)
            };
            for (node, peer, back, kind) in [(a, b, pb, ka), (b, a, pa, kb)] {
                let red = if node < hosts {
                    None
                } else {
                    cfg.red.map(|r| scale_red(r, rate, cfg.host_rate_bps))
                };
                node_ports[node].push(ports.len() as u32);
                ports.push(Port {
                    node: node as u32,
                    peer: peer as u32,
                    back,
                    kind,
                    rate_bps: rate.max(1),
                    red,
                    queue: VecDeque::new(),
                    queue_bytes: 0,
                    busy: false,
                    paused_since: None,
                    ingress_bytes: 0,
                    pausing: false,
                    stats: PortStats::default(),
                });
            }
        }
        let mut f = Self {
            cfg,
            hosts,
            ports,
            node_ports,
            tiers,
            buffer: vec![0; nodes],
            routes: Vec::new(),
            route_lists: Vec::new(),
            route_ports: Vec::new(),
            events: RadixQueue::default(),
            slab: Vec::new(),
            free_slots: Vec::new(),
            node_seq: vec![0; nodes],
            actor: 0,
            rngs: (0..nodes).map(|n| node_rng(0, n)).collect(),
            owner: vec![0u8; nodes].into(),
            part: 0,
            outbox: Vec::new(),
            hops: 0,
            drops: 0,
            pfc_frames: 0,
        };
        f.build_routes();
        Ok(f)
    }

    /// Shortest paths by breadth-first search from every host (hosts do not forward).
    fn build_routes(&mut self) {
        let nodes = self.node_ports.len();
        let switches = nodes - self.hosts;
        self.routes = vec![0; switches * self.hosts];
        let mut dist = vec![u32::MAX; nodes];
        let mut q = VecDeque::new();
        let mut interned: std::collections::HashMap<Vec<u32>, u32> = Default::default();
        let mut list = Vec::new();
        for d in 0..self.hosts {
            dist.fill(u32::MAX);
            dist[d] = 0;
            q.clear();
            q.push_back(d);
            while let Some(n) = q.pop_front() {
                if n < self.hosts && n != d {
                    continue;
                }
                for &p in &self.node_ports[n] {
                    let m = self.ports[p as usize].peer as usize;
                    if dist[m] == u32::MAX {
                        dist[m] = dist[n] + 1;
                        q.push_back(m);
                    }
                }
            }
            for s in self.hosts..nodes {
                list.clear();
                for &p in &self.node_ports[s] {
                    let m = self.ports[p as usize].peer as usize;
                    let via_host = m < self.hosts && m != d;
                    if !via_host && dist[m] != u32::MAX && dist[m] + 1 == dist[s] {
                        list.push(p);
                    }
                }
                let id = match interned.get(&list) {
                    Some(&id) => id,
                    None => {
                        let start = self.route_ports.len() as u32;
                        self.route_ports.extend_from_slice(&list);
                        let id = self.route_lists.len() as u32;
                        self.route_lists
                            .push((start, self.route_ports.len() as u32));
                        interned.insert(list.clone(), id);
                        id
                    }
                };
                self.routes[(s - self.hosts) * self.hosts + d] = id;
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FabricConfig {
        &self.cfg
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.hosts
    }

    /// Number of ports (two per link).
    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    /// Port `p`: (node, peer node, kind, rate in bits/s). Nodes are numbered hosts first,
    /// then the switches tier by tier.
    pub fn port(&self, p: usize) -> (usize, usize, PortKind, u64) {
        let x = &self.ports[p];
        (x.node as usize, x.peer as usize, x.kind, x.rate_bps)
    }

    /// Tier of node `n`: 0 for hosts, 1 for ToR / leaf switches, 2 for aggregation / spine,
    /// 3 for core.
    pub fn tier(&self, n: usize) -> u8 {
        self.tiers[n]
    }

    /// A name for node `n`: `host7`; `tor3` (a leaf-spine's `leaf3`), `agg5` (`spine1`),
    /// `core2`, numbered within their tier.
    pub fn node_name(&self, n: usize) -> String {
        if n < self.hosts {
            return format!("host{n}");
        }
        let tier = self.tiers.get(n).copied().unwrap_or(0);
        let first = (self.hosts..self.tiers.len())
            .find(|&i| self.tiers[i] == tier)
            .unwrap_or(n);
        let leaf_spine = matches!(self.cfg.topology, Topology::LeafSpine { .. });
        let kind = match (tier, leaf_spine) {
            (1, true) => "leaf",
            (1, false) => "tor",
            (2, true) => "spine",
            (2, false) => "agg",
            _ => "core",
        };
        format!("{kind}{}", n - first)
    }

    /// Counters of port `p` with its paused time brought up to `now`.
    pub fn port_stats(&self, p: usize, now: Instant) -> PortStats {
        let x = &self.ports[p];
        let mut s = x.stats;
        if let Some(t) = x.paused_since {
            s.paused_ns += now.saturating_duration_since(t).as_nanos() as u64;
        }
        s
    }

    /// Bytes queued at port `p` now.
    pub fn queue_bytes(&self, p: usize) -> u64 {
        self.ports[p].queue_bytes
    }

    /// Frames sent on any port so far (a datagram crossing three switches makes four hops).
    pub fn hops(&self) -> u64 {
        self.hops
    }

    /// Frames dropped at any switch.
    pub fn drops(&self) -> u64 {
        self.drops
    }

    /// PFC frames sent (XOFF, their refreshes and XON).
    pub fn pfc_frames(&self) -> u64 {
        self.pfc_frames
    }

    /// The equal-cost egress ports of switch node `s` toward host `d` (empty if `s` is a
    /// host).
    pub fn next_hops(&self, s: usize, d: usize) -> &[u32] {
        if s < self.hosts || d >= self.hosts {
            return &[];
        }
        let (a, b) = self.route_lists[self.routes[(s - self.hosts) * self.hosts + d] as usize];
        &self.route_ports[a as usize..b as usize]
    }

    /// The path a datagram with this 5-tuple takes from host `from` to host `to`: the ports
    /// it leaves on, in order.
    pub fn path(
        &self,
        from: usize,
        to: usize,
        src: IpAddr,
        dst: IpAddr,
        src_port: u16,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        let Some(&first) = self.node_ports.get(from).and_then(|p| p.first()) else {
            return out;
        };
        let mut p = first as usize;
        out.push(p);
        for _ in 0..8 {
            let n = self.ports[p].peer as usize;
            if n == to || n < self.hosts {
                break;
            }
            match self.choose(n, to, src, dst, src_port) {
                Some(e) => {
                    p = e;
                    out.push(p);
                }
                None => break,
            }
        }
        out
    }

    fn choose(&self, s: usize, d: usize, src: IpAddr, dst: IpAddr, sport: u16) -> Option<usize> {
        let c = self.next_hops(s, d);
        match c.len() {
            0 => None,
            1 => Some(c[0] as usize),
            n if self.cfg.ecmp => {
                let h = ecmp_hash(src, dst, sport, roce_proto::ROCEV2_UDP_PORT, s as u32);
                Some(c[(h as usize) % n] as usize)
            }
            _ => Some(c[0] as usize),
        }
    }

    /// `true` while PFC pauses host `h`'s port.
    pub fn host_paused(&self, h: usize) -> bool {
        self.node_ports
            .get(h)
            .and_then(|p| p.first())
            .is_some_and(|&p| self.ports[p as usize].paused_since.is_some())
    }

    /// The earliest pending event.
    pub(super) fn next_event(&self) -> Option<Instant> {
        self.events.peek_time()
    }

    /// The part of a fabric split `n` ways that node `node` belongs to: the ToR (leaf)
    /// switches in `n` runs of consecutive ones as even as whole switches allow, each with
    /// its hosts (so hosts stay in consecutive runs too); the aggregation and the core
    /// (spine) switches spread the same way, so that a pod split between two parts has
    /// aggregation switches in both. Any split gives the same results; this one balances the
    /// work and keeps a host's traffic to its ToR within its part. `n` is at most
    /// [`Fabric::max_parts`].
    fn part_of(&self, node: usize, n: usize) -> usize {
        let hosts = self.hosts;
        let even = |i: usize, of: usize| i * n / of.max(1);
        match self.cfg.topology {
            Topology::Switch { .. } => 0,
            Topology::LeafSpine {
                leaves,
                hosts_per_leaf,
                spines,
            } => {
                if node < hosts {
                    even(node / hosts_per_leaf, leaves)
                } else if node < hosts + leaves {
                    even(node - hosts, leaves)
                } else {
                    even(node - hosts - leaves, spines)
                }
            }
            Topology::FatTree {
                pods,
                tors,
                aggs,
                hosts_per_tor,
                cores,
            } => {
                let (tor0, agg0) = (hosts, hosts + pods * tors);
                let core0 = agg0 + pods * aggs;
                if node < tor0 {
                    even(node / hosts_per_tor, pods * tors)
                } else if node < agg0 {
                    even(node - tor0, pods * tors)
                } else if node < core0 {
                    even(node - agg0, pods * aggs)
                } else {
                    even(node - core0, cores)
                }
            }
        }
    }

    /// The most parts the fabric splits into: its ToR (leaf) switches, at most 64; 1 for one
    /// switch or links without delay (no lookahead).
    pub fn max_parts(&self) -> usize {
        if self.cfg.link_delay.is_zero() {
            return 1;
        }
        match self.cfg.topology {
            Topology::Switch { .. } => 1,
            Topology::LeafSpine { leaves, .. } => leaves.clamp(1, 64),
            Topology::FatTree { pods, tors, .. } => (pods * tors).clamp(1, 64),
        }
    }

    /// The fabric split `n` ways (at most [`Fabric::max_parts`]) for a parallel run: each
    /// part is this fabric with no events, that processes the events of its own nodes and
    /// puts those it schedules for another part's in its outbox. An event crosses parts only
    /// over a link, one link delay (the lookahead) or more after it was scheduled. Returns the
    /// parts and each host's part.
    pub(super) fn split(&self, n: usize) -> (Vec<Self>, Vec<usize>) {
        let n = n.clamp(1, self.max_parts());
        let nodes = self.node_ports.len();
        let owner: std::sync::Arc<[u8]> = (0..nodes).map(|v| self.part_of(v, n) as u8).collect();
        let parts = (0..n)
            .map(|k| {
                let mut f = Self::new(self.cfg).expect("an existing fabric's shape");
                f.rngs.clone_from(&self.rngs);
                f.owner = owner.clone();
                f.part = k as u8;
                f
            })
            .collect();
        let hosts = (0..self.hosts).map(|h| owner[h] as usize).collect();
        (parts, hosts)
    }

    /// The events this part scheduled for other parts' nodes since the last call.
    pub(super) fn take_outbox(&mut self) -> Vec<Pending> {
        core::mem::take(&mut self.outbox)
    }

    /// The part whose node `p` happens at.
    pub(super) fn pending_part(&self, p: &Pending) -> usize {
        self.owner[self.event_node(&p.ev)] as usize
    }

    /// Takes an event another part scheduled for one of this part's nodes.
    pub(super) fn receive(&mut self, p: Pending) {
        self.insert(p.at, p.key, p.ev);
    }

    /// The part node `n` belongs to (0 unless split).
    pub(super) fn part_of_node(&self, n: usize) -> usize {
        self.owner[n] as usize
    }

    /// Whether node `n` is this part's.
    #[cfg(test)]
    pub(super) fn owns(&self, n: usize) -> bool {
        self.owner[n] == self.part
    }

    /// The node port `p` belongs to.
    pub(super) fn port_node(&self, p: usize) -> usize {
        self.ports[p].node as usize
    }

    /// Seeds the nodes' random streams (each from `seed` and its node number).
    pub(super) fn seed(&mut self, seed: u64) {
        for (n, r) in self.rngs.iter_mut().enumerate() {
            *r = node_rng(seed, n);
        }
    }

    /// The node an event happens at: the port's own for a departure, a pause or a refresh,
    /// the port's peer for an arrival.
    fn event_node(&self, ev: &Ev) -> usize {
        match *ev {
            Ev::Depart(p) | Ev::Pause(p, _) | Ev::Refresh(p) => {
                self.ports[p as usize].node as usize
            }
            Ev::Arrive(p, _) => self.ports[p as usize].peer as usize,
        }
    }

    /// Schedules `ev` at `at`, keyed by the acting node and its count of scheduled events:
    /// among events at one time the order is the keys', the same however the fabric is split,
    /// because every node counts its own.
    fn push(&mut self, at: Instant, ev: Ev) {
        let actor = self.actor as usize;
        self.node_seq[actor] += 1;
        let key = self.node_seq[actor] << NODE_BITS | actor as u64;
        if self.owner[self.event_node(&ev)] != self.part {
            self.outbox.push(Pending { at, key, ev });
            return;
        }
        self.insert(at, key, ev);
    }

    fn insert(&mut self, at: Instant, key: u64, ev: Ev) {
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(ev);
                i
            }
            None => {
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        self.events.push(at, key, slot);
    }

    fn tx_ns(bytes: u64, rate: u64) -> u64 {
        (bytes * 8).saturating_mul(1_000_000_000).div_ceil(rate)
    }

    fn frame_len(a: &Arrival) -> u64 {
        a.data.len() as u64 + FRAME_OVERHEAD
    }

    /// Host `h` puts a frame on its link at `now`; returns when its last bit has left.
    pub(super) fn host_send(&mut self, now: Instant, h: usize, a: Arrival) -> Instant {
        let p = self.node_ports[h][0];
        self.actor = h as u32;
        let port = &mut self.ports[p as usize];
        let len = Self::frame_len(&a);
        let done = now.add_nanos(Self::tx_ns(len, port.rate_bps));
        port.stats.tx_frames += 1;
        port.stats.tx_bytes += len;
        self.hops += 1;
        let at = done + self.cfg.link_delay;
        self.push(at, Ev::Arrive(p, Box::new(a)));
        done
    }

    /// Starts sending port `p`'s head frame if it is idle, not paused and has one.
    fn kick(&mut self, p: u32, now: Instant) {
        let port = &mut self.ports[p as usize];
        if port.busy || port.paused_since.is_some() {
            return;
        }
        let Some(head) = port.queue.front() else {
            return;
        };
        let ns = Self::tx_ns(head.len, port.rate_bps);
        port.busy = true;
        self.push(now.add_nanos(ns), Ev::Depart(p));
    }

    fn pfc_frame(&mut self, node: u32, quanta: u16) -> Out {
        self.pfc_frames += 1;
        let n = node.to_be_bytes();
        let mac = [0x02, 0x00, 0xfa, n[1], n[2], n[3]];
        Out::Pfc(roce_proto::mac_control::pfc_frame(
            mac,
            PFC_PRIORITY,
            quanta,
        ))
    }

    /// Processes the earliest event if it is due at `now`, appending what it gave to `out`.
    /// Returns its key ([`Fabric::key`]), `None` when nothing was due.
    pub(super) fn process(&mut self, now: Instant, out: &mut Vec<Out>) -> Option<u64> {
        if self.events.peek_time().is_none_or(|at| at > now) {
            return None;
        }
        let (at, key, slot) = self.events.pop()?;
        let ev = self.slab.get_mut(slot as usize).and_then(Option::take)?;
        self.free_slots.push(slot);
        self.actor = self.event_node(&ev) as u32;
        match ev {
            Ev::Depart(p) => self.depart(p, at, out),
            Ev::Arrive(p, a) => self.arrive(p, a, at, out),
            Ev::Pause(p, on) => {
                let port = &mut self.ports[p as usize];
                match (on, port.paused_since) {
                    (true, None) => {
                        port.paused_since = Some(at);
                        port.stats.pauses += 1;
                    }
                    (false, Some(t)) => {
                        port.stats.paused_ns += at.saturating_duration_since(t).as_nanos() as u64;
                        port.paused_since = None;
                        if (port.node as usize) < self.hosts {
                            out.push(Out::HostResumed(port.node as usize));
                        }
                        self.kick(p, at);
                    }
                    _ => {}
                }
            }
            Ev::Refresh(r) => {
                let port = &self.ports[r as usize];
                if port.pausing {
                    let node = port.node;
                    let f = self.pfc_frame(node, PFC_XOFF_QUANTA);
                    out.push(f);
                    self.push(at.add_nanos(PFC_REFRESH_NS), Ev::Refresh(r));
                }
            }
        }
        Some(key)
    }

    fn depart(&mut self, p: u32, now: Instant, out: &mut Vec<Out>) {
        let port = &mut self.ports[p as usize];
        port.busy = false;
        let Some(q) = port.queue.pop_front() else {
            return;
        };
        let (len, ingress, mut a) = (q.len, q.ingress, q.frame);
        port.queue_bytes -= len;
        port.stats.tx_frames += 1;
        port.stats.tx_bytes += len;
        let node = port.node as usize;
        if q.stamp {
            if let Some(int) = a.int.as_mut() {
                int.push(IntHop {
                    qlen_bytes: port.queue_bytes,
                    tx_bytes: port.stats.tx_bytes,
                    ts_ns: now.as_nanos(),
                    rate_bps: port.rate_bps,
                });
            }
        }
        self.hops += 1;
        self.buffer[node] -= len;
        // PFC: the bytes leave the ingress port's account.
        if let Some(pfc) = self.cfg.pfc {
            let r = &mut self.ports[ingress as usize];
            r.ingress_bytes = r.ingress_bytes.saturating_sub(len);
            if r.pausing && r.ingress_bytes <= pfc.xon_bytes {
                r.pausing = false;
                let up = r.back;
                let f = self.pfc_frame(node as u32, 0);
                out.push(f);
                self.push(now + self.cfg.link_delay, Ev::Pause(up, false));
            }
        }
        self.push(now + self.cfg.link_delay, Ev::Arrive(p, a));
        self.kick(p, now);
    }

    fn arrive(&mut self, p: u32, mut a: Box<Arrival>, now: Instant, out: &mut Vec<Out>) {
        let node = self.ports[p as usize].peer as usize;
        if node < self.hosts {
            out.push(Out::Deliver(a));
            return;
        }
        let Some(e) = self.choose(node, a.to, a.src, a.dst, a.src_port) else {
            // No route (not one of the fabric's hosts): dropped.
            self.drops += 1;
            out.push(Out::Drop(a));
            return;
        };
        let len = Self::frame_len(&a);
        if self.buffer[node] + len > self.cfg.buffer_bytes {
            self.drops += 1;
            self.ports[e].stats.drops += 1;
            out.push(Out::Drop(a));
            return;
        }
        // The ingress port at this node: the one back toward the sender.
        let ingress = self.ports[p as usize].back;
        let coin = self.rngs[node].unit();
        let eg = &mut self.ports[e];
        if let Some(red) = eg.red {
            if matches!(a.ecn, Ecn::Ect0 | Ecn::Ect1) && coin < red.probability(eg.queue_bytes) {
                a.ecn = Ecn::Ce;
                eg.stats.marked += 1;
            }
        }
        eg.queue_bytes += len;
        eg.stats.max_queue_bytes = eg.stats.max_queue_bytes.max(eg.queue_bytes);
        eg.queue.push_back(Queued {
            len,
            ingress,
            stamp: a.stamp,
            frame: a,
        });
        self.buffer[node] += len;
        self.kick(e as u32, now);
        if let Some(pfc) = self.cfg.pfc {
            let r = &mut self.ports[ingress as usize];
            r.ingress_bytes += len;
            if !r.pausing && r.ingress_bytes > pfc.xoff_bytes {
                r.pausing = true;
                let up = r.back;
                let f = self.pfc_frame(node as u32, PFC_XOFF_QUANTA);
                out.push(f);
                self.push(now + self.cfg.link_delay, Ev::Pause(up, true));
                self.push(now.add_nanos(PFC_REFRESH_NS), Ev::Refresh(ingress));
            }
        }
    }
}

/// Bits of an event key that name the node (a fabric has at most 4,096 hosts and 1,024
/// switches).
const NODE_BITS: u32 = 13;

/// Node `n`'s random stream for the run seeded `seed`.
fn node_rng(seed: u64, n: usize) -> Rng {
    Rng::new(seed ^ (n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// An event scheduled for a node of another part of a split fabric.
#[derive(Debug)]
pub(super) struct Pending {
    at: Instant,
    key: u64,
    ev: Ev,
}

impl Pending {
    /// When it happens.
    pub(super) fn at(&self) -> Instant {
        self.at
    }
}

/// RED thresholds for a port at `rate` from those for `base` (linear in the rate: the same
/// queueing delay).
fn scale_red(r: RedConfig, rate: u64, base: u64) -> RedConfig {
    let k = rate as f64 / base.max(1) as f64;
    RedConfig {
        kmin_bytes: (r.kmin_bytes as f64 * k) as u64,
        kmax_bytes: (r.kmax_bytes as f64 * k) as u64,
        pmax: r.pmax,
    }
}

#[cfg(test)]
mod tests;
