//! Where on the link an IPv4 peer is, from the kernel's own tables: the main routing table
//! (`/proc/net/route`: the longest prefix holding the peer, its interface and gateway) and
//! the neighbour table (`/proc/net/arp`: the hardware address of the next hop, complete
//! entries only), as the kernel's rxe resolves a destination (route, then neighbour). The
//! packet link sends to what these say, never to an address learnt from a received frame.
//! Policy routing (`ip rule`) and tables other than main are not consulted: a peer they would
//! route elsewhere gets no hop here, and the UDP socket (the kernel) sends to it.
use std::net::Ipv4Addr;

/// One usable route of `/proc/net/route`: interface, destination, mask, gateway, metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    pub(crate) iface: String,
    pub(crate) dest: Ipv4Addr,
    pub(crate) mask: Ipv4Addr,
    pub(crate) gateway: Option<Ipv4Addr>,
    pub(crate) metric: u32,
}

/// The kernel writes the addresses of `/proc/net/route` as hex in host (little-endian) order.
fn hex_addr(s: &str) -> Option<Ipv4Addr> {
    Some(Ipv4Addr::from(
        u32::from_str_radix(s, 16).ok()?.swap_bytes(),
    ))
}

/// The routes that are up, from the text of `/proc/net/route`.
pub(crate) fn parse_routes(text: &str) -> Vec<Route> {
    const RTF_UP: u32 = 0x1;
    const RTF_GATEWAY: u32 = 0x2;
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            if flags & RTF_UP == 0 {
                return None;
            }
            let gateway = hex_addr(f.get(2)?)?;
            Some(Route {
                iface: (*f.first()?).to_string(),
                dest: hex_addr(f.get(1)?)?,
                mask: hex_addr(f.get(7)?)?,
                gateway: (flags & RTF_GATEWAY != 0 && !gateway.is_unspecified()).then_some(gateway),
                metric: f.get(6)?.parse().ok()?,
            })
        })
        .collect()
}

/// The route to `peer`: the longest prefix, then the lowest metric.
pub(crate) fn route_to(routes: &[Route], peer: Ipv4Addr) -> Option<&Route> {
    let p = u32::from(peer);
    routes
        .iter()
        .filter(|r| p & u32::from(r.mask) == u32::from(r.dest) & u32::from(r.mask))
        .max_by_key(|r| (u32::from(r.mask).count_ones(), std::cmp::Reverse(r.metric)))
}

/// The hardware address of `ip` on `iface`, from the text of `/proc/net/arp` (complete
/// entries: flag `ATF_COM`).
pub(crate) fn neighbour(text: &str, ip: Ipv4Addr, iface: &str) -> Option<[u8; 6]> {
    const ATF_COM: u32 = 0x2;
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first()?.parse::<Ipv4Addr>().ok()? != ip || *f.get(5)? != iface {
            return None;
        }
        let flags = u32::from_str_radix(f.get(2)?.trim_start_matches("0x"), 16).ok()?;
        if flags & ATF_COM == 0 {
            return None;
        }
        let mut mac = [0u8; 6];
        let mut parts = f.get(3)?.split(':');
        for b in &mut mac {
            *b = u8::from_str_radix(parts.next()?, 16).ok()?;
        }
        (parts.next().is_none() && mac != [0; 6]).then_some(mac)
    })
}

/// Where datagrams to `peer` go: the interface index and the next hop's hardware address,
/// from this namespace's tables now; `None` when there is no route or no complete neighbour
/// entry yet (then the kernel, through the UDP socket, resolves it).
pub(crate) fn next_hop(peer: Ipv4Addr) -> Option<(i32, [u8; 6])> {
    let routes = std::fs::read_to_string("/proc/net/route").ok()?;
    let routes = parse_routes(&routes);
    let r = route_to(&routes, peer)?;
    let via = r.gateway.unwrap_or(peer);
    let arp = std::fs::read_to_string("/proc/net/arp").ok()?;
    let mac = neighbour(&arp, via, &r.iface)?;
    let ifindex = i32::try_from(nix::net::if_::if_nametoindex(r.iface.as_str()).ok()?).ok()?;
    Some((ifindex, mac))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTES: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
        eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
        eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
        eth1\t00004E0A\t00000000\t0001\t0\t0\t100\t0000FFFF\t0\t0\t0\n\
        eth2\t00004E0A\t00000000\t0001\t0\t0\t5\t0000FFFF\t0\t0\t0\n\
        eth3\t004F4E0A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";

    const ARP: &str =
        "IP address       HW type     Flags       HW address            Mask     Device\n\
        192.0.2.1        0x1         0x2         02:fc:00:00:00:05     *        eth0\n\
        10.78.0.2        0x1         0x0         00:00:00:00:00:00     *        eth2\n\
        10.78.0.9        0x1         0x2         0a:0b:0c:0d:0e:0f     *        eth2\n";

    #[test]
    fn routes_pick_the_longest_prefix_then_the_lowest_metric() {
        let r = parse_routes(ROUTES);
        assert_eq!(r.len(), 4, "the route that is not up is left out");
        let via = |p: &str| route_to(&r, p.parse().unwrap()).map(|r| r.iface.clone());
        assert_eq!(via("192.0.2.7").as_deref(), Some("eth0"));
        assert_eq!(
            route_to(&r, "192.0.2.7".parse().unwrap()).unwrap().gateway,
            None
        );
        // The default route, through its gateway.
        let d = route_to(&r, "8.8.8.8".parse().unwrap()).unwrap();
        assert_eq!(d.gateway, Some("192.0.2.1".parse().unwrap()));
        // Two /16s: the lower metric; the /24 that is down is not used.
        assert_eq!(via("10.78.0.2").as_deref(), Some("eth2"));
        assert_eq!(
            via("10.79.0.2").as_deref(),
            Some("eth0"),
            "only the default holds it"
        );
    }

    #[test]
    fn only_complete_neighbour_entries_of_the_interface_count() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            neighbour(ARP, ip("192.0.2.1"), "eth0"),
            Some([2, 0xfc, 0, 0, 0, 5])
        );
        assert_eq!(
            neighbour(ARP, ip("192.0.2.1"), "eth1"),
            None,
            "another interface"
        );
        assert_eq!(neighbour(ARP, ip("10.78.0.2"), "eth2"), None, "incomplete");
        assert_eq!(
            neighbour(ARP, ip("10.78.0.9"), "eth2"),
            Some([0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f])
        );
        assert_eq!(neighbour("garbage\nx y z", ip("1.2.3.4"), "eth0"), None);
    }
}
