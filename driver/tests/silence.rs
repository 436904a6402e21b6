//! Only valid datagrams from a QP's peer are signs of life: an endpoint whose peer went
//! silent gives up after its silence bound even while someone else floods it with junk.
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use roce_driver::impair::Impairment;
use roce_driver::{AppError, Application, Endpoint, RunError};
use roce_proto::{Ecn, Psn, Qpn};
use roce_stack::{Access, ConnectParams, Device, Instant, PathConfig, QpCaps};

/// Waits forever for work that never comes.
struct Waiting;
impl Application for Waiting {
    fn poll(&mut self, _dev: &mut Device, _now: Instant) -> Result<(), AppError> {
        Ok(())
    }
    fn done(&self) -> bool {
        false
    }
}

#[test]
fn junk_from_elsewhere_does_not_keep_a_silent_run_alive() {
    let local: IpAddr = Ipv4Addr::new(127, 0, 91, 1).into();
    let peer: IpAddr = Ipv4Addr::new(127, 0, 91, 2).into();
    let mut dev = Device::default();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq();
    let q = dev.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
    let c = ConnectParams {
        dest_qpn: Qpn(0x77),
        rq_psn: Psn::new(1),
        sq_psn: Psn::new(1),
        access: Access::ALL,
        path: PathConfig {
            local,
            remote: peer,
            ecn: Ecn::Ect0,
            ..PathConfig::default()
        },
        ..ConnectParams::default()
    };
    dev.connect_qp(q, &c).unwrap();
    // Junk, and well-formed requests to the QP, from a third address.
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let s = UdpSocket::bind("127.0.91.3:0").unwrap();
            let mut junk = vec![0u8; 64];
            junk[0] = 0x04; // RC SEND ONLY
            junk[5..8].copy_from_slice(&q.0.to_be_bytes()[1..]);
            let started = StdInstant::now();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(15) {
                let _ = s.send_to(&junk, SocketAddr::new(local, 4791));
                n += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            n
        })
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = StdInstant::now();
    let (r, received) = rt.block_on(async {
        let mut ep =
            Endpoint::bind(dev, SocketAddr::new(local, 4791), Impairment::default()).unwrap();
        let never = async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            // Past the bound, in the test's own words: the peer never spoke.
            Err::<(), roce_driver::DriverError>(
                roce_driver::PeerFault::Silent {
                    what: "test's stop signal",
                    within: Duration::from_secs(10),
                }
                .into(),
            )
        };
        let r = ep
            .run(&mut Waiting, false, never, Duration::from_millis(500))
            .await;
        (r, ep.stats.received)
    });
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let sent = flood.join().unwrap();
    assert!(
        matches!(
            r,
            Err(roce_driver::DriverError::Run(RunError::PeerSilent(_)))
        ),
        "{r:?} after {took:?}"
    );
    assert!(received > 100, "the junk did arrive ({received} of {sent})");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}
