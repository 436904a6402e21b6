//! Link types: where the IP header (or GRH, or LRH) starts in a captured packet, and the hand-off
//! to `roce_proto::Frame`.
use roce_proto::{Error, Frame, Layer};

/// LINKTYPE_NULL: BSD loopback, a 4-byte address family in the capturing host's byte order.
pub const NULL: u32 = 0;
/// LINKTYPE_ETHERNET.
pub const ETHERNET: u32 = 1;
/// LINKTYPE_RAW: raw IPv4 or IPv6.
pub const RAW: u32 = 101;
/// LINKTYPE_LINUX_SLL: Linux cooked capture v1.
pub const LINUX_SLL: u32 = 113;
/// LINKTYPE_ERF: Endace ERF records.
pub const ERF: u32 = 197;
/// LINKTYPE_IPV4: raw IPv4.
pub const IPV4: u32 = 228;
/// LINKTYPE_IPV6: raw IPv6.
pub const IPV6: u32 = 229;
/// LINKTYPE_LINUX_SLL2: Linux cooked capture v2.
pub const LINUX_SLL2: u32 = 276;

/// ERF record type of InfiniBand link frames.
pub const ERF_TYPE_INFINIBAND: u8 = 21;
/// ERF record type of Ethernet frames.
pub const ERF_TYPE_ETH: u8 = 2;

/// Short name of a link type, for verbose output.
pub fn name(link_type: u32) -> &'static str {
    match link_type {
        NULL => "BSD loopback",
        ETHERNET => "Ethernet",
        RAW | 12 | 14 => "raw IP",
        LINUX_SLL => "Linux SLL",
        ERF => "ERF",
        IPV4 => "raw IPv4",
        IPV6 => "raw IPv6",
        LINUX_SLL2 => "Linux SLL2",
        _ => "unknown",
    }
}

const fn not_roce(reason: &'static str) -> Error {
    Error::NotRoce { reason }
}

/// Parses a captured packet of `link_type` down to the RoCE transport packet.
///
/// `Err(Error::NotRoce)` for packets that are not RoCE (or of an unsupported link type);
/// other errors for packets cut or malformed before the transport (see [`is_roce_error`]).
pub fn parse(link_type: u32, data: &[u8]) -> Result<Frame<'_>, Error> {
    match link_type {
        ETHERNET => Frame::parse_ethernet(data),
        RAW | 12 | 14 | IPV4 | IPV6 => Frame::parse_ip(data),
        LINUX_SLL => {
            if data.len() < 16 {
                return Err(Error::Truncated {
                    layer: Layer::Ethernet,
                    needed: 16,
                    got: data.len(),
                });
            }
            let proto = u16::from_be_bytes([data[14], data[15]]);
            Frame::parse_ether_type(proto, &data[16..])
        }
        LINUX_SLL2 => {
            if data.len() < 20 {
                return Err(Error::Truncated {
                    layer: Layer::Ethernet,
                    needed: 20,
                    got: data.len(),
                });
            }
            let proto = u16::from_be_bytes([data[0], data[1]]);
            Frame::parse_ether_type(proto, &data[20..])
        }
        NULL => {
            if data.len() < 4 {
                return Err(Error::Truncated {
                    layer: Layer::Ethernet,
                    needed: 4,
                    got: data.len(),
                });
            }
            let le = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
            let family = if le < 0x1_0000 { le } else { le.swap_bytes() };
            match family {
                // AF_INET; AF_INET6 on Linux, the BSDs, macOS/Darwin.
                2 | 10 | 24 | 28 | 30 => Frame::parse_ip(&data[4..]),
                _ => Err(not_roce("loopback address family is not IP")),
            }
        }
        ERF => parse_erf(data),
        _ => Err(not_roce("unsupported link type")),
    }
}

/// Parses an ERF record: a 16-byte header (type at byte 8; bit 7 = an extension header
/// follows), 8-byte extension headers chained the same way, then the frame.
fn parse_erf(data: &[u8]) -> Result<Frame<'_>, Error> {
    if data.len() < 16 {
        return Err(Error::Truncated {
            layer: Layer::Ethernet,
            needed: 16,
            got: data.len(),
        });
    }
    let ty = data[8];
    let mut at = 16;
    let mut more = ty & 0x80 != 0;
    while more {
        if data.len() < at + 8 {
            return Err(Error::Truncated {
                layer: Layer::Ethernet,
                needed: at + 8,
                got: data.len(),
            });
        }
        more = data[at] & 0x80 != 0;
        at += 8;
    }
    match ty & 0x7f {
        ERF_TYPE_INFINIBAND => Frame::parse_ib(&data[at..]),
        // Ethernet records carry 2 bytes of offset/pad before the frame.
        ERF_TYPE_ETH if data.len() >= at + 2 => Frame::parse_ethernet(&data[at + 2..]),
        _ => Err(not_roce(
            "ERF record type is neither InfiniBand nor Ethernet",
        )),
    }
}

/// `true` when a parse error means "a RoCE packet, but malformed or cut" rather than "not
/// (recognisably) RoCE": the error is in a layer only RoCE has, or in UDP after port 4791
/// was seen.
pub fn is_roce_error(e: &Error) -> bool {
    match e {
        Error::NotRoce { .. } => false,
        Error::Malformed {
            layer: Layer::Udp, ..
        } => true,
        _ => !matches!(
            e.layer(),
            Some(Layer::Ethernet | Layer::Vlan | Layer::Ipv4 | Layer::Ipv6 | Layer::Udp)
        ),
    }
}

/// The source MAC and fields of a MAC Control frame (PAUSE, PFC: EtherType 0x8808, after up
/// to two VLAN tags) on an Ethernet link.
pub fn mac_control(
    link_type: u32,
    data: &[u8],
) -> Option<([u8; 6], roce_proto::mac_control::Repr)> {
    if link_type != ETHERNET || data.len() < 14 {
        return None;
    }
    let mut at = 12;
    for _ in 0..2 {
        let t = u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]);
        if t == 0x8100 || t == 0x88a8 {
            at += 4;
        }
    }
    let t = u16::from_be_bytes([*data.get(at)?, *data.get(at + 1)?]);
    if t != roce_proto::mac_control::ETHERTYPE {
        return None;
    }
    let mut src = [0u8; 6];
    src.copy_from_slice(&data[6..12]);
    let repr = roce_proto::mac_control::Repr::parse(data.get(at + 2..)?).ok()?;
    Some((src, repr))
}

/// A TCP segment with FIN or RST set: who ended which connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpEnd {
    /// Sender address.
    pub src: std::net::IpAddr,
    /// Receiver address.
    pub dst: std::net::IpAddr,
    /// Sender port.
    pub sport: u16,
    /// Receiver port.
    pub dport: u16,
    /// RST (else FIN).
    pub rst: bool,
}

/// A TCP segment: its addresses, ports, FIN/RST and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    /// Sender address.
    pub src: std::net::IpAddr,
    /// Receiver address.
    pub dst: std::net::IpAddr,
    /// Sender port.
    pub sport: u16,
    /// Receiver port.
    pub dport: u16,
    /// FIN set.
    pub fin: bool,
    /// RST set.
    pub rst: bool,
    /// The payload as captured (cut by the snap length, it is shorter than sent).
    pub payload: &'a [u8],
}

/// A TCP segment over IPv4 or IPv6 (Ethernet with up to two VLAN tags, or raw IP), read
/// leniently: a segment cut by the snap length still counts when its TCP header is whole.
pub fn tcp_segment(link_type: u32, data: &[u8]) -> Option<TcpSegment<'_>> {
    use etherparse::{LaxNetSlice, LaxSlicedPacket, TransportSlice};
    let p = match link_type {
        ETHERNET => LaxSlicedPacket::from_ethernet(data).ok()?,
        RAW | 12 | 14 | IPV4 | IPV6 => LaxSlicedPacket::from_ip(data).ok()?,
        _ => return None,
    };
    let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
        return None;
    };
    let (src, dst) = match p.net.as_ref()? {
        LaxNetSlice::Ipv4(i) => (
            i.header().source_addr().into(),
            i.header().destination_addr().into(),
        ),
        LaxNetSlice::Ipv6(i) => (
            i.header().source_addr().into(),
            i.header().destination_addr().into(),
        ),
        LaxNetSlice::Arp(_) => return None,
    };
    Some(TcpSegment {
        src,
        dst,
        sport: tcp.source_port(),
        dport: tcp.destination_port(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        payload: tcp.payload(),
    })
}

/// The FIN or RST of a TCP segment ([`tcp_segment`]).
pub fn tcp_end(link_type: u32, data: &[u8]) -> Option<TcpEnd> {
    let t = tcp_segment(link_type, data)?;
    (t.fin || t.rst).then_some(TcpEnd {
        src: t.src,
        dst: t.dst,
        sport: t.sport,
        dport: t.dport,
        rst: t.rst,
    })
}
