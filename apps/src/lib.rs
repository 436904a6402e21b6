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
pub mod udaddy;
pub mod workload;

pub use config::{Combination, ConfigError, Setting};
