//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]
use std::path::{Path, PathBuf};

pub mod fixtures;
pub mod script;

/// The shared third-party captures (read in place, never copied into the repo).
pub fn captures_dir() -> PathBuf {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/captures"
    ))
    .to_path_buf()
}

/// The committed fixtures.
pub fn data_dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data")).to_path_buf()
}

/// Every pcap/pcapng file under the shared captures, sorted.
pub fn all_captures() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![captures_dir()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot read {}: {e}", d.display()));
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("pcap" | "pcapng")
            ) {
                out.push(p);
            }
        }
    }
    out.sort();
    assert!(
        out.len() >= 20,
        "expected the shared captures, found {}",
        out.len()
    );
    out
}

/// Decodes a file as `roce decode --json` does; returns the parsed objects and the outcome.
pub fn decode_json(path: &Path) -> (Vec<serde_json::Value>, roce_pcap::Outcome) {
    let opts = roce_pcap::Options {
        format: roce_pcap::OutputFormat::Json,
        ..Default::default()
    };
    let mut out = Vec::new();
    let outcome = roce_pcap::decode_path(path.to_str().unwrap(), opts, &mut out);
    let text = String::from_utf8(out).expect("JSON output is UTF-8");
    let objs = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect();
    (objs, outcome)
}
