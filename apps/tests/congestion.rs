//! The congestion experiments in the simulator: long WRITE flows through one switch bottleneck
//! (RED ECN marking, tail drop) with DCQCN and without congestion control, and a late
//! joiner. Real QPs on both ends; the seed comes from `SIM_SEED` and is printed on failure.
use core::time::Duration;

use roce_apps::congestion::{run, suite, table, Run, Scenario};
use roce_stack::sim::{seed_from_env, SeedGuard};
use roce_stack::CcConfig;

const DURATION: Duration = Duration::from_millis(60);

fn scenario(seed: u64, pick: impl Fn(&Scenario) -> bool) -> Scenario {
    suite(CcConfig::PAPER, DURATION, seed)
        .into_iter()
        .find(|s| pick(s))
        .expect("the suite has this scenario")
}

fn show(r: &Run) -> String {
    table(std::slice::from_ref(r))
}

/// Two, then eight, long DCQCN flows: Jain's fairness ≥ 0.95 and utilisation ≥ 90 % over the
/// second half; the queue mostly between Kmin and Kmax (its mean inside, above Kmax less than
/// 10 % of the time, in the band at least 40 % of it: the rest it spends draining below Kmin
/// after cuts, 44-73 % in band over seeds 1-12); no tail drop, no retransmission.
#[test]
fn dcqcn_flows_share_the_bottleneck_fairly_without_drops() {
    let seed = seed_from_env(1);
    let _g = SeedGuard(seed);
    for flows in [2, 8] {
        let sc = scenario(seed, |s| s.flows == flows && s.cc.kind() == "dcqcn");
        let r = run(&sc);
        let (kmin, kmax) = r.kmin_kmax;
        let t = show(&r);
        assert!(r.fairness >= 0.95, "fairness\n{t}");
        assert!(r.utilization >= 0.90, "utilisation\n{t}");
        assert_eq!(r.tail_drops, 0, "tail drops\n{t}");
        assert_eq!(r.retransmitted_packets, 0, "retransmissions\n{t}");
        assert!(r.queue_in_band >= 0.4, "queue in band\n{t}");
        assert!(
            r.queue_above_kmax <= 0.1,
            "queue above Kmax {:.3}\n{t}",
            r.queue_above_kmax
        );
        assert!(
            (kmin as f64..=kmax as f64).contains(&r.mean_queue_bytes),
            "mean queue\n{t}"
        );
        assert!(r.cnps > 0 && r.rate_cuts > 0, "CNPs and cuts\n{t}");
        assert!(r.max_queue_bytes < sc.buffer_bytes, "max queue\n{t}");
    }
}

/// The same without congestion control and the same finite buffer: the queue fills, tail
/// drops and go-back-N retransmissions appear and goodput falls well below DCQCN's.
#[test]
fn without_cc_the_buffer_overflows_and_goodput_falls() {
    let seed = seed_from_env(1);
    let _g = SeedGuard(seed);
    for flows in [2, 8] {
        let dcqcn = run(&scenario(seed, |s| {
            s.flows == flows && s.cc.kind() == "dcqcn"
        }));
        let sc = scenario(seed, |s| s.flows == flows && s.cc.kind() == "none");
        let none = run(&sc);
        let t = table(&[dcqcn.clone(), none.clone()]);
        assert!(none.tail_drops > 0, "tail drops\n{t}");
        assert!(none.retransmitted_packets > 0, "retransmissions\n{t}");
        assert!(
            none.goodput_gbps < 0.8 * dcqcn.goodput_gbps,
            "goodput falls\n{t}"
        );
        assert!(
            none.mean_queue_bytes > dcqcn.mean_queue_bytes * 4.0,
            "standing queue\n{t}"
        );
        assert_eq!(none.rate_cuts, 0, "`none` never cuts\n{t}");
    }
}

/// A third flow joining at a quarter of a 150 ms run comes within ±10 % of its fair share
/// (1 ms average) and gets 85-118 % of it over the second half (0.94-1.07 over seeds 1-12);
/// fairness stays ≥ 0.95.
#[test]
fn late_flow_converges_to_its_fair_share() {
    let seed = seed_from_env(1);
    let _g = SeedGuard(seed);
    let sc = suite(CcConfig::PAPER, Duration::from_millis(150), seed)
        .into_iter()
        .find(|s| s.name.starts_with("late"))
        .expect("late-join scenario");
    let r = run(&sc);
    let t = show(&r);
    let j = r.late_join.expect("the last flow joins late");
    assert!(j.convergence_ms.is_some(), "never converged\n{t}");
    assert!(
        (0.85..=1.18).contains(&j.share_second_half),
        "share {:.3}\n{t}",
        j.share_second_half
    );
    assert!(r.fairness >= 0.95, "fairness\n{t}");
    assert_eq!(r.tail_drops, 0, "tail drops\n{t}");
}

/// The JSON report has one entry per run with the documented keys.
#[test]
fn json_report_has_the_documented_keys() {
    let mut sc = Scenario::new("tiny", CcConfig::PAPER, 2, Duration::from_millis(2), 9);
    sc.sample = Duration::from_micros(100);
    let r = run(&sc);
    let j = roce_apps::congestion::to_json(&[r.clone(), r]);
    assert!(j.starts_with("{\"seed\":9,") && j.ends_with("]}"), "{j}");
    for key in [
        "\"name\":\"tiny\"",
        "\"cc\":\"dcqcn\"",
        "\"flows\":2",
        "\"fairness\":",
        "\"utilization\":",
        "\"tail_drops\":",
        "\"retransmitted_packets\":",
        "\"max_queue_bytes\":",
        "\"mean_queue_bytes\":",
        "\"cnps\":",
    ] {
        assert_eq!(j.matches(key).count(), 2, "{key} in {j}");
    }
    let svg = roce_apps::congestion::to_svg(&[]);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
}
