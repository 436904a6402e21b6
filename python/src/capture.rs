//! Captures from Python: `decode` (the dicts of `roce decode --json`'s lines, a batch at a
//! time, made from the decoder's typed columns) and `analyze` (`roce analyze --json`'s lines,
//! read into dicts by [`crate::pyjson`]). Both come from the CLI's own code.
use std::collections::hash_map::Entry;
use std::io::Read;

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyList, PyString};
use roce_pcap::analyze;
use roce_pcap::columns::{Batch, Values, FABRIC_FROM, FIELDS, JSON_TEXT};
use roce_pcap::Timestamp;
use roce_pcap::{CaptureReader, Decoder, OutputFormat};

/// Records decoded per batch handed to Python.
const BATCH: usize = 4096;
/// Bytes asked of a Python file object per `read()`.
const READ_CHUNK: usize = 1 << 20;

/// A Python file object (anything with `read(n) -> bytes`) as a [`Read`].
struct PyReader(Py<PyAny>);

impl Read for PyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Python::attach(|py| {
            let want = buf.len().min(READ_CHUNK);
            let got = self
                .0
                .bind(py)
                .call_method1("read", (want,))
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let bytes: &[u8] = if let Ok(b) = got.cast::<PyBytes>() {
                b.as_bytes()
            } else {
                return Err(std::io::Error::other(
                    "the file object's read() must return bytes (open it in binary mode)",
                ));
            };
            // A file object that returns more than asked is not trusted with the buffer.
            let n = bytes.len().min(want);
            buf[..n].copy_from_slice(&bytes[..n]);
            Ok(n)
        })
    }
}

/// What a capture is read from.
pub(crate) type Input = Box<dyn Read + Send + Sync>;

/// Opens `source`: a path (`str` or `os.PathLike`), `bytes`/`bytearray`/`memoryview`, or a
/// file object opened in binary mode. Returns the reader and a name for errors.
pub(crate) fn open(source: &Bound<'_, PyAny>) -> PyResult<(Input, String)> {
    if let Ok(b) = source.cast::<PyBytes>() {
        return Ok((
            Box::new(std::io::Cursor::new(b.as_bytes().to_vec())),
            "<bytes>".into(),
        ));
    }
    if let Ok(b) = source.cast::<PyByteArray>() {
        return Ok((Box::new(std::io::Cursor::new(b.to_vec())), "<bytes>".into()));
    }
    if source.hasattr("read")? {
        return Ok((
            Box::new(PyReader(source.clone().unbind())),
            "<file object>".into(),
        ));
    }
    if let Ok(path) = source.extract::<std::path::PathBuf>() {
        let name = path.display().to_string();
        let f =
            std::fs::File::open(&path).map_err(|e| PyOSError::new_err(format!("{name}: {e}")))?;
        return Ok((Box::new(std::io::BufReader::new(f)), name));
    }
    if let Ok(m) = source.call_method0("tobytes") {
        if let Ok(b) = m.cast::<PyBytes>() {
            return Ok((
                Box::new(std::io::Cursor::new(b.as_bytes().to_vec())),
                "<bytes>".into(),
            ));
        }
    }
    Err(PyTypeError::new_err(
        "a capture is a path, bytes, or a binary file object",
    ))
}

/// The records of a capture as the dicts of `roce decode --json`'s lines, a batch at a time.
///
/// The records are decoded into the table's typed columns ([`roce_pcap::columns`], the rows
/// of `decode_table` and `--format parquet`), and each row is made a dict from them: no JSON
/// text is written or read, except for the MAD objects and the PFC quanta, which the table
/// holds as their JSON text. A row's nulls are the keys its JSON line does not have; a
/// dotted column is a key of the nested object its prefix names.
#[pyclass(module = "roce._roce")]
pub(crate) struct DecodeBatches {
    /// Where the batches come from: decoded here as they are asked for (a file object:
    /// reading it needs the interpreter), or ahead on a thread of its own (a path or bytes),
    /// beside the making of the previous batch's dicts.
    source: BatchSource,
    /// The decoder's counts after the last batch handed over.
    stats: roce_pcap::Stats,
    done: bool,
    /// A read error met after records the last batch handed over: raised next.
    error: Option<String>,
    strings: crate::pyjson::Strings,
    /// The columns' keys as Python strings (made on the first batch).
    names: Option<Names>,
    /// Empty rows by the keys they have ([`Shape`]), copied for each row of that shape.
    templates: std::collections::HashMap<Shape, Template, foldhash::fast::RandomState>,
    /// At most this many of them ([`MAX_TEMPLATES`], or fewer when asked).
    max_templates: usize,
    /// The time stamps of the batch's records, in order, and their digits (the rows' `ts`
    /// as the JSON line writes them).
    times: Vec<Timestamp>,
    digits: Vec<u8>,
}

/// Where [`DecodeBatches`] gets its batches.
enum BatchSource {
    Here(Box<Reading>),
    /// Batches decoded ahead, a few at most; the thread ends after the last (`done`).
    Ahead(std::sync::Mutex<std::sync::mpsc::Receiver<Decoded>>),
}

/// A capture being read and decoded into columns, a batch at a time.
struct Reading {
    reader: CaptureReader<Input>,
    decoder: Decoder,
    snaplen: Option<usize>,
}

/// One batch of records decoded.
struct Decoded {
    batch: Batch,
    /// The frame number of its first record.
    first: u64,
    /// Its records' time stamps and their digits.
    times: Vec<Timestamp>,
    digits: Vec<u8>,
    /// The decoder's counts after it.
    stats: roce_pcap::Stats,
    /// The read error that ended the capture after its records.
    error: Option<String>,
    /// The capture ended with it.
    done: bool,
}

impl Reading {
    /// The next [`BATCH`] records, decoded.
    fn next_batch(&mut self) -> Decoded {
        let first = self.decoder.stats().packets + 1;
        let (mut times, mut digits) = (Vec::with_capacity(BATCH), Vec::with_capacity(BATCH));
        let (mut error, mut done) = (None, false);
        for _ in 0..BATCH {
            match self.reader.next_record() {
                Ok(Some(mut rec)) => {
                    if let Some(n) = self.snaplen {
                        rec.data = &rec.data[..rec.data.len().min(n)];
                    }
                    times.push(rec.ts);
                    digits.push(rec.ts_digits);
                    // Nothing is written in this format: it cannot fail.
                    let _ = self.decoder.record(&rec, &mut std::io::sink());
                }
                Ok(None) => {
                    done = true;
                    break;
                }
                Err(e) => {
                    (done, error) = (true, Some(e.to_string()));
                    break;
                }
            }
        }
        Decoded {
            batch: self.decoder.columns().take(),
            first,
            times,
            digits,
            stats: self.decoder.stats(),
            error,
            done,
        }
    }
}

/// Decodes `reading` on a thread of its own, two batches ahead at most; the thread ends
/// after the capture's last batch, or once the batches are no longer wanted.
fn decode_ahead(mut reading: Reading) -> PyResult<BatchSource> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Decoded>(2);
    std::thread::Builder::new()
        .name("roce-decode".into())
        .spawn(move || loop {
            let d = reading.next_batch();
            let done = d.done;
            if tx.send(d).is_err() || done {
                return;
            }
        })
        .map_err(|e| PyOSError::new_err(format!("cannot start a decoding thread: {e}")))?;
    Ok(BatchSource::Ahead(std::sync::Mutex::new(rx)))
}

/// Which columns a row sets, one bit each: the keys of its dict.
type Shape = [u64; FIELDS.len().div_ceil(64)];

/// Row shapes whose empty dicts are kept: a capture of ever new combinations of headers gets
/// its rows made key by key past this many (each kept shape is two or three small dicts).
const MAX_TEMPLATES: usize = 512;

/// The dicts of one row shape with every key in place (in the order the JSON line has them)
/// and every value `None`: a row of that shape is a copy with its values set, which costs
/// CPython less than a dict grown key by key (each growth rebuilds the dict's index).
struct Template {
    row: Py<PyDict>,
    /// The nested objects (by parent, an index of [`Names::parents`]), in order.
    children: Vec<(usize, Py<PyDict>)>,
    /// Per column: the value its key holds in these dicts, as the column has it. The first
    /// row of the shape puts its values in; a later row whose value is the same keeps the
    /// copy's object and sets nothing (most of a row repeats the row before it: version,
    /// ECN, most of the BTH, addresses), the others set their own.
    held: Vec<Held>,
}

/// A column's value held in a [`Template`]: only those made into an immutable Python object
/// that the same raw value always makes equal (numbers, flags, plain text; not a time stamp,
/// not JSON text, which becomes dicts and lists).
#[derive(Debug, PartialEq)]
enum Held {
    Nothing,
    Num(u64),
    Text(Box<[u8]>),
}

/// A row's raw value of a column that a [`Template`] can hold.
#[derive(Clone, Copy)]
enum Raw<'a> {
    Num(u64),
    Text(&'a [u8]),
}

impl Held {
    fn is(&self, raw: Raw<'_>) -> bool {
        match (self, raw) {
            (Self::Num(a), Raw::Num(b)) => *a == b,
            (Self::Text(a), Raw::Text(b)) => **a == *b,
            _ => false,
        }
    }
}

impl Template {
    /// The empty dicts of rows that set the columns of `shape`, keys inserted as
    /// [`DecodeBatches::dicts`] inserts them.
    fn new(py: Python<'_>, names: &Names, shape: &Shape) -> PyResult<Self> {
        let row = PyDict::new(py);
        let mut children = vec![None; names.parents.len()];
        let none = py.None().into_bound(py);
        for c in columns_of(shape) {
            put(py, names, &row, &mut children, c, none.clone())?;
        }
        Ok(Self {
            row: row.unbind(),
            children: children
                .into_iter()
                .enumerate()
                .filter_map(|(p, d)| Some((p, d?.unbind())))
                .collect(),
            held: (0..FIELDS.len()).map(|_| Held::Nothing).collect(),
        })
    }

    /// Puts `v`, the value `raw` of column `c`, in its key of these dicts if they hold
    /// nothing for it yet.
    fn hold(
        &mut self,
        py: Python<'_>,
        names: &Names,
        c: usize,
        raw: Raw<'_>,
        v: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if self.held[c] != Held::Nothing {
            return Ok(());
        }
        let (key, parent) = &names.cols[c];
        let dict = match parent {
            None => Some(&self.row),
            Some(p) => self.children.iter().find(|(q, _)| q == p).map(|(_, d)| d),
        };
        if let Some(d) = dict {
            d.bind(py).set_item(key.bind(py), v)?;
            self.held[c] = match raw {
                Raw::Num(n) => Held::Num(n),
                Raw::Text(t) => Held::Text(t.into()),
            };
        }
        Ok(())
    }
}

/// The columns `shape` sets, in order.
fn columns_of(shape: &Shape) -> impl Iterator<Item = usize> + '_ {
    shape.iter().enumerate().flat_map(|(w, &bits)| {
        std::iter::successors((bits != 0).then_some(bits), |b| {
            let rest = b & (b - 1);
            (rest != 0).then_some(rest)
        })
        .map(move |b| w * 64 + b.trailing_zeros() as usize)
    })
}

/// Sets column `c`'s key to `v` in `row`, or in the nested object its parent key names
/// (`children`, by parent: made and put in `row` on first use).
fn put<'py>(
    py: Python<'py>,
    names: &Names,
    row: &Bound<'py, PyDict>,
    children: &mut [Option<Bound<'py, PyDict>>],
    c: usize,
    v: Bound<'py, PyAny>,
) -> PyResult<()> {
    let (key, parent) = &names.cols[c];
    let Some(p) = *parent else {
        return row.set_item(key.bind(py), v);
    };
    let child = match &children[p] {
        Some(d) => d,
        None => {
            let d = PyDict::new(py);
            row.set_item(names.parents[p].bind(py), &d)?;
            children[p].insert(d)
        }
    };
    child.set_item(key.bind(py), v)
}

/// Each column's key, and the key of the object it is in (`bth` for `bth.psn`).
struct Names {
    cols: Vec<(Py<PyString>, Option<usize>)>,
    parents: Vec<Py<PyString>>,
    /// Columns whose text is a JSON value (the MAD objects, the PFC quanta).
    json: Vec<bool>,
}

impl Names {
    fn new(py: Python<'_>) -> Self {
        let mut parents: Vec<&str> = Vec::new();
        let mut cols = Vec::with_capacity(FIELDS.len());
        for (c, f) in FIELDS.iter().enumerate() {
            // MRC's and UET's keys are flat, as in their JSON lines.
            let nested = f.name.split_once('.').filter(|_| c < FABRIC_FROM);
            let (parent, key) = match nested {
                Some((p, k)) => {
                    let i = parents.iter().position(|&x| x == p).unwrap_or_else(|| {
                        parents.push(p);
                        parents.len() - 1
                    });
                    (Some(i), k)
                }
                None => (None, f.name),
            };
            cols.push((PyString::intern(py, key).unbind(), parent));
        }
        Self {
            cols,
            parents: parents
                .iter()
                .map(|p| PyString::intern(py, p).unbind())
                .collect(),
            json: FIELDS.iter().map(|f| JSON_TEXT.contains(&f.name)).collect(),
        }
    }
}

/// `ts` as the JSON line writes it ([`roce_pcap::format::time`], into `text`) and
/// `json.loads` reads it: a float.
fn ts_float(t: Timestamp, digits: u8, text: &mut Vec<u8>) -> f64 {
    text.clear();
    roce_pcap::format::time(text, t, digits);
    // ASCII digits; Rust's parse is correctly rounded, as Python's float() is.
    std::str::from_utf8(text)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(f64::NAN)
}

impl DecodeBatches {
    /// The rows of `batch` as dicts; `first` is the frame number of the batch's first
    /// record.
    fn dicts<'py>(
        &mut self,
        py: Python<'py>,
        batch: Batch,
        first: u64,
    ) -> PyResult<Bound<'py, PyList>> {
        let names = self.names.get_or_insert_with(|| Names::new(py));
        let cols = batch.columns();
        let out = PyList::empty(py);
        let mut ts_text = Vec::with_capacity(32);
        let frames = match cols.first().map(|c| &c.values) {
            Some(Values::U64(f)) => f.as_slice(),
            _ => &[],
        };
        let mut children: Vec<Option<Bound<'py, PyDict>>> = vec![None; names.parents.len()];
        // Every row's shape, a column at a time (the validity of a column is contiguous;
        // read a row at a time it would be a cache line per column per row).
        let mut shapes: Vec<Shape> = vec![Shape::default(); batch.rows()];
        for (c, col) in cols.iter().enumerate() {
            let (word, bit) = (c / 64, 1u64 << (c % 64));
            for i in col.valid.iter_ones() {
                if let Some(shape) = shapes.get_mut(i) {
                    shape[word] |= bit;
                }
            }
        }
        for (i, &shape) in shapes.iter().enumerate() {
            let mut template = if self.templates.len() < self.max_templates {
                Some(match self.templates.entry(shape) {
                    Entry::Occupied(t) => t.into_mut(),
                    Entry::Vacant(t) => t.insert(Template::new(py, names, &shape)?),
                })
            } else {
                self.templates.get_mut(&shape)
            };
            // The row's dicts: copies of its shape's, else made key by key.
            children.iter_mut().for_each(|c| *c = None);
            let row = match &template {
                Some(t) => {
                    let row = t.row.bind(py).copy()?;
                    for (p, d) in &t.children {
                        let d = d.bind(py).copy()?;
                        row.set_item(names.parents[*p].bind(py), &d)?;
                        children[*p] = Some(d);
                    }
                    row
                }
                None => PyDict::new(py),
            };
            for c in columns_of(&shape) {
                let Some(col) = cols.get(c) else { continue };
                let raw = match col.values.num(i) {
                    Some(n) => Some(Raw::Num(n)),
                    None if names.json[c] => None,
                    None => col.values.text(i).map(Raw::Text),
                };
                if let (Some(t), Some(r)) = (&template, raw) {
                    if t.held[c].is(r) {
                        // The copy holds it already.
                        continue;
                    }
                }
                let v: Bound<'py, PyAny> = match &col.values {
                    Values::Bool(x) => PyBool::new(py, x.get(i).unwrap_or_default())
                        .to_owned()
                        .into_any(),
                    Values::U8(x) => x[i].into_pyobject(py)?.into_any(),
                    Values::U16(x) => x[i].into_pyobject(py)?.into_any(),
                    Values::U32(x) => x[i].into_pyobject(py)?.into_any(),
                    Values::U64(x) => x[i].into_pyobject(py)?.into_any(),
                    Values::I64(x) => x[i].into_pyobject(py)?.into_any(),
                    Values::Timestamp(x) => {
                        // The record's own time stamp, as recorded (the column is
                        // nanoseconds, saturated for times beyond 2262).
                        let k = frames
                            .get(i)
                            .and_then(|f| f.checked_sub(first))
                            .and_then(|k| usize::try_from(k).ok());
                        let t = k.and_then(|k| Some((*self.times.get(k)?, *self.digits.get(k)?)));
                        let (t, digits) = t.unwrap_or((
                            Timestamp {
                                secs: x[i].div_euclid(1_000_000_000),
                                nanos: x[i].rem_euclid(1_000_000_000) as u32,
                            },
                            9,
                        ));
                        ts_float(t, digits, &mut ts_text)
                            .into_pyobject(py)?
                            .into_any()
                    }
                    Values::Text { .. } | Values::Dict { .. } => {
                        let text = col.values.text(i).unwrap_or_default();
                        if names.json[c] {
                            crate::pyjson::value(py, text, &mut self.strings)?
                        } else {
                            self.strings.value(py, text)?.into_any()
                        }
                    }
                };
                if let (Some(t), Some(r)) = (&mut template, raw) {
                    t.hold(py, names, c, r, &v)?;
                }
                put(py, names, &row, &mut children, c, v)?;
            }
            out.append(row)?;
        }
        Ok(out)
    }
}

#[pymethods]
impl DecodeBatches {
    /// Reads the capture `source`; with `snaplen`, every record as if captured with that
    /// snap length (headers only, as hardware captures often are). `templates`: the row
    /// shapes whose empty dicts are kept (past them, rows are made key by key; 0 for the
    /// tests of that path).
    #[new]
    #[pyo3(signature = (source, snaplen=None, templates=MAX_TEMPLATES))]
    fn new(source: &Bound<'_, PyAny>, snaplen: Option<usize>, templates: usize) -> PyResult<Self> {
        let (input, name) = open(source)?;
        let reader =
            CaptureReader::new(input, &name).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let decoder = Decoder::new(roce_pcap::Options {
            // The dicts hold every key of the JSON lines, MRC's and UET's too.
            fabric_columns: true,
            format: OutputFormat::Columns,
            ..Default::default()
        });
        let reading = Reading {
            reader,
            decoder,
            snaplen,
        };
        let source = if source.hasattr("read")? {
            BatchSource::Here(Box::new(reading))
        } else {
            decode_ahead(reading)?
        };
        Ok(Self {
            source,
            stats: roce_pcap::Stats::default(),
            done: false,
            error: None,
            strings: crate::pyjson::Strings::default(),
            templates: Default::default(),
            max_templates: templates.min(MAX_TEMPLATES),
            names: None,
            times: Vec::new(),
            digits: Vec::new(),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next batch: a list of dicts, one per record (each what `roce decode --json` prints
    /// for it); `StopIteration` at the end; a read error raises `ValueError` (after the
    /// records before it were returned).
    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        if let Some(e) = self.error.take() {
            return Err(PyValueError::new_err(e));
        }
        // Batches of records none of which is a row (not RoCE) are read past.
        loop {
            if self.done {
                return Ok(None);
            }
            let d = match &mut self.source {
                BatchSource::Here(reading) => reading.next_batch(),
                BatchSource::Ahead(rx) => {
                    let rx = &*rx;
                    // The interpreter is let go while the decoding thread finishes the batch.
                    let got = py.detach(|| rx.lock().ok().and_then(|r| r.recv().ok()));
                    match got {
                        Some(d) => d,
                        None => {
                            self.done = true;
                            return Err(PyOSError::new_err("the decoding thread stopped"));
                        }
                    }
                }
            };
            self.stats = d.stats;
            self.done = d.done;
            self.times = d.times;
            self.digits = d.digits;
            let (batch, first) = (d.batch, d.first);
            return match d.error {
                Some(e) if batch.rows() == 0 => Err(PyValueError::new_err(e)),
                Some(e) => {
                    // Hand over what was read; the error comes with the next call.
                    self.error = Some(e);
                    crate::pyjson::without_gc(py, || self.dicts(py, batch, first)).map(Some)
                }
                None if batch.rows() == 0 => continue,
                None => crate::pyjson::without_gc(py, || self.dicts(py, batch, first)).map(Some),
            };
        }
    }

    /// The decoder's counts so far (the CLI's summary line).
    fn stats(&self) -> String {
        self.stats.line()
    }
}

/// Analysis options from keyword arguments (the CLI's flags, in seconds, bits per second and
/// nanoseconds as noted).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnalyzeOptions {
    pub(crate) opts: analyze::Options,
    pub(crate) events: bool,
    pub(crate) match_window_ns: u64,
}

/// `roce analyze --json` on `sources` (the first analyzed, every pair of them matched when
/// there are several): its lines, as dicts.
#[pyfunction]
#[pyo3(signature = (sources, *, events=false, qp=None, start=None, end=None, stall=0.1, cnp_interval=50e-6, link_speed=100e9, pfc_storm=0.1, match_window=0.01))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn analyze_json<'py>(
    py: Python<'py>,
    sources: Vec<Bound<'py, PyAny>>,
    events: bool,
    qp: Option<u32>,
    start: Option<f64>,
    end: Option<f64>,
    stall: f64,
    cnp_interval: f64,
    link_speed: f64,
    pfc_storm: f64,
    match_window: f64,
) -> PyResult<Bound<'py, PyList>> {
    let secs = |name: &str, v: f64| -> PyResult<u64> {
        if !v.is_finite() || v < 0.0 {
            return Err(PyValueError::new_err(format!(
                "{name} takes a number of seconds >= 0"
            )));
        }
        Ok((v * 1e9).min(u64::MAX as f64) as u64)
    };
    for (name, v) in [("start", start), ("end", end)] {
        if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
            return Err(PyValueError::new_err(format!(
                "{name} takes a number of seconds >= 0"
            )));
        }
    }
    if let (Some(s), Some(e)) = (start, end) {
        if e <= s {
            return Err(PyValueError::new_err(format!(
                "end ({e}) must be after start ({s})"
            )));
        }
    }
    if !link_speed.is_finite() || link_speed < 1.0 {
        return Err(PyValueError::new_err("link_speed must be above 0 (b/s)"));
    }
    let o = AnalyzeOptions {
        opts: analyze::Options {
            qp,
            from: start,
            to: end,
            stall_ns: secs("stall", stall)?,
            cnp_interval_ns: secs("cnp_interval", cnp_interval)?,
            link_bps: link_speed as u64,
            storm_ns: secs("pfc_storm", pfc_storm)?,
            ..analyze::Options::default()
        },
        events,
        match_window_ns: secs("match_window", match_window)?,
    };
    let Some(first) = sources.first() else {
        return Err(PyValueError::new_err("give at least one capture"));
    };
    let paths: Vec<String> = if sources.len() > 1 {
        sources
            .iter()
            .map(|s| {
                s.extract::<std::path::PathBuf>()
                    .map(|p| p.display().to_string())
                    .map_err(|_| {
                        PyTypeError::new_err(
                            "several captures are each read twice: give paths, not bytes or file objects",
                        )
                    })
            })
            .collect::<PyResult<_>>()?
    } else {
        Vec::new()
    };
    let (input, name) = open(first)?;
    let mut reader =
        CaptureReader::new(input, &name).map_err(|e| PyValueError::new_err(e.to_string()))?;
    // The analysis runs without the interpreter lock (a file object's reads take it back).
    let (analysis, localised) = py.detach(|| {
        std::thread::scope(|scope| {
            let matching = (paths.len() > 1).then(|| {
                let p: Vec<&str> = paths.iter().map(String::as_str).collect();
                let lo = analyze::LocaliseOptions {
                    window_ns: o.match_window_ns,
                };
                scope.spawn(move || analyze::localise(&p, lo))
            });
            let a = analyze::analyze(&mut reader, o.opts);
            let l = matching.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            (a, l)
        })
    });
    let mut analysis = analysis;
    if let Some(l) = localised {
        analysis.localised = l.map_err(|e| PyValueError::new_err(e.to_string()))?;
        analysis.captures = paths;
    }
    if let Some(e) = &analysis.error {
        return Err(PyValueError::new_err(e.to_string()));
    }
    let mut out = Vec::new();
    analyze::write_json_lines(&analysis, o.events, &mut out)
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    crate::pyjson::lines(py, &out, &mut crate::pyjson::Strings::default())
}
