//! The fabric's unit tests: preset sizes, shortest equal-cost routes, the ECMP hash, refused shapes.
use super::*;

#[test]
fn the_presets_have_the_published_sizes() {
    let t = Topology::HPCC;
    assert_eq!((t.hosts(), t.switches()), (320, 56));
    let k4 = Topology::k_ary(4);
    assert_eq!((k4.hosts(), k4.switches()), (16, 20));
    let f = Fabric::new(FabricConfig::new(t)).unwrap();
    // 320 host links, 5 pods × 16 ToR-agg links, 20 aggs × 4 cores.
    assert_eq!(f.port_count(), 2 * (320 + 80 + 80));
    let tiers = |n: u8| (0..376).filter(|&i| f.tier(i) == n).count();
    assert_eq!((tiers(0), tiers(1), tiers(2), tiers(3)), (320, 20, 20, 16));
    let names: Vec<String> = [5, 320, 339, 340, 360, 375]
        .iter()
        .map(|&n| f.node_name(n))
        .collect();
    assert_eq!(names, ["host5", "tor0", "tor19", "agg0", "core0", "core15"]);
}

#[test]
fn routes_are_shortest_and_equal_cost() {
    let f = Fabric::new(FabricConfig::new(Topology::HPCC)).unwrap();
    // ToR 0 (node 320): host 0 is below it, host 16 under ToR 1 of the same pod (via any
    // of 4 aggs), host 300 in pod 4 (via any of 4 aggs, then any of 4 cores).
    assert_eq!(f.next_hops(320, 0).len(), 1);
    assert_eq!(f.next_hops(320, 16).len(), 4);
    assert_eq!(f.next_hops(320, 300).len(), 4);
    let agg = 340;
    assert_eq!(f.next_hops(agg, 300).len(), 4);
    assert_eq!(f.next_hops(agg, 16).len(), 1);
    let ip = |i: u32| IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
    // Paths: 2 hops under one ToR, 4 in a pod, 6 across pods.
    assert_eq!(f.path(0, 1, ip(0), ip(1), 1000).len(), 2);
    assert_eq!(f.path(0, 16, ip(0), ip(16), 1000).len(), 4);
    let p = f.path(0, 300, ip(0), ip(300), 1000);
    assert_eq!(p.len(), 6);
    assert_eq!(f.port(*p.last().unwrap()).1, 300);
}

#[test]
fn the_ecmp_hash_is_stable_and_spreads_source_ports() {
    let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 1, 7]));
    assert_eq!(
        ecmp_hash(a, b, 0xc123, 4791, 5),
        ecmp_hash(a, b, 0xc123, 4791, 5)
    );
    // 16,000 source ports over 4 and over 16 paths: each within 10 % of its share.
    for n in [4u32, 16] {
        let mut bins = vec![0u32; n as usize];
        for sport in 0..16_000u16 {
            bins[(ecmp_hash(a, b, 0xc000 | sport, 4791, 7) % n) as usize] += 1;
        }
        let share = 16_000 / n;
        for (i, &c) in bins.iter().enumerate() {
            assert!(
                c.abs_diff(share) * 10 < share,
                "{n} paths: bin {i} got {c} of {share}"
            );
        }
    }
    // Consecutive tiers decide independently: the choice at one salt says nothing of
    // the next (each of the 16 combinations of 4 × 4 occurs).
    let mut seen = [[0u32; 4]; 4];
    for sport in 0..4_000u16 {
        let x = ecmp_hash(a, b, sport, 4791, 320) % 4;
        let y = ecmp_hash(a, b, sport, 4791, 340) % 4;
        seen[x as usize][y as usize] += 1;
    }
    assert!(seen.iter().flatten().all(|&c| c > 150), "{seen:?}");
}

#[test]
fn refused_shapes() {
    assert!(Topology::LeafSpine {
        leaves: 0,
        hosts_per_leaf: 1,
        spines: 1
    }
    .validate()
    .is_err());
    assert!(Topology::FatTree {
        pods: 2,
        tors: 2,
        aggs: 3,
        hosts_per_tor: 2,
        cores: 4
    }
    .validate()
    .is_err());
    assert!(Topology::Switch { hosts: 5000 }.validate().is_err());
}

#[test]
fn a_split_gives_every_node_one_part_and_balances_the_hosts() {
    for (topology, n, hosts_each) in [
        (Topology::HPCC, 2, vec![160, 160]),
        (Topology::HPCC, 3, vec![112, 112, 96]),
        (Topology::k_ary(4), 8, vec![2; 8]),
        (
            Topology::LeafSpine {
                leaves: 4,
                hosts_per_leaf: 16,
                spines: 4,
            },
            4,
            vec![16; 4],
        ),
    ] {
        let f = Fabric::new(FabricConfig::new(topology)).unwrap();
        let (parts, host_part) = f.split(n);
        assert_eq!(parts.len(), n, "{topology:?}");
        let nodes = topology.hosts() + topology.switches();
        for v in 0..nodes {
            let owners = parts.iter().filter(|p| p.owns(v)).count();
            assert_eq!(owners, 1, "{topology:?}: node {v} in {owners} parts");
        }
        // Hosts in consecutive runs, as even as whole ToRs allow, each with its ToR.
        assert!(host_part.windows(2).all(|w| w[0] <= w[1]));
        let each: Vec<usize> = (0..n)
            .map(|k| host_part.iter().filter(|&&p| p == k).count())
            .collect();
        assert_eq!(each, hosts_each, "{topology:?}");
        for h in 0..topology.hosts() {
            let (_, tor, _, _) = f.port(f.node_ports[h][0] as usize);
            assert!(parts[host_part[h]].owns(tor), "host {h} apart from its ToR");
        }
    }
    // One switch, or links without delay (no lookahead): no split.
    let one = Fabric::new(FabricConfig::new(Topology::Switch { hosts: 8 })).unwrap();
    assert_eq!(one.split(4).0.len(), 1);
    let mut cfg = FabricConfig::new(Topology::k_ary(4));
    cfg.link_delay = Duration::ZERO;
    assert_eq!(Fabric::new(cfg).unwrap().split(4).0.len(), 1);
    assert_eq!(
        Fabric::new(FabricConfig::new(Topology::k_ary(4)))
            .unwrap()
            .max_parts(),
        8
    );
}
