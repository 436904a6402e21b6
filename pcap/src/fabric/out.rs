//! The outputs of an MRC or UET packet: the summary line (a selection of its values), the
//! JSON object and the verbose tree (sinks of the field walk).
use std::io::Write;
use std::net::IpAddr;

use roce_proto::mrc::{self, Body, MrcOpcode};
use roce_proto::uet::{self, ses, Pds, Ses};
use roce_proto::{Ecn, Error};

use super::packet::{Packet, Transport};
use super::walk::{walk, Fields};
use crate::digits::{dec, dec_pad, hex, hex_bytes};
use crate::format::time;
use crate::reader::Timestamp;

pub(crate) fn addr(out: &mut Vec<u8>, a: IpAddr, port: Option<u16>) {
    match a {
        IpAddr::V4(v) => crate::digits::ipv4(out, v.octets()),
        IpAddr::V6(v) if port.is_some() => {
            let _ = write!(out, "[{v}]");
        }
        IpAddr::V6(v) => {
            let _ = write!(out, "{v}");
        }
    }
    if let Some(p) = port {
        out.push(b':');
        dec(out, u64::from(p));
    }
}

/// One summary line.
pub fn summary(out: &mut Vec<u8>, frame_no: u64, rel: Timestamp, digits: u8, p: &Packet) {
    dec_pad(out, frame_no, 6, b' ');
    out.push(b' ');
    time(out, rel, digits);
    out.push(b' ');
    let (sp, dp) = p
        .ends
        .ports
        .map_or((None, None), |(s, d)| (Some(s), Some(d)));
    addr(out, p.ends.src, sp);
    out.extend_from_slice(b" -> ");
    addr(out, p.ends.dst, dp);
    out.push(b' ');
    let mut line = Summary { out, first: true };
    match (&p.mrc, &p.uet) {
        (Some(h), _) => summary_mrc(&mut line, p, h),
        (_, Some(h)) => summary_uet(&mut line, h),
        _ => {}
    }
    if p.ends.ecn == Ecn::Ce {
        line.out.extend_from_slice(b" CE");
    }
    match p.icrc_ok {
        Some(false) => line.out.extend_from_slice(b" [bad ICRC]"),
        None if p.transport == Transport::Mrc => line.out.extend_from_slice(b" [cut]"),
        _ => {}
    }
    line.out.push(b'\n');
}

struct Summary<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl Summary<'_> {
    fn word(&mut self, s: &str) {
        if !self.first {
            self.out.push(b' ');
        }
        self.first = false;
        self.out.extend_from_slice(s.as_bytes());
    }
    /// The headers, or `None` after saying why they could not be read.
    fn headers<'h, T>(&mut self, h: &'h Result<T, Error>) -> Option<&'h T> {
        match h {
            Ok(h) => Some(h),
            Err(e) => {
                self.word("[malformed:");
                self.word(&e.to_string());
                self.out.push(b']');
                None
            }
        }
    }
    fn kv(&mut self, k: &str, v: u64) {
        self.word(k);
        self.out.push(b'=');
        dec(self.out, v);
    }
    fn kx(&mut self, k: &str, v: u64, digits: u32) {
        self.word(k);
        self.out.push(b'=');
        hex(self.out, v, digits);
    }
}

fn summary_mrc(l: &mut Summary<'_>, p: &Packet, h: &Result<mrc::Headers, Error>) {
    l.word("MRC");
    let Some(b) = &p.bth else {
        l.word("[malformed]");
        return;
    };
    match MrcOpcode::from_opcode(b.opcode) {
        Some(op) => l.word(op.name()),
        None => l.kx("opcode", u64::from(b.opcode.0), 2),
    }
    l.kx("qp", u64::from(b.dest_qp.0), 6);
    l.kv("psn", u64::from(b.psn.value()));
    let Some(h) = l.headers(h) else {
        return;
    };
    if h.flags.rtx(p.reading.flags) {
        l.word("RTX");
    }
    match h.body {
        Body::Write {
            meth,
            tseth,
            reth,
            imm,
        } => {
            l.kv("msn", u64::from(meth.msn));
            if let Some(t) = tseth {
                l.kv("ts", u64::from(t.tx_timestamp));
            }
            l.kx("va", reth.va, 16);
            l.kx("rkey", u64::from(reth.rkey.0), 8);
            l.kv("dma_len", u64::from(reth.dma_len));
            if let Some(i) = imm {
                l.kx("imm", u64::from(i.0), 8);
            }
            l.kv("len", p.payload_len as u64);
        }
        Body::Ack(a) => {
            l.word(a.syndrome.kind().name());
            l.kv("msn", u64::from(a.msn.0));
        }
        Body::EndpointRequest(e) => {
            l.word(e.op().name());
            l.kx("ports", u64::from(e.port_status_mask), 8);
        }
        Body::EndpointResponse(e) => l.kv("op", u64::from(e.op())),
        Body::Sack(s, c) => {
            l.kv("cack", u64::from(s.cack_psn.value()));
            l.kv("ack", u64::from(s.ack_psn().value()));
            l.kv("sack_base", u64::from(s.sack_base().value()));
            l.kx("bitmap", s.sack_bitmap, 16);
            l.kx("ev", u64::from(s.entropy), 8);
            if s.skip() != mrc::SkipMode::None {
                l.word(s.skip().name());
            }
            if s.probe_response() {
                l.word("PR");
            }
            l.kv("mpr", u64::from(s.mpr));
            l.kv("ooo", u64::from(c.ooo_count));
            l.kv("pen", u64::from(c.rcv_cwnd_pen));
        }
        Body::Nack(n) => {
            match n.reason().name() {
                Some(name) => l.word(name),
                None => l.kx("reason", u64::from(n.nack_reason), 2),
            }
            l.kv("nack_psn", u64::from(n.nack_psn.value()));
            l.kx("ev", u64::from(n.entropy), 8);
        }
        Body::Probe(pe) => l.kv("probe_id", u64::from(pe.probe_id)),
    }
}

fn summary_uet(l: &mut Summary<'_>, h: &Result<uet::Headers, Error>) {
    l.word("UET");
    let Some(h) = l.headers(h) else {
        return;
    };
    if h.tss.is_some() {
        l.word("TSS");
    }
    let pro = h.pds.prologue();
    l.word(pro.pds_type().name().unwrap_or("unknown"));
    match h.pds {
        Pds::Request(r, _) => {
            l.kv("psn", u64::from(r.psn));
            l.kv("spdcid", u64::from(r.spdcid));
            if pro.flags() & 0x04 != 0 {
                l.word("SYN");
                l.kv("start_psn", u64::from(r.start_psn()));
            } else {
                l.kv("dpdcid", u64::from(r.dpdcid));
            }
        }
        Pds::Rudi(r) => l.kv("pkt_id", u64::from(r.pkt_id)),
        Pds::Uud(_) => {}
        Pds::Ack(a, cc) => {
            l.kv("cack", u64::from(a.cack_psn));
            if let Some(p) = a.ack_psn() {
                l.kv("ack", u64::from(p));
            } else {
                l.word("P");
            }
            l.kv("spdcid", u64::from(a.spdcid));
            l.kv("dpdcid", u64::from(a.dpdcid));
            if let Some(c) = cc {
                l.kv("sack_base", u64::from(c.sack_base(a.cack_psn)));
                l.kx("bitmap", c.sack_bitmap, 16);
            }
        }
        Pds::AckCcx(a, _) => {
            l.kv("cack", u64::from(a.cack_psn));
            l.kv("dpdcid", u64::from(a.dpdcid));
        }
        Pds::Nack(n, _) => {
            match n.code().name() {
                Some(name) => l.word(name),
                None => l.kx("code", u64::from(n.nack_code), 2),
            }
            l.kv("nack_psn", u64::from(n.nack_psn));
            l.kv("dpdcid", u64::from(n.dpdcid));
        }
        Pds::Control(c) => {
            l.word(c.control_type().name().unwrap_or("unknown"));
            l.kv("psn", u64::from(c.psn));
            l.kx("payload", u64::from(c.payload), 8);
        }
    }
    if pro.retx() {
        l.word("RETX");
    }
    match &h.ses {
        Some(Ses::RequestStd(r, _)) => ses_request(l, &r.common, Some(r.request_length)),
        Some(Ses::RequestMedium(r, _)) => ses_request(l, &r.common, None),
        Some(Ses::RequestSmall(r, _)) => ses_request(l, &r.common, None),
        Some(Ses::Response(r)) => ses_response(l, &r.common),
        Some(Ses::ResponseData(r)) => ses_response(l, &r.common),
        Some(Ses::ResponseDataSmall(r)) => {
            l.word("|");
            l.word(
                uet::ReturnCode::from_bits(r.byte1)
                    .name()
                    .unwrap_or("unknown"),
            );
        }
        None => {}
    }
}

fn ses_request(l: &mut Summary<'_>, c: &ses::Common, len: Option<u32>) {
    l.word("|");
    l.word(c.opcode().name().unwrap_or("unknown"));
    l.kv("msg", u64::from(c.message_id));
    l.kv("job", u64::from(c.job_id));
    if let Some(n) = len {
        l.kv("len", u64::from(n));
    }
    match (c.start_of_msg(), c.end_of_msg()) {
        (true, true) => l.word("SOM+EOM"),
        (true, false) => l.word("SOM"),
        (false, true) => l.word("EOM"),
        _ => {}
    }
}

fn ses_response(l: &mut Summary<'_>, c: &ses::ResponseCommon) {
    l.word("|");
    l.word(c.return_code().name().unwrap_or("unknown"));
    l.kv("msg", u64::from(c.message_id));
}

/// The JSON sink: a flat object.
struct Json<'o> {
    obj: crate::format::Obj<'o>,
}

impl Fields for Json<'_> {
    fn header(&mut self, _: &str, _: &str) {}
    fn num(&mut self, k: &str, v: u64) {
        self.obj.num(k, v);
    }
    fn int(&mut self, k: &str, v: i64) {
        let o = self.obj.key(k);
        if v < 0 {
            o.push(b'-');
        }
        dec(o, v.unsigned_abs());
    }
    fn hex(&mut self, k: &str, v: u64, _: u32) {
        self.obj.num(k, v);
    }
    fn flag(&mut self, k: &str, v: bool) {
        self.obj.boolean(k, v);
    }
    fn text(&mut self, k: &str, v: &str) {
        self.obj.string(k, v);
    }
    fn bytes(&mut self, k: &str, v: &[u8]) {
        let o = self.obj.key(k);
        o.push(b'"');
        hex_bytes(o, v);
        o.push(b'"');
    }
}

/// One JSON object (and a newline): `frame`, `ts`, `transport`, `src`, `dst`, `src_port`,
/// `dst_port` (UDP), `ecn`, every field by its dotted name, `payload_len`, and for MRC
/// `icrc_ok`.
pub fn json(out: &mut Vec<u8>, frame_no: u64, ts: Timestamp, digits: u8, p: &Packet) {
    let mut obj = crate::format::Obj::open(out);
    obj.num("frame", frame_no);
    time(obj.key("ts"), ts, digits);
    obj.string("transport", p.transport.name());
    for (k, a) in [("src", p.ends.src), ("dst", p.ends.dst)] {
        let o = obj.key(k);
        o.push(b'"');
        addr(o, a, None);
        o.push(b'"');
    }
    if let Some((s, d)) = p.ends.ports {
        obj.num("src_port", u64::from(s));
        obj.num("dst_port", u64::from(d));
    }
    obj.string("ecn", p.ends.ecn.name());
    let mut j = Json { obj };
    walk(p, &mut j);
    let mut obj = j.obj;
    obj.num("payload_len", p.payload_len as u64);
    if let Some(ok) = p.icrc_ok {
        obj.boolean("icrc_ok", ok);
    }
    obj.close();
    out.push(b'\n');
}

/// The tree sink: a title line per header, then one line per field, named without the
/// header's prefix.
struct Tree<'o> {
    out: &'o mut Vec<u8>,
    prefix: String,
}

impl Tree<'_> {
    fn line(&mut self, k: &str) {
        let short = k
            .strip_prefix(self.prefix.as_str())
            .map_or(k, |s| s.trim_start_matches('.'));
        let short = if short.is_empty() { k } else { short };
        self.out.extend_from_slice(b"    ");
        self.out.extend_from_slice(short.as_bytes());
        self.out.extend_from_slice(b": ");
    }
}

impl Fields for Tree<'_> {
    fn header(&mut self, title: &str, prefix: &str) {
        self.out.extend_from_slice(b"  ");
        self.out.extend_from_slice(title.as_bytes());
        self.out.push(b'\n');
        self.prefix = prefix.to_string();
    }
    fn num(&mut self, k: &str, v: u64) {
        self.line(k);
        dec(self.out, v);
        self.out.push(b'\n');
    }
    fn int(&mut self, k: &str, v: i64) {
        self.line(k);
        self.out.extend_from_slice(v.to_string().as_bytes());
        self.out.push(b'\n');
    }
    fn hex(&mut self, k: &str, v: u64, digits: u32) {
        self.line(k);
        hex(self.out, v, digits);
        self.out.push(b'\n');
    }
    fn flag(&mut self, k: &str, v: bool) {
        self.line(k);
        self.out.push(if v { b'1' } else { b'0' });
        self.out.push(b'\n');
    }
    fn text(&mut self, k: &str, v: &str) {
        self.line(k);
        self.out.extend_from_slice(v.as_bytes());
        self.out.push(b'\n');
    }
    fn bytes(&mut self, k: &str, v: &[u8]) {
        self.line(k);
        hex_bytes(self.out, v);
        self.out.push(b'\n');
    }
}

/// The tree of every header and field.
pub fn verbose(
    out: &mut Vec<u8>,
    frame_no: u64,
    ts: Timestamp,
    rel: Timestamp,
    digits: u8,
    p: &Packet,
) {
    out.extend_from_slice(b"Frame ");
    dec(out, frame_no);
    out.extend_from_slice(b": ");
    out.extend_from_slice(p.transport.name().to_uppercase().as_bytes());
    out.extend_from_slice(b", time ");
    time(out, ts, digits);
    out.extend_from_slice(b" (+");
    time(out, rel, digits);
    out.extend_from_slice(b")\n  IP\n    src: ");
    addr(out, p.ends.src, None);
    out.extend_from_slice(b"\n    dst: ");
    addr(out, p.ends.dst, None);
    out.extend_from_slice(b"\n    dscp: ");
    dec(out, u64::from(p.ends.dscp));
    out.extend_from_slice(b"\n    ecn: ");
    out.extend_from_slice(p.ends.ecn.name().as_bytes());
    out.push(b'\n');
    if let Some((s, d)) = p.ends.ports {
        out.extend_from_slice(b"  UDP\n    src_port: ");
        dec(out, u64::from(s));
        out.extend_from_slice(b" (entropy)\n    dst_port: ");
        dec(out, u64::from(d));
        out.push(b'\n');
    }
    let mut t = Tree {
        out,
        prefix: String::new(),
    };
    walk(p, &mut t);
    out.extend_from_slice(b"  payload_len: ");
    dec(out, p.payload_len as u64);
    out.push(b'\n');
    if let Some(ok) = p.icrc_ok {
        out.extend_from_slice(if ok {
            b"  ICRC: ok\n".as_slice()
        } else {
            b"  ICRC: BAD\n".as_slice()
        });
    }
    out.push(b'\n');
}
