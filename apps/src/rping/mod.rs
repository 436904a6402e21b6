//! `roce rping`: librdmacm's `rping`, so that the stock `rping -s` / `rping -c` (rdma-core
//! `librdmacm/examples/rping.c`) can be the other end, over RDMA-CM (the IB CM on QP1, the
//! TCP port space, port 7174 by default, the `cma_hdr` and no other private data).
//!
//! One ping, as rping does it: the client SENDs a 16-byte `rping_rdma_info` (buffer address
//! as a big-endian u64, rkey and size as big-endian u32s) naming its source buffer; the server
//! READs that buffer and answers with a 16-byte SEND (all zero); the client SENDs the info of
//! its sink buffer; the server WRITEs what it read there and answers again. The client's
//! source holds `rdma-ping-N: ` and a run of letters (`A`..`z`, starting one further each
//! ping) and a NUL at the end; with `-V` it checks that the sink came back equal, with `-v` it
//! prints it (`ping data: ...`; the server prints `server ping data: ...`). After `-C` pings
//! the client disconnects (DREQ); the server ends on the client's DREQ. Every message either
//! side receives must be 16 bytes, as rping demands.
use std::net::IpAddr;
use std::time::Duration;

use roce_driver::connect::cm_session::{CmSession, SessionEvent, Terms};
use roce_driver::connect::rdma_cm::cm_end;
use roce_driver::connect::{Connector, Exchange, QpRequest, Side};
use roce_driver::{runtime, AppError, Application, DriverError, LinkChoice, PeerFault, Secrets};
use roce_stack::{
    Access, ConnectParams, Device, Instant, MrHandle, QpCaps, RecvRequest, RemoteAddr, SgList,
    WcOpcode, WcStatus, WorkRequest, WrOp,
};
use serde::Serialize;

/// rping's default port.
pub const RPING_PORT: u16 = 7174;

/// Bytes of `struct rping_rdma_info`.
const INFO_LEN: u32 = 16;

/// A run's settings, as rping's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RpingSpec {
    /// `-S`: ping buffer size (26..=65535, default 64).
    pub size: u32,
    /// `-C`: pings (client; 0 = until interrupted, as rping; the server serves any number).
    pub count: u64,
    /// `-v`: print each ping's data.
    pub verbose: bool,
    /// `-V`: check each ping's data (client).
    pub validate: bool,
    /// `-p`: the RDMA-CM port.
    pub port: u16,
}

impl Default for RpingSpec {
    fn default() -> Self {
        Self {
            size: 64,
            count: 10,
            verbose: false,
            validate: true,
            port: RPING_PORT,
        }
    }
}

impl RpingSpec {
    /// Refuses what rping refuses.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        crate::ConfigError::check_flag("-S", self.size.into(), 26, 65535, Some("as rping"))
    }
}

/// A client's buffer larger than this server's `-S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client's buffer is {len} bytes, more than this server's -S {most}")]
pub struct BufferTooLarge {
    /// The client's buffer.
    pub len: u32,
    /// This server's `-S`.
    pub most: u32,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RpingResult {
    /// `"client"` or `"server"`.
    pub role: &'static str,
    /// Pings completed.
    pub pings: u64,
    /// Pings whose data came back equal (client with `-V`).
    pub verified: u64,
    /// Buffer size.
    pub size: u32,
    /// The peer's address.
    pub peer: String,
    /// The lines `-v` printed.
    pub data: Vec<String>,
    /// Packets this side retransmitted.
    pub retransmitted_packets: u64,
}

/// rping's ping data: `rdma-ping-N: `, then letters from `start` on (`A`..`z`, wrapping), a
/// NUL last.
pub fn ping_data(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size.saturating_sub(1));
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

fn info(va: u64, rkey: u32, size: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&va.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..].copy_from_slice(&size.to_be_bytes());
    b
}

fn parse_info(b: &[u8]) -> (u64, u32, u32) {
    let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
    let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
    (u64_at(0), u32_at(8), u32_at(12))
}

/// The text of `b` up to its first NUL, as `-v` prints it: a peer's bytes, so printable ASCII
/// stays as it is (rping's letters run through `[\]^_` too) and every other byte (escape
/// sequences, carriage returns, bytes of other encodings) is written `\xNN`: nothing a peer
/// sends can move the cursor, retitle the terminal or hide what came before.
fn c_string(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let mut s = String::with_capacity(end);
    for &c in &b[..end] {
        match c {
            b' '..=b'~' => s.push(char::from(c)),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s
}

const RECV: u64 = 1;
const SEND: u64 = 2;
const RDMA: u64 = 3;

/// Where a side is in the ping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Not connected yet.
    Connecting,
    /// Client: the source buffer's info sent; waiting for the server's answer.
    /// Server: waiting for the source buffer's info.
    Source,
    /// Client: the sink's info sent, waiting. Server: waiting for the sink's info.
    Sink,
    /// Server: READ or WRITE in flight.
    Rdma,
    /// Client: DREQ sent.
    Closing,
    /// Released.
    Done,
}

/// One side of rping.
pub struct Rping {
    spec: RpingSpec,
    client: bool,
    session: CmSession,
    qp: roce_driver::connect::qps::LocalQp,
    /// 16-byte receive and send buffers, the client's source buffer, the RDMA buffer.
    recv: MrHandle,
    send: MrHandle,
    start: MrHandle,
    rdma: MrHandle,
    step: Step,
    /// Server: whether the RDMA in flight is the READ (then the WRITE follows).
    reading: bool,
    remote_len: u32,
    sends_out: u32,
    /// A 16-byte message received and not yet acted on.
    got: bool,
    ping: u64,
    letter: u8,
    result: RpingResult,
}

impl Rping {
    fn new(side: &mut Side, spec: RpingSpec, client: bool, session: CmSession) -> Self {
        let dev = &mut side.ep.dev;
        let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let recv = dev.reg_mr(side.pd, INFO_LEN as usize, Access::LOCAL_WRITE);
        let send = dev.reg_mr(side.pd, INFO_LEN as usize, Access::LOCAL_WRITE);
        let start = dev.reg_mr(side.pd, spec.size as usize, rw);
        let rdma = dev.reg_mr(side.pd, spec.size as usize, rw);
        Self {
            spec,
            client,
            session,
            qp: side.qps[0],
            recv,
            send,
            start,
            rdma,
            step: Step::Connecting,
            reading: false,
            remote_len: 0,
            sends_out: 0,
            got: false,
            ping: 0,
            letter: 65,
            result: RpingResult {
                role: if client { "client" } else { "server" },
                pings: 0,
                verified: 0,
                size: spec.size,
                peer: String::new(),
                data: Vec::new(),
                retransmitted_packets: 0,
            },
        }
    }

    /// What rping's QP is offered and asks for: one READ each way is what rping asks; 16
    /// are offered (the peer's clamp them).
    fn terms(port: u16) -> Terms {
        Terms {
            port,
            responder_resources: 16,
            initiator_depth: 16,
            base: ConnectParams {
                min_rnr_timer: 12,
                ..ConnectParams::default()
            },
            ..Terms::default()
        }
    }

    /// A server's state for the next client, after a set-up was given up.
    fn restart(&mut self) {
        self.step = Step::Connecting;
        self.reading = false;
        self.remote_len = 0;
        self.sends_out = 0;
        self.got = false;
        self.ping = 0;
        self.letter = 65;
        self.result.pings = 0;
        self.result.data.clear();
    }

    fn post_recv(&self, dev: &mut Device) -> Result<(), AppError> {
        let sgl = SgList::one(dev.mr(self.recv).expect("buffer").sge(0, INFO_LEN));
        dev.post_recv(self.qp.qpn, RecvRequest { wr_id: RECV, sgl })
            .map_err(|e| AppError::post(0, "a receive", e))
    }

    fn send_info(&mut self, dev: &mut Device, bytes: [u8; 16]) -> Result<(), AppError> {
        if let Some(m) = dev.mr_mut(self.send) {
            m.as_mut_slice().copy_from_slice(&bytes);
        }
        let sgl = SgList::one(dev.mr(self.send).expect("buffer").sge(0, INFO_LEN));
        dev.post_send(self.qp.qpn, WorkRequest::new(SEND, WrOp::Send, sgl))
            .map_err(|e| AppError::post(0, "a SEND", e))?;
        self.sends_out += 1;
        Ok(())
    }

    fn buf_info(&self, dev: &Device, mr: MrHandle) -> [u8; 16] {
        let m = dev.mr(mr).expect("buffer");
        info(m.va(), m.rkey().0, self.spec.size)
    }

    /// Client: the next ping's source info, or the DREQ after the last.
    fn next_ping(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        if self.spec.count > 0 && self.ping >= self.spec.count {
            if !self.session.disconnect(now, 0) {
                // The server released us first.
                self.step = Step::Done;
                return Ok(());
            }
            self.step = Step::Closing;
            return Ok(());
        }
        let data = ping_data(self.ping, self.letter, self.spec.size as usize);
        self.letter = if self.letter >= 122 {
            65
        } else {
            self.letter + 1
        };
        if let Some(m) = dev.mr_mut(self.start) {
            m.as_mut_slice().copy_from_slice(&data);
        }
        if let Some(m) = dev.mr_mut(self.rdma) {
            m.as_mut_slice().fill(0);
        }
        let i = self.buf_info(dev, self.start);
        self.send_info(dev, i)?;
        self.step = Step::Source;
        Ok(())
    }

    fn on_session(
        &mut self,
        dev: &mut Device,
        now: Instant,
        e: SessionEvent,
    ) -> Result<(), AppError> {
        match e {
            // The server's QP is ready and its REP about to leave: the receive first.
            SessionEvent::Accepted(_) => {
                self.post_recv(dev)?;
                self.step = Step::Source;
            }
            SessionEvent::Up(_) => {
                self.result.peer = self
                    .session
                    .peer()
                    .map(|p| p.to_string())
                    .unwrap_or_default();
                if self.client {
                    self.post_recv(dev)?;
                    self.next_ping(dev, now)?;
                }
            }
            SessionEvent::Released(_) => {
                if !self.client && self.step == Step::Rdma {
                    return Err(PeerFault::Left("the end of its ping").into());
                }
                self.step = Step::Done;
            }
            SessionEvent::Restarted => self.restart(),
            // A listener's only.
            SessionEvent::Asked(_) | SessionEvent::Resolve(_) | SessionEvent::Resolved { .. } => {}
        }
        Ok(())
    }

    fn on_completion(
        &mut self,
        dev: &mut Device,
        c: roce_stack::Completion,
    ) -> Result<(), AppError> {
        if c.status != WcStatus::Success {
            if self.step == Step::Done || self.step == Step::Closing {
                return Ok(()); // flushed at the end
            }
            return Err(AppError::completion("a request", &c));
        }
        match c.opcode {
            WcOpcode::Recv => {
                if c.byte_len != INFO_LEN {
                    return Err(AppError::Size {
                        qpn: c.qp_num,
                        got: c.byte_len.into(),
                        want: INFO_LEN.into(),
                        hint: Some("rping's buffer descriptor"),
                    });
                }
                self.got = true;
            }
            WcOpcode::Send => self.sends_out = self.sends_out.saturating_sub(1),
            WcOpcode::RdmaRead | WcOpcode::RdmaWrite => {
                if self.reading {
                    self.reading = false;
                    if self.spec.verbose {
                        let m = dev.mr(self.rdma).expect("buffer");
                        let s = c_string(&m.as_slice()[..self.remote_len as usize]);
                        println!("server ping data: {s}");
                        self.result.data.push(s);
                    }
                    self.send_info(dev, [0; 16])?;
                    self.step = Step::Sink;
                } else {
                    self.send_info(dev, [0; 16])?;
                    self.result.pings += 1;
                    self.step = Step::Source;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Acts on a received 16-byte message.
    fn on_message(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.got = false;
        let msg: Vec<u8> = dev.mr(self.recv).expect("buffer").as_slice().to_vec();
        self.post_recv(dev)?;
        if self.client {
            match self.step {
                // The server READ our source: send the sink's info.
                Step::Source => {
                    let i = self.buf_info(dev, self.rdma);
                    self.send_info(dev, i)?;
                    self.step = Step::Sink;
                }
                // The server WROTE our sink: check, then the next ping.
                Step::Sink => {
                    let (src, dst) = (
                        dev.mr(self.start).expect("buffer").as_slice().to_vec(),
                        dev.mr(self.rdma).expect("buffer").as_slice().to_vec(),
                    );
                    if self.spec.validate && src != dst {
                        return Err(AppError::Mismatch {
                            what: "ping",
                            n: self.ping,
                            sent: c_string(&src),
                            got: c_string(&dst),
                        });
                    }
                    self.result.verified += u64::from(self.spec.validate);
                    if self.spec.verbose {
                        let s = c_string(&dst);
                        println!("ping data: {s}");
                        self.result.data.push(s);
                    }
                    self.ping += 1;
                    self.result.pings += 1;
                    self.next_ping(dev, now)?;
                }
                _ => {}
            }
            return Ok(());
        }
        let (va, rkey, len) = parse_info(&msg);
        if len > self.spec.size {
            return Err(PeerFault::invalid(BufferTooLarge {
                len,
                most: self.spec.size,
            })
            .into());
        }
        self.remote_len = len;
        let remote = RemoteAddr {
            va,
            rkey: roce_proto::RKey(rkey),
        };
        let sgl = SgList::one(dev.mr(self.rdma).expect("buffer").sge(0, len));
        let (op, what) = match self.step {
            Step::Source => {
                self.reading = true;
                (WrOp::Read(remote), "the READ")
            }
            _ => (WrOp::Write(remote), "the WRITE"),
        };
        dev.post_send(self.qp.qpn, WorkRequest::new(RDMA, op, sgl))
            .map_err(|e| AppError::post(0, what, e))?;
        self.step = Step::Rdma;
        Ok(())
    }
}

impl Rping {
    /// One turn: what the session said, the completions, a message received.
    fn turn(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        while let Some(e) = self.session.next_event() {
            self.on_session(dev, now, e)?;
        }
        if self.step == Step::Connecting {
            return Ok(());
        }
        let (scq, rcq) = (self.qp.send_cq, self.qp.recv_cq);
        while let Some(c) = dev.poll_cq(scq).or_else(|| dev.poll_cq(rcq)) {
            self.on_completion(dev, c)?;
        }
        // Act on a message once this side's own SENDs completed (rping waits the same way).
        if self.got && self.sends_out == 0 && !matches!(self.step, Step::Done | Step::Closing) {
            self.on_message(dev, now)?;
        }
        Ok(())
    }
}

impl Application for Rping {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.session.poll(dev, now)?;
        let turn = self.turn(dev, now);
        self.session.finish(dev, now, turn)
    }

    fn done(&self) -> bool {
        self.step == Step::Done
    }
}

/// How long a side waits for the peer while a ping is under way.
const SILENCE: Duration = Duration::from_secs(10);

async fn run_end(
    spec: RpingSpec,
    client: bool,
    local: IpAddr,
    server: Option<IpAddr>,
    secrets: Secrets,
    link: LinkChoice,
    ready: impl FnOnce(),
) -> Result<RpingResult, DriverError> {
    let salt = if client { 0x41c1 } else { 0x4153 };
    let req = QpRequest {
        count: 1,
        caps: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 2,
            ..QpCaps::default()
        },
        params: Rping::terms(spec.port).base,
        ..QpRequest::default()
    };
    let mut side = cm_end(&secrets, salt, req, local, link)?;
    let terms = Rping::terms(spec.port);
    let session = match server {
        // RDMA-CM's header and nothing else, as rping's rdma_connect sends.
        Some(peer) => CmSession::client(&side, terms, &secrets, salt, "roce rping", peer)?,
        None => CmSession::server(&side, terms, &secrets, salt, "roce rping")?,
    };
    let mut app = Rping::new(&mut side, spec, client, session);
    app.session.flush(&mut side.ep.dev);
    ready();
    // The server waits for its client as long as it is left running; a client that came
    // is bounded by the session.
    let first = if client {
        SILENCE
    } else {
        Duration::from_secs(365 * 24 * 3600)
    };
    side.ep
        .run(&mut app, true, std::future::pending(), first.max(SILENCE))
        .await?;
    app.result.retransmitted_packets = side.ep.dev.stats().retransmitted_packets;
    Ok(app.result)
}

/// Runs one end of the exchange, as the connector names it: a server that serves one client
/// and exits (as the stock tool), or a client. The exchange is RDMA-CM; the port is the
/// connector's.
pub fn run(mut c: Connector, mut spec: RpingSpec) -> Result<RpingResult, DriverError> {
    let name = "rping";
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_data_is_rpings() {
        let d = ping_data(0, 65, 26);
        assert_eq!(&d[..], b"rdma-ping-0: ABCDEFGHIJKL\0");
        let d = ping_data(12, 121, 30);
        assert_eq!(&d[..], b"rdma-ping-12: yzABCDEFGHIJKLM\0");
        assert_eq!(d.len(), 30);
        assert_eq!(
            parse_info(&info(0x1122_3344_5566_7788, 0xabcd, 64)),
            (0x1122_3344_5566_7788, 0xabcd, 64)
        );
    }

    #[test]
    fn a_peers_bytes_are_printed_escaped() {
        // Printable ASCII as it is, rping's own data included.
        let d = ping_data(12, 88, 30);
        assert_eq!(c_string(&d), "rdma-ping-12: XYZ[\\]^_`abcdef");
        // Escape sequences, carriage returns and other bytes as \xNN, up to the NUL.
        assert_eq!(
            c_string(b"ok\x1b]0;pwned\x07\r\x9b2J\xc3\xa9\0hidden"),
            "ok\\x1b]0;pwned\\x07\\x0d\\x9b2J\\xc3\\xa9"
        );
        assert!(c_string(&(0..=255).collect::<Vec<u8>>()[1..])
            .chars()
            .all(|c| c == ' ' || c.is_ascii_graphic()));
    }
}
