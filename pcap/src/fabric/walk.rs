//! Every field of an MRC or UET packet, walked once, in order, into a [`Fields`] sink.
use roce_proto::mrc::{self, Body, MrcOpcode};
use roce_proto::uet::{self, pds, ses, Pds, Ses};
use roce_proto::Error;

use super::packet::Packet;

/// Where a packet's fields go. Keys are full dotted names (`uet.pds.psn`); each header
/// begins with [`Fields::header`].
pub(crate) trait Fields {
    /// A header begins: its title, and the prefix its keys share.
    fn header(&mut self, title: &str, prefix: &str);
    /// An unsigned number.
    fn num(&mut self, key: &str, v: u64);
    /// A signed number.
    fn int(&mut self, key: &str, v: i64);
    /// A number best read in hex (shown `0x..` in the tree, a number in JSON).
    fn hex(&mut self, key: &str, v: u64, digits: u32);
    /// A flag.
    fn flag(&mut self, key: &str, v: bool);
    /// A name (of a code, a kind).
    fn text(&mut self, key: &str, v: &str);
    /// Raw bytes.
    fn bytes(&mut self, key: &str, v: &[u8]);
}

/// Walks every field of `p`.
pub(crate) fn walk(p: &Packet, f: &mut dyn Fields) {
    match (&p.mrc, &p.uet) {
        (Some(h), _) => walk_mrc(p, h, f),
        (_, Some(h)) => walk_uet(h, f),
        _ => {}
    }
}

fn walk_mrc(p: &Packet, h: &Result<mrc::Headers, Error>, f: &mut dyn Fields) {
    if let Some(b) = &p.bth {
        f.header("MRC BTH", "mrc.bth");
        f.hex("mrc.bth.opcode", u64::from(b.opcode.0), 2);
        if let Some(op) = MrcOpcode::from_opcode(b.opcode) {
            f.text("mrc.bth.opcode_name", op.name());
        }
        f.flag("mrc.bth.se", b.solicited);
        f.num("mrc.bth.pad_count", u64::from(b.pad_count));
        f.num("mrc.bth.pkey", u64::from(b.pkey.0));
        f.hex("mrc.bth.dest_qp", u64::from(b.dest_qp.0), 6);
        f.num("mrc.bth.psn", u64::from(b.psn.value()));
        let raw = (u8::from(b.ack_req) << 7) | b.resv7;
        let flags = mrc::BthFlags(raw);
        f.hex("mrc.bth.flags_raw", u64::from(raw), 2);
        f.flag("mrc.bth.ack_req", flags.ack_req());
        f.flag("mrc.bth.rtx", flags.rtx(p.reading.flags));
        if let Some(t) = flags.tseth(p.reading.flags) {
            f.flag("mrc.bth.ts", t);
        }
        f.text("mrc.bth.flag_reading", p.reading.flags.name());
        f.text("mrc.bth.tseth_rule", p.reading.tseth.name());
    }
    let h = match h {
        Ok(h) => h,
        Err(e) => {
            f.text("error", &e.to_string());
            return;
        }
    };
    match h.body {
        Body::Write {
            meth,
            tseth,
            reth,
            imm,
        } => {
            f.header("METH", "mrc.meth");
            f.num("mrc.meth.rqmsn", u64::from(meth.rqmsn));
            f.num("mrc.meth.msn", u64::from(meth.msn));
            if let Some(t) = tseth {
                f.header("TSETH", "mrc.tseth");
                f.num("mrc.tseth.tx_timestamp", u64::from(t.tx_timestamp));
                f.flag("mrc.tseth.tsr", t.word.tsr());
                f.num("mrc.tseth.ftype", u64::from(t.word.ftype()));
            }
            f.header("RETH", "mrc.reth");
            f.hex("mrc.reth.va", reth.va, 16);
            f.hex("mrc.reth.rkey", u64::from(reth.rkey.0), 8);
            f.num("mrc.reth.dma_len", u64::from(reth.dma_len));
            if let Some(i) = imm {
                f.header("ImmDt", "mrc.immdt");
                f.hex("mrc.immdt", u64::from(i.0), 8);
            }
        }
        Body::Ack(a) => {
            f.header("AETH", "mrc.aeth");
            f.hex("mrc.aeth.syndrome", u64::from(a.syndrome.0), 2);
            f.text("mrc.aeth.kind", a.syndrome.kind().name());
            f.num("mrc.aeth.msn", u64::from(a.msn.0));
        }
        Body::EndpointRequest(e) => {
            f.header("ERTH", "mrc.erth");
            f.text("mrc.erth.op", e.op().name());
            f.num("mrc.erth.vendor_info", u64::from(e.vendor_info));
            f.hex(
                "mrc.erth.port_status_mask",
                u64::from(e.port_status_mask),
                8,
            );
            f.num("mrc.erth.tx_timestamp", u64::from(e.tx_timestamp));
        }
        Body::EndpointResponse(e) => {
            f.header("EETH", "mrc.eeth");
            f.num("mrc.eeth.op", u64::from(e.op()));
            f.num("mrc.eeth.tx_timestamp", u64::from(e.tx_timestamp()));
            f.bytes("mrc.eeth.bytes", &e.bytes);
        }
        Body::Sack(s, c) => {
            f.header("SETH", "mrc.seth");
            f.text("mrc.seth.m", s.skip().name());
            f.flag("mrc.seth.pr", s.probe_response());
            f.int("mrc.seth.ack_psn_offset", i64::from(s.ack_psn_offset));
            f.num("mrc.seth.ack_psn", u64::from(s.ack_psn().value()));
            f.hex("mrc.seth.entropy", u64::from(s.entropy), 8);
            f.num("mrc.seth.spdcid", u64::from(s.spdcid));
            f.num("mrc.seth.dpdcid", u64::from(s.dpdcid));
            f.num("mrc.seth.cack_psn", u64::from(s.cack_psn.value()));
            f.num("mrc.seth.cc_type", u64::from(s.cc_type));
            f.num("mrc.seth.cc_flags", u64::from(s.cc_flags));
            f.num("mrc.seth.mpr", u64::from(s.mpr));
            f.int("mrc.seth.sack_offset", i64::from(s.sack_offset));
            f.num("mrc.seth.sack_base", u64::from(s.sack_base().value()));
            f.hex("mrc.seth.sack_bitmap", s.sack_bitmap, 16);
            f.num("mrc.seth.sacked", u64::from(s.sack_bitmap.count_ones()));
            f.header("CC_STATE", "mrc.cc_state");
            f.num("mrc.cc_state.tx_timestamp", u64::from(c.tx_timestamp));
            f.num("mrc.cc_state.ooo_count", u64::from(c.ooo_count));
            f.flag("mrc.cc_state.restore_cwnd", c.restore_cwnd);
            f.num("mrc.cc_state.rcv_cwnd_pen", u64::from(c.rcv_cwnd_pen));
            f.num("mrc.cc_state.rcvd_bytes", u64::from(c.rcvd_bytes));
        }
        Body::Nack(n) => {
            f.header("NETH", "mrc.neth");
            f.hex("mrc.neth.nack_reason", u64::from(n.nack_reason), 2);
            if let Some(name) = n.reason().name() {
                f.text("mrc.neth.nack_reason_name", name);
            }
            f.num("mrc.neth.vendor_info", u64::from(n.vendor_info));
            f.hex("mrc.neth.entropy", u64::from(n.entropy), 8);
            f.num("mrc.neth.spdcid", u64::from(n.spdcid));
            f.num("mrc.neth.dpdcid", u64::from(n.dpdcid));
            f.num("mrc.neth.nack_psn", u64::from(n.nack_psn.value()));
            f.num("mrc.neth.cc_type", u64::from(n.cc_type));
            f.num("mrc.neth.tx_timestamp", u64::from(n.tx_timestamp));
        }
        Body::Probe(p) => {
            f.header("PETH", "mrc.peth");
            f.num("mrc.peth.probe_id", u64::from(p.probe_id));
            f.num("mrc.peth.spdcid", u64::from(p.spdcid));
            f.num("mrc.peth.dpdcid", u64::from(p.dpdcid));
            f.num("mrc.peth.tx_timestamp", u64::from(p.tx_timestamp));
            f.flag("mrc.peth.tsr", p.word.tsr());
        }
    }
}

fn walk_uet(h: &Result<uet::Headers, Error>, f: &mut dyn Fields) {
    let h = match h {
        Ok(h) => h,
        Err(e) => {
            f.text("error", &e.to_string());
            return;
        }
    };
    if let Some(e) = h.entropy {
        f.header("Entropy header", "uet.pds.entropy");
        f.num("uet.pds.entropy", u64::from(e.entropy));
    }
    if let Some(t) = h.tss {
        f.header("TSS", "uet.tss");
        f.num("uet.tss.type", u64::from(t.word0 >> 27));
        f.flag("uet.tss.sp", t.ssi.is_some());
        f.flag("uet.tss.an", t.an());
        f.num("uet.tss.sdi", u64::from(t.sdi()));
        if let Some(s) = t.ssi {
            f.num("uet.tss.ssi", u64::from(s));
        }
        f.hex("uet.tss.tsc", t.tsc, 16);
    }
    let pro = h.pds.prologue();
    let ty = pro.pds_type();
    f.header("PDS", "uet.pds");
    f.num("uet.pds.type", u64::from(ty.value()));
    f.text("uet.pds.type_name", ty.name().unwrap_or("unknown"));
    if let Pds::Control(c) = h.pds {
        f.num("uet.pds.ctl_type", u64::from(pro.next_hdr()));
        f.text(
            "uet.pds.ctl_type_name",
            c.control_type().name().unwrap_or("unknown"),
        );
    } else {
        f.num("uet.pds.nh", u64::from(pro.next_hdr()));
        f.text(
            "uet.pds.nh_name",
            pro.next_header().name().unwrap_or("unknown"),
        );
    }
    f.hex("uet.pds.flags", u64::from(pro.flags()), 2);
    f.flag("uet.pds.flags.retx", pro.retx());
    match h.pds {
        Pds::Request(r, cc) => {
            f.flag("uet.pds.flags.ar", pro.flags() & 0x08 != 0);
            let syn = pro.flags() & 0x04 != 0;
            f.flag("uet.pds.flags.syn", syn);
            f.num("uet.pds.clear_psn", u64::from(r.clear_psn()));
            f.num("uet.pds.psn", u64::from(r.psn));
            f.num("uet.pds.spdcid", u64::from(r.spdcid));
            if syn {
                f.flag("uet.pds.pdc_mode_use_rsv", r.use_rsv_pdc());
                f.num("uet.pds.psn_offset", u64::from(r.psn_offset()));
                f.num("uet.pds.start_psn", u64::from(r.start_psn()));
            } else {
                f.num("uet.pds.dpdcid", u64::from(r.dpdcid));
            }
            if let Some(c) = cc {
                f.num("uet.pds.cc_state.ccc_id", u64::from(c.ccc_id));
                f.hex(
                    "uet.pds.cc_state.credit_target",
                    u64::from(c.credit_target),
                    6,
                );
            }
        }
        Pds::Rudi(r) => {
            f.flag("uet.pds.flags.m", pro.flags() & 0x20 != 0);
            f.num("uet.pds.rudi.pkt_id", u64::from(r.pkt_id));
        }
        Pds::Uud(_) => {}
        Pds::Ack(a, cc) => {
            walk_ack(&a, f);
            if let Some(c) = cc {
                walk_ack_cc(&a, &c, f);
            }
        }
        Pds::AckCcx(a, x) => {
            walk_ack(&a, f);
            f.num("uet.pds.ack.ccx_type", u64::from(x.ccx_type()));
            f.bytes("uet.pds.ack.ccx_state", x.as_bytes());
        }
        Pds::Nack(n, x) => {
            f.flag("uet.pds.flags.m", pro.flags() & 0x20 != 0);
            f.flag("uet.pds.flags.nt", n.rudi());
            f.hex("uet.pds.nack.code", u64::from(n.nack_code), 2);
            if let Some(name) = n.code().name() {
                f.text("uet.pds.nack.code_name", name);
            }
            f.num("uet.pds.nack.vendor_code", u64::from(n.vendor_code));
            f.num("uet.pds.nack.psn", u64::from(n.nack_psn));
            f.num("uet.pds.spdcid", u64::from(n.spdcid));
            f.num("uet.pds.dpdcid", u64::from(n.dpdcid));
            f.num("uet.pds.nack.max_recv_psn_plus_1", u64::from(n.payload));
            if let Some(x) = x {
                f.bytes("uet.pds.nack.ccx_state", x.as_bytes());
            }
        }
        Pds::Control(c) => {
            f.flag("uet.pds.flags.ar", pro.flags() & 0x08 != 0);
            f.flag("uet.pds.flags.syn", pro.flags() & 0x04 != 0);
            f.hex("uet.pds.ctrl_probe_opaque", u64::from(c.probe_opaque), 4);
            f.num("uet.pds.psn", u64::from(c.psn));
            f.num("uet.pds.spdcid", u64::from(c.spdcid));
            f.num("uet.pds.dpdcid", u64::from(c.dpdcid));
            f.hex("uet.pds.ctrl_payload", u64::from(c.payload), 8);
        }
    }
    if let Some(s) = &h.ses {
        walk_ses(s, f);
    }
}

fn walk_ack(a: &pds::Ack, f: &mut dyn Fields) {
    let fl = a.prologue.flags();
    f.flag("uet.pds.flags.m", fl & 0x20 != 0);
    f.flag("uet.pds.flags.p", a.probe());
    f.num("uet.pds.flags.req", u64::from(a.request()));
    f.num("uet.pds.cack_psn", u64::from(a.cack_psn));
    match a.ack_psn() {
        Some(p) => f.num("uet.pds.ack_psn", u64::from(p)),
        None => f.hex("uet.pds.probe_opaque", u64::from(a.ack_psn_offset), 4),
    }
    f.num("uet.pds.spdcid", u64::from(a.spdcid));
    f.num("uet.pds.dpdcid", u64::from(a.dpdcid));
}

fn walk_ack_cc(a: &pds::Ack, c: &pds::AckCc, f: &mut dyn Fields) {
    f.num("uet.pds.ack.cc_type", u64::from(c.cc_type));
    f.num("uet.pds.ack.mpr", u64::from(c.mpr));
    f.int("uet.pds.ack.sack_psn_offset", i64::from(c.sack_psn_offset));
    f.num("uet.pds.ack.sack_psn", u64::from(c.sack_base(a.cack_psn)));
    f.hex("uet.pds.ack.sack_bitmap", c.sack_bitmap, 16);
    match c.kind() {
        pds::CcType::Nscc => {
            let n = c.nscc();
            f.num(
                "uet.pds.ack.cc_state.service_time",
                u64::from(n.service_time),
            );
            f.flag("uet.pds.ack.cc_state.rc", n.restore_cwnd);
            f.num(
                "uet.pds.ack.cc_state.rcv_cwnd_pend",
                u64::from(n.rcv_cwnd_pend),
            );
            f.num("uet.pds.ack.cc_state.rcvd_bytes", u64::from(n.rcvd_bytes));
            f.num("uet.pds.ack.cc_state.ooo_count", u64::from(n.ooo_count));
        }
        pds::CcType::Credit => {
            let (credit, ooo) = c.credit();
            f.num("uet.pds.ack.cc_state.credit", u64::from(credit));
            f.num("uet.pds.ack.cc_state.ooo_count", u64::from(ooo));
        }
        pds::CcType::Other(_) => f.hex("uet.pds.ack.cc_state", c.cc_state, 16),
    }
}

/// The keys of a request's first 12 bytes, under each request size's prefix.
macro_rules! common_keys {
    ($p:literal) => {
        [
            concat!($p, ".opcode"),
            concat!($p, ".opcode_name"),
            concat!($p, ".ver"),
            concat!($p, ".dc"),
            concat!($p, ".ie"),
            concat!($p, ".rel"),
            concat!($p, ".hd"),
            concat!($p, ".eom"),
            concat!($p, ".som"),
            concat!($p, ".message_id"),
            concat!($p, ".index_generation"),
            concat!($p, ".job_id"),
            concat!($p, ".pidonfep"),
            concat!($p, ".resource_index"),
        ]
    };
}

const STD_KEYS: [&str; 14] = common_keys!("uet.ses.std");
const MEDIUM_KEYS: [&str; 14] = common_keys!("uet.ses.med_req");
const SMALL_KEYS: [&str; 14] = common_keys!("uet.ses.small_req");

fn walk_common(k: &[&'static str; 14], c: &ses::Common, f: &mut dyn Fields) {
    f.num(k[0], u64::from(c.byte0 & 0x3f));
    f.text(k[1], c.opcode().name().unwrap_or("unknown"));
    f.num(k[2], u64::from(c.version()));
    f.flag(k[3], c.delivery_complete());
    f.flag(k[4], c.initiator_error());
    f.flag(k[5], c.relative());
    f.flag(k[6], c.header_data_present());
    f.flag(k[7], c.end_of_msg());
    f.flag(k[8], c.start_of_msg());
    f.num(k[9], u64::from(c.message_id));
    f.num(k[10], u64::from(c.ri_generation));
    f.num(k[11], u64::from(c.job_id));
    f.num(k[12], u64::from(c.pid_on_fep()));
    f.num(k[13], u64::from(c.resource_index()));
}

fn walk_atomic(a: &Option<ses::Atomic>, f: &mut dyn Fields) {
    let Some(a) = a else { return };
    if let Some((c, s)) = &a.cas {
        f.header(
            "SES compare-and-swap extension",
            "uet.ses.comp_swap_ext_hdr",
        );
        f.num("uet.ses.comp_swap_ext_hdr.atomic_opcode", u64::from(a.code));
        f.num(
            "uet.ses.comp_swap_ext_hdr.atomic_data_type",
            u64::from(a.datatype),
        );
        f.hex(
            "uet.ses.comp_swap_ext_hdr.sem_ctl",
            u64::from(a.semantic_control),
            2,
        );
        f.bytes("uet.ses.comp_swap_ext_hdr.comp_value", c);
        f.bytes("uet.ses.comp_swap_ext_hdr.swap_value", s);
    } else {
        f.header("SES atomic extension", "uet.ses.atomic_op_ext_hdr");
        f.num("uet.ses.atomic_op_ext_hdr.atomic_opcode", u64::from(a.code));
        f.num(
            "uet.ses.atomic_op_ext_hdr.atomic_data_type",
            u64::from(a.datatype),
        );
        f.hex(
            "uet.ses.atomic_op_ext_hdr.sem_ctl",
            u64::from(a.semantic_control),
            2,
        );
    }
}

fn walk_response_common(c: &ses::ResponseCommon, f: &mut dyn Fields) {
    f.num("uet.ses.rsp.list", u64::from(c.list()));
    f.num("uet.ses.rsp.opcode", u64::from(c.opcode()));
    f.num("uet.ses.rsp.ver", u64::from(c.byte1 >> 6));
    f.num("uet.ses.rsp.return_code", u64::from(c.byte1 & 0x3f));
    f.text(
        "uet.ses.rsp.return_code_name",
        c.return_code().name().unwrap_or("unknown"),
    );
    f.num("uet.ses.rsp.message_id", u64::from(c.message_id));
    f.num("uet.ses.rsp.resource_index_gen", u64::from(c.ri_generation));
    f.num("uet.ses.rsp.job_id", u64::from(c.job_id));
}

fn walk_ses(s: &Ses, f: &mut dyn Fields) {
    match s {
        Ses::RequestStd(r, a) => {
            f.header("SES standard request", "uet.ses.std");
            walk_common(&STD_KEYS, &r.common, f);
            f.hex("uet.ses.std.buffer_offset", r.buffer_offset, 16);
            f.hex("uet.ses.std.initiator", u64::from(r.initiator), 8);
            f.hex("uet.ses.std.mem_key_match_bits", r.mem_key, 16);
            if r.common.start_of_msg() {
                f.hex("uet.ses.std.header_data", r.header_data, 16);
            } else {
                f.num("uet.ses.std.payload_length", u64::from(r.payload_length()));
                f.num("uet.ses.std.message_offset", u64::from(r.message_offset()));
            }
            f.num("uet.ses.std.request_length", u64::from(r.request_length));
            walk_atomic(a, f);
        }
        Ses::RequestMedium(r, a) => {
            f.header("SES medium request", "uet.ses.med_req");
            walk_common(&MEDIUM_KEYS, &r.common, f);
            f.hex("uet.ses.med_req.header_data", r.header_data, 16);
            f.hex("uet.ses.med_req.initiator", u64::from(r.initiator), 8);
            f.hex("uet.ses.med_req.mem_key_match_bits", r.mem_key, 16);
            walk_atomic(a, f);
        }
        Ses::RequestSmall(r, a) => {
            f.header("SES small request", "uet.ses.small_req");
            walk_common(&SMALL_KEYS, &r.common, f);
            f.hex("uet.ses.small_req.buffer_offset", r.buffer_offset, 16);
            walk_atomic(a, f);
        }
        Ses::Response(r) => {
            f.header("SES response", "uet.ses.rsp");
            walk_response_common(&r.common, f);
            f.num("uet.ses.rsp.mod_length", u64::from(r.modified_length));
        }
        Ses::ResponseData(r) => {
            f.header("SES response with data", "uet.ses.rsp");
            walk_response_common(&r.common, f);
            f.num(
                "uet.ses.rsp.read_req_message_id",
                u64::from(r.read_request_message_id),
            );
            f.num(
                "uet.ses.rsp.payload_length",
                u64::from(r.payload_length(true)),
            );
            f.num("uet.ses.rsp.mod_length", u64::from(r.modified_length));
            f.num("uet.ses.rsp.message_offset", u64::from(r.message_offset));
        }
        Ses::ResponseDataSmall(r) => {
            f.header("SES response with small data", "uet.ses.rsp");
            f.num("uet.ses.rsp.list", u64::from(r.byte0 >> 6));
            f.num("uet.ses.rsp.opcode", u64::from(r.byte0 & 0x3f));
            f.num("uet.ses.rsp.return_code", u64::from(r.byte1 & 0x3f));
            f.num("uet.ses.rsp.payload_length", u64::from(r.payload_length()));
            f.num("uet.ses.rsp.job_id", u64::from(r.job_id));
            f.num(
                "uet.ses.rsp.original_request_psn",
                u64::from(r.original_request_psn),
            );
        }
    }
}
