//! `roce kv --cm`: the KV push with its QPs connected through the IB CM on QP1 (IBTA Vol 1
//! ch. 12) instead of the TCP control connection. Everything goes over UDP 4791.
//!
//! As rdma_cm applications do, the client asks for one more RC QP than the transfer uses: the
//! control QP, over which the two ends exchange the kv messages of the TCP path (hello,
//! welcome, blocks, sent, verified) as SENDs, one JSON message each (`QpChannel`). Each REQ's
//! private data (after RDMA-CM's `cma_hdr`) names its QP's index and the QP count; the REPs
//! carry nothing. When every plan is done the client releases the connections (DREQ/DREP); a
//! server that refuses the hello releases them itself with the reason in the DREQ's private
//! data, which the client reports.
use std::collections::VecDeque;
use std::future::pending;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::qps::{LocalQp, RemoteBuffer};
use roce_driver::{bind_endpoint, runtime, AppError, Application, DriverError, PeerFault};
use roce_proto::{Psn, Qpn, ROCEV2_UDP_PORT};
use roce_stack::{
    Access, CcConfig, Completion, CqHandle, Device, Instant, MrHandle, PdHandle, QpStats,
    RecvRequest, SgList, Sge, WcStatus, WorkRequest, WrOp,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::run::{
    check_hello, kv_report, plan_row, plan_verdict, KvConfig, KvMsg, KvReport, KvServerConfig,
    KvServerOutcome,
};
use super::{KvReceiver, KvSender, KvSpec, PlanSpec, Transfer};
use roce_driver::connect::cm_session::{Asked, CmSession, SessionEvent, SourcePort, Terms};
use roce_driver::connect::AfterGivingUp;

/// First bytes of a kv REQ's consumer private data.
const MAGIC: &[u8; 4] = b"rkv1";

/// Largest control message (one SEND).
pub const MAX_CONTROL_MESSAGE: usize = 4 << 20;

/// Receives the control channel keeps posted.
const RECV_SLOTS: usize = 2;

/// Control messages received and not yet taken, at most (a peer that floods is an error).
const MAX_INBOX: usize = 8;

/// Messages over an RC QP: one JSON document per SEND, at most [`MAX_CONTROL_MESSAGE`] bytes,
/// one SEND in flight, [`RECV_SLOTS`] receives posted (the peer's extra SENDs wait in RNR
/// retries).
pub(crate) struct QpChannel {
    qpn: Qpn,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    /// `[send slot | receive slot 0 | receive slot 1]`.
    mr: MrHandle,
    outbox: VecDeque<Vec<u8>>,
    sending: bool,
    inbox: VecDeque<Vec<u8>>,
}

impl QpChannel {
    /// A channel on `qp` (connected, or about to be): registers its buffers, posts receives.
    pub(crate) fn new(dev: &mut Device, pd: PdHandle, qp: &LocalQp) -> Result<Self, AppError> {
        let mr = dev.reg_mr(
            pd,
            MAX_CONTROL_MESSAGE * (1 + RECV_SLOTS),
            Access::LOCAL_WRITE,
        );
        let c = Self {
            qpn: qp.qpn,
            send_cq: qp.send_cq,
            recv_cq: qp.recv_cq,
            mr,
            outbox: VecDeque::new(),
            sending: false,
            inbox: VecDeque::new(),
        };
        for slot in 0..RECV_SLOTS {
            c.post_recv(dev, slot)?;
        }
        Ok(c)
    }

    fn slot_sge(&self, dev: &Device, at: usize, len: u32) -> Result<Sge, AppError> {
        dev.mr(self.mr)
            .map(|m| m.sge((at * MAX_CONTROL_MESSAGE) as u64, len))
            .ok_or(AppError::Defect("the control region vanished"))
    }

    fn post_recv(&self, dev: &mut Device, slot: usize) -> Result<(), AppError> {
        let sge = self.slot_sge(dev, 1 + slot, MAX_CONTROL_MESSAGE as u32)?;
        dev.post_recv(
            self.qpn,
            RecvRequest {
                wr_id: slot as u64,
                sgl: SgList::one(sge),
            },
        )
        .map_err(|e| AppError::post(0, "a control receive", e))
    }

    /// Queues `msg`.
    pub(crate) fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), AppError> {
        let v = serde_json::to_vec(msg).map_err(|e| AppError::check("a control message", e))?;
        if v.len() > MAX_CONTROL_MESSAGE {
            return Err(AppError::Defect("a control message larger than its slot"));
        }
        self.outbox.push_back(v);
        Ok(())
    }

    /// The next message received, decoded (`Some(Err)`: not a message of this protocol).
    pub(crate) fn recv<T: DeserializeOwned>(&mut self) -> Option<Result<T, PeerFault>> {
        self.inbox.pop_front().map(|b| {
            serde_json::from_slice(&b).map_err(|e| PeerFault::Unreadable {
                what: "control message",
                source: Box::new(e),
            })
        })
    }

    fn failed(what: &'static str, c: &Completion) -> AppError {
        AppError::completion(what, c)
    }

    /// Takes completions, re-posts receives, sends what is queued.
    pub(crate) fn poll(&mut self, dev: &mut Device) -> Result<(), AppError> {
        while let Some(c) = dev.poll_cq(self.recv_cq) {
            if c.status != WcStatus::Success {
                return Err(Self::failed("receive", &c));
            }
            if self.inbox.len() >= MAX_INBOX {
                return Err(PeerFault::Overran {
                    what: "control messages",
                    limit: MAX_INBOX,
                }
                .into());
            }
            let slot = (c.wr_id as usize).min(RECV_SLOTS - 1);
            let at = (1 + slot) * MAX_CONTROL_MESSAGE;
            let len = (c.byte_len as usize).min(MAX_CONTROL_MESSAGE);
            let bytes = dev
                .mr(self.mr)
                .map(|m| m.as_slice()[at..at + len].to_vec())
                .unwrap_or_default();
            self.inbox.push_back(bytes);
            self.post_recv(dev, slot)?;
        }
        while let Some(c) = dev.poll_cq(self.send_cq) {
            if c.status != WcStatus::Success {
                return Err(Self::failed("send", &c));
            }
            self.sending = false;
        }
        if !self.sending {
            if let Some(m) = self.outbox.pop_front() {
                if let Some(r) = dev.mr_mut(self.mr) {
                    r.as_mut_slice()[..m.len()].copy_from_slice(&m);
                }
                let sge = self.slot_sge(dev, 0, m.len() as u32)?;
                let sgl = if m.is_empty() {
                    SgList::new()
                } else {
                    SgList::one(sge)
                };
                dev.post_send(self.qpn, WorkRequest::new(0, WrOp::Send, sgl))
                    .map_err(|e| AppError::post(0, "a control send", e))?;
                self.sending = true;
            }
        }
        Ok(())
    }
}

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
    session: CmSession,
    cfg: KvServerConfig,
    pd: PdHandle,
    mine: Vec<LocalQp>,
    psns: Vec<Psn>,
    /// Each QP's connection, once its REQ was accepted.
    conns: Vec<Option<usize>>,
    established: usize,
    released: usize,
    chan: Option<QpChannel>,
    hello: Option<(KvSpec, Vec<PlanSpec>)>,
    pool: Option<MrHandle>,
    plan: Option<ServerPlan>,
    next_plan: u32,
    refused: Option<PeerFault>,
    out: KvServerOutcome,
    /// Stop once every QP is established (the first phase), or once every QP is released.
    until_established: bool,
    /// The set-up was given up (the session's bounds, our REP refused, a client gone
    /// quiet): listen again, afresh.
    abandoned: bool,
}

impl KvCmServer {
    fn on_asked(&mut self, dev: &mut Device, now: Instant, asked: Asked) -> Result<(), AppError> {
        let Some((k, total)) = decode_req(&asked.data) else {
            eprintln!(
                "roce kv: refused a CM REQ from {} (REJ consumer_reject): it carries no roce kv request",
                asked.peer
            );
            self.session.refuse(&asked, b"not a roce kv REQ");
            return Ok(());
        };
        if self.conns.is_empty() {
            // 1..=64 data QPs and the control QP.
            if !(2..=65).contains(&total) {
                self.session.refuse(&asked, b"bad QP count");
                return Ok(());
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
            self.conns = vec![None; n as usize];
        } else if usize::from(total) != self.conns.len() {
            // The session refuses other peers while a set-up is under way.
            self.session.refuse(&asked, b"busy");
            return Ok(());
        }
        let k = usize::from(k);
        if k >= self.conns.len() || self.conns[k].is_some() {
            self.session.refuse(&asked, b"bad QP index");
            return Ok(());
        }
        let i = self.session.accept(
            dev,
            now,
            &asked,
            self.mine[k],
            self.psns[k],
            &roce_stack::ConnectParams::default(),
            16,
            CcConfig::None,
            100_000_000_000,
            &[],
        )?;
        self.conns[k] = Some(i);
        Ok(())
    }

    /// Refuses the client's hello: the reason goes in the DREQs.
    fn refuse(&mut self, now: Instant, why: PeerFault) {
        let why_text = why.to_string();
        let text = why_text.as_bytes();
        let text = &text[..text.len().min(200)];
        for i in self.conns.iter().flatten() {
            self.session.set_release_data(*i, text);
            self.session.disconnect(now, *i);
        }
        self.refused = Some(why);
    }

    fn on_hello(&mut self, dev: &mut Device, now: Instant, msg: KvMsg) -> Result<(), AppError> {
        let KvMsg::Hello {
            protocol,
            spec,
            transport,
            plans,
            ..
        } = msg
        else {
            self.refuse(now, PeerFault::Expected("a kv hello"));
            return Ok(());
        };
        let checked =
            roce_driver::connect::qps::check_protocol("kv", protocol, super::run::KV_PROTOCOL)
                .and_then(|()| {
                    let qps = self.conns.len() - 1;
                    check_hello(&spec, &plans, &transport, self.cfg.max_pool, qps)
                        .map_err(PeerFault::invalid)
                });
        if let Err(why) = checked {
            self.refuse(now, why);
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
            ch.send(&KvMsg::Welcome {
                qps: Vec::new(),
                roce_port: ROCEV2_UDP_PORT,
                pool: pool_buffer,
            })?;
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

    fn on_sent(&mut self, dev: &mut Device, now: Instant, msg: KvMsg) -> Result<(), AppError> {
        let (Some(p), Some((spec, plans))) = (self.plan.as_mut(), &self.hello) else {
            return Ok(());
        };
        match msg {
            KvMsg::Sent { plan } if plan == p.i => {}
            _ => {
                self.refuse(now, PeerFault::OutOfTurn("a control message"));
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

impl Application for KvCmServer {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.session.poll(dev, now)?;
        while let Some(e) = self.session.next_event() {
            match e {
                SessionEvent::Asked(a) => self.on_asked(dev, now, a)?,
                SessionEvent::Up(_) => self.established += 1,
                // A refused client's release, answered or not, counts too.
                SessionEvent::Released(_) => self.released += 1,
                // Any address can send a REQ: one never confirmed, or a client gone quiet,
                // costs the server its set-up (and the pool it made), not its life.
                SessionEvent::Restarted => self.abandoned = true,
                SessionEvent::Accepted(_) => {}
            }
        }
        if self.abandoned {
            self.session.flush(dev);
            return Ok(());
        }
        let all = !self.conns.is_empty() && self.established == self.conns.len();
        if all && self.chan.is_none() {
            let last = self.mine[self.mine.len() - 1];
            self.chan = Some(QpChannel::new(dev, self.pd, &last)?);
        }
        if self.refused.is_none() {
            if let Some(p) = &mut self.plan {
                p.receiver.poll(dev, now)?;
            }
            if let Some(ch) = &mut self.chan {
                ch.poll(dev)?;
                if let Some(m) = ch.recv::<KvMsg>() {
                    match m {
                        Err(e) => self.refuse(now, e),
                        Ok(m) if self.hello.is_none() => self.on_hello(dev, now, m)?,
                        Ok(m) => self.on_sent(dev, now, m)?,
                    }
                }
            }
            if let Some(ch) = &mut self.chan {
                ch.poll(dev)?;
            }
        }
        self.session.flush(dev);
        Ok(())
    }

    fn done(&self) -> bool {
        let all = !self.conns.is_empty();
        if self.abandoned {
            return true;
        }
        if self.until_established {
            all && self.established == self.conns.len()
        } else {
            all && self.released == self.conns.len()
        }
    }
}

/// How long a server serving a client waits with nothing from it.
const SERVING_SILENCE: Duration = Duration::from_secs(30);

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
    runtime()?.block_on(async move {
        let mut ready = Some(ready);
        let mut attempts = 0u64;
        // Each set-up on a fresh device, CM and endpoint: one given up takes its pool along.
        loop {
            attempts += 1;
            let mut dev = cfg.secrets.device(0xdec0)?;
            let pd = dev.alloc_pd();
            let mut ep = bind_endpoint(
                dev,
                SocketAddr::new(bind, ROCEV2_UDP_PORT),
                ROCEV2_UDP_PORT,
                cfg.impairment,
                cfg.link,
            )?;
            let terms = Terms {
                port,
                ..Terms::default()
            };
            let session =
                CmSession::listener(ep.now(), terms, &cfg.secrets, 0xdec0 ^ attempts, "roce kv")?;
            let mut app = KvCmServer {
                session,
                cfg,
                pd,
                mine: Vec::new(),
                psns: Vec::new(),
                conns: Vec::new(),
                established: 0,
                released: 0,
                chan: None,
                hello: None,
                pool: None,
                plan: None,
                next_plan: 0,
                refused: None,
                out: KvServerOutcome::default(),
                until_established: true,
                abandoned: false,
            };
            if let Some(r) = ready.take() {
                r();
            }
            // Waiting for a client has no silence bound; serving one has (a client that fails
            // midway stops answering).
            let forever = Duration::from_secs(365 * 24 * 3600);
            ep.run(&mut app, true, pending(), forever).await?;
            if !app.abandoned {
                app.until_established = false;
                let ran = ep.run(&mut app, true, pending(), SERVING_SILENCE).await;
                if let Err(e) = ran {
                    after.tolerate(e, "roce kv", app.session.peer())?;
                    continue;
                }
            }
            if app.abandoned {
                after.set_up_given_up()?;
                continue;
            }
            if let Some(why) = app.refused {
                return Err(why.into());
            }
            return Ok(app.out);
        }
    })
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
    session: CmSession,
    cfg: KvConfig,
    plans: Vec<PlanSpec>,
    pd: PdHandle,
    mine: Vec<LocalQp>,
    established: usize,
    released: usize,
    chan: Option<QpChannel>,
    phase: Phase,
    src: MrHandle,
    pool: Option<RemoteBuffer>,
    next_plan: u32,
    plan: Option<ClientPlan>,
    rows: Vec<super::run::PlanRow>,
    errors: Vec<String>,
}

impl KvCmClient {
    fn on_session_event(&mut self, e: SessionEvent) -> Result<(), AppError> {
        match e {
            SessionEvent::Up(_) => self.established += 1,
            SessionEvent::Released(k) => {
                if self.phase == Phase::Releasing {
                    self.released += 1;
                } else {
                    let why = self
                        .session
                        .release_data(k)
                        .map(release_text)
                        .unwrap_or_default();
                    let why = if why.is_empty() {
                        "no reason given".to_string()
                    } else {
                        why
                    };
                    return Err(PeerFault::Refused { who: "client", why }.into());
                }
            }
            // A server's only.
            SessionEvent::Asked(_) | SessionEvent::Accepted(_) | SessionEvent::Restarted => {}
        }
        Ok(())
    }

    /// The control message the current phase waits for.
    fn on_message(&mut self, dev: &mut Device, now: Instant, m: KvMsg) -> Result<(), AppError> {
        let unexpected = || AppError::Peer(PeerFault::OutOfTurn("a control message"));
        match (self.phase, m) {
            (Phase::Welcome, KvMsg::Welcome { pool, .. }) => {
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
                    for i in 0..self.mine.len() {
                        self.session.disconnect(now, i);
                    }
                }
            }
            _ => return Err(unexpected()),
        }
        Ok(())
    }
}

impl Application for KvCmClient {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.session.poll(dev, now)?;
        while let Some(e) = self.session.next_event() {
            self.on_session_event(e)?;
        }
        if self.phase == Phase::Connecting && self.established == self.mine.len() {
            let last = self.mine[self.mine.len() - 1];
            let mut ch = QpChannel::new(dev, self.pd, &last)?;
            ch.send(&KvMsg::Hello {
                protocol: super::run::KV_PROTOCOL,
                spec: self.cfg.spec,
                transport: self.cfg.transport,
                roce_port: ROCEV2_UDP_PORT,
                qps: Vec::new(),
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
                self.on_message(dev, now, m)?;
            }
        }
        if let Some(ch) = &mut self.chan {
            ch.poll(dev)?;
        }
        self.session.flush(dev);
        Ok(())
    }

    fn done(&self) -> bool {
        self.phase == Phase::Releasing && self.released == self.mine.len()
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
        let mut app = KvCmClient {
            session,
            cfg: cfg.clone(),
            plans,
            pd,
            mine,
            established: 0,
            released: 0,
            chan: None,
            phase: Phase::Connecting,
            src,
            pool: None,
            next_plan: 0,
            plan: None,
            rows: Vec::new(),
            errors: Vec::new(),
        };
        let silence = cfg.silence.max(Duration::from_secs(5));
        ep.run(&mut app, true, pending(), silence).await?;
        Ok(kv_report(cfg, app.rows, app.errors, ep.link()))
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
