//! The exceptions `roce.Device` raises, and how a Rust error becomes one: its variant name
//! is the exception's `kind` and the start of its message.
use std::fmt::{Debug, Display};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::PyTypeInfo;

pyo3::create_exception!(
    _roce,
    DeviceError,
    PyException,
    "An error of the sans-IO transport (`roce.Device`). Its `kind` attribute is the Rust \
     error's variant name (`WrongState`, `NoSuchQp`, ..., or `UnknownHandle` for a handle this \
     device did not give); the message starts with it."
);
pyo3::create_exception!(
    _roce,
    PostError,
    DeviceError,
    "A post was refused (roce_stack::PostError: caller misuse; nothing was queued)."
);
pyo3::create_exception!(
    _roce,
    ModifyError,
    DeviceError,
    "A QP state transition was refused (roce_stack::ModifyError; nothing changed)."
);
pyo3::create_exception!(
    _roce,
    CreateError,
    DeviceError,
    "A QP or SRQ could not be created (roce_stack::CreateError)."
);
pyo3::create_exception!(
    _roce,
    MwError,
    DeviceError,
    "A memory window could not be bound or invalidated (roce_stack::MwError)."
);

/// The variant name of an error from its `Debug` text (`WrongState(Reset)` → `WrongState`).
pub(super) fn kind_of(e: &impl Debug) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// A Python exception of type `T` for a Rust error: `"<Kind>: <Display>"`, with `kind` set.
pub(super) fn raise<T: PyTypeInfo>(e: &(impl Debug + Display)) -> PyErr {
    raise_kind::<T>(&kind_of(e), &e.to_string())
}

/// A Python exception of type `T` with this kind and text.
pub(super) fn raise_kind<T: PyTypeInfo>(kind: &str, text: &str) -> PyErr {
    Python::attach(|py| {
        let err = PyErr::from_type(T::type_object(py), format!("{kind}: {text}"));
        // Setting an attribute on a fresh exception instance cannot fail in practice; if it
        // did, the message still carries the kind.
        let _ = err.value(py).setattr("kind", kind);
        err
    })
}

/// [`DeviceError`] of kind `UnknownHandle`.
pub(super) fn unknown(what: &str, id: impl Display) -> PyErr {
    raise_kind::<DeviceError>("UnknownHandle", &format!("no {what} {id} on this device"))
}

/// Adds the exceptions to the module.
pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("PostError", py.get_type::<PostError>())?;
    m.add("ModifyError", py.get_type::<ModifyError>())?;
    m.add("CreateError", py.get_type::<CreateError>())?;
    m.add("MwError", py.get_type::<MwError>())?;
    Ok(())
}
