//! The renderings of congestion runs: a text table, one JSON object, an SVG of per-flow rates
//! and queue depth over time.
use core::fmt::Write as _;

use super::{LateJoin, Run};

/// A plain-text table of the runs, side by side.
pub fn table(runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<22} {:<6} {:>5} {:>8} {:>6} {:>8} {:>6} {:>8} {:>9} {:>9} {:>7} {:>7} {:>11}",
        "run",
        "cc",
        "flows",
        "fairness",
        "util",
        "goodput",
        "drops",
        "retx",
        "max q KB",
        "mean q KB",
        "in band",
        "CNPs",
        "converged"
    );
    for r in runs {
        let conv = match r.late_join {
            Some(LateJoin {
                convergence_ms: Some(c),
                ..
            }) => format!("{c:.2} ms"),
            Some(_) => "never".to_string(),
            None => "-".to_string(),
        };
        let _ = writeln!(
            s,
            "{:<22} {:<6} {:>5} {:>8.3} {:>5.1}% {:>6.2}Gb {:>6} {:>8} {:>9.1} {:>9.1} {:>6.1}% {:>7} {:>11}",
            r.name,
            r.cc,
            r.flows,
            r.fairness,
            r.utilization * 100.0,
            r.goodput_gbps,
            r.tail_drops,
            r.retransmitted_packets,
            r.max_queue_bytes as f64 / 1e3,
            r.mean_queue_bytes / 1e3,
            r.queue_in_band * 100.0,
            r.cnps,
            conv
        );
    }
    let _ = writeln!(
        s,
        "(second half of each run; goodput = completed WRITE payload; in band = time with \
         Kmin <= queue <= Kmax; drops, retx, max q and CNPs over the whole run)"
    );
    s
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_f64(x: f64) -> String {
    if x.is_finite() {
        let s = format!("{x:.6}");
        let s = s.trim_end_matches('0');
        let s = s.strip_suffix('.').unwrap_or(s);
        s.to_string()
    } else {
        "null".to_string()
    }
}

/// One JSON object: `{"seed": …, "duration_ms": …, "runs": [{name, cc, flows, fairness,
/// utilization, tail_drops, retransmitted_packets, max_queue_bytes, mean_queue_bytes, cnps,
/// …}]}` (time series are left out; see [`to_svg`]).
pub fn to_json(runs: &[Run]) -> String {
    let mut s = String::from("{");
    if let Some(r) = runs.first() {
        let _ = write!(
            s,
            "\"seed\":{},\"duration_ms\":{},",
            r.seed,
            json_f64(r.duration_ms)
        );
    }
    s.push_str("\"runs\":[");
    for (i, r) in runs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let per_flow: Vec<String> = r.flow_goodput_gbps.iter().map(|&g| json_f64(g)).collect();
        let late = match r.late_join {
            Some(l) => format!(
                "{{\"at_ms\":{},\"convergence_ms\":{},\"share_second_half\":{}}}",
                json_f64(l.at_ms),
                l.convergence_ms.map_or("null".to_string(), json_f64),
                json_f64(l.share_second_half)
            ),
            None => "null".to_string(),
        };
        let _ = write!(
            s,
            "{{\"name\":{},\"cc\":{},\"cc_config\":{},\"flows\":{},\"seed\":{},\
             \"fairness\":{},\"utilization\":{},\"goodput_gbps\":{},\"flow_goodput_gbps\":[{}],\
             \"tail_drops\":{},\"retransmitted_packets\":{},\"max_queue_bytes\":{},\
             \"max_queue_bytes_second_half\":{},\"mean_queue_bytes\":{},\"queue_in_band\":{},\
             \"queue_above_kmax\":{},\
             \"kmin_bytes\":{},\"kmax_bytes\":{},\"ce_marked\":{},\"cnps\":{},\
             \"cnps_received\":{},\"rate_cuts\":{},\"late_join\":{}}}",
            json_str(&r.name),
            json_str(&r.cc),
            json_str(&r.cc_config),
            r.flows,
            r.seed,
            json_f64(r.fairness),
            json_f64(r.utilization),
            json_f64(r.goodput_gbps),
            per_flow.join(","),
            r.tail_drops,
            r.retransmitted_packets,
            r.max_queue_bytes,
            r.max_queue_bytes_second_half,
            json_f64(r.mean_queue_bytes),
            json_f64(r.queue_in_band),
            json_f64(r.queue_above_kmax),
            r.kmin_kmax.0,
            r.kmin_kmax.1,
            r.ce_marked,
            r.cnps,
            r.cnps_received,
            r.rate_cuts,
            late
        );
    }
    s.push_str("]}");
    s
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// An SVG with two panels per run: per-flow rate at the bottleneck (solid) and each
/// sender's congestion-control rate (dotted) in Gb/s, and the queue depth in KB with Kmin
/// and Kmax drawn dashed; time in ms on the x axis.
pub fn to_svg(runs: &[Run]) -> String {
    const W: f64 = 900.0;
    const PH: f64 = 150.0; // panel height
    const ML: f64 = 60.0; // left margin
    const MR: f64 = 20.0;
    const GAP: f64 = 40.0;
    let block = 2.0 * PH + 2.0 * GAP + 20.0;
    let h = block * runs.len() as f64 + 10.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" \
         viewBox=\"0 0 {W} {h}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    for (ri, r) in runs.iter().enumerate() {
        let top = ri as f64 * block + 10.0;
        let t_max = r.series.t_ms.last().copied().unwrap_or(1.0).max(1e-9);
        let x = |t: f64| ML + (W - ML - MR) * t / t_max;
        let rate_max = r
            .series
            .flow_gbps
            .iter()
            .chain(&r.series.cc_gbps)
            .flat_map(|v| v.iter().copied())
            .fold(1.0f64, f64::max)
            * 1.05;
        let q_max = (r.series.queue_bytes.iter().copied().max().unwrap_or(0) as f64)
            .max(r.kmin_kmax.1 as f64)
            * 1.05
            / 1e3;
        let _ = writeln!(
            s,
            "<text x=\"{ML}\" y=\"{:.1}\" font-size=\"13\" font-weight=\"bold\">{} \
             (cc {}, fairness {:.3}, utilisation {:.1}%, drops {}; solid: rate at the \
             bottleneck, dotted: the sender's congestion-control rate, red dashed: Kmin, \
             Kmax)</text>",
            top + 12.0,
            xml(&r.name),
            xml(&r.cc),
            r.fairness,
            r.utilization * 100.0,
            r.tail_drops
        );
        for (pi, (label, ymax)) in [("rate Gb/s", rate_max), ("queue KB", q_max)]
            .into_iter()
            .enumerate()
        {
            let y0 = top + 20.0 + pi as f64 * (PH + GAP);
            let y = |v: f64| y0 + PH - PH * (v / ymax).clamp(0.0, 1.0);
            let _ = writeln!(
                s,
                "<rect x=\"{ML}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{PH}\" fill=\"none\" \
                 stroke=\"#888\"/>",
                W - ML - MR
            );
            let _ = writeln!(
                s,
                "<text x=\"4\" y=\"{:.1}\">{label}</text><text x=\"{:.1}\" y=\"{:.1}\" \
                 text-anchor=\"end\">{:.1}</text><text x=\"{:.1}\" y=\"{:.1}\" \
                 text-anchor=\"end\">0</text>",
                y0 + PH / 2.0,
                ML - 4.0,
                y0 + 10.0,
                ymax,
                ML - 4.0,
                y0 + PH
            );
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{t_max:.1} ms</text>",
                W - MR,
                y0 + PH + 13.0
            );
            let mut line = |vals: &[f64], color: &str, dash: &str, width: f64| {
                let mut pts = String::new();
                for (t, v) in r.series.t_ms.iter().zip(vals) {
                    let _ = write!(pts, "{:.1},{:.1} ", x(*t), y(*v));
                }
                let _ = writeln!(
                    s,
                    "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"{width}\" \
                     {dash}points=\"{}\"/>",
                    pts.trim_end()
                );
            };
            if pi == 0 {
                for (i, v) in r.series.cc_gbps.iter().enumerate() {
                    line(
                        v,
                        COLORS[i % COLORS.len()],
                        "stroke-dasharray=\"1,2\" ",
                        1.0,
                    );
                }
                for (i, v) in r.series.flow_gbps.iter().enumerate() {
                    line(v, COLORS[i % COLORS.len()], "", 1.2);
                }
            } else {
                let q: Vec<f64> = r
                    .series
                    .queue_bytes
                    .iter()
                    .map(|&b| b as f64 / 1e3)
                    .collect();
                line(&q, "#333", "", 1.2);
                for k in [r.kmin_kmax.0, r.kmin_kmax.1] {
                    let yk = y(k as f64 / 1e3);
                    let _ = writeln!(
                        s,
                        "<line x1=\"{ML}\" x2=\"{:.1}\" y1=\"{yk:.1}\" y2=\"{yk:.1}\" \
                         stroke=\"#c00\" stroke-dasharray=\"4,3\"/>",
                        W - MR
                    );
                }
            }
        }
    }
    s.push_str("</svg>\n");
    s
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
