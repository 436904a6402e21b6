//! Figures of `roce sim fabric --plot DIR`, drawn with plotters into SVG: FCT slowdown against
//! flow size (the HPCC paper's Figure 11 shape: p50, p95 and p99 per size bucket, one colour
//! per congestion control), and the incast sweep (goodput and p99 slowdown against the number
//! of senders).
use plotters::prelude::*;

use super::fct::{FctReport, BUCKETS};

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Percentiles drawn, with their stroke widths.
const PERCENTILES: [(&str, u32); 3] = [("p50", 1), ("p95", 2), ("p99", 3)];

fn pick(s: &super::fct::Slowdown, p: &str) -> f64 {
    match p {
        "p50" => s.p50,
        "p95" => s.p95,
        _ => s.p99,
    }
}

/// FCT slowdown (log scale) against the size buckets, one line per percentile and run (`None`
/// when no run completed a flow).
pub fn fct_svg(runs: &[FctReport]) -> Option<String> {
    // The buckets some run has flows in, in size order.
    let used: Vec<usize> = (0..BUCKETS.len())
        .filter(|&b| {
            runs.iter().any(|r| {
                r.buckets
                    .iter()
                    .any(|(l, s)| l == BUCKETS[b].1 && s.flows > 0)
            })
        })
        .collect();
    if used.is_empty() {
        return None;
    }
    let ymax = runs
        .iter()
        .flat_map(|r| r.buckets.iter().map(|(_, s)| s.p99))
        .fold(2.0f64, f64::max)
        * 1.3;
    let xmax = (used.len() as f64 - 0.5).max(0.5);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 540)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "FCT slowdown by flow size (p50 thin, p95 medium, p99 thick)",
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..xmax, (1.0f64..ymax).log_scale())
            .ok()?;
        let labels: Vec<&str> = used.iter().map(|&b| BUCKETS[b].1).collect();
        chart
            .configure_mesh()
            .x_desc("flow size")
            .y_desc("FCT / ideal FCT")
            .x_labels(labels.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels
                        .get(i as usize)
                        .map_or(String::new(), |s| (*s).to_string())
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| format!("{v:.1}"))
            .draw()
            .ok()?;
        for (ri, r) in runs.iter().enumerate() {
            let color = COLORS[ri % COLORS.len()];
            for (p, width) in PERCENTILES {
                let pts: Vec<(f64, f64)> = used
                    .iter()
                    .enumerate()
                    .filter_map(|(x, &b)| {
                        r.buckets
                            .iter()
                            .find(|(l, s)| l == BUCKETS[b].1 && s.flows > 0)
                            .map(|(_, s)| (x as f64, pick(s, p).max(1.0)))
                    })
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let style = color.stroke_width(width);
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), style))
                    .ok()?
                    .label(format!("{} {p}", r.cc))
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
                chart
                    .draw_series(pts.iter().map(|&q| Circle::new(q, 3, color.filled())))
                    .ok()?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// The incast sweep: goodput (top) and p99 slowdown (bottom) against the number of senders,
/// one line per run label (`None` with no rows).
pub fn incast_svg(sweeps: &[(String, Vec<(usize, FctReport)>)]) -> Option<String> {
    let rows = sweeps.iter().flat_map(|(_, v)| v.iter());
    let nmax = rows.clone().map(|(n, _)| *n).max()? as f64;
    let gmax = rows
        .clone()
        .map(|(_, r)| r.goodput_gbps)
        .fold(1.0, f64::max)
        * 1.1;
    let smax = rows.map(|(_, r)| r.all.p99).fold(2.0, f64::max) * 1.3;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 720)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let (top, bottom) = root.split_vertically(360);
        let mut g = ChartBuilder::on(&top)
            .caption("incast: goodput against senders", ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((1.5f64..nmax * 1.2).log_scale(), 0.0..gmax)
            .ok()?;
        g.configure_mesh()
            .x_desc("senders")
            .y_desc("Gb/s")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .ok()?;
        let mut s = ChartBuilder::on(&bottom)
            .caption(
                "incast: p99 FCT slowdown against senders",
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((1.5f64..nmax * 1.2).log_scale(), (1.0f64..smax).log_scale())
            .ok()?;
        s.configure_mesh()
            .x_desc("senders")
            .y_desc("FCT / ideal FCT")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.1}"))
            .draw()
            .ok()?;
        for (i, (label, rows)) in sweeps.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let style = color.stroke_width(2);
            let gp: Vec<(f64, f64)> = rows
                .iter()
                .map(|(n, r)| (*n as f64, r.goodput_gbps))
                .collect();
            let sp: Vec<(f64, f64)> = rows
                .iter()
                .map(|(n, r)| (*n as f64, r.all.p99.max(1.0)))
                .collect();
            g.draw_series(LineSeries::new(gp.iter().copied(), style))
                .ok()?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
            g.draw_series(gp.iter().map(|&q| Circle::new(q, 3, color.filled())))
                .ok()?;
            s.draw_series(LineSeries::new(sp.iter().copied(), style))
                .ok()?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
            s.draw_series(sp.iter().map(|&q| Circle::new(q, 3, color.filled())))
                .ok()?;
        }
        g.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerLeft)
            .draw()
            .ok()?;
        s.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// The CDF of the switch queue's length over time, one line per run (`None` when no run has
/// a queue sample). The empty queue is drawn at 0.5 KB (the log axis has no 0).
pub fn queue_svg(runs: &[FctReport]) -> Option<String> {
    let kb = |b: u64| if b == 0 { 0.5 } else { b as f64 / 1e3 };
    let finite = |c: &&(u64, f64)| c.0 != u64::MAX;
    let xmax = runs
        .iter()
        .flat_map(|r| r.queue.cdf.iter().filter(finite))
        .filter(|c| c.1 < 1.0)
        .map(|c| kb(c.0) * 2.0)
        .fold(2.0f64, f64::max);
    if runs.iter().all(|r| r.queue.cdf.is_empty()) {
        return None;
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 480)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "switch queue over time: CDF (0.5 KB = empty)",
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((0.4f64..xmax).log_scale(), 0.0f64..1.02)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("queue length (KB)")
            .y_desc("fraction of the time at most")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .ok()?;
        for (i, r) in runs.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let style = color.stroke_width(2);
            let mut pts = Vec::new();
            let mut last = 0.0;
            for c in r.queue.cdf.iter().filter(finite) {
                let x = kb(c.0).min(xmax);
                pts.push((x, last));
                pts.push((x, c.1));
                last = c.1;
            }
            pts.push((xmax, 1.0));
            chart
                .draw_series(LineSeries::new(pts, style))
                .ok()?
                .label(format!(
                    "{}: mean {:.1} KB, p99 <= {} KB",
                    r.cc,
                    r.queue.mean_bytes / 1e3,
                    r.queue.p99_bytes.min(u64::MAX / 2) / 1000
                ))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}
