//! `roce kv --cm`: the KV push with its QPs connected through the IB CM on QP1 (IBTA Vol 1
//! ch. 12) instead of the TCP control connection. Everything goes over UDP 4791.
//!
//! As rdma_cm applications do, the client asks for one more RC QP than the transfer uses: the
//! control QP, over which the two ends exchange the kv messages of the TCP path (hello,
//! welcome, blocks, sent, verified) as SENDs, one JSON message each (the layer's
//! `MessageChannel`). Each REQ's private data (after RDMA-CM's `cma_hdr`) names its QP's
//! index and the QP count; the REPs carry nothing. When every plan is done the client releases the connections (DREQ/DREP); a
//! server that refuses the hello releases them itself with the reason in the DREQ's private
//! data, which the client reports.
use std::future::pending;
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;
use std::time::Duration;

use roce_driver::connect::qps::{LocalQp, RemoteBuffer};
use roce_driver::{bind_endpoint, runtime, AppError, Application, DriverError, PeerFault};
use roce_proto::{Psn, Qpn, ROCEV2_UDP_PORT};
use roce_stack::{Access, CcConfig, CqHandle, Device, Instant, MrHandle, PdHandle, QpStats};

use super::run::{
    check_hello, kv_report, plan_row, plan_verdict, KvConfig, KvMsg, KvReport, KvServerConfig,
    KvServerOutcome,
};
use super::{KvReceiver, KvSender, KvSpec, PlanSpec, Transfer};
use roce_driver::connect::channel::MessageChannel;
use roce_driver::connect::cm_group::{
    self, Accept, Admit, Group, Host, Hosted, Joined, Joining, Listen, Served,
};
use roce_driver::connect::cm_session::{Asked, CmSession, SourcePort, Terms};
use roce_driver::connect::AfterGivingUp;
use roce_driver::Endpoint;

/// First bytes of a kv REQ's consumer private data.
const MAGIC: &[u8; 4] = b"rkv1";

fn req_data(qp: u16, total: u16) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.extend_from_slice(&qp.to_be_bytes());
    v.extend_from_slice(&total.to_be_bytes());
    v
}

fn decode_req(b: &[u8]) -> Option<(u16, u16)> {
    let b = b.strip_prefix(MAGIC)?;
    let qp = u16::from_be_bytes(b.get(0..2)?.try_into().ok()?);
    let total = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    Some((qp, total))
}

/// The text a peer put in its DREQ's private data (printable ASCII up to the first NUL).
fn release_text(b: &[u8]) -> String {
    roce_driver::connect::rdma_cm::printable(b)
}

/// The data QPs' (QPN, CQ) pairs: every QP but the last (the control QP).
fn data_qps(mine: &[LocalQp], recv: bool) -> Vec<(Qpn, CqHandle)> {
    let n = mine.len().saturating_sub(1);
    mine[..n]
        .iter()
        .map(|q| (q.qpn, if recv { q.recv_cq } else { q.send_cq }))
        .collect()
}

/// The decode side's plan in progress.
struct ServerPlan {
    i: u32,
    receiver: KvReceiver,
}

/// The decode side over CM-made connections.
struct KvCmServer {
    cfg: KvServerConfig,
    pd: PdHandle,
    mine: Vec<LocalQp>,
    psns: Vec<Psn>,
    chan: Option<MessageChannel>,
    hello: Option<(KvSpec, Vec<PlanSpec>)>,
    pool: Option<MrHandle>,
    plan: Option<ServerPlan>,
    next_plan: u32,
    refused: Option<PeerFault>,
    out: KvServerOutcome,
}

impl KvCmServer {
    /// Refuses the client's hello: the reason goes in the DREQs.
    fn refuse(&mut self, group: &mut Group, now: Instant, why: PeerFault) {
        let why_text = why.to_string();
        let text = why_text.as_bytes();
        group.release(now, &text[..text.len().min(200)]);
        self.refused = Some(why);
    }

    fn on_hello(
        &mut self,
        group: &mut Group,
        dev: &mut Device,
        now: Instant,
        msg: KvMsg,
    ) -> Result<(), AppError> {
        let KvMsg::Hello {
            protocol,
            spec,
            transport,
            plans,
            ..
        } = msg
        else {
            self.refuse(group, now, PeerFault::Expected("a kv hello"));
            return Ok(());
        };
        let checked =
            roce_driver::connect::qps::check_protocol("kv", protocol, super::run::KV_PROTOCOL)
                .and_then(|()| {
                    let qps = group.len() - 1;
                    check_hello(&spec, &plans, &transport, self.cfg.max_pool, qps)
                        .map_err(PeerFault::invalid)
                });
        if let Err(why) = checked {
            self.refuse(group, now, why);
            return Ok(());
        }
        let pool = dev.reg_mr(
            self.pd,
            spec.pool_bytes as usize,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        );
        let pool_buffer = dev
            .mr(pool)
            .map(RemoteBuffer::of)
            .ok_or(AppError::Defect("the pool region vanished"))?;
        self.pool = Some(pool);
        self.hello = Some((spec, plans));
        if let Some(ch) = &mut self.chan {
            ch.send(&KvMsg::Welcome { pool: pool_buffer })?;
        }
        self.start_plan(dev)
    }

    /// Allocates the next plan's blocks, zeroes the pool, posts its receives, sends the blocks.
    fn start_plan(&mut self, dev: &mut Device) -> Result<(), AppError> {
        let (Some((spec, plans)), Some(pool), Some(ch)) = (&self.hello, self.pool, &mut self.chan)
        else {
            return Ok(());
        };
        let i = self.next_plan;
        let Some(plan) = plans.get(i as usize) else {
            return Ok(());
        };
        let bad = |e: super::KvError| AppError::check(format!("plan {}", plan.name), e);
        let blocks = spec.allocate(plan, i).map_err(bad)?;
        let transfer: Transfer = spec.transfer(plan, i, &blocks).map_err(bad)?;
        let receiver = KvReceiver::new(dev, transfer, pool, &data_qps(&self.mine, true))?;
        ch.send(&KvMsg::Blocks { plan: i, blocks })?;
        self.plan = Some(ServerPlan { i, receiver });
        self.next_plan += 1;
        Ok(())
    }

    fn on_sent(
        &mut self,
        group: &mut Group,
        dev: &mut Device,
        now: Instant,
        msg: KvMsg,
    ) -> Result<(), AppError> {
        let (Some(p), Some((spec, plans))) = (self.plan.as_mut(), &self.hello) else {
            return Ok(());
        };
        match msg {
            KvMsg::Sent { plan } if plan == p.i => {}
            _ => {
                self.refuse(group, now, PeerFault::OutOfTurn("a control message"));
                return Ok(());
            }
        }
        // Completions that came with the last datagrams.
        p.receiver.poll(dev, now)?;
        let plan = &plans[p.i as usize];
        let verdict = plan_verdict(&mut p.receiver, dev, plan, p.i, spec.qps, &mut self.out);
        if let Some(ch) = &mut self.chan {
            ch.send(&verdict)?;
        }
        self.plan = None;
        self.start_plan(dev)
    }
}

impl Served for KvCmServer {
    fn admit(&mut self, dev: &mut Device, asked: &Asked) -> Result<Admit, AppError> {
        let Some((k, total)) = decode_req(&asked.data) else {
            eprintln!(
                "roce kv: refused a CM REQ from {} (REJ consumer_reject): it carries no roce kv request",
                asked.peer
            );
            return Ok(Admit::Refuse(b"not a roce kv REQ"));
        };
        if self.mine.is_empty() {
            // 1..=64 data QPs and the control QP.
            if !(2..=65).contains(&total) {
                return Ok(Admit::Refuse(b"bad QP count"));
            }
            let n = u32::from(total);
            self.mine = roce_driver::connect::qps::create_qps(
                dev,
                self.pd,
                n,
                roce_stack::QpCaps::default(),
                Access::REMOTE_WRITE,
            )?;
            self.psns = self.cfg.secrets.start_psns(n, 0xdec0)?;
        }
        Ok(Admit::Member {
            k: usize::from(k),
            of: usize::from(total),
        })
    }

    fn accept(&mut self, _dev: &mut Device, k: usize) -> Result<Accept, AppError> {
        Ok(Accept {
            qp: self.mine[k],
            psn: self.psns[k],
            base: roce_stack::ConnectParams::default(),
            rd_atomic: 16,
            cc: CcConfig::None,
            line_rate_bps: 100_000_000_000,
            reply: Vec::new(),
        })
    }

    fn poll(&mut self, group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        if group.all_up() && self.chan.is_none() {
            let last = self.mine[self.mine.len() - 1];
            self.chan = Some(MessageChannel::new(dev, self.pd, &last)?);
        }
        if self.refused.is_some() {
            return Ok(());
        }
        if let Some(p) = &mut self.plan {
            p.receiver.poll(dev, now)?;
        }
        if let Some(ch) = &mut self.chan {
            ch.poll(dev)?;
            if let Some(m) = ch.recv::<KvMsg>() {
                match m {
                    Err(e) => self.refuse(group, now, e),
                    Ok(m) if self.hello.is_none() => self.on_hello(group, dev, now, m)?,
                    Ok(m) => self.on_sent(group, dev, now, m)?,
                }
            }
        }
        if let Some(ch) = &mut self.chan {
            ch.poll(dev)?;
        }
        Ok(())
    }
}

/// The decode side's server: one prefill client (a set-up given up, or a client gone quiet,
/// costs it that client when it listens again).
struct KvHost {
    cfg: KvServerConfig,
}

impl Host for KvHost {
    type Run = KvCmServer;
    type Output = KvServerOutcome;

    fn name(&self) -> &'static str {
        "roce kv"
    }

    fn open(&mut self, ep: &mut Endpoint) -> Result<KvCmServer, DriverError> {
        Ok(KvCmServer {
            cfg: self.cfg,
            pd: ep.dev.alloc_pd(),
            mine: Vec::new(),
            psns: Vec::new(),
            chan: None,
            hello: None,
            pool: None,
            plan: None,
            next_plan: 0,
            refused: None,
            out: KvServerOutcome::default(),
        })
    }

    fn ended(
        &mut self,
        _ep: Endpoint,
        h: Hosted<KvCmServer>,
    ) -> Result<ControlFlow<KvServerOutcome>, DriverError> {
        match h.run.refused {
            Some(why) => Err(why.into()),
            None => Ok(ControlFlow::Break(h.run.out)),
        }
    }
}

/// Serves one prefill client that connects through the CM to `bind` (UDP 4791) on RDMA-CM
/// port `port`, as the decode side. Blocking; `ready` is called once the socket is bound.
/// A set-up given up, or a client that goes quiet half-way, costs the server that client
/// (one line) when `after` says to listen again.
pub(crate) fn serve_cm(
    bind: IpAddr,
    port: u16,
    cfg: KvServerConfig,
    after: AfterGivingUp,
    ready: impl FnOnce(),
) -> Result<KvServerOutcome, DriverError> {
    let at = Listen {
        bind,
        port,
        secrets: cfg.secrets,
        link: cfg.link,
        impairment: cfg.impairment,
        salt: 0xdec0,
    };
    cm_group::serve(at, KvHost { cfg }, after, ready)
}

/// The prefill side's phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Welcome,
    Blocks,
    Sending,
    Verdict,
    Releasing,
}

/// The prefill side's plan in progress.
struct ClientPlan {
    sender: KvSender,
    sizes: (u64, u64, u64),
    before: QpStats,
    started: std::time::Instant,
    seconds: f64,
    after: QpStats,
}

struct KvCmClient {
    cfg: KvConfig,
    plans: Vec<PlanSpec>,
    pd: PdHandle,
    mine: Vec<LocalQp>,
    chan: Option<MessageChannel>,
    phase: Phase,
    src: MrHandle,
    pool: Option<RemoteBuffer>,
    next_plan: u32,
    plan: Option<ClientPlan>,
    rows: Vec<super::run::PlanRow>,
    errors: Vec<String>,
}

impl KvCmClient {
    /// The control message the current phase waits for.
    fn on_message(
        &mut self,
        group: &mut Group,
        dev: &mut Device,
        now: Instant,
        m: KvMsg,
    ) -> Result<(), AppError> {
        let unexpected = || AppError::Peer(PeerFault::OutOfTurn("a control message"));
        match (self.phase, m) {
            (Phase::Welcome, KvMsg::Welcome { pool }) => {
                if pool.len < self.cfg.spec.pool_bytes {
                    return Err(PeerFault::invalid(super::run::ServerAnswer::ShortPool {
                        has: pool.len,
                        needs: self.cfg.spec.pool_bytes,
                    })
                    .into());
                }
                self.pool = Some(pool);
                self.phase = Phase::Blocks;
            }
            (Phase::Blocks, KvMsg::Blocks { plan, blocks }) if plan == self.next_plan => {
                let spec = self.cfg.spec;
                let p = &self.plans[plan as usize];
                let transfer = spec
                    .transfer(p, plan, &blocks)
                    .map_err(|e| AppError::check(format!("plan {}", p.name), e))?;
                let data = transfer.source();
                if let Some(m) = dev.mr_mut(self.src) {
                    m.as_mut_slice()[..data.len()].copy_from_slice(&data);
                }
                let sizes = (transfer.wrs(), transfer.copies, transfer.bytes);
                let pool = self.pool.unwrap_or(RemoteBuffer {
                    va: 0,
                    rkey: roce_proto::RKey(0),
                    len: 0,
                });
                let sender = KvSender::new(
                    dev,
                    transfer,
                    self.src,
                    &data_qps(&self.mine, false),
                    pool.va,
                    pool.rkey,
                )?;
                let before = dev.stats();
                self.plan = Some(ClientPlan {
                    sender,
                    sizes,
                    before,
                    started: std::time::Instant::now(),
                    seconds: 0.0,
                    after: before,
                });
                self.phase = Phase::Sending;
            }
            (
                Phase::Verdict,
                KvMsg::Verified {
                    plan,
                    complete,
                    arrived,
                    mismatches,
                    ..
                },
            ) if plan == self.next_plan => {
                let p = &self.plans[plan as usize];
                let Some(run) = self.plan.take() else {
                    return Err(unexpected());
                };
                if !complete && mismatches.is_empty() {
                    self.errors.push(format!(
                        "{}: {arrived} of {} immediates arrived",
                        p.name, self.cfg.spec.qps
                    ));
                }
                self.errors.extend(mismatches);
                self.rows.push(plan_row(
                    p,
                    run.sizes,
                    (&run.before, &run.after),
                    run.seconds,
                    complete,
                ));
                self.next_plan += 1;
                if (self.next_plan as usize) < self.plans.len() {
                    self.phase = Phase::Blocks;
                } else {
                    self.phase = Phase::Releasing;
                    group.release(now, &[]);
                }
            }
            _ => return Err(unexpected()),
        }
        Ok(())
    }
}

impl Joined for KvCmClient {
    fn released_early(&mut self, group: &Group, k: usize) -> Result<(), AppError> {
        let why = group.release_data(k).map(release_text).unwrap_or_default();
        let why = if why.is_empty() {
            "no reason given".to_string()
        } else {
            why
        };
        Err(PeerFault::Refused { who: "client", why }.into())
    }

    fn poll(&mut self, group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        if self.phase == Phase::Connecting && group.all_up() {
            let last = self.mine[self.mine.len() - 1];
            let mut ch = MessageChannel::new(dev, self.pd, &last)?;
            ch.send(&KvMsg::Hello {
                protocol: super::run::KV_PROTOCOL,
                spec: self.cfg.spec,
                transport: self.cfg.transport,
                plans: self.plans.clone(),
            })?;
            self.chan = Some(ch);
            self.phase = Phase::Welcome;
        }
        if self.phase == Phase::Sending {
            if let Some(p) = &mut self.plan {
                p.sender.poll(dev, now)?;
                if p.sender.done() {
                    p.seconds = p.started.elapsed().as_secs_f64();
                    p.after = dev.stats();
                    if let Some(ch) = &mut self.chan {
                        ch.send(&KvMsg::Sent {
                            plan: self.next_plan,
                        })?;
                    }
                    self.phase = Phase::Verdict;
                }
            }
        }
        if let Some(ch) = &mut self.chan {
            ch.poll(dev)?;
            if let Some(m) = ch.recv::<KvMsg>() {
                let m = m?;
                self.on_message(group, dev, now, m)?;
            }
        }
        if let Some(ch) = &mut self.chan {
            ch.poll(dev)?;
        }
        Ok(())
    }
}

/// Connects to a `--cm` decode server at `server` (UDP 4791, RDMA-CM port `port`) from
/// `local`, pushes every plan as the prefill side, releases the connections, and reports.
pub(crate) fn run_client_cm(
    local: IpAddr,
    server: IpAddr,
    port: u16,
    cfg: &KvConfig,
) -> Result<KvReport, DriverError> {
    cfg.validate()?;
    if local.is_unspecified() {
        return Err(crate::Combination::CmNeedsBind.into());
    }
    runtime()?.block_on(async move {
        let spec = cfg.spec;
        let plans = cfg.all_plans();
        let mut dev = cfg.secrets.device(0x9ef1)?;
        let pd = dev.alloc_pd();
        // The transfer's QPs and the control QP.
        let mine = super::run::create_kv_qps(&mut dev, pd, spec.qps + 1, cfg.transport.mtu)?;
        let psns = cfg.secrets.start_psns(spec.qps + 1, 0x9ef1)?;
        let src_len = plans.iter().map(|p| spec.source_len(p)).max().unwrap_or(0);
        let src = dev.reg_mr(pd, src_len as usize, Access::LOCAL_WRITE);
        let mut ep = bind_endpoint(
            dev,
            SocketAddr::new(local, ROCEV2_UDP_PORT),
            ROCEV2_UDP_PORT,
            cfg.impairment,
            cfg.link,
        )?;
        let t = &cfg.transport;
        let terms = Terms {
            port,
            responder_resources: t.max_dest_rd_atomic,
            initiator_depth: t.max_rd_atomic,
            mtu: t.mtu,
            retry_count: t.retry_cnt,
            local_ack_timeout: t.timeout,
            base: cfg.transport,
            line_rate_bps: 100_000_000_000,
            src_port: SourcePort::Fixed(ROCEV2_UDP_PORT),
            ..Terms::default()
        };
        let total = mine.len() as u16;
        let with_psns: Vec<(LocalQp, Psn)> = mine.iter().copied().zip(psns).collect();
        let session = CmSession::client_with(
            local,
            ep.now(),
            &with_psns,
            terms,
            &cfg.secrets,
            0x9ef1,
            "roce kv",
            server,
            |k| req_data(k as u16, total),
        )?;
        let n = mine.len();
        let app = KvCmClient {
            cfg: cfg.clone(),
            plans,
            pd,
            mine,
            chan: None,
            phase: Phase::Connecting,
            src,
            pool: None,
            next_plan: 0,
            plan: None,
            rows: Vec::new(),
            errors: Vec::new(),
        };
        let mut app = Joining::new(session, n, app);
        let silence = cfg.silence.max(Duration::from_secs(5));
        ep.run(&mut app, true, pending(), silence).await?;
        Ok(kv_report(cfg, app.run.rows, app.run.errors, ep.link()))
    })
}

/// `roce kv --cm`: a `--cm` decode server at `server_ip` and the prefill client at
/// `client_ip` (both UDP 4791, so two addresses), each on its own thread.
pub(crate) fn loopback_cm(
    client_ip: IpAddr,
    server_ip: IpAddr,
    cfg: &KvConfig,
) -> Result<KvReport, DriverError> {
    cfg.validate()?;
    if client_ip == server_ip {
        return Err(crate::Combination::CmNeedsTwoAddresses.into());
    }
    let server_cfg = KvServerConfig {
        impairment: roce_driver::impair::Impairment {
            seed: cfg.impairment.seed.wrapping_add(1),
            ..cfg.impairment
        },
        secrets: cfg.secrets,
        // The client's own pool, whatever its size: one user runs both ends.
        max_pool: u64::MAX,
        link: cfg.link,
    };
    let port = 18515;
    let (report, served) = roce_driver::connect::one_process_both(
        "roce-kv-cm-decode",
        move |ready| serve_cm(server_ip, port, server_cfg, AfterGivingUp::Fail, ready),
        || run_client_cm(client_ip, server_ip, port, cfg),
    )?;
    // The client's failure is the story; a server failure after a finished client is
    // part of its report.
    let mut r = report?;
    if let Some(Err(e)) = served {
        r.errors.push(format!("server: {e}"));
        r.ok = false;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn req_private_data_round_trips() {
        assert_eq!(decode_req(&req_data(3, 5)), Some((3, 5)));
        assert_eq!(decode_req(b"rkv0\0\x03\0\x05"), None);
        assert_eq!(decode_req(b"rkv1\0"), None);
        assert_eq!(release_text(b"no\x07 way\0junk"), "no way");
    }
}
