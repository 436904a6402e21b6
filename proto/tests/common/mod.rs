//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

/// `../shared/captures` next to the repository root.
pub fn captures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/captures")
}

/// Decodes a hex string, ignoring whitespace.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd hex length");
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

/// The records of a legacy pcap file (linktype, data) — small files only.
pub fn pcap_records(path: &std::path::Path) -> (u32, Vec<Vec<u8>>) {
    use pcap_parser::traits::PcapReaderIterator;
    use pcap_parser::{LegacyPcapReader, PcapBlockOwned, PcapError};
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = LegacyPcapReader::new(1 << 20, file).expect("pcap header");
    let mut linktype = 0;
    let mut out = Vec::new();
    loop {
        match reader.next() {
            Ok((offset, block)) => {
                match block {
                    PcapBlockOwned::LegacyHeader(h) => linktype = h.network.0 as u32,
                    PcapBlockOwned::Legacy(b) => out.push(b.data.to_vec()),
                    _ => {}
                }
                reader.consume(offset);
            }
            Err(PcapError::Eof) => break,
            Err(PcapError::Incomplete(_)) => reader.refill().expect("refill"),
            Err(e) => panic!("{}: {e:?}", path.display()),
        }
    }
    (linktype, out)
}
