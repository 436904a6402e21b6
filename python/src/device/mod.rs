//! `roce.Device`: the sans-IO transport of `roce-stack` ([`roce_stack::Device`]) as a golden
//! model a Python testbench drives.
//!
//! The caller moves bytes and time, as the crate contract says: it hands every received RoCEv2
//! UDP payload to `handle_datagram` with what the link knows of it (source, destination, ECN),
//! calls `handle_timeout` once `poll_timeout` has passed, and after any `handle_*`/`post_*`
//! drains `poll_transmit` (one datagram per call, in wire order) and `poll_cq`. Time is an
//! integer number of nanoseconds from an epoch the caller chooses.
//!
//! Verbs objects are named by small integers on the Python side: protection domains, memory
//! regions, completion queues and shared receive queues by the index this wrapper gave them
//! (in creation order, from 0, never reused), queue pairs by their QPN (what the wire
//! carries). A handle this device did not give raises [`DeviceError`] of kind
//! `UnknownHandle`; every error of the Rust API raises the exception of its type
//! ([`PostError`], [`ModifyError`], [`CreateError`], [`MwError`]), whose message starts with
//! the error's kind (its variant name, also the exception's `kind` attribute) and then says
//! what the Rust error says.
mod access;
mod convert;
mod errors;
mod handles;

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use roce_proto::{QKey, Qpn, RKey};
use roce_stack::srq::{AsyncEvent, SrqHandle};
use roce_stack::ud::{AddressHandle, UdSend};
use roce_stack::{
    Access, ConnectParams, CqHandle, DeviceConfig, Instant, Ipv4Seen, MrHandle, MwType, PathConfig,
    PdHandle, QpAttr, QpCaps, RecvRequest, RxMeta, SgList, WorkRequest, WrOp, PATH_MTUS,
};

pub(crate) use access::PyAccess;
use convert::*;
use errors::*;

/// A RoCEv2 endpoint: the sans-IO InfiniBand transport of `roce-stack` (RC, UC and UD queue
/// pairs, shared receive queues, memory windows), driven by the caller with bytes and time.
///
/// Nothing here reads a clock, a socket or a random number generator: `now_ns` arguments are
/// nanoseconds from an epoch the caller chooses, start PSNs are given by the caller, and the
/// memory keys and addresses derive from `key_seed`.
///
/// Keyword arguments are the fields of `roce_stack::DeviceConfig` with its defaults:
/// `qpn_base` (QPN of the first RC/UC QP, 0x11), `max_qps` (65536), `tx_quantum` (datagrams
/// one QP sends in a row before the next is served, 16), `key_seed` (seed of the regions' key
/// bytes and virtual addresses, 0).
#[pyclass(module = "roce._roce", name = "Device")]
pub(crate) struct PyDevice {
    /// The transport (behind a mutex only so that the class is `Sync`; `&mut self` methods
    /// reach it without locking).
    dev: Mutex<roce_stack::Device>,
    /// Protection domains, by Python id.
    pds: Vec<PdHandle>,
    /// Memory regions, by Python id (`None` once deregistered).
    mrs: Vec<Option<MrHandle>>,
    /// Completion queues, by Python id.
    cqs: Vec<CqHandle>,
    /// Shared receive queues, by Python id.
    srqs: Vec<SrqHandle>,
    /// The datagram `poll_transmit` writes.
    buf: Vec<u8>,
}

#[pymethods]
#[allow(clippy::too_many_arguments)]
impl PyDevice {
    /// An empty device (see the class documentation for the keyword arguments).
    #[new]
    #[pyo3(text_signature = "(*, qpn_base=0x11, max_qps=65536, tx_quantum=16, key_seed=0)")]
    #[pyo3(signature = (*, qpn_base = DeviceConfig::default().qpn_base,
        max_qps = DeviceConfig::default().max_qps,
        tx_quantum = DeviceConfig::default().tx_quantum,
        key_seed = DeviceConfig::default().key_seed))]
    fn new(qpn_base: u32, max_qps: u32, tx_quantum: u32, key_seed: u64) -> Self {
        Self {
            dev: Mutex::new(roce_stack::Device::new(DeviceConfig {
                qpn_base,
                max_qps,
                tx_quantum,
                key_seed,
            })),
            pds: Vec::new(),
            mrs: Vec::new(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            buf: Vec::new(),
        }
    }

    /// Bytes of the GRH area at the start of every UD receive buffer (40): the payload of a
    /// UD message lands after it.
    #[classattr]
    const UD_GRH_LEN: usize = roce_stack::ud::GRH_LEN;

    /// The path MTUs an IB transport allows, in bytes: (256, 512, 1024, 2048, 4096).
    #[classattr]
    fn path_mtus() -> (u32, u32, u32, u32, u32) {
        let [a, b, c, d, e] = PATH_MTUS;
        (a, b, c, d, e)
    }

    /// The UDP source port Linux's `rdma_get_udp_sport` picks for a QPN pair (symmetric: both
    /// ends of a connection compute the same value), `PathConfig::udp_sport`.
    #[staticmethod]
    fn udp_sport(lqpn: u32, rqpn: u32) -> u16 {
        PathConfig::udp_sport(lqpn, rqpn)
    }

    /// Allocates a protection domain; returns its id.
    fn alloc_pd(&mut self) -> usize {
        let pd = self.dev().alloc_pd();
        self.pds.push(pd);
        self.pds.len() - 1
    }

    /// Registers a memory region in protection domain `pd` with `access` (`roce.Access` bits):
    /// `data` is its size in bytes (zeroed) or its initial bytes. Returns its id; its keys and
    /// address are in `mr_info`. A size that cannot be allocated raises `MemoryError` (the
    /// device is left as it was).
    fn reg_mr(&mut self, pd: usize, data: &Bound<'_, PyAny>, access: u8) -> PyResult<usize> {
        let pd = self.pd(pd)?;
        let init: Option<Vec<u8>> =
            if data.is_instance_of::<pyo3::types::PyInt>() {
                None
            } else {
                Some(data.extract().map_err(|_| {
                    PyTypeError::new_err("data is a size (int) or the initial bytes")
                })?)
            };
        let len = match &init {
            Some(b) => b.len(),
            None => data.extract()?,
        };
        // A size from a script may be anything: one that cannot be had raises MemoryError
        // instead of aborting the interpreter.
        let h = self
            .dev()
            .try_reg_mr(pd, len, Access(access))
            .map_err(|e| {
                PyMemoryError::new_err(format!(
                    "a memory region of {len} bytes cannot be allocated ({e})"
                ))
            })?;
        if let (Some(b), Some(r)) = (init, self.dev().mr_mut(h)) {
            r.as_mut_slice().copy_from_slice(&b);
        }
        self.mrs.push(Some(h));
        Ok(self.mrs.len() - 1)
    }

    /// Deregisters a memory region; later accesses through its keys fail. Its id is not
    /// reused. Returns `False` if it was already deregistered.
    fn dereg_mr(&mut self, mr: usize) -> PyResult<bool> {
        let h = self.mr_handle(mr)?;
        self.mrs[mr] = None;
        Ok(self.dev().dereg_mr(h))
    }

    /// A memory region's keys and address: a dict with `lkey`, `rkey`, `va`, `length`,
    /// `access`, `pd` and `rkey_valid` (`False` once a SEND with invalidate named its rkey).
    fn mr_info<'py>(&mut self, py: Python<'py>, mr: usize) -> PyResult<Bound<'py, PyDict>> {
        let h = self.mr_handle(mr)?;
        let pd = {
            let r = self
                .dev()
                .mr(h)
                .ok_or_else(|| unknown("memory region", mr))?;
            r.pd()
        };
        let pd_id = self.pds.iter().position(|&p| p == pd);
        let r = self
            .dev()
            .mr(h)
            .ok_or_else(|| unknown("memory region", mr))?;
        let d = PyDict::new(py);
        d.set_item("lkey", r.lkey())?;
        d.set_item("rkey", r.rkey().0)?;
        d.set_item("va", r.va())?;
        d.set_item("length", r.len())?;
        d.set_item("access", r.access().0)?;
        d.set_item("pd", pd_id)?;
        d.set_item("rkey_valid", r.rkey_valid())?;
        Ok(d)
    }

    /// The remote address of byte `offset` of a region, `(va, rkey)`: what its owner
    /// advertises to a peer for RDMA WRITE, READ and atomics (`MemoryRegion::remote_addr`).
    #[pyo3(signature = (mr, offset = 0))]
    fn mr_remote_addr(&mut self, mr: usize, offset: u64) -> PyResult<(u64, u32)> {
        let h = self.mr_handle(mr)?;
        let r = self
            .dev()
            .mr(h)
            .ok_or_else(|| unknown("memory region", mr))?;
        let a = r.remote_addr(offset);
        Ok((a.va, a.rkey.0))
    }

    /// `length` bytes of a region from `offset` (`length=None`: to its end).
    #[pyo3(signature = (mr, offset = 0, length = None))]
    fn mr_read<'py>(
        &mut self,
        py: Python<'py>,
        mr: usize,
        offset: usize,
        length: Option<usize>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let h = self.mr_handle(mr)?;
        let size = self.dev().mr(h).map_or(0, roce_stack::MemoryRegion::len);
        let length = length.unwrap_or_else(|| size.saturating_sub(offset));
        let r = self.range(mr, offset, length)?;
        let m = self
            .dev()
            .mr(h)
            .ok_or_else(|| unknown("memory region", mr))?;
        Ok(PyBytes::new(py, &m.as_slice()[r]))
    }

    /// Writes `data` into a region at `offset`, as the application (not tracked as dirty).
    #[pyo3(signature = (mr, offset, data))]
    fn mr_write(&mut self, mr: usize, offset: usize, data: Vec<u8>) -> PyResult<()> {
        let h = self.mr_handle(mr)?;
        let r = self.range(mr, offset, data.len())?;
        let m = self
            .dev()
            .mr_mut(h)
            .ok_or_else(|| unknown("memory region", mr))?;
        m.as_mut_slice()[r].copy_from_slice(&data);
        Ok(())
    }

    /// The byte ranges `(start, end)` of a region the transport wrote since registration or
    /// the last `mr_clear_dirty`, in 4 KiB pages (`MemoryRegion::dirty_ranges`).
    fn mr_dirty_ranges(&mut self, mr: usize) -> PyResult<Vec<(usize, usize)>> {
        let h = self.mr_handle(mr)?;
        let r = self
            .dev()
            .mr(h)
            .ok_or_else(|| unknown("memory region", mr))?;
        Ok(r.dirty_ranges().map(|x| (x.start, x.end)).collect())
    }

    /// Forgets what the transport wrote in a region (`MemoryRegion::clear_dirty`).
    fn mr_clear_dirty(&mut self, mr: usize) -> PyResult<()> {
        let h = self.mr_handle(mr)?;
        if let Some(r) = self.dev().mr_mut(h) {
            r.clear_dirty();
        }
        Ok(())
    }

    /// Makes a region's rkey valid again after a SEND with invalidate. `False` if unknown to
    /// the transport.
    fn revalidate_rkey(&mut self, mr: usize) -> PyResult<bool> {
        let h = self.mr_handle(mr)?;
        Ok(self.dev().revalidate_rkey(h))
    }

    /// Creates a completion queue (unbounded; poll it regularly); returns its id.
    fn create_cq(&mut self) -> usize {
        let cq = self.dev().create_cq();
        self.cqs.push(cq);
        self.cqs.len() - 1
    }

    /// Creates an RC QP in RESET and returns its QPN. With `srq`, it takes its receive
    /// requests from that shared receive queue (of the same PD). The keyword arguments are
    /// `roce_stack::QpCaps` with its defaults; `cnp_interval_ns=None` never sends CNPs.
    #[pyo3(
        text_signature = "($self, pd, send_cq, recv_cq, *, srq=None, max_send_wr=1024, \
        max_recv_wr=1024, max_msg_size=1073741824, max_unacked_psns=128, \
        ack_req_every=64, cnp_interval_ns=50000, infinite_retry_at_7=False)"
    )]
    #[pyo3(signature = (pd, send_cq, recv_cq, *, srq = None,
        max_send_wr = QpCaps::default().max_send_wr,
        max_recv_wr = QpCaps::default().max_recv_wr,
        max_msg_size = QpCaps::default().max_msg_size,
        max_unacked_psns = QpCaps::default().max_unacked_psns,
        ack_req_every = QpCaps::default().ack_req_every,
        cnp_interval_ns = default_cnp_interval_ns(),
        infinite_retry_at_7 = QpCaps::default().infinite_retry_at_7))]
    fn create_qp(
        &mut self,
        pd: usize,
        send_cq: usize,
        recv_cq: usize,
        srq: Option<usize>,
        max_send_wr: u32,
        max_recv_wr: u32,
        max_msg_size: u32,
        max_unacked_psns: u32,
        ack_req_every: u32,
        cnp_interval_ns: Option<u64>,
        infinite_retry_at_7: bool,
    ) -> PyResult<u32> {
        let (pd, scq, rcq) = (self.pd(pd)?, self.cq(send_cq)?, self.cq(recv_cq)?);
        let srq = srq.map(|s| self.srq(s)).transpose()?;
        let caps = QpCaps::from(Caps {
            max_send_wr,
            max_recv_wr,
            max_msg_size,
            max_unacked_psns,
            ack_req_every,
            cnp_interval_ns,
            infinite_retry_at_7,
        });
        let r = match srq {
            Some(s) => self.dev().create_qp_with_srq(pd, scq, rcq, caps, s),
            None => self.dev().create_qp(pd, scq, rcq, caps),
        };
        r.map(|q| q.0).map_err(|e| raise::<CreateError>(&e))
    }

    /// Creates a UC QP in RESET (SEND and WRITE with or without immediate; nothing
    /// acknowledged or retransmitted) and returns its QPN. Keyword arguments as `create_qp`.
    #[pyo3(
        text_signature = "($self, pd, send_cq, recv_cq, *, max_send_wr=1024, max_recv_wr=1024, \
        max_msg_size=1073741824, max_unacked_psns=128, ack_req_every=64, \
        cnp_interval_ns=50000, infinite_retry_at_7=False)"
    )]
    #[pyo3(signature = (pd, send_cq, recv_cq, *,
        max_send_wr = QpCaps::default().max_send_wr,
        max_recv_wr = QpCaps::default().max_recv_wr,
        max_msg_size = QpCaps::default().max_msg_size,
        max_unacked_psns = QpCaps::default().max_unacked_psns,
        ack_req_every = QpCaps::default().ack_req_every,
        cnp_interval_ns = default_cnp_interval_ns(),
        infinite_retry_at_7 = QpCaps::default().infinite_retry_at_7))]
    fn create_uc_qp(
        &mut self,
        pd: usize,
        send_cq: usize,
        recv_cq: usize,
        max_send_wr: u32,
        max_recv_wr: u32,
        max_msg_size: u32,
        max_unacked_psns: u32,
        ack_req_every: u32,
        cnp_interval_ns: Option<u64>,
        infinite_retry_at_7: bool,
    ) -> PyResult<u32> {
        let (pd, scq, rcq) = (self.pd(pd)?, self.cq(send_cq)?, self.cq(recv_cq)?);
        let caps = QpCaps::from(Caps {
            max_send_wr,
            max_recv_wr,
            max_msg_size,
            max_unacked_psns,
            ack_req_every,
            cnp_interval_ns,
            infinite_retry_at_7,
        });
        self.dev()
            .create_uc_qp(pd, scq, rcq, caps)
            .map(|q| q.0)
            .map_err(|e| raise::<CreateError>(&e))
    }

    /// Creates a UD QP with Q_Key `qkey`, messages of at most `mtu` bytes (one of the path
    /// MTUs) and queues of `max_wr` requests each; returns its QPN. It can be posted to at once.
    fn create_ud_qp(
        &mut self,
        pd: usize,
        send_cq: usize,
        recv_cq: usize,
        qkey: u32,
        mtu: u32,
        max_wr: u32,
    ) -> PyResult<u32> {
        let (pd, scq, rcq) = (self.pd(pd)?, self.cq(send_cq)?, self.cq(recv_cq)?);
        self.dev()
            .create_ud_qp(pd, scq, rcq, QKey(qkey), mtu, max_wr)
            .map(|q| q.0)
            .map_err(|e| raise::<CreateError>(&e))
    }

    /// Creates a shared receive queue of `pd` holding at most `max_wr` receive requests;
    /// returns its id.
    fn create_srq(&mut self, pd: usize, max_wr: u32) -> PyResult<usize> {
        let pd = self.pd(pd)?;
        let s = self
            .dev()
            .create_srq(pd, max_wr)
            .map_err(|e| raise::<CreateError>(&e))?;
        self.srqs.push(s);
        Ok(self.srqs.len() - 1)
    }

    /// Posts a receive request to a shared receive queue (`sgl` as in `post_recv`).
    fn post_srq_recv(&mut self, srq: usize, wr_id: u64, sgl: &Bound<'_, PyAny>) -> PyResult<()> {
        let s = self.srq(srq)?;
        let sgl = self.sgl(sgl)?;
        self.dev()
            .post_srq_recv(s, RecvRequest { wr_id, sgl })
            .map_err(|e| raise::<PostError>(&e))
    }

    /// Arms an SRQ's limit: the first time fewer than `limit` requests remain, the event
    /// `SrqLimitReached` is raised (`poll_async_event`) and the limit disarmed.
    fn arm_srq_limit(&mut self, srq: usize, limit: u32) -> PyResult<bool> {
        let s = self.srq(srq)?;
        Ok(self.dev().arm_srq_limit(s, limit))
    }

    /// Receive requests waiting on an SRQ.
    fn srq_len(&mut self, srq: usize) -> PyResult<usize> {
        let s = self.srq(srq)?;
        Ok(self.dev().srq_len(s))
    }

    /// The next asynchronous event, `{"event": "SrqLimitReached", "srq": id}`, or `None`.
    fn poll_async_event<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(ev) = self.dev().poll_async_event() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("event", kind_of(&ev))?;
        match ev {
            AsyncEvent::SrqLimitReached(h) => {
                d.set_item("srq", self.srqs.iter().position(|&s| s == h))?;
            }
        }
        Ok(Some(d))
    }

    /// Allocates a memory window of `pd`, `mw_type` 1 (bound with `bind_mw`) or 2 (bound
    /// through a QP with `bind_mw_qp`). Returns its first rkey, or `None` when none is left.
    #[pyo3(signature = (pd, mw_type = 1))]
    fn alloc_mw(&mut self, pd: usize, mw_type: u8) -> PyResult<Option<u32>> {
        let pd = self.pd(pd)?;
        let kind = match mw_type {
            1 => MwType::Type1,
            2 => MwType::Type2,
            _ => return Err(PyValueError::new_err("mw_type is 1 or 2")),
        };
        Ok(self.dev().alloc_mw(pd, kind).map(|k| k.0))
    }

    /// Binds a type 1 window (named by its current rkey) to `[va, va + length)` of region `mr`
    /// with remote `access`; the region must allow it (`Access.MW_BIND`). Returns the new
    /// rkey. A length of 0 unbinds it.
    fn bind_mw(&mut self, rkey: u32, mr: usize, va: u64, length: u64, access: u8) -> PyResult<u32> {
        let h = self.mr_handle(mr)?;
        self.dev()
            .bind_mw(RKey(rkey), h, va, length, Access(access))
            .map(|k| k.0)
            .map_err(|e| raise::<MwError>(&e))
    }

    /// Binds a free type 2 window through QP `qpn` with the key byte `key_byte` (only that QP
    /// may use it). Returns the new rkey.
    fn bind_mw_qp(
        &mut self,
        qpn: u32,
        rkey: u32,
        mr: usize,
        va: u64,
        length: u64,
        access: u8,
        key_byte: u8,
    ) -> PyResult<u32> {
        let h = self.mr_handle(mr)?;
        self.dev()
            .bind_mw_qp(
                Qpn(qpn),
                RKey(rkey),
                h,
                va,
                length,
                Access(access),
                key_byte,
            )
            .map(|k| k.0)
            .map_err(|e| raise::<MwError>(&e))
    }

    /// Invalidates a type 2 window of `pd` locally.
    fn invalidate_mw(&mut self, pd: usize, rkey: u32) -> PyResult<()> {
        let pd = self.pd(pd)?;
        self.dev()
            .invalidate_mw(pd, RKey(rkey))
            .map_err(|e| raise::<MwError>(&e))
    }

    /// `ibv_modify_qp`: moves an RC/UC QP to `state` (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`,
    /// `SQE`, `ERR`) with the attributes given (`None`: not in the attribute mask), the fields
    /// of `roce_stack::QpAttr`. `path` is a dict of `PathConfig` fields (`local`, `remote`,
    /// `src_port`, `remote_src_port`, `local_port`, `remote_port`, `ecn`, `verify_icrc`; those
    /// left out keep the defaults). Raises `ModifyError` (nothing changed) when refused.
    #[pyo3(signature = (qpn, state, *, access_flags = None, path_mtu = None, dest_qpn = None,
        rq_psn = None, sq_psn = None, timeout = None, retry_cnt = None, rnr_retry = None,
        min_rnr_timer = None, max_rd_atomic = None, max_dest_rd_atomic = None, path = None))]
    fn modify_qp(
        &mut self,
        qpn: u32,
        state: &str,
        access_flags: Option<u8>,
        path_mtu: Option<u32>,
        dest_qpn: Option<u32>,
        rq_psn: Option<u32>,
        sq_psn: Option<u32>,
        timeout: Option<u8>,
        retry_cnt: Option<u8>,
        rnr_retry: Option<u8>,
        min_rnr_timer: Option<u8>,
        max_rd_atomic: Option<u8>,
        max_dest_rd_atomic: Option<u8>,
        path: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let attr = QpAttr {
            state: state_of(state)?,
            access_flags: access_flags.map(Access),
            path_mtu,
            dest_qpn: dest_qpn.map(Qpn),
            rq_psn: rq_psn.map(|p| psn(p, "rq_psn")).transpose()?,
            sq_psn: sq_psn.map(|p| psn(p, "sq_psn")).transpose()?,
            timeout,
            retry_cnt,
            rnr_retry,
            min_rnr_timer,
            max_rd_atomic,
            max_dest_rd_atomic,
            path: path.map(|p| path_of(Some(p))).transpose()?,
        };
        self.dev()
            .modify_qp(Qpn(qpn), &attr)
            .map_err(|e| raise::<ModifyError>(&e))
    }

    /// Brings an RC/UC QP to RTS connected to `dest_qpn` (`Device::connect_qp`): RESET→INIT
    /// (when still in RESET), INIT→RTR, RTR→RTS, stopping at the first refused transition.
    /// `rq_psn` is the first PSN expected from the peer (its `sq_psn`), `sq_psn` the first
    /// this QP sends; `path` as in `modify_qp`. The other keyword arguments are
    /// `roce_stack::ConnectParams` with its defaults: MTU 1024, every remote access, timeout
    /// 14 (67 ms), 7 retries, infinite RNR retries, RNR timer 1, 16 READ/atomic each way.
    #[pyo3(
        text_signature = "($self, qpn, *, dest_qpn, rq_psn, sq_psn, path=None, mtu=1024, \
        access=14, timeout=14, retry_cnt=7, rnr_retry=7, min_rnr_timer=1, \
        max_rd_atomic=16, max_dest_rd_atomic=16)"
    )]
    #[pyo3(signature = (qpn, *, dest_qpn, rq_psn, sq_psn, path = None,
        mtu = ConnectParams::default().mtu,
        access = ConnectParams::default().access.0,
        timeout = ConnectParams::default().timeout,
        retry_cnt = ConnectParams::default().retry_cnt,
        rnr_retry = ConnectParams::default().rnr_retry,
        min_rnr_timer = ConnectParams::default().min_rnr_timer,
        max_rd_atomic = ConnectParams::default().max_rd_atomic,
        max_dest_rd_atomic = ConnectParams::default().max_dest_rd_atomic))]
    fn connect_qp(
        &mut self,
        qpn: u32,
        dest_qpn: u32,
        rq_psn: u32,
        sq_psn: u32,
        path: Option<&Bound<'_, PyDict>>,
        mtu: u32,
        access: u8,
        timeout: u8,
        retry_cnt: u8,
        rnr_retry: u8,
        min_rnr_timer: u8,
        max_rd_atomic: u8,
        max_dest_rd_atomic: u8,
    ) -> PyResult<()> {
        let c = ConnectParams {
            dest_qpn: Qpn(dest_qpn),
            rq_psn: psn(rq_psn, "rq_psn")?,
            sq_psn: psn(sq_psn, "sq_psn")?,
            path: path_of(path)?,
            mtu,
            access: Access(access),
            timeout,
            retry_cnt,
            rnr_retry,
            min_rnr_timer,
            max_rd_atomic,
            max_dest_rd_atomic,
        };
        self.dev()
            .connect_qp(Qpn(qpn), &c)
            .map_err(|e| raise::<ModifyError>(&e))
    }

    /// Posts a send-queue work request to an RC/UC QP (`roce_stack::WorkRequest`).
    ///
    /// `opcode` names the `WrOp` (any case, `_` optional): `SEND`, `SEND_WITH_IMM` (`imm`),
    /// `SEND_WITH_INV` (`invalidate_rkey`), `WRITE` (`remote_va`, `rkey`), `WRITE_WITH_IMM`
    /// (`remote_va`, `rkey`, `imm`), `READ` (`remote_va`, `rkey`), `COMPARE_SWAP` (`remote_va`,
    /// `rkey`, `compare`, `swap`), `FETCH_ADD` (`remote_va`, `rkey`, `add`), `ATOMIC_WRITE`
    /// (`remote_va`, `rkey`, `data`: 8 bytes), `FLUSH` (`remote_va`, `rkey`, `length`,
    /// `whole_region`); verbs-style aliases are accepted too (`SEND_IMM`, `RDMA_WRITE`,
    /// `RDMA_WRITE_WITH_IMM`, `WRITE_IMM`, `RDMA_READ`, `CAS`, `ATOMIC_CMP_AND_SWP`, `FAA`,
    /// `ATOMIC_FETCH_AND_ADD`). `sgl` is the gather list (SEND/WRITE source) or scatter list
    /// (READ destination, the 8-byte atomic result): entries `(mr, offset, length)` or raw
    /// `{"addr", "length", "lkey"}` dicts. Raises `PostError` when refused.
    #[pyo3(signature = (qpn, wr_id, opcode, sgl = None, *, remote_va = None, rkey = None,
        imm = None, invalidate_rkey = None, compare = None, swap = None, add = None,
        data = None, length = None, whole_region = false, signaled = true,
        solicited = false, fence = false))]
    fn post_send(
        &mut self,
        qpn: u32,
        wr_id: u64,
        opcode: &str,
        sgl: Option<&Bound<'_, PyAny>>,
        remote_va: Option<u64>,
        rkey: Option<u32>,
        imm: Option<u32>,
        invalidate_rkey: Option<u32>,
        compare: Option<u64>,
        swap: Option<u64>,
        add: Option<u64>,
        data: Option<Vec<u8>>,
        length: Option<u32>,
        whole_region: bool,
        signaled: bool,
        solicited: bool,
        fence: bool,
    ) -> PyResult<()> {
        let name: String = opcode
            .chars()
            .filter(|c| *c != '_' && *c != '-' && *c != ' ')
            .collect::<String>()
            .to_ascii_lowercase();
        let op = match name.as_str() {
            "send" => WrOp::Send,
            "sendwithimm" | "sendimm" => WrOp::SendWithImm(needs(imm, opcode, "imm")?),
            "sendwithinv" | "sendinv" => {
                WrOp::SendWithInv(RKey(needs(invalidate_rkey, opcode, "invalidate_rkey")?))
            }
            "write" | "rdmawrite" => WrOp::Write(remote(opcode, remote_va, rkey)?),
            "writewithimm" | "writeimm" | "rdmawritewithimm" | "rdmawriteimm" => {
                WrOp::WriteWithImm(remote(opcode, remote_va, rkey)?, needs(imm, opcode, "imm")?)
            }
            "read" | "rdmaread" => WrOp::Read(remote(opcode, remote_va, rkey)?),
            "compareswap" | "cas" | "atomiccmpandswp" | "cmpswap" => WrOp::CompareSwap {
                remote: remote(opcode, remote_va, rkey)?,
                compare: needs(compare, opcode, "compare")?,
                swap: needs(swap, opcode, "swap")?,
            },
            "fetchadd" | "faa" | "atomicfetchandadd" => WrOp::FetchAdd {
                remote: remote(opcode, remote_va, rkey)?,
                add: needs(add, opcode, "add")?,
            },
            "atomicwrite" => {
                let d = needs(data, opcode, "data (8 bytes)")?;
                let data: [u8; 8] = d.as_slice().try_into().map_err(|_| {
                    PyValueError::new_err(format!("ATOMIC_WRITE data is 8 bytes, got {}", d.len()))
                })?;
                WrOp::AtomicWrite {
                    remote: remote(opcode, remote_va, rkey)?,
                    data,
                }
            }
            "flush" => WrOp::Flush {
                remote: remote(opcode, remote_va, rkey)?,
                len: needs(length, opcode, "length")?,
                whole_region,
            },
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown send opcode {opcode:?} (SEND, SEND_WITH_IMM, SEND_WITH_INV, \
                     WRITE, WRITE_WITH_IMM, READ, COMPARE_SWAP, FETCH_ADD, ATOMIC_WRITE, FLUSH)"
                )))
            }
        };
        let sgl = match sgl {
            Some(s) => self.sgl(s)?,
            None => SgList::new(),
        };
        let wr = WorkRequest {
            signaled,
            solicited,
            fence,
            ..WorkRequest::new(wr_id, op, sgl)
        };
        self.dev()
            .post_send(Qpn(qpn), wr)
            .map_err(|e| raise::<PostError>(&e))
    }

    /// Posts a receive request to an RC, UC or UD QP (any state but RESET). `sgl`: entries
    /// `(mr, offset, length)` or raw `{"addr", "length", "lkey"}` dicts, where an incoming
    /// SEND lands (a UD message after the 40-byte GRH area). Raises `PostError` when refused.
    fn post_recv(&mut self, qpn: u32, wr_id: u64, sgl: &Bound<'_, PyAny>) -> PyResult<()> {
        let sgl = self.sgl(sgl)?;
        self.dev()
            .post_recv(Qpn(qpn), RecvRequest { wr_id, sgl })
            .map_err(|e| raise::<PostError>(&e))
    }

    /// Posts a send to a UD QP: `sgl` (at most the QP's MTU) to QP `dest_qpn` at address
    /// `remote` (UDP port `remote_port`) from our address `local`, with Q_Key `qkey` (high bit
    /// set: the QP's own) and immediate data `imm` if given (`roce_stack::ud::UdSend`).
    #[pyo3(
        text_signature = "($self, qpn, wr_id, sgl, *, local, remote, dest_qpn, qkey, \
        remote_port=4791, imm=None, signaled=True)"
    )]
    #[pyo3(signature = (qpn, wr_id, sgl, *, local, remote, dest_qpn, qkey,
        remote_port = roce_proto::ROCEV2_UDP_PORT, imm = None, signaled = true))]
    fn post_ud_send(
        &mut self,
        qpn: u32,
        wr_id: u64,
        sgl: &Bound<'_, PyAny>,
        local: &Bound<'_, PyAny>,
        remote: &Bound<'_, PyAny>,
        dest_qpn: u32,
        qkey: u32,
        remote_port: u16,
        imm: Option<u32>,
        signaled: bool,
    ) -> PyResult<()> {
        let sgl = self.sgl(sgl)?;
        let ah = AddressHandle {
            local: ip_of(local)?,
            remote: ip_of(remote)?,
            remote_port,
            dest_qpn: Qpn(dest_qpn),
            qkey: QKey(qkey),
        };
        self.dev()
            .post_ud_send(
                Qpn(qpn),
                UdSend {
                    wr_id,
                    sgl,
                    ah,
                    imm,
                    signaled,
                },
            )
            .map_err(|e| raise::<PostError>(&e))
    }

    /// Takes the completions of a CQ, oldest first (at most `max` of them; all by default),
    /// as dicts: `wr_id`, `status` (the `WcStatus` name, `"Success"`…), `status_code` (the
    /// verbs number), `opcode` (the `WcOpcode` name: `Send`, `RdmaWrite`, `RdmaRead`,
    /// `CompSwap`, `FetchAdd`, `Flush`, `AtomicWrite`, `Recv`, `RecvRdmaWithImm`),
    /// `opcode_code`, `byte_len`, `imm`, `invalidated_rkey`, `qp`, and for UD receives
    /// `src_qp` and `src` (`(ip, port)`).
    #[pyo3(signature = (cq, max = None))]
    fn poll_cq<'py>(
        &mut self,
        py: Python<'py>,
        cq: usize,
        max: Option<usize>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let h = self.cq(cq)?;
        let mut out = Vec::new();
        while max.is_none_or(|m| out.len() < m) {
            match self.dev().poll_cq(h) {
                Some(c) => out.push(completion_dict(py, &c)?),
                None => break,
            }
        }
        Ok(out)
    }

    /// Completions waiting in a CQ.
    fn cq_len(&mut self, cq: usize) -> PyResult<usize> {
        let h = self.cq(cq)?;
        Ok(self.dev().cq_len(h))
    }

    /// Hands a received RoCEv2 UDP payload (BTH through ICRC) to the device at `now_ns`, with
    /// what the link knows of it: `src` `(ip, udp_port)` of the sender, `dst` the local
    /// address it was sent to (`"0.0.0.0"`/`"::"`: unknown, only the source is checked),
    /// `ecn` the IP ECN codepoint (0..=3), and `ipv4` the `(identification, dont_fragment)`
    /// the link saw in the IPv4 header (`None`: not seen, as a UDP socket; the ICRC check
    /// then solves for them). Returns what happened to it (`Delivery`): a dict with
    /// `delivery` (`Connected`, `OutOfSequence`, `Datagram`, `Management` or `Dropped`),
    /// `qpn`, `refusal` and `reason` (why it was dropped), `accepted`.
    #[pyo3(signature = (now_ns, payload, src, dst = None, ecn = 0, ipv4 = None))]
    fn handle_datagram<'py>(
        &mut self,
        py: Python<'py>,
        now_ns: u64,
        payload: &[u8],
        src: &Bound<'_, PyAny>,
        dst: Option<&Bound<'_, PyAny>>,
        ecn: u8,
        ipv4: Option<(u16, bool)>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let src = sockaddr_of(src)?;
        let dst = match dst {
            Some(d) => ip_of(d)?,
            None => match src {
                SocketAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            },
        };
        let mut meta = RxMeta::new(src, dst, self::ecn(ecn)?);
        if let Some((identification, dont_fragment)) = ipv4 {
            meta = meta.with_ipv4(Ipv4Seen::Seen {
                identification,
                dont_fragment,
            });
        }
        let d = self
            .dev()
            .handle_datagram(Instant::from_nanos(now_ns), &meta, payload);
        delivery_dict(py, &d)
    }

    /// Runs the timers that expired by `now_ns` (retransmission, RNR, pacing, congestion
    /// control). Call once `now_ns >= poll_timeout()`; early calls are harmless.
    fn handle_timeout(&mut self, now_ns: u64) {
        self.dev().handle_timeout(Instant::from_nanos(now_ns));
    }

    /// The earliest deadline of any QP in nanoseconds, or `None`.
    fn poll_timeout(&mut self) -> Option<u64> {
        self.dev().poll_timeout().map(Instant::as_nanos)
    }

    /// The next datagram to send at `now_ns`, or `None`: call after any `handle_*`/`post_*`
    /// until `None` (the datagrams come in wire order). A dict: `payload` (the UDP payload,
    /// BTH through ICRC), `src` `(local_ip, udp_src_port)`, `dst` `(remote_ip, udp_port)`,
    /// `ecn` (the codepoint to send it with) and `qpn` (the local QP that produced it). The
    /// receiver's `handle_datagram(now, t["payload"], t["src"], t["dst"][0], t["ecn"])` is
    /// what a link between the two does.
    fn poll_transmit<'py>(
        &mut self,
        py: Python<'py>,
        now_ns: u64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut buf = std::mem::take(&mut self.buf);
        let t = self
            .dev()
            .poll_transmit(Instant::from_nanos(now_ns), &mut buf);
        let out = match t {
            Some(t) => {
                let d = PyDict::new(py);
                d.set_item("payload", PyBytes::new(py, &buf[..t.len]))?;
                d.set_item("src", sockaddr_tuple(t.path.local, t.path.src_port))?;
                d.set_item("dst", sockaddr_tuple(t.path.remote, t.path.remote_port))?;
                d.set_item("ecn", t.ecn.bits())?;
                d.set_item("qpn", t.qpn.0)?;
                Some(d)
            }
            None => None,
        };
        self.buf = buf;
        Ok(out)
    }

    /// A QP's state name (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`) for an RC/UC QP;
    /// `None` for a UD QP or an unknown QPN.
    fn qp_state(&mut self, qpn: u32) -> Option<&'static str> {
        self.dev().qp(Qpn(qpn)).map(|q| state_name(q.state()))
    }

    /// A QP's transport service, `"RC"`, `"UC"` or `"UD"` (QP1 is UD), or `None` if unknown.
    fn service(&mut self, qpn: u32) -> Option<&'static str> {
        self.dev().service(Qpn(qpn)).map(|s| s.name())
    }

    /// An RC/UC QP's state and attributes: a dict with `qpn`, `service`, `state`, `mtu`,
    /// `dest_qpn`, `next_send_psn`, `expected_psn`, `send_queue_len`, `recv_queue_len`,
    /// `path` (as `modify_qp` takes it), `repaths`; `None` for a UD or unknown QPN.
    fn qp_info<'py>(&mut self, py: Python<'py>, qpn: u32) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(q) = self.dev().qp(Qpn(qpn)) else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("qpn", q.qpn().0)?;
        d.set_item("service", q.service().name())?;
        d.set_item("state", state_name(q.state()))?;
        d.set_item("mtu", q.mtu())?;
        d.set_item("dest_qpn", q.dest_qpn().0)?;
        d.set_item("next_send_psn", q.next_send_psn().value())?;
        d.set_item("expected_psn", q.expected_psn().value())?;
        d.set_item("send_queue_len", q.send_queue_len())?;
        d.set_item("recv_queue_len", q.recv_queue_len())?;
        d.set_item("path", path_dict(py, q.path())?)?;
        d.set_item("repaths", q.repaths())?;
        Ok(Some(d))
    }

    /// An RC/UC QP's counters (`QpStats` as a dict, `drops` and the NAK counters nested), or
    /// `None` for a UD or unknown QPN.
    fn qp_stats<'py>(&mut self, py: Python<'py>, qpn: u32) -> PyResult<Option<Bound<'py, PyDict>>> {
        match self.dev().qp(Qpn(qpn)) {
            Some(q) => Ok(Some(stats_dict(py, q.stats())?)),
            None => Ok(None),
        }
    }

    /// A UD QP's counters (`UdStats` as a dict), or `None` for an unknown UD QPN.
    fn ud_stats<'py>(&mut self, py: Python<'py>, qpn: u32) -> PyResult<Option<Bound<'py, PyDict>>> {
        match self.dev().ud_qp(Qpn(qpn)) {
            Some(q) => Ok(Some(counters_dict(py, &q.stats())?)),
            None => Ok(None),
        }
    }

    /// Queues a MAD (256 bytes) to send from QP1 of `local` to QP1 of `remote` (IBTA Vol 1
    /// §13.5.1: a UD SEND ONLY with the GSI Q_Key); it goes out from `poll_transmit` before
    /// any QP's traffic. `False` (and counted as `overflow`) when 256 MADs wait already.
    #[pyo3(signature = (local, remote, mad, *, remote_port = 4791))]
    fn gsi_send(
        &mut self,
        local: &Bound<'_, PyAny>,
        remote: &Bound<'_, PyAny>,
        mad: &[u8],
        remote_port: u16,
    ) -> PyResult<bool> {
        let mad: [u8; roce_proto::mad::MAD_LEN] = mad.try_into().map_err(|_| {
            PyValueError::new_err(format!(
                "a MAD is {} bytes, not {}",
                roce_proto::mad::MAD_LEN,
                mad.len()
            ))
        })?;
        let m = roce_stack::qp::gsi::OutgoingMad {
            local: ip_of(local)?,
            remote: ip_of(remote)?,
            remote_port,
            mad,
        };
        Ok(self.dev().gsi().send(m))
    }

    /// The next MAD QP1 received (checked: a UD SEND ONLY with the GSI Q_Key and a good
    /// ICRC), oldest first: `{"from": (address, port), "to": address, "src_qp": n, "mad":
    /// bytes}`, or `None`.
    fn gsi_take<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(m) = self.dev().gsi().take() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("from", sockaddr_tuple(m.from.ip(), m.from.port()))?;
        d.set_item("to", m.to.to_string())?;
        d.set_item("src_qp", m.src_qp.0)?;
        d.set_item("mad", PyBytes::new(py, &m.mad))?;
        Ok(Some(d))
    }

    /// QP1's counters (`received`, `sent`, `malformed`, `bad_icrc`, `overflow`).
    fn gsi_stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.dev().gsi().stats();
        counters_dict(py, &s)
    }

    /// Counters summed over every RC/UC QP, plus the drops of datagrams that reached no QP.
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.dev().stats();
        stats_dict(py, &s)
    }

    /// Datagrams a QP accepted so far (a sign of life of some peer).
    fn accepted_datagrams(&mut self) -> u64 {
        self.dev().accepted_datagrams()
    }

    /// Datagrams a connected (RC/UC) QP accepted in sequence so far.
    fn accepted_connected_datagrams(&mut self) -> u64 {
        self.dev().accepted_connected_datagrams()
    }

    /// Moves an RC/UC QP to UDP source port `port` once its packets in flight are
    /// acknowledged. `False` for an unknown QP.
    fn repath_qp(&mut self, qpn: u32, port: u16) -> bool {
        self.dev().repath_qp(Qpn(qpn), port)
    }

    /// The `(send, recv)` completion queue ids of an RC/UC QP, or `None`.
    fn qp_cqs(&mut self, qpn: u32) -> Option<(Option<usize>, Option<usize>)> {
        let (s, r) = self.dev().qp_cqs(Qpn(qpn))?;
        let id = |h: CqHandle| self.cqs.iter().position(|&c| c == h);
        Some((id(s), id(r)))
    }

    /// A summary: how many objects of each kind the device has.
    fn __repr__(&mut self) -> String {
        let qps = self.dev().qps().count();
        format!(
            "<roce.Device: {} PDs, {} MRs, {} CQs, {} RC/UC QPs, {} SRQs>",
            self.pds.len(),
            self.mrs.iter().flatten().count(),
            self.cqs.len(),
            qps,
            self.srqs.len()
        )
    }
}

/// Adds `Device`, `Access` and the exceptions to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDevice>()?;
    m.add_class::<PyAccess>()?;
    errors::register(m)
}
