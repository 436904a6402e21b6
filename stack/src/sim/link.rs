//! What one direction of a simulated link does to the datagrams it carries.
use core::time::Duration;

/// Impairments of one direction of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Propagation delay.
    pub delay: Duration,
    /// Serialisation rate in bits per second (`None`: infinitely fast).
    pub bandwidth_bps: Option<u64>,
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is held back by up to `reorder_delay` extra.
    pub reorder: f64,
    /// Largest extra delay of a reordered datagram.
    pub reorder_delay: Duration,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability one random bit of a datagram is flipped.
    pub corrupt: f64,
    /// Probability an ECN-capable datagram is marked CE.
    pub ce_mark: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::from_micros(2),
            bandwidth_bps: None,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(10),
            duplicate: 0.0,
            corrupt: 0.0,
            ce_mark: 0.0,
        }
    }
}
