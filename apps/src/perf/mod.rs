//! `roce perf`: perftest-style measurements (`ib_write_bw`, `ib_write_lat`, `ib_read_bw`,
//! `ib_send_lat`, `ib_atomic_bw`…) over the driver, and the plain-UDP baseline they are compared
//! with.
//!
//! * Bandwidth (`bw`): the client keeps `tx_depth` work requests outstanding on every QP and
//!   counts completions; the average is bytes of completed messages over the time from the
//!   first post to the last completion, the peak the best rate over windows of at least 10 ms.
//! * Latency (`lat`): one message in flight. WRITE and SEND are a ping-pong, as perftest's
//!   `ib_write_lat`/`ib_send_lat` (the server answers each message; a WRITE is seen by polling
//!   the last byte of the target buffer, a SEND by its receive completion) and report half the
//!   round trip; READ and atomics report the time to the completion.
//! * The baseline (`udp`): plain UDP datagrams of the wire size of the RoCE data datagrams,
//!   through the same `RoceSocket` path (`sendmmsg` batches, recvmmsg/GRO): a blast counted
//!   at the receiver for bandwidth and packets/s, a ping-pong for latency.
//!
//! Every loop busy-polls (as perftest polls its CQ): each endpoint owns a thread and a core.
//! Both ends set up each run over the control channel (this application's [`mod@run`] messages:
//! `hello`, `welcome`, `summary`, `bye`), so one process or two behave the same.
//!
//! * this module: what to measure ([`PerfSpec`]) and what was measured ([`PerfResult`]);
//! * [`app`]: the RDMA application on each end; [`udp`]: the plain-UDP baselines;
//! * [`mod@run`]: the runs over sockets (client, server, one process); [`run()`] is the one
//!   entry, the connector's end(s) over roce's control channel, RDMA-CM or perftest's exchange.
use std::time::Duration;

use roce_stack::Service;
use serde::{Deserialize, Serialize};

use crate::{Combination, ConfigError, Setting};

pub mod app;
pub mod cm;
mod ends;
mod msg;
pub mod perftest;
pub mod run;
pub mod udp;

pub use app::PerfApp;
pub use ends::{run, PerfRun, Served};

/// Peak bandwidth is the best rate over windows at least this long.
pub(crate) const PEAK_WINDOW: Duration = Duration::from_millis(10);

/// READs/atomics outstanding per QP by default: as perftest, the device's limit
/// (`max_rd_atomic`, 128 here, where a NIC has 16). Over sockets a READ waits a full round
/// trip through two event loops: 16 in flight held 64 B READs to half of WRITE's message rate
/// (0.21 against 0.45 M/s), 64 to 0.78 of it, 128 to 0.80.
pub const DEFAULT_OUTS: u8 = 128;

/// Largest message size (`-a` sweeps up to it).
pub const MAX_PERF_SIZE: u64 = 8 << 20;

/// The operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerfTest {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND (the server keeps receives posted).
    Send,
    /// 8-byte FETCH_ADD.
    Atomic,
    /// Plain UDP datagrams (the baseline).
    Udp,
}

impl PerfTest {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Write => "write",
            Self::Read => "read",
            Self::Send => "send",
            Self::Atomic => "atomic",
            Self::Udp => "udp",
        }
    }
}

/// One measurement: what to run at which size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerfSpec {
    /// The operation.
    pub test: PerfTest,
    /// Latency (ping-pong) instead of bandwidth.
    pub lat: bool,
    /// Message size in bytes (UDP: datagram size; atomic: 8).
    pub size: u64,
    /// Messages in total (bandwidth: over every QP); with `duration_ms` an upper bound.
    pub iters: u64,
    /// Run for this long instead of `iters` messages.
    pub duration_ms: Option<u64>,
    /// Queue pairs (bandwidth only; latency uses one).
    pub qps: u32,
    /// Path MTU.
    pub mtu: u32,
    /// Work requests outstanding per QP (bandwidth).
    pub tx_depth: u32,
    /// READs/atomics outstanding per QP (perftest's `-o`), 1..=128; for a UDP exchange,
    /// requests outstanding.
    pub outs: u8,
    /// UDP only: the request size of a request/response exchange (the shape of a READ or an
    /// atomic: requests of this many bytes, each answered by `replies` datagrams of `size`
    /// bytes, at most `outs` outstanding). 0: a blast (bandwidth) or a ping-pong (latency).
    #[serde(default)]
    pub request: u64,
    /// UDP exchange: datagrams answering each request.
    #[serde(default = "one")]
    pub replies: u32,
    /// The QPs' service (perftest's `-c`): RC; UC, SEND and WRITE only, nothing acknowledged
    /// or retransmitted; UD, SEND only, one MTU per message, what the peer missed is lost.
    #[serde(default)]
    pub service: Service,
}

fn one() -> u32 {
    1
}

impl Default for PerfSpec {
    fn default() -> Self {
        Self {
            test: PerfTest::Write,
            lat: false,
            size: 65536,
            iters: 5000,
            duration_ms: None,
            qps: 1,
            mtu: 4096,
            tx_depth: 128,
            outs: DEFAULT_OUTS,
            request: 0,
            replies: 1,
            service: Service::Rc,
        }
    }
}

/// The sizes `-a` sweeps: 2 B .. 8 MiB, powers of two.
pub fn sweep_sizes() -> Vec<u64> {
    (1..=23).map(|k| 1u64 << k).collect()
}

/// The command line's choices, before defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfOptions {
    /// The operation.
    pub test: PerfTest,
    /// Latency instead of bandwidth.
    pub lat: bool,
    /// `-s` (default 65536 for bandwidth, 8 for latency; atomic: 8).
    pub size: Option<u64>,
    /// `-a`: every power of two from 2 B to 8 MiB.
    pub sweep: bool,
    /// `-n` (default 5000 for bandwidth, 1000 for latency; with `-a`, and without `-n`, each
    /// size is capped at 256 MiB of traffic).
    pub iters: Option<u64>,
    /// `--duration` in seconds.
    pub duration: Option<f64>,
    /// `--qps`.
    pub qps: u32,
    /// `--mtu`.
    pub mtu: u32,
    /// `--tx-depth`.
    pub tx_depth: u32,
    /// `--outs` (default [`DEFAULT_OUTS`]).
    pub outs: Option<u8>,
    /// `--request` (udp only): run a request/response exchange with requests of this size.
    pub request: Option<u64>,
    /// `-c`: the QPs' service (UD: sizes up to the MTU; `-a` stops at the MTU).
    pub service: Service,
}

/// The measurements the options ask for, one per size, validated.
pub fn specs(o: &PerfOptions) -> Result<Vec<PerfSpec>, ConfigError> {
    let duration_ms = match o.duration {
        Some(d) if !(d > 0.0 && d <= 86_400.0) => {
            return Err(ConfigError::OutOfRange {
                setting: Setting::Duration,
                range: "more than 0 and at most 86400 seconds",
                value: d as u64,
            })
        }
        Some(d) => Some(((d * 1e3).round() as u64).max(1)),
        None => None,
    };
    let sizes = if o.test == PerfTest::Atomic {
        vec![8]
    } else if o.sweep {
        let mut v = sweep_sizes();
        if o.test == PerfTest::Udp {
            v.retain(|&s| (16..=65507).contains(&s));
        }
        if o.service == Service::Ud {
            v.retain(|&s| s <= u64::from(o.mtu));
        }
        v
    } else {
        // A UDP datagram carries at most 65507 bytes, and the baseline needs 16.
        let default = match (o.test, o.lat) {
            (PerfTest::Udp, true) => 16,
            (PerfTest::Udp, false) => 65507,
            (_, true) => 8,
            (_, false) if o.service == Service::Ud => u64::from(o.mtu),
            (_, false) => 65536,
        };
        vec![o.size.unwrap_or(default)]
    };
    let default_iters = if o.lat { 1000 } else { 5000 };
    sizes
        .into_iter()
        .map(|size| {
            let iters = match (o.iters, duration_ms) {
                (Some(n), _) => n,
                (None, Some(_)) => u64::MAX,
                (None, None) if o.sweep => default_iters.min(((256u64 << 20) / size).max(100)),
                (None, None) => default_iters,
            };
            let s = PerfSpec {
                test: o.test,
                lat: o.lat,
                size,
                iters,
                duration_ms,
                qps: o.qps,
                mtu: o.mtu,
                tx_depth: o.tx_depth,
                outs: o.outs.unwrap_or(DEFAULT_OUTS),
                request: o.request.unwrap_or(0),
                replies: 1,
                service: o.service,
            };
            s.validate().map(|()| s)
        })
        .collect()
}

impl PerfSpec {
    /// Checks what a user (or a peer) can get wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        use ConfigError as E;
        E::check_mtu(self.mtu)?;
        if self.test == PerfTest::Udp {
            E::check_range(
                Setting::Size,
                "16..=65507 bytes for udp",
                self.size,
                16,
                65507,
            )?;
        } else {
            E::check_range(
                Setting::Size,
                "1..=8388608 bytes",
                self.size,
                1,
                MAX_PERF_SIZE,
            )?;
        }
        if self.request > 0 {
            if self.test != PerfTest::Udp || self.lat {
                return Err(Combination::RequestNotUdp.into());
            }
            E::check_range(
                Setting::Request,
                "16..=65507 bytes",
                self.request,
                16,
                65507,
            )?;
        }
        E::check_range(
            Setting::Replies,
            "1..=4096",
            u64::from(self.replies),
            1,
            4096,
        )?;
        if self.iters == 0 && self.duration_ms.is_none() {
            return Err(E::OutOfRange {
                setting: Setting::Iterations,
                range: "at least 1",
                value: 0,
            });
        }
        if self.duration_ms == Some(0) {
            return Err(Combination::NoDuration.into());
        }
        E::check_range(Setting::Qps, "1..=1024", u64::from(self.qps), 1, 1024)?;
        E::check_range(Setting::Outs, "1..=128", u64::from(self.outs), 1, 128)?;
        E::check_range(
            Setting::TxDepth,
            "1..=4096",
            u64::from(self.tx_depth),
            1,
            4096,
        )?;
        if self.service == Service::Uc && !matches!(self.test, PerfTest::Send | PerfTest::Write) {
            return Err(Combination::UcTest.into());
        }
        if self.service == Service::Ud {
            if self.test != PerfTest::Send {
                return Err(Combination::UdTest.into());
            }
            if self.size > u64::from(self.mtu) {
                return Err(E::OutOfRange {
                    setting: Setting::Size,
                    range: "at most the MTU over UD (one packet per message)",
                    value: self.size,
                });
            }
        }
        Ok(())
    }

    /// Bytes of payload in one full data datagram of this test.
    pub(crate) fn payload_per_packet(&self) -> u64 {
        match self.test {
            PerfTest::Atomic => 8,
            _ => self.size.min(u64::from(self.mtu)),
        }
    }

    /// Data datagrams per message.
    pub fn packets_per_message(&self) -> u64 {
        match self.test {
            PerfTest::Atomic | PerfTest::Udp => 1,
            _ => self.size.div_ceil(u64::from(self.mtu)).max(1),
        }
    }

    /// The UDP payload size of this test's (fullest) data datagram: BTH 12 + extension headers
    /// + payload + ICRC 4.
    pub fn wire_datagram(&self) -> u64 {
        let single = self.size <= u64::from(self.mtu);
        let ext = match self.test {
            PerfTest::Write if single => 16,        // RETH
            PerfTest::Read if single => 4,          // AETH of a READ response only
            PerfTest::Atomic => return 12 + 28 + 4, // AtomicETH, no payload
            PerfTest::Udp => return self.size,
            _ => 0,
        };
        12 + ext + self.payload_per_packet() + 4
    }

    /// The baseline of this measurement: UDP datagrams of the same wire size, as many as the
    /// test sends data datagrams (bandwidth) or the same number of ping-pongs (latency).
    pub fn baseline(&self) -> Self {
        let iters = if self.lat {
            self.iters
        } else {
            self.iters.saturating_mul(self.packets_per_message())
        };
        Self {
            test: PerfTest::Udp,
            size: self.wire_datagram(),
            iters,
            qps: 1,
            ..*self
        }
    }

    /// The second baseline of a READ or atomic bandwidth test: plain UDP in the same shape, a
    /// request (a READ request: BTH + RETH + ICRC; an atomic: BTH + AtomicETH + ICRC) answered
    /// by as many datagrams as the responses (each of the data datagram's size; an atomic ACK:
    /// BTH + AETH + AtomicAckETH + ICRC), with as many requests outstanding. The blast
    /// ([`PerfSpec::baseline`]) moves each datagram one way once; this one pays for the
    /// exchange both ways, as the RDMA operation does. `None` for other tests.
    pub fn exchange_baseline(&self) -> Option<Self> {
        if self.lat {
            return None;
        }
        let (request, size, replies) = match self.test {
            PerfTest::Read => (
                12 + 16 + 4,
                self.wire_datagram(),
                self.packets_per_message(),
            ),
            PerfTest::Atomic => (12 + 28 + 4, 12 + 4 + 8 + 4, 1),
            _ => return None,
        };
        Some(Self {
            test: PerfTest::Udp,
            size,
            request,
            replies: u32::try_from(replies).unwrap_or(u32::MAX).min(4096),
            qps: 1,
            ..*self
        })
    }

    pub(crate) fn msg_size(&self) -> u64 {
        if self.test == PerfTest::Atomic {
            8
        } else {
            self.size
        }
    }

    pub(crate) fn nqps(&self) -> u32 {
        if self.lat {
            1
        } else {
            self.qps
        }
    }
}

/// Ratios of a result to its baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PerfRatio {
    /// Average bandwidth, roce / UDP (bandwidth tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bw_avg_gbps: Option<f64>,
    /// Message rate over UDP packet rate (bandwidth tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg_rate_mpps: Option<f64>,
    /// Typical latency, roce / UDP half round trip (latency tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_typical_us: Option<f64>,
}

/// One line of results (the JSON object of `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerfResult {
    /// `write`, `read`, `send`, `atomic` or `udp`.
    pub test: &'static str,
    /// `bw` or `lat`.
    pub mode: &'static str,
    /// Message (UDP: datagram) size in bytes.
    pub size: u64,
    /// Messages measured (UDP bandwidth: datagrams received).
    pub iterations: u64,
    /// Peak bandwidth, Gb/s (best window of at least 10 ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bw_peak_gbps: Option<f64>,
    /// Average bandwidth (goodput), Gb/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bw_avg_gbps: Option<f64>,
    /// Messages (UDP: datagrams) per second, millions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg_rate_mpps: Option<f64>,
    /// Fastest sample, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_min_us: Option<f64>,
    /// Slowest sample, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_max_us: Option<f64>,
    /// Median, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_typical_us: Option<f64>,
    /// Mean, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_avg_us: Option<f64>,
    /// Standard deviation, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_stdev_us: Option<f64>,
    /// 99th percentile, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_p99_us: Option<f64>,
    /// 99.9th percentile, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_p999_us: Option<f64>,
    /// Request packets sent again (RoCE tests; lost UDP datagrams for the baseline blast).
    pub retransmitted_packets: u64,
    /// How the client received (`"udp"` or `"packet"`; RoCE tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<&'static str>,
    /// How the client's datagrams left: through the packet link's packet socket (to the next
    /// hop the kernel's tables name, once a datagram was taken in sequence) or the UDP
    /// sockets (RoCE tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<roce_driver::socket::SentCounts>,
    /// Datagrams the server received from anyone but the client and ignored (UDP
    /// baselines): someone else is sending to its port.
    #[serde(skip_serializing_if = "is_zero")]
    pub foreign_datagrams: u64,
    /// The UDP baseline of the same wire size (with `--baseline`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Box<Self>>,
    /// This result over the baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<PerfRatio>,
    /// A UDP exchange: the request size (each answered by `replies` datagrams of `size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_size: Option<u64>,
    /// A UDP exchange: datagrams answering each request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replies: Option<u32>,
    /// READ and atomic bandwidth with `--baseline`: the plain-UDP request/response exchange
    /// of the same shape ([`PerfSpec::exchange_baseline`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange_baseline: Option<Box<Self>>,
    /// This result over the exchange baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange_ratio: Option<PerfRatio>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl PerfResult {
    pub(crate) fn empty(spec: &PerfSpec) -> Self {
        Self {
            test: spec.test.name(),
            mode: if spec.lat { "lat" } else { "bw" },
            size: spec.msg_size(),
            iterations: 0,
            bw_peak_gbps: None,
            bw_avg_gbps: None,
            msg_rate_mpps: None,
            t_min_us: None,
            t_max_us: None,
            t_typical_us: None,
            t_avg_us: None,
            t_stdev_us: None,
            t_p99_us: None,
            t_p999_us: None,
            retransmitted_packets: 0,
            foreign_datagrams: 0,
            link: None,
            sent: None,
            baseline: None,
            ratio: None,
            request_size: (spec.request > 0).then_some(spec.request),
            replies: (spec.request > 0).then_some(spec.replies),
            exchange_baseline: None,
            exchange_ratio: None,
        }
    }

    pub(crate) fn bw(spec: &PerfSpec, msgs: u64, seconds: f64, peak_msgs_per_s: f64) -> Self {
        let s = seconds.max(1e-9);
        // A UDP exchange's message is a request; its bytes are the replies.
        let size = (spec.msg_size() * u64::from(spec.replies)) as f64;
        let avg = msgs as f64 / s;
        Self {
            iterations: msgs,
            bw_peak_gbps: Some(peak_msgs_per_s.max(avg) * size * 8.0 / 1e9),
            bw_avg_gbps: Some(avg * size * 8.0 / 1e9),
            msg_rate_mpps: Some(avg / 1e6),
            ..Self::empty(spec)
        }
    }

    pub(crate) fn lat(spec: &PerfSpec, samples: &mut [u64]) -> Self {
        samples.sort_unstable();
        let n = samples.len();
        if n == 0 {
            return Self::empty(spec);
        }
        let us = |ns: u64| ns as f64 / 1e3;
        let pct = |p: f64| us(samples[((n as f64 * p).ceil() as usize).clamp(1, n) - 1]);
        let avg = samples.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = samples
            .iter()
            .map(|&x| (x as f64 - avg).powi(2))
            .sum::<f64>()
            / n as f64;
        Self {
            iterations: n as u64,
            t_min_us: Some(us(samples[0])),
            t_max_us: Some(us(samples[n - 1])),
            t_typical_us: Some(us(samples[n / 2])),
            t_avg_us: Some(avg / 1e3),
            t_stdev_us: Some(var.sqrt() / 1e3),
            t_p99_us: Some(pct(0.99)),
            t_p999_us: Some(pct(0.999)),
            ..Self::empty(spec)
        }
    }

    fn ratio_to(&self, b: &Self) -> PerfRatio {
        let r = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        };
        PerfRatio {
            bw_avg_gbps: r(self.bw_avg_gbps, b.bw_avg_gbps),
            msg_rate_mpps: r(self.msg_rate_mpps, b.msg_rate_mpps),
            t_typical_us: r(self.t_typical_us, b.t_typical_us),
        }
    }

    /// Attaches the baseline and computes the ratios.
    pub fn with_baseline(mut self, b: Self) -> Self {
        self.ratio = Some(self.ratio_to(&b));
        self.baseline = Some(Box::new(b));
        self
    }

    /// Attaches the exchange baseline and computes the ratios.
    pub fn with_exchange_baseline(mut self, b: Self) -> Self {
        self.exchange_ratio = Some(self.ratio_to(&b));
        self.exchange_baseline = Some(Box::new(b));
        self
    }

    /// perftest's column header for `lat` or `bw` results.
    pub fn header(lat: bool) -> &'static str {
        if lat {
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        } else {
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        }
    }

    /// The header and row as stock perftest prints a bandwidth test: MB/sec (2^20 bytes/s),
    /// or Gb/sec with `--report_gbits` (`gbits`).
    pub fn perftest_report(&self, gbits: bool) -> String {
        if self.mode == "lat" {
            return format!("{}\n{}", Self::header(true), self.row());
        }
        let (unit, k) = if gbits {
            ("Gb/sec", 1.0)
        } else {
            ("MB/sec", perftest::MB_PER_GBIT)
        };
        let f = |x: Option<f64>| x.unwrap_or(0.0) * k;
        format!(
            " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]\n {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
            self.size,
            self.iterations,
            f(self.bw_peak_gbps),
            f(self.bw_avg_gbps),
            self.msg_rate_mpps.unwrap_or(0.0)
        )
    }

    fn row(&self) -> String {
        let f = |x: Option<f64>| x.unwrap_or(0.0);
        if self.mode == "lat" {
            format!(
                " {:<7} {:<11} {:<14.2} {:<14.2} {:<16.2} {:<14.2} {:<16.2} {:<22.2} {:<22.2}",
                self.size,
                self.iterations,
                f(self.t_min_us),
                f(self.t_max_us),
                f(self.t_typical_us),
                f(self.t_avg_us),
                f(self.t_stdev_us),
                f(self.t_p99_us),
                f(self.t_p999_us)
            )
        } else {
            format!(
                " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
                self.size,
                self.iterations,
                f(self.bw_peak_gbps),
                f(self.bw_avg_gbps),
                f(self.msg_rate_mpps)
            )
        }
    }
}

/// The row(s) in perftest's column shape; with a baseline, its row follows (`udp` and the
/// datagram size) with the ratio.
impl std::fmt::Display for PerfResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.row())?;
        if let (Some(b), Some(r)) = (&self.baseline, &self.ratio) {
            let ratio = match (r.bw_avg_gbps, r.msg_rate_mpps, r.t_typical_us) {
                (Some(bw), Some(mr), _) => {
                    format!("bw {bw:.3}, msg rate / UDP packet rate {mr:.3}")
                }
                (_, _, Some(t)) => format!("t_typical {t:.3}"),
                _ => "-".into(),
            };
            write!(f, "\n{}   <- udp baseline, ratio {ratio}", b.row())?;
        }
        if let (Some(b), Some(r)) = (&self.exchange_baseline, &self.exchange_ratio) {
            write!(
                f,
                "\n{}   <- udp exchange ({} B requests, {} x {} B replies), ratio msg rate {:.3}",
                b.row(),
                b.request_size.unwrap_or(0),
                b.replies.unwrap_or(1),
                b.size,
                r.msg_rate_mpps.unwrap_or(0.0)
            )?;
        }
        Ok(())
    }
}
