//! The UDP sockets under an endpoint. Receiving goes through `quinn-udp` (batched recvmmsg, GRO,
//! the ECN codepoint of every datagram from IP_RECVTOS / IPV6_RECVTCLASS); the receive
//! timestamp control message it also asks for is turned off again, and so is the
//! destination-address one unless the socket is bound to a wildcard address (a QP accepts only
//! datagrams sent to its own address, so the endpoint must know it). Every sending socket sets IP_MTU_DISCOVER to
//! IP_PMTUDISC_PROBE, so Linux writes DF and identification 0 on every IPv4 datagram of an
//! unconnected socket (`include/net/ip.h`): exactly the header the ICRC is computed over.
//!
//! Sending is batched with `sendmmsg` (rustix): up to [`SEND_BATCH`] datagrams from one source
//! port per system call, each still its own datagram with its own IPv4 header (DF, ID 0), so
//! every packet on the wire, and in a capture on `lo`, carries a valid ICRC. (UDP GSO would
//! batch harder, but a capture on `lo` then sees one coalesced super-datagram, and a NIC that
//! segments it numbers the IPv4 IDs 0, 1, 2…, which the ICRC covers.) The ECN codepoint is the
//! sending socket's IP_TOS / IPV6_TCLASS, changed only when a datagram needs another one.
//!
//! One socket bound to port 4791 receives. Datagrams leave from one socket per UDP source port,
//! bound to that port, because RoCEv2 uses the source port as per-QP flow entropy (the port
//! the ICRC covers must be the port on the wire). Those sockets are created on first use with
//! SO_REUSEADDR/SO_REUSEPORT, so two endpoints sharing an address (IPv6 loopback) can both
//! send from the same port; nothing is ever sent to them.
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};

use std::io::IoSlice;

use nix::sys::socket::{setsockopt, sockopt};
use quinn_udp::{RecvMeta, UdpSocketState, BATCH_SIZE};
use roce_proto::Ecn;
use roce_stack::RxMeta;
use rustix::net::addr::SocketAddrArg;
use rustix::net::sockopt::{Ipv4PathMtuDiscovery, Ipv6PathMtuDiscovery};
use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
use tokio::io::Interest;

use crate::writable::send_when_writable;
pub use crate::writable::SEND_STALL;

/// Largest datagram accepted (a GRO-coalesced buffer can hold several).
const RECV_BUF: usize = 64 * 1024;

/// Datagrams received without the endpoint sleeping after which the receive socket leaves
/// epoll (see [`RoceSocket::readable`]).
const DEREGISTER_AFTER: u32 = 4096;

/// How long an endpoint on the memory-mapped ring polls it before sleeping
/// ([`RoceSocket::idle_spin`]). Across a veth pair, a 64 KiB WRITE's responder slept 33,500
/// times in 2 s without it (each wake-up a cross-core interrupt paid by the sender, 20 % of
/// its time); 50 µs covers the gaps between a bandwidth test's packets.
pub const RING_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Most datagrams handed to one `sendmmsg` call.
pub const SEND_BATCH: usize = 32;

/// Most datagrams one [`RoceSocket::try_recv`] reads (quinn-udp's `recvmmsg` batch, 32 on
/// Linux).
pub const RECV_BATCH: usize = BATCH_SIZE;

/// A socket that only sends, from one UDP source port. It is deliberately not registered with
/// tokio's epoll: on `lo` the kernel frees each sent datagram's buffer at once and, for a
/// registered socket, runs the epoll wake-up callback for every one of them (4 % of all CPU
/// in a 64 B READ run). A duplicate is registered only while a full send buffer is waited out.
#[derive(Debug)]
struct SendSocket {
    port: u16,
    io: std::net::UdpSocket,
    /// The ECN codepoint its IP_TOS / IPV6_TCLASS is set to (`None`: never set).
    tos: Option<Ecn>,
}

/// One `sendmmsg` of up to [`SEND_BATCH`] datagrams to `addr`; returns how many were sent.
/// The message headers live on the stack.
fn sendmmsg(io: &std::net::UdpSocket, addr: &SocketAddrAny, dgrams: &[&[u8]]) -> io::Result<usize> {
    let n = dgrams.len().min(SEND_BATCH);
    let iovs: [[IoSlice<'_>; 1]; SEND_BATCH] =
        std::array::from_fn(|k| [IoSlice::new(dgrams.get(k).copied().unwrap_or(&[]))]);
    let mut ctrl: [SendAncillaryBuffer<'_, '_, '_>; SEND_BATCH] = Default::default();
    let mut k = 0;
    let mut out: [MMsgHdr<'_>; SEND_BATCH] = ctrl.each_mut().map(|c| {
        let h = MMsgHdr::new_with_addr(addr, &iovs[k], c);
        k += 1;
        h
    });
    rustix::net::sendmmsg(io, &mut out[..n], SendFlags::empty()).map_err(io::Error::from)
}

/// How an endpoint receives (and so how it may send: the packet link also sends through its
/// packet socket, see [`crate::packet::PacketSend`]; both write DF and identification 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkChoice {
    /// The packet link reading its ring ([`LinkChoice::PacketRing`]) if the process may open
    /// a packet socket (`CAP_NET_RAW`) and the address is IPv4 (`recvmmsg` if the ring cannot
    /// be mapped), else the UDP link.
    #[default]
    Auto,
    /// A UDP socket: addresses, ports, lengths and ECN of every datagram; over IPv4 not the
    /// identification and DF, which the ICRC check then solves for (15 of its 32 bits left).
    Udp,
    /// A packet socket (`AF_PACKET`): the real IPv4 header, so the ICRC is checked over
    /// exactly what was on the wire. IPv4 only (over IPv6 the UDP link already knows every
    /// covered field); needs `CAP_NET_RAW`.
    Packet,
    /// The packet link reading a memory-mapped receive ring (`TPACKET_V2`): no system call
    /// per receive, polled for [`RING_SPIN`] before sleeping. Across an Ethernet link the
    /// fastest on every figure measured; on `lo` the lowest latency, with the 64 KiB
    /// bandwidth a little under the UDP link's (there the kernel copies into the ring on the
    /// sending core, and sends cannot bypass the IP layer).
    PacketRing,
}

/// The link an endpoint ended up with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Link {
    /// Received on the UDP socket.
    Udp,
    /// Received on a packet socket.
    Packet,
    /// Received from a packet socket's memory-mapped ring.
    PacketRing,
}

impl Link {
    /// `"udp"`, `"packet"` or `"packet-ring"`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Packet => "packet",
            Self::PacketRing => "packet-ring",
        }
    }
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How an endpoint's datagrams left ([`RoceSocket::sent_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SentCounts {
    /// Through the packet link's packet socket.
    pub packet: u64,
    /// Through the UDP sockets.
    pub udp: u64,
    /// Refused by a full interface queue on the packet socket (lost, as on a wire).
    pub packet_dropped: u64,
}

/// The receiving socket (port 4791) and the per-source-port sending sockets.
#[derive(Debug)]
pub struct RoceSocket {
    /// The packet link's receive side, when it is used.
    packet: Option<crate::packet::PacketRx>,
    /// The packet link's sending side (with `packet`, when the packet socket opened).
    send: Option<crate::packet::PacketSend>,
    /// Datagrams sent through the UDP sockets.
    sent_udp: u64,
    /// Not registered with tokio's epoll while the endpoint is busy (see [`RoceSocket::readable`]).
    io: std::net::UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
    senders: Vec<SendSocket>,
    bufs: Vec<Vec<u8>>,
    meta: Vec<RecvMeta>,
    /// A duplicate of `io` registered with tokio, present while the endpoint keeps coming
    /// back to sleep (see [`RoceSocket::readable`]).
    waiter: Option<tokio::net::UdpSocket>,
    /// Datagrams received since the endpoint last slept.
    since_wait: u32,
}

impl RoceSocket {
    /// Binds `addr` (normally `ip:4791`) with the UDP link. Must be called inside a tokio
    /// runtime.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        Self::bind_with(addr, LinkChoice::Udp)
    }

    /// Binds `addr` receiving through the link `choice` asks for (see [`LinkChoice`]); an
    /// explicit `Packet` that cannot be opened is an error. Inside a tokio runtime.
    pub fn bind_with(addr: SocketAddr, choice: LinkChoice) -> io::Result<Self> {
        let mut s = Self::bind_udp(addr)?;
        let want = match choice {
            LinkChoice::Udp => false,
            LinkChoice::Packet | LinkChoice::PacketRing => true,
            LinkChoice::Auto => addr.is_ipv4(),
        };
        if want && addr.is_ipv4() {
            let opened = match choice {
                // The ring if it can be mapped, else `recvmmsg` on the same kind of socket.
                LinkChoice::Auto => crate::packet::PacketRx::open(s.local, true)
                    .or_else(|_| crate::packet::PacketRx::open(s.local, false)),
                c => crate::packet::PacketRx::open(s.local, c == LinkChoice::PacketRing),
            };
            match opened {
                Ok(p) => {
                    crate::packet::silence_udp(&s.io)?;
                    s.packet = Some(p);
                    if let SocketAddr::V4(local) = s.local {
                        s.send = Some(crate::packet::PacketSend::open(local).map_err(|e| {
                            io::Error::new(
                                e.kind(),
                                format!("cannot open the packet link's sending socket: {e}"),
                            )
                        })?);
                    }
                }
                Err(e) if choice == LinkChoice::Auto => {
                    // No CAP_NET_RAW (or no packet sockets here): the UDP link.
                    let _ = e;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "cannot open the packet link (needs CAP_NET_RAW; the UDP link works without): {e}"
                        ),
                    ))
                }
            }
        }
        Ok(s)
    }

    /// What the link itself dropped: datagrams that were not whole RoCEv2 datagrams for this
    /// endpoint, and datagrams the kernel dropped because the receive ring was full (both 0
    /// on the UDP link, where the kernel's UDP layer does that checking). One system call on
    /// the packet link.
    pub fn link_drops(&self) -> (u64, u64) {
        self.packet
            .as_ref()
            .map_or((0, 0), |p| (p.malformed, p.ring_drops()))
    }

    /// Datagrams sent so far through the packet socket, through the UDP sockets, and refused
    /// by a full interface queue on the packet socket (see [`crate::packet::PacketSend`]).
    pub fn sent_counts(&self) -> SentCounts {
        SentCounts {
            packet: self.send.as_ref().map_or(0, |s| s.sent),
            udp: self.sent_udp,
            packet_dropped: self.send.as_ref().map_or(0, |s| s.dropped),
        }
    }

    /// How long an idle endpoint keeps polling this link before it sleeps: [`RING_SPIN`] on
    /// the memory-mapped ring, where a poll is a memory read and each sleep costs the sending
    /// side a cross-core wake-up; zero on the others, where a poll is a system call.
    pub fn idle_spin(&self) -> std::time::Duration {
        match &self.packet {
            Some(p) if p.is_ring() => RING_SPIN,
            _ => std::time::Duration::ZERO,
        }
    }

    /// The link datagrams are received on.
    pub fn link(&self) -> Link {
        match &self.packet {
            Some(p) if p.is_ring() => Link::PacketRing,
            Some(_) => Link::Packet,
            None => Link::Udp,
        }
    }

    fn bind_udp(addr: SocketAddr) -> io::Result<Self> {
        let std_sock = std::net::UdpSocket::bind(addr)?;
        if addr.is_ipv6() {
            // Linux's rxe sends RoCEv2 over IPv6 with a zero UDP checksum (the ICRC covers
            // the transport); the kernel drops such datagrams unless the socket takes them.
            use std::os::fd::AsFd as _;
            roce_packet_ring::accept_zero_udp6_checksums(std_sock.as_fd())?;
        }
        let state = UdpSocketState::new((&std_sock).into())?;
        // A larger receive buffer rides out bursts; the kernel caps it at rmem_max.
        let _ = state.set_recv_buffer_size((&std_sock).into(), 8 << 20);
        // quinn-udp also asks for a receive timestamp and the destination address of every
        // datagram; neither is used here, and each costs a control message per datagram (the
        // timestamp also makes the kernel read the clock for every packet it receives).
        let _ = setsockopt(&std_sock, sockopt::ReceiveTimestampns, &false);
        // The destination address is needed only when the socket is bound to a wildcard
        // address: otherwise every datagram it receives was sent to the bound one.
        if !addr.ip().is_unspecified() {
            let _ = if addr.is_ipv4() {
                setsockopt(&std_sock, sockopt::Ipv4PacketInfo, &false)
            } else {
                setsockopt(&std_sock, sockopt::Ipv6RecvPacketInfo, &false)
            };
        }
        std_sock.set_nonblocking(true)?;
        let local = std_sock.local_addr()?;
        Ok(Self {
            packet: None,
            send: None,
            sent_udp: 0,
            io: std_sock,
            state,
            local,
            senders: Vec::new(),
            bufs: (0..BATCH_SIZE).map(|_| vec![0u8; RECV_BUF]).collect(),
            meta: vec![RecvMeta::default(); BATCH_SIZE],
            waiter: None,
            since_wait: 0,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The sending socket for UDP source port `port` (created on first use).
    fn sender(&mut self, port: u16) -> io::Result<usize> {
        if let Some(i) = self.senders.iter().position(|s| s.port == port) {
            return Ok(i);
        }
        let addr = SocketAddr::new(self.local.ip(), port);
        let sock = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        sock.set_reuse_address(true)?;
        sock.set_reuse_port(true)?;
        if addr.is_ipv6() {
            sock.set_only_v6(true)?;
        }
        sock.bind(&addr.into()).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot bind UDP source port {addr}: {e}"))
        })?;
        // DF and, on an unconnected socket, IPv4 identification 0: the header the ICRC is
        // computed over. PROBE (not DO) so that a stale path MTU does not refuse the send.
        if addr.is_ipv4() {
            rustix::net::sockopt::set_ip_mtu_discover(&sock, Ipv4PathMtuDiscovery::PROBE)?;
        } else {
            rustix::net::sockopt::set_ipv6_mtu_discover(&sock, Ipv6PathMtuDiscovery::PROBE)?;
        }
        let _ = sock.set_send_buffer_size(8 << 20);
        sock.set_nonblocking(true)?;
        self.senders.push(SendSocket {
            port,
            io: sock.into(),
            tos: None,
        });
        Ok(self.senders.len() - 1)
    }

    /// Sends `datagrams` (at most [`SEND_BATCH`]) from UDP source port `src_port` to `dst`,
    /// each as its own datagram, in as few `sendmmsg` calls as the kernel allows; waits while
    /// the socket buffer is full. Allocates nothing once the source port's socket exists.
    pub async fn send_batch(
        &mut self,
        src_port: u16,
        dst: SocketAddr,
        ecn: Ecn,
        datagrams: &[&[u8]],
    ) -> io::Result<()> {
        let datagrams = &datagrams[..datagrams.len().min(SEND_BATCH)];
        if let (Some(send), SocketAddr::V4(to)) = (&mut self.send, dst) {
            if let Some(hop) = send.hop(*to.ip()) {
                return send.send(hop, src_port, to, ecn, datagrams).await;
            }
        }
        self.sent_udp += datagrams.len() as u64;
        let i = self.sender(src_port)?;
        let s = &mut self.senders[i];
        if s.tos != Some(ecn) {
            if dst.is_ipv4() {
                rustix::net::sockopt::set_ip_tos(&s.io, ecn.bits())?;
            } else {
                rustix::net::sockopt::set_ipv6_tclass(&s.io, u32::from(ecn.bits()))?;
            }
            s.tos = Some(ecn);
        }
        let addr: SocketAddrAny = dst.as_any();
        let mut done = 0;
        while done < datagrams.len() {
            let rest = &datagrams[done..];
            let r = send_when_writable(&s.io, || sendmmsg(&s.io, &addr, rest)).await;
            match r {
                Ok(k) => done += k.max(1),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The peer's port is closed (ICMP unreachable reported on a later send):
                // the transport's retransmission handles it, as a NIC would. Skip one.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => done += 1,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Waits until a datagram can be read. Must be called inside a tokio runtime.
    ///
    /// The socket is registered with epoll (through a duplicate of it) only around these
    /// waits: for a registered socket, the sending kernel runs the epoll callback for every
    /// datagram delivered to it, even while this endpoint is busy and never sleeps (3 % of a
    /// 64 B READ run's CPU time), and a busy endpoint polls the socket itself anyway. The
    /// registration stays while the endpoint keeps coming back to sleep (registering costs
    /// system calls and an allocation) and is dropped after `DEREGISTER_AFTER` (4096) datagrams
    /// without a sleep. Registration looks at the socket's current state, so a datagram that
    /// arrived before it is not missed.
    pub async fn readable(&mut self) -> io::Result<()> {
        self.since_wait = 0;
        if let Some(p) = &mut self.packet {
            return p.readable().await;
        }
        let waiter = match &mut self.waiter {
            Some(w) => w,
            w @ None => w.insert(tokio::net::UdpSocket::from_std(self.io.try_clone()?)?),
        };
        waiter.readable().await
    }

    /// Reads what is queued without waiting (one batch) and hands each datagram to `f` with
    /// what the link knows of it (source, the local address it was sent to, ECN and, on the
    /// packet link, the IPv4 identification and DF) and its bytes (the UDP payload). `f`
    /// answers whether a connected QP took the datagram in sequence: the packet link then sends to
    /// that peer where the datagram came from on the link ([`crate::packet::PacketSend`]).
    /// Returns how many datagrams were read.
    pub fn try_recv(&mut self, mut f: impl FnMut(&RxMeta, &[u8]) -> bool) -> io::Result<usize> {
        if let Some(p) = &mut self.packet {
            let send = &mut self.send;
            return p.try_recv(|meta, d, from| {
                if f(meta, d) {
                    if let (Some(send), Some(from), IpAddr::V4(ip)) =
                        (send.as_mut(), from, meta.src.ip())
                    {
                        send.learn(ip, from);
                    }
                }
            });
        }
        let Self {
            io,
            state,
            bufs,
            meta,
            waiter,
            since_wait,
            local,
            ..
        } = self;
        // On the stack: no allocation per batch.
        let mut it = bufs.iter_mut();
        let mut iovs: [IoSliceMut<'_>; BATCH_SIZE] =
            std::array::from_fn(|_| IoSliceMut::new(it.next().map_or(&mut [][..], |b| &mut b[..])));
        let r = match waiter {
            // Through tokio first, so that an empty socket clears the registration's
            // readiness; then directly, because tokio answers from its cached readiness
            // without calling the closure, and a loop that spins or keeps sending never
            // lets tokio learn that the socket became readable.
            Some(w) => match w.try_io(Interest::READABLE, || {
                state.recv((&*io).into(), &mut iovs, meta)
            }) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    state.recv((&*io).into(), &mut iovs, meta)
                }
                r => r,
            },
            None => state.recv((&*io).into(), &mut iovs, meta),
        };
        let n = match r {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(0),
            Err(e) => return Err(e),
        };
        *since_wait = since_wait.saturating_add(n as u32);
        if *since_wait > DEREGISTER_AFTER {
            // Busy for a while: stop paying for wake-ups nobody waits for.
            *waiter = None;
        }
        let mut count = 0;
        for (m, buf) in meta.iter().zip(iovs.iter()).take(n) {
            let ecn = m.ecn.map_or(Ecn::NotEct, |e| Ecn::from_bits(e as u8));
            let dst = if local.ip().is_unspecified() {
                // Unknown (no control message) stays unspecified: only the source is checked.
                m.dst_ip.map_or(local.ip(), |ip| match (ip, local.ip()) {
                    (IpAddr::V6(v6), IpAddr::V4(_)) => {
                        v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
                    }
                    (ip, _) => ip,
                })
            } else {
                local.ip()
            };
            let stride = m.stride.max(1);
            let meta = RxMeta::new(m.addr, dst, ecn);
            for seg in buf[..m.len].chunks(stride) {
                f(&meta, seg);
                count += 1;
            }
        }
        Ok(count)
    }
}
