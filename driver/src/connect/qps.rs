//! The QP half of a handshake, as perftest does it over TCP: each end creates its QPs,
//! announces each one's QPN and first PSN ([`QpInfo`]) and the buffers it exposes
//! ([`RemoteBuffer`]), then connects QP `i` to the peer's QP `i` with the shared
//! [`ConnectParams`], RESET→INIT→RTR→RTS.
use std::net::SocketAddr;

use roce_proto::{Ecn, Psn, Qpn, RKey};
use roce_stack::{
    Access, CcConfig, ConnectParams, CqHandle, Device, MemoryRegion, PathConfig, PdHandle, QpCaps,
    RemoteAddr,
};
use serde::{Deserialize, Serialize};

use crate::{AppError, DriverError, PeerFault};

/// Serde adapters for the codec's 24- and 32-bit newtypes, as plain numbers on the wire; a
/// number out of a field's range is refused, not truncated.
pub mod wire {
    use roce_proto::{Psn, Qpn, RKey};
    use serde::{Deserialize, Deserializer, Serializer};

    /// A newtype carried as a `u32`.
    pub trait AsU32: Copy {
        /// The number on the wire.
        fn to_u32(self) -> u32;
        /// The value of a number, if it is in range.
        fn from_u32(v: u32) -> Option<Self>;
    }
    impl AsU32 for Qpn {
        fn to_u32(self) -> u32 {
            self.0
        }
        fn from_u32(v: u32) -> Option<Self> {
            (v <= 0xff_ffff).then_some(Self(v))
        }
    }
    impl AsU32 for Psn {
        fn to_u32(self) -> u32 {
            self.value()
        }
        fn from_u32(v: u32) -> Option<Self> {
            (v <= 0xff_ffff).then(|| Self::new(v))
        }
    }
    impl AsU32 for RKey {
        fn to_u32(self) -> u32 {
            self.0
        }
        fn from_u32(v: u32) -> Option<Self> {
            Some(Self(v))
        }
    }

    /// `#[serde(with = "wire")]`: serialises.
    pub fn serialize<T: AsU32, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(v.to_u32())
    }

    /// `#[serde(with = "wire")]`: deserialises, refusing out-of-range numbers.
    pub fn deserialize<'de, T: AsU32, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        let v = u32::deserialize(d)?;
        T::from_u32(v).ok_or_else(|| serde::de::Error::custom(format!("{v} is out of range")))
    }
}

/// What an end announces about one of its QPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpInfo {
    /// Its QPN.
    #[serde(with = "wire")]
    pub qpn: Qpn,
    /// The first PSN it sends.
    #[serde(with = "wire")]
    pub psn: Psn,
}

/// A buffer an end exposes to its peer's RDMA operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteBuffer {
    /// Virtual address of its first byte.
    pub va: u64,
    /// The R_Key that grants access.
    #[serde(with = "wire")]
    pub rkey: RKey,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteBuffer {
    /// The buffer as CM private data: `tag`, then its address, R_Key and length big-endian
    /// (20 bytes), the way roce's applications hand a peer their region in a REP or RTU.
    pub fn to_private_data(&self, tag: &[u8]) -> Vec<u8> {
        let mut v = tag.to_vec();
        v.extend_from_slice(&self.va.to_be_bytes());
        v.extend_from_slice(&self.rkey.0.to_be_bytes());
        v.extend_from_slice(&self.len.to_be_bytes());
        v
    }

    /// The buffer [`RemoteBuffer::to_private_data`] wrote after `tag`, or `None` when `b`
    /// does not start with `tag` or is too short (bytes after it are ignored: private data
    /// is padded).
    pub fn from_private_data(b: &[u8], tag: &[u8]) -> Option<Self> {
        let b = b.strip_prefix(tag)?;
        Some(Self {
            va: u64::from_be_bytes(b.get(0..8)?.try_into().ok()?),
            rkey: RKey(u32::from_be_bytes(b.get(8..12)?.try_into().ok()?)),
            len: u64::from_be_bytes(b.get(12..20)?.try_into().ok()?),
        })
    }

    /// The whole of `mr`.
    pub fn of(mr: &MemoryRegion) -> Self {
        Self {
            va: mr.va(),
            rkey: mr.rkey(),
            len: mr.len() as u64,
        }
    }

    /// The remote address of byte `offset`.
    pub const fn at(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            va: self.va.wrapping_add(offset),
            rkey: self.rkey,
        }
    }
}

/// A QP of this end with its completion queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalQp {
    /// Its QPN.
    pub qpn: Qpn,
    /// Its send CQ.
    pub send_cq: CqHandle,
    /// Its receive CQ.
    pub recv_cq: CqHandle,
}

/// Remote access of the QPs the applications use: everything.
pub const ALL_REMOTE: Access =
    Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0);

/// Creates `n` QPs (each with its own send and receive CQ, sized by `caps`) and moves them to
/// INIT with the remote `access` they grant.
pub fn create_qps(
    dev: &mut Device,
    pd: PdHandle,
    n: u32,
    caps: QpCaps,
    access: Access,
) -> Result<Vec<LocalQp>, AppError> {
    let params = ConnectParams {
        access,
        ..ConnectParams::default()
    };
    (0..n)
        .map(|_| {
            let (send_cq, recv_cq) = (dev.create_cq(), dev.create_cq());
            let qpn = dev.create_qp(pd, send_cq, recv_cq, caps)?;
            dev.modify_qp(qpn, &params.init_attr())
                .map_err(|source| AppError::Modify { qpn, source })?;
            Ok(LocalQp {
                qpn,
                send_cq,
                recv_cq,
            })
        })
        .collect()
}

/// The QPs an end announces to its peer: QPN and first PSN of each.
pub fn qp_infos(qps: &[LocalQp], psns: &[Psn]) -> Vec<QpInfo> {
    qps.iter()
        .zip(psns)
        .map(|(q, &psn)| QpInfo { qpn: q.qpn, psn })
        .collect()
}

/// Refuses a peer that speaks another version of a control protocol (`what`: its name).
pub fn check_protocol(what: &'static str, got: u32, want: u32) -> Result<(), PeerFault> {
    if got == want {
        Ok(())
    } else {
        Err(PeerFault::Protocol { what, got, want })
    }
}

/// How an end's QPs reach the peer's: the addresses and UDP ports of the two RoCE sockets, the
/// connection settings both ends use, and this end's congestion control.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wiring {
    /// This end's RoCE socket.
    pub local: SocketAddr,
    /// The peer's RoCE socket.
    pub remote: SocketAddr,
    /// The connection settings (the per-QP fields are filled in for each QP).
    pub params: ConnectParams,
    /// This end's congestion control.
    pub cc: CcConfig,
    /// The line rate the congestion control clamps to, bits/s.
    pub line_rate_bps: u64,
}

/// Takes each of `qps` (in INIT) to RTS against the peer's QP of the same index, sending from
/// PSN `psns[i]`.
pub fn connect_qps(
    dev: &mut Device,
    qps: &[LocalQp],
    peers: &[QpInfo],
    psns: &[Psn],
    w: &Wiring,
) -> Result<(), DriverError> {
    if peers.len() != qps.len() || psns.len() != qps.len() {
        return Err(PeerFault::Count {
            what: "QPs",
            announced: peers.len(),
            here: qps.len(),
        }
        .into());
    }
    for ((q, peer), &sq_psn) in qps.iter().zip(peers).zip(psns) {
        let sport = PathConfig::udp_sport(q.qpn.0, peer.qpn.0);
        let c = ConnectParams {
            dest_qpn: peer.qpn,
            rq_psn: peer.psn,
            sq_psn,
            path: PathConfig {
                local: w.local.ip(),
                remote: w.remote.ip(),
                src_port: sport,
                remote_src_port: sport,
                local_port: w.local.port(),
                remote_port: w.remote.port(),
                ecn: Ecn::Ect0,
                verify_icrc: true,
            },
            ..w.params
        };
        dev.connect_qp(q.qpn, &c)
            .map_err(|e| DriverError::step(format!("modify QP {}", q.qpn), e))?;
        if !matches!(w.cc, CcConfig::None) {
            dev.set_congestion_control(q.qpn, w.cc.build(w.line_rate_bps));
        }
    }
    Ok(())
}
