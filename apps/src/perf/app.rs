//! The RDMA side of a perf run on one end: the client (requester, measuring) or the server
//! (target of WRITE/READ/atomics, receiver of SENDs, the other side of a ping-pong).
use std::time::{Duration, Instant as StdInstant};

use roce_driver::connect::qps::LocalQp;
use roce_driver::{AppError, Application};
use roce_proto::Qpn;
use roce_stack::{
    CqHandle, Device, Instant, MrHandle, QpCaps, RecvRequest, RemoteAddr, Service, SgList,
    WcStatus, WorkRequest, WrOp,
};

use super::{PerfResult, PerfSpec, PerfTest, PEAK_WINDOW};

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
    /// `-c UD`: each QP's peer.
    ud: Vec<roce_stack::ud::AddressHandle>,
    /// UD: datagrams received from anyone but the peer's QP (dropped, their receive posted
    /// again).
    foreign: u64,
    /// WRITE ping-pong: the answering side measures too, and ends after its `iters`
    /// answers (perftest's `ib_write_lat`, where both sides print).
    answer_measures: bool,
    /// Bytes of each receive posted (a sweep's largest size).
    recv_len: u32,
}

/// The mark the `i`-th (from 0) WRITE of a latency ping-pong leaves in the target's last
/// byte: the iteration count from 1, mod 256, as perftest's `ib_write_lat` writes it (the
/// target starts zeroed, so 0 after 255 still changes the byte).
fn tag(i: u64) -> u8 {
    ((i + 1) % 256) as u8
}

impl PerfApp {
    /// The client's (`client = true`) or the server's application over the connected QPs,
    /// its two regions and the peer's target region. Posts the receives a SEND test needs.
    pub fn new(
        dev: &mut Device,
        spec: PerfSpec,
        client: bool,
        qps: &[LocalQp],
        regions: (MrHandle, MrHandle),
        remote: RemoteAddr,
    ) -> Result<Self, AppError> {
        Self::with_recv_len(dev, spec, client, qps, regions, remote, spec.size as u32)
    }

    /// [`PerfApp::new`] with receives of `recv_len` bytes (at least the size): the first size
    /// of a sweep posts receives for its largest, which later sizes take over
    /// ([`PerfApp::next_size`]).
    pub fn with_recv_len(
        dev: &mut Device,
        spec: PerfSpec,
        client: bool,
        qps: &[LocalQp],
        (src, dst): (MrHandle, MrHandle),
        remote: RemoteAddr,
        recv_len: u32,
    ) -> Result<Self, AppError> {
        let mut app = Self::fresh(spec, client, qps, (src, dst), remote);
        app.recv_len = recv_len.max(spec.size as u32);
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

    /// The next size of a sweep on the same QPs, regions and peers: measurements start over,
    /// the receives this one left posted stay (each reposted as it completes, so their number
    /// does not grow from size to size).
    pub fn next_size(&self, spec: PerfSpec) -> Self {
        let mut next = Self::fresh(spec, self.client, &[], (self.src, self.dst), self.remote);
        next.qps = self
            .qps
            .iter()
            .map(|q| PerfQp {
                outstanding: 0,
                ..*q
            })
            .collect();
        next.recv_len = self.recv_len.max(spec.size as u32);
        next.ud = self.ud.clone();
        next.answer_measures = self.answer_measures;
        next
    }

    fn fresh(
        spec: PerfSpec,
        client: bool,
        qps: &[LocalQp],
        (src, dst): (MrHandle, MrHandle),
        remote: RemoteAddr,
    ) -> Self {
        Self {
            spec,
            client,
            qps: qps
                .iter()
                .map(|q| PerfQp {
                    qpn: q.qpn,
                    scq: q.send_cq,
                    rcq: q.recv_cq,
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
            ud: Vec::new(),
            foreign: 0,
            answer_measures: false,
            recv_len: spec.size as u32,
        }
    }

    /// UD: where each QP sends (the peer's QP of the same index). Must be set before the first
    /// poll of a `-c UD` test.
    pub fn set_ud_peers(&mut self, ahs: Vec<roce_stack::ud::AddressHandle>) {
        self.ud = ahs;
    }

    /// Ping-pong (WRITE or SEND): the answering side (`client = false`) also measures (half
    /// the time between its answers) and is done after `iters` of them, as both sides of
    /// perftest's `ib_write_lat` and `ib_send_lat` are.
    pub fn set_answer_measures(&mut self) {
        self.answer_measures = true;
    }

    /// Sets the peer's target region (when it is learnt after the application is made).
    pub fn set_remote(&mut self, remote: RemoteAddr) {
        self.remote = remote;
    }

    fn post_recv(&mut self, dev: &mut Device, i: usize) -> Result<(), AppError> {
        // A UD receive buffer starts with the 40-byte GRH area.
        let grh = if self.spec.service == Service::Ud {
            roce_stack::ud::GRH_LEN as u32
        } else {
            0
        };
        let sge = dev
            .mr(self.dst)
            .ok_or(AppError::Defect("the test's region is gone"))?
            .sge(0, self.recv_len + grh);
        dev.post_recv(
            self.qps[i].qpn,
            RecvRequest {
                wr_id: 0,
                sgl: SgList::one(sge),
            },
        )
        .map_err(|e| AppError::post(i, "a receive", e))
    }

    fn post(&mut self, dev: &mut Device, i: usize) -> Result<(), AppError> {
        let spec = self.spec;
        let size = spec.msg_size() as u32;
        let sge = dev
            .mr(self.src)
            .ok_or(AppError::Defect("the test's region is gone"))?
            .sge(0, size);
        let op = match spec.test {
            PerfTest::Write => WrOp::Write(self.remote),
            PerfTest::Read => WrOp::Read(self.remote),
            PerfTest::Send => WrOp::Send,
            PerfTest::Atomic => WrOp::FetchAdd {
                remote: self.remote,
                add: 1,
            },
            PerfTest::Udp => return Err(AppError::Defect("udp is not an RDMA test")),
        };
        if spec.service == Service::Ud {
            let ah = *self
                .ud
                .get(i)
                .ok_or(AppError::Defect("no address handle for a UD QP"))?;
            dev.post_ud_send(
                self.qps[i].qpn,
                roce_stack::ud::UdSend {
                    wr_id: self.posted,
                    sgl: SgList::one(sge),
                    ah,
                    imm: None,
                    signaled: true,
                },
            )
            .map_err(|e| AppError::post(i, "a UD send", e))?;
            self.qps[i].outstanding += 1;
            self.posted += 1;
            return Ok(());
        }
        dev.post_send(
            self.qps[i].qpn,
            WorkRequest::new(self.posted, op, SgList::one(sge)),
        )
        .map_err(|e| AppError::post(i, spec.test.name(), e))?;
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
    fn drain_send(&mut self, dev: &mut Device, now: StdInstant) -> Result<(), AppError> {
        for i in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[i].scq) {
                if c.status != WcStatus::Success {
                    return Err(AppError::completion("a request", &c));
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

    /// Drains every receive CQ, reposting a receive per completion. Returns how many came
    /// from the peer: on UD (where anyone with the QPN and Q_Key can send) a datagram from
    /// another address or QP is counted as foreign, whatever its status, and ends nothing.
    fn drain_recv(&mut self, dev: &mut Device) -> Result<u64, AppError> {
        let mut n = 0;
        for i in 0..self.qps.len() {
            while let Some(c) = dev.poll_cq(self.qps[i].rcq) {
                if let Some(ah) = self.ud.get(i) {
                    let from_peer =
                        c.src_qp == Some(ah.dest_qpn) && c.src.is_some_and(|a| a.ip() == ah.remote);
                    if !from_peer {
                        self.foreign += 1;
                        self.post_recv(dev, i)?;
                        continue;
                    }
                }
                if c.status != WcStatus::Success {
                    return Err(AppError::completion("a receive", &c));
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

    fn poll_bw(&mut self, dev: &mut Device, now: StdInstant) -> Result<(), AppError> {
        if !self.client {
            if self.spec.test == PerfTest::Send {
                // The receiver measures what arrived, from the first message on (as
                // perftest's SEND server does).
                let n = self.drain_recv(dev)?;
                if n > 0 && self.completed == 0 {
                    self.start = Some(now);
                }
                for _ in 0..n {
                    self.count_completion(now);
                }
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

    fn poll_lat(&mut self, dev: &mut Device, now: StdInstant) -> Result<(), AppError> {
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
                if self.answer_measures && self.iter >= self.spec.iters {
                    break;
                }
                if test == PerfTest::Write {
                    self.set_src_tag(dev, tag(self.iter));
                }
                if self.answer_measures {
                    let now = StdInstant::now();
                    if let Some(t0) = self.t_post {
                        self.samples
                            .push(now.duration_since(t0).as_nanos() as u64 / 2);
                    }
                    self.t_post = Some(now);
                    self.completed += 1;
                    self.last = Some(now);
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
            let mut r = PerfResult::lat(&self.spec, &mut self.samples);
            if self.answer_measures && !self.client && !self.samples.is_empty() {
                // The answering side times the gaps between its answers: one fewer than the
                // ping-pongs it ran, which is what it reports (as perftest does).
                r.iterations = self.iter;
            }
            r.foreign_datagrams = self.foreign;
            return r;
        }
        let secs = match (self.start, self.last) {
            (Some(s), Some(l)) => l.duration_since(s).as_secs_f64(),
            _ => 0.0,
        };
        let mut r = PerfResult::bw(&self.spec, self.completed, secs, self.peak);
        r.foreign_datagrams = self.foreign;
        r
    }
}

impl Application for PerfApp {
    fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), AppError> {
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
            self.error = Some(e.to_string());
        }
        r
    }

    fn done(&self) -> bool {
        if self.answer_measures && !self.client {
            return self.error.is_none()
                && self.iter >= self.spec.iters
                && self.qps.iter().all(|q| q.outstanding == 0);
        }
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
pub(crate) fn spin(spec: &PerfSpec) -> Duration {
    if spec.lat {
        Duration::from_millis(2)
    } else {
        Duration::ZERO
    }
}

/// Receives a SEND test keeps posted per QP.
pub(crate) fn recv_depth(spec: &PerfSpec) -> u32 {
    if spec.lat {
        16
    } else {
        (spec.tx_depth * 2).clamp(256, 4096)
    }
}

pub(crate) fn perf_caps(spec: &PerfSpec) -> QpCaps {
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
