//! Captures as Arrow tables: `decode_table` and `decode_arrow` of the Python package.
//!
//! The rows are [`roce_pcap::columns`]' (the table of `roce decode --format parquet`), built
//! in Rust a batch at a time and handed over as an Arrow C stream (the Arrow PyCapsule
//! interface, `__arrow_c_stream__`): pyarrow, polars and DuckDB import it without a row
//! passing through Python objects. A batch's buffers become the Arrow arrays' buffers
//! without a copy ([`roce_pcap::arrow_table`], the conversion the Parquet writer encodes).
use std::ffi::CString;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{ArrowError, SchemaRef};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyCapsule};
use roce_pcap::columns::{Batch, Kind};
use roce_pcap::{CaptureReader, Decoder, OutputFormat};

use crate::capture::{open, Input};

use roce_pcap::arrow_table::{record_batch, schema};

/// Where a stream's rows come from.
enum Source {
    /// Decoded on this thread as they are asked for (a Python file object: reading it needs
    /// the interpreter, which the thread asking holds).
    Here {
        reader: Box<CaptureReader<Input>>,
        decoder: Box<Decoder>,
        snaplen: Option<usize>,
        done: bool,
    },
    /// Decoded ahead on every core by a thread of its own (a path or bytes), a few batches
    /// at most: `Err` is the error that ended the capture, after its rows.
    Ahead(Mutex<Receiver<Result<Batch, String>>>),
}

/// The capture's rows, a record batch at a time.
struct Rows {
    source: Source,
    schema: SchemaRef,
    rows: usize,
    /// A read error met after rows the last batch handed over: returned next.
    error: Option<String>,
}

impl Rows {
    /// The next batch of rows (empty at the end), decoding here.
    fn decode_here(&mut self) -> Batch {
        let Source::Here {
            reader,
            decoder,
            snaplen,
            done,
        } = &mut self.source
        else {
            return Batch::default();
        };
        while !*done && !decoder.columns().full(self.rows) {
            match reader.next_record() {
                Ok(Some(mut rec)) => {
                    if let Some(n) = *snaplen {
                        rec.data = &rec.data[..rec.data.len().min(n)];
                    }
                    // Nothing is written in this format.
                    let _ = decoder.record(&rec, &mut std::io::sink());
                    *done = decoder.done();
                }
                Ok(None) => *done = true,
                Err(e) => {
                    *done = true;
                    self.error = Some(e.to_string());
                }
            }
        }
        decoder.columns().take()
    }
}

impl Iterator for Rows {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            return Some(Err(ArrowError::ExternalError(e.into())));
        }
        let batch = match &self.source {
            Source::Here { .. } => self.decode_here(),
            Source::Ahead(rx) => match rx
                .lock()
                .map_err(|_| ())
                .and_then(|r| r.recv().map_err(|_| ()))
            {
                Ok(Ok(b)) => b,
                Ok(Err(e)) => return Some(Err(ArrowError::ExternalError(e.into()))),
                Err(()) => Batch::default(),
            },
        };
        if batch.rows() == 0 {
            return self
                .error
                .take()
                .map(|e| Err(ArrowError::ExternalError(e.into())));
        }
        Some(record_batch(&self.schema, batch))
    }
}

/// Decodes `reader` on every core on a thread of its own, handing batches to the receiver
/// (at most two waiting); the thread ends when the receiver is dropped.
fn decode_ahead(
    mut reader: CaptureReader<Input>,
    snaplen: Option<usize>,
    rows: usize,
    fabric: bool,
) -> Receiver<Result<Batch, String>> {
    let (tx, rx) = sync_channel(2);
    let spawned = std::thread::Builder::new()
        .name("roce-decode-table".into())
        .spawn(move || {
            let opts = roce_pcap::Options {
                fabric_columns: fabric,
                ..roce_pcap::Options::default()
            };
            let workers = roce_pcap::default_workers();
            let outcome = match snaplen {
                // A snap length cuts records one by one: sequential.
                Some(n) => {
                    let mut cut = Snap {
                        reader: &mut reader,
                        n,
                    };
                    cut.decode(opts, rows, &tx)
                }
                None => roce_pcap::source::decode_columns_parallel(
                    &mut reader,
                    opts,
                    workers,
                    rows,
                    None,
                    &mut |b| {
                        tx.send(Ok(b))
                            .map_err(|_| std::io::Error::other("stream dropped"))
                    },
                ),
            };
            if let Some(e) = outcome.error {
                if !matches!(e, roce_pcap::DecodeError::Write(_)) {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        });
    if let Err(e) = spawned {
        let (tx, rx) = sync_channel(1);
        let _ = tx.send(Err(format!("cannot start a decoding thread: {e}")));
        return rx;
    }
    rx
}

/// A capture read with every record cut to `n` bytes.
struct Snap<'r> {
    reader: &'r mut CaptureReader<Input>,
    n: usize,
}

impl Snap<'_> {
    fn decode(
        &mut self,
        opts: roce_pcap::Options,
        rows: usize,
        tx: &SyncSender<Result<Batch, String>>,
    ) -> roce_pcap::Outcome {
        let mut decoder = Decoder::new(roce_pcap::Options {
            format: OutputFormat::Columns,
            ..opts
        });
        let mut error = None;
        loop {
            match self.reader.next_record() {
                Ok(Some(mut rec)) => {
                    rec.data = &rec.data[..rec.data.len().min(self.n)];
                    let _ = decoder.record(&rec, &mut std::io::sink());
                    if decoder.columns().full(rows)
                        && tx.send(Ok(decoder.columns().take())).is_err()
                    {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(roce_pcap::DecodeError::Read(e));
                    break;
                }
            }
        }
        let last = decoder.columns().take();
        if last.rows() > 0 {
            let _ = tx.send(Ok(last));
        }
        roce_pcap::Outcome {
            stats: decoder.stats(),
            error,
        }
    }
}

impl RecordBatchReader for Rows {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// Where a re-readable capture is: read again for every stream asked of it.
enum Origin {
    Path(std::path::PathBuf),
    Bytes(Arc<[u8]>),
}

impl Origin {
    fn reader(&self) -> PyResult<CaptureReader<Input>> {
        let (input, name): (Input, String) = match self {
            Self::Path(p) => {
                let name = p.display().to_string();
                let f = std::fs::File::open(p)
                    .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{name}: {e}")))?;
                (Box::new(std::io::BufReader::new(f)), name)
            }
            Self::Bytes(b) => (Box::new(std::io::Cursor::new(b.clone())), "<bytes>".into()),
        };
        CaptureReader::new(input, &name).map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

/// A capture's rows as an Arrow stream: pass it to `pyarrow.RecordBatchReader.from_stream`,
/// `polars.DataFrame`, DuckDB, or anything that takes the Arrow PyCapsule interface. A path
/// or bytes can be read any number of times (each stream decodes the capture anew); a file
/// object once.
#[pyclass(module = "roce._roce")]
pub(crate) struct ArrowStream {
    origin: Option<Origin>,
    /// The stream of a file object, until it is taken.
    once: Option<Rows>,
    snaplen: Option<usize>,
    batch_rows: usize,
    /// MRC's and UET's columns too.
    fabric: bool,
}

#[pymethods]
impl ArrowStream {
    /// Reads the capture `source` (a path, bytes or a binary file object); with `snaplen`,
    /// every record as if captured with that snap length; `batch_rows` rows per record
    /// batch at most; with `fabric_columns`, MRC's and UET's columns too. The capture is
    /// opened (and its header checked) here; it is decoded when a stream is read.
    #[new]
    #[pyo3(signature = (source, snaplen=None, batch_rows=65536, fabric_columns=false))]
    fn new(
        source: &Bound<'_, PyAny>,
        snaplen: Option<usize>,
        batch_rows: usize,
        fabric_columns: bool,
    ) -> PyResult<Self> {
        if batch_rows == 0 || batch_rows > 1 << 24 {
            return Err(PyValueError::new_err("batch_rows must be in 1..=16777216"));
        }
        let origin = if source.hasattr("read")? {
            None
        } else if let Ok(b) = source.cast::<PyBytes>() {
            Some(Origin::Bytes(b.as_bytes().into()))
        } else if let Ok(b) = source.cast::<PyByteArray>() {
            Some(Origin::Bytes(b.to_vec().into()))
        } else if let Ok(p) = source.extract::<std::path::PathBuf>() {
            Some(Origin::Path(p))
        } else if let Ok(b) = source
            .call_method0("tobytes")
            .and_then(|m| m.extract::<Vec<u8>>())
        {
            Some(Origin::Bytes(b.into()))
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a capture is a path, bytes, or a binary file object",
            ));
        };
        let once = match &origin {
            Some(o) => {
                // Errors (no such file, not a capture) now, not when the stream is read.
                o.reader()?;
                None
            }
            None => {
                let (input, name) = open(source)?;
                let reader = CaptureReader::new(input, &name)
                    .map_err(|e| PyValueError::new_err(e.to_string()))?;
                let decoder = Decoder::new(roce_pcap::Options {
                    format: OutputFormat::Columns,
                    fabric_columns,
                    ..Default::default()
                });
                Some(Rows {
                    source: Source::Here {
                        reader: Box::new(reader),
                        decoder: Box::new(decoder),
                        snaplen,
                        done: false,
                    },
                    schema: schema(fabric_columns),
                    rows: batch_rows,
                    error: None,
                })
            }
        };
        Ok(Self {
            origin,
            once,
            snaplen,
            batch_rows,
            fabric: fabric_columns,
        })
    }

    /// The Arrow PyCapsule interface: the rows as an `ArrowArrayStream` capsule (a
    /// `requested_schema` is not honoured: the schema is always the table's).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let rows = match &self.origin {
            Some(o) => Rows {
                source: Source::Ahead(Mutex::new(decode_ahead(
                    o.reader()?,
                    self.snaplen,
                    self.batch_rows,
                    self.fabric,
                ))),
                schema: schema(self.fabric),
                rows: self.batch_rows,
                error: None,
            },
            None => self.once.take().ok_or_else(|| {
                PyRuntimeError::new_err("this stream (of a file object) was read already")
            })?,
        };
        let stream = FFI_ArrowArrayStream::new(Box::new(rows));
        let name = CString::new("arrow_array_stream").expect("no NUL");
        PyCapsule::new(py, stream, Some(name))
    }

    /// The Arrow PyCapsule interface: the table's schema as an `ArrowSchema` capsule.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let ffi = FFI_ArrowSchema::try_from(schema(self.fabric).as_ref())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let name = CString::new("arrow_schema").expect("no NUL");
        PyCapsule::new(py, ffi, Some(name))
    }
}

/// The names and types of the table's columns, in order (`(name, type)`, the types as
/// `bool`, `uint8`, `uint16`, `uint32`, `uint64`, `timestamp[ns, UTC]`, `string`, and
/// pyarrow's names of the dictionaries of strings, `dictionary<values=string, indices=int8,
/// ordered=0>`).
#[pyfunction]
#[pyo3(signature = (fabric_columns=false))]
pub(crate) fn table_schema(fabric_columns: bool) -> Vec<(&'static str, &'static str)> {
    roce_pcap::columns::fields(fabric_columns)
        .iter()
        .map(|f| {
            let t = match f.kind {
                Kind::Bool => "bool",
                Kind::U8 => "uint8",
                Kind::U16 => "uint16",
                Kind::U32 => "uint32",
                Kind::U64 => "uint64",
                Kind::I64 => "int64",
                Kind::Timestamp => "timestamp[ns, UTC]",
                Kind::Text => "string",
                Kind::Dict8 => "dictionary<values=string, indices=int8, ordered=0>",
                Kind::Dict16 => "dictionary<values=string, indices=int16, ordered=0>",
                Kind::Dict32 => "dictionary<values=string, indices=int32, ordered=0>",
            };
            (f.name, t)
        })
        .collect()
}
