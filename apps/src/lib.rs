//! # roce-apps: programs on the roce transport
//!
//! Each application is a folder that owns its control messages (serde), its report and its
//! runs; `roce-driver` runs them over sockets and `roce-stack`'s simulator in virtual time.
//!
//! * [`workload`]: the verified workload of `roce loopback`, `roce server`, `roce client`: a
//!   seeded mix of every RC operation on several QPs, every byte and completion checked on both
//!   ends against the in-order model.
//! * [`perf`]: `roce perf`, perftest-style bandwidth and latency and the plain-UDP baselines.
//! * [`pingpong`]: `roce pingpong`, the verbs examples' SEND ping-pong (`ibv_rc_pingpong`, ...),
//!   either end a stock tool.
//! * [`rping`]: `roce rping`, librdmacm's rping over RDMA-CM, either end the stock tool.
//! * [`cmatose`]: `roce ucmatose`, `roce rdma-server`, `roce rdma-client`: librdmacm's SEND
//!   exchanges over RDMA-CM.
//! * [`udaddy`]: `roce udaddy`, librdmacm's udaddy: SIDR, then UD SENDs.
//! * [`kv`]: `roce kv`, the KV-cache push of prefill/decode disaggregation, plan by plan, with
//!   the model that explains the times.
//! * [`congestion`]: `roce sim congestion`, DCQCN experiments in the simulator and their
//!   renderers (table, JSON, SVG).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cmatose;
pub mod congestion;
pub mod kv;
pub mod perf;
pub mod pingpong;
pub mod rping;
pub mod udaddy;
pub mod workload;

/// A configuration that cannot run: which setting, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A number outside its range.
    #[error("{what} must be {range}, not {value}")]
    OutOfRange {
        /// The setting (as the command line names it).
        what: &'static str,
        /// The allowed range.
        range: &'static str,
        /// The value given.
        value: u64,
    },
    /// Settings that do not fit together.
    #[error("{0}")]
    Conflict(&'static str),
    /// The run would need more memory than allowed.
    #[error("{what} needs {need_mib} MiB, more than the {limit_mib} MiB allowed")]
    TooBig {
        /// What needs the memory.
        what: &'static str,
        /// MiB it needs.
        need_mib: u64,
        /// MiB allowed.
        limit_mib: u64,
    },
    /// A setting of the transport underneath.
    #[error("{0}")]
    Transport(String),
}

impl ConfigError {
    /// `Err(OutOfRange)` unless `lo <= value <= hi`.
    pub fn check_range(
        what: &'static str,
        range: &'static str,
        value: u64,
        lo: u64,
        hi: u64,
    ) -> Result<(), Self> {
        if (lo..=hi).contains(&value) {
            Ok(())
        } else {
            Err(Self::OutOfRange { what, range, value })
        }
    }

    /// `Err` unless `mtu` is one of the IB path MTUs.
    pub fn check_mtu(mtu: u32) -> Result<(), Self> {
        if roce_stack::PATH_MTUS.contains(&mtu) {
            Ok(())
        } else {
            Err(Self::OutOfRange {
                what: "--mtu",
                range: "256, 512, 1024, 2048 or 4096",
                value: u64::from(mtu),
            })
        }
    }
}

impl From<ConfigError> for roce_driver::DriverError {
    fn from(e: ConfigError) -> Self {
        Self::Invalid(Box::new(e))
    }
}

#[cfg(test)]
mod error_tests {
    use super::ConfigError;
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
}
