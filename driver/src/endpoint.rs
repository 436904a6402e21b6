//! One endpoint's event loop: moves datagrams between a [`RoceSocket`] and a [`Device`] and
//! time from the system clock, and lets an [`Application`] post work and consume completions.
//! PSN, ACK and retransmission decisions, and the order datagrams go on the wire in, all
//! belong to the device; this only moves bytes and time (the sans-IO contract of
//! `roce-stack`).
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use roce_proto::{Ecn, ROCEV2_UDP_PORT};
use roce_stack::{Device, Instant};

use crate::app::Application;
use crate::impair::{ImpairStage, ImpairStats, Impairment};
use crate::socket::{Link, LinkChoice, RoceSocket, RECV_BATCH, SEND_BATCH};

/// Whether a datagram was sent or received, for a capture tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Sent by this endpoint.
    Sent,
    /// Received by this endpoint (before the impairment stage: what the wire carried).
    Received,
}

/// One datagram as a capture tap sees it.
#[derive(Debug, Clone, Copy)]
pub struct TapRecord<'a> {
    /// Wall-clock time.
    pub time: SystemTime,
    /// Sent or received.
    pub direction: Direction,
    /// Source address and UDP port.
    pub src: SocketAddr,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// ECN codepoint of the IP header.
    pub ecn: Ecn,
    /// The UDP payload (BTH through ICRC).
    pub data: &'a [u8],
}

/// A capture tap: called for every datagram sent and received.
pub type Tap = Box<dyn FnMut(&TapRecord<'_>) + Send>;

/// The capture taps of a run whose two ends are in one process.
#[derive(Default)]
pub struct Taps {
    /// The client endpoint's.
    pub client: Option<Tap>,
    /// The server endpoint's.
    pub server: Option<Tap>,
}

impl Taps {
    /// Only the client's (which sees what it sends and what it receives).
    pub fn client(tap: Option<Tap>) -> Self {
        Self {
            client: tap,
            server: None,
        }
    }
}

impl std::fmt::Debug for Taps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taps")
            .field("client", &self.client.is_some())
            .field("server", &self.server.is_some())
            .finish()
    }
}

pub use crate::error::RunError;

/// Counters of the loop itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoopStats {
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams received from the socket.
    pub received: u64,
    /// Times the loop went to sleep (in epoll) with nothing to do.
    pub wakeups: u64,
}

/// An endpoint: socket, device, clock, impairment stage, tap.
pub struct Endpoint {
    /// The sans-IO device (QPs, memory, CQs).
    pub dev: Device,
    sock: RoceSocket,
    epoch: std::time::Instant,
    impair: ImpairStage,
    tap: Option<Tap>,
    /// One buffer per datagram of a send batch: the device writes each packet straight into
    /// its slot, and `sendmmsg` reads it from there (the only copy on the way out).
    slots: Vec<Vec<u8>>,
    /// Source port, destination and ECN codepoint of each filled slot.
    slot_meta: Vec<(u16, SocketAddr, Ecn)>,
    /// When each filled slot's datagram was made (the clock is read for each: a CNP's
    /// pacing interval counts from when it leaves, and a capture stamps it then).
    slot_time: Vec<Instant>,
    /// The wall-clock time of `epoch` (for capture stamps).
    sys_epoch: SystemTime,
    busy_poll: Duration,
    /// Loop counters.
    pub stats: LoopStats,
    /// UDP destination port of the peer.
    peer_port: u16,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("local", &self.sock.local_addr())
            .finish_non_exhaustive()
    }
}

/// Sends at most this many datagrams per loop turn before reading again: as many as one
/// receive reads, so that a busy endpoint alternates receiving and sending in equal batches.
/// Each datagram received on `lo` frees a buffer the sending core allocated, and Linux queues
/// those frees for that core, interrupting it (an IPI, costly in a VM) once 32 have piled up
/// without it sending; the sending core empties the queue each time it sends. Reading up to
/// four batches per turn and sending up to 64 datagrams made a 64 B READ run (both cores
/// receive and send one datagram per message) take about 1,800 of those interrupts per
/// 300,000 messages instead of about 100, and cost it 5 % of its message rate; WRITE and
/// 64 KiB runs did not change.
const TX_BURST: usize = RECV_BATCH;

impl Endpoint {
    /// Binds the RoCE socket at `bind` (use port 4791) around `dev`, with the UDP link.
    /// Inside a tokio runtime.
    pub fn bind(dev: Device, bind: SocketAddr, impairment: Impairment) -> std::io::Result<Self> {
        Self::bind_with(dev, bind, impairment, LinkChoice::Udp)
    }

    /// [`Endpoint::bind`] receiving on the link `link` asks for.
    pub fn bind_with(
        dev: Device,
        bind: SocketAddr,
        impairment: Impairment,
        link: LinkChoice,
    ) -> std::io::Result<Self> {
        let sock = RoceSocket::bind_with(bind, link)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot bind UDP {bind}: {e}")))?;
        Ok(Self {
            dev,
            sock,
            epoch: std::time::Instant::now(),
            sys_epoch: SystemTime::now(),
            slot_time: Vec::with_capacity(SEND_BATCH),
            impair: ImpairStage::new(impairment),
            tap: None,
            slots: (0..SEND_BATCH).map(|_| Vec::with_capacity(9216)).collect(),
            slot_meta: Vec::with_capacity(SEND_BATCH),
            busy_poll: Duration::ZERO,
            stats: LoopStats::default(),
            peer_port: ROCEV2_UDP_PORT,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.sock.local_addr()
    }

    /// The link datagrams are received on.
    pub fn link(&self) -> Link {
        self.sock.link()
    }

    /// How this endpoint's datagrams left: through the packet socket or the UDP sockets.
    pub fn sent_counts(&self) -> crate::socket::SentCounts {
        self.sock.sent_counts()
    }

    /// Sends to this UDP port instead of 4791 (two endpoints sharing one address).
    pub fn set_peer_port(&mut self, port: u16) {
        self.peer_port = port;
    }

    /// When idle, spins (as perftest polls its CQ) for up to `spin` after the last datagram
    /// sent or received before sleeping in epoll: the lowest latency without holding a core
    /// that another thread needs for long. The stop signal is polled on every idle turn.
    /// `Duration::ZERO` (the default) never spins.
    pub fn set_busy_poll(&mut self, spin: Duration) {
        self.busy_poll = spin;
    }

    /// Installs a capture tap.
    pub fn set_tap(&mut self, tap: Tap) {
        self.tap = Some(tap);
    }

    /// Takes the capture tap back (to hand to the endpoint that replaces this one).
    pub fn take_tap(&mut self) -> Option<Tap> {
        self.tap.take()
    }

    /// What the impairment stage did.
    pub fn impair_stats(&self) -> ImpairStats {
        self.impair.stats
    }

    /// What the link dropped before the device saw it: datagrams that were not whole RoCEv2
    /// datagrams for this endpoint, and datagrams the kernel dropped because the packet link's
    /// receive ring was full (both 0 on the UDP link; see [`RoceSocket::link_drops`]).
    pub fn link_drops(&self) -> (u64, u64) {
        self.sock.link_drops()
    }

    /// Now, on this endpoint's clock.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    fn to_tokio(&self, t: Instant) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.epoch + Duration::from_nanos(t.as_nanos()))
    }

    /// Runs until `app` is done (when `until_done`), `stop` resolves, or an error. `silence`
    /// bounds how long the loop waits with work pending and nothing received.
    pub async fn run<
        A: Application,
        S: std::future::Future<Output = Result<(), crate::DriverError>>,
    >(
        &mut self,
        app: &mut A,
        until_done: bool,
        stop: S,
        silence: Duration,
    ) -> Result<(), crate::DriverError> {
        tokio::pin!(stop);
        let mut last_rx = self.now();
        let mut last_io = last_rx;
        loop {
            // One clock read per turn: the device's timers run in microseconds, a turn takes
            // a few.
            let now = self.now();
            // One receive batch per turn, then at most one send batch (see [`TX_BURST`]).
            // Progress is what a QP accepted (valid datagrams from its peer): junk from
            // elsewhere is received and dropped, but does not keep a dead run alive.
            let (received, mut accepted) = self.receive(now)?;
            {
                let Self { impair, dev, .. } = self;
                impair.release(now, |meta, d| {
                    accepted |= dev.handle_datagram(now, meta, d).accepted();
                });
            }
            if self.dev.poll_timeout().is_some_and(|t| t <= now) {
                self.dev.handle_timeout(now);
            }
            if let Err(e) = app.poll(&mut self.dev, now) {
                // What the application queued on its way out (a REJ, a DREQ) still leaves.
                let _ = self.transmit(now, 4 * SEND_BATCH).await;
                return Err(e.into());
            }
            if until_done && app.done() {
                // Flush what the last completions caused (ACKs), then stop.
                self.transmit(now, usize::MAX).await?;
                return Ok(());
            }
            let sent = self.transmit(now, TX_BURST).await?;
            if accepted {
                last_rx = now;
            }
            if sent > 0 || received > 0 {
                last_io = now;
                continue;
            }
            // Nothing to do right now: wait for a datagram, a deadline or the stop signal.
            if !app.done() && now.saturating_duration_since(last_rx) > silence {
                return Err(RunError::PeerSilent(silence).into());
            }
            if now.saturating_duration_since(last_io) < self.busy_poll.max(self.sock.idle_spin()) {
                // Spin without yielding to the runtime (whose every turn is an epoll_wait):
                // the stop signal waits for the sleep below, at most `busy_poll` away.
                std::hint::spin_loop();
                continue;
            }
            let deadline = match (self.dev.poll_timeout(), self.impair.next_release()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let cap = tokio::time::Instant::now() + Duration::from_millis(50);
            let wake = deadline.map_or(cap, |t| self.to_tokio(t).min(cap));
            self.stats.wakeups += 1;
            tokio::select! {
                r = self.sock.readable() => r.map_err(RunError::Io)?,
                _ = tokio::time::sleep_until(wake) => {}
                // The stop signal's own reason, as it is.
                r = &mut stop => return r,
            }
        }
    }

    /// Sends up to `max` datagrams the device has ready, in the device's order, in batches of
    /// up to [`SEND_BATCH`]: each run of consecutive datagrams with the same source port,
    /// destination and ECN codepoint is one `sendmmsg`. Returns how many.
    async fn transmit(&mut self, now: Instant, max: usize) -> Result<usize, RunError> {
        let mut n = 0;
        while n < max {
            // Fill the slots.
            self.slot_meta.clear();
            self.slot_time.clear();
            while self.slot_meta.len() < SEND_BATCH.min(max - n) {
                let k = self.slot_meta.len();
                let at = self.now().max(now);
                let Some(t) = self.dev.poll_transmit(at, &mut self.slots[k]) else {
                    break;
                };
                self.slot_time.push(at);
                let dst = SocketAddr::new(t.path.remote, self.peer_port);
                self.slots[k].truncate(t.len);
                self.slot_meta.push((t.path.src_port, dst, t.ecn));
            }
            let filled = self.slot_meta.len();
            if filled == 0 {
                break;
            }
            let mut start = 0;
            while start < filled {
                let key = self.slot_meta[start];
                let run = self.slot_meta[start..filled]
                    .iter()
                    .take_while(|m| **m == key)
                    .count();
                let mut group: [&[u8]; SEND_BATCH] = [&[]; SEND_BATCH];
                for (g, slot) in group.iter_mut().zip(&self.slots[start..start + run]) {
                    *g = slot;
                }
                if let Some(tap) = &mut self.tap {
                    let src = SocketAddr::new(self.sock.local_addr().ip(), key.0);
                    for (data, at) in group[..run].iter().zip(&self.slot_time[start..]) {
                        tap(&TapRecord {
                            time: self.sys_epoch + Duration::from_nanos(at.as_nanos()),
                            direction: Direction::Sent,
                            src,
                            dst: key.1,
                            ecn: key.2,
                            data,
                        });
                    }
                }
                self.sock
                    .send_batch(key.0, key.1, key.2, &group[..run])
                    .await?;
                start += run;
            }
            self.stats.sent += filled as u64;
            n += filled;
        }
        Ok(n)
    }

    /// Reads and processes one batch of what the socket holds. Returns how many datagrams.
    /// Receives one batch; returns how many datagrams came and whether a QP accepted any.
    fn receive(&mut self, now: Instant) -> Result<(usize, bool), RunError> {
        let local = self.sock.local_addr();
        let Self {
            sock,
            impair,
            dev,
            tap,
            ..
        } = self;
        let mut accepted = false;
        let total = sock.try_recv(|meta, data| {
            if let Some(tap) = tap {
                tap(&TapRecord {
                    time: SystemTime::now(),
                    direction: Direction::Received,
                    src: meta.src,
                    dst: SocketAddr::new(meta.dst, local.port()),
                    ecn: meta.ecn,
                    data,
                });
            }
            // Whether a connected QP took it in sequence: then the packet link may send to this peer
            // where the datagram came from on the link.
            let mut connected = false;
            impair.process(now, meta, data, |meta, d| {
                let delivery = dev.handle_datagram(now, meta, d);
                accepted |= delivery.accepted();
                connected |= delivery.connected();
            });
            connected
        })?;
        self.stats.received += total as u64;
        Ok((total, accepted))
    }
}
