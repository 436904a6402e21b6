//! Findings: the questions RDMA users ask of a misbehaving RoCE fabric, answered from what
//! the analysis counted (`docs/analyze.md`, Findings). Each [`Finding`] names what was
//! seen, with its evidence (the connection, the side, frames, the values), and says in one
//! sentence what to check or change. Made from the finished analysis, on demand
//! ([`Analysis::findings`]): the packet handlers only count.
use super::diagnose_setup::{gid_findings, retry_findings, version_findings, AgreedBy};
use super::emit::{Cause, EventKind};
use super::finding::Finding;
use super::{Analysis, Connection, Side};

/// The frames of the first events of `kind` that side `side` of `c` sent (up to 4).
fn frames_of(c: &Connection, side: usize, kind: EventKind) -> Vec<u64> {
    c.events
        .iter()
        .filter(|e| e.side == side && e.kind == kind)
        .map(|e| e.frame)
        .take(4)
        .collect()
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl Analysis {
    /// What the analysis diagnoses ([`Finding`]), connection by connection in report order,
    /// then the capture's.
    pub fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        let agreed = AgreedBy::new(self);
        for c in &self.connections {
            connection_findings(&agreed, c, &mut out);
        }
        retry_findings(self, &agreed, &mut out);
        gid_findings(self, &mut out);
        version_findings(self, &mut out);
        cm_findings(self, &mut out);
        pfc_findings(self, &mut out);
        super::counters::counter_findings(self, &mut out);
        out
    }
}

/// The findings of one connection.
fn connection_findings(agreed: &AgreedBy<'_>, c: &Connection, out: &mut Vec<Finding>) {
    let id = Some(c.id);
    for (i, s) in c.sides.iter().enumerate() {
        let peer = &c.sides[1 - i];
        // 3: RNR stalls, which no counter of the requester and no completion shows.
        if s.naks[1] > 0 {
            let waited = &peer.rnr_wait;
            let mut detail = format!("{} RNR NAKs sent", s.naks[1]);
            if s.rnr_timer_zero > 0 {
                detail.push_str(&format!(
                    ", {} with timer code 0 (655.36 ms, the longest)",
                    s.rnr_timer_zero
                ));
            }
            if waited.count() > 0 {
                detail.push_str(&format!(
                    "; the requester waited {:.3} ms at the median, {:.3} ms at most, before sending again",
                    ms(waited.quantile(0.5)),
                    ms(waited.max())
                ));
            }
            out.push(Finding {
                name: "rnr_stall",
                connection: id,
                side: Some(i),
                frames: frames_of(c, i, EventKind::Nak(1)),
                detail,
                advice: if s.rnr_timer_zero > 0 {
                    "The responder had no receive posted: post receives ahead (a deeper receive queue or an SRQ), and set its QP's min_rnr_timer (rdma_cm leaves it 0, 655.36 ms a stall) to a few hundred microseconds."
                } else {
                    "The responder had no receive posted: post receives ahead (a deeper receive queue or an SRQ)."
                },
            });
        }
        // 8: "my FPGA sends but nothing comes back": requests with a wrong ICRC, unanswered.
        if s.requests > 0 && peer.responses == 0 && s.icrc_bad * 2 >= s.requests {
            out.push(Finding {
                name: "icrc_bad_unanswered",
                connection: id,
                side: Some(i),
                frames: frames_of(c, i, EventKind::IcrcBad),
                detail: format!(
                    "{} of its {} requests carry a wrong ICRC and nothing answered them",
                    s.icrc_bad, s.requests
                ),
                advice: "A RoCE NIC drops a packet whose ICRC is wrong without a word to the sender (Wireshark does not check it): compute it over the masked pseudo-header (IBTA Vol 1 §7.8.1, Annex A17.4.4: the IPv4 TOS, TTL and checksum, the UDP checksum and the BTH's resv8a byte as ones) and compare with `roce decode`'s.",
            });
        }
        // 4: CE marks the receiver never answered with a CNP, or CNPs without CE.
        if s.ecn_ce > 0 && peer.cnps == 0 {
            out.push(Finding {
                name: "ce_without_cnp",
                connection: id,
                side: Some(i),
                frames: frames_of(c, i, EventKind::EcnCe),
                detail: format!(
                    "{} of its packets arrived marked CE and its peer sent no CNP",
                    s.ecn_ce
                ),
                advice: "The receiver's notification point is off, so DCQCN never slows the sender: enable it for this priority (mlx5: /sys/class/net/IF/ecn/roce_np/enable/PRIO), or capture where the CNPs travel.",
            });
        }
        if s.cnps > 0 && peer.ecn_ce == 0 {
            out.push(Finding {
                name: "cnp_without_ce",
                connection: id,
                side: Some(i),
                frames: frames_of(c, i, EventKind::Cnp),
                detail: format!(
                    "{} CNPs sent and none of its peer's packets marked CE at the capture point",
                    s.cnps
                ),
                advice: "The CNPs answer CE marks made after the capture point or cleared before it, or NAKs and out-of-order packets (some NICs send CNPs for those): capture nearer the receiver, or read its np_ecn_marked_roce_packets counter.",
            });
        }
        // 7: one QP's READs limited by its outstanding-READ window.
        let reads = s.messages[4] + s.messages[5];
        let w = u64::from(s.reads_outstanding_max);
        if (2..=16).contains(&w) && reads >= 4 * w && s.reads_at_max * 4 >= reads {
            out.push(Finding {
                name: "read_window_limited",
                connection: id,
                side: Some(i),
                frames: Vec::new(),
                detail: format!(
                    "never more than {w} READs and atomics outstanding, and at {w} for {} of its {reads}",
                    s.reads_at_max
                ),
                advice: "The requester's READs wait for the outstanding-READ window (its max_rd_atomic and the responder's max_dest_rd_atomic, or the application's own depth): raise them up to the NIC's max_qp_rd_atom, or spread the READs over more QPs.",
            });
        }
    }
    // 5: what the retransmission timer did, to compare with what it was given.
    for (i, s) in c.sides.iter().enumerate() {
        let t = &s.retransmission_timeout;
        if t.count() < 2 {
            continue;
        }
        let (p50, p99) = (t.quantile(0.5), t.quantile(0.99));
        // The local ACK timeout is 4.096 us x 2^code (IBTA Vol 1 §9.7.6.1.3).
        let code = (p50.max(1) as f64 / 4096.0).log2().round().clamp(1.0, 31.0) as u32;
        let mut detail = format!(
            "{} retransmission episodes began when the timer fired, {:.3} ms after the last progress at the median ({:.3} to {:.3} ms): a local ACK timeout code of about {code} (4.096 us x 2^{code} = {:.3} ms)",
            t.count(),
            ms(p50),
            ms(t.quantile(0.0)),
            ms(t.max()),
            4.096e-3 * f64::from(1u32 << code.min(30))
        );
        if p99 >= 2 * p50 {
            detail.push_str("; the waits grow from one to the next");
        }
        // What the CM's REQ set, when the capture has it (IBTA Vol 1 §12.7.34).
        if let Some((set, ns)) = agreed.timeout(c) {
            detail.push_str(&format!("; the REQ set code {set} ({:.3} ms)", ms(ns)));
            if p50 < ns / 2 {
                detail.push_str(", and the timer fired sooner: the NIC's adaptive retransmission or a timeout of its own");
            } else if p50 > 2 * ns {
                detail.push_str(", and the timer fired later");
            }
        }
        out.push(Finding {
            name: "retx_timeout",
            connection: id,
            side: Some(i),
            frames: c
                .events
                .iter()
                .filter(|e| {
                    e.side == i
                        && e.kind == EventKind::Retransmission
                        && e.cause == Some(Cause::Timeout)
                })
                .map(|e| e.frame)
                .take(4)
                .collect(),
            detail,
            advice: "Compare it with the timeout the QP was given (IBV_QP_TIMEOUT, perftest -u, NCCL_IB_TIMEOUT): a shorter or growing one is the NIC's adaptive retransmission (mlx5: roce_adp_retrans) or a floor it enforces; the requester gives up after its retry count (at most 7) of them.",
        });
    }
    // 1: the two ends marking their packets with different traffic classes.
    let [a, b] = &c.sides;
    if let (Some(x), Some(y)) = (a.dscp, b.dscp) {
        if x != y || a.dscp_varied || b.dscp_varied {
            let varied = |s: &Side| if s.dscp_varied { " (and others)" } else { "" };
            out.push(Finding {
                name: "tclass_mismatch",
                connection: id,
                side: None,
                frames: Vec::new(),
                detail: format!(
                    "side a marks DSCP {x}{}, side b DSCP {y}{}",
                    varied(a),
                    varied(b)
                ),
                advice: "The ends mark their packets with different traffic classes (perftest --tclass, UCX_IB_TRAFFIC_CLASS, NCCL_IB_TC, rdma_cm's ToS): responses or CNPs then travel in another queue, perhaps lossy or unpaused; give both ends the same class (CNPs: the NIC's cnp_dscp).",
            });
        }
    }
    // 2: path MTU asymmetry between the two sides.
    if a.path_mtu > 0 && b.path_mtu > 0 && a.path_mtu != b.path_mtu {
        let (big, small) = if a.path_mtu > b.path_mtu {
            (0, 1)
        } else {
            (1, 0)
        };
        out.push(Finding {
            name: "pmtu_asymmetry",
            connection: id,
            side: Some(big),
            frames: Vec::new(),
            detail: format!(
                "side {} segments at {} bytes, side {} at {}",
                ["a", "b"][big],
                c.sides[big].path_mtu,
                ["a", "b"][small],
                c.sides[small].path_mtu
            ),
            advice: "Both QPs of a connection must use the same path MTU (IBV_QP_PATH_MTU), the smaller port's active MTU: a responder at the smaller one drops or rejects the larger packets (IBV_WC_LOC_LEN_ERR, hangs).",
        });
    }
}

/// Priorities that PFC paused and no RoCE connection of the capture uses (10).
fn pfc_findings(a: &Analysis, out: &mut Vec<Finding>) {
    let paused: Vec<_> = a.pfc.iter().filter(|p| p.xoff > 0).collect();
    // Link-level PAUSE counts for every priority: only per-priority pauses tell.
    if paused.is_empty() || paused.len() == 8 {
        return;
    }
    let roce: Vec<u8> = {
        let mut v: Vec<u8> = a
            .connections
            .iter()
            .flat_map(|c| c.sides.iter().filter_map(|s: &Side| s.priority))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    if roce.is_empty() {
        return;
    }
    for p in paused.into_iter().filter(|p| !roce.contains(&p.priority)) {
        out.push(Finding {
            name: "pfc_priority_without_roce",
            connection: None,
            side: None,
            frames: p.storms.iter().map(|s| s.2).take(4).collect(),
            detail: format!(
                "priority {} paused by {} frames ({:.3} ms in all) and none of the capture's RoCE is on it (RoCE on {:?})",
                p.priority,
                p.xoff,
                p.paused_ns as f64 / 1e6,
                roce
            ),
            advice: "The PFC priority and the RoCE traffic's priority disagree (the DSCP or PCP to priority map, or the priorities PFC is enabled on): make the lossless priority the one RoCE is marked with.",
        });
    }
}

/// CM requests left unanswered, and those rejected, by reason (9).
fn cm_findings(a: &Analysis, out: &mut Vec<Finding>) {
    let cm = &a.cm;
    if cm.unanswered > 0 {
        out.push(Finding {
            name: "cm_unanswered_req",
            connection: None,
            side: None,
            frames: cm.unanswered_frames.iter().copied().take(4).collect(),
            detail: format!(
                "{} of the capture's {} CM connection requests got no reply or reject",
                cm.unanswered, cm.requests
            ),
            advice: "The passive side never answered: nothing listens on the service ID, its CM stopped answering (rxe's after about 1,000 connections), or its replies take another path; compare with the connections that did come up.",
        });
    }
    for r in &cm.rejects {
        out.push(Finding {
            name: "cm_rejected",
            connection: None,
            side: None,
            frames: vec![r.first_frame],
            detail: format!(
                "{} REJs with reason {} ({})",
                r.count,
                r.reason,
                r.name.unwrap_or("not one IBTA defines")
            ),
            advice: "The passive side refused the connection for this reason (IBTA Vol 1 §12.6.7.2): consumer_reject is its application; the others name what of the REQ it could not take (a GID, the QP type, the service ID, ...) or a resource it lacks.",
        });
    }
}
