//! The connection layer: an application asks for QPs of a kind, with the attributes it wants,
//! toward a peer, over one of the exchanges other RDMA stacks speak, and gets them connected
//! on an endpoint that is already listening.
//!
//! A [`Side`] is one end before and after its exchange: the device, the QPs it asked for (in
//! INIT, or ready to post for UD), and the endpoint, **bound before the exchange starts**. A
//! peer may send the instant it reads the last record (a stock tool does); whatever it sends
//! waits in the socket or the packet ring until the endpoint's loop runs, so nothing of the
//! first window is lost to a socket that did not exist yet. The application posts what must
//! be posted before the peer may send (receives) between [`Side::new`] and the exchange; the
//! exchange calls [`Side::connect`] at the point its protocol says the QPs are ready.
//!
//! Exchanges (one module each): [`pingpong`], the verbs examples' `LID:QPN:PSN:GID` text
//! records over TCP (`ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong`,
//! `ibv_srq_pingpong`); [`cm_session`], connections through the IB CM and RDMA-CM, asked for,
//! accepted, confirmed, released and given up in one place (its plumbing on QP1 inside the
//! endpoint's loop is [`rdma_cm`]'s); [`sidr`], a UD QP found through service ID resolution;
//! [`perftest`], perftest's lock-step messages over TCP or over an RDMA-CM connection of their
//! own (`-R`), and its data QPs connected through RDMA-CM; [`cm_group`], roce's own `--cm`
//! runs (a group of connections, one per QP, and the server's loop that gives a run up and
//! listens again), with [`channel`]'s JSON messages over one of the run's QPs.
//!
//! A [`Connector`] names the exchange and this process's [`Ends`] (a server, a client, or
//! both in one process); every application's one `run` takes one and answers with what it
//! [`Ran`].
//!
//! Applications never drive the CM themselves (no file under `apps/` imports
//! `roce_stack::cm`): a server that gives up a peer's set-up listens again, in the layer.
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use roce_proto::{Ecn, Psn, QKey, Qpn};
use roce_stack::srq::SrqHandle;
use roce_stack::ud::AddressHandle;
use roce_stack::{ConnectParams, Device, PathConfig, PdHandle, QpCaps, Service};

use crate::connect::qps::LocalQp;
use crate::impair::Impairment;
use crate::{
    bind_endpoint, DriverError, Endpoint, LinkChoice, PeerFault, SetupFailure, Unsupported,
};

pub mod channel;
pub mod cm_group;
pub mod cm_session;
mod connector;
pub mod control;
pub mod handshake;
mod listener;
pub mod perftest;
pub mod pingpong;
pub mod qps;
pub mod rdma_cm;
pub mod sidr;

pub use connector::{local_toward, Connector, Ends, Exchange, Ran};
pub use listener::{
    client_roce_port, in_one_process, loopback_addrs, Accepted, ClientConfig, Listener,
    ServerConfig,
};

/// What an application asks of the layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QpRequest {
    /// Their service (RC, UC or UD).
    pub service: Service,
    /// UD: the QPs' Q_Key (IBTA Vol 1 §10.2.4); RC and UC QPs have none.
    pub qkey: QKey,
    /// How many.
    pub count: u32,
    /// Queue sizes.
    pub caps: QpCaps,
    /// RC only: take receives from one shared receive queue of this many requests.
    pub srq: Option<u32>,
    /// The connected QPs' attributes (path MTU, timers, retries, READ/atomic depths, remote
    /// access); the per-QP fields (QPNs, PSNs, path) are the exchange's. UD: `mtu` is the
    /// largest message.
    pub params: ConnectParams,
}

impl Default for QpRequest {
    /// One RC QP with the default queue sizes and attributes.
    fn default() -> Self {
        Self {
            service: Service::Rc,
            qkey: QKey(0),
            count: 1,
            caps: QpCaps::default(),
            srq: None,
            params: ConnectParams::default(),
        }
    }
}

/// One end: device, QPs, the endpoint (listening from [`Side::new`] on).
pub struct Side {
    /// The endpoint, with the device in `ep.dev`.
    pub ep: Endpoint,
    /// The protection domain the QPs belong to.
    pub pd: PdHandle,
    /// The QPs, in the order asked for.
    pub qps: Vec<LocalQp>,
    /// The shared receive queue, if one was asked for.
    pub srq: Option<SrqHandle>,
    /// The first PSN each QP sends.
    pub psns: Vec<Psn>,
    /// UD: the address handle of each UD QP's peer, once connected, in the order of the UD
    /// QPs ([`Side::address_handles`] pairs them with their QPs' indices).
    pub ahs: Vec<AddressHandle>,
    /// Each QP's service (all `req.service` but for [`Side::mixed`]).
    kinds: Vec<Service>,
    req: QpRequest,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Side")
            .field("qps", &self.qps)
            .field("local", &self.ep.local_addr())
            .finish_non_exhaustive()
    }
}

impl Side {
    /// Creates the QPs `req` asks for on `dev` (RC/UC in INIT) in a new PD, and binds the
    /// endpoint at `local` (UDP 4791) on `link`. `psns` are the QPs' first PSNs (the OS
    /// CSPRNG's, from [`crate::Secrets::start_psns`]).
    pub fn new(
        dev: Device,
        req: QpRequest,
        psns: Vec<Psn>,
        local: SocketAddr,
        link: LinkChoice,
    ) -> Result<Self, DriverError> {
        Self::impaired(dev, req, psns, local, link, Impairment::default())
    }

    /// [`Side::new`] with the link impaired as `impairment` says (loss, reordering, ECN
    /// marks: `roce loopback`'s test knobs).
    pub fn impaired(
        dev: Device,
        req: QpRequest,
        psns: Vec<Psn>,
        local: SocketAddr,
        link: LinkChoice,
        impairment: Impairment,
    ) -> Result<Self, DriverError> {
        let kinds = vec![req.service; req.count as usize];
        Self::mixed(dev, req, &kinds, psns, local, link, impairment)
    }

    /// [`Side::impaired`] with QP `i` of service `kinds[i]` (`req.service` is then the
    /// first QP's; one QP per entry, `req.count` is ignored): a workload that mixes RC, UC and
    /// UD QPs on one connection.
    pub fn mixed(
        mut dev: Device,
        mut req: QpRequest,
        kinds: &[Service],
        psns: Vec<Psn>,
        local: SocketAddr,
        link: LinkChoice,
        impairment: Impairment,
    ) -> Result<Self, DriverError> {
        req.count = kinds.len() as u32;
        if let Some(&k) = kinds.first() {
            req.service = k;
        }
        if req.srq.is_some() && kinds.iter().any(|k| *k != Service::Rc) {
            return Err(Unsupported::SrqNotRc.into());
        }
        if psns.len() != req.count as usize {
            return Err(Unsupported::PsnCount {
                psns: psns.len(),
                qps: req.count,
            }
            .into());
        }
        let set = DriverError::from;
        let pd = dev.alloc_pd();
        let srq = match (req.srq, req.service) {
            (Some(n), Service::Rc) => Some(dev.create_srq(pd, n).map_err(set)?),
            (Some(_), _) => return Err(Unsupported::SrqNotRc.into()),
            (None, _) => None,
        };
        let init = req.params.init_attr();
        let mut qps = Vec::with_capacity(req.count as usize);
        for &kind in kinds {
            let (send_cq, recv_cq) = (dev.create_cq(), dev.create_cq());
            let qpn = match (kind, srq) {
                (Service::Ud, _) => dev
                    .create_ud_qp(
                        pd,
                        send_cq,
                        recv_cq,
                        req.qkey,
                        req.params.mtu,
                        req.caps.max_send_wr.max(req.caps.max_recv_wr),
                    )
                    .map_err(set)?,
                (Service::Uc, _) => dev
                    .create_uc_qp(pd, send_cq, recv_cq, req.caps)
                    .map_err(set)?,
                (Service::Rc, Some(s)) => dev
                    .create_qp_with_srq(pd, send_cq, recv_cq, req.caps, s)
                    .map_err(set)?,
                (Service::Rc, None) => {
                    dev.create_qp(pd, send_cq, recv_cq, req.caps).map_err(set)?
                }
            };
            if kind.connected() {
                dev.modify_qp(qpn, &init)
                    .map_err(|e| DriverError::step(format!("QP {qpn} to INIT"), e))?;
            }
            qps.push(LocalQp {
                qpn,
                send_cq,
                recv_cq,
            });
        }
        let ep = bind_endpoint(dev, local, roce_proto::ROCEV2_UDP_PORT, impairment, link)?;
        Ok(Self {
            ep,
            pd,
            qps,
            srq,
            psns,
            ahs: Vec::new(),
            kinds: kinds.to_vec(),
            req,
        })
    }

    /// One more RC QP on this side's device and in its PD, in INIT, outside [`Side::qps`]: an
    /// exchange's own channel (perftest's rdma_cm "comm" QP).
    pub fn extra_rc_qp(&mut self, caps: QpCaps) -> Result<LocalQp, DriverError> {
        let dev = &mut self.ep.dev;
        let (send_cq, recv_cq) = (dev.create_cq(), dev.create_cq());
        let qpn = dev
            .create_qp(self.pd, send_cq, recv_cq, caps)
            .map_err(DriverError::from)?;
        dev.modify_qp(qpn, &ConnectParams::default().init_attr())
            .map_err(|e| DriverError::step(format!("QP {qpn} to INIT"), e))?;
        Ok(LocalQp {
            qpn,
            send_cq,
            recv_cq,
        })
    }

    /// What was asked for.
    pub fn request(&self) -> &QpRequest {
        &self.req
    }

    /// What was asked for, to adjust before [`Side::connect`] what the exchange negotiated
    /// (the path MTU, READ/atomic depths).
    pub fn request_mut(&mut self) -> &mut QpRequest {
        &mut self.req
    }

    /// Each UD QP's index among the QPs and its peer's address handle (after
    /// [`Side::connect`]).
    pub fn address_handles(&self) -> Vec<(usize, AddressHandle)> {
        let ud = self
            .kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| !k.connected())
            .map(|(i, _)| i);
        ud.zip(self.ahs.iter().copied()).collect()
    }

    /// The QPs' numbers and first PSNs, as an exchange announces them.
    pub fn infos(&self) -> Vec<qps::QpInfo> {
        qps::qp_infos(&self.qps, &self.psns)
    }

    /// Takes QP `i` to the peer's QP `peers[i]` (its QPN and first PSN) at `remote` (its UDP
    /// port 4791): RTR and RTS for RC/UC, an address handle for UD.
    pub fn connect(&mut self, peers: &[(Qpn, Psn)], remote: IpAddr) -> Result<(), DriverError> {
        self.connect_to(peers, SocketAddr::new(remote, roce_proto::ROCEV2_UDP_PORT))
    }

    /// [`Side::connect`] to a peer whose RoCE socket is on another UDP port than 4791 (two
    /// ends of one host on one address, as `roce loopback` over `::1`).
    pub fn connect_to(
        &mut self,
        peers: &[(Qpn, Psn)],
        remote: SocketAddr,
    ) -> Result<(), DriverError> {
        self.ep.set_peer_port(remote.port());
        let (remote, remote_port) = (remote.ip(), remote.port());
        if peers.len() != self.qps.len() {
            return Err(PeerFault::Count {
                what: "QPs",
                announced: peers.len(),
                here: self.qps.len(),
            }
            .into());
        }
        let local = self.ep.local_addr();
        self.ahs.clear();
        for (((q, &(dest, rq_psn)), &sq_psn), kind) in
            self.qps.iter().zip(peers).zip(&self.psns).zip(&self.kinds)
        {
            if !kind.connected() {
                self.ahs.push(AddressHandle {
                    local: local.ip(),
                    remote,
                    remote_port,
                    dest_qpn: dest,
                    qkey: self.req.qkey,
                });
                continue;
            }
            let sport = PathConfig::udp_sport(q.qpn.0, dest.0);
            let c = ConnectParams {
                dest_qpn: dest,
                rq_psn,
                sq_psn,
                path: PathConfig {
                    local: local.ip(),
                    remote,
                    src_port: sport,
                    remote_src_port: sport,
                    local_port: local.port(),
                    remote_port,
                    ecn: Ecn::Ect0,
                    verify_icrc: true,
                },
                ..self.req.params
            };
            self.ep
                .dev
                .connect_qp(q.qpn, &c)
                .map_err(|e| DriverError::step(format!("modify QP {}", q.qpn), e))?;
        }
        Ok(())
    }
}

impl Side {
    /// Congestion control `cc` on every QP, clamped to `line_rate_bps` (after
    /// [`Side::connect`]; nothing for `CcConfig::None`).
    pub fn set_congestion_control(&mut self, cc: roce_stack::CcConfig, line_rate_bps: u64) {
        if matches!(cc, roce_stack::CcConfig::None) {
            return;
        }
        for q in &self.qps {
            self.ep
                .dev
                .set_congestion_control(q.qpn, cc.build(line_rate_bps));
        }
    }
}

/// Opens a TCP connection to `server` (from `bind`, when given and of the server's address
/// family) within 5 s: the start of every TCP exchange. An endpoint whose RoCE address is
/// IPv6 may reach a server that listens on IPv4 only (the verbs examples' and perftest's
/// servers do): the exchange then goes from whichever IPv4 address the host routes it from,
/// as a stock client's does, and the RoCE traffic between the addresses the exchange names.
pub async fn tcp_connect(
    server: SocketAddr,
    bind: Option<IpAddr>,
) -> Result<tokio::net::TcpStream, DriverError> {
    let sock = match server {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(crate::setup("TCP socket"))?;
    if let Some(ip) = bind.filter(|ip| ip.is_ipv4() == server.is_ipv4()) {
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(|e| DriverError::step(format!("cannot bind {ip}"), e))?;
    }
    let stream = tokio::time::timeout(std::time::Duration::from_secs(5), sock.connect(server))
        .await
        .map_err(|_| SetupFailure::Unreachable(server))?
        .map_err(|e| DriverError::step(format!("cannot reach server {server}"), e))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Listens on TCP `bind:port`, calls `ready`, and accepts one peer (within `timeout`, when
/// given); the listener is closed after it, as the stock tools close theirs.
pub async fn tcp_accept_one(
    bind: IpAddr,
    port: u16,
    timeout: Option<std::time::Duration>,
    ready: impl FnOnce(),
) -> Result<tokio::net::TcpStream, DriverError> {
    let door = TcpDoor::bind(bind, port).await?;
    ready();
    door.accept(timeout).await
}

/// What a server does once it gave up a set-up or a run its peer broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterGivingUp {
    /// Listens again for the next peer (a server on its own: a stranger who speaks first
    /// does not end it).
    ListenAgain,
    /// Fails with the reason (one end of a run in one process, whose peer is ours: there is
    /// no next peer to wait for).
    Fail,
}

impl AfterGivingUp {
    /// A run with `peer` failed with `e`: `Ok` when the server goes on (the peer's fault,
    /// said in one line beginning with `name`), the error otherwise (this host's, the
    /// settings', or no next peer to wait for).
    pub fn tolerate(
        self,
        e: DriverError,
        name: &str,
        peer: Option<IpAddr>,
    ) -> Result<(), DriverError> {
        if self == Self::Fail || !e.costs_the_peer() {
            return Err(e);
        }
        let peer = peer.map_or_else(|| "a client".into(), |p| p.to_string());
        eprintln!("{name}: gave up a run with {peer} ({e}); listening again");
        Ok(())
    }

    /// The set-up with a client was given up (the session said so): `Ok` when the server
    /// listens again, an error naming it otherwise.
    pub fn set_up_given_up(self) -> Result<(), DriverError> {
        match self {
            Self::ListenAgain => Ok(()),
            Self::Fail => Err(PeerFault::GivenUp("client").into()),
        }
    }
}

/// A TCP listener a server keeps while it serves peers one after another: a peer whose
/// set-up failed costs that set-up, and the next peer finds the door still open (waiting in
/// the listen backlog meanwhile).
#[derive(Debug)]
pub struct TcpDoor {
    listener: tokio::net::TcpListener,
}

impl TcpDoor {
    /// Listens on `bind:port`.
    pub async fn bind(bind: IpAddr, port: u16) -> Result<Self, DriverError> {
        let listener = tokio::net::TcpListener::bind((bind, port))
            .await
            .map_err(|e| DriverError::step(format!("cannot listen on TCP {bind}:{port}"), e))?;
        Ok(Self { listener })
    }

    /// The next peer the allow-list admits (within `timeout`, when given); one it refuses
    /// is closed at once and the wait goes on.
    pub async fn accept(
        &self,
        timeout: Option<std::time::Duration>,
    ) -> Result<tokio::net::TcpStream, DriverError> {
        let admitted = async {
            loop {
                match self.listener.accept().await {
                    Ok((tcp, peer)) if crate::allow::admit(peer.ip(), "a TCP connection") => {
                        return Ok(tcp)
                    }
                    Ok(_) => continue,
                    Err(e) => return Err(e),
                }
            }
        };
        let accepted =
            match timeout {
                Some(t) => tokio::time::timeout(t, admitted).await.map_err(|_| {
                    SetupFailure::NobodyCame {
                        who: "peer",
                        within: t,
                    }
                })?,
                None => admitted.await,
            };
        let tcp = accepted.map_err(|e| DriverError::step("accept", e))?;
        let _ = tcp.set_nodelay(true);
        Ok(tcp)
    }

    /// Serves peers one after another until one's exchange and run end: `run` each
    /// connection admitted (within `within` in all, when given); a run whose peer broke it
    /// costs the server that peer ([`AfterGivingUp::tolerate`]: one line naming it, beginning
    /// with `name`) and the server listens again, when `after` says so. The server's loop
    /// for every exchange over TCP a stock tool speaks (perftest's, the verbs examples').
    pub async fn serve<T, Fut>(
        &self,
        name: &str,
        after: AfterGivingUp,
        within: Option<std::time::Duration>,
        mut run: impl FnMut(tokio::net::TcpStream) -> Fut,
    ) -> Result<T, DriverError>
    where
        Fut: std::future::Future<Output = Result<T, DriverError>>,
    {
        let until = within.map(|d| tokio::time::Instant::now() + d);
        loop {
            let left = until.map(|t| t.saturating_duration_since(tokio::time::Instant::now()));
            let tcp = self.accept(left).await?;
            let peer = tcp.peer_addr().ok().map(|a| a.ip().to_canonical());
            match run(tcp).await {
                Ok(t) => return Ok(t),
                Err(e) => after.tolerate(e, name, peer)?,
            }
        }
    }
}

/// Both ends of an exchange in one process: `serve` on a thread named `name`, handed the
/// `ready` signal to call once it listens, then `client` on the calling thread. Returns
/// (client, server) results; the client's error first, then the server's.
pub fn one_process<C, S: Send + 'static>(
    name: &str,
    serve: impl FnOnce(Box<dyn FnOnce() + Send>) -> Result<S, DriverError> + Send + 'static,
    client: impl FnOnce() -> Result<C, DriverError>,
) -> Result<(C, S), DriverError> {
    match one_process_both(name, serve, client)? {
        (Ok(c), Some(s)) => Ok((c, s?)),
        (Err(e), _) => Err(e),
        (Ok(_), None) => unreachable!("the server is waited for when the client succeeds"),
    }
}

/// [`one_process`], both ends' results as they are (a client that reports what the server's
/// failure did to it). When the client fails the server is not waited for (it may wait for a
/// client that will not come; the process ends with the client): `None`. The outer error: the
/// server never said it listens (within 10 s) or its thread could not start or panicked.
#[allow(clippy::type_complexity)]
pub fn one_process_both<C, S: Send + 'static>(
    name: &str,
    serve: impl FnOnce(Box<dyn FnOnce() + Send>) -> Result<S, DriverError> + Send + 'static,
    client: impl FnOnce() -> Result<C, DriverError>,
) -> Result<(Result<C, DriverError>, Option<Result<S, DriverError>>), DriverError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            serve(Box::new(move || {
                let _ = tx.send(());
            }))
        })
        .map_err(|e| DriverError::step("server thread", e))?;
    if rx.recv_timeout(std::time::Duration::from_secs(10)).is_err() {
        return match server.join() {
            Ok(Err(e)) => Err(e),
            _ => Err(SetupFailure::ServerDidNotStart.into()),
        };
    }
    let c = client();
    if c.is_err() {
        return Ok((c, None));
    }
    let s = server.join().map_err(|_| SetupFailure::ServerPanicked)?;
    Ok((c, Some(s)))
}

/// The RoCEv2 GID of an address: IPv4-mapped for IPv4 (IBTA Vol 1 Annex A17.4.5.1).
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// A peer's GID (in an exchange's record) this end will not send to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerGid {
    /// No GID, or the zero GID (`hint`: the peer tool's flag that gives one).
    #[error("the peer sent no GID ({hint})")]
    Missing {
        /// How the peer's tool is given its GID index.
        hint: &'static str,
    },
    /// An address no peer can have: unspecified, multicast or broadcast.
    #[error("the peer's GID names {0}, which is not a unicast address: refused")]
    NotUnicast(IpAddr),
    /// Another host than the one the exchange came from (or than `--peer-roce`): a record
    /// may not aim this end's traffic at a third host.
    #[error("the peer's GID names {named}, but the exchange came from {from}: refused (--peer-roce {named} if that is the peer's RoCE address)")]
    Elsewhere {
        /// What the GID names.
        named: IpAddr,
        /// Where the exchange came from, or the address the user named.
        from: IpAddr,
    },
}

/// The address a peer's GID names, refused unless it is a unicast address and, when of
/// one family, `from`: where the exchange came from, or the peer's RoCE address the user
/// named (for an exchange over a management network). An IPv6 GID over an IPv4 exchange
/// (the stock tools' exchanges listen on IPv4 only) is taken. `hint` says how the peer's
/// tool is given a GID, for a record without one.
pub fn check_peer_gid(
    gid: Option<[u8; 16]>,
    from: Option<IpAddr>,
    hint: &'static str,
) -> Result<IpAddr, PeerGid> {
    let ip = gid
        .and_then(ip_of_gid)
        .ok_or(PeerGid::Missing { hint })?
        .to_canonical();
    let unicast = match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_multicast() || a.is_broadcast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    };
    if !unicast {
        return Err(PeerGid::NotUnicast(ip));
    }
    let from = from.map(|f| f.to_canonical());
    if let Some(from) = from.filter(|f| f.is_ipv4() == ip.is_ipv4() && *f != ip) {
        return Err(PeerGid::Elsewhere { named: ip, from });
    }
    Ok(ip)
}

/// The address a RoCEv2 GID names, or `None` for the zero GID (no address).
pub fn ip_of_gid(gid: [u8; 16]) -> Option<IpAddr> {
    if gid == [0; 16] {
        return None;
    }
    let v6 = Ipv6Addr::from(gid);
    Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_and_addresses() {
        let v4: IpAddr = "198.51.100.2".parse().unwrap();
        let g = gid_of(v4);
        assert_eq!(&g[10..], &[0xff, 0xff, 198, 51, 100, 2]);
        assert_eq!(ip_of_gid(g), Some(v4));
        let v6: IpAddr = "fe80::5054:ff:fe12:3402".parse().unwrap();
        assert_eq!(ip_of_gid(gid_of(v6)), Some(v6));
        assert_eq!(ip_of_gid([0; 16]), None);
    }
}
