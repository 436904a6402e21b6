//! An MRC or UET packet found in a captured frame, and where they are looked for.
use std::net::IpAddr;

use etherparse::{IpNumber, LaxIpSlice};
use roce_proto::mrc::{self, Body, MrcOpcode};
use roce_proto::uet::{self, Pds};
use roce_proto::{BthRepr, Ecn, Error, Frame};

use crate::link;

/// Which transport a packet is, for `--transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// RoCE (v2, v1 or native InfiniBand).
    Roce,
    /// OCP MRC.
    Mrc,
    /// Ultra Ethernet Transport.
    Uet,
}

impl Transport {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Roce => "roce",
            Self::Mrc => "mrc",
            Self::Uet => "uet",
        }
    }
}

/// Where MRC and UET are looked for, and how their disputed bits are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricOptions {
    /// UDP destination port of MRC (4971 in both public implementations).
    pub mrc_port: u16,
    /// Also read opcodes 0xC6-0xDE on UDP 4791 as MRC (they are any vendor's there).
    pub mrc_on_rocev2: bool,
    /// UDP destination port of UET (4793).
    pub uet_port: u16,
    /// MRC's BTH flag reading and TSETH rule.
    pub mrc: mrc::Reading,
    /// UET's CCX reading.
    pub uet: uet::Reading,
}

impl Default for FabricOptions {
    fn default() -> Self {
        Self {
            mrc_port: mrc::MRC_UDP_PORT,
            mrc_on_rocev2: false,
            uet_port: uet::UET_UDP_PORT,
            mrc: mrc::Reading::default(),
            uet: uet::Reading::default(),
        }
    }
}

/// Addresses and ports of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP ports (`None` for UET over IP).
    pub ports: Option<(u16, u16)>,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// DSCP.
    pub dscp: u8,
}

/// An MRC or UET packet found in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// MRC or UET.
    pub transport: Transport,
    /// Addresses.
    pub ends: Ends,
    /// MRC: the BTH.
    pub bth: Option<BthRepr>,
    /// MRC: its headers, or why they could not be read.
    pub mrc: Option<Result<mrc::Headers, Error>>,
    /// MRC: the ICRC check (`None` when the packet is cut).
    pub icrc_ok: Option<bool>,
    /// UET: its headers, or why they could not be read.
    pub uet: Option<Result<uet::Headers, Error>>,
    /// Bytes after the headers (for MRC without pad and ICRC).
    pub payload_len: usize,
    /// MRC's reading of the disputed bits (said in the output).
    pub reading: mrc::Reading,
}

impl Packet {
    /// Whether its headers could not all be read.
    pub fn malformed(&self) -> bool {
        matches!(self.mrc, Some(Err(_))) || matches!(self.uet, Some(Err(_)))
    }

    /// The entropy value: UDP source port (UET, MRC's UDP mode), or the entropy header.
    pub fn entropy(&self) -> Option<u32> {
        if let Some(Ok(h)) = &self.uet {
            if let Some(e) = h.entropy {
                return Some(u32::from(e.entropy));
            }
        }
        self.ends.ports.map(|(s, _)| u32::from(s))
    }

    /// The PDC (UET) or QP (MRC) identifiers it names: source and destination.
    pub fn pdcs(&self) -> [Option<u32>; 2] {
        match (&self.uet, &self.mrc, &self.bth) {
            (Some(Ok(h)), ..) => {
                let (s, d) = match h.pds {
                    Pds::Request(r, _) => (r.spdcid, r.dpdcid),
                    Pds::Ack(a, _) | Pds::AckCcx(a, _) => (a.spdcid, a.dpdcid),
                    Pds::Nack(n, _) => (n.spdcid, n.dpdcid),
                    Pds::Control(c) => (c.spdcid, c.dpdcid),
                    Pds::Rudi(_) | Pds::Uud(_) => return [None, None],
                };
                [Some(u32::from(s)), Some(u32::from(d))]
            }
            (_, Some(Ok(h)), Some(b)) => {
                let ids = match h.body {
                    Body::Sack(s, _) => Some((s.spdcid, s.dpdcid)),
                    Body::Nack(n) => Some((n.spdcid, n.dpdcid)),
                    Body::Probe(p) => Some((p.spdcid, p.dpdcid)),
                    _ => None,
                };
                match ids {
                    Some((s, d)) => [Some(u32::from(s)), Some(u32::from(d))],
                    None => [None, Some(b.dest_qp.0)],
                }
            }
            _ => [None, None],
        }
    }
}

/// The IP packet inside a captured frame of `link_type` (Ethernet with up to two VLAN
/// tags, Linux SLL/SLL2, BSD loopback, raw IP).
fn ip_of(link_type: u32, data: &[u8]) -> Option<&[u8]> {
    fn ether(mut t: u16, mut rest: &[u8]) -> Option<&[u8]> {
        for _ in 0..2 {
            if t == 0x8100 || t == 0x88a8 {
                t = u16::from_be_bytes([*rest.get(2)?, *rest.get(3)?]);
                rest = rest.get(4..)?;
            }
        }
        matches!(t, 0x0800 | 0x86dd).then_some(rest)
    }
    match link_type {
        link::ETHERNET => ether(
            u16::from_be_bytes([*data.get(12)?, *data.get(13)?]),
            data.get(14..)?,
        ),
        link::RAW | 12 | 14 | link::IPV4 | link::IPV6 => Some(data),
        link::LINUX_SLL => ether(
            u16::from_be_bytes([*data.get(14)?, *data.get(15)?]),
            data.get(16..)?,
        ),
        link::LINUX_SLL2 => ether(
            u16::from_be_bytes([*data.first()?, *data.get(1)?]),
            data.get(20..)?,
        ),
        link::NULL => data.get(4..),
        _ => None,
    }
}

/// The MRC packet of a frame to MRC's own UDP port (not RoCEv2's: there the RoCE parser
/// reads it first), found before the frame is read as RoCE: one parse instead of a RoCE
/// parse that fails at the port and [`classify`] after it. `None` for every other frame.
pub fn mrc_on_its_port(link_type: u32, data: &[u8], opts: &FabricOptions) -> Option<Packet> {
    if opts.mrc_port == roce_proto::ROCEV2_UDP_PORT {
        return None;
    }
    let ip = ip_of(link_type, data)?;
    let port = udp_port_peek(ip).filter(|&p| p == opts.mrc_port)?;
    mrc_packet(ip, port, opts)
}

/// Finds an MRC or UET packet in a captured frame (`None`: neither).
pub fn classify(link_type: u32, data: &[u8], opts: &FabricOptions) -> Option<Packet> {
    let ip = ip_of(link_type, data)?;
    // MRC is RoCEv2 on another port: the frame parser reads it in one pass (IP, UDP, BTH,
    // the ICRC's pseudo-header), once the port says so.
    if let Some(port) = udp_port_peek(ip).filter(|p| is_mrc_port(*p, ip, opts)) {
        return mrc_packet(ip, port, opts);
    }
    // Every packet that is not RoCE comes here: most are neither, and a look at two fields
    // says so without parsing them.
    if !maybe_uet(ip, opts) {
        return None;
    }
    let (sl, _) = LaxIpSlice::from_slice(ip).ok()?;
    let (src, dst, dscp, ecn) = match &sl {
        LaxIpSlice::Ipv4(v) => {
            let h = v.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                h.dcp().value(),
                Ecn::from_bits(h.ecn().value()),
            )
        }
        LaxIpSlice::Ipv6(v) => {
            let h = v.header();
            (
                IpAddr::V6(h.source_addr()),
                IpAddr::V6(h.destination_addr()),
                h.traffic_class() >> 2,
                Ecn::from_bits(h.traffic_class()),
            )
        }
    };
    let payload = sl.payload();
    let mut ends = Ends {
        src,
        dst,
        ports: None,
        ecn,
        dscp,
    };
    if payload.ip_number == IpNumber(uet::UET_IP_PROTO) {
        let h = uet::Headers::parse(payload.payload, true, opts.uet);
        return Some(uet_packet(ends, h, payload.payload.len()));
    }
    if payload.ip_number != IpNumber::UDP || payload.payload.len() < 8 {
        return None;
    }
    let u = payload.payload;
    let (sport, dport) = (
        u16::from_be_bytes([u[0], u[1]]),
        u16::from_be_bytes([u[2], u[3]]),
    );
    ends.ports = Some((sport, dport));
    let body = &u[8..];
    if dport == opts.uet_port {
        let h = uet::Headers::parse(body, false, opts.uet);
        return Some(uet_packet(ends, h, body.len()));
    }
    if is_mrc_port(dport, ip, opts) {
        return mrc_packet(ip, dport, opts);
    }
    None
}

/// The UDP destination port of an IPv4 packet, or of an IPv6 packet whose next header is
/// UDP (no extension headers): a look before any parse.
fn udp_port_peek(ip: &[u8]) -> Option<u16> {
    let at = match ip.first()? >> 4 {
        4 if *ip.get(9)? == 17 => usize::from(ip[0] & 0xf) * 4,
        6 if *ip.get(6)? == 17 => 40,
        _ => return None,
    };
    Some(u16::from_be_bytes([*ip.get(at + 2)?, *ip.get(at + 3)?]))
}

/// Whether `ip` may carry UET: IP protocol 253, or UDP to UET's port (IPv6 with extension
/// headers: the full parse finds what follows them).
fn maybe_uet(ip: &[u8], opts: &FabricOptions) -> bool {
    let (proto, l4, v6) = match ip.first().map(|b| b >> 4) {
        Some(4) => (ip.get(9).copied(), usize::from(ip[0] & 0xf) * 4, false),
        Some(6) => (ip.get(6).copied(), 40, true),
        _ => return false,
    };
    match proto {
        Some(uet::UET_IP_PROTO) => true,
        Some(17) => ip
            .get(l4 + 2..l4 + 4)
            .is_some_and(|p| u16::from_be_bytes([p[0], p[1]]) == opts.uet_port),
        // Hop-by-hop, routing, fragment and destination options.
        Some(0 | 43 | 44 | 60) => v6,
        _ => false,
    }
}

/// Whether a UDP datagram to `port` is MRC: MRC's port, or RoCEv2's with an MRC opcode when
/// the user says those are MRC.
fn is_mrc_port(port: u16, ip: &[u8], opts: &FabricOptions) -> bool {
    if port == opts.mrc_port {
        return true;
    }
    opts.mrc_on_rocev2 && port == roce_proto::ROCEV2_UDP_PORT && {
        // The BTH's opcode, after the IP header and UDP's 8 bytes.
        let at = match ip.first().map(|b| b >> 4) {
            Some(4) => usize::from(ip[0] & 0xf) * 4 + 8,
            _ => 48,
        };
        ip.get(at)
            .is_some_and(|&op| MrcOpcode::from_opcode(roce_proto::Opcode(op)).is_some())
    }
}

/// An MRC packet: the frame parser's IP/UDP/transport split, then MRC's headers.
fn mrc_packet(ip: &[u8], port: u16, opts: &FabricOptions) -> Option<Packet> {
    let f = Frame::parse_ip_port(ip, port).ok()?;
    let (i, u) = (f.ip?, f.udp?);
    let ends = Ends {
        src: i.src,
        dst: i.dst,
        ports: Some((u.src_port, u.dst_port)),
        ecn: i.ecn,
        dscp: i.dscp,
    };
    let bth = f.bth();
    let icrc_ok = if f.truncated {
        None
    } else {
        f.verify_icrc().ok()
    };
    let t = f.transport;
    let parsed = match (bth, t.get(..roce_proto::bth::HEADER_LEN)) {
        (Some(b), Some(_)) => match MrcOpcode::from_opcode(b.opcode) {
            Some(op) => mrc::Headers::parse(op, t[8], &t[roce_proto::bth::HEADER_LEN..], opts.mrc),
            None => Err(Error::Malformed {
                layer: roce_proto::Layer::Bth,
                reason: "not an MRC opcode",
            }),
        },
        _ => Err(Error::Truncated {
            layer: roce_proto::Layer::Bth,
            needed: roce_proto::bth::HEADER_LEN,
            got: t.len(),
        }),
    };
    // The payload, without pad and ICRC (what a cut packet holds of it, when cut).
    let used = roce_proto::bth::HEADER_LEN + parsed.as_ref().map_or(0, |h| h.len);
    let trailer = if f.truncated {
        0
    } else {
        roce_proto::ICRC_LEN + bth.map_or(0, |b| usize::from(b.pad_count))
    };
    Some(Packet {
        transport: Transport::Mrc,
        ends,
        bth,
        payload_len: t.len().saturating_sub(used + trailer),
        mrc: Some(parsed),
        icrc_ok,
        uet: None,
        reading: opts.mrc,
    })
}

fn uet_packet(ends: Ends, h: Result<uet::Headers, Error>, len: usize) -> Packet {
    let used = h.as_ref().map_or(0, |h| h.len);
    Packet {
        transport: Transport::Uet,
        ends,
        bth: None,
        mrc: None,
        icrc_ok: None,
        payload_len: len.saturating_sub(used),
        uet: Some(h),
        reading: mrc::Reading::default(),
    }
}
