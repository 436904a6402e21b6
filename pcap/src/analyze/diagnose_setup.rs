//! Findings about how a connection was set up and how it ended: the GIDs the ends told each
//! other against the addresses their packets use (`gid_mismatch`), RoCE v1 beside v2
//! (`roce_v1_beside_v2`), and a requester retrying the same PSN to its end
//! (`retry_exceeded`, with its cause). See [`super::diagnose`] for the rest.
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};

use super::finding::Finding;
use super::terms::{gid_addr, Agreed};
use super::{Analysis, Connection};

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// What kind of GID `g` is, as a user picks one from a NIC's table.
fn gid_kind(g: Ipv6Addr) -> &'static str {
    if g.to_ipv4_mapped().is_some() {
        "IPv4"
    } else if g.segments()[0] & 0xffc0 == 0xfe80 {
        "IPv6 link-local"
    } else {
        "IPv6"
    }
}

/// The connection numbered `id`.
fn conn(a: &Analysis, id: usize) -> Option<&Connection> {
    a.connections
        .get(id.wrapping_sub(1))
        .map(|c| &**c)
        .filter(|c| c.id == id)
}

/// What the ends of each connection agreed (by connection id; the first exchange naming
/// it), looked up once for all the findings.
pub(super) struct AgreedBy<'a>(HashMap<usize, &'a Agreed>);

impl<'a> AgreedBy<'a> {
    pub(super) fn new(a: &'a Analysis) -> Self {
        let mut m = HashMap::new();
        for g in &a.agreed {
            for c in &g.connections {
                m.entry(c.0).or_insert(g);
            }
        }
        Self(m)
    }

    /// What the ends of connection `id` agreed, when the capture has it.
    fn of(&self, id: usize) -> Option<&'a Agreed> {
        self.0.get(&id).copied()
    }

    /// The local ACK timeout the REQ of connection `c` set, with its code, in ns.
    pub(super) fn timeout(&self, c: &Connection) -> Option<(u8, u64)> {
        let code = self.of(c.id)?.ack_timeout.filter(|&t| t > 0)?;
        Some((code, roce_proto::cm::timeout_ns(code)))
    }
}

/// `gid_mismatch`: per exchange, the GIDs the ends said they use against each other and
/// against the addresses the exchange and the packets of their QPs use (question 1).
pub(super) fn gid_findings(a: &Analysis, out: &mut Vec<Finding>) {
    for ag in &a.agreed {
        let mut why: Vec<String> = Vec::new();
        let [e0, e1] = &ag.ends;
        if let (Some(g0), Some(g1)) = (e0.gid, e1.gid) {
            if (g0.to_ipv4_mapped().is_some()) != (g1.to_ipv4_mapped().is_some()) {
                why.push(format!(
                    "the ends' GIDs are of different kinds: {g0} ({}) and {g1} ({})",
                    gid_kind(g0),
                    gid_kind(g1)
                ));
            }
        }
        // Native InfiniBand addresses by LID: nothing to compare the GIDs with.
        if ag.native_ib {
            continue;
        }
        // A REQ travels between the GIDs of its path (RoCE v2: their addresses).
        if ag.by == "cm" {
            for (who, e) in [("local", e0), ("remote", e1)] {
                if let Some(g) = e.gid.filter(|&g| gid_addr(g) != e.from) {
                    why.push(format!(
                        "the REQ names the {who} GID {g}, and that end's CM messages come from {}",
                        e.from
                    ));
                }
            }
        }
        let mut ids = Vec::new();
        for &(id, side0) in &ag.connections {
            let Some(c) = conn(a, id) else { continue };
            for (e, end) in ag.ends.iter().enumerate() {
                let s = &c.sides[if e == 0 { side0 } else { 1 - side0 }];
                let (Some(g), Some(addr)) = (end.gid, s.addr) else {
                    continue;
                };
                if gid_addr(g) == addr {
                    continue;
                }
                let qp = end.qpn.map_or(String::new(), |q| format!("QP {q:#x} "));
                why.push(if s.packets > 0 {
                    format!("connection {id}: {qp}said GID {g} and sends from {addr}")
                } else {
                    format!("connection {id}: {qp}said GID {g} and its peer sends to {addr}")
                });
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        if why.is_empty() {
            continue;
        }
        why.dedup();
        out.push(Finding {
            name: "gid_mismatch",
            connection: ids.first().copied().or(ag.connections.first().map(|x| x.0)),
            side: None,
            frames: vec![ag.frame],
            detail: format!(
                "{} exchange at frame {}: {}",
                if ag.by == "cm" { "the CM" } else { "perftest's" },
                ag.frame,
                why.join("; ")
            ),
            advice: "Each end must use the GID it told its peer, of the same kind as the peer's (IPv4-mapped on both, or IPv6 on both, not a link-local one across a router): pick the GID index by its type and address (show_gids; perftest -x, NCCL_IB_GID_INDEX, UCX_IB_GID_INDEX, FI_VERBS_GID_IDX); tables differ between NICs and vendors (mlx5 index 3 is often RoCE v2 IPv4, irdma's 1).",
        });
    }
}

/// `roce_v1_beside_v2`: sides sending RoCE v1 in a capture whose other RoCE is v2, when the
/// same host also sends v2 or its v1 requests go unanswered: the classic sign of a GID
/// index of the wrong type on one end (question 1). Hosts that speak v1 among themselves
/// beside others speaking v2 are left alone.
pub(super) fn version_findings(a: &Analysis, out: &mut Vec<Finding>) {
    let any_v1 = a
        .connections
        .iter()
        .any(|c| c.sides.iter().any(|s| s.roce_v1 > 0));
    if !any_v1 {
        return;
    }
    let v2: std::collections::HashSet<IpAddr> = a
        .connections
        .iter()
        .flat_map(|c| c.sides.iter())
        .filter(|s| s.packets > s.roce_v1)
        .filter_map(|s| s.addr)
        .collect();
    if v2.is_empty() {
        return;
    }
    // Addresses something was sent to.
    let reached: std::collections::HashSet<IpAddr> = a
        .connections
        .iter()
        .flat_map(|c| {
            (0..2)
                .filter(|&i| c.sides[i].packets > 0)
                .filter_map(|i| c.sides[1 - i].addr)
        })
        .collect();
    let mut v1 = Vec::new();
    let mut packets = 0;
    for c in &a.connections {
        for (i, s) in c.sides.iter().enumerate().filter(|s| s.1.roce_v1 > 0) {
            let both = match s.addr {
                Some(IpAddr::V6(g)) => v2.contains(&gid_addr(g)),
                _ => false,
            };
            let unanswered = s.requests > 0
                && c.sides[1 - i].packets == 0
                && s.addr.is_some_and(|x| !reached.contains(&x));
            if !both && !unanswered {
                continue;
            }
            packets += s.roce_v1;
            if v1.len() < 4 {
                let addr = s.addr.map_or(String::from("?"), |x| x.to_string());
                let also = match s.addr {
                    Some(IpAddr::V6(g)) if both => {
                        format!(" (as {}, it sends RoCE v2 too)", gid_addr(g))
                    }
                    _ => String::from(" (nothing answered it)"),
                };
                v1.push((c.id, format!("connection {} side {addr}{also}", c.id)));
            }
        }
    }
    if v1.is_empty() {
        return;
    }
    out.push(Finding {
        name: "roce_v1_beside_v2",
        connection: v1.first().map(|x| x.0),
        side: None,
        frames: Vec::new(),
        detail: format!(
            "{packets} packets sent as RoCE v1 (EtherType 0x8915) in a capture whose other RoCE is v2 (UDP 4791): {}",
            v1.iter().map(|x| x.1.as_str()).collect::<Vec<_>>().join(", ")
        ),
        advice: "A RoCE v2 NIC does not answer RoCE v1 (nor v1 v2): the GID index picks the version (mlx5: show_gids lists each index's type; perftest -x, NCCL_IB_GID_INDEX, UCX_IB_GID_INDEX): give both ends a RoCE v2 GID of the same address family.",
    });
}

/// `retry_exceeded`: a requester went back to the same PSN round after round and nothing
/// moved to the end of the capture; the cause told apart (question 6).
pub(super) fn retry_findings(a: &Analysis, agreed: &AgreedBy<'_>, out: &mut Vec<Finding>) {
    let retrying = a.connections.iter().any(|c| {
        c.sides
            .iter()
            .any(|s| s.retrying_at_end.as_ref().is_some_and(|r| r.rounds >= 2))
    });
    if !retrying {
        return;
    }
    // When each host last sent anything, over every connection.
    let mut last_sent: HashMap<IpAddr, u64> = HashMap::new();
    for s in a.connections.iter().flat_map(|c| c.sides.iter()) {
        if let (Some(addr), true) = (s.addr, s.packets > 0) {
            let t = last_sent.entry(addr).or_insert(0);
            *t = (*t).max(s.last_t);
        }
    }
    let end = a.end_ns;
    for c in &a.connections {
        for (i, s) in c.sides.iter().enumerate() {
            let Some(run) = s.retrying_at_end.as_deref().filter(|r| r.rounds >= 2) else {
                continue;
            };
            let peer = &c.sides[1 - i];
            let timeout = (run.last_t - run.first_t) / (run.rounds - 1);
            let before: u64 = s.episodes.iter().sum::<u64>().saturating_sub(1);
            let (cause, why) = if peer.packets == 0 {
                (
                    "unreachable_from_start",
                    "nothing ever came back from the peer: a wrong address or GID, QPN or path, or no QP there".to_string(),
                )
            } else if let Some(t) = c.peer_ended {
                (
                    "peer_dead",
                    format!(
                        "the peer host ended its TCP channel at {:.6} s and answered nothing after",
                        t as f64 / 1e9
                    ),
                )
            } else if before > 0 {
                (
                    "loss_storm",
                    format!(
                        "{before} earlier retransmission episodes each recovered before this one: the path loses packets until the retries run out"
                    ),
                )
            } else {
                let host_after = peer
                    .addr
                    .and_then(|x| last_sent.get(&x))
                    .is_some_and(|&t| t > run.first_t);
                (
                    "peer_dead",
                    if host_after {
                        format!(
                            "the peer answered until {:.6} s, then nothing on this connection while its host sent on others: its QP went to the error state, or this path broke",
                            peer.last_t as f64 / 1e9
                        )
                    } else {
                        format!(
                            "the peer answered until {:.6} s, then its host sent nothing at all: it stopped, or the path to it broke",
                            peer.last_t as f64 / 1e9
                        )
                    },
                )
            };
            let (retries, said) = match agreed.of(c.id).and_then(|g| g.retry_count) {
                Some(n) => (u64::from(n), "the REQ's retry count"),
                None => (7, "the largest retry count"),
            };
            // Retry k goes a timeout after the one before; the error a timeout after the last.
            let at = run.first_t + retries * timeout;
            let state = if run.rounds >= retries && end.saturating_sub(run.last_t) >= timeout {
                format!(
                    "the {} retries {said} allows were spent and the requester stopped: `retry exceeded` at about {:.3} ms",
                    retries,
                    ms(at)
                )
            } else if run.rounds > retries {
                format!(
                    "more rounds than {said} ({retries}) allows: a requester retrying for ever, or a retry count other than the REQ's"
                )
            } else {
                format!(
                    "{} of {retries} retries ({said}) spent at the end of the capture: `retry exceeded` at about {:.3} ms if nothing comes back",
                    run.rounds,
                    ms(at)
                )
            };
            out.push(Finding {
                name: "retry_exceeded",
                connection: Some(c.id),
                side: Some(i),
                frames: vec![run.first_frame],
                detail: format!(
                    "cause {cause}: went back to PSN {} {} times, {:.3} ms apart, and nothing moved after; {why}; {state}",
                    run.psn,
                    run.rounds,
                    ms(timeout)
                ),
                advice: match cause {
                    "unreachable_from_start" => "Nothing ever answered: check the destination's address, GID index and QPN against what the peer advertised, and that its QP reached RTR (a capture at the peer shows whether the requests arrive).",
                    "loss_storm" => "The fabric lost packets again and again: find the drops (switch counters, PFC on the RoCE priority, ECN/DCQCN), or lengthen the timeout and raise the retry count while you do.",
                    _ => "The peer stopped answering: its process or QP ended (look for its error or exit), or the path to it failed; the requester's error is then the symptom, not the cause.",
                },
            });
        }
    }
}
