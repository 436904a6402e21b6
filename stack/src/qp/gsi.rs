//! QP1, the general services interface (IBTA Vol 1 §13.5.1): management datagrams (MADs) in
//! UD SEND ONLY packets, Q_Key 0x80010000, between the QP1s of two ports. The CM
//! ([`crate::cm`]) talks through it; so does anything else of the management plane.
//!
//! The device owns one [`Gsi`]: datagrams to QP1 are checked here (opcode, Q_Key, the
//! ICRC over the headers they came with, the MAD's length) and queued for whoever reads
//! MADs; MADs queued to send go out before any QP's traffic. Both queues are bounded; what
//! does not fit is dropped and counted, as a HCA drops QP1 traffic it has no receive WQE for.
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

use roce_proto::{mad, BthRepr, DethRepr, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RocePacket};

use crate::path::{IcrcVerdict, PathConfig, RxMeta, SeedCache};

/// QP1's QPN.
pub const GSI_QPN: Qpn = Qpn(1);

/// The Q_Key of QP1 (§13.5.1: the well-known GSI Q_Key).
pub const GSI_QKEY: QKey = QKey(0x8001_0000);

/// MADs queued each way, at most.
pub const GSI_QUEUE: usize = 256;

/// A MAD received on QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMad {
    /// Where it came from (IP address and UDP source port).
    pub from: SocketAddr,
    /// The local address it was sent to (unspecified when the link does not know).
    pub to: IpAddr,
    /// The sender's QPN (its DETH source QP; 1 for a GSI).
    pub src_qp: Qpn,
    /// The 256 bytes.
    pub mad: [u8; mad::MAD_LEN],
}

/// A MAD to send from QP1 to a port's QP1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingMad {
    /// Our address (the source of the datagram).
    pub local: IpAddr,
    /// The peer's address.
    pub remote: IpAddr,
    /// The peer's UDP port (4791).
    pub remote_port: u16,
    /// The 256 bytes.
    pub mad: [u8; mad::MAD_LEN],
}

/// QP1 counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GsiStats {
    /// MADs received and queued.
    pub received: u64,
    /// MADs sent.
    pub sent: u64,
    /// Datagrams to QP1 that were not a MAD in a UD SEND ONLY with the GSI Q_Key.
    pub malformed: u64,
    /// Datagrams to QP1 whose ICRC was wrong.
    pub bad_icrc: u64,
    /// MADs dropped because a queue was full.
    pub overflow: u64,
}

/// The device's QP1.
#[derive(Debug, Default)]
pub struct Gsi {
    inbox: VecDeque<ReceivedMad>,
    outbox: VecDeque<OutgoingMad>,
    psn: u32,
    stats: GsiStats,
}

/// Why QP1 did not queue a datagram (counted in its stats too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MadRefusal {
    /// Not a UD SEND with the GSI's Q_Key, or shorter than a MAD.
    Malformed,
    /// ICRC mismatch.
    BadIcrc,
    /// The inbox is full: the consumer is not reading.
    QueueFull,
}

impl Gsi {
    /// Checks and queues a datagram addressed to QP1. `Err` says why no MAD was queued
    /// (also counted in the GSI's stats).
    pub(crate) fn receive(&mut self, meta: &RxMeta, datagram: &[u8]) -> Result<(), MadRefusal> {
        let Ok(p) = RocePacket::new_checked(datagram) else {
            self.stats.malformed += 1;
            return Err(MadRefusal::Malformed);
        };
        let ok = p.bth().opcode() == Opcode::UD_SEND_ONLY
            && p.deth().is_some_and(|d| d.qkey() == GSI_QKEY);
        let payload = p.payload_ref();
        if !ok || payload.len() < mad::MAD_LEN {
            self.stats.malformed += 1;
            return Err(MadRefusal::Malformed);
        }
        // The ICRC over the headers it came with, as every QP checks it.
        let path = PathConfig {
            local: meta.dst,
            remote: meta.src.ip(),
            remote_src_port: meta.src.port(),
            ..PathConfig::default()
        };
        if SeedCache::default().check_rx(&path, meta, datagram) == IcrcVerdict::Bad {
            self.stats.bad_icrc += 1;
            return Err(MadRefusal::BadIcrc);
        }
        if self.inbox.len() >= GSI_QUEUE {
            self.stats.overflow += 1;
            return Err(MadRefusal::QueueFull);
        }
        let mut m = [0u8; mad::MAD_LEN];
        m.copy_from_slice(&payload[..mad::MAD_LEN]);
        self.inbox.push_back(ReceivedMad {
            from: meta.src,
            to: meta.dst,
            src_qp: p.deth().map_or(GSI_QPN, |d| d.src_qp()),
            mad: m,
        });
        self.stats.received += 1;
        Ok(())
    }

    /// The next MAD received, oldest first.
    pub fn take(&mut self) -> Option<ReceivedMad> {
        self.inbox.pop_front()
    }

    /// Queues a MAD to send; `false` (and counted) when the queue is full.
    pub fn send(&mut self, m: OutgoingMad) -> bool {
        if self.outbox.len() >= GSI_QUEUE {
            self.stats.overflow += 1;
            return false;
        }
        self.outbox.push_back(m);
        true
    }

    /// `true` when MADs wait to be sent.
    pub fn has_output(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Counters.
    pub fn stats(&self) -> GsiStats {
        self.stats
    }

    /// Writes the next queued MAD as a UD SEND ONLY datagram into `buf`; returns its path.
    pub(crate) fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<PathConfig> {
        let m = self.outbox.pop_front()?;
        let path = PathConfig {
            local: m.local,
            remote: m.remote,
            // What rxe and the kernel pick for QP1 to QP1 (rdma_get_udp_sport, flow label 0).
            src_port: PathConfig::udp_sport(GSI_QPN.0, GSI_QPN.0),
            remote_port: m.remote_port,
            ecn: roce_proto::Ecn::NotEct,
            ..PathConfig::default()
        };
        let psn = self.psn;
        self.psn = (self.psn + 1) & 0x00ff_ffff;
        let repr = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                pkey: PKey::DEFAULT,
                dest_qp: GSI_QPN,
                psn: Psn::new(psn),
                ..BthRepr::default()
            },
            deth: Some(DethRepr {
                qkey: GSI_QKEY,
                resv: 0,
                src_qp: GSI_QPN,
            }),
            payload: &m.mad,
            ..PacketRepr::default()
        };
        let len = repr.buffer_len();
        buf.clear();
        buf.resize(len, 0);
        match repr.emit(buf) {
            Ok(n) if n > 0 => {
                path.tx_icrc(n).fill(&mut buf[..n]);
                buf.truncate(n);
                self.stats.sent += 1;
                Some(path)
            }
            _ => {
                // Cannot happen for a fixed-size MAD; counted rather than sent half-made.
                buf.clear();
                self.stats.malformed += 1;
                None
            }
        }
    }
}
