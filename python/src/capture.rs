//! Captures from Python: `decode` (the JSON lines of `roce decode --json`, a batch at a time)
//! and `analyze` (those of `roce analyze --json`). The bytes are the CLI's own, from the same
//! code: the Python layer (`roce/__init__.py`) turns each line into a dict.
use std::io::Read;

use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList};
use roce_pcap::analyze;
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

/// The records of a capture as `roce decode --json` lines, a batch at a time.
#[pyclass(module = "roce._roce")]
pub(crate) struct DecodeBatches {
    reader: CaptureReader<Input>,
    decoder: Decoder,
    snaplen: Option<usize>,
    done: bool,
    /// A read error met after records the last batch handed over: raised next.
    error: Option<String>,
    keys: crate::pyjson::Keys,
}

#[pymethods]
impl DecodeBatches {
    /// Reads the capture `source`; with `snaplen`, every record as if captured with that
    /// snap length (headers only, as hardware captures often are).
    #[new]
    #[pyo3(signature = (source, snaplen=None))]
    fn new(source: &Bound<'_, PyAny>, snaplen: Option<usize>) -> PyResult<Self> {
        let (input, name) = open(source)?;
        let reader =
            CaptureReader::new(input, &name).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let decoder = Decoder::new(roce_pcap::Options {
            format: OutputFormat::Json,
            ..Default::default()
        });
        Ok(Self {
            reader,
            decoder,
            snaplen,
            done: false,
            error: None,
            keys: crate::pyjson::Keys::default(),
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
        if self.done {
            return Ok(None);
        }
        let mut out = Vec::new();
        let mut error = None;
        for _ in 0..BATCH {
            match self.reader.next_record() {
                Ok(Some(mut rec)) => {
                    if let Some(n) = self.snaplen {
                        rec.data = &rec.data[..rec.data.len().min(n)];
                    }
                    self.decoder
                        .record(&rec, &mut out)
                        .map_err(|e| PyOSError::new_err(e.to_string()))?;
                }
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Err(e) => {
                    self.done = true;
                    error = Some(e);
                    break;
                }
            }
        }
        self.decoder
            .flush(&mut out)
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        match error {
            Some(e) if out.is_empty() => Err(PyValueError::new_err(e.to_string())),
            Some(e) => {
                // Hand over what was read; the error comes with the next call.
                self.error = Some(e.to_string());
                crate::pyjson::lines(py, &out, &mut self.keys).map(Some)
            }
            None if out.is_empty() => Ok(None),
            None => crate::pyjson::lines(py, &out, &mut self.keys).map(Some),
        }
    }

    /// The run's counters (`packets`, `roce`, `icrc_failures`, `malformed`, ...), as the
    /// summary line of `roce decode` counts them.
    fn stats(&self) -> String {
        self.decoder.stats().line()
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
    crate::pyjson::lines(py, &out, &mut crate::pyjson::Keys::default())
}
