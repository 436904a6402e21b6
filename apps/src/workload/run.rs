//! The verified workload over real sockets: `roce server` (the responder), `roce client` (the
//! requester) and `roce loopback` (both, in one process on two threads).
//!
//! The exchange on the control channel, in the workload's own messages (`WorkloadMsg`) inside
//! the layer's handshake ([`roce_driver::connect::handshake`], which carries and connects the
//! QPs): the client offers a `hello` (the spec, the connection settings), the server answers
//! `welcome` (each QP's responder block), the client says `ready` and runs; when it is done it
//! says `done`, and the server answers with a `summary` of what it verified.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::control::{self, Control, ANSWER_TIMEOUT};
use roce_driver::connect::handshake::Offered;
use roce_driver::connect::qps::{check_protocol, RemoteBuffer, ALL_REMOTE};
use roce_driver::connect::{in_one_process, Accepted, ClientConfig, Listener};
use roce_driver::connect::{QpRequest, Side as ConnSide};
use roce_driver::endpoint::{Endpoint, LoopStats, Tap, Taps};
use roce_driver::impair::{ImpairStats, Impairment};
use roce_driver::Application;
use roce_driver::{runtime, DriverError, Link, LinkChoice, PeerFault, Secrets};
use roce_stack::{CcConfig, ConnectParams, CqHandle, QpCaps, QpStats};
use serde::{Deserialize, Serialize};

use super::responder::Delivery;
use super::{Mismatch, Plan, Report, Requester, Responder, Tally, Transport, WorkloadSpec};
use crate::{Combination, ConfigError, Setting};

/// Version of the workload's control protocol (4: the spec lists the QPs' transports).
const PROTOCOL: u32 = 5;

/// How long a server waits, after its client finished, for UC and UD messages still on their
/// way.
const LOSSY_DRAIN: Duration = Duration::from_millis(200);

/// The Q_Key of a run's UD QPs: drawn by the client from its secrets (so that nobody off the
/// path can address a datagram to them), sent to the server in its hello; the high bit clear
/// (a set one would name a controlled Q_Key, IBTA Vol 1 §10.2.4).
fn ud_qkey(secrets: &Secrets) -> Result<roce_proto::QKey, DriverError> {
    Ok(secrets.qkey(0)?)
}

/// What a run does and with which transport settings; the client sends it to the server.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The workload.
    pub spec: WorkloadSpec,
    /// The connection settings of every QP (MTU, timeout, retries, RNR timer, READ/atomic
    /// depth); the per-QP fields are filled in by the handshake.
    pub transport: ConnectParams,
    /// Impairments applied to what this end receives.
    pub impairment: Impairment,
    /// Congestion control.
    pub cc: CcConfig,
    /// Line rate the congestion control clamps to, bits/s.
    pub line_rate_bps: u64,
    /// How long an end waits with work pending and nothing received before giving up.
    pub silence: Duration,
    /// Where the start PSNs, QPNs and memory keys come from (in a loopback run, both ends').
    pub secrets: Secrets,
    /// How this end receives (in a loopback run, both ends).
    pub link: LinkChoice,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            spec: WorkloadSpec::default(),
            transport: ConnectParams::default(),
            impairment: Impairment::default(),
            cc: CcConfig::None,
            line_rate_bps: 100_000_000_000,
            silence: Duration::from_secs(5),
            secrets: Secrets::OsRandom,
            link: LinkChoice::Auto,
        }
    }
}

impl RunConfig {
    /// Checks what a user (or a peer) can get wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let t = &self.transport;
        ConfigError::check_mtu(t.mtu)?;
        ConfigError::check_range(Setting::Timeout, "1..=31", u64::from(t.timeout), 1, 31)?;
        ConfigError::check_range(
            Setting::MaxRdAtomic,
            "1..=128",
            u64::from(t.max_rd_atomic),
            1,
            128,
        )?;
        t.validate().map_err(ConfigError::from)?;
        self.spec.validate()?;
        if self.spec.transports.contains(&Transport::Ud) && self.spec.datagram_max > t.mtu {
            return Err(Combination::DatagramOverMtu.into());
        }
        self.impairment.validate().map_err(ConfigError::from)
    }
}

/// The part of a run each end reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Side {
    pub(crate) mismatches: Vec<String>,
    pub(crate) verified_bytes: u64,
    pub(crate) stats: QpStats,
    pub(crate) impairment: ImpairStats,
    pub(crate) loops: LoopStats,
    /// Everything this end was to verify verified (requester: every QP's final marker
    /// completed; responder: every QP's memory matched the model at its final marker).
    pub(crate) complete: bool,
    /// How this end received.
    pub(crate) link: Option<Link>,
    /// What the link dropped before the device: not whole RoCEv2 datagrams for this end, and
    /// datagrams lost to a full receive ring (packet link).
    #[serde(default)]
    pub(crate) link_malformed: u64,
    #[serde(default)]
    pub(crate) ring_dropped: u64,
    /// How this end's datagrams left (packet socket or UDP sockets).
    #[serde(default)]
    pub(crate) sent: roce_driver::socket::SentCounts,
    /// What each UC and UD QP delivered (the responder's view).
    #[serde(default)]
    pub(crate) deliveries: Vec<Delivery>,
}

impl Side {
    /// What an end reports after its run.
    pub(crate) fn of(
        mismatches: &[Mismatch],
        tally: &Tally,
        ep: &Endpoint,
        complete: bool,
    ) -> Self {
        let (link_malformed, ring_dropped) = ep.link_drops();
        Self {
            link_malformed,
            ring_dropped,
            link: Some(ep.link()),
            sent: ep.sent_counts(),
            complete: complete && mismatches.is_empty(),
            mismatches: mismatches.iter().map(ToString::to_string).collect(),
            verified_bytes: tally.verified_bytes,
            stats: ep.dev.stats(),
            impairment: ep.impair_stats(),
            loops: ep.stats,
            deliveries: Vec::new(),
        }
    }
}

/// What a workload end asks of the connection layer: QP `q` of transport
/// `spec.transport_of(q)` (UD with `qkey`), `cfg`'s attributes, every remote access.
fn workload_request(cfg: &RunConfig, qkey: roce_proto::QKey) -> (QpRequest, Vec<Transport>) {
    let kinds: Vec<Transport> = (0..cfg.spec.qps)
        .map(|q| cfg.spec.transport_of(q))
        .collect();
    let req = QpRequest {
        service: kinds.first().copied().unwrap_or_default(),
        qkey,
        count: cfg.spec.qps,
        caps: QpCaps::default(),
        srq: None,
        params: ConnectParams {
            access: ALL_REMOTE,
            ..cfg.transport
        },
    };
    (req, kinds)
}

/// A workload end's [`ConnSide`] on `local`, bound with `cfg`'s impairment (first QPN, keys and
/// PSNs from `secrets`, `salt`: which end).
fn workload_side(
    cfg: &RunConfig,
    qkey: roce_proto::QKey,
    secrets: &Secrets,
    salt: u64,
    local: SocketAddr,
    link: LinkChoice,
) -> Result<ConnSide, DriverError> {
    let (req, kinds) = workload_request(cfg, qkey);
    let psns = secrets.start_psns(cfg.spec.qps, salt)?;
    ConnSide::mixed(
        secrets.device(salt)?,
        req,
        &kinds,
        psns,
        local,
        link,
        cfg.impairment,
    )
}

/// Client → server: what to run.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    protocol: u32,
    spec: WorkloadSpec,
    transport: ConnectParams,
    cc: CcConfig,
    line_rate_bps: u64,
}

/// The workload's control messages.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum WorkloadMsg {
    /// Client → server: what to run.
    Hello(Box<Hello>),
    /// Server → client: each QP's responder block.
    Welcome { blocks: Vec<RemoteBuffer> },
    /// Server → client, after the client's `done`: what the server saw.
    Summary(Box<Side>),
}

/// What the server saw, once its client finished.
#[derive(Debug, Clone)]
pub struct ServerOutcome {
    /// Every QP's memory verified at its final marker, with no mismatch: what the server
    /// was asked to verify verified (a client that stops early leaves this `false`).
    pub complete: bool,
    /// Mismatches found by the responder.
    pub mismatches: Vec<String>,
    /// Bytes verified by the responder.
    pub verified_bytes: u64,
    /// Device counters.
    pub stats: QpStats,
    /// How the server received.
    pub link: Option<Link>,
    /// The client's address, where the exchange names it (the CM's).
    pub peer: Option<IpAddr>,
}

/// Accepts one client on `listener` and serves its workload as the responder. Blocking.
pub(crate) fn serve(
    listener: Listener,
    impairment: Impairment,
    secrets: Secrets,
    link: LinkChoice,
    tap: Option<Tap>,
) -> Result<ServerOutcome, DriverError> {
    listener.serve(|mut ctl, a| async move {
        let r = serve_client(&mut ctl, a, impairment, secrets, link, tap).await;
        (ctl, r)
    })
}

async fn serve_client(
    ctl: &mut Control,
    a: Accepted,
    impairment: Impairment,
    secrets: Secrets,
    link: LinkChoice,
    tap: Option<Tap>,
) -> Result<ServerOutcome, DriverError> {
    let Offered { msg, qkey, end } = ctl.offered().await?;
    let WorkloadMsg::Hello(hello) = msg else {
        return Err(DriverError::from(PeerFault::Expected("a hello")));
    };
    let Hello {
        protocol,
        spec,
        transport,
        cc,
        line_rate_bps,
    } = *hello;
    check_protocol("workload", protocol, PROTOCOL)?;
    let cfg = RunConfig {
        spec,
        transport,
        impairment,
        cc,
        line_rate_bps,
        ..RunConfig::default()
    };
    cfg.validate().map_err(DriverError::peer_invalid)?;
    if end.len() != cfg.spec.qps as usize {
        return Err(PeerFault::Count {
            what: "QPs",
            announced: end.len(),
            here: cfg.spec.qps as usize,
        }
        .into());
    }
    let local = SocketAddr::new(a.local_ip, a.roce_port);
    let mut side = workload_side(&cfg, qkey, &secrets, 0x5e7e, local, link)?;
    let plan = Plan::new(&cfg.spec);
    let recv: Vec<(roce_proto::Qpn, CqHandle)> =
        side.qps.iter().map(|q| (q.qpn, q.recv_cq)).collect();
    let (mut responder, blocks) =
        Responder::new(&mut side.ep.dev, side.pd, plan, &recv).map_err(DriverError::from)?;
    ctl.answer(&mut side, &end, WorkloadMsg::Welcome { blocks })
        .await?;
    side.set_congestion_control(cfg.cc, cfg.line_rate_bps);
    let ConnSide { mut ep, .. } = side;
    if let Some(t) = tap {
        ep.set_tap(t);
    }
    ctl.expect_ready().await?;
    // Serve until the client says it is done (or vanishes).
    let stop = async { ctl.peer_done("client").await.map(|_| ()) };
    let silence = cfg.silence.max(Duration::from_secs(30));
    let mut result = ep.run(&mut responder, false, stop, silence).await;
    if result.is_ok() && cfg.spec.any_lossy() {
        // The client is done once its last UC or UD message left; what is still on its way
        // (the final markers) gets a moment to arrive.
        result = ep
            .run(
                &mut responder,
                true,
                async {
                    tokio::time::sleep(LOSSY_DRAIN).await;
                    Ok(())
                },
                silence,
            )
            .await;
    }
    let mut side = Side::of(
        responder.mismatches(),
        responder.tally(),
        &ep,
        responder.verified(),
    );
    side.deliveries = responder.deliveries();
    result?;
    ctl.send(&WorkloadMsg::Summary(Box::new(side.clone())))
        .await?;
    Ok(ServerOutcome {
        link: side.link,
        complete: side.complete,
        mismatches: side.mismatches,
        verified_bytes: side.verified_bytes,
        stats: side.stats,
        peer: Some(a.peer.ip()),
    })
}

/// Connects to a server, runs the workload as the requester, and reports.
pub(crate) fn run_client(
    client: ClientConfig,
    cfg: &RunConfig,
    tap: Option<Tap>,
) -> Result<Report, DriverError> {
    cfg.validate()?;
    runtime()?.block_on(client_async(client, cfg, tap))
}

async fn client_async(
    client: ClientConfig,
    cfg: &RunConfig,
    tap: Option<Tap>,
) -> Result<Report, DriverError> {
    let (mut ctl, local_ip) = control::connect(client.server, client.bind).await?;
    let qkey = ud_qkey(&cfg.secrets)?;
    let local = SocketAddr::new(local_ip, client.roce_port);
    let mut side = workload_side(cfg, qkey, &cfg.secrets, 0xc11e, local, cfg.link)?;
    let hello = WorkloadMsg::Hello(Box::new(Hello {
        protocol: PROTOCOL,
        spec: cfg.spec.clone(),
        transport: cfg.transport,
        cc: cfg.cc,
        line_rate_bps: cfg.line_rate_bps,
    }));
    let WorkloadMsg::Welcome { blocks } = ctl.offer(&mut side, qkey, hello).await? else {
        return Err(DriverError::from(PeerFault::Expected("a welcome")));
    };
    if blocks.len() != side.qps.len() {
        return Err(PeerFault::Count {
            what: "blocks (one a QP)",
            announced: blocks.len(),
            here: side.qps.len(),
        }
        .into());
    }
    side.set_congestion_control(cfg.cc, cfg.line_rate_bps);
    let plan = Plan::new(&cfg.spec);
    let send: Vec<(roce_proto::Qpn, CqHandle)> =
        side.qps.iter().map(|q| (q.qpn, q.send_cq)).collect();
    let mut requester = Requester::new(&mut side.ep.dev, side.pd, plan, &send, &blocks);
    for (q, ah) in side.address_handles() {
        requester.set_address_handle(q, ah);
    }
    let ConnSide { mut ep, .. } = side;
    if let Some(t) = tap {
        ep.set_tap(t);
    }
    ctl.ready().await?;
    let started = std::time::Instant::now();
    let stop = ctl.peer_interrupts("server");
    // UC and UD are never acknowledged: the server saying nothing on RoCE is no sign it is
    // gone (the control connection is: its loss stops the run).
    let silence = if cfg.spec.any_lossy() {
        cfg.silence.max(Duration::from_secs(3600))
    } else {
        cfg.silence
    };
    let result = ep.run(&mut requester, true, stop, silence).await;
    let seconds = started.elapsed().as_secs_f64();
    let mine_side = Side::of(
        requester.mismatches(),
        requester.tally(),
        &ep,
        requester.done(),
    );
    // When this end found the failure (a QP in error, wrong data), that is the root cause:
    // it leads the report, and what went wrong afterwards (the server silent too, the
    // control connection gone) follows it instead of hiding it.
    let report =
        |server: &Side| Report::new(requester.tally(), &mine_side, server, seconds, cfg.secrets);
    let after_failure = |e: DriverError| {
        if mine_side.mismatches.is_empty() {
            return Err(e);
        }
        let mut r = report(&Side::default());
        r.errors.push(format!("then: {e}"));
        r.ok = false;
        Ok(r)
    };
    if let Err(e) = result {
        return after_failure(e);
    }
    if let Err(e) = ctl.done(mine_side.mismatches.is_empty()).await {
        return after_failure(e);
    }
    match ctl.recv_timeout(ANSWER_TIMEOUT).await {
        Ok(WorkloadMsg::Summary(s)) => Ok(report(&s)),
        Ok(_) => after_failure(DriverError::from(PeerFault::Expected("a summary"))),
        Err(e) => after_failure(e),
    }
}

/// [`loopback`] between given local addresses and RoCE UDP ports (client, server).
pub(crate) fn loopback_between(
    cfg: &RunConfig,
    client: (IpAddr, u16),
    server: (IpAddr, u16),
    taps: Taps,
) -> Result<Report, DriverError> {
    cfg.validate()?;
    let Taps {
        client: tap,
        server: server_tap,
    } = taps;
    let server_impairment = Impairment {
        seed: cfg.impairment.seed.wrapping_add(1),
        ..cfg.impairment
    };
    let (secrets, link) = (cfg.secrets, cfg.link);
    in_one_process(
        "roce-server",
        server,
        move |listener| serve(listener, server_impairment, secrets, link, server_tap),
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
