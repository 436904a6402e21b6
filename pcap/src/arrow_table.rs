//! The rows of [`crate::columns`] as Arrow arrays: the one conversion that the Parquet
//! writer ([`crate::parquet_file`]) encodes and the Python package's `decode_table` hands
//! to pyarrow. Each column's buffers become the array's buffers (moved, not copied); only
//! the validity (and a boolean column's values) are packed into bitmaps.
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, RecordBatch, StringArray, TimestampNanosecondArray, UInt16Array,
    UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
pub use arrow_schema::ArrowError;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::columns::{Batch, Column, Kind, Values, FIELDS};

/// The Arrow type of a column kind: unsigned integers of its width, nanosecond UTC
/// timestamps, UTF-8 text; every column nullable.
pub fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::Bool => DataType::Boolean,
        Kind::U8 => DataType::UInt8,
        Kind::U16 => DataType::UInt16,
        Kind::U32 => DataType::UInt32,
        Kind::U64 => DataType::UInt64,
        Kind::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
        Kind::Text => DataType::Utf8,
    }
}

/// The Arrow schema of [`FIELDS`] (in their order, all nullable).
pub fn schema() -> SchemaRef {
    let fields: Vec<Field> = FIELDS
        .iter()
        .map(|f| Field::new(f.name, data_type(f.kind), true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// One column as an Arrow array (its buffers moved, not copied). `Err` only for text that
/// is not UTF-8 or offsets out of order, which [`crate::columns`] never makes.
pub fn array(col: Column) -> Result<ArrayRef, ArrowError> {
    let nulls = if col.valid.iter().all(|&v| v) {
        None
    } else {
        Some(NullBuffer::from(col.valid))
    };
    Ok(match col.values {
        Values::Bool(v) => Arc::new(BooleanArray::new(BooleanBuffer::from(v), nulls)),
        Values::U8(v) => Arc::new(UInt8Array::new(ScalarBuffer::from(v), nulls)),
        Values::U16(v) => Arc::new(UInt16Array::new(ScalarBuffer::from(v), nulls)),
        Values::U32(v) => Arc::new(UInt32Array::new(ScalarBuffer::from(v), nulls)),
        Values::U64(v) => Arc::new(UInt64Array::new(ScalarBuffer::from(v), nulls)),
        Values::Timestamp(v) => Arc::new(
            TimestampNanosecondArray::new(ScalarBuffer::from(v), nulls).with_timezone("UTC"),
        ),
        Values::Text { offsets, bytes } => Arc::new(StringArray::try_new(
            OffsetBuffer::new(ScalarBuffer::from(offsets)),
            Buffer::from_vec(bytes),
            nulls,
        )?),
    })
}

/// A batch of rows as an Arrow record batch of `schema` (which must be [`schema()`]).
pub fn record_batch(schema: &SchemaRef, b: Batch) -> Result<RecordBatch, ArrowError> {
    let arrays = b
        .into_columns()
        .into_iter()
        .map(array)
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), arrays)
}
