//! Every third-party capture in ../shared/captures decodes to its end, every RoCE packet is
//! well-formed, and every ICRC verifies (including the 43 native-IB packets of the ERF file).
mod common;
use common::*;

/// (path under captures/, packets, RoCE packets), from captures/SOURCES.md.
const EXPECTED: &[(&str, u64, u64)] = &[
    ("hexvectors/hexvectors-derived.pcap", 6, 6),
    ("linlinw5-rdma_ib_tutorial/rdma_send_bw.pcap", 50, 20),
    ("linlinw5-rdma_ib_tutorial/rdma_write_bw.pcap", 60, 20),
    ("linlinw5-rdma_ib_tutorial/rdma_write_lat.pcap", 45, 20),
    ("linlinw5-rdma_ib_tutorial/rdma_read_bw.pcap", 60, 20),
    ("linlinw5-rdma_ib_tutorial/rdma_read_lat.pcap", 38, 10),
    ("linlinw5-rdma_ib_tutorial/rdma_atomic_bw.pcap", 48, 10),
    ("linlinw5-rdma_ib_tutorial/pingpong_rc.pcap", 31, 20),
    ("linlinw5-rdma_ib_tutorial/pingpong_uc.pcap", 21, 10),
    ("linlinw5-rdma_ib_tutorial/pingpong_ud.pcap", 21, 10),
    ("linlinw5-rdma_ib_tutorial/rdma_cm.pcap", 96, 96),
    ("linlinw5-rdma_ib_tutorial/rping.pcap", 65, 65),
    ("oferby-proxy/roce.pcap", 123, 105),
    ("rdma-roce-lab/roce_capture_read-write-ecn.pcap", 12, 12),
    ("rdma-roce-lab/test.pcap", 16, 12),
    ("rdma-softroce-demo/infiniband.pcap", 43, 43),
];

#[test]
fn every_capture_decodes_with_good_icrcs() {
    let mut total_roce = 0;
    for path in all_captures() {
        let (objs, outcome) = decode_json(&path);
        let name = path.display();
        assert!(outcome.error.is_none(), "{name}: {:?}", outcome.error);
        assert_eq!(outcome.exit_code(true), 0, "{name}");
        let s = outcome.stats;
        assert!(s.roce > 0, "{name}: no RoCE packet");
        assert_eq!(s.malformed, 0, "{name}");
        assert_eq!(s.icrc_failures, 0, "{name}");
        assert_eq!(s.packets, s.roce + s.skipped, "{name}");
        assert_eq!(
            objs.len() as u64,
            s.roce,
            "{name}: one JSON object per RoCE packet"
        );
        for o in &objs {
            assert_eq!(o["icrc_ok"], true, "{name}: {o}");
            assert!(o.get("error").is_none(), "{name}: {o}");
        }
        total_roce += s.roce;
    }
    assert!(total_roce > 1500, "{total_roce}");
}

#[test]
fn packet_counts_match_sources_md() {
    for &(rel, packets, roce) in EXPECTED {
        let (_, outcome) = decode_json(&captures_dir().join(rel));
        assert_eq!(
            (outcome.stats.packets, outcome.stats.roce),
            (packets, roce),
            "{rel}"
        );
    }
}

#[test]
fn native_ib_erf_capture_has_43_verified_packets_6_with_grh() {
    let (objs, outcome) = decode_json(&captures_dir().join("rdma-softroce-demo/infiniband.pcap"));
    assert_eq!(outcome.stats.roce, 43);
    assert!(objs
        .iter()
        .all(|o| o["version"] == "ib" && o["icrc_ok"] == true));
    let with_gid = objs
        .iter()
        .filter(|o| o["src"].as_str().is_some_and(|s| !s.starts_with("lid:")))
        .count();
    assert_eq!(with_gid, 6, "packets with a GRH show GIDs");
}
