//! Replays the `pcap` fuzz target's committed seed corpus (fuzz/corpus/pcap/: the fixtures of
//! tests/data with a leading byte of options) through its body on stable, with prefixes of
//! every seed, so `cargo test` exercises the truncation paths `cargo fuzz` starts from; the
//! `analyze` target's body reads the same seeds.
//!
//! The prefixes: every 7th byte through the first 256 (the file header, the first record
//! header and the first frame's link, IP, UDP and BTH headers, cut at every field), then 32
//! cuts spread over the rest at an odd stride (so that they fall at varied offsets of the
//! later records). Every prefix took CI five minutes, quadratic in the seeds' length, for
//! paths the fuzz targets' own runs take too.
use std::path::PathBuf;

#[test]
fn pcap_corpus_and_its_prefixes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pcap");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        let head = data.len().min(256);
        let stride = ((data.len() - head) / 32) | 1;
        let cuts = (0..head)
            .step_by(7)
            .chain((head..data.len()).step_by(stride));
        for k in cuts.chain([data.len()]) {
            roce_pcap::fuzzing::capture(&data[..k]);
            roce_pcap::fuzzing::analysis(&data[..k]);
        }
        n += 1;
    }
    assert!(n >= 8, "only {n} seeds");
}
