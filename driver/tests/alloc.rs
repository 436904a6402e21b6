//! The driver's data path allocates nothing per packet: a counting global allocator watches
//! two endpoints on real UDP sockets.
use std::net::IpAddr;

use roce_proto::{Ecn, Psn};
use roce_stack::{
    Access, ConnectParams, Device, DeviceConfig, Instant, PathConfig, QpCaps, RemoteAddr, SgList,
    WcStatus, WorkRequest, WrOp,
};

/// The driver's data path too: two [`Endpoint`]s on real UDP sockets (127.0.72.1/.2, port
/// 4791), each with its device, impairment stage (pass-through) and send/receive buffers, run on
/// this thread (the counter is per thread) in one tokio runtime. A requester keeps 32 WRITEs
/// and READs of 4 KiB (4 packets each at MTU 1024) outstanding. After a warm-up run, a run of
/// `n` messages and a run of `4n` must make the same number of allocations: whatever the
/// loop allocates is per run (set-up), none of it per packet or per message.
#[test]
fn driver_data_path_allocates_nothing_per_packet() {
    use roce_driver::impair::Impairment;
    use roce_driver::{AppError, Application, Endpoint};
    use roce_proto::Qpn;
    use roce_stack::{CqHandle, MrHandle};
    use std::cell::Cell;
    use std::net::{Ipv4Addr, SocketAddr};
    use std::rc::Rc;
    use std::time::Duration;

    struct Requester {
        qp: Qpn,
        cq: CqHandle,
        src: SgList,
        remote: RemoteAddr,
        total: u64,
        posted: u64,
        done: Rc<Cell<u64>>,
        bad: u64,
    }
    impl Application for Requester {
        fn poll(&mut self, dev: &mut Device, _now: Instant) -> Result<(), AppError> {
            while let Some(c) = dev.poll_cq(self.cq) {
                if c.status != WcStatus::Success {
                    self.bad += 1;
                }
                self.done.set(self.done.get() + 1);
            }
            while self.posted < self.total && self.posted - self.done.get() < 32 {
                let op = if self.posted.is_multiple_of(2) {
                    WrOp::Write(self.remote)
                } else {
                    WrOp::Read(self.remote)
                };
                dev.post_send(self.qp, WorkRequest::new(self.posted, op, self.src))
                    .map_err(|e| AppError::post(0, "a WRITE or READ", e))?;
                self.posted += 1;
            }
            Ok(())
        }
        fn done(&self) -> bool {
            self.done.get() == self.total
        }
    }
    struct Target {
        done: Rc<Cell<u64>>,
        total: u64,
    }
    impl Application for Target {
        fn poll(&mut self, _dev: &mut Device, _now: Instant) -> Result<(), AppError> {
            Ok(())
        }
        fn done(&self) -> bool {
            self.done.get() >= self.total
        }
    }

    let ia: IpAddr = Ipv4Addr::new(127, 0, 72, 1).into();
    let ib: IpAddr = Ipv4Addr::new(127, 0, 72, 2).into();
    let mut a = Device::new(DeviceConfig {
        qpn_base: 0x100,
        ..DeviceConfig::default()
    });
    let mut b = Device::new(DeviceConfig {
        qpn_base: 0x200,
        ..DeviceConfig::default()
    });
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let la: MrHandle = a.reg_mr(pa, 1 << 16, Access::ALL);
    let lb: MrHandle = b.reg_mr(pb, 1 << 16, Access::ALL);
    let (ca, cb) = (a.create_cq(), b.create_cq());
    let qa = a.create_qp(pa, ca, ca, QpCaps::default()).unwrap();
    let qb = b.create_qp(pb, cb, cb, QpCaps::default()).unwrap();
    let sport = PathConfig::udp_sport(qa.0, qb.0);
    for (dev, q, peer, l, r) in [(&mut a, qa, qb, ia, ib), (&mut b, qb, qa, ib, ia)] {
        let path = PathConfig {
            local: l,
            remote: r,
            src_port: sport,
            remote_src_port: sport,
            local_port: 4791,
            remote_port: 4791,
            ecn: Ecn::Ect0,
            verify_icrc: true,
        };
        let c = ConnectParams {
            dest_qpn: peer,
            rq_psn: Psn::new(0xff_f000),
            sq_psn: Psn::new(0xff_f000),
            access: Access::ALL,
            path,
            ..ConnectParams::default()
        };
        dev.connect_qp(q, &c).unwrap();
    }
    let remote = b.mr(lb).unwrap().remote_addr(0);
    let src = SgList::one(a.mr(la).unwrap().sge(0, 4096));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut ea, mut eb) = rt.block_on(async {
        (
            Endpoint::bind(a, SocketAddr::new(ia, 4791), Impairment::default()).unwrap(),
            Endpoint::bind(b, SocketAddr::new(ib, 4791), Impairment::default()).unwrap(),
        )
    });
    let mut run = |total: u64| -> (u64, u64, u64) {
        let done = Rc::new(Cell::new(0));
        let mut req = Requester {
            qp: qa,
            cq: ca,
            src,
            remote,
            total,
            posted: 0,
            done: done.clone(),
            bad: 0,
        };
        let mut tgt = Target {
            done: done.clone(),
            total,
        };
        let sent_before = ea.stats.sent + eb.stats.sent;
        let silence = Duration::from_secs(10);
        let info = allocation_counter::measure(|| {
            rt.block_on(async {
                let never = std::future::pending::<Result<(), roce_driver::DriverError>>();
                let never2 = std::future::pending::<Result<(), roce_driver::DriverError>>();
                let (ra, rb) = tokio::join!(
                    ea.run(&mut req, true, never, silence),
                    eb.run(&mut tgt, true, never2, silence)
                );
                ra.unwrap();
                rb.unwrap();
            });
        });
        while eb.dev.poll_cq(cb).is_some() {}
        assert_eq!(req.bad, 0, "every operation succeeded");
        (
            info.count_total,
            ea.stats.sent + eb.stats.sent - sent_before,
            done.get(),
        )
    };
    run(2000); // warm-up: queues, buffers, sockets and the runtime reach their working size
    let (small, small_pkts, n1) = run(1000);
    let (large, large_pkts, n2) = run(4000);
    eprintln!("allocations: {small} for {small_pkts} datagrams, {large} for {large_pkts}");
    assert_eq!((n1, n2), (1000, 4000));
    assert!(
        large_pkts > small_pkts + 3000 * 4,
        "the runs moved packets ({small_pkts}, {large_pkts})"
    );
    assert!(
        large <= small,
        "{small} allocations for {small_pkts} datagrams, {large} for {large_pkts}: \
         the driver allocates per packet or per message"
    );
}
