//! # roce-stack: the RDMA Reliable Connection transport over RoCEv2
//!
//! A userspace implementation of the IBTA RC transport (IBTA Vol 1 §9.7 and §10-11; see
//! `../shared/docs/protocol.md` §4-7) as a sans-IO state machine.
//!
//! ## Contract
//! * [`Device`] owns protection domains, [`MemoryRegion`]s (bytes owned by the stack, reached
//!   through handles and keys, never through pointers), completion queues and [`Qp`]s.
//! * The caller moves bytes and time: it hands received RoCEv2 UDP payloads to
//!   [`Device::handle_datagram`] with the IP ECN codepoint, calls [`Device::handle_timeout`]
//!   once [`Device::poll_timeout`] has passed, and after any `handle_*`/`post_*` drains
//!   [`Device::poll_transmit`] (each call writes one datagram) and [`Device::poll_cq`].
//! * Time is an [`Instant`] value passed in. Nothing here reads a clock, a socket or an RNG.
//! * Malformed datagrams, bad ICRCs, unknown QPs and packets a state cannot accept are dropped
//!   and counted ([`QpStats::drops`]); a peer's protocol violation NAKs and moves the QP to ERR
//!   and shows up as a [`Completion`] status; caller misuse is an `Err` ([`PostError`],
//!   [`ModifyError`]). Nothing panics on bytes from the wire.
//! * Steady-state transmission allocates nothing: payload goes from the region straight into
//!   the caller's buffer (a scratch copy only when a packet spans two gather entries).
//!
//! The simulator ([`sim`], feature `sim`) runs any number of devices over impaired links in
//! virtual time.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cc;
pub mod cnp;
pub mod dcqcn;
mod device;
#[cfg(feature = "driver")]
pub mod driver;
pub mod kv;
pub mod memory;
pub mod pacing;
pub mod path;
pub mod qp;
pub mod rng;
pub mod stats;
pub mod time;
pub mod workload;
pub mod wr;

#[cfg(feature = "sim")]
pub mod sim;

#[cfg(any(test, fuzzing, feature = "sim"))]
#[doc(hidden)]
pub mod fuzzing;

pub use cc::{CongestionControl, NoCc};
pub use cnp::CnpPacer;
pub use dcqcn::{CcConfig, Dcqcn, DcqcnParams};
pub use device::{Connection, CqHandle, CreateError, Device, DeviceConfig};
pub use memory::{Access, MemoryRegion, MrHandle, PdHandle, SgList, Sge, MAX_SGE};
pub use pacing::FixedRate;
pub use path::PathConfig;
pub use qp::{Qp, QpAttr, QpCaps, QpState, Transmit};
pub use stats::{DropReason, Drops, Naks, QpStats};
pub use time::Instant;
pub use wr::{
    Completion, ModifyError, PostError, RecvRequest, RemoteAddr, WcOpcode, WcStatus, WorkRequest,
    WrOp,
};
