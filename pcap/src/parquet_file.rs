//! Decoded packets as a Parquet file (`roce decode --format parquet`): the columns of
//! [`crate::columns`], one row group per batch, so memory is bounded by a row group.
//!
//! Types: booleans as `BOOLEAN`; unsigned integers as `INT32`/`INT64` annotated
//! `INTEGER(bits, unsigned)`; `ts` as `INT64` `TIMESTAMP(NANOS, UTC)`; texts as `BYTE_ARRAY`
//! `STRING`. Every column is optional (a null where the JSON line has no such key). Pages
//! are Snappy-compressed, texts dictionary-encoded.
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::{Compression, IntType, LogicalType, Repetition, TimeUnit, Type as Physical};
use parquet::data_type::ByteArray;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, Type};

use crate::columns::{Batch, Column, Kind, Values, FIELDS};

/// The Parquet schema of [`FIELDS`].
pub fn schema() -> Type {
    let fields = FIELDS
        .iter()
        .map(|f| {
            let (physical, logical) = match f.kind {
                Kind::Bool => (Physical::BOOLEAN, None),
                Kind::U8 => (Physical::INT32, Some(unsigned(8))),
                Kind::U16 => (Physical::INT32, Some(unsigned(16))),
                Kind::U32 => (Physical::INT32, Some(unsigned(32))),
                Kind::U64 => (Physical::INT64, Some(unsigned(64))),
                Kind::Timestamp => (
                    Physical::INT64,
                    Some(LogicalType::timestamp(true, TimeUnit::NANOS)),
                ),
                Kind::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
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

/// Writes [`Batch`]es as row groups of one Parquet file.
pub struct ParquetWriter<W: Write + Send> {
    file: SerializedFileWriter<W>,
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
    /// Starts a file on `out` (its header).
    pub fn new(out: W) -> Result<Self, ParquetError> {
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
        Ok(Self {
            file: SerializedFileWriter::new(out, Arc::new(schema()), Arc::new(props))?,
            rows: 0,
        })
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Writes `cols` as one row group (nothing for an empty batch).
    pub fn write(&mut self, cols: &Batch) -> Result<(), ParquetError> {
        if cols.rows() == 0 {
            return Ok(());
        }
        let mut group = self.file.next_row_group()?;
        let mut defs = Vec::with_capacity(cols.rows());
        for col in cols.columns() {
            let Some(mut w) = group.next_column()? else {
                return Err(ParquetError::General("schema has fewer columns".into()));
            };
            defs.clear();
            defs.extend(col.valid.iter().map(|&v| i16::from(v)));
            write_column(w.untyped(), col, &defs)?;
            w.close()?;
        }
        group.close()?;
        self.rows += cols.rows() as u64;
        Ok(())
    }

    /// Writes the footer and returns the output.
    pub fn finish(self) -> Result<W, ParquetError> {
        self.file.into_inner()
    }
}

/// The values of the rows that are not null, converted by `f`.
fn present<T: Copy, U>(v: &[T], valid: &[bool], f: impl Fn(T) -> U) -> Vec<U> {
    if valid.iter().all(|&ok| ok) {
        return v.iter().map(|&x| f(x)).collect();
    }
    v.iter()
        .zip(valid)
        .filter(|(_, &ok)| ok)
        .map(|(&x, _)| f(x))
        .collect()
}

fn write_column(
    w: &mut parquet::column::writer::ColumnWriter<'_>,
    col: &Column,
    defs: &[i16],
) -> Result<(), ParquetError> {
    use parquet::column::writer::ColumnWriter as W;
    let valid = &col.valid;
    let mismatch = || ParquetError::General("column type differs from the schema".into());
    match (w, &col.values) {
        (W::BoolColumnWriter(w), Values::Bool(v)) => {
            w.write_batch(&present(v, valid, |x| x), Some(defs), None)?;
        }
        (W::Int32ColumnWriter(w), Values::U8(v)) => {
            w.write_batch(&present(v, valid, i32::from), Some(defs), None)?;
        }
        (W::Int32ColumnWriter(w), Values::U16(v)) => {
            w.write_batch(&present(v, valid, i32::from), Some(defs), None)?;
        }
        (W::Int32ColumnWriter(w), Values::U32(v)) => {
            // Parquet keeps UINT_32 in INT32's bits (and UINT_64 in INT64's).
            w.write_batch(&present(v, valid, |x| x as i32), Some(defs), None)?;
        }
        (W::Int64ColumnWriter(w), Values::U64(v)) => {
            w.write_batch(&present(v, valid, |x| x as i64), Some(defs), None)?;
        }
        (W::Int64ColumnWriter(w), Values::Timestamp(v)) => {
            w.write_batch(&present(v, valid, |x| x), Some(defs), None)?;
        }
        (W::ByteArrayColumnWriter(w), Values::Text { offsets, bytes }) => {
            let all = Bytes::copy_from_slice(bytes);
            let v: Vec<ByteArray> = offsets
                .windows(2)
                .zip(valid)
                .filter(|(_, &ok)| ok)
                .map(|(o, _)| ByteArray::from(all.slice(o[0] as usize..o[1] as usize)))
                .collect();
            w.write_batch(&v, Some(defs), None)?;
        }
        _ => return Err(mismatch()),
    }
    Ok(())
}

/// Decodes a whole capture from `reader` into a Parquet file on `out`: rows are decoded on
/// this thread and encoded on a second one, a row group ([`crate::columns::BATCH_ROWS`]) at a
/// time, at most two row groups in memory at once. The file is finished (its footer written)
/// even when the capture ends in an error: it then holds every row decoded before it. A
/// Parquet or output error ends the decoding ([`DecodeError::Write`](crate::DecodeError)).
/// Returns the outcome and the output.
pub fn decode_to_parquet<R: std::io::Read, W: Write + Send>(
    reader: &mut crate::CaptureReader<R>,
    opts: crate::Options,
    out: W,
    progress: Option<&dyn crate::Progress>,
) -> (crate::Outcome, Option<W>) {
    use crate::DecodeError;
    // The output's own error as it was, else the Parquet one.
    let as_io = |e: ParquetError| match e {
        ParquetError::External(inner) => std::io::Error::other(inner),
        e => std::io::Error::other(e.to_string()),
    };
    let mut writer = match ParquetWriter::new(out) {
        Ok(w) => w,
        Err(e) => {
            let outcome = crate::Outcome {
                stats: crate::Stats::default(),
                error: Some(DecodeError::Write(as_io(e))),
            };
            return (outcome, None);
        }
    };
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(1);
    std::thread::scope(|scope| {
        let encoder = scope.spawn(move || {
            for batch in rx {
                writer.write(&batch)?;
            }
            writer.finish()
        });
        let mut outcome = crate::columns::decode_columns(
            reader,
            opts,
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
