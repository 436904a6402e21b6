//! The address vector of a connected QP and the ICRC seeds it implies (RoCEv2: IBTA Annex
//! A17.4.4 for the ICRC's IP/UDP pseudo-header; the UDP source port as Linux
//! `rdma_get_udp_sport` derives it from the QPN pair).
//!
//! The ICRC covers the IP and UDP headers, so the QP must know them to produce and check it:
//! both the simulator and a UDP driver fill a [`PathConfig`] with the addresses and ports the
//! datagrams really carry. IPv4 senders are assumed to write DF and identification 0 (what
//! Linux does for an unconnected socket with `IP_PMTUDISC_DO`); peers that write other IPv4
//! headers (rxe, hardware) can be received with `verify_icrc: false`.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use roce_proto::icrc::{Ipv4Fields, UdpFields};
use roce_proto::{Ecn, Icrc, ROCEV2_UDP_PORT};

/// What the link knows about a received datagram besides its bytes: the addresses of its IP
/// and UDP headers and the ECN codepoint. A connected QP accepts a datagram only from its peer's
/// address to its own: the address vector of an RC or UC QP names both ends (IBTA Vol 1
/// §10.2.4, the address vector; Linux rxe checks the same in `rxe_recv.c` `check_addr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    /// Source IP address and UDP port.
    pub src: SocketAddr,
    /// Destination IP address (the local address the datagram was sent to). An unspecified
    /// address (`0.0.0.0`, `::`) means the link does not know it; only the source is then
    /// checked.
    pub dst: IpAddr,
    /// IP ECN codepoint.
    pub ecn: Ecn,
}

impl RxMeta {
    /// A datagram from `src` to `dst` with codepoint `ecn`.
    pub const fn new(src: SocketAddr, dst: IpAddr, ecn: Ecn) -> Self {
        Self { src, dst, ecn }
    }
}

/// Where a QP's datagrams go and come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConfig {
    /// Our IP address (source of what we send).
    pub local: IpAddr,
    /// The peer's IP address.
    pub remote: IpAddr,
    /// Our UDP source port (per-QP entropy; see [`PathConfig::udp_sport`]).
    pub src_port: u16,
    /// The peer's UDP source port (needed to check the ICRC of what it sends).
    pub remote_src_port: u16,
    /// Our UDP port, where the peer sends (4791; another only when two endpoints share an
    /// address, as IPv6 loopback runs on `::1` do).
    pub local_port: u16,
    /// The peer's UDP port, where we send (4791, as above).
    pub remote_port: u16,
    /// ECN codepoint for every datagram we send (ECT(0) for a congestion-controlled flow).
    pub ecn: Ecn,
    /// Check the ICRC of received packets (drop and count on mismatch).
    pub verify_icrc: bool,
}

impl Default for PathConfig {
    fn default() -> Self {
        Self {
            local: IpAddr::V4(Ipv4Addr::LOCALHOST),
            remote: IpAddr::V4(Ipv4Addr::LOCALHOST),
            src_port: 0xc000,
            remote_src_port: 0xc000,
            local_port: ROCEV2_UDP_PORT,
            remote_port: ROCEV2_UDP_PORT,
            ecn: Ecn::Ect0,
            verify_icrc: true,
        }
    }
}

impl PathConfig {
    /// The UDP source port the kernel's `rdma_get_udp_sport` picks for flow label 0
    /// (symmetric: both ends of a connection compute the same value).
    pub fn udp_sport(lqpn: u32, rqpn: u32) -> u16 {
        let mut v = u64::from(lqpn) * u64::from(rqpn);
        v ^= v >> 20;
        v ^= v >> 40;
        let fl = (v & 0xfffff) as u32;
        (0xc000 | ((fl & 0x3fff) ^ ((fl & 0xfc000) >> 14))) as u16
    }

    /// `true` when both addresses are of the same family.
    pub fn is_consistent(&self) -> bool {
        self.local.is_ipv4() == self.remote.is_ipv4()
    }

    /// `true` when a datagram with these addresses belongs to this path: it comes from the
    /// peer's address and goes to ours (when the link knows the destination).
    pub fn accepts(&self, meta: &RxMeta) -> bool {
        meta.src.ip() == self.remote && (meta.dst.is_unspecified() || meta.dst == self.local)
    }

    /// The metadata of a datagram the peer sends us on this path (for tests and simulations).
    pub fn from_peer(&self, ecn: Ecn) -> RxMeta {
        RxMeta::new(
            SocketAddr::new(self.remote, self.remote_src_port),
            self.local,
            ecn,
        )
    }

    /// ICRC seed for a datagram we send whose UDP payload is `transport_len` bytes.
    pub fn tx_icrc(&self, transport_len: usize) -> Icrc {
        seed(
            self.local,
            self.remote,
            self.src_port,
            self.remote_port,
            transport_len,
        )
    }

    /// ICRC seed for a datagram the peer sends us with `transport_len` bytes.
    pub fn rx_icrc(&self, transport_len: usize) -> Icrc {
        seed(
            self.remote,
            self.local,
            self.remote_src_port,
            self.local_port,
            transport_len,
        )
    }
}

/// The last ICRC seed of each direction of one QP, with the datagram length it is for: the
/// pseudo-header depends only on the path and the length, and a flow mostly repeats one length
/// (a READ request, a full-MTU middle packet), so most packets skip building and hashing it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SeedCache {
    tx: Option<(usize, Icrc)>,
    rx: Option<(usize, Icrc)>,
}

impl SeedCache {
    /// [`PathConfig::tx_icrc`], remembered.
    pub(crate) fn tx(&mut self, path: &PathConfig, transport_len: usize) -> Icrc {
        remembered(&mut self.tx, transport_len, || path.tx_icrc(transport_len))
    }

    /// [`PathConfig::rx_icrc`], remembered.
    pub(crate) fn rx(&mut self, path: &PathConfig, transport_len: usize) -> Icrc {
        remembered(&mut self.rx, transport_len, || path.rx_icrc(transport_len))
    }
}

/// The seed in `slot` if it is for `len`; otherwise `make`'s, kept in `slot`.
fn remembered(slot: &mut Option<(usize, Icrc)>, len: usize, make: impl FnOnce() -> Icrc) -> Icrc {
    match slot {
        Some((l, seed)) if *l == len => seed.clone(),
        _ => slot.insert((len, make())).1.clone(),
    }
}

fn seed(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, len: usize) -> Icrc {
    let udp = UdpFields {
        src_port: sport,
        dst_port: dport,
    };
    match (src, dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Icrc::rocev2_ipv6_fields(&s.octets(), &d.octets(), &udp, len)
        }
        (s, d) => {
            let v4 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.octets(),
                IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |x| x.octets()),
            };
            Icrc::rocev2_ipv4_fields(
                &Ipv4Fields {
                    src: v4(s),
                    dst: v4(d),
                    identification: 0,
                    dont_fragment: true,
                },
                &udp,
                len,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sport_is_symmetric_and_in_range() {
        for (a, b) in [(0x11, 0x12), (7, 0xabcdef), (1, 1)] {
            let p = PathConfig::udp_sport(a, b);
            assert_eq!(p, PathConfig::udp_sport(b, a));
            assert!(p >= 0xc000);
        }
    }

    /// 10.0.0.1 → 10.0.0.2, source ports 0xc001 / 0xc002.
    fn ten_0_0_1() -> PathConfig {
        PathConfig {
            local: "10.0.0.1".parse().unwrap(),
            remote: "10.0.0.2".parse().unwrap(),
            src_port: 0xc001,
            remote_src_port: 0xc002,
            ..PathConfig::default()
        }
    }

    #[test]
    fn tx_of_one_side_is_rx_of_the_other() {
        let a = ten_0_0_1();
        let b = PathConfig {
            local: a.remote,
            remote: a.local,
            src_port: a.remote_src_port,
            remote_src_port: a.src_port,
            ..a
        };
        let pkt = [0u8; 20];
        assert_eq!(a.tx_icrc(20).compute(&pkt), b.rx_icrc(20).compute(&pkt));
        assert_ne!(a.tx_icrc(20).compute(&pkt), a.rx_icrc(20).compute(&pkt));
    }

    #[test]
    fn seed_cache_gives_the_seed_of_the_length_asked_for() {
        let path = ten_0_0_1();
        let mut cache = SeedCache::default();
        let pkt = [0x3cu8; 120];
        // Repeats, changes and returns to a length, in both directions.
        for len in [32, 32, 84, 32, 120, 120, 84] {
            let bytes = &pkt[..len];
            assert_eq!(
                cache.tx(&path, len).compute(bytes),
                path.tx_icrc(len).compute(bytes),
                "tx, {len} B"
            );
            assert_eq!(
                cache.rx(&path, len).compute(bytes),
                path.rx_icrc(len).compute(bytes),
                "rx, {len} B"
            );
        }
    }
}
