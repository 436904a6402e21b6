//! The generated fixtures in tests/data: they must match what `common::fixtures` generates
//! (no drift), their decode output must match the golden files, and each one's specific
//! behaviour (link type, error, filter) is checked by name.
//!
//! To regenerate after an intended change: `UPDATE_FIXTURES=1 cargo test -p roce-pcap --test
//! fixtures`, then review the diff.
mod common;
use common::fixtures;
use common::*;
use roce_pcap::{decode_bytes, Options, Outcome, OutputFormat, ReadError};
use serde_json::Value;

fn updating() -> bool {
    std::env::var("UPDATE_FIXTURES").is_ok_and(|v| v == "1")
}

fn fixture(name: &str) -> Vec<u8> {
    fixtures::all()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
        .1
}

/// Every output format, listing non-RoCE packets too.
fn every_format() -> [Options; 3] {
    [
        OutputFormat::Summary,
        OutputFormat::Json,
        OutputFormat::Verbose,
    ]
    .map(|format| Options {
        format,
        all: true,
        ..Default::default()
    })
}

fn run(name: &str, opts: Options) -> (String, Outcome) {
    let (out, outcome) = decode_bytes(&fixture(name), name, opts);
    (String::from_utf8(out).unwrap(), outcome)
}

fn json(name: &str) -> (Vec<Value>, Outcome) {
    let (text, outcome) = run(
        name,
        Options {
            format: OutputFormat::Json,
            ..Default::default()
        },
    );
    let objs = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (objs, outcome)
}

fn check_file(path: &std::path::Path, actual: &[u8]) {
    if updating() {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run UPDATE_FIXTURES=1 cargo test -p roce-pcap --test fixtures",
            path.display()
        )
    });
    if expected != actual {
        panic!(
            "{} drifted from what the code generates:\n--- committed\n{}\n--- generated\n{}",
            path.display(),
            String::from_utf8_lossy(&expected),
            String::from_utf8_lossy(actual)
        );
    }
}

#[test]
fn committed_fixtures_match_the_generator() {
    let all = fixtures::all();
    assert!(all.len() >= 15);
    for (name, bytes) in &all {
        check_file(&data_dir().join(name), bytes);
    }
}

#[test]
fn golden_outputs() {
    for (name, bytes) in fixtures::all() {
        for (ext, format) in [
            ("summary.txt", OutputFormat::Summary),
            ("jsonl", OutputFormat::Json),
            ("verbose.txt", OutputFormat::Verbose),
        ] {
            let opts = Options {
                format,
                all: true,
                // The RD fixture is read as RD; everything else with the defaults.
                rd: name.starts_with("rd_"),
                ..Default::default()
            };
            let (mut out, outcome) = decode_bytes(&bytes, name, opts);
            if format == OutputFormat::Summary {
                out.extend(format!("# {}\n", outcome.stats.line()).bytes());
                if let Some(e) = &outcome.error {
                    out.extend(format!("# error: {e}\n").bytes());
                }
            }
            check_file(&data_dir().join(format!("{name}.{ext}")), &out);
        }
    }
}

#[test]
fn rd_opcodes_read_as_dc_by_default_and_as_rd_with_rd() {
    let (text, o) = run(
        "rd_opcodes.pcap",
        Options {
            format: OutputFormat::Json,
            rd: true,
            ..Default::default()
        },
    );
    assert_eq!((o.stats.malformed, o.stats.icrc_failures), (0, 0));
    let objs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objs.len(), fixtures::rd_opcodes().len());
    for obj in &objs {
        assert!(obj["bth"]["opcode_name"]
            .as_str()
            .unwrap()
            .starts_with("RD_"));
        assert!(
            obj.get("rdeth").is_some() && obj.get("dc").is_none(),
            "{obj}"
        );
    }
    // The DC fixture: every packet decodes with its DC bytes set aside and a good ICRC.
    let (objs, o) = json("dc.pcap");
    assert_eq!(
        (o.stats.malformed, o.stats.icrc_failures),
        (0, 0),
        "{:?}",
        o.stats
    );
    for obj in &objs {
        assert!(
            obj["bth"]["opcode_name"]
                .as_str()
                .unwrap()
                .starts_with("DC_"),
            "{obj}"
        );
        assert_eq!(
            &obj["dc"]["dceth"].as_str().unwrap()[..6],
            "dc0bad",
            "{obj}"
        );
        assert_eq!(obj["icrc_ok"], true);
    }
    let connects = objs
        .iter()
        .filter(|o| o["dc"].get("connect").is_some())
        .count();
    assert_eq!(connects, 1, "one opcode 0x55 without SE");
    let send = objs.iter().find(|o| o["bth"]["opcode"] == 0x44).unwrap();
    assert_eq!(send["payload_len"], 16, "{send}");
    assert!(send.get("deth").is_some() && send.get("rdeth").is_some());
}

#[test]
fn every_opcode_decodes_with_a_good_icrc() {
    let (objs, o) = json("opcodes.pcap");
    let ops = fixtures::all_opcodes();
    assert_eq!(objs.len(), ops.len());
    assert_eq!((o.stats.malformed, o.stats.icrc_failures), (0, 0));
    for (obj, op) in objs.iter().zip(&ops) {
        assert_eq!(obj["bth"]["opcode"], u64::from(op.0));
        assert_eq!(obj["bth"]["opcode_name"], op.to_string());
        assert_eq!(obj["icrc_ok"], true, "{obj}");
        let h = op.ext_headers();
        use roce_proto::ExtHeaders as E;
        for (flag, key) in [
            (E::RETH, "reth"),
            (E::AETH, "aeth"),
            (E::ATOMIC_ETH, "atomic_eth"),
            (E::ATOMIC_ACK_ETH, "atomic_ack_eth"),
            (E::IMMDT, "immdt"),
            (E::IETH, "ieth"),
            (E::DETH, "deth"),
        ] {
            assert_eq!(h.contains(flag), obj.get(key).is_some(), "{op} {key}");
        }
    }
    // The AETH kinds: ack (credit 31), ack (credit 5), rnr_nak (timer 14), nak (psn seq).
    let kinds: Vec<(String, u64)> = objs
        .iter()
        .filter_map(|o| o.get("aeth"))
        .map(|a| {
            (
                a["kind"].as_str().unwrap().to_string(),
                a["value"].as_u64().unwrap(),
            )
        })
        .collect();
    for want in [("ack", 31), ("ack", 5), ("rnr_nak", 14), ("nak", 0)] {
        assert!(
            kinds.iter().any(|(k, v)| k == want.0 && *v == want.1),
            "{want:?} in {kinds:?}"
        );
    }
    let cnp = objs
        .iter()
        .find(|o| o["bth"]["opcode_name"] == "CNP")
        .unwrap();
    assert_eq!(cnp["bth"]["becn"], true);
    assert_eq!(cnp["payload_len"], 16);
}

#[test]
fn json_has_exactly_the_contract_keys() {
    const TOP: &[&str] = &[
        "frame",
        "ts",
        "src",
        "dst",
        "ecn",
        "version",
        "bth",
        "reth",
        "aeth",
        "atomic_eth",
        "atomic_ack_eth",
        "immdt",
        "ieth",
        "deth",
        "payload_len",
        "icrc",
        "icrc_ok",
        "error",
        "captured_payload_len",
        "snap_truncated",
        "mad",
        "rdeth",
        "dc",
        "smp",
        "sa",
        "cm",
    ];
    const BTH: &[&str] = &[
        "opcode",
        "opcode_name",
        "se",
        "migreq",
        "pad_count",
        "tver",
        "pkey",
        "fecn",
        "becn",
        "dest_qp",
        "ack_req",
        "psn",
    ];
    for (name, _) in fixtures::all() {
        let (objs, _) = json(name);
        for o in objs {
            let m = o.as_object().unwrap();
            for k in m.keys() {
                assert!(TOP.contains(&k.as_str()), "{name}: unexpected key {k}");
            }
            if let Some(b) = m.get("bth") {
                let keys: Vec<&str> = b.as_object().unwrap().keys().map(|k| k.as_str()).collect();
                let mut want = BTH.to_vec();
                want.sort_unstable();
                let mut keys = keys;
                keys.sort_unstable();
                assert_eq!(keys, want, "{name}");
            }
            let snap = m.get("snap_truncated") == Some(&Value::Bool(true));
            if let Some(icrc) = m.get("icrc") {
                let s = icrc.as_str().unwrap();
                if snap {
                    assert_eq!(s, "not_captured", "{name}: {o}");
                } else {
                    assert!(s.len() == 8 && s.chars().all(|c| c.is_ascii_hexdigit()));
                }
            }
            // Exactly one of: an ICRC verdict, an error, or a cut by the snap length.
            let kinds = [m.contains_key("icrc_ok"), m.contains_key("error"), snap];
            assert_eq!(kinds.iter().filter(|&&k| k).count(), 1, "{name}: {o}");
        }
    }
}

#[test]
fn ipv6_and_vlan_frames() {
    let (objs, o) = json("ipv6.pcap");
    assert_eq!((o.stats.roce, o.stats.icrc_failures), (5, 0));
    assert_eq!(objs[0]["src"], "[fd00::1]:49443");
    assert_eq!(objs[0]["dst"], "[fd00::2]:4791");
    assert_eq!(objs[0]["ecn"], "ce");
    let (objs, o) = json("vlan.pcap");
    assert_eq!(
        (o.stats.roce, o.stats.icrc_failures, o.stats.malformed),
        (5, 0, 0)
    );
    assert!(objs.iter().all(|x| x["icrc_ok"] == true));
    let (text, _) = run(
        "vlan.pcap",
        Options {
            format: OutputFormat::Verbose,
            ..Default::default()
        },
    );
    assert!(text.contains("vlan: tpid 0x88a8, pcp 5, dei 1, vid 20"));
    assert!(text.contains("vlan: tpid 0x8100, pcp 3, dei 0, vid 100"));
}

#[test]
fn bad_icrcs_are_flagged_and_masked_fields_are_not() {
    let (objs, o) = json("bad_icrc.pcap");
    let ok: Vec<bool> = objs
        .iter()
        .map(|x| x["icrc_ok"].as_bool().unwrap())
        .collect();
    assert_eq!(ok, [true, false, false, false, true]);
    assert_eq!(o.stats.icrc_failures, 3);
    assert_eq!(o.exit_code(false), 0);
    assert_eq!(o.exit_code(true), 1, "--check fails on a bad ICRC");
    let (text, _) = run("bad_icrc.pcap", Options::default());
    assert_eq!(text.matches("[ICRC BAD]").count(), 3);
    let (text, o) = run(
        "bad_icrc.pcap",
        Options {
            errors: true,
            ..Default::default()
        },
    );
    assert_eq!(text.lines().count(), 3);
    assert_eq!(o.stats.printed, 3);
}

#[test]
fn cut_and_malformed_headers_name_the_layer() {
    let (objs, o) = json("truncated_headers.pcap");
    let errors: Vec<&str> = objs
        .iter()
        .map(|x| x.get("error").and_then(Value::as_str).unwrap_or(""))
        .collect();
    assert_eq!(
        errors,
        [
            "reth: truncated, needs 28 bytes, got 24",
            "bth: truncated, needs 12 bytes, got 8",
            "icrc: truncated, needs 20 bytes, got 16",
            "atomiceth: truncated, needs 40 bytes, got 32",
            "pad: pad count larger than the payload",
            "icrc: bytes after the headers of an opcode without payload",
            "udp: length exceeds the IP payload",
            "",
        ]
    );
    // The cut-BTH frame still shows no BTH; the cut-RETH frame shows its BTH.
    assert!(objs[1].get("bth").is_none());
    assert_eq!(objs[0]["bth"]["opcode_name"], "RC_RDMA_WRITE_FIRST");
    // TVer 1 decodes (non-conformant, and the ICRC no longer matches).
    assert_eq!(objs[7]["bth"]["tver"], 1);
    assert_eq!(objs[7]["icrc_ok"], false);
    assert_eq!(o.stats.malformed, 7);
    assert_eq!(o.exit_code(true), 1);
    assert_eq!(o.exit_code(false), 0);
    let (text, _) = run(
        "truncated_headers.pcap",
        Options {
            format: OutputFormat::Verbose,
            ..Default::default()
        },
    );
    assert!(text.contains("Warning: bth: TVer is not 0"));
}

#[test]
fn snaplen_cut_frames_keep_their_headers() {
    // Frames cut by the snap length are neither malformed nor ICRC failures: every captured
    // header decodes, the payload length comes from the IP/UDP lengths, the ICRC was not
    // captured, and --check passes.
    let (objs, o) = json("snaplen.pcap");
    assert_eq!(o.stats.malformed, 1, "{:?}", o.stats);
    assert_eq!(o.stats.icrc_failures, 0);
    assert_eq!(o.stats.snap_truncated, 3, "{:?}", o.stats);
    // The frame whose own lengths are too short for its headers is malformed (--check fails).
    assert!(
        objs[4]["error"].as_str().unwrap().contains("reth"),
        "{}",
        objs[4]
    );
    assert!(objs[4].get("snap_truncated").is_none());
    assert_eq!(o.exit_code(true), 1);
    assert_eq!(objs[1]["icrc_ok"], true);
    assert!(objs[0].get("error").is_none(), "{}", objs[0]);
    assert_eq!(objs[0]["snap_truncated"], true);
    assert_eq!(objs[0]["icrc"], "not_captured");
    // 232 transport bytes on the wire: 28 of BTH and RETH, 200 of payload, 4 of ICRC; the
    // capture kept 54 of them.
    assert_eq!(objs[0]["payload_len"], 200, "{}", objs[0]);
    assert_eq!(objs[0]["captured_payload_len"], 26);
    assert_eq!(objs[0]["reth"]["dma_len"], 3000);
    assert_eq!(objs[3]["aeth"]["kind"], "nak");
    let (text, _) = run("snaplen.pcap", Options::default());
    assert_eq!(text.matches("[snap: ").count(), 3, "{text}");
    assert_eq!(text.matches("[malformed: ").count(), 1, "{text}");
}

#[test]
fn frames_cut_by_a_tool_that_rewrote_the_record_lengths_keep_their_headers() {
    // The same frames as snaplen.pcap, each record's original length rewritten to what was
    // kept (caplen = orig_len, as mirror and NIC-side captures write them): the frames' own
    // IP/UDP lengths still say how long they were, so they decode as the snap-cut ones do.
    let cut = fixture("snaplen.pcap");
    let mut r = roce_pcap::CaptureReader::new(cut.as_slice(), "snaplen").unwrap();
    let mut w = None;
    while let Some(rec) = r.next_record().unwrap() {
        let w = w.get_or_insert_with(|| {
            roce_pcap::PcapWriter::new(Vec::new(), rec.link_type, true, 65_535).unwrap()
        });
        w.write_packet(rec.ts, rec.data, 0).unwrap();
    }
    let rewritten = w.unwrap().into_inner();
    let opts = |format| Options {
        format,
        ..Default::default()
    };
    let (out, o) = decode_bytes(&rewritten, "rewritten", opts(OutputFormat::Json));
    let objs: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(o.stats.malformed, 1, "{:?}", o.stats);
    assert_eq!(o.stats.snap_truncated, 3, "{:?}", o.stats);
    assert_eq!(o.stats.lengths_rewritten, 3, "{:?}", o.stats);
    assert!(objs[4].get("snap_truncated").is_none(), "{}", objs[4]);
    assert_eq!(objs[0]["snap_truncated"], true, "{}", objs[0]);
    assert_eq!(objs[0]["payload_len"], 200, "{}", objs[0]);
    assert_eq!(objs[0]["captured_payload_len"], 26);
    // Ethernet 14, IPv4 20, UDP 8, then the 232 transport bytes.
    assert_eq!(objs[0]["wire_len"], 14 + 20 + 8 + 232, "{}", objs[0]);
    assert!(
        o.stats.line().contains("record lengths rewritten"),
        "{}",
        o.stats.line()
    );
    let (text, _) = decode_bytes(&rewritten, "rewritten", opts(OutputFormat::Summary));
    let text = String::from_utf8(text).unwrap();
    assert_eq!(
        text.matches("(record length rewritten)").count(),
        3,
        "{text}"
    );
    // The snap-cut original says nothing of the kind.
    let (_, o) = json("snaplen.pcap");
    assert_eq!(o.stats.lengths_rewritten, 0);
}

#[test]
fn every_link_type() {
    for (name, roce, skipped) in [
        ("sll.pcap", 3, 1),
        ("sll2.pcap", 3, 1),
        ("raw.pcap", 3, 0),
        ("ipv4.pcap", 2, 0),
        ("ipv6raw.pcap", 1, 0),
        ("loopback.pcap", 3, 1),
        ("erf.pcap", 2, 1),
    ] {
        let (objs, o) = json(name);
        assert!(o.error.is_none(), "{name}");
        assert_eq!((o.stats.roce, o.stats.skipped), (roce, skipped), "{name}");
        assert_eq!(o.stats.icrc_failures + o.stats.malformed, 0, "{name}");
        assert!(objs.iter().all(|x| x["icrc_ok"] == true), "{name}");
        assert!(objs.iter().all(|x| x["version"] == "rocev2"), "{name}");
    }
}

#[test]
fn pcapng_with_two_interfaces_and_a_simple_packet_block() {
    let (objs, o) = json("two_interfaces.pcapng");
    assert!(o.error.is_none());
    assert_eq!((o.stats.packets, o.stats.roce), (5, 5));
    assert!(objs.iter().all(|x| x["icrc_ok"] == true));
    let ts: Vec<String> = objs.iter().map(|x| x["ts"].to_string()).collect();
    // Interface 0 in µs, interface 1 in ns; the SPB has no time stamp.
    assert_eq!(ts[0], "1700000000.0");
    assert_eq!(objs[1]["ts"].as_f64().unwrap(), 1_700_000_000.000_500_1);
    let (text, _) = run("two_interfaces.pcapng", Options::default());
    assert!(
        text.contains("1700000000.000500123") || text.contains("0.000500123"),
        "{text}"
    );
    assert_eq!(objs[1]["src"], "[fd00::1]:49443");
}

#[test]
fn nanosecond_and_big_endian_pcap() {
    let (text, _) = run("nanosecond.pcap", Options::default());
    assert!(
        text.lines().nth(1).unwrap().contains(" 0.250001001 "),
        "{text}"
    );
    let (le, _) = run("nanosecond.pcap", Options::default());
    let (be, o) = run("big_endian.pcap", Options::default());
    assert!(o.error.is_none());
    assert_eq!(o.stats.roce, 2);
    // Same packets; the µs file shows 6 digits where the ns file shows 9.
    assert_eq!(be.lines().count(), le.lines().count());
    assert!(be.lines().nth(1).unwrap().contains(" 0.250001 "), "{be}");
}

#[test]
fn all_lists_other_packets_and_filters_select() {
    let (text, o) = run(
        "mixed.pcap",
        Options {
            all: true,
            ..Default::default()
        },
    );
    assert_eq!((o.stats.roce, o.stats.skipped), (2, 3));
    assert_eq!(text.lines().count(), 5);
    assert!(text.contains("not RoCE: EtherType is not IPv4, IPv6 or RoCE v1"));
    assert!(text.contains("not RoCE: UDP destination port is not 4791"));
    assert!(text.contains("not RoCE: IP payload is not UDP"));
    let (text, _) = run("mixed.pcap", Options::default());
    assert_eq!(text.lines().count(), 2);

    let qp = |q, op: Option<&str>, count| Options {
        qp: q,
        opcode: op.map(|n| roce_pcap::parse_opcode(n).unwrap()),
        count,
        ..Default::default()
    };
    let (text, _) = run("opcodes.pcap", qp(Some(0x11), None, None));
    assert!(text.lines().all(|l| l.contains("qp=0x000011")), "{text}");
    assert!(text.lines().count() >= 10);
    let (text, _) = run("opcodes.pcap", qp(None, Some("rc_rdma_write_first"), None));
    assert_eq!(text.lines().count(), 1);
    assert!(text.contains("RC_RDMA_WRITE_FIRST"));
    let (text, _) = run("opcodes.pcap", qp(None, Some("0x81"), None));
    assert!(text.contains(" CNP "));
    let (text, o) = run("opcodes.pcap", qp(None, None, Some(3)));
    assert_eq!(text.lines().count(), 3);
    assert_eq!(o.stats.packets, 3, "stops reading after --count");
    assert!(o.error.is_none());
    assert_eq!(roce_pcap::parse_opcode("NO_SUCH_OP"), None);
}

#[test]
fn truncated_file_reports_offset_and_keeps_earlier_output() {
    let full = fixture("opcodes.pcap");
    let cut = &full[..full.len() - 10];
    let (out, o) = decode_bytes(cut, "cut.pcap", Options::default());
    let text = String::from_utf8(out).unwrap();
    let n = fixtures::all_opcodes().len();
    assert_eq!(text.lines().count(), n - 1, "every whole record is printed");
    let e = o.error.as_ref().expect("truncated");
    let msg = e.to_string();
    assert!(
        msg.starts_with("cut.pcap: truncated record at byte "),
        "{msg}"
    );
    match e {
        roce_pcap::DecodeError::Read(ReadError::Truncated { offset, got, .. }) => {
            assert!(*offset > 24 && (*offset as usize) < cut.len());
            assert_eq!(*offset as usize + got, cut.len());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(o.exit_code(false), 1);
    // Cut inside the 16-byte record header.
    let (_, o) = decode_bytes(&full[..24 + 10], "hdr.pcap", Options::default());
    assert!(matches!(
        o.error,
        Some(roce_pcap::DecodeError::Read(ReadError::Truncated {
            offset: 24,
            ..
        }))
    ));
    // Only a file header: read to its end, nothing in it.
    let (_, o) = decode_bytes(&full[..24], "empty.pcap", Options::default());
    assert!(o.error.is_none());
    assert_eq!(o.stats.packets, 0);
    assert_eq!(o.exit_code(true), 0);
}

#[test]
fn truncated_pcapng_block() {
    let full = fixture("two_interfaces.pcapng");
    let (out, o) = decode_bytes(&full[..full.len() - 5], "cut.pcapng", Options::default());
    assert_eq!(String::from_utf8(out).unwrap().lines().count(), 4);
    assert!(o
        .error
        .unwrap()
        .to_string()
        .contains("cut.pcapng: truncated record at byte"));
}

#[test]
fn non_capture_files_are_rejected_with_name_and_offset() {
    for (bytes, why) in [
        (
            &b"[package]\nname = \"roce\"\n"[..],
            "no pcap or pcapng magic number",
        ),
        (&b""[..], "shorter than a file header"),
        (
            &b"\xd4\xc3\xb2\xa1\x02\x00"[..],
            "shorter than a pcap file header",
        ),
    ] {
        let (out, o) = decode_bytes(bytes, "notes.txt", Options::default());
        assert!(out.is_empty());
        let msg = o.error.as_ref().unwrap().to_string();
        assert_eq!(
            msg,
            format!("notes.txt: not a pcap or pcapng capture (at byte 0: {why})")
        );
        assert_eq!(o.exit_code(false), 1);
    }
    let (_, o) = decode_bytes(&[0u8; 4], "x", Options::default());
    assert!(o.error.is_some());
}

/// A reader that hands out one byte per `read`, to exercise every Incomplete/refill path.
struct Trickle<'a>(&'a [u8]);
impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.0.is_empty() || buf.is_empty() {
            return Ok(0);
        }
        buf[0] = self.0[0];
        self.0 = &self.0[1..];
        Ok(1)
    }
}

#[test]
fn byte_at_a_time_input_gives_the_same_output() {
    for name in ["opcodes.pcap", "two_interfaces.pcapng", "big_endian.pcap"] {
        let bytes = fixture(name);
        let (whole, _) = decode_bytes(&bytes, name, Options::default());
        let mut r = roce_pcap::CaptureReader::new(Trickle(&bytes), name).unwrap();
        let mut out = Vec::new();
        let o = roce_pcap::decode(&mut r, Options::default(), &mut out, None);
        assert!(o.error.is_none(), "{name}");
        assert_eq!(out, whole, "{name}");
    }
}

#[test]
fn reader_memory_stays_bounded() {
    // A record header claiming 1 GiB is refused without allocating it.
    let mut bytes = fixture("opcodes.pcap")[..24].to_vec();
    bytes.extend([0, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend((1u32 << 30).to_le_bytes());
    bytes.extend((1u32 << 30).to_le_bytes());
    bytes.extend([0u8; 64]);
    let (_, o) = decode_bytes(&bytes, "huge.pcap", Options::default());
    let msg = o.error.unwrap().to_string();
    assert!(
        msg.contains("huge.pcap: malformed record length beyond 16 MiB at byte 24"),
        "{msg}"
    );
}

#[test]
fn shared_captures_read_identically_through_the_pcap_writer() {
    // Re-writing every record of a real capture with PcapWriter gives a file that decodes
    // to the same JSON (the writer and reader agree).
    let path = captures_dir().join("linlinw5-rdma_ib_tutorial/rdma_cm.pcap");
    let bytes = std::fs::read(&path).unwrap();
    let mut r = roce_pcap::CaptureReader::new(&bytes[..], "rdma_cm").unwrap();
    let mut w = roce_pcap::PcapWriter::new(Vec::new(), 1, false, 65535).unwrap();
    while let Some(rec) = r.next_record().unwrap() {
        w.write_packet(rec.ts, rec.data, rec.orig_len).unwrap();
    }
    let copy = w.into_inner();
    let j = Options {
        format: OutputFormat::Json,
        ..Default::default()
    };
    assert_eq!(
        decode_bytes(&bytes, "a", j).0,
        decode_bytes(&copy, "b", j).0
    );
}

#[test]
fn parallel_decode_equals_sequential_decode() {
    let mut inputs: Vec<(String, Vec<u8>)> = fixtures::all()
        .into_iter()
        .map(|(n, b)| (n.to_string(), b))
        .collect();
    for p in all_captures() {
        inputs.push((p.display().to_string(), std::fs::read(&p).unwrap()));
    }
    // A file cut mid-record: same output before the cut, same error.
    let full = fixture("opcodes.pcap");
    inputs.push(("cut.pcap".into(), full[..full.len() - 10].to_vec()));
    for (name, bytes) in &inputs {
        for opts in every_format() {
            let (seq_out, seq) = decode_bytes(bytes, name, opts);
            for (workers, batch) in [(2, 1), (3, 3), (2, 4096)] {
                let mut r = roce_pcap::CaptureReader::new(&bytes[..], name).unwrap();
                let mut out = Vec::new();
                let par = roce_pcap::parallel::decode_parallel(
                    &mut r, opts, &mut out, None, workers, batch,
                );
                assert!(
                    out == seq_out,
                    "{name} {:?} workers {workers} batch {batch}",
                    opts.format
                );
                assert_eq!(par.stats, seq.stats, "{name}");
                assert_eq!(
                    par.error.map(|e| e.to_string()),
                    seq.error.as_ref().map(|e| e.to_string()),
                    "{name}"
                );
            }
        }
    }
}

/// A writer that fails after `left` bytes.
struct Failing {
    left: usize,
}
impl std::io::Write for Failing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.left {
            return Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "closed",
            ));
        }
        self.left -= buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failing_writer_stops_both_decoders() {
    let bytes = fixture("opcodes.pcap");
    let mut r = roce_pcap::CaptureReader::new(&bytes[..], "o").unwrap();
    let o = roce_pcap::parallel::decode_parallel(
        &mut r,
        Options::default(),
        &mut Failing { left: 100 },
        None,
        2,
        2,
    );
    assert!(matches!(o.error, Some(roce_pcap::DecodeError::Write(_))));
    let mut r = roce_pcap::CaptureReader::new(&bytes[..], "o").unwrap();
    let o = roce_pcap::decode(&mut r, Options::default(), &mut Failing { left: 0 }, None);
    assert!(matches!(o.error, Some(roce_pcap::DecodeError::Write(_))));
}

#[test]
fn mutated_captures_never_panic() {
    // Deterministic xorshift: flip, overwrite and cut bytes of every fixture and of a real
    // capture, and decode each mutant in every format (sequential and parallel).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut inputs: Vec<Vec<u8>> = fixtures::all().into_iter().map(|(_, b)| b).collect();
    inputs.push(std::fs::read(captures_dir().join("rdma-softroce-demo/infiniband.pcap")).unwrap());
    let mut decoded = 0;
    for base in &inputs {
        for _ in 0..40 {
            let mut m = base.clone();
            for _ in 0..1 + rnd() % 8 {
                let i = (rnd() as usize) % m.len();
                m[i] = match rnd() % 3 {
                    0 => m[i] ^ (1 << (rnd() % 8)),
                    1 => rnd() as u8,
                    _ => 0xff,
                };
            }
            if rnd() % 4 == 0 {
                let cut = (rnd() as usize) % m.len();
                m.truncate(cut);
            }
            for opts in every_format() {
                let (_, o) = decode_bytes(&m, "m", opts);
                decoded += o.stats.packets;
            }
            let mut out = Vec::new();
            if let Ok(mut r) = roce_pcap::CaptureReader::new(&m[..], "m") {
                roce_pcap::parallel::decode_parallel(
                    &mut r,
                    Options::default(),
                    &mut out,
                    None,
                    2,
                    2,
                );
            }
        }
    }
    assert!(decoded > 1000, "{decoded}");
}

#[test]
fn pcapng_packet_longer_than_its_block_is_malformed_not_truncated() {
    let mut ng = fixture("two_interfaces.pcapng");
    // The first EPB follows the SHB (28 bytes) and two IDBs (20 and 32 bytes); its captured
    // length sits 20 bytes into the block.
    let epb = 28 + 20 + 32;
    assert_eq!(&ng[epb..epb + 4], &6u32.to_le_bytes());
    ng[epb + 20..epb + 24].copy_from_slice(&5000u32.to_le_bytes());
    let (_, o) = decode_bytes(&ng, "bad.pcapng", Options::default());
    let msg = o.error.unwrap().to_string();
    assert_eq!(
        msg,
        format!("bad.pcapng: malformed pcapng block (a length field points past the block) at byte {epb}")
    );
}

/// The MAD decode benchmark's two captures (`roce gen-capture --cm-from`, with and without
/// `--plain-ud`): the same bytes, every ICRC good, one decoding as CM messages and the other as
/// plain UD SENDs with no MAD.
#[test]
fn the_cm_benchmark_captures_differ_only_in_the_mad_decode() {
    let src = std::fs::read("tests/data/cm.pcap").unwrap();
    let capture = |plain_ud: bool| {
        let mut r = roce_pcap::CaptureReader::new(&src[..], "cm.pcap").unwrap();
        let mut out = Vec::new();
        roce_pcap::synth::write_cm_capture(&mut r, &mut out, 50, plain_ud).unwrap();
        out
    };
    let (cm, ud) = (capture(false), capture(true));
    assert_eq!(cm.len(), ud.len());
    let json = Options {
        format: OutputFormat::Json,
        ..Default::default()
    };
    let (cm_out, cm_outcome) = decode_bytes(&cm, "cm", json);
    let (ud_out, ud_outcome) = decode_bytes(&ud, "ud", json);
    for o in [&cm_outcome, &ud_outcome] {
        assert_eq!(
            (o.stats.roce, o.stats.icrc_failures, o.stats.malformed),
            (50, 0, 0)
        );
    }
    let lines = |out: &[u8]| -> Vec<Value> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (cm_lines, ud_lines) = (lines(&cm_out), lines(&ud_out));
    assert_eq!(cm_lines.len(), 50);
    for (c, u) in cm_lines.iter().zip(&ud_lines) {
        assert_eq!(c["mad"]["mgmt_class"], 7, "{c}");
        assert!(c["cm"]["message"].is_string(), "{c}");
        assert!(u.get("mad").is_none() && u.get("cm").is_none(), "{u}");
        assert_eq!(u["bth"]["dest_qp"], 2);
        assert_eq!(u["deth"]["src_qp"], 2);
        assert_eq!(c["payload_len"], u["payload_len"]);
        assert_eq!(u["icrc_ok"], true);
    }
}
