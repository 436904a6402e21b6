//! The UDP sockets under an endpoint: `quinn-udp` for ECN in both directions (the ECN codepoint
//! of every sent datagram as a cmsg, the received one from IP_RECVTOS / IPV6_RECVTCLASS) and
//! for batched receive (recvmmsg, GRO). quinn-udp also sets IP_MTU_DISCOVER to
//! IP_PMTUDISC_PROBE, so Linux writes DF and identification 0 on every IPv4 datagram of an
//! unconnected socket: exactly the header the ICRC is computed over (../shared/docs/protocol.md
//! §3.3).
//!
//! One socket bound to port 4791 receives. Datagrams leave from one socket per UDP source port,
//! bound to that port, because RoCEv2 uses the source port as per-QP flow entropy (the port
//! the ICRC covers must be the port on the wire). Those sockets are created on first use with
//! SO_REUSEADDR/SO_REUSEPORT, so two endpoints sharing an address (IPv6 loopback) can both
//! send from the same port; nothing is ever sent to them.
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use quinn_udp::{EcnCodepoint, RecvMeta, Transmit, UdpSocketState, BATCH_SIZE};
use roce_proto::Ecn;
use tokio::io::Interest;

/// Largest datagram accepted (a GRO-coalesced buffer can hold several).
const RECV_BUF: usize = 64 * 1024;

/// A socket that only sends, from one UDP source port.
#[derive(Debug)]
struct SendSocket {
    port: u16,
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
}

/// The receiving socket (port 4791) and the per-source-port sending sockets.
#[derive(Debug)]
pub struct RoceSocket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
    senders: Vec<SendSocket>,
    bufs: Vec<Vec<u8>>,
    meta: Vec<RecvMeta>,
}

fn ecn_out(e: Ecn) -> Option<EcnCodepoint> {
    EcnCodepoint::from_bits(e.bits())
}

impl RoceSocket {
    /// Binds `addr` (normally `ip:4791`). Must be called inside a tokio runtime.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let std_sock = std::net::UdpSocket::bind(addr)?;
        let state = UdpSocketState::new((&std_sock).into())?;
        // A larger receive buffer rides out bursts; the kernel caps it at rmem_max.
        let _ = state.set_recv_buffer_size((&std_sock).into(), 8 << 20);
        let _ = state.set_send_buffer_size((&std_sock).into(), 8 << 20);
        std_sock.set_nonblocking(true)?;
        let local = std_sock.local_addr()?;
        let io = tokio::net::UdpSocket::from_std(std_sock)?;
        Ok(Self {
            io,
            state,
            local,
            senders: Vec::new(),
            bufs: (0..BATCH_SIZE).map(|_| vec![0u8; RECV_BUF]).collect(),
            meta: vec![RecvMeta::default(); BATCH_SIZE],
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
        let std_sock: std::net::UdpSocket = sock.into();
        let state = UdpSocketState::new((&std_sock).into())?;
        let _ = state.set_send_buffer_size((&std_sock).into(), 8 << 20);
        std_sock.set_nonblocking(true)?;
        let io = tokio::net::UdpSocket::from_std(std_sock)?;
        self.senders.push(SendSocket { port, io, state });
        Ok(self.senders.len() - 1)
    }

    /// Sends one datagram from UDP source port `src_port` with the given ECN codepoint,
    /// waiting while the socket buffer is full.
    pub async fn send(
        &mut self,
        src_port: u16,
        dst: SocketAddr,
        ecn: Ecn,
        data: &[u8],
    ) -> io::Result<()> {
        let i = self.sender(src_port)?;
        let s = &self.senders[i];
        let t = Transmit {
            destination: dst,
            ecn: ecn_out(ecn),
            contents: data,
            segment_size: None,
            src_ip: None,
        };
        loop {
            // Directly, not through tokio's readiness (see `try_recv`); wait only when full.
            match s.state.try_send((&s.io).into(), &t) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.io.writable().await?,
                // The peer's port is closed (ICMP unreachable reported on a later send):
                // the transport's retransmission handles it, as a NIC would.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until a datagram can be read.
    pub async fn readable(&self) -> io::Result<()> {
        self.io.readable().await
    }

    /// Reads what is queued without waiting (one batch) and hands each datagram to `f` with
    /// its source, ECN codepoint and bytes. Returns how many datagrams were read.
    pub fn try_recv(&mut self, mut f: impl FnMut(SocketAddr, Ecn, &[u8])) -> io::Result<usize> {
        let Self {
            io,
            state,
            bufs,
            meta,
            ..
        } = self;
        let mut iovs: Vec<IoSliceMut<'_>> = bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
        // Through tokio first, so that an empty socket clears tokio's readiness; then
        // directly, because a loop that never awaits (busy sending) never lets tokio learn
        // that the socket became readable.
        let r = match io.try_io(Interest::READABLE, || {
            state.recv((&*io).into(), &mut iovs, meta)
        }) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                state.recv((&*io).into(), &mut iovs, meta)
            }
            r => r,
        };
        let n = match r {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut count = 0;
        for (m, buf) in meta.iter().zip(iovs.iter()).take(n) {
            let ecn = m.ecn.map_or(Ecn::NotEct, |e| Ecn::from_bits(e as u8));
            let stride = m.stride.max(1);
            for seg in buf[..m.len].chunks(stride) {
                f(m.addr, ecn, seg);
                count += 1;
            }
        }
        Ok(count)
    }
}
