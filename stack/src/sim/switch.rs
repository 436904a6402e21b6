//! A switch node for the simulator: one egress port with a shared FIFO queue, a bottleneck
//! bandwidth, a buffer limit (tail drop) and RED-style ECN marking as the DCQCN paper's switches
//! do (Zhu et al., SIGCOMM 2015, §3: no mark below Kmin, probability rising linearly to Pmax at
//! Kmax, every packet above).
//!
//! Every datagram addressed to the endpoint behind the port ([`SwitchConfig::port`]) crosses
//! the switch: the sender's link (its bandwidth and delay) brings it to the switch, where it
//! is marked or dropped on arrival and queued; the port sends one frame at a time at
//! [`SwitchConfig::bandwidth_bps`] and the frame reaches the receiver
//! [`SwitchConfig::delay`] later. Traffic in the other direction (ACKs, CNPs, READ
//! responses) uses the plain links, i.e. an uncongested port.
//!
//! Queue depth counts frame bytes (the datagram plus 42 bytes of Ethernet, IPv4 and UDP
//! headers) of every frame queued or being sent.
use core::time::Duration;
use std::collections::VecDeque;

use roce_proto::Ecn;

use super::Arrival;
use crate::time::Instant;

/// Ethernet (14) + IPv4 (20) + UDP (8) bytes around each datagram.
pub const FRAME_OVERHEAD: u64 = 14 + 20 + 8;

/// RED-style ECN marking thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedConfig {
    /// No marking at or below this queue depth (bytes).
    pub kmin_bytes: u64,
    /// Marking probability reaches `pmax` here; above it every ECN-capable packet is marked.
    pub kmax_bytes: u64,
    /// Marking probability at `kmax_bytes`.
    pub pmax: f64,
}

impl RedConfig {
    /// DCQCN paper: Kmin 5 KB, Kmax 200 KB, Pmax 1 %.
    pub const DCQCN_PAPER: Self = Self {
        kmin_bytes: 5_000,
        kmax_bytes: 200_000,
        pmax: 0.01,
    };

    /// Marking probability for a packet arriving at a queue of `queue_bytes`.
    pub fn probability(&self, queue_bytes: u64) -> f64 {
        if queue_bytes <= self.kmin_bytes {
            0.0
        } else if queue_bytes > self.kmax_bytes {
            1.0
        } else {
            let span = self.kmax_bytes.saturating_sub(self.kmin_bytes).max(1);
            self.pmax * (queue_bytes - self.kmin_bytes) as f64 / span as f64
        }
    }
}

/// The switch's egress port.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwitchConfig {
    /// Index of the endpoint behind the port (every datagram to it crosses the switch).
    pub port: usize,
    /// Bottleneck rate in bits per second (frame bytes).
    pub bandwidth_bps: u64,
    /// Propagation delay from the switch to the endpoint.
    pub delay: Duration,
    /// Buffer limit in bytes: a frame that would take the queue above it is dropped.
    pub buffer_bytes: u64,
    /// ECN marking (`None`: never mark).
    pub red: Option<RedConfig>,
    /// Priority flow control (IEEE 802.1Qbb; `None`: off, the buffer tail-drops).
    pub pfc: Option<PfcConfig>,
}

/// PFC thresholds of the port's queue (one priority: all RoCE traffic). Above `xoff_bytes`
/// the switch pauses every upstream sender; at or below `xon_bytes` it resumes them. Frames
/// already on the wire when the pause starts still arrive: the buffer above `xoff_bytes` is
/// the headroom for them (a sender's frame in serialisation plus a hop of propagation each).
/// The pause reaches the senders at once (this model has no separate upstream path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcConfig {
    /// Pause above this queue depth, bytes.
    pub xoff_bytes: u64,
    /// Resume at or below this depth, bytes.
    pub xon_bytes: u64,
}

/// Cumulative counters of the switch (diff two snapshots for a time window).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SwitchStats {
    /// Frames that arrived.
    pub arrived: u64,
    /// Frames marked CE on arrival.
    pub marked: u64,
    /// Frames dropped because the buffer was full.
    pub tail_drops: u64,
    /// Frames sent on the port.
    pub departed: u64,
    /// Frame bytes sent on the port.
    pub departed_bytes: u64,
    /// Nanoseconds the port was sending.
    pub busy_ns: u64,
    /// Deepest queue seen, bytes.
    pub max_queue_bytes: u64,
    /// Integral of the queue depth over time, byte·ns.
    pub queue_byte_ns: u128,
    /// Nanoseconds with the queue below Kmin / within [Kmin, Kmax] / above Kmax.
    pub band_ns: [u64; 3],
    /// PFC pauses sent (XOFF crossings).
    pub pauses: u64,
    /// Nanoseconds the upstream senders were paused.
    pub paused_ns: u64,
}

/// One flow through the switch: packets from `from` with UDP source port `src_port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    /// Sending endpoint index.
    pub from: usize,
    /// UDP source port (one per connection).
    pub src_port: u16,
}

/// The switch node (see the module docs).
#[derive(Debug)]
pub struct Switch {
    cfg: SwitchConfig,
    queue: VecDeque<Arrival>,
    queue_bytes: u64,
    departure: Option<Instant>,
    last_change: Instant,
    interval_max: u64,
    flows: Vec<(FlowKey, u64)>,
    stats: SwitchStats,
    /// PFC: paused since then.
    paused_since: Option<Instant>,
}

impl Switch {
    pub(super) fn new(cfg: SwitchConfig, now: Instant) -> Self {
        Self {
            cfg,
            queue: VecDeque::new(),
            queue_bytes: 0,
            departure: None,
            last_change: now,
            interval_max: 0,
            flows: Vec::new(),
            stats: SwitchStats::default(),
            paused_since: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SwitchConfig {
        &self.cfg
    }

    /// Queued bytes now.
    pub fn queue_bytes(&self) -> u64 {
        self.queue_bytes
    }

    /// Counters up to the last event (call [`Switch::stats_at`] for exact time integrals).
    pub fn stats(&self) -> SwitchStats {
        self.stats
    }

    /// Counters with the time integrals brought up to `now`.
    pub fn stats_at(&self, now: Instant) -> SwitchStats {
        let mut s = self.stats;
        Self::account(&self.cfg, &mut s, self.queue_bytes, self.last_change, now);
        if let Some(p) = self.paused_since {
            s.paused_ns += now.saturating_duration_since(p).as_nanos() as u64;
        }
        s
    }

    /// `true` while PFC pauses the upstream senders.
    pub fn paused(&self) -> bool {
        self.paused_since.is_some()
    }

    /// The deepest queue since the last call (or since the start), then resets it to the
    /// current depth.
    pub fn take_interval_max(&mut self) -> u64 {
        core::mem::replace(&mut self.interval_max, self.queue_bytes)
    }

    /// Frame bytes sent per flow so far, in order of first appearance.
    pub fn flows(&self) -> &[(FlowKey, u64)] {
        &self.flows
    }

    pub(super) fn next_departure(&self) -> Option<Instant> {
        self.departure
    }

    fn frame_len(a: &Arrival) -> u64 {
        a.data.len() as u64 + FRAME_OVERHEAD
    }

    fn tx_ns(&self, bytes: u64) -> u64 {
        (bytes * 8)
            .saturating_mul(1_000_000_000)
            .div_ceil(self.cfg.bandwidth_bps.max(1))
    }

    fn account(cfg: &SwitchConfig, s: &mut SwitchStats, q: u64, from: Instant, to: Instant) {
        let dt = to.as_nanos().saturating_sub(from.as_nanos());
        if dt == 0 {
            return;
        }
        s.queue_byte_ns += u128::from(q) * u128::from(dt);
        // Work-conserving: the port sends whenever something is queued.
        if q > 0 {
            s.busy_ns += dt;
        }
        let band = match cfg.red {
            Some(r) if q < r.kmin_bytes => 0,
            Some(r) if q > r.kmax_bytes => 2,
            Some(_) => 1,
            None => 1,
        };
        s.band_ns[band] += dt;
    }

    fn advance(&mut self, now: Instant) {
        Self::account(
            &self.cfg,
            &mut self.stats,
            self.queue_bytes,
            self.last_change,
            now,
        );
        self.last_change = self.last_change.max(now);
    }

    /// A frame arrives at `now`: tail drop, or mark (`mark` = the RED coin came up) and
    /// queue. Returns the frame back if it was dropped.
    pub(super) fn enqueue(
        &mut self,
        now: Instant,
        mut a: Arrival,
        coin: f64,
    ) -> Result<(), Arrival> {
        self.advance(now);
        self.stats.arrived += 1;
        let len = Self::frame_len(&a);
        if self.queue_bytes + len > self.cfg.buffer_bytes {
            self.stats.tail_drops += 1;
            return Err(a);
        }
        if let Some(red) = self.cfg.red {
            if matches!(a.ecn, Ecn::Ect0 | Ecn::Ect1) && coin < red.probability(self.queue_bytes) {
                a.ecn = Ecn::Ce;
                self.stats.marked += 1;
            }
        }
        self.queue_bytes += len;
        if let Some(p) = self.cfg.pfc {
            if self.paused_since.is_none() && self.queue_bytes > p.xoff_bytes {
                self.paused_since = Some(now);
                self.stats.pauses += 1;
            }
        }
        self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(self.queue_bytes);
        self.interval_max = self.interval_max.max(self.queue_bytes);
        if self.departure.is_none() {
            self.departure = Some(now.add_nanos(self.tx_ns(len)));
        }
        self.queue.push_back(a);
        Ok(())
    }

    /// The frame being sent finished at `now` (= `next_departure`); returns it with its
    /// arrival time at the endpoint set.
    pub(super) fn depart(&mut self, now: Instant) -> Option<Arrival> {
        self.advance(now);
        let mut a = self.queue.pop_front()?;
        let len = Self::frame_len(&a);
        self.queue_bytes -= len;
        if let (Some(p), Some(since)) = (self.cfg.pfc, self.paused_since) {
            if self.queue_bytes <= p.xon_bytes {
                self.stats.paused_ns += now.saturating_duration_since(since).as_nanos() as u64;
                self.paused_since = None;
            }
        }
        self.stats.departed += 1;
        self.stats.departed_bytes += len;
        let key = FlowKey {
            from: a.from,
            src_port: a.src_port,
        };
        match self.flows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, b)) => *b += len,
            None => self.flows.push((key, len)),
        }
        self.departure = self
            .queue
            .front()
            .map(|f| now.add_nanos(self.tx_ns(Self::frame_len(f))));
        a.at = now + self.cfg.delay;
        Some(a)
    }
}
