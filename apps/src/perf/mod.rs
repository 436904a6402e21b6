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
//!   through the same [`RoceSocket`] path (`sendmmsg` batches, recvmmsg/GRO): a blast counted
//!   at the receiver for bandwidth and packets/s, a ping-pong for latency.
//!
//! Every loop busy-polls (as perftest polls its CQ): each endpoint owns a thread and a core.
//! Both ends set up each run over the TCP control connection of [`super`] (`PerfHello`,
//! `Welcome`, `Ready`, `Done`, `PerfSummary`), so one process or two behave the same.
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant as StdInstant};

use roce_proto::{Ecn, Qpn, RKey, ROCEV2_UDP_PORT};
use serde::{Deserialize, Serialize};

use super::endpoint::{Application, RunError};
use super::impair::Impairment;
use super::socket::{RoceSocket, SEND_BATCH};
use super::{
    accept_control, bind_endpoint, connect_control, connect_qps, qp_infos, runtime, setup,
    start_psns, Block, Control, DriverError, Listener, Msg, QpInfo, RunConfig, PROTOCOL,
};
use crate::device::{CqHandle, Device};
use crate::memory::{Access, MrHandle, SgList};
use crate::path::PathConfig;
use crate::qp::QpCaps;
use crate::time::Instant;
use crate::wr::{RecvRequest, RemoteAddr, WcStatus, WorkRequest, WrOp};

/// Peak bandwidth is the best rate over windows at least this long.
const PEAK_WINDOW: Duration = Duration::from_millis(10);

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
    /// Parses `write`, `read`, `send`, `atomic` or `udp`.
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "write" => Self::Write,
            "read" => Self::Read,
            "send" => Self::Send,
            "atomic" => Self::Atomic,
            "udp" => Self::Udp,
            _ => {
                return Err(format!(
                    "unknown test {s:?}: write, read, send, atomic or udp"
                ))
            }
        })
    }

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
}

/// The measurements the options ask for, one per size, validated.
pub fn specs(o: &PerfOptions) -> Result<Vec<PerfSpec>, String> {
    let duration_ms = match o.duration {
        Some(d) if !(d > 0.0 && d <= 86_400.0) => {
            return Err(format!("--duration must be 0..86400 seconds, not {d}"))
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
        v
    } else {
        vec![o.size.unwrap_or(if o.lat { 8 } else { 65536 })]
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
            };
            s.validate().map(|()| s)
        })
        .collect()
}

impl PerfSpec {
    /// Checks what a user can get wrong (one line each).
    pub fn validate(&self) -> Result<(), String> {
        super::check_mtu(self.mtu)?;
        let max = if self.test == PerfTest::Udp {
            65507
        } else {
            MAX_PERF_SIZE
        };
        if self.size == 0 || self.size > max {
            return Err(format!("-s must be 1..={max} bytes, not {}", self.size));
        }
        if self.test == PerfTest::Udp && self.size < 16 {
            return Err("-s must be at least 16 bytes for udp".into());
        }
        if self.request > 0 {
            if self.test != PerfTest::Udp || self.lat {
                return Err("--request is for the udp bandwidth test only".into());
            }
            if !(16..=65507).contains(&self.request) {
                return Err(format!(
                    "--request must be 16..=65507 bytes, not {}",
                    self.request
                ));
            }
        }
        if self.replies == 0 || self.replies > 4096 {
            return Err(format!("replies must be 1..=4096, not {}", self.replies));
        }
        if self.iters == 0 && self.duration_ms.is_none() {
            return Err("-n must be at least 1".into());
        }
        if self.duration_ms == Some(0) {
            return Err("--duration must be positive".into());
        }
        if self.qps == 0 || self.qps > 1024 {
            return Err(format!("--qps must be 1..=1024, not {}", self.qps));
        }
        if !(1..=128).contains(&self.outs) {
            return Err(format!("--outs must be 1..=128, not {}", self.outs));
        }
        if self.tx_depth == 0 || self.tx_depth > 4096 {
            return Err(format!(
                "--tx-depth must be 1..=4096, not {}",
                self.tx_depth
            ));
        }
        Ok(())
    }

    /// Bytes of payload in one full data datagram of this test.
    fn payload_per_packet(&self) -> u64 {
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

    fn msg_size(&self) -> u64 {
        if self.test == PerfTest::Atomic {
            8
        } else {
            self.size
        }
    }

    fn nqps(&self) -> u32 {
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

impl PerfResult {
    fn empty(spec: &PerfSpec) -> Self {
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
            baseline: None,
            ratio: None,
            request_size: (spec.request > 0).then_some(spec.request),
            replies: (spec.request > 0).then_some(spec.replies),
            exchange_baseline: None,
            exchange_ratio: None,
        }
    }

    fn bw(spec: &PerfSpec, msgs: u64, seconds: f64, peak_msgs_per_s: f64) -> Self {
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

    fn lat(spec: &PerfSpec, samples: &mut [u64]) -> Self {
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

// ------------------------------------------------------------------ the RDMA application

/// One QP of a perf run.
#[derive(Debug, Clone, Copy)]
struct PerfQp {
    qpn: Qpn,
    scq: CqHandle,
    rcq: CqHandle,
    outstanding: u32,
}

/// The perf workload on one end: the client (requester, measuring) or the server (target of
/// WRITE/READ/atomics, receiver of SENDs, the other side of a ping-pong).
#[derive(Debug)]
pub struct PerfApp {
    spec: PerfSpec,
    client: bool,
    qps: Vec<PerfQp>,
    /// Source of WRITE/SEND payload, destination of READ data and atomic results.
    src: MrHandle,
    /// Target of the peer's WRITEs, READs and atomics; landing area of SENDs.
    dst: MrHandle,
    remote: RemoteAddr,
    next_qp: usize,
    posted: u64,
    completed: u64,
    start: Option<StdInstant>,
    last: Option<StdInstant>,
    deadline: Option<StdInstant>,
    // Peak: the best rate over windows of at least 10 ms.
    win_start: Option<StdInstant>,
    win_msgs: u64,
    peak: f64,
    // Latency.
    samples: Vec<u64>,
    waiting: bool,
    arrived: bool,
    t_post: Option<StdInstant>,
    /// Ping-pongs answered (server) or completed (client).
    iter: u64,
    error: Option<String>,
}

fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

impl PerfApp {
    /// The client's (`client = true`) or the server's application over the connected QPs
    /// (`(qpn, send CQ, receive CQ)`), its two regions and the peer's target region. Posts the
    /// receives a SEND test needs.
    pub fn new(
        dev: &mut Device,
        spec: PerfSpec,
        client: bool,
        qps: &[(Qpn, CqHandle, CqHandle)],
        (src, dst): (MrHandle, MrHandle),
        remote: RemoteAddr,
    ) -> Result<Self, String> {
        let mut app = Self {
            spec,
            client,
            qps: qps
                .iter()
                .map(|&(qpn, scq, rcq)| PerfQp {
                    qpn,
                    scq,
                    rcq,
                    outstanding: 0,
                })
                .collect(),
            src,
            dst,
            remote,
            next_qp: 0,
            posted: 0,
            completed: 0,
            start: None,
            last: None,
            deadline: None,
            win_start: None,
            win_msgs: 0,
            peak: 0.0,
            samples: Vec::with_capacity(if spec.lat {
                spec.iters.min(1_000_000) as usize
            } else {
                0
            }),
            waiting: false,
            arrived: false,
            t_post: None,
            iter: 0,
            error: None,
        };
        if spec.test == PerfTest::Send && (!client || spec.lat) {
            let n = recv_depth(&spec);
            for i in 0..app.qps.len() {
                for _ in 0..n {
                    app.post_recv(dev, i)?;
                }
            }
        }
        Ok(app)
    }

    fn post_recv(&mut self, dev: &mut Device, i: usize) -> Result<(), String> {
        let sge = dev
            .mr(self.dst)
            .ok_or("region gone")?
            .sge(0, self.spec.size as u32);
        dev.post_recv(
            self.qps[i].qpn,
            RecvRequest {
                wr_id: 0,
                sgl: SgList::one(sge),
            },
        )
        .map_err(|e| format!("post_recv: {e}"))
    }

    fn post(&mut self, dev: &mut Device, i: usize) -> Result<(), String> {
        let spec = self.spec;
        let size = spec.msg_size() as u32;
        let sge = dev.mr(self.src).ok_or("region gone")?.sge(0, size);
        let op = match spec.test {
            PerfTest::Write => WrOp::Write(self.remote),
            PerfTest::Read => WrOp::Read(self.remote),
            PerfTest::Send => WrOp::Send,
            PerfTest::Atomic => WrOp::FetchAdd {
                remote: self.remote,
                add: 1,
            },
            PerfTest::Udp => return Err("udp is not an RDMA test".into()),
        };
        dev.post_send(
            self.qps[i].qpn,
            WorkRequest::new(self.posted, op, SgList::one(sge)),
        )
        .map_err(|e| format!("post_send: {e}"))?;
        self.qps[i].outstanding += 1;
        self.posted += 1;
        Ok(())
    }

    fn more(&self, now: StdInstant) -> bool {
        match self.deadline {
            Some(d) => now < d,
            None => self.posted < self.spec.iters,
        }
    }

    fn count_completion(&mut self, now: StdInstant) {
        self.completed += 1;
        self.last = Some(now);
        self.win_msgs += 1;
        let ws = *self.win_start.get_or_insert(now);
        let dt = now.duration_since(ws);
        if dt >= PEAK_WINDOW {
            self.peak = self.peak.max(self.win_msgs as f64 / dt.as_secs_f64());
            self.win_start = Some(now);
            self.win_msgs = 0;
        }
    }

    /// Drains every send CQ; counts completions (bandwidth) or notes that the one outstanding
    /// READ/atomic completed (latency).
    fn drain_send(&mut self, dev: &mut Device, now: StdInstant) -> Result<(), String> {
        for i in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[i].scq) {
                if c.status != WcStatus::Success {
                    return Err(format!("completion {:?} on QP {}", c.status, c.qp_num));
                }
                self.qps[i].outstanding = self.qps[i].outstanding.saturating_sub(1);
                if self.spec.lat {
                    if matches!(self.spec.test, PerfTest::Read | PerfTest::Atomic) {
                        self.arrived = true;
                    }
                } else if self.client {
                    self.count_completion(now);
                }
            }
        }
        Ok(())
    }

    /// Drains every receive CQ, reposting a receive per completion. Returns how many.
    fn drain_recv(&mut self, dev: &mut Device) -> Result<u64, String> {
        let mut n = 0;
        for i in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[i].rcq) {
                if c.status != WcStatus::Success {
                    return Err(format!("receive {:?} on QP {}", c.status, c.qp_num));
                }
                self.post_recv(dev, i)?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn last_byte(&self, dev: &Device) -> u8 {
        let end = self.spec.size as usize;
        dev.mr(self.dst)
            .and_then(|m| m.as_slice().get(end.wrapping_sub(1)).copied())
            .unwrap_or(0)
    }

    fn set_src_tag(&self, dev: &mut Device, t: u8) {
        let end = self.spec.size as usize;
        if let Some(b) = dev
            .mr_mut(self.src)
            .and_then(|m| m.as_mut_slice().get_mut(end.wrapping_sub(1)))
        {
            *b = t;
        }
    }

    fn poll_bw(&mut self, dev: &mut Device, now: StdInstant) -> Result<(), String> {
        if !self.client {
            if self.spec.test == PerfTest::Send {
                self.drain_recv(dev)?;
            }
            return self.drain_send(dev, now);
        }
        self.drain_send(dev, now)?;
        let depth = self.spec.tx_depth;
        let n = self.qps.len();
        // Round robin over the QPs, each up to tx_depth outstanding.
        let mut idle = 0;
        while idle < n && self.more(now) {
            let i = self.next_qp;
            self.next_qp = (i + 1) % n;
            if self.qps[i].outstanding < depth {
                self.post(dev, i)?;
                idle = 0;
            } else {
                idle += 1;
            }
        }
        Ok(())
    }

    fn poll_lat(&mut self, dev: &mut Device, now: StdInstant) -> Result<(), String> {
        self.drain_send(dev, now)?;
        let test = self.spec.test;
        if !self.client {
            // Answer each ping: a WRITE seen in the target's last byte, or a SEND received.
            let pings = match test {
                PerfTest::Write => u64::from(self.last_byte(dev) == tag(self.iter)),
                PerfTest::Send => self.drain_recv(dev)?,
                _ => 0,
            };
            for _ in 0..pings {
                if test == PerfTest::Write {
                    self.set_src_tag(dev, tag(self.iter));
                }
                self.post(dev, 0)?;
                self.iter += 1;
            }
            return Ok(());
        }
        if self.waiting {
            match test {
                PerfTest::Write => self.arrived = self.last_byte(dev) == tag(self.iter),
                PerfTest::Send => self.arrived = self.drain_recv(dev)? > 0,
                _ => {}
            }
            if self.arrived {
                let t0 = self.t_post.unwrap_or(now);
                let mut ns = now.duration_since(t0).as_nanos() as u64;
                if matches!(test, PerfTest::Write | PerfTest::Send) {
                    ns /= 2;
                }
                self.samples.push(ns);
                self.completed += 1;
                self.iter += 1;
                self.waiting = false;
                self.arrived = false;
                self.last = Some(now);
            }
        }
        if !self.waiting && self.more(now) {
            if test == PerfTest::Write {
                self.set_src_tag(dev, tag(self.iter));
            }
            self.t_post = Some(StdInstant::now());
            self.post(dev, 0)?;
            self.waiting = true;
        }
        Ok(())
    }

    /// What the client measured.
    pub fn result(&mut self) -> PerfResult {
        if self.spec.lat {
            return PerfResult::lat(&self.spec, &mut self.samples);
        }
        let secs = match (self.start, self.last) {
            (Some(s), Some(l)) => l.duration_since(s).as_secs_f64(),
            _ => 0.0,
        };
        PerfResult::bw(&self.spec, self.completed, secs, self.peak)
    }
}

impl Application for PerfApp {
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), String> {
        let now = StdInstant::now();
        if self.start.is_none() {
            self.start = Some(now);
            self.deadline = self
                .spec
                .duration_ms
                .map(|ms| now + Duration::from_millis(ms));
        }
        let r = if self.spec.lat {
            self.poll_lat(dev, now)
        } else {
            self.poll_bw(dev, now)
        };
        if let Err(e) = &r {
            self.error = Some(e.clone());
        }
        r
    }

    fn done(&self) -> bool {
        self.client
            && self.error.is_none()
            && !self.waiting
            && self.completed == self.posted
            && self.start.is_some_and(|_| !self.more(StdInstant::now()))
    }
}

/// How long an idle endpoint spins before sleeping in epoll. A ping-pong spins through its
/// round trip (sleeping doubled the 8 B WRITE latency: 7.1 us against 3.3 us). A bandwidth run
/// sleeps at once: on this shared 2-core machine a spinning thread holds the core its peer
/// needs, and 64 B READ/WRITE message rates fell 2-5x with even 200 us of spinning.
fn spin(spec: &PerfSpec) -> Duration {
    if spec.lat {
        Duration::from_millis(2)
    } else {
        Duration::ZERO
    }
}

/// Receives a SEND test keeps posted per QP.
fn recv_depth(spec: &PerfSpec) -> u32 {
    if spec.lat {
        16
    } else {
        (spec.tx_depth * 2).clamp(256, 4096)
    }
}

fn perf_caps(spec: &PerfSpec) -> QpCaps {
    QpCaps {
        max_send_wr: spec.tx_depth.max(1024),
        max_recv_wr: recv_depth(spec).max(1024),
        // 1 MiB in flight at MTU 4096: inside the receive socket buffer (rmem_max 4 MiB here),
        // so a descheduled receiver does not overflow it into go-back-N retransmissions
        // (1024 PSNs did: 9-17% of 64 KiB WRITE packets were sent again under load).
        max_unacked_psns: 256,
        ..QpCaps::default()
    }
}

/// QPs (each with its own send and receive CQ) in INIT, and the two regions.
#[allow(clippy::type_complexity)]
fn perf_device(
    spec: &PerfSpec,
) -> Result<(Device, Vec<(Qpn, CqHandle, CqHandle)>, (MrHandle, MrHandle)), DriverError> {
    let mut dev = Device::default();
    let pd = dev.alloc_pd();
    let len = (spec.msg_size() as usize).max(8);
    let src = dev.reg_mr(pd, len, Access::LOCAL_WRITE);
    let dst = dev.reg_mr(
        pd,
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    );
    let qps = super::create_qps(
        &mut dev,
        pd,
        spec.nqps(),
        perf_caps(spec),
        super::ALL_REMOTE,
    )?;
    Ok((dev, qps, (src, dst)))
}

fn block_of(dev: &Device, mr: MrHandle) -> Block {
    dev.mr(mr).map_or(
        Block {
            va: 0,
            rkey: 0,
            len: 0,
        },
        |m| Block {
            va: m.va(),
            rkey: m.rkey().0,
            len: m.len() as u64,
        },
    )
}

fn run_config(spec: &PerfSpec) -> RunConfig {
    RunConfig {
        mtu: spec.mtu,
        max_rd_atomic: spec.outs,
        ..RunConfig::default()
    }
}

/// UDP source port of the baseline's datagrams (fixed, like one QP's).
fn udp_sport() -> u16 {
    PathConfig::udp_sport(0x11, 0x12)
}

// ------------------------------------------------------------------ client

/// Where a perf client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfClient {
    /// The server's control address.
    pub server: SocketAddr,
    /// Local IP to use (default: what the route to the server picks).
    pub bind: Option<IpAddr>,
    /// UDP port of this end's RoCE socket.
    pub roce_port: u16,
}

/// Connects to a perf server and runs every spec in turn (each followed by its UDP baseline
/// when `baseline`), handing each result to `out` as soon as it is measured; `out` returns
/// `false` to stop there (its reader went away).
pub fn run_perf_client(
    client: PerfClient,
    specs: &[PerfSpec],
    baseline: bool,
    mut out: impl FnMut(&PerfResult) -> bool,
) -> Result<(), DriverError> {
    for s in specs {
        s.validate().map_err(DriverError::Config)?;
    }
    runtime()?.block_on(async move {
        let (mut ctl, local_ip) = connect_control(client.server, client.bind).await?;
        let local = SocketAddr::new(local_ip, client.roce_port);
        let peer_ip = client.server.ip();
        for spec in specs {
            let mut r = run_one(&mut ctl, spec, local, peer_ip).await?;
            if baseline && spec.test != PerfTest::Udp {
                let b = run_one(&mut ctl, &spec.baseline(), local, peer_ip).await?;
                r = r.with_baseline(b);
                if let Some(x) = spec.exchange_baseline() {
                    let b = run_one(&mut ctl, &x, local, peer_ip).await?;
                    r = r.with_exchange_baseline(b);
                }
            }
            if !out(&r) {
                break;
            }
        }
        ctl.send(&Msg::Bye).await
    })
}

async fn run_one(
    ctl: &mut Control,
    spec: &PerfSpec,
    local: SocketAddr,
    peer_ip: IpAddr,
) -> Result<PerfResult, DriverError> {
    if spec.test == PerfTest::Udp {
        return udp_client(ctl, spec, local, peer_ip).await;
    }
    let (mut dev, qps, mrs) = perf_device(spec)?;
    let psns = start_psns(spec.size ^ spec.iters, spec.nqps(), 0xc11e);
    ctl.send(&Msg::PerfHello {
        protocol: PROTOCOL,
        spec: *spec,
        roce_port: local.port(),
        qps: qp_infos(&qps, &psns),
        blocks: vec![block_of(&dev, mrs.1)],
    })
    .await?;
    let (peer_qps, blocks, roce_port) = match ctl.recv_timeout(Duration::from_secs(10)).await? {
        Msg::Welcome {
            qps,
            blocks,
            roce_port,
        } => (qps, blocks, roce_port),
        _ => return Err(DriverError::Peer("expected a welcome".into())),
    };
    let (Some(b), true) = (blocks.first(), peer_qps.len() == qps.len()) else {
        return Err(DriverError::Peer(
            "welcome lists the wrong number of QPs".into(),
        ));
    };
    let remote_addr = SocketAddr::new(peer_ip, roce_port);
    let cfg = run_config(spec);
    connect_qps(&mut dev, &qps, &peer_qps, &psns, local, remote_addr, &cfg)?;
    let remote = RemoteAddr {
        va: b.va,
        rkey: RKey(b.rkey),
    };
    let mut app =
        PerfApp::new(&mut dev, *spec, true, &qps, mrs, remote).map_err(DriverError::Setup)?;
    let mut ep = bind_endpoint(dev, local, roce_port, Impairment::default())?;
    ep.set_busy_poll(spin(spec));
    ctl.send(&Msg::Ready).await?;
    let stop = async {
        match ctl.recv().await {
            Err(DriverError::Peer(m)) => Err(format!("the server {m}")),
            Err(e) => Err(e.to_string()),
            Ok(_) => Err("unexpected control message".to_string()),
        }
    };
    let result = ep.run(&mut app, true, stop, cfg.silence).await;
    result?;
    ctl.send(&Msg::Done { ok: true }).await?;
    match ctl.recv_timeout(Duration::from_secs(10)).await? {
        Msg::PerfSummary { .. } => {}
        _ => return Err(DriverError::Peer("expected a summary".into())),
    }
    let mut r = app.result();
    r.retransmitted_packets = ep.dev.stats().retransmitted_packets;
    Ok(r)
}

/// Waits for one datagram (spinning for up to `spin`, then sleeping in epoll, as an
/// [`Endpoint`] does); returns its length.
async fn recv_one(
    sock: &mut RoceSocket,
    spin: Duration,
    silence: Duration,
) -> Result<usize, DriverError> {
    let t0 = StdInstant::now();
    loop {
        let mut len = 0;
        let n = sock
            .try_recv(|_, _, d| len = d.len())
            .map_err(|e| DriverError::Run(RunError::Io(e)))?;
        if n > 0 {
            return Ok(len);
        }
        let idle = t0.elapsed();
        if idle > silence {
            return Err(DriverError::Run(RunError::PeerSilent(silence)));
        }
        if idle < spin {
            std::hint::spin_loop();
        } else {
            let _ = tokio::time::timeout(Duration::from_millis(50), sock.readable()).await;
        }
    }
}

async fn udp_client(
    ctl: &mut Control,
    spec: &PerfSpec,
    local: SocketAddr,
    peer_ip: IpAddr,
) -> Result<PerfResult, DriverError> {
    ctl.send(&Msg::PerfHello {
        protocol: PROTOCOL,
        spec: *spec,
        roce_port: local.port(),
        qps: Vec::new(),
        blocks: Vec::new(),
    })
    .await?;
    let roce_port = match ctl.recv_timeout(Duration::from_secs(10)).await? {
        Msg::Welcome { roce_port, .. } => roce_port,
        _ => return Err(DriverError::Peer("expected a welcome".into())),
    };
    let dst = SocketAddr::new(peer_ip, roce_port);
    let mut sock = RoceSocket::bind(local).map_err(setup("UDP socket"))?;
    ctl.send(&Msg::Ready).await?;
    let io = |e: std::io::Error| DriverError::Run(RunError::Io(e));
    let dgram = vec![0x5au8; spec.size as usize];
    let sport = udp_sport();
    let deadline = spec
        .duration_ms
        .map(|ms| StdInstant::now() + Duration::from_millis(ms));
    let more = |sent: u64| match deadline {
        Some(d) => StdInstant::now() < d,
        None => sent < spec.iters,
    };
    if spec.lat {
        let mut samples = Vec::with_capacity(spec.iters.min(1_000_000) as usize);
        let silence = Duration::from_secs(5);
        while more(samples.len() as u64) {
            let t0 = StdInstant::now();
            sock.send_batch(sport, dst, Ecn::Ect0, &[&dgram])
                .await
                .map_err(io)?;
            recv_one(&mut sock, spin(spec), silence).await?;
            samples.push(t0.elapsed().as_nanos() as u64 / 2);
        }
        ctl.send(&Msg::Done { ok: true }).await?;
        ctl.recv_timeout(Duration::from_secs(10)).await?;
        return Ok(PerfResult::lat(spec, &mut samples));
    }
    if spec.request > 0 {
        let (requests, seconds, peak, lost) = udp_exchange(&mut sock, spec, sport, dst).await?;
        ctl.send(&Msg::Done { ok: true }).await?;
        ctl.recv_timeout(Duration::from_secs(10)).await?;
        let mut r = PerfResult::bw(spec, requests, seconds, peak);
        r.retransmitted_packets = lost;
        return Ok(r);
    }
    let refs: [&[u8]; SEND_BATCH] = [&dgram; SEND_BATCH];
    let mut sent = 0u64;
    while more(sent) {
        let k = match deadline {
            Some(_) => SEND_BATCH,
            None => (spec.iters - sent).min(SEND_BATCH as u64) as usize,
        };
        sock.send_batch(sport, dst, Ecn::Ect0, &refs[..k])
            .await
            .map_err(io)?;
        sent += k as u64;
    }
    ctl.send(&Msg::Done { ok: true }).await?;
    match ctl.recv_timeout(Duration::from_secs(10)).await? {
        Msg::PerfSummary {
            received,
            seconds,
            peak_per_s,
        } => {
            let mut r = PerfResult::bw(spec, received, seconds, peak_per_s);
            r.retransmitted_packets = sent.saturating_sub(received);
            Ok(r)
        }
        _ => Err(DriverError::Peer("expected a summary".into())),
    }
}

/// The client side of a UDP exchange: keeps up to `outs` requests outstanding and counts
/// the replies, receiving as an [`Endpoint`] does (sleeping in epoll when there is nothing to
/// do). A request whose replies do not all come back within 200 ms is given up (counted as
/// lost). Returns the requests answered, the seconds from the first request to the last
/// reply, the peak rate over 10 ms windows and the requests lost.
async fn udp_exchange(
    sock: &mut RoceSocket,
    spec: &PerfSpec,
    sport: u16,
    dst: SocketAddr,
) -> Result<(u64, f64, f64, u64), DriverError> {
    let io = |e: std::io::Error| DriverError::Run(RunError::Io(e));
    let req = vec![0xa5u8; spec.request as usize];
    let refs: [&[u8]; SEND_BATCH] = [&req; SEND_BATCH];
    let per = u64::from(spec.replies.max(1));
    let outs = u64::from(spec.outs.max(1));
    let deadline = spec
        .duration_ms
        .map(|ms| StdInstant::now() + Duration::from_millis(ms));
    let (mut sent, mut replies, mut lost) = (0u64, 0u64, 0u64);
    let t0 = StdInstant::now();
    let (mut last, mut last_progress) = (t0, t0);
    let (mut win_start, mut win_done, mut peak) = (t0, 0u64, 0f64);
    // Requests answered in full or given up.
    let done = |replies: u64, lost: u64| replies / per + lost;
    loop {
        let done_now = done(replies, lost);
        let more = match deadline {
            Some(d) => StdInstant::now() < d,
            None => sent < spec.iters,
        };
        if !more && done_now >= sent {
            break;
        }
        // Saturating: a reply to a request already given up may still arrive.
        let inflight = sent.saturating_sub(done_now);
        let mut k = 0;
        if more && inflight < outs {
            k = (outs - inflight).min(SEND_BATCH as u64);
            if deadline.is_none() {
                k = k.min(spec.iters - sent);
            }
            sock.send_batch(sport, dst, Ecn::Ect0, &refs[..k as usize])
                .await
                .map_err(io)?;
            sent += k;
        }
        let n = sock.try_recv(|_, _, _| {}).map_err(io)? as u64;
        let now = StdInstant::now();
        if n > 0 {
            replies += n;
            last = now;
            last_progress = now;
            let dt = now.duration_since(win_start);
            if dt >= PEAK_WINDOW {
                let d = done(replies, lost);
                peak = peak.max(d.saturating_sub(win_done) as f64 / dt.as_secs_f64());
                win_start = now;
                win_done = d;
            }
            continue;
        }
        if k > 0 {
            continue;
        }
        if now.duration_since(last_progress) > Duration::from_millis(200) {
            // What is still outstanding will not come back.
            lost = sent.saturating_sub(replies / per);
            replies -= replies % per;
            last_progress = now;
            continue;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), sock.readable()).await;
    }
    let seconds = last.duration_since(t0).as_secs_f64();
    Ok((sent.saturating_sub(lost), seconds, peak, lost))
}

// ------------------------------------------------------------------ server

impl Listener {
    /// Accepts one perf client and serves every run it asks for until it says goodbye.
    /// Blocking. Returns the number of runs served.
    pub fn serve_perf(self) -> Result<u64, DriverError> {
        let rt = runtime()?;
        rt.block_on(async move {
            let (mut ctl, local_ip, peer) =
                accept_control(self.listener, self.cfg.accept_timeout).await?;
            let local = SocketAddr::new(local_ip, self.cfg.roce_port);
            let mut runs = 0;
            loop {
                let r = match ctl.recv().await {
                    Ok(Msg::Bye) => return Ok(runs),
                    Ok(Msg::PerfHello {
                        protocol,
                        spec,
                        roce_port,
                        qps,
                        blocks,
                    }) => {
                        serve_one(
                            &mut ctl,
                            protocol,
                            &spec,
                            local,
                            SocketAddr::new(peer.ip(), roce_port),
                            &qps,
                            &blocks,
                        )
                        .await
                    }
                    Ok(_) => Err(DriverError::Peer("expected a perf hello".into())),
                    Err(e) => Err(e),
                };
                if let Err(e) = r {
                    let _ = ctl.send(&Msg::Error(e.to_string())).await;
                    return Err(e);
                }
                runs += 1;
            }
        })
    }
}

async fn serve_one(
    ctl: &mut Control,
    protocol: u32,
    spec: &PerfSpec,
    local: SocketAddr,
    remote: SocketAddr,
    peer_qps: &[QpInfo],
    blocks: &[Block],
) -> Result<(), DriverError> {
    super::check_protocol("control", protocol, PROTOCOL)?;
    spec.validate().map_err(DriverError::Peer)?;
    if spec.test == PerfTest::Udp {
        return udp_server(ctl, spec, local, remote).await;
    }
    if peer_qps.len() != spec.nqps() as usize || blocks.len() != 1 {
        return Err(DriverError::Peer("QP count differs from the spec".into()));
    }
    let (mut dev, qps, mrs) = perf_device(spec)?;
    let psns = start_psns(spec.size ^ spec.iters, spec.nqps(), 0x5e7e);
    let cfg = run_config(spec);
    connect_qps(&mut dev, &qps, peer_qps, &psns, local, remote, &cfg)?;
    let remote_block = RemoteAddr {
        va: blocks[0].va,
        rkey: RKey(blocks[0].rkey),
    };
    let mut app = PerfApp::new(&mut dev, *spec, false, &qps, mrs, remote_block)
        .map_err(DriverError::Setup)?;
    let mut ep = bind_endpoint(dev, local, remote.port(), Impairment::default())?;
    ep.set_busy_poll(spin(spec));
    let dst_block = block_of(&ep.dev, mrs.1);
    ctl.send(&Msg::Welcome {
        qps: qp_infos(&qps, &psns),
        blocks: vec![dst_block],
        roce_port: local.port(),
    })
    .await?;
    ctl.expect_ready().await?;
    let stop = ctl.client_done();
    ep.run(&mut app, false, stop, Duration::from_secs(30))
        .await?;
    ctl.send(&Msg::PerfSummary {
        received: ep.stats.received,
        seconds: 0.0,
        peak_per_s: 0.0,
    })
    .await
}

async fn udp_server(
    ctl: &mut Control,
    spec: &PerfSpec,
    local: SocketAddr,
    remote: SocketAddr,
) -> Result<(), DriverError> {
    let mut sock = RoceSocket::bind(local).map_err(setup("UDP socket"))?;
    ctl.send(&Msg::Welcome {
        qps: Vec::new(),
        blocks: Vec::new(),
        roce_port: local.port(),
    })
    .await?;
    ctl.expect_ready().await?;
    let io = |e: std::io::Error| DriverError::Run(RunError::Io(e));
    let sport = udp_sport();
    let mut received = 0u64;
    let mut first: Option<StdInstant> = None;
    let mut last = StdInstant::now();
    let (mut win_start, mut win_n, mut peak) = (None::<StdInstant>, 0u64, 0f64);
    let mut pong = vec![0u8; spec.size as usize];
    let reply = vec![0x5au8; spec.size as usize];
    let replies: [&[u8]; SEND_BATCH] = [&reply; SEND_BATCH];
    {
        let stop = async {
            match ctl.recv().await {
                Ok(Msg::Done { .. }) => Ok(()),
                Ok(_) => Err(DriverError::Peer("unexpected control message".into())),
                Err(e) => Err(e),
            }
        };
        tokio::pin!(stop);
        let mut stopping = false;
        let mut last_io = StdInstant::now();
        loop {
            let mut got = 0usize;
            let n = sock
                .try_recv(|_, _, d| {
                    if spec.lat && got == 0 {
                        let k = d.len().min(pong.len());
                        pong[..k].copy_from_slice(&d[..k]);
                    }
                    got += 1;
                })
                .map_err(io)?;
            if n > 0 {
                let now = StdInstant::now();
                last_io = now;
                first.get_or_insert(now);
                last = now;
                received += n as u64;
                if spec.lat {
                    sock.send_batch(sport, remote, Ecn::Ect0, &[&pong])
                        .await
                        .map_err(io)?;
                } else if spec.request > 0 {
                    // An exchange: answer every request.
                    let mut due = n as u64 * u64::from(spec.replies);
                    while due > 0 {
                        let k = due.min(SEND_BATCH as u64) as usize;
                        sock.send_batch(sport, remote, Ecn::Ect0, &replies[..k])
                            .await
                            .map_err(io)?;
                        due -= k as u64;
                    }
                } else {
                    win_n += n as u64;
                    let ws = *win_start.get_or_insert(now);
                    let dt = now.duration_since(ws);
                    if dt >= PEAK_WINDOW {
                        peak = peak.max(win_n as f64 / dt.as_secs_f64());
                        win_start = Some(now);
                        win_n = 0;
                    }
                }
                continue;
            }
            if stopping {
                break;
            }
            tokio::select! {
                biased;
                r = &mut stop => {
                    r?;
                    // Drain what is still queued, then report.
                    stopping = true;
                }
                _ = tokio::task::yield_now(), if last_io.elapsed() < spin(spec) => {}
                r = sock.readable(), if last_io.elapsed() >= spin(spec) => { r.map_err(io)?; }
            }
        }
    }
    let seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    ctl.send(&Msg::PerfSummary {
        received,
        seconds,
        peak_per_s: peak,
    })
    .await
}

// ------------------------------------------------------------------ one process

/// Both ends in one process: a server thread (with its own runtime) and the client on the
/// calling thread, over `client_ip`/`server_ip` with UDP port 4791 on each (IPv6 ::1: the
/// client uses 4792).
pub fn run_perf_loopback(
    client_ip: IpAddr,
    server_ip: IpAddr,
    specs: &[PerfSpec],
    baseline: bool,
    out: impl FnMut(&PerfResult) -> bool,
) -> Result<(), DriverError> {
    for s in specs {
        s.validate().map_err(DriverError::Config)?;
    }
    super::in_one_process(
        "roce-perf-server",
        (server_ip, ROCEV2_UDP_PORT),
        Listener::serve_perf,
        |control| {
            run_perf_client(
                PerfClient {
                    server: control,
                    bind: Some(client_ip),
                    roce_port: super::client_roce_port(client_ip, server_ip),
                },
                specs,
                baseline,
                out,
            )
        },
    )
}
