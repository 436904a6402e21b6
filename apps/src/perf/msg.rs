//! The perf control protocol: the messages both ends of a run over sockets exchange (on
//! roce's JSON control channel), for RDMA runs ([`super::run`]) and UDP baselines
//! ([`super::udp`]) alike.
use roce_driver::connect::qps::{QpInfo, RemoteBuffer};
use serde::{Deserialize, Serialize};

use super::PerfSpec;

/// Version of the perf control protocol.
pub(crate) const PROTOCOL: u32 = 3;

/// The perf exchange.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PerfMsg {
    /// Client → server: one measurement (RDMA or a UDP baseline); the server answers `welcome`.
    Hello {
        protocol: u32,
        spec: PerfSpec,
        roce_port: u16,
        qps: Vec<QpInfo>,
        buffers: Vec<RemoteBuffer>,
        /// The Q_Key of the run's UD QPs, drawn by the client from its secrets.
        qkey: u32,
    },
    /// Server → client: its QPs and target buffer (none for UDP), its RoCE port.
    Welcome {
        qps: Vec<QpInfo>,
        buffers: Vec<RemoteBuffer>,
        roce_port: u16,
    },
    /// Server → client after `done`: what it counted (UDP baseline: datagrams received, the
    /// time from the first to the last, the best rate over 10 ms windows).
    Summary {
        received: u64,
        seconds: f64,
        peak_per_s: f64,
        /// UDP baselines: datagrams from anyone but the client, ignored.
        #[serde(default)]
        foreign: u64,
    },
    /// Client → server: no more runs.
    Bye,
}
