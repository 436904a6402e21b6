//! `roce.Access`: the access-flag constants.

use pyo3::prelude::*;

use roce_stack::Access;

/// Remote access rights (`ibv_access_flags` values, `roce_stack::Access`): plain `int` bit
/// flags to combine with `|`, for `Device.reg_mr`, `Device.connect_qp`, `Device.modify_qp`
/// and the memory window binds.
#[pyclass(module = "roce._roce", name = "Access", frozen)]
pub(crate) struct PyAccess;

#[pymethods]
impl PyAccess {
    /// No rights beyond local read.
    #[classattr]
    const NONE: u8 = Access::NONE.0;
    /// The local HCA may write (receive buffers, READ destinations, atomic results).
    #[classattr]
    const LOCAL_WRITE: u8 = Access::LOCAL_WRITE.0;
    /// Peers may RDMA WRITE.
    #[classattr]
    const REMOTE_WRITE: u8 = Access::REMOTE_WRITE.0;
    /// Peers may RDMA READ.
    #[classattr]
    const REMOTE_READ: u8 = Access::REMOTE_READ.0;
    /// Peers may run atomics.
    #[classattr]
    const REMOTE_ATOMIC: u8 = Access::REMOTE_ATOMIC.0;
    /// LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC.
    #[classattr]
    const ALL: u8 = Access::ALL.0;
    /// Memory windows may be bound to the region (not part of ALL).
    #[classattr]
    const MW_BIND: u8 = Access::MW_BIND.0;
}
