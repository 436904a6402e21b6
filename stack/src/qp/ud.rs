//! Unreliable datagram QPs (IBTA Vol 1 §9.8, §10.2.4): SEND and SEND with immediate, one
//! packet per message, to an address handle (the peer's address, QPN and Q_Key) given with
//! each work request; no connection, no acknowledgement, no retransmission.
//!
//! * **Q_Keys** (§10.2.4): a datagram is taken only when its DETH Q_Key equals the QP's; a
//!   work request whose Q_Key has the high-order bit set sends with the QP's own Q_Key
//!   instead (the controlled-Q_Key rule that keeps unprivileged senders off privileged
//!   Q_Keys).
//! * **Size**: a message is at most the path MTU (one UD SEND ONLY packet); longer posts are
//!   refused.
//! * **Receive buffers**: as verbs users expect on RoCEv2, the first 40 bytes of the receive
//!   buffer are the GRH area: for IPv4 its last 20 bytes hold the datagram's IPv4 header
//!   (identification and DF as the link saw them, TTL 64 when the link did not say), for IPv6
//!   the 40-byte IPv6 header; the payload follows. The completion carries the sender's QPN
//!   and address. A datagram with no receive posted, or too long for the buffer, is dropped
//!   (and counted; the buffer then completes with a length error), as a HCA does.
//! * **ICRC**: checked over the headers the datagram came with, as RC QPs check it.
use std::collections::VecDeque;
use std::net::IpAddr;

use roce_proto::{BthRepr, DethRepr, ImmDt, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RocePacket};

use crate::handle::{CqHandle, PdHandle};
use crate::memory::{MrTable, SgList};
use crate::path::{IcrcVerdict, Ipv4Seen, PathConfig, RxMeta, SeedCache};
use crate::qp::PostError;
use crate::wr::{Completion, RecvRequest, WcOpcode, WcStatus};

/// Bytes of the GRH area at the start of every UD receive buffer.
pub const GRH_LEN: usize = 40;

/// Where a UD message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressHandle {
    /// Our address (the datagram's source).
    pub local: IpAddr,
    /// The peer's address.
    pub remote: IpAddr,
    /// The peer's UDP port (4791).
    pub remote_port: u16,
    /// The peer's QPN.
    pub dest_qpn: Qpn,
    /// The Q_Key to send with (high bit set: this QP's own Q_Key instead).
    pub qkey: QKey,
}

/// A UD send work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdSend {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to send (at most the path MTU).
    pub sgl: SgList,
    /// Where to.
    pub ah: AddressHandle,
    /// Immediate data (SEND with immediate).
    pub imm: Option<u32>,
    /// Ask for a completion.
    pub signaled: bool,
}

/// Why a UD QP did not deliver a datagram (IBTA Vol 1 §9.6 header and Q_Key checks, §10.7
/// receive queue; counted in [`UdStats`] too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UdRefusal {
    /// Not a UD SEND with a DETH.
    Malformed,
    /// ICRC mismatch.
    BadIcrc,
    /// The DETH's Q_Key is not this QP's.
    BadQkey,
    /// No receive was posted.
    NoReceive,
    /// The message and its GRH area are longer than the receive (completed with an error).
    TooLong,
    /// The receive's buffer refused the write (completed with an error).
    Protection,
}

/// UD QP counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UdStats {
    /// Messages sent.
    pub sent: u64,
    /// Messages received into a buffer.
    pub received: u64,
    /// Datagrams dropped for a Q_Key other than the QP's.
    pub bad_qkey: u64,
    /// Datagrams dropped for a bad ICRC.
    pub bad_icrc: u64,
    /// Datagrams that were not UD SENDs, or were malformed.
    pub malformed: u64,
    /// Datagrams dropped because no receive was posted.
    pub no_receive: u64,
    /// Datagrams longer than the receive buffer (the buffer completes with a length error).
    pub too_long: u64,
}

/// A UD queue pair.
#[derive(Debug)]
pub struct UdQp {
    qpn: Qpn,
    pd: PdHandle,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    qkey: QKey,
    mtu: u32,
    psn: u32,
    max_wr: usize,
    sq: VecDeque<UdSend>,
    rq: VecDeque<RecvRequest>,
    stats: UdStats,
    scratch: Vec<u8>,
}

impl UdQp {
    pub(crate) fn new(
        qpn: Qpn,
        pd: PdHandle,
        (send_cq, recv_cq): (CqHandle, CqHandle),
        qkey: QKey,
        mtu: u32,
        max_wr: usize,
    ) -> Self {
        Self {
            qpn,
            pd,
            send_cq,
            recv_cq,
            qkey,
            mtu,
            psn: 0,
            max_wr,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            stats: UdStats::default(),
            scratch: Vec::new(),
        }
    }

    /// Its QPN.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// Its Q_Key.
    pub fn qkey(&self) -> QKey {
        self.qkey
    }

    /// Counters.
    pub fn stats(&self) -> UdStats {
        self.stats
    }

    /// `true` when sends are queued.
    pub(crate) fn has_output(&self) -> bool {
        !self.sq.is_empty()
    }

    pub(crate) fn post_send(&mut self, mrs: &MrTable, wr: UdSend) -> Result<(), PostError> {
        if self.sq.len() >= self.max_wr {
            return Err(PostError::QueueFull);
        }
        if wr.sgl.total_len() > u64::from(self.mtu) {
            return Err(PostError::TooLong);
        }
        if !mrs.check_sgl(self.pd, &wr.sgl, false) {
            return Err(PostError::InvalidSge);
        }
        self.sq.push_back(wr);
        Ok(())
    }

    pub(crate) fn post_recv(&mut self, mrs: &MrTable, r: RecvRequest) -> Result<(), PostError> {
        if self.rq.len() >= self.max_wr {
            return Err(PostError::QueueFull);
        }
        if !mrs.check_sgl(self.pd, &r.sgl, true) {
            return Err(PostError::InvalidSge);
        }
        self.rq.push_back(r);
        Ok(())
    }

    /// Writes the next queued message as a datagram into `buf`; returns its path.
    pub(crate) fn poll_transmit(
        &mut self,
        mrs: &MrTable,
        cqs: &mut [VecDeque<Completion>],
        buf: &mut Vec<u8>,
    ) -> Option<PathConfig> {
        let wr = self.sq.pop_front()?;
        let len = wr.sgl.total_len() as usize;
        let status = match mrs.gather(self.pd, &wr.sgl, 0, len, &mut self.scratch) {
            Ok(payload) => {
                let qkey = if wr.ah.qkey.0 & 0x8000_0000 != 0 {
                    self.qkey
                } else {
                    wr.ah.qkey
                };
                let repr = PacketRepr {
                    bth: BthRepr {
                        opcode: if wr.imm.is_some() {
                            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
                        } else {
                            Opcode::UD_SEND_ONLY
                        },
                        pkey: PKey::DEFAULT,
                        dest_qp: wr.ah.dest_qpn,
                        psn: Psn::new(self.psn),
                        pad_count: PacketRepr::pad_for(payload.len()),
                        ..BthRepr::default()
                    },
                    deth: Some(DethRepr {
                        qkey,
                        resv: 0,
                        src_qp: self.qpn,
                    }),
                    immdt: wr.imm.map(ImmDt),
                    payload,
                    ..PacketRepr::default()
                };
                buf.clear();
                buf.resize(repr.buffer_len(), 0);
                match repr.emit(buf) {
                    Ok(n) if n > 0 => {
                        buf.truncate(n);
                        WcStatus::Success
                    }
                    _ => WcStatus::LocQpOpErr,
                }
            }
            Err(_) => WcStatus::LocProtErr,
        };
        let path = PathConfig {
            local: wr.ah.local,
            remote: wr.ah.remote,
            src_port: PathConfig::udp_sport(self.qpn.0, wr.ah.dest_qpn.0),
            remote_port: wr.ah.remote_port,
            ..PathConfig::default()
        };
        if wr.signaled || status != WcStatus::Success {
            if let Some(cq) = cqs.get_mut(self.send_cq.0 as usize) {
                cq.push_back(Completion {
                    wr_id: wr.wr_id,
                    status,
                    opcode: WcOpcode::Send,
                    byte_len: if status == WcStatus::Success {
                        len as u32
                    } else {
                        0
                    },
                    imm_data: None,
                    invalidated_rkey: None,
                    qp_num: self.qpn,
                    src_qp: None,
                    src: None,
                });
            }
        }
        if status != WcStatus::Success {
            buf.clear();
            return None;
        }
        self.psn = (self.psn + 1) & 0x00ff_ffff;
        path.tx_icrc(buf.len()).fill(buf);
        self.stats.sent += 1;
        Some(path)
    }

    /// Takes a datagram addressed to this QP: checks, places it and completes a receive.
    /// `Err` says why it was not delivered (also counted in [`UdStats`]).
    pub(crate) fn receive(
        &mut self,
        mrs: &mut MrTable,
        cqs: &mut [VecDeque<Completion>],
        meta: &RxMeta,
        datagram: &[u8],
    ) -> Result<(), UdRefusal> {
        let Ok(p) = RocePacket::new_checked(datagram) else {
            self.stats.malformed += 1;
            return Err(UdRefusal::Malformed);
        };
        let op = p.bth().opcode();
        let Some(deth) = p.deth() else {
            self.stats.malformed += 1;
            return Err(UdRefusal::Malformed);
        };
        if op != Opcode::UD_SEND_ONLY && op != Opcode::UD_SEND_ONLY_WITH_IMMEDIATE {
            self.stats.malformed += 1;
            return Err(UdRefusal::Malformed);
        }
        let path = PathConfig {
            local: meta.dst,
            remote: meta.src.ip(),
            remote_src_port: meta.src.port(),
            ..PathConfig::default()
        };
        if SeedCache::default().check_rx(&path, meta, datagram) == IcrcVerdict::Bad {
            self.stats.bad_icrc += 1;
            return Err(UdRefusal::BadIcrc);
        }
        if deth.qkey() != self.qkey {
            self.stats.bad_qkey += 1;
            return Err(UdRefusal::BadQkey);
        }
        let Some(r) = self.rq.pop_front() else {
            self.stats.no_receive += 1;
            return Err(UdRefusal::NoReceive);
        };
        let payload = p.payload_ref();
        let total = GRH_LEN + payload.len();
        let complete = |cqs: &mut [VecDeque<Completion>], status: WcStatus, n: u32| {
            if let Some(cq) = cqs.get_mut(self.recv_cq.0 as usize) {
                cq.push_back(Completion {
                    wr_id: r.wr_id,
                    status,
                    opcode: WcOpcode::Recv,
                    byte_len: n,
                    imm_data: p.immdt().map(|i| i.0),
                    invalidated_rkey: None,
                    qp_num: self.qpn,
                    src_qp: Some(deth.src_qp()),
                    src: Some(meta.src),
                });
            }
        };
        if total as u64 > r.sgl.total_len() {
            self.stats.too_long += 1;
            complete(cqs, WcStatus::LocLenErr, 0);
            return Err(UdRefusal::TooLong);
        }
        let grh = grh_area(meta, datagram.len());
        let placed = mrs
            .scatter(self.pd, &r.sgl, 0, &grh)
            .and_then(|()| mrs.scatter(self.pd, &r.sgl, GRH_LEN as u64, payload));
        match placed {
            Ok(()) => {
                self.stats.received += 1;
                complete(cqs, WcStatus::Success, total as u32);
                Ok(())
            }
            Err(_) => {
                complete(cqs, WcStatus::LocProtErr, 0);
                Err(UdRefusal::Protection)
            }
        }
    }
}

/// The 40-byte GRH area of a received datagram of `udp_payload_len` bytes: the IPv4 header
/// in its last 20 bytes, or the IPv6 header.
fn grh_area(meta: &RxMeta, udp_payload_len: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let ecn = meta.ecn.bits();
    match (meta.src.ip(), meta.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = &mut g[20..];
            h[0] = 0x45;
            h[1] = ecn;
            h[2..4].copy_from_slice(&((20 + 8 + udp_payload_len) as u16).to_be_bytes());
            let (id, df) = match meta.ipv4 {
                Ipv4Seen::Seen {
                    identification,
                    dont_fragment,
                } => (identification, dont_fragment),
                Ipv4Seen::Unseen => (0, true),
            };
            h[4..6].copy_from_slice(&id.to_be_bytes());
            h[6] = if df { 0x40 } else { 0 };
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let mut sum = 0u32;
            for w in h.chunks(2) {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        (src, dst) => {
            g[0] = 0x60 | (ecn >> 4);
            g[1] = ecn << 4;
            g[4..6].copy_from_slice(&((8 + udp_payload_len) as u16).to_be_bytes());
            g[6] = 17;
            g[7] = 64;
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            };
            g[8..24].copy_from_slice(&v6(src));
            g[24..40].copy_from_slice(&v6(dst));
        }
    }
    g
}
