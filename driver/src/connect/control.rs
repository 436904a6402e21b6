//! The control channel: the TCP connection two ends set up a run over (perftest and
//! `ibv_rc_pingpong` exchange QPNs, PSNs and buffers the same way, out of band).
//!
//! Framing: one JSON object per line, at most [`MAX_LINE`] bytes. Each line is a [`Frame`]:
//! an application's message (`{"msg": …}`, each application defines its own serde type), the
//! handshake's offer and answer, which carry one with the two ends' QPs
//! ([`super::handshake`]), or one of the session signals every application uses: `"ready"`
//! (the data path is set up), `{"done": {"ok": …}}` (this end finished) and `{"error": "…"}`
//! (this end gave up, and why).
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

use super::qps::QpInfo;
use crate::{setup, DriverError, PeerFault, SetupFailure};

/// Longest control line accepted, in bytes; a longer one ends the connection with an error
/// instead of growing a buffer.
pub const MAX_LINE: usize = 4 << 20;

/// How long an end waits for an answer it expects at once.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// One line of the control channel.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Frame<M> {
    /// An application message.
    Msg(M),
    /// A client's offer: an application message and its end's QPs.
    Offer(Box<Offer<M>>),
    /// The server's answer to an offer.
    Answer(Box<Answer<M>>),
    /// The sender's data path is set up: traffic may start.
    Ready,
    /// The sender finished its part.
    Done {
        /// It verified what it was asked to.
        ok: bool,
    },
    /// The sender gave up; the reason, in one line.
    Error(String),
}

/// A client's offer: the application's request and this end's QPs.
#[derive(Debug, Serialize, Deserialize)]
pub struct Offer<M> {
    pub(super) roce_port: u16,
    pub(super) qps: Vec<QpInfo>,
    /// The Q_Key of the run's UD QPs, drawn by the client (0: none).
    #[serde(default)]
    pub(super) qkey: u32,
    pub(super) msg: M,
}

/// The server's answer: its QPs and the application's reply.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer<M> {
    pub(super) roce_port: u16,
    pub(super) qps: Vec<QpInfo>,
    pub(super) msg: M,
}

/// One end of a control connection.
#[derive(Debug)]
pub struct Control {
    rd: BufReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
    line: Vec<u8>,
    /// `line` holds a frame read ahead ([`accept`] reads a client's first before handing
    /// the connection on) that the next receive returns.
    pending: bool,
}

impl Control {
    /// Wraps a connected stream (Nagle off: the messages are small and answered at once).
    pub fn new(s: TcpStream) -> Self {
        let _ = s.set_nodelay(true);
        let (r, w) = s.into_split();
        Self {
            rd: BufReader::new(r),
            wr: w,
            line: Vec::new(),
            pending: false,
        }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        self.wr.peer_addr()
    }

    pub(super) async fn send_frame<M: Serialize>(
        &mut self,
        f: &Frame<M>,
    ) -> Result<(), DriverError> {
        let mut s = serde_json::to_vec(f).map_err(DriverError::from)?;
        s.push(b'\n');
        self.wr.write_all(&s).await.map_err(|source| {
            PeerFault::Channel {
                what: "control connection",
                source,
            }
            .into()
        })
    }

    /// Sends an application message.
    pub async fn send<M: Serialize>(&mut self, m: &M) -> Result<(), DriverError> {
        self.send_frame(&Frame::Msg(m)).await
    }

    /// Says that this end's data path is set up.
    pub async fn ready(&mut self) -> Result<(), DriverError> {
        self.send_frame(&Frame::<()>::Ready).await
    }

    /// Says that this end finished (`ok`: it verified what it was asked to).
    pub async fn done(&mut self, ok: bool) -> Result<(), DriverError> {
        self.send_frame(&Frame::<()>::Done { ok }).await
    }

    /// Tells the peer why this end gives up (best effort: the connection may be gone).
    pub async fn send_error(&mut self, why: &str) {
        let _ = self.send_frame(&Frame::<()>::Error(why.to_string())).await;
    }

    /// Reads one line into `self.line` (without the newline), at most [`MAX_LINE`] bytes.
    async fn read_line(&mut self) -> Result<(), DriverError> {
        let peer = |source| PeerFault::Channel {
            what: "control connection",
            source,
        };
        if std::mem::take(&mut self.pending) {
            return Ok(());
        }
        self.line.clear();
        loop {
            let chunk = self.rd.fill_buf().await.map_err(peer)?;
            if chunk.is_empty() {
                return Err(PeerFault::Closed("control connection").into());
            }
            let (take, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            if self.line.len() + take > MAX_LINE {
                return Err(PeerFault::TooLong {
                    what: "control line",
                    limit: MAX_LINE,
                }
                .into());
            }
            self.line.extend_from_slice(&chunk[..take]);
            self.rd.consume(take + usize::from(end));
            if end {
                return Ok(());
            }
        }
    }

    /// The next frame. A peer's error frame is returned as [`DriverError::Peer`].
    pub async fn recv_frame<M: DeserializeOwned>(&mut self) -> Result<Frame<M>, DriverError> {
        self.read_line().await?;
        match serde_json::from_slice(&self.line) {
            Ok(Frame::Error(e)) => Err(PeerFault::Said(e).into()),
            Ok(f) => Ok(f),
            Err(e) => Err(unreadable(e)),
        }
    }

    /// [`Control::recv_frame`] within `d`.
    pub async fn recv_frame_within<M: DeserializeOwned>(
        &mut self,
        d: Duration,
    ) -> Result<Frame<M>, DriverError> {
        match tokio::time::timeout(d, self.recv_frame()).await {
            Ok(r) => r,
            Err(_) => Err(no_answer(d)),
        }
    }

    /// The next frame, which must be an application message.
    pub async fn recv<M: DeserializeOwned>(&mut self) -> Result<M, DriverError> {
        match self.recv_frame().await? {
            Frame::Msg(m) => Ok(m),
            f => Err(unexpected(&f)),
        }
    }

    /// [`Control::recv`] within `d`.
    pub async fn recv_timeout<M: DeserializeOwned>(
        &mut self,
        d: Duration,
    ) -> Result<M, DriverError> {
        match tokio::time::timeout(d, self.recv()).await {
            Ok(r) => r,
            Err(_) => Err(no_answer(d)),
        }
    }

    /// Waits ([`ANSWER_TIMEOUT`] at most) for the peer's `ready`.
    pub async fn expect_ready(&mut self) -> Result<(), DriverError> {
        match self
            .recv_frame_within::<serde_json::Value>(ANSWER_TIMEOUT)
            .await?
        {
            Frame::Ready => Ok(()),
            f => Err(unexpected(&f)),
        }
    }

    /// Resolves only when the peer speaks out of turn or goes away (`Err`, one line naming
    /// `who` the peer is): the stop signal of a client while its data path runs.
    pub async fn peer_interrupts(&mut self, who: &str) -> Result<(), DriverError> {
        match self.recv_frame::<serde_json::Value>().await {
            Err(DriverError::Peer(m)) => Err(m.named(who, false).into()),
            Err(e) => Err(e),
            Ok(f) => Err(unexpected(&f)),
        }
    }

    /// Resolves when the peer says it is done (`Ok(ok)`) or vanishes (`Err`, one line naming
    /// `who` the peer is); the stop signal of a serving endpoint.
    pub async fn peer_done(&mut self, who: &str) -> Result<bool, DriverError> {
        match self.recv_frame::<serde_json::Value>().await {
            Ok(Frame::Done { ok }) => Ok(ok),
            Ok(f) => Err(unexpected(&f)),
            Err(DriverError::Peer(m)) => Err(m.named(who, true).into()),
            Err(e) => Err(e),
        }
    }
}

fn no_answer(d: Duration) -> DriverError {
    PeerFault::Silent {
        what: "control connection",
        within: d,
    }
    .into()
}

fn unreadable(e: serde_json::Error) -> DriverError {
    PeerFault::Unreadable {
        what: "control message",
        source: Box::new(e),
    }
    .into()
}

fn unexpected<M>(f: &Frame<M>) -> DriverError {
    let what = match f {
        Frame::Msg(_) => "a message",
        Frame::Offer(_) => "an offer",
        Frame::Answer(_) => "an answer",
        Frame::Ready => "ready",
        Frame::Done { .. } => "done",
        Frame::Error(_) => "an error",
    };
    PeerFault::OutOfTurn(what).into()
}

/// Opens the control connection to `server` (from `bind`, when given), within 5 s. Returns the
/// channel and the local IP for the RoCE socket: `bind`, else the one the route to the server
/// uses.
pub async fn connect(
    server: SocketAddr,
    bind: Option<IpAddr>,
) -> Result<(Control, IpAddr), DriverError> {
    let stream = crate::connect::tcp_connect(server, bind).await?;
    let local_ip = match bind.filter(|ip| !ip.is_unspecified()) {
        Some(ip) => ip,
        None => stream.local_addr().map_err(setup("control socket"))?.ip(),
    };
    Ok((Control::new(stream), local_ip))
}

/// How many connections a server waits on at once for a first message; past it the oldest
/// is closed.
pub const MAX_WAITING: usize = 16;

/// Accepts one client on `listener` (within `timeout`, when given): the first connection
/// whose first line is a control frame (an application message or an offer). Connections are waited on
/// together, up to [`MAX_WAITING`], each for [`ANSWER_TIMEOUT`] at most: one that says
/// nothing, sends a line longer than [`MAX_LINE`] or something that is not a frame costs
/// the server that connection only (one line naming the peer), never the wait for the real
/// client. Returns the channel (its first frame still to be received), the local IP the
/// client reached and the client's address.
pub async fn accept(
    listener: std::net::TcpListener,
    timeout: Option<Duration>,
) -> Result<(Control, IpAddr, SocketAddr), DriverError> {
    let listener = TcpListener::from_std(listener).map_err(setup("listener"))?;
    let deadline = timeout.map(|d| tokio::time::Instant::now() + d);
    let expired = async {
        match deadline {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expired);
    let mut waiting: tokio::task::JoinSet<
        Result<(Control, SocketAddr), (SocketAddr, DriverError)>,
    > = tokio::task::JoinSet::new();
    let mut order: std::collections::VecDeque<tokio::task::AbortHandle> =
        std::collections::VecDeque::new();
    loop {
        tokio::select! {
            a = listener.accept() => {
                let (stream, peer) = a.map_err(setup("accept"))?;
                // A peer the allow-list refuses is closed at once; the wait goes on.
                if !crate::allow::admit(peer.ip(), "a TCP connection") {
                    continue;
                }
                if waiting.len() >= MAX_WAITING {
                    if let Some(oldest) = order.pop_front() {
                        oldest.abort();
                    }
                }
                order.retain(|h| !h.is_finished());
                order.push_back(waiting.spawn(first_frame(stream, peer)));
            }
            Some(done) = waiting.join_next(), if !waiting.is_empty() => match done {
                Ok(Ok((ctl, peer))) => {
                    let local_ip = ctl.wr.local_addr().map_err(setup("control socket"))?.ip();
                    return Ok((ctl, local_ip, peer));
                }
                Ok(Err((peer, e))) => eprintln!(
                    "roce: gave up a control connection from {} ({e}); listening again",
                    peer.ip()
                ),
                // Aborted: the oldest of too many waiting.
                Err(_) => {}
            },
            () = &mut expired => {
                let d = timeout.unwrap_or_default();
                return Err(SetupFailure::NobodyCame {
                    who: "client",
                    within: d,
                }
                .into());
            }
        }
    }
}

/// Reads a new connection's first line, within [`ANSWER_TIMEOUT`], and checks that it is a
/// control frame carrying an application message or an offer; it stays in the [`Control`] for the
/// application to receive.
async fn first_frame(
    stream: TcpStream,
    peer: SocketAddr,
) -> Result<(Control, SocketAddr), (SocketAddr, DriverError)> {
    let mut ctl = Control::new(stream);
    let read = tokio::time::timeout(ANSWER_TIMEOUT, ctl.read_line()).await;
    match read {
        Err(_) => return Err((peer, no_answer(ANSWER_TIMEOUT))),
        Ok(Err(e)) => return Err((peer, e)),
        Ok(Ok(())) => {}
    }
    match serde_json::from_slice::<Frame<serde_json::Value>>(&ctl.line) {
        Ok(Frame::Msg(_) | Frame::Offer(_)) => {
            ctl.pending = true;
            Ok((ctl, peer))
        }
        Ok(f) => Err((peer, unexpected(&f))),
        Err(e) => Err((peer, unreadable(e))),
    }
}
