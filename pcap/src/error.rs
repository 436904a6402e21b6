//! Errors of the capture reader and of a decode run.
use std::io;

/// Why a capture could not be read to its end. Every variant names the input and the byte
/// offset where reading stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The input does not start like a pcap or pcapng file.
    #[error("{name}: not a pcap or pcapng capture (at byte {offset}: {reason})")]
    NotCapture {
        /// Input name.
        name: String,
        /// Byte offset.
        offset: u64,
        /// What was wrong.
        reason: &'static str,
    },
    /// The input ends inside a record.
    #[error(
        "{name}: truncated record at byte {offset}: it needs {needed} bytes, the file has {got}"
    )]
    Truncated {
        /// Input name.
        name: String,
        /// Byte offset of the cut record.
        offset: u64,
        /// Bytes the record needs.
        needed: usize,
        /// Bytes that were left.
        got: usize,
    },
    /// A record header holds impossible values.
    #[error("{name}: malformed {reason} at byte {offset}")]
    Malformed {
        /// Input name.
        name: String,
        /// Byte offset of the record.
        offset: u64,
        /// Which part.
        reason: &'static str,
    },
    /// Reading failed.
    #[error("{name}: read error at byte {offset}: {source}")]
    Io {
        /// Input name.
        name: String,
        /// Byte offset.
        offset: u64,
        /// The I/O error.
        source: io::Error,
    },
}

/// Why a decode run stopped early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The capture could not be read to its end.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The input file could not be opened.
    #[error("{name}: {source}")]
    Open {
        /// Path.
        name: String,
        /// The I/O error.
        source: io::Error,
    },
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Write(#[source] io::Error),
    /// Live capture failed.
    #[error("{0}")]
    Live(String),
}
