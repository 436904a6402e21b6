//! QP states, the attributes a `modify_qp` carries, the transition table and its required
//! attributes (IBTA Vol 1 §10.3; `ibv_modify_qp(3)`), and [`ConnectParams`]: the one
//! description of an RC connection that the simulator, the driver's handshake and the tests
//! all turn into the three transitions RESET→INIT→RTR→RTS.
use core::time::Duration;

use roce_proto::{Psn, Qpn};

use crate::cc::cnp::DEFAULT_CNP_INTERVAL;
use crate::memory::Access;
use crate::path::PathConfig;

/// QP states (`ibv_qp_state`, numeric values as in verbs.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created or reset: nothing is processed.
    Reset = 0,
    /// Receive requests may be posted; packets are dropped.
    Init = 1,
    /// Ready to receive: the responder runs.
    Rtr = 2,
    /// Ready to send: requester and responder run.
    Rts = 3,
    /// Send queue drain: messages already started finish, no new ones start.
    Sqd = 4,
    /// Send queue error (UC/UD only; an RC QP never enters it by itself).
    Sqe = 5,
    /// Error: everything completes with `WR_FLUSH_ERR`.
    Err = 6,
}

impl QpState {
    /// The responder runs: incoming packets are processed (RTR and every later state but ERR).
    pub const fn receives(self) -> bool {
        matches!(self, Self::Rtr | Self::Rts | Self::Sqd | Self::Sqe)
    }

    /// The requester runs: the send queue is processed and responses are accepted.
    pub const fn sends(self) -> bool {
        matches!(self, Self::Rts | Self::Sqd | Self::Sqe)
    }

    /// `modify_qp` may move from `self` to `to` (IBTA Vol 1 §10.3, the RC part of the QP state diagram).
    pub const fn may_become(self, to: Self) -> bool {
        use QpState::{Err, Init, Reset, Rtr, Rts, Sqd, Sqe};
        matches!(
            (self, to),
            (_, Reset)
                | (_, Err)
                | (Reset, Init)
                | (Init, Init)
                | (Init, Rtr)
                | (Rtr, Rts)
                | (Rts, Rts)
                | (Rts, Sqd)
                | (Sqd, Sqd)
                | (Sqd, Rts)
                | (Sqe, Rts)
        )
    }
}

/// Capacities and transport knobs fixed at QP creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth (posted, not yet completed).
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Largest message in bytes (at most 2^30, so a message always fits half the PSN space).
    pub max_msg_size: u32,
    /// Bound on PSNs sent and not yet acknowledged (rxe: 128; clamped to 1..=2^20).
    pub max_unacked_psns: u32,
    /// Request an ACK at least every this many packets (rxe: 64) besides each message end.
    pub ack_req_every: u32,
    /// Minimum interval between CNPs this QP sends on CE marks (`None`: never send CNPs).
    /// The first mark is answered at once; marks inside the interval after a CNP earn one
    /// deferred CNP at its end ([`CnpPacer`](crate::CnpPacer), the DCQCN paper's rule).
    /// Default 50 µs.
    pub cnp_interval: Option<Duration>,
    /// Read `retry_cnt = 7` as infinite, as Linux rxe does. Off by default: IBTA Vol 1
    /// §9.7 makes 7 a plain count for `retry_cnt` (only `rnr_retry = 7` is infinite).
    pub infinite_retry_at_7: bool,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_msg_size: 1 << 30,
            max_unacked_psns: 128,
            ack_req_every: 64,
            cnp_interval: Some(DEFAULT_CNP_INTERVAL),
            infinite_retry_at_7: false,
        }
    }
}

/// The path MTUs an IB transport allows, in payload bytes (`ibv_mtu`).
pub const PATH_MTUS: [u32; 5] = [256, 512, 1024, 2048, 4096];

/// Attributes of a `modify_qp` call: the target state plus the attributes the transition
/// needs; `None` = not in the attribute mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub state: QpState,
    /// Remote rights the responder grants (RESET→INIT, optional later).
    pub access_flags: Option<Access>,
    /// Path MTU in bytes, one of [`PATH_MTUS`] (INIT→RTR).
    pub path_mtu: Option<u32>,
    /// Peer QPN (INIT→RTR).
    pub dest_qpn: Option<Qpn>,
    /// Responder's first expected PSN (INIT→RTR).
    pub rq_psn: Option<Psn>,
    /// Requester's first PSN (RTR→RTS).
    pub sq_psn: Option<Psn>,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout, 0 = infinite (RTR→RTS).
    pub timeout: Option<u8>,
    /// Transport retries, 0..=7 (RTR→RTS).
    pub retry_cnt: Option<u8>,
    /// RNR retries, 0..=7, 7 = infinite (RTR→RTS).
    pub rnr_retry: Option<u8>,
    /// RNR timer code this responder puts in its RNR NAKs (INIT→RTR).
    pub min_rnr_timer: Option<u8>,
    /// Outstanding READ/atomic requests this requester may have (RTR→RTS).
    pub max_rd_atomic: Option<u8>,
    /// READ/atomic responder resources (INIT→RTR).
    pub max_dest_rd_atomic: Option<u8>,
    /// Address vector (INIT→RTR).
    pub path: Option<PathConfig>,
}

impl QpAttr {
    /// Attributes with only the target state set.
    pub const fn to(state: QpState) -> Self {
        Self {
            state,
            access_flags: None,
            path_mtu: None,
            dest_qpn: None,
            rq_psn: None,
            sq_psn: None,
            timeout: None,
            retry_cnt: None,
            rnr_retry: None,
            min_rnr_timer: None,
            max_rd_atomic: None,
            max_dest_rd_atomic: None,
            path: None,
        }
    }

    /// Checks the values and the attributes the transition `from → self.state` requires
    /// (`ibv_modify_qp(3)`). On error nothing may change, not even the state.
    pub fn validate(&self, from: QpState) -> Result<(), ModifyError> {
        use QpState::{Init, Reset, Rtr, Rts};
        let to = self.state;
        if !from.may_become(to) {
            return Err(ModifyError::IllegalTransition { from, to });
        }
        if self.path_mtu.is_some_and(|m| !PATH_MTUS.contains(&m)) {
            return Err(ModifyError::InvalidValue("path_mtu"));
        }
        // The 8-bit attributes and their largest values (5-bit, 3-bit and rd_atomic fields).
        let limits = [
            (self.timeout, 31, "timeout"),
            (self.retry_cnt, 7, "retry_cnt"),
            (self.rnr_retry, 7, "rnr_retry"),
            (self.min_rnr_timer, 31, "min_rnr_timer"),
            (self.max_rd_atomic, 128, "max_rd_atomic"),
            (self.max_dest_rd_atomic, 128, "max_dest_rd_atomic"),
        ];
        if let Some((_, _, name)) = limits
            .iter()
            .find(|(v, max, _)| v.is_some_and(|v| v > *max))
        {
            return Err(ModifyError::InvalidValue(name));
        }
        if self.dest_qpn.is_some_and(|q| q.0 > 0xff_ffff) {
            return Err(ModifyError::InvalidValue("dest_qpn"));
        }
        if self.path.is_some_and(|p| !p.is_consistent()) {
            return Err(ModifyError::InvalidValue("path"));
        }
        let required: &[(bool, &'static str)] = match (from, to) {
            (Reset, Init) => &[(self.access_flags.is_some(), "access_flags")],
            (Init, Rtr) => &[
                (self.path.is_some(), "path"),
                (self.path_mtu.is_some(), "path_mtu"),
                (self.dest_qpn.is_some(), "dest_qpn"),
                (self.rq_psn.is_some(), "rq_psn"),
                (self.max_dest_rd_atomic.is_some(), "max_dest_rd_atomic"),
                (self.min_rnr_timer.is_some(), "min_rnr_timer"),
            ],
            (Rtr, Rts) => &[
                (self.sq_psn.is_some(), "sq_psn"),
                (self.timeout.is_some(), "timeout"),
                (self.retry_cnt.is_some(), "retry_cnt"),
                (self.rnr_retry.is_some(), "rnr_retry"),
                (self.max_rd_atomic.is_some(), "max_rd_atomic"),
            ],
            _ => &[],
        };
        match required.iter().find(|(present, _)| !present) {
            Some((_, name)) => Err(ModifyError::MissingAttribute(name)),
            None => Ok(()),
        }
    }
}

/// Why a modify was refused (nothing changed, not even the state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModifyError {
    /// No such QP.
    #[error("no such queue pair")]
    NoSuchQp,
    /// The transition is not allowed.
    #[error("illegal transition {from:?} -> {to:?}")]
    IllegalTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// A required attribute of the transition is missing.
    #[error("missing attribute {0} for this transition")]
    MissingAttribute(&'static str),
    /// An attribute is out of range.
    #[error("invalid value for attribute {0}")]
    InvalidValue(&'static str),
}

/// A retry counter of the requester (`retry_cnt` or `rnr_retry`, IBTA Vol 1 §9.7): the configured limit, what is left of it since the last progress, and whether
/// the value 7 means "retry forever".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retries {
    /// The configured count (0..=7).
    limit: u8,
    /// Retries left before the next one fails the request.
    left: u8,
    /// `limit == 7` means infinite (always for `rnr_retry`; for `retry_cnt` only with
    /// [`QpCaps::infinite_retry_at_7`]).
    seven_is_infinite: bool,
}

impl Retries {
    /// A counter of `limit` retries.
    pub(crate) const fn new(limit: u8, seven_is_infinite: bool) -> Self {
        Self {
            limit,
            left: limit,
            seven_is_infinite,
        }
    }

    /// Refills the counter: the peer made progress.
    pub(crate) fn reset(&mut self) {
        self.left = self.limit;
    }

    /// Spends one retry; `false` when none was left (the request fails).
    pub(crate) fn spend(&mut self) -> bool {
        if self.seven_is_infinite && self.limit == 7 {
            return true;
        }
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }
}

/// Everything RESET→INIT→RTR→RTS needs for one RC QP: what the two ends exchange out of band
/// (peer QPN, start PSNs, path) and the local choices (`ibv_modify_qp` three times). The
/// simulator, the driver's handshake and the tests all connect QPs from this one type, so they
/// share one set of defaults ([`Default`]: the `roce` command line's).
///
/// With the `serde` feature it is (de)serialisable as the settings of a connection: the peer's
/// QPN, the PSNs and the path are per QP and learned separately (from the handshake and from
/// the sockets), so they are not serialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct ConnectParams {
    /// The peer's QPN.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub dest_qpn: Qpn,
    /// First PSN expected from the peer (its `sq_psn`).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub rq_psn: Psn,
    /// First PSN this QP sends (the peer's `rq_psn`).
    #[cfg_attr(feature = "serde", serde(skip))]
    pub sq_psn: Psn,
    /// Addresses, UDP ports and ECN of the datagrams.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub path: PathConfig,
    /// Path MTU in bytes, one of [`PATH_MTUS`].
    pub mtu: u32,
    /// Remote access the QP grants.
    #[cfg_attr(feature = "serde", serde(with = "access_bits"))]
    pub access: Access,
    /// Local ACK timeout code: 4.096 µs × 2^timeout (14 = 67 ms), 0 = infinite.
    pub timeout: u8,
    /// Retries after timeouts and sequence NAKs.
    pub retry_cnt: u8,
    /// Retries after RNR NAKs (7 = infinite).
    pub rnr_retry: u8,
    /// RNR timer code this QP's RNR NAKs carry (1 = 10 µs).
    pub min_rnr_timer: u8,
    /// READ/atomic requests outstanding as requester (initiator depth).
    pub max_rd_atomic: u8,
    /// READ/atomic requests kept as responder (responder resources).
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectParams {
    /// PSNs 0 (set real ones), MTU 1024, every remote access, timeout 14 (67 ms), 7 retries,
    /// infinite RNR retries, RNR timer 1 (10 µs), 16 READ/atomic each way.
    fn default() -> Self {
        Self {
            dest_qpn: Qpn(0),
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            path: PathConfig::default(),
            mtu: 1024,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

impl ConnectParams {
    /// RESET→INIT.
    pub const fn init_attr(&self) -> QpAttr {
        QpAttr {
            access_flags: Some(self.access),
            ..QpAttr::to(QpState::Init)
        }
    }

    /// INIT→RTR.
    pub const fn rtr_attr(&self) -> QpAttr {
        QpAttr {
            path_mtu: Some(self.mtu),
            dest_qpn: Some(self.dest_qpn),
            rq_psn: Some(self.rq_psn),
            max_dest_rd_atomic: Some(self.max_dest_rd_atomic),
            min_rnr_timer: Some(self.min_rnr_timer),
            path: Some(self.path),
            ..QpAttr::to(QpState::Rtr)
        }
    }

    /// RTR→RTS.
    pub const fn rts_attr(&self) -> QpAttr {
        QpAttr {
            sq_psn: Some(self.sq_psn),
            timeout: Some(self.timeout),
            retry_cnt: Some(self.retry_cnt),
            rnr_retry: Some(self.rnr_retry),
            max_rd_atomic: Some(self.max_rd_atomic),
            ..QpAttr::to(QpState::Rts)
        }
    }

    /// Checks every value a transition would check, without a QP.
    pub fn validate(&self) -> Result<(), ModifyError> {
        self.rtr_attr().validate(QpState::Init)?;
        self.rts_attr().validate(QpState::Rtr)
    }
}

#[cfg(feature = "serde")]
mod access_bits {
    use crate::memory::Access;

    pub(super) fn serialize<S: serde::Serializer>(a: &Access, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(a.0)
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Access, D::Error> {
        <u8 as serde::Deserialize>::deserialize(d).map(Access)
    }
}

/// The attributes a QP holds after its transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attributes {
    /// Remote rights granted to the peer's requests.
    pub(crate) access: Access,
    /// Path MTU, payload bytes.
    pub(crate) mtu: u32,
    /// The peer QP every packet is addressed to.
    pub(crate) dest_qpn: Qpn,
    /// Local ACK timeout code.
    pub(crate) timeout: u8,
    /// RNR timer code of this responder's RNR NAKs.
    pub(crate) min_rnr_timer: u8,
    /// Initiator depth.
    pub(crate) max_rd_atomic: u8,
    /// Responder resources.
    pub(crate) max_dest_rd_atomic: u8,
    /// Addresses and ports.
    pub(crate) path: PathConfig,
}

impl Default for Attributes {
    fn default() -> Self {
        let c = ConnectParams::default();
        Self {
            access: Access::NONE,
            mtu: c.mtu,
            dest_qpn: Qpn(0),
            timeout: c.timeout,
            min_rnr_timer: c.min_rnr_timer,
            max_rd_atomic: c.max_rd_atomic,
            max_dest_rd_atomic: c.max_dest_rd_atomic,
            path: PathConfig::default(),
        }
    }
}

impl Attributes {
    /// The local ACK timeout in nanoseconds (IBTA Vol 1 §9.7: 4.096 µs × 2^timeout),
    /// `None` for 0 (infinite).
    pub(crate) fn timeout_ns(&self) -> Option<u64> {
        (self.timeout != 0).then(|| 4096u64 << self.timeout)
    }

    /// Initiator depth as a count (at least 1).
    pub(crate) fn initiator_depth(&self) -> u32 {
        u32::from(self.max_rd_atomic.max(1))
    }

    /// Responder resources as a count (at least 1).
    pub(crate) fn responder_resources(&self) -> usize {
        usize::from(self.max_dest_rd_atomic.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_count_down_and_seven_is_infinite_only_when_asked() {
        let mut r = Retries::new(2, false);
        assert!(r.spend() && r.spend());
        assert!(!r.spend(), "the third retry of two fails");
        r.reset();
        assert!(r.spend());
        let mut seven = Retries::new(7, false);
        assert_eq!((0..7).filter(|_| seven.spend()).count(), 7);
        assert!(!seven.spend(), "IBA: 7 is a count");
        let mut forever = Retries::new(7, true);
        assert!((0..1000).all(|_| forever.spend()));
        let mut zero = Retries::new(0, true);
        assert!(!zero.spend(), "0 never retries");
    }

    #[test]
    fn connect_params_validate_like_the_transitions() {
        assert_eq!(ConnectParams::default().validate(), Ok(()));
        let bad = ConnectParams {
            mtu: 1000,
            ..ConnectParams::default()
        };
        assert_eq!(bad.validate(), Err(ModifyError::InvalidValue("path_mtu")));
        let bad = ConnectParams {
            retry_cnt: 8,
            ..ConnectParams::default()
        };
        assert_eq!(bad.validate(), Err(ModifyError::InvalidValue("retry_cnt")));
    }
}
