//! # roce-stack: the RC transport (work in progress)
//!
//! The sans-IO queue-pair state machine, the deterministic simulator and the UDP driver land
//! here (issues 4 and 5). This crate is empty until then.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
