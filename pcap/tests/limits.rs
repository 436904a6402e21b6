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

/// A pcapng section with one Ethernet interface whose `if_tsresol` is `tsresol`, and one
/// packet stamped `t` of its units.
fn pcapng_stamped(tsresol: u8, t: u64) -> Vec<u8> {
    let mut out = pcapng_with_interfaces(0);
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_le_bytes()); // Ethernet
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&0u32.to_le_bytes());
    // if_tsresol (option 9): one byte, padded to 4; then opt_endofopt.
    idb.extend_from_slice(&9u16.to_le_bytes());
    idb.extend_from_slice(&1u16.to_le_bytes());
    idb.extend_from_slice(&[tsresol, 0, 0, 0]);
    idb.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&block(1, &idb));
    let frame = [0u8; 60];
    let mut epb = Vec::new();
    epb.extend_from_slice(&0u32.to_le_bytes());
    epb.extend_from_slice(&((t >> 32) as u32).to_le_bytes());
    epb.extend_from_slice(&(t as u32).to_le_bytes());
    epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    epb.extend_from_slice(&frame);
    out.extend_from_slice(&block(6, &epb));
    out
}

/// The time stamp of the one packet of `pcapng_stamped(tsresol, t)`, in ns.
fn stamp_ns(tsresol: u8, t: u64) -> i128 {
    let bytes = pcapng_stamped(tsresol, t);
    let mut r = roce_pcap::reader::CaptureReader::new(&bytes[..], "ts")
        .unwrap_or_else(|e| panic!("if_tsresol {tsresol:#x}: {e}"));
    let rec = r
        .next_record()
        .unwrap_or_else(|e| panic!("if_tsresol {tsresol:#x}: {e}"))
        .expect("one packet");
    i128::from(rec.ts.secs) * 1_000_000_000 + i128::from(rec.ts.nanos)
}

/// pcapng's `if_tsresol` may be any power of 10 or of 2 (pcapng §4.2): 0 and 0x80 are
/// one-second units, 0x7f and 0xff far below a nanosecond. Each is read, none refused.
#[test]
fn every_pcapng_time_stamp_resolution_is_read() {
    // One-second units, both ways of saying it.
    assert_eq!(stamp_ns(0, 1_700_000_000), 1_700_000_000_000_000_000);
    assert_eq!(stamp_ns(0x80, 1_700_000_000), 1_700_000_000_000_000_000);
    // The usual ones.
    assert_eq!(stamp_ns(6, 1_500_000), 1_500_000_000);
    assert_eq!(stamp_ns(9, 1_500_000_123), 1_500_000_123);
    // 2^-10 s: 1,536 units are 1.5 s.
    assert_eq!(stamp_ns(0x80 | 10, 1536), 1_500_000_000);
    // 2^-30 s: 2^30 + 2^29 units are 1.5 s.
    assert_eq!(stamp_ns(0x80 | 30, (1 << 30) + (1 << 29)), 1_500_000_000);
    // 10^-19 s (the largest power of ten in 64 bits) and past it.
    assert_eq!(stamp_ns(19, 15 * 10u64.pow(18)), 1_500_000_000);
    assert_eq!(stamp_ns(20, 15 * 10u64.pow(18)), 150_000_000);
    // 2^-63 s and past it (2^-64: 2^63 units are half a second).
    assert_eq!(stamp_ns(0x80 | 63, 3 << 62), 1_500_000_000);
    assert_eq!(stamp_ns(0x80 | 64, 1 << 63), 500_000_000);
    // The extremes: every stamp within the first second.
    for r in [0x7f, 0xff, 47, 48, 0x80 | 93, 0x80 | 94] {
        let ns = stamp_ns(r, u64::MAX);
        assert!(
            (0..2_000_000_000).contains(&ns),
            "if_tsresol {r:#x}: {ns} ns"
        );
    }
    // Every value of the byte reads.
    for r in 0..=255u8 {
        stamp_ns(r, 12_345);
    }
}
