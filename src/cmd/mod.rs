//! One module per command: its arguments (clap) and how it calls the libraries.
pub(crate) mod analyze;
pub(crate) mod cmatose;
pub(crate) mod decode;
pub(crate) mod kv;
pub(crate) mod perf;
pub(crate) mod pingpong;
pub(crate) mod rping;
pub(crate) mod sim;
mod sim_capture;
pub(crate) mod udaddy;
pub(crate) mod workload;
