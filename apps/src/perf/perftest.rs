//! `roce perf --perftest`: perftest's exchange, so that a stock `ib_write_bw`, `ib_send_lat`,
//! ... on a host with an RDMA NIC or rxe can be the other end, over TCP (port 18515) or, with
//! `--cm`, over perftest's own RDMA-CM connection with the data QPs connected through
//! RDMA-CM (`-R`). The channel and its messages are the connection layer's
//! ([`roce_driver::connect::perftest`]); this module is the test around them: which key
//! records each of perftest 4.5's tests exchanges before and after it (`*_bw.c`, `*_lat.c`),
//! who measures, the reports. In every step the client writes first.
//!
//! Each side parses its own command line: give both the same test, size and iterations.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::perftest::{Report, Session, PAGE, STEP_TIMEOUT};
use roce_driver::connect::qps::LocalQp;
use roce_driver::connect::AfterGivingUp;
use roce_driver::connect::{check_peer_gid, gid_of, QpRequest, Side};
use roce_driver::{runtime, DriverError, LinkChoice, PeerFault, Secrets, SetupFailure};
use roce_proto::perftest::Dest;
use roce_proto::rdma_cm::RDMA_UDP_QKEY;
use roce_proto::{Psn, QKey, Qpn, RKey, ROCEV2_UDP_PORT};
use roce_stack::{Access, ConnectParams, RemoteAddr, Service};

pub use roce_driver::connect::perftest::{ANNOUNCED_VERSION, MB_PER_GBIT, PORT};

use super::app::spin;
use super::{PerfApp, PerfResult, PerfSpec, PerfTest};

fn err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> DriverError {
    PeerFault::step(format!("perftest exchange, {what}"), e).into()
}

/// How a perftest-speaking end reports, and where its peer's GID may point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PerftestOpts {
    /// `--report_gbits`: bandwidth in Gb/s instead of MB/s.
    pub gbits: bool,
    /// The peer's RoCE address, when the exchange reaches it at another (a management
    /// network): its GID must name this address. `None`: the exchange's own address (an
    /// IPv6 GID over an IPv4 exchange, the stock tools' case, needs nothing).
    pub peer_roce: Option<IpAddr>,
}

/// Which channel the exchange runs on.
#[derive(Debug)]
pub enum Channel {
    /// perftest's TCP connection, accepted or connected.
    Tcp(tokio::net::TcpStream),
    /// perftest's `-R`: its RDMA-CM connection, toward `server` (its RDMA-CM port) as the
    /// client, or listening on `port` as the server; the data QPs connected through RDMA-CM.
    Cm {
        /// The server, on the client's side.
        server: Option<SocketAddr>,
        /// The RDMA-CM port a server listens on.
        port: u16,
    },
}

/// The order of perftest's records around a test (perftest 4.5's `*_bw.c`/`*_lat.c`; every
/// step one key record each way, client first). With `-a` (`RUN_ALL`: sizes 2 B to 8 MiB,
/// the same QPs) a SEND test has a record before each size (the receiver has posted its
/// receives) and, for bandwidth, one after it; the other tests run their sizes back to back,
/// and a bandwidth test reports only the last.
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
    /// `ib_send_lat`: both sides measure the ping-pong (the server answers, and ends after
    /// its count of answers).
    send_lat: bool,
    /// `ib_send_bw -a`: one more record after each size (the receiver counted it).
    size_end: bool,
}

impl Plan {
    fn of(spec: &PerfSpec, sweep: bool) -> Self {
        let send = spec.test == PerfTest::Send;
        Self {
            lead: spec.lat && !send,
            send,
            reports: !spec.lat && !send,
            write_lat: spec.lat && spec.test == PerfTest::Write,
            send_lat: spec.lat && send,
            size_end: sweep && send && !spec.lat,
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

/// The peer's address from its key record, refused unless it is a unicast address and,
/// when of one family, the address the exchange came from (`control`: the TCP connection's
/// peer), or the one the user named (`peer_roce`, for an exchange over a management
/// network): [`check_peer_gid`]. An IPv6 GID over an IPv4 exchange (perftest 4.5's
/// exchange is IPv4 only) is taken.
fn checked_peer(
    d: &Dest,
    control: Option<IpAddr>,
    peer_roce: Option<IpAddr>,
) -> Result<IpAddr, DriverError> {
    check_peer_gid(
        d.gid,
        peer_roce.or(control),
        "give it -x, its RoCEv2 GID index",
    )
    .map_err(|e| err("keys", e))
}

fn report_of(r: &PerfResult) -> Report {
    Report {
        size: r.size,
        iterations: r.iterations,
        peak_gbps: r.bw_peak_gbps.unwrap_or(0.0),
        avg_gbps: r.bw_avg_gbps.unwrap_or(0.0),
        rate_mpps: r.msg_rate_mpps.unwrap_or(0.0),
    }
}

/// Runs one perftest-compatible test over `channel`, as the client (the side given a host)
/// or the server. `local` is the address of this side's RoCE socket (UDP 4791); `ready` is
/// called once a server listens (RDMA-CM; over TCP the caller's listener is open already).
/// The peer's GID must be unicast and name the host the exchange came from ([`roce_driver::connect::PeerGid`],
/// [`PerftestOpts::peer_roce`]).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run_session(
    channel: Channel,
    client: bool,
    specs: &[PerfSpec],
    local: IpAddr,
    secrets: Secrets,
    link: LinkChoice,
    opts: PerftestOpts,
    ready: impl FnOnce(),
) -> Result<(Vec<PerfResult>, Session), DriverError> {
    // Both ends check the peer's GID against where the exchange came from: a key record
    // may not aim this end's traffic at a third host.
    let control = match &channel {
        Channel::Tcp(t) => t.peer_addr().ok().map(|a| a.ip()),
        Channel::Cm { .. } => None,
    };
    let gbits = opts.gbits;
    let spec = specs
        .first()
        .ok_or(crate::ConfigError::Conflict("no test to run"))?;
    let sweep = specs.len() > 1;
    let largest = specs.iter().map(|s| s.msg_size()).max().unwrap_or(0);
    let salt = if client { 0xc11e } else { 0x5e7e };
    let cm = matches!(channel, Channel::Cm { .. });
    let req = qp_request(spec, cm);
    let psns = secrets.start_psns(spec.nqps(), salt)?;
    // The connection layer binds the link before the exchange: a peer that starts sending
    // the moment it reads the last key record finds the socket (or the packet ring) open,
    // and its first window waits there until the loop runs.
    let mut side = Side::new(
        secrets.device(salt)?,
        req,
        psns,
        SocketAddr::new(local, ROCEV2_UDP_PORT),
        link,
    )?;
    let mut s = match channel {
        Channel::Tcp(tcp) => Session::tcp(tcp, client),
        Channel::Cm { server, port } => {
            Session::over_rdma_cm(&mut side, &secrets, salt, server, port, spec.lat, ready).await?
        }
    };
    let mtu = s.negotiate(&mut side.ep, spec.mtu).await?;
    side.request_mut().params.mtu = mtu;
    if cm {
        // -R: the data QPs through RDMA-CM, between two all-zero records.
        s.connect_data(&mut side).await?;
    }
    let dev = &mut side.ep.dev;
    // The region covers what a stock client cycles through: at least two pages, and the
    // (largest) size.
    let len = (largest as usize).max(2 * PAGE as usize);
    let src = dev.reg_mr(side.pd, len, Access::LOCAL_WRITE);
    let dst = dev.reg_mr(
        side.pd,
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    );
    let (rkey, vaddr) = dev
        .mr(dst)
        .map(|m| (m.rkey(), m.va()))
        .ok_or(SetupFailure::Gone("the test's region"))?;
    let mine: Vec<Dest> = side
        .qps
        .iter()
        .zip(&side.psns)
        .map(|(q, &p)| dest(q, p, spec.outs, rkey, vaddr, local))
        .collect();
    let plan = Plan::of(spec, sweep);
    let ep = &mut side.ep;
    // Latency tests open with one more record each way (`ctx_hand_shake` before the keys).
    if plan.lead {
        s.keys(ep, "opening record", &mine[0]).await?;
    }
    let mut peers = Vec::new();
    for m in &mine {
        peers.push(s.keys(ep, "keys", m).await?);
    }
    if !cm {
        let peer = checked_peer(&peers[0], control, opts.peer_roce)?;
        // As many READs/atomics outstanding as the peer's responder takes.
        side.request_mut().params.max_rd_atomic = peers[0].out_reads.clamp(1, 128) as u8;
        let to: Vec<(Qpn, Psn)> = peers
            .iter()
            .map(|p| (Qpn(p.qpn), Psn::new(p.psn)))
            .collect();
        // Connected after the first records, as perftest's `ctx_connect`.
        side.connect(&to, peer)?;
    }
    let remote = RemoteAddr {
        va: peers[0].vaddr,
        rkey: RKey(peers[0].rkey),
    };
    // The sizes both sides run: a UD sweep stops at the path MTU, as perftest's.
    let specs: Vec<PerfSpec> = specs
        .iter()
        .map(|s| PerfSpec { mtu, ..*s })
        .filter(|s| s.service != Service::Ud || s.size <= u64::from(mtu) || !sweep)
        .collect();
    let spec = specs[0];
    let Side {
        mut ep, qps, ahs, ..
    } = side;
    // Receives (a SEND test's) are posted here, before the records that say the test starts.
    // ib_write_lat: perftest's server writes first, so it is the application's active side;
    // both measure.
    let active = if plan.write_lat { !client } else { client };
    let mut app = PerfApp::with_recv_len(
        &mut ep.dev,
        spec,
        active,
        &qps,
        (src, dst),
        remote,
        largest as u32,
    )
    .map_err(DriverError::from)?;
    if plan.write_lat || plan.send_lat {
        app.set_answer_measures();
    }
    if spec.service == Service::Ud {
        app.set_ud_peers(ahs);
    }
    if plan.send {
        s.keys(&mut ep, "record after connecting", &mine[0]).await?;
    }
    for m in &mine {
        s.keys(&mut ep, "keys again", m).await?;
    }
    s.keys(&mut ep, "keys after RTR", &mine[0]).await?;
    ep.set_busy_poll(spin(&spec));
    let mut results = measure(&mut s, &mut ep, app, &specs, plan, &mine[0], client, gbits).await?;
    s.close(&mut ep).await?;
    for r in &mut results {
        r.link = Some(ep.link().name());
        r.sent = Some(ep.sent_counts());
    }
    Ok((results, s))
}

/// perftest's fixed Q_Key (`DEF_QKEY`): what a stock tool's UD QPs take. Known to everyone,
/// so only for `--perftest`; roce's own runs draw theirs ([`Secrets::qkey`]).
const PERFTEST_QKEY: u32 = 0x1111_1111;

/// The QPs of `spec` as perftest connects them: `-c` RC, UC, or UD with its Q_Key 0x11111111
/// (`DEF_QKEY`), or over rdma_cm (`cm`) RDMA-CM's (`RDMA_UDP_QKEY`); timeout 14, 7 retries,
/// 7 RNR retries and RNR timer 12 as perftest's defaults; `--outs` READs/atomics each way.
fn qp_request(spec: &PerfSpec, cm: bool) -> QpRequest {
    let qkey = QKey(if cm { RDMA_UDP_QKEY } else { PERFTEST_QKEY });
    let base = super::run::perf_request(spec, qkey);
    QpRequest {
        qkey,
        params: ConnectParams {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            ..base.params
        },
        ..base
    }
}

/// How long a serving side waits for the record that ends a test: the test's own length
/// (its `-D`, or its messages at a floor of 1 ms each or 100 Mb/s, whichever is slower; a
/// `-D` run's messages are bounded by its duration) plus [`STEP_TIMEOUT`], the margin every
/// other step of the exchange has. A client that goes silent after the keys holds the
/// server that long, not an hour.
fn serve_limit(spec: &PerfSpec) -> Duration {
    let length = match spec.duration_ms {
        Some(ms) => Duration::from_millis(ms),
        None => {
            let per_message_ns = 1_000_000u64.max(spec.size.saturating_mul(80));
            Duration::from_nanos(spec.iters.saturating_mul(per_message_ns))
        }
    };
    length.saturating_add(STEP_TIMEOUT)
}

/// The test, after the key records: each size run to its end by the side that measures (the
/// client; both sides of a ping-pong), with the records perftest exchanges around each size
/// and after the last ([`Plan`]); or, on a serving side, served until the client's record
/// that ends it. Returns a result per size (a bandwidth server: the client's report).
#[allow(clippy::too_many_arguments)]
async fn measure(
    s: &mut Session,
    ep: &mut roce_driver::Endpoint,
    mut app: PerfApp,
    specs: &[PerfSpec],
    plan: Plan,
    mine: &Dest,
    client: bool,
    gbits: bool,
) -> Result<Vec<PerfResult>, DriverError> {
    let mut results = Vec::with_capacity(specs.len());
    // The side that measures runs each size to its end: the client, and both sides of a
    // ping-pong (which end on their own counts).
    let measures = client || plan.write_lat || plan.send_lat;
    if measures || plan.size_end {
        for (k, spec_k) in specs.iter().enumerate() {
            if k > 0 {
                app = app.next_size(*spec_k);
                if plan.send {
                    // The receiver posted this size's receives (they stay from the first).
                    s.keys(ep, "record before the next size", mine).await?;
                }
            }
            if measures {
                s.run_test(ep, &mut app).await?;
            } else {
                // ib_send_bw -a, the receiving server: until the client's end of this size.
                s.serve_test(
                    ep,
                    &mut app,
                    "record after the size",
                    mine,
                    serve_limit(spec_k),
                )
                .await?;
            }
            let mut r = app.result();
            r.retransmitted_packets = ep.dev.stats().retransmitted_packets;
            if measures && plan.size_end {
                s.keys(ep, "record after the size", mine).await?;
            }
            results.push(r);
        }
        if plan.reports {
            s.keys(ep, "keys at the end of the test", mine).await?;
            if let Some(last) = results.last() {
                s.reports(ep, Some(&report_of(last)), gbits).await?;
            }
        }
        if !plan.write_lat {
            s.closing_exchange();
            s.keys(ep, "closing keys", mine).await?;
        }
    } else {
        // Serve (ACK the writes, answer the reads, receive the SENDs) until the client's
        // next record: the end of the test, or its close.
        let what = if plan.reports {
            "keys at the end of the test"
        } else {
            s.closing_exchange();
            "closing keys"
        };
        s.serve_test(ep, &mut app, what, mine, serve_limit(&specs[0]))
            .await?;
        let mut r = app.result();
        if plan.reports {
            let peer = s.reports(ep, None, gbits).await?.checked()?;
            s.closing_exchange();
            s.keys(ep, "closing keys", mine).await?;
            // The server measures nothing: its figures are the client's.
            r.size = peer.size;
            r.iterations = peer.iterations;
            r.bw_peak_gbps = Some(peer.peak_gbps);
            r.bw_avg_gbps = Some(peer.avg_gbps);
            r.msg_rate_mpps = Some(peer.rate_mpps);
        }
        r.retransmitted_packets = ep.dev.stats().retransmitted_packets;
        results.push(r);
    }
    Ok(results)
}

/// `roce perf --perftest --server`: waits for one perftest client on `bind:port` (TCP, or
/// with `cm` RDMA-CM) and serves its test, its RoCE socket on `bind` (UDP 4791; `bind` must
/// be the address the client reaches). Returns the client's figures (a SEND or latency test:
/// this side's), one per size.
#[allow(clippy::too_many_arguments)]
pub(crate) fn serve_perftest(
    bind: IpAddr,
    port: u16,
    cm: bool,
    specs: &[PerfSpec],
    secrets: Secrets,
    link: LinkChoice,
    opts: PerftestOpts,
    after: AfterGivingUp,
    ready: impl FnOnce(),
) -> Result<Vec<PerfResult>, DriverError> {
    for s in specs {
        s.validate()?;
    }
    if cm && bind.is_unspecified() {
        return Err(crate::Combination::PerftestCmServerNeedsBind.into());
    }
    runtime()?.block_on(async move {
        let mut ready = Some(ready);
        let mut said = || {
            if let Some(r) = ready.take() {
                r();
            }
        };
        // TCP: the listener stays open across clients, as the next waits in its backlog.
        let door = match cm {
            false => Some(roce_driver::connect::TcpDoor::bind(bind, port).await?),
            true => None,
        };
        // A client that broke the exchange or the test costs the server that client.
        if let Some(door) = door {
            said();
            // No overall wait: a server waits for its client, as perftest's does.
            return door
                .serve("roce perf", after, None, |tcp| async move {
                    let local = tcp
                        .local_addr()
                        .map_err(roce_driver::setup("the control connection's address"))?
                        .ip();
                    let ch = Channel::Tcp(tcp);
                    let (r, _) =
                        run_session(ch, false, specs, local, secrets, link, opts, || {}).await?;
                    Ok(r)
                })
                .await;
        }
        // Over RDMA-CM the session listens again itself for a set-up it gave up; a client
        // that broke the exchange once it began costs the server that client here.
        loop {
            let ch = Channel::Cm { server: None, port };
            match run_session(ch, false, specs, bind, secrets, link, opts, &mut said).await {
                Ok((r, _)) => return Ok(r),
                Err(e) => after.tolerate(e, "roce perf", None)?,
            }
        }
    })
}

/// `roce perf --perftest --client HOST`: connects to a perftest server (stock `ib_write_bw`
/// with no host argument, or `roce perf --perftest --server`), over TCP or with `cm`
/// RDMA-CM (then `bind`, this side's address, is needed), and runs the test.
pub(crate) fn run_perftest_client(
    server: SocketAddr,
    bind: Option<IpAddr>,
    cm: bool,
    specs: &[PerfSpec],
    secrets: Secrets,
    link: LinkChoice,
    opts: PerftestOpts,
) -> Result<Vec<PerfResult>, DriverError> {
    for s in specs {
        s.validate()?;
    }
    runtime()?.block_on(async move {
        if cm {
            let local = bind.ok_or(crate::Combination::PerftestCmClientNeedsBind)?;
            let ch = Channel::Cm {
                server: Some(server),
                port: server.port(),
            };
            let (r, _) = run_session(ch, true, specs, local, secrets, link, opts, || {}).await?;
            return Ok(r);
        }
        let tcp = tokio::time::timeout(
            Duration::from_secs(10),
            roce_driver::connect::tcp_connect(server, bind),
        )
        .await
        .map_err(|_| SetupFailure::Unreachable(server))??;
        // The RoCE address is `--bind`'s (it may be IPv6 while perftest's exchange listens
        // on IPv4 only), else the exchange's own.
        let local = match bind.filter(|ip| !ip.is_unspecified()) {
            Some(ip) => ip,
            None => tcp
                .local_addr()
                .map_err(roce_driver::setup("the control connection's address"))?
                .ip(),
        };
        let (r, _) = run_session(
            Channel::Tcp(tcp),
            true,
            specs,
            local,
            secrets,
            link,
            opts,
            || {},
        )
        .await?;
        Ok(r)
    })
}
