//! Every RoCE packet of every capture under ../shared/captures parses, verifies its ICRC, and,
//! parsed into Reprs and emitted again (ICRC recomputed), reproduces the original bytes. The
//! number of RoCE packets per file is pinned so that a capture which silently stops matching
//! (e.g. a parser that starts calling frames "not RoCE") fails.
mod common;

use common::{captures_dir, pcap_records};
use roce_proto::{Error, Frame, PacketRepr, RoceVersion};

/// (path under captures/, RoCE or IB packets expected) — counts from captures/SOURCES.md.
const CAPTURES: &[(&str, usize)] = &[
    ("linlinw5-rdma_ib_tutorial/rdma_send_bw.pcap", 20),
    ("linlinw5-rdma_ib_tutorial/rdma_write_bw.pcap", 20),
    ("linlinw5-rdma_ib_tutorial/rdma_write_lat.pcap", 20),
    ("linlinw5-rdma_ib_tutorial/rdma_read_bw.pcap", 20),
    ("linlinw5-rdma_ib_tutorial/rdma_read_lat.pcap", 10),
    ("linlinw5-rdma_ib_tutorial/rdma_atomic_bw.pcap", 10),
    ("linlinw5-rdma_ib_tutorial/pingpong_rc.pcap", 20),
    ("linlinw5-rdma_ib_tutorial/pingpong_uc.pcap", 10),
    ("linlinw5-rdma_ib_tutorial/pingpong_ud.pcap", 10),
    ("linlinw5-rdma_ib_tutorial/rdma_cm.pcap", 96),
    ("linlinw5-rdma_ib_tutorial/rping.pcap", 65),
    ("linlinw5-rdma_ib_tutorial/nccl/nccl_node0.pcap", 184),
    ("linlinw5-rdma_ib_tutorial/nccl/nccl_node1.pcap", 184),
    ("linlinw5-rdma_ib_tutorial/nccl/nccl_node2.pcap", 184),
    ("linlinw5-rdma_ib_tutorial/nccl/ring2_node0.pcap", 184),
    ("linlinw5-rdma_ib_tutorial/nccl/ring2_node1.pcap", 184),
    ("linlinw5-rdma_ib_tutorial/nccl/ring2_node2.pcap", 184),
    ("linlinw5-rdma_ib_tutorial/nccl/tree2_node0.pcap", 62),
    ("linlinw5-rdma_ib_tutorial/nccl/tree2_node1.pcap", 62),
    ("linlinw5-rdma_ib_tutorial/nccl/tree2_node2.pcap", 124),
    ("oferby-proxy/roce.pcap", 105),
    ("rdma-roce-lab/roce_capture_read-write-ecn.pcap", 12),
    ("rdma-roce-lab/test.pcap", 12),
    ("rdma-softroce-demo/infiniband.pcap", 43),
    ("hexvectors/hexvectors-derived.pcap", 6),
];

const LINKTYPE_ETHERNET: u32 = 1;
const LINKTYPE_ERF: u32 = 197;
const ERF_TYPE_INFINIBAND: u8 = 21;

/// The IB packet inside an ERF record (16-byte header plus extension headers).
fn erf_payload(rec: &[u8]) -> Option<&[u8]> {
    let ty = *rec.get(8)?;
    if ty & 0x7f != ERF_TYPE_INFINIBAND {
        return None;
    }
    let mut at = 16;
    let mut more = ty & 0x80 != 0;
    while more {
        more = rec.get(at)? & 0x80 != 0;
        at += 8;
    }
    rec.get(at..)
}

fn round_trip(path: &str, index: usize, frame: &Frame<'_>) {
    assert!(!frame.truncated, "{path} #{index}: truncated");
    let p = frame
        .packet()
        .unwrap_or_else(|e| panic!("{path} #{index}: {e}"));
    p.conformance()
        .unwrap_or_else(|e| panic!("{path} #{index}: {e}"));
    assert_eq!(frame.verify_icrc(), Ok(true), "{path} #{index}: ICRC");
    let repr = PacketRepr::parse(&p).unwrap();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit_with_icrc(&mut out, &frame.icrc_seed().unwrap())
        .unwrap();
    assert_eq!(
        out, frame.transport,
        "{path} #{index}: emit differs from the capture"
    );
}

#[test]
fn every_roce_packet_parses_verifies_and_round_trips() {
    let mut total = 0;
    for &(path, expected) in CAPTURES {
        let (linktype, records) = pcap_records(&captures_dir().join(path));
        let mut roce = 0;
        for (i, rec) in records.iter().enumerate() {
            let frame = match linktype {
                LINKTYPE_ETHERNET => Frame::parse_ethernet(rec),
                LINKTYPE_ERF => match erf_payload(rec) {
                    Some(ib) => Frame::parse_ib(ib),
                    None => continue,
                },
                other => panic!("{path}: unexpected link type {other}"),
            };
            match frame {
                Ok(f) => {
                    if linktype == LINKTYPE_ERF {
                        assert_eq!(f.version, RoceVersion::Ib);
                    }
                    round_trip(path, i + 1, &f);
                    roce += 1;
                }
                Err(Error::NotRoce { .. }) => {}
                Err(e) => panic!("{path} #{}: {e}", i + 1),
            }
        }
        assert_eq!(roce, expected, "{path}: RoCE packet count");
        total += roce;
    }
    assert_eq!(total, 1831);
}
