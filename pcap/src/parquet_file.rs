//! Decoded packets as a Parquet file (`roce decode --format parquet`): the columns of
//! [`crate::columns`], a row group of about [`crate::columns::BATCH_ROWS`] rows at a time, so
//! memory is bounded by a row group.
//!
//! Types: booleans as `BOOLEAN`; unsigned integers as `INT32`/`INT64` annotated
//! `INTEGER(bits, unsigned)`; `ts` as `INT64` `TIMESTAMP(NANOS, UTC)`; texts as `BYTE_ARRAY`
//! `STRING`. Every column is optional (a null where the JSON line has no such key). Pages
//! are Snappy-compressed, texts dictionary-encoded.
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::basic::{Compression, IntType, LogicalType, Repetition, TimeUnit, Type as Physical};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, Type};

use arrow_array::RecordBatch;

use crate::columns::{Batch, Kind, FIELDS};

/// The Parquet schema of [`FIELDS`]: RoCE's columns, and with `fabric` MRC's and UET's.
pub fn schema(fabric: bool) -> Type {
    let fields = crate::columns::fields(fabric)
        .iter()
        .map(|f| {
            let (physical, logical) = match f.kind {
                Kind::Bool => (Physical::BOOLEAN, None),
                Kind::U8 => (Physical::INT32, Some(unsigned(8))),
                Kind::U16 => (Physical::INT32, Some(unsigned(16))),
                Kind::U32 => (Physical::INT32, Some(unsigned(32))),
                Kind::U64 => (Physical::INT64, Some(unsigned(64))),
                Kind::I64 => (Physical::INT64, None),
                Kind::Timestamp => (
                    Physical::INT64,
                    Some(LogicalType::timestamp(true, TimeUnit::NANOS)),
                ),
                Kind::Text | Kind::Dict8 | Kind::Dict16 | Kind::Dict32 => {
                    (Physical::BYTE_ARRAY, Some(LogicalType::String))
                }
            };
            let t = Type::primitive_type_builder(f.name, physical)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(logical)
                .build()
                .expect("a primitive column with a matching logical type");
            Arc::new(t)
        })
        .collect();
    Type::group_type_builder("roce_packet")
        .with_fields(fields)
        .build()
        .expect("a group of primitive columns")
}

fn unsigned(bit_width: i8) -> LogicalType {
    LogicalType::Integer(IntType {
        bit_width,
        is_signed: false,
    })
}

/// Columns whose values repeat (endpoints, names, QPs, keys): dictionary-encoded.
const DICTIONARY: &[&str] = &[
    "src",
    "dst",
    "ecn",
    "version",
    "bth.opcode",
    "bth.opcode_name",
    "bth.pkey",
    "bth.dest_qp",
    "reth.rkey",
    "aeth.kind",
    "atomic_eth.rkey",
    "ieth.rkey",
    "deth.qkey",
    "deth.src_qp",
    "error",
    "src_mac",
    "mac_control.name",
];

/// Writes [`Batch`]es as row groups of one Parquet file, each column through its Arrow
/// array ([`crate::arrow_table`]): text is encoded straight from the column's bytes and
/// offsets.
pub struct ParquetWriter<W: Write + Send> {
    file: SerializedFileWriter<W>,
    columns: ArrowRowGroupWriterFactory,
    arrow: arrow_schema::SchemaRef,
    groups: usize,
    rows: u64,
}

impl<W: Write + Send> std::fmt::Debug for ParquetWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetWriter")
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl<W: Write + Send> ParquetWriter<W> {
    /// Starts a file on `out` (its header), with MRC's and UET's columns when `fabric`.
    pub fn new(out: W, fabric: bool) -> Result<Self, ParquetError> {
        let mut props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("roce {}", env!("CARGO_PKG_VERSION")))
            // Dictionaries only where values repeat: hashing a unique value (frame, ts, PSN,
            // ICRC) into a dictionary that overflows costs more than it saves.
            .set_dictionary_enabled(false);
        for f in FIELDS.iter().filter(|f| DICTIONARY.contains(&f.name)) {
            props = props.set_column_dictionary_enabled(ColumnPath::from(f.name), true);
        }
        let props = props.build();
        let file = SerializedFileWriter::new(out, Arc::new(schema(fabric)), Arc::new(props))?;
        let arrow = crate::arrow_table::schema(fabric);
        Ok(Self {
            columns: ArrowRowGroupWriterFactory::new(&file, arrow.clone()),
            file,
            arrow,
            groups: 0,
            rows: 0,
        })
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Writes `cols` as one row group (nothing for an empty batch).
    pub fn write(&mut self, cols: Batch) -> Result<(), ParquetError> {
        let batch = crate::arrow_table::record_batch(&self.arrow, cols)?;
        self.write_group(&[batch], 1)
    }

    /// Writes `batches` (of [`crate::arrow_table::schema`]), one after another, as one row
    /// group (nothing when they have no rows): each column chunk is the column of every
    /// batch, joined, so the file is the same however the rows were cut into batches. The
    /// column chunks are encoded on `threads` threads (this one and
    /// `threads - 1` more), each taking the next column not taken yet, into memory, then
    /// written in schema order: the file is the same whatever `threads` is.
    pub fn write_group(
        &mut self,
        batches: &[RecordBatch],
        threads: usize,
    ) -> Result<(), ParquetError> {
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if rows == 0 {
            return Ok(());
        }
        if batches.iter().any(|b| b.schema() != self.arrow) {
            return Err(ParquetError::General(
                "a batch's columns differ from the schema".into(),
            ));
        }
        let writers = self.columns.create_column_writers(self.groups)?;
        let writers: Vec<_> = writers.into_iter().map(|w| Mutex::new(Some(w))).collect();
        let next = AtomicUsize::new(0);
        let fields = self.arrow.fields();
        let encode = || -> Result<Vec<(usize, ArrowColumnChunk)>, ParquetError> {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = writers.get(i) else {
                    return Ok(done);
                };
                let Some(mut w) = slot.lock().ok().and_then(|mut s| s.take()) else {
                    return Err(ParquetError::General("a column was taken twice".into()));
                };
                // One array per column chunk: the writer cuts pages where its own counts
                // say, not where the batches happened to end.
                let parts: Vec<&dyn arrow_array::Array> =
                    batches.iter().map(|b| b.column(i).as_ref()).collect();
                let column = match parts.as_slice() {
                    [_] => batches[0].column(i).clone(),
                    parts => arrow_select::concat::concat(parts)?,
                };
                for leaf in compute_leaves(&fields[i], &column)? {
                    w.write(&leaf)?;
                }
                done.push((i, w.close()?));
            }
        };
        let mut chunks = std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..threads.max(1)).map(|_| scope.spawn(encode)).collect();
            let mut all = encode()?;
            for h in helpers {
                let more = h
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
                all.extend(more);
            }
            Ok::<_, ParquetError>(all)
        })?;
        chunks.sort_unstable_by_key(|c| c.0);
        let mut group = self.file.next_row_group()?;
        for (_, chunk) in chunks {
            chunk.append_to_row_group(&mut group)?;
        }
        group.close()?;
        self.groups += 1;
        self.rows += rows as u64;
        Ok(())
    }

    /// Writes the footer and returns the output.
    pub fn finish(self) -> Result<W, ParquetError> {
        self.file.into_inner()
    }
}

/// Record batches cut into row groups of exactly `rows` rows (the last one fewer), whatever
/// the batches' lengths: a batch that crosses a boundary is cut there (a slice, not a copy),
/// so a file does not depend on how the batches were decoded (on how many threads).
struct RowGroups {
    rows: usize,
    group: Vec<RecordBatch>,
    have: usize,
}

impl RowGroups {
    fn new(rows: usize) -> Self {
        Self {
            rows: rows.max(1),
            group: Vec::new(),
            have: 0,
        }
    }

    /// Adds `batch`, handing every row group it completes to `full`.
    fn push<E>(
        &mut self,
        mut batch: RecordBatch,
        full: &mut dyn FnMut(Vec<RecordBatch>) -> Result<(), E>,
    ) -> Result<(), E> {
        while self.have + batch.num_rows() >= self.rows {
            let take = self.rows - self.have;
            self.group.push(batch.slice(0, take));
            batch = batch.slice(take, batch.num_rows() - take);
            self.have = 0;
            full(std::mem::take(&mut self.group))?;
        }
        if batch.num_rows() > 0 {
            self.have += batch.num_rows();
            self.group.push(batch);
        }
        Ok(())
    }

    /// The rows of the last row group (fewer than a whole one).
    fn rest(self) -> Vec<RecordBatch> {
        self.group
    }
}

/// Decodes a whole capture from `reader` into a Parquet file on `out`, with about `threads`
/// threads: the rows are decoded on this thread, and encoded on a second, a row group of
/// [`crate::columns::BATCH_ROWS`] rows at a time; with more than two threads, `threads - 1`
/// decode (the records read on one more, [`crate::source::decode_columns_parallel`]) and
/// `threads - 1` encode the columns of each row group. Memory is bounded by a row group
/// and the batches in flight, not by the capture. The file is the same bytes whatever
/// `threads` is. It is finished (its footer written) even when the capture ends in an
/// error: it then holds every row decoded before it. A Parquet or output error ends the
/// decoding ([`DecodeError::Write`](crate::DecodeError)). Returns the outcome and the output.
pub fn decode_to_parquet<R: std::io::Read + Send, W: Write + Send>(
    reader: &mut crate::CaptureReader<R>,
    opts: crate::Options,
    out: W,
    threads: usize,
    progress: Option<&dyn crate::Progress>,
) -> (crate::Outcome, Option<W>) {
    use crate::DecodeError;
    // Two threads: one decodes, one encodes (the parallel decoder's reading thread would
    // cost more in copies than it gives). More: both stages on all but one each.
    let workers = if threads <= 2 { 1 } else { threads - 1 };
    // The output's own error as it was, else the Parquet one.
    let as_io = |e: ParquetError| match e {
        ParquetError::External(inner) => std::io::Error::other(inner),
        e => std::io::Error::other(e.to_string()),
    };
    let mut writer = match ParquetWriter::new(out, opts.fabric_columns) {
        Ok(w) => w,
        Err(e) => {
            let outcome = crate::Outcome {
                stats: crate::Stats::default(),
                error: Some(DecodeError::Write(as_io(e))),
            };
            return (outcome, None);
        }
    };
    let table = crate::arrow_table::schema(opts.fabric_columns);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(1);
    std::thread::scope(|scope| {
        let encoder = scope.spawn(move || {
            let mut groups = RowGroups::new(crate::columns::BATCH_ROWS);
            for batch in rx {
                let batch = crate::arrow_table::record_batch(&table, batch)?;
                groups.push(batch, &mut |g| writer.write_group(&g, workers))?;
            }
            writer.write_group(&groups.rest(), workers)?;
            writer.finish()
        });
        let mut outcome = crate::source::decode_columns_parallel(
            reader,
            opts,
            workers,
            crate::columns::BATCH_ROWS,
            progress,
            &mut |batch| {
                tx.send(batch)
                    .map_err(|_| std::io::Error::other("the Parquet encoder stopped"))
            },
        );
        drop(tx);
        let out = match encoder.join() {
            Ok(Ok(out)) => Some(out),
            Ok(Err(e)) => {
                // The encoder's own error, not the "stopped" the decoder saw.
                outcome.error = Some(DecodeError::Write(as_io(e)));
                None
            }
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (outcome, out)
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, RecordBatch, UInt32Array};

    use super::RowGroups;

    /// Batches of any lengths come out as row groups of exactly the size asked, the rows in
    /// order, the last group the rest.
    #[test]
    fn batches_are_cut_into_whole_row_groups() {
        let mut next = 0u32;
        let mut batch = |n: u32| {
            let col = UInt32Array::from_iter_values(next..next + n);
            next += n;
            RecordBatch::try_from_iter([("n", Arc::new(col) as _)]).unwrap()
        };
        let mut groups = RowGroups::new(10);
        let mut got: Vec<Vec<u32>> = Vec::new();
        let rows = |g: &[RecordBatch]| -> Vec<u32> {
            g.iter()
                .flat_map(|b| {
                    let c = b.column(0).as_any().downcast_ref::<UInt32Array>().unwrap();
                    c.values().to_vec()
                })
                .collect()
        };
        for n in [5, 17, 3, 0, 40, 1, 10] {
            groups
                .push(batch(n), &mut |g| {
                    got.push(rows(&g));
                    Ok::<_, ()>(())
                })
                .unwrap();
        }
        let rest = rows(&groups.rest());
        assert_eq!(got.len(), 7, "{got:?}");
        for (i, g) in got.iter().enumerate() {
            let first = i as u32 * 10;
            assert_eq!(*g, (first..first + 10).collect::<Vec<_>>(), "group {i}");
        }
        assert_eq!(rest, (70..76).collect::<Vec<_>>());
    }
}
