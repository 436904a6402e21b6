//! The perf control protocol: the messages both ends of a run over sockets exchange (on
//! roce's JSON control channel), for RDMA runs ([`super::run`]) and UDP baselines
//! ([`super::udp`]) alike.
use roce_driver::connect::qps::RemoteBuffer;
use serde::{Deserialize, Serialize};

use super::PerfSpec;

/// Version of the perf control protocol.
pub(crate) const PROTOCOL: u32 = 4;

/// The perf exchange.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PerfMsg {
    /// Client → server, in the handshake's offer: one RDMA measurement, and the client's
    /// target buffer; the server answers `welcome`.
    Hello {
        protocol: u32,
        spec: PerfSpec,
        buffers: Vec<RemoteBuffer>,
    },
    /// Server → client, in the handshake's answer: its target buffer.
    Welcome { buffers: Vec<RemoteBuffer> },
    /// Client → server: a UDP baseline (no QPs: no handshake), from `roce_port`; the server
    /// answers `port`.
    Baseline {
        protocol: u32,
        spec: PerfSpec,
        roce_port: u16,
    },
    /// Server → client: the UDP port the baseline's datagrams go to.
    Port { roce_port: u16 },
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
