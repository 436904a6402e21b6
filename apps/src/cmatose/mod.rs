//! `roce ucmatose` and `roce rdma-server` / `roce rdma-client`: librdmacm's SEND exchanges
//! over RDMA-CM (port 7471), so that the stock `ucmatose` (`cmatose.c`) and `rdma_server` /
//! `rdma_client` (rdma-core `librdmacm/examples/`) can be the other end.
//!
//! * ucmatose: `-c` connections, each a QP; the server SENDs `-C` messages of `-S` bytes on
//!   each, the client receives them all and SENDs as many back; then the server disconnects
//!   (DREQ) and the client answers (DREP).
//! * rdma_server / rdma_client: one connection; the client SENDs 16 bytes, the server answers
//!   with 16; then both disconnect (the two DREQs may cross).
//!
//! Both post their receives before the CM exchange (the stock client asks for RNR retry 0, so
//! a message that finds no receive fails its connection).
use std::net::IpAddr;
use std::time::Duration;

use roce_driver::connect::cm_session::{CmSession, SessionEvent, Terms};
use roce_driver::connect::qps::LocalQp;
use roce_driver::connect::rdma_cm::cm_end;
use roce_driver::connect::{Connector, Exchange, QpRequest, Side};
use roce_driver::{runtime, AppError, Application, DriverError, LinkChoice, PeerFault, Secrets};
use roce_stack::{
    Access, Device, Instant, MrHandle, QpCaps, RecvRequest, SgList, WcOpcode, WcStatus,
    WorkRequest, WrOp,
};
use serde::Serialize;

/// The stock tools' port.
pub const PORT: u16 = 7471;

/// Which exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// `ucmatose`: the server sends first, then disconnects.
    Ucmatose,
    /// `rdma_server` / `rdma_client`: the client sends first, both disconnect.
    RdmaServer,
}

impl Tool {
    /// The stock tool's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ucmatose => "ucmatose",
            Self::RdmaServer => "rdma_server/rdma_client",
        }
    }
}

/// A run's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SendsSpec {
    /// The exchange.
    pub tool: Tool,
    /// `-c`: connections.
    pub connections: u32,
    /// `-C`: messages each way per connection.
    pub count: u32,
    /// `-S`: bytes per message.
    pub size: u32,
    /// RDMA-CM port (TCP port space).
    pub port: u16,
}

impl SendsSpec {
    /// The tool's defaults: ucmatose 1 connection of 10 messages of 100 bytes; rdma_server
    /// one message of 16 bytes.
    pub fn new(tool: Tool) -> Self {
        match tool {
            Tool::Ucmatose => Self {
                tool,
                connections: 1,
                count: 10,
                size: 100,
                port: PORT,
            },
            Tool::RdmaServer => Self {
                tool,
                connections: 1,
                count: 1,
                size: 16,
                port: PORT,
            },
        }
    }

    /// Refuses what cannot run.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        use crate::ConfigError as C;
        C::check_flag("-c", self.connections.into(), 1, 64, None)?;
        C::check_flag("-C", self.count.into(), 1, 4096, None)?;
        C::check_flag("-S", self.size.into(), 1, 1 << 20, Some("bytes"))?;
        Ok(())
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SendsResult {
    /// The exchange.
    pub tool: Tool,
    /// `"client"` or `"server"`.
    pub role: &'static str,
    /// Connections established and released.
    pub connections: u32,
    /// Messages sent, over every connection.
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// The peer's address.
    pub peer: String,
    /// Packets this side retransmitted.
    pub retransmitted_packets: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Connected,
    Released,
}

struct Conn {
    qp: LocalQp,
    state: State,
    sent: u32,
    send_done: u32,
    received: u32,
    closing: bool,
}

/// One side of the exchange.
pub struct Sends {
    spec: SendsSpec,
    client: bool,
    session: CmSession,
    buf: MrHandle,
    conns: Vec<Conn>,
}

const RECV: u64 = 1;
const SEND: u64 = 2;

impl Sends {
    fn new(
        side: &mut Side,
        spec: SendsSpec,
        client: bool,
        session: CmSession,
    ) -> Result<Self, AppError> {
        let dev = &mut side.ep.dev;
        let buf = dev.reg_mr(side.pd, spec.size as usize, Access::LOCAL_WRITE);
        let conns: Vec<Conn> = side
            .qps
            .iter()
            .map(|&qp| Conn {
                qp,
                state: State::Idle,
                sent: 0,
                send_done: 0,
                received: 0,
                closing: false,
            })
            .collect();
        let me = Self {
            spec,
            client,
            session,
            buf,
            conns,
        };
        // Every receive before the CM exchange.
        me.post_receives(dev)?;
        Ok(me)
    }

    /// Every connection's receives: before the CM exchange (the stock client asks for RNR
    /// retry 0, so a message that finds no receive fails its connection).
    fn post_receives(&self, dev: &mut Device) -> Result<(), AppError> {
        for (i, c) in self.conns.iter().enumerate() {
            for _ in 0..self.spec.count {
                let sgl = SgList::one(dev.mr(self.buf).expect("buffer").sge(0, self.spec.size));
                dev.post_recv(c.qp.qpn, RecvRequest { wr_id: RECV, sgl })
                    .map_err(|e| AppError::post(i, "a receive", e))?;
            }
        }
        Ok(())
    }

    /// librdmacm's examples' terms on `port`.
    fn terms(port: u16) -> Terms {
        Terms {
            port,
            ..Terms::default()
        }
    }

    /// Whether this side sends first.
    fn first(&self) -> bool {
        match self.spec.tool {
            Tool::Ucmatose => !self.client,
            Tool::RdmaServer => self.client,
        }
    }

    fn send_all(&mut self, dev: &mut Device, i: usize) -> Result<(), AppError> {
        let sgl = SgList::one(dev.mr(self.buf).expect("buffer").sge(0, self.spec.size));
        while self.conns[i].sent < self.spec.count {
            dev.post_send(
                self.conns[i].qp.qpn,
                WorkRequest::new(SEND, WrOp::Send, sgl),
            )
            .map_err(|e| AppError::post(i, "a SEND", e))?;
            self.conns[i].sent += 1;
        }
        Ok(())
    }

    fn on_session(&mut self, dev: &mut Device, e: SessionEvent) -> Result<(), AppError> {
        match e {
            // The receives were posted before the exchange.
            SessionEvent::Accepted(_) => {}
            SessionEvent::Up(i) => {
                self.conns[i].state = State::Connected;
                if self.first() {
                    self.send_all(dev, i)?;
                }
            }
            SessionEvent::Released(i) => {
                let c = &self.conns[i];
                // Our last SENDs may complete after the peer's DREQ: posted is enough.
                if c.received < self.spec.count || c.sent < self.spec.count {
                    return Err(PeerFault::ReleasedEarly {
                        conn: i,
                        received: c.received.into(),
                        sent: c.send_done.into(),
                        expected: self.spec.count.into(),
                    }
                    .into());
                }
                self.conns[i].state = State::Released;
            }
            SessionEvent::Restarted => {
                for c in &mut self.conns {
                    *c = Conn {
                        qp: c.qp,
                        state: State::Idle,
                        sent: 0,
                        send_done: 0,
                        received: 0,
                        closing: false,
                    };
                }
                self.post_receives(dev)?;
            }
            // A listener's only.
            SessionEvent::Asked(_) | SessionEvent::Resolve(_) | SessionEvent::Resolved { .. } => {}
        }
        Ok(())
    }
}

impl Application for Sends {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.session.poll(dev, now)?;
        let turn = self.turn(dev, now);
        self.session.finish(dev, now, turn)
    }

    fn done(&self) -> bool {
        // Released, and every SEND completed: a peer that disconnects on its last receive
        // sends its DREQ (QP1 goes first) before the ACK of that message.
        self.conns
            .iter()
            .all(|c| c.state == State::Released && c.send_done >= c.sent)
    }
}

impl Sends {
    /// One turn: what the session said, then each connection's completions and messages.
    fn turn(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        while let Some(e) = self.session.next_event() {
            self.on_session(dev, e)?;
        }
        for i in 0..self.conns.len() {
            let q = self.conns[i].qp;
            while let Some(c) = dev.poll_cq(q.send_cq).or_else(|| dev.poll_cq(q.recv_cq)) {
                if c.status != WcStatus::Success {
                    if self.conns[i].closing || self.conns[i].state == State::Released {
                        // Flushed at the end: a SEND that will not complete otherwise.
                        if c.opcode != WcOpcode::Recv {
                            self.conns[i].send_done += 1;
                        }
                        continue;
                    }
                    return Err(AppError::completion("a message", &c));
                }
                if c.opcode == WcOpcode::Recv {
                    if c.byte_len != self.spec.size {
                        return Err(AppError::Size {
                            qpn: c.qp_num,
                            got: c.byte_len.into(),
                            want: self.spec.size.into(),
                            hint: Some("both sides need the same -S"),
                        });
                    }
                    self.conns[i].received += 1;
                } else {
                    self.conns[i].send_done += 1;
                }
            }
            let n = self.spec.count;
            let c = &self.conns[i];
            if c.state != State::Connected {
                continue;
            }
            // The second sender answers once it has every message.
            if !self.first() && c.received == n && c.sent == 0 {
                self.send_all(dev, i)?;
            }
            let c = &self.conns[i];
            let finished = c.received == n && c.send_done == n;
            let disconnects = match self.spec.tool {
                Tool::Ucmatose => !self.client,
                Tool::RdmaServer => true,
            };
            if finished && disconnects && !c.closing {
                self.conns[i].closing = true;
                // Crossing DREQs: ours may find the peer's already answered.
                if !self.session.disconnect(now, i) {
                    self.conns[i].state = State::Released;
                }
            }
        }
        Ok(())
    }
}

async fn run_end(
    spec: SendsSpec,
    client: bool,
    local: IpAddr,
    server: Option<IpAddr>,
    secrets: Secrets,
    link: LinkChoice,
    ready: impl FnOnce(),
) -> Result<SendsResult, DriverError> {
    let salt = if client { 0x7c11 } else { 0x7c5e };
    let req = QpRequest {
        count: spec.connections,
        caps: QpCaps {
            max_send_wr: spec.count.max(1),
            max_recv_wr: spec.count.max(1),
            ..QpCaps::default()
        },
        params: Sends::terms(spec.port).base,
        ..QpRequest::default()
    };
    let mut side = cm_end(&secrets, salt, req, local, link)?;
    let terms = Sends::terms(spec.port);
    let name = match spec.tool {
        Tool::Ucmatose => "roce ucmatose",
        Tool::RdmaServer => "roce rdma-server",
    };
    let session = match server {
        Some(peer) => CmSession::client(&side, terms, &secrets, salt, name, peer)?,
        None => CmSession::server(&side, terms, &secrets, salt, name)?,
    };
    let mut app = Sends::new(&mut side, spec, client, session).map_err(DriverError::from)?;
    app.session.flush(&mut side.ep.dev);
    ready();
    let silence = if client {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(365 * 24 * 3600)
    };
    side.ep
        .run(&mut app, true, std::future::pending(), silence)
        .await?;
    Ok(SendsResult {
        tool: spec.tool,
        role: if client { "client" } else { "server" },
        connections: app.conns.len() as u32,
        sent: app.conns.iter().map(|c| u64::from(c.send_done)).sum(),
        received: app.conns.iter().map(|c| u64::from(c.received)).sum(),
        peer: app
            .session
            .peer()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        retransmitted_packets: side.ep.dev.stats().retransmitted_packets,
    })
}

/// Runs one end of the exchange, as the connector names it: a server that serves one client
/// and exits (as the stock tool), or a client. The exchange is RDMA-CM; the port is the
/// connector's.
pub fn run(mut c: Connector, mut spec: SendsSpec) -> Result<SendsResult, DriverError> {
    let name = spec.tool.name();
    c.expect(name, &[Exchange::RdmaCm])?;
    let end = c.one_end(name)?;
    spec.port = end.port;
    spec.validate()?;
    let ready = c.take_ready();
    let (secrets, link) = (c.secrets, c.link);
    runtime()?.block_on(run_end(
        spec, end.client, end.local, end.server, secrets, link, ready,
    ))
}
