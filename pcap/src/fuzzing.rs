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
