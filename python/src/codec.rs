//! Packets from Python: `build` (any BTH and extended-header combination into a whole
//! Ethernet/IPv4|IPv6/UDP frame with its ICRC), `parse` (one frame as the JSON line `roce
//! decode --json` prints for it), and the ICRC (`icrc`, `icrc_ok`, `with_icrc`).
use std::net::IpAddr;

use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use roce_pcap::{link, Decoder, OutputFormat, Record, Timestamp};
use roce_proto::frame::{FrameBuilder, IpParams, VlanTag};
use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, Ecn, FethRepr, Frame, IethRepr,
    ImmDt, Msn, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RKey, RdethRepr, RethRepr, Syndrome,
    XrcethRepr,
};

/// A `ValueError` naming what was wrong.
fn bad(what: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(what.to_string())
}

/// An opcode by name as `roce decode` prints it (`RC_SEND_ONLY`, `cnp`, case-insensitive) or
/// by number.
fn opcode(op: &Bound<'_, PyAny>) -> PyResult<Opcode> {
    if let Ok(n) = op.extract::<u8>() {
        return Ok(Opcode(n));
    }
    let s: String = op.extract()?;
    roce_pcap::parse_opcode(&s).ok_or_else(|| bad(format!("unknown opcode {s:?}")))
}

/// A header given as a dict: its field `key` (absent: `default`, else a `KeyError`).
fn field<'py, T: FromPyObjectOwned<'py>>(
    d: &Bound<'py, PyDict>,
    header: &str,
    key: &str,
    default: Option<T>,
) -> PyResult<T> {
    match d.get_item(key)? {
        Some(v) => v
            .extract()
            .map_err(|e| bad(format!("{header}.{key}: {}", Into::<PyErr>::into(e)))),
        None => default.ok_or_else(|| PyKeyError::new_err(format!("{header} needs {key:?}"))),
    }
}

/// A MAC address from `aa:bb:cc:dd:ee:ff` or 6 bytes.
fn mac(v: &Bound<'_, PyAny>) -> PyResult<[u8; 6]> {
    if let Ok(b) = v.extract::<Vec<u8>>() {
        if let Ok(a) = <[u8; 6]>::try_from(b.as_slice()) {
            return Ok(a);
        }
    }
    let s: String = v.extract()?;
    let parts: Vec<u8> = s
        .split([':', '-'])
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad(format!("not a MAC address: {s:?}")))?;
    <[u8; 6]>::try_from(parts.as_slice()).map_err(|_| bad(format!("not a MAC address: {s:?}")))
}

/// ECN by codepoint (0-3) or name (`not_ect`, `ect1`, `ect0`, `ce`).
fn ecn(v: &Bound<'_, PyAny>) -> PyResult<Ecn> {
    if let Ok(n) = v.extract::<u8>() {
        return match n {
            0 => Ok(Ecn::NotEct),
            1 => Ok(Ecn::Ect1),
            2 => Ok(Ecn::Ect0),
            3 => Ok(Ecn::Ce),
            _ => Err(bad(format!("ECN is 0-3, not {n}"))),
        };
    }
    let s: String = v.extract()?;
    match s.to_ascii_lowercase().replace(['-', '(', ')'], "").as_str() {
        "notect" | "not_ect" => Ok(Ecn::NotEct),
        "ect1" => Ok(Ecn::Ect1),
        "ect0" | "ect" => Ok(Ecn::Ect0),
        "ce" => Ok(Ecn::Ce),
        _ => Err(bad(format!("unknown ECN {s:?} (not_ect, ect1, ect0, ce)"))),
    }
}

/// A frame: a RoCEv2 packet of `opcode` in Ethernet/IPv4 (or IPv6, from the addresses)/UDP,
/// with its ICRC (and the pad count its payload needs, unless `pad_count` is given).
/// Extended headers are dicts with the field names of `roce decode --json`; the ones the
/// opcode needs must be given.
#[pyfunction]
#[pyo3(signature = (
    opcode, *, dest_qp=0, psn=0, payload=None, ack_req=false, solicited=false, migreq=false,
    pkey=0xffff, fecn=false, becn=None, tver=0, pad_count=None,
    reth=None, aeth=None, atomic_eth=None, atomic_ack_eth=None, deth=None, immdt=None,
    ieth=None, rdeth=None, xrceth=None, feth=None,
    src="192.168.10.1", dst="192.168.10.2", udp_sport=0xc000, udp_dport=4791,
    src_mac=None, dst_mac=None, vlan=None, pcp=0, dscp=0, ecn=None, ttl=64,
    udp_checksum=false
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn build<'py>(
    py: Python<'py>,
    opcode: &Bound<'py, PyAny>,
    dest_qp: u32,
    psn: u32,
    payload: Option<Vec<u8>>,
    ack_req: bool,
    solicited: bool,
    migreq: bool,
    pkey: u16,
    fecn: bool,
    becn: Option<bool>,
    tver: u8,
    pad_count: Option<u8>,
    reth: Option<Bound<'py, PyDict>>,
    aeth: Option<Bound<'py, PyDict>>,
    atomic_eth: Option<Bound<'py, PyDict>>,
    atomic_ack_eth: Option<Bound<'py, PyDict>>,
    deth: Option<Bound<'py, PyDict>>,
    immdt: Option<u32>,
    ieth: Option<u32>,
    rdeth: Option<u32>,
    xrceth: Option<u32>,
    feth: Option<u32>,
    src: &str,
    dst: &str,
    udp_sport: u16,
    udp_dport: u16,
    src_mac: Option<Bound<'py, PyAny>>,
    dst_mac: Option<Bound<'py, PyAny>>,
    vlan: Option<u16>,
    pcp: u8,
    dscp: u8,
    ecn: Option<Bound<'py, PyAny>>,
    ttl: u8,
    udp_checksum: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let op = self::opcode(opcode)?;
    if dest_qp > 0xff_ffff || psn > 0xff_ffff {
        return Err(bad("dest_qp and psn are 24-bit"));
    }
    if tver > 15 || pad_count.is_some_and(|p| p > 3) || dscp > 63 || pcp > 7 {
        return Err(bad("tver is 0-15, pad_count 0-3, dscp 0-63 and pcp 0-7"));
    }
    let payload = payload.unwrap_or_default();
    let reth = reth
        .map(|d| -> PyResult<_> {
            Ok(RethRepr {
                va: field(&d, "reth", "va", Some(0))?,
                rkey: RKey(field(&d, "reth", "rkey", Some(0))?),
                dma_len: field(&d, "reth", "dma_len", Some(payload.len() as u32))?,
            })
        })
        .transpose()?;
    let aeth = aeth
        .map(|d| -> PyResult<_> {
            Ok(AethRepr {
                syndrome: Syndrome(field(
                    &d,
                    "aeth",
                    "syndrome",
                    Some(Syndrome::ACK_UNLIMITED.0),
                )?),
                msn: Msn(field(&d, "aeth", "msn", Some(0))?),
            })
        })
        .transpose()?;
    let atomic_eth = atomic_eth
        .map(|d| -> PyResult<_> {
            Ok(AtomicEthRepr {
                va: field(&d, "atomic_eth", "va", Some(0))?,
                rkey: RKey(field(&d, "atomic_eth", "rkey", Some(0))?),
                swap_add: field(&d, "atomic_eth", "swap_add", Some(0))?,
                compare: field(&d, "atomic_eth", "compare", Some(0))?,
            })
        })
        .transpose()?;
    let atomic_ack_eth = atomic_ack_eth
        .map(|d| -> PyResult<_> {
            Ok(AtomicAckEthRepr {
                orig_data: field(&d, "atomic_ack_eth", "orig_data", None)?,
            })
        })
        .transpose()?;
    let deth = deth
        .map(|d| -> PyResult<_> {
            Ok(DethRepr {
                qkey: QKey(field(&d, "deth", "qkey", None)?),
                resv: 0,
                src_qp: Qpn(field(&d, "deth", "src_qp", None)?),
            })
        })
        .transpose()?;
    let packet = PacketRepr {
        bth: BthRepr {
            opcode: op,
            solicited,
            migreq,
            pad_count: pad_count.unwrap_or_else(|| PacketRepr::pad_for(payload.len())),
            tver,
            pkey: PKey(pkey),
            fecn,
            becn: becn.unwrap_or(op == Opcode::CNP),
            dest_qp: Qpn(dest_qp),
            ack_req,
            psn: Psn::new(psn),
            ..BthRepr::default()
        },
        rdeth: rdeth.map(|ee_context| RdethRepr {
            resv: 0,
            ee_context,
        }),
        deth,
        xrceth: xrceth.map(|xrc_srq| XrcethRepr {
            resv: 0,
            xrc_srq: Qpn(xrc_srq),
        }),
        feth: feth.map(|word| FethRepr { word }),
        reth,
        atomic_eth,
        aeth,
        atomic_ack_eth,
        immdt: immdt.map(ImmDt),
        ieth: ieth.map(|rkey| IethRepr { rkey: RKey(rkey) }),
        payload: &payload,
    };
    let ip = |s: &str| -> PyResult<IpAddr> {
        s.parse()
            .map_err(|_| bad(format!("not an IP address: {s:?}")))
    };
    let mut b = match (ip(src)?, ip(dst)?) {
        (IpAddr::V4(s), IpAddr::V4(d)) => FrameBuilder::ipv4(s.octets(), d.octets(), udp_sport),
        (IpAddr::V6(s), IpAddr::V6(d)) => FrameBuilder::ipv6(s.octets(), d.octets(), udp_sport),
        _ => return Err(bad("src and dst must both be IPv4 or both IPv6")),
    };
    b.dst_port = udp_dport;
    b.udp_checksum = udp_checksum;
    if let Some(m) = src_mac {
        b.src_mac = mac(&m)?;
    }
    if let Some(m) = dst_mac {
        b.dst_mac = mac(&m)?;
    }
    if let Some(vid) = vlan {
        if vid > 0xfff {
            return Err(bad("vlan is a 12-bit VLAN ID"));
        }
        b.vlans[0] = Some(VlanTag {
            tpid: 0x8100,
            pcp,
            dei: false,
            vid,
        });
    }
    let e = ecn.map(|e| self::ecn(&e)).transpose()?;
    match &mut b.ip {
        IpParams::V4 {
            dscp: d,
            ecn: en,
            ttl: t,
            ..
        } => {
            *d = dscp;
            *t = ttl;
            if let Some(e) = e {
                *en = e;
            }
        }
        IpParams::V6 {
            traffic_class,
            hop_limit,
            ..
        } => {
            let e = e.unwrap_or(Ecn::Ect0);
            *traffic_class = (dscp << 2) | e as u8;
            *hop_limit = ttl;
        }
    }
    let mut buf = vec![0u8; b.frame_len(&packet)];
    let n = b.build(&packet, &mut buf).map_err(bad)?;
    buf.truncate(n);
    Ok(PyBytes::new(py, &buf))
}

/// `frame` (an Ethernet frame, or another link type's record) as the JSON line `roce decode
/// --json` prints for it, frame number 1 at time 0.
#[pyfunction]
#[pyo3(signature = (frame, *, link_type=1))]
pub(crate) fn parse_json<'py>(
    py: Python<'py>,
    frame: &[u8],
    link_type: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut d = Decoder::new(roce_pcap::Options {
        format: OutputFormat::Json,
        all: true,
        ..Default::default()
    });
    let rec = Record {
        ts: Timestamp { secs: 0, nanos: 0 },
        ts_digits: 9,
        link_type,
        interface: 0,
        orig_len: u32::try_from(frame.len()).unwrap_or(u32::MAX),
        data: frame,
        offset: 0,
    };
    let mut out = Vec::new();
    d.record(&rec, &mut out)
        .and_then(|()| d.flush(&mut out))
        .map_err(bad)?;
    Ok(PyBytes::new(py, &out))
}

/// The RoCEv2 frame of `frame` (Ethernet, or raw IP with `link_type=101`).
fn roce_frame(frame: &[u8], link_type: u32) -> PyResult<Frame<'_>> {
    link::parse(link_type, frame).map_err(|e| bad(format!("not a RoCE frame: {e}")))
}

/// The ICRC `frame` should carry (computed over its headers and transport bytes, IBTA Vol 1
/// Annex A17.3.3), as the 32-bit value `roce decode` prints.
#[pyfunction]
#[pyo3(signature = (frame, *, link_type=1))]
pub(crate) fn icrc(frame: &[u8], link_type: u32) -> PyResult<u32> {
    roce_frame(frame, link_type)?
        .computed_icrc()
        .map_err(|e| bad(format!("no ICRC to compute: {e}")))
}

/// `True` when the ICRC `frame` carries is the one its bytes give.
#[pyfunction]
#[pyo3(signature = (frame, *, link_type=1))]
pub(crate) fn icrc_ok(frame: &[u8], link_type: u32) -> PyResult<bool> {
    roce_frame(frame, link_type)?
        .verify_icrc()
        .map_err(|e| bad(format!("no ICRC to check: {e}")))
}

/// `frame` with its ICRC recomputed (after editing its bytes, or a frame scapy built): the
/// last four bytes of the transport are replaced.
#[pyfunction]
#[pyo3(signature = (frame, *, link_type=1))]
pub(crate) fn with_icrc<'py>(
    py: Python<'py>,
    frame: &[u8],
    link_type: u32,
) -> PyResult<Bound<'py, PyBytes>> {
    let f = roce_frame(frame, link_type)?;
    let value = f
        .computed_icrc()
        .map_err(|e| bad(format!("no ICRC to compute: {e}")))?;
    // The transport is a sub-slice of `frame`: its end is where the ICRC sits.
    let end = f.transport.as_ptr() as usize - frame.as_ptr() as usize + f.transport.len();
    let mut out = frame.to_vec();
    out[end - 4..end].copy_from_slice(&value.to_le_bytes());
    Ok(PyBytes::new(py, &out))
}
