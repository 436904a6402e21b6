//! The plain-UDP baselines of `roce perf`: datagrams of the wire size of the RoCE data
//! datagrams through the same socket path ([`RoceSocket`]: `sendmmsg` batches, recvmmsg/GRO):
//! a blast counted at the receiver (bandwidth, packets/s), a ping-pong (latency), and a
//! request/response exchange in the shape of a READ or an atomic.
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant as StdInstant};

use roce_driver::connect::control::{Control, Frame, ANSWER_TIMEOUT};
use roce_driver::endpoint::RunError;
use roce_driver::socket::{RoceSocket, SEND_BATCH};
use roce_driver::{setup, DriverError, PeerFault};
use roce_proto::Ecn;
use roce_stack::PathConfig;

use super::app::spin;
use super::msg::{PerfMsg, PROTOCOL};
use super::{PerfResult, PerfSpec, PEAK_WINDOW};

/// UDP source port of the baseline's datagrams (fixed, like one QP's).
fn udp_sport() -> u16 {
    PathConfig::udp_sport(0x11, 0x12)
}

/// Waits for one datagram (spinning for up to `spin`, then sleeping in epoll, as an
/// [`Endpoint`] does); returns its length.
async fn recv_one(
    sock: &mut RoceSocket,
    peer: IpAddr,
    spin: Duration,
    silence: Duration,
) -> Result<usize, DriverError> {
    let t0 = StdInstant::now();
    loop {
        let mut len = None;
        sock.try_recv(|m, d| {
            if m.src.ip() == peer {
                len = Some(d.len());
            }
            // The baseline stays on the UDP sockets: nothing is "accepted" for the packet link.
            false
        })
        .map_err(|e| DriverError::Run(RunError::Io(e)))?;
        if let Some(len) = len {
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

pub(crate) async fn udp_client(
    ctl: &mut Control,
    spec: &PerfSpec,
    local: SocketAddr,
    peer_ip: IpAddr,
) -> Result<PerfResult, DriverError> {
    ctl.send(&PerfMsg::Baseline {
        protocol: PROTOCOL,
        spec: *spec,
        roce_port: local.port(),
    })
    .await?;
    let PerfMsg::Port { roce_port } = ctl.recv_timeout(ANSWER_TIMEOUT).await? else {
        return Err(DriverError::from(PeerFault::Expected(
            "the baseline's port",
        )));
    };
    let dst = SocketAddr::new(peer_ip, roce_port);
    let mut sock = RoceSocket::bind(local).map_err(setup("UDP socket"))?;
    ctl.ready().await?;
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
            recv_one(&mut sock, peer_ip, spin(spec), silence).await?;
            samples.push(t0.elapsed().as_nanos() as u64 / 2);
        }
        let c = finish(ctl).await?;
        let mut r = PerfResult::lat(spec, &mut samples);
        r.foreign_datagrams = c.foreign;
        return Ok(r);
    }
    if spec.request > 0 {
        let (requests, seconds, peak, lost) = udp_exchange(&mut sock, spec, sport, dst).await?;
        let c = finish(ctl).await?;
        let mut r = PerfResult::bw(spec, requests, seconds, peak);
        r.retransmitted_packets = lost;
        r.foreign_datagrams = c.foreign;
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
    let c = finish(ctl).await?;
    let mut r = PerfResult::bw(spec, c.received, c.seconds, c.peak_per_s);
    r.retransmitted_packets = sent.saturating_sub(c.received);
    r.foreign_datagrams = c.foreign;
    Ok(r)
}

/// The server's count of a UDP baseline.
struct Counted {
    /// Datagrams received from the client.
    received: u64,
    /// Seconds from the first to the last.
    seconds: f64,
    /// Best rate over 10 ms windows.
    peak_per_s: f64,
    /// Datagrams from anyone else, ignored.
    foreign: u64,
}

/// Says `done` and takes the server's summary.
async fn finish(ctl: &mut Control) -> Result<Counted, DriverError> {
    ctl.done(true).await?;
    match ctl.recv_timeout(ANSWER_TIMEOUT).await? {
        PerfMsg::Summary {
            received,
            seconds,
            peak_per_s,
            foreign,
        } => Ok(Counted {
            received,
            seconds,
            peak_per_s,
            foreign,
        }),
        _ => Err(DriverError::from(PeerFault::Expected("a summary"))),
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
        let mut n = 0u64;
        sock.try_recv(|m, _| {
            n += u64::from(m.src.ip() == dst.ip());
            false
        })
        .map_err(io)?;
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

/// How long the baseline server waits with neither a datagram from its client nor its `done`.
const SERVER_SILENCE: Duration = Duration::from_secs(30);

pub(crate) async fn udp_server(
    ctl: &mut Control,
    spec: &PerfSpec,
    local: SocketAddr,
    remote: SocketAddr,
) -> Result<(), DriverError> {
    let mut sock = RoceSocket::bind(local).map_err(setup("UDP socket"))?;
    ctl.send(&PerfMsg::Port {
        roce_port: local.port(),
    })
    .await?;
    ctl.expect_ready().await?;
    let io = |e: std::io::Error| DriverError::Run(RunError::Io(e));
    let sport = udp_sport();
    // The client sends from its address, from the baseline's source port.
    let client = SocketAddr::new(remote.ip(), sport);
    let mut foreign = 0u64;
    let mut received = 0u64;
    let mut first: Option<StdInstant> = None;
    let mut last = StdInstant::now();
    let (mut win_start, mut win_n, mut peak) = (None::<StdInstant>, 0u64, 0f64);
    let mut pong = vec![0u8; spec.size as usize];
    let reply = vec![0x5au8; spec.size as usize];
    let replies: [&[u8]; SEND_BATCH] = [&reply; SEND_BATCH];
    {
        let stop = async {
            match ctl.recv_frame::<PerfMsg>().await {
                Ok(Frame::Done { .. }) => Ok(()),
                Ok(_) => Err(DriverError::from(PeerFault::OutOfTurn("a control message"))),
                Err(e) => Err(e),
            }
        };
        tokio::pin!(stop);
        let mut stopping = false;
        let mut last_io = StdInstant::now();
        loop {
            // Only the client's datagrams count and are answered: anyone else's are dropped,
            // so that the server cannot be made to send to a port someone else chose (a
            // reflector) or count what the client did not send.
            let mut n = 0usize;
            sock.try_recv(|m, d| {
                if m.src != client {
                    foreign += 1;
                    return false;
                }
                if spec.lat && n == 0 {
                    let k = d.len().min(pong.len());
                    pong[..k].copy_from_slice(&d[..k]);
                }
                n += 1;
                false
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
            if last_io.elapsed() > SERVER_SILENCE {
                return Err(DriverError::Run(RunError::PeerSilent(SERVER_SILENCE)));
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
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }
    let seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    ctl.send(&PerfMsg::Summary {
        received,
        seconds,
        peak_per_s: peak,
        foreign,
    })
    .await
}
