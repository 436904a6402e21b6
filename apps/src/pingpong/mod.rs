//! `roce pingpong`: the verbs examples' SEND ping-pong, so that rdma-core's stock
//! `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong` can be the
//! other end (or roce both ends, in one process).
//!
//! The loop is the tools' (`libibverbs/examples/rc_pingpong.c`): one buffer per side serves
//! every receive and every send, so each message echoes the last one received; the client
//! sends first; a side posts its next SEND on a QP only once that QP's previous SEND completed
//! **and** a message arrived on it; `-n` counts sends and receives, over all QPs together for
//! the SRQ tool. Receives are posted `-r` deep before the exchange and topped up when one (SRQ:
//! as many as QPs) is left. UD receives start with the 40-byte GRH area. With `--chk` (`-c`)
//! the client puts a 0 at every 4 KiB offset of its first message and the server checks that
//! those bytes are still 0 at the end, as the tools do; roce also checks that every message
//! has the size both sides were given.
//!
//! The exchange is the connection layer's ([`roce_driver::connect::pingpong`]).
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_driver::connect::{
    pingpong, AfterGivingUp, Connector, Ends, Exchange, QpRequest, Ran, Side,
};
use roce_driver::{runtime, AppError, Application, DriverError, LinkChoice, Secrets};
use roce_proto::QKey;
use roce_stack::ud::{UdSend, GRH_LEN};
use roce_stack::{
    Access, ConnectParams, Device, Instant, MrHandle, QpCaps, RecvRequest, Service, SgList,
    WcOpcode, WcStatus, WorkRequest, WrOp,
};
use serde::Serialize;

/// Which of the four tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_uc_pingpong`.
    Uc,
    /// `ibv_ud_pingpong`.
    Ud,
    /// `ibv_srq_pingpong`: `-q` RC QPs on one shared receive queue.
    Srq,
}

impl Tool {
    /// The stock tool's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rc => "ibv_rc_pingpong",
            Self::Uc => "ibv_uc_pingpong",
            Self::Ud => "ibv_ud_pingpong",
            Self::Srq => "ibv_srq_pingpong",
        }
    }
}

/// A run's settings, named and defaulted as the tools' flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PingPongSpec {
    /// The tool.
    pub tool: Tool,
    /// `-s`: message size (default 4096; UD 1024).
    pub size: u32,
    /// `-n`: messages each side sends and receives (default 1000).
    pub iters: u64,
    /// `-m`: path MTU (default 1024; UD: messages are at most this, one packet each).
    pub mtu: u32,
    /// `-r`: receives posted at a time (default 500).
    pub rx_depth: u32,
    /// `-q`: QPs of the SRQ tool (default 16).
    pub num_qp: u32,
    /// `-c`: validate the received buffer.
    pub chk: bool,
    /// The peer's RoCE address when it is not the one the exchange runs over (a management
    /// network): its GID must name this address. `None`: the exchange's own address.
    pub peer_roce: Option<IpAddr>,
}

impl PingPongSpec {
    /// The tool's defaults.
    pub fn new(tool: Tool) -> Self {
        Self {
            tool,
            size: if tool == Tool::Ud { 1024 } else { 4096 },
            iters: 1000,
            mtu: 1024,
            rx_depth: 500,
            num_qp: if tool == Tool::Srq { 16 } else { 1 },
            chk: false,
            peer_roce: None,
        }
    }

    /// Refuses what the tools refuse.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        use crate::ConfigError as C;
        if !roce_stack::qp::PATH_MTUS.contains(&self.mtu) {
            return Err(C::Flag {
                flag: "-m",
                value: self.mtu.into(),
                lo: 256,
                hi: 4096,
                note: Some("256, 512, 1024, 2048 or 4096"),
            });
        }
        let (most, note) = match self.tool {
            Tool::Ud => (
                self.mtu.into(),
                Some("a UD message is one packet, at most the MTU"),
            ),
            _ => (1 << 30, Some("bytes")),
        };
        C::check_flag("-s", self.size.into(), 1, most, note)?;
        C::check_flag("-n", self.iters, 1, 1 << 32, None)?;
        C::check_flag("-r", self.rx_depth.into(), 2, 16384, None)?;
        if self.tool == Tool::Srq {
            let most = self.rx_depth.min(255).into();
            C::check_flag(
                "-q",
                self.num_qp.into(),
                1,
                most,
                Some("at most 255 and -r"),
            )?;
        }
        Ok(())
    }

    fn qps(&self) -> u32 {
        if self.tool == Tool::Srq {
            self.num_qp
        } else {
            1
        }
    }

    /// What the connection layer is asked for: the tools' QP attributes (RC: timeout 14,
    /// retry 7, RNR retry 7, RNR timer 12, one READ/atomic each way, no remote access).
    fn request(&self) -> QpRequest {
        let service = match self.tool {
            Tool::Rc | Tool::Srq => Service::Rc,
            Tool::Uc => Service::Uc,
            Tool::Ud => Service::Ud,
        };
        QpRequest {
            service,
            qkey: QKey(roce_proto::pingpong::UD_QKEY),
            count: self.qps(),
            caps: QpCaps {
                max_send_wr: 4,
                max_recv_wr: self.rx_depth,
                ..QpCaps::default()
            },
            srq: (self.tool == Tool::Srq).then_some(self.rx_depth),
            params: ConnectParams {
                mtu: self.mtu,
                access: Access::NONE,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: 12,
                max_rd_atomic: 1,
                max_dest_rd_atomic: 1,
                ..ConnectParams::default()
            },
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PingPongResult {
    /// The tool spoken.
    pub tool: Tool,
    /// `"client"` or `"server"`.
    pub role: &'static str,
    /// Message size.
    pub size: u32,
    /// `-n`.
    pub iters: u64,
    /// Messages sent (the SRQ tool's QPs together may send a few more than `-n`).
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// Seconds from the first post (the client's first SEND; the server's ready QPs) to the
    /// last completion.
    pub seconds: f64,
    /// `size * iters * 2 * 8 / seconds`, in Mbit/s, as the tools print it.
    pub mbit_per_s: f64,
    /// Microseconds per iteration.
    pub usec_per_iter: f64,
    /// `--chk`: the buffer held 0 at every 4 KiB offset at the end (server only).
    pub validated: Option<bool>,
    /// The peer's address.
    pub peer: String,
    /// Retransmitted packets (RC).
    pub retransmitted_packets: u64,
    /// The link datagrams were received on.
    pub link: &'static str,
    /// UD: messages dropped because they came from another host than the peer the
    /// exchange named (their receives posted again, nothing echoed).
    pub strangers: u64,
}

impl std::fmt::Display for PingPongResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
            u64::from(self.size) * self.iters * 2,
            self.seconds,
            self.mbit_per_s
        )?;
        write!(
            f,
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            self.iters, self.seconds, self.usec_per_iter
        )
    }
}

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
const PAGE: usize = 4096;

/// The ping-pong on one side.
pub struct PingPong {
    spec: PingPongSpec,
    client: bool,
    buf: MrHandle,
    qps: Vec<roce_driver::connect::qps::LocalQp>,
    ahs: Vec<roce_stack::ud::AddressHandle>,
    srq: Option<roce_stack::srq::SrqHandle>,
    /// Per QP: a SEND outstanding, a receive awaited.
    pending: Vec<(bool, bool)>,
    routs: u32,
    scnt: u64,
    rcnt: u64,
    started: Option<Instant>,
    last: Instant,
    strangers: u64,
}

impl PingPong {
    /// Registers the buffer and posts `-r` receives; call before the exchange (the peer may
    /// send as soon as it has this side's records).
    pub fn new(side: &mut Side, spec: PingPongSpec, client: bool) -> Result<Self, AppError> {
        let grh = if spec.tool == Tool::Ud { GRH_LEN } else { 0 };
        let dev = &mut side.ep.dev;
        let buf = dev.reg_mr(side.pd, spec.size as usize + grh, Access::LOCAL_WRITE);
        let fill = if spec.tool == Tool::Srq { 0 } else { 0x7b };
        if let Some(m) = dev.mr_mut(buf) {
            m.as_mut_slice().fill(fill);
            if client && spec.chk {
                for i in (0..spec.size as usize).step_by(PAGE) {
                    m.as_mut_slice()[grh + i] = 0;
                }
            }
        }
        let mut me = Self {
            spec,
            client,
            buf,
            qps: side.qps.clone(),
            ahs: Vec::new(),
            srq: side.srq,
            pending: vec![(false, true); side.qps.len()],
            routs: 0,
            scnt: 0,
            rcnt: 0,
            started: None,
            last: Instant::from_nanos(0),
            strangers: 0,
        };
        me.refill(dev)?;
        Ok(me)
    }

    fn recv_sge(&self, dev: &Device) -> SgList {
        let grh = if self.spec.tool == Tool::Ud {
            GRH_LEN
        } else {
            0
        };
        let m = dev.mr(self.buf).expect("buffer");
        SgList::one(m.sge(0, self.spec.size + grh as u32))
    }

    /// Posts receives up to `-r` outstanding (one QP, or the SRQ).
    fn refill(&mut self, dev: &mut Device) -> Result<(), AppError> {
        let sgl = self.recv_sge(dev);
        while self.routs < self.spec.rx_depth {
            let r = RecvRequest {
                wr_id: RECV_WRID,
                sgl,
            };
            let res = match self.srq {
                Some(s) => dev.post_srq_recv(s, r),
                None => dev.post_recv(self.qps[0].qpn, r),
            };
            res.map_err(|e| AppError::post(0, "a receive", e))?;
            self.routs += 1;
        }
        Ok(())
    }

    /// The QPs are connected (UD: `ahs` address the peer's QPs): start, the client with its
    /// first SENDs.
    pub fn start(
        &mut self,
        ahs: Vec<roce_stack::ud::AddressHandle>,
        dev: &mut Device,
        now: Instant,
    ) -> Result<(), AppError> {
        self.ahs = ahs;
        self.started = Some(now);
        self.last = now;
        for i in 0..self.qps.len() {
            self.pending[i] = (false, true);
            if self.client {
                self.send(dev, i)?;
            }
        }
        Ok(())
    }

    fn send(&mut self, dev: &mut Device, i: usize) -> Result<(), AppError> {
        let grh = if self.spec.tool == Tool::Ud {
            GRH_LEN
        } else {
            0
        };
        let m = dev.mr(self.buf).expect("buffer");
        let sgl = SgList::one(m.sge(grh as u64, self.spec.size));
        let r = if let Some(ah) = self.ahs.get(i) {
            dev.post_ud_send(
                self.qps[i].qpn,
                UdSend {
                    wr_id: SEND_WRID,
                    sgl,
                    ah: *ah,
                    imm: None,
                    signaled: true,
                },
            )
        } else {
            dev.post_send(
                self.qps[i].qpn,
                WorkRequest::new(SEND_WRID, WrOp::Send, sgl),
            )
        };
        r.map_err(|e| AppError::post(i, "a SEND", e))?;
        self.pending[i] = (true, true);
        Ok(())
    }

    /// `--chk` on the server: every 4 KiB offset of the buffer holds 0.
    pub fn validated(&self, dev: &Device) -> Option<bool> {
        if !self.spec.chk || self.client {
            return None;
        }
        let grh = if self.spec.tool == Tool::Ud {
            GRH_LEN
        } else {
            0
        };
        let m = dev.mr(self.buf)?;
        Some(
            (0..self.spec.size as usize)
                .step_by(PAGE)
                .all(|i| m.as_slice()[grh + i] == 0),
        )
    }

    /// The result, once done.
    pub fn result(&self, dev: &Device, peer: IpAddr, link: &'static str) -> PingPongResult {
        let secs = self.started.map_or(0.0, |s| {
            self.last.saturating_duration_since(s).as_secs_f64()
        });
        let usec = secs * 1e6;
        let bytes = u64::from(self.spec.size) * self.spec.iters * 2;
        PingPongResult {
            tool: self.spec.tool,
            role: if self.client { "client" } else { "server" },
            size: self.spec.size,
            iters: self.spec.iters,
            sent: self.scnt,
            received: self.rcnt,
            seconds: secs,
            mbit_per_s: if usec > 0.0 {
                bytes as f64 * 8.0 / usec
            } else {
                0.0
            },
            usec_per_iter: usec / self.spec.iters as f64,
            validated: self.validated(dev),
            peer: peer.to_string(),
            retransmitted_packets: dev.stats().retransmitted_packets,
            link,
            strangers: self.strangers,
        }
    }
}

impl PingPong {
    /// UD: whether a received message came from another host than the peer.
    fn sent_by_a_stranger(&self, c: &roce_stack::Completion) -> bool {
        match (self.ahs.first(), c.src) {
            (Some(ah), Some(src)) => src.ip().to_canonical() != ah.remote.to_canonical(),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

impl Application for PingPong {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        if self.started.is_none() {
            return Ok(());
        }
        let want = match self.spec.tool {
            Tool::Ud => self.spec.size + GRH_LEN as u32,
            _ => self.spec.size,
        };
        for i in 0..self.qps.len() {
            let q = self.qps[i];
            while let Some(c) = dev.poll_cq(q.send_cq).or_else(|| dev.poll_cq(q.recv_cq)) {
                if c.status != WcStatus::Success {
                    return Err(AppError::completion("a message", &c));
                }
                if c.opcode == WcOpcode::Recv && self.sent_by_a_stranger(&c) {
                    // Anyone with the QPN and Q_Key can send to a UD QP: only the peer the
                    // exchange named is answered.
                    self.strangers += 1;
                    self.routs = self.routs.saturating_sub(1);
                    continue;
                }
                self.last = now;
                if c.opcode == WcOpcode::Recv {
                    if c.byte_len != want {
                        return Err(AppError::Size {
                            qpn: c.qp_num,
                            got: c.byte_len.into(),
                            want: want.into(),
                            hint: Some("both sides need the same -s"),
                        });
                    }
                    self.rcnt += 1;
                    self.routs = self.routs.saturating_sub(1);
                    self.pending[i].1 = false;
                } else {
                    self.scnt += 1;
                    self.pending[i].0 = false;
                }
                if self.scnt < self.spec.iters && self.pending[i] == (false, false) {
                    self.send(dev, i)?;
                }
            }
        }
        let low = if self.srq.is_some() {
            self.qps.len() as u32
        } else {
            1
        };
        if self.routs <= low {
            self.refill(dev)?;
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.started.is_some() && self.rcnt >= self.spec.iters && self.scnt >= self.spec.iters
    }
}

/// How long a side waits with messages outstanding and nothing arriving: past the RC
/// requester's retries (7 x 67 ms).
const SILENCE: Duration = Duration::from_secs(5);

/// One side over the exchange `tcp`; its RoCE address is `roce_ip`, else the exchange's own
/// (a client's `--bind` may be IPv6 while a stock server's exchange listens on IPv4 only).
async fn run_side(
    tcp: tokio::net::TcpStream,
    spec: PingPongSpec,
    client: bool,
    secrets: Secrets,
    link: LinkChoice,
    roce_ip: Option<IpAddr>,
) -> Result<PingPongResult, DriverError> {
    let local = match roce_ip.filter(|ip| !ip.is_unspecified()) {
        Some(ip) => ip,
        None => tcp
            .local_addr()
            .map_err(|e| DriverError::step("TCP socket", e))?
            .ip(),
    };
    let salt = if client { 0x9c11 } else { 0x95e7 };
    let dev = secrets.device(salt)?;
    let psns = secrets.start_psns(spec.qps(), salt)?;
    let mut side = Side::new(
        dev,
        spec.request(),
        psns,
        SocketAddr::new(local, roce_proto::ROCEV2_UDP_PORT),
        link,
    )?;
    let mut app = PingPong::new(&mut side, spec, client).map_err(DriverError::from)?;
    let peer = if client {
        pingpong::client(tcp, &mut side, spec.peer_roce).await?
    } else {
        pingpong::serve(tcp, &mut side, spec.peer_roce).await?
    };
    let now = side.ep.now();
    app.start(side.ahs.clone(), &mut side.ep.dev, now)
        .map_err(DriverError::from)?;
    side.ep
        .run(&mut app, true, std::future::pending(), SILENCE)
        .await?;
    let link = side.ep.link().name();
    Ok(app.result(&side.ep.dev, peer.ip, link))
}

/// How long a server waits for a client that completes a run.
const WAIT: Duration = Duration::from_secs(600);

/// Runs the ping-pong as the connector's end(s), over the verbs examples' records:
/// - a server waits on its TCP address for a client (a stock tool, or roce); a client that
///   breaks the exchange or the run (a record refused, a message of another size, silence)
///   costs the server that client: one line, and the next is served, within 600 s of the
///   start (unless the connector's server fails after a peer it gave up);
/// - a client connects to a server (a stock tool started without a host, or roce);
/// - both ends in one process: a server thread and the client.
pub fn run(
    mut c: Connector,
    spec: PingPongSpec,
) -> Result<Ran<PingPongResult, PingPongResult>, DriverError> {
    c.expect(spec.tool.name(), &[Exchange::Pingpong])?;
    spec.validate()?;
    let (secrets, link) = (c.secrets, c.link);
    match c.ends {
        Ends::Server { listen, after } => {
            serve(listen, after, spec, secrets, link, c.take_ready()).map(Ran::Served)
        }
        Ends::Client { server, bind } => client(server, bind, spec, secrets, link).map(Ran::Client),
        Ends::Both {
            client: client_ip,
            server: server_ip,
            port,
        } => {
            let listen = SocketAddr::new(server_ip, port);
            let (client, server) = roce_driver::connect::one_process(
                "pingpong-server",
                move |ready| serve(listen, AfterGivingUp::Fail, spec, secrets, link, ready),
                || client(listen, Some(client_ip), spec, secrets, link),
            )?;
            Ok(Ran::Both { client, server })
        }
    }
}

fn serve(
    listen: SocketAddr,
    after: AfterGivingUp,
    spec: PingPongSpec,
    secrets: Secrets,
    link: LinkChoice,
    ready: impl FnOnce(),
) -> Result<PingPongResult, DriverError> {
    runtime()?.block_on(async move {
        let door = roce_driver::connect::TcpDoor::bind(listen.ip(), listen.port()).await?;
        ready();
        door.serve("roce pingpong", after, Some(WAIT), |tcp| {
            run_side(tcp, spec, false, secrets, link, None)
        })
        .await
    })
}

fn client(
    server: SocketAddr,
    bind: Option<IpAddr>,
    spec: PingPongSpec,
    secrets: Secrets,
    link: LinkChoice,
) -> Result<PingPongResult, DriverError> {
    runtime()?.block_on(async move {
        let tcp = roce_driver::connect::tcp_connect(server, bind).await?;
        run_side(tcp, spec, true, secrets, link, bind).await
    })
}
