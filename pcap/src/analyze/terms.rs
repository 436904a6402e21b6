//! What the two ends of a connection told each other before it began, as the capture shows
//! it: the CM's REQ and REP (IBTA Vol 1 §12.6.5, §12.6.8), or perftest's records over TCP
//! (its exchange without `-R`). The GIDs each end said it uses, the QPNs, and (from a REQ)
//! the path's local ACK timeout, retry counts, MTU and traffic class: the values the packets
//! are then compared with ([`Agreed`], the `gid_mismatch` and retry findings).
use std::net::{IpAddr, Ipv6Addr};

use roce_proto::cm::{path_mtu_bytes, Message};
use roce_proto::perftest::{Dest, Variant};
use roce_proto::Frame;

use super::pkt::Pkt;
use super::{Connection, HashMap};

/// REQs, REPs and perftest records kept at most (each a few dozen bytes): a capture of more
/// set-ups than this has the rest left out of the comparison.
const MAX_KEPT: usize = 1 << 16;

/// One end of an exchange: where it spoke from and what it said of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgreedEnd {
    /// The address its REQ, REP or TCP segment came from.
    pub from: IpAddr,
    /// The GID it said it uses (`None`: it said none, as perftest's records without `-x`).
    pub gid: Option<Ipv6Addr>,
    /// Its QPN (`None`: a REQ whose REP the capture does not have).
    pub qpn: Option<u32>,
    /// The READs and atomics it accepts outstanding (a REQ's or REP's responder resources,
    /// perftest's `out_reads`).
    pub reads_accepted: Option<u16>,
}

/// What two ends agreed for one connection ([`super::Analysis::agreed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreed {
    /// Where it was read: `cm` (a REQ, with its REP when captured) or `perftest`.
    pub by: &'static str,
    /// The frame of the REQ, or of the first perftest record.
    pub frame: u64,
    /// Over native InfiniBand (an LRH): the addresses are LIDs, not the GIDs'.
    pub native_ib: bool,
    /// The active end (the REQ's sender; perftest's first to send) and the other.
    pub ends: [AgreedEnd; 2],
    /// The REQ's local ACK timeout code (4.096 us x 2^code, §9.7.6.1.3; CM only).
    pub ack_timeout: Option<u8>,
    /// The REQ's retry count (3 bits).
    pub retry_count: Option<u8>,
    /// The REQ's RNR retry count (3 bits; 7 retries for ever).
    pub rnr_retry_count: Option<u8>,
    /// The REQ's path MTU, bytes.
    pub path_mtu: Option<u32>,
    /// The REQ's traffic class (its upper six bits the DSCP).
    pub traffic_class: Option<u8>,
    /// The connections whose QPs are these ends' (their ids), each with the index of the
    /// side that is end 0.
    pub connections: Vec<(usize, usize)>,
}

/// `g` as the address RoCE v2 sends from: an IPv4-mapped GID is its IPv4 address.
pub fn gid_addr(g: Ipv6Addr) -> IpAddr {
    match g.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(g),
    }
}

/// `g` unless it is all zeros (no GID given).
fn given(g: Ipv6Addr) -> Option<Ipv6Addr> {
    (!g.is_unspecified()).then_some(g)
}

/// A REQ as kept until the end.
#[derive(Debug, Clone, Copy)]
struct Req {
    frame: u64,
    native_ib: bool,
    src: IpAddr,
    dst: IpAddr,
    comm_id: u32,
    qpn: u32,
    gids: [Ipv6Addr; 2],
    ack_timeout: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    path_mtu: Option<u32>,
    traffic_class: u8,
    reads: u8,
}

/// A perftest record, with the TCP segment it came in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    pub(crate) frame: u64,
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) ports: (u16, u16),
    pub(crate) dest: Dest,
}

/// The perftest records a TCP payload holds (it holds whole records or none), at most 64.
pub(crate) fn records(payload: &[u8]) -> impl Iterator<Item = Dest> + '_ {
    let v = [
        Variant::Gid,
        Variant::GidDv,
        Variant::Plain,
        Variant::PlainDv,
    ]
    .into_iter()
    .find(|v| !payload.is_empty() && payload.len().is_multiple_of(v.wire_len()))
    .filter(|v| payload.len() / v.wire_len() <= 64);
    let n = v.map_or(0, |v| v.wire_len());
    payload
        .chunks(n.max(1))
        .take(if n == 0 { 0 } else { 64 })
        .map_while(move |c| Dest::parse(c, v?).ok())
}

/// The REQs, REPs and perftest records of a capture.
#[derive(Debug, Default)]
pub(super) struct TermsState {
    reqs: Vec<Req>,
    /// REPs by the REQ's communication ID they answer: (sender, QPN, responder resources).
    reps: HashMap<u32, (IpAddr, u32, u8)>,
    records: Vec<Record>,
}

impl TermsState {
    /// Notes the CM REQ or REP that `p` (parsed from `f`) carries.
    pub(super) fn note_cm(&mut self, p: &Pkt, f: &Frame<'_>) {
        let Some(cm) = p.cm else { return };
        if cm.rej.is_some() {
            return;
        }
        if cm.rep {
            if self.reps.len() < MAX_KEPT {
                let rr = cm_message(f).and_then(|m| match m {
                    Message::Rep(r) => Some(r.responder_resources),
                    _ => None,
                });
                self.reps
                    .insert(cm.remote_comm_id, (p.src, cm.local_qpn, rr.unwrap_or(0)));
            }
            return;
        }
        if self.reqs.len() >= MAX_KEPT {
            return;
        }
        let Some(Message::Req(r)) = cm_message(f) else {
            return;
        };
        let path = r.primary_path;
        self.reqs.push(Req {
            frame: p.frame,
            native_ib: f.lrh.is_some(),
            src: p.src,
            dst: p.dst,
            comm_id: r.local_comm_id,
            qpn: r.local_qpn,
            gids: [
                Ipv6Addr::from(path.local_port_gid),
                Ipv6Addr::from(path.remote_port_gid),
            ],
            ack_timeout: path.local_ack_timeout,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            path_mtu: path_mtu_bytes(r.path_packet_payload_mtu),
            traffic_class: path.traffic_class,
            reads: r.responder_resources,
        });
    }

    /// Notes a perftest record.
    pub(super) fn note_record(&mut self, r: Record) {
        if self.records.len() < MAX_KEPT {
            self.records.push(r);
        }
    }

    /// What was agreed, each tied to the connections (numbered already) of its QPs.
    pub(super) fn finish(self, conns: &[Box<Connection>]) -> Vec<Agreed> {
        let mut out = Vec::new();
        for q in &self.reqs {
            let rep = self.reps.get(&q.comm_id);
            out.push(Agreed {
                by: "cm",
                frame: q.frame,
                native_ib: q.native_ib,
                ends: [
                    AgreedEnd {
                        from: q.src,
                        gid: given(q.gids[0]),
                        qpn: Some(q.qpn),
                        reads_accepted: Some(u16::from(q.reads)),
                    },
                    AgreedEnd {
                        from: rep.map_or(q.dst, |r| r.0),
                        gid: given(q.gids[1]),
                        qpn: rep.map(|r| r.1),
                        reads_accepted: rep.map(|r| u16::from(r.2)),
                    },
                ],
                ack_timeout: Some(q.ack_timeout),
                retry_count: Some(q.retry_count),
                rnr_retry_count: Some(q.rnr_retry_count),
                path_mtu: q.path_mtu,
                traffic_class: Some(q.traffic_class),
                connections: Vec::new(),
            });
        }
        // perftest: the n-th record each way of one TCP connection are the n-th QP's ends.
        // Grouped in one pass (a capture can hold many records): by TCP connection, each
        // direction's records in capture order, the connections in order of first record.
        type Flow = ((IpAddr, u16), (IpAddr, u16));
        let mut flows: HashMap<Flow, [Vec<&Record>; 2]> = HashMap::default();
        let mut order: Vec<Flow> = Vec::new();
        for r in &self.records {
            let key = ((r.src, r.ports.0), (r.dst, r.ports.1));
            let rev = (key.1, key.0);
            let (k, way) = if flows.contains_key(&rev) {
                (rev, 1)
            } else {
                (key, 0)
            };
            let e = flows.entry(k).or_insert_with(|| {
                order.push(k);
                [Vec::new(), Vec::new()]
            });
            e[way].push(r);
        }
        let end = |r: &Record| AgreedEnd {
            from: r.src,
            gid: r.dest.gid.map(Ipv6Addr::from).and_then(given),
            qpn: Some(r.dest.qpn),
            reads_accepted: Some(r.dest.out_reads),
        };
        for k in &order {
            let [xs, ys] = &flows[k];
            for (&x, &y) in xs.iter().zip(ys) {
                // The first to send is end 0.
                let (x, y) = if x.frame <= y.frame { (x, y) } else { (y, x) };
                out.push(Agreed {
                    by: "perftest",
                    frame: x.frame,
                    native_ib: false,
                    ends: [end(x), end(y)],
                    ack_timeout: None,
                    retry_count: None,
                    rnr_retry_count: None,
                    path_mtu: None,
                    traffic_class: None,
                    connections: Vec::new(),
                });
            }
        }
        out.sort_by_key(|a| a.frame);
        tie(&mut out, conns);
        out
    }
}

/// The CM message `f` carries (a MAD on QP1).
fn cm_message(f: &Frame<'_>) -> Option<Message> {
    let p = f.packet().ok()?;
    let m = p.payload_ref();
    if m.len() < 256 || m[1] != 0x07 {
        return None;
    }
    let attr = u16::from_be_bytes([m[16], m[17]]);
    Message::parse(attr, &m[24..])?.ok()
}

/// Ties each agreement to the connections of its QPs: a side with an end's QPN at the address
/// of its GID (or of its exchange). Then the side opposite is the other end, wherever its
/// packets come from: that is what [`super::Analysis::findings`] compares.
fn tie(agreed: &mut [Agreed], conns: &[Box<Connection>]) {
    if agreed.is_empty() {
        return;
    }
    // Only the sides with a QPN some end named are looked up (a capture of 100,000 QPs and
    // no set-up in it builds nothing).
    let named: std::collections::HashSet<u32, foldhash::fast::RandomState> = agreed
        .iter()
        .flat_map(|g| g.ends.iter().filter_map(|e| e.qpn))
        .collect();
    let mut by_qp: HashMap<(u32, IpAddr), Vec<(usize, usize)>> = HashMap::default();
    for (ci, c) in conns.iter().enumerate() {
        for (si, s) in c.sides.iter().enumerate() {
            if let (Some(q), Some(a)) = (s.qpn.filter(|q| named.contains(q)), s.addr) {
                let v = by_qp.entry((q, a)).or_default();
                if v.len() < 16 {
                    v.push((ci, si));
                }
            }
        }
    }
    for ag in agreed.iter_mut() {
        for (e, end) in ag.ends.iter().enumerate() {
            let Some(q) = end.qpn else { continue };
            let mut at = vec![end.from];
            if let Some(g) = end.gid {
                at.push(gid_addr(g));
            }
            for addr in at {
                for &(ci, si) in by_qp.get(&(q, addr)).into_iter().flatten() {
                    let side0 = if e == 0 { si } else { 1 - si };
                    let id = conns[ci].id;
                    if !ag.connections.iter().any(|x| x.0 == id) {
                        ag.connections.push((id, side0));
                    }
                }
            }
        }
        ag.connections.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_records_are_kept_to_the_bound_and_paired_by_their_tcp_connection() {
        // A capture of records on as many TCP connections as it likes: MAX_KEPT are kept, in
        // one pass each (no search of every connection for every record).
        let mut t = TermsState::default();
        let dest = Dest {
            qpn: 7,
            ..Dest::default()
        };
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        for i in 0..(MAX_KEPT as u64 + 100) {
            let port = 1024 + (i / 2) as u16;
            let (src, dst, ports) = if i % 2 == 0 {
                (a, b, (port, 18515))
            } else {
                (b, a, (18515, port))
            };
            t.note_record(Record {
                frame: i + 1,
                src,
                dst,
                ports,
                dest,
            });
        }
        let agreed = t.finish(&[]);
        // One TCP connection per port, a record each way: as many pairs as records kept
        // over two, A (the first to send) end 0 of each.
        assert_eq!(agreed.len(), MAX_KEPT / 2);
        assert!(agreed
            .iter()
            .all(|g| g.ends[0].from == a && g.ends[1].from == b));
    }

    #[test]
    fn records_are_read_whole_or_not_at_all() {
        let d = Dest {
            qpn: 0x123,
            psn: 0x456,
            gid: Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]),
            out_reads: 16,
            ..Dest::default()
        };
        let mut one = vec![0u8; Variant::Gid.wire_len()];
        d.emit(&mut one).unwrap();
        assert_eq!(records(&one).collect::<Vec<_>>(), vec![d]);
        let two = [one.clone(), one.clone()].concat();
        assert_eq!(records(&two).count(), 2);
        // Cut, or with a byte more: none.
        assert_eq!(records(&one[..100]).count(), 0);
        let mut more = one.clone();
        more.push(0);
        assert_eq!(records(&more).count(), 0);
        assert_eq!(records(&[]).count(), 0);
        assert_eq!(
            gid_addr(Ipv6Addr::from(d.gid.unwrap())),
            "10.0.0.1".parse::<IpAddr>().unwrap()
        );
    }
}
