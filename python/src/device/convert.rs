//! Values between Python and the transport: addresses, PSNs, ECN, QP states, paths,
//! completions, counters and deliveries as dicts, QP capabilities, and a post's remote buffer
//! and required keyword arguments.
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use roce_proto::{Ecn, Psn, Qpn, RKey};
use roce_stack::{Completion, Delivery, PathConfig, QpCaps, QpState, QpStats, Refusal, RemoteAddr};

use super::errors::*;

/// An IP address from a `str` or anything whose `str()` is one (`ipaddress` objects).
pub(super) fn ip_of(obj: &Bound<'_, PyAny>) -> PyResult<IpAddr> {
    let s: String = obj.str()?.extract()?;
    s.parse()
        .map_err(|_| PyValueError::new_err(format!("not an IP address: {s:?}")))
}

/// `(ip, port)` as Python sees a socket address.
pub(super) fn sockaddr_of(obj: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    let (ip, port): (Bound<'_, PyAny>, u16) = obj
        .extract()
        .map_err(|_| PyTypeError::new_err("a socket address is a tuple (ip: str, port: int)"))?;
    Ok(SocketAddr::new(ip_of(&ip)?, port))
}

/// A PSN argument: below 2^24.
pub(super) fn psn(v: u32, name: &str) -> PyResult<Psn> {
    if v >= Psn::MODULUS {
        return Err(PyValueError::new_err(format!(
            "{name} must be below 2**24, got {v}"
        )));
    }
    Ok(Psn::new(v))
}

/// An ECN codepoint argument: the two IP bits (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
pub(super) fn ecn(v: u8) -> PyResult<Ecn> {
    if v > 3 {
        return Err(PyValueError::new_err(format!(
            "ecn is the 2-bit codepoint 0..=3, got {v}"
        )));
    }
    Ok(Ecn::from_bits(v))
}

/// A QP state by name (`RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`; any case).
pub(super) fn state_of(name: &str) -> PyResult<QpState> {
    Ok(match name.to_ascii_uppercase().as_str() {
        "RESET" => QpState::Reset,
        "INIT" => QpState::Init,
        "RTR" => QpState::Rtr,
        "RTS" => QpState::Rts,
        "SQD" => QpState::Sqd,
        "SQE" => QpState::Sqe,
        "ERR" | "ERROR" => QpState::Err,
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown QP state {name:?} (RESET, INIT, RTR, RTS, SQD, SQE, ERR)"
            )))
        }
    })
}

/// A QP state's name as `state_of` reads it.
pub(super) fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::Sqe => "SQE",
        QpState::Err => "ERR",
    }
}

/// The path of a QP as a dict (the fields of `roce_stack::PathConfig`).
pub(super) fn path_dict<'py>(py: Python<'py>, p: &PathConfig) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("local", p.local.to_string())?;
    d.set_item("remote", p.remote.to_string())?;
    d.set_item("src_port", p.src_port)?;
    d.set_item("remote_src_port", p.remote_src_port)?;
    d.set_item("local_port", p.local_port)?;
    d.set_item("remote_port", p.remote_port)?;
    d.set_item("ecn", p.ecn.bits())?;
    d.set_item("verify_icrc", p.verify_icrc)?;
    Ok(d)
}

/// A `PathConfig` from a dict of its fields; the fields left out keep their defaults
/// (`PathConfig::default()`: 127.0.0.1 both ends, ports 0xc000/4791, ECT(0), ICRC checked).
pub(super) fn path_of(d: Option<&Bound<'_, PyDict>>) -> PyResult<PathConfig> {
    let mut p = PathConfig::default();
    let Some(d) = d else { return Ok(p) };
    for (k, v) in d.iter() {
        let key: String = k.extract()?;
        match key.as_str() {
            "local" => p.local = ip_of(&v)?,
            "remote" => p.remote = ip_of(&v)?,
            "src_port" => p.src_port = v.extract()?,
            "remote_src_port" => p.remote_src_port = v.extract()?,
            "local_port" => p.local_port = v.extract()?,
            "remote_port" => p.remote_port = v.extract()?,
            "ecn" => p.ecn = ecn(v.extract()?)?,
            "verify_icrc" => p.verify_icrc = v.extract()?,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "unknown path field {key:?} (local, remote, src_port, remote_src_port, \
                     local_port, remote_port, ecn, verify_icrc)"
                )))
            }
        }
    }
    Ok(p)
}

/// `(ip, port)` for Python.
pub(super) fn sockaddr_tuple(ip: IpAddr, port: u16) -> (String, u16) {
    (ip.to_string(), port)
}

/// A completion as a dict.
pub(super) fn completion_dict<'py>(
    py: Python<'py>,
    c: &Completion,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("wr_id", c.wr_id)?;
    d.set_item("status", format!("{:?}", c.status))?;
    d.set_item("status_code", c.status as u32)?;
    d.set_item("opcode", format!("{:?}", c.opcode))?;
    d.set_item("opcode_code", c.opcode as u32)?;
    d.set_item("byte_len", c.byte_len)?;
    d.set_item("imm", c.imm_data)?;
    d.set_item("invalidated_rkey", c.invalidated_rkey.map(|k| k.0))?;
    d.set_item("qp", c.qp_num.0)?;
    d.set_item("src_qp", c.src_qp.map(|q| q.0))?;
    d.set_item("src", c.src.map(|s| sockaddr_tuple(s.ip(), s.port())))?;
    Ok(d)
}

/// Counters (`QpStats`, `UdStats`: the stack's own `serde` names) as a dict; a QP's `drops`
/// also get their `total`.
pub(super) fn counters_dict<'py, T: serde::Serialize>(
    py: Python<'py>,
    s: &T,
) -> PyResult<Bound<'py, PyDict>> {
    let json = serde_json::to_vec(s).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(crate::pyjson::value(py, &json, &mut crate::pyjson::Strings::default())?.cast_into()?)
}

/// QP (or device) counters as a dict.
pub(super) fn stats_dict<'py>(py: Python<'py>, s: &QpStats) -> PyResult<Bound<'py, PyDict>> {
    let d = counters_dict(py, s)?;
    if let Some(drops) = d.get_item("drops")? {
        drops.set_item("total", s.drops.total())?;
    }
    Ok(d)
}

/// What `handle_datagram` did, as a dict: `delivery` (the `Delivery` variant), `qpn` (the QP
/// it names, if any), `refusal` and `reason` (for `Dropped`: where and why), `accepted`.
pub(super) fn delivery_dict<'py>(py: Python<'py>, d: &Delivery) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let (qpn, refusal, reason): (Option<Qpn>, Option<String>, Option<String>) = match d {
        Delivery::Connected(q) | Delivery::OutOfSequence(q) | Delivery::Datagram(q) => {
            (Some(*q), None, None)
        }
        Delivery::Dropped(r) => {
            let (q, why) = match r {
                Refusal::UnknownQp(q) => (Some(*q), None),
                Refusal::Qp { qpn, reason } => (Some(*qpn), Some(format!("{reason:?}"))),
                Refusal::Ud { qpn, reason } => (Some(*qpn), Some(format!("{reason:?}"))),
                Refusal::Management(why) => (None, Some(format!("{why:?}"))),
                _ => (None, None),
            };
            (q, Some(kind_of(r)), why)
        }
        _ => (None, None, None),
    };
    out.set_item("delivery", kind_of(d))?;
    out.set_item("qpn", qpn.map(|q| q.0))?;
    out.set_item("refusal", refusal)?;
    out.set_item("reason", reason)?;
    out.set_item("accepted", d.accepted())?;
    Ok(out)
}

/// The transport's default CNP interval in nanoseconds (`QpCaps::default().cnp_interval`).
pub(super) fn default_cnp_interval_ns() -> Option<u64> {
    QpCaps::default()
        .cnp_interval
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// RC/UC QP capacities from the keyword arguments of `create_qp`/`create_uc_qp`.
pub(super) struct Caps {
    pub(super) max_send_wr: u32,
    pub(super) max_recv_wr: u32,
    pub(super) max_msg_size: u32,
    pub(super) max_unacked_psns: u32,
    pub(super) ack_req_every: u32,
    pub(super) cnp_interval_ns: Option<u64>,
    pub(super) infinite_retry_at_7: bool,
}

impl From<Caps> for QpCaps {
    fn from(c: Caps) -> Self {
        Self {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_msg_size: c.max_msg_size,
            max_unacked_psns: c.max_unacked_psns,
            ack_req_every: c.ack_req_every,
            cnp_interval: c.cnp_interval_ns.map(Duration::from_nanos),
            infinite_retry_at_7: c.infinite_retry_at_7,
        }
    }
}

/// A remote buffer from the `remote_va`/`rkey` keyword arguments of `post_send`.
pub(super) fn remote(op: &str, va: Option<u64>, rkey: Option<u32>) -> PyResult<RemoteAddr> {
    match (va, rkey) {
        (Some(va), Some(rkey)) => Ok(RemoteAddr {
            va,
            rkey: RKey(rkey),
        }),
        _ => Err(PyValueError::new_err(format!(
            "{op} needs remote_va and rkey"
        ))),
    }
}

/// A required keyword argument of one operation of `post_send`.
pub(super) fn needs<T>(v: Option<T>, op: &str, what: &str) -> PyResult<T> {
    v.ok_or_else(|| PyValueError::new_err(format!("{op} needs {what}")))
}
