//! The verified workload over real loopback sockets: a server thread and a client in one
//! process, clean and impaired, over IPv4 and IPv6.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use roce_apps::workload::{self, Report, RunConfig, WorkloadRun, WorkloadSpec};
use roce_driver::connect::{Connector, Ends, Exchange, Ran};
use roce_driver::DriverError;

/// Tests run in parallel: each takes its own pair of loopback addresses (127.0.<n>.1 and
/// 127.0.<n>.2), or its own ports on ::1.
fn run(n: u8, cfg: &RunConfig) -> Result<Report, DriverError> {
    let (c, s) = (
        IpAddr::V4(Ipv4Addr::new(127, 0, n, 1)),
        IpAddr::V4(Ipv4Addr::new(127, 0, n, 2)),
    );
    loopback_between(cfg, c, s, 4791, roce_driver::Taps::default())
}

/// Both ends of `cfg` in this process, the server's RoCE socket on UDP `port` (the client's
/// the next when the two share an address).
fn loopback_between(
    cfg: &RunConfig,
    client: IpAddr,
    server: IpAddr,
    port: u16,
    taps: roce_driver::Taps,
) -> Result<Report, DriverError> {
    let ends = Ends::Both {
        client,
        server,
        port: 0,
    };
    let c = Connector::new(Exchange::Control, ends, cfg.secrets, cfg.link).with_roce_port(port);
    let w = WorkloadRun {
        cfg,
        impairment: cfg.impairment,
        taps,
    };
    match workload::run(c, w)? {
        Ran::Client(r) | Ran::Both { client: r, .. } => Ok(r),
        Ran::Served(_) => unreachable!("both ends ran"),
    }
}

fn small(seed: u64) -> RunConfig {
    RunConfig {
        spec: WorkloadSpec {
            count: 40,
            max_size: 100_000,
            qps: 2,
            seed,
            ..WorkloadSpec::default()
        },
        ..RunConfig::default()
    }
}

#[test]
fn loopback_ipv4_verifies() {
    let r = run(1, &small(1)).unwrap();
    assert!(r.ok, "{r}");
    assert_eq!(r.ops.values().sum::<u64>(), 80);
    assert!(r.verified_bytes > 0);
}

#[test]
fn loopback_ipv4_impaired_verifies() {
    let mut cfg = small(2);
    cfg.impairment.loss = 0.05;
    cfg.impairment.reorder = 0.05;
    cfg.impairment.duplicate = 0.02;
    cfg.impairment.corrupt = 0.01;
    cfg.transport.timeout = 12; // 16.8 ms: tail losses recover quickly, a debug build never times out spuriously
    let r = run(2, &cfg).unwrap();
    assert!(r.ok, "{r}");
    assert!(r.impairment.lost > 0 && r.retransmitted_packets > 0, "{r}");
    assert!(
        r.drops.bad_icrc > 0,
        "corrupted datagrams must fail their ICRC: {r}"
    );
}

#[test]
fn loopback_ipv6_verifies() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let l = IpAddr::V6(Ipv6Addr::LOCALHOST);
    // Count what the client's tap sees, by address family.
    let (v6, other) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (v6t, othert) = (v6.clone(), other.clone());
    let tap: roce_driver::Tap = Box::new(move |r: &roce_driver::TapRecord<'_>| {
        let c = if r.src.is_ipv6() && r.dst.is_ipv6() {
            &v6t
        } else {
            &othert
        };
        c.fetch_add(1, Ordering::Relaxed);
    });
    let r = loopback_between(&small(3), l, l, 14791, roce_driver::Taps::client(Some(tap))).unwrap();
    assert!(r.ok, "{r}");
    let (v6, other) = (v6.load(Ordering::Relaxed), other.load(Ordering::Relaxed));
    assert!(v6 > 100, "{v6} IPv6 datagrams");
    assert_eq!(other, 0, "datagrams that were not IPv6");
}

#[test]
fn ce_marks_turn_into_cnps() {
    let mut cfg = small(4);
    cfg.impairment.ce = 0.05;
    cfg.cc = roce_stack::CcConfig::PAPER;
    cfg.line_rate_bps = 10_000_000_000;
    let r = run(4, &cfg).unwrap();
    assert!(r.ok, "{r}");
    assert!(r.cnps_sent > 0 && r.cnps_received > 0, "{r}");
}

#[test]
fn bad_config_is_refused_before_any_socket() {
    let mut cfg = small(5);
    cfg.transport.mtu = 1000;
    let e = run(5, &cfg).unwrap_err();
    // The refusal names the setting as a type; the CLI words it with its flag.
    let setting = match &e {
        DriverError::Invalid(inner) => inner
            .downcast_ref::<roce_apps::ConfigError>()
            .and_then(|c| c.setting()),
        _ => None,
    };
    assert_eq!(setting, Some(roce_apps::Setting::Mtu), "{e}");
}
