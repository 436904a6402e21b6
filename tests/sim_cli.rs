//! `roce sim congestion` as a user runs it: the table, the JSON contract and the SVG plot.

mod common;

use common::roce;

#[test]
fn congestion_json_has_every_run_and_key_and_the_plot_is_svg() {
    let dir = std::env::temp_dir().join(format!("roce-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("plot.svg");
    let (code, out, err) = roce(&[
        "sim",
        "congestion",
        "--json",
        "--duration",
        "10",
        "--seed",
        "5",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["seed"], 5);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 5, "{out}");
    for r in runs {
        for k in [
            "name",
            "cc",
            "flows",
            "fairness",
            "utilization",
            "tail_drops",
            "retransmitted_packets",
            "max_queue_bytes",
            "mean_queue_bytes",
            "cnps",
        ] {
            assert!(!r[k].is_null(), "{k} missing in {r}");
        }
        let u = r["utilization"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&u), "{r}");
    }
    let ccs: Vec<&str> = runs.iter().map(|r| r["cc"].as_str().unwrap()).collect();
    assert_eq!(ccs, ["dcqcn", "none", "dcqcn", "none", "dcqcn"]);
    let flows: Vec<u64> = runs.iter().map(|r| r["flows"].as_u64().unwrap()).collect();
    assert_eq!(flows, [2, 2, 8, 8, 3]);
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.trim_end().ends_with("</svg>"));
    assert_eq!(
        plot.matches("<polyline").count(),
        2 * (2 + 2 + 8 + 8 + 3) + 5
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn congestion_table_and_bad_arguments() {
    let (code, out, err) = roce(&["sim", "congestion", "--duration", "4"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("run "), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains(" dcqcn ")).count(),
        3,
        "{out}"
    );
    for bad in [["--cc", "bbr"], ["--duration", "0"]] {
        let mut args = vec!["sim", "congestion"];
        args.extend_from_slice(&bad);
        let (code, out, err) = roce(&args);
        assert_ne!(code, 0, "{bad:?}: {out}");
        assert!(err.starts_with("roce sim: "), "{err}");
    }
}
