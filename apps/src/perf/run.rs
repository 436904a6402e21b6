//! A perf run over sockets: the client offers each measurement in turn (a `hello` in the
//! layer's handshake, [`roce_driver::connect::handshake`]), the server sets up its end and
//! answers `welcome`, the client says `ready`, measures, says `done`, and the server answers
//! with a `summary`; `bye` ends the session. A UDP baseline is asked for with `baseline`.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::control::{self, Control, ANSWER_TIMEOUT};
use roce_driver::connect::handshake::{Offered, Turn};
use roce_driver::connect::qps::{check_protocol, RemoteBuffer, ALL_REMOTE};
use roce_driver::connect::{client_roce_port, in_one_process, Accepted, ClientConfig, Listener};
use roce_driver::connect::{QpRequest, Side};
use roce_driver::{runtime, DriverError, LinkChoice, PeerFault, Secrets};
use roce_proto::{QKey, ROCEV2_UDP_PORT};
use roce_stack::{Access, ConnectParams, MrHandle, Service};

use super::app::{perf_caps, spin, PerfApp};
use super::msg::{PerfMsg, PROTOCOL};
use super::udp::{udp_client, udp_server};
use super::{PerfResult, PerfSpec, PerfTest};

/// How long a perf end waits with work pending and nothing received.
const SILENCE: Duration = Duration::from_secs(5);

/// What a perf end asks of the connection layer: `spec`'s QPs (RC, UC, or UD with Q_Key
/// `qkey`), its MTU and `--outs` READs/atomics each way.
pub(super) fn perf_request(spec: &PerfSpec, qkey: QKey) -> QpRequest {
    QpRequest {
        service: spec.service,
        qkey,
        count: spec.nqps(),
        caps: perf_caps(spec),
        srq: None,
        params: ConnectParams {
            mtu: spec.mtu,
            access: ALL_REMOTE,
            max_rd_atomic: spec.outs,
            max_dest_rd_atomic: spec.outs,
            ..ConnectParams::default()
        },
    }
}

/// A perf end: the [`Side`] of `spec` on `local` (first QPN, keys and PSNs from `secrets`,
/// `salt`: which end), and its two regions: the source of what this end sends, and the
/// target of what the peer does.
fn perf_side(
    spec: &PerfSpec,
    (secrets, salt): (Secrets, u64),
    qkey: QKey,
    local: SocketAddr,
    link: LinkChoice,
) -> Result<(Side, (MrHandle, MrHandle)), DriverError> {
    let psns = secrets.start_psns(spec.nqps(), salt)?;
    let req = perf_request(spec, qkey);
    let mut side = Side::new(secrets.device(salt)?, req, psns, local, link)?;
    let dev = &mut side.ep.dev;
    // A UD receive buffer also holds the 40-byte GRH area.
    let len = (spec.msg_size() as usize).max(8) + 40;
    let src = dev.reg_mr(side.pd, len, Access::LOCAL_WRITE);
    let dst = dev.reg_mr(
        side.pd,
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    );
    Ok((side, (src, dst)))
}

/// Connects to a perf server and runs every spec in turn (each followed by its UDP baseline
/// when `baseline`), handing each result to `out` as soon as it is measured; `out` returns
/// `false` to stop there (its reader went away).
pub(crate) fn run_client(
    client: ClientConfig,
    specs: &[PerfSpec],
    baseline: bool,
    secrets: Secrets,
    link: LinkChoice,
    mut out: impl FnMut(&PerfResult) -> bool,
) -> Result<(), DriverError> {
    for s in specs {
        s.validate()?;
    }
    runtime()?.block_on(async move {
        let (mut ctl, local_ip) = control::connect(client.server, client.bind).await?;
        let local = SocketAddr::new(local_ip, client.roce_port);
        let peer_ip = client.server.ip();
        for spec in specs {
            let ends = (local, peer_ip, secrets, link);
            let mut r = run_one(&mut ctl, spec, ends).await?;
            if baseline && spec.test != PerfTest::Udp {
                let b = run_one(&mut ctl, &spec.baseline(), ends).await?;
                r = r.with_baseline(b);
                if let Some(x) = spec.exchange_baseline() {
                    let b = run_one(&mut ctl, &x, ends).await?;
                    r = r.with_exchange_baseline(b);
                }
            }
            if !out(&r) {
                break;
            }
        }
        ctl.send(&PerfMsg::Bye).await
    })
}

async fn run_one(
    ctl: &mut Control,
    spec: &PerfSpec,
    (local, peer_ip, secrets, link): (SocketAddr, IpAddr, Secrets, LinkChoice),
) -> Result<PerfResult, DriverError> {
    if spec.test == PerfTest::Udp {
        return udp_client(ctl, spec, local, peer_ip).await;
    }
    // The client draws the run's Q_Key and hands it to the server with its QPs.
    let qkey = secrets.qkey(0xc11e)?;
    let (mut side, mrs) = perf_side(spec, (secrets, 0xc11e), qkey, local, link)?;
    let target = side.ep.dev.mr(mrs.1).map(RemoteBuffer::of);
    let hello = PerfMsg::Hello {
        protocol: PROTOCOL,
        spec: *spec,
        buffers: target.into_iter().collect(),
    };
    let PerfMsg::Welcome { buffers } = ctl.offer(&mut side, qkey, hello).await? else {
        return Err(DriverError::from(PeerFault::Expected("a welcome")));
    };
    let Some(b) = buffers.first() else {
        return Err(PeerFault::Count {
            what: "buffers",
            announced: 0,
            here: 1,
        }
        .into());
    };
    let Side {
        mut ep, qps, ahs, ..
    } = side;
    let mut app =
        PerfApp::new(&mut ep.dev, *spec, true, &qps, mrs, b.at(0)).map_err(DriverError::from)?;
    if spec.service == Service::Ud {
        app.set_ud_peers(ahs);
    }
    ep.set_busy_poll(spin(spec));
    ctl.ready().await?;
    let stop = ctl.peer_interrupts("server");
    let result = ep.run(&mut app, true, stop, SILENCE).await;
    result?;
    ctl.done(true).await?;
    let PerfMsg::Summary { .. } = ctl.recv_timeout(ANSWER_TIMEOUT).await? else {
        return Err(DriverError::from(PeerFault::Expected("a summary")));
    };
    let mut r = app.result();
    r.retransmitted_packets = ep.dev.stats().retransmitted_packets;
    r.link = Some(ep.link().name());
    r.sent = Some(ep.sent_counts());
    Ok(r)
}

/// Accepts one perf client on `listener` and serves every run it asks for until it says
/// goodbye. Blocking. Returns the number of runs served.
pub(crate) fn serve(
    listener: Listener,
    secrets: Secrets,
    link: LinkChoice,
) -> Result<u64, DriverError> {
    listener.serve(|mut ctl, a| async move {
        let r = serve_session(&mut ctl, a, secrets, link).await;
        (ctl, r)
    })
}

/// How long the server waits for the client's next request (its first one, or the next
/// after a run): the client asks for the next run as soon as it printed the last.
const NEXT_REQUEST: Duration = Duration::from_secs(30);

async fn serve_session(
    ctl: &mut Control,
    a: Accepted,
    secrets: Secrets,
    link: LinkChoice,
) -> Result<u64, DriverError> {
    let local = SocketAddr::new(a.local_ip, a.roce_port);
    let mut runs = 0;
    loop {
        let wait = if runs == 0 {
            ANSWER_TIMEOUT
        } else {
            NEXT_REQUEST
        };
        match ctl.next_offer(wait).await? {
            Turn::Msg(PerfMsg::Bye) => return Ok(runs),
            Turn::Msg(PerfMsg::Baseline {
                protocol,
                spec,
                roce_port,
            }) => {
                check_protocol("perf", protocol, PROTOCOL)?;
                spec.validate().map_err(DriverError::peer_invalid)?;
                if spec.test != PerfTest::Udp {
                    return Err(PeerFault::Expected("a UDP baseline's spec").into());
                }
                let remote = SocketAddr::new(a.peer.ip(), roce_port);
                udp_server(ctl, &spec, local, remote).await?;
            }
            Turn::Offer(offer) => serve_one(ctl, offer, local, secrets, link).await?,
            Turn::Msg(_) => return Err(DriverError::from(PeerFault::Expected("a perf hello"))),
        }
        runs += 1;
    }
}

async fn serve_one(
    ctl: &mut Control,
    offer: Offered<PerfMsg>,
    local: SocketAddr,
    secrets: Secrets,
    link: LinkChoice,
) -> Result<(), DriverError> {
    let Offered { msg, qkey, end } = offer;
    let PerfMsg::Hello {
        protocol,
        spec,
        buffers: blocks,
    } = msg
    else {
        return Err(DriverError::from(PeerFault::Expected("a perf hello")));
    };
    check_protocol("perf", protocol, PROTOCOL)?;
    spec.validate().map_err(DriverError::peer_invalid)?;
    if spec.test == PerfTest::Udp {
        return Err(PeerFault::Expected("an RDMA test's spec").into());
    }
    if end.len() != spec.nqps() as usize || blocks.len() != 1 {
        return Err(PeerFault::Count {
            what: "QPs (and one buffer)",
            announced: end.len(),
            here: spec.nqps() as usize,
        }
        .into());
    }
    let (mut side, mrs) = perf_side(&spec, (secrets, 0x5e7e), qkey, local, link)?;
    let target = side.ep.dev.mr(mrs.1).map(RemoteBuffer::of);
    let welcome = PerfMsg::Welcome {
        buffers: target.into_iter().collect(),
    };
    ctl.answer(&mut side, &end, welcome).await?;
    let Side {
        mut ep, qps, ahs, ..
    } = side;
    // Nothing the client sends is read before the endpoint runs: the receives this posts are
    // there first.
    let mut app = PerfApp::new(&mut ep.dev, spec, false, &qps, mrs, blocks[0].at(0))
        .map_err(DriverError::from)?;
    if spec.service == Service::Ud {
        app.set_ud_peers(ahs);
    }
    ep.set_busy_poll(spin(&spec));
    ctl.expect_ready().await?;
    let stop = async { ctl.peer_done("client").await.map(|_| ()) };
    ep.run(&mut app, false, stop, Duration::from_secs(30))
        .await?;
    ctl.send(&PerfMsg::Summary {
        received: ep.stats.received,
        seconds: 0.0,
        peak_per_s: 0.0,
        foreign: 0,
    })
    .await
}

/// Both ends in one process: a server thread (with its own runtime) and the client on the
/// calling thread, over `client_ip`/`server_ip` with UDP port 4791 on each (IPv6 ::1: the
/// client uses 4792).
pub(crate) fn loopback(
    client_ip: IpAddr,
    server_ip: IpAddr,
    specs: &[PerfSpec],
    baseline: bool,
    secrets: Secrets,
    link: LinkChoice,
    out: impl FnMut(&PerfResult) -> bool,
) -> Result<(), DriverError> {
    for s in specs {
        s.validate()?;
    }
    in_one_process(
        "roce-perf-server",
        (server_ip, ROCEV2_UDP_PORT),
        move |l| serve(l, secrets, link),
        |control| {
            run_client(
                ClientConfig {
                    server: control,
                    bind: Some(client_ip),
                    roce_port: client_roce_port(client_ip, server_ip),
                },
                specs,
                baseline,
                secrets,
                link,
                out,
            )
        },
    )
}
