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
mod config;
pub mod congestion;
pub mod kv;
pub mod perf;
pub mod pingpong;
pub mod rping;
mod setting;
pub mod udaddy;
pub mod workload;

pub use config::Combination;
pub use setting::Setting;

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
    /// A stock tool's flag outside the range that tool takes (`note`: why that range).
    #[error("{flag} {value}: {lo} to {hi}{}", note.map(|n| format!(" ({n})")).unwrap_or_default())]
    Flag {
        /// The flag, as the tool spells it ("-S").
        flag: &'static str,
        /// The value given.
        value: u64,
        /// The least it takes.
        lo: u64,
        /// The most it takes.
        hi: u64,
        /// Why, where the range is not the tool's alone ("a UD message is one packet").
        note: Option<&'static str>,
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
    Kv(#[from] kv::KvError),
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

    /// `Err(Flag)` unless `lo <= value <= hi`: a stock tool's `flag`.
    pub fn check_flag(
        flag: &'static str,
        value: u64,
        lo: u64,
        hi: u64,
        note: Option<&'static str>,
    ) -> Result<(), Self> {
        if (lo..=hi).contains(&value) {
            Ok(())
        } else {
            Err(Self::Flag {
                flag,
                value,
                lo,
                hi,
                note,
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
