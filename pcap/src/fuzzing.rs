//! The body of the `pcap` fuzz target: decoding arbitrary bytes as a capture must never panic,
//! loop or allocate without bound, in every output format (the table of `--format parquet`
//! and the Python package's too), sequentially and on threads, and the parallel decode must
//! write exactly what the sequential one writes and count the same.
//!
//! The first input byte picks the filters and the parallel batch size; the rest is the
//! capture (pcap or pcapng, either byte order, any link type).
use crate::decode::{decode, Options, OutputFormat};
use crate::parallel::decode_parallel;
use crate::reader::CaptureReader;

/// Decodes `data[1..]` in every output format, sequentially and on two threads, and checks
/// that both decodes agree byte for byte.
pub fn capture(data: &[u8]) {
    let Some((&knobs, capture)) = data.split_first() else {
        return;
    };
    for format in [
        OutputFormat::Summary,
        OutputFormat::Verbose,
        OutputFormat::Json,
    ] {
        let opts = Options {
            format,
            qp: (knobs & 1 != 0).then_some(u32::from(knobs >> 4)),
            errors: knobs & 2 != 0,
            all: knobs & 4 != 0,
            ..Options::default()
        };
        let (seq_out, seq) = run(capture, |r, out| decode(r, opts, out, None));
        let batch = usize::from(knobs >> 3 & 7) + 1;
        let (par_out, par) = run(capture, |r, out| {
            decode_parallel(r, opts, out, None, 2, batch)
        });
        assert_eq!(
            seq.0, par.0,
            "counters differ ({format:?}, batches of {batch})"
        );
        assert_eq!(
            seq.1, par.1,
            "errors differ ({format:?}, batches of {batch})"
        );
        assert!(
            seq_out == par_out,
            "output differs ({format:?}, batches of {batch})"
        );
    }
    table(capture, knobs);
}

/// The capture as table rows ([`crate::columns`]), sequentially in batches of a few rows and
/// (with knob 8) on two threads: every batch well formed (each column as long as the batch or empty, each
/// dictionary key a text of its batch's dictionary, held once) and the same rows both ways.
fn table(capture: &[u8], knobs: u8) {
    use crate::columns::Batch;
    use crate::source::{decode_columns, decode_columns_parallel};
    let opts = Options {
        all: knobs & 4 != 0,
        // MRC's and UET's columns too (the fuzzed capture's frames may be either).
        fabric_columns: knobs & 2 != 0,
        ..Options::default()
    };
    let rows = usize::from(knobs >> 5) + 1;
    let mut seq = Vec::new();
    let mut par = Vec::new();
    // On threads too when the knobs say (thread start-up is most of a small input's cost).
    for (out, parallel) in [(&mut seq, false), (&mut par, true)] {
        if parallel && knobs & 8 == 0 {
            break;
        }
        let Ok(mut r) = CaptureReader::new(capture, "fuzz") else {
            return;
        };
        let mut sink = |b: Batch| {
            out.push(b);
            Ok(())
        };
        if parallel {
            decode_columns_parallel(&mut r, opts, 2, rows, None, &mut sink);
        } else {
            decode_columns(&mut r, opts, rows, None, &mut sink);
        }
    }
    let a = table_rows(&seq);
    if knobs & 8 != 0 {
        assert!(
            a == table_rows(&par),
            "the parallel table differs from the sequential one"
        );
    }
}

/// A table's rows, each as its columns' values (`None` for a null), every batch checked.
fn table_rows(batches: &[crate::columns::Batch]) -> Vec<Vec<Option<Vec<u8>>>> {
    use crate::columns::Values;
    let mut out = Vec::new();
    for b in batches {
        let n = b.rows();
        assert!(n > 0, "an empty batch");
        for c in b.columns() {
            let len = match &c.values {
                Values::Bool(x) => x.len(),
                Values::U8(x) => x.len(),
                Values::U16(x) => x.len(),
                Values::U32(x) => x.len(),
                Values::U64(x) => x.len(),
                Values::I64(x) | Values::Timestamp(x) => x.len(),
                Values::Text { offsets, .. } => offsets.len() - 1,
                Values::Dict { keys, dict } => {
                    let texts: std::collections::HashSet<&[u8]> =
                        (0..dict.len()).filter_map(|k| dict.text(k)).collect();
                    assert_eq!(texts.len(), dict.len(), "a dictionary holds a text twice");
                    for i in (0..keys.len()).filter(|&i| c.is_valid(i)) {
                        assert!(
                            keys.get(i).is_some_and(|k| k < dict.len()),
                            "a key past its dictionary"
                        );
                    }
                    keys.len()
                }
            };
            assert!(
                len == n || (len == 0 && c.valid.is_empty()),
                "a column of {len} rows in a batch of {n}"
            );
            assert!(
                c.valid.len() == len,
                "validity of {} rows, values of {len}",
                c.valid.len()
            );
        }
        for i in 0..n {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| {
                        c.is_valid(i).then(|| match c.values.num(i) {
                            Some(v) => v.to_le_bytes().to_vec(),
                            None => match &c.values {
                                Values::Timestamp(x) => x[i].to_le_bytes().to_vec(),
                                v => v.text(i).map(<[u8]>::to_vec).unwrap_or_default(),
                            },
                        })
                    })
                    .collect(),
            );
        }
    }
    out
}

type Summary = (crate::decode::Stats, Option<String>);

fn run(
    capture: &[u8],
    f: impl FnOnce(&mut CaptureReader<&[u8]>, &mut Vec<u8>) -> crate::decode::Outcome,
) -> (Vec<u8>, Summary) {
    let mut out = Vec::new();
    match CaptureReader::new(capture, "fuzz") {
        Ok(mut r) => {
            let o = f(&mut r, &mut out);
            (out, (o.stats, o.error.map(|e| e.to_string())))
        }
        Err(e) => (out, (Default::default(), Some(e.to_string()))),
    }
}

/// The body of the `analyze` fuzz target: analyzing arbitrary bytes as a capture must never
/// panic or grow without bound, every report must render (text, JSON, HTML with its plots,
/// the trace), and the sequential analysis inside `decode --analyze` must see the same
/// packets. The first byte picks the options; the rest is the capture.
pub fn analysis(data: &[u8]) {
    use crate::analyze;
    let Some((&knobs, capture)) = data.split_first() else {
        return;
    };
    let opts = analyze::Options {
        pictures: knobs & 1 != 0,
        stall_ns: 1 << (knobs >> 4),
        cnp_interval_ns: u64::from(knobs & 0x0e) * 1000,
        ..analyze::Options::default()
    };
    let Ok(mut r) = CaptureReader::new(capture, "fuzz") else {
        return;
    };
    let a = analyze::analyze(&mut r, opts);
    // The analysis split over threads by host pair is the one analyzer of every record.
    let Ok(mut r) = CaptureReader::new(capture, "fuzz") else {
        unreachable!("it opened once");
    };
    let one = analyze::analyze_in_turn(&mut r, opts);
    assert_eq!(
        analyze::json_lines(&a, true),
        analyze::json_lines(&one, true),
        "the sharded analysis differs from the sequential one"
    );
    let _ = analyze::text(&a, knobs & 2 != 0);
    let _ = analyze::json_lines(&a, true);
    let mut sink = Vec::new();
    analyze::write_html(&a, &mut sink).expect("into memory");
    sink.clear();
    analyze::write_trace(&a, &mut sink).expect("into memory");
    // decode --analyze runs the same analysis, record by record.
    let _ = run(capture, |r, out| {
        decode(
            r,
            Options {
                analyze: true,
                ..Options::default()
            },
            out,
            None,
        )
    });
}
