//! Replays the `pcap` fuzz target's committed seed corpus (fuzz/corpus/pcap/: the fixtures of
//! tests/data with a leading byte of options) through its body on stable, with every prefix
//! of every seed, so `cargo test` exercises the truncation paths `cargo fuzz` starts from; the
//! `analyze` target's body reads the same seeds.
use std::path::PathBuf;

#[test]
fn pcap_corpus_and_its_prefixes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/pcap");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        for k in (0..data.len()).step_by(7).chain([data.len()]) {
            roce_pcap::fuzzing::capture(&data[..k]);
            roce_pcap::fuzzing::analysis(&data[..k]);
        }
        n += 1;
    }
    assert!(n >= 8, "only {n} seeds");
}
