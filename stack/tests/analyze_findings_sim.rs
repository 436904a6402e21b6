//! `roce analyze`'s findings on captures made by roce's own stack in the simulator: an RNR
//! NAK with `rdma_cm`'s timer code 0, and a requester whose peer never answers, retrying
//! until `retry exceeded`, the moment the analysis predicts set against the moment the
//! simulated QP failed.
mod common;

use core::time::Duration;

use roce_pcap::analyze::{self, Analysis, Options};
use roce_stack::sim::{LinkConfig, Sim, TapEvent, TapKind};
use roce_stack::{
    Access, ConnectParams, CqHandle, MrHandle, QpCaps, RecvRequest, SgList, WcStatus, WorkRequest,
    WrOp,
};

struct Host {
    qp: roce_proto::Qpn,
    cq: CqHandle,
    mr: MrHandle,
}

/// Two hosts, one RC connection with `opts`, over `link`, captured where packets leave their
/// sender into `path`.
fn pair(link: LinkConfig, opts: &ConnectParams, path: &std::path::Path) -> (Sim, [Host; 2]) {
    let mut sim = Sim::new(7);
    let a = sim.add_endpoint("10.9.0.1".parse().unwrap());
    let b = sim.add_endpoint("10.9.0.2".parse().unwrap());
    sim.set_default_link(link);
    let mut mk = |h| {
        let d = sim.device(h);
        let pd = d.alloc_pd();
        let cq = d.create_cq();
        let mr = d.reg_mr(pd, 1 << 16, Access::ALL);
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        Host { qp, cq, mr }
    };
    let hosts = [mk(a), mk(b)];
    sim.connect(a, hosts[0].qp, b, hosts[1].qp, opts).unwrap();
    assert!(common::write_pcap_of(&mut sim, path, TapKind::Sent));
    (sim, hosts)
}

/// A SEND of 64 bytes from host 0.
fn send(sim: &mut Sim, hosts: &[Host; 2]) {
    let sgl = SgList::one(sim.device(0).mr(hosts[0].mr).unwrap().sge(0, 64));
    sim.device(0)
        .post_send(hosts[0].qp, WorkRequest::new(1, WrOp::Send, sgl))
        .unwrap();
}

fn analyzed(path: &std::path::Path) -> Analysis {
    let a = analyze::analyze_path(path.to_str().unwrap(), Options::default()).unwrap();
    let _ = std::fs::remove_file(path);
    a
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("roce-findings-{}-{name}.pcap", std::process::id()))
}

#[test]
fn an_rnr_nak_with_timer_zero_from_our_stack_is_an_rnr_stall() {
    // rdma_cm's default: min_rnr_timer 0, the longest wait (655.36 ms, IBTA Vol 1 Table 45).
    let opts = ConnectParams {
        min_rnr_timer: 0,
        ..ConnectParams::default()
    };
    let path = tmp("rnr");
    let (mut sim, hosts) = pair(LinkConfig::default(), &opts, &path);
    send(&mut sim, &hosts);
    // The receive comes 1 ms late.
    let until = sim.now() + Duration::from_millis(1);
    sim.run_until(until);
    let rsgl = SgList::one(sim.device(1).mr(hosts[1].mr).unwrap().sge(4096, 4096));
    sim.device(1)
        .post_recv(
            hosts[1].qp,
            RecvRequest {
                wr_id: 9,
                sgl: rsgl,
            },
        )
        .unwrap();
    assert!(sim.run_until_idle());
    let c = sim
        .device(0)
        .poll_cq(hosts[0].cq)
        .expect("the SEND completes");
    assert_eq!(c.status, WcStatus::Success);
    sim.set_tap(Box::new(|_: &TapEvent<'_>| {}));
    let a = analyzed(&path);
    let f: Vec<_> = a
        .findings()
        .into_iter()
        .filter(|f| f.name == "rnr_stall")
        .collect();
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail
            .starts_with("1 RNR NAKs sent, 1 with timer code 0 (655.36 ms, the longest)"),
        "{}",
        f[0].detail
    );
    // The requester waited the timer out: at least 655.36 ms, and the finding says so.
    let waited = a.connections[0]
        .sides
        .iter()
        .map(|s| s.rnr_wait.max())
        .max()
        .unwrap();
    assert!(
        (655_360_000..700_000_000).contains(&waited),
        "waited {waited} ns: {}",
        f[0].detail
    );
    assert!(f[0].advice.contains("min_rnr_timer"));
}

#[test]
fn a_peer_that_never_answers_is_retry_exceeded_when_the_stack_says_it() {
    // Everything from A is lost: A's SEND goes unanswered, its timer (code 12, 16.8 ms) fires
    // and it sends again, 3 retries (retry_cnt 3), then the QP fails with RETRY_EXC_ERR.
    let opts = ConnectParams {
        timeout: 12,
        retry_cnt: 3,
        ..ConnectParams::default()
    };
    let link = LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    };
    let path = tmp("retry");
    let (mut sim, hosts) = pair(link, &opts, &path);
    let start = sim.now();
    send(&mut sim, &hosts);
    // When the error completes, to the millisecond.
    let mut failed_at = None;
    for _ in 0..1000 {
        let until = sim.now() + Duration::from_millis(1);
        sim.run_until(until);
        if let Some(c) = sim.device(0).poll_cq(hosts[0].cq) {
            assert_eq!(c.status, WcStatus::RetryExcErr);
            failed_at = Some(sim.now().as_nanos() - start.as_nanos());
            break;
        }
    }
    let failed_at = failed_at.expect("the QP gives up within a second");
    sim.set_tap(Box::new(|_: &TapEvent<'_>| {}));
    let a = analyzed(&path);
    let f: Vec<_> = a
        .findings()
        .into_iter()
        .filter(|f| f.name == "retry_exceeded")
        .collect();
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail
            .starts_with("cause unreachable_from_start: went back to PSN "),
        "{}",
        f[0].detail
    );
    assert!(
        f[0].detail.contains(" 3 times, 16.777 ms apart"),
        "{}",
        f[0].detail
    );
    // The analysis predicts the error from the rounds' spacing and the largest retry count
    // (the capture has no REQ to give 3): the 3 retries are spent, the error comes a timeout
    // after the last, which is where the stack failed the QP.
    let run = a.connections[0].sides[0]
        .retrying_at_end
        .as_deref()
        .copied()
        .expect("retrying at the end");
    let timeout = (run.last_t - run.first_t) / (run.rounds - 1);
    let predicted = run.last_t + timeout;
    assert!(
        predicted.abs_diff(failed_at) <= timeout / 4,
        "predicted {predicted} ns, failed at {failed_at} ns: {}",
        f[0].detail
    );
}
