//! Writes the seed corpus of the fuzz targets: one transport packet per defined opcode (for
//! `packet` and `roundtrip`) and whole frames in every encapsulation (for `frame`).
//!
//! `cargo run -p roce-proto --example fuzz_seeds -- fuzz/corpus`
use roce_proto::frame::VlanTag;
use roce_proto::icrc::Icrc;
use roce_proto::opcode::ExtHeaders;
use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, FethRepr, FrameBuilder, IethRepr,
    ImmDt, Msn, Opcode, PKey, PacketRepr, Psn, QKey, Qpn, RKey, RdethRepr, RethRepr, Syndrome,
    XrcethRepr,
};
use std::path::Path;

fn repr(op: Opcode, payload: &[u8]) -> PacketRepr<'_> {
    let h = op.ext_headers();
    let on = |x| h.contains(x);
    let payload = if op.has_payload() { payload } else { &[] };
    PacketRepr {
        bth: BthRepr {
            opcode: op,
            pad_count: PacketRepr::pad_for(payload.len()),
            pkey: PKey::DEFAULT,
            dest_qp: Qpn(0x11),
            ack_req: true,
            psn: Psn::new(0xfffffe),
            ..BthRepr::default()
        },
        rdeth: on(ExtHeaders::RDETH).then_some(RdethRepr {
            resv: 0,
            ee_context: 7,
        }),
        deth: on(ExtHeaders::DETH).then_some(DethRepr {
            qkey: QKey(0x8001_0000),
            resv: 0,
            src_qp: Qpn(1),
        }),
        xrceth: on(ExtHeaders::XRCETH).then_some(XrcethRepr {
            resv: 0,
            xrc_srq: Qpn(9),
        }),
        feth: on(ExtHeaders::FETH).then_some(FethRepr { word: 0x11 }),
        reth: on(ExtHeaders::RETH).then_some(RethRepr {
            va: 0x7f00_0000_1000,
            rkey: RKey(0x1234),
            dma_len: payload.len() as u32,
        }),
        atomic_eth: on(ExtHeaders::ATOMIC_ETH).then_some(AtomicEthRepr {
            va: 0x1000,
            rkey: RKey(5),
            swap_add: 1,
            compare: 2,
        }),
        aeth: on(ExtHeaders::AETH).then_some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: Msn(3),
        }),
        atomic_ack_eth: on(ExtHeaders::ATOMIC_ACK_ETH)
            .then_some(AtomicAckEthRepr { orig_data: 42 }),
        immdt: on(ExtHeaders::IMMDT).then_some(ImmDt(0xdead_beef)),
        ieth: on(ExtHeaders::IETH).then_some(IethRepr { rkey: RKey(0x99) }),
        payload,
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    let root = Path::new(&root);
    let payload: Vec<u8> = (0..37u8).collect();
    let seed = Icrc::grh(&[0x60; 40]).unwrap();
    for v in 0..=255u8 {
        let op = Opcode(v);
        if !op.is_defined() {
            continue;
        }
        let p = repr(op, &payload);
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit_with_icrc(&mut buf, &seed).unwrap();
        write(&root.join("packet"), &format!("op-{v:02x}"), &buf);
        write(&root.join("roundtrip"), &format!("op-{v:02x}"), &buf);
    }
    let p = repr(Opcode::RC_RDMA_WRITE_FIRST, &payload);
    let mut v4 = FrameBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0xc001);
    let v6 = FrameBuilder::ipv6([0xfd; 16], [0xfe; 16], 0xc002);
    let frame = |b: &FrameBuilder, name: &str| {
        let mut buf = vec![0u8; b.frame_len(&p)];
        b.build(&p, &mut buf).unwrap();
        write(&root.join("frame"), name, &buf);
    };
    frame(&v4, "ipv4");
    frame(&v6, "ipv6");
    v4.vlans = [
        Some(VlanTag {
            tpid: 0x88a8,
            pcp: 1,
            dei: false,
            vid: 10,
        }),
        Some(VlanTag {
            tpid: 0x8100,
            pcp: 3,
            dei: false,
            vid: 20,
        }),
    ];
    v4.udp_checksum = true;
    frame(&v4, "ipv4-qinq-csum");
    // RoCE v1: GRH then the transport packet.
    let mut grh = vec![0x60, 0, 0, 0, 0, 0, 0x1b, 64];
    grh.extend_from_slice(&[0xfd; 32]);
    grh[4..6].copy_from_slice(&(p.buffer_len() as u16).to_be_bytes());
    let mut t = vec![0u8; p.buffer_len()];
    p.emit_with_icrc(&mut t, &Icrc::grh(&grh).unwrap()).unwrap();
    let mut v1 = grh.clone();
    v1.extend_from_slice(&t);
    write(&root.join("frame"), "rocev1-grh", &v1);
}
