//! The device's handles: the Python ids of its protection domains, regions, queues, and
//! the scatter/gather lists built from them.
use std::sync::PoisonError;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use roce_stack::srq::SrqHandle;
use roce_stack::{CqHandle, MrHandle, PdHandle, SgList, Sge, MAX_SGE};

use super::errors::*;
use super::PyDevice;

impl PyDevice {
    pub(super) fn dev(&mut self) -> &mut roce_stack::Device {
        self.dev.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn pd(&self, id: usize) -> PyResult<PdHandle> {
        self.pds
            .get(id)
            .copied()
            .ok_or_else(|| unknown("protection domain", id))
    }

    pub(super) fn mr_handle(&self, id: usize) -> PyResult<MrHandle> {
        self.mrs
            .get(id)
            .copied()
            .flatten()
            .ok_or_else(|| unknown("memory region", id))
    }

    pub(super) fn cq(&self, id: usize) -> PyResult<CqHandle> {
        self.cqs
            .get(id)
            .copied()
            .ok_or_else(|| unknown("completion queue", id))
    }

    pub(super) fn srq(&self, id: usize) -> PyResult<SrqHandle> {
        self.srqs
            .get(id)
            .copied()
            .ok_or_else(|| unknown("shared receive queue", id))
    }

    /// `(offset, length)` checked against the region's length.
    pub(super) fn range(
        &mut self,
        mr: usize,
        offset: usize,
        len: usize,
    ) -> PyResult<std::ops::Range<usize>> {
        let h = self.mr_handle(mr)?;
        let size = self.dev().mr(h).map_or(0, roce_stack::MemoryRegion::len);
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(offset..end),
            _ => Err(PyValueError::new_err(format!(
                "bytes {offset}..{offset}+{len} are outside memory region {mr} of {size} bytes"
            ))),
        }
    }

    /// A scatter/gather list: each entry `(mr, offset, length)` (bytes of a region of this
    /// device) or a dict `{"addr", "length", "lkey"}` (a raw `Sge`, for keys learned
    /// elsewhere). Bounds and keys are checked when posting, as the Rust API does.
    pub(super) fn sgl(&mut self, entries: &Bound<'_, PyAny>) -> PyResult<SgList> {
        let mut l = SgList::new();
        for e in entries.try_iter()? {
            let e = e?;
            let sge = if let Ok(d) = e.cast::<PyDict>() {
                let field = |k: &str| -> PyResult<Bound<'_, PyAny>> {
                    d.get_item(k)?
                        .ok_or_else(|| PyValueError::new_err(format!("a raw SGE dict needs {k:?}")))
                };
                Sge {
                    addr: field("addr")?.extract()?,
                    length: field("length")?.extract()?,
                    lkey: field("lkey")?.extract()?,
                }
            } else {
                let (mr, offset, length): (usize, u64, u32) = e.extract().map_err(|_| {
                    PyTypeError::new_err(
                        "an SGE is a tuple (mr, offset, length) or a dict {addr, length, lkey}",
                    )
                })?;
                let h = self.mr_handle(mr)?;
                match self.dev().mr(h) {
                    Some(r) => r.sge(offset, length),
                    None => return Err(unknown("memory region", mr)),
                }
            };
            if !l.push(sge) {
                return Err(PyValueError::new_err(format!(
                    "at most {MAX_SGE} scatter/gather entries"
                )));
            }
        }
        Ok(l)
    }
}
