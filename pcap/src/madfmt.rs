//! The management plane in every output format: MADs (IBTA Vol 1 §13.4) carried in UD SENDs to
//! QP0 and QP1, their subnet-management and subnet-administration headers, and every field of
//! the CM messages (ch. 12) with RDMA-CM's service IDs and `cma_hdr` (Annex A11) decoded.
use std::io::Write;
use std::net::{IpAddr, Ipv6Addr};

use roce_proto::cm::{self, CmPath, MessageKind, MessageView, Value};
use roce_proto::mad::{self, MgmtClass, Repr as MadRepr, SaRepr, SmpRepr};
use roce_proto::rdma_cm::{self, CmaHdr};
use roce_proto::RocePacket;

use crate::digits::{dec, hex, ipv4};

/// The MAD bytes a packet carries, when it is one: a UD SEND to or from QP0 or QP1 (the rule
/// Wireshark uses too) with at least the 24-byte common header. `payload` may be shorter than
/// 256 bytes in a capture cut by its snap length.
pub(crate) fn mad_bytes<'a>(p: &RocePacket<&'a [u8]>, payload: &'a [u8]) -> Option<&'a [u8]> {
    let deth = p.deth()?;
    if p.bth().dest_qp().0 > 1 && deth.src_qp().0 > 1 {
        return None;
    }
    (payload.len() >= mad::HEADER_LEN).then_some(payload)
}

/// What a MAD decodes to.
pub(crate) struct Mad<'a> {
    pub(crate) header: MadRepr,
    pub(crate) bytes: &'a [u8],
}

impl<'a> Mad<'a> {
    pub(crate) fn parse(bytes: &'a [u8]) -> Option<Self> {
        let p = mad::Packet::new_checked(bytes).ok()?;
        Some(Self {
            header: MadRepr::parse(&p).ok()?,
            bytes,
        })
    }

    /// The CM message, when this is a whole CM MAD of a kind with fields.
    pub(crate) fn cm(&self) -> Option<MessageView<'a>> {
        if self.header.mgmt_class != MgmtClass::CM || self.bytes.len() < mad::MAD_LEN {
            return None;
        }
        MessageView::parse(self.header.attribute_id, &self.bytes[mad::HEADER_LEN..])?.ok()
    }

    fn smp(&self) -> Option<SmpRepr> {
        self.header
            .mgmt_class
            .is_subn_mgt()
            .then(|| SmpRepr::parse(self.bytes).ok())
            .flatten()
    }

    fn sa(&self) -> Option<SaRepr> {
        (self.header.mgmt_class == MgmtClass::SUBN_ADM)
            .then(|| SaRepr::parse(self.bytes).ok())
            .flatten()
    }
}

/// The prefix Wireshark and the IBTA use for a class's methods in one word: `SubnGet`,
/// `SubnAdmGetResp`, `PerfMgtGet`, `CMSend`.
fn class_word(c: MgmtClass) -> Option<&'static str> {
    Some(match c.0 {
        0x01 | 0x81 => "Subn",
        0x03 => "SubnAdm",
        0x04 => "PerfMgt",
        0x05 => "BM",
        0x06 => "DevMgt",
        0x08 => "SNMP",
        0x10 => "DevAdm",
        0x11 => "BootMgt",
        0x21 => "CongMgt",
        _ => return None,
    })
}

fn gid_text(g: &[u8; 16]) -> String {
    Ipv6Addr::from(*g).to_string()
}

/// ` CM REQ comm_id=… qpn=… psn=… mtu=… svc=tcp:18515 src -> dst` / ` SubnGet(SMInfo) tid=…`.
pub(crate) fn summary(out: &mut Vec<u8>, m: &Mad<'_>) {
    let h = &m.header;
    out.push(b' ');
    if let Some(msg) = m.cm() {
        summary_cm(out, &msg);
        return;
    }
    if h.mgmt_class == MgmtClass::CM {
        let name = MessageKind::from_attribute(h.attribute_id).map_or("attr", MessageKind::name);
        let _ = write!(out, "CM {name}");
        if MessageKind::from_attribute(h.attribute_id).is_none() {
            let _ = write!(out, "={:#06x}", h.attribute_id);
        }
    } else {
        match (class_word(h.mgmt_class), h.method.name()) {
            (Some(c), Some(meth)) => {
                let _ = write!(out, "{c}{meth}(");
            }
            _ => {
                let _ = write!(
                    out,
                    "MAD class={:#04x} method={:#04x}(",
                    h.mgmt_class.0, h.method.0
                );
            }
        }
        match h.attribute_name() {
            Some(a) => out.extend_from_slice(a.as_bytes()),
            None => hex(out, u64::from(h.attribute_id), 4),
        }
        out.push(b')');
    }
    out.extend_from_slice(b" tid=");
    hex(out, h.transaction_id, 16);
    // A directed-route SMP's top status bit is its direction (D), not a status.
    let status = if h.mgmt_class == MgmtClass::SUBN_DIRECTED_ROUTE {
        if h.status.0 & 0x8000 != 0 {
            out.extend_from_slice(b" D=1");
        }
        h.status.0 & 0x7fff
    } else {
        h.status.0
    };
    if status != 0 {
        let _ = write!(out, " status={status:#06x}");
    }
}

fn summary_cm(out: &mut Vec<u8>, msg: &MessageView<'_>) {
    out.extend_from_slice(b"CM ");
    out.extend_from_slice(msg.kind().name().as_bytes());
    match msg {
        MessageView::ClassPortInfo(_) => {}
        MessageView::SidrReq(_) | MessageView::SidrRep(_) => {
            out.extend_from_slice(b" request_id=");
            hex(out, msg.local_comm_id().into(), 8);
        }
        _ => {
            out.extend_from_slice(b" comm_id=");
            hex(out, msg.local_comm_id().into(), 8);
        }
    }
    if let Some(r) = msg.remote_comm_id() {
        out.extend_from_slice(b" remote_comm_id=");
        hex(out, r.into(), 8);
    }
    let qpn_psn = |out: &mut Vec<u8>, qpn: u32, psn: u32| {
        out.extend_from_slice(b" qpn=");
        hex(out, qpn.into(), 6);
        out.extend_from_slice(b" psn=");
        hex(out, psn.into(), 6);
    };
    let name_or_number = |out: &mut Vec<u8>, name: Option<&str>, v: u64| match name {
        Some(n) => out.extend_from_slice(n.as_bytes()),
        None => dec(out, v),
    };
    match msg {
        MessageView::Req(r) => {
            qpn_psn(out, r.local_qpn(), r.starting_psn());
            if let Some(b) = cm::path_mtu_bytes(r.path_packet_payload_mtu()) {
                out.extend_from_slice(b" mtu=");
                dec(out, b.into());
            }
            out.push(b' ');
            out.extend_from_slice(
                cm::transport_service_name(r.transport_service_type()).as_bytes(),
            );
            let sid = r.service_id();
            service(out, sid);
            if rdma_cm::service_port(sid).is_some() {
                if let Ok(Some(c)) = CmaHdr::parse(r.private_data()) {
                    out.push(b' ');
                    ip(out, c.src);
                    out.extend_from_slice(b" -> ");
                    ip(out, c.dst);
                }
            }
        }
        MessageView::Rep(r) => qpn_psn(out, r.local_qpn(), r.starting_psn()),
        MessageView::Rej(r) => {
            out.extend_from_slice(b" reason=");
            name_or_number(out, cm::rej_reason_name(r.reason()), r.reason().into());
            let rejected =
                ["REQ", "REP", "none", "reserved"][usize::from(r.message_rejected() & 3)];
            out.extend_from_slice(b" rejected=");
            out.extend_from_slice(rejected.as_bytes());
        }
        MessageView::Mra(r) => {
            let what = ["REQ", "REP", "LAP", "reserved"][usize::from(r.message_mraed() & 3)];
            out.extend_from_slice(b" mraed=");
            out.extend_from_slice(what.as_bytes());
            out.extend_from_slice(b" service_timeout=");
            dec(out, r.service_timeout().into());
        }
        MessageView::Dreq(r) => {
            out.extend_from_slice(b" remote_qpn=");
            hex(out, r.remote_qpn_eecn().into(), 6);
        }
        MessageView::SidrReq(r) => service(out, r.service_id()),
        MessageView::SidrRep(r) => {
            out.extend_from_slice(b" qpn=");
            hex(out, r.qpn().into(), 6);
            out.extend_from_slice(b" qkey=");
            hex(out, r.q_key().into(), 8);
            out.extend_from_slice(b" status=");
            name_or_number(out, cm::sidr_status_name(r.status()), r.status().into());
        }
        MessageView::Apr(r) => {
            out.extend_from_slice(b" status=");
            name_or_number(
                out,
                cm::apr_status_name(r.ap_status()),
                r.ap_status().into(),
            );
        }
        MessageView::Rtu(_) | MessageView::Drep(_) | MessageView::Lap(_) => {}
        MessageView::ClassPortInfo(c) => {
            out.extend_from_slice(b" capability_mask=");
            hex(out, c.capability_mask().into(), 4);
            out.extend_from_slice(b" resp_time_value=");
            dec(out, c.resp_time_value().into());
        }
    }
}

/// An address as `Display` writes it, IPv4 without the formatter.
fn ip(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(a) => ipv4(out, a.octets()),
        IpAddr::V6(a) => {
            let _ = write!(out, "{a}");
        }
    }
}

fn service(out: &mut Vec<u8>, sid: u64) {
    out.extend_from_slice(b" svc=");
    match rdma_cm::service_port(sid) {
        Some((space, port)) => {
            out.extend_from_slice(space.name().unwrap_or("?").as_bytes());
            out.push(b':');
            dec(out, port.into());
        }
        None => hex(out, sid, 16),
    }
}

/// A JSON writer's interface, as much as this module needs (implemented by `format`).
pub(crate) trait JsonObj {
    /// `"k":v` with a number.
    fn num(&mut self, k: &str, v: u64);
    /// `"k":"v"`.
    fn string(&mut self, k: &str, v: &str);
    /// `"k":{...}` filled by `f`.
    fn object(&mut self, k: &str, f: &mut dyn FnMut(&mut dyn JsonObj));
    /// `"k":"…"` with `b` as lowercase hex.
    fn hex(&mut self, k: &str, b: &[u8]);
    /// `"k":"…"` with a GID as an IPv6 address.
    fn gid(&mut self, k: &str, g: &[u8; 16]);
}

/// A GID as `Ipv6Addr`'s `Display` writes it, without the formatter for the two forms RoCE
/// uses all the time: all zero (`::`) and IPv4-mapped (`::ffff:a.b.c.d`).
pub(crate) fn gid(out: &mut Vec<u8>, g: &[u8; 16]) {
    if g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff {
        out.extend_from_slice(b"::ffff:");
        ipv4(out, [g[12], g[13], g[14], g[15]]);
    } else if g.iter().all(|&b| b == 0) {
        out.extend_from_slice(b"::");
    } else {
        let _ = write!(out, "{}", Ipv6Addr::from(*g));
    }
}

fn json_value(o: &mut dyn JsonObj, k: &'static str, v: Value<'_>) {
    match v {
        Value::Uint { value, .. } => o.num(k, value),
        Value::Gid(g) => o.gid(k, g),
        Value::Bytes(b) => o.hex(k, b),
        Value::Path(p) => o.object(k, &mut |c| path_json(c, p)),
    }
}

fn path_json(o: &mut dyn JsonObj, p: &CmPath) {
    p.visit(&mut |k, v| json_value(o, k, v));
}

/// The `mad` object (and `cm`, `smp`, `sa` when the class has one) of a JSON line.
pub(crate) fn json(o: &mut dyn JsonObj, m: &Mad<'_>) {
    let h = m.header;
    o.object("mad", &mut |c| {
        c.num("base_version", h.base_version.into());
        c.num("mgmt_class", h.mgmt_class.0.into());
        if let Some(n) = h.mgmt_class.name() {
            c.string("mgmt_class_name", n);
        }
        c.num("class_version", h.class_version.into());
        c.num("method", h.method.0.into());
        if let Some(n) = h.method.name() {
            c.string("method_name", n);
        }
        c.num("status", h.status.0.into());
        c.num("class_specific", h.class_specific.into());
        c.num("transaction_id", h.transaction_id);
        c.num("attribute_id", h.attribute_id.into());
        if let Some(n) = h.attribute_name() {
            c.string("attribute_name", n);
        }
        c.num("attribute_modifier", h.attribute_modifier.into());
        c.num("captured_len", m.bytes.len() as u64);
    });
    if let Some(s) = m.smp() {
        o.object("smp", &mut |c| {
            c.num("m_key", s.m_key);
            if s.directed {
                c.num("direction", u64::from(s.direction));
                c.num("hop_pointer", s.hop_pointer.into());
                c.num("hop_count", s.hop_count.into());
                c.num("dr_slid", s.dr_slid.into());
                c.num("dr_dlid", s.dr_dlid.into());
            }
        });
    }
    if let Some(s) = m.sa() {
        o.object("sa", &mut |c| {
            c.num("rmpp_type", s.rmpp.rmpp_type.into());
            c.num("sm_key", s.sm_key);
            c.num("attribute_offset", s.attribute_offset.into());
            c.num("component_mask", s.component_mask);
        });
    }
    if let Some(msg) = m.cm() {
        o.object("cm", &mut |c| {
            c.string("message", msg.kind().name());
            msg.visit(&mut |k, v| json_value(c, k, v));
            cm_meanings_json(c, &msg);
        });
    }
}

/// The decoded meanings beside the raw fields: MTU in bytes, reason names, the RDMA-CM port
/// space and port, the `cma_hdr` addresses.
fn cm_meanings_json(c: &mut dyn JsonObj, msg: &MessageView<'_>) {
    match msg {
        MessageView::Req(r) => {
            if let Some(b) = cm::path_mtu_bytes(r.path_packet_payload_mtu()) {
                c.num("path_mtu_bytes", b.into());
            }
            c.string(
                "transport_service",
                cm::transport_service_name(r.transport_service_type()),
            );
            rdma_cm_json(c, r.service_id(), Some(r.private_data()));
        }
        MessageView::SidrReq(r) => rdma_cm_json(c, r.service_id(), Some(r.private_data())),
        MessageView::Rej(r) => {
            if let Some(n) = cm::rej_reason_name(r.reason()) {
                c.string("reason_name", n);
            }
        }
        MessageView::SidrRep(r) => {
            if let Some(n) = cm::sidr_status_name(r.status()) {
                c.string("status_name", n);
            }
        }
        MessageView::Apr(r) => {
            if let Some(n) = cm::apr_status_name(r.ap_status()) {
                c.string("ap_status_name", n);
            }
        }
        _ => {}
    }
}

fn rdma_cm_json(c: &mut dyn JsonObj, sid: u64, private: Option<&[u8]>) {
    let Some((space, port)) = rdma_cm::service_port(sid) else {
        return;
    };
    c.object("rdma_cm", &mut |r| {
        r.string("port_space", space.name().unwrap_or("?"));
        r.num("port", port.into());
        if let Some(Ok(Some(h))) = private.map(CmaHdr::parse) {
            r.num("cma_version", h.version.into());
            r.num("ip_version", h.ip_version.into());
            r.num("src_port", h.port.into());
            r.string("src", &h.src.to_string());
            r.string("dst", &h.dst.to_string());
        }
    });
}

/// The MAD, SMP/SA and CM sections of the verbose tree.
pub(crate) fn verbose(out: &mut Vec<u8>, m: &Mad<'_>) -> std::io::Result<()> {
    let h = m.header;
    writeln!(out, "  MAD ({} bytes)", m.bytes.len())?;
    writeln!(out, "    base_version: {}", h.base_version)?;
    writeln!(
        out,
        "    mgmt_class: {:#04x} ({})",
        h.mgmt_class.0,
        h.mgmt_class.name().unwrap_or("reserved")
    )?;
    writeln!(out, "    class_version: {}", h.class_version)?;
    writeln!(
        out,
        "    method: {:#04x} ({}{})",
        h.method.0,
        h.method.name().unwrap_or("unknown"),
        if h.method.is_response() {
            ", response"
        } else {
            ""
        }
    )?;
    write!(out, "    status: {:#06x}", h.status.0)?;
    let mut notes = Vec::new();
    if h.status.busy() {
        notes.push("busy");
    }
    if h.status.redirect() {
        notes.push("redirect");
    }
    if let Some(n) = h.status.invalid_field_name() {
        notes.push(n);
    }
    if !notes.is_empty() {
        write!(out, " ({})", notes.join(", "))?;
    }
    writeln!(out)?;
    writeln!(out, "    class_specific: {:#06x}", h.class_specific)?;
    writeln!(out, "    transaction_id: {:#018x}", h.transaction_id)?;
    writeln!(
        out,
        "    attribute_id: {:#06x} ({})",
        h.attribute_id,
        h.attribute_name().unwrap_or("unknown")
    )?;
    writeln!(
        out,
        "    attribute_modifier: {:#010x}",
        h.attribute_modifier
    )?;
    if m.bytes.len() < mad::MAD_LEN {
        writeln!(out, "    (cut: {} of 256 bytes captured)", m.bytes.len())?;
    }
    if let Some(s) = m.smp() {
        writeln!(
            out,
            "  SMP ({})",
            if s.directed {
                "directed route"
            } else {
                "LID-routed"
            }
        )?;
        writeln!(out, "    m_key: {:#018x}", s.m_key)?;
        if s.directed {
            writeln!(
                out,
                "    direction: {} ({})",
                u8::from(s.direction),
                if s.direction { "returning" } else { "outbound" }
            )?;
            writeln!(out, "    hop_pointer: {}", s.hop_pointer)?;
            writeln!(out, "    hop_count: {}", s.hop_count)?;
            writeln!(out, "    dr_slid: {:#06x}", s.dr_slid)?;
            writeln!(out, "    dr_dlid: {:#06x}", s.dr_dlid)?;
        }
    }
    if let Some(s) = m.sa() {
        writeln!(out, "  SA")?;
        writeln!(
            out,
            "    rmpp: version {}, type {}, flags {:#x}, status {}",
            s.rmpp.version, s.rmpp.rmpp_type, s.rmpp.flags, s.rmpp.status
        )?;
        writeln!(out, "    sm_key: {:#018x}", s.sm_key)?;
        writeln!(
            out,
            "    attribute_offset: {} ({} bytes per record)",
            s.attribute_offset,
            usize::from(s.attribute_offset) * 8
        )?;
        writeln!(out, "    component_mask: {:#018x}", s.component_mask)?;
    }
    if let Some(msg) = m.cm() {
        writeln!(
            out,
            "  CM {} ({})",
            msg.kind().name(),
            msg.kind().long_name()
        )?;
        let mut err = Ok(());
        msg.visit(&mut |k, v| {
            if err.is_ok() {
                err = verbose_value(out, "    ", k, v, &msg);
            }
        });
        err?;
    }
    Ok(())
}

fn verbose_value(
    out: &mut Vec<u8>,
    indent: &str,
    k: &'static str,
    v: Value<'_>,
    msg: &MessageView<'_>,
) -> std::io::Result<()> {
    match v {
        Value::Uint { value, bits } => {
            write!(out, "{indent}{k}: ")?;
            if bits >= 16 {
                write!(out, "{value:#0w$x}", w = (bits as usize).div_ceil(4) + 2)?;
                if bits <= 24 {
                    write!(out, " ({value})")?;
                }
            } else {
                write!(out, "{value}")?;
            }
            if let Some(m) = meaning(k, value, msg) {
                write!(out, " ({m})")?;
            }
            writeln!(out)
        }
        Value::Gid(g) => writeln!(out, "{indent}{k}: {}", gid_text(g)),
        Value::Bytes(b) => {
            let used = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
            write!(out, "{indent}{k}: {} bytes", b.len())?;
            if used == 0 {
                writeln!(out, ", all zero")?;
            } else {
                write!(out, ": ")?;
                for x in &b[..used.min(64)] {
                    write!(out, "{x:02x}")?;
                }
                if used > 64 {
                    write!(out, "…")?;
                }
                writeln!(out)?;
            }
            if k == "private_data" {
                if let MessageView::Req(r) = msg {
                    rdma_cm_verbose(out, indent, r.service_id(), b)?;
                }
                if let MessageView::SidrReq(r) = msg {
                    rdma_cm_verbose(out, indent, r.service_id(), b)?;
                }
            }
            Ok(())
        }
        Value::Path(p) => {
            writeln!(out, "{indent}{k}:")?;
            let mut err = Ok(());
            let inner = format!("{indent}  ");
            p.visit(&mut |k2, v2| {
                if err.is_ok() {
                    err = verbose_value(out, &inner, k2, v2, msg);
                }
            });
            err
        }
    }
}

fn rdma_cm_verbose(
    out: &mut Vec<u8>,
    indent: &str,
    sid: u64,
    private: &[u8],
) -> std::io::Result<()> {
    if rdma_cm::service_port(sid).is_none() {
        return Ok(());
    }
    if let Ok(Some(h)) = CmaHdr::parse(private) {
        writeln!(out, "{indent}  RDMA-CM cma_hdr")?;
        writeln!(out, "{indent}    cma_version: {}", h.version)?;
        writeln!(out, "{indent}    ip_version: {}", h.ip_version)?;
        writeln!(out, "{indent}    src_port: {}", h.port)?;
        writeln!(out, "{indent}    src: {}", h.src)?;
        writeln!(out, "{indent}    dst: {}", h.dst)?;
    }
    Ok(())
}

/// The meaning of a field value, when it has one beyond the number.
fn meaning(k: &str, v: u64, msg: &MessageView<'_>) -> Option<String> {
    let v8 = v as u8;
    Some(match k {
        "service_id" => {
            let (space, port) = rdma_cm::service_port(v)?;
            format!("RDMA-CM {} port {port}", space.name()?)
        }
        "path_packet_payload_mtu" => format!("{} bytes", cm::path_mtu_bytes(v8)?),
        "transport_service_type" => cm::transport_service_name(v8).to_string(),
        "remote_cm_response_timeout"
        | "local_cm_response_timeout"
        | "local_ack_timeout"
        | "service_timeout"
        | "target_ack_delay" => duration(cm::timeout_ns(v8)),
        "packet_rate" => cm::rate_name(v8)?.to_string(),
        "rnr_retry_count" if v == 7 => "infinite".to_string(),
        "reason" if matches!(msg, MessageView::Rej(_)) => {
            cm::rej_reason_name(v as u16)?.to_string()
        }
        "status" if matches!(msg, MessageView::SidrRep(_)) => cm::sidr_status_name(v8)?.to_string(),
        "ap_status" => cm::apr_status_name(v8)?.to_string(),
        "message_rejected" => ["REQ", "REP", "no message", "reserved"][usize::from(v8 & 3)].into(),
        "message_mraed" => ["REQ", "REP", "LAP", "reserved"][usize::from(v8 & 3)].into(),
        _ => return None,
    })
}

fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} us", ns as f64 / 1e3)
    }
}

/// `--mad-class` and `--cm-comm-id`: does this packet's MAD pass?
pub(crate) fn matches(m: Option<&Mad<'_>>, class: Option<MgmtClass>, comm_id: Option<u32>) -> bool {
    let Some(m) = m else {
        return class.is_none() && comm_id.is_none();
    };
    if class.is_some_and(|c| {
        // `smp` takes both subnet-management classes.
        !(m.header.mgmt_class == c || (c.is_subn_mgt() && m.header.mgmt_class.is_subn_mgt()))
    }) {
        return false;
    }
    match comm_id {
        None => true,
        Some(id) => m
            .cm()
            .is_some_and(|msg| msg.local_comm_id() == id || msg.remote_comm_id() == Some(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_are_written_as_std_writes_ipv6_addresses() {
        let mut cases: Vec<[u8; 16]> = vec![[0; 16], [0xff; 16]];
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        for tail in [
            [0, 0, 0, 0],
            [192, 168, 10, 1],
            [255, 255, 255, 255],
            [10, 0, 0, 9],
        ] {
            mapped[12..].copy_from_slice(&tail);
            cases.push(mapped);
            let mut compat = [0u8; 16];
            compat[12..].copy_from_slice(&tail);
            cases.push(compat);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u128;
        for _ in 0..100 {
            x = x.rotate_left(13) ^ x.wrapping_mul(0x2545_f491_4f6c_dd1d);
            cases.push(x.to_be_bytes());
            let mut near = mapped;
            near[9] = x as u8 | 1;
            cases.push(near);
        }
        for g in cases {
            let mut out = Vec::new();
            gid(&mut out, &g);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                Ipv6Addr::from(g).to_string()
            );
        }
    }
}
