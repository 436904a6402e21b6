//! What the analysis holds per connection: a capture of many short RC conversations (the
//! shape of a job with a QP per peer and per rail) must cost a bounded, small number of
//! bytes per connection, not the full-size tables of a busy one.
use roce_pcap::analyze::analyze_in_turn;
use roce_pcap::CaptureReader;

/// Peak heap bytes of analyzing `qps` QPs taking turns, 30 packets each (8-packet WRITEs,
/// ACKs, one request in 200 lost and resent). The counter sees this thread's allocations
/// only, so one analyzer takes every record here (`analyze` would split them over threads).
fn peak(qps: u32) -> u64 {
    let mut capture = Vec::new();
    roce_pcap::synth::write_rc_capture(&mut capture, u64::from(qps) * 30, qps, 200).unwrap();
    let info = allocation_counter::measure(|| {
        let mut r = CaptureReader::new(capture.as_slice(), "rc").unwrap();
        let a = analyze_in_turn(&mut r, Default::default());
        assert!(a.error.is_none(), "{:?}", a.error);
        assert_eq!(a.connections.len(), qps as usize, "one connection per QP");
        assert_eq!(a.untracked, 0, "every direction analyzed");
    });
    info.bytes_max
}

#[test]
fn many_short_connections_cost_little_memory_each() {
    // The difference between two sizes: what each further connection costs, without the
    // reader's and the batches' fixed buffers.
    let (small, large) = (peak(4_000), peak(8_000));
    let per = large.saturating_sub(small) / 4_000;
    eprintln!("{per} bytes per connection ({small} B for 4,000, {large} B for 8,000)");
    // About 4.3 KB (2026-12-05); a connection whose tables were allocated at full size
    // would hold 3 KB more of PSN ring alone (128 slots of 32 bytes where it uses 32).
    assert!(
        (1_000..5_500).contains(&per),
        "{per} bytes per connection ({small} B for 4,000, {large} B for 8,000)"
    );
}
