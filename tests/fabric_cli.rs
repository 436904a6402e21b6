//! MRC and UET through `roce decode` end to end: the conversations `roce gen-capture --mrc`
//! and `--uet` write, and the packets XDP2's own generators serialised
//! (`proto/tests/data/uet/`), in every text format, with the transport, entropy and PDC
//! filters, the readings the sources dispute, and a corrupted packet.
use std::process::{Command, Output};

use serde_json::Value;

const UET_DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proto/tests/data/uet");

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A generated capture of `n` packets (`--mrc` or `--uet`) in a fresh temporary directory.
fn generated(kind: &str, n: u64) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{kind}.pcap"));
    let path = path.to_str().unwrap().to_string();
    let o = roce(&["gen-capture", kind, "--packets", &n.to_string(), &path]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    (dir, path)
}

fn json_lines(args: &[&str]) -> Vec<Value> {
    let o = roce(args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn an_mrc_conversation_decodes_with_its_trim_nack_sack_and_retransmission() {
    let (_d, path) = generated("--mrc", 26);
    let v = json_lines(&["decode", "--json", &path]);
    assert_eq!(v.len(), 26);
    assert!(v
        .iter()
        .all(|p| p["transport"] == "mrc" && p["icrc_ok"] == true));
    let op = |p: &Value| p["mrc.bth.opcode_name"].as_str().unwrap().to_string();
    // The trimmed packet: headers only, DSCP aside; its NACK names it and reflects its EV.
    let nack = v
        .iter()
        .position(|p| op(p) == "MRC_RELIABILITY_NACK")
        .unwrap();
    assert_eq!(v[nack]["mrc.neth.nack_reason_name"], "TRIMMED");
    let cut = &v[nack - 1];
    assert_eq!(cut["payload_len"], 0);
    assert_eq!(cut["mrc.bth.psn"], v[nack]["mrc.neth.nack_psn"]);
    let ev = cut["src_port"].as_u64().unwrap();
    assert_eq!(v[nack]["mrc.neth.entropy"].as_u64().unwrap() >> 16, ev);
    // The SACK: cumulative below the hole, the packets after it in the bitmap.
    let sack = v
        .iter()
        .position(|p| op(p) == "MRC_RELIABILITY_SACK")
        .unwrap();
    let s = &v[sack];
    let hole = cut["mrc.bth.psn"].as_u64().unwrap();
    assert_eq!(s["mrc.seth.cack_psn"].as_u64().unwrap() + 1, hole);
    assert_eq!(s["mrc.seth.sack_base"].as_u64().unwrap(), hole);
    assert_eq!(
        s["mrc.seth.sack_bitmap"].as_u64().unwrap() & 1,
        0,
        "the hole"
    );
    assert_eq!(s["mrc.seth.sacked"], 2);
    // The retransmission: same PSN and VA, the emulator's rtx flag, another entropy value.
    let rtx = &v[sack + 1];
    assert_eq!(rtx["mrc.bth.psn"].as_u64().unwrap(), hole);
    assert_eq!(rtx["mrc.bth.rtx"], true);
    assert_eq!(rtx["mrc.reth.va"], cut["mrc.reth.va"]);
    assert_ne!(rtx["src_port"], cut["src_port"]);
    // Spraying: the first WRITE's packets leave on four entropy values.
    let evs: std::collections::BTreeSet<u64> = v[..8]
        .iter()
        .filter(|p| p["dst"] == "10.0.0.2")
        .map(|p| p["src_port"].as_u64().unwrap())
        .collect();
    assert_eq!(evs.len(), 4);
    // The probe's answer says so.
    assert!(v.iter().any(|p| p["mrc.seth.pr"] == true));
}

#[test]
fn a_uet_conversation_decodes_with_sack_nack_and_retx() {
    let (_d, path) = generated("--uet", 22);
    let v = json_lines(&["decode", "--json", &path]);
    assert_eq!(v.len(), 22);
    assert!(v.iter().all(|p| p["transport"] == "uet"));
    assert_eq!(v[0]["uet.pds.flags.syn"], true);
    assert_eq!(v[0]["uet.ses.std.opcode_name"], "WRITE");
    let nack = v
        .iter()
        .position(|p| p["uet.pds.type_name"] == "NACK")
        .unwrap();
    assert_eq!(v[nack]["uet.pds.nack.code_name"], "TRIMMED");
    let hole = v[nack]["uet.pds.nack.psn"].as_u64().unwrap();
    let ack = v
        .iter()
        .find(|p| p["uet.pds.type_name"] == "ACK_CC")
        .unwrap();
    assert_eq!(ack["uet.pds.ack.sack_psn"].as_u64().unwrap(), hole);
    assert_eq!(ack["uet.pds.cack_psn"].as_u64().unwrap() + 1, hole);
    assert_eq!(ack["uet.pds.ack.cc_state.service_time"], 12);
    let retx = v.iter().find(|p| p["uet.pds.flags.retx"] == true).unwrap();
    assert_eq!(retx["uet.pds.psn"].as_u64().unwrap(), hole);
    assert_eq!(
        v.iter()
            .filter(|p| p["uet.pds.ctl_type_name"] == "ACK_REQ")
            .count(),
        2
    );
}

#[test]
fn xdp2_captures_decode_in_every_text_format() {
    let pds = format!("{UET_DATA}/uet_pds.pcap");
    let o = roce(&["decode", &pds]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert_eq!(out.lines().count(), 19);
    assert!(out.lines().all(|l| l.contains(" UET ")), "{out}");
    assert!(text(&o.stderr).contains("19 UET"), "{}", text(&o.stderr));
    assert!(out.contains("NACK PDC_MODE_MISMATCH nack_psn=2575857510"));
    assert!(out.contains("CONTROL NEGOTIATION"));
    let v = json_lines(&["decode", "--json", &pds]);
    // Wireshark 5.0's names, XDP2's values (make_uet_pds.py).
    assert_eq!(v[9]["uet.pds.ack.cc_state.service_time"], 0x99aa);
    assert_eq!(v[9]["uet.pds.ack.cc_state.rcvd_bytes"], 0x88_7766);
    assert_eq!(v[10]["uet.pds.ack.cc_state.credit"], 0x12_3456);
    assert_eq!(v[2]["uet.pds.cc_state.credit_target"], 0x88_7766);
    assert_eq!(v[1]["uet.pds.psn_offset"], 0x876);
    let o = roce(&["decode", "-v", &format!("{UET_DATA}/uet_ses.pcap")]);
    let tree = text(&o.stdout);
    assert!(tree.contains("  SES atomic extension\n"), "{tree}");
    assert!(tree.contains("    comp_value: 98765432987654322345678923456789\n"));
    assert_eq!(tree.matches("Frame ").count(), 17);
}

#[test]
fn the_filters_pick_transport_entropy_and_pdc() {
    let (_d, path) = generated("--uet", 11);
    let count = |extra: &[&str]| {
        let mut a = vec!["decode", "--json"];
        a.extend_from_slice(extra);
        a.push(&path);
        json_lines(&a).len()
    };
    assert_eq!(count(&["--transport", "uet"]), 11);
    assert_eq!(count(&["--transport", "roce"]), 0);
    assert_eq!(count(&["--transport", "mrc"]), 0);
    // 0x9101 carries requests 0 and 4 (four entropy values in turn).
    assert_eq!(count(&["--entropy", "0x9101"]), 2);
    assert_eq!(count(&["--pdc", "0x202"]), 10, "all but the SYN request");
    assert_eq!(count(&["--pdc", "7"]), 0);
    // The RoCE captures are untouched by the UET filters but for --transport.
    let rc = concat!(env!("CARGO_MANIFEST_DIR"), "/pcap/tests/data/opcodes.pcap");
    let all = json_lines(&["decode", "--json", rc]).len();
    assert!(all > 0);
    assert_eq!(
        json_lines(&["decode", "--json", "--transport", "roce", rc]).len(),
        all
    );
    assert_eq!(
        json_lines(&["decode", "--json", "--transport", "uet", rc]).len(),
        0
    );
}

#[test]
fn the_disputed_readings_are_named_and_change_what_is_read() {
    let (_d, path) = generated("--mrc", 13);
    let emu = json_lines(&["decode", "--json", &path]);
    let ns3 = json_lines(&["decode", "--json", "--mrc-flags", "ns3", &path]);
    assert_eq!(emu[0]["mrc.bth.flag_reading"], "emulator");
    assert_eq!(ns3[0]["mrc.bth.flag_reading"], "ns3");
    // Read as ns-3 (no TSETH flag), the TSETH's 4 bytes are taken for the RETH's.
    assert!(emu[0]["mrc.tseth.tx_timestamp"].is_u64());
    assert!(ns3[0].get("mrc.tseth.tx_timestamp").is_none());
    assert_ne!(ns3[0]["mrc.reth.va"], emu[0]["mrc.reth.va"]);
    let forced = json_lines(&[
        "decode",
        "--json",
        "--mrc-flags",
        "ns3",
        "--mrc-tseth",
        "present",
        &path,
    ]);
    assert_eq!(forced[0]["mrc.reth.va"], emu[0]["mrc.reth.va"]);
    // UET's CCX length: XDP2's leaves the response after ACK_CCX readable.
    let pds = format!("{UET_DATA}/uet_pds.pcap");
    let x = json_lines(&["decode", "--json", &pds]);
    assert_eq!(x[11]["uet.ses.rsp.mod_length"], 0x9ab_cdef);
    let w = json_lines(&["decode", "--json", "--uet-ccx", "wireshark", &pds]);
    assert!(w[11].get("uet.ses.rsp.mod_length").is_none());
}

/// Where each record's frame starts in a little-endian classic pcap.
fn frames(b: &[u8]) -> Vec<usize> {
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(at + 16);
        at += 16 + caplen;
    }
    out
}

#[test]
fn a_corrupted_mrc_packet_is_an_icrc_failure_and_a_short_one_malformed() {
    let (dir, path) = generated("--mrc", 13);
    let mut b = std::fs::read(&path).unwrap();
    let f = frames(&b);
    // Ethernet 14, IPv4 20, UDP 8, BTH 12: flip a bit of the first packet's RETH.
    let bth = 14 + 20 + 8;
    b[f[0] + bth + 12 + 4 + 4 + 3] ^= 0x40;
    // The probe (PETH, 16 bytes) made an endpoint response (EETH, 36): too short.
    assert_eq!(b[f[11] + bth], 0xde);
    b[f[11] + bth] = 0xd9;
    let bad = dir.path().join("bad.pcap");
    std::fs::write(&bad, &b).unwrap();
    let bad = bad.to_str().unwrap();
    let o = roce(&["decode", "--errors", bad]);
    let out = text(&o.stdout);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.lines().next().unwrap().contains("[bad ICRC]"), "{out}");
    assert!(out.contains("MRC_ENDPOINT_RESPONSE"), "{out}");
    assert!(out.contains("[malformed: mrc.eeth"), "{out}");
    let err = text(&o.stderr);
    assert!(
        err.contains("ICRC failures") && err.contains("1 malformed"),
        "{err}"
    );
    assert_eq!(roce(&["decode", "--check", bad]).status.code(), Some(1));
    assert_eq!(roce(&["decode", "--check", &path]).status.code(), Some(0));
}

#[test]
fn mrc_opcodes_on_rocev2s_port_are_mrc_only_when_asked() {
    let (dir, path) = generated("--mrc", 13);
    let mut b = std::fs::read(&path).unwrap();
    // Every datagram to 4971 now goes to 4791 (the ICRC, which covers the port, no longer
    // matches: that is the point of the last assertion).
    for at in frames(&b) {
        let dport = at + 14 + 20 + 2;
        if b[dport..dport + 2] == 4971u16.to_be_bytes() {
            b[dport..dport + 2].copy_from_slice(&4791u16.to_be_bytes());
        }
    }
    let moved = dir.path().join("on4791.pcap");
    std::fs::write(&moved, &b).unwrap();
    let moved = moved.to_str().unwrap();
    // As RoCE: manufacturer opcodes, no MRC headers read.
    let roce_view = json_lines(&["decode", "--json", moved]);
    assert_eq!(roce_view.len(), 13);
    assert!(roce_view.iter().all(|p| p.get("transport").is_none()));
    assert_eq!(roce_view[0]["bth"]["opcode"], 0xc6);
    // As MRC, when asked: the same packets with their MRC headers.
    let mrc_view = json_lines(&["decode", "--json", "--mrc-on-4791", moved]);
    assert_eq!(mrc_view.len(), 13);
    assert!(mrc_view.iter().all(|p| p["transport"] == "mrc"));
    assert_eq!(mrc_view[6]["mrc.neth.nack_reason_name"], "TRIMMED");
    assert!(mrc_view.iter().all(|p| p["icrc_ok"] == false));
}

#[test]
fn uet_over_ip_protocol_253_reads_its_entropy_header() {
    let b = std::fs::read(format!("{UET_DATA}/uet_pds.pcap")).unwrap();
    let at = frames(&b)[0];
    let caplen = u32::from_le_bytes(b[at - 8..at - 4].try_into().unwrap()) as usize;
    let frame = &b[at..at + caplen];
    let (eth, ip, udp) = (&frame[..14], &frame[14..34], &frame[34..42]);
    // The same packet over IP: protocol 253, a 4-byte entropy header (the UDP source port's
    // value) in the UDP header's place.
    let mut out = eth.to_vec();
    let mut h = ip.to_vec();
    h[9] = 253;
    let total = (20 + 4 + frame.len() - 42) as u16;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(&udp[..2]);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&frame[42..]);
    let mut pcap = b[..24].to_vec();
    pcap.extend_from_slice(&b[at - 16..at - 8]);
    pcap.extend_from_slice(&(out.len() as u32).to_le_bytes());
    pcap.extend_from_slice(&(out.len() as u32).to_le_bytes());
    pcap.extend_from_slice(&out);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ip253.pcap");
    std::fs::write(&path, &pcap).unwrap();
    let v = json_lines(&["decode", "--json", path.to_str().unwrap()]);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0]["transport"], "uet");
    assert!(v[0].get("src_port").is_none());
    let ev = u64::from(u16::from_be_bytes([udp[0], udp[1]]));
    assert_eq!(v[0]["uet.pds.entropy"].as_u64(), Some(ev));
    assert_eq!(v[0]["uet.pds.type_name"], "RUD_REQ");
    assert_eq!(v[0]["uet.ses.std.opcode_name"], "READ");
    let p = path.to_str().unwrap();
    assert_eq!(
        json_lines(&["decode", "--json", "--entropy", &ev.to_string(), p]).len(),
        1
    );
}
