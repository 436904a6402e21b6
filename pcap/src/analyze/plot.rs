//! Pictures of a connection, drawn with plotters into SVG: PSN against time (tcptrace
//! style: requests, retransmissions, ACKs, NAKs and CNPs marked) and the sender's rate over
//! time with the CNPs it received.
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use roce_proto::Psn;

use super::side::endpoint;
use super::{Analysis, Connection};

/// Marks of the PSN plot, by the kind code of [`super::Side::trace`].
const MARKS: [(&str, RGBColor); 5] = [
    ("request", RGBColor(31, 119, 180)),
    ("retransmission", RGBColor(214, 39, 40)),
    ("ACK", RGBColor(44, 160, 44)),
    ("NAK", RGBColor(255, 127, 14)),
    ("CNP", RGBColor(148, 103, 189)),
];

/// Unwraps 24-bit PSNs in order of appearance into a line (the first one is 0).
struct Unwrap {
    base: Option<u32>,
    last: i64,
}

impl Unwrap {
    fn y(&mut self, psn: u32) -> i64 {
        let base = *self.base.get_or_insert(psn);
        let raw = i64::from(Psn::new(psn).distance_from(Psn::new(base)));
        // The nearest value to the previous one, modulo 2^24.
        let m = i64::from(Psn::MODULUS);
        let k = (self.last - raw + m / 2).div_euclid(m);
        let v = raw + k * m;
        self.last = v;
        v
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The PSN-versus-time plot of one connection, or `None` when it has no PSN points.
fn psn_plot(c: &Connection) -> Option<String> {
    // Requests of either side, with the other side's responses on the same PSN line.
    let mut pts: Vec<(f64, f64, u8)> = Vec::new();
    for (i, s) in c.sides.iter().enumerate() {
        if s.requests == 0 {
            continue;
        }
        let other = &c.sides[1 - i];
        let mut u = Unwrap {
            base: s.psn_first,
            last: 0,
        };
        let mut merged: Vec<(u64, u32, u8)> = s
            .trace
            .iter()
            .copied()
            // Its requests, retransmissions and the CNPs it was sent; the other side's
            // ACKs and NAKs.
            .filter(|p| p.2 <= 1 || p.2 == 4)
            .chain(other.trace.iter().copied().filter(|p| p.2 == 2 || p.2 == 3))
            .collect();
        merged.sort_by_key(|p| p.0);
        pts.extend(
            merged
                .into_iter()
                .map(|(t, psn, k)| (ms(t), u.y(psn) as f64, k)),
        );
    }
    if pts.is_empty() {
        return None;
    }
    let (x0, x1) = bounds(pts.iter().map(|p| p.0));
    let (y0, y1) = bounds(pts.iter().map(|p| p.1));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 540)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("connection {}: PSN over time", c.id),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc("PSN (from the first)")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .ok()?;
        let totals = mark_totals(c);
        for (k, (name, color)) in MARKS.iter().enumerate() {
            let color = *color;
            let these: Vec<(f64, f64)> = pts
                .iter()
                .filter(|p| usize::from(p.2) == k)
                .map(|p| (p.0, p.1))
                .collect();
            if these.is_empty() {
                continue;
            }
            let size = if k == 0 { 2 } else { 4 };
            // The legend counts what the connection had; the plot may draw fewer (requests
            // and ACKs are thinned to the point budget, marks never are).
            let label = match totals[k] {
                Some(n) if n > these.len() as u64 => {
                    format!("{name} ({n}, {} drawn)", these.len())
                }
                Some(n) => format!("{name} ({n})"),
                None => format!("{name} ({} drawn)", these.len()),
            };
            chart
                .draw_series(these.iter().map(|&p| Circle::new(p, size, color.filled())))
                .ok()?
                .label(label)
                .legend(move |(x, y)| Circle::new((x, y), 4, color.filled()));
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

/// What the connection had of each kind of [`MARKS`] (the PSN plot's legend), where the
/// counters say: the requesting sides' new requests and retransmitted packets, the NAKs and
/// CNPs their peers sent them; ACKs are not counted apart from the other responses (`None`).
fn mark_totals(c: &Connection) -> [Option<u64>; 5] {
    let mut t = [0u64; 5];
    for (i, s) in c.sides.iter().enumerate().filter(|(_, s)| s.requests > 0) {
        let peer = &c.sides[1 - i];
        t[0] += s.requests.saturating_sub(s.retransmitted_packets);
        t[1] += s.retransmitted_packets;
        t[3] += peer.naks.iter().sum::<u64>();
        t[4] += peer.cnps;
    }
    [Some(t[0]), Some(t[1]), None, Some(t[3]), Some(t[4])]
}

/// The rate-over-time plot of one connection, or `None` when nothing was sent.
fn rate_plot(c: &Connection) -> Option<String> {
    let series: Vec<(usize, Vec<(f64, f64)>)> = c
        .sides
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.rate.is_empty())
        .map(|(i, s)| {
            let win = s.rate_window_ns.max(1);
            let mut v: Vec<(f64, f64)> = Vec::with_capacity(s.rate.len() * 2);
            for (i, &(w, b)) in s.rate.iter().enumerate() {
                // Idle windows are not kept: draw them as zero.
                if let Some(&(prev, _)) = i.checked_sub(1).and_then(|j| s.rate.get(j)) {
                    if w > prev + win {
                        v.push((ms(prev + win), 0.0));
                        if w > prev + 2 * win {
                            v.push((ms(w - win), 0.0));
                        }
                    }
                }
                v.push((ms(w), b as f64 * 8.0 / win as f64));
            }
            (i, v)
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    let (x0, x1) = bounds(series.iter().flat_map(|s| s.1.iter().map(|p| p.0)));
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 400)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "connection {}: sender rate ({:.0} us windows)",
                    c.id,
                    c.sides.iter().map(|s| s.rate_window_ns).max().unwrap_or(0) as f64 / 1e3
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, 0.0..ymax)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("time (ms)")
            .y_desc("Gb/s")
            .draw()
            .ok()?;
        let colors = [RGBColor(31, 119, 180), RGBColor(255, 127, 14)];
        for (i, pts) in &series {
            let color = colors[*i];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                .ok()?
                .label(format!("side {} {}", i, endpoint(&c.sides[*i])))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        let cnps: Vec<f64> = c
            .sides
            .iter()
            .flat_map(|s| s.cnps_received_at.iter().map(|&t| ms(t)))
            .collect();
        if !cnps.is_empty() {
            // A rug of short ticks along the time axis, under the rate lines: a busy
            // connection's thousands of CNPs show where they were dense without hiding the
            // rates they answer.
            let red = RGBColor(214, 39, 40);
            let tick = ymax * 0.04;
            chart
                .draw_series(
                    cnps.iter()
                        .map(|&x| PathElement::new([(x, 0.0), (x, tick)], red.mix(0.6))),
                )
                .ok()?
                .label(format!("CNP received ({})", cnps.len()))
                .legend(move |(x, y)| PathElement::new([(x, y - 6), (x, y + 6)], red));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

/// A non-empty range around the values.
fn bounds(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.03).max(0.5e-3);
    (lo - pad, hi + pad)
}

/// The plots of one connection as SVG documents: PSN over time, then rate over time.
pub(crate) fn svgs(c: &Connection) -> Vec<String> {
    [psn_plot(c), rate_plot(c)].into_iter().flatten().collect()
}

/// Writes `conn-<id>-psn.svg` and `conn-<id>-rate.svg` per connection into `dir`.
pub(crate) fn write_all(a: &Analysis, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for c in &a.connections {
        for (name, svg) in [("psn", psn_plot(c)), ("rate", rate_plot(c))] {
            if let Some(svg) = svg {
                let path = dir.join(format!("conn-{}-{name}.svg", c.id));
                crate::outfile::write_whole(&path, |w| w.write_all(svg.as_bytes()))?;
                written.push(path);
            }
        }
    }
    Ok(written)
}
