//! perftest's exchange (linux-rdma/perftest `src/perftest_communication.c`): lock-step
//! messages, each side sending one and then reading the other's (the client first), over one
//! of two channels:
//!
//! * **TCP** (the default; port 18515): each message one `write`; key records as text
//!   ([`roce_proto::perftest::Dest::emit`]).
//! * **An RDMA-CM connection of its own** (perftest's `-R` and `-z`; roce's `--perftest --cm`):
//!   an RC "comm" QP connected through RDMA-CM in the TCP port space, on the same port, with
//!   no private data but the `cma_hdr` (IBTA Vol 1 Annex A11); each message one SEND of exactly
//!   its bytes, received into a 56-byte receive that is posted again once read; key records
//!   as perftest's raw `struct pingpong_dest` ([`Dest::emit_binary`]). With `-R` the data QPs
//!   are RDMA-CM connections too ([`Session::connect_data`]): one REQ per QP to the same
//!   service ID (RC), or one SIDR_REQ per QP in the UDP port space (UD, Q_Key
//!   [`RDMA_UDP_QKEY`]), between two all-zero key records.
//!
//! What travels, in order, on either channel: versions (16 bytes), page and cache-line sizes
//! (4 + 4), the MTU (2), the key records around the test, the bandwidth reports
//! ([`Session::reports`]), a closing record. The application (roce's `perf --perftest`)
//! decides which records its test exchanges; this module moves them, and runs the endpoint's
//! loop (the CM, the comm QP) whenever it waits for the peer.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_proto::perftest::Dest;
use roce_proto::rdma_cm::RDMA_UDP_QKEY;
use roce_proto::{QKey, Qpn};
use roce_stack::ud::AddressHandle;
use roce_stack::Service;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Side;
use crate::{Application, DriverError, Endpoint, PeerFault, Secrets, Unsupported};

mod comm;
use comm::{Beside, Comm, Until};

/// perftest's default port (`DEF_PORT`), TCP or RDMA-CM.
pub const PORT: u16 = 18515;

/// The version roce announces: a 6.28+ peer then skips its parameter negotiation (a raw C
/// struct whose size depends on how the peer was built) and each side keeps its own command
/// line.
pub const ANNOUNCED_VERSION: &str = "6.27";

/// perftest's `MAX_VERSION`.
const VERSION_LEN: usize = 16;

/// The page size this side reports (perftest's `cycle_buffer`).
pub const PAGE: u32 = 4096;

/// The cache line size this side reports.
const CACHE_LINE: u32 = 64;

/// How long a step may wait for the peer.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a server waits for its client: as perftest's, until one comes.
const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// perftest's MB/sec (2^20 bytes per second) in one Gb/sec (10^9 bits per second).
pub const MB_PER_GBIT: f64 = 1e9 / 8.0 / 1_048_576.0;

/// The bandwidth report each side of a WRITE, READ or atomic bandwidth test sends the other
/// (`xchg_bw_reports`), bandwidths in Gb/s.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Report {
    /// Message size, bytes.
    pub size: u64,
    /// Messages, over every QP.
    pub iterations: u64,
    /// Peak bandwidth, Gb/s.
    pub peak_gbps: f64,
    /// Average bandwidth, Gb/s.
    pub avg_gbps: f64,
    /// Message rate, millions per second.
    pub rate_mpps: f64,
}

impl Report {
    /// The report of a test that ran: at least one message of at least one byte, and every
    /// figure a finite, non-negative number. A server that prints its client's figures
    /// refuses anything else (NaN, infinity, or zero iterations is a peer that measured
    /// nothing, whatever it says).
    pub fn checked(self) -> Result<Self, DriverError> {
        let bad = |why: ExchangeFault| Err(PeerFault::step("the client's report", why).into());
        if self.iterations == 0 || self.size == 0 {
            return bad(ExchangeFault::NoTest {
                iterations: self.iterations,
                size: self.size,
            });
        }
        for (name, v) in [
            ("peak bandwidth", self.peak_gbps),
            ("average bandwidth", self.avg_gbps),
            ("message rate", self.rate_mpps),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(ExchangeFault::Figure { name, value: v });
            }
        }
        Ok(self)
    }
}

/// What a perftest peer sent, or did not send, that ends the exchange with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeFault {
    /// Nothing came within a step's bound.
    #[error("the peer sent nothing for {} s", .0.as_secs())]
    Silent(Duration),
    /// A message of another length than the step's.
    #[error("the peer sent {got} bytes where {due} were due")]
    Length {
        /// What came.
        got: usize,
        /// What the step needs.
        due: usize,
    },
    /// A version older than the exchange this end speaks.
    #[error("the peer announces {0:?}; perftest 5.70 or newer is needed")]
    Version(String),
    /// A key record that does not parse.
    #[error("the peer's key record does not parse ({0}); is it RoCE with a GID?")]
    Record(#[source] roce_proto::perftest::Error),
    /// A report of no test.
    #[error("{iterations} iterations of {size} bytes: it ran no test")]
    NoTest {
        /// Its iterations.
        iterations: u64,
        /// Its message size.
        size: u64,
    },
    /// A figure of a report that is not a finite, non-negative number.
    #[error("its {name} is {value}")]
    Figure {
        /// Which figure.
        name: &'static str,
        /// Its value.
        value: f64,
    },
    /// The client's closing record did not come within the test's length and a margin.
    #[error("the client's {what} did not come within {} s (the test's length and a margin)", .limit.as_secs())]
    Late {
        /// The record.
        what: String,
        /// The bound.
        limit: Duration,
    },
    /// The client went away in the middle of the test.
    #[error("the client went away before the end of the test: {0}")]
    WentAway(#[source] std::io::Error),
    /// The peer disconnected before its closing record.
    #[error("it disconnected before sending its closing record")]
    NoClosingRecord,
}

fn err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> DriverError {
    PeerFault::step(format!("perftest exchange, {what}"), e).into()
}

enum Wire {
    Tcp(TcpStream),
    Cm(Box<Comm>),
}

/// One side of the exchange.
pub struct Session {
    wire: Wire,
    client: bool,
    peer_version: f64,
    /// Every message sent (`true`) and received, in order (for tests and `--verbose`).
    pub transcript: Vec<(bool, Vec<u8>)>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("client", &self.client)
            .field("rdma_cm", &self.uses_cm())
            .finish_non_exhaustive()
    }
}

impl Session {
    /// A session over a connected TCP stream, as the client (writes first) or the server.
    pub fn tcp(tcp: TcpStream, client: bool) -> Self {
        let _ = tcp.set_nodelay(true);
        Self {
            wire: Wire::Tcp(tcp),
            client,
            peer_version: 0.0,
            transcript: Vec::new(),
        }
    }

    /// A session over perftest's RDMA-CM "comm" connection on `side`'s endpoint: as the
    /// client toward `server` (its RDMA-CM port), or as the server listening on `port` (then
    /// `ready` is called once listening, and the first client's REQ is the exchange's; later
    /// REQs are [`Session::connect_data`]'s). `secrets` and `salt` give the CM's IDs and the
    /// comm QP's first PSN. `latency`: the test is a latency test (see
    /// [`Session::connect_data`]).
    pub async fn over_rdma_cm(
        side: &mut Side,
        secrets: &Secrets,
        salt: u64,
        server: Option<SocketAddr>,
        port: u16,
        latency: bool,
        ready: impl FnOnce(),
    ) -> Result<Self, DriverError> {
        let client = server.is_some();
        let mut comm = Comm::new(side, secrets, salt, server, port)?;
        // A server takes the data QPs' REQs from the moment the exchange is up: the client
        // sends them as soon as it reads the record before them, possibly before this side
        // saw that record's SEND complete.
        comm.plan_data(side, latency)?;
        let now = side.ep.now();
        if client {
            comm.connect_comm(now)?;
        }
        comm.session.flush(&mut side.ep.dev);
        ready();
        let silence = if client { STEP_TIMEOUT } else { FOREVER };
        comm.wait(&mut side.ep, Until::Up, silence).await?;
        Ok(Self {
            wire: Wire::Cm(Box::new(comm)),
            client,
            peer_version: 0.0,
            transcript: Vec::new(),
        })
    }

    /// `true` on the client's side (the side that writes first).
    pub fn is_client(&self) -> bool {
        self.client
    }

    /// `true` over RDMA-CM (perftest's `-R`), `false` over TCP.
    pub fn uses_cm(&self) -> bool {
        matches!(self.wire, Wire::Cm(_))
    }

    /// The peer's address as the comm connection saw it (RDMA-CM only).
    pub fn cm_peer(&self) -> Option<IpAddr> {
        match &self.wire {
            Wire::Cm(c) => c.peer,
            Wire::Tcp(_) => None,
        }
    }

    /// One lock-step exchange of `mine` for the peer's message of the same length.
    async fn xchg(
        &mut self,
        ep: &mut Endpoint,
        what: &str,
        mine: &[u8],
    ) -> Result<Vec<u8>, DriverError> {
        let client = self.client;
        let theirs = match &mut self.wire {
            Wire::Tcp(tcp) => {
                let mut theirs = vec![0u8; mine.len()];
                let step = async {
                    if client {
                        tcp.write_all(mine).await?;
                        tcp.read_exact(&mut theirs).await?;
                    } else {
                        tcp.read_exact(&mut theirs).await?;
                        tcp.write_all(mine).await?;
                    }
                    Ok::<(), std::io::Error>(())
                };
                match tokio::time::timeout(STEP_TIMEOUT, step).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(err(what, e)),
                    Err(_) => return Err(err(what, ExchangeFault::Silent(STEP_TIMEOUT))),
                }
                theirs
            }
            Wire::Cm(comm) => {
                let theirs = if client {
                    comm.send(ep, mine).await.map_err(|e| err(what, e))?;
                    comm.recv(ep).await.map_err(|e| err(what, e))?
                } else {
                    let t = comm.recv(ep).await.map_err(|e| err(what, e))?;
                    comm.send(ep, mine).await.map_err(|e| err(what, e))?;
                    t
                };
                if theirs.len() != mine.len() {
                    return Err(err(
                        what,
                        ExchangeFault::Length {
                            got: theirs.len(),
                            due: mine.len(),
                        },
                    ));
                }
                theirs
            }
        };
        self.transcript.push((true, mine.to_vec()));
        self.transcript.push((false, theirs.clone()));
        Ok(theirs)
    }

    /// Versions, system data, MTU. Returns the path MTU both use (bytes): the smaller of
    /// `mtu` and the peer's.
    pub async fn negotiate(&mut self, ep: &mut Endpoint, mtu: u32) -> Result<u32, DriverError> {
        let mut v = [0u8; VERSION_LEN];
        v[..ANNOUNCED_VERSION.len()].copy_from_slice(ANNOUNCED_VERSION.as_bytes());
        let theirs = self.xchg(ep, "versions", &v).await?;
        let text: String = theirs
            .iter()
            .take_while(|&&b| b != 0)
            .map(|&b| char::from(b))
            .collect();
        // As C's atof: the leading number.
        let num: String = text
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        self.peer_version = num.parse().unwrap_or(0.0);
        if self.peer_version < 5.70 {
            return Err(err("versions", ExchangeFault::Version(text)));
        }
        // Both sides gate each optional step on the other's version: every step below runs
        // for any peer that passed the check above, as it does for "6.27" on the peer's side.
        self.xchg(ep, "page size", &PAGE.to_be_bytes()).await?;
        self.xchg(ep, "cache line size", &CACHE_LINE.to_be_bytes())
            .await?;
        let code = roce_proto::cm::path_mtu_code(mtu).unwrap_or(3);
        let theirs = self.xchg(ep, "MTU", &[b'0' + code, 0]).await?;
        let peer_code = theirs[0].wrapping_sub(b'0');
        Ok(match roce_proto::cm::path_mtu_bytes(peer_code) {
            Some(b) => b.min(mtu),
            None => mtu,
        })
    }

    /// One key record each way (text over TCP, binary over RDMA-CM).
    pub async fn keys(
        &mut self,
        ep: &mut Endpoint,
        what: &str,
        mine: &Dest,
    ) -> Result<Dest, DriverError> {
        let bytes = self.record(what, mine)?;
        let theirs = self.xchg(ep, what, &bytes).await?;
        self.parse_record(what, mine, &theirs)
    }

    fn record(&self, what: &str, mine: &Dest) -> Result<Vec<u8>, DriverError> {
        if self.uses_cm() {
            return Ok(mine.emit_binary().to_vec());
        }
        let mut b = [0u8; 128];
        let n = mine.emit(&mut b).map_err(|e| err(what, e))?;
        Ok(b[..n].to_vec())
    }

    fn parse_record(&self, what: &str, mine: &Dest, theirs: &[u8]) -> Result<Dest, DriverError> {
        if self.uses_cm() {
            return Dest::parse_binary(theirs).map_err(|e| err(what, e));
        }
        Dest::parse(theirs, mine.variant()).map_err(|e| err(what, ExchangeFault::Record(e)))
    }

    /// The bandwidth reports (`xchg_bw_reports`): size, iterations, peak and average
    /// bandwidth, message rate. perftest sends the bandwidth in its own run's unit, MB/sec
    /// (2^20 bytes per second) or, with `--report_gbits`, Gb/sec (10^9 bits per second), and
    /// prints the peer's figures under its own header without converting: both sides must be
    /// given the same unit. `gbits` is this side's. Returns the peer's report as sent (a
    /// stock server sends a struct it never filled: see [`Report::checked`] before using one).
    pub async fn reports(
        &mut self,
        ep: &mut Endpoint,
        mine: Option<&Report>,
        gbits: bool,
    ) -> Result<Report, DriverError> {
        let unit = if gbits { 1.0 } else { MB_PER_GBIT };
        let r = mine.copied().unwrap_or_default();
        let be = |t: Vec<u8>| u64::from_be_bytes(t.try_into().unwrap_or([0; 8]));
        let size = be(self.xchg(ep, "report: size", &r.size.to_be_bytes()).await?);
        let iterations = if self.peer_version >= 5.33 {
            be(self
                .xchg(ep, "report: iterations", &r.iterations.to_be_bytes())
                .await?)
        } else {
            let t = self
                .xchg(
                    ep,
                    "report: iterations",
                    &(r.iterations as u32).to_be_bytes(),
                )
                .await?;
            u64::from(u32::from_be_bytes(t.try_into().unwrap_or([0; 4])))
        };
        let mut out = [0.0; 3];
        for (i, (what, x)) in [
            ("report: peak", r.peak_gbps * unit),
            ("report: average", r.avg_gbps * unit),
            ("report: rate", r.rate_mpps),
        ]
        .into_iter()
        .enumerate()
        {
            let t = self.xchg(ep, what, &x.to_be_bytes()).await?;
            let v = f64::from_be_bytes(t.try_into().unwrap_or([0; 8]));
            out[i] = v;
        }
        Ok(Report {
            size,
            iterations,
            peak_gbps: out[0] / unit,
            avg_gbps: out[1] / unit,
            rate_mpps: out[2],
        })
    }

    /// `-R`: connects `side`'s QPs through RDMA-CM as perftest's `create_rdma_cm_connection`
    /// does: an all-zero key record each way; then the client sends one REQ per QP (RC;
    /// retried every 100 ms, 10 times, while the server is not listening yet) or one
    /// SIDR_REQ per QP (UD) to the comm connection's port, and the server accepts them in
    /// arrival order, QP `i` the `i`-th; then another all-zero record. In a latency test
    /// (see [`Session::over_rdma_cm`]) a UD client tells each server QP its QPN (a 4-byte
    /// SEND with immediate, which the server's address handle is built from), as perftest's
    /// do. Call it after [`Session::negotiate`], with `side.request().params` the QPs'
    /// attributes.
    pub async fn connect_data(&mut self, side: &mut Side) -> Result<(), DriverError> {
        let zero = Dest::default();
        self.keys(&mut side.ep, "record before the rdma_cm connections", &zero)
            .await?;
        let Wire::Cm(comm) = &mut self.wire else {
            return Err(Unsupported::WrongExchange(
                "the data QPs connect through rdma_cm only over its exchange",
            )
            .into());
        };
        comm.base = side.request().params;
        if self.client {
            let now = side.ep.now();
            comm.connect_data(now)?;
            comm.session.flush(&mut side.ep.dev);
        }
        comm.wait(&mut side.ep, Until::DataReady, STEP_TIMEOUT)
            .await
            .map_err(|e| err("rdma_cm connections", e))?;
        if let Some(peer) = comm.peer {
            if side.request().service == Service::Ud {
                side.ahs = comm
                    .data
                    .iter()
                    .map(|d| AddressHandle {
                        local: comm.local,
                        remote: peer,
                        remote_port: roce_proto::ROCEV2_UDP_PORT,
                        dest_qpn: d.remote_qpn.unwrap_or(Qpn(0)),
                        qkey: QKey(RDMA_UDP_QKEY),
                    })
                    .collect();
            }
        }
        comm.data_phase = false;
        self.keys(&mut side.ep, "record after the rdma_cm connections", &zero)
            .await?;
        Ok(())
    }

    /// Runs `app` on `ep` until it is done, the comm connection's CM served meanwhile. Used
    /// by the side that measures (the client; both sides of a write-latency test).
    pub async fn run_test<A: Application>(
        &mut self,
        ep: &mut Endpoint,
        app: &mut A,
    ) -> Result<(), DriverError> {
        match &mut self.wire {
            Wire::Tcp(_) => {
                ep.run(app, true, std::future::pending(), Duration::from_secs(5))
                    .await?
            }
            Wire::Cm(comm) => {
                let mut both = Beside {
                    app,
                    comm,
                    until_message: false,
                };
                ep.run(
                    &mut both,
                    true,
                    std::future::pending(),
                    Duration::from_secs(5),
                )
                .await?
            }
        }
        Ok(())
    }

    /// The serving side of a test: runs `app` (answering the peer's requests) until the
    /// peer's next key record arrives, then answers it with `mine`. A peer whose record has
    /// not come within `limit` (the test's own length and a margin: a client silent after
    /// the keys holds a server no longer than that) fails the step.
    pub async fn serve_test<A: Application>(
        &mut self,
        ep: &mut Endpoint,
        app: &mut A,
        what: &str,
        mine: &Dest,
        limit: Duration,
    ) -> Result<(), DriverError> {
        let rec = self.record(what, mine)?;
        // The endpoint's own silence guard waits longer than `late`, so that a client silent
        // past `limit` is always told as that (the two used to race at the same instant).
        let silence = limit.saturating_add(Duration::from_secs(5));
        let late = move || async move {
            tokio::time::sleep(limit).await;
            Err::<(), DriverError>(
                PeerFault::invalid(ExchangeFault::Late {
                    what: what.to_string(),
                    limit,
                })
                .into(),
            )
        };
        let theirs = match &mut self.wire {
            Wire::Tcp(tcp) => {
                let mut theirs = vec![0u8; rec.len()];
                {
                    let buf = &mut theirs;
                    let stop = async move {
                        tokio::select! {
                            r = tcp.read_exact(buf) => r.map(|_| ()).map_err(|e| {
                                PeerFault::invalid(ExchangeFault::WentAway(e)).into()
                            }),
                            r = late() => r,
                        }
                    };
                    ep.run(app, false, stop, silence).await?;
                }
                let Wire::Tcp(tcp) = &mut self.wire else {
                    unreachable!("matched above")
                };
                tcp.write_all(&rec).await.map_err(|e| err(what, e))?;
                theirs
            }
            Wire::Cm(comm) => {
                {
                    let mut both = Beside {
                        app,
                        comm,
                        until_message: true,
                    };
                    ep.run(&mut both, true, late(), silence).await?;
                }
                let t = comm
                    .inbox
                    .pop_front()
                    .ok_or_else(|| PeerFault::invalid(ExchangeFault::NoClosingRecord))?;
                comm.send(ep, &rec).await.map_err(|e| err(what, e))?;
                t
            }
        };
        self.transcript.push((false, theirs));
        self.transcript.push((true, rec));
        Ok(())
    }

    /// The next exchange is the closing record: over RDMA-CM the peer may release the
    /// connections as soon as it has ours (perftest does), which then ends the exchange
    /// instead of failing it.
    pub fn closing_exchange(&mut self) {
        if let Wire::Cm(comm) = &mut self.wire {
            comm.last = true;
        }
    }

    /// The end: over RDMA-CM, every connection of this session is released (DREQ/DREP; the
    /// peer's DREQs may cross ours) within 5 s; a peer that does not answer is not waited for
    /// longer. Over TCP nothing is sent (the application's closing record was the end).
    pub async fn close(&mut self, ep: &mut Endpoint) -> Result<(), DriverError> {
        let Wire::Cm(comm) = &mut self.wire else {
            return Ok(());
        };
        comm.closing = true;
        let now = ep.now();
        let ids: Vec<usize> = comm
            .data
            .iter()
            .filter(|d| !d.released)
            .filter_map(|d| d.id)
            .chain(comm.conn.filter(|_| !comm.comm_released))
            .collect();
        for id in ids {
            if !comm.session.disconnect(now, id) {
                comm.mark_released(id);
            }
        }
        comm.session.flush(&mut ep.dev);
        // Best effort: the test has verified; a DREP that never comes is the peer's.
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            comm.wait(ep, Until::Released, Duration::from_secs(5)),
        )
        .await;
        Ok(())
    }
}
