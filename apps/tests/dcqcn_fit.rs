//! The DCQCN fit of `roce analyze --fit-dcqcn` names the preset a backlogged sender really
//! ran: simulated senders under each preset, CE marks on the link, captured where packets
//! leave, analyzed, fitted.
use std::time::{Duration, UNIX_EPOCH};

use roce_apps::congestion::fit::fit;
use roce_pcap::analyze::{self, Options};
use roce_stack::sim::{seed_from_env, LinkConfig, SeedGuard, Sim, TapEvent, TapKind};
use roce_stack::{Access, CcConfig, ConnectParams, QpCaps, SgList, WcStatus, WorkRequest, WrOp};

const LINE: u64 = 10_000_000_000;

/// A 10 Gb/s sender under `cc` writing 64 KiB messages back to back for 30 ms of virtual time
/// over a link that marks 3 % of packets CE; returns the capture's path.
fn run(cc: CcConfig, seed: u64, name: &str) -> std::path::PathBuf {
    let mut sim = Sim::new(seed);
    let a = sim.add_endpoint("10.8.0.1".parse().unwrap());
    let b = sim.add_endpoint("10.8.0.2".parse().unwrap());
    sim.set_default_link(LinkConfig {
        bandwidth_bps: Some(LINE),
        ce_mark: 0.03,
        ..LinkConfig::default()
    });
    let mut mk = |h| {
        let d = sim.device(h);
        let pd = d.alloc_pd();
        let cq = d.create_cq();
        let mr = d.reg_mr(pd, 1 << 20, Access::ALL);
        let q = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        (q, cq, mr)
    };
    let (qa, cqa, ma) = mk(a);
    let (qb, _, mb) = mk(b);
    let mut opts = ConnectParams {
        mtu: 4096,
        ..ConnectParams::default()
    };
    opts.path.ecn = roce_proto::Ecn::Ect0;
    sim.connect(a, qa, b, qb, &opts).unwrap();
    sim.device(a).set_congestion_control(qa, cc.build(LINE));
    let path = std::env::temp_dir().join(format!(
        "roce-fit-{}-{name}-{seed}.pcap",
        std::process::id()
    ));
    let mut cap = roce_pcap::tap::DatagramCapture::create(&path).unwrap();
    sim.set_tap(Box::new(move |ev: &TapEvent<'_>| {
        if ev.kind == TapKind::Sent {
            let t = UNIX_EPOCH + Duration::from_nanos(ev.time.as_nanos());
            let src = std::net::SocketAddr::new(ev.src, ev.src_port);
            let dst = std::net::SocketAddr::new(ev.dst, ev.dst_port);
            let _ = cap.record(t, src, dst, ev.ecn, ev.datagram);
        }
    }));
    let remote = sim.device(b).mr(mb).unwrap().remote_addr(0);
    let end = roce_stack::Instant::ZERO + Duration::from_millis(30);
    let (mut posted, mut id, mut now) = (0u32, 0u64, roce_stack::Instant::ZERO);
    while now < end {
        while posted < 16 {
            let sgl = SgList::one(sim.device(a).mr(ma).unwrap().sge(0, 64 * 1024));
            sim.device(a)
                .post_send(qa, WorkRequest::new(id, WrOp::Write(remote), sgl))
                .unwrap();
            id += 1;
            posted += 1;
        }
        now = (now + Duration::from_micros(20)).min(end);
        sim.run_until(now);
        while let Some(c) = sim.device(a).poll_cq(cqa) {
            assert_eq!(c.status, WcStatus::Success, "seed {seed}");
            posted -= 1;
        }
    }
    sim.set_tap(Box::new(|_: &TapEvent<'_>| {}));
    path
}

#[test]
fn the_fit_names_the_preset_the_sender_ran() {
    let base = seed_from_env(1);
    let seeds = if std::env::var_os("SIM_SEED").is_some() {
        1
    } else {
        8
    };
    for seed in base..base + seeds {
        let _g = SeedGuard(seed);
        for (name, cc) in [("paper", CcConfig::PAPER), ("nvidia", CcConfig::NVIDIA)] {
            let path = run(cc, seed, name);
            let opts = Options {
                pictures: true,
                ..Options::default()
            };
            let a = analyze::analyze_path(path.to_str().unwrap(), opts).unwrap();
            let _ = std::fs::remove_file(&path);
            let c = &a.connections[0];
            let s = c.sides.iter().find(|s| s.requests > 0).unwrap();
            assert!(
                s.cnps_received_at.len() > 20,
                "{name}: {} CNPs",
                s.cnps_received_at.len()
            );
            let f = fit(&s.cnps_received_at, &s.rate, s.rate_window_ns).expect("a fit");
            assert_eq!(f.best(), name, "seed {seed}: {f:?}");
            let mine = f.error_pct.iter().find(|e| e.0 == name).unwrap().1;
            assert!(
                mine < 20.0,
                "seed {seed}: {name} off by {mine:.1} % of the line rate: {f:?}"
            );
            eprintln!("seed {seed} {name}: {f:?}");
        }
    }
}
