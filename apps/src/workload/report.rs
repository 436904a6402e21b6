//! What a workload run reports: operations and bytes by kind, time, goodput, retransmissions,
//! NAKs, CNPs, rate cuts, drops by reason, what the impairment stages did, and every
//! mismatch; as text (`Display`) or JSON (`Serialize`).
use std::collections::BTreeMap;
use std::fmt;

use roce_driver::impair::ImpairStats;
use roce_driver::{Link, Secrets};
use roce_stack::{Drops, Naks, QpStats};
use serde::Serialize;

use super::run::Side;
use super::{OpKind, Tally, Transport};

/// The report of a run (text via `Display`, JSON via `serde_json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Every byte and completion verified on both ends.
    pub ok: bool,
    /// Completed operations by kind.
    pub ops: BTreeMap<String, u64>,
    /// Payload bytes of completed operations.
    pub bytes: u64,
    /// Wall time of the workload.
    pub seconds: f64,
    /// Payload goodput.
    pub gbps: f64,
    /// Completed operations per second.
    pub msgs_per_sec: f64,
    /// Request packets sent again (both ends).
    pub retransmitted_packets: u64,
    /// NAKs sent, by kind (both ends).
    pub naks: Naks,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// CNPs sent (both ends).
    pub cnps_sent: u64,
    /// CNPs received (both ends).
    pub cnps_received: u64,
    /// Rate cuts the congestion controllers made (both ends).
    pub rate_cuts: u64,
    /// Lowest rate a cut set, bits/s (0: no cut).
    pub min_rate_bps: u64,
    /// Received datagrams dropped by the transport, by reason (both ends).
    pub drops: Drops,
    /// Bytes compared against the model (both ends).
    pub verified_bytes: u64,
    /// What the impairment stages did (both ends).
    pub impairment: ImpairStats,
    /// Every mismatch, with operation, QP, PSN and offset.
    pub errors: Vec<String>,
    /// Client (requester) device counters.
    pub client: QpStats,
    /// Server (responder) device counters.
    pub server: QpStats,
    /// Where the start PSNs, QPNs and memory keys came from: `"os-random"`, or `"seed N"`
    /// when the run was asked to be reproducible (and so predictable).
    pub secrets: String,
    /// How each end received: `"udp"` or `"packet"` (`null` when an end did not report).
    pub link: Links,
    /// Received datagrams whose ICRC was checked over every covered header field (both ends).
    pub icrc_full: u64,
    /// Received IPv4 datagrams whose identification and DF were not seen, accepted because
    /// some value of them makes the ICRC valid (both ends).
    pub icrc_solved: u64,
    /// Datagrams the packet link dropped before the device (not whole RoCEv2 datagrams for the
    /// endpoint), both ends.
    pub link_malformed: u64,
    /// Datagrams lost to a full packet-link receive ring, both ends.
    pub ring_dropped: u64,
    /// Datagrams both ends sent through the packet link's packet socket (frames it built).
    pub sent_packet_socket: u64,
    /// Datagrams both ends sent through UDP sockets.
    pub sent_udp: u64,
    /// What the UC and UD QPs delivered, per transport (empty when every QP is RC).
    pub unreliable: Vec<TransportDelivery>,
}

/// What the QPs of one unreliable transport delivered (the responder's count).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TransportDelivery {
    /// `"uc"` or `"ud"`.
    pub transport: String,
    /// QPs of this transport.
    pub qps: u32,
    /// Receive-consuming messages (SEND, SEND with immediate, WRITE with immediate) that
    /// arrived and verified.
    pub delivered: u64,
    /// Receive-consuming messages of the plans that never arrived.
    pub lost: u64,
    /// QPs whose final marker arrived.
    pub final_markers: u32,
    /// QPs whose memory was compared with the model and matched (a UC QP's only when nothing
    /// of it was lost).
    pub memory_verified: u32,
    /// UD: messages delivered after a later one (among `delivered`).
    pub late: u64,
    /// UD: messages delivered again (not in `delivered`).
    pub duplicates: u64,
}

fn unreliable(server: &Side) -> Vec<TransportDelivery> {
    let mut out: Vec<TransportDelivery> = Vec::new();
    for d in &server.deliveries {
        let name = d.transport.map_or("?", Transport::token);
        let row = match out.iter_mut().position(|r| r.transport == name) {
            Some(i) => &mut out[i],
            None => {
                out.push(TransportDelivery {
                    transport: name.into(),
                    ..TransportDelivery::default()
                });
                out.last_mut().expect("just pushed")
            }
        };
        row.qps += 1;
        row.delivered += d.delivered;
        row.lost += d.lost;
        row.final_markers += u32::from(d.final_marker);
        row.memory_verified += u32::from(d.memory_verified);
        row.late += d.late;
        row.duplicates += d.duplicates;
    }
    out
}

/// The link of each end.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Links {
    /// The client's (requester's).
    pub client: Option<Link>,
    /// The server's (responder's).
    pub server: Option<Link>,
}

impl Report {
    pub(crate) fn new(
        tally: &Tally,
        client: &Side,
        server: &Side,
        seconds: f64,
        secrets: Secrets,
    ) -> Self {
        let mut ops = BTreeMap::new();
        for (k, n) in OpKind::ALL.iter().zip(tally.ops) {
            ops.insert(k.name().to_string(), n);
        }
        let total_ops: u64 = tally.ops.iter().sum();
        let mut all = client.stats;
        all.add(&server.stats);
        let mut impairment = client.impairment;
        impairment.add(&server.impairment);
        let mut errors: Vec<String> = client
            .mismatches
            .iter()
            .map(|m| format!("client: {m}"))
            .collect();
        errors.extend(server.mismatches.iter().map(|m| format!("server: {m}")));
        if errors.is_empty() && !client.complete {
            errors.push("client: not every QP's work completed".into());
        }
        if errors.is_empty() && !server.complete {
            errors.push("server: not every QP's memory was verified".into());
        }
        Self {
            ok: errors.is_empty(),
            ops,
            bytes: tally.bytes,
            seconds,
            gbps: tally.bytes as f64 * 8.0 / seconds.max(1e-9) / 1e9,
            msgs_per_sec: total_ops as f64 / seconds.max(1e-9),
            retransmitted_packets: all.retransmitted_packets,
            naks: all.naks_sent,
            rnr_naks: all.naks_sent.rnr,
            cnps_sent: all.cnps_sent,
            cnps_received: all.cnps_received,
            rate_cuts: all.rate_cuts,
            min_rate_bps: all.min_rate_bps,
            drops: all.drops,
            verified_bytes: client.verified_bytes + server.verified_bytes,
            impairment,
            errors,
            client: client.stats,
            server: server.stats,
            link: Links {
                client: client.link,
                server: server.link,
            },
            icrc_full: all.icrc_full,
            icrc_solved: all.icrc_solved,
            unreliable: unreliable(server),
            link_malformed: client.link_malformed + server.link_malformed,
            ring_dropped: client.ring_dropped + server.ring_dropped,
            sent_packet_socket: client.sent.packet + server.sent.packet,
            sent_udp: client.sent.udp + server.sent.udp,
            secrets: match secrets.seed() {
                None => "os-random".into(),
                Some(s) => format!("seed {s}"),
            },
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "result          {}",
            match (self.ok, self.unreliable.is_empty()) {
                (true, true) => "OK: every byte and completion verified",
                (true, false) =>
                    "OK: every RC byte and completion, and every UC/UD message that arrived, verified",
                _ => "FAILED",
            }
        )?;
        let ops: Vec<String> = self
            .ops
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        writeln!(f, "operations      {}", ops.join(", "))?;
        writeln!(
            f,
            "bytes           {} ({:.1} MiB)",
            self.bytes,
            self.bytes as f64 / (1 << 20) as f64
        )?;
        writeln!(f, "time            {:.3} s", self.seconds)?;
        writeln!(
            f,
            "goodput         {:.3} Gb/s, {:.0} messages/s",
            self.gbps, self.msgs_per_sec
        )?;
        writeln!(f, "verified        {} bytes", self.verified_bytes)?;
        for u in &self.unreliable {
            writeln!(
                f,
                "{:<15} {} QPs: {} messages delivered ({} late, {} twice), {} lost; final marker on {}, memory verified on {}",
                u.transport,
                u.qps,
                u.delivered,
                u.late,
                u.duplicates,
                u.lost,
                u.final_markers,
                u.memory_verified
            )?;
        }
        writeln!(f, "retransmitted   {} packets", self.retransmitted_packets)?;
        let n = self.naks;
        writeln!(
            f,
            "NAKs sent       seq_err {}, rnr {}, invalid_request {}, remote_access {}, remote_op {}",
            n.seq_err, n.rnr, n.invalid_request, n.remote_access, n.remote_op
        )?;
        writeln!(
            f,
            "CNPs            sent {}, received {}",
            self.cnps_sent, self.cnps_received
        )?;
        if self.rate_cuts > 0 {
            writeln!(
                f,
                "rate cut        {} times, lowest {:.3} Gb/s",
                self.rate_cuts,
                self.min_rate_bps as f64 / 1e9
            )?;
        }
        let d = self.drops;
        writeln!(
            f,
            "drops           malformed {}, wrong_address {}, bad_icrc {}, unknown_qp {}, wrong_state {}, out_of_sequence {}, duplicate/stale {}, other {}",
            d.malformed,
            d.wrong_address,
            d.bad_icrc,
            d.unknown_qp,
            d.wrong_state,
            d.out_of_sequence,
            d.stale_response + d.ghost_response,
            d.bad_opcode + d.bad_pkey + d.no_resource + d.response_queue_full
        )?;
        let i = self.impairment;
        if i != ImpairStats::default() {
            writeln!(
                f,
                "impairment      lost {}, reordered {}, duplicated {}, corrupted {}, ce_marked {}",
                i.lost, i.reordered, i.duplicated, i.corrupted, i.ce_marked
            )?;
        }
        let name = |l: Option<Link>| l.map_or("?", Link::name);
        writeln!(
            f,
            "link            client {}, server {}; ICRC checked over the full headers {}, with the IPv4 identification/DF solved {}",
            name(self.link.client),
            name(self.link.server),
            self.icrc_full,
            self.icrc_solved
        )?;
        writeln!(
            f,
            "sent            through the packet socket {}, through UDP sockets {}",
            self.sent_packet_socket, self.sent_udp
        )?;
        if self.link_malformed + self.ring_dropped > 0 {
            writeln!(
                f,
                "link drops      malformed {}, lost to a full receive ring {}",
                self.link_malformed, self.ring_dropped
            )?;
        }
        if self.secrets != "os-random" {
            writeln!(
                f,
                "secrets         {} (PSNs, QPNs and keys are predictable)",
                self.secrets
            )?;
        }
        for e in &self.errors {
            writeln!(f, "error           {e}")?;
        }
        Ok(())
    }
}
