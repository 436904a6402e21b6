//! The thin tokio/UDP driver (feature `driver`): real sockets under the sans-IO [`Device`].
//!
//! * [`socket`]: quinn-udp under tokio (ECN both ways, batched receive).
//! * [`impair`]: seeded loss/reorder/duplication/corruption/CE on the receive path.
//! * [`endpoint`]: the event loop moving datagrams and time between socket and device.
//! * This module: the out-of-band connection set-up over TCP (as perftest and
//!   `ibv_rc_pingpong` do: QPNs, start PSNs, MTU, the remote buffers' addresses and rkey, then
//!   RESET→INIT→RTR→RTS on both sides), and the three runs built on it: [`serve`],
//!   [`run_client`] and [`loopback`] (a server thread and a client in one process, each on its
//!   own thread and runtime so the two endpoints do not share a core).
//! * [`perf`]: `roce perf`, perftest-style bandwidth and latency and the plain-UDP baseline.
//! * [`kv`]: `roce kv`, the KV-cache push of prefill/decode disaggregation, plan by plan.
//!
//! Control messages are JSON lines. The client is the requester and sends the
//! [`WorkloadSpec`]; both ends derive the same plan from it and verify independently.
pub mod endpoint;
pub mod impair;
pub mod kv;
pub mod perf;
pub mod socket;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use roce_proto::{Ecn, Psn, Qpn, RKey, ROCEV2_UDP_PORT};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use crate::dcqcn::CcConfig;
use crate::device::{Connection, CqHandle, Device};
use crate::memory::{Access, PdHandle};
use crate::path::PathConfig;
use crate::qp::{QpAttr, QpCaps, QpState};
use crate::rng::Rng;
use crate::stats::QpStats;
use crate::workload::{Plan, RemoteBlock, Requester, Responder, Tally, WorkloadSpec};
use endpoint::{Endpoint, LoopStats, RunError, Tap};
use impair::{ImpairStats, Impairment};

/// TCP port of the out-of-band exchange (perftest's default).
pub const DEFAULT_CONTROL_PORT: u16 = 18515;
/// Version of the control protocol.
const PROTOCOL: u32 = 1;

/// Transport settings of a run, shared by both ends (the client sends them to the server).
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The workload.
    pub spec: WorkloadSpec,
    /// Path MTU (256, 512, 1024, 2048 or 4096).
    pub mtu: u32,
    /// Impairments applied to what this end receives.
    pub impairment: Impairment,
    /// Congestion control.
    pub cc: CcConfig,
    /// Line rate the congestion control clamps to, bits/s.
    pub line_rate_bps: u64,
    /// Local ACK timeout code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Retries after timeouts and sequence NAKs.
    pub retry_cnt: u8,
    /// Retries after RNR NAKs (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code the responder asks for.
    pub min_rnr_timer: u8,
    /// How long an end waits with work pending and nothing received before giving up.
    pub silence: Duration,
    /// READs and atomics outstanding per QP (`max_rd_atomic`), and the responder resources for
    /// them (`max_dest_rd_atomic`), 1..=128.
    pub max_rd_atomic: u8,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            spec: WorkloadSpec::default(),
            mtu: 1024,
            impairment: Impairment::default(),
            cc: CcConfig::None,
            line_rate_bps: 100_000_000_000,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            silence: Duration::from_secs(5),
            max_rd_atomic: 16,
        }
    }
}

/// `Err` unless `mtu` is one of the IB path MTUs.
fn check_mtu(mtu: u32) -> Result<(), String> {
    if [256, 512, 1024, 2048, 4096].contains(&mtu) {
        Ok(())
    } else {
        Err(format!(
            "--mtu must be 256, 512, 1024, 2048 or 4096, not {mtu}"
        ))
    }
}

impl RunConfig {
    /// Checks what a user can get wrong.
    pub fn validate(&self) -> Result<(), String> {
        check_mtu(self.mtu)?;
        if self.timeout == 0
            || self.timeout > 31
            || self.retry_cnt > 7
            || self.rnr_retry > 7
            || self.min_rnr_timer > 31
            || !(1..=128).contains(&self.max_rd_atomic)
        {
            return Err(
                "timeout must be 1..=31, retry counts 0..=7, min_rnr_timer 0..=31, \
                 max_rd_atomic 1..=128"
                    .into(),
            );
        }
        self.spec.validate()?;
        self.impairment.validate()
    }
}

/// A failed run: what went wrong, in one line.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
    /// Setting up sockets or the control connection failed.
    #[error("{0}")]
    Setup(String),
    /// The peer refused or broke the protocol.
    #[error("peer: {0}")]
    Peer(String),
    /// The run itself failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

fn setup(what: &str) -> impl Fn(std::io::Error) -> DriverError + '_ {
    move |e| DriverError::Setup(format!("{what}: {e}"))
}

/// Binds this end's RoCE socket at `local` around `dev`, sending to the peer's UDP port
/// `peer_port`. The endpoint sleeps when idle unless told to spin.
fn bind_endpoint(
    dev: Device,
    local: SocketAddr,
    peer_port: u16,
    impairment: Impairment,
) -> Result<Endpoint, DriverError> {
    let mut ep = Endpoint::bind(dev, local, impairment).map_err(setup("RoCE socket"))?;
    ep.set_peer_port(peer_port);
    Ok(ep)
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct QpInfo {
    qpn: u32,
    psn: u32,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Block {
    va: u64,
    rkey: u32,
    len: u64,
}

/// The part of a run both ends report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Side {
    mismatches: Vec<String>,
    verified_bytes: u64,
    stats: QpStats,
    impairment: ImpairStats,
    loops: LoopStats,
}

impl Side {
    /// What an end reports after its run.
    fn of(mismatches: &[crate::workload::Mismatch], tally: &Tally, ep: &Endpoint) -> Self {
        Self {
            mismatches: mismatches.iter().map(ToString::to_string).collect(),
            verified_bytes: tally.verified_bytes,
            stats: ep.dev.stats(),
            impairment: ep.impair_stats(),
            loops: ep.stats,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Msg {
    Hello {
        protocol: u32,
        spec: String,
        mtu: u32,
        cc: String,
        line_rate_bps: u64,
        timeout: u8,
        retry_cnt: u8,
        rnr_retry: u8,
        min_rnr_timer: u8,
        roce_port: u16,
        qps: Vec<QpInfo>,
    },
    Welcome {
        qps: Vec<QpInfo>,
        blocks: Vec<Block>,
        roce_port: u16,
    },
    Ready,
    Done {
        ok: bool,
    },
    Summary(Box<Side>),
    Error(String),
    /// `roce perf`: one run (RDMA or the UDP baseline); the server answers `Welcome`.
    PerfHello {
        protocol: u32,
        spec: perf::PerfSpec,
        roce_port: u16,
        qps: Vec<QpInfo>,
        blocks: Vec<Block>,
    },
    /// `roce perf`: what the server counted (UDP baseline: datagrams received, the time from
    /// the first to the last, the best rate over 10 ms windows).
    PerfSummary {
        received: u64,
        seconds: f64,
        peak_per_s: f64,
    },
    /// `roce perf`: no more runs.
    Bye,
    /// `roce kv`: the KV-push exchange.
    Kv(kv::KvMsg),
}

struct Control {
    rd: BufReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
    line: String,
}

impl Control {
    fn new(s: TcpStream) -> Self {
        let _ = s.set_nodelay(true);
        let (r, w) = s.into_split();
        Self {
            rd: BufReader::new(r),
            wr: w,
            line: String::new(),
        }
    }

    async fn send(&mut self, m: &Msg) -> Result<(), DriverError> {
        let mut s = serde_json::to_string(m).map_err(|e| DriverError::Setup(e.to_string()))?;
        s.push('\n');
        self.wr
            .write_all(s.as_bytes())
            .await
            .map_err(|e| DriverError::Peer(format!("control connection: {e}")))
    }

    async fn recv(&mut self) -> Result<Msg, DriverError> {
        self.line.clear();
        let n = self
            .rd
            .read_line(&mut self.line)
            .await
            .map_err(|e| DriverError::Peer(format!("control connection: {e}")))?;
        if n == 0 {
            return Err(DriverError::Peer("closed the control connection".into()));
        }
        match serde_json::from_str(&self.line) {
            Ok(Msg::Error(e)) => Err(DriverError::Peer(e)),
            Ok(m) => Ok(m),
            Err(e) => Err(DriverError::Peer(format!(
                "unreadable control message: {e}"
            ))),
        }
    }

    /// Server side: waits (10 s at most) for the client's `Ready`.
    async fn expect_ready(&mut self) -> Result<(), DriverError> {
        match self.recv_timeout(Duration::from_secs(10)).await? {
            Msg::Ready => Ok(()),
            _ => Err(DriverError::Peer("expected ready".into())),
        }
    }

    /// Server side: resolves when the client says it is done (`Ok`) or vanishes (`Err`, one
    /// line); the stop signal of a serving endpoint.
    async fn client_done(&mut self) -> Result<(), String> {
        match self.recv().await {
            Ok(Msg::Done { .. }) => Ok(()),
            Ok(_) => Err("unexpected control message".to_string()),
            Err(DriverError::Peer(m)) => Err(format!("the client {m} before finishing")),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn recv_timeout(&mut self, d: Duration) -> Result<Msg, DriverError> {
        match tokio::time::timeout(d, self.recv()).await {
            Ok(r) => r,
            Err(_) => Err(DriverError::Peer(format!(
                "no answer on the control connection within {d:?}"
            ))),
        }
    }
}

/// Opens the control connection to `server` (from `bind`, when given). Returns the control
/// channel and the local IP the route to the server uses (the RoCE socket binds it).
async fn connect_control(
    server: SocketAddr,
    bind: Option<IpAddr>,
) -> Result<(Control, IpAddr), DriverError> {
    let sock = match server {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(setup("control socket"))?;
    if let Some(ip) = bind {
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(|e| DriverError::Setup(format!("cannot bind {ip}: {e}")))?;
    }
    let stream = tokio::time::timeout(Duration::from_secs(5), sock.connect(server))
        .await
        .map_err(|_| DriverError::Setup(format!("cannot reach server {server}: timed out")))?
        .map_err(|e| DriverError::Setup(format!("cannot reach server {server}: {e}")))?;
    let local_ip = stream.local_addr().map_err(setup("control socket"))?.ip();
    Ok((Control::new(stream), local_ip))
}

/// Accepts one client on `listener` (within `timeout`, when given). Returns the control
/// channel, the local IP the client reached and the client's address.
async fn accept_control(
    listener: std::net::TcpListener,
    timeout: Option<Duration>,
) -> Result<(Control, IpAddr, SocketAddr), DriverError> {
    let listener = TcpListener::from_std(listener).map_err(setup("listener"))?;
    let accept = listener.accept();
    let (stream, peer) = match timeout {
        Some(d) => tokio::time::timeout(d, accept)
            .await
            .map_err(|_| DriverError::Setup(format!("no client connected within {d:?}")))?,
        None => accept.await,
    }
    .map_err(setup("accept"))?;
    let local_ip = stream.local_addr().map_err(setup("control socket"))?.ip();
    Ok((Control::new(stream), local_ip, peer))
}

/// Creates `n` QPs (each with its own send and receive CQ, sized by `caps`) and moves them
/// to INIT with the remote `access` they grant.
fn create_qps(
    dev: &mut Device,
    pd: PdHandle,
    n: u32,
    caps: QpCaps,
    access: Access,
) -> Result<Vec<(Qpn, CqHandle, CqHandle)>, DriverError> {
    let mut out = Vec::new();
    for _ in 0..n {
        let (scq, rcq) = (dev.create_cq(), dev.create_cq());
        let qpn = dev
            .create_qp(pd, scq, rcq, caps)
            .map_err(|e| DriverError::Setup(e.to_string()))?;
        dev.modify_qp(
            qpn,
            &QpAttr {
                access_flags: Some(access),
                ..QpAttr::to(QpState::Init)
            },
        )
        .map_err(|e| DriverError::Setup(e.to_string()))?;
        out.push((qpn, scq, rcq));
    }
    Ok(out)
}

/// Remote access of the QPs of `roce loopback` and `roce perf`: everything.
const ALL_REMOTE: Access =
    Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0);

/// Start PSNs from the seed (random-looking, so runs cross the 2^24 wrap now and then).
fn start_psns(seed: u64, n: u32, salt: u64) -> Vec<Psn> {
    let mut rng = Rng::new(seed ^ salt);
    (0..n).map(|_| Psn::new(rng.next_u64() as u32)).collect()
}

/// Refuses a peer that speaks another version of a control protocol (`what`: its name).
fn check_protocol(what: &str, got: u32, want: u32) -> Result<(), DriverError> {
    if got == want {
        Ok(())
    } else {
        Err(DriverError::Peer(format!(
            "{what} protocol {got}, this server speaks {want}"
        )))
    }
}

/// The QPs an end announces to its peer: QPN and first PSN of each.
fn qp_infos(qps: &[(Qpn, CqHandle, CqHandle)], psns: &[Psn]) -> Vec<QpInfo> {
    qps.iter()
        .zip(psns)
        .map(|(&(q, _, _), p)| QpInfo {
            qpn: q.0,
            psn: p.value(),
        })
        .collect()
}

/// Takes each of `qps` (created, RESET→INIT done) to RTS against the peer's QP of the same
/// index, sending from PSN `psns[i]`.
fn connect_qps(
    dev: &mut Device,
    qps: &[(Qpn, CqHandle, CqHandle)],
    peers: &[QpInfo],
    psns: &[Psn],
    local: SocketAddr,
    remote: SocketAddr,
    cfg: &RunConfig,
) -> Result<(), DriverError> {
    for ((&(qpn, _, _), &peer), &sq_psn) in qps.iter().zip(peers).zip(psns) {
        connect_qp(dev, qpn, peer, sq_psn, local, remote, cfg)?;
    }
    Ok(())
}

/// RESET→INIT done; INIT→RTR→RTS with the peer's QPN and PSN.
fn connect_qp(
    dev: &mut Device,
    qpn: Qpn,
    peer: QpInfo,
    sq_psn: Psn,
    local: SocketAddr,
    remote: SocketAddr,
    cfg: &RunConfig,
) -> Result<(), DriverError> {
    let sport = PathConfig::udp_sport(qpn.0, peer.qpn);
    let path = PathConfig {
        local: local.ip(),
        remote: remote.ip(),
        src_port: sport,
        remote_src_port: sport,
        local_port: local.port(),
        remote_port: remote.port(),
        ecn: Ecn::Ect0,
        verify_icrc: true,
    };
    let c = Connection {
        rq_psn: Psn::new(peer.psn),
        sq_psn,
        mtu: cfg.mtu,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: cfg.rnr_retry,
        min_rnr_timer: cfg.min_rnr_timer,
        max_rd_atomic: cfg.max_rd_atomic,
        max_dest_rd_atomic: cfg.max_rd_atomic,
        ..Connection::new(Qpn(peer.qpn), path)
    };
    dev.connect_qp(qpn, &c)
        .map_err(|e| DriverError::Setup(format!("modify QP {qpn}: {e}")))?;
    if !matches!(cfg.cc, CcConfig::None) {
        dev.set_congestion_control(qpn, cfg.cc.build(cfg.line_rate_bps));
    }
    Ok(())
}

fn runtime() -> Result<tokio::runtime::Runtime, DriverError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(setup("tokio runtime"))
}

/// Where the server listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerConfig {
    /// TCP address of the control connection (the RoCE socket binds the same IP).
    pub listen: SocketAddr,
    /// UDP port of the RoCE socket (4791).
    pub roce_port: u16,
    /// How long to wait for a client.
    pub accept_timeout: Option<Duration>,
}

/// What the server saw, once its client finished.
#[derive(Debug, Clone)]
pub struct ServerOutcome {
    /// Mismatches found by the responder.
    pub mismatches: Vec<String>,
    /// Bytes verified by the responder.
    pub verified_bytes: u64,
    /// Device counters.
    pub stats: QpStats,
}

/// A bound control listener; [`Listener::serve`] then runs one client's workload.
#[derive(Debug)]
pub struct Listener {
    listener: std::net::TcpListener,
    cfg: ServerConfig,
}

impl Listener {
    /// Binds the control port (errors: address in use, not local, …).
    pub fn bind(cfg: ServerConfig) -> Result<Self, DriverError> {
        let listener = std::net::TcpListener::bind(cfg.listen)
            .map_err(|e| DriverError::Setup(format!("cannot listen on TCP {}: {e}", cfg.listen)))?;
        listener.set_nonblocking(true).map_err(setup("listener"))?;
        Ok(Self { listener, cfg })
    }

    /// The bound control address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.cfg.listen)
    }

    /// Accepts one client and serves its workload as the responder. Blocking.
    pub fn serve(
        self,
        impairment: Impairment,
        tap: Option<Tap>,
    ) -> Result<ServerOutcome, DriverError> {
        let rt = runtime()?;
        rt.block_on(async move {
            let (mut ctl, local_ip, peer) =
                accept_control(self.listener, self.cfg.accept_timeout).await?;
            match serve_client(
                &mut ctl,
                local_ip,
                peer.ip(),
                self.cfg.roce_port,
                impairment,
                tap,
            )
            .await
            {
                Ok(o) => Ok(o),
                Err(e) => {
                    let _ = ctl.send(&Msg::Error(e.to_string())).await;
                    Err(e)
                }
            }
        })
    }
}

/// Listens on `cfg.listen`, serves one client as the responder, and returns what it verified.
pub fn serve(
    cfg: ServerConfig,
    impairment: Impairment,
    tap: Option<Tap>,
) -> Result<ServerOutcome, DriverError> {
    Listener::bind(cfg)?.serve(impairment, tap)
}

async fn serve_client(
    ctl: &mut Control,
    local_ip: IpAddr,
    peer_ip: IpAddr,
    roce_port: u16,
    impairment: Impairment,
    tap: Option<Tap>,
) -> Result<ServerOutcome, DriverError> {
    let Msg::Hello {
        protocol,
        spec,
        mtu,
        cc,
        line_rate_bps,
        timeout,
        retry_cnt,
        rnr_retry,
        min_rnr_timer,
        roce_port: client_port,
        qps,
    } = ctl.recv_timeout(Duration::from_secs(10)).await?
    else {
        return Err(DriverError::Peer("expected a hello".into()));
    };
    check_protocol("control", protocol, PROTOCOL)?;
    let spec = WorkloadSpec::decode(&spec).map_err(DriverError::Peer)?;
    let cc: CcConfig = cc
        .parse()
        .map_err(|e| DriverError::Peer(format!("congestion control: {e}")))?;
    let cfg = RunConfig {
        spec,
        mtu,
        impairment,
        cc,
        line_rate_bps,
        timeout,
        retry_cnt,
        rnr_retry,
        min_rnr_timer,
        ..RunConfig::default()
    };
    cfg.validate().map_err(DriverError::Peer)?;
    if qps.len() != cfg.spec.qps as usize {
        return Err(DriverError::Peer("QP count differs from the spec".into()));
    }
    let local = SocketAddr::new(local_ip, roce_port);
    let remote = SocketAddr::new(peer_ip, client_port);
    let mut dev = Device::default();
    let pd = dev.alloc_pd();
    let mine = create_qps(&mut dev, pd, cfg.spec.qps, QpCaps::default(), ALL_REMOTE)?;
    let psns = start_psns(cfg.spec.seed, cfg.spec.qps, 0x5e7e);
    let plan = Plan::new(&cfg.spec);
    let recv: Vec<(Qpn, CqHandle)> = mine.iter().map(|&(q, _, r)| (q, r)).collect();
    let (mut responder, blocks) =
        Responder::new(&mut dev, pd, plan, &recv).map_err(DriverError::Setup)?;
    connect_qps(&mut dev, &mine, &qps, &psns, local, remote, &cfg)?;
    let mut ep = bind_endpoint(dev, local, client_port, cfg.impairment)?;
    if let Some(t) = tap {
        ep.set_tap(t);
    }
    ctl.send(&Msg::Welcome {
        qps: qp_infos(&mine, &psns),
        blocks: blocks
            .iter()
            .map(|b| Block {
                va: b.va,
                rkey: b.rkey.0,
                len: b.len,
            })
            .collect(),
        roce_port,
    })
    .await?;
    ctl.expect_ready().await?;
    // Serve until the client says it is done (or vanishes).
    let stop = ctl.client_done();
    let silence = cfg.silence.max(Duration::from_secs(30));
    let result = ep.run(&mut responder, false, stop, silence).await;
    let side = Side::of(responder.mismatches(), responder.tally(), &ep);
    result?;
    ctl.send(&Msg::Summary(Box::new(side.clone()))).await?;
    Ok(ServerOutcome {
        mismatches: side.mismatches,
        verified_bytes: side.verified_bytes,
        stats: side.stats,
    })
}

/// Where the client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientConfig {
    /// The server's control address.
    pub server: SocketAddr,
    /// Local IP to use (default: what the route to the server picks).
    pub bind: Option<IpAddr>,
    /// UDP port of this end's RoCE socket.
    pub roce_port: u16,
}

/// Connects to a server, runs the workload as the requester, and reports.
pub fn run_client(
    client: ClientConfig,
    cfg: &RunConfig,
    tap: Option<Tap>,
) -> Result<Report, DriverError> {
    cfg.validate().map_err(DriverError::Config)?;
    runtime()?.block_on(client_async(client, cfg, tap))
}

async fn client_async(
    client: ClientConfig,
    cfg: &RunConfig,
    tap: Option<Tap>,
) -> Result<Report, DriverError> {
    let (mut ctl, local_ip) = connect_control(client.server, client.bind).await?;
    let peer_ip = client.server.ip();

    let mut dev = Device::default();
    let pd = dev.alloc_pd();
    let mine = create_qps(&mut dev, pd, cfg.spec.qps, QpCaps::default(), ALL_REMOTE)?;
    let psns = start_psns(cfg.spec.seed, cfg.spec.qps, 0xc11e);
    ctl.send(&Msg::Hello {
        protocol: PROTOCOL,
        spec: cfg.spec.encode(),
        mtu: cfg.mtu,
        cc: cfg.cc.to_string(),
        line_rate_bps: cfg.line_rate_bps,
        timeout: cfg.timeout,
        retry_cnt: cfg.retry_cnt,
        rnr_retry: cfg.rnr_retry,
        min_rnr_timer: cfg.min_rnr_timer,
        roce_port: client.roce_port,
        qps: qp_infos(&mine, &psns),
    })
    .await?;
    let Msg::Welcome {
        qps,
        blocks,
        roce_port,
    } = ctl.recv_timeout(Duration::from_secs(10)).await?
    else {
        return Err(DriverError::Peer("expected a welcome".into()));
    };
    if qps.len() != mine.len() || blocks.len() != mine.len() {
        return Err(DriverError::Peer(
            "welcome lists the wrong number of QPs".into(),
        ));
    }
    let local = SocketAddr::new(local_ip, client.roce_port);
    let remote = SocketAddr::new(peer_ip, roce_port);
    connect_qps(&mut dev, &mine, &qps, &psns, local, remote, cfg)?;
    let plan = Plan::new(&cfg.spec);
    let send: Vec<(Qpn, CqHandle)> = mine.iter().map(|&(q, s, _)| (q, s)).collect();
    let remotes: Vec<RemoteBlock> = blocks
        .iter()
        .map(|b| RemoteBlock {
            va: b.va,
            rkey: RKey(b.rkey),
            len: b.len,
        })
        .collect();
    let mut requester = Requester::new(&mut dev, pd, plan, &send, &remotes);
    let mut ep = bind_endpoint(dev, local, roce_port, cfg.impairment)?;
    if let Some(t) = tap {
        ep.set_tap(t);
    }
    ctl.send(&Msg::Ready).await?;
    let started = std::time::Instant::now();
    let stop = async {
        match ctl.recv().await {
            Err(DriverError::Peer(m)) => Err(format!("the server {m}")),
            Err(e) => Err(e.to_string()),
            Ok(_) => Err("unexpected control message".to_string()),
        }
    };
    let result = ep.run(&mut requester, true, stop, cfg.silence).await;
    let seconds = started.elapsed().as_secs_f64();
    let mine_side = Side::of(requester.mismatches(), requester.tally(), &ep);
    result?;
    let ok = mine_side.mismatches.is_empty();
    ctl.send(&Msg::Done { ok }).await?;
    let server = match ctl.recv_timeout(Duration::from_secs(10)).await? {
        Msg::Summary(s) => *s,
        _ => return Err(DriverError::Peer("expected a summary".into())),
    };
    Ok(Report::new(requester.tally(), &mine_side, &server, seconds))
}

/// The report of a run (text via `Display`, JSON via `serde_json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every byte and completion verified on both ends.
    pub ok: bool,
    /// Completed operations by kind.
    pub ops: BTreeMap<String, u64>,
    /// Payload bytes of completed operations.
    pub bytes: u64,
    /// Wall time of the workload.
    pub seconds: f64,
    /// Payload goodput.
    pub gbps: f64,
    /// Completed operations per second.
    pub msgs_per_sec: f64,
    /// Request packets sent again (both ends).
    pub retransmitted_packets: u64,
    /// NAKs sent, by kind (both ends).
    pub naks: crate::stats::Naks,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// CNPs sent (both ends).
    pub cnps_sent: u64,
    /// CNPs received (both ends).
    pub cnps_received: u64,
    /// Rate cuts the congestion controllers made (both ends).
    pub rate_cuts: u64,
    /// Lowest rate a cut set, bits/s (0: no cut).
    pub min_rate_bps: u64,
    /// Received datagrams dropped by the transport, by reason (both ends).
    pub drops: crate::stats::Drops,
    /// Bytes compared against the model (both ends).
    pub verified_bytes: u64,
    /// What the impairment stages did (both ends).
    pub impairment: ImpairStats,
    /// Every mismatch, with operation, QP, PSN and offset.
    pub errors: Vec<String>,
    /// Client (requester) device counters.
    pub client: QpStats,
    /// Server (responder) device counters.
    pub server: QpStats,
}

impl Report {
    fn new(tally: &Tally, client: &Side, server: &Side, seconds: f64) -> Self {
        let mut ops = BTreeMap::new();
        for (k, n) in crate::workload::OpKind::ALL.iter().zip(tally.ops) {
            ops.insert(k.name().to_string(), n);
        }
        let total_ops: u64 = tally.ops.iter().sum();
        let mut all = client.stats;
        all.add(&server.stats);
        let mut impairment = client.impairment;
        impairment.add(&server.impairment);
        let mut errors: Vec<String> = client
            .mismatches
            .iter()
            .map(|m| format!("client: {m}"))
            .collect();
        errors.extend(server.mismatches.iter().map(|m| format!("server: {m}")));
        Self {
            ok: errors.is_empty(),
            ops,
            bytes: tally.bytes,
            seconds,
            gbps: tally.bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
            msgs_per_sec: total_ops as f64 / seconds.max(1e-9),
            retransmitted_packets: all.retransmitted_packets,
            naks: all.naks_sent,
            rnr_naks: all.naks_sent.rnr,
            cnps_sent: all.cnps_sent,
            cnps_received: all.cnps_received,
            rate_cuts: all.rate_cuts,
            min_rate_bps: all.min_rate_bps,
            drops: all.drops,
            verified_bytes: client.verified_bytes + server.verified_bytes,
            impairment,
            errors,
            client: client.stats,
            server: server.stats,
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "result          {}",
            if self.ok {
                "OK: every byte and completion verified"
            } else {
                "FAILED"
            }
        )?;
        let ops: Vec<String> = self
            .ops
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(f, "operations      {}", ops.join(", "))?;
        writeln!(
            f,
            "bytes           {} ({:.1} MiB)",
            self.bytes,
            self.bytes as f64 / (1 << 20) as f64
        )?;
        writeln!(f, "time            {:.3} s", self.seconds)?;
        writeln!(
            f,
            "goodput         {:.3} Gb/s, {:.0} messages/s",
            self.gbps, self.msgs_per_sec
        )?;
        writeln!(f, "verified        {} bytes", self.verified_bytes)?;
        writeln!(f, "retransmitted   {} packets", self.retransmitted_packets)?;
        let n = self.naks;
        writeln!(
            f,
            "NAKs sent       seq_err {}, rnr {}, invalid_request {}, remote_access {}, remote_op {}",
            n.seq_err, n.rnr, n.invalid_request, n.remote_access, n.remote_op
        )?;
        writeln!(
            f,
            "CNPs            sent {}, received {}",
            self.cnps_sent, self.cnps_received
        )?;
        if self.rate_cuts > 0 {
            writeln!(
                f,
                "rate cut        {} times, lowest {:.3} Gb/s",
                self.rate_cuts,
                self.min_rate_bps as f64 / 1e9
            )?;
        }
        let d = self.drops;
        writeln!(
            f,
            "drops           malformed {}, bad_icrc {}, unknown_qp {}, wrong_state {}, out_of_sequence {}, duplicate/stale {}, other {}",
            d.malformed,
            d.bad_icrc,
            d.unknown_qp,
            d.wrong_state,
            d.out_of_sequence,
            d.stale_response + d.ghost_response,
            d.bad_opcode + d.bad_pkey + d.no_resource + d.response_queue_full
        )?;
        let i = self.impairment;
        if i != ImpairStats::default() {
            writeln!(
                f,
                "impairment      lost {}, reordered {}, duplicated {}, corrupted {}, ce_marked {}",
                i.lost, i.reordered, i.duplicated, i.corrupted, i.ce_marked
            )?;
        }
        for e in &self.errors {
            writeln!(f, "error           {e}")?;
        }
        Ok(())
    }
}

/// Loopback addresses of the two ends: 127.0.0.1 and 127.0.0.2, or ::1 twice (the second end
/// then needs another UDP port, since ::1 is the only IPv6 loopback address).
pub fn loopback_addrs(ipv6: bool) -> (IpAddr, IpAddr) {
    if ipv6 {
        (
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
        )
    } else {
        (
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
        )
    }
}

/// Runs the workload between two endpoints over loopback in one process: a server thread
/// (responder) and the client (requester), each with its own runtime and thread.
/// IPv4 uses 127.0.0.1 and 127.0.0.2 with UDP port 4791 on both; IPv6 uses ::1 with 4791
/// for the server and 4792 for the client.
pub fn loopback(cfg: &RunConfig, ipv6: bool, tap: Option<Tap>) -> Result<Report, DriverError> {
    let (client_ip, server_ip) = loopback_addrs(ipv6);
    loopback_between(
        cfg,
        (client_ip, client_roce_port(client_ip, server_ip)),
        (server_ip, ROCEV2_UDP_PORT),
        tap,
    )
}

/// The client's RoCE UDP port when both ends run in one process: 4791, or 4792 when the two
/// share one address (IPv6 `::1`), where the server has 4791.
pub(crate) fn client_roce_port(client_ip: IpAddr, server_ip: IpAddr) -> u16 {
    if client_ip == server_ip {
        ROCEV2_UDP_PORT + 1
    } else {
        ROCEV2_UDP_PORT
    }
}

/// Both ends in one process: a [`Listener`] on `server` (control on an ephemeral TCP port, RoCE
/// on UDP `server.1`) handed to `serve` on a thread named `name`, and `client` on the calling
/// thread with the listener's control address. The client's error is reported first, then the
/// server's.
pub(crate) fn in_one_process<T, S: Send + 'static>(
    name: &str,
    server: (IpAddr, u16),
    serve: impl FnOnce(Listener) -> Result<S, DriverError> + Send + 'static,
    client: impl FnOnce(SocketAddr) -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    let listener = Listener::bind(ServerConfig {
        listen: SocketAddr::new(server.0, 0),
        roce_port: server.1,
        accept_timeout: Some(Duration::from_secs(10)),
    })?;
    let control = listener.local_addr();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || serve(listener))
        .map_err(|e| DriverError::Setup(format!("server thread: {e}")))?;
    let r = client(control);
    let served = thread
        .join()
        .map_err(|_| DriverError::Setup("server thread panicked".into()))?;
    match (r, served) {
        (Ok(r), Ok(_)) => Ok(r),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

/// [`loopback`] between given local addresses and RoCE UDP ports (client, server).
pub fn loopback_between(
    cfg: &RunConfig,
    client: (IpAddr, u16),
    server: (IpAddr, u16),
    tap: Option<Tap>,
) -> Result<Report, DriverError> {
    cfg.validate().map_err(DriverError::Config)?;
    let server_impairment = Impairment {
        seed: cfg.impairment.seed.wrapping_add(1),
        ..cfg.impairment
    };
    in_one_process(
        "roce-server",
        server,
        move |listener| listener.serve(server_impairment, None),
        |control| {
            run_client(
                ClientConfig {
                    server: control,
                    bind: Some(client.0),
                    roce_port: client.1,
                },
                cfg,
                tap,
            )
        },
    )
}
