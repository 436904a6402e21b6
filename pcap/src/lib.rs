//! # roce-pcap: capture files and RoCE decoding
//!
//! The library behind `roce decode`. The CLI parses arguments and calls [`decode_path`] (files
//! and stdin) or [`live::capture`] (an interface); it draws the progress bar (through
//! [`Progress`]) and handles Ctrl-C (through [`live::LiveOptions::stop`]). Modules, bottom up:
//!
//! * [`reader`]: a streaming pcap/pcapng reader over `pcap-parser`, constant memory, with
//!   distinct end-of-input and truncated-record outcomes, and errors that name the input and
//!   the byte offset.
//! * [`link`]: link types (Ethernet, Linux SLL/SLL2, raw IP, BSD loopback, ERF with native
//!   InfiniBand) down to `roce_proto::Frame`.
//! * [`decode`](mod@decode): classification, ICRC check, filters and counters ([`Decoder`], [`decode()`]);
//!   [`parallel`]: the same over several threads, batch by batch, output in input order;
//!   [`source`]: a whole file, stdin or buffer through whichever of the two fits.
//! * [`format`](mod@format): the summary line, the verbose tree and JSON lines, written into a reused
//!   buffer without allocating per packet.
//! * [`writer`]: a pcap writer; [`live`]: capture from an interface with `pnet`; [`tap`]: a
//!   datagram capture for the transport's endpoints; [`outfile`]: output files written
//!   beside their destination and renamed into place, never over an input.
//! * [`synth`]: synthetic packets and the large benchmark capture.
//!
//! Guarantees: no `unsafe`; no panic on any input bytes; the output for every record read
//! before an error is written before the error is reported.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analyze;
#[cfg(feature = "arrow")]
pub mod arrow_table;
pub mod columns;
pub mod decode;
mod digits;
pub mod error;
pub mod fabric;
pub mod format;
#[cfg(any(test, fuzzing, feature = "fuzzing"))]
pub mod fuzzing;
pub mod link;
pub mod live;
mod madfmt;
pub mod outfile;
pub mod parallel;
#[cfg(feature = "parquet")]
pub mod parquet_file;
mod progress;
pub mod reader;
pub mod source;
pub mod synth;
pub mod synth_fabric;
pub mod tap;
pub mod writer;

pub use decode::{decode, parse_opcode, Decoder, Options, Outcome, OutputFormat, Stats};
pub use error::{DecodeError, ReadError};
pub use reader::{CaptureReader, Format, Record, Timestamp};
pub use source::{
    decode_auto, decode_bytes, decode_path, decode_path_with, default_workers, NoProgress, Progress,
};
pub use writer::PcapWriter;
