//! Whole frames: Ethernet (0, 1 or 2 VLAN tags) carrying RoCEv2 (IPv4 with or without options,
//! or IPv6; UDP destination port 4791) or RoCE v1 (EtherType 0x8915, GRH), and native IB
//! (LRH) for old captures. `etherparse` parses Ethernet, VLAN, IP and UDP underneath.
//!
//! Parsing never fails on a frame that a capture cut short (snap length): the [`Frame`] says
//! `truncated`, exposes the headers that are there, and [`Frame::packet`] reports the layer
//! that was cut. [`FrameBuilder`] builds Eth/(VLAN)/IPv4|IPv6/UDP/RoCEv2 frames with correct IP
//! checksum, UDP length, UDP checksum (zero or computed) and ICRC.
use crate::error::need;
use crate::icrc::{Icrc, Ipv4Fields, Pseudo, UdpFields};
use crate::{bth, grh, lrh, BthRepr, Ecn, Error, Layer, PacketRepr, Result, RocePacket, ICRC_LEN};
use crate::{ROCEV1_ETHERTYPE, ROCEV2_UDP_PORT};
use core::net::IpAddr;
use etherparse::err::ip::LaxHeaderSliceError;
use etherparse::{
    Ethernet2HeaderSlice, IpNumber, LaxIpSlice, SingleVlanHeaderSlice, UdpHeaderSlice,
};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherTypes (TPIDs) recognised as VLAN tags: 802.1Q, 802.1ad, and the old QinQ 0x9100.
pub const VLAN_TPIDS: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// Which RoCE (or IB) encapsulation a frame uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoceVersion {
    /// RoCEv2: IP/UDP, destination port 4791.
    V2,
    /// RoCE v1: EtherType 0x8915, GRH.
    V1,
    /// Native InfiniBand: LRH (optionally GRH).
    Ib,
}

impl RoceVersion {
    /// `rocev2`, `rocev1` or `ib`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::V2 => "rocev2",
            Self::V1 => "rocev1",
            Self::Ib => "ib",
        }
    }
}

/// One VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Tag protocol identifier (0x8100, 0x88a8 or 0x9100).
    pub tpid: u16,
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

/// The Ethernet header and its VLAN tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Link {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// Up to two VLAN tags, outer first.
    pub vlans: [Option<VlanTag>; 2],
    /// The EtherType after the tags.
    pub ether_type: u16,
}

/// The IP header of a RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo<'a> {
    /// The exact header bytes (IPv4 with its options; the fixed 40 bytes of IPv6).
    pub header: &'a [u8],
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 identification (0 for IPv6).
    pub identification: u16,
    /// IPv4 don't-fragment flag (false for IPv6).
    pub dont_fragment: bool,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
}

impl IpInfo<'_> {
    /// `true` for IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.src.is_ipv6()
    }
}

/// The UDP header of a RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpInfo<'a> {
    /// The 8 header bytes.
    pub header: &'a [u8],
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Length field (header + payload).
    pub length: u16,
    /// Checksum field (0 = none, as RoCE NICs send).
    pub checksum: u16,
}

/// A parsed frame carrying an InfiniBand transport packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Encapsulation.
    pub version: RoceVersion,
    /// Ethernet header, when parsing started at Ethernet.
    pub link: Option<Link>,
    /// IP header (RoCEv2).
    pub ip: Option<IpInfo<'a>>,
    /// UDP header (RoCEv2).
    pub udp: Option<UdpInfo<'a>>,
    /// GRH bytes (RoCE v1, native IB with LNH 3).
    pub grh: Option<&'a [u8]>,
    /// LRH bytes (native IB).
    pub lrh: Option<&'a [u8]>,
    /// The transport bytes present: BTH through ICRC (fewer when `truncated`).
    pub transport: &'a [u8],
    /// Length of the transport packet the outer headers claim.
    pub claimed_len: usize,
    /// `true` when the capture holds fewer bytes than the outer headers claim.
    pub truncated: bool,
}

fn len_err(layer: Layer, e: &etherparse::err::LenError) -> Error {
    Error::Truncated {
        layer,
        needed: e.required_len,
        got: e.len,
    }
}

impl<'a> Frame<'a> {
    /// Parses an Ethernet II frame (without FCS).
    pub fn parse_ethernet(bytes: &'a [u8]) -> Result<Self> {
        let eth =
            Ethernet2HeaderSlice::from_slice(bytes).map_err(|e| len_err(Layer::Ethernet, &e))?;
        let mut link = Link {
            dst: eth.destination(),
            src: eth.source(),
            vlans: [None, None],
            ether_type: eth.ether_type().0,
        };
        let mut rest = &bytes[eth.slice().len()..];
        for slot in 0..2 {
            if !VLAN_TPIDS.contains(&link.ether_type) {
                break;
            }
            let tag =
                SingleVlanHeaderSlice::from_slice(rest).map_err(|e| len_err(Layer::Vlan, &e))?;
            link.vlans[slot] = Some(VlanTag {
                tpid: link.ether_type,
                pcp: tag.priority_code_point().value(),
                dei: tag.drop_eligible_indicator(),
                vid: tag.vlan_identifier().value(),
            });
            link.ether_type = tag.ether_type().0;
            rest = &rest[tag.slice().len()..];
        }
        let mut frame = Self::parse_ether_type(link.ether_type, rest)?;
        frame.link = Some(link);
        Ok(frame)
    }

    /// Parses what follows an EtherType (for link layers such as Linux SLL that give one).
    pub fn parse_ether_type(ether_type: u16, payload: &'a [u8]) -> Result<Self> {
        match ether_type {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Self::parse_ip(payload),
            ROCEV1_ETHERTYPE => Self::parse_grh(payload),
            t if VLAN_TPIDS.contains(&t) => Err(Error::NotRoce {
                reason: "more than two VLAN tags",
            }),
            _ => Err(Error::NotRoce {
                reason: "EtherType is not IPv4, IPv6 or RoCE v1",
            }),
        }
    }

    /// Parses an IPv4 or IPv6 packet carrying UDP to port 4791.
    pub fn parse_ip(bytes: &'a [u8]) -> Result<Self> {
        Self::parse_ip_port(bytes, ROCEV2_UDP_PORT)
    }

    /// Like [`Frame::parse_ip`] with another UDP destination port taken as RoCEv2.
    pub fn parse_ip_port(bytes: &'a [u8], port: u16) -> Result<Self> {
        let (ip, _ext_err) = LaxIpSlice::from_slice(bytes).map_err(|e| match e {
            LaxHeaderSliceError::Len(l) => {
                let layer = if bytes.first().map(|b| b >> 4) == Some(6) {
                    Layer::Ipv6
                } else {
                    Layer::Ipv4
                };
                len_err(layer, &l)
            }
            LaxHeaderSliceError::Content(
                etherparse::err::ip::HeaderError::UnsupportedIpVersion { .. },
            ) => Error::NotRoce {
                reason: "IP version is neither 4 nor 6",
            },
            LaxHeaderSliceError::Content(_) => Error::Malformed {
                layer: Layer::Ipv4,
                reason: "IHL smaller than 5",
            },
        })?;
        let info = match &ip {
            LaxIpSlice::Ipv4(v4) => {
                let h = v4.header();
                if h.more_fragments() || h.fragments_offset().value() != 0 {
                    return Err(Error::Malformed {
                        layer: Layer::Ipv4,
                        reason: "fragmented datagram",
                    });
                }
                IpInfo {
                    header: &bytes[..h.slice().len()],
                    src: IpAddr::V4(h.source_addr()),
                    dst: IpAddr::V4(h.destination_addr()),
                    dscp: h.dcp().value(),
                    ecn: Ecn::from_bits(h.ecn().value()),
                    ttl: h.ttl(),
                    identification: h.identification(),
                    dont_fragment: h.dont_fragment(),
                    flow_label: 0,
                }
            }
            LaxIpSlice::Ipv6(v6) => {
                let h = v6.header();
                if v6.is_payload_fragmented() {
                    return Err(Error::Malformed {
                        layer: Layer::Ipv6,
                        reason: "fragmented datagram",
                    });
                }
                IpInfo {
                    header: &bytes[..h.slice().len()],
                    src: IpAddr::V6(h.source_addr()),
                    dst: IpAddr::V6(h.destination_addr()),
                    dscp: h.traffic_class() >> 2,
                    ecn: Ecn::from_bits(h.traffic_class()),
                    ttl: h.hop_limit(),
                    identification: 0,
                    dont_fragment: false,
                    flow_label: h.flow_label().value(),
                }
            }
        };
        let payload = ip.payload();
        if payload.ip_number != IpNumber::UDP {
            return Err(Error::NotRoce {
                reason: "IP payload is not UDP",
            });
        }
        let udp =
            UdpHeaderSlice::from_slice(payload.payload).map_err(|e| len_err(Layer::Udp, &e))?;
        if udp.destination_port() != port {
            return Err(Error::NotRoce {
                reason: "UDP destination port is not 4791",
            });
        }
        let length = udp.length();
        if length < 8 {
            return Err(Error::Malformed {
                layer: Layer::Udp,
                reason: "length below 8",
            });
        }
        let avail = &payload.payload[8..];
        let claimed = usize::from(length) - 8;
        let truncated = claimed > avail.len();
        if truncated && !payload.incomplete {
            return Err(Error::Malformed {
                layer: Layer::Udp,
                reason: "length exceeds the IP payload",
            });
        }
        Ok(Self {
            version: RoceVersion::V2,
            link: None,
            ip: Some(info),
            udp: Some(UdpInfo {
                header: udp.slice(),
                src_port: udp.source_port(),
                dst_port: udp.destination_port(),
                length,
                checksum: udp.checksum(),
            }),
            grh: None,
            lrh: None,
            transport: &avail[..claimed.min(avail.len())],
            claimed_len: claimed,
            truncated,
        })
    }

    /// Parses a RoCE v1 packet: GRH, then the transport packet.
    pub fn parse_grh(bytes: &'a [u8]) -> Result<Self> {
        need(Layer::Grh, bytes, grh::HEADER_LEN)?;
        let g = grh::Packet::new_unchecked(&bytes[..grh::HEADER_LEN]);
        if g.ip_ver() != 6 {
            return Err(Error::Malformed {
                layer: Layer::Grh,
                reason: "IP version is not 6",
            });
        }
        if g.nxt_hdr() != grh::NXT_HDR_IBA {
            return Err(Error::NotRoce {
                reason: "GRH next header is not an IBA transport",
            });
        }
        let avail = &bytes[grh::HEADER_LEN..];
        let claimed = usize::from(g.pay_len());
        Ok(Self {
            version: RoceVersion::V1,
            link: None,
            ip: None,
            udp: None,
            grh: Some(&bytes[..grh::HEADER_LEN]),
            lrh: None,
            transport: &avail[..claimed.min(avail.len())],
            claimed_len: claimed,
            truncated: claimed > avail.len(),
        })
    }

    /// Parses a native InfiniBand packet: LRH, optional GRH, transport, VCRC.
    pub fn parse_ib(bytes: &'a [u8]) -> Result<Self> {
        let l = lrh::Packet::new_checked(bytes)?;
        let lnh = l.lnh();
        if lnh != lrh::lnh::IBA_LOCAL && lnh != lrh::lnh::IBA_GLOBAL {
            return Err(Error::NotRoce {
                reason: "LRH does not announce an IBA transport",
            });
        }
        let total = usize::from(l.pkt_len()) * 4;
        let mut start = lrh::HEADER_LEN;
        let mut grh_bytes = None;
        if lnh == lrh::lnh::IBA_GLOBAL {
            need(Layer::Grh, bytes, start + grh::HEADER_LEN)?;
            grh_bytes = Some(&bytes[start..start + grh::HEADER_LEN]);
            start += grh::HEADER_LEN;
        }
        if total < start {
            return Err(Error::Malformed {
                layer: Layer::Lrh,
                reason: "PktLen shorter than the headers",
            });
        }
        let end = total.min(bytes.len());
        Ok(Self {
            version: RoceVersion::Ib,
            link: None,
            ip: None,
            udp: None,
            grh: grh_bytes,
            lrh: Some(&bytes[..lrh::HEADER_LEN]),
            transport: &bytes[start..end],
            claimed_len: total - start,
            truncated: total > bytes.len(),
        })
    }

    /// The ECN codepoint (IP TOS / traffic class, or GRH traffic class).
    pub fn ecn(&self) -> Ecn {
        if let Some(ip) = &self.ip {
            ip.ecn
        } else if let Some(g) = self.grh {
            Ecn::from_bits(grh::Packet::new_unchecked(g).traffic_class())
        } else {
            Ecn::NotEct
        }
    }

    /// The BTH, when at least its 12 bytes are present (even in a truncated frame).
    pub fn bth(&self) -> Option<BthRepr> {
        bth::Packet::new_checked(self.transport)
            .ok()
            .and_then(|p| BthRepr::parse(&p).ok())
    }

    /// The transport packet with its structural checks; a frame cut by the capture reports
    /// the header that was cut, or the payload when every header is there.
    pub fn packet(&self) -> Result<RocePacket<&'a [u8]>> {
        if self.truncated {
            need(Layer::Bth, self.transport, bth::HEADER_LEN)?;
            let op = crate::Opcode(self.transport[0]);
            let hl = op.header_len();
            if self.transport.len() < hl {
                // Let the packet layer name the extended header that is cut.
                RocePacket::new_checked(self.transport)?;
            }
            let layer = if self.claimed_len < hl + ICRC_LEN {
                Layer::Icrc
            } else {
                Layer::Payload
            };
            return Err(Error::Truncated {
                layer,
                needed: self.claimed_len,
                got: self.transport.len(),
            });
        }
        RocePacket::new_checked(self.transport)
    }

    /// The ICRC pseudo-header state for this frame's encapsulation.
    pub fn icrc_seed(&self) -> Result<Icrc> {
        Ok(self.pseudo_header()?.finish())
    }

    /// The ICRC pseudo-header of this frame's encapsulation, not hashed yet.
    fn pseudo_header(&self) -> Result<Pseudo> {
        match self.version {
            RoceVersion::V2 => {
                let (ip, udp) = match (&self.ip, &self.udp) {
                    (Some(ip), Some(udp)) => (ip, udp),
                    _ => {
                        return Err(Error::Malformed {
                            layer: Layer::Udp,
                            reason: "RoCEv2 frame without IP/UDP",
                        })
                    }
                };
                if ip.is_ipv6() {
                    Pseudo::rocev2_ipv6(ip.header, udp.header)
                } else {
                    Pseudo::rocev2_ipv4(ip.header, udp.header)
                }
            }
            RoceVersion::V1 => Pseudo::grh(self.grh.unwrap_or(&[])),
            RoceVersion::Ib => match (self.grh, self.lrh) {
                (Some(g), _) => Pseudo::grh(g),
                (None, Some(l)) => Pseudo::lrh(l),
                (None, None) => Err(Error::Malformed {
                    layer: Layer::Lrh,
                    reason: "IB frame without LRH",
                }),
            },
        }
    }

    /// `true` when the ICRC in the last four transport bytes is the one computed over this
    /// frame's pseudo-header and the transport bytes before it (IBTA Vol 1 §7.8.1; Annex
    /// A17.4.4 for RoCEv2), whatever they parse as (a DC packet's bytes included):
    /// `self.icrc_seed()?.verify(self.transport)`, in less time. `Err` when the frame has no
    /// headers to seed it from. [`Frame::verify_icrc`] also wants a whole packet.
    pub fn icrc_matches(&self) -> Result<bool> {
        Ok(self.pseudo_header()?.verify(self.transport))
    }

    /// The ICRC computed over this frame's pseudo-header and transport packet.
    pub fn computed_icrc(&self) -> Result<u32> {
        let p = self.packet()?;
        Ok(self.icrc_seed()?.compute(p.as_bytes()))
    }

    /// `Ok(true)` when the stored ICRC matches; `Err` when the packet is not whole.
    pub fn verify_icrc(&self) -> Result<bool> {
        // The packet's bytes are the transport's.
        self.packet()?;
        self.icrc_matches()
    }
}

/// IP-layer parameters of a frame to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpParams {
    /// IPv4 without options.
    V4 {
        /// Source address.
        src: [u8; 4],
        /// Destination address.
        dst: [u8; 4],
        /// DSCP (6 bits).
        dscp: u8,
        /// ECN codepoint.
        ecn: Ecn,
        /// Time to live.
        ttl: u8,
        /// Identification.
        identification: u16,
        /// Don't-fragment flag (RoCE sets it).
        dont_fragment: bool,
    },
    /// IPv6 without extension headers.
    V6 {
        /// Source address.
        src: [u8; 16],
        /// Destination address.
        dst: [u8; 16],
        /// Traffic class (DSCP << 2 | ECN).
        traffic_class: u8,
        /// Flow label (20 bits).
        flow_label: u32,
        /// Hop limit.
        hop_limit: u8,
    },
}

/// Builds Ethernet / (VLAN) / IPv4|IPv6 / UDP / RoCEv2 frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameBuilder {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// VLAN tags, outer first.
    pub vlans: [Option<VlanTag>; 2],
    /// IP header parameters.
    pub ip: IpParams,
    /// UDP source port (per-QP entropy).
    pub src_port: u16,
    /// UDP destination port (normally 4791).
    pub dst_port: u16,
    /// Compute the UDP checksum (over the ICRC too) instead of sending 0.
    pub udp_checksum: bool,
}

impl FrameBuilder {
    /// A builder for IPv4 with the defaults RoCE NICs use: DF set, identification 0, TTL 64,
    /// ECN ECT(0), no VLAN, UDP checksum 0, destination port 4791.
    pub fn ipv4(src: [u8; 4], dst: [u8; 4], src_port: u16) -> Self {
        Self {
            dst_mac: [0x02, 0, 0, 0, 0, 2],
            src_mac: [0x02, 0, 0, 0, 0, 1],
            vlans: [None, None],
            ip: IpParams::V4 {
                src,
                dst,
                dscp: 0,
                ecn: Ecn::Ect0,
                ttl: 64,
                identification: 0,
                dont_fragment: true,
            },
            src_port,
            dst_port: ROCEV2_UDP_PORT,
            udp_checksum: false,
        }
    }

    /// A builder for IPv6 (traffic class ECT(0), hop limit 64, flow label 0).
    pub fn ipv6(src: [u8; 16], dst: [u8; 16], src_port: u16) -> Self {
        Self {
            ip: IpParams::V6 {
                src,
                dst,
                traffic_class: Ecn::Ect0.bits(),
                flow_label: 0,
                hop_limit: 64,
            },
            ..Self::ipv4([0; 4], [0; 4], src_port)
        }
    }

    fn link_len(&self) -> usize {
        14 + 4 * self.vlans.iter().flatten().count()
    }

    fn ip_len(&self) -> usize {
        match self.ip {
            IpParams::V4 { .. } => 20,
            IpParams::V6 { .. } => 40,
        }
    }

    /// Length of the whole frame for `packet`.
    pub fn frame_len(&self, packet: &PacketRepr<'_>) -> usize {
        self.frame_len_for(packet.buffer_len())
    }

    /// Writes the frame into `buf` and returns its length.
    pub fn build(&self, packet: &PacketRepr<'_>, buf: &mut [u8]) -> Result<usize> {
        packet.check()?;
        let (ip_at, udp_at, at, total) = self.write_headers(packet.buffer_len(), buf)?;
        // Transport packet and ICRC (over the exact headers just written).
        let (head, transport) = buf[..total].split_at_mut(at);
        let seed = match self.ip {
            IpParams::V4 { .. } => Icrc::rocev2_ipv4(&head[ip_at..udp_at], &head[udp_at..]),
            IpParams::V6 { .. } => Icrc::rocev2_ipv6(&head[ip_at..udp_at], &head[udp_at..]),
        }?;
        packet.emit_with_icrc(transport, &seed)?;
        self.fill_udp_checksum(&mut buf[..total], udp_at, at)?;
        Ok(total)
    }

    /// Writes Ethernet/IP/UDP headers around `transport` bytes that already hold their ICRC
    /// (a datagram a socket sent or received), for a capture. Returns the frame length.
    pub fn wrap(&self, transport: &[u8], buf: &mut [u8]) -> Result<usize> {
        let (_, udp_at, at, total) = self.write_headers(transport.len(), buf)?;
        buf[at..total].copy_from_slice(transport);
        self.fill_udp_checksum(&mut buf[..total], udp_at, at)?;
        Ok(total)
    }

    /// Length of a frame around `transport_len` transport bytes.
    pub fn frame_len_for(&self, transport_len: usize) -> usize {
        self.link_len() + self.ip_len() + 8 + transport_len
    }

    /// Ethernet, VLAN, IP and UDP headers (UDP checksum 0) for a transport packet of
    /// `transport_len` bytes. Returns (IP offset, UDP offset, transport offset, frame length).
    fn write_headers(
        &self,
        transport_len: usize,
        buf: &mut [u8],
    ) -> Result<(usize, usize, usize, usize)> {
        let total = self.frame_len_for(transport_len);
        if buf.len() < total {
            return Err(Error::Truncated {
                layer: Layer::Buffer,
                needed: total,
                got: buf.len(),
            });
        }
        let udp_len = 8 + transport_len;
        if udp_len > usize::from(u16::MAX) - self.ip_len() {
            return Err(Error::Malformed {
                layer: Layer::Udp,
                reason: "datagram longer than 65535 bytes",
            });
        }
        let buf = &mut buf[..total];
        // Ethernet and VLAN tags.
        buf[0..6].copy_from_slice(&self.dst_mac);
        buf[6..12].copy_from_slice(&self.src_mac);
        let mut at = 12;
        for tag in self.vlans.iter().flatten() {
            buf[at..at + 2].copy_from_slice(&tag.tpid.to_be_bytes());
            let tci =
                (u16::from(tag.pcp & 7) << 13) | (u16::from(tag.dei) << 12) | (tag.vid & 0xfff);
            buf[at + 2..at + 4].copy_from_slice(&tci.to_be_bytes());
            at += 4;
        }
        let ether_type = match self.ip {
            IpParams::V4 { .. } => ETHERTYPE_IPV4,
            IpParams::V6 { .. } => ETHERTYPE_IPV6,
        };
        buf[at..at + 2].copy_from_slice(&ether_type.to_be_bytes());
        at += 2;
        let ip_at = at;
        // IP header.
        match self.ip {
            IpParams::V4 {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                identification,
                dont_fragment,
            } => {
                let mut h =
                    etherparse::Ipv4Header::new(udp_len as u16, ttl, IpNumber::UDP, src, dst)
                        .map_err(|_| Error::Malformed {
                            layer: Layer::Ipv4,
                            reason: "total length too big",
                        })?;
                h.dscp =
                    etherparse::IpDscp::try_new(dscp & 0x3f).unwrap_or(etherparse::IpDscp::ZERO);
                h.ecn = etherparse::IpEcn::try_new(ecn.bits()).unwrap_or(etherparse::IpEcn::ZERO);
                h.identification = identification;
                h.dont_fragment = dont_fragment;
                h.header_checksum = h.calc_header_checksum();
                buf[at..at + 20].copy_from_slice(&h.to_bytes());
            }
            IpParams::V6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            } => {
                let h = etherparse::Ipv6Header {
                    traffic_class,
                    flow_label: etherparse::Ipv6FlowLabel::try_new(flow_label & 0xf_ffff)
                        .unwrap_or(etherparse::Ipv6FlowLabel::ZERO),
                    payload_length: udp_len as u16,
                    next_header: IpNumber::UDP,
                    hop_limit,
                    source: src,
                    destination: dst,
                };
                buf[at..at + 40].copy_from_slice(&h.to_bytes());
            }
        }
        at += self.ip_len();
        let udp_at = at;
        buf[at..at + 2].copy_from_slice(&self.src_port.to_be_bytes());
        buf[at + 2..at + 4].copy_from_slice(&self.dst_port.to_be_bytes());
        buf[at + 4..at + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        buf[at + 6..at + 8].fill(0);
        at += 8;
        Ok((ip_at, udp_at, at, total))
    }

    fn fill_udp_checksum(&self, buf: &mut [u8], udp_at: usize, at: usize) -> Result<()> {
        if !self.udp_checksum {
            return Ok(());
        }
        let (head, transport) = buf.split_at_mut(at);
        let udp = etherparse::UdpHeader {
            source_port: self.src_port,
            destination_port: self.dst_port,
            length: (8 + transport.len()) as u16,
            checksum: 0,
        };
        let sum = match self.ip {
            IpParams::V4 { src, dst, .. } => udp.calc_checksum_ipv4_raw(src, dst, transport),
            IpParams::V6 { src, dst, .. } => udp.calc_checksum_ipv6_raw(src, dst, transport),
        }
        .map_err(|_| Error::Malformed {
            layer: Layer::Udp,
            reason: "datagram too long for a checksum",
        })?;
        head[udp_at + 6..udp_at + 8].copy_from_slice(&sum.to_be_bytes());
        Ok(())
    }

    /// The ICRC seed a socket sender would use for this builder's addresses and ports
    /// (IPv4: the identification and DF of [`IpParams::V4`]; no options).
    pub fn icrc_seed(&self, transport_len: usize) -> Icrc {
        let udp = UdpFields {
            src_port: self.src_port,
            dst_port: self.dst_port,
        };
        match self.ip {
            IpParams::V4 {
                src,
                dst,
                identification,
                dont_fragment,
                ..
            } => Icrc::rocev2_ipv4_fields(
                &Ipv4Fields {
                    src,
                    dst,
                    identification,
                    dont_fragment,
                },
                &udp,
                transport_len,
            ),
            IpParams::V6 { src, dst, .. } => {
                Icrc::rocev2_ipv6_fields(&src, &dst, &udp, transport_len)
            }
        }
    }
}
