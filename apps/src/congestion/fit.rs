//! How closely a sender's measured rate follows the DCQCN reaction point, given the CNPs it
//! received: the CNP arrivals of a capture (`roce analyze`) replayed through the project's own
//! model ([`roce_stack::cc::dcqcn::replay`]) for each preset, the model's allowed rate
//! compared window by window with the rate the capture shows.
use roce_stack::cc::dcqcn::{replay, DcqcnParams};

/// Windows compared at most (longer windows beyond).
const MAX_WINDOWS: u64 = 4096;

/// The presets a capture is compared with.
pub const PRESETS: [(&str, DcqcnParams); 2] = [
    ("paper", DcqcnParams::paper()),
    ("nvidia", DcqcnParams::nvidia()),
];

/// One sender compared with each preset.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// The line rate assumed: the highest windowed rate measured, bits/s.
    pub line_rate_bps: u64,
    /// Windows compared (from the one holding the first CNP).
    pub windows: usize,
    /// Per preset: the mean absolute difference between the measured rate and the model's,
    /// in percent of the line rate.
    pub error_pct: Vec<(&'static str, f64)>,
}

impl Fit {
    /// The preset with the smallest error.
    pub fn best(&self) -> &'static str {
        self.error_pct
            .iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or("none", |p| p.0)
    }
}

/// Compares the sender whose bytes per window are `windows` ((start ns, bytes), ascending,
/// `window_ns` long; windows without bytes may be left out) and which received CNPs at
/// `cnps` (ns, ascending) with each preset; `None` without a CNP or with fewer than four
/// windows from the first CNP on.
///
/// The model gives the rate the sender is allowed; a sender that has less to send runs below
/// it, so the comparison is meaningful for a backlogged sender (the windows at line rate before
/// the first CNP say it was).
pub fn fit(cnps: &[u64], windows: &[(u64, u64)], window_ns: u64) -> Option<Fit> {
    let &first = cnps.first()?;
    let (&(start, _), &(last, _)) = (windows.first()?, windows.last()?);
    // Every window, idle ones at zero: longer windows when the span would need too many.
    let mut win = window_ns.max(1);
    while (last - start) / win > MAX_WINDOWS {
        win *= 2;
    }
    let base = start / win * win;
    let mut dense: Vec<(u64, u64)> = (0..=(last / win * win - base) / win)
        .map(|i| (base + i * win, 0))
        .collect();
    for &(s, b) in windows {
        let i = ((s / win * win - base) / win) as usize;
        if let Some(d) = dense.get_mut(i) {
            d.1 += b;
        }
    }
    let bps = |b: u64| (b as f64 * 8.0 * 1e9 / win as f64) as u64;
    let line = dense.iter().map(|&(_, b)| bps(b)).max()?.max(1);
    let from = dense.iter().position(|&(s, _)| s + win > first)?;
    if dense.len() - from < 4 {
        return None;
    }
    // The model's rate in the middle of each window.
    let samples: Vec<u64> = dense.iter().map(|&(s, _)| s + win / 2).collect();
    let error_pct = PRESETS
        .iter()
        .map(|&(name, p)| {
            let model = replay(p, line, cnps, &dense, &samples);
            let sum: f64 = dense[from..]
                .iter()
                .zip(&model[from..])
                .map(|(&(_, b), &m)| (bps(b) as f64 - m as f64).abs())
                .sum();
            (
                name,
                100.0 * sum / (dense.len() - from) as f64 / line as f64,
            )
        })
        .collect();
    Some(Fit {
        line_rate_bps: line,
        windows: dense.len() - from,
        error_pct,
    })
}
