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
use std::ops::ControlFlow;
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
use roce_driver::connect::cm_group::{
    self, Accept, Admit, Group, Host, Hosted, Joined, Joining, Listen, Served, SERVING_SILENCE,
};
use roce_driver::connect::cm_session::{Asked, CmSession, SourcePort, Terms};
use roce_driver::connect::AfterGivingUp;
use roce_driver::Endpoint;

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
    secrets: Secrets,
    run: Option<(PerfSpec, bool)>,
    qps: Vec<LocalQp>,
    psns: Vec<Psn>,
    target: Option<RemoteBuffer>,
    app: Option<PerfApp>,
}

impl Served for Serving {
    fn admit(&mut self, dev: &mut Device, asked: &Asked) -> Result<Admit, AppError> {
        let Some((spec, k, last)) = decode_req(&asked.data, asked.mtu) else {
            eprintln!(
                "roce perf: refused a CM REQ from {} (REJ consumer_reject): it carries no roce perf request (for a perftest -R client use --perftest)",
                asked.peer
            );
            return Ok(Admit::Refuse(b"not a roce perf REQ"));
        };
        match self.run {
            None => {
                if spec.validate().is_err() {
                    return Ok(Admit::Refuse(b"invalid spec"));
                }
                let (qps, mrs) = perf_objects(dev, &spec)?;
                self.psns = self.secrets.start_psns(spec.nqps(), 0x5e7e)?;
                self.target = dev.mr(mrs.1).map(RemoteBuffer::of);
                // The client's region arrives with its RTU (see `up` below).
                let nowhere = RemoteAddr {
                    va: 0,
                    rkey: RKey(0),
                };
                self.app = Some(PerfApp::new(dev, spec, false, &qps, mrs, nowhere)?);
                self.qps = qps;
                self.run = Some((spec, last));
            }
            Some((s, _)) if s != spec => return Ok(Admit::Refuse(b"busy")),
            Some(_) => {}
        }
        Ok(Admit::Member {
            k: usize::from(k),
            of: self.qps.len(),
        })
    }

    fn accept(&mut self, _dev: &mut Device, k: usize) -> Result<Accept, AppError> {
        let (Some((spec, _)), Some(target)) = (self.run, self.target) else {
            return Err(AppError::Defect("a connection admitted before its run"));
        };
        Ok(Accept {
            qp: self.qps[k],
            psn: self.psns[k],
            base: base_params(&spec),
            rd_atomic: spec.outs,
            cc: CcConfig::None,
            line_rate_bps: 0,
            reply: encode_target(&target),
        })
    }

    fn up(&mut self, group: &Group, _dev: &mut Device, k: usize) -> Result<(), AppError> {
        let t = group.confirm_data(k).and_then(decode_target);
        if let (Some(t), Some(app)) = (t, &mut self.app) {
            app.set_remote(t.at(0));
        }
        Ok(())
    }

    fn poll(&mut self, _group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        match &mut self.app {
            Some(app) => app.poll(dev, now),
            None => Ok(()),
        }
    }
}

/// A perf server over the CM: runs until the one its client marked as its last.
struct PerfService {
    secrets: Secrets,
    runs: u64,
}

impl Host for PerfService {
    type Run = Serving;
    type Output = u64;

    fn name(&self) -> &'static str {
        "roce perf"
    }

    fn open(&mut self, _ep: &mut Endpoint) -> Result<Serving, DriverError> {
        Ok(Serving {
            secrets: self.secrets,
            run: None,
            qps: Vec::new(),
            psns: Vec::new(),
            target: None,
            app: None,
        })
    }

    fn running(&mut self, ep: &mut Endpoint, run: &Serving) {
        if let Some((spec, _)) = run.run {
            ep.set_busy_poll(spin(&spec));
        }
    }

    fn ended(
        &mut self,
        _ep: Endpoint,
        h: Hosted<Serving>,
    ) -> Result<ControlFlow<u64>, DriverError> {
        self.runs += 1;
        Ok(if h.run.run.is_some_and(|(_, last)| last) {
            ControlFlow::Break(self.runs)
        } else {
            ControlFlow::Continue(())
        })
    }

    fn wait(&self) -> Duration {
        // The first run may wait forever; the next is asked for at once.
        if self.runs == 0 {
            cm_group::FOREVER
        } else {
            SERVING_SILENCE
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
    let at = Listen {
        bind,
        port,
        secrets,
        link,
        impairment: Impairment::default(),
        salt: 0x5e7e,
    };
    cm_group::serve(at, PerfService { secrets, runs: 0 }, after, ready)
}

/// The client's side of one run.
struct Running {
    spec: PerfSpec,
    qps: Vec<LocalQp>,
    mrs: (MrHandle, MrHandle),
    targets: Vec<Option<RemoteBuffer>>,
    app: Option<PerfApp>,
}

impl Joined for Running {
    fn up(&mut self, _dev: &mut Device, k: usize, reply: &[u8]) -> Result<(), AppError> {
        let Some(t) = decode_target(reply) else {
            return Err(PeerFault::Foreign {
                what: "perf target region",
                server: "roce perf server over the CM",
                hint: Some("a stock perftest -R server needs --perftest"),
            }
            .into());
        };
        self.targets[k] = Some(t);
        Ok(())
    }

    fn released_early(&mut self, _group: &Group, _k: usize) -> Result<(), AppError> {
        Ok(())
    }

    fn poll(&mut self, group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        if self.app.is_none() && group.all_up() {
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
        if let (Some(app), false) = (&mut self.app, group.releasing()) {
            app.poll(dev, now)?;
            if app.done() {
                group.release(now, &[]);
            }
        }
        Ok(())
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
            let mut r = Joining::new(
                session,
                n,
                Running {
                    spec: *spec,
                    qps,
                    mrs,
                    targets: vec![None; n],
                    app: None,
                },
            );
            ep.run(&mut r, true, pending(), Duration::from_secs(5))
                .await?;
            let Some(app) = &mut r.run.app else {
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
