//! `roce analyze` end to end: its counters agree exactly with `roce loopback`'s report on
//! the same impaired run (the analysis of the loopback's `--pcap`), the JSON keys `docs/analyze.md`
//! documents, `--check`, the plots, the HTML page and the trace parse and show their marks,
//! `roce decode --analyze`, and bad input gets one clear error line.
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn roce(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .output()
        .expect("runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-analyze-cli-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// Loopback runs bind the RoCE port: one at a time.
static LOOPBACK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A loopback run with loss and CE marks, captured; its JSON report.
fn lossy_loopback(pcap: &Path, seed: &str) -> Value {
    let _one = LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
    let (code, out, err) = roce(&[
        "loopback",
        "--qps",
        "3",
        "--count",
        "120",
        "--size",
        "0-20K",
        "--loss",
        "0.02",
        "--ce",
        "0.05",
        "--seed",
        seed,
        "--json",
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "loopback failed: {err}");
    serde_json::from_str(out.trim()).expect("one JSON object")
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn sum(conns: &[&Value], f: impl Fn(&Value) -> u64) -> u64 {
    conns.iter().map(|c| f(c)).sum()
}

#[test]
fn analysis_agrees_with_the_loopback_report_exactly() {
    for seed in ["3", "11"] {
        let pcap = tmp(&format!("lb-{seed}.pcap"));
        let report = lossy_loopback(&pcap, seed);
        // The capture holds what each end sent, stamped when it left: the CNP spacing on
        // the wire is checked too, against the default 50 us (the DCQCN paper's, which the
        // stack paces CNPs by).
        let (code, out, err) = roce(&["analyze", "--json", "--check", pcap.to_str().unwrap()]);
        assert_eq!(
            code, 0,
            "our own stack violates a rule (seed {seed}): {err}\n{out}"
        );
        let lines = json_lines(&out);
        let conns: Vec<&Value> = lines.iter().filter(|l| l["type"] == "connection").collect();
        assert_eq!(conns.len(), 3, "one connection per QP pair");
        let n = |v: &Value| v.as_u64().unwrap();
        let ctx = format!("seed {seed}: report {report}\nanalysis {out}");
        assert_eq!(
            sum(&conns, |c| n(&c["retransmitted_packets"])),
            n(&report["retransmitted_packets"]),
            "{ctx}"
        );
        for kind in [
            "seq_err",
            "rnr",
            "invalid_request",
            "remote_access",
            "remote_op",
        ] {
            assert_eq!(
                sum(&conns, |c| n(&c["naks"][kind])),
                n(&report["naks"][kind]),
                "NAKs {kind}, {ctx}"
            );
        }
        // Every CNP either end sent, and their spacing checked: the first CE mark of a
        // window is answered at once, the rest at the window's end, at least 50 us apart
        // as they left.
        let cnps = sum(&conns, |c| n(&c["cnps"]));
        let client = &report["client"];
        assert!(
            cnps >= n(&client["cnps_sent"]) + n(&client["cnps_received"])
                && cnps <= n(&report["cnps_sent"]),
            "CNPs {cnps}, {ctx}"
        );
        let cnp_checks: u64 = conns
            .iter()
            .flat_map(|c| c["verdicts"].as_array().unwrap())
            .filter(|v| v["rule"] == "cnp_min_interval")
            .map(|v| {
                assert_ne!(v["result"], "violated", "{v}");
                let detail = v["detail"].as_str().unwrap();
                detail.split(' ').next().unwrap().parse::<u64>().unwrap()
            })
            .sum();
        assert!(cnp_checks > 0, "no CNP spacing checked: {ctx}");
        // Messages by operation: the report's atomics are cas + faa.
        let ops = &report["ops"];
        let op = |k: &str| ops[k].as_u64().unwrap_or(0);
        for (key, want) in [
            ("send", op("send")),
            // Each QP ends with one more: the FIN (a SEND with immediate) that tells the
            // responder it is done.
            ("send_imm", op("send_imm") + 3),
            ("write", op("write")),
            ("write_imm", op("write_imm")),
            ("read", op("read")),
            ("atomic", op("cas") + op("faa")),
        ] {
            assert_eq!(
                sum(&conns, |c| n(&c["messages"][key]["count"])),
                want,
                "{key} messages, {ctx}"
            );
        }
        assert!(n(&report["retransmitted_packets"]) > 0 && n(&report["cnps_sent"]) > 0);
        // Every connection was paired, and has the documented keys.
        for c in &conns {
            for key in [
                "id",
                "endpoints",
                "paired_by",
                "packets",
                "bytes",
                "messages",
                "retransmitted_packets",
                "retransmission_episodes",
                "naks",
                "psn_gaps",
                "never_seen_psns",
                "missed_by_capture",
                "unseen_read_responses",
                "duplicates",
                "ghost_acks",
                "cnps",
                "ecn_ce",
                "latency_us",
                "verdicts",
            ] {
                assert!(c.get(key).is_some(), "no {key} in {c}");
            }
            assert_eq!(c["paired_by"], "udp_sport");
            assert_eq!(c["verdicts"].as_array().unwrap().len(), 9);
            assert!(c["latency_us"]["ack_rtt"]["p99"].as_f64().unwrap() > 0.0);
            for cause in ["nak_seq", "rnr", "timeout", "implied_nak", "unknown"] {
                assert!(c["retransmission_episodes"].get(cause).is_some());
            }
        }
        let _ = std::fs::remove_file(&pcap);
    }
}

#[test]
fn events_plots_html_and_trace() {
    let pcap = tmp("lb-plots.pcap");
    lossy_loopback(&pcap, "5");
    let p = pcap.to_str().unwrap();
    // --events: one event object per event, with the documented keys.
    let (code, out, _) = roce(&["analyze", "--json", "--events", p]);
    assert_eq!(code, 0);
    let lines = json_lines(&out);
    let events: Vec<&Value> = lines.iter().filter(|l| l["type"] == "event").collect();
    assert!(events.iter().any(|e| e["kind"] == "retransmission"));
    assert!(events.iter().any(|e| e["kind"] == "nak_seq"));
    assert!(events.iter().any(|e| e["kind"] == "cnp"));
    for e in &events {
        for key in ["frame", "t", "connection", "side", "kind", "psn"] {
            assert!(e.get(key).is_some(), "no {key} in {e}");
        }
    }
    // Text: the table, then each connection with its verdicts (every rule named, checked
    // or on the `not applicable` line).
    let (_, text, _) = roce(&["analyze", p]);
    assert!(text.contains("paired") && text.contains("  verdict "));
    for rule in roce_pcap::analyze::RULES {
        assert!(text.contains(rule), "rule {rule} not in the text report");
    }

    let dir = tmp("plots");
    let html = tmp("report.html");
    let trace = tmp("trace.json");
    let (code, _, err) = roce(&[
        "analyze",
        p,
        "--plot",
        dir.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let mut svgs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let doc =
            roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let labels: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.ends_with("-psn.svg") {
            for mark in ["request (", "retransmission (", "ACK (", "NAK ("] {
                assert!(
                    labels.iter().any(|l| l.starts_with(mark)),
                    "{name}: no {mark:?} in {labels:?}"
                );
            }
            // Drawn, not only labelled: circles for the points.
            assert!(
                doc.descendants()
                    .filter(|n| n.has_tag_name("circle"))
                    .count()
                    > 100
            );
        } else {
            assert!(name.ends_with("-rate.svg"), "{name}");
            assert!(
                labels.iter().any(|l| l.starts_with("CNP received (")),
                "{name}: {labels:?}"
            );
            assert!(doc.descendants().any(|n| n.has_tag_name("polyline")));
            // CNPs are a rug of short ticks at the bottom (a busy connection's CNPs would be
            // a wall of full-height lines): no red line spans more than a tenth of the plot.
            let height: f64 = doc
                .root_element()
                .attribute("height")
                .unwrap()
                .parse()
                .unwrap();
            let mut ticks = 0;
            for n in doc
                .descendants()
                .filter(|n| n.has_tag_name("polyline") && n.attribute("stroke") == Some("#D62728"))
            {
                let ys: Vec<f64> = n
                    .attribute("points")
                    .unwrap()
                    .split_whitespace()
                    .map(|p| p.split(',').nth(1).unwrap().parse().unwrap())
                    .collect();
                let span = ys.iter().cloned().fold(f64::MIN, f64::max)
                    - ys.iter().cloned().fold(f64::MAX, f64::min);
                assert!(span < height / 10.0, "{name}: a CNP line {span} px high");
                ticks += 1;
            }
            assert!(ticks > 0, "{name}: no CNP drawn");
        }
        svgs += 1;
    }
    assert_eq!(svgs, 6, "a PSN and a rate plot per connection");
    // The HTML page parses (it is XHTML) and carries the plots inline, nothing fetched.
    let page = std::fs::read_to_string(&html).unwrap();
    let doc = roxmltree::Document::parse_with_options(
        &page,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .expect("the HTML report is well-formed");
    assert_eq!(
        doc.descendants().filter(|n| n.has_tag_name("svg")).count(),
        6
    );
    assert!(
        doc.descendants()
            .filter(|n| n.has_tag_name("table"))
            .count()
            >= 4
    );
    assert!(
        !page.contains("http://") || !page.contains("src=\""),
        "no external fetches"
    );
    assert!(!page.contains("<script"), "no scripts");
    // Frame lists read as lists, not as JSON.
    assert!(
        !page.contains("<td>[]</td>") && !page.contains("<td>["),
        "frame lists as JSON"
    );
    // The trace: Chrome/Perfetto trace events, a track per QP.
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let evs = t["traceEvents"].as_array().unwrap();
    let ph = |p: &str| evs.iter().filter(|e| e["ph"] == p).count();
    assert_eq!(
        ph("M"),
        3 * 3,
        "a process name per connection, a thread name per side"
    );
    assert!(ph("X") > 100 && ph("i") > 10 && ph("C") > 0);
    for e in evs.iter().filter(|e| e["ph"] == "X") {
        assert!(e["dur"].as_f64().unwrap() >= 0.0 && e["ts"].as_f64().is_some());
    }
    let _ = std::fs::remove_dir_all(&dir);
    for f in [&html, &trace, &pcap] {
        let _ = std::fs::remove_file(f);
    }
}

/// On a connection with more requests than the PSN plot draws, the legend still counts them
/// all, and says how many it drew.
#[test]
fn the_psn_plot_legend_counts_what_the_connection_had() {
    let pcap = tmp("one-qp.pcap");
    let p = pcap.to_str().unwrap();
    let (code, _, err) = roce(&["gen-capture", "--rc", "1", "--packets", "30000", p]);
    assert_eq!(code, 0, "{err}");
    let dir = tmp("legend-plots");
    let (code, _, err) = roce(&["analyze", p, "--plot", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = roce(&["analyze", "--json", p]);
    let conn = &json_lines(&out)[0];
    let n = |k: &str| conn[k].as_u64().unwrap();
    let svg = std::fs::read_to_string(dir.join("conn-1-psn.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let label = doc
        .descendants()
        .filter_map(|n| n.text())
        .find(|t| t.trim().starts_with("request ("))
        .expect("a request legend")
        .trim()
        .to_string();
    let drawn = doc
        .descendants()
        .filter(|n| n.has_tag_name("circle") && n.attribute("fill") == Some("#1F77B4"))
        .count() as u64
        - 1;
    // Every packet was a request or an ACK; the requests that were not resent.
    let requests =
        n("packets") - n("retransmitted_packets") - conn["naks"]["seq_err"].as_u64().unwrap();
    let counted: u64 = label["request (".len()..]
        .split([',', ')'])
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(drawn < counted, "{label}: {drawn} drawn, thinned");
    assert!(
        label.contains(&format!("{drawn} drawn")),
        "{label}: {drawn} circles"
    );
    assert!(
        counted > 20_000 && counted <= requests,
        "{label}: {requests} requests"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn decode_analyze_flags_packets() {
    let pcap = tmp("lb-decode.pcap");
    lossy_loopback(&pcap, "8");
    let p = pcap.to_str().unwrap();
    let (code, out, _) = roce(&["decode", "--analyze", p]);
    assert_eq!(code, 0);
    assert!(out.lines().any(
        |l| l.ends_with("[retransmission(nak_seq)]") || l.contains("[retransmission(nak_seq)")
    ));
    assert!(out.lines().any(|l| l.contains("[nak_seq]")));
    assert!(out.lines().any(|l| l.contains("[cnp]")));
    let (_, json, _) = roce(&["decode", "--analyze", "--json", p]);
    let flagged: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("analysis").is_some())
        .collect();
    assert!(flagged
        .iter()
        .any(|v| v["analysis"][0]["event"] == "retransmission"));
    let (_, tree, _) = roce(&["decode", "--analyze", "-v", "--count", "4000", p]);
    assert!(tree.contains("Analysis\n    retransmission"));
    // Without --analyze, no flags.
    let (_, plain, _) = roce(&["decode", p]);
    assert!(!plain.contains("[retransmission"));
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn check_exits_1_on_a_violation() {
    // A requester restarting past the NAKed PSN, built with roce-proto.
    use roce_pcap::synth::packet_for;
    use roce_proto::aeth::NakCode;
    use roce_proto::{AethRepr, FrameBuilder, Msn, Opcode, Psn, Qpn, Syndrome};
    let mut w =
        roce_pcap::PcapWriter::new(Vec::new(), roce_pcap::link::ETHERNET, true, 65535).unwrap();
    let a = FrameBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0xc001);
    let b = FrameBuilder::ipv4([10, 0, 0, 2], [10, 0, 0, 1], 0xc001);
    let mut put = |n: u32, from_a: bool, op: Opcode, psn: u32, syn: Option<Syndrome>| {
        let mut p = packet_for(op, 0, &[1u8; 64]);
        p.bth.psn = Psn::new(psn);
        p.bth.dest_qp = Qpn(if from_a { 0x22 } else { 0x11 });
        if let Some(s) = syn {
            p.aeth = Some(AethRepr {
                syndrome: s,
                msn: Msn(0),
            });
        }
        let fb = if from_a { a } else { b };
        let mut buf = vec![0u8; fb.frame_len(&p)];
        let len = fb.build(&p, &mut buf).unwrap();
        let ts = roce_pcap::Timestamp {
            secs: 1,
            nanos: n * 1000,
        };
        w.write_packet(ts, &buf[..len], len as u32).unwrap();
    };
    for psn in 0..4 {
        put(psn, true, Opcode::RC_SEND_ONLY, psn, None);
    }
    put(
        5,
        false,
        Opcode::RC_ACKNOWLEDGE,
        1,
        Some(Syndrome::nak(NakCode::PsnSequenceError)),
    );
    put(7, true, Opcode::RC_SEND_ONLY, 3, None);
    w.flush().unwrap();
    let path = tmp("violation.pcap");
    std::fs::write(&path, w.into_inner()).unwrap();
    let p = path.to_str().unwrap();
    let (code, out, _) = roce(&["analyze", p]);
    assert_eq!(
        code, 0,
        "without --check a violation is reported, not an error"
    );
    assert!(out.contains("VIOLATED: gbn_restart_at_naked_psn"), "{out}");
    let (code, _, err) = roce(&["analyze", "--check", p]);
    assert_eq!(code, 1);
    assert_eq!(err.trim(), "roce analyze: 1 connection(s) violate a rule");
    // From stdin too.
    let o = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["analyze", "--check", "-"])
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn bad_input_gets_one_clear_line() {
    let (code, out, err) = roce(&["analyze", "/nonexistent/x.pcap"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("roce analyze: ") && err.contains("/nonexistent/x.pcap"),
        "{err}"
    );
    let not = tmp("not-a-capture.pcap");
    std::fs::write(&not, b"this is not a capture file at all, just text\n").unwrap();
    let (code, _, err) = roce(&["analyze", not.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("panicked"));
    // A capture cut short: what was read is analyzed and reported, then the error.
    let pcap = tmp("cut.pcap");
    lossy_loopback(&pcap, "9");
    let bytes = std::fs::read(&pcap).unwrap();
    std::fs::write(&pcap, &bytes[..bytes.len() / 2 + 7]).unwrap();
    let (code, out, err) = roce(&["analyze", pcap.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("3 connections"), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, _, err) = roce(&[
        "analyze",
        "--from",
        "2",
        "--to",
        "1",
        pcap.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("--to"), "{err}");
    let (code, _, err) = roce(&["analyze", "--stall", "fast", pcap.to_str().unwrap()]);
    assert_eq!(code, 2, "clap's usage error: {err}");
    let _ = std::fs::remove_file(&pcap);
    let _ = std::fs::remove_file(&not);
}

#[test]
fn fit_dcqcn_names_a_preset_for_each_notified_sender() {
    let pcap = tmp("lb-fit.pcap");
    {
        let _one = LOOPBACK.lock().unwrap_or_else(|e| e.into_inner());
        let (code, _, err) = roce(&[
            "loopback",
            "--qps",
            "2",
            "--count",
            "200",
            "--size",
            "16K-64K",
            "--ce",
            "0.05",
            "--cc",
            "dcqcn",
            "--seed",
            "3",
            "--pcap",
            pcap.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, _) = roce(&["analyze", "--json", "--fit-dcqcn", pcap.to_str().unwrap()]);
    assert_eq!(code, 0);
    let fits: Vec<Value> = json_lines(&out)
        .into_iter()
        .filter(|l| l["type"] == "dcqcn_fit")
        .collect();
    assert!(!fits.is_empty(), "{out}");
    for f in &fits {
        let best = f["best"].as_str().unwrap();
        assert!(best == "paper" || best == "nvidia");
        for p in ["paper", "nvidia"] {
            let e = f["error_pct"][p].as_f64().unwrap();
            assert!((0.0..=100.0).contains(&e), "{f}");
        }
    }
    let (_, text, _) = roce(&["analyze", "--fit-dcqcn", pcap.to_str().unwrap()]);
    assert!(text.contains("DCQCN fit"), "{text}");
    let _ = std::fs::remove_file(&pcap);
}

/// Two captures of one NCCL job, one per host (real captures): `roce analyze A B` matches
/// the packets between those hosts, each direction with its upstream capture first, both
/// directions agreeing on the clock offset (one the other's negative), nothing lost; the
/// text report says the same; a capture given twice as `-` is refused in one line.
#[test]
fn two_hosts_captures_are_matched_and_their_clocks_agree() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/captures/linlinw5-rdma_ib_tutorial/nccl");
    let (a, b) = (dir.join("nccl_node0.pcap"), dir.join("nccl_node1.pcap"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let (code, out, err) = roce(&["analyze", "--json", a, b]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v["type"] == "loss_localisation")
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    let (x, y) = (&lines[0], &lines[1]);
    assert_eq!((&x["from"], &x["to"]), (&y["to"], &y["from"]), "{x} {y}");
    let (ox, oy) = (
        x["clock_offset_us"].as_f64().unwrap(),
        y["clock_offset_us"].as_f64().unwrap(),
    );
    assert!((ox + oy).abs() < 1e-6, "{ox} {oy}");
    for l in &lines {
        assert!(l["matched"].as_u64().unwrap() > 10, "{l}");
        assert_eq!(l["lost_between"], 0, "{l}");
        assert_eq!(l["only_downstream"], 0, "{l}");
        assert!(l["one_way_delay_us"]["p50"].as_f64().unwrap() > 0.0, "{l}");
        for k in ["direction", "frames", "offset_one_way"] {
            assert!(l.get(k).is_some(), "{k} in {l}");
        }
    }
    let (code, text, err) = roce(&["analyze", a, b]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(text.matches("\nloss localisation ").count(), 2, "{text}");
    let (code, _, err) = roce(&["analyze", a, "-"]);
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not `-`"), "{err}");
}

/// `--cc PRESET` sets the CNP interval the rule expects, `--cnp-interval` overrides it, a
/// preset that does not exist is one error line.
#[test]
fn the_cnp_interval_follows_the_named_preset_unless_given() {
    let pcap = tmp("cc-preset.pcap");
    lossy_loopback(&pcap, "5");
    let p = pcap.to_str().unwrap();
    let rule = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["analyze", "--json", p];
        a.extend_from_slice(args);
        let (code, out, err) = roce(&a);
        assert_eq!(code, 0, "{err}");
        json_lines(&out)
            .iter()
            .filter(|l| l["type"] == "connection")
            .flat_map(|c| c["verdicts"].as_array().unwrap().clone())
            .filter(|v| v["rule"] == "cnp_min_interval" && v["result"] != "not_applicable")
            .map(|v| v["result"].as_str().unwrap().to_string())
            .collect()
    };
    let all = |v: &[String], r: &str| !v.is_empty() && v.iter().all(|x| x == r);
    for preset in ["dcqcn", "nvidia", "none"] {
        assert!(all(&rule(&["--cc", preset]), "ok"), "{preset}");
    }
    // Far apart as the CNPs are, 1 s is more than any two of them.
    assert!(all(&rule(&["--cnp-interval", "1s"]), "violated"));
    assert!(all(
        &rule(&["--cc", "hpcc", "--cnp-interval", "1s"]),
        "violated"
    ));
    assert!(all(&rule(&["--cc", "hpcc"]), "ok"), "no interval to keep");
    let (code, _, err) = roce(&["analyze", p, "--cc", "bbr"]);
    assert_ne!(code, 0);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--cc"), "{err}");
}

#[test]
fn nic_counters_are_set_beside_the_capture() {
    let pcap = tmp("counters.pcap");
    lossy_loopback(&pcap, "11");
    let p = pcap.to_str().unwrap();
    let (code, out, err) = roce(&["analyze", "--json", p]);
    assert_eq!(code, 0, "{err}");
    // The host that sent the most CNPs, and how many it sent.
    let mut sent: std::collections::BTreeMap<String, u64> = Default::default();
    for c in json_lines(&out)
        .iter()
        .filter(|v| v["type"] == "connection")
    {
        for s in c["sides"].as_array().unwrap() {
            *sent
                .entry(s["addr"].as_str().unwrap().to_string())
                .or_default() += s["cnps"].as_u64().unwrap();
        }
    }
    let (addr, cnps) = sent.iter().max_by_key(|x| x.1).unwrap();
    assert!(*cnps > 0, "the lossy loopback marks CE: {sent:?}");
    // Two snapshots, `rdma statistic` before and `ethtool -S` after: their difference is
    // what the capture shows.
    let before = tmp("before.txt");
    let after = tmp("after.txt");
    std::fs::write(&before, "link rxe0/1 np_cnp_sent 100 rx_packets 5\n").unwrap();
    std::fs::write(&after, format!("     np_cnp_sent: {}\n", 100 + cnps)).unwrap();
    let arg = format!("{addr}={},{}", before.display(), after.display());
    let (code, out, err) = roce(&["analyze", "--json", "--counters", &arg, p]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Value> = json_lines(&out)
        .into_iter()
        .filter(|v| v["type"] == "counter")
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    assert_eq!(
        (
            &rows[0]["counter"],
            &rows[0]["value"],
            &rows[0]["capture"],
            &rows[0]["agrees"]
        ),
        (
            &Value::from("np_cnp_sent"),
            &Value::from(*cnps),
            &Value::from(*cnps),
            &Value::from(true)
        ),
        "{out}"
    );
    // Reversed, the counter goes back: one line, exit 1. Not an address, no file: the same.
    for (bad, says) in [
        (
            format!("{addr}={},{}", after.display(), before.display()),
            "lower after than before",
        ),
        (
            format!("nowhere={}", after.display()),
            "is not an IP address",
        ),
        (
            format!("{addr}=/nonexistent/counters.txt"),
            "/nonexistent/counters.txt",
        ),
        (addr.clone(), "give ADDR=FILE"),
    ] {
        let (code, out, err) = roce(&["analyze", "--counters", &bad, p]);
        assert_eq!((code, out.as_str()), (1, ""), "{bad}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(says), "{bad}: {err}");
    }
    for f in [&pcap, &before, &after] {
        let _ = std::fs::remove_file(f);
    }
}
