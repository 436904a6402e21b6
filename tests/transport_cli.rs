//! `roce loopback --transport rc,uc,ud` as a user runs it: RC, UC and UD QPs mixed in the
//! verified workload over real sockets, clean and with losses; and the refusals. Each test has
//! its own loopback addresses (127.0.7n.x).
mod common;

use common::{ips, roce};

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn row<'a>(r: &'a serde_json::Value, t: &str) -> &'a serde_json::Value {
    r["unreliable"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["transport"] == t))
        .unwrap_or_else(|| panic!("no {t} row: {r}"))
}

#[test]
fn mixed_transports_verify_on_a_clean_loopback() {
    let (c, s) = ips(70);
    let (code, out, err) = roce(&[
        "loopback",
        "--client-ip",
        &c,
        "--server-ip",
        &s,
        "--transport",
        "rc,uc,ud",
        "--qps",
        "6",
        "--count",
        "100",
        "--size",
        "0-16K",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let r = json(&out);
    assert_eq!(r["ok"], true, "{out}");
    for t in ["uc", "ud"] {
        let x = row(&r, t);
        assert_eq!(x["qps"], 2, "{x}");
        assert!(x["delivered"].as_u64().unwrap() > 0, "{x}");
    }
    // UD carries SENDs only: 2 UD QPs x 100 receives.
    let ud = row(&r, "ud");
    assert_eq!(
        ud["delivered"].as_u64().unwrap() + ud["lost"].as_u64().unwrap(),
        200,
        "{ud}"
    );
    let ops: u64 = r["ops"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(ops, 6 * 100, "{out}");
}

#[test]
fn with_losses_uc_and_ud_count_them_and_rc_still_verifies() {
    let (c, s) = ips(71);
    let (code, out, err) = roce(&[
        "loopback",
        "--client-ip",
        &c,
        "--server-ip",
        &s,
        "--transport",
        "rc,uc,ud",
        "--qps",
        "3",
        "--count",
        "200",
        "--size",
        "0-8K",
        "--loss",
        "0.05",
        "--dup",
        "0.05",
        "--seed",
        "5",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("every UC/UD message that arrived, verified"),
        "{out}"
    );
    let line = |t: &str| {
        out.lines()
            .find(|l| l.starts_with(t))
            .unwrap_or_else(|| panic!("no {t} line: {out}"))
            .to_string()
    };
    for t in ["uc ", "ud "] {
        let l = line(t);
        // "uc  1 QPs: 142 messages delivered (0 late, 0 twice), 9 lost; final marker ..."
        let lost: u64 = l
            .split_once("), ")
            .and_then(|(_, rest)| rest.split_once(" lost"))
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("{l}"));
        assert!(lost > 0, "5 % loss and nothing lost: {l}");
    }
}

#[test]
fn transports_that_cannot_run_the_mix_are_refused_in_one_line() {
    for (args, want) in [
        (
            &["--transport", "ud", "--ops", "read"][..],
            "nothing UD carries",
        ),
        (
            &["--transport", "uc", "--ops", "cas,faa"][..],
            "nothing UC carries",
        ),
        (&["--transport", "rc,xrc"][..], "unknown transport"),
        (
            &["--transport", "ud", "--cm"][..],
            "the CM connects RC QPs only",
        ),
    ] {
        let mut a = vec!["loopback"];
        a.extend_from_slice(args);
        let (code, out, err) = roce(&a);
        assert_ne!(code, 0, "{args:?}: {out}{err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
