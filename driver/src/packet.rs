//! The packet link's receive side: a Linux packet socket (`AF_PACKET`, `SOCK_DGRAM`,
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
//!   (`recvmmsg` copies on the receiving one). README, "Links", has the figures.
//! * The endpoint's UDP socket stays bound to the port, so that the kernel does not answer the
//!   peer with ICMP port unreachable; a filter that accepts nothing keeps it from queueing a
//!   second copy of every datagram ([`silence_udp`]).
//!
//! Opening a packet socket needs `CAP_NET_RAW`. Everything here is safe code: socket2 creates
//! the socket and attaches the filters; the ring's mapping (the one `unsafe` part of roce) is
//! in `roce-packet-ring`.
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{recvmmsg, LinkAddr, MsgFlags, MultiHeaders};

use roce_packet_ring::{Layout, RxRing};
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
const RING_BYTES: usize = 16 << 20;

/// Datagrams without a sleep after which the ring's socket leaves epoll (as the UDP link
/// does: a registered socket costs the sender an epoll callback per datagram).
const DEREGISTER_AFTER: u32 = 4096;

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
        /// A duplicate of the socket registered with tokio (as above), present while the
        /// endpoint keeps coming back to sleep.
        waiter: Option<tokio::net::UdpSocket>,
        since_wait: u32,
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
                since_wait: 0,
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
        let (ring, waiter, since_wait) = match &mut self.path {
            Path::Batch { io, .. } => return io.readable().await,
            Path::Ring {
                ring,
                waiter,
                since_wait,
            } => (ring, waiter, since_wait),
        };
        *since_wait = 0;
        if ring.ready() {
            return Ok(());
        }
        let w = match waiter {
            Some(w) => w,
            w @ None => w.insert(tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(
                ring.fd().try_clone()?,
            ))?),
        };
        loop {
            w.readable().await?;
            if ring.ready() {
                return Ok(());
            }
            // Clears the readiness tokio saw, and only that: a frame that lands between the
            // check and here raises a new one.
            let _ = w.try_io(Interest::READABLE, || {
                Err::<(), _>(io::ErrorKind::WouldBlock.into())
            });
        }
    }

    /// Reads one batch without waiting and hands each RoCEv2 datagram to `f` with its
    /// metadata (source, destination, ECN, the IPv4 identification and DF as they came) and
    /// its UDP payload. Returns how many datagrams were read.
    pub fn try_recv(&mut self, mut f: impl FnMut(&RxMeta, &[u8])) -> io::Result<usize> {
        let mut malformed = 0;
        let n = match &mut self.path {
            Path::Ring {
                ring,
                waiter,
                since_wait,
            } => {
                let n = ring.drain(PACKET_BATCH, |frame| {
                    match parse(frame.data).filter(|_| !frame.cut) {
                        Some((meta, payload)) => f(&meta, payload),
                        None => malformed += 1,
                    }
                });
                *since_wait = since_wait.saturating_add(n as u32);
                if *since_wait > DEREGISTER_AFTER {
                    // Busy for a while: stop paying for wake-ups nobody waits for.
                    *waiter = None;
                }
                n
            }
            Path::Batch { io, bufs } => {
                let fd = io.as_raw_fd();
                let mut lens = [0usize; PACKET_BATCH];
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
                for (buf, &len) in bufs.iter().zip(&lens[..n]) {
                    match parse(&buf[..len.min(BUF)]) {
                        Some((meta, payload)) => f(&meta, payload),
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

/// One `recvmmsg` into `bufs`; the datagram lengths go to `lens`. Returns how many.
fn recv_batch(
    fd: std::os::fd::RawFd,
    bufs: &mut [Vec<u8>],
    lens: &mut [usize; PACKET_BATCH],
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
            *slot = m.bytes;
            n += 1;
        }
        Ok(n)
    })
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
