//! RDMA-CM conventions on top of the IB CM (IBTA Vol 1 Annex A11; Linux `cma.c`): service IDs
//! made of a port space and a port, and the `cma_hdr` that starts the private data of a REQ
//! (and of a SIDR_REQ) with the IP addresses and port of the connection.
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::need;
use crate::wire::{be16, put16};
use crate::{Layer, Result};

/// An RDMA-CM port space (the middle of an IP-based service ID, Annex A11.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortSpace(pub u16);

impl PortSpace {
    /// `RDMA_PS_TCP`: reliable connected (RC) over IP addressing.
    pub const TCP: Self = Self(0x0106);
    /// `RDMA_PS_UDP`: unreliable datagram (UD).
    pub const UDP: Self = Self(0x0111);
    /// `RDMA_PS_IB`: any QP type.
    pub const IB: Self = Self(0x013f);
    /// `RDMA_PS_IPOIB`.
    pub const IPOIB: Self = Self(0x0002);

    /// `"tcp"`, `"udp"`, `"ib"`, `"ipoib"`, or `None`.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            0x0106 => Some("tcp"),
            0x0111 => Some("udp"),
            0x013f => Some("ib"),
            0x0002 => Some("ipoib"),
            _ => None,
        }
    }
}

/// The port space and port of an RDMA-CM service ID (`0x0000_0000_01PP_pppp`: bytes 0..4 zero,
/// byte 4 0x01, byte 5 the port space's low byte, bytes 6..8 the port), or `None` for a
/// service ID of another form.
pub const fn service_port(service_id: u64) -> Option<(PortSpace, u16)> {
    if service_id >> 24 != 0x01 {
        return None;
    }
    let space = PortSpace((service_id >> 16) as u16);
    if space.name().is_none() {
        return None;
    }
    Some((space, service_id as u16))
}

/// The service ID of `port` in `space`.
pub const fn service_id(space: PortSpace, port: u16) -> u64 {
    (space.0 as u64) << 16 | port as u64
}

/// The Q_Key of every UD QP in the UDP port space (`RDMA_UDP_QKEY`, Linux `rdma_cm.h`): what
/// a SIDR_REP from Linux carries and what its QPs check.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Bytes of a `cma_hdr`.
pub const CMA_HDR_LEN: usize = 36;

/// The `cma_hdr` at the start of an RDMA-CM REQ's (or SIDR_REQ's) private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHdr {
    /// `cma_version` (0).
    pub version: u8,
    /// IP version (4 or 6; the high nibble of byte 1).
    pub ip_version: u8,
    /// The active side's source port.
    pub port: u16,
    /// Source address (IPv4 in the last 4 of the 16 bytes, the rest zero).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
}

impl CmaHdr {
    /// Reads it from private data; `None` when the IP version is neither 4 nor 6 (not an
    /// RDMA-CM header).
    pub fn parse(private: &[u8]) -> Result<Option<Self>> {
        need(Layer::Cm, private, CMA_HDR_LEN)?;
        let ip_version = private[1] >> 4;
        let addr = |at: usize| -> Option<IpAddr> {
            let mut a = [0u8; 16];
            a.copy_from_slice(&private[at..at + 16]);
            match ip_version {
                4 => Some(IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))),
                6 => Some(IpAddr::V6(Ipv6Addr::from(a))),
                _ => None,
            }
        };
        let (Some(src), Some(dst)) = (addr(4), addr(20)) else {
            return Ok(None);
        };
        Ok(Some(Self {
            version: private[0],
            ip_version,
            port: be16(&private[2..4]),
            src,
            dst,
        }))
    }

    /// Writes it into the first [`CMA_HDR_LEN`] bytes of private data.
    ///
    /// # Panics
    /// If `private` is shorter than [`CMA_HDR_LEN`].
    pub fn emit(&self, private: &mut [u8]) {
        let p = &mut private[..CMA_HDR_LEN];
        p.fill(0);
        p[0] = self.version;
        p[1] = self.ip_version << 4;
        put16(&mut p[2..4], self.port);
        for (at, a) in [(4, self.src), (20, self.dst)] {
            match a {
                IpAddr::V4(v4) => p[at + 12..at + 16].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => p[at..at + 16].copy_from_slice(&v6.octets()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_of_perftest_and_rping() {
        assert_eq!(
            service_port(0x0000_0000_0106_4853),
            Some((PortSpace::TCP, 18515))
        );
        assert_eq!(
            service_port(0x0000_0000_0106_1c06),
            Some((PortSpace::TCP, 7174))
        );
        assert_eq!(service_port(0x1000_0000_0000_0404), None, "IPoIB-CM");
        assert_eq!(service_id(PortSpace::UDP, 7), 0x0000_0000_0111_0007);
        assert_eq!(PortSpace(0x0106).name(), Some("tcp"));
    }

    #[test]
    fn cma_hdr_round_trips() {
        let h = CmaHdr {
            version: 0,
            ip_version: 4,
            port: 52471,
            src: IpAddr::V4(Ipv4Addr::new(10, 1, 16, 62)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 1, 16, 61)),
        };
        let mut p = [0xffu8; 92];
        h.emit(&mut p);
        assert_eq!(p[..4], [0, 0x40, 0xcc, 0xf7]);
        assert_eq!(p[4..16], [0; 12], "IPv4 is zero-padded, not ::ffff");
        assert_eq!(CmaHdr::parse(&p).unwrap(), Some(h));
        let v6 = CmaHdr {
            ip_version: 6,
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
            ..h
        };
        v6.emit(&mut p);
        assert_eq!(CmaHdr::parse(&p).unwrap(), Some(v6));
        p[1] = 0x70;
        assert_eq!(CmaHdr::parse(&p).unwrap(), None);
        assert!(CmaHdr::parse(&p[..35]).is_err());
    }
}
