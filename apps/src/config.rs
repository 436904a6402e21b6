//! Settings that cannot run together ([`Combination`]): with [`crate::ConfigError`], why a
//! run is refused.
//!
//! The messages of this crate describe each setting in words ([`Setting::describe`]); the
//! `roce` binary, which knows each command's flags, names them by their flag instead. Nothing
//! here knows a flag's spelling.

use roce_stack::Service;

use crate::setting::Setting;

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
    /// UC or UD QPs in a workload over the CM, which connects RC QPs here (a UD QP would need
    /// SIDR, a UC one a REQ of its own type).
    #[error("UC and UD run over the TCP-made connections; the CM connects RC QPs only")]
    LossyOverCm,
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
            Self::LossyOverCm => &[S::Transports],
            Self::CmNeedsBind
            | Self::CmNeedsTwoAddresses
            | Self::PerftestCmServerNeedsBind
            | Self::PerftestCmClientNeedsBind => &[S::Bind],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Combination, Setting};
    use crate::ConfigError;
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
