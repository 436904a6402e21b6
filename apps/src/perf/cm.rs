//! `roce perf --cm`: each run's QPs connected through the IB CM on QP1 (IBTA Vol 1 ch. 12)
//! instead of the TCP control channel, over UDP 4791 only. The data path is the same as with
//! the TCP exchange; only how the QPs learn of each other differs.
//!
//! Private data, as rdma_cm applications use it: the REQ (after RDMA-CM's `cma_hdr`) carries
//! the run's spec, the QP's index and whether it is the last run; the REP the server's target
//! region (address, rkey, length), the RTU the client's (a latency test's server writes
//! back); the client's DREQ ends the run and the server's DREP
//! answers it. Each run binds fresh endpoints on both ends. The UDP baseline needs the TCP
//! channel and is not offered with `--cm`.
use std::future::pending;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::qps::{create_qps, LocalQp, RemoteBuffer, ALL_REMOTE};
use roce_driver::impair::Impairment;
use roce_driver::{
    bind_endpoint, runtime, AppError, Application, DriverError, LinkChoice, PeerFault, Secrets,
};
use roce_proto::{Psn, RKey, ROCEV2_UDP_PORT};
use roce_stack::{Access, CcConfig, ConnectParams, Device, Instant, MrHandle, RemoteAddr, Service};

use super::app::{perf_caps, spin};
use super::{PerfApp, PerfResult, PerfSpec, PerfTest};
use roce_driver::connect::cm_session::{Asked, CmSession, SessionEvent, SourcePort, Terms};
use roce_driver::connect::AfterGivingUp;

const MAGIC: &[u8; 4] = b"rpf1";

/// The REQ's consumer data: the spec (without the MTU, which the REQ carries), the QP's
/// index, the last-run flag.
fn encode_req(spec: &PerfSpec, qp: u16, last: bool) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&qp.to_be_bytes());
    v.push(match spec.test {
        PerfTest::Write => 0,
        PerfTest::Read => 1,
        PerfTest::Send => 2,
        PerfTest::Atomic => 3,
        PerfTest::Udp => 4,
    });
    v.push(u8::from(spec.lat) | u8::from(last) << 1);
    for x in [
        spec.size,
        spec.iters,
        spec.duration_ms.unwrap_or(0),
        spec.request,
    ] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    for x in [spec.qps, spec.tx_depth, spec.replies] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.push(spec.outs);
    v
}

fn decode_req(b: &[u8], mtu: u32) -> Option<(PerfSpec, u16, bool)> {
    let b = b.strip_prefix(MAGIC)?;
    let u64_at = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let u32_at = |i: usize| Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let qp = u16::from_be_bytes(b.get(0..2)?.try_into().ok()?);
    let test = match b.get(2)? {
        0 => PerfTest::Write,
        1 => PerfTest::Read,
        2 => PerfTest::Send,
        3 => PerfTest::Atomic,
        _ => return None,
    };
    let flags = *b.get(3)?;
    let duration = u64_at(20)?;
    let spec = PerfSpec {
        test,
        lat: flags & 1 == 1,
        size: u64_at(4)?,
        iters: u64_at(12)?,
        duration_ms: (duration > 0).then_some(duration),
        request: u64_at(28)?,
        qps: u32_at(36)?,
        tx_depth: u32_at(40)?,
        replies: u32_at(44)?,
        outs: *b.get(48)?,
        mtu,
        service: Service::Rc,
    };
    Some((spec, qp, flags & 2 == 2))
}

fn encode_target(b: &RemoteBuffer) -> Vec<u8> {
    b.to_private_data(MAGIC)
}

fn decode_target(b: &[u8]) -> Option<RemoteBuffer> {
    RemoteBuffer::from_private_data(b, MAGIC)
}

/// A run's QPs and regions on `dev`: the source of what this end sends, the target of what
/// the peer does.
fn perf_objects(
    dev: &mut Device,
    spec: &PerfSpec,
) -> Result<(Vec<LocalQp>, (MrHandle, MrHandle)), AppError> {
    let pd = dev.alloc_pd();
    let len = (spec.msg_size() as usize).max(8);
    let src = dev.reg_mr(pd, len, Access::LOCAL_WRITE);
    let dst = dev.reg_mr(
        pd,
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
    );
    let qps = create_qps(dev, pd, spec.nqps(), perf_caps(spec), ALL_REMOTE)?;
    Ok((qps, (src, dst)))
}

/// The transport settings of a perf run: `--outs` READs/atomics each way.
fn base_params(spec: &PerfSpec) -> ConnectParams {
    ConnectParams {
        mtu: spec.mtu,
        max_rd_atomic: spec.outs,
        max_dest_rd_atomic: spec.outs,
        ..ConnectParams::default()
    }
}

/// The server's side of one run.
struct Serving {
    session: CmSession,
    secrets: Secrets,
    run: Option<(PerfSpec, bool)>,
    qps: Vec<LocalQp>,
    psns: Vec<Psn>,
    target: Option<RemoteBuffer>,
    app: Option<PerfApp>,
    /// Each QP's connection, once its REQ was accepted.
    conns: Vec<Option<usize>>,
    established: usize,
    released: usize,
    until_established: bool,
    /// The set-up of this run was given up (the session's bounds, a REP refused, a peer
    /// gone quiet): the server drops what it made for it and listens again.
    abandoned: bool,
}

impl Serving {
    fn on_asked(&mut self, dev: &mut Device, now: Instant, asked: Asked) -> Result<(), AppError> {
        let Some((spec, k, last)) = decode_req(&asked.data, asked.mtu) else {
            eprintln!(
                "roce perf: refused a CM REQ from {} (REJ consumer_reject): it carries no roce perf request (for a perftest -R client use --perftest)",
                asked.peer
            );
            self.session.refuse(&asked, b"not a roce perf REQ");
            return Ok(());
        };
        match self.run {
            None => {
                if spec.validate().is_err() {
                    self.session.refuse(&asked, b"invalid spec");
                    return Ok(());
                }
                let (qps, mrs) = perf_objects(dev, &spec)?;
                self.psns = self.secrets.start_psns(spec.nqps(), 0x5e7e)?;
                self.target = dev.mr(mrs.1).map(RemoteBuffer::of);
                // The client's region arrives with its RTU (see `Up` below).
                let nowhere = RemoteAddr {
                    va: 0,
                    rkey: RKey(0),
                };
                self.app = Some(PerfApp::new(dev, spec, false, &qps, mrs, nowhere)?);
                self.conns = vec![None; qps.len()];
                self.qps = qps;
                self.run = Some((spec, last));
            }
            Some((s, _)) if s != spec => {
                self.session.refuse(&asked, b"busy");
                return Ok(());
            }
            Some(_) => {}
        }
        let k = usize::from(k);
        let (Some(target), true) = (self.target, k < self.conns.len() && self.conns[k].is_none())
        else {
            self.session.refuse(&asked, b"bad QP index");
            return Ok(());
        };
        let i = self.session.accept(
            dev,
            now,
            &asked,
            self.qps[k],
            self.psns[k],
            &base_params(&spec),
            spec.outs,
            CcConfig::None,
            0,
            &encode_target(&target),
        )?;
        self.conns[k] = Some(i);
        Ok(())
    }
}

impl Application for Serving {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.session.poll(dev, now)?;
        while let Some(e) = self.session.next_event() {
            match e {
                SessionEvent::Asked(a) => self.on_asked(dev, now, a)?,
                SessionEvent::Up(i) => {
                    self.established += 1;
                    let t = self.session.confirm_data(i).and_then(decode_target);
                    if let (Some(t), Some(app)) = (t, &mut self.app) {
                        app.set_remote(t.at(0));
                    }
                }
                SessionEvent::Released(_) => self.released += 1,
                // Any address can send a REQ: one never confirmed, or a client gone quiet,
                // costs this server the run's set-up, not its life.
                SessionEvent::Restarted => self.abandoned = true,
                SessionEvent::Accepted(_) => {}
            }
        }
        if let (Some(app), false) = (&mut self.app, self.abandoned) {
            app.poll(dev, now)?;
        }
        self.session.flush(dev);
        Ok(())
    }

    fn done(&self) -> bool {
        let n = self.conns.len();
        self.abandoned
            || n > 0
                && if self.until_established {
                    self.established == n
                } else {
                    self.released == n
                }
    }
}

/// Serves perf runs whose QPs connect through the CM to `bind` (UDP 4791), RDMA-CM port
/// `port`, until a run the client marked as its last. Blocking; `ready` is called once the
/// first endpoint is bound. A run whose set-up is given up, or whose client goes quiet or
/// breaks it, costs the server that run (one line); it listens again. Returns the number
/// of runs.
pub(crate) fn serve_cm(
    bind: IpAddr,
    port: u16,
    secrets: Secrets,
    link: LinkChoice,
    after: AfterGivingUp,
    ready: impl FnOnce(),
) -> Result<u64, DriverError> {
    let mut ready = Some(ready);
    runtime()?.block_on(async move {
        let mut runs = 0;
        let mut attempts = 0u64;
        loop {
            attempts += 1;
            let dev = secrets.device(0x5e7e)?;
            let local = SocketAddr::new(bind, ROCEV2_UDP_PORT);
            let mut ep = bind_endpoint(dev, local, ROCEV2_UDP_PORT, Impairment::default(), link)?;
            let terms = Terms {
                port,
                ..Terms::default()
            };
            let session =
                CmSession::listener(ep.now(), terms, &secrets, 0x5e7e ^ attempts, "roce perf")?;
            if let Some(r) = ready.take() {
                r();
            }
            let mut s = Serving {
                session,
                secrets,
                run: None,
                qps: Vec::new(),
                psns: Vec::new(),
                target: None,
                app: None,
                conns: Vec::new(),
                established: 0,
                released: 0,
                until_established: true,
                abandoned: false,
            };
            // The first run may wait forever; the next is asked for at once.
            let wait = if runs == 0 {
                Duration::from_secs(365 * 24 * 3600)
            } else {
                Duration::from_secs(30)
            };
            ep.run(&mut s, true, pending(), wait).await?;
            if s.abandoned {
                // A fresh device, CM and endpoint for the next REQ; this one's QPs and
                // regions go with it.
                after.set_up_given_up()?;
                continue;
            }
            if let Some((spec, _)) = s.run {
                ep.set_busy_poll(spin(&spec));
            }
            s.until_established = false;
            let ran = ep
                .run(&mut s, true, pending(), Duration::from_secs(30))
                .await;
            if let Err(e) = ran {
                after.tolerate(e, "roce perf", s.session.peer())?;
                continue;
            }
            if s.abandoned {
                after.set_up_given_up()?;
                continue;
            }
            runs += 1;
            if s.run.is_some_and(|(_, last)| last) {
                return Ok(runs);
            }
        }
    })
}

/// The client's side of one run.
struct Running {
    session: CmSession,
    spec: PerfSpec,
    qps: Vec<LocalQp>,
    mrs: (MrHandle, MrHandle),
    targets: Vec<Option<RemoteBuffer>>,
    established: usize,
    released: usize,
    app: Option<PerfApp>,
    releasing: bool,
}

impl Application for Running {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.session.poll(dev, now)?;
        while let Some(e) = self.session.next_event() {
            match e {
                SessionEvent::Up(i) => {
                    let Some(t) = decode_target(self.session.peer_data(i)) else {
                        // Tell the server (REJ instead of the RTU), then say why here.
                        self.session.refuse_reply(
                            now,
                            i,
                            b"roce perf: the REP carries no target region",
                        );
                        self.session.flush(dev);
                        return Err(PeerFault::Foreign {
                            what: "perf target region",
                            server: "roce perf server over the CM",
                            hint: Some("a stock perftest -R server needs --perftest"),
                        }
                        .into());
                    };
                    self.targets[i] = Some(t);
                    self.established += 1;
                }
                SessionEvent::Released(_) => self.released += 1,
                // A server's only.
                SessionEvent::Asked(_) | SessionEvent::Accepted(_) | SessionEvent::Restarted => {}
            }
        }
        if self.app.is_none() && self.established == self.qps.len() {
            let t = self.targets[0].unwrap_or(RemoteBuffer {
                va: 0,
                rkey: RKey(0),
                len: 0,
            });
            self.app = Some(PerfApp::new(
                dev,
                self.spec,
                true,
                &self.qps,
                self.mrs,
                t.at(0),
            )?);
        }
        if let Some(app) = &mut self.app {
            if !self.releasing {
                app.poll(dev, now)?;
                if app.done() {
                    self.releasing = true;
                    for i in 0..self.qps.len() {
                        if !self.session.disconnect(now, i) {
                            // The server released it first.
                            self.released += 1;
                        }
                    }
                }
            }
        }
        self.session.flush(dev);
        Ok(())
    }

    fn done(&self) -> bool {
        self.releasing && self.released >= self.qps.len()
    }
}

/// Runs every spec against a `--cm` perf server at `server` (RDMA-CM port `port`) from
/// `local`, handing each result to `out` (`false`: stop after it).
pub(crate) fn run_client_cm(
    local: IpAddr,
    server: IpAddr,
    port: u16,
    specs: &[PerfSpec],
    secrets: Secrets,
    link: LinkChoice,
    mut out: impl FnMut(&PerfResult) -> bool,
) -> Result<(), DriverError> {
    for s in specs {
        s.validate()?;
        if s.test == PerfTest::Udp {
            return Err(crate::Combination::BaselineNeedsTcp.into());
        }
    }
    runtime()?.block_on(async move {
        for (i, spec) in specs.iter().enumerate() {
            let last = i + 1 == specs.len();
            let mut dev = secrets.device(0xc11e)?;
            let (qps, mrs) = perf_objects(&mut dev, spec).map_err(DriverError::from)?;
            let psns = secrets.start_psns(spec.nqps(), 0xc11e)?;
            let n = qps.len();
            let mut ep = bind_endpoint(
                dev,
                SocketAddr::new(local, ROCEV2_UDP_PORT),
                ROCEV2_UDP_PORT,
                Impairment::default(),
                link,
            )?;
            ep.set_busy_poll(spin(spec));
            let terms = Terms {
                port,
                responder_resources: spec.outs,
                initiator_depth: spec.outs,
                mtu: spec.mtu,
                local_ack_timeout: 14,
                base: base_params(spec),
                src_port: SourcePort::Fixed(ROCEV2_UDP_PORT),
                ..Terms::default()
            };
            let with_psns: Vec<(LocalQp, Psn)> = qps.iter().copied().zip(psns).collect();
            let mut session = CmSession::client_with(
                local,
                ep.now(),
                &with_psns,
                terms,
                &secrets,
                0xc11e ^ i as u64,
                "roce perf",
                server,
                |k| encode_req(spec, k as u16, last),
            )?;
            // Our target region rides in the RTU: a latency test's server writes back.
            if let Some(t) = ep.dev.mr(mrs.1).map(RemoteBuffer::of) {
                for k in 0..n {
                    session.set_confirm_data(k, &encode_target(&t));
                }
            }
            let mut r = Running {
                session,
                spec: *spec,
                qps,
                mrs,
                targets: vec![None; n],
                established: 0,
                released: 0,
                app: None,
                releasing: false,
            };
            ep.run(&mut r, true, pending(), Duration::from_secs(5))
                .await?;
            let Some(app) = &mut r.app else {
                return Err(PeerFault::Left("the run started").into());
            };
            let mut res = app.result();
            res.retransmitted_packets = ep.dev.stats().retransmitted_packets;
            res.link = Some(ep.link().name());
            res.sent = Some(ep.sent_counts());
            drop(ep);
            if !out(&res) || last {
                return Ok(());
            }
            // The server binds its next run's endpoint once this one is released.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    })
}

/// Both ends in one process, connected through the CM: a `--cm` server thread at
/// `server_ip` and the client at `client_ip` (both UDP 4791).
pub(crate) fn loopback_cm(
    client_ip: IpAddr,
    server_ip: IpAddr,
    specs: &[PerfSpec],
    secrets: Secrets,
    link: LinkChoice,
    out: impl FnMut(&PerfResult) -> bool,
) -> Result<(), DriverError> {
    if client_ip == server_ip {
        return Err(crate::Combination::CmNeedsTwoAddresses.into());
    }
    let port = 18515;
    roce_driver::connect::one_process(
        "roce-perf-cm-server",
        move |ready| serve_cm(server_ip, port, secrets, link, AfterGivingUp::Fail, ready),
        || run_client_cm(client_ip, server_ip, port, specs, secrets, link, out),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_fits_the_req_and_round_trips() {
        let spec = PerfSpec {
            test: PerfTest::Read,
            lat: true,
            size: 1 << 20,
            iters: 123_456,
            duration_ms: Some(2500),
            qps: 8,
            mtu: 2048,
            tx_depth: 64,
            outs: 16,
            request: 0,
            replies: 1,
            service: Service::Rc,
        };
        let e = encode_req(&spec, 5, true);
        assert!(
            e.len() <= 92 - roce_proto::rdma_cm::CMA_HDR_LEN,
            "{}",
            e.len()
        );
        let mut padded = e;
        padded.resize(56, 0);
        assert_eq!(decode_req(&padded, 2048), Some((spec, 5, true)));
        assert_eq!(decode_req(&padded[2..], 2048), None);
        let t = RemoteBuffer {
            va: 42,
            rkey: RKey(7),
            len: 9,
        };
        assert_eq!(decode_target(&encode_target(&t)), Some(t));
    }
}
