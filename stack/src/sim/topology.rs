//! The shapes of a simulated fabric ([`Topology`]): one switch, leaf-spine, and the fat tree
//! of pods, with the HPCC paper's preset. How a shape becomes switches, ports and links is
//! the fabric's (`super::fabric`).

/// The shape of a fabric. Hosts are numbered first (`0..hosts()`), leaf by leaf (ToR by ToR);
/// the simulator's endpoint `i` is host `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One switch with `hosts` hosts.
    Switch {
        /// Hosts on the switch.
        hosts: usize,
    },
    /// Two tiers: `leaves` leaf switches with `hosts_per_leaf` hosts each, every leaf joined
    /// to every one of `spines` spine switches by one link.
    LeafSpine {
        /// Leaf (ToR) switches.
        leaves: usize,
        /// Hosts under each leaf.
        hosts_per_leaf: usize,
        /// Spine switches.
        spines: usize,
    },
    /// Three tiers: `pods` pods, each of `tors` ToR switches with `hosts_per_tor` hosts and
    /// `aggs` aggregation switches, every ToR joined to every aggregation switch of its pod;
    /// `cores` core switches in `aggs` equal groups, aggregation switch `j` of every pod
    /// joined to every core of group `j`.
    FatTree {
        /// Pods.
        pods: usize,
        /// ToR switches per pod.
        tors: usize,
        /// Aggregation switches per pod.
        aggs: usize,
        /// Hosts under each ToR.
        hosts_per_tor: usize,
        /// Core switches (a multiple of `aggs`).
        cores: usize,
    },
}

impl Topology {
    /// The HPCC paper's fabric (Li et al., SIGCOMM 2019, §5.1): 320 hosts, 20 ToR, 20
    /// aggregation and 16 core switches; 16 hosts per ToR, pods of 4 ToR and 4 aggregation
    /// switches, each aggregation switch joined to 4 cores. With 100 Gb/s host links and
    /// 400 Gb/s between switches it is not oversubscribed.
    pub const HPCC: Self = Self::FatTree {
        pods: 5,
        tors: 4,
        aggs: 4,
        hosts_per_tor: 16,
        cores: 16,
    };

    /// The k-ary fat tree (Al-Fares et al., SIGCOMM 2008): `k` pods of `k/2` ToR and `k/2`
    /// aggregation switches, `k/2` hosts per ToR, `(k/2)²` cores; `k³/4` hosts.
    pub fn k_ary(k: usize) -> Self {
        let h = k / 2;
        Self::FatTree {
            pods: k,
            tors: h,
            aggs: h,
            hosts_per_tor: h,
            cores: h * h,
        }
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        match *self {
            Self::Switch { hosts } => hosts,
            Self::LeafSpine {
                leaves,
                hosts_per_leaf,
                ..
            } => leaves * hosts_per_leaf,
            Self::FatTree {
                pods,
                tors,
                hosts_per_tor,
                ..
            } => pods * tors * hosts_per_tor,
        }
    }

    /// Number of switches.
    pub fn switches(&self) -> usize {
        match *self {
            Self::Switch { .. } => 1,
            Self::LeafSpine { leaves, spines, .. } => leaves + spines,
            Self::FatTree {
                pods,
                tors,
                aggs,
                cores,
                ..
            } => pods * (tors + aggs) + cores,
        }
    }

    /// Checks the shape: every count at least 1, at most 4,096 hosts and 1,024 switches, and
    /// core groups that divide evenly.
    pub fn validate(&self) -> Result<(), &'static str> {
        let ok = match *self {
            Self::Switch { hosts } => hosts >= 1,
            Self::LeafSpine {
                leaves,
                hosts_per_leaf,
                spines,
            } => leaves >= 1 && hosts_per_leaf >= 1 && spines >= 1,
            Self::FatTree {
                pods,
                tors,
                aggs,
                hosts_per_tor,
                cores,
            } => {
                pods >= 1
                    && tors >= 1
                    && aggs >= 1
                    && hosts_per_tor >= 1
                    && cores >= aggs
                    && cores % aggs == 0
            }
        };
        if !ok {
            return Err("every count must be at least 1, and the cores a multiple of the aggregation switches per pod");
        }
        if self.hosts() > 4096 || self.switches() > 1024 {
            return Err("at most 4096 hosts and 1024 switches");
        }
        Ok(())
    }

    /// The links, as (node, node, tier of the upper end), nodes numbered hosts first.
    pub(super) fn links(&self) -> Vec<(usize, usize, u8)> {
        let mut l = Vec::new();
        match *self {
            Self::Switch { hosts } => {
                for h in 0..hosts {
                    l.push((h, hosts, 1));
                }
            }
            Self::LeafSpine {
                leaves,
                hosts_per_leaf,
                spines,
            } => {
                let hosts = leaves * hosts_per_leaf;
                for h in 0..hosts {
                    l.push((h, hosts + h / hosts_per_leaf, 1));
                }
                for leaf in 0..leaves {
                    for s in 0..spines {
                        l.push((hosts + leaf, hosts + leaves + s, 2));
                    }
                }
            }
            Self::FatTree {
                pods,
                tors,
                aggs,
                hosts_per_tor,
                cores,
            } => {
                let hosts = pods * tors * hosts_per_tor;
                let tor0 = hosts;
                let agg0 = tor0 + pods * tors;
                let core0 = agg0 + pods * aggs;
                let group = cores / aggs;
                for h in 0..hosts {
                    l.push((h, tor0 + h / hosts_per_tor, 1));
                }
                for p in 0..pods {
                    for t in 0..tors {
                        for a in 0..aggs {
                            l.push((tor0 + p * tors + t, agg0 + p * aggs + a, 2));
                        }
                    }
                    for a in 0..aggs {
                        for c in 0..group {
                            l.push((agg0 + p * aggs + a, core0 + a * group + c, 3));
                        }
                    }
                }
            }
        }
        l
    }
}
