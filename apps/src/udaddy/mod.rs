//! `roce udaddy`: librdmacm's `udaddy` (rdma-core `librdmacm/examples/udaddy.c`): a UD QP
//! found through SIDR (IBTA Vol 1 §12.11) in RDMA-CM's UDP port space (port 7174), then UD
//! SENDs with immediate both ways, so that the stock `udaddy` can be the other end.
//!
//! The client sends a SIDR_REQ (RDMA-CM's `cma_hdr` as private data); the server answers with
//! its UD QP and Q_Key 0x01234567 (RDMA-CM's `RDMA_UDP_QKEY`, which a Linux client requires).
//! The client then SENDs `-C` messages of `-S` bytes with its own QPN as the immediate; the
//! server learns where to answer from the first (the sender's address, the QPN in the
//! immediate, as udaddy does) and SENDs as many back. Both post their receives (`-S` + the
//! 40-byte GRH area) first. UD loses what it loses: a client that has not received everything
//! within the silence bound fails, naming how many arrived.
//!
//! The server takes messages only from a peer whose SIDR_REQ it answered (and the client
//! only from its server): anyone else's are dropped and counted, their receives posted
//! again. A peer that breaks the exchange (a message of another size, no QPN in the
//! immediate) or stops half-way (silent for the bound) costs the server that peer; it
//! serves the next.
use std::net::IpAddr;
use std::time::Duration;

use roce_driver::connect::rdma_cm::cm_end;
use roce_driver::connect::sidr::SidrSession;
use roce_driver::connect::{Connector, Exchange, QpRequest, Side};
use roce_driver::{runtime, AppError, Application, DriverError, LinkChoice, Secrets};
use roce_proto::{QKey, Qpn};
use roce_stack::ud::{AddressHandle, UdSend, GRH_LEN};
use roce_stack::{
    Access, ConnectParams, Device, Instant, MrHandle, QpCaps, RecvRequest, Service, SgList,
    WcOpcode, WcStatus,
};
use serde::Serialize;

/// udaddy's port.
pub const PORT: u16 = 7174;

pub use roce_proto::rdma_cm::RDMA_UDP_QKEY;

/// A run's settings, as udaddy's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UdaddySpec {
    /// `-C`: messages each way (default 10).
    pub count: u32,
    /// `-S`: bytes per message (default 100; at most the MTU).
    pub size: u32,
    /// The largest message (the UD QP's MTU).
    pub mtu: u32,
    /// RDMA-CM port (UDP port space).
    pub port: u16,
}

impl Default for UdaddySpec {
    fn default() -> Self {
        Self {
            count: 10,
            size: 100,
            mtu: 4096,
            port: PORT,
        }
    }
}

impl UdaddySpec {
    /// Refuses what udaddy refuses.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        use crate::ConfigError as C;
        C::check_flag("-S", self.size.into(), 1, self.mtu.into(), Some("the MTU"))?;
        C::check_flag("-C", self.count.into(), 1, 4096, None)
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UdaddyResult {
    /// `"client"` or `"server"`.
    pub role: &'static str,
    /// Messages sent.
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// The peer's address.
    pub peer: String,
    /// The peer's UD QP.
    pub peer_qpn: u32,
    /// Messages dropped: from a sender no exchange named.
    pub strangers: u64,
    /// Peers the server gave up (a broken exchange, or silent half-way).
    pub given_up: u64,
}

/// One side of udaddy.
pub struct Udaddy {
    spec: UdaddySpec,
    client: bool,
    session: SidrSession,
    qp: roce_driver::connect::qps::LocalQp,
    buf: MrHandle,
    /// Where this side's messages go: the client's server once resolved, the server's
    /// peer once its first message came.
    ah: Option<AddressHandle>,
    sent: u32,
    send_done: u32,
    received: u32,
    strangers: u64,
    /// When the peer's last message came.
    heard: Instant,
}

const RECV: u64 = 1;
const SEND: u64 = 2;

/// How long a side waits for the peer's messages.
const SILENCE: Duration = Duration::from_secs(10);

impl Udaddy {
    fn new(
        side: &mut Side,
        spec: UdaddySpec,
        client: bool,
        session: SidrSession,
    ) -> Result<Self, AppError> {
        let heard = side.ep.now();
        let dev = &mut side.ep.dev;
        let len = spec.size as usize + GRH_LEN;
        let buf = dev.reg_mr(side.pd, len, Access::LOCAL_WRITE);
        let me = Self {
            spec,
            client,
            session,
            qp: side.qps[0],
            buf,
            ah: None,
            sent: 0,
            send_done: 0,
            received: 0,
            strangers: 0,
            heard,
        };
        for _ in 0..spec.count {
            me.post_recv(dev)?;
        }
        Ok(me)
    }

    fn post_recv(&self, dev: &mut Device) -> Result<(), AppError> {
        let len = self.spec.size + GRH_LEN as u32;
        let sgl = SgList::one(dev.mr(self.buf).expect("buffer").sge(0, len));
        dev.post_recv(self.qp.qpn, RecvRequest { wr_id: RECV, sgl })
            .map_err(|e| AppError::post(0, "a receive", e))
    }

    fn send_all(&mut self, dev: &mut Device) -> Result<(), AppError> {
        let Some(ah) = self.ah else {
            return Ok(());
        };
        let sgl = SgList::one(
            dev.mr(self.buf)
                .expect("buffer")
                .sge(GRH_LEN as u64, self.spec.size),
        );
        while self.sent < self.spec.count {
            dev.post_ud_send(
                self.qp.qpn,
                UdSend {
                    wr_id: SEND,
                    sgl,
                    ah,
                    imm: Some(self.qp.qpn.0),
                    signaled: true,
                },
            )
            .map_err(|e| AppError::post(0, "a SEND", e))?;
            self.sent += 1;
        }
        Ok(())
    }

    /// A message received: taken when it comes from the peer (the server's first names it),
    /// dropped and its receive posted again otherwise.
    fn on_recv(
        &mut self,
        dev: &mut Device,
        now: Instant,
        c: &roce_stack::Completion,
    ) -> Result<(), AppError> {
        let from = c.src.map(|s| s.ip());
        let peer = match (self.ah, from) {
            (Some(ah), Some(ip)) if ah.remote == ip => Some(ah),
            (None, Some(ip)) if !self.client => {
                let qpn = Qpn(c.imm_data.unwrap_or(0));
                self.session
                    .reply_to(ip, qpn)
                    .filter(|_| c.imm_data.is_some())
            }
            _ => None,
        };
        let Some(peer) = peer else {
            self.strangers += 1;
            return self.post_recv(dev);
        };
        if c.byte_len != self.spec.size + GRH_LEN as u32 {
            let e = AppError::Size {
                qpn: c.qp_num,
                got: u64::from(c.byte_len).saturating_sub(GRH_LEN as u64),
                want: self.spec.size.into(),
                hint: Some("both sides need the same -S"),
            };
            if self.client {
                return Err(e);
            }
            // This message's receive and those the peer's earlier ones took.
            return self.restart(dev, peer.remote, &e.to_string(), self.received + 1);
        }
        self.ah = Some(peer);
        self.heard = now;
        self.received += 1;
        Ok(())
    }

    /// Server: gives up the peer (`why`) and waits for the next; the `taken` receives its
    /// messages took are posted again.
    fn restart(
        &mut self,
        dev: &mut Device,
        peer: IpAddr,
        why: &str,
        taken: u32,
    ) -> Result<(), AppError> {
        self.session.give_up(peer, why);
        for _ in 0..taken {
            self.post_recv(dev)?;
        }
        self.ah = None;
        self.received = 0;
        Ok(())
    }
}

impl Application for Udaddy {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.session.poll(dev, now)?;
        if self.client && self.ah.is_none() {
            if let Some(ah) = self.session.resolved() {
                self.ah = Some(ah);
                self.heard = now;
                self.send_all(dev)?;
            }
        }
        let q = self.qp;
        while let Some(c) = dev.poll_cq(q.send_cq).or_else(|| dev.poll_cq(q.recv_cq)) {
            if c.status != WcStatus::Success {
                return Err(AppError::completion("a message", &c));
            }
            if c.opcode == WcOpcode::Recv {
                self.on_recv(dev, now, &c)?;
            } else {
                self.send_done += 1;
            }
        }
        // A peer that stopped half-way costs the server that peer.
        if !self.client && self.sent == 0 && self.received > 0 {
            if let Some(ah) = self.ah {
                if now.saturating_duration_since(self.heard) >= SILENCE {
                    let why = format!(
                        "{} of {} messages, then silent for 10 s",
                        self.received, self.spec.count
                    );
                    self.restart(dev, ah.remote, &why, self.received)?;
                }
            }
        }
        if !self.client && self.received == self.spec.count {
            self.send_all(dev)?;
        }
        self.session.flush(dev);
        Ok(())
    }

    fn done(&self) -> bool {
        self.received == self.spec.count && self.send_done == self.spec.count
    }
}

async fn run_end(
    spec: UdaddySpec,
    client: bool,
    local: IpAddr,
    server: Option<IpAddr>,
    secrets: Secrets,
    link: LinkChoice,
    ready: impl FnOnce(),
) -> Result<UdaddyResult, DriverError> {
    let salt = if client { 0x0dc1 } else { 0x0d5e };
    let req = QpRequest {
        service: Service::Ud,
        qkey: QKey(RDMA_UDP_QKEY),
        count: 1,
        caps: QpCaps {
            max_send_wr: spec.count,
            max_recv_wr: spec.count,
            ..QpCaps::default()
        },
        srq: None,
        params: ConnectParams {
            mtu: spec.mtu,
            ..ConnectParams::default()
        },
    };
    let mut side = cm_end(&secrets, salt, req, local, link)?;
    let (qp, qkey, now) = (side.qps[0], QKey(RDMA_UDP_QKEY), side.ep.now());
    let name = "roce udaddy";
    let session = match server {
        Some(peer) => {
            SidrSession::client(local, qp, qkey, spec.port, peer, now, &secrets, salt, name)?
        }
        None => SidrSession::server(local, qp, qkey, spec.port, now, &secrets, salt, name)?,
    };
    let mut app = Udaddy::new(&mut side, spec, client, session).map_err(DriverError::from)?;
    app.session.flush(&mut side.ep.dev);
    ready();
    // The server waits for its client as long as it is left running; one that came and
    // stopped is given up after the silence bound.
    let silence = if client {
        SILENCE
    } else {
        Duration::from_secs(365 * 24 * 3600)
    };
    let r = side
        .ep
        .run(&mut app, true, std::future::pending(), silence)
        .await;
    if let Err(e) = r {
        let what = format!(
            "udaddy stopped after {} of {} messages received and {} sent",
            app.received, spec.count, app.send_done
        );
        return Err(DriverError::step(what, e));
    }
    Ok(UdaddyResult {
        role: if client { "client" } else { "server" },
        sent: u64::from(app.send_done),
        received: u64::from(app.received),
        peer: app.ah.map_or_else(
            || server.map(|s| s.to_string()).unwrap_or_default(),
            |a| a.remote.to_string(),
        ),
        peer_qpn: app.ah.map_or(0, |a| a.dest_qpn.0),
        strangers: app.strangers,
        given_up: app.session.given_up(),
    })
}

/// Runs one end of the exchange, as the connector names it: a server that serves one client
/// and exits (as the stock tool), or a client. The exchange is SIDR; the port is the
/// connector's.
pub fn run(mut c: Connector, mut spec: UdaddySpec) -> Result<UdaddyResult, DriverError> {
    let name = "udaddy";
    c.expect(name, &[Exchange::Sidr])?;
    let end = c.one_end(name)?;
    spec.port = end.port;
    spec.validate()?;
    let ready = c.take_ready();
    let (secrets, link) = (c.secrets, c.link);
    runtime()?.block_on(run_end(
        spec, end.client, end.local, end.server, secrets, link, ready,
    ))
}
