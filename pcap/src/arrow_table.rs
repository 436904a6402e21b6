//! The rows of [`crate::columns`] as Arrow arrays: the one conversion that the Parquet
//! writer ([`crate::parquet_file`]) encodes and the Python package's `decode_table` hands
//! to pyarrow. Each column's buffers become the array's buffers (moved, not copied); only
//! the validity (and a boolean column's values) are packed into bitmaps.
use std::sync::Arc;

use arrow_array::types::{ArrowDictionaryKeyType, Int16Type, Int32Type, Int8Type};
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Int64Array, PrimitiveArray, RecordBatch, StringArray,
    TimestampNanosecondArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
pub use arrow_schema::ArrowError;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::columns::{Batch, Bits, Column, Dict, Keys, Kind, Values};

/// The Arrow type of a column kind: unsigned integers of its width, nanosecond UTC
/// timestamps, UTF-8 text, dictionaries of UTF-8 text with signed keys of their width;
/// every column nullable.
pub fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::Bool => DataType::Boolean,
        Kind::U8 => DataType::UInt8,
        Kind::U16 => DataType::UInt16,
        Kind::U32 => DataType::UInt32,
        Kind::U64 => DataType::UInt64,
        Kind::I64 => DataType::Int64,
        Kind::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        Kind::Text => DataType::Utf8,
        Kind::Dict8 => dictionary(DataType::Int8),
        Kind::Dict16 => dictionary(DataType::Int16),
        Kind::Dict32 => dictionary(DataType::Int32),
    }
}

fn dictionary(key: DataType) -> DataType {
    DataType::Dictionary(Box::new(key), Box::new(DataType::Utf8))
}

/// The Arrow schema of [`FIELDS`](crate::columns::FIELDS) (in their order, all nullable): RoCE's columns, and with
/// `fabric` MRC's and UET's ([`crate::columns::FABRIC_FROM`] on).
pub fn schema(fabric: bool) -> SchemaRef {
    let fields: Vec<Field> = crate::columns::fields(fabric)
        .iter()
        .map(|f| Field::new(f.name, data_type(f.kind), true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// One column of a batch of `rows` rows as an Arrow array (its buffers moved, not copied).
/// `Err` only for text that is not UTF-8, offsets out of order or a key past its
/// dictionary, which [`crate::columns`] never makes.
pub fn array(col: Column, rows: usize) -> Result<ArrayRef, ArrowError> {
    array_of(col, rows, &mut Zeros::new(rows))
}

/// Zeroed bytes shared by the columns of a batch that no row set (a capture's rows set a
/// few of the columns each: the headers their packets have): their values, offsets and
/// validity all point into one buffer instead of one each, so the table's memory is that of
/// the columns that hold something.
struct Zeros {
    rows: usize,
    buf: Option<Buffer>,
}

impl Zeros {
    fn new(rows: usize) -> Self {
        Self { rows, buf: None }
    }
    /// The shared buffer: 8 bytes a row and one more row (room for the widest values, and
    /// for a text column's one more offset).
    fn buffer(&mut self) -> Buffer {
        let rows = self.rows;
        self.buf
            .get_or_insert_with(|| Buffer::from_vec(vec![0u64; rows + 1]))
            .clone()
    }
    fn scalars<T: arrow_buffer::ArrowNativeType>(&mut self, len: usize) -> ScalarBuffer<T> {
        ScalarBuffer::new(self.buffer(), 0, len)
    }
}

fn array_of(col: Column, rows: usize, zeros: &mut Zeros) -> Result<ArrayRef, ArrowError> {
    // A column no row set holds nothing (or nulls only): the shared zeros.
    if rows > 0 && col.valid.ones() == 0 {
        return Ok(all_null(&col.values, rows, zeros));
    }
    let nulls = if col.valid.ones() == rows {
        None
    } else {
        Some(NullBuffer::new(bitmap(col.valid)))
    };
    Ok(match col.values {
        Values::Bool(v) => Arc::new(BooleanArray::new(bitmap(v), nulls)),
        Values::U8(v) => Arc::new(UInt8Array::new(ScalarBuffer::from(v), nulls)),
        Values::U16(v) => Arc::new(UInt16Array::new(ScalarBuffer::from(v), nulls)),
        Values::U32(v) => Arc::new(UInt32Array::new(ScalarBuffer::from(v), nulls)),
        Values::U64(v) => Arc::new(UInt64Array::new(ScalarBuffer::from(v), nulls)),
        Values::I64(v) => Arc::new(Int64Array::new(ScalarBuffer::from(v), nulls)),
        Values::Timestamp(v) => Arc::new(
            TimestampNanosecondArray::new(ScalarBuffer::from(v), nulls).with_timezone("UTC"),
        ),
        Values::Text { offsets, bytes } => Arc::new(StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(bytes),
            nulls,
        )?),
        Values::Dict { keys, dict } => match keys {
            Keys::I8(k) => dict_array::<Int8Type>(k, dict, nulls)?,
            Keys::I16(k) => dict_array::<Int16Type>(k, dict, nulls)?,
            Keys::I32(k) => dict_array::<Int32Type>(k, dict, nulls)?,
        },
    })
}

/// Packed bits as an Arrow bitmap (the same bytes).
fn bitmap(bits: Bits) -> BooleanBuffer {
    let (bytes, len) = bits.into_parts();
    BooleanBuffer::new(Buffer::from_vec(bytes), 0, len)
}

/// A dictionary column's keys and texts as an Arrow dictionary array.
fn dict_array<K: ArrowDictionaryKeyType>(
    keys: Vec<K::Native>,
    dict: Dict,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef, ArrowError> {
    let (offsets, bytes) = dict.into_parts();
    let values = StringArray::try_new(
        OffsetBuffer::new(ScalarBuffer::from(offsets)),
        Buffer::from_vec(bytes),
        None,
    )?;
    let keys = PrimitiveArray::<K>::new(ScalarBuffer::from(keys), nulls);
    Ok(Arc::new(DictionaryArray::<K>::try_new(
        keys,
        Arc::new(values),
    )?))
}

/// A column of `rows` nulls of the kind of `values`, its buffers the shared zeros.
fn all_null(values: &Values, rows: usize, zeros: &mut Zeros) -> ArrayRef {
    let nulls = Some(NullBuffer::new(BooleanBuffer::new(zeros.buffer(), 0, rows)));
    match values {
        Values::Bool(_) => Arc::new(BooleanArray::new(
            BooleanBuffer::new(zeros.buffer(), 0, rows),
            nulls,
        )),
        Values::U8(_) => Arc::new(UInt8Array::new(zeros.scalars(rows), nulls)),
        Values::U16(_) => Arc::new(UInt16Array::new(zeros.scalars(rows), nulls)),
        Values::U32(_) => Arc::new(UInt32Array::new(zeros.scalars(rows), nulls)),
        Values::U64(_) => Arc::new(UInt64Array::new(zeros.scalars(rows), nulls)),
        Values::I64(_) => Arc::new(Int64Array::new(zeros.scalars(rows), nulls)),
        Values::Timestamp(_) => {
            Arc::new(TimestampNanosecondArray::new(zeros.scalars(rows), nulls).with_timezone("UTC"))
        }
        Values::Text { .. } => Arc::new(StringArray::new(
            // Every offset 0: every row empty (and null).
            OffsetBuffer::new(zeros.scalars(rows + 1)),
            Buffer::from_vec(Vec::<u8>::new()),
            nulls,
        )),
        Values::Dict { keys, .. } => match keys {
            Keys::I8(_) => all_null_dict::<Int8Type>(rows, zeros, nulls),
            Keys::I16(_) => all_null_dict::<Int16Type>(rows, zeros, nulls),
            Keys::I32(_) => all_null_dict::<Int32Type>(rows, zeros, nulls),
        },
    }
}

/// A dictionary column of `rows` nulls: every key 0 (the shared zeros), no texts.
fn all_null_dict<K: ArrowDictionaryKeyType>(
    rows: usize,
    zeros: &mut Zeros,
    nulls: Option<NullBuffer>,
) -> ArrayRef {
    let keys = PrimitiveArray::<K>::new(zeros.scalars(rows), nulls);
    // No texts, and no null buffer on them: the array's logical nulls are then its keys'
    // (shared), not a bitmap computed key by key for every such column of every batch.
    let texts = StringArray::new(
        OffsetBuffer::new(zeros.scalars(1)),
        Buffer::from_vec(Vec::<u8>::new()),
        None,
    );
    Arc::new(DictionaryArray::<K>::new(keys, Arc::new(texts)))
}

/// A batch of rows as an Arrow record batch of `schema` (which must be one of [`schema`]'s:
/// a batch decoded without `fabric_columns` has none set past RoCE's).
pub fn record_batch(schema: &SchemaRef, b: Batch) -> Result<RecordBatch, ArrowError> {
    let rows = b.rows();
    let mut zeros = Zeros::new(rows);
    let arrays = b
        .into_columns()
        .into_iter()
        .take(schema.fields().len())
        .map(|c| array_of(c, rows, &mut zeros))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), arrays)
}

#[cfg(test)]
mod tests {
    use arrow_array::Array;

    use super::{record_batch, schema};
    use crate::columns::{Batch, FIELDS};
    use crate::source::decode_columns;

    /// The rows of the benchmark capture's first 500 packets, as one batch.
    fn batch() -> Batch {
        let mut bytes = Vec::new();
        crate::synth::write_benchmark_capture(&mut bytes, 500).unwrap();
        let mut r = crate::CaptureReader::new(&bytes[..], "bench").unwrap();
        let mut out = Vec::new();
        let outcome = decode_columns(&mut r, crate::Options::default(), 1 << 20, None, &mut |b| {
            out.push(b);
            Ok(())
        });
        assert!(outcome.error.is_none());
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    /// Columns no row set are all null, of their own type, and share one zeroed buffer;
    /// the others keep every value and null of the batch.
    #[test]
    fn unset_columns_share_one_buffer_and_the_rest_keep_their_values() {
        let b = batch();
        let rows = b.rows();
        let unset: Vec<bool> = b.columns().iter().map(|c| c.valid.ones() == 0).collect();
        let nulls: Vec<usize> = b.columns().iter().map(|c| c.nulls(rows)).collect();
        assert!(unset.iter().filter(|&&u| u).count() >= 2, "{unset:?}");
        assert!(unset.iter().any(|&u| !u));
        let rb = record_batch(&schema(true), b).unwrap();
        let mut shared = None;
        for (i, f) in FIELDS.iter().enumerate() {
            let a = rb.column(i);
            assert_eq!(a.len(), rows, "{}", f.name);
            assert_eq!(a.null_count(), nulls[i], "{}", f.name);
            if unset[i] {
                assert_eq!(a.null_count(), rows, "{}", f.name);
                // Its first buffer: the values (a text column's: its offsets).
                let data = a.to_data();
                let first = data.buffers().first().map(|b| b.data_ptr());
                let ptr = first.or_else(|| data.nulls().map(|n| n.buffer().data_ptr()));
                let ptr = ptr.expect("a buffer");
                let base = *shared.get_or_insert(ptr);
                assert_eq!(ptr, base, "{}: its own buffer", f.name);
            }
        }
    }
}
