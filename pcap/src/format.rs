//! Output formats: the one-line summary, the verbose tree, and JSON lines.
//!
//! Every writer appends to a caller-owned `Vec<u8>` that is reused from packet to packet, so
//! the hot path allocates nothing: numbers are written digit by digit, names are
//! `&'static str`, and addresses are written digit by digit.
use crate::digits::{dec, dec_pad, hex, hex8, hex_bytes, hex_digits, ipv4, HEX};
use crate::reader::Timestamp;
use roce_proto::aeth::AethKind;
use roce_proto::frame::RoceVersion;
use roce_proto::{grh, lrh, Error, Frame, Opcode, RocePacket};
use std::io::Write;
use std::net::IpAddr;

mod verbose;
pub use verbose::verbose;

/// A RoCE packet as decoded, ready to be written in any format.
#[derive(Debug, Clone, Copy)]
pub struct Decoded<'a> {
    /// 1-based frame number in the input.
    pub frame_no: u64,
    /// Absolute time stamp.
    pub ts: Timestamp,
    /// Time since the first packet of the input.
    pub rel: Timestamp,
    /// Time stamp precision in decimal digits (6 or 9).
    pub ts_digits: u8,
    /// Captured length.
    pub caplen: usize,
    /// Length on the wire.
    pub orig_len: u32,
    /// Link type.
    pub link_type: u32,
    /// The frame, when the link and network layers parsed.
    pub frame: Option<&'a Frame<'a>>,
    /// The transport packet, or why it could not be decoded.
    pub packet: Result<RocePacket<&'a [u8]>, Error>,
    /// ICRC check (`None` when the packet is not whole).
    pub icrc_ok: Option<bool>,
    /// A non-fatal conformance problem (TVer ≠ 0, length not a multiple of 4, pad ≠ 0).
    pub conformance: Option<Error>,
    /// The frame was cut by the capture's snap length (`packet` is then the error saying
    /// where): every header captured is decoded, the ICRC is not captured.
    pub snap: Option<SnapCut>,
    /// A Mellanox/NVIDIA Dynamically Connected packet (opcodes 0x40-0x5f unless `--rd`):
    /// `packet` is then the packet without the DC bytes after the BTH, read with the RD
    /// header layout, and this holds those bytes.
    pub dc: Option<DcBytes<'a>>,
}

/// The bytes a DC packet carries between its BTH and the RD-layout extended headers (the
/// layout Wireshark decodes DC with: 8 bytes, and 16 more on a "DC connect" opcode 0x55
/// without SE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DcBytes<'a> {
    /// The 8 bytes after the BTH (mlx5 addresses a DC target with a 64-bit DC access key
    /// and a DCT number; which of them these are is not published).
    pub dceth: &'a [u8],
    /// The 16-byte connect header of opcode 0x55 without SE.
    pub connect: Option<&'a [u8]>,
}

/// What is known of a frame cut by the snap length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapCut {
    /// The payload length the frame's own headers imply (IP/UDP or LRH/GRH lengths, minus
    /// the transport headers, pad and ICRC), when its BTH was captured.
    pub implied_payload_len: Option<usize>,
    /// When the record's lengths were rewritten to what was kept (its original length is
    /// not longer than the record, the frame's own lengths say it was): the frame's length
    /// on the wire by its own headers.
    pub wire_len: Option<usize>,
}

impl<'a> Decoded<'a> {
    /// `true` when the packet is malformed (could not be fully decoded, and not because the
    /// snap length cut it).
    pub fn is_malformed(&self) -> bool {
        self.packet.is_err() && self.snap.is_none()
    }

    /// The payload bytes that were captured (all of them for a whole packet).
    pub(crate) fn captured_payload(&self) -> Option<&'a [u8]> {
        match &self.packet {
            Ok(p) => Some(p.payload_ref()),
            Err(_) => {
                let f = self.frame?;
                let t = f.transport;
                let op = Opcode(*t.first()?);
                let hl = op.header_len();
                let pad = usize::from((*t.get(1)? >> 4) & 3);
                let end = f
                    .claimed_len
                    .saturating_sub(roce_proto::ICRC_LEN + pad)
                    .min(t.len());
                t.get(hl..end.max(hl))
            }
        }
    }

    /// The MAD this packet carries (QP0/QP1), as much of it as was captured.
    pub(crate) fn mad(&self) -> Option<crate::madfmt::Mad<'a>> {
        let p = header_view(self)?;
        let bytes = crate::madfmt::mad_bytes(&p, self.captured_payload()?)?;
        crate::madfmt::Mad::parse(bytes)
    }
    /// `true` when the ICRC was checked and is wrong.
    pub fn icrc_bad(&self) -> bool {
        self.icrc_ok == Some(false)
    }
}

/// A time stamp as every output writes it: `secs.frac` with 9 fractional digits when
/// `digits` is 9 or more, else 6 (`-` before negative seconds, as recorded). The JSON lines'
/// `ts`, so the Python package makes its float from the same text.
pub fn time(out: &mut Vec<u8>, t: Timestamp, digits: u8) {
    if t.secs < 0 {
        out.push(b'-');
    }
    dec(out, t.secs.unsigned_abs());
    out.push(b'.');
    if digits >= 9 {
        dec_pad(out, u64::from(t.nanos), 9, b'0');
    } else {
        dec_pad(out, u64::from(t.nanos / 1000), 6, b'0');
    }
}

fn ip(out: &mut Vec<u8>, a: IpAddr) {
    match a {
        IpAddr::V4(v4) => ipv4(out, v4.octets()),
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

fn gid(out: &mut Vec<u8>, g: [u8; 16]) {
    let _ = write!(out, "{}", std::net::Ipv6Addr::from(g));
}

/// Source (`which = 0`) or destination endpoint: `ip:port` (`[v6]:port`), a GID, or `lid:N`.
pub(crate) fn endpoint(out: &mut Vec<u8>, f: &Frame<'_>, src: bool) {
    if let (Some(i), Some(u)) = (&f.ip, &f.udp) {
        let a = if src { i.src } else { i.dst };
        let port = if src { u.src_port } else { u.dst_port };
        if a.is_ipv6() {
            out.push(b'[');
            ip(out, a);
            out.push(b']');
        } else {
            ip(out, a);
        }
        out.push(b':');
        dec(out, u64::from(port));
    } else if let Some(g) = f.grh {
        let g = grh::Packet::new_unchecked(g);
        gid(out, if src { g.sgid() } else { g.dgid() });
    } else if let Some(l) = f.lrh {
        let l = lrh::Packet::new_unchecked(l);
        out.extend_from_slice(b"lid:");
        dec(out, u64::from(if src { l.slid() } else { l.dlid() }));
    } else {
        out.push(b'?');
    }
}

/// The endpoint texts of the last two RoCEv2 conversations seen (both directions of one
/// connection, typically), so runs of packets between the same endpoints format them once.
#[derive(Debug, Default)]
pub struct EndpointCache {
    slots: [Option<CachedEndpoints>; 2],
    next: usize,
}

#[derive(Debug)]
struct CachedEndpoints {
    key: (IpAddr, u16, IpAddr, u16),
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl EndpointCache {
    /// Writes the source (`src = true`) or destination endpoint of `f`.
    pub(crate) fn write(&mut self, out: &mut Vec<u8>, f: &Frame<'_>, src: bool) {
        let (Some(ip), Some(udp)) = (&f.ip, &f.udp) else {
            endpoint(out, f, src);
            return;
        };
        let key = (ip.src, udp.src_port, ip.dst, udp.dst_port);
        let hit = self
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.key == key));
        let i = match hit {
            Some(i) => i,
            None => {
                let i = self.next;
                self.next = (i + 1) % self.slots.len();
                let slot = self.slots[i].get_or_insert_with(|| CachedEndpoints {
                    key,
                    src: Vec::with_capacity(48),
                    dst: Vec::with_capacity(48),
                });
                slot.key = key;
                slot.src.clear();
                slot.dst.clear();
                endpoint(&mut slot.src, f, true);
                endpoint(&mut slot.dst, f, false);
                i
            }
        };
        if let Some(slot) = &self.slots[i] {
            out.extend_from_slice(if src { &slot.src } else { &slot.dst });
        }
    }
}

/// Writes the opcode name (`RC_SEND_FIRST`, `CNP`, `UNKNOWN_0x18`).
pub(crate) fn opcode_name(out: &mut Vec<u8>, op: Opcode, dc: bool) {
    if op == Opcode::CNP {
        out.extend_from_slice(b"CNP");
        return;
    }
    match op.operation_name() {
        Some(n) => {
            let t = if dc { "DC" } else { op.transport().name() };
            out.extend_from_slice(t.as_bytes());
            out.push(b'_');
            out.extend_from_slice(n.as_bytes());
        }
        None => {
            out.extend_from_slice(b"UNKNOWN_");
            hex(out, u64::from(op.0), 2);
        }
    }
}

pub(crate) fn error_text(out: &mut Vec<u8>, e: &Error) {
    let _ = write!(out, "{e}");
}

/// The headers of a transport packet whose headers are all present, even if the payload was
/// cut: the view to read extended headers from.
pub(crate) fn header_view<'a>(d: &Decoded<'a>) -> Option<RocePacket<&'a [u8]>> {
    match d.packet {
        Ok(p) => Some(p),
        Err(_) => {
            let t = d.frame?.transport;
            let op = Opcode(*t.first()?);
            (t.len() >= op.header_len()).then(|| RocePacket::new_unchecked(t))
        }
    }
}

// ---------------------------------------------------------------- summary

/// One summary line: number, relative time, endpoints, opcode, QP, PSN, key extended-header
/// fields, payload length, and marks for bad ICRC or malformed packets.
pub fn summary(out: &mut Vec<u8>, d: &Decoded<'_>, cache: &mut EndpointCache) {
    dec_pad(out, d.frame_no, 6, b' ');
    out.push(b' ');
    time(out, d.rel, d.ts_digits);
    out.push(b' ');
    let Some(f) = d.frame else {
        out.extend_from_slice(b"RoCE [malformed: ");
        if let Err(e) = &d.packet {
            error_text(out, e);
        }
        out.extend_from_slice(b"]\n");
        return;
    };
    cache.write(out, f, true);
    out.extend_from_slice(b" -> ");
    cache.write(out, f, false);
    if f.version != RoceVersion::V2 {
        out.push(b' ');
        out.extend_from_slice(f.version.name().as_bytes());
    }
    if let Some(bth) = f.bth() {
        out.push(b' ');
        opcode_name(out, bth.opcode, d.dc.is_some());
        out.extend_from_slice(b" qp=");
        hex(out, u64::from(bth.dest_qp.0), 6);
        out.extend_from_slice(b" psn=");
        dec(out, u64::from(bth.psn.value()));
        if bth.ack_req {
            out.extend_from_slice(b" A");
        }
        if bth.solicited {
            out.extend_from_slice(b" SE");
        }
        if bth.fecn {
            out.extend_from_slice(b" FECN");
        }
        if bth.becn {
            out.extend_from_slice(b" BECN");
        }
    }
    if f.ecn() == roce_proto::Ecn::Ce {
        out.extend_from_slice(b" CE");
    }
    if let Some(dc) = d.dc {
        out.extend_from_slice(b" dceth=");
        hex_bytes(out, dc.dceth);
        if dc.connect.is_some() {
            out.extend_from_slice(b" connect");
        }
    }
    if let Some(p) = header_view(d) {
        if let Some(h) = p.deth() {
            out.extend_from_slice(b" qkey=");
            hex(out, u64::from(h.qkey().0), 8);
            out.extend_from_slice(b" src_qp=");
            hex(out, u64::from(h.src_qp().0), 6);
        }
        if let Some(h) = p.reth() {
            out.extend_from_slice(b" va=");
            hex(out, h.va(), 16);
            out.extend_from_slice(b" rkey=");
            hex(out, u64::from(h.rkey().0), 8);
            out.extend_from_slice(b" dma_len=");
            dec(out, u64::from(h.dma_len()));
        }
        if let Some(h) = p.atomic_eth() {
            out.extend_from_slice(b" va=");
            hex(out, h.va(), 16);
            out.extend_from_slice(b" rkey=");
            hex(out, u64::from(h.rkey().0), 8);
            out.extend_from_slice(b" swap_add=");
            hex(out, h.swap_add(), 16);
            out.extend_from_slice(b" compare=");
            hex(out, h.compare(), 16);
        }
        if let Some(h) = p.aeth() {
            let k = h.syndrome().kind();
            out.push(b' ');
            out.extend_from_slice(k.name().as_bytes());
            out.push(b'=');
            dec(out, u64::from(k.value()));
            if let AethKind::Nak(c) = k {
                out.push(b'(');
                out.extend_from_slice(c.name().as_bytes());
                out.push(b')');
            }
            out.extend_from_slice(b" msn=");
            dec(out, u64::from(h.msn().0));
        }
        if let Some(h) = p.atomic_ack_eth() {
            out.extend_from_slice(b" orig=");
            hex(out, h.orig_data(), 16);
        }
        if let Some(h) = p.immdt() {
            out.extend_from_slice(b" imm=");
            hex(out, u64::from(h.0), 8);
        }
        if let Some(h) = p.ieth() {
            out.extend_from_slice(b" inv_rkey=");
            hex(out, u64::from(h.rkey.0), 8);
        }
    }
    if let Some(m) = d.mad() {
        crate::madfmt::summary(out, &m);
    }
    match &d.packet {
        Ok(p) => {
            out.extend_from_slice(b" len=");
            dec(out, p.payload().len() as u64);
            if d.icrc_bad() {
                out.extend_from_slice(b" [ICRC BAD]");
            }
        }
        Err(_) if d.snap.is_some() => {
            let captured = d.captured_payload().map_or(0, <[u8]>::len);
            if let Some(n) = d.snap.and_then(|s| s.implied_payload_len) {
                out.extend_from_slice(b" len=");
                dec(out, n as u64);
            }
            out.extend_from_slice(b" [snap: ");
            dec(out, d.caplen as u64);
            out.extend_from_slice(b" of ");
            match d.snap.and_then(|s| s.wire_len) {
                Some(wire) => {
                    dec(out, wire as u64);
                    out.extend_from_slice(b" bytes captured (record length rewritten), payload ");
                }
                None => {
                    dec(out, u64::from(d.orig_len));
                    out.extend_from_slice(b" bytes captured, payload ");
                }
            }
            dec(out, captured as u64);
            out.push(b']');
        }
        Err(e) => {
            out.extend_from_slice(b" [malformed: ");
            error_text(out, e);
            out.push(b']');
        }
    }
    out.push(b'\n');
}

/// One line for a packet that is not RoCE (`--all`).
pub fn summary_other(
    out: &mut Vec<u8>,
    frame_no: u64,
    rel: Timestamp,
    digits: u8,
    len: usize,
    why: &Error,
) {
    dec_pad(out, frame_no, 6, b' ');
    out.push(b' ');
    time(out, rel, digits);
    out.extend_from_slice(b" [");
    error_text(out, why);
    out.extend_from_slice(b"] ");
    dec(out, len as u64);
    out.extend_from_slice(b" bytes\n");
}

// ---------------------------------------------------------------- JSON

pub(crate) struct Obj<'o> {
    out: &'o mut Vec<u8>,
    first: bool,
}

impl<'o> Obj<'o> {
    pub(crate) fn open(out: &'o mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, first: true }
    }
    pub(crate) fn key(&mut self, k: &str) -> &mut Vec<u8> {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(k.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }
    pub(crate) fn num(&mut self, k: &str, v: u64) {
        dec(self.key(k), v);
    }
    pub(crate) fn boolean(&mut self, k: &str, v: bool) {
        let s: &[u8] = if v { b"true" } else { b"false" };
        self.key(k).extend_from_slice(s);
    }
    pub(crate) fn string(&mut self, k: &str, v: &str) {
        let o = self.key(k);
        o.push(b'"');
        escape(o, v.as_bytes());
        o.push(b'"');
    }
    fn child(&mut self, k: &str) -> Obj<'_> {
        let o = self.key(k);
        Obj::open(o)
    }
    pub(crate) fn close(self) {
        self.out.push(b'}');
    }
}

fn escape(out: &mut Vec<u8>, s: &[u8]) {
    // Runs that need no escape go in one copy.
    let mut start = 0;
    for (i, &c) in s.iter().enumerate() {
        if c == b'"' || c == b'\\' || c < 0x20 {
            out.extend_from_slice(&s[start..i]);
            match c {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                c => {
                    out.extend_from_slice(b"\\u00");
                    hex_digits(out, u64::from(c), 2);
                }
            }
            start = i + 1;
        }
    }
    out.extend_from_slice(&s[start..]);
}

/// Writes a string value produced by `f` (quoted, and escaped since `f` writes only ASCII
/// without quotes or backslashes).
fn string_with(o: &mut Obj<'_>, k: &str, f: impl FnOnce(&mut Vec<u8>)) {
    let out = o.key(k);
    out.push(b'"');
    f(out);
    out.push(b'"');
}

/// One JSON object (and a newline) with exactly the keys of the `--json` contract (`docs/decode.md`):
/// `frame`, `ts`, `src`, `dst`, `ecn`, `version`, `bth{..}`, the extended headers present,
/// `payload_len`, `icrc` (wire order hex), `icrc_ok`, or `error` when the packet could not be
/// fully decoded. Integers are numbers, BTH flags booleans. Beyond RoCEv2: `version` is
/// `rocev1` (GRH) or `ib` (native InfiniBand, from ERF captures), and `src`/`dst` are then the
/// GRH GIDs, or `lid:N` when there is no GRH.
pub fn json(out: &mut Vec<u8>, d: &Decoded<'_>, cache: &mut EndpointCache) {
    let mut o = Obj::open(out);
    o.num("frame", d.frame_no);
    time(o.key("ts"), d.ts, d.ts_digits);
    if let Some(f) = d.frame {
        string_with(&mut o, "src", |b| cache.write(b, f, true));
        string_with(&mut o, "dst", |b| cache.write(b, f, false));
        o.string("ecn", f.ecn().name());
        o.string("version", f.version.name());
        if let Some(bth) = f.bth() {
            let mut b = o.child("bth");
            b.num("opcode", u64::from(bth.opcode.0));
            string_with(&mut b, "opcode_name", |x| {
                opcode_name(x, bth.opcode, d.dc.is_some())
            });
            b.boolean("se", bth.solicited);
            b.boolean("migreq", bth.migreq);
            b.num("pad_count", u64::from(bth.pad_count));
            b.num("tver", u64::from(bth.tver));
            b.num("pkey", u64::from(bth.pkey.0));
            b.boolean("fecn", bth.fecn);
            b.boolean("becn", bth.becn);
            b.num("dest_qp", u64::from(bth.dest_qp.0));
            b.boolean("ack_req", bth.ack_req);
            b.num("psn", u64::from(bth.psn.value()));
            b.close();
        }
        if let Some(dc) = d.dc {
            let mut c = o.child("dc");
            string_with(&mut c, "dceth", |b| hex_bytes(b, dc.dceth));
            if let Some(x) = dc.connect {
                string_with(&mut c, "connect", |b| hex_bytes(b, x));
            }
            c.close();
        }
        if let Some(p) = header_view(d) {
            if let Some(h) = p.rdeth() {
                let mut c = o.child("rdeth");
                c.num("ee_context", u64::from(h.ee_context));
                c.close();
            }
            if let Some(h) = p.reth() {
                let mut c = o.child("reth");
                c.num("va", h.va());
                c.num("rkey", u64::from(h.rkey().0));
                c.num("dma_len", u64::from(h.dma_len()));
                c.close();
            }
            if let Some(h) = p.aeth() {
                let s = h.syndrome();
                let mut c = o.child("aeth");
                c.num("syndrome", u64::from(s.0));
                c.string("kind", s.kind().name());
                c.num("value", u64::from(s.kind().value()));
                c.num("msn", u64::from(h.msn().0));
                c.close();
            }
            if let Some(h) = p.atomic_eth() {
                let mut c = o.child("atomic_eth");
                c.num("va", h.va());
                c.num("rkey", u64::from(h.rkey().0));
                c.num("swap_add", h.swap_add());
                c.num("compare", h.compare());
                c.close();
            }
            if let Some(h) = p.atomic_ack_eth() {
                let mut c = o.child("atomic_ack_eth");
                c.num("orig_data", h.orig_data());
                c.close();
            }
            if let Some(h) = p.immdt() {
                o.num("immdt", u64::from(h.0));
            }
            if let Some(h) = p.ieth() {
                let mut c = o.child("ieth");
                c.num("rkey", u64::from(h.rkey.0));
                c.close();
            }
            if let Some(h) = p.deth() {
                let mut c = o.child("deth");
                c.num("qkey", u64::from(h.qkey().0));
                c.num("src_qp", u64::from(h.src_qp().0));
                c.close();
            }
        }
    }
    if let Some(m) = d.mad() {
        crate::madfmt::json(&mut o, &m);
    }
    match &d.packet {
        Ok(p) => {
            o.num("payload_len", p.payload().len() as u64);
            string_with(&mut o, "icrc", |b| hex_bytes(b, &p.icrc_bytes()));
            if let Some(ok) = d.icrc_ok {
                o.boolean("icrc_ok", ok);
            }
        }
        Err(_) if d.snap.is_some() => {
            if let Some(n) = d.snap.and_then(|s| s.implied_payload_len) {
                o.num("payload_len", n as u64);
            }
            o.num(
                "captured_payload_len",
                d.captured_payload().map_or(0, <[u8]>::len) as u64,
            );
            o.string("icrc", "not_captured");
            o.boolean("snap_truncated", true);
            if let Some(wire) = d.snap.and_then(|s| s.wire_len) {
                o.num("wire_len", wire as u64);
            }
        }
        Err(e) => string_with(&mut o, "error", |b| {
            let at = b.len();
            error_text(b, e);
            // Reasons are static ASCII; escape defensively anyway.
            if b[at..].iter().any(|&c| c == b'"' || c == b'\\' || c < 0x20) {
                let raw = b.split_off(at);
                escape(b, &raw);
            }
        }),
    }
    o.close();
    out.push(b'\n');
}

/// A MAC address in the usual colon form.
pub(crate) fn mac(out: &mut Vec<u8>, m: [u8; 6]) {
    for (i, b) in m.iter().enumerate() {
        if i > 0 {
            out.push(b':');
        }
        hex_digits(out, u64::from(*b), 2);
    }
}

/// The summary line of a PAUSE or PFC frame: ` PFC src=MAC prio 3=65535 5=0` (0 resumes).
pub fn summary_mac_control(
    out: &mut Vec<u8>,
    frame_no: u64,
    rel: Timestamp,
    digits: u8,
    src: [u8; 6],
    mc: &roce_proto::mac_control::Repr,
) {
    use roce_proto::mac_control::Repr;
    dec_pad(out, frame_no, 6, b' ');
    out.push(b' ');
    time(out, rel, digits);
    out.push(b' ');
    match *mc {
        Repr::Pfc { enable, quanta } => {
            out.extend_from_slice(b"PFC src=");
            mac(out, src);
            out.extend_from_slice(b" prio");
            for (p, q) in quanta.iter().enumerate() {
                if enable & (1 << p) != 0 {
                    out.push(b' ');
                    dec(out, p as u64);
                    out.push(b'=');
                    dec(out, u64::from(*q));
                }
            }
            if enable == 0 {
                out.extend_from_slice(b" none");
            }
            out.extend_from_slice(b" quanta");
        }
        Repr::Pause { quanta } => {
            out.extend_from_slice(b"PAUSE src=");
            mac(out, src);
            out.extend_from_slice(b" quanta=");
            dec(out, u64::from(quanta));
        }
        Repr::Other { opcode } => {
            out.extend_from_slice(b"MAC Control src=");
            mac(out, src);
            out.extend_from_slice(b" opcode=");
            hex(out, u64::from(opcode), 4);
        }
    }
    out.push(b'\n');
}

/// The JSON line of a PAUSE or PFC frame: `mac_control` with `opcode`, `name`,
/// `class_enable` and `quanta` (PFC: eight, priority 0 first) or `quanta` (PAUSE).
pub fn json_mac_control(
    out: &mut Vec<u8>,
    frame_no: u64,
    ts: Timestamp,
    digits: u8,
    src: [u8; 6],
    mc: &roce_proto::mac_control::Repr,
) {
    use roce_proto::mac_control::Repr;
    let mut o = Obj::open(out);
    o.num("frame", frame_no);
    time(o.key("ts"), ts, digits);
    string_with(&mut o, "src_mac", |b| mac(b, src));
    let mut c = o.child("mac_control");
    match *mc {
        Repr::Pfc { enable, quanta } => {
            c.num("opcode", u64::from(roce_proto::mac_control::OPCODE_PFC));
            c.string("name", "PFC");
            c.num("class_enable", u64::from(enable));
            let q = c.key("quanta");
            q.push(b'[');
            for (i, x) in quanta.iter().enumerate() {
                if i > 0 {
                    q.push(b',');
                }
                dec(q, u64::from(*x));
            }
            q.push(b']');
        }
        Repr::Pause { quanta } => {
            c.num("opcode", u64::from(roce_proto::mac_control::OPCODE_PAUSE));
            c.string("name", "PAUSE");
            c.num("quanta", u64::from(quanta));
        }
        Repr::Other { opcode } => c.num("opcode", u64::from(opcode)),
    }
    c.close();
    o.close();
    out.push(b'\n');
}

/// A JSON line for a packet that is not RoCE (`--all`): `frame`, `ts`, `error`.
pub fn json_other(out: &mut Vec<u8>, frame_no: u64, ts: Timestamp, digits: u8, why: &Error) {
    let mut o = Obj::open(out);
    o.num("frame", frame_no);
    time(o.key("ts"), ts, digits);
    string_with(&mut o, "error", |b| error_text(b, why));
    o.close();
    out.push(b'\n');
}

impl crate::madfmt::JsonObj for Obj<'_> {
    fn num(&mut self, k: &str, v: u64) {
        Obj::num(self, k, v);
    }
    fn string(&mut self, k: &str, v: &str) {
        Obj::string(self, k, v);
    }
    fn object(&mut self, k: &str, f: &mut dyn FnMut(&mut dyn crate::madfmt::JsonObj)) {
        let mut c = self.child(k);
        f(&mut c);
        c.close();
    }
    fn gid(&mut self, k: &str, g: &[u8; 16]) {
        string_with(self, k, |out| crate::madfmt::gid(out, g));
    }
    fn hex(&mut self, k: &str, b: &[u8]) {
        // Straight into the line, four bytes at a time: private data is up to 224 bytes per
        // message.
        string_with(self, k, |out| {
            let at = out.len();
            let words = b.len() / 4;
            out.resize(at + 8 * words, 0);
            for (dst, w) in out[at..].chunks_exact_mut(8).zip(b.chunks_exact(4)) {
                dst.copy_from_slice(&hex8(u32::from_be_bytes([w[0], w[1], w[2], w[3]])));
            }
            for &x in &b[4 * words..] {
                hex_digits(out, x.into(), 2);
            }
        });
    }
}

/// `--mad-class` / `--cm-comm-id` on a decoded packet.
pub(crate) fn mad_matches(
    d: &Decoded<'_>,
    class: Option<roce_proto::mad::MgmtClass>,
    comm_id: Option<u32>,
) -> bool {
    crate::madfmt::matches(d.mad().as_ref(), class, comm_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = b"x".to_vec();
        f(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn hex_writer_matches_std_formatting() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        for _ in 0..200 {
            x = x.rotate_left(7) ^ x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for digits in 0..=20u32 {
                // What the field shows: the low `digits` hex digits, zero-padded.
                let low = if digits >= 16 {
                    x
                } else {
                    x & ((1u64 << (4 * digits)) - 1)
                };
                let want = if digits == 0 {
                    "x0x".to_string()
                } else {
                    format!("x{low:#0w$x}", w = digits as usize + 2)
                };
                assert_eq!(s(|o| hex(o, x, digits)), want, "{x:#x} {digits}");
            }
        }
    }

    #[test]
    fn decimal_writer_matches_std_formatting() {
        let mut x = 1u64;
        let mut cases = vec![0, 9, 10, 99, 100, 101, 999, 1000, u64::MAX, u64::MAX - 1];
        for _ in 0..200 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            cases.push(x >> (x % 64));
        }
        for v in cases {
            assert_eq!(s(|o| dec(o, v)), format!("x{v}"));
            assert_eq!(s(|o| dec_pad(o, v, 6, b' ')), format!("x{v:>6}"));
            assert_eq!(s(|o| dec_pad(o, v, 9, b'0')), format!("x{v:09}"));
        }
    }

    #[test]
    fn ipv4_writer_matches_std_formatting() {
        for o in [
            [0, 0, 0, 0],
            [255, 255, 255, 255],
            [10, 1, 16, 61],
            [192, 168, 100, 9],
        ] {
            let a = std::net::Ipv4Addr::from(o);
            assert_eq!(s(|v| ipv4(v, o)), format!("x{a}"));
        }
    }

    #[test]
    fn time_writer() {
        let t = Timestamp {
            secs: 12,
            nanos: 3_004_005,
        };
        assert_eq!(s(|o| time(o, t, 6)), "x12.003004");
        assert_eq!(s(|o| time(o, t, 9)), "x12.003004005");
        assert_eq!(s(|o| hex(o, 0xab, 6)), "x0x0000ab");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(s(|o| escape(o, b"a\"b\\c\n")), "xa\\\"b\\\\c\\u000a");
    }
}
