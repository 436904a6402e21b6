//! A memory-mapped receive ring on a Linux packet socket (`PACKET_RX_RING`, `TPACKET_V2`;
//! `Documentation/networking/packet_mmap.rst`): the kernel copies each accepted frame into a
//! slot of a ring shared with this process and flips the slot's status word; the process reads
//! the frame in place and flips it back. A busy receiver makes no system call at all, and
//! no copy beyond the kernel's one into the ring (a `recvmmsg` batch costs a system call and a
//! second copy, into the caller's buffers).
//!
//! `TPACKET_V2`, not `V3`: V3 hands frames over a whole block at a time, when the block fills
//! or its retire timer (at least 1 ms) fires, which a transport's 4 µs round trips cannot
//! wait for; V2 hands over every frame as it lands and wakes the socket's waiters for each.
//!
//! [`PacketTx`] is the packet link's sending side: Ethernet frames around whole IPv4
//! datagrams handed to the kernel with `sendmmsg` on a packet socket, past the kernel's IP and
//! UDP output path.
//!
//! # The audit: all of roce's `unsafe` is in this file
//!
//! * [`RxRing::new`] calls `setsockopt` twice with pointers to live, correctly sized values
//!   and `mmap` once ([`RxRing::take_drops`] calls `getsockopt` the same way); it checks every return value, and the mapping's length is the one it
//!   asked the kernel to allocate (frame size × frame count, whole pages).
//! * The mapping is owned by [`RxRing`] alone (not `Clone`, unmapped in `Drop`), and the socket
//!   it belongs to is owned by the ring too, so the kernel's side of the ring lives exactly as
//!   long as the mapping.
//! * Every access to the ring goes through `RxRing::slot`, which checks the index against the
//!   slot count, so a pointer is formed only inside the mapping (slots are back to back in
//!   whole pages: [`Layout::for_frames`]).
//! * The status word of a slot is read and written as an `AtomicU32` (acquire load, release
//!   store): the kernel publishes a frame by writing its status last (after a write barrier),
//!   and takes a slot back only after user space stores `TP_STATUS_KERNEL`.
//! * A frame's bytes are lent to the caller as a `&[u8]` only while the slot's status says the
//!   process owns it (the kernel does not write a slot it has handed over), only for the
//!   duration of the callback (the borrow cannot escape), and only after the offsets and
//!   lengths the kernel wrote in the header are checked to lie inside the slot. Header fields
//!   are read byte-wise from that checked slice.
//! * [`PacketTx::new`] owns the descriptor `socket` returns (checked) and calls `setsockopt`
//!   once as above. [`PacketTx::send`] builds the message headers on its own stack frame
//!   (zeroed C structs, then filled), pointing at a `sockaddr_ll`, virtio-net and Ethernet
//!   headers and `iovec`s there and at slices borrowed for the call; the kernel only reads
//!   through them and writes each message's `msg_len`.
//! * [`accept_zero_udp6_checksums`] calls `setsockopt` once with a pointer to a live `c_int`
//!   and its size, on a descriptor the caller lends for the call.
#![warn(missing_docs)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// `SOL_PACKET`.
const SOL_PACKET: libc::c_int = 263;
/// `UDP_NO_CHECK6_RX` (`linux/udp.h`), at level `IPPROTO_UDP`.
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// Lets the IPv6 UDP socket `fd` take datagrams whose UDP checksum is zero
/// (`UDP_NO_CHECK6_RX`, as RFC 6936 allows a tunnel to). Linux's rxe sends RoCEv2 over IPv6
/// so (its UDP tunnel turns the checksum off: the ICRC covers the transport bytes, and the
/// ICRC masks the UDP checksum), and without this option the kernel drops every one of those
/// datagrams before the socket sees them. Datagrams with a checksum are still checked.
#[allow(unsafe_code)]
pub fn accept_zero_udp6_checksums(fd: BorrowedFd<'_>) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `on` is a live c_int and the length passed is its size; the kernel only reads
    // it. `fd` is borrowed, open, for the call.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_UDP,
            UDP_NO_CHECK6_RX,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
/// `PACKET_RX_RING`.
const PACKET_RX_RING: libc::c_int = 5;
/// `PACKET_VERSION`.
const PACKET_VERSION: libc::c_int = 10;
/// `TPACKET_V2`.
const TPACKET_V2: libc::c_int = 1;
/// A slot the kernel may fill.
const TP_STATUS_KERNEL: u32 = 0;
/// A slot holding a frame for user space.
const TP_STATUS_USER: u32 = 1;
/// The frame was longer than the slot: what is there is cut.
const TP_STATUS_COPY: u32 = 1 << 1;
/// Frames were dropped (the ring was full) since the last report.
const TP_STATUS_LOSING: u32 = 1 << 2;
/// `struct tpacket2_hdr`: status, len, snaplen (u32), mac, net (u16), sec, nsec (u32), ...
const HDR_LEN: usize = 32;

/// `PACKET_STATISTICS`.
const PACKET_STATISTICS: libc::c_int = 6;

/// `struct tpacket_stats`.
#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: libc::c_uint,
    tp_drops: libc::c_uint,
}

/// `struct tpacket_req`.
#[repr(C)]
struct TpacketReq {
    tp_block_size: libc::c_uint,
    tp_block_nr: libc::c_uint,
    tp_frame_size: libc::c_uint,
    tp_frame_nr: libc::c_uint,
}

/// What the ring's layout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per slot (a multiple of 16, header included).
    pub frame_size: usize,
    /// Slots per block (a block is whole pages).
    pub frames_per_block: usize,
    /// Blocks.
    pub blocks: usize,
}

impl Layout {
    /// A ring whose slots take frames of up to `max_frame` bytes (after the slot header and
    /// the link-layer room the kernel keeps), with at least `min_bytes` of slots.
    pub fn for_frames(max_frame: usize, min_bytes: usize) -> Self {
        // tpacket2_hdr + sockaddr_ll, aligned, plus 16 bytes of link-header room: where a
        // SOCK_DGRAM frame starts (net/packet/af_packet.c, tpacket_rcv).
        let frame_size = (96 + max_frame).next_multiple_of(16);
        // As many slots per block as make the block whole pages with no gap, so slot `i` is
        // at `i * frame_size` (the kernel maps the blocks back to back).
        let page = 4096;
        let frames_per_block = page / gcd(frame_size, page);
        let block = frame_size * frames_per_block;
        let blocks = min_bytes.div_ceil(block).max(1);
        Self {
            frame_size,
            frames_per_block,
            blocks,
        }
    }

    fn block_size(&self) -> usize {
        self.frame_size * self.frames_per_block
    }

    /// Slots in the ring.
    pub fn frames(&self) -> usize {
        self.frames_per_block * self.blocks
    }

    /// Bytes mapped.
    pub fn bytes(&self) -> usize {
        self.block_size() * self.blocks
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// One frame as the kernel left it in a slot.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// The bytes captured, from the network header on (a `SOCK_DGRAM` socket).
    pub data: &'a [u8],
    /// Its length on the wire.
    pub len: usize,
    /// The slot was too small for it (or the kernel's offsets did not fit the slot): `data`
    /// is not the whole frame.
    pub cut: bool,
    /// The kernel dropped frames since the previous one (the ring was full).
    pub losing: bool,
    /// Where it came from on the link (the `sockaddr_ll` the kernel writes after the slot's
    /// header), when that is a 6-byte hardware address.
    pub from: Option<LinkPeer>,
}

/// The link-layer end of a frame: the interface it came in on and the hardware address it
/// came from (the `sockaddr_ll` of a packet socket, `linux/if_packet.h`). The packet link
/// sends back to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkPeer {
    /// Index of the interface.
    pub ifindex: i32,
    /// Its `ARPHRD_*` type ([`LinkPeer::ETHERNET`], [`LinkPeer::LOOPBACK`], ...).
    pub hatype: u16,
    /// The 6-byte hardware (MAC) address.
    pub addr: [u8; 6],
}

impl LinkPeer {
    /// `ARPHRD_ETHER`.
    pub const ETHERNET: u16 = 1;
    /// `ARPHRD_LOOPBACK`.
    pub const LOOPBACK: u16 = 772;

    /// Reads a `sockaddr_ll` (20 bytes, native byte order as the kernel wrote it); `None` when
    /// it is short or its hardware address is not 6 bytes long.
    pub fn from_sockaddr_ll(b: &[u8]) -> Option<Self> {
        let b = b.get(..SOCKADDR_LL_LEN)?;
        if b[11] != 6 {
            return None;
        }
        let mut addr = [0; 6];
        addr.copy_from_slice(&b[12..18]);
        Some(Self {
            ifindex: i32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
            hatype: u16::from_ne_bytes([b[8], b[9]]),
            addr,
        })
    }
}

/// `sizeof(struct sockaddr_ll)`.
const SOCKADDR_LL_LEN: usize = 20;

/// A `TPACKET_V2` receive ring on a packet socket. Owns the socket and the mapping.
#[derive(Debug)]
pub struct RxRing {
    fd: OwnedFd,
    map: *mut u8,
    layout: Layout,
    next: usize,
}

// SAFETY: the mapping is owned by this value alone and accessed only through `&mut self`
// (frames) or atomically (`ready`); moving it to another thread moves that ownership.
#[allow(unsafe_code)]
unsafe impl Send for RxRing {}

// SAFETY: `&self` methods only load slot status words atomically.
#[allow(unsafe_code)]
unsafe impl Sync for RxRing {}

impl RxRing {
    /// Sets up a ring of `layout` on `fd`, a packet socket (`AF_PACKET`) that has not received
    /// through a ring before, and maps it.
    #[allow(unsafe_code)]
    pub fn new(fd: OwnedFd, layout: Layout) -> io::Result<Self> {
        let raw = fd.as_raw_fd();
        let version: libc::c_int = TPACKET_V2;
        // SAFETY: `version` is a live c_int and the length passed is its size.
        let r = unsafe {
            libc::setsockopt(
                raw,
                SOL_PACKET,
                PACKET_VERSION,
                (&raw const version).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "ring too large");
        let req = TpacketReq {
            tp_block_size: u32::try_from(layout.block_size()).map_err(|_| too_big())?,
            tp_block_nr: u32::try_from(layout.blocks).map_err(|_| too_big())?,
            tp_frame_size: u32::try_from(layout.frame_size).map_err(|_| too_big())?,
            tp_frame_nr: u32::try_from(layout.frames()).map_err(|_| too_big())?,
        };
        // SAFETY: `req` is a live `struct tpacket_req` and the length passed is its size.
        let r = unsafe {
            libc::setsockopt(
                raw,
                SOL_PACKET,
                PACKET_RX_RING,
                (&raw const req).cast(),
                size_of::<TpacketReq>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh shared mapping of the ring the kernel just allocated for `raw`,
        // of exactly its size; no existing memory is touched. The result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.bytes(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            map: map.cast(),
            layout,
            next: 0,
        })
    }

    /// The socket the ring is on (for readiness: it polls readable while a frame waits).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Its layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The start of slot `i`: slots are back to back (see [`Layout::for_frames`]), and `i` is
    /// always below the slot count (`next` wraps), so the slot lies inside the mapping.
    fn slot(&self, i: usize) -> *mut u8 {
        assert!(i < self.layout.frames(), "slot {i} out of the ring");
        self.map.wrapping_add(i * self.layout.frame_size)
    }

    /// The status word of slot `i`.
    #[allow(unsafe_code)]
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the slot starts inside the mapping at a 16-byte-aligned offset of a
        // page-aligned mapping, so the u32 there is aligned and in bounds; the mapping
        // outlives `&self`. The kernel accesses it atomically too (smp_wmb + WRITE_ONCE).
        unsafe { AtomicU32::from_ptr(self.slot(i).cast()) }
    }

    /// Frames the kernel dropped because the ring was full since the previous call (the
    /// kernel resets its counters when they are read). One system call.
    #[allow(unsafe_code)]
    pub fn take_drops(&self) -> io::Result<u64> {
        let mut st = TpacketStats::default();
        let mut len = size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are live, `len` is the size of `st`; the kernel writes at most
        // `len` bytes and the new length back.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                (&raw mut st).cast(),
                &raw mut len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(st.tp_drops))
    }

    /// `true` when the next slot holds a frame.
    pub fn ready(&self) -> bool {
        self.status(self.next).load(Ordering::Acquire) & TP_STATUS_USER != 0
    }

    /// Hands up to `max` waiting frames, in order, to `f`, each slot given back to the kernel
    /// as soon as `f` returns. Returns how many. Never blocks, never calls the kernel.
    #[allow(unsafe_code)]
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(Frame<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let i = self.next;
            let status = self.status(i).load(Ordering::Acquire);
            if status & TP_STATUS_USER == 0 {
                break;
            }
            let slot = self.slot(i);
            let size = self.layout.frame_size;
            // SAFETY: the slot is `size` bytes inside the mapping, and the kernel does not
            // write a slot whose status has TP_STATUS_USER until it is given back below; the
            // slice lives only until then.
            let bytes: &[u8] = unsafe { std::slice::from_raw_parts(slot, size) };
            let word = |at: usize| {
                u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
            };
            let half = |at: usize| u16::from_ne_bytes([bytes[at], bytes[at + 1]]);
            let len = word(4) as usize;
            let snaplen = word(8) as usize;
            let net = usize::from(half(14));
            // What the kernel wrote must lie inside the slot; a frame that does not is given
            // back empty rather than trusted.
            let data = bytes
                .get(net..net.saturating_add(snaplen))
                .filter(|_| net >= HDR_LEN)
                .unwrap_or(&[]);
            f(Frame {
                data,
                len,
                cut: status & TP_STATUS_COPY != 0 || data.len() < len,
                losing: status & TP_STATUS_LOSING != 0,
                // The kernel writes it at TPACKET_ALIGN(sizeof(tpacket2_hdr)), before the data.
                from: bytes.get(HDR_LEN..net).and_then(LinkPeer::from_sockaddr_ll),
            });
            self.status(i).store(TP_STATUS_KERNEL, Ordering::Release);
            self.next = if i + 1 == self.layout.frames() {
                0
            } else {
                i + 1
            };
            n += 1;
        }
        n
    }
}

impl Drop for RxRing {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of that length, unmapped once; no borrow of it
        // outlives `&mut self`. The socket closes after (field drop order), freeing the ring.
        unsafe {
            libc::munmap(self.map.cast(), self.layout.bytes());
        }
    }
}

/// Most datagrams one [`PacketTx::send`] hands to the kernel.
pub const TX_BATCH: usize = 32;

/// `PACKET_VNET_HDR`.
const PACKET_VNET_HDR: libc::c_int = 15;

/// An Ethernet header: destination, source, EtherType.
const ETH_HLEN: usize = 14;

/// `struct virtio_net_hdr` (`linux/virtio_net.h`): flags, gso_type, hdr_len, gso_size,
/// csum_start, csum_offset.
const VNET_HDR_LEN: usize = 10;

/// A packet socket that only sends (`AF_PACKET`, `SOCK_RAW`, protocol 0, so the kernel
/// delivers nothing to it): whole Ethernet frames around IPv4 datagrams, on the interface
/// given. No IP or UDP layer of the kernel runs on the way out.
#[derive(Debug)]
pub struct PacketTx {
    fd: OwnedFd,
}

impl PacketTx {
    /// Opens the socket (non-blocking). Fails with `PermissionDenied` without `CAP_NET_RAW`.
    #[allow(unsafe_code)]
    pub fn new() -> io::Result<Self> {
        // SAFETY: no pointers; the return value is checked, and a descriptor returned is
        // owned by nobody else.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just opened and not owned elsewhere.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        // Each frame is preceded by a virtio-net header (packet sockets take one on SOCK_RAW
        // only) whose `hdr_len` is the whole frame: the kernel then builds it as one linear
        // buffer. Without it, a datagram
        // longer than a page is put in freshly allocated (and, with init_on_alloc, zeroed)
        // pages with only the link header linear, and the receiving side copies the IP and
        // UDP headers back out of them: 15 % of the sending core in a 64 KiB WRITE across a
        // veth pair.
        let one: libc::c_int = 1;
        // SAFETY: `one` is a live c_int and the length passed is its size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_VNET_HDR,
                std::ptr::addr_of!(one).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// The socket (to wait for it to become writable).
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Sends up to [`TX_BATCH`] IPv4 datagrams in one `sendmmsg`, each the concatenation of
    /// its two parts (header, payload), in Ethernet frames from hardware address `from` to
    /// `to`'s on `to`'s interface. Returns how many the kernel took.
    #[allow(unsafe_code)]
    pub fn send(
        &self,
        to: &LinkPeer,
        from: [u8; 6],
        datagrams: &[[&[u8]; 2]],
    ) -> io::Result<usize> {
        let n = datagrams.len().min(TX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        let mut eth = [0u8; ETH_HLEN];
        eth[..6].copy_from_slice(&to.addr);
        eth[6..12].copy_from_slice(&from);
        eth[12..].copy_from_slice(&(libc::ETH_P_IP as u16).to_be_bytes());
        let mut addr = [0u8; 8];
        addr[..6].copy_from_slice(&to.addr);
        let ll = libc::sockaddr_ll {
            sll_family: libc::AF_PACKET as u16,
            sll_protocol: (libc::ETH_P_IP as u16).to_be(),
            sll_ifindex: to.ifindex,
            sll_hatype: 0,
            sll_pkttype: 0,
            sll_halen: 6,
            sll_addr: addr,
        };
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        // No offloads asked for (flags 0, VIRTIO_NET_HDR_GSO_NONE); hdr_len, little-endian
        // (what packet sockets read on every host since virtio 1.0), says how much is linear.
        let mut vnet = [[0u8; VNET_HDR_LEN]; TX_BATCH];
        for (v, d) in vnet.iter_mut().zip(&datagrams[..n]) {
            let len = u16::try_from(ETH_HLEN + d[0].len() + d[1].len()).unwrap_or(u16::MAX);
            v[2..4].copy_from_slice(&len.to_le_bytes());
        }
        let mut iovs = [[empty; 4]; TX_BATCH];
        for ((iov, d), v) in iovs.iter_mut().zip(&datagrams[..n]).zip(&vnet) {
            for (slot, part) in iov.iter_mut().zip([&v[..], &eth[..], d[0], d[1]]) {
                // The kernel only reads through it (sendmmsg), so the cast away from const is
                // never written through.
                slot.iov_base = part.as_ptr().cast_mut().cast();
                slot.iov_len = part.len();
            }
        }
        // SAFETY: `mmsghdr` is a C struct of integers and pointers, for which all zeroes is a
        // valid value (null pointers, zero lengths).
        let mut msgs: [libc::mmsghdr; TX_BATCH] = unsafe { std::mem::zeroed() };
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()).take(n) {
            m.msg_hdr.msg_name = std::ptr::addr_of!(ll).cast_mut().cast();
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = 4;
        }
        // SAFETY: `msgs[..n]` point at `ll` and at `iovs`, all live on this stack frame until
        // the call returns; each iovec points into `vnet` or `eth` (same frame) or a slice
        // borrowed for this call, with its length; the kernel reads them and writes only `msg_len` (and `msg_flags`) in `msgs`.
        let r = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_sockaddr_ll() {
        let mut b = [0u8; 20];
        b[0..2].copy_from_slice(&(libc::AF_PACKET as u16).to_ne_bytes());
        b[4..8].copy_from_slice(&7i32.to_ne_bytes());
        b[8..10].copy_from_slice(&LinkPeer::ETHERNET.to_ne_bytes());
        b[11] = 6;
        b[12..18].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        assert_eq!(
            LinkPeer::from_sockaddr_ll(&b),
            Some(LinkPeer {
                ifindex: 7,
                hatype: LinkPeer::ETHERNET,
                addr: [2, 0, 0, 0, 0, 9]
            })
        );
        assert_eq!(LinkPeer::from_sockaddr_ll(&b[..19]), None);
        b[11] = 0;
        assert_eq!(LinkPeer::from_sockaddr_ll(&b), None, "no hardware address");
    }

    #[test]
    fn layouts_hold_whole_slots_in_whole_pages() {
        for max in [64, 1500, 4200, 9000, 65536] {
            for min in [1, 1 << 20, 8 << 20] {
                let l = Layout::for_frames(max, min);
                assert_eq!(l.frame_size % 16, 0);
                assert!(l.frame_size >= max + 96 - 15);
                assert!(l.frames_per_block >= 1);
                assert_eq!(l.block_size() % 4096, 0);
                assert_eq!(l.frames_per_block * l.frame_size, l.block_size());
                assert!(l.bytes() >= min);
                // The last slot ends inside the mapping.
                let last =
                    (l.blocks - 1) * l.block_size() + (l.frames_per_block - 1) * l.frame_size;
                assert!(last + l.frame_size <= l.bytes(), "{l:?}");
            }
        }
    }
}
