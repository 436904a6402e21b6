//! Multi-threaded decoding of a capture: one thread reads records and copies them into
//! batches, worker threads decode and format whole batches (each with its own [`Decoder`]),
//! and the calling thread writes the batches' output in input order. The output is byte for
//! byte what the sequential [`crate::decode()`] writes. Batches close at [`BATCH_RECORDS`]
//! records or [`BATCH_BYTES`] bytes, and the bytes of all batches in flight are bounded by
//! [`BYTES_IN_FLIGHT`], so memory stays constant however large the input or its records.
//!
//! `--count` needs a global count of printed packets, so it (and live capture) stays
//! sequential.
use crate::decode::{Decoder, Options, Outcome, Stats};
use crate::error::{DecodeError, ReadError};
use crate::progress::Progress;
use crate::reader::{CaptureReader, Record, Timestamp};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Condvar, Mutex};

/// Records per batch (at most; see [`BATCH_BYTES`]).
pub const BATCH_RECORDS: usize = 4096;

/// A batch is closed once its records hold this many bytes.
pub const BATCH_BYTES: usize = 4 << 20;

/// Bytes of records read and not yet written out, across every batch in flight (queued,
/// decoding, or decoded and waiting for an earlier batch): what bounds the memory of a
/// parallel decode whatever the records' sizes. One batch is always let through, however
/// large its record.
pub const BYTES_IN_FLIGHT: usize = 64 << 20;

/// What a batch costs of [`BYTES_IN_FLIGHT`]: its record bytes and a share for its output.
fn cost(b: &Batch) -> usize {
    b.data.len() + b.recs.len() * 256
}

/// The budget of [`BYTES_IN_FLIGHT`]: the reader takes a batch's cost before sending it, the
/// writer gives it back once the batch is written.
struct Budget {
    used: Mutex<usize>,
    freed: Condvar,
}

impl Budget {
    fn new() -> Self {
        Self {
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Waits until `n` fits (or nothing is in flight), then takes it. `false` if stopped.
    fn take(&self, n: usize, stop: &AtomicBool) -> bool {
        let Ok(mut used) = self.used.lock() else {
            return false;
        };
        while *used > 0 && *used + n > BYTES_IN_FLIGHT {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            used = match self
                .freed
                .wait_timeout(used, std::time::Duration::from_millis(50))
            {
                Ok((u, _)) => u,
                Err(_) => return false,
            };
        }
        *used += n;
        true
    }

    fn give_back(&self, n: usize) {
        if let Ok(mut used) = self.used.lock() {
            *used = used.saturating_sub(n);
        }
        self.freed.notify_all();
    }
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    ts: Timestamp,
    ts_digits: u8,
    link_type: u32,
    interface: u32,
    orig_len: u32,
    offset: u64,
    start: usize,
    end: usize,
}

#[derive(Debug)]
struct Batch {
    seq: u64,
    /// Its share of the in-flight budget.
    cost: usize,
    frame_base: u64,
    first_ts: Timestamp,
    recs: Vec<Meta>,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Done {
    seq: u64,
    cost: usize,
    out: Vec<u8>,
    /// The rows, with [`crate::OutputFormat::Columns`].
    columns: crate::columns::Batch,
    stats: Stats,
}

fn add(total: &mut Stats, s: &Stats) {
    // Every field by name: a counter added to `Stats` does not compile until it is summed.
    let Stats {
        packets,
        roce,
        mrc,
        uet,
        icrc_failures,
        malformed,
        snap_truncated,
        lengths_rewritten,
        skipped,
        printed,
        pause_frames,
    } = *s;
    total.packets += packets;
    total.roce += roce;
    total.mrc += mrc;
    total.uet += uet;
    total.icrc_failures += icrc_failures;
    total.malformed += malformed;
    total.snap_truncated += snap_truncated;
    total.lengths_rewritten += lengths_rewritten;
    total.skipped += skipped;
    total.pause_frames += pause_frames;
    total.printed += printed;
}

/// The largest record buffer kept for reuse: a batch closes at [`BATCH_BYTES`], and its
/// buffer grows by doubling.
const SPARE_BYTES: usize = 2 * BATCH_BYTES;

/// A decoded batch's emptied buffers, handed back to the reading thread for the next batch:
/// reused, they are neither grown again (a `memmove` per doubling) nor faulted in afresh.
type Spare = (Vec<Meta>, Vec<u8>);

fn read_batches<R: Read>(
    reader: &mut CaptureReader<R>,
    batch_records: usize,
    tx: &std::sync::mpsc::SyncSender<Batch>,
    spares: &Receiver<Spare>,
    budget: &Budget,
    progress: Option<&dyn Progress>,
    stop: &AtomicBool,
) -> Option<ReadError> {
    let mut seq = 0;
    let mut frames = 0u64;
    let mut first_ts = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let (recs, data) = spares
            .try_recv()
            .unwrap_or_else(|_| (Vec::with_capacity(batch_records.min(1024)), Vec::new()));
        let mut b = Batch {
            seq,
            cost: 0,
            frame_base: frames,
            first_ts: Timestamp::default(),
            recs,
            data,
        };
        let mut error = None;
        let mut full = false;
        while !full {
            match reader.next_record() {
                Ok(Some(r)) => {
                    let start = b.data.len();
                    b.data.extend_from_slice(r.data);
                    b.recs.push(Meta {
                        ts: r.ts,
                        ts_digits: r.ts_digits,
                        link_type: r.link_type,
                        interface: r.interface,
                        orig_len: r.orig_len,
                        offset: r.offset,
                        start,
                        end: b.data.len(),
                    });
                    first_ts.get_or_insert(r.ts);
                    full = b.recs.len() >= batch_records || b.data.len() >= BATCH_BYTES;
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        let last = !full;
        frames += b.recs.len() as u64;
        b.first_ts = first_ts.unwrap_or_default();
        b.cost = cost(&b);
        if let Some(p) = progress {
            p.advance(reader.offset());
        }
        if !b.recs.is_empty() && (!budget.take(b.cost, stop) || tx.send(b).is_err()) {
            return error; // the writer stopped (write error)
        }
        if last || error.is_some() {
            return error;
        }
        seq += 1;
    }
}

fn work(
    opts: Options,
    rx: &Mutex<Receiver<Batch>>,
    tx: &std::sync::mpsc::SyncSender<Done>,
    spares: &std::sync::mpsc::SyncSender<Spare>,
) {
    loop {
        let batch = match rx.lock() {
            Ok(r) => match r.recv() {
                Ok(b) => b,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let mut dec = Decoder::starting_at(opts, batch.frame_base, batch.first_ts);
        let columns = opts.format == crate::OutputFormat::Columns;
        if columns {
            dec.columns().reserve(batch.recs.len());
        }
        let mut out = Vec::with_capacity(if columns { 0 } else { batch.recs.len() * 128 });
        for m in &batch.recs {
            let rec = Record {
                ts: m.ts,
                ts_digits: m.ts_digits,
                link_type: m.link_type,
                interface: m.interface,
                orig_len: m.orig_len,
                data: &batch.data[m.start..m.end],
                offset: m.offset,
            };
            // Writing into a Vec cannot fail.
            let _ = dec.record(&rec, &mut out);
        }
        let _ = dec.flush(&mut out);
        let (mut recs, mut data) = (batch.recs, batch.data);
        // A batch grown past its usual size by one huge record is not kept: the spares stay
        // within a few batches' worth of memory, however large the records.
        if data.capacity() <= SPARE_BYTES {
            recs.clear();
            data.clear();
            // Never waits: with the reading thread's spares full, these are freed.
            let _ = spares.try_send((recs, data));
        }
        let done = Done {
            seq: batch.seq,
            cost: batch.cost,
            out,
            columns: if columns {
                dec.columns().take()
            } else {
                crate::columns::Batch::default()
            },
            stats: dec.stats(),
        };
        if tx.send(done).is_err() {
            return;
        }
    }
}

/// Decodes the whole input with `workers` decoding threads and batches of `batch_records`;
/// same output and [`Outcome`] as [`crate::decode()`]. `opts.count` must be `None`.
pub fn decode_parallel<R: Read + Send, W: Write>(
    reader: &mut CaptureReader<R>,
    opts: Options,
    out: &mut W,
    progress: Option<&dyn Progress>,
    workers: usize,
    batch_records: usize,
) -> Outcome {
    let mut outcome = in_order(
        reader,
        opts,
        progress,
        workers,
        batch_records,
        &mut |bytes, _| out.write_all(&bytes),
    );
    if outcome.error.is_none() {
        if let Err(e) = out.flush() {
            outcome.error = Some(DecodeError::Write(e));
        }
    }
    outcome
}

/// Decodes the whole input with `workers` decoding threads and batches of `batch_records`
/// records, handing each batch's output (bytes, and rows with
/// [`crate::OutputFormat::Columns`]) to `consume` in input order. An error of `consume` stops
/// the reading ([`DecodeError::Write`]). `opts.count` must be `None`.
pub(crate) fn in_order<R: Read + Send>(
    reader: &mut CaptureReader<R>,
    opts: Options,
    progress: Option<&dyn Progress>,
    workers: usize,
    batch_records: usize,
    consume: &mut dyn FnMut(Vec<u8>, crate::columns::Batch) -> std::io::Result<()>,
) -> Outcome {
    debug_assert!(opts.count.is_none());
    let workers = workers.max(1);
    let (batch_tx, batch_rx) = sync_channel::<Batch>(workers * 2);
    let (done_tx, done_rx) = sync_channel::<Done>(workers * 2);
    let (spare_tx, spare_rx) = sync_channel::<Spare>(workers * 2);
    let batch_rx = Mutex::new(batch_rx);
    let mut stats = Stats::default();
    let mut write_error = None;
    let stop = AtomicBool::new(false);
    let budget = Budget::new();
    let read_error = std::thread::scope(|s| {
        let stop = &stop;
        let budget = &budget;
        let reading = s.spawn(move || {
            read_batches(
                reader,
                batch_records.max(1),
                &batch_tx,
                &spare_rx,
                budget,
                progress,
                stop,
            )
        });
        for _ in 0..workers {
            let tx = done_tx.clone();
            let spares = spare_tx.clone();
            let rx = &batch_rx;
            s.spawn(move || work(opts, rx, &tx, &spares));
        }
        drop(done_tx);
        drop(spare_tx);
        let mut pending = BTreeMap::new();
        let mut next = 0u64;
        for done in &done_rx {
            pending.insert(done.seq, done);
            while let Some(d) = pending.remove(&next) {
                add(&mut stats, &d.stats);
                if write_error.is_none() {
                    if let Err(e) = consume(d.out, d.columns) {
                        // Stop reading; keep draining so every thread can finish.
                        stop.store(true, Ordering::Relaxed);
                        write_error = Some(e);
                    }
                }
                budget.give_back(d.cost);
                next += 1;
            }
        }
        reading.join().unwrap_or(None)
    });
    let mut error = write_error.map(DecodeError::Write);
    if error.is_none() {
        error = read_error.map(DecodeError::Read);
    }
    Outcome { stats, error }
}
