//! A deterministic network simulator (feature `sim`): any number of [`Device`]s joined by
//! links with delay, bandwidth, loss, reordering, duplication, bit corruption and ECN CE
//! marking, all driven by one seeded RNG in virtual time.
//!
//! [`Sim::run_until_idle`] jumps from event to event (a datagram arrival or a device deadline)
//! until nothing is left. Seeds come from the `SIM_SEED` environment variable
//! ([`seed_from_env`]); wrap a test body in a [`SeedGuard`] so a failure prints the seed.
//! A [`Tap`] sees every datagram as it is sent, delivered or lost (with addresses and ports),
//! which is what a pcap writer needs; this crate does not depend on the pcap crate.
//!
//! [`Sim::set_switch`] puts a [`Switch`] in front of one endpoint: a shared egress queue with a
//! bottleneck bandwidth, a buffer limit and RED ECN marking, for congestion experiments.
//!
//! [`Sim::set_fabric`] joins the hosts by a multi-switch [`Fabric`] instead (each switch
//! draws from a random stream of its own), and [`Sim::set_threads`] runs it on several
//! threads, one part of the fabric each, with the same results as on one.
use core::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, SocketAddr};

use roce_proto::{Ecn, Qpn, ROCEV2_UDP_PORT};

use crate::cc::hpcc::IntStack;
use crate::device::{Device, DeviceConfig};
use crate::path::{PathConfig, RxMeta};
use crate::qp::{ConnectParams, ModifyError};
use crate::time::Instant;
use parallel::{lock, AbortOnPanic, Pool, Shared};

pub use crate::rng::Rng;

mod fabric;
mod link;
mod parallel;
mod radix;
mod seed;
mod switch;
mod tap;
mod topology;
mod view;
mod wakeups;
pub use fabric::{ecmp_hash, Fabric, FabricConfig, PortKind, PortStats, Topology};
pub use link::LinkConfig;
pub use seed::{seed_from_env, SeedGuard};
pub use switch::{
    FlowKey, PfcConfig, RedConfig, Switch, SwitchConfig, SwitchStats, FRAME_OVERHEAD,
};
pub use tap::{Tap, TapEvent, TapKind};
use tap::{TapKey, TapRecord, TapWhat, PHASE_EVENTS, PHASE_SENDS};
pub use view::FabricView;
use view::Fabrics;

/// The switch's MAC address in the PFC frames it sends (locally administered).
pub const SWITCH_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0xfe];

/// The priority the switch's PFC frames pause: RoCE's usual lossless class.
pub const PFC_PRIORITY: u8 = 3;

/// The pause time of the switch's XOFF frames, in quanta (the largest).
pub const PFC_XOFF_QUANTA: u16 = 0xffff;

/// How often the switch repeats XOFF while a pause lasts, ns: well within the 65,535 quanta
/// (335 µs at 100 Gb/s) an XOFF pauses for.
pub const PFC_REFRESH_NS: u64 = 100_000;

/// The earlier of two optional deadlines (`None` = no deadline).
fn min_opt(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    a.into_iter().chain(b).min()
}

/// Link-level counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimStats {
    /// Datagrams sent by devices.
    pub sent: u64,
    /// Datagrams delivered (duplicates included).
    pub delivered: u64,
    /// Lost.
    pub lost: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Bit-flipped.
    pub corrupted: u64,
    /// CE-marked.
    pub ce_marked: u64,
    /// Held back for reordering.
    pub reordered: u64,
    /// Addressed to no endpoint.
    pub unroutable: u64,
    /// PFC frames the switch sent (XOFF, its refreshes, XON).
    pub pfc_frames: u64,
}

/// One simulated host.
#[derive(Debug)]
pub struct Endpoint {
    /// The RDMA device.
    pub device: Device,
    /// Its IP address.
    pub ip: IpAddr,
    /// The NIC is serialising a datagram until then (links with a bandwidth only): the device
    /// is not asked for the next datagram before, so queues build inside the device, where
    /// the transport can still change its mind (as on a real NIC).
    egress_busy: Instant,
    /// The device was left with datagrams to send at `egress_busy`.
    blocked: bool,
    /// Datagrams it sent (their [`TapEvent::id`]s).
    sent: u64,
}

#[derive(Debug, Clone)]
struct Arrival {
    at: Instant,
    seq: u64,
    /// The datagram's number ([`TapEvent::id`]; copies keep it).
    id: u64,
    from: usize,
    to: usize,
    src: IpAddr,
    dst: IpAddr,
    src_port: u16,
    ecn: Ecn,
    data: Vec<u8>,
    /// Arrives at the switch (not yet at `to`).
    to_switch: bool,
    /// In-network telemetry: collected on the way (`stamp`), or an ACK's echo (carried).
    int: Option<Box<IntStack>>,
    /// The fabric's switches stamp `int` as the frame leaves each egress port.
    stamp: bool,
}

impl Arrival {
    /// What a tap sees of it at `time`.
    fn tap_event(&self, kind: TapKind, time: Instant) -> TapEvent<'_> {
        TapEvent {
            time,
            kind,
            id: self.id,
            from: self.from,
            to: self.to,
            src: self.src,
            dst: self.dst,
            src_port: self.src_port,
            dst_port: ROCEV2_UDP_PORT,
            ecn: self.ecn,
            datagram: &self.data,
        }
    }
}

impl PartialEq for Arrival {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Arrival {}
impl PartialOrd for Arrival {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Arrival {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the earliest first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The simulator.
pub struct Sim {
    now: Instant,
    seed: u64,
    rng: Rng,
    endpoints: Vec<Endpoint>,
    /// Endpoint index by address.
    by_ip: HashMap<IpAddr, usize>,
    /// Endpoints to ask for datagrams at the next pump (something happened to them), and a
    /// flag per endpoint for membership.
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
    /// Each endpoint's next wake-up (device deadline or end of serialisation), and the heap
    /// of them; an entry that differs from `armed` is stale and skipped.
    armed: Vec<Option<Instant>>,
    timers: wakeups::Wakeups,
    fabric: Option<Fabric>,
    fabric_out: Vec<fabric::Out>,
    /// One UDP source port for every connection instead of each QP pair's own.
    entropy_port: Option<u16>,
    default_link: LinkConfig,
    links: HashMap<(usize, usize), (LinkConfig, Instant)>,
    queue: BinaryHeap<Arrival>,
    seq: u64,
    tap: Option<Box<dyn Tap + Send>>,
    buf: Vec<u8>,
    stats: SimStats,
    switch: Option<Switch>,
    /// PFC: when the switch last sent an XOFF, while it pauses.
    pfc_xoff_at: Option<Instant>,
    /// `run_until_idle` gives up past this virtual time (returns `false`).
    pub time_limit: Instant,
    /// The first endpoint this simulation holds: 0, or a part's first host.
    base: usize,
    /// The parts of a fabric split across threads ([`Sim::set_threads`]); empty when not
    /// split. The endpoints are then theirs, in consecutive ranges.
    parts: Vec<Self>,
    /// The threads that run the parts.
    pool: Option<Pool>,
    /// Each endpoint's part, when split.
    host_part: Vec<usize>,
    /// The shortest time an event takes to cross from one part to another (a link's delay),
    /// ns: each part runs that far ahead of the others' earliest event between meetings.
    lookahead_ns: u64,
    /// Runs made ([`Sim::run_until`] calls): the first field of a [`TapKey`].
    epoch: u64,
    /// Where the simulation is, for ordering a part's tap calls.
    tap_at: TapKey,
    /// A part's tap calls, kept to be merged in the order one simulation makes them (when
    /// split with a tap).
    tap_log: Option<Vec<TapRecord>>,
}

impl core::fmt::Debug for Sim {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("seed", &self.seed)
            .field("endpoints", &self.endpoints.len())
            .field("in_flight", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// An empty simulation at time 0.
    pub fn new(seed: u64) -> Self {
        Self {
            now: Instant::ZERO,
            seed,
            rng: Rng::new(seed),
            endpoints: Vec::new(),
            by_ip: HashMap::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            armed: Vec::new(),
            timers: wakeups::Wakeups::default(),
            fabric: None,
            fabric_out: Vec::new(),
            entropy_port: None,
            default_link: LinkConfig::default(),
            links: HashMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            tap: None,
            buf: Vec::with_capacity(8192),
            stats: SimStats::default(),
            switch: None,
            pfc_xoff_at: None,
            time_limit: Instant::from_nanos(3_600 * 1_000_000_000),
            base: 0,
            parts: Vec::new(),
            pool: None,
            host_part: Vec::new(),
            lookahead_ns: 0,
            epoch: 0,
            tap_at: TapKey::default(),
            tap_log: None,
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// Virtual now.
    pub fn now(&self) -> Instant {
        self.now
    }
    /// Link counters.
    pub fn stats(&self) -> SimStats {
        let mut s = self.stats;
        for p in &self.parts {
            let x = p.stats;
            s.sent += x.sent;
            s.delivered += x.delivered;
            s.lost += x.lost;
            s.duplicated += x.duplicated;
            s.corrupted += x.corrupted;
            s.ce_marked += x.ce_marked;
            s.reordered += x.reordered;
            s.unroutable += x.unroutable;
            s.pfc_frames += x.pfc_frames;
        }
        s
    }
    /// The simulator's RNG (for workload generation from the same seed).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Adds a host with address `ip`; returns its index. QPNs of host `i` start at
    /// `0x11 + 0x100 * i`, so QPNs differ between hosts.
    ///
    /// # Panics
    /// Once split across threads ([`Sim::set_threads`]).
    pub fn add_endpoint(&mut self, ip: IpAddr) -> usize {
        assert!(self.parts.is_empty(), "hosts are added before the split");
        let i = self.endpoints.len();
        self.by_ip.entry(ip).or_insert(i);
        if let Some(t) = self.tap.as_mut() {
            t.on_host(i, ip);
        }
        self.is_dirty.push(false);
        self.armed.push(None);
        self.endpoints.push(Endpoint {
            device: Device::new(DeviceConfig {
                qpn_base: 0x11 + 0x100 * i as u32,
                ..DeviceConfig::default()
            }),
            ip,
            egress_busy: Instant::ZERO,
            blocked: false,
            sent: 0,
        });
        i
    }

    /// The device of host `i`.
    ///
    /// # Panics
    /// If `i` is not a host index.
    pub fn device(&mut self, i: usize) -> &mut Device {
        if let Some(&k) = self.host_part.get(i) {
            return self.parts[k].device(i);
        }
        self.touch(i);
        &mut self.endpoints[i - self.base].device
    }

    /// Host `i`, indexed as [`Sim::add_endpoint`] returned (to read; change a device
    /// through [`Sim::device`], so that the simulator knows to look at it).
    ///
    /// # Panics
    /// If `i` is not a host index.
    pub fn endpoint(&self, i: usize) -> &Endpoint {
        match self.host_part.get(i) {
            Some(&k) => self.parts[k].endpoint(i),
            None => &self.endpoints[i - self.base],
        }
    }

    /// Number of hosts.
    pub fn endpoint_count(&self) -> usize {
        self.host_part.len().max(self.endpoints.len())
    }

    /// Every connection made from now on uses UDP source port `port` (`None`: each QP pair's
    /// own, [`PathConfig::udp_sport`]): no entropy for ECMP.
    pub fn set_entropy_port(&mut self, port: Option<u16>) {
        self.entropy_port = port;
    }

    /// Joins the hosts by `cfg`'s fabric: from now on every datagram crosses it (the links of
    /// [`Sim::link`] are no longer used), host `i` of the topology being endpoint `i`. Errors
    /// unless exactly the topology's number of hosts were added.
    pub fn set_fabric(&mut self, cfg: FabricConfig) -> Result<(), &'static str> {
        let f = Fabric::new(cfg)?;
        if f.hosts() != self.endpoints.len() {
            return Err("the fabric's hosts must be the simulator's endpoints");
        }
        let mut f = f;
        f.seed(self.seed);
        self.fabric = Some(f);
        Ok(())
    }

    /// The fabric, if any (whole or split).
    pub fn fabric(&self) -> Option<FabricView<'_>> {
        if let Some(p) = self.parts.first() {
            let first = p.fabric.as_ref()?;
            return Some(FabricView {
                first,
                all: Fabrics::Split(&self.parts),
            });
        }
        let f = self.fabric.as_ref()?;
        Some(FabricView {
            first: f,
            all: Fabrics::One(f),
        })
    }

    /// Runs the fabric on up to `n` threads: the fabric is split into as many parts (whole
    /// pods of a fat tree, or leaves of a leaf-spine, with their hosts; at most
    /// [`Fabric::max_parts`]), each on a thread of its own during [`Sim::run_until`]. A part
    /// runs ahead of the others' earliest event by at most the links' delay, which is the
    /// least time anything takes to cross from one part to another (conservative parallel
    /// simulation), so every part sees what the others send in time. Results are the same
    /// as on one thread, the taps' calls included, in the same order. Returns the number of
    /// parts: 1 (nothing done) without a fabric, before the fabric's hosts were added, after
    /// the first run, or when `n` is 1.
    pub fn set_threads(&mut self, n: usize) -> usize {
        if !self.parts.is_empty() {
            return self.parts.len();
        }
        let Some(fab) = self.fabric.as_ref() else {
            return 1;
        };
        if n <= 1 || self.epoch > 0 || fab.next_event().is_some() {
            return 1;
        }
        let (fabrics, host_part) = fab.split(n);
        if fabrics.len() <= 1 {
            return 1;
        }
        let total = self.endpoints.len();
        let mut eps = core::mem::take(&mut self.endpoints).into_iter();
        let mut base = 0;
        for (k, f) in fabrics.into_iter().enumerate() {
            let count = host_part.iter().filter(|&&p| p == k).count();
            let mut part = Self::new(self.seed);
            part.now = self.now;
            part.time_limit = self.time_limit;
            part.base = base;
            part.endpoints = eps.by_ref().take(count).collect();
            part.by_ip.clone_from(&self.by_ip);
            part.is_dirty = vec![false; total];
            part.armed = vec![None; total];
            part.fabric = Some(f);
            part.tap_log = self.tap.is_some().then(Vec::new);
            for i in base..base + count {
                if self.is_dirty[i] {
                    part.touch(i);
                }
                part.rearm(i);
            }
            base += count;
            self.parts.push(part);
        }
        self.pool = Some(Pool::new(self.parts.len()));
        self.lookahead_ns = self
            .fabric
            .as_ref()
            .map_or(1, |f| (f.config().link_delay.as_nanos() as u64).max(1));
        self.host_part = host_part;
        self.fabric = None;
        self.dirty.clear();
        self.timers = wakeups::Wakeups::default();
        self.parts.len()
    }

    /// Marks endpoint `i` to be asked for datagrams at the next pump.
    fn touch(&mut self, i: usize) {
        if !self.is_dirty[i] {
            self.is_dirty[i] = true;
            self.dirty.push(i);
        }
    }

    /// Records endpoint `i`'s next wake-up.
    fn rearm(&mut self, i: usize) {
        let e = &self.endpoints[i - self.base];
        let t = min_opt(e.device.poll_timeout(), e.blocked.then_some(e.egress_busy));
        if t != self.armed[i] {
            self.armed[i] = t;
            self.timers.set(i, t);
        }
    }

    /// Impairments used for links not configured with [`Sim::link`].
    pub fn set_default_link(&mut self, cfg: LinkConfig) {
        self.default_link = cfg;
        for (c, _) in self.links.values_mut() {
            *c = cfg;
        }
    }

    /// The impairments of the direction `from → to`.
    pub fn link(&mut self, from: usize, to: usize) -> &mut LinkConfig {
        let d = self.default_link;
        &mut self.links.entry((from, to)).or_insert((d, Instant::ZERO)).0
    }

    /// Puts a switch in front of endpoint `cfg.port`: from now on every datagram addressed to
    /// it crosses the switch's queue (see [`Switch`]). Replaces any previous switch.
    pub fn set_switch(&mut self, cfg: SwitchConfig) {
        self.switch = Some(Switch::new(cfg, self.now));
    }

    /// The switch, if any.
    pub fn switch(&self) -> Option<&Switch> {
        self.switch.as_ref()
    }

    /// The switch, if any (to take interval maxima).
    pub fn switch_mut(&mut self) -> Option<&mut Switch> {
        self.switch.as_mut()
    }

    /// Installs a tap.
    pub fn set_tap(&mut self, tap: Box<dyn Tap + Send>) {
        self.tap = Some(tap);
        for p in &mut self.parts {
            p.tap_log.get_or_insert_with(Vec::new);
        }
    }

    /// Brings `qa` on host `a` and `qb` on host `b` from RESET to RTS, connected to each other.
    /// `p` is side A's view (its `sq_psn` is what A sends from, its `rq_psn` what A expects);
    /// B gets the mirror image. The peer QPNs and the paths (host addresses, the entropy UDP
    /// source port of the QPN pair, `p.path.ecn`) are filled in here.
    pub fn connect(
        &mut self,
        a: usize,
        qa: Qpn,
        b: usize,
        qb: Qpn,
        p: &ConnectParams,
    ) -> Result<(), ModifyError> {
        let sport = self
            .entropy_port
            .unwrap_or_else(|| PathConfig::udp_sport(qa.0, qb.0));
        let ends = [
            (a, qa, qb, b, p.rq_psn, p.sq_psn),
            (b, qb, qa, a, p.sq_psn, p.rq_psn),
        ];
        for (host, q, dest, peer, rq_psn, sq_psn) in ends {
            let path = PathConfig {
                local: self.endpoint(host).ip,
                remote: self.endpoint(peer).ip,
                src_port: sport,
                remote_src_port: sport,
                ecn: p.path.ecn,
                verify_icrc: true,
                ..PathConfig::default()
            };
            let c = ConnectParams {
                dest_qpn: dest,
                rq_psn,
                sq_psn,
                path,
                ..*p
            };
            self.device(host).connect_qp(q, &c)?;
        }
        Ok(())
    }

    /// The PFC frames the switch sends upstream at `time` (to the tap): an XOFF when it
    /// starts pausing, refreshed every [`PFC_REFRESH_NS`] while the pause lasts (the quanta
    /// would run out), and an XON when it resumes.
    fn pfc_frames(&mut self, time: Instant) {
        let paused = self.switch.as_ref().is_some_and(Switch::paused);
        let frame = match (paused, self.pfc_xoff_at) {
            (true, None) => Some(PFC_XOFF_QUANTA),
            (true, Some(t))
                if time.saturating_duration_since(t).as_nanos() >= PFC_REFRESH_NS as u128 =>
            {
                Some(PFC_XOFF_QUANTA)
            }
            (false, Some(_)) => Some(0),
            _ => None,
        };
        let Some(quanta) = frame else {
            return;
        };
        self.pfc_xoff_at = paused.then_some(time);
        if !paused {
            // Resumed: every sender may go on.
            for i in 0..self.endpoints.len() {
                self.touch(i);
            }
        }
        self.stats.pfc_frames += 1;
        if let Some(t) = self.tap.as_mut() {
            let f = roce_proto::mac_control::pfc_frame(SWITCH_MAC, PFC_PRIORITY, quanta);
            t.on_frame(time, &f);
        }
    }

    /// Collects every datagram the devices want to send and puts it on its link (or the
    /// fabric). Only the devices something happened to since the last pump are asked: a
    /// datagram or a timeout, a call of [`Sim::device`], the end of a pause or of their
    /// NIC's last frame.
    pub fn pump(&mut self) {
        let mut list = core::mem::take(&mut self.dirty);
        list.sort_unstable();
        for &i in &list {
            self.is_dirty[i] = false;
            self.tap_item(i as u64);
            self.pump_one(i);
        }
        for &i in &list {
            self.rearm(i);
        }
        list.clear();
        self.dirty = list;
    }

    fn pump_one(&mut self, from: usize) {
        let e = from - self.base;
        self.endpoints[e].blocked = false;
        // PFC: while the switch pauses, the senders upstream of its port send nothing (the
        // port's own endpoint, downstream, goes on); in a fabric, a paused host port.
        let switch_paused = self
            .switch
            .as_ref()
            .is_some_and(|s| s.paused() && s.config().port != from);
        let fabric_paused = self.fabric.as_ref().is_some_and(|f| f.host_paused(from));
        if switch_paused || fabric_paused {
            return;
        }
        loop {
            let now = self.now;
            if self.endpoints[e].egress_busy > now {
                self.endpoints[e].blocked = true;
                break;
            }
            let Some(t) = self.endpoints[e].device.poll_transmit(now, &mut self.buf) else {
                break;
            };
            self.stats.sent += 1;
            let dst = t.path.remote;
            let Some(&to) = self.by_ip.get(&dst) else {
                self.stats.unroutable += 1;
                continue;
            };
            self.endpoints[e].sent += 1;
            let arrival = Arrival {
                at: now,
                seq: 0,
                id: (from as u64) << 40 | self.endpoints[e].sent,
                from,
                to,
                src: t.path.local,
                dst,
                src_port: t.path.src_port,
                ecn: t.ecn,
                data: self.buf[..t.len].to_vec(),
                to_switch: false,
                int: None,
                stamp: false,
            };
            self.tap(TapKind::Sent, &arrival, now);
            let mut arrival = arrival;
            // INT: an ACK carries the echo it was given; anything else collects stamps when
            // the fabric gives them.
            match t.int {
                Some(echo) => arrival.int = Some(Box::new(echo)),
                None if self.fabric.as_ref().is_some_and(|f| f.config().int) => {
                    arrival.int = Some(Box::default());
                    arrival.stamp = true;
                }
                None => {}
            }
            match self.fabric.as_mut() {
                Some(f) => {
                    let done = f.host_send(now, from, arrival);
                    self.endpoints[e].egress_busy = done;
                    if f.host_paused(from) {
                        break;
                    }
                }
                None => self.transmit(arrival),
            }
        }
    }

    fn transmit(&mut self, mut a: Arrival) {
        let d = self.default_link;
        let (cfg, busy) = self
            .links
            .entry((a.from, a.to))
            .or_insert((d, Instant::ZERO));
        let cfg = *cfg;
        let mut depart = self.now.max(*busy);
        if let Some(bw) = cfg.bandwidth_bps.filter(|&b| b > 0) {
            let bits = (a.data.len() as u64 + 8 + 20 + 14) * 8;
            depart = depart.add_nanos(bits.saturating_mul(1_000_000_000) / bw);
            *busy = depart;
            self.endpoints[a.from].egress_busy = depart;
        }
        if self.rng.chance(cfg.loss) {
            self.stats.lost += 1;
            self.tap(TapKind::Lost, &a, depart);
            return;
        }
        let copies = if self.rng.chance(cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        if matches!(a.ecn, Ecn::Ect0 | Ecn::Ect1) && self.rng.chance(cfg.ce_mark) {
            self.stats.ce_marked += 1;
            a.ecn = Ecn::Ce;
        }
        if !a.data.is_empty() && self.rng.chance(cfg.corrupt) {
            self.stats.corrupted += 1;
            let bit = self.rng.below(a.data.len() as u64 * 8);
            a.data[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        for c in 0..copies {
            let mut at = depart + cfg.delay;
            if self.rng.chance(cfg.reorder) || c == 1 {
                self.stats.reordered += u64::from(c == 0);
                let extra = self.rng.below(cfg.reorder_delay.as_nanos() as u64 + 1);
                at = at.add_nanos(extra);
            }
            self.seq += 1;
            let to_switch = self
                .switch
                .as_ref()
                .is_some_and(|s| s.config().port == a.to);
            let copy = Arrival {
                at,
                seq: self.seq,
                id: a.id,
                from: a.from,
                to: a.to,
                src: a.src,
                dst: a.dst,
                src_port: a.src_port,
                ecn: a.ecn,
                data: if c + 1 == copies {
                    core::mem::take(&mut a.data)
                } else {
                    a.data.clone()
                },
                to_switch,
                int: None,
                stamp: false,
            };
            self.queue.push(copy);
        }
    }

    /// The next event time: an arrival or a device deadline.
    pub fn next_event(&self) -> Option<Instant> {
        if !self.parts.is_empty() {
            return self.parts.iter().filter_map(|p| p.next_event()).min();
        }
        let arrival = min_opt(
            self.queue.peek().map(|a| a.at),
            self.switch.as_ref().and_then(Switch::next_departure),
        );
        let arrival = min_opt(arrival, self.fabric.as_ref().and_then(Fabric::next_event));
        let timer = self.timers.peek().map(|(t, _)| t);
        min_opt(arrival, timer)
    }

    fn deliver(&mut self, a: &Arrival) {
        let now = self.now;
        self.stats.delivered += 1;
        self.tap(TapKind::Delivered, a, now);
        // The simulated senders write roce's own IPv4 header, and the simulator sees it.
        let meta = RxMeta::new(SocketAddr::new(a.src, a.src_port), a.dst, a.ecn)
            .with_ipv4(crate::path::Ipv4Seen::ROCE);
        self.endpoints[a.to - self.base].device.handle_datagram_int(
            now,
            &meta,
            &a.data,
            a.int.as_deref(),
        );
        // Its wake-up is set again when the step ends ([`Sim::pump`] re-arms every device it
        // asked); a wake-up made stale by the datagram meanwhile is checked against the
        // device's own deadline before it runs anything.
        self.touch(a.to);
    }

    /// Processes the earliest fabric event (due by now) and what it gave.
    fn fabric_event(&mut self) {
        let now = self.now;
        let mut out = core::mem::take(&mut self.fabric_out);
        if let Some(key) = self.fabric.as_mut().and_then(|f| f.process(now, &mut out)) {
            self.tap_item(key);
        }
        for o in out.drain(..) {
            match o {
                fabric::Out::Deliver(a) => self.deliver(&a),
                fabric::Out::Drop(a) => {
                    self.stats.lost += 1;
                    self.tap(TapKind::Lost, &a, now);
                }
                fabric::Out::Pfc(frame) => {
                    self.stats.pfc_frames += 1;
                    self.tap_frame(now, &frame);
                }
                fabric::Out::HostResumed(h) => self.touch(h),
            }
        }
        self.fabric_out = out;
    }

    /// Sends what is pending, then advances to the next event and processes it. `false` when
    /// there is nothing left to do.
    pub fn step(&mut self) -> bool {
        if !self.parts.is_empty() {
            let Some(t) = self.next_event() else {
                return false;
            };
            self.run_until(t);
            return true;
        }
        self.pump();
        let Some(t) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(t);
        let now = self.now;
        self.round(PHASE_EVENTS);
        loop {
            // The switch's departures, the arrivals and the fabric's events, in time order.
            let dep = self
                .switch
                .as_ref()
                .and_then(Switch::next_departure)
                .filter(|&d| d <= now);
            let arr = self.queue.peek().map(|a| a.at).filter(|&a| a <= now);
            let fab = self
                .fabric
                .as_ref()
                .and_then(Fabric::next_event)
                .filter(|&f| f <= now);
            if let Some(d) = dep.filter(|&d| arr.is_none_or(|a| d <= a)) {
                if fab.is_none_or(|f| d <= f) {
                    if let Some(mut a) = self.switch.as_mut().and_then(|s| s.depart(d)) {
                        a.to_switch = false;
                        self.seq += 1;
                        a.seq = self.seq;
                        self.queue.push(a);
                    }
                    self.pfc_frames(d);
                    continue;
                }
            }
            if fab.is_some_and(|f| arr.is_none_or(|a| f < a)) {
                self.fabric_event();
                continue;
            }
            if arr.is_none() {
                break;
            }
            let Some(a) = self.queue.pop() else { break };
            if a.to_switch {
                let coin = self.rng.unit();
                let at = a.at;
                if let Some(sw) = self.switch.as_mut() {
                    if let Err(a) = sw.enqueue(at, a, coin) {
                        self.stats.lost += 1;
                        self.tap(TapKind::Lost, &a, at);
                    }
                }
                self.pfc_frames(at);
                continue;
            }
            self.deliver(&a);
        }
        // The wake-ups that are due: device deadlines and NICs done serialising.
        let mut due = Vec::new();
        while let Some((t, i)) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            self.armed[i] = None;
            due.push(i);
        }
        due.sort_unstable();
        for i in due {
            let e = &mut self.endpoints[i - self.base];
            if e.device.poll_timeout().is_some_and(|d| d <= now) {
                e.device.handle_timeout(now);
            }
            self.touch(i);
        }
        self.tap_at.phase = PHASE_SENDS;
        self.pump();
        true
    }

    /// Runs until no datagram is in flight and no device has a deadline. `false` if
    /// [`Sim::time_limit`] was reached first.
    pub fn run_until_idle(&mut self) -> bool {
        while self.step() {
            if self.now > self.time_limit {
                return false;
            }
        }
        true
    }

    /// Runs every event up to `deadline`, then sets the clock to `deadline`.
    pub fn run_until(&mut self, deadline: Instant) {
        if !self.parts.is_empty() {
            return self.run_parts(deadline);
        }
        self.epoch += 1;
        self.round(PHASE_SENDS);
        loop {
            self.pump();
            match self.next_event() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => break,
            }
        }
        self.now = self.now.max(deadline);
    }

    /// [`Sim::run_until`] of a split simulation: every part on a thread of its own (the
    /// first on this one), meeting every lookahead of virtual time to exchange what crossed
    /// between them; then the tap sees the parts' calls merged.
    fn run_parts(&mut self, deadline: Instant) {
        let ok = match self.pool.as_ref() {
            Some(pool) => pool.run(&mut self.parts, deadline, self.lookahead_ns),
            None => false,
        };
        // A part's thread panicked (a bug): its part, and with it the run, is lost.
        assert!(ok, "a thread of the simulation failed");
        self.now = self.now.max(deadline);
        self.epoch += 1;
        let Some(tap) = self.tap.as_mut() else {
            return;
        };
        let mut log: Vec<TapRecord> = Vec::new();
        for p in &mut self.parts {
            if let Some(l) = p.tap_log.as_mut() {
                log.append(l);
            }
        }
        log.sort_unstable_by_key(|r| r.key);
        for r in log {
            match r.what {
                TapWhat::Frame(f) => tap.on_frame(r.key.time, &f),
                TapWhat::Datagram(kind, a) => tap.on_datagram(&a.tap_event(kind, r.key.time)),
            }
        }
    }

    /// Part `k`'s share of [`Sim::run_parts`]: its first sends, then windows of virtual
    /// time until the earliest event of all is past `deadline`. Before each window the parts
    /// meet, each having said its earliest event (what it holds, and what it sent to others
    /// since the last meeting); the window runs every event up to the earliest of all plus
    /// the lookahead less a nanosecond, which nothing another part does in it can reach.
    fn run_part(&mut self, k: usize, sh: &Shared, lookahead: u64, deadline: Instant) {
        use std::sync::atomic::Ordering::Relaxed;
        let _guard = AbortOnPanic(&sh.meeting);
        self.epoch += 1;
        self.round(PHASE_SENDS);
        self.pump();
        let mut outs: Vec<Vec<fabric::Pending>> = (0..sh.inbox.len()).map(|_| Vec::new()).collect();
        let mut turn = 0;
        loop {
            let mut next = self.next_event().map_or(u64::MAX, Instant::as_nanos);
            if let Some(f) = self.fabric.as_mut() {
                for p in f.take_outbox() {
                    next = next.min(p.at().as_nanos());
                    let to = f.pending_part(&p);
                    outs[to].push(p);
                }
            }
            for (to, v) in outs.iter_mut().enumerate() {
                if !v.is_empty() {
                    lock(&sh.inbox[to]).append(v);
                }
            }
            sh.next[turn][k].store(next, Relaxed);
            if !sh.meeting.wait() {
                return;
            }
            let earliest = sh.next[turn]
                .iter()
                .map(|x| x.load(Relaxed))
                .min()
                .unwrap_or(u64::MAX);
            turn ^= 1;
            // What others sent (it may hold some of their next window's, all later than
            // this one's end: they wait in the queue like the rest).
            let mine = core::mem::take(&mut *lock(&sh.inbox[k]));
            if let Some(f) = self.fabric.as_mut() {
                for p in mine {
                    f.receive(p);
                }
            }
            if earliest > deadline.as_nanos() {
                break;
            }
            let end = deadline.min(Instant::from_nanos(earliest.saturating_add(lookahead - 1)));
            while self.next_event().is_some_and(|t| t <= end) {
                self.step();
            }
        }
        self.now = self.now.max(deadline);
    }
}
