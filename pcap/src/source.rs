//! Decoding a whole capture source (a file, stdin, bytes in memory) with the right engine:
//! [`crate::parallel`] when it gives the same output, else the sequential [`crate::decode()`].
//! A caller that wants to show progress passes a [`Progress`].
use std::io::{self, Read, Write};

use crate::decode::{decode, Options, Outcome, Stats};
use crate::error::DecodeError;
use crate::reader::CaptureReader;

pub use crate::progress::{NoProgress, Progress};

/// Decoding threads for [`decode_path`]: the available parallelism (1 means sequential).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Decodes `reader` with [`crate::parallel::decode_parallel`] when that gives the same result
/// (no `--count`) and more than one worker is available, else sequentially.
pub fn decode_auto<R: Read + Send, W: Write>(
    reader: &mut CaptureReader<R>,
    opts: Options,
    out: &mut W,
    progress: Option<&dyn Progress>,
    workers: usize,
) -> Outcome {
    if opts.count.is_none() && workers > 1 && !opts.analyze {
        crate::parallel::decode_parallel(
            reader,
            opts,
            out,
            progress,
            workers,
            crate::parallel::BATCH_RECORDS,
        )
    } else {
        decode(reader, opts, out, progress)
    }
}

/// Opens `path` (`-` for stdin) and decodes it into `out`, on [`default_workers`] threads.
pub fn decode_path<W: Write>(path: &str, opts: Options, out: &mut W) -> Outcome {
    decode_path_with(path, opts, out, default_workers(), &mut NoProgress)
}

/// [`decode_path`] with an explicit number of decoding threads (1 = sequential), reporting to
/// `progress` (files only: stdin has no length).
pub fn decode_path_with<W: Write>(
    path: &str,
    opts: Options,
    out: &mut W,
    workers: usize,
    progress: &mut dyn Progress,
) -> Outcome {
    let fail = |e| Outcome {
        stats: Stats::default(),
        error: Some(e),
    };
    if path == "-" {
        return match CaptureReader::new(io::stdin(), "-") {
            Ok(mut r) => decode_auto(&mut r, opts, out, None, workers),
            Err(e) => fail(e.into()),
        };
    }
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(source) => {
            return fail(DecodeError::Open {
                name: path.to_string(),
                source,
            })
        }
    };
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut reader = match CaptureReader::new(file, path) {
        Ok(r) => r,
        Err(e) => return fail(e.into()),
    };
    progress.start(size);
    let outcome = decode_auto(&mut reader, opts, out, Some(&*progress), workers);
    progress.finish();
    outcome
}

/// Decodes an in-memory capture (tests, fuzzing): returns the output and the outcome.
pub fn decode_bytes(bytes: &[u8], name: &str, opts: Options) -> (Vec<u8>, Outcome) {
    let mut out = Vec::new();
    let outcome = match CaptureReader::new(bytes, name) {
        Ok(mut r) => decode(&mut r, opts, &mut out, None),
        Err(e) => Outcome {
            stats: Stats::default(),
            error: Some(e.into()),
        },
    };
    (out, outcome)
}
