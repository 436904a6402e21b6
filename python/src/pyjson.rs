//! JSON text into Python objects, built directly (dicts, lists, str, int, float, bool,
//! None): what `json.loads` gives for the same text, at a fraction of its cost.
//!
//! The text is what roce itself writes (`roce decode --json`, `roce analyze --json`, the
//! stack's counters), parsed here by a small parser of the whole JSON grammar instead of
//! through serde: the keys (the same few dozen on every line) and the short string values
//! that repeat (names, addresses) come from caches of Python strings, checked byte for
//! byte, so most of them are neither decoded nor allocated again.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

/// Python strings made so far, in two caches: keys, and short string values.
pub(crate) struct Strings {
    keys: Cache,
    values: Cache,
}

impl Default for Strings {
    fn default() -> Self {
        Self {
            keys: Cache::new(KEY_SLOTS),
            values: Cache::new(VALUE_SLOTS),
        }
    }
}

/// Slots of the key cache and of the value cache (a power of two each).
const KEY_SLOTS: usize = 1024;
const VALUE_SLOTS: usize = 4096;
/// String values longer than this are made each time (long values rarely repeat), as are
/// values of hex digits alone.
const VALUE_CACHED_MAX: usize = 48;
/// Arrays and objects nested deeper than this are refused (the stack stays bounded).
const MAX_DEPTH: u32 = 128;

impl Strings {
    /// A string value (not a key) as a Python string: from the value cache when it is short
    /// and not hex digits alone, as the reader takes values.
    pub(crate) fn value<'py>(
        &mut self,
        py: Python<'py>,
        bytes: &[u8],
    ) -> PyResult<Bound<'py, PyString>> {
        if bytes.len() <= VALUE_CACHED_MAX && !bytes.iter().all(u8::is_ascii_hexdigit) {
            self.values.get(py, bytes, false)
        } else {
            Ok(PyString::new(py, utf8(bytes)?))
        }
    }
}

/// A direct-mapped cache of Python strings by their UTF-8 bytes: bounded (one string per
/// slot, a new one replaces the old), and a hit compares the bytes, so it never returns
/// another string's object.
struct Cache {
    slots: Vec<Option<Entry>>,
}

/// A cached string: its UTF-8 bytes and its Python object.
type Entry = (Box<[u8]>, Py<PyString>);

impl Cache {
    fn new(n: usize) -> Self {
        Self {
            slots: (0..n).map(|_| None).collect(),
        }
    }

    /// The Python string of `bytes` (`intern`: made with `PyString::intern`).
    fn get<'py>(
        &mut self,
        py: Python<'py>,
        bytes: &[u8],
        intern: bool,
    ) -> PyResult<Bound<'py, PyString>> {
        let i = slot(bytes, self.slots.len());
        if let Some((k, v)) = &self.slots[i] {
            if **k == *bytes {
                return Ok(v.bind(py).clone());
            }
        }
        let s = utf8(bytes)?;
        let v = if intern {
            PyString::intern(py, s)
        } else {
            PyString::new(py, s)
        };
        self.slots[i] = Some((bytes.into(), v.clone().unbind()));
        Ok(v)
    }
}

/// The slot of `b` in a cache of `n` slots (a power of two): a multiplicative hash of its
/// length and its first and last eight bytes (keys and names differ there).
fn slot(b: &[u8], n: usize) -> usize {
    let (head, tail) = match b.len() {
        8.. => {
            let (mut h, mut t) = ([0u8; 8], [0u8; 8]);
            h.copy_from_slice(&b[..8]);
            t.copy_from_slice(&b[b.len() - 8..]);
            (u64::from_le_bytes(h), u64::from_le_bytes(t))
        }
        _ => (
            b.iter()
                .enumerate()
                .fold(0u64, |w, (i, &c)| w | u64::from(c) << (8 * i)),
            0,
        ),
    };
    let h = (head ^ tail.rotate_left(29) ^ (b.len() as u64)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 40) as usize & (n - 1)
}

fn utf8(b: &[u8]) -> PyResult<&str> {
    std::str::from_utf8(b).map_err(|e| PyValueError::new_err(format!("JSON: not UTF-8: {e}")))
}

fn err(at: usize, what: &str) -> PyErr {
    PyValueError::new_err(format!("JSON: {what} at byte {at}"))
}

/// A parser over one JSON text.
struct Parser<'t, 'k, 'py> {
    py: Python<'py>,
    text: &'t [u8],
    at: usize,
    strings: &'k mut Strings,
    /// Unescaped string bytes (reused).
    scratch: Vec<u8>,
}

impl<'py> Parser<'_, '_, 'py> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.text.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> PyResult<()> {
        self.ws();
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(err(self.at, &format!("expected `{}`", c as char)))
        }
    }

    fn value(&mut self, depth: u32) -> PyResult<Bound<'py, PyAny>> {
        self.ws();
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string(false).map(Bound::into_any),
            Some(b't') => self.literal(b"true", true.into_pyobject(self.py)?.to_owned().into_any()),
            Some(b'f') => self.literal(
                b"false",
                false.into_pyobject(self.py)?.to_owned().into_any(),
            ),
            Some(b'n') => self.literal(b"null", self.py.None().into_bound(self.py)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(err(self.at, "unexpected byte")),
            None => Err(err(self.at, "unexpected end")),
        }
    }

    fn literal(&mut self, word: &[u8], v: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(v)
        } else {
            Err(err(self.at, "bad literal"))
        }
    }

    fn object(&mut self, depth: u32) -> PyResult<Bound<'py, PyAny>> {
        let dict = PyDict::new(self.py);
        self.items(depth, b'}', |p| {
            p.ws();
            if p.peek() != Some(b'"') {
                return Err(err(p.at, "expected a key"));
            }
            let k = p.string(true)?;
            p.eat(b':')?;
            let v = p.value(depth)?;
            dict.set_item(k, v)
        })?;
        Ok(dict.into_any())
    }

    fn array(&mut self, depth: u32) -> PyResult<Bound<'py, PyAny>> {
        let list = PyList::empty(self.py);
        self.items(depth, b']', |p| list.append(p.value(depth)?))?;
        Ok(list.into_any())
    }

    /// The items of the object or array opening at `at`, up to `close`, each read by `item`,
    /// separated by commas; refused deeper than [`MAX_DEPTH`].
    fn items(
        &mut self,
        depth: u32,
        close: u8,
        mut item: impl FnMut(&mut Self) -> PyResult<()>,
    ) -> PyResult<()> {
        if depth > MAX_DEPTH {
            return Err(err(self.at, "nested too deep"));
        }
        self.at += 1;
        self.ws();
        if self.peek() == Some(close) {
            self.at += 1;
            return Ok(());
        }
        loop {
            item(self)?;
            self.ws();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(c) if c == close => {
                    self.at += 1;
                    return Ok(());
                }
                _ => {
                    let what = format!("expected `,` or `{}`", close as char);
                    return Err(err(self.at, &what));
                }
            }
        }
    }

    /// A string at `"`: a key (`key`: from the key cache, interned) or a value (short ones
    /// from the value cache).
    fn string(&mut self, key: bool) -> PyResult<Bound<'py, PyString>> {
        let start = self.at + 1;
        let rest = &self.text[start..];
        let Some(end) = rest
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        else {
            return Err(err(self.at, "unterminated string"));
        };
        if rest[end] == b'"' {
            // No escape: the bytes as they are.
            self.at = start + end + 1;
            let bytes = &rest[..end];
            // Hex digits alone are ICRCs, transaction IDs, keys: they do not repeat, and
            // would only push the names and addresses out of the value cache.
            return if key {
                self.strings.keys.get(self.py, bytes, true)
            } else {
                self.strings.value(self.py, bytes)
            };
        }
        let mut s = std::mem::take(&mut self.scratch);
        s.clear();
        let r = self.unescape(start, &mut s);
        let out = r.and_then(|()| {
            if key {
                self.strings.keys.get(self.py, &s, true)
            } else {
                Ok(PyString::new(self.py, utf8(&s)?))
            }
        });
        self.scratch = s;
        out
    }

    /// The string from `start` (after its `"`) with its escapes undone into `s`; leaves
    /// `at` after the closing `"`.
    fn unescape(&mut self, start: usize, s: &mut Vec<u8>) -> PyResult<()> {
        let mut i = start;
        loop {
            let Some(&c) = self.text.get(i) else {
                return Err(err(i, "unterminated string"));
            };
            match c {
                b'"' => {
                    self.at = i + 1;
                    return Ok(());
                }
                b'\\' => {
                    let Some(&e) = self.text.get(i + 1) else {
                        return Err(err(i, "unterminated escape"));
                    };
                    i += 2;
                    match e {
                        b'"' => s.push(b'"'),
                        b'\\' => s.push(b'\\'),
                        b'/' => s.push(b'/'),
                        b'b' => s.push(8),
                        b'f' => s.push(12),
                        b'n' => s.push(b'\n'),
                        b'r' => s.push(b'\r'),
                        b't' => s.push(b'\t'),
                        b'u' => {
                            let mut cp = self.hex4(i)?;
                            i += 4;
                            if (0xd800..0xdc00).contains(&cp) {
                                // A surrogate pair: the low half must follow.
                                if self.text.get(i..i + 2) != Some(b"\\u") {
                                    return Err(err(i, "lone surrogate"));
                                }
                                let lo = self.hex4(i + 2)?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(err(i, "lone surrogate"));
                                }
                                i += 6;
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                            }
                            let ch = char::from_u32(cp).ok_or_else(|| err(i, "lone surrogate"))?;
                            let mut buf = [0u8; 4];
                            s.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(err(i - 1, "bad escape")),
                    }
                }
                c if c < 0x20 => return Err(err(i, "control character in a string")),
                c => {
                    s.push(c);
                    i += 1;
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> PyResult<u32> {
        let h = self
            .text
            .get(at..at + 4)
            .ok_or_else(|| err(at, "short \\u escape"))?;
        let s = std::str::from_utf8(h).map_err(|_| err(at, "bad \\u escape"))?;
        u32::from_str_radix(s, 16).map_err(|_| err(at, "bad \\u escape"))
    }

    fn number(&mut self) -> PyResult<Bound<'py, PyAny>> {
        let start = self.at;
        let mut i = start;
        if self.text.get(i) == Some(&b'-') {
            i += 1;
        }
        let digits = i;
        while self.text.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == digits {
            return Err(err(start, "bad number"));
        }
        let mut float = false;
        if self.text.get(i) == Some(&b'.') {
            float = true;
            i += 1;
            let frac = i;
            while self.text.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == frac {
                return Err(err(start, "bad number"));
            }
        }
        if let Some(b'e' | b'E') = self.text.get(i) {
            float = true;
            i += 1;
            if let Some(b'+' | b'-') = self.text.get(i) {
                i += 1;
            }
            let exp = i;
            while self.text.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == exp {
                return Err(err(start, "bad number"));
            }
        }
        self.at = i;
        // ASCII digits, signs, `.` and `e` only: UTF-8.
        let s = utf8(&self.text[start..i])?;
        if float {
            // Rust's parse is correctly rounded, as Python's float() is.
            let v: f64 = s.parse().map_err(|_| err(start, "bad number"))?;
            return Ok(v.into_pyobject(self.py)?.into_any());
        }
        if let Ok(v) = s.parse::<u64>() {
            return Ok(v.into_pyobject(self.py)?.into_any());
        }
        if let Ok(v) = s.parse::<i64>() {
            return Ok(v.into_pyobject(self.py)?.into_any());
        }
        // Beyond 64 bits: Python's own int.
        self.py.get_type::<pyo3::types::PyInt>().call1((s,))
    }
}

/// `_roce._json_loads(text)`: [`value`] for the test suite, which checks it against
/// `json.loads` on every corner of the grammar.
#[pyfunction]
#[pyo3(name = "_json_loads")]
pub(crate) fn json_loads<'py>(py: Python<'py>, text: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    value(py, text, &mut Strings::default())
}

/// One JSON value, as a Python object.
pub(crate) fn value<'py>(
    py: Python<'py>,
    text: &[u8],
    strings: &mut Strings,
) -> PyResult<Bound<'py, PyAny>> {
    let mut p = Parser {
        py,
        text,
        at: 0,
        strings,
        scratch: Vec::new(),
    };
    let v = p.value(0)?;
    p.ws();
    if p.at != text.len() {
        return Err(err(p.at, "trailing characters"));
    }
    Ok(v)
}

/// The JSON lines of `text` (one value per line), as a list of Python objects, made with the
/// cyclic garbage collector paused ([`without_gc`]).
pub(crate) fn lines<'py>(
    py: Python<'py>,
    text: &[u8],
    strings: &mut Strings,
) -> PyResult<Bound<'py, PyList>> {
    without_gc(py, || build_lines(py, text, strings))
}

/// `build()` with Python's cyclic garbage collector paused: what it makes holds no cycles,
/// and thousands of new dicts would otherwise start a collection every few hundred (an
/// eighth of the time). The collector is enabled again after, if it was.
pub(crate) fn without_gc<'py, T>(
    py: Python<'py>,
    build: impl FnOnce() -> PyResult<T>,
) -> PyResult<T> {
    let gc = py.import("gc")?;
    let was_enabled = gc.call_method0("isenabled")?.is_truthy()?;
    if was_enabled {
        gc.call_method0("disable")?;
    }
    let built = build();
    if was_enabled {
        gc.call_method0("enable")?;
    }
    built
}

fn build_lines<'py>(
    py: Python<'py>,
    text: &[u8],
    strings: &mut Strings,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        out.append(value(py, line, strings)?)?;
    }
    Ok(out)
}
