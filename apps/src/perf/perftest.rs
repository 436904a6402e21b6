//! `roce perf --perftest`: perftest's out-of-band TCP exchange (port 18515, not its rdma_cm
//! mode), so that a stock `ib_write_bw` / `ib_read_bw` on a host with an RDMA NIC or rxe can
//! be the other end. What travels, in order (linux-rdma/perftest `src/perftest_communication.c`
//! and `src/write_bw.c` / `src/read_bw.c`, release 6.29); in every step the client writes first
//! and then reads, the server reads and then writes, each message in one `write`:
//!
//! 1. versions: 16 bytes, NUL-padded (`exchange_versions`); this side announces "6.27", so
//!    that a 6.28+ peer skips its parameter negotiation (a raw C struct whose size depends on
//!    how the peer was built) and each side keeps its own command line;
//! 2. if the peer is 5.32 or newer: the page size and the cache line size, 4-byte big-endian
//!    each (`check_sys_data`);
//! 3. if the peer is 5.1 or newer: the MTU as `ibv_mtu` in decimal text, 2 bytes for 5.31 and
//!    newer (`check_mtu`); both use the smaller;
//! 4. the key records (`ctx_hand_shake`, 108 bytes each on RoCE: `KEY_PRINT_FMT_GID`): one per
//!    QP, again one per QP, then one more for QP 0;
//! 5. the test: the client writes (or reads) the server's region; the server waits;
//! 6. one more key record (the end of the test), the bandwidth reports (`xchg_bw_reports`:
//!    size and iterations as 8-byte big-endian integers, peak and average Gb/s and Mpps as
//!    big-endian doubles, the bandwidths in the sender's unit: MB/sec, or Gb/sec with
//!    `--report_gbits`), and a last key record (`ctx_close_connection`).
//!
//! Each side parses its own command line: give both the same test, size and iterations.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::{gid_of, ip_of_gid, QpRequest, Side, Transport};
use roce_driver::qps::{LocalQp, ALL_REMOTE};
use roce_driver::{runtime, DriverError, LinkChoice, Secrets};
use roce_proto::perftest::Dest;
use roce_proto::{Psn, Qpn, RKey, ROCEV2_UDP_PORT};
use roce_stack::{Access, ConnectParams, RemoteAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::app::{perf_caps, spin};
use super::{PerfApp, PerfResult, PerfSpec, PerfTest};

/// The version this side announces (see the module documentation).
pub const ANNOUNCED_VERSION: &str = "6.27";

/// perftest's `MAX_VERSION`.
const VERSION_LEN: usize = 16;

/// The page size this side reports (perftest's `cycle_buffer`).
const PAGE: u32 = 4096;

/// The cache line size this side reports.
const CACHE_LINE: u32 = 64;

/// How long a step may wait for the peer.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// One side of the exchange.
pub struct Session {
    tcp: TcpStream,
    client: bool,
    peer_version: f64,
    /// Every message sent and received, in order (for tests and `--verbose`).
    pub transcript: Vec<(bool, Vec<u8>)>,
}

fn err(what: &str, e: impl std::fmt::Display) -> DriverError {
    DriverError::Peer(format!("perftest exchange, {what}: {e}"))
}

impl Session {
    /// A session over a connected TCP stream, as the client (writes first) or the server.
    pub fn new(tcp: TcpStream, client: bool) -> Self {
        let _ = tcp.set_nodelay(true);
        Self {
            tcp,
            client,
            peer_version: 0.0,
            transcript: Vec::new(),
        }
    }

    /// One lock-step exchange of `mine` for the peer's message of the same length.
    async fn xchg(&mut self, what: &str, mine: &[u8]) -> Result<Vec<u8>, DriverError> {
        let mut theirs = vec![0u8; mine.len()];
        let step = async {
            if self.client {
                self.tcp.write_all(mine).await?;
                self.tcp.read_exact(&mut theirs).await?;
            } else {
                self.tcp.read_exact(&mut theirs).await?;
                self.tcp.write_all(mine).await?;
            }
            Ok::<(), std::io::Error>(())
        };
        match tokio::time::timeout(STEP_TIMEOUT, step).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(err(what, e)),
            Err(_) => return Err(err(what, "the peer sent nothing for 30 s")),
        }
        self.transcript.push((true, mine.to_vec()));
        self.transcript.push((false, theirs.clone()));
        Ok(theirs)
    }

    /// Steps 1-3: versions, system data, MTU. Returns the path MTU both use (bytes).
    pub async fn negotiate(&mut self, mtu: u32) -> Result<u32, DriverError> {
        let mut v = [0u8; VERSION_LEN];
        v[..ANNOUNCED_VERSION.len()].copy_from_slice(ANNOUNCED_VERSION.as_bytes());
        let theirs = self.xchg("versions", &v).await?;
        let text: String = theirs
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| char::from(b))
            .collect();
        // As C's atof: the leading number.
        let num: String = text
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        self.peer_version = num.parse().unwrap_or(0.0);
        if self.peer_version < 5.70 {
            return Err(err(
                "versions",
                format!("the peer announces {text:?}; perftest 5.70 or newer is needed"),
            ));
        }
        // Both sides gate each optional step on the other's version: every step below runs
        // for any peer that passed the check above, as it does for "6.27" on the peer's side.
        if self.peer_version >= 5.32 {
            self.xchg("page size", &PAGE.to_be_bytes()).await?;
            self.xchg("cache line size", &CACHE_LINE.to_be_bytes())
                .await?;
        }
        let code = roce_proto::cm::path_mtu_code(mtu).unwrap_or(3);
        let mut m = [0u8; 2];
        m[0] = b'0' + code;
        let theirs = self.xchg("MTU", &m).await?;
        let peer_code = theirs[0].wrapping_sub(b'0');
        Ok(match roce_proto::cm::path_mtu_bytes(peer_code) {
            Some(b) => b.min(mtu),
            None => mtu,
        })
    }

    /// One key record each way.
    pub async fn keys(&mut self, what: &str, mine: &Dest) -> Result<Dest, DriverError> {
        let mut b = [0u8; 128];
        let n = mine.emit(&mut b).map_err(|e| err(what, format!("{e:?}")))?;
        let theirs = self.xchg(what, &b[..n]).await?;
        Dest::parse(&theirs, mine.variant()).map_err(|e| {
            err(
                what,
                format!("the peer's key record does not parse ({e:?}); is it RoCE with a GID?"),
            )
        })
    }

    /// Step 6's reports (`xchg_bw_reports`): size, iterations, peak and average bandwidth,
    /// message rate. perftest sends the bandwidth in its own run's unit, MB/sec (2^20 bytes
    /// per second) or, with `--report_gbits`, Gb/sec (10^9 bits per second), and prints the
    /// peer's figures under its own header without converting: both sides must be given the
    /// same unit. `gbits` is this side's. Returns the peer's size, iterations and figures, the
    /// bandwidths converted to Gb/s.
    pub async fn reports(
        &mut self,
        r: Option<&PerfResult>,
        gbits: bool,
    ) -> Result<(u64, u64, [f64; 3]), DriverError> {
        let unit = if gbits { 1.0 } else { MB_PER_GBIT };
        let (size, iters, peak, avg, rate) = r.map_or((0, 0, 0.0, 0.0, 0.0), |r| {
            (
                r.size,
                r.iterations,
                r.bw_peak_gbps.unwrap_or(0.0) * unit,
                r.bw_avg_gbps.unwrap_or(0.0) * unit,
                r.msg_rate_mpps.unwrap_or(0.0),
            )
        });
        let be = |t: Vec<u8>| u64::from_be_bytes(t.try_into().unwrap_or([0; 8]));
        let peer_size = be(self.xchg("report: size", &size.to_be_bytes()).await?);
        let peer_iters = if self.peer_version >= 5.33 {
            be(self
                .xchg("report: iterations", &iters.to_be_bytes())
                .await?)
        } else {
            let t = self
                .xchg("report: iterations", &(iters as u32).to_be_bytes())
                .await?;
            u64::from(u32::from_be_bytes(t.try_into().unwrap_or([0; 4])))
        };
        let mut out = [0.0; 3];
        for (i, (what, x)) in [
            ("report: peak", peak),
            ("report: average", avg),
            ("report: rate", rate),
        ]
        .into_iter()
        .enumerate()
        {
            let t = self.xchg(what, &x.to_be_bytes()).await?;
            let v = f64::from_be_bytes(t.try_into().unwrap_or([0; 8]));
            // A stock server reports a struct it never filled: keep only finite figures.
            out[i] = if v.is_finite() { v } else { 0.0 };
        }
        out[0] /= unit;
        out[1] /= unit;
        Ok((peer_size, peer_iters, out))
    }
}

/// perftest's MB/sec (2^20 bytes per second) in one Gb/sec (10^9 bits per second).
pub const MB_PER_GBIT: f64 = 1e9 / 8.0 / 1_048_576.0;

/// The order of perftest's records around a test (perftest 4.5's `*_bw.c`/`*_lat.c`; every
/// step one 108-byte record each way, client first).
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Latency tests: one record before the keys.
    lead: bool,
    /// SEND tests: one record right after connecting.
    send: bool,
    /// WRITE, READ and atomic bandwidth: an end-of-test record and the reports before the
    /// closing record (a SEND or latency test only closes).
    reports: bool,
    /// `ib_write_lat`: the server writes first, and nothing is exchanged after the test.
    write_lat: bool,
}

impl Plan {
    fn of(spec: &PerfSpec) -> Self {
        Self {
            lead: spec.lat && spec.test != PerfTest::Send,
            send: spec.test == PerfTest::Send,
            reports: !spec.lat && spec.test != PerfTest::Send,
            write_lat: spec.lat && spec.test == PerfTest::Write,
        }
    }
}

/// Our key record for QP `q`.
fn dest(q: &LocalQp, psn: Psn, out_reads: u8, rkey: RKey, vaddr: u64, local: IpAddr) -> Dest {
    let gid = gid_of(local);
    Dest {
        lid: 0,
        out_reads: u16::from(out_reads),
        qpn: q.qpn.0,
        psn: psn.value(),
        rkey: rkey.0,
        vaddr,
        tail_markers_vaddr: None,
        gid: Some(gid),
        srqn: 0,
    }
}

/// The peer's address, from its GID.
fn peer_ip(d: &Dest) -> Result<IpAddr, DriverError> {
    d.gid.and_then(ip_of_gid).ok_or_else(|| {
        err(
            "keys",
            "the peer sent no GID (give it -x, its RoCEv2 GID index)",
        )
    })
}

/// Runs one perftest-compatible test on an accepted or connected TCP stream. `local` is the
/// address of this side's RoCE socket (UDP 4791).
pub async fn run_session(
    mut s: Session,
    spec: &PerfSpec,
    local: IpAddr,
    secrets: Secrets,
    link: LinkChoice,
    gbits: bool,
) -> Result<(Option<PerfResult>, Session), DriverError> {
    let mtu = s.negotiate(spec.mtu).await?;
    let salt = if s.client { 0xc11e } else { 0x5e7e };
    // The connection layer binds the link before the exchange: a peer that starts sending
    // the moment it reads the last key record finds the socket (or the packet ring) open,
    // and its first window waits there until the loop runs.
    // perftest's -c: RC, UC, or UD with its Q_Key 0x11111111 (`DEF_QKEY`).
    let transport = if spec.ud {
        Transport::Ud(roce_proto::QKey(0x1111_1111))
    } else if spec.uc {
        Transport::Uc
    } else {
        Transport::Rc
    };
    let req = QpRequest {
        transport,
        count: spec.nqps(),
        caps: perf_caps(spec),
        srq: None,
        params: ConnectParams {
            mtu,
            access: ALL_REMOTE,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_dest_rd_atomic: spec.outs,
            ..ConnectParams::default()
        },
    };
    let psns = secrets.start_psns(spec.nqps(), salt)?;
    let mut side = Side::new(
        secrets.device(salt)?,
        req,
        psns,
        SocketAddr::new(local, ROCEV2_UDP_PORT),
        link,
    )?;
    let dev = &mut side.ep.dev;
    // The region covers what a stock client cycles through: at least two pages, and the size.
    let len = (spec.msg_size() as usize).max(2 * PAGE as usize);
    let src = dev.reg_mr(side.pd, len, Access::LOCAL_WRITE);
    let dst = dev.reg_mr(
        side.pd,
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    );
    let (rkey, vaddr) = dev
        .mr(dst)
        .map(|m| (m.rkey(), m.va()))
        .ok_or_else(|| DriverError::Setup("region gone".into()))?;
    let mine: Vec<Dest> = side
        .qps
        .iter()
        .zip(&side.psns)
        .map(|(q, &p)| dest(q, p, spec.outs, rkey, vaddr, local))
        .collect();
    let plan = Plan::of(spec);
    // Latency tests open with one more record each way (`ctx_hand_shake` before the keys).
    if plan.lead {
        s.keys("opening record", &mine[0]).await?;
    }
    let mut peers = Vec::new();
    for m in &mine {
        peers.push(s.keys("keys", m).await?);
    }
    let peer = peer_ip(&peers[0])?;
    // As many READs/atomics outstanding as the peer's responder takes.
    side.request_mut().params.max_rd_atomic = peers[0].out_reads.clamp(1, 128) as u8;
    let to: Vec<(Qpn, Psn)> = peers
        .iter()
        .map(|p| (Qpn(p.qpn), Psn::new(p.psn)))
        .collect();
    // Connected after the first records, as perftest's `ctx_connect`.
    side.connect(&to, peer)?;
    let remote = RemoteAddr {
        va: peers[0].vaddr,
        rkey: RKey(peers[0].rkey),
    };
    let mut spec = *spec;
    spec.mtu = mtu;
    let Side {
        mut ep, qps, ahs, ..
    } = side;
    // Receives (a SEND test's) are posted here, before the records that say the test starts.
    // ib_write_lat: perftest's server writes first, so it is the application's active side;
    // both measure.
    let active = if plan.write_lat { !s.client } else { s.client };
    let mut app = PerfApp::new(&mut ep.dev, spec, active, &qps, (src, dst), remote)
        .map_err(|e| DriverError::Setup(e.to_string()))?;
    if plan.write_lat {
        app.set_answer_measures();
    }
    if spec.ud {
        app.set_ud_peers(ahs);
    }
    if plan.send {
        s.keys("record after connecting", &mine[0]).await?;
    }
    for m in &mine {
        s.keys("keys again", m).await?;
    }
    s.keys("keys after RTR", &mine[0]).await?;
    ep.set_busy_poll(spin(&spec));
    // The client runs its test to the end; so do both sides of ib_write_lat, which end on
    // their own counts with no record after.
    if s.client || plan.write_lat {
        ep.run(
            &mut app,
            true,
            std::future::pending(),
            Duration::from_secs(5),
        )
        .await?;
        let mut r = app.result();
        r.retransmitted_packets = ep.dev.stats().retransmitted_packets;
        r.link = Some(ep.link().name());
        r.sent = Some(ep.sent_counts());
        if plan.write_lat {
            return Ok((Some(r), s));
        }
        if plan.reports {
            s.keys("keys at the end of the test", &mine[0]).await?;
            s.reports(Some(&r), gbits).await?;
        }
        s.keys("closing keys", &mine[0]).await?;
        Ok((Some(r), s))
    } else {
        // Serve (ACK the writes, answer the reads) until the client's end-of-test record.
        let mut rec = [0u8; 128];
        let n = mine[0]
            .emit(&mut rec)
            .map_err(|e| err("keys", format!("{e:?}")))?;
        let mut theirs = vec![0u8; n];
        let res = {
            let (tcp, buf) = (&mut s.tcp, &mut theirs);
            let stop = async move {
                tcp.read_exact(buf)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("the client went away before the end of the test: {e}"))
            };
            ep.run(&mut app, false, stop, Duration::from_secs(3600))
                .await
        };
        res?;
        let what = if plan.reports {
            "keys at the end of the test"
        } else {
            "closing keys"
        };
        s.tcp.write_all(&rec[..n]).await.map_err(|e| err(what, e))?;
        s.transcript.push((false, theirs));
        s.transcript.push((true, rec[..n].to_vec()));
        let mut r = app.result();
        if plan.reports {
            let (size, iters, peer_report) = s.reports(None, gbits).await?;
            s.keys("closing keys", &mine[0]).await?;
            // The server measures nothing: its figures are the client's.
            r.size = size;
            r.iterations = iters;
            r.bw_peak_gbps = Some(peer_report[0]);
            r.bw_avg_gbps = Some(peer_report[1]);
            r.msg_rate_mpps = Some(peer_report[2]);
        }
        r.link = Some(ep.link().name());
        r.sent = Some(ep.sent_counts());
        Ok((Some(r), s))
    }
}

/// `roce perf --perftest --server`: waits for one perftest client on `bind:port` (TCP) and
/// serves its test, its RoCE socket on `bind` (UDP 4791; `bind` must be the address the
/// client reaches). Returns the client's figures.
pub fn serve_perftest(
    bind: IpAddr,
    port: u16,
    spec: &PerfSpec,
    secrets: Secrets,
    link: LinkChoice,
    gbits: bool,
    ready: impl FnOnce(),
) -> Result<PerfResult, DriverError> {
    spec.validate()?;
    runtime()?.block_on(async move {
        // No accept timeout: a server waits for its client, as perftest's does.
        let tcp = roce_driver::connect::tcp_accept_one(bind, port, None, ready).await?;
        let local = tcp
            .local_addr()
            .map_err(|e| DriverError::Setup(e.to_string()))?
            .ip();
        let (r, _) =
            run_session(Session::new(tcp, false), spec, local, secrets, link, gbits).await?;
        r.ok_or_else(|| DriverError::Peer("no result".into()))
    })
}

/// `roce perf --perftest --client HOST`: connects to a perftest server (stock `ib_write_bw`
/// with no host argument, or `roce perf --perftest --server`) and runs the test.
pub fn run_perftest_client(
    server: SocketAddr,
    bind: Option<IpAddr>,
    spec: &PerfSpec,
    secrets: Secrets,
    link: LinkChoice,
    gbits: bool,
) -> Result<PerfResult, DriverError> {
    spec.validate()?;
    runtime()?.block_on(async move {
        let sock = match server {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .map_err(|e| DriverError::Setup(e.to_string()))?;
        if let Some(b) = bind {
            sock.bind(SocketAddr::new(b, 0))
                .map_err(|e| DriverError::Setup(format!("cannot bind {b}: {e}")))?;
        }
        let tcp = tokio::time::timeout(Duration::from_secs(10), sock.connect(server))
            .await
            .map_err(|_| DriverError::Peer(format!("no answer from {server} (TCP)")))?
            .map_err(|e| DriverError::Peer(format!("cannot connect to {server}: {e}")))?;
        let local = tcp
            .local_addr()
            .map_err(|e| DriverError::Setup(e.to_string()))?
            .ip();
        let (r, _) =
            run_session(Session::new(tcp, true), spec, local, secrets, link, gbits).await?;
        r.ok_or_else(|| DriverError::Peer("no result".into()))
    })
}
