//! Replays the committed fuzz seed corpus (fuzz/corpus/<target>/) through the fuzz target
//! bodies on stable, so `cargo test` exercises what `cargo fuzz` starts from.
use std::path::PathBuf;

fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        body(&data);
        // Every prefix too: the seeds are valid packets, their prefixes exercise every error path.
        for k in 0..data.len() {
            body(&data[..k]);
        }
        n += 1;
    }
    n
}

#[test]
fn packet_corpus() {
    assert!(replay("packet", roce_proto::fuzzing::packet) >= 40);
}

#[test]
fn frame_corpus() {
    assert!(replay("frame", roce_proto::fuzzing::frame) >= 4);
}

#[test]
fn roundtrip_corpus() {
    assert!(replay("roundtrip", roce_proto::fuzzing::roundtrip) >= 40);
}

#[test]
fn mad_corpus() {
    assert!(replay("mad", roce_proto::fuzzing::mad) >= 20);
}

#[test]
fn mrc_corpus() {
    assert!(replay("mrc", roce_proto::fuzzing::mrc) >= 12);
}

#[test]
fn uet_corpus() {
    assert!(replay("uet", roce_proto::fuzzing::uet) >= 8);
}
