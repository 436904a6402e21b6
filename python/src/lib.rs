//! # roce for Python
//!
//! The `roce._roce` extension module: the Rust half of the `roce` Python package, whose
//! Python half (`python/pysrc/roce`) turns the JSON lines made here into dicts and adds the
//! scapy conversions. See `python/README.md`.
//!
//! * `capture`: `decode` and `analyze` of captures (paths, bytes or file objects).
//! * `table`: captures as Arrow tables (`decode_table`, `decode_arrow`).
//! * `codec`: `build`, `parse` and the ICRC of single frames.
//! * `device`: the sans-IO transport (`roce_stack::Device`) as a golden model.
#![deny(unsafe_code)]

mod capture;
mod codec;
mod device;
mod pyjson;
mod table;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _roce(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<capture::DecodeBatches>()?;
    m.add_class::<table::ArrowStream>()?;
    m.add_function(wrap_pyfunction!(table::table_schema, m)?)?;
    m.add_function(wrap_pyfunction!(capture::analyze_json, m)?)?;
    m.add_function(wrap_pyfunction!(codec::build, m)?)?;
    m.add_function(wrap_pyfunction!(codec::parse_json, m)?)?;
    m.add_function(wrap_pyfunction!(codec::icrc, m)?)?;
    m.add_function(wrap_pyfunction!(codec::icrc_ok, m)?)?;
    m.add_function(wrap_pyfunction!(codec::with_icrc, m)?)?;
    m.add_function(wrap_pyfunction!(pyjson::json_loads, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    device::register(m)?;
    Ok(())
}

/// Panics, for the test that a panic anywhere in the extension reaches Python as an exception
/// (pyo3's `PanicException`) and the interpreter goes on: the build must unwind, never abort
/// (`python/tests/test_hostile.py`). Not part of the package's API.
#[pyfunction]
fn _panic_for_test() {
    panic!("a deliberate panic (roce._roce._panic_for_test)");
}
