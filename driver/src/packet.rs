//! The packet link: on the receive side a Linux packet socket (`AF_PACKET`, `SOCK_DGRAM`,
//! `ETH_P_IP`) that hands over each RoCEv2 datagram with its real IPv4 and UDP headers, so the
//! ICRC is checked over the identification and flags the sender really wrote (rxe and NICs
//! write a counting identification; a UDP socket never shows it).
//!
//! * A classic BPF filter in the kernel keeps only unfragmented IPv4 UDP datagrams to this
//!   endpoint's address and port: nothing else is copied to user space.
//! * `SOCK_DGRAM` delivers from the IP header on (the link header is removed, whatever the
//!   interface); a packet socket bound to `ETH_P_IP` sees incoming frames only (the kernel's
//!   transmit taps feed `ETH_P_ALL` sockets), so the endpoint's own datagrams on `lo` are not
//!   seen twice.
//! * Datagrams are read in batches with `recvmmsg` (nix), each with its `sockaddr_ll`; or,
//!   with `--link packet-ring`, in place from a memory-mapped receive ring (`TPACKET_V2`, the
//!   `roce-packet-ring` crate): no system call while the endpoint is busy, the socket in epoll
//!   only around its sleeps. The ring has the lower latency; on `lo` it has the lower
//!   bandwidth, because the kernel copies each datagram into the ring on the sending thread
//!   (`recvmmsg` copies on the receiving one). `apps/PERF.md`, "The links compared", has the figures.
//! * The endpoint's UDP socket stays bound to the port, so that the kernel does not answer the
//!   peer with ICMP port unreachable; a filter that accepts nothing keeps it from queueing a
//!   second copy of every datagram ([`silence_udp`]).
//!
//! * Sending ([`PacketSend`]): once a connected QP accepted a datagram from a peer, the
//!   datagrams to that peer go out through a second packet socket with the IPv4/UDP header
//!   written here (the same header the UDP sockets produce), to the interface and hardware
//!   address that datagram came from. On `lo` the UDP sockets keep sending: Linux drops
//!   injected frames with a loopback or local source address (`IP_LOCALNET`,
//!   `IP_LOCAL_SOURCE`) unless `route_localnet` and `accept_local` are set (read, never
//!   changed: [`loopback_takes_injected_frames`]).
//!
//! Opening a packet socket needs `CAP_NET_RAW`. Everything here is safe code: socket2 creates
//! the socket and attaches the filters; the ring's mapping (the one `unsafe` part of roce) is
//! in `roce-packet-ring`.
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{recvmmsg, LinkAddr, MsgFlags, MultiHeaders};

use roce_packet_ring::{Layout, LinkPeer, PacketTx, RxRing, TX_BATCH};
use roce_proto::Ecn;
use roce_stack::{Ipv4Seen, RxMeta};
use socket2::{Domain, Protocol, SockFilter, Socket, Type};
use tokio::io::Interest;

/// `ETH_P_IP`.
const ETH_P_IP: u16 = 0x0800;

/// Classic BPF (`linux/filter.h`).
mod bpf {
    pub(super) const LD_B_ABS: u16 = 0x30;
    pub(super) const LD_H_ABS: u16 = 0x28;
    pub(super) const LD_W_ABS: u16 = 0x20;
    pub(super) const LDX_B_MSH: u16 = 0xb1;
    pub(super) const LD_H_IND: u16 = 0x48;
    pub(super) const JEQ_K: u16 = 0x15;
    pub(super) const JSET_K: u16 = 0x45;
    pub(super) const RET_K: u16 = 0x06;
}

/// One classic BPF instruction: code, jump if true, jump if false, constant.
type Insn = (u16, u8, u8, u32);

/// The filter of an endpoint at `local` (IPv4): protocol UDP, no fragment offset (a later
/// fragment has no UDP header), destination address `local.ip()`, destination port
/// `local.port()`. Offsets are from the IP header (`SOCK_DGRAM`).
fn filter(local: SocketAddrV4) -> [Insn; 11] {
    use bpf::*;
    let ip = u32::from(*local.ip());
    [
        (LD_B_ABS, 0, 0, 9),    // 0: A = protocol
        (JEQ_K, 0, 8, 17),      // 1: UDP? else drop
        (LD_H_ABS, 0, 0, 6),    // 2: A = flags and fragment offset
        (JSET_K, 6, 0, 0x1fff), // 3: a later fragment: drop
        (LD_W_ABS, 0, 0, 16),   // 4: A = destination address
        // 5: ours? else drop (a wildcard address takes any: both outcomes go on)
        (JEQ_K, 0, if ip == 0 { 0 } else { 4 }, ip),
        (LDX_B_MSH, 0, 0, 0),                   // 6: X = IP header length
        (LD_H_IND, 0, 0, 2),                    // 7: A = UDP destination port
        (JEQ_K, 0, 1, u32::from(local.port())), // 8: ours? else drop
        (RET_K, 0, 0, 0x4_0000),                // 9: accept (up to 256 KiB)
        (RET_K, 0, 0, 0),                       // 10: drop
    ]
}

fn program(insns: &[Insn]) -> Vec<SockFilter> {
    insns
        .iter()
        .map(|&(code, jt, jf, k)| SockFilter::new(code, jt, jf, k))
        .collect()
}

/// Makes a UDP socket queue nothing (its datagrams are read from the packet socket): the
/// socket stays bound so the kernel does not send ICMP port unreachable to the peer.
///
/// It also stops asking for UDP GRO (quinn-udp turns it on): on a real interface the kernel
/// would otherwise coalesce a flow's datagrams into one buffer before the packet socket sees
/// them, and a coalesced buffer is not a datagram the ring can hand over.
pub fn silence_udp(sock: &std::net::UdpSocket) -> io::Result<()> {
    let _ = nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::UdpGroSegment, &false);
    let s = socket2::SockRef::from(sock);
    s.attach_filter(&[SockFilter::new(bpf::RET_K, 0, 0, 0)])
}

/// Datagrams handed to the endpoint per [`PacketRx::try_recv`] (at most): one `recvmmsg`, or
/// one pass over the ring.
pub const PACKET_BATCH: usize = 32;

/// Largest datagram a `recvmmsg` buffer takes (an IPv4 datagram is at most 64 KiB).
const BUF: usize = 65536;

/// Largest frame a ring slot takes: an IPv4/UDP RoCEv2 datagram of the largest IB MTU (4096)
/// with every extended header, and room to spare. A longer one is cut by the kernel and
/// dropped here as malformed: no conformant RoCEv2 peer sends one.
const MAX_FRAME: usize = 4096 + 512;

/// Bytes of ring: 3,640 slots. Every frame takes a whole slot whatever its size, so this is
/// what holds as many small datagrams as the UDP link's receive buffer (4 MiB of kernel
/// buffers, about 5,000 small datagrams) does, for bursts while the endpoint is descheduled.
/// Resident once the kernel has written every slot (a `roce loopback` does: 2 rings).
pub const RING_BYTES: usize = 16 << 20;

thread_local! {
    /// The `recvmmsg` message headers, allocated once per thread: they hold raw pointers, so
    /// they cannot live in the (sendable) endpoint; one thread's endpoints take turns.
    static HEADERS: std::cell::RefCell<MultiHeaders<LinkAddr>> =
        std::cell::RefCell::new(MultiHeaders::preallocate(PACKET_BATCH, None));
}

/// How a packet link takes datagrams from its socket.
enum Path {
    /// `recvmmsg` batches into our buffers: the kernel copies each datagram on the
    /// receiving thread.
    Batch {
        /// The packet socket, registered with tokio's reactor through its datagram-socket
        /// type (readiness is the same for any datagram socket; only `readable` and `try_io`
        /// are used).
        io: tokio::net::UdpSocket,
        bufs: Vec<Vec<u8>>,
    },
    /// A memory-mapped `TPACKET_V2` ring read in place: no system call while busy; the
    /// kernel copies each datagram into the ring where it delivers it (on `lo`, the sending
    /// thread).
    Ring {
        ring: RxRing,
        /// A duplicate of the socket registered with tokio (as above), present only while
        /// the endpoint sleeps.
        waiter: Option<tokio::net::UdpSocket>,
    },
}

/// The receive side of a packet link.
pub struct PacketRx {
    path: Path,
    local: SocketAddrV4,
    /// Datagrams the filter let through that were not RoCEv2 for us after all (short,
    /// options, lengths that disagree, longer than a ring slot): dropped here.
    pub malformed: u64,
    /// Frames the kernel dropped because the ring was full, as far as read from the kernel
    /// (its counter resets on each read).
    ring_dropped: std::cell::Cell<u64>,
}

impl std::fmt::Debug for PacketRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("PacketRx");
        d.field("local", &self.local);
        if let Path::Ring { ring, .. } = &self.path {
            d.field("ring", &ring.layout());
        }
        d.finish_non_exhaustive()
    }
}

impl PacketRx {
    /// A packet socket receiving what is sent to `local` (IPv4 only: IPv6's covered header
    /// fields are all known from a UDP socket), through `recvmmsg` batches or, with `ring`, a
    /// memory-mapped receive ring. Fails with `PermissionDenied` without `CAP_NET_RAW`.
    /// Inside a tokio runtime.
    pub fn open(local: SocketAddr, ring: bool) -> io::Result<Self> {
        let SocketAddr::V4(local) = local else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the packet link is for IPv4 (over IPv6 the UDP link checks every header field)",
            ));
        };
        let proto = Protocol::from(i32::from(ETH_P_IP.to_be()));
        let sock = Socket::new(Domain::PACKET, Type::DGRAM, Some(proto))?;
        sock.attach_filter(&program(&filter(local)))?;
        sock.set_nonblocking(true)?;
        // The socket received every IPv4 datagram of the host between its creation and the
        // filter: throw those away (as libpcap does after setting a filter). Nobody sends to
        // this endpoint yet: it has not told a peer where it is.
        let mut junk = [std::mem::MaybeUninit::<u8>::uninit(); 64];
        for _ in 0..100_000 {
            if sock.recv(&mut junk).is_err() {
                break;
            }
        }
        let path = if ring {
            Path::Ring {
                ring: RxRing::new(
                    OwnedFd::from(sock),
                    Layout::for_frames(MAX_FRAME, RING_BYTES),
                )?,
                waiter: None,
            }
        } else {
            let _ = sock.set_recv_buffer_size(8 << 20);
            Path::Batch {
                io: tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(sock))?,
                bufs: (0..PACKET_BATCH).map(|_| vec![0u8; BUF]).collect(),
            }
        };
        Ok(Self {
            path,
            local,
            malformed: 0,
            ring_dropped: std::cell::Cell::new(0),
        })
    }

    /// `true` when it reads a memory-mapped ring.
    pub fn is_ring(&self) -> bool {
        matches!(self.path, Path::Ring { .. })
    }

    /// Frames the kernel dropped so far because the ring was full (one system call: the
    /// kernel's count, read and reset, is added to what was read before). 0 without a ring
    /// (the socket's receive buffer overflowing is not counted by the kernel per socket).
    pub fn ring_drops(&self) -> u64 {
        if let Path::Ring { ring, .. } = &self.path {
            if let Ok(d) = ring.take_drops() {
                self.ring_dropped.set(self.ring_dropped.get() + d);
            }
        }
        self.ring_dropped.get()
    }

    /// Waits until a datagram can be read.
    pub async fn readable(&mut self) -> io::Result<()> {
        let (ring, waiter) = match &mut self.path {
            Path::Batch { io, .. } => return io.readable().await,
            Path::Ring { ring, waiter } => (ring, waiter),
        };
        if ring.ready() {
            return Ok(());
        }
        if waiter.is_none() {
            *waiter = Some(tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(
                ring.fd().try_clone()?,
            ))?);
        }
        if let Some(w) = waiter.as_mut() {
            loop {
                w.readable().await?;
                if ring.ready() {
                    break;
                }
                // Clears the readiness tokio saw, and only that: a frame that lands between the
                // check and here raises a new one.
                let _ = w.try_io(Interest::READABLE, || {
                    Err::<(), _>(io::ErrorKind::WouldBlock.into())
                });
            }
        }
        // Out of epoll again at once: while registered, every frame the kernel puts in the
        // ring runs the epoll callback on the delivering (on `lo`, the sending) thread, and
        // an endpoint that sleeps every few frames would keep it registered for good (a 64 KiB
        // WRITE on `lo`: 5.2 -> 6.1 Gb/s without it). Two system calls per sleep instead.
        *waiter = None;
        Ok(())
    }

    /// Reads one batch without waiting and hands each RoCEv2 datagram to `f` with its
    /// metadata (source, destination, ECN, the IPv4 identification and DF as they came), its
    /// UDP payload and the link-layer end it came from. Returns how many datagrams were read.
    pub fn try_recv(
        &mut self,
        mut f: impl FnMut(&RxMeta, &[u8], Option<LinkPeer>),
    ) -> io::Result<usize> {
        let mut malformed = 0;
        let n = match &mut self.path {
            Path::Ring { ring, .. } => ring.drain(PACKET_BATCH, |frame| {
                match parse(frame.data).filter(|_| !frame.cut) {
                    Some((meta, payload)) => f(&meta, payload, frame.from),
                    None => malformed += 1,
                }
            }),
            Path::Batch { io, bufs } => {
                let fd = io.as_raw_fd();
                let mut lens = [(0usize, None); PACKET_BATCH];
                // Through tokio first, so that an empty socket clears the registration's
                // readiness; then directly, because tokio answers from its cached readiness
                // without calling the closure, and a loop that spins never lets tokio learn
                // that the socket became readable (as `RoceSocket::try_recv` does for the UDP
                // socket).
                let r = match io.try_io(Interest::READABLE, || recv_batch(fd, bufs, &mut lens)) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        recv_batch(fd, bufs, &mut lens)
                    }
                    r => r,
                };
                let n = match r {
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) =>
                    {
                        return Ok(0)
                    }
                    Err(e) => return Err(e),
                };
                for (buf, &(len, from)) in bufs.iter().zip(&lens[..n]) {
                    match parse(&buf[..len.min(BUF)]) {
                        Some((meta, payload)) => f(&meta, payload, from),
                        None => malformed += 1,
                    }
                }
                n
            }
        };
        self.malformed += malformed;
        Ok(n)
    }
}

/// One `recvmmsg` into `bufs`; the datagram lengths and where each came from go to `lens`.
/// Returns how many.
fn recv_batch(
    fd: std::os::fd::RawFd,
    bufs: &mut [Vec<u8>],
    lens: &mut [(usize, Option<LinkPeer>); PACKET_BATCH],
) -> io::Result<usize> {
    HEADERS.with(|h| {
        let mut h = h.borrow_mut();
        let mut it = bufs.iter_mut();
        let mut iovs: [[IoSliceMut<'_>; 1]; PACKET_BATCH] = std::array::from_fn(|_| {
            [IoSliceMut::new(
                it.next().map_or(&mut [][..], |b| &mut b[..]),
            )]
        });
        let r = recvmmsg(fd, &mut h, iovs.iter_mut(), MsgFlags::MSG_DONTWAIT, None)
            .map_err(io::Error::from)?;
        let mut n = 0;
        for (slot, m) in lens.iter_mut().zip(r) {
            let from = m.address.and_then(|a: LinkAddr| {
                Some(LinkPeer {
                    ifindex: i32::try_from(a.ifindex()).ok()?,
                    hatype: a.hatype(),
                    addr: a.addr()?,
                })
            });
            *slot = (m.bytes, from);
            n += 1;
        }
        Ok(n)
    })
}

/// Most peers whose link-layer address [`PacketSend`] keeps (a server's clients); the oldest
/// is forgotten first, and a forgotten peer is sent to through the UDP socket again until one
/// of its datagrams is accepted once more.
const MAX_HOPS: usize = 256;

/// How often [`PacketSend`] asks the kernel's tables again where a peer's next hop is (a
/// twentieth of it while they name none).
const RESOLVE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A peer of [`PacketSend`]: its next hop and this host's address there, if the tables named
/// one, and when they were asked.
#[derive(Debug, Clone, Copy)]
struct Hop {
    peer: Ipv4Addr,
    at: Option<(LinkPeer, [u8; 6])>,
    checked: std::time::Instant,
    /// Datagrams of the peer taken since the tables were asked.
    calls: u32,
}

/// TTL of the datagrams the packet link writes (Linux's default, `ip_default_ttl`).
const TTL: u8 = 64;

/// The packet link's sending side: whole IPv4/UDP datagrams, header written here exactly as
/// the UDP sockets have the kernel write it (DF, identification 0, the ECN codepoint in the
/// TOS byte, UDP checksum 0), handed to a packet socket ([`PacketTx`]) with the peer's
/// hardware address and interface. The kernel's IP and UDP output (route lookup, socket
/// lock, header building) is skipped: on a veth pair a 64 B datagram costs the sending core
/// two thirds of what it costs through a UDP socket.
///
/// It sends to a peer once a datagram from that peer's address was *accepted by the
/// transport in sequence* ([`roce_stack::Delivery::Connected`]: a QP's peer, ICRC valid, the
/// PSN it expected or one it sent and has not seen acknowledged), and then to the next hop the
/// kernel's own routing and neighbour tables name for the peer's address (`neigh.rs`,
/// looked up again at most once a second), never to the hardware address a received frame
/// came from: no frame, forged or not, decides where data goes ([`PacketSend::learn`]). Until
/// then, where the tables name no complete next hop, and for peers behind `lo` (Linux drops
/// injected frames with loopback or local source addresses as martians, unless
/// [`loopback_takes_injected_frames`]), the UDP socket sends (and the kernel resolves).
#[derive(Debug)]
pub struct PacketSend {
    tx: PacketTx,
    src: Ipv4Addr,
    /// Each peer: where on the link it is (when the tables named a next hop), this host's
    /// hardware address on that interface, and when the tables were last asked.
    hops: Vec<Hop>,
    /// The next-hop lookup ([`crate::neigh::next_hop`]; a stand-in in tests).
    resolve: fn(Ipv4Addr) -> Option<(i32, [u8; 6])>,
    oldest: usize,
    /// This host's hardware address per interface index, as far as asked for.
    own: Vec<(i32, [u8; 6])>,
    /// This network namespace lets frames injected on `lo` through ([`loopback_takes_injected_frames`]).
    loopback: bool,
    /// Datagrams sent through the packet socket.
    pub sent: u64,
    /// Datagrams the kernel refused because the interface's queue was full (`ENOBUFS`): lost
    /// on the way out, as on a congested wire, and recovered by the transport.
    pub dropped: u64,
}

impl PacketSend {
    /// A packet socket sending from `local`. Fails without `CAP_NET_RAW`.
    pub fn open(local: SocketAddrV4) -> io::Result<Self> {
        Ok(Self {
            tx: PacketTx::new()?,
            src: *local.ip(),
            hops: Vec::new(),
            resolve: crate::neigh::next_hop,
            oldest: 0,
            own: Vec::new(),
            loopback: loopback_takes_injected_frames(),
            sent: 0,
            dropped: 0,
        })
    }

    /// Records that a datagram from `peer` was taken in sequence, arriving through `from`:
    /// from now on datagrams to `peer` go through the packet socket, to the next hop the
    /// kernel's tables name (asked again at most once a second, so a changed neighbour is
    /// followed; where they name none, the UDP socket sends). `from` says only which kind of
    /// link it came over: on `lo` (where it takes injected frames) the hop is `lo` itself;
    /// on Ethernet its hardware address is never used.
    pub fn learn(&mut self, peer: Ipv4Addr, from: LinkPeer) {
        if self.src.is_unspecified() {
            return;
        }
        let at = self.hops.iter().position(|h| h.peer == peer);
        if let Some(i) = at {
            // The clock only every 1,024th datagram of a peer (64th while unresolved): this
            // runs for each one.
            let h = &mut self.hops[i];
            h.calls = h.calls.wrapping_add(1);
            let (every, after) = match h.at {
                Some(_) => (1024, RESOLVE_EVERY),
                None => (64, RESOLVE_EVERY / 20),
            };
            if !h.calls.is_multiple_of(every) || h.checked.elapsed() < after {
                return;
            }
        }
        let hop = match from.hatype {
            LinkPeer::LOOPBACK if self.loopback => Some((from.ifindex, [0u8; 6])),
            LinkPeer::ETHERNET => (self.resolve)(peer),
            _ => None,
        };
        let hop = hop.and_then(|(ifindex, mac)| {
            let own = self.own_address(ifindex)?;
            let link = LinkPeer {
                ifindex,
                hatype: from.hatype,
                addr: mac,
            };
            Some((link, own))
        });
        let h = Hop {
            peer,
            at: hop,
            checked: std::time::Instant::now(),
            calls: 0,
        };
        match at {
            Some(i) => self.hops[i] = h,
            None if self.hops.len() < MAX_HOPS => self.hops.push(h),
            None => {
                self.hops[self.oldest] = h;
                self.oldest = (self.oldest + 1) % MAX_HOPS;
            }
        }
    }

    /// This host's hardware address on interface `ifindex`.
    fn own_address(&mut self, ifindex: i32) -> Option<[u8; 6]> {
        if let Some(o) = self.own.iter().find(|o| o.0 == ifindex) {
            return Some(o.1);
        }
        let mac = nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
            let l = *a.address?.as_link_addr()?;
            (i32::try_from(l.ifindex()).ok()? == ifindex).then_some(l.addr()?)
        })?;
        if self.own.len() >= MAX_HOPS {
            self.own.clear();
        }
        self.own.push((ifindex, mac));
        Some(mac)
    }

    /// Where datagrams to `peer` go on the link, once learned (and this host's hardware
    /// address there).
    pub fn hop(&self, peer: Ipv4Addr) -> Option<(LinkPeer, [u8; 6])> {
        self.hops.iter().find(|h| h.peer == peer).and_then(|h| h.at)
    }

    /// Sends `datagrams` (UDP payloads, at most [`TX_BATCH`]) from UDP port `src_port` to
    /// `dst` through `hop`, waiting while the socket's send buffer is full.
    pub async fn send(
        &mut self,
        (hop, own): (LinkPeer, [u8; 6]),
        src_port: u16,
        dst: SocketAddrV4,
        ecn: Ecn,
        datagrams: &[&[u8]],
    ) -> io::Result<()> {
        let datagrams = &datagrams[..datagrams.len().min(TX_BATCH)];
        let mut headers = [[0u8; 28]; TX_BATCH];
        for (h, d) in headers.iter_mut().zip(datagrams) {
            *h = ipv4_udp_header(SocketAddrV4::new(self.src, src_port), dst, ecn, d.len())?;
        }
        let parts: [[&[u8]; 2]; TX_BATCH] =
            std::array::from_fn(|k| [&headers[k][..], datagrams.get(k).copied().unwrap_or(&[])]);
        let mut done = 0;
        while done < datagrams.len() {
            let tx = &self.tx;
            let rest = &parts[done..datagrams.len()];
            match crate::writable::send_when_writable(tx.fd(), || tx.send(&hop, own, rest)).await {
                Ok(k) => {
                    done += k.max(1);
                    self.sent += k as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOBUFS.raw_os_error()) => {
                    done += 1;
                    self.dropped += 1;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// The 16-bit ones' complement sum of `b` (an even number of bytes), as the IPv4 header
/// checksum uses it (RFC 1071).
fn ones_complement_sum(b: &[u8]) -> u16 {
    let mut sum: u32 = b
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Whether Linux accepts IPv4 frames injected on `lo` with a loopback source address:
/// only with `route_localnet` (else drop reason `IP_LOCALNET`) and `accept_local` (else
/// `IP_LOCAL_SOURCE`) set for `lo` or all interfaces of this network namespace. System
/// settings roce reads and never changes.
pub fn loopback_takes_injected_frames() -> bool {
    let on = |key: &str| {
        ["all", "lo"].iter().any(|dev| {
            std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{dev}/{key}"))
                .is_ok_and(|v| v.trim() == "1")
        })
    };
    on("route_localnet") && on("accept_local")
}

/// The IPv4 and UDP headers of a datagram of `payload` bytes from `src` to `dst`, as a Linux
/// UDP socket with `IP_PMTUDISC_PROBE` writes them when it is not connected (DF,
/// identification 0, `ecn` in the TOS byte, TTL 64), with the UDP checksum 0 (as rxe sends it: the ICRC
/// covers the payload end to end). An error when the datagram would be longer than IPv4 allows.
pub fn ipv4_udp_header(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    ecn: Ecn,
    payload: usize,
) -> io::Result<[u8; 28]> {
    let total = u16::try_from(28 + payload)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "datagram too long for IPv4"))?;
    let mut h = [0u8; 28];
    h[0] = 0x45;
    h[1] = ecn.bits();
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[6] = 0x40;
    h[8] = TTL;
    h[9] = 17;
    h[12..16].copy_from_slice(&src.ip().octets());
    h[16..20].copy_from_slice(&dst.ip().octets());
    let checksum = !ones_complement_sum(&h[..20]);
    h[10..12].copy_from_slice(&checksum.to_be_bytes());
    h[20..22].copy_from_slice(&src.port().to_be_bytes());
    h[22..24].copy_from_slice(&dst.port().to_be_bytes());
    h[24..26].copy_from_slice(&(total - 20).to_be_bytes());
    Ok(h)
}

/// The metadata and UDP payload of an IPv4 datagram (from its IP header on), or `None` when it
/// is not a whole unfragmented IPv4/UDP datagram without options.
pub fn parse(d: &[u8]) -> Option<(RxMeta, &[u8])> {
    if d.len() < 28 || d[0] != 0x45 || d[9] != 17 {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([d[2], d[3]]));
    if total < 28 || total > d.len() {
        return None;
    }
    let flags = u16::from_be_bytes([d[6], d[7]]);
    if flags & 0x3fff != 0 {
        // More fragments, or a fragment offset: not a whole datagram (and the reserved bit).
        return None;
    }
    let udp = &d[20..total];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len < 8 || udp_len > udp.len() {
        return None;
    }
    let src = Ipv4Addr::new(d[12], d[13], d[14], d[15]);
    let dst = Ipv4Addr::new(d[16], d[17], d[18], d[19]);
    let sport = u16::from_be_bytes([udp[0], udp[1]]);
    let meta = RxMeta::new(
        SocketAddr::new(IpAddr::V4(src), sport),
        IpAddr::V4(dst),
        Ecn::from_bits(d[1] & 3),
    )
    .with_ipv4(Ipv4Seen::Seen {
        identification: u16::from_be_bytes([d[4], d[5]]),
        dont_fragment: flags & 0x4000 != 0,
    });
    Some((meta, &udp[8..udp_len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(id: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
        let total = (28 + payload.len()) as u16;
        let mut d = vec![0x45, 0x02];
        d.extend_from_slice(&total.to_be_bytes());
        d.extend_from_slice(&id.to_be_bytes());
        d.extend_from_slice(&flags.to_be_bytes());
        d.extend_from_slice(&[64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2]);
        d.extend_from_slice(&0xc001u16.to_be_bytes());
        d.extend_from_slice(&4791u16.to_be_bytes());
        d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        d.extend_from_slice(&[0, 0]);
        d.extend_from_slice(payload);
        d
    }

    #[test]
    fn writes_the_header_a_udp_socket_writes() {
        let src: SocketAddrV4 = "10.1.2.3:49153".parse().unwrap();
        let dst: SocketAddrV4 = "10.1.2.4:4791".parse().unwrap();
        let payload = [0xabu8; 100];
        for ecn in [Ecn::NotEct, Ecn::Ect0, Ecn::Ce] {
            let h = ipv4_udp_header(src, dst, ecn, payload.len()).unwrap();
            // The header checksum: the ones' complement sum of the header is all ones.
            assert_eq!(ones_complement_sum(&h[..20]), 0xffff);
            assert_eq!(h[8], 64, "TTL");
            assert_eq!(&h[26..28], &[0, 0], "UDP checksum 0");
            let mut d = h.to_vec();
            d.extend_from_slice(&payload);
            let (m, p) = parse(&d).unwrap();
            assert_eq!(p, &payload[..]);
            assert_eq!(m.src, SocketAddr::V4(src));
            assert_eq!(m.dst, IpAddr::V4(*dst.ip()));
            assert_eq!(m.ecn, ecn);
            assert_eq!(
                m.ipv4,
                Ipv4Seen::Seen {
                    identification: 0,
                    dont_fragment: true
                }
            );
        }
        assert!(ipv4_udp_header(src, dst, Ecn::NotEct, 65_536 - 28).is_err());
        assert!(ipv4_udp_header(src, dst, Ecn::NotEct, 65_535 - 28).is_ok());
    }

    #[test]
    fn sends_where_the_tables_say_not_where_a_frame_came_from() {
        let Ok(mut s) = PacketSend::open("10.0.0.1:4791".parse().unwrap()) else {
            eprintln!("no CAP_NET_RAW here: the next hop is also covered by tests/netns.rs");
            return;
        };
        // The tables of this stand-in: 10.0.0.2 is behind interface 2 with MAC ..:0a, every
        // 11.x host too; nothing else resolves.
        s.resolve = |p| match p.octets() {
            [10, 0, 0, 2] => Some((2, [2, 0, 0, 0, 0, 0x0a])),
            [11, ..] => Some((2, [2, 0, 0, 0, 0, 0x0b])),
            _ => None,
        };
        let eth = |i: u8| LinkPeer {
            ifindex: 2,
            hatype: LinkPeer::ETHERNET,
            addr: [2, 0, 0, 0, 0, i],
        };
        let peer = Ipv4Addr::new(10, 0, 0, 2);
        // As on a default `lo` (whatever this machine's settings are).
        s.loopback = false;
        s.learn(
            peer,
            LinkPeer {
                hatype: LinkPeer::LOOPBACK,
                ..eth(1)
            },
        );
        assert_eq!(
            s.hop(peer),
            None,
            "lo: Linux drops injected local-source frames"
        );
        s.hops.clear();
        // Interface 2 stands for one whose own address was looked up.
        s.own.push((2, [2, 0, 0, 0, 0, 0xee]));
        s.learn(peer, eth(0x66));
        assert_eq!(
            s.hop(peer),
            Some((eth(0x0a), [2, 0, 0, 0, 0, 0xee])),
            "the tables' next hop, not the frame's source address"
        );
        let other = Ipv4Addr::new(10, 0, 0, 3);
        s.learn(other, eth(4));
        assert_eq!(
            s.hop(other),
            None,
            "no next hop in the tables: the UDP socket"
        );
        for k in 0..(MAX_HOPS as u32 + 10) {
            s.learn(Ipv4Addr::from(0x0b00_0000 + k), eth(3));
        }
        assert_eq!(s.hops.len(), MAX_HOPS);
        assert_eq!(s.hop(peer), None, "the oldest is forgotten first");
        assert_eq!(
            s.hop(Ipv4Addr::from(0x0b00_0000 + MAX_HOPS as u32 + 9))
                .map(|h| h.0),
            Some(eth(0x0b))
        );
    }

    #[test]
    fn parses_what_the_header_says() {
        let d = datagram(14849, 0x4000, b"bth and the rest");
        let (m, p) = parse(&d).unwrap();
        assert_eq!(p, b"bth and the rest");
        assert_eq!(m.src, "127.0.0.1:49153".parse().unwrap());
        assert_eq!(m.dst, "127.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(m.ecn, Ecn::Ect0);
        assert_eq!(
            m.ipv4,
            Ipv4Seen::Seen {
                identification: 14849,
                dont_fragment: true
            }
        );
        // Trailing bytes after the IP total length (Ethernet padding) are not payload.
        let mut padded = d.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(parse(&padded).unwrap().1, b"bth and the rest");
        let (m, _) = parse(&datagram(7, 0, b"x")).unwrap();
        assert_eq!(
            m.ipv4,
            Ipv4Seen::Seen {
                identification: 7,
                dont_fragment: false
            }
        );
    }

    #[test]
    fn refuses_fragments_options_and_lying_lengths() {
        assert!(parse(&datagram(1, 0x2000, b"more fragments")).is_none());
        assert!(parse(&datagram(1, 0x0001, b"an offset")).is_none());
        let mut options = datagram(1, 0x4000, b"x");
        options[0] = 0x46;
        assert!(parse(&options).is_none());
        let mut long = datagram(1, 0x4000, b"abc");
        long[3] = 200;
        assert!(parse(&long).is_none());
        let mut udp_long = datagram(1, 0x4000, b"abc");
        udp_long[25] = 99;
        assert!(parse(&udp_long).is_none());
        for n in 0..28 {
            assert!(parse(&datagram(1, 0x4000, b"")[..n]).is_none());
        }
    }

    /// Runs a classic BPF program (the instructions `filter` uses) over a datagram from its
    /// IP header: the bytes accepted.
    fn run(prog: &[Insn], d: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let byte = |at: usize| d.get(at).copied().map(u32::from);
        loop {
            let (code, jt, jf, k) = prog[pc];
            let ku = k as usize;
            pc += 1;
            match code {
                bpf::LD_B_ABS => a = byte(ku).unwrap_or_else(|| panic!("read past the end")),
                bpf::LD_H_ABS => a = byte(ku).unwrap() << 8 | byte(ku + 1).unwrap(),
                bpf::LD_W_ABS => {
                    a = (0..4).fold(0, |acc, i| acc << 8 | byte(ku + i).unwrap());
                }
                bpf::LDX_B_MSH => x = (byte(ku).unwrap() & 0xf) * 4,
                bpf::LD_H_IND => {
                    let at = x as usize + ku;
                    match (byte(at), byte(at + 1)) {
                        (Some(h), Some(l)) => a = h << 8 | l,
                        _ => return 0, // the kernel drops on an out-of-bounds load
                    }
                }
                bpf::JEQ_K => pc += usize::from(if a == k { jt } else { jf }),
                bpf::JSET_K => pc += usize::from(if a & k != 0 { jt } else { jf }),
                bpf::RET_K => return k,
                other => panic!("instruction {other:#x} not modelled"),
            }
            assert!(pc < prog.len(), "jumped out of the program");
        }
    }

    #[test]
    fn the_filter_takes_exactly_our_datagrams() {
        let prog = filter("127.0.0.2:4791".parse().unwrap());
        let ours = datagram(1, 0x4000, b"payload");
        assert_eq!(run(&prog, &ours), 0x4_0000);
        let mut other_port = ours.clone();
        other_port[22..24].copy_from_slice(&4792u16.to_be_bytes());
        assert_eq!(run(&prog, &other_port), 0);
        let mut other_ip = ours.clone();
        other_ip[19] = 3;
        assert_eq!(run(&prog, &other_ip), 0);
        let mut tcp = ours.clone();
        tcp[9] = 6;
        assert_eq!(run(&prog, &tcp), 0);
        assert_eq!(run(&prog, &datagram(1, 0x0010, b"a later fragment")), 0);
        // A first fragment (more fragments set) reaches user space, which drops it.
        assert_eq!(
            run(&prog, &datagram(1, 0x2000, b"first fragment")),
            0x4_0000
        );
        assert!(parse(&datagram(1, 0x2000, b"first fragment")).is_none());
    }
}
