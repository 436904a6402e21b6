//! The body of the `pcap` fuzz target: decoding arbitrary bytes as a capture must never panic,
//! loop or allocate without bound, in every output format, sequentially and on threads, and
//! the parallel decode must write exactly what the sequential one writes and count the same.
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
