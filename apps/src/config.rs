//! Settings a run refuses, as types: which [`Setting`], and why ([`ConfigError`]).
//!
//! The messages of this crate describe each setting in words ([`Setting::describe`]); the
//! `roce` binary, which knows each command's flags, names them by their flag instead. Nothing
//! here knows a flag's spelling.

use roce_stack::Service;

/// A setting of a run, as the applications know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    /// The path MTU.
    Mtu,
    /// The number of QPs.
    Qps,
    /// The queue depth of the workload (operations in flight per QP).
    Depth,
    /// The message size.
    Size,
    /// The largest message of a size range.
    LargestMessage,
    /// The largest UD message.
    LargestDatagram,
    /// The memory of every QP's buffers together.
    Buffers,
    /// The list of QP services, one per QP in turn.
    Transports,
    /// The operation mix.
    Ops,
    /// The local ACK timeout (IBTA Vol 1 9.7.6.1.3, an exponent).
    Timeout,
    /// The READs and atomics a QP may have outstanding at its peer.
    MaxRdAtomic,
    /// The number of iterations.
    Iterations,
    /// The duration of a timed test.
    Duration,
    /// The request size of the UDP exchange baseline.
    Request,
    /// The replies per request of the UDP exchange baseline.
    Replies,
    /// READs and atomics outstanding in a bandwidth test.
    Outs,
    /// The send queue depth of a bandwidth test.
    TxDepth,
    /// The QP service of a test.
    Service,
    /// How often each plan runs.
    Repeat,
    /// The number of hosts.
    Hosts,
    /// The offered load, a fraction of the host links.
    Load,
    /// The senders of an incast.
    IncastSenders,
    /// The size of each incast flow.
    IncastSize,
    /// Long flows per host.
    FlowsPerHost,
    /// The size of each long flow.
    ElephantSize,
    /// The victim flow of a head-of-line blocking experiment.
    Victim,
    /// The victim flow's size.
    VictimSize,
    /// The network's topology.
    Topology,
    /// The congestion control.
    Cc,
    /// The local address to bind.
    Bind,
    /// The shape of a KV cache: layers, tokens, bytes per token.
    Shape,
    /// Tokens per block of a KV pool.
    Page,
}

impl Setting {
    /// The setting in words, as this crate's messages name it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Mtu => "the path MTU",
            Self::Qps => "the number of QPs",
            Self::Depth => "the queue depth",
            Self::Size => "the message size",
            Self::LargestMessage => "the largest message",
            Self::LargestDatagram => "the largest UD message",
            Self::Buffers => "the buffers of every QP",
            Self::Transports => "the number of QP services listed",
            Self::Ops => "the operation mix",
            Self::Timeout => "the local ACK timeout",
            Self::MaxRdAtomic => "max_rd_atomic",
            Self::Iterations => "the number of iterations",
            Self::Duration => "the duration",
            Self::Request => "the request size",
            Self::Replies => "replies",
            Self::Outs => "the outstanding READs",
            Self::TxDepth => "the send queue depth",
            Self::Service => "the QP service",
            Self::Repeat => "the repeat count",
            Self::Hosts => "the number of hosts",
            Self::Load => "the load",
            Self::IncastSenders => "incast senders",
            Self::IncastSize => "incast size",
            Self::FlowsPerHost => "flows per host",
            Self::ElephantSize => "elephant size",
            Self::Victim => "the victim flow",
            Self::VictimSize => "victim size",
            Self::Topology => "the topology",
            Self::Cc => "the congestion control",
            Self::Bind => "the local address",
            Self::Shape => "the layers, tokens and bytes per token",
            Self::Page => "the page",
        }
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// Settings that cannot run together. Each names the settings involved
/// ([`Combination::settings`]), so that a front end can word it with its own names for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Combination {
    /// A QP service in the list carries none of the operations of the mix (IBTA Vol 1 3.6.1
    /// and 9.8: UC has no READ or atomics, UD only SENDs).
    #[error("{}: the operation mix has nothing {} carries ({})", .0.token(), .0, carried_ops(*.0))]
    NothingCarried(Service),
    /// A UD message larger than the MTU (a UD message is one packet, IBTA Vol 1 9.8.3.1).
    #[error("a UD message is one packet: the largest UD message must not exceed the MTU")]
    DatagramOverMtu,
    /// A request size given to a test other than the UDP bandwidth baseline.
    #[error("the request size is for the udp bandwidth test only")]
    RequestNotUdp,
    /// A timed test of no time.
    #[error("the duration must be positive")]
    NoDuration,
    /// A test UC does not carry.
    #[error("UC runs send and write only (UC has no READ or atomics)")]
    UcTest,
    /// A test UD does not carry.
    #[error("UD runs send only (UD has no RDMA operations)")]
    UdTest,
    /// A load outside (0, 1).
    #[error("the load must be between 0 and 1")]
    LoadOutOfRange,
    /// The long-flow permutation on one switch.
    #[error("the elephant workload needs a multi-switch topology")]
    ElephantNeedsFabric,
    /// A victim flow on a multi-switch fabric.
    #[error("the victim flow is an experiment of the one-switch topology")]
    VictimNeedsSwitch,
    /// HPCC on the one-switch model, which stamps no in-network telemetry.
    #[error("hpcc needs a fabric (leaf-spine or fat-tree): the one-switch model stamps no INT")]
    HpccNeedsFabric,
    /// A CM client without the local address its server is reached from.
    #[error("connecting through the CM needs the local address the server is reached from")]
    CmNeedsBind,
    /// Both CM ends in one process on one address (both need UDP 4791).
    #[error("the CM runs both ends on UDP 4791: give them two addresses")]
    CmNeedsTwoAddresses,
    /// The UDP baseline over the CM (it runs over the TCP control connection).
    #[error("the UDP baseline needs the TCP control connection, not the CM")]
    BaselineNeedsTcp,
    /// perftest over RDMA-CM as the server, without the address the client reaches.
    #[error("perftest over the CM as the server needs the address the client reaches")]
    PerftestCmServerNeedsBind,
    /// perftest over RDMA-CM as the client, without this side's address.
    #[error("perftest over the CM as the client needs this side's address")]
    PerftestCmClientNeedsBind,
}

/// The operations a service carries, as the operation mix names them.
fn carried_ops(s: Service) -> &'static str {
    match s {
        Service::Uc => "send, send_imm, write, write_imm",
        _ => "send, send_imm",
    }
}

impl Combination {
    /// The settings involved, the one to change first.
    pub fn settings(self) -> &'static [Setting] {
        use Setting as S;
        match self {
            Self::NothingCarried(_) => &[S::Transports, S::Ops],
            Self::DatagramOverMtu => &[S::LargestDatagram, S::Mtu],
            Self::RequestNotUdp => &[S::Request],
            Self::NoDuration => &[S::Duration],
            Self::UcTest | Self::UdTest => &[S::Service],
            Self::LoadOutOfRange => &[S::Load],
            Self::ElephantNeedsFabric => &[S::Topology],
            Self::VictimNeedsSwitch => &[S::Victim, S::Topology],
            Self::HpccNeedsFabric => &[S::Cc, S::Topology],
            Self::BaselineNeedsTcp => &[],
            Self::CmNeedsBind
            | Self::CmNeedsTwoAddresses
            | Self::PerftestCmServerNeedsBind
            | Self::PerftestCmClientNeedsBind => &[S::Bind],
        }
    }
}

/// A configuration that cannot run: which setting, and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A number outside its range.
    #[error("{setting} must be {range}, not {value}")]
    OutOfRange {
        /// The setting.
        setting: Setting,
        /// The allowed range.
        range: &'static str,
        /// The value given.
        value: u64,
    },
    /// Settings that do not fit together.
    #[error(transparent)]
    Combination(#[from] Combination),
    /// A workload with nothing to do, or settings that contradict themselves.
    #[error("{0}")]
    Conflict(&'static str),
    /// The run would need more memory than allowed.
    #[error("{what} need {need_mib} MiB, more than the {limit_mib} MiB allowed")]
    TooBig {
        /// What needs the memory.
        what: Setting,
        /// MiB it needs.
        need_mib: u64,
        /// MiB allowed.
        limit_mib: u64,
    },
    /// Connection parameters the QPs would refuse.
    #[error(transparent)]
    Connect(#[from] roce_stack::ModifyError),
    /// An impairment that cannot run.
    #[error(transparent)]
    Impairment(#[from] roce_driver::impair::ImpairmentError),
    /// A KV push that cannot run.
    #[error(transparent)]
    Kv(#[from] crate::kv::KvError),
}

impl ConfigError {
    /// `Err(OutOfRange)` unless `lo <= value <= hi`.
    pub fn check_range(
        setting: Setting,
        range: &'static str,
        value: u64,
        lo: u64,
        hi: u64,
    ) -> Result<(), Self> {
        if (lo..=hi).contains(&value) {
            Ok(())
        } else {
            Err(Self::OutOfRange {
                setting,
                range,
                value,
            })
        }
    }

    /// `Err` unless `mtu` is one of the IB path MTUs.
    pub fn check_mtu(mtu: u32) -> Result<(), Self> {
        if roce_stack::PATH_MTUS.contains(&mtu) {
            Ok(())
        } else {
            Err(Self::OutOfRange {
                setting: Setting::Mtu,
                range: "256, 512, 1024, 2048 or 4096",
                value: u64::from(mtu),
            })
        }
    }

    /// The setting this error is about, where it is about one.
    pub fn setting(&self) -> Option<Setting> {
        match self {
            Self::OutOfRange { setting, .. } => Some(*setting),
            Self::TooBig { what, .. } => Some(*what),
            Self::Combination(c) => c.settings().first().copied(),
            Self::Kv(k) => k.setting(),
            _ => None,
        }
    }
}

impl From<ConfigError> for roce_driver::DriverError {
    fn from(e: ConfigError) -> Self {
        Self::Invalid(Box::new(e))
    }
}

impl From<Combination> for roce_driver::DriverError {
    fn from(e: Combination) -> Self {
        ConfigError::from(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::{Combination, ConfigError, Setting};
    use roce_driver::DriverError;

    #[test]
    fn typed_errors_stay_typed_through_the_driver() {
        let e: DriverError = ConfigError::Conflict("two settings disagree").into();
        assert_eq!(e.to_string(), "two settings disagree");
        let DriverError::Invalid(inner) = e else {
            panic!("a ConfigError becomes DriverError::Invalid, not {e:?}");
        };
        assert!(matches!(
            inner.downcast_ref::<ConfigError>(),
            Some(ConfigError::Conflict(_))
        ));
        let e: DriverError = roce_stack::CreateError::TooManyQps.into();
        assert_eq!(e.to_string(), "too many queue pairs");
        assert!(matches!(
            e,
            DriverError::Create(roce_stack::CreateError::TooManyQps)
        ));
    }

    #[test]
    fn errors_name_their_setting_in_words_not_flags() {
        let e = ConfigError::check_mtu(1000).unwrap_err();
        assert_eq!(e.setting(), Some(Setting::Mtu));
        assert_eq!(
            e.to_string(),
            "the path MTU must be 256, 512, 1024, 2048 or 4096, not 1000"
        );
        let e = ConfigError::from(Combination::NothingCarried(roce_stack::Service::Ud));
        assert_eq!(e.setting(), Some(Setting::Transports));
        assert!(!e.to_string().contains("--"), "{e}");
    }
}
