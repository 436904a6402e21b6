//! A run's group of RC connections through RDMA-CM (IBTA Vol 1 ch. 12, Annex A11), one per
//! QP, each REQ naming which of how many connections of the run it is: roce's own `--cm`
//! applications (perf, workload, kv). The layer holds the [`CmSession`], counts the run's
//! connections as they come up and are released, and runs the server's loop: each run on
//! a fresh device, CM and endpoint; a set-up given up, or a run its peer broke, costs the
//! server that run (one line) and it listens again ([`AfterGivingUp`]). The application
//! says only what its REQs and replies carry and does its own work on the [`Group`] it is
//! handed ([`Served`] for a server's run, [`Joined`] for a client's).
use std::future::pending;
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;
use std::time::Duration;

use roce_proto::{Psn, ROCEV2_UDP_PORT};
use roce_stack::{CcConfig, ConnectParams, Device, Instant};

use super::cm_session::{Asked, CmSession, SessionEvent, Terms};
use super::qps::LocalQp;
use super::AfterGivingUp;
use crate::endpoint::Endpoint;
use crate::impair::Impairment;
use crate::{bind_endpoint, runtime, AppError, Application, DriverError, LinkChoice, Secrets};

/// How long a server waits for a run's first REQ when it is the first run: without end.
pub const FOREVER: Duration = Duration::from_secs(365 * 24 * 3600);

/// The bytes of an error's text a REJ carries (its private data holds 148).
const REJ_TEXT: usize = 140;

/// How long a run's ends wait with nothing from the other once it is set up.
pub const SERVING_SILENCE: Duration = Duration::from_secs(30);

/// A run's connections: the session and, for each of the run's QPs, its connection.
pub struct Group {
    session: CmSession,
    /// The session's connection of each of the run's QPs (`None`: not asked for yet).
    conns: Vec<Option<usize>>,
    established: usize,
    released: usize,
    releasing: bool,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("conns", &self.conns)
            .field("established", &self.established)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

impl Group {
    fn new(session: CmSession, n: usize) -> Self {
        Self {
            session,
            conns: vec![None; n],
            established: 0,
            released: 0,
            releasing: false,
        }
    }

    /// The run's connections (a server's: 0 until its first REQ was admitted).
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// Whether the run has no connections yet.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Whether every connection of the run is established.
    pub fn all_up(&self) -> bool {
        !self.conns.is_empty() && self.established == self.conns.len()
    }

    /// Whether every connection of the run was released.
    pub fn all_released(&self) -> bool {
        !self.conns.is_empty() && self.released == self.conns.len()
    }

    /// Whether this end released the run ([`Group::release`]).
    pub fn releasing(&self) -> bool {
        self.releasing
    }

    /// The peer of the run.
    pub fn peer(&self) -> Option<IpAddr> {
        self.session.peer()
    }

    /// The private data the peer sent for connection `k`: its REP's (client) or its REQ's
    /// (server).
    pub fn peer_data(&self, k: usize) -> &[u8] {
        self.conn(k).map_or(&[], |i| self.session.peer_data(i))
    }

    /// Server: the private data of the RTU that established connection `k`.
    pub fn confirm_data(&self, k: usize) -> Option<&[u8]> {
        self.session.confirm_data(self.conn(k)?)
    }

    /// The private data of the peer's DREQ or DREP of connection `k`.
    pub fn release_data(&self, k: usize) -> Option<&[u8]> {
        self.session.release_data(self.conn(k)?)
    }

    /// What this end's DREQ or DREP of every connection carries.
    pub fn set_release_data(&mut self, data: &[u8]) {
        for i in self.conns.iter().flatten() {
            self.session.set_release_data(*i, data);
        }
    }

    /// Releases every connection of the run (DREQ), `data` (unless empty) in each DREQ.
    pub fn release(&mut self, now: Instant, data: &[u8]) {
        if self.releasing {
            return;
        }
        self.releasing = true;
        if !data.is_empty() {
            self.set_release_data(data);
        }
        for i in self.conns.clone().into_iter().flatten() {
            // `false`: the peer's crossing DREQ released it, and its event counts it.
            self.session.disconnect(now, i);
        }
    }

    /// Client: refuses the REP of connection `k` (a REJ in the RTU's place, `why` in it) and
    /// sends it now.
    fn refuse_reply(&mut self, dev: &mut Device, now: Instant, k: usize, why: &[u8]) {
        if let Some(i) = self.conn(k) {
            self.session.refuse_reply(now, i, why);
        }
        self.session.flush(dev);
    }

    fn conn(&self, k: usize) -> Option<usize> {
        self.conns.get(k).copied().flatten()
    }

    fn index_of(&self, i: usize) -> Option<usize> {
        self.conns.iter().position(|c| *c == Some(i))
    }
}

/// A server's answer to a REQ of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit {
    /// Connection `k` of a run of `of`: the first REQ's `of` sizes the run, a later one's
    /// must name the same.
    Member {
        /// Its index.
        k: usize,
        /// The run's connections.
        of: usize,
    },
    /// Refused (REJ consumer reject), `why` its private data.
    Refuse(&'static [u8]),
}

/// How a server accepts a connection of its run: its QP and first PSN, the QP's
/// parameters, and what its REP carries.
#[derive(Debug, Clone)]
pub struct Accept {
    /// The QP.
    pub qp: LocalQp,
    /// Its first PSN.
    pub psn: Psn,
    /// Its MTU, READ depths and timers (the CM settles the rest).
    pub base: ConnectParams,
    /// READs each way offered.
    pub rd_atomic: u8,
    /// Its congestion control.
    pub cc: CcConfig,
    /// The line rate the congestion control is clamped to.
    pub line_rate_bps: u64,
    /// The REP's private data.
    pub reply: Vec<u8>,
}

/// What a server's run does: admits REQs, then works on the connected [`Group`].
pub trait Served {
    /// A REQ (from anyone while no run is under way, from the run's peer after): which
    /// connection of the run it is, or a refusal. The first REQ admitted makes the run:
    /// this is where the application makes its QPs (it may refuse a later REQ that asks
    /// for another run: "busy").
    fn admit(&mut self, dev: &mut Device, asked: &Asked) -> Result<Admit, AppError>;
    /// Connection `k` of the run was admitted (`k < of`, not asked for before): how it is
    /// accepted. Its QP is connected and ready to receive before the REP leaves.
    fn accept(&mut self, dev: &mut Device, k: usize) -> Result<Accept, AppError>;
    /// Connection `k` is up ([`Group::confirm_data`] holds its RTU's data).
    fn up(&mut self, group: &Group, dev: &mut Device, k: usize) -> Result<(), AppError> {
        let _ = (group, dev, k);
        Ok(())
    }
    /// The run's own work, every turn of the endpoint's loop after the session's (a run
    /// waits for [`Group::all_up`] before it starts).
    fn poll(&mut self, group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError>;
}

/// A server's run in progress: the [`Group`] the layer keeps and the application's part.
pub struct Hosted<R> {
    /// The run's connections.
    pub group: Group,
    /// The application's part.
    pub run: R,
    until_established: bool,
    abandoned: bool,
}

impl<R: Served> Hosted<R> {
    fn on_asked(&mut self, dev: &mut Device, now: Instant, asked: Asked) -> Result<(), AppError> {
        let (k, of) = match self.run.admit(dev, &asked)? {
            Admit::Refuse(why) => {
                self.group.session.refuse(&asked, why);
                return Ok(());
            }
            Admit::Member { k, of } => (k, of),
        };
        let g = &mut self.group;
        if g.conns.is_empty() {
            g.conns = vec![None; of];
        } else if of != g.conns.len() {
            // The session refuses other peers while a set-up is under way.
            g.session.refuse(&asked, b"busy");
            return Ok(());
        }
        if k >= g.conns.len() || g.conns[k].is_some() {
            g.session.refuse(&asked, b"bad QP index");
            return Ok(());
        }
        let a = self.run.accept(dev, k)?;
        let i = self.group.session.accept(
            dev,
            now,
            &asked,
            a.qp,
            a.psn,
            &a.base,
            (a.rd_atomic, a.rd_atomic),
            a.cc,
            a.line_rate_bps,
            &a.reply,
        )?;
        self.group.conns[k] = Some(i);
        Ok(())
    }
}

impl<R: Served> Application for Hosted<R> {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.group.session.poll(dev, now)?;
        while let Some(e) = self.group.session.next_event() {
            match e {
                SessionEvent::Asked(a) => self.on_asked(dev, now, a)?,
                SessionEvent::Up(i) => {
                    self.group.established += 1;
                    if let Some(k) = self.group.index_of(i) {
                        self.run.up(&self.group, dev, k)?;
                    }
                }
                // A refused client's release, answered or not, counts too.
                SessionEvent::Released(_) => self.group.released += 1,
                // Any address can send a REQ: one never confirmed, or a client gone quiet,
                // costs this server the run's set-up (and what it made for it), not its life.
                SessionEvent::Restarted => self.abandoned = true,
                SessionEvent::Accepted(_)
                | SessionEvent::Resolve(_)
                | SessionEvent::Resolved { .. } => {}
            }
        }
        if !self.abandoned {
            self.run.poll(&mut self.group, dev, now)?;
        }
        self.group.session.flush(dev);
        Ok(())
    }

    fn done(&self) -> bool {
        self.abandoned
            || if self.until_established {
                self.group.all_up()
            } else {
                self.group.all_released()
            }
    }
}

/// A server of runs over RDMA-CM: what each run is made of, and what becomes of it.
pub trait Host {
    /// A run's part of the application.
    type Run: Served;
    /// What serving produced.
    type Output;
    /// The application's name, which begins the lines the server prints.
    fn name(&self) -> &'static str;
    /// A new run on a fresh endpoint (its device's QPs come with the run's first REQ).
    fn open(&mut self, ep: &mut Endpoint) -> Result<Self::Run, DriverError>;
    /// Every connection of the run is up; the run goes on.
    fn running(&mut self, ep: &mut Endpoint, run: &Self::Run) {
        let _ = (ep, run);
    }
    /// The run was given up, or its peer broke it: the endpoint goes (take what outlives
    /// it, a tap).
    fn lost(&mut self, ep: &mut Endpoint) {
        let _ = ep;
    }
    /// A run ended (every connection released): stop with the output, or serve the next.
    fn ended(
        &mut self,
        ep: Endpoint,
        run: Hosted<Self::Run>,
    ) -> Result<ControlFlow<Self::Output>, DriverError>;
    /// How long to wait for the next run's first REQ.
    fn wait(&self) -> Duration {
        FOREVER
    }
    /// How long a run's client may be silent.
    fn silence(&self) -> Duration {
        SERVING_SILENCE
    }
}

/// Where and how a CM server listens.
#[derive(Debug, Clone, Copy)]
pub struct Listen {
    /// Its address (the CM and the QPs on UDP 4791).
    pub bind: IpAddr,
    /// The RDMA-CM port.
    pub port: u16,
    /// Its secrets.
    pub secrets: Secrets,
    /// Its link.
    pub link: LinkChoice,
    /// Loss and delay its endpoint adds.
    pub impairment: Impairment,
    /// Mixed into its devices' and sessions' secrets (one application's apart from another's).
    pub salt: u64,
}

/// Serves `host`'s runs at `at` until it stops, each on a fresh device, CM and endpoint.
/// Blocking; `ready` is called once the first endpoint is bound. A set-up given up or a run
/// its peer broke costs that run, as `after` says.
pub fn serve<S: Host>(
    at: Listen,
    mut host: S,
    after: AfterGivingUp,
    ready: impl FnOnce(),
) -> Result<S::Output, DriverError> {
    let mut ready = Some(ready);
    runtime()?.block_on(async move {
        let name = host.name();
        let mut attempts = 0u64;
        loop {
            attempts += 1;
            let dev = at.secrets.device(at.salt)?;
            let local = SocketAddr::new(at.bind, ROCEV2_UDP_PORT);
            let mut ep = bind_endpoint(dev, local, ROCEV2_UDP_PORT, at.impairment, at.link)?;
            let run = host.open(&mut ep)?;
            let terms = Terms {
                port: at.port,
                ..Terms::default()
            };
            let session =
                CmSession::listener(ep.now(), terms, &at.secrets, at.salt ^ attempts, name)?;
            if let Some(r) = ready.take() {
                r();
            }
            let mut h = Hosted {
                group: Group::new(session, 0),
                run,
                until_established: true,
                abandoned: false,
            };
            ep.run(&mut h, true, pending(), host.wait()).await?;
            if !h.abandoned {
                host.running(&mut ep, &h.run);
                h.until_established = false;
                let ran = ep.run(&mut h, true, pending(), host.silence()).await;
                if let Err(e) = ran {
                    after.tolerate(e, name, h.group.peer())?;
                    host.lost(&mut ep);
                    continue;
                }
            }
            if h.abandoned {
                after.set_up_given_up()?;
                host.lost(&mut ep);
                continue;
            }
            if let ControlFlow::Break(out) = host.ended(ep, h)? {
                return Ok(out);
            }
        }
    })
}

/// What a client's run does on its connected [`Group`].
pub trait Joined {
    /// Connection `k` is up, `reply` its REP's private data. An `Err` (the REP does not carry
    /// what this end needs) refuses the REP, a REJ in the RTU's place with the error's text,
    /// and ends the run.
    fn up(&mut self, dev: &mut Device, k: usize, reply: &[u8]) -> Result<(), AppError> {
        let _ = (dev, k, reply);
        Ok(())
    }
    /// The server released connection `k` before this end did: an `Err` ends the run.
    fn released_early(&mut self, group: &Group, k: usize) -> Result<(), AppError>;
    /// Connection `k` was released after [`Group::release`].
    fn released(&mut self, group: &Group, k: usize) {
        let _ = (group, k);
    }
    /// The run's own work, every turn after the session's; it ends with [`Group::release`].
    fn poll(&mut self, group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError>;
}

/// A client's run: its [`Group`] and the application's part; done once every connection
/// it released is.
pub struct Joining<R> {
    /// The run's connections.
    pub group: Group,
    /// The application's part.
    pub run: R,
}

impl<R: Joined> Joining<R> {
    /// A run of `session`'s connections, one per QP the session was given (`n`).
    pub fn new(session: CmSession, n: usize, run: R) -> Self {
        let mut group = Group::new(session, n);
        group.conns = (0..n).map(Some).collect();
        Self { group, run }
    }
}

impl<R: Joined> Application for Joining<R> {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        self.group.session.poll(dev, now)?;
        while let Some(e) = self.group.session.next_event() {
            match e {
                SessionEvent::Up(k) => {
                    self.group.established += 1;
                    let reply = self.group.peer_data(k).to_vec();
                    if let Err(e) = self.run.up(dev, k, &reply) {
                        // Tell the server, then say why here.
                        let why = e.to_string();
                        let why = &why.as_bytes()[..why.len().min(REJ_TEXT)];
                        self.group.refuse_reply(dev, now, k, why);
                        return Err(e);
                    }
                }
                SessionEvent::Released(k) => {
                    if !self.group.releasing {
                        self.group.session.flush(dev);
                        self.run.released_early(&self.group, k)?;
                    }
                    self.group.released += 1;
                    self.run.released(&self.group, k);
                }
                // A server's only.
                SessionEvent::Asked(_)
                | SessionEvent::Accepted(_)
                | SessionEvent::Restarted
                | SessionEvent::Resolve(_)
                | SessionEvent::Resolved { .. } => {}
            }
        }
        self.run.poll(&mut self.group, dev, now)?;
        self.group.session.flush(dev);
        Ok(())
    }

    fn done(&self) -> bool {
        self.group.releasing && self.group.all_released()
    }
}
