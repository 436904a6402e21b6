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
    /// What the link saw of the IPv4 identification and DF bit (ignored for IPv6, whose
    /// covered fields are all known from the addresses, ports and length).
    pub ipv4: Ipv4Seen,
}

/// The two covered IPv4 header fields a UDP socket does not show: the identification and
/// the DF bit. Senders choose them freely (Linux's UDP sockets write 0 with DF, rxe and NICs a
/// counter), and the ICRC covers both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipv4Seen {
    /// As they were on the wire (a packet link, a capture, the simulator).
    Seen {
        /// IPv4 identification.
        identification: u16,
        /// The DF flag.
        dont_fragment: bool,
    },
    /// Not seen (a UDP socket): the ICRC check finds the values that make it valid, if any
    /// ([`roce_proto::icrc_solve`]), a check of 15 bits instead of 32.
    Unseen,
}

impl Ipv4Seen {
    /// What `roce`'s own senders write: identification 0 with DF.
    pub const ROCE: Self = Self::Seen {
        identification: 0,
        dont_fragment: true,
    };
}

impl RxMeta {
    /// A datagram from `src` to `dst` with codepoint `ecn`, its IPv4 identification and DF
    /// not seen.
    pub const fn new(src: SocketAddr, dst: IpAddr, ecn: Ecn) -> Self {
        Self {
            src,
            dst,
            ecn,
            ipv4: Ipv4Seen::Unseen,
        }
    }

    /// The same with the IPv4 identification and DF bit as the link saw them.
    pub const fn with_ipv4(self, ipv4: Ipv4Seen) -> Self {
        Self { ipv4, ..self }
    }
}

/// Which check a received datagram's ICRC passed ([`PathConfig::check_icrc`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcrcVerdict {
    /// The full 32-bit check: over every covered header field as it was on the wire (IPv6;
    /// IPv4 whose identification and DF were seen), or an exact match with `roce`'s own
    /// IPv4 header (identification 0, DF) when they were not seen.
    Full,
    /// IPv4 without the identification and DF: valid for some value of them.
    Solved,
    /// Invalid.
    Bad,
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

    /// The metadata of a datagram the peer sends us on this path with `roce`'s own IPv4
    /// header (for tests and simulations).
    pub fn from_peer(&self, ecn: Ecn) -> RxMeta {
        RxMeta::new(
            SocketAddr::new(self.remote, self.remote_src_port),
            self.local,
            ecn,
        )
        .with_ipv4(Ipv4Seen::ROCE)
    }

    /// Checks the ICRC of a datagram received on this path as every QP does before anything
    /// else looks at it: over the headers `meta` says it came with (its real source port;
    /// over IPv4 the identification and DF as seen, or, when the link did not see them, any
    /// that make it valid).
    pub fn check_icrc(&self, meta: &RxMeta, bytes: &[u8]) -> IcrcVerdict {
        SeedCache::default().check_rx(self, meta, bytes)
    }

    /// ICRC seed for a datagram we send whose UDP payload is `transport_len` bytes.
    pub fn tx_icrc(&self, transport_len: usize) -> Icrc {
        seed(
            self.local,
            self.remote,
            self.src_port,
            self.remote_port,
            transport_len,
            Ipv4Seen::ROCE,
        )
    }

    /// ICRC seed for a datagram the peer sends us with `transport_len` bytes, from its
    /// expected source port with `roce`'s own IPv4 header (identification 0, DF).
    pub fn rx_icrc(&self, transport_len: usize) -> Icrc {
        seed(
            self.remote,
            self.local,
            self.remote_src_port,
            self.local_port,
            transport_len,
            Ipv4Seen::ROCE,
        )
    }
}

/// The last ICRC seed of each direction of one QP, with the datagram length it is for: the
/// pseudo-header depends only on the path and the length, and a flow mostly repeats one length
/// (a READ request, a full-MTU middle packet), so most packets skip building and hashing it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SeedCache {
    tx: Option<(usize, Icrc)>,
    rx: Option<(RxKey, Icrc)>,
    /// IPv4 datagrams in a row whose identification and DF were not seen and whose ICRC
    /// matched `roce`'s own header (0, DF) exactly.
    plain_streak: u8,
    /// The peer writes identification 0 with DF (checked [`LOCK_AFTER`] times in a row): from
    /// now on only that header is accepted, with the full 32-bit check.
    plain_locked: bool,
}

/// Exact matches in a row of identification 0 and DF after which a QP stops solving for
/// other values. A counting sender (rxe) passes 0 once per 65,536 datagrams, never 8 times
/// in a row.
pub(crate) const LOCK_AFTER: u8 = 8;

/// What a received datagram's ICRC seed depends on besides the path's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RxKey {
    len: usize,
    src_port: u16,
    ipv4: Ipv4Seen,
}

impl SeedCache {
    /// [`PathConfig::tx_icrc`], remembered.
    pub(crate) fn tx(&mut self, path: &PathConfig, transport_len: usize) -> Icrc {
        remembered(&mut self.tx, transport_len, || path.tx_icrc(transport_len))
    }

    /// Checks the ICRC of a datagram received on `path` over the headers it came with: its
    /// real source port and, for IPv4, the identification and DF as `meta` has them; when
    /// the link did not see those, first `roce`'s own (0, DF), then whichever values make the
    /// ICRC valid, unless the peer has sent (0, DF) [`LOCK_AFTER`] times in a row (then only
    /// that). The seed of the last key is remembered (a flow mostly repeats one).
    pub(crate) fn check_rx(
        &mut self,
        path: &PathConfig,
        meta: &RxMeta,
        bytes: &[u8],
    ) -> IcrcVerdict {
        let v6 = path.remote.is_ipv6();
        let key = RxKey {
            len: bytes.len(),
            src_port: meta.src.port(),
            ipv4: match meta.ipv4 {
                _ if v6 => Ipv4Seen::ROCE,
                Ipv4Seen::Unseen => Ipv4Seen::ROCE,
                seen => seen,
            },
        };
        let seed = match &self.rx {
            Some((k, s)) if *k == key => s.clone(),
            _ => {
                let s = seed(
                    path.remote,
                    path.local,
                    key.src_port,
                    path.local_port,
                    key.len,
                    key.ipv4,
                );
                self.rx.insert((key, s)).1.clone()
            }
        };
        let unseen = !v6 && meta.ipv4 == Ipv4Seen::Unseen;
        if seed.verify(bytes) {
            // Over IPv4 without the header: an exact match of the 32-bit ICRC with (0, DF)
            // is as strong as a check over the seen header.
            if unseen && !self.plain_locked {
                self.plain_streak += 1;
                self.plain_locked = self.plain_streak >= LOCK_AFTER;
            }
            return IcrcVerdict::Full;
        }
        if !unseen || self.plain_locked {
            return IcrcVerdict::Bad;
        }
        self.plain_streak = 0;
        let ip = Ipv4Fields {
            src: v4_octets(path.remote),
            dst: v4_octets(path.local),
            identification: 0,
            dont_fragment: false,
        };
        let udp = UdpFields {
            src_port: key.src_port,
            dst_port: path.local_port,
        };
        match roce_proto::icrc_solve::solve_ipv4_id_df(&ip, &udp, bytes) {
            Some(_) => IcrcVerdict::Solved,
            None => IcrcVerdict::Bad,
        }
    }
}

/// The seed in `slot` if it is for `len`; otherwise `make`'s, kept in `slot`.
fn remembered(slot: &mut Option<(usize, Icrc)>, len: usize, make: impl FnOnce() -> Icrc) -> Icrc {
    match slot {
        Some((l, seed)) if *l == len => seed.clone(),
        _ => slot.insert((len, make())).1.clone(),
    }
}

fn v4_octets(a: IpAddr) -> [u8; 4] {
    match a {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or([0; 4], |x| x.octets()),
    }
}

fn seed(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, len: usize, ipv4: Ipv4Seen) -> Icrc {
    let udp = UdpFields {
        src_port: sport,
        dst_port: dport,
    };
    match (src, dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Icrc::rocev2_ipv6_fields(&s.octets(), &d.octets(), &udp, len)
        }
        (s, d) => {
            let (identification, dont_fragment) = match ipv4 {
                Ipv4Seen::Seen {
                    identification,
                    dont_fragment,
                } => (identification, dont_fragment),
                Ipv4Seen::Unseen => (0, true),
            };
            Icrc::rocev2_ipv4_fields(
                &Ipv4Fields {
                    src: v4_octets(s),
                    dst: v4_octets(d),
                    identification,
                    dont_fragment,
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
        let meta = path.from_peer(Ecn::Ect0);
        // Repeats, changes and returns to a length, in both directions.
        for len in [32, 32, 84, 32, 120, 120, 84] {
            let mut pkt = vec![0x3cu8; len];
            assert_eq!(
                cache.tx(&path, len).compute(&pkt),
                path.tx_icrc(len).compute(&pkt),
                "tx, {len} B"
            );
            path.rx_icrc(len).fill(&mut pkt);
            assert_eq!(
                cache.check_rx(&path, &meta, &pkt),
                IcrcVerdict::Full,
                "{len} B"
            );
            pkt[20] ^= 1;
            assert_eq!(
                cache.check_rx(&path, &meta, &pkt),
                IcrcVerdict::Bad,
                "{len} B"
            );
        }
    }

    /// A datagram with another sender's IPv4 header: rxe's (DF, a counting identification)
    /// from source port 2, as a packet link sees it and as a UDP socket does.
    #[test]
    fn the_icrc_is_checked_over_the_header_that_came() {
        let path = ten_0_0_1();
        let mut cache = SeedCache::default();
        let len = 60;
        let mut pkt = vec![0x5au8; len];
        let v4 = |a: IpAddr| match a {
            IpAddr::V4(a) => a.octets(),
            IpAddr::V6(_) => unreachable!(),
        };
        Icrc::rocev2_ipv4_fields(
            &Ipv4Fields {
                src: v4(path.remote),
                dst: v4(path.local),
                identification: 14849,
                dont_fragment: true,
            },
            &UdpFields {
                src_port: 2,
                dst_port: ROCEV2_UDP_PORT,
            },
            len,
        )
        .fill(&mut pkt);
        let from = SocketAddr::new(path.remote, 2);
        let seen = RxMeta::new(from, path.local, Ecn::Ect0).with_ipv4(Ipv4Seen::Seen {
            identification: 14849,
            dont_fragment: true,
        });
        assert_eq!(cache.check_rx(&path, &seen, &pkt), IcrcVerdict::Full);
        let unseen = RxMeta::new(from, path.local, Ecn::Ect0);
        assert_eq!(cache.check_rx(&path, &unseen, &pkt), IcrcVerdict::Solved);
        // A counting sender passing identification 0 now and then does not lock the QP.
        let mut zero = vec![0x5au8; len];
        let from_peer = RxMeta::new(SocketAddr::new(path.remote, 2), path.local, Ecn::Ect0);
        seed(
            path.remote,
            path.local,
            2,
            path.local_port,
            len,
            Ipv4Seen::ROCE,
        )
        .fill(&mut zero);
        assert_eq!(cache.check_rx(&path, &from_peer, &zero), IcrcVerdict::Full);
        assert_eq!(cache.check_rx(&path, &unseen, &pkt), IcrcVerdict::Solved);
        let assumed = unseen.with_ipv4(Ipv4Seen::ROCE);
        assert_eq!(cache.check_rx(&path, &assumed, &pkt), IcrcVerdict::Bad);
        let other_port = RxMeta::new(SocketAddr::new(path.remote, 3), path.local, Ecn::Ect0);
        assert_eq!(cache.check_rx(&path, &other_port, &pkt), IcrcVerdict::Bad);
        pkt[30] ^= 0x10;
        assert_eq!(cache.check_rx(&path, &seen, &pkt), IcrcVerdict::Bad);
        assert_eq!(cache.check_rx(&path, &unseen, &pkt), IcrcVerdict::Bad);
        pkt[30] ^= 0x10;
        // A peer that writes (0, DF) every time locks the QP to that header: after
        // LOCK_AFTER exact matches, nothing else is solved for.
        for _ in 0..LOCK_AFTER {
            assert_eq!(cache.check_rx(&path, &from_peer, &zero), IcrcVerdict::Full);
        }
        assert_eq!(cache.check_rx(&path, &unseen, &pkt), IcrcVerdict::Bad);
        assert_eq!(cache.check_rx(&path, &from_peer, &zero), IcrcVerdict::Full);
    }
}
