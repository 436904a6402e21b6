//! The table of `roce decode --format parquet` (and of the Python package's `decode_table`):
//! every row holds what the packet's `roce decode --json` line holds, key for key, on every
//! shared capture and committed fixture, with `--all` rows and PAUSE/PFC frames; and a
//! Parquet file read back gives the same rows.
mod common;

use roce_pcap::columns::{Batch, Values, FIELDS, JSON_TEXT};
use roce_pcap::source::decode_columns;
use roce_pcap::{CaptureReader, Options, OutputFormat};
use serde_json::{Map, Value};

/// A JSON line flattened as the table is: nested keys dotted, the MAD objects kept whole.
fn flatten(v: &Value, prefix: &str, out: &mut Map<String, Value>) {
    let Value::Object(m) = v else { return };
    for (k, v) in m {
        let key = format!("{prefix}{k}");
        match v {
            Value::Object(_) if !JSON_TEXT.contains(&key.as_str()) => {
                flatten(v, &format!("{key}."), out);
            }
            _ => {
                out.insert(key, v.clone());
            }
        }
    }
}

/// Row `i` of `b` as a flat JSON object (nulls left out); `ts` as its nanoseconds.
fn row(b: &Batch, i: usize) -> Map<String, Value> {
    let mut out = Map::new();
    for (f, c) in FIELDS.iter().zip(b.columns()) {
        if !c.is_valid(i) {
            continue;
        }
        let v = match &c.values {
            Values::Bool(x) => Value::from(x.get(i).expect("a flag per row")),
            Values::U8(x) => Value::from(x[i]),
            Values::U16(x) => Value::from(x[i]),
            Values::U32(x) => Value::from(x[i]),
            Values::U64(x) => Value::from(x[i]),
            Values::I64(x) => Value::from(x[i]),
            Values::Timestamp(x) => Value::from(x[i]),
            Values::Text { .. } | Values::Dict { .. } => {
                let s = std::str::from_utf8(c.values.text(i).expect("a text per row"))
                    .expect("text columns are UTF-8");
                if JSON_TEXT.contains(&f.name) {
                    serde_json::from_str(s).unwrap_or_else(|e| panic!("{}: {s}: {e}", f.name))
                } else {
                    Value::from(s)
                }
            }
        };
        out.insert(f.name.to_string(), v);
    }
    out
}

/// The JSON line's `ts` (seconds, as written: not through a float) in nanoseconds.
fn ts_ns(line: &str) -> i64 {
    let at = line.find("\"ts\":").expect("a ts") + 5;
    let s = &line[at..at + line[at..].find(',').expect("more keys")];
    let (secs, frac) = s.split_once('.').expect("ts has a fraction");
    let frac = format!("{frac:0<9}");
    secs.parse::<i64>().unwrap() * 1_000_000_000 + frac.parse::<i64>().unwrap()
}

fn batches(bytes: &[u8], opts: Options, rows: usize) -> (Vec<Batch>, roce_pcap::Outcome) {
    let mut r = CaptureReader::new(bytes, "capture").expect("a capture");
    let mut got = Vec::new();
    let outcome = decode_columns(&mut r, opts, rows, None, &mut |b| {
        got.push(b);
        Ok(())
    });
    (got, outcome)
}

/// The JSON lines, as text and parsed.
fn json_lines(bytes: &[u8], opts: Options) -> Vec<(String, Value)> {
    let opts = Options {
        format: OutputFormat::Json,
        ..opts
    };
    let (out, _) = roce_pcap::decode_bytes(bytes, "capture", opts);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| (l.to_string(), serde_json::from_str(l).unwrap()))
        .collect()
}

/// Checks the table of `bytes` against its JSON lines; the rows compared.
fn check(name: &str, bytes: &[u8], opts: Options, rows_per_batch: usize) -> usize {
    let lines = json_lines(bytes, opts);
    let (got, outcome) = batches(bytes, opts, rows_per_batch);
    let json_outcome = roce_pcap::decode_bytes(bytes, "capture", opts).1;
    assert_eq!(outcome.stats, json_outcome.stats, "{name}: counters");
    assert!(
        got.iter()
            .all(|b| b.rows() <= rows_per_batch && b.rows() > 0),
        "{name}: batch sizes"
    );
    let rows: Vec<(usize, usize)> = got
        .iter()
        .enumerate()
        .flat_map(|(bi, b)| (0..b.rows()).map(move |i| (bi, i)))
        .collect();
    assert_eq!(rows.len(), lines.len(), "{name}: rows");
    for ((bi, i), (text, line)) in rows.into_iter().zip(&lines) {
        let mut table = row(&got[bi], i);
        let ts = table.remove("ts").and_then(|v| v.as_i64());
        assert_eq!(ts, Some(ts_ns(text)), "{name}: ts of {text}");
        let mut want = Map::new();
        flatten(line, "", &mut want);
        want.remove("ts");
        assert_eq!(Value::Object(table), Value::Object(want), "{name}");
    }
    lines.len()
}

#[test]
fn every_row_is_its_json_line_on_every_shared_capture_and_fixture() {
    let mut files = common::all_captures();
    for e in std::fs::read_dir(common::data_dir()).unwrap() {
        let p = e.unwrap().path();
        if matches!(
            p.extension().and_then(|x| x.to_str()),
            Some("pcap" | "pcapng")
        ) {
            files.push(p);
        }
    }
    let mut rows = 0;
    let mut mads = 0;
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        let name = path.display().to_string();
        for all in [false, true] {
            let opts = Options {
                all,
                ..Options::default()
            };
            // Small batches on the first pass: rows cross batch boundaries.
            rows += check(&name, &bytes, opts, if all { 1 << 17 } else { 7 });
        }
        mads += json_lines(&bytes, Options::default())
            .iter()
            .filter(|(_, l)| l.get("mad").is_some())
            .count();
    }
    assert!(rows > 5_000, "only {rows} rows compared");
    assert!(mads > 10, "only {mads} MAD rows compared");
}

/// MRC's and UET's rows: their JSON lines' keys, each its own column, on the synthetic
/// conversations (every packet kind `gen-capture` makes: sprayed writes, SACKs with CC state,
/// a trimmed packet and its NACK, probes; UET RUD with ACK_CC, a NACK) and XDP2's captures.
#[test]
fn mrc_and_uet_rows_are_their_json_lines() {
    let mut rows = 0;
    let mut fabric_keys = std::collections::BTreeSet::new();
    let mut captures = Vec::new();
    for mrc in [true, false] {
        let mut b = Vec::new();
        if mrc {
            roce_pcap::synth_fabric::write_mrc_capture(&mut b, 200, 4096).unwrap();
        } else {
            roce_pcap::synth_fabric::write_uet_capture(&mut b, 200, 4096).unwrap();
        }
        captures.push((if mrc { "mrc" } else { "uet" }.to_string(), b));
    }
    let xdp2 = concat!(env!("CARGO_MANIFEST_DIR"), "/../proto/tests/data/uet/");
    for f in ["uet_pds.pcap", "uet_ses.pcap"] {
        captures.push((f.to_string(), std::fs::read(format!("{xdp2}{f}")).unwrap()));
    }
    let with = Options {
        fabric_columns: true,
        ..Options::default()
    };
    for (name, bytes) in &captures {
        rows += check(name, bytes, with, 5);
        // Without the option the table is RoCE's, as before MRC and UET had columns: each
        // of their packets a row saying what it is, no column past RoCE's set.
        let (batches, _) = batches(bytes, Options::default(), 64);
        for b in &batches {
            let cols = b.columns();
            assert!(cols[roce_pcap::columns::FABRIC_FROM..]
                .iter()
                .all(|c| (0..b.rows()).all(|i| !c.is_valid(i))));
            let error = FIELDS.iter().position(|f| f.name == "error").unwrap();
            for i in 0..b.rows() {
                let e = cols[error].values.text(i).unwrap_or_default();
                assert!(
                    e.ends_with(b"(its columns come with --fabric-columns)"),
                    "{name}"
                );
            }
        }
        for (_, l) in json_lines(bytes, Options::default()) {
            let Value::Object(m) = l else { continue };
            fabric_keys.extend(
                m.keys()
                    .filter(|k| k.starts_with("mrc.") || k.starts_with("uet."))
                    .cloned(),
            );
        }
    }
    assert!(rows > 400, "only {rows} rows compared");
    // Every key those lines hold has its column (check() would fail otherwise), and many do.
    assert!(fabric_keys.len() > 100, "only {} keys", fabric_keys.len());
}

/// Many connections' packets interleaved (more than the two conversations whose endpoints
/// the rows keep at hand): every row's endpoints and names are its JSON line's, and each
/// batch's dictionaries hold each text once, all of them used.
#[test]
fn dictionary_columns_across_many_interleaved_connections() {
    let mut bytes = Vec::new();
    roce_pcap::synth::write_rc_capture(&mut bytes, 20_000, 64, 50).unwrap();
    let rows = check("rc, 64 QPs", &bytes, Options::default(), 1000);
    assert_eq!(rows, 20_000);
    let (got, _) = batches(&bytes, Options::default(), 1000);
    let mut dictionaries = 0;
    for b in &got {
        for (f, c) in FIELDS.iter().zip(b.columns()) {
            let Values::Dict { keys, dict } = &c.values else {
                continue;
            };
            if c.valid.ones() == 0 {
                continue;
            }
            dictionaries += 1;
            let texts: Vec<&[u8]> = (0..dict.len()).map(|k| dict.text(k).unwrap()).collect();
            let distinct: std::collections::HashSet<_> = texts.iter().collect();
            assert_eq!(distinct.len(), texts.len(), "{}: a text twice", f.name);
            let used: std::collections::HashSet<usize> = (0..b.rows())
                .filter(|&i| c.is_valid(i))
                .map(|i| keys.get(i).unwrap())
                .collect();
            assert_eq!(used.len(), texts.len(), "{}: a text no row uses", f.name);
        }
    }
    assert!(
        dictionaries >= 20 * 5,
        "{dictionaries} dictionary columns checked"
    );
}

#[test]
fn filters_and_count_apply_as_to_json() {
    let path = common::captures_dir().join("linlinw5-rdma_ib_tutorial/rdma_cm.pcap");
    let bytes = std::fs::read(path).unwrap();
    for opts in [
        Options {
            count: Some(5),
            ..Options::default()
        },
        Options {
            qp: Some(1),
            ..Options::default()
        },
        Options {
            mad_class: Some(roce_proto::mad::MgmtClass::CM),
            ..Options::default()
        },
    ] {
        let n = check("rdma_cm.pcap filtered", &bytes, opts, 3);
        assert!(n > 0 && n < 100, "{opts:?}: {n} rows");
    }
}

fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = roce_pcap::PcapWriter::new(&mut out, 1, true, 65535).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let ts = roce_pcap::Timestamp {
            secs: 1_700_000_000,
            nanos: i as u32 * 1001,
        };
        w.write_packet(ts, f, f.len() as u32).unwrap();
    }
    w.flush().unwrap();
    out
}

/// One RoCE frame (the benchmark capture's first).
fn roce_frame() -> Vec<u8> {
    let mut bench = Vec::new();
    roce_pcap::synth::write_benchmark_capture(&mut bench, 1).unwrap();
    let mut r = CaptureReader::new(&bench[..], "bench").unwrap();
    r.next_record().unwrap().unwrap().data.to_vec()
}

#[test]
fn pause_and_pfc_frames_are_rows() {
    let mac_control = |body: &[u8]| {
        let mut f = vec![
            1, 0x80, 0xc2, 0, 0, 1, 2, 0x11, 0x22, 0x33, 0x44, 0x55, 0x88, 0x08,
        ];
        f.extend_from_slice(body);
        f.resize(60, 0);
        f
    };
    let mut pfc = vec![0x01, 0x01, 0x00, 0x09];
    for q in [7u16, 0, 0, 0xffff, 0, 0, 0, 0] {
        pfc.extend_from_slice(&q.to_be_bytes());
    }
    let frames = vec![
        mac_control(&pfc),
        mac_control(&[0x00, 0x01, 0x00, 0x64]),
        roce_frame(),
    ];
    let bytes = pcap(&frames);
    assert_eq!(check("pfc", &bytes, Options::default(), 2), 3);
}

#[test]
fn a_parquet_file_reads_back_as_the_rows() {
    let path = common::captures_dir().join("linlinw5-rdma_ib_tutorial/rdma_cm.pcap");
    let bytes = std::fs::read(path).unwrap();
    // RoCE's columns only, as before MRC and UET had any.
    let n = reads_back(&bytes, Options::default(), roce_pcap::columns::FABRIC_FROM);
    assert!(n > 10);
    let mut mrc = Vec::new();
    roce_pcap::synth_fabric::write_mrc_capture(&mut mrc, 60, 4096).unwrap();
    let with = Options {
        fabric_columns: true,
        ..Options::default()
    };
    assert_eq!(reads_back(&mrc, with, FIELDS.len()), 60);
}

/// Writes `bytes` decoded with `opts` to a Parquet file, checks it has `columns` columns and
/// reads every row back as the table's; the rows.
fn reads_back(bytes: &[u8], opts: Options, columns: usize) -> usize {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let (batches, _) = batches(bytes, opts, usize::MAX);
    let mut r = CaptureReader::new(bytes, "capture").unwrap();
    let (outcome, file) =
        roce_pcap::parquet_file::decode_to_parquet(&mut r, opts, Vec::new(), 2, None);
    assert!(outcome.error.is_none());
    let file = bytes::Bytes::from(file.expect("the file"));
    let reader = SerializedFileReader::new(file).expect("a Parquet file");
    assert_eq!(
        reader
            .metadata()
            .file_metadata()
            .schema()
            .get_fields()
            .len(),
        columns
    );
    let mut n = 0;
    for (i, rec) in reader.get_row_iter(None).unwrap().enumerate() {
        let rec = rec.unwrap();
        let want = row(&batches[0], i);
        let mut got = Map::new();
        for (name, field) in rec.get_column_iter() {
            let v = match field {
                Field::Null => continue,
                Field::Bool(b) => Value::from(*b),
                Field::UByte(x) => Value::from(*x),
                Field::UShort(x) => Value::from(*x),
                Field::UInt(x) => Value::from(*x),
                Field::ULong(x) => Value::from(*x),
                Field::Long(x) => Value::from(*x),
                Field::Str(s) if JSON_TEXT.contains(&name.as_str()) => {
                    serde_json::from_str(s).unwrap()
                }
                Field::Str(s) => Value::from(s.as_str()),
                other => panic!("{name}: unexpected {other:?}"),
            };
            got.insert(name.clone(), v);
        }
        if let (Some(Value::Number(_)), Some(w)) = (got.get("ts"), want.get("ts")) {
            assert_eq!(got["ts"], *w);
        }
        got.remove("ts");
        let mut want = want;
        want.remove("ts");
        assert_eq!(Value::Object(got), Value::Object(want), "row {i}");
        n += 1;
    }
    assert_eq!(n, batches[0].rows());
    n
}

/// A Parquet file does not depend on the threads that made it: decoded on 1, 2 or 3
/// threads (batches of different lengths) it is the same bytes, in row groups of exactly
/// `BATCH_ROWS` rows (the last fewer), holding every row in order.
#[test]
fn a_parquet_file_is_the_same_on_any_number_of_threads() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let packets = roce_pcap::columns::BATCH_ROWS * 2 + 1234;
    let mut bench = Vec::new();
    roce_pcap::synth::write_benchmark_capture(&mut bench, packets as u64).unwrap();
    let file = |workers: usize| {
        let mut r = CaptureReader::new(&bench[..], "bench").unwrap();
        let (outcome, file) = roce_pcap::parquet_file::decode_to_parquet(
            &mut r,
            Options::default(),
            Vec::new(),
            workers,
            None,
        );
        assert!(
            outcome.error.is_none(),
            "{workers} threads: {:?}",
            outcome.error
        );
        file.expect("the file")
    };
    let one = file(1);
    for workers in [2, 3] {
        assert!(one == file(workers), "{workers} threads made another file");
    }
    let reader = SerializedFileReader::new(bytes::Bytes::from(one)).expect("a Parquet file");
    let groups: Vec<i64> = reader
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows())
        .collect();
    let full = roce_pcap::columns::BATCH_ROWS as i64;
    assert_eq!(groups, [full, full, 1234]);
    // The frame numbers run 1, 2, 3, ... across the row groups.
    let frames: Vec<u64> = reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| match r.unwrap().get_column_iter().next() {
            Some((_, parquet::record::Field::ULong(f))) => *f,
            other => panic!("frame: {other:?}"),
        })
        .collect();
    assert_eq!(frames.len(), packets);
    assert!(
        frames.iter().zip(1..).all(|(&f, i)| f == i),
        "frames out of order"
    );
}

#[test]
fn the_parallel_decoder_gives_the_same_rows_in_order() {
    let mut bench = Vec::new();
    roce_pcap::synth::write_benchmark_capture(&mut bench, 30_000).unwrap();
    let rows = |b: &[Batch]| -> Vec<Map<String, Value>> {
        b.iter()
            .flat_map(|b| (0..b.rows()).map(move |i| row(b, i)))
            .collect()
    };
    let (seq, s1) = batches(&bench, Options::default(), 1 << 20);
    let mut r = CaptureReader::new(&bench[..], "bench").unwrap();
    let mut par = Vec::new();
    let s2 = roce_pcap::source::decode_columns_parallel(
        &mut r,
        Options::default(),
        3,
        1000,
        None,
        &mut |b| {
            par.push(b);
            Ok(())
        },
    );
    assert!(par.len() >= 30, "{} batches", par.len());
    assert_eq!(s1.stats, s2.stats);
    assert_eq!(rows(&seq), rows(&par));
}

#[test]
fn docs_decode_md_lists_every_column() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/decode.md")).unwrap();
    let section = &doc[doc.find("## As a table").expect("the table section")..];
    for f in FIELDS {
        assert!(
            section.contains(&format!("`{}`", f.name)),
            "docs/decode.md does not list column {}",
            f.name
        );
    }
}
