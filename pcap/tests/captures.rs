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

/// The frame `n` of a capture's JSON.
fn frame(objs: &[serde_json::Value], n: u64) -> &serde_json::Value {
    objs.iter()
        .find(|o| o["frame"] == n)
        .unwrap_or_else(|| panic!("no frame {n}"))
}

/// Known answers for the CM exchange of an rdma_cm application (rxe, librdmacm), read from the
/// capture's bytes against IBTA Vol 1 ch. 12 (and matching tshark's fields where tshark is
/// right: see tshark_mad.rs for where it is not).
#[test]
fn the_rdma_cm_exchange_of_rdma_cm_pcap() {
    let (objs, _) = decode_json(&captures_dir().join("linlinw5-rdma_ib_tutorial/rdma_cm.pcap"));
    let req = frame(&objs, 1);
    assert_eq!(req["mad"]["mgmt_class"], 7);
    assert_eq!(req["mad"]["attribute_name"], "ConnectRequest");
    assert_eq!(req["mad"]["transaction_id"], 0x0000_0002_6dc5_c064u64);
    let cm = &req["cm"];
    assert_eq!(cm["message"], "REQ");
    assert_eq!(cm["local_comm_id"], 0x64c0_c56d);
    assert_eq!(cm["service_id"], 0x0000_0000_0106_4853u64);
    assert_eq!(cm["rdma_cm"]["port_space"], "tcp");
    assert_eq!(cm["rdma_cm"]["port"], 18515);
    assert_eq!(cm["rdma_cm"]["src"], "10.1.16.62");
    assert_eq!(cm["rdma_cm"]["dst"], "10.1.16.61");
    assert_eq!(cm["rdma_cm"]["src_port"], 52471);
    assert_eq!(cm["local_ca_guid"], 0x0250_56ff_fea7_7d03u64);
    assert_eq!(cm["local_qpn"], 0x3d);
    assert_eq!(cm["starting_psn"], 0x7c_c204);
    assert_eq!(cm["path_mtu_bytes"], 1024);
    assert_eq!(cm["retry_count"], 7);
    assert_eq!(cm["rnr_retry_count"], 7);
    assert_eq!(cm["max_cm_retries"], 15);
    assert_eq!(cm["remote_cm_response_timeout"], 20);
    assert_eq!(cm["primary_path"]["flow_label"], 0x91a3c);
    assert_eq!(cm["primary_path"]["hop_limit"], 64);
    assert_eq!(cm["primary_path"]["local_ack_timeout"], 17);
    assert_eq!(cm["primary_path"]["local_port_gid"], "::ffff:10.1.16.62");
    let rep = &frame(&objs, 2)["cm"];
    assert_eq!(rep["message"], "REP");
    assert_eq!(rep["local_comm_id"], 0x8988_f456u64);
    assert_eq!(rep["remote_comm_id"], 0x64c0_c56d);
    assert_eq!(rep["local_qpn"], 0x3b);
    assert_eq!(rep["starting_psn"], 0x72_7d6d);
    assert_eq!(rep["target_ack_delay"], 15);
    let rtu = &frame(&objs, 3)["cm"];
    assert_eq!(
        (rtu["message"].as_str(), rtu["remote_comm_id"].as_u64()),
        (Some("RTU"), Some(0x8988_f456))
    );
    let dreq = &frame(&objs, 91)["cm"];
    assert_eq!(dreq["message"], "DREQ");
    assert_eq!(dreq["remote_qpn_eecn"], 0x3c);
    assert_eq!(frame(&objs, 93)["cm"]["message"], "DREP");
    // The MADs are UD SENDs to QP1; the data traffic around them is not MAD.
    assert!(frame(&objs, 4).get("mad").is_none());
    let mads = objs.iter().filter(|o| o.get("cm").is_some()).count();
    assert_eq!(mads, 12, "REQ REP RTU twice, three DREQ and three DREP");
}

#[test]
fn subnet_management_and_administration_of_the_native_ib_capture() {
    let (objs, _) = decode_json(&captures_dir().join("rdma-softroce-demo/infiniband.pcap"));
    let get = frame(&objs, 1);
    assert_eq!(get["mad"]["mgmt_class"], 0x81);
    assert_eq!(get["mad"]["method_name"], "Get");
    assert_eq!(get["mad"]["attribute_name"], "SMInfo");
    assert_eq!(get["smp"]["hop_pointer"], 1);
    assert_eq!(get["smp"]["hop_count"], 2);
    assert_eq!(get["smp"]["dr_slid"], 0xffff);
    let resp = frame(&objs, 2);
    assert_eq!(resp["mad"]["method_name"], "GetResp");
    assert_eq!(resp["smp"]["direction"], 1, "D: the response returns");
    let path = frame(&objs, 32);
    assert_eq!(path["mad"]["attribute_name"], "PathRecord");
    assert_eq!(path["sa"]["component_mask"], 0x340c);
    assert_eq!(frame(&objs, 33)["sa"]["attribute_offset"], 8);
    // IPoIB connected mode: a REQ whose service ID is not RDMA-CM's.
    let req = &frame(&objs, 7)["cm"];
    assert_eq!(req["service_id"], 0x1000_0000_0000_0404u64);
    assert!(req.get("rdma_cm").is_none());
    assert_eq!(req["primary_path"]["packet_rate"], 3, "10 Gb/s");
    assert_eq!(req["srq"], 1);
}
