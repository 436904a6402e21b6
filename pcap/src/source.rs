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

/// Decodes a whole capture into rows ([`Options::format`](crate::Options) is taken as
/// [`OutputFormat::Columns`](crate::OutputFormat)), handing them to `sink` a batch of at
/// most `rows` rows at a time, in order. Every row decoded before an error reaches `sink`
/// before the error is returned in the [`Outcome`]; an error of `sink` ends
/// the decoding ([`DecodeError::Write`](crate::DecodeError)).
pub fn decode_columns<R: Read>(
    reader: &mut CaptureReader<R>,
    opts: Options,
    rows: usize,
    progress: Option<&dyn Progress>,
    sink: &mut dyn FnMut(crate::columns::Batch) -> io::Result<()>,
) -> Outcome {
    use crate::DecodeError;
    let opts = Options {
        format: crate::OutputFormat::Columns,
        analyze: false,
        ..opts
    };
    let rows = rows.max(1);
    let mut dec = crate::Decoder::new(opts);
    let mut error = crate::decode::each_record(reader, &mut dec, progress, &mut |dec, rec| {
        // Nothing goes to the writer in this format.
        let _ = dec.record(rec, &mut io::sink());
        if dec.columns().full(rows) {
            sink(dec.columns().take())?;
        }
        Ok(())
    });
    if dec.columns().rows() > 0 && !matches!(error, Some(DecodeError::Write(_))) {
        if let Err(e) = sink(dec.columns().take()) {
            error.get_or_insert(DecodeError::Write(e));
        }
    }
    Outcome {
        stats: dec.stats(),
        error,
    }
}

/// [`decode_columns`] on `workers` decoding threads (the records are read on one more): the
/// same rows in the same order, in batches of the rows of at most `rows` records (a batch
/// also closes at [`crate::parallel::BATCH_BYTES`] of records). With
/// [`crate::Options::count`] (a count across batches) or one worker, it is
/// [`decode_columns`].
pub fn decode_columns_parallel<R: Read + Send>(
    reader: &mut CaptureReader<R>,
    opts: Options,
    workers: usize,
    rows: usize,
    progress: Option<&dyn Progress>,
    sink: &mut dyn FnMut(crate::columns::Batch) -> io::Result<()>,
) -> Outcome {
    if opts.count.is_some() || workers <= 1 {
        return decode_columns(reader, opts, rows, progress, sink);
    }
    let opts = Options {
        format: crate::OutputFormat::Columns,
        analyze: false,
        ..opts
    };
    crate::parallel::in_order(
        reader,
        opts,
        progress,
        workers,
        rows.max(1),
        &mut |_, batch| {
            if batch.rows() > 0 {
                sink(batch)
            } else {
                Ok(())
            }
        },
    )
}
