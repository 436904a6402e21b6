//! # roce-stack: the sans-IO InfiniBand RC transport of RoCEv2
//!
//! A userspace implementation of the IBTA Reliable Connection transport (IBTA Vol 1 §9.7, the
//! QP states of §10.3, the verbs of §11) as a state machine that does no I/O: no sockets, no
//! clock, no random numbers. The `roce-driver` crate runs it over real sockets; the simulator
//! (feature `sim`) runs it over impaired virtual links.
//!
//! ## Contract
//! * [`Device`] owns protection domains, [`MemoryRegion`]s (bytes owned by the stack, reached
//!   through handles and keys, never through pointers), completion queues and [`Qp`]s.
//! * The caller moves bytes and time: it hands received RoCEv2 UDP payloads to
//!   [`Device::handle_datagram`] with the IP ECN codepoint, calls [`Device::handle_timeout`]
//!   once [`Device::poll_timeout`] has passed, and after any `handle_*`/`post_*` drains
//!   [`Device::poll_transmit`] (each call writes one datagram, in wire order) and
//!   [`Device::poll_cq`].
//! * Time is an [`Instant`] value passed in. Nothing here reads a clock, a socket or an RNG;
//!   the seeded [`rng::Rng`] is for the simulator and the applications that ask for one.
//! * Malformed datagrams, bad ICRCs, unknown QPs and packets a state cannot accept are dropped
//!   and counted ([`QpStats::drops`]); a peer's protocol violation NAKs and moves the QP to ERR
//!   and shows up as a [`Completion`] status; caller misuse is an `Err` ([`PostError`],
//!   [`ModifyError`]). Nothing panics on bytes from the wire.
//! * Steady-state transmission allocates nothing: payload goes from the region straight into
//!   the caller's buffer (a scratch copy only when a packet spans two gather entries).
//!
//! ## Modules, bottom up
//! [`time`], [`rng`], [`stats`] and [`handle`] depend on nothing; [`memory`] (regions, keys,
//! scatter/gather) on the handles; [`wr`] (work requests, completions) on memory; [`path`]
//! (addresses, ICRC seeds) on the codec; [`cc`] (congestion control) on time; [`qp`] (every
//! kind of QP: RC and UC, UD, the GSI) on all of these; [`Device`] on [`qp`]; [`model`] (the in-order reference model) on [`wr`]; the
//! simulator [`sim`] on the device.
//!
//! ## Features
//! * `sim`: the deterministic network simulator ([`sim`]) and the fuzz-target bodies.
//! * `serde`: `Serialize`/`Deserialize` for the configuration and statistics types.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cc;
pub mod cm;
mod device;
pub mod handle;
pub mod memory;
pub mod model;
pub mod path;
pub mod paths;
pub mod qp;
pub mod rng;
pub mod srq;
pub mod stats;
pub mod time;
pub mod wr;

#[cfg(feature = "sim")]
pub mod sim;

#[cfg(all(feature = "sim", any(test, fuzzing)))]
#[doc(hidden)]
pub mod fuzzing;

pub use cc::cnp::CnpPacer;
pub use cc::dcqcn::{Dcqcn, DcqcnParams};
pub use cc::pacing::FixedRate;
pub use cc::{CcConfig, CongestionControl, NoCc};
pub use device::{CreateError, Delivery, Device, DeviceConfig, Refusal};
pub use handle::{CqHandle, MrHandle, PdHandle};
pub use memory::{
    Access, MemoryRegion, MwError, MwType, Pattern, PatternCheck, RemoteAddr, SgList, Sge,
    DIRTY_PAGE, MAX_SGE,
};
pub use path::{IcrcVerdict, Ipv4Seen, PathConfig, RxMeta};
/// QP1, the GSI: [`qp::gsi`], kept at the crate root where its users name it.
pub use qp::gsi;
/// UD QPs: [`qp::ud`], kept at the crate root where its users name it.
pub use qp::ud;
pub use qp::{
    ConnectParams, ModifyError, PostError, Qp, QpAttr, QpCaps, QpState, Service, Transmit,
    UnknownService, PATH_MTUS,
};
pub use stats::{DropReason, Drops, Naks, QpStats};
pub use time::Instant;
pub use wr::{Completion, RecvRequest, WcOpcode, WcStatus, WorkRequest, WrOp};
