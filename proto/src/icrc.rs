//! The invariant CRC (IBTA Vol 1 §7.8.1; for RoCEv2 the pseudo-header of Annex A17.4.4).
//!
//! The ICRC is a standard CRC-32 (the Ethernet/zlib one; `crc32fast` underneath) over a
//! pseudo-packet whose variant fields are replaced by ones:
//!
//! | RoCE flavour | pseudo-header before the BTH |
//! |---|---|
//! | RoCEv2 / IPv4 | 8 × `FF`, the IPv4 header with TOS, TTL and header checksum masked, the UDP header with its checksum masked |
//! | RoCEv2 / IPv6 | 8 × `FF`, the IPv6 header with traffic class, flow label and hop limit masked, the UDP header with its checksum masked |
//! | RoCE v1 (GRH) | 8 × `FF`, the GRH with traffic class, flow label and hop limit masked |
//! | native IB, LRH+GRH | 8 × `FF` for the LRH, then the GRH masked as above |
//! | native IB, LRH only | the LRH with its VL nibble masked |
//!
//! then the BTH with byte 4 (FECN, BECN, Resv6a) masked, and every following byte up to the
//! ICRC unmasked. The CRC value goes on the wire least-significant byte first.
//!
//! IPv4 options, when present, are covered as they are (rxe assumes a 20-byte header; we
//! hash what the header holds). IPv6 extension headers are not covered: the pseudo-header is
//! the fixed 40-byte IPv6 header.
//!
//! An [`Icrc`] holds the CRC state after the pseudo-header, so one seed can be cloned for every
//! packet of a flow whose IP/UDP headers do not change ([`Icrc::clone`] is a few words).
use crate::error::need;
use crate::{bth, Error, Layer, Result, ICRC_LEN};
use crc32fast::Hasher;

const FF8: [u8; 8] = [0xff; 8];
/// Largest pseudo-header: 8 + 60 (IPv4 with options) + 8 (UDP).
const MAX_PSEUDO: usize = 8 + 60 + 8;

/// CRC state after an ICRC pseudo-header, ready to take the transport bytes.
#[derive(Clone)]
pub struct Icrc {
    hasher: Hasher,
}

impl core::fmt::Debug for Icrc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Icrc").finish_non_exhaustive()
    }
}

/// Builds a pseudo-header in a stack buffer (with room for a BTH after it:
/// [`Pseudo::verify`]).
pub(crate) struct Pseudo {
    buf: [u8; MAX_PSEUDO + bth::HEADER_LEN],
    len: usize,
}

impl Pseudo {
    fn new() -> Self {
        let mut p = Self {
            buf: [0; MAX_PSEUDO + bth::HEADER_LEN],
            len: 0,
        };
        p.push(&FF8);
        p
    }
    /// Appends `bytes` and returns the offset where they start.
    fn push(&mut self, bytes: &[u8]) -> usize {
        let at = self.len;
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        at
    }
    fn mask(&mut self, at: usize, range: core::ops::Range<usize>) {
        for b in &mut self.buf[at + range.start..at + range.end] {
            *b = 0xff;
        }
    }
    fn push_ipv6_like(&mut self, header: &[u8]) {
        let at = self.push(&header[..40]);
        // Version stays; traffic class (8 bits) and flow label (20 bits) become ones.
        self.buf[at] |= 0x0f;
        self.mask(at, 1..4);
        // Hop limit.
        self.mask(at, 7..8);
    }
    fn push_udp(&mut self, udp: &[u8]) {
        let at = self.push(&udp[..8]);
        self.mask(at, 6..8);
    }
    /// The CRC state after it: the seed of a flow.
    pub(crate) fn finish(self) -> Icrc {
        let mut hasher = Hasher::new();
        hasher.update(&self.buf[..self.len]);
        Icrc { hasher }
    }
    /// `self.finish().verify(packet)` in two CRC runs instead of three: the packet's BTH
    /// (masked) goes after the pseudo-header in the buffer, and the two are hashed together
    /// (each run ends in a reduction, and a 12-byte run is hashed a byte at a time).
    pub(crate) fn verify(mut self, packet: &[u8]) -> bool {
        if packet.len() < bth::HEADER_LEN + ICRC_LEN {
            return false;
        }
        let covered = covered(packet);
        let (head, rest) = covered.split_at(bth::HEADER_LEN);
        let at = self.push(head);
        self.buf[at + bth::CN_BYTE_OFFSET] = 0xff;
        let mut hasher = Hasher::new();
        hasher.update(&self.buf[..self.len]);
        hasher.update(rest);
        hasher.finalize() == stored(packet)
    }
    pub(crate) fn rocev2_ipv4(ip_header: &[u8], udp_header: &[u8]) -> Result<Self> {
        need(Layer::Ipv4, ip_header, 20)?;
        let ihl = usize::from(ip_header[0] & 0x0f) * 4;
        if ip_header[0] >> 4 != 4 || ihl < 20 {
            return Err(Error::Malformed {
                layer: Layer::Ipv4,
                reason: "not an IPv4 header",
            });
        }
        need(Layer::Ipv4, ip_header, ihl)?;
        need(Layer::Udp, udp_header, 8)?;
        let mut p = Self::new();
        let at = p.push(&ip_header[..ihl]);
        p.mask(at, 1..2); // TOS: DSCP + ECN
        p.mask(at, 8..9); // TTL
        p.mask(at, 10..12); // header checksum
        p.push_udp(udp_header);
        Ok(p)
    }
    pub(crate) fn rocev2_ipv6(ip_header: &[u8], udp_header: &[u8]) -> Result<Self> {
        need(Layer::Ipv6, ip_header, 40)?;
        if ip_header[0] >> 4 != 6 {
            return Err(Error::Malformed {
                layer: Layer::Ipv6,
                reason: "not an IPv6 header",
            });
        }
        need(Layer::Udp, udp_header, 8)?;
        let mut p = Self::new();
        p.push_ipv6_like(ip_header);
        p.push_udp(udp_header);
        Ok(p)
    }
    pub(crate) fn grh(grh: &[u8]) -> Result<Self> {
        need(Layer::Grh, grh, 40)?;
        let mut p = Self::new();
        p.push_ipv6_like(grh);
        Ok(p)
    }
    /// Native IB without a GRH: the 8-byte LRH with its VL nibble masked (no ones before
    /// it).
    pub(crate) fn lrh(lrh: &[u8]) -> Result<Self> {
        need(Layer::Lrh, lrh, 8)?;
        let mut p = Self {
            buf: [0; MAX_PSEUDO + bth::HEADER_LEN],
            len: 0,
        };
        let at = p.push(&lrh[..8]);
        p.buf[at] |= 0xf0;
        Ok(p)
    }
}

/// The covered part of a transport packet: everything but the ICRC.
fn covered(packet: &[u8]) -> &[u8] {
    &packet[..packet.len().saturating_sub(ICRC_LEN)]
}

/// The fields of an IPv4 header that the ICRC covers and that a UDP-socket sender must
/// predict: the kernel writes the header (Linux, `include/net/ip.h`: identification 0 for an
/// unconnected socket with DF set, a hashed value otherwise; rxe and NICs write non-zero ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Fields {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Identification (Linux writes 0 for an unconnected socket with DF set).
    pub identification: u16,
    /// Don't-fragment flag.
    pub dont_fragment: bool,
}

/// The fields of a UDP header that the ICRC covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFields {
    /// Source port (per-QP entropy).
    pub src_port: u16,
    /// Destination port (4791).
    pub dst_port: u16,
}

impl Icrc {
    /// Seed for RoCEv2 over IPv4 from the exact IP header bytes (20..=60, options included)
    /// and the 8-byte UDP header.
    pub fn rocev2_ipv4(ip_header: &[u8], udp_header: &[u8]) -> Result<Self> {
        Ok(Pseudo::rocev2_ipv4(ip_header, udp_header)?.finish())
    }

    /// Seed for RoCEv2 over IPv6 from the exact 40-byte IPv6 header and the UDP header.
    pub fn rocev2_ipv6(ip_header: &[u8], udp_header: &[u8]) -> Result<Self> {
        Ok(Pseudo::rocev2_ipv6(ip_header, udp_header)?.finish())
    }

    /// Checks the ICRC of `packet` (BTH through ICRC) sent over IPv4 with these headers:
    /// `Icrc::rocev2_ipv4(ip_header, udp_header)?.verify(packet)`, for a receiver that
    /// checks each packet once, in less time (the pseudo-header and the BTH are hashed in
    /// one piece).
    pub fn verify_rocev2_ipv4(ip_header: &[u8], udp_header: &[u8], packet: &[u8]) -> Result<bool> {
        Ok(Pseudo::rocev2_ipv4(ip_header, udp_header)?.verify(packet))
    }

    /// [`Icrc::verify_rocev2_ipv4`] over IPv6 (the exact 40-byte IPv6 header).
    pub fn verify_rocev2_ipv6(ip_header: &[u8], udp_header: &[u8], packet: &[u8]) -> Result<bool> {
        Ok(Pseudo::rocev2_ipv6(ip_header, udp_header)?.verify(packet))
    }

    /// [`Icrc::verify_rocev2_ipv4`] for RoCE v1 and native IB with a GRH (the 40-byte GRH).
    pub fn verify_grh(grh: &[u8], packet: &[u8]) -> Result<bool> {
        Ok(Pseudo::grh(grh)?.verify(packet))
    }

    /// Seed for RoCEv2 over IPv4 from header fields alone, for a sender on a UDP socket that
    /// never sees the header the kernel writes. `transport_len` is the UDP payload length
    /// (BTH through ICRC). The header is assumed to have no options.
    pub fn rocev2_ipv4_fields(ip: &Ipv4Fields, udp: &UdpFields, transport_len: usize) -> Self {
        let udp_len = (transport_len + 8) as u16;
        let total = udp_len.wrapping_add(20);
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[4..6].copy_from_slice(&ip.identification.to_be_bytes());
        h[6] = if ip.dont_fragment { 0x40 } else { 0 };
        h[9] = 17;
        h[12..16].copy_from_slice(&ip.src);
        h[16..20].copy_from_slice(&ip.dst);
        let mut p = Pseudo::new();
        let at = p.push(&h);
        p.mask(at, 1..2);
        p.mask(at, 8..9);
        p.mask(at, 10..12);
        p.push_udp(&udp_header_bytes(udp, udp_len));
        p.finish()
    }

    /// Seed for RoCEv2 over IPv6 from addresses and ports alone (every covered IPv6 field is
    /// known to a socket user). `transport_len` is the UDP payload length.
    pub fn rocev2_ipv6_fields(
        src: &[u8; 16],
        dst: &[u8; 16],
        udp: &UdpFields,
        transport_len: usize,
    ) -> Self {
        let udp_len = (transport_len + 8) as u16;
        let mut h = [0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&udp_len.to_be_bytes());
        h[6] = 17;
        h[8..24].copy_from_slice(src);
        h[24..40].copy_from_slice(dst);
        let mut p = Pseudo::new();
        p.push_ipv6_like(&h);
        p.push_udp(&udp_header_bytes(udp, udp_len));
        p.finish()
    }

    /// Seed for RoCE v1 (and native IB with a GRH): the 40-byte GRH.
    pub fn grh(grh: &[u8]) -> Result<Self> {
        Ok(Pseudo::grh(grh)?.finish())
    }

    /// Seed for native IB without a GRH: the 8-byte LRH with its VL nibble masked.
    pub fn lrh(lrh: &[u8]) -> Result<Self> {
        Ok(Pseudo::lrh(lrh)?.finish())
    }

    /// Feeds transport bytes starting at the BTH (without the ICRC). Byte 4 of the BTH is
    /// masked. Call once per packet: a second call would mask byte 4 of the wrong place.
    pub fn update_transport(&mut self, transport: &[u8]) {
        if transport.len() >= bth::HEADER_LEN {
            let mut head = [0u8; bth::HEADER_LEN];
            head.copy_from_slice(&transport[..bth::HEADER_LEN]);
            head[bth::CN_BYTE_OFFSET] = 0xff;
            self.hasher.update(&head);
            self.hasher.update(&transport[bth::HEADER_LEN..]);
        } else {
            // Shorter than a BTH: not a packet, but hash what is there deterministically.
            let mut head = [0u8; bth::HEADER_LEN];
            head[..transport.len()].copy_from_slice(transport);
            if transport.len() > bth::CN_BYTE_OFFSET {
                head[bth::CN_BYTE_OFFSET] = 0xff;
            }
            self.hasher.update(&head[..transport.len()]);
        }
    }

    /// Feeds further bytes unmasked (payload pieces, when a packet is hashed in parts).
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// The CRC value. On the wire it is `value.to_le_bytes()`.
    pub fn finish(self) -> u32 {
        self.hasher.finalize()
    }

    /// The ICRC of a whole transport packet (BTH through ICRC; the last 4 bytes are skipped).
    pub fn compute(mut self, packet: &[u8]) -> u32 {
        self.update_transport(covered(packet));
        self.finish()
    }

    /// Compares the computed ICRC with the last four bytes of `packet`.
    pub fn verify(self, packet: &[u8]) -> bool {
        if packet.len() < bth::HEADER_LEN + ICRC_LEN {
            return false;
        }
        let stored = stored(packet);
        self.compute(packet) == stored
    }

    /// Computes the ICRC of `packet` and writes it into its last four bytes.
    ///
    /// # Panics
    /// If `packet` is shorter than four bytes.
    pub fn fill(self, packet: &mut [u8]) {
        let value = self.compute(packet);
        let n = packet.len();
        packet[n - ICRC_LEN..].copy_from_slice(&value.to_le_bytes());
    }
}

/// The ICRC value stored in the last four bytes of a transport packet (0 if shorter).
pub fn stored(packet: &[u8]) -> u32 {
    match packet.len().checked_sub(ICRC_LEN) {
        Some(at) => {
            u32::from_le_bytes([packet[at], packet[at + 1], packet[at + 2], packet[at + 3]])
        }
        None => 0,
    }
}

fn udp_header_bytes(udp: &UdpFields, udp_len: u16) -> [u8; 8] {
    let mut u = [0u8; 8];
    u[0..2].copy_from_slice(&udp.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&udp.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    /// zlib.crc32(8 × 0xFF) is the NOT of rxe's seed 0xDEBB20E3.
    #[test]
    fn prefix_matches_rxe_seed() {
        assert_eq!(crc32fast::hash(&FF8), !0xdebb_20e3);
    }

    #[test]
    fn fields_seed_equals_header_seed() {
        let ip = [
            0x45, 0x02, 0x00, 0x44, 0x11, 0x11, 0x40, 0x00, 0x40, 0x11, 0x15, 0x94, 10, 0, 0, 1,
            10, 0, 0, 2,
        ];
        let udp = [0xc0, 0x01, 0x12, 0xb7, 0x00, 0x30, 0x00, 0x00];
        let transport = [0u8; 40];
        let a = Icrc::rocev2_ipv4(&ip, &udp).unwrap().compute(&transport);
        let b = Icrc::rocev2_ipv4_fields(
            &Ipv4Fields {
                src: [10, 0, 0, 1],
                dst: [10, 0, 0, 2],
                identification: 0x1111,
                dont_fragment: true,
            },
            &UdpFields {
                src_port: 0xc001,
                dst_port: 4791,
            },
            40,
        )
        .compute(&transport);
        assert_eq!(a, b);
    }

    #[test]
    fn short_inputs_are_errors_not_panics() {
        assert!(Icrc::rocev2_ipv4(&[0x45; 10], &[0; 8]).is_err());
        assert!(
            Icrc::rocev2_ipv4(&[0x4f; 20], &[0; 8]).is_err(),
            "IHL 15 needs 60 bytes"
        );
        assert!(Icrc::rocev2_ipv6(&[0x60; 39], &[0; 8]).is_err());
        assert!(Icrc::grh(&[0; 10]).is_err());
        assert!(Icrc::lrh(&[0; 7]).is_err());
        let seed = Icrc::grh(&[0x60; 40]).unwrap();
        assert!(!seed.clone().verify(&[0; 5]));
        let _ = seed.compute(&[1, 2, 3]);
    }
}
