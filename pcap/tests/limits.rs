//! Bounds on what an input can make the reader hold.
use roce_pcap::reader::MAX_INTERFACES;
use roce_pcap::{decode_bytes, Options};

fn block(kind: u32, body: &[u8]) -> Vec<u8> {
    let len = (12 + body.len()) as u32;
    let mut b = Vec::new();
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&len.to_le_bytes());
    b
}

fn pcapng_with_interfaces(n: usize) -> Vec<u8> {
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    let mut out = block(0x0a0d_0d0a, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_le_bytes()); // Ethernet
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&0u32.to_le_bytes());
    let idb = block(1, &idb);
    for _ in 0..n {
        out.extend_from_slice(&idb);
    }
    out
}

#[test]
fn the_pcapng_interface_table_is_bounded() {
    let (_, ok) = decode_bytes(
        &pcapng_with_interfaces(MAX_INTERFACES),
        "ok",
        Options::default(),
    );
    assert!(ok.error.is_none(), "{:?}", ok.error);
    let (_, o) = decode_bytes(
        &pcapng_with_interfaces(MAX_INTERFACES + 1),
        "many",
        Options::default(),
    );
    let e = o
        .error
        .expect("more interfaces than the bound must be refused")
        .to_string();
    assert!(e.contains("interface description block"), "{e}");
    assert!(e.starts_with("many: "), "{e}");
}
