//! JSON text into Python objects, built directly (dicts, lists, str, int, float, bool,
//! None): what `json.loads` gives for the same text, at a fraction of its cost, because the
//! keys (the same few dozen on every line) are made once and reused.
use std::collections::HashMap;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};

/// Keys seen so far, as Python strings (bounded: a key past the limit is made each time).
#[derive(Default)]
pub(crate) struct Keys(HashMap<String, Py<PyString>, foldhash::fast::RandomState>);

/// Distinct keys kept at most.
const KEYS_MAX: usize = 4096;

impl Keys {
    fn get<'py>(&mut self, py: Python<'py>, k: &str) -> Bound<'py, PyString> {
        if let Some(s) = self.0.get(k) {
            return s.bind(py).clone();
        }
        let s = PyString::intern(py, k);
        if self.0.len() < KEYS_MAX {
            self.0.insert(k.to_owned(), s.clone().unbind());
        }
        s
    }
}

/// One JSON value, built as a Python object.
struct Value<'k, 'py> {
    py: Python<'py>,
    keys: &'k mut Keys,
}

impl<'de, 'py> DeserializeSeed<'de> for Value<'_, 'py> {
    type Value = Bound<'py, PyAny>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'py> Visitor<'de> for Value<'_, 'py> {
    type Value = Bound<'py, PyAny>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(pyo3::types::PyBool::new(self.py, v).to_owned().into_any())
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        v.into_pyobject(self.py)
            .map(Bound::into_any)
            .map_err(E::custom)
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        v.into_pyobject(self.py)
            .map(Bound::into_any)
            .map_err(E::custom)
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        v.into_pyobject(self.py)
            .map(Bound::into_any)
            .map_err(E::custom)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(PyString::new(self.py, v).into_any())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(self.py.None().into_bound(self.py))
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.visit_unit()
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let list = PyList::empty(self.py);
        while let Some(v) = seq.next_element_seed(Value {
            py: self.py,
            keys: &mut *self.keys,
        })? {
            list.append(v).map_err(A::Error::custom)?;
        }
        Ok(list.into_any())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let dict = PyDict::new(self.py);
        while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            let key = self.keys.get(self.py, &k);
            let v = map.next_value_seed(Value {
                py: self.py,
                keys: &mut *self.keys,
            })?;
            dict.set_item(key, v).map_err(A::Error::custom)?;
        }
        Ok(dict.into_any())
    }
}

/// One JSON value, as a Python object.
pub(crate) fn value<'py>(
    py: Python<'py>,
    text: &[u8],
    keys: &mut Keys,
) -> PyResult<Bound<'py, PyAny>> {
    let mut de = serde_json::Deserializer::from_slice(text);
    Value { py, keys }
        .deserialize(&mut de)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("JSON: {e}")))
}

/// The JSON lines of `text` (one value per line), as a list of Python objects.
///
/// The cyclic garbage collector is paused while they are built: they hold no cycles, and
/// thousands of new dicts would otherwise start a collection every few hundred (an eighth
/// of the time).
pub(crate) fn lines<'py>(
    py: Python<'py>,
    text: &[u8],
    keys: &mut Keys,
) -> PyResult<Bound<'py, PyList>> {
    let gc = py.import("gc")?;
    let was_enabled = gc.call_method0("isenabled")?.is_truthy()?;
    if was_enabled {
        gc.call_method0("disable")?;
    }
    let built = build_lines(py, text, keys);
    if was_enabled {
        gc.call_method0("enable")?;
    }
    built
}

fn build_lines<'py>(py: Python<'py>, text: &[u8], keys: &mut Keys) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        out.append(value(py, line, keys)?)?;
    }
    Ok(out)
}
