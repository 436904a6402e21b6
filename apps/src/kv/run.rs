//! `roce kv`: the KV-cache push of prefill/decode disaggregation ([`crate::kv`]) over real UDP
//! sockets, plan by plan, with the model that explains the times.
//!
//! The server is the decode instance: it registers one pool once, and for each plan allocates
//! the request's blocks, zeroes the pool, posts one receive per QP and sends the block numbers
//! (the prefill side knows the pool geometry from the shape; the address and rkey came in the
//! welcome). The client is the prefill instance: it writes the KV layer by layer with one-sided
//! WRITEs, the last one per QP with an immediate and signaled, and reports the time from the
//! first post to the last completion. The decode side learns completion only from the
//! immediates (one per QP, counted), verifies every byte, and answers with its verdict.
//!
//! Before the plans, two calibration streams run over the same QPs and sockets: large WRITEs
//! (1 MiB, as many bytes as the request) give the bandwidth, tiny WRITEs (64 B) the cost of one
//! work request. Each plan's model time is `max(bytes / bandwidth, WRs x per-WR cost)`.
//!
//! The control messages are this application's own (`KvMsg`).
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::control::{self, Control};
use roce_driver::connect::handshake::Offered;
use roce_driver::connect::qps::{check_protocol, LocalQp, RemoteBuffer};
use roce_driver::connect::{client_roce_port, in_one_process, Accepted, ClientConfig, Listener};
use roce_driver::connect::{QpRequest, Side};
use roce_driver::impair::Impairment;
use roce_driver::{
    runtime, AppError, Application, DriverError, Link, LinkChoice, PeerFault, Secrets, SetupFailure,
};
use roce_proto::{QKey, Qpn, ROCEV2_UDP_PORT};
use roce_stack::{Access, ConnectParams, CqHandle, Device, PdHandle, QpCaps};
use serde::{Deserialize, Serialize};

use super::{AllocKind, KvError, KvReceiver, KvSender, KvSpec, ModelShape, PlanKind, PlanSpec};
use crate::{ConfigError, Setting};

/// Version of the kv control protocol.
pub(crate) const KV_PROTOCOL: u32 = 3;

/// Bytes per WRITE of the bandwidth calibration stream.
const CALIB_LARGE: u32 = 1 << 20;
/// Bytes per WRITE of the per-WR calibration stream.
const CALIB_TINY: u32 = 64;
/// WRITEs of the per-WR calibration stream.
const CALIB_TINY_WRS: u32 = 32_768;

/// The kv exchange.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum KvMsg {
    /// Prefill → decode: the shape, the plans (the QPs travel in the exchange's own
    /// handshake, or are the CM's).
    Hello {
        protocol: u32,
        spec: KvSpec,
        transport: ConnectParams,
        plans: Vec<PlanSpec>,
    },
    /// Decode → prefill: the pool (registered once).
    Welcome { pool: RemoteBuffer },
    /// Decode → prefill: the blocks of plan `plan` (receives posted, pool zeroed).
    Blocks { plan: u32, blocks: Vec<u32> },
    /// Prefill → decode: every QP's last WRITE of plan `plan` completed.
    Sent { plan: u32 },
    /// Decode → prefill: what the decode side saw.
    Verified {
        plan: u32,
        complete: bool,
        arrived: u32,
        verified_bytes: u64,
        mismatches: Vec<String>,
    },
}

/// A `roce kv` run: the shape, the plans, the transport settings.
#[derive(Debug, Clone, PartialEq)]
pub struct KvConfig {
    /// Shape, pool, QPs, seed.
    pub spec: KvSpec,
    /// The plans compared (the calibration streams are added in front).
    pub plans: Vec<PlanSpec>,
    /// Connection settings (path MTU, local ACK timeout, ...).
    pub transport: ConnectParams,
    /// Impairments of what the prefill side receives (the decode side uses `seed + 1`).
    pub impairment: Impairment,
    /// How long an end waits with work pending and nothing received.
    pub silence: Duration,
    /// Runs of every plan (and calibration stream); the report keeps the fastest of each.
    pub repeat: u32,
    /// Where the start PSNs, QPNs and keys come from (in a loopback run, both ends').
    pub secrets: Secrets,
    /// How this end receives (in a loopback run, both ends).
    pub link: LinkChoice,
}

impl Default for KvConfig {
    fn default() -> Self {
        let shape = ModelShape::default();
        Self {
            spec: KvSpec {
                shape,
                pool_bytes: 3 * shape.total_bytes(),
                qps: 1,
                seed: 1,
            },
            plans: PlanSpec::defaults(AllocKind::Scattered),
            transport: ConnectParams {
                mtu: 4096,
                ..ConnectParams::default()
            },
            impairment: Impairment::default(),
            silence: Duration::from_secs(5),
            repeat: 1,
            secrets: Secrets::OsRandom,
            link: LinkChoice::Auto,
        }
    }
}

impl KvConfig {
    /// Checks what a user (or a peer) can get wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.transport;
        ConfigError::check_mtu(t.mtu)?;
        ConfigError::check_range(Setting::Timeout, "1..=31", u64::from(t.timeout), 1, 31)?;
        t.validate().map_err(ConfigError::from)?;
        if self.plans.is_empty() {
            return Err(ConfigError::Conflict("no plans"));
        }
        ConfigError::check_range(Setting::Repeat, "1..=100", u64::from(self.repeat), 1, 100)?;
        self.spec
            .validate(&self.all_plans())
            .map_err(ConfigError::from)?;
        self.impairment.validate().map_err(ConfigError::from)
    }

    /// The calibration streams, then the plans, `repeat` times over.
    pub fn all_plans(&self) -> Vec<PlanSpec> {
        let once = self.plans_once();
        let mut v = Vec::with_capacity(once.len() * self.repeat as usize);
        for _ in 0..self.repeat {
            v.extend(once.iter().cloned());
        }
        v
    }

    fn plans_once(&self) -> Vec<PlanSpec> {
        let total = self.spec.shape.total_bytes();
        let large = (CALIB_LARGE as u64).min(total) as u32;
        let tiny_wrs = CALIB_TINY_WRS.min((self.spec.pool_bytes / u64::from(CALIB_TINY)) as u32);
        let mut v = vec![
            PlanSpec {
                name: "calibrate-bandwidth".into(),
                kind: PlanKind::Stream {
                    wr_len: large,
                    wrs: total.div_ceil(u64::from(large)).max(1) as u32,
                },
            },
            PlanSpec {
                name: "calibrate-per-wr".into(),
                kind: PlanKind::Stream {
                    wr_len: CALIB_TINY,
                    wrs: tiny_wrs.max(1),
                },
            },
        ];
        v.extend(self.plans.iter().cloned());
        v
    }
}

/// One plan's row of the report.
#[derive(Debug, Clone, Serialize)]
pub struct PlanRow {
    /// Plan name.
    pub name: String,
    /// Work requests (WRITEs) posted.
    pub wrs: u64,
    /// Block copies before merging.
    pub copies: u64,
    /// Request packets sent (retransmissions included).
    pub packets: u64,
    /// Request packets sent again.
    pub retransmitted: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Bytes per work request.
    pub bytes_per_wr: f64,
    /// Time from the first post to the last completion at the prefill side.
    pub seconds: f64,
    /// Payload rate.
    pub gbps: f64,
    /// `max(bytes / bandwidth, WRs x per-WR cost)` with this run's calibration.
    pub model_seconds: f64,
    /// Which term of the model is larger: `wr` (work-request rate) or `bandwidth`.
    pub bound: String,
    /// The decode side saw every QP's immediate and every byte in place (and nothing else
    /// changed).
    pub verified: bool,
}

/// The report of a `roce kv` run (text via `Display`, JSON via `serde_json`).
#[derive(Debug, Clone, Serialize)]
pub struct KvReport {
    /// Every plan verified.
    pub ok: bool,
    /// One row per plan.
    pub plans: Vec<PlanRow>,
    /// Bandwidth of the large-WRITE calibration stream, Gb/s.
    pub bandwidth_gbps: f64,
    /// Cost of one work request from the tiny-WRITE calibration stream, seconds.
    pub per_wr_seconds: f64,
    /// The calibration streams' own rows.
    pub calibration: Vec<PlanRow>,
    /// Layers.
    pub layers: u32,
    /// Tokens.
    pub tokens: u32,
    /// Bytes of K per token per layer.
    pub kv_bytes: u32,
    /// QPs.
    pub qps: u32,
    /// Path MTU.
    pub mtu: u32,
    /// Runs of each plan (the fastest is reported).
    pub repeat: u32,
    /// What went wrong, per plan.
    pub errors: Vec<String>,
    /// Where the start PSNs, QPNs and keys came from: `"os-random"`, or `"seed N"`.
    pub secrets: String,
    /// How the prefill (client) end received.
    pub link: Link,
}

impl fmt::Display for KvReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "KV push: {} layers x {} tokens x {} B (K and V: {:.1} MiB), {} QP(s), MTU {}",
            self.layers,
            self.tokens,
            self.kv_bytes,
            2.0 * f64::from(self.layers) * f64::from(self.tokens) * f64::from(self.kv_bytes)
                / f64::from(1u32 << 20),
            self.qps,
            self.mtu
        )?;
        writeln!(
            f,
            "calibration (same QPs and sockets, this run): {:.2} Gb/s with 1 MiB WRITEs, {:.2} us per WRITE of 64 B",
            self.bandwidth_gbps,
            self.per_wr_seconds * 1e6
        )?;
        if self.repeat > 1 {
            writeln!(f, "fastest of {} runs of each plan", self.repeat)?;
        }
        writeln!(f, "link: {} (the prefill end's receive side)", self.link)?;
        if self.secrets != "os-random" {
            writeln!(
                f,
                "secrets {} (PSNs, QPNs and keys are predictable)",
                self.secrets
            )?;
        }
        writeln!(
            f,
            "{:<24} {:>8} {:>8} {:>6} {:>11} {:>10} {:>8} {:>11} {:>9}  verified",
            "plan", "WRs", "packets", "retx", "bytes/WR", "time ms", "Gb/s", "model ms", "bound"
        )?;
        for r in &self.plans {
            writeln!(
                f,
                "{:<24} {:>8} {:>8} {:>6} {:>11.0} {:>10.2} {:>8.2} {:>11.2} {:>9}  {}",
                r.name,
                r.wrs,
                r.packets,
                r.retransmitted,
                r.bytes_per_wr,
                r.seconds * 1e3,
                r.gbps,
                r.model_seconds * 1e3,
                r.bound,
                if r.verified { "yes" } else { "NO" }
            )?;
        }
        for e in &self.errors {
            writeln!(f, "error: {e}")?;
        }
        Ok(())
    }
}

/// Bytes all QPs together may have in flight: below the 4 MiB loopback socket buffer, which a
/// wider window overruns (drops, then go-back-N).
const IN_FLIGHT: u64 = 3 << 20;

/// `n` QPs (each with its own send and receive CQ) in INIT. The window is 256 unacknowledged
/// PSNs (1 MiB at MTU 4096: wider than rxe's 128, which caps loopback near 2 Gb/s), less when
/// `n` QPs of that window would exceed [`IN_FLIGHT`].
pub(crate) fn create_kv_qps(
    dev: &mut Device,
    pd: PdHandle,
    n: u32,
    mtu: u32,
) -> Result<Vec<LocalQp>, DriverError> {
    let window = IN_FLIGHT / (u64::from(n.max(1)) * u64::from(mtu.max(256)));
    let caps = QpCaps {
        max_unacked_psns: window.clamp(32, 256) as u32,
        ..QpCaps::default()
    };
    Ok(roce_driver::connect::qps::create_qps(
        dev,
        pd,
        n,
        caps,
        Access::REMOTE_WRITE,
    )?)
}

/// A kv end's [`Side`]: `n` RC QPs as [`create_kv_qps`] sizes them, with `transport`'s
/// attributes, bound on `local` with `impairment` (first QPN, keys and PSNs from `secrets`,
/// `salt`: which end).
fn kv_side(
    secrets: &Secrets,
    salt: u64,
    n: u32,
    transport: ConnectParams,
    local: SocketAddr,
    link: LinkChoice,
    impairment: Impairment,
) -> Result<Side, DriverError> {
    let window = IN_FLIGHT / (u64::from(n.max(1)) * u64::from(transport.mtu.max(256)));
    let req = QpRequest {
        count: n,
        caps: QpCaps {
            max_unacked_psns: window.clamp(32, 256) as u32,
            ..QpCaps::default()
        },
        params: ConnectParams {
            access: Access::REMOTE_WRITE,
            ..transport
        },
        ..QpRequest::default()
    };
    let psns = secrets.start_psns(n, salt)?;
    Side::impaired(secrets.device(salt)?, req, psns, local, link, impairment)
}

/// What the decode side saw, once its client finished.
#[derive(Debug, Clone, Default)]
pub struct KvServerOutcome {
    /// Plans served.
    pub plans: u32,
    /// Plans whose every byte verified.
    pub verified: u32,
    /// Mismatches, per plan.
    pub mismatches: Vec<String>,
}

/// The largest pool a decode server registers unless told otherwise
/// ([`KvServerConfig::max_pool`]): 1 GiB.
pub const DEFAULT_MAX_POOL: u64 = 1 << 30;

/// How a decode server runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvServerConfig {
    /// Impairments of what it receives.
    pub impairment: Impairment,
    /// Where its start PSNs, QPNs and the pool's key come from.
    pub secrets: Secrets,
    /// The largest pool a client may ask for, bytes. The pool's pages are only provided by
    /// the operating system as WRITEs land (and reset between plans by zeroing only what was
    /// written), so this bounds what a client can make the server hold.
    pub max_pool: u64,
    /// How it receives.
    pub link: LinkChoice,
}

impl Default for KvServerConfig {
    fn default() -> Self {
        Self {
            impairment: Impairment::default(),
            secrets: Secrets::OsRandom,
            max_pool: DEFAULT_MAX_POOL,
            link: LinkChoice::Auto,
        }
    }
}

/// A byte count as a person reads it: whole MiB as MiB, anything else exact (a refusal that
/// rounds both figures to "0 MiB" says nothing).
fn bytes_text(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 20 {
        format!("{:.2} MiB ({n} bytes)", n as f64 / f64::from(1 << 20))
    } else {
        format!("{n} bytes")
    }
}

/// Checks a client's hello: the pool within `max_pool`, `qps` QPs as the spec says, the spec
/// and plans valid, the transport settings usable.
pub(crate) fn check_hello(
    spec: &KvSpec,
    plans: &[PlanSpec],
    transport: &ConnectParams,
    max_pool: u64,
    qps: usize,
) -> Result<(), HelloRefused> {
    if spec.pool_bytes > max_pool {
        return Err(HelloRefused::PoolTooBig {
            asked: spec.pool_bytes,
            max: max_pool,
        });
    }
    if qps != spec.qps as usize {
        return Err(HelloRefused::QpCount);
    }
    spec.validate(plans)?;
    ConfigError::check_mtu(transport.mtu)?;
    Ok(transport.validate()?)
}

/// Why a decode server refuses a prefill client's hello: its settings are the client's, so
/// the peer is at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HelloRefused {
    /// A pool larger than this server's `--max-pool`.
    #[error("asked for a pool of {}; this server allows at most {}", bytes_text(*asked), bytes_text(*max))]
    PoolTooBig {
        /// Bytes asked for.
        asked: u64,
        /// The server's bound.
        max: u64,
    },
    /// Another number of QPs than the spec's.
    #[error("QP count differs from the spec")]
    QpCount,
    /// The spec or its plans.
    #[error(transparent)]
    Spec(#[from] KvError),
    /// The path MTU.
    #[error(transparent)]
    Mtu(#[from] ConfigError),
    /// The transport settings.
    #[error(transparent)]
    Transport(#[from] roce_stack::ModifyError),
}

/// A decode server's answer the prefill client refuses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerAnswer {
    /// A pool shorter than the spec's.
    #[error("its pool is {has} bytes, the spec needs {needs}")]
    ShortPool {
        /// The pool's length.
        has: u64,
        /// The spec's pool.
        needs: u64,
    },
    /// The blocks of another plan than the next.
    #[error("blocks of plan {got}, expected {expected}")]
    WrongPlan {
        /// The plan they are for.
        got: u32,
        /// The plan due.
        expected: u32,
    },
    /// Blocks a plan's transfer cannot be built on.
    #[error("plan {plan}: {source}")]
    Plan {
        /// The plan's name.
        plan: String,
        /// Why.
        #[source]
        source: KvError,
    },
}

/// Plan `i` (`plan`) is over at the decode side: `app` checked, counted in `out`; the verdict
/// for the client.
pub(crate) fn plan_verdict(
    app: &mut KvReceiver,
    dev: &Device,
    plan: &PlanSpec,
    i: u32,
    qps: u32,
    out: &mut KvServerOutcome,
) -> KvMsg {
    app.finish(dev);
    let mismatches: Vec<String> = app
        .mismatches()
        .iter()
        .map(|m| format!("{}: {m}", plan.name))
        .collect();
    if !app.complete() && mismatches.is_empty() {
        out.mismatches.push(format!(
            "{}: only {} of {} immediates arrived",
            plan.name,
            app.arrived(),
            qps
        ));
    }
    out.plans += 1;
    if app.complete() {
        out.verified += 1;
    }
    out.mismatches.extend(mismatches.iter().cloned());
    KvMsg::Verified {
        plan: i,
        complete: app.complete(),
        arrived: app.arrived() as u32,
        verified_bytes: app.verified_bytes(),
        mismatches,
    }
}

/// Accepts one prefill client on `listener` and serves its plans as the decode side. Blocking.
pub(crate) fn serve(
    listener: Listener,
    cfg: KvServerConfig,
) -> Result<KvServerOutcome, DriverError> {
    listener.serve(|mut ctl, a| async move {
        let r = serve_kv_client(&mut ctl, a, cfg).await;
        (ctl, r)
    })
}

async fn serve_kv_client(
    ctl: &mut Control,
    a: Accepted,
    server: KvServerConfig,
) -> Result<KvServerOutcome, DriverError> {
    let KvServerConfig {
        impairment,
        secrets,
        max_pool,
        link,
    } = server;
    let Offered { msg, end, .. } = ctl.offered().await?;
    let KvMsg::Hello {
        protocol,
        spec,
        transport,
        plans,
    } = msg
    else {
        return Err(PeerFault::Expected("a kv hello").into());
    };
    check_protocol("kv", protocol, KV_PROTOCOL)?;
    check_hello(&spec, &plans, &transport, max_pool, end.len())
        .map_err(DriverError::peer_invalid)?;
    let local = SocketAddr::new(a.local_ip, a.roce_port);
    let mut side = kv_side(
        &secrets, 0xdec0, spec.qps, transport, local, link, impairment,
    )?;
    // The pool: registered once, for every plan.
    let pool = side.ep.dev.reg_mr(
        side.pd,
        spec.pool_bytes as usize,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let pool_buffer = side
        .ep
        .dev
        .mr(pool)
        .map(RemoteBuffer::of)
        .ok_or(SetupFailure::Gone("the pool region"))?;
    let welcome = KvMsg::Welcome { pool: pool_buffer };
    ctl.answer(&mut side, &end, welcome).await?;
    let Side {
        mut ep, qps: mine, ..
    } = side;
    let recv: Vec<(Qpn, CqHandle)> = mine.iter().map(|q| (q.qpn, q.recv_cq)).collect();
    let mut out = KvServerOutcome::default();
    for (i, plan) in plans.iter().enumerate() {
        let i = i as u32;
        let bad = |e: KvError| AppError::check(format!("plan {}", plan.name), e);
        let blocks = spec.allocate(plan, i).map_err(bad)?;
        let transfer = spec.transfer(plan, i, &blocks).map_err(bad)?;
        let mut app =
            KvReceiver::new(&mut ep.dev, transfer, pool, &recv).map_err(DriverError::from)?;
        ctl.send(&KvMsg::Blocks { plan: i, blocks }).await?;
        let stop = async {
            match ctl.recv().await {
                Ok(KvMsg::Sent { plan }) if plan == i => Ok(()),
                Ok(_) => Err(PeerFault::OutOfTurn("a control message").into()),
                Err(DriverError::Peer(m)) => Err(m.named("client", true).into()),
                Err(e) => Err(e),
            }
        };
        ep.run(&mut app, false, stop, Duration::from_secs(30))
            .await?;
        // Completions that came with the last datagrams.
        let now = ep.now();
        app.poll(&mut ep.dev, now).map_err(DriverError::from)?;
        let verdict = plan_verdict(&mut app, &ep.dev, plan, i, spec.qps, &mut out);
        ctl.send(&verdict).await?;
    }
    Ok(out)
}

/// Connects to a decode server, pushes every plan as the prefill side, and reports.
pub(crate) fn run_client(client: ClientConfig, cfg: &KvConfig) -> Result<KvReport, DriverError> {
    cfg.validate()?;
    runtime()?.block_on(kv_client_async(client, cfg))
}

async fn kv_client_async(client: ClientConfig, cfg: &KvConfig) -> Result<KvReport, DriverError> {
    let (mut ctl, local_ip) = control::connect(client.server, client.bind).await?;
    let spec = cfg.spec;
    let plans = cfg.all_plans();

    let local = SocketAddr::new(local_ip, client.roce_port);
    let mut side = kv_side(
        &cfg.secrets,
        0x9ef1,
        spec.qps,
        cfg.transport,
        local,
        cfg.link,
        cfg.impairment,
    )?;
    let src_len = plans.iter().map(|p| spec.source_len(p)).max().unwrap_or(0);
    let src = side
        .ep
        .dev
        .reg_mr(side.pd, src_len as usize, Access::LOCAL_WRITE);
    let hello = KvMsg::Hello {
        protocol: KV_PROTOCOL,
        spec,
        transport: cfg.transport,
        plans: plans.clone(),
    };
    let KvMsg::Welcome { pool } = ctl.offer(&mut side, QKey(0), hello).await? else {
        return Err(PeerFault::Expected("a kv welcome").into());
    };
    if pool.len < spec.pool_bytes {
        return Err(DriverError::peer_invalid(ServerAnswer::ShortPool {
            has: pool.len,
            needs: spec.pool_bytes,
        }));
    }
    let Side {
        mut ep, qps: mine, ..
    } = side;
    let send: Vec<(Qpn, CqHandle)> = mine.iter().map(|q| (q.qpn, q.send_cq)).collect();
    let mut rows = Vec::new();
    let mut errors = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let i = i as u32;
        let (blocks, got) = match ctl.recv_timeout(Duration::from_secs(30)).await? {
            KvMsg::Blocks { plan, blocks } => (blocks, plan),
            _ => return Err(PeerFault::Expected("the blocks of a plan").into()),
        };
        if got != i {
            return Err(DriverError::peer_invalid(ServerAnswer::WrongPlan {
                got,
                expected: i,
            }));
        }
        let transfer = spec.transfer(plan, i, &blocks).map_err(|source| {
            DriverError::peer_invalid(ServerAnswer::Plan {
                plan: plan.name.clone(),
                source,
            })
        })?;
        let data = transfer.source();
        if let Some(m) = ep.dev.mr_mut(src) {
            m.as_mut_slice()[..data.len()].copy_from_slice(&data);
        }
        let (wrs, copies, bytes) = (transfer.wrs(), transfer.copies, transfer.bytes);
        let mut app = KvSender::new(&ep.dev, transfer, src, &send, pool.va, pool.rkey)
            .map_err(DriverError::from)?;
        let before = ep.dev.stats();
        let started = std::time::Instant::now();
        let stop = ctl.peer_interrupts("server");
        ep.run(&mut app, true, stop, cfg.silence).await?;
        let seconds = started.elapsed().as_secs_f64();
        let after = ep.dev.stats();
        ctl.send(&KvMsg::Sent { plan: i }).await?;
        let (complete, arrived, mismatches) =
            match ctl.recv_timeout(Duration::from_secs(30)).await? {
                KvMsg::Verified {
                    plan,
                    complete,
                    arrived,
                    mismatches,
                    ..
                } if plan == i => (complete, arrived, mismatches),
                _ => return Err(PeerFault::Expected("the verdict of a plan").into()),
            };
        if !complete && mismatches.is_empty() {
            errors.push(format!(
                "{}: {arrived} of {} immediates arrived",
                plan.name, spec.qps
            ));
        }
        errors.extend(mismatches);
        rows.push(plan_row(
            plan,
            (wrs, copies, bytes),
            (&before, &after),
            seconds,
            complete,
        ));
    }
    Ok(kv_report(cfg, rows, errors, ep.link()))
}

/// The row of one plan run by the prefill side: `(wrs, copies, bytes)` of its transfer, the
/// device counters before and after, its time and the decode side's verdict.
pub(crate) fn plan_row(
    plan: &PlanSpec,
    (wrs, copies, bytes): (u64, u64, u64),
    (before, after): (&roce_stack::QpStats, &roce_stack::QpStats),
    seconds: f64,
    verified: bool,
) -> PlanRow {
    PlanRow {
        name: plan.name.clone(),
        wrs,
        copies,
        packets: after.tx_packets - before.tx_packets,
        retransmitted: after.retransmitted_packets - before.retransmitted_packets,
        bytes,
        bytes_per_wr: bytes as f64 / wrs.max(1) as f64,
        seconds,
        gbps: bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
        model_seconds: 0.0,
        bound: String::new(),
        verified,
    }
}

/// The report from every plan's rows (the calibration streams first): the fastest run of each
/// plan, the model from this run's calibration.
pub(crate) fn kv_report(
    cfg: &KvConfig,
    rows: Vec<PlanRow>,
    errors: Vec<String>,
    link: Link,
) -> KvReport {
    let spec = cfg.spec;
    // The fastest run of each plan; verified only if every run verified.
    let mut best: Vec<PlanRow> = Vec::new();
    for r in rows {
        match best.iter_mut().find(|b| b.name == r.name) {
            Some(b) => {
                let verified = b.verified && r.verified;
                if r.seconds < b.seconds {
                    *b = r;
                }
                b.verified = verified;
            }
            None => best.push(r),
        }
    }
    let plans_rows = best.split_off(2);
    let calibration = best;
    let bandwidth_bps = calibration[0].gbps * 1e9;
    let per_wr = calibration[1].seconds / calibration[1].wrs.max(1) as f64;
    let plans_rows: Vec<PlanRow> = plans_rows
        .into_iter()
        .map(|mut r| {
            let bytes_time = r.bytes as f64 * 8.0 / bandwidth_bps.max(1.0);
            let wr_time = r.wrs as f64 * per_wr;
            r.model_seconds = bytes_time.max(wr_time);
            r.bound = if wr_time > bytes_time {
                "wr"
            } else {
                "bandwidth"
            }
            .into();
            r
        })
        .collect();
    KvReport {
        ok: errors.is_empty() && plans_rows.iter().chain(&calibration).all(|r| r.verified),
        plans: plans_rows,
        bandwidth_gbps: calibration[0].gbps,
        per_wr_seconds: per_wr,
        calibration,
        layers: spec.shape.layers,
        tokens: spec.shape.tokens,
        kv_bytes: spec.shape.kv_bytes,
        qps: spec.qps,
        mtu: cfg.transport.mtu,
        repeat: cfg.repeat,
        errors,
        secrets: cfg
            .secrets
            .seed()
            .map_or_else(|| "os-random".into(), |s| format!("seed {s}")),
        link,
    }
}

/// Both ends in one process over loopback: the decode server on its own thread and runtime,
/// the prefill client on the calling thread, at `client_ip`/`server_ip` with UDP port 4791
/// each (4792 for the client when both share an address).
pub(crate) fn loopback(
    client_ip: IpAddr,
    server_ip: IpAddr,
    cfg: &KvConfig,
) -> Result<KvReport, DriverError> {
    cfg.validate()?;
    let server_impairment = Impairment {
        seed: cfg.impairment.seed.wrapping_add(1),
        ..cfg.impairment
    };
    let (secrets, link) = (cfg.secrets, cfg.link);
    in_one_process(
        "roce-kv-decode",
        (server_ip, ROCEV2_UDP_PORT),
        move |listener| {
            serve(
                listener,
                KvServerConfig {
                    impairment: server_impairment,
                    secrets,
                    // The client's own pool, whatever its size: one user runs both ends.
                    max_pool: u64::MAX,
                    link,
                },
            )
        },
        |control| {
            run_client(
                ClientConfig {
                    server: control,
                    bind: Some(client_ip),
                    roce_port: client_roce_port(client_ip, server_ip),
                },
                cfg,
            )
        },
    )
}
