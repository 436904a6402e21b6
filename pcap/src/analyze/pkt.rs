//! What the analysis needs of one captured packet, taken from the decoded frame.
use std::net::IpAddr;

use roce_proto::aeth::AethKind;
use roce_proto::cm::MessageView;
use roce_proto::{Ecn, Frame, Opcode, RocePacket};

/// A CM message's connection facts (for pairing the two directions of a connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CmFacts {
    /// REQ or REP.
    pub(crate) rep: bool,
    pub(crate) local_comm_id: u32,
    pub(crate) remote_comm_id: u32,
    pub(crate) local_qpn: u32,
    pub(crate) starting_psn: u32,
    /// A REJ: its reason and the message it rejects (0 REQ, 1 REP, 2 none).
    pub(crate) rej: Option<(u16, u8)>,
}

/// One RoCE packet, as the analysis sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pkt {
    pub(crate) frame: u64,
    /// Nanoseconds since the first packet of the capture.
    pub(crate) t: u64,
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) sport: u16,
    pub(crate) ecn: Ecn,
    pub(crate) opcode: Opcode,
    pub(crate) dest_qp: u32,
    pub(crate) psn: u32,
    pub(crate) ack_req: bool,
    pub(crate) aeth: Option<AethKind>,
    pub(crate) msn: u32,
    /// READ request length (RETH DMA length).
    pub(crate) dma_len: Option<u32>,
    /// A READ request's end address (VA + length): a READ re-issued from the middle of its
    /// span ends where the original did.
    pub(crate) read_end: Option<u64>,
    pub(crate) payload_len: u32,
    /// `Some(false)` when the ICRC was checked and is wrong.
    pub(crate) icrc_ok: Option<bool>,
    /// The transport bytes' identity (duplicates are byte-identical): [`content_key`].
    pub(crate) hash: u64,
    pub(crate) cm: Option<CmFacts>,
    /// Its priority: the outer VLAN tag's PCP, else DSCP / 8 (RoCE NICs' default map from
    /// DSCP to priority), else 0.
    pub(crate) prio: u8,
    /// Its IP DSCP (the traffic class's upper six bits; `None`: not IP, RoCEv1).
    pub(crate) dscp: Option<u8>,
    /// Carried as RoCE v1 (EtherType 0x8915, a GRH and no IP).
    pub(crate) v1: bool,
    /// The share of a split analysis its host pair goes to ([`super::shard_of`]), taken
    /// here where the addresses are at hand.
    pub(crate) share: u8,
}

/// What tells byte-identical packets apart: the ICRC field (a CRC over every byte it
/// covers) and the length; free, where a hash over the bytes would cost more than the rest
/// of the analysis.
fn content_key(t: &[u8]) -> u64 {
    match t.len().checked_sub(4) {
        Some(i) => {
            let icrc = u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
            (t.len() as u64) << 32 | u64::from(icrc)
        }
        None => t.len() as u64,
    }
}

impl Pkt {
    /// The packet of a decoded frame, or `None` when it has no BTH.
    pub(crate) fn of(frame_no: u64, t: u64, f: &Frame<'_>) -> Option<Self> {
        let bth = f.bth()?;
        // Endpoints: the IP addresses; on native InfiniBand (and RoCEv1) the GRH's GIDs, else
        // the LRH's LIDs as ::LID.
        let gid = |b: &[u8]| -> IpAddr {
            let mut a = [0u8; 16];
            a.copy_from_slice(b);
            IpAddr::V6(std::net::Ipv6Addr::from(a))
        };
        let lid = |l: u16| IpAddr::V6(std::net::Ipv6Addr::from(u128::from(l)));
        let (src, dst, sport) = match (&f.ip, &f.udp, f.grh, f.lrh) {
            (Some(i), Some(u), _, _) => (i.src, i.dst, u.src_port),
            (Some(i), None, _, _) => (i.src, i.dst, 0),
            (None, _, Some(g), _) if g.len() >= 40 => (gid(&g[8..24]), gid(&g[24..40]), 0),
            (None, _, _, Some(l)) if l.len() >= 8 => (
                lid(u16::from_be_bytes([l[6], l[7]])),
                lid(u16::from_be_bytes([l[2], l[3]])),
                0,
            ),
            _ => (
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                0,
            ),
        };
        let p = f.packet().ok();
        // Checked over the transport bytes: `p`'s.
        let icrc_ok = p.and_then(|_| f.icrc_matches().ok());
        let header = p.or_else(|| {
            let op = bth.opcode;
            (f.transport.len() >= op.header_len()).then(|| RocePacket::new_unchecked(f.transport))
        });
        let (aeth, msn) = match header.as_ref().and_then(|h| h.aeth()) {
            Some(a) => (Some(a.syndrome().kind()), a.msn().0),
            None => (None, 0),
        };
        let dma_len = header
            .as_ref()
            .filter(|_| bth.opcode.operation() == 0x0c)
            .and_then(|h| h.reth())
            .map(|r| (r.dma_len(), r.va().wrapping_add(u64::from(r.dma_len()))));
        let (dma_len, read_end) = (dma_len.map(|d| d.0), dma_len.map(|d| d.1));
        let payload_len = match &p {
            Some(p) => p.payload().len() as u32,
            None => f
                .claimed_len
                .saturating_sub(bth.opcode.header_len() + roce_proto::ICRC_LEN)
                as u32,
        };
        let cm = p.and_then(|p| {
            let deth = p.deth()?;
            if bth.dest_qp.0 > 1 && deth.src_qp().0 > 1 {
                return None;
            }
            let m = p.payload_ref();
            if m.len() < 256 || m[1] != 0x07 {
                return None;
            }
            let attr = u16::from_be_bytes([m[16], m[17]]);
            match MessageView::parse(attr, &m[24..])?.ok()? {
                MessageView::Req(r) => Some(CmFacts {
                    rep: false,
                    local_comm_id: r.local_comm_id(),
                    remote_comm_id: 0,
                    local_qpn: r.local_qpn(),
                    starting_psn: r.starting_psn(),
                    rej: None,
                }),
                MessageView::Rep(r) => Some(CmFacts {
                    rep: true,
                    local_comm_id: r.local_comm_id(),
                    remote_comm_id: r.remote_comm_id(),
                    local_qpn: r.local_qpn(),
                    starting_psn: r.starting_psn(),
                    rej: None,
                }),
                MessageView::Rej(r) => Some(CmFacts {
                    rep: false,
                    local_comm_id: r.local_comm_id(),
                    remote_comm_id: r.remote_comm_id(),
                    local_qpn: 0,
                    starting_psn: 0,
                    rej: Some((r.reason(), r.message_rejected())),
                }),
                _ => None,
            }
        });
        Some(Self {
            frame: frame_no,
            t,
            src,
            dst,
            sport,
            ecn: f.ecn(),
            opcode: bth.opcode,
            dest_qp: bth.dest_qp.0,
            psn: bth.psn.value(),
            ack_req: bth.ack_req,
            aeth,
            msn,
            dma_len,
            read_end,
            payload_len,
            icrc_ok,
            hash: content_key(f.transport),
            cm,
            share: super::shard_of(src, dst) as u8,
            dscp: f.ip.as_ref().map(|i| i.dscp),
            v1: f.ip.is_none() && f.lrh.is_none() && f.grh.is_some(),
            prio: match (f.link.as_ref().and_then(|l| l.vlans[0]), &f.ip) {
                (Some(v), _) => v.pcp,
                (None, Some(i)) => i.dscp >> 3,
                (None, None) => 0,
            },
        })
    }
}
