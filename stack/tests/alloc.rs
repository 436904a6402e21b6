//! The steady-state data path allocates nothing per packet (nor per message): a counting
//! global allocator watches WRITE, SEND and READ rounds between two devices joined in memory.
use std::net::IpAddr;

use roce_proto::Psn;
use roce_stack::{
    Access, ConnectParams, Device, DeviceConfig, Instant, PathConfig, QpCaps, RecvRequest, SgList,
    WcStatus, WorkRequest, WrOp,
};

#[test]
fn no_allocation_per_packet_in_steady_state() {
    let mut a = Device::new(DeviceConfig {
        qpn_base: 0x100,
        ..DeviceConfig::default()
    });
    let mut b = Device::new(DeviceConfig {
        qpn_base: 0x200,
        ..DeviceConfig::default()
    });
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let la = a.reg_mr(pa, 1 << 16, Access::ALL);
    let lb = b.reg_mr(pb, 1 << 16, Access::ALL);
    let (ca, cb) = (a.create_cq(), b.create_cq());
    let qa = a.create_qp(pa, ca, ca, QpCaps::default()).unwrap();
    let qb = b.create_qp(pb, cb, cb, QpCaps::default()).unwrap();
    let ia: IpAddr = "10.0.0.1".parse().unwrap();
    let ib: IpAddr = "10.0.0.2".parse().unwrap();
    for (dev, q, peer, l, r) in [(&mut a, qa, qb, ia, ib), (&mut b, qb, qa, ib, ia)] {
        let path = PathConfig {
            local: l,
            remote: r,
            ..PathConfig::default()
        };
        let c = ConnectParams {
            dest_qpn: peer,
            rq_psn: Psn::new(0xff_ff00),
            sq_psn: Psn::new(0xff_ff00),
            access: Access::ALL,
            path,
            ..ConnectParams::default()
        };
        dev.connect_qp(q, &c).unwrap();
    }
    let rb = b.mr(lb).unwrap().remote_addr(0);
    let src = SgList::one(a.mr(la).unwrap().sge(0, 5000));
    let recv = SgList::one(b.mr(lb).unwrap().sge(0, 8192));
    let mut buf = Vec::with_capacity(8192);
    let now = Instant::ZERO;
    let mut round = |a: &mut Device, b: &mut Device| {
        for (i, op) in [
            WrOp::Write(rb),
            WrOp::Send,
            WrOp::Read(rb),
            WrOp::FetchAdd { remote: rb, add: 1 },
        ]
        .into_iter()
        .enumerate()
        {
            let sgl = if op.is_atomic() {
                SgList::one(a.mr(la).unwrap().sge(8192, 8))
            } else {
                src
            };
            if op == WrOp::Send {
                b.post_recv(
                    qb,
                    RecvRequest {
                        wr_id: 9,
                        sgl: recv,
                    },
                )
                .unwrap();
            }
            a.post_send(qa, WorkRequest::new(i as u64, op, sgl))
                .unwrap();
        }
        let mut packets = 0;
        loop {
            let mut moved = false;
            while let Some(t) = a.poll_transmit(now, &mut buf) {
                b.handle_datagram(now, &t.rx_meta(), &buf[..t.len]);
                moved = true;
                packets += 1;
            }
            while let Some(t) = b.poll_transmit(now, &mut buf) {
                a.handle_datagram(now, &t.rx_meta(), &buf[..t.len]);
                moved = true;
                packets += 1;
            }
            if !moved {
                break;
            }
        }
        let mut n = 0;
        while let Some(c) = a.poll_cq(ca) {
            assert_eq!(c.status, WcStatus::Success);
            n += 1;
        }
        while b.poll_cq(cb).is_some() {}
        assert_eq!(n, 4);
        packets
    };
    // Warm up: queues and buffers reach their working capacity.
    for _ in 0..50 {
        round(&mut a, &mut b);
    }
    let mut packets = 0;
    let info = allocation_counter::measure(|| {
        for _ in 0..500 {
            packets += round(&mut a, &mut b);
        }
    });
    let allocs = info.count_total;
    let control = allocation_counter::measure(|| {
        std::hint::black_box(vec![1u8; 10]);
    });
    assert_eq!(control.count_total, 1, "the counter counts");
    assert!(packets > 500 * 10, "the rounds moved packets ({packets})");
    assert_eq!(
        allocs, 0,
        "{allocs} allocations for {packets} packets (PSNs wrapped past 2^24 too)"
    );
}
