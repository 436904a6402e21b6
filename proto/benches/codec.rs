//! Codec benchmarks: header parse, parse + ICRC verify of a 4 KiB WRITE frame, building that
//! frame, and ICRC throughput beside `crc32fast::hash` over the same bytes (the baseline).
//!
//! `cargo bench -p roce-proto --bench codec`
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use roce_proto::{
    BthRepr, Frame, FrameBuilder, Icrc, Opcode, PKey, PacketRepr, Psn, Qpn, RKey, RethRepr,
    RocePacket,
};
use std::hint::black_box;

fn write_first(payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_FIRST,
            pkey: PKey::DEFAULT,
            dest_qp: Qpn(0x11),
            psn: Psn::new(0x100),
            ..BthRepr::default()
        },
        reth: Some(RethRepr {
            va: 0x7f00_0000_0000,
            rkey: RKey(0x1234),
            dma_len: 1 << 20,
        }),
        payload,
        ..PacketRepr::default()
    }
}

fn benches(c: &mut Criterion) {
    let payload = vec![0x5au8; 4096];
    let repr = write_first(&payload);
    let builder = FrameBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 0xc001);
    let mut frame = vec![0u8; builder.frame_len(&repr)];
    builder.build(&repr, &mut frame).unwrap();
    let transport_at = 14 + 20 + 8;

    c.bench_function("parse BTH+RETH", |b| {
        let t = &frame[transport_at..];
        b.iter(|| {
            let p = RocePacket::new_checked(black_box(t)).unwrap();
            let bth = BthRepr::parse(&p.bth()).unwrap();
            let reth = RethRepr::parse(&p.reth().unwrap()).unwrap();
            black_box((bth, reth))
        })
    });

    let mut g = c.benchmark_group("4KiB WRITE frame");
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("parse + verify ICRC", |b| {
        b.iter(|| {
            let f = Frame::parse_ethernet(black_box(&frame)).unwrap();
            black_box(f.verify_icrc().unwrap())
        })
    });
    g.bench_function("build (headers, payload copy, ICRC)", |b| {
        let mut out = vec![0u8; frame.len()];
        b.iter(|| black_box(builder.build(black_box(&repr), &mut out).unwrap()))
    });
    g.finish();

    let t = &frame[transport_at..];
    let covered = &t[..t.len() - 4];
    let seed = Icrc::rocev2_ipv4(&frame[14..34], &frame[34..42]).unwrap();
    let mut g = c.benchmark_group("ICRC 4KiB");
    g.throughput(Throughput::Bytes(covered.len() as u64));
    g.bench_function("crc32fast::hash (baseline)", |b| {
        b.iter(|| black_box(crc32fast::hash(black_box(covered))))
    });
    g.bench_function("Icrc (pseudo-header + masked BTH + rest)", |b| {
        b.iter(|| black_box(seed.clone().compute(black_box(t))))
    });
    g.bench_function("Icrc from the IPv4 and UDP header bytes", |b| {
        b.iter(|| {
            let s = Icrc::rocev2_ipv4(black_box(&frame[14..34]), &frame[34..42]).unwrap();
            black_box(s.compute(black_box(t)))
        })
    });
    g.finish();
}

criterion_group!(codec, benches);
criterion_main!(codec);
