//! # roce-proto: a zero-copy, bit-exact RoCE packet codec
//!
//! This crate parses and builds the InfiniBand transport packets that RDMA over Converged
//! Ethernet carries: RoCEv2 (the transport inside UDP, destination port 4791), RoCE v1
//! (EtherType 0x8915 with a GRH) and, for decoding old captures, native InfiniBand (LRH).
//!
//! ## Layout of the crate
//! * One module per header (`bth`, `reth`, `aeth`, …). Each has a zero-copy view
//!   `Packet<T: AsRef<[u8]>>` (re-exported as e.g. [`BthPacket`]) whose accessors read the
//!   wire bytes directly, and a validated, owned, `Copy` [`BthRepr`]-style representation with
//!   `parse`, `buffer_len` and `emit`. Views never reject field values; `Repr::parse` checks
//!   their meaning.
//! * [`opcode`]: the opcode table of IBTA Vol 1 §9.2 (RC, UC, RD, UD, XRC) plus the RoCEv2 CNP
//!   (0x81): which extended headers follow each opcode, whether it carries payload, its
//!   first/middle/last/only class, request or response.
//! * [`packet`]: the whole transport packet (BTH, extended headers, payload, pad, ICRC): what a
//!   RoCEv2 UDP datagram carries.
//! * [`icrc`]: the invariant CRC, computed incrementally and without allocation from the exact
//!   IP/UDP (or GRH/LRH) header bytes, or from header fields alone.
//! * [`frame`]: whole Ethernet frames (0, 1 or 2 VLAN tags, IPv4 with or without options,
//!   IPv6, UDP; RoCE v1 over EtherType 0x8915) parsed with `etherparse` underneath, and a
//!   builder for Eth/IPv4|IPv6/UDP/RoCEv2 frames.
//!
//! ## Guarantees
//! * No `unsafe`, no allocation on parse or emit, `no_std` (the `std` feature, on by default,
//!   only adds `std::error::Error` plumbing in dependencies).
//! * No panic on any input: malformed bytes give an [`Error`] naming the [`Layer`] and the
//!   reason. Emitting into a buffer shorter than `buffer_len()` is a caller bug and panics
//!   (documented under `# Panics`).
//! * ICRC is a separate, explicit step: structural parsing never depends on it.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

mod error;
mod wire;

pub mod aeth;
pub mod atomic;
pub mod bth;
pub mod cm;
pub mod deth;
pub mod frame;
pub mod grh;
pub mod icrc;
pub mod icrc_solve;
pub mod lrh;
pub mod mac_control;
pub mod mad;
pub mod mrc;
pub mod opcode;
pub mod packet;
pub mod perftest;
pub mod pingpong;
pub mod rdma_cm;
pub mod reth;
pub mod small;
pub mod types;
pub mod uet;

#[cfg(any(test, fuzzing, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;

pub use aeth::{AethKind, NakCode, Packet as AethPacket, Repr as AethRepr, Syndrome};
pub use atomic::{
    AckPacket as AtomicAckEthPacket, AckRepr as AtomicAckEthRepr, Packet as AtomicEthPacket,
    Repr as AtomicEthRepr,
};
pub use bth::{Packet as BthPacket, Repr as BthRepr};
pub use deth::{Packet as DethPacket, Repr as DethRepr};
pub use error::{Error, Layer, Result};
pub use frame::{Frame, FrameBuilder, IpInfo, RoceVersion};
pub use grh::{Packet as GrhPacket, Repr as GrhRepr};
pub use icrc::Icrc;
pub use lrh::{Packet as LrhPacket, Repr as LrhRepr};
pub use opcode::{Class, ExtHeaders, Opcode, Transport};
pub use packet::{Packet as RocePacket, PacketRepr};
pub use reth::{Packet as RethPacket, Repr as RethRepr};
pub use small::{FethRepr, IethRepr, ImmDt, RdethRepr, XrcethRepr};
pub use types::{Ecn, Msn, PKey, Psn, QKey, Qpn, RKey};

/// The IANA-assigned UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// The EtherType of RoCE v1 (a GRH directly after the Ethernet header).
pub const ROCEV1_ETHERTYPE: u16 = 0x8915;
/// Length of the invariant CRC that ends every RoCE packet.
pub const ICRC_LEN: usize = 4;

/// A byte range inside a header: the layout of each header is written down once as `Field`s.
pub(crate) type Field = core::ops::Range<usize>;
