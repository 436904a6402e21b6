//! `roce analyze`: what happened on every connection of a capture (file, stdin or live).
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use roce_pcap::analyze::{self, Analysis, Options};
use roce_pcap::{live, DecodeError};

use crate::output::interrupt_flag;
use crate::units;

#[derive(Debug, Args)]
pub(crate) struct AnalyzeArgs {
    /// Capture file (pcap or pcapng); `-` for stdin. Several captures of the same traffic
    /// (both hosts, a host and a switch mirror): the first is analyzed, and every packet is
    /// matched across each pair of them to localise each loss.
    #[arg(required_unless_present = "interface", conflicts_with = "interface")]
    files: Vec<String>,
    /// With several captures: a packet the other capture has not shown within this time (on
    /// the common clock) is missing from it.
    #[arg(long, value_parser = units::duration, default_value = "10ms")]
    match_window: std::time::Duration,
    /// Capture live from this interface until Ctrl-C or --duration (needs root or CAP_NET_RAW).
    #[arg(short, long)]
    interface: Option<String>,
    /// Live capture: stop after this many seconds.
    #[arg(long, requires = "interface")]
    duration: Option<f64>,
    /// One JSON object per line: a `connection` object per connection (and with --events an
    /// `event` object per event).
    #[arg(long)]
    json: bool,
    /// List every packet event, not only the episodes.
    #[arg(long)]
    events: bool,
    /// Only connections with this QPN on either side (decimal or 0x hex).
    #[arg(long, value_parser = units::number_u32)]
    qp: Option<u32>,
    /// Only packets from this many seconds after the first packet.
    #[arg(long, value_name = "SECONDS")]
    from: Option<f64>,
    /// Only packets before this many seconds after the first packet.
    #[arg(long, value_name = "SECONDS")]
    to: Option<f64>,
    /// No progress for longer than this while requests are outstanding is a stall.
    #[arg(long, value_parser = units::duration, default_value = "100ms")]
    stall: std::time::Duration,
    /// CNPs of one QP closer than this violate the CNP interval rule (default: what the
    /// `--cc` preset's notification point keeps, 50 us).
    #[arg(long, value_parser = units::duration)]
    cnp_interval: Option<std::time::Duration>,
    /// The congestion control the capture's endpoints ran, as `roce loopback --cc` names it
    /// (dcqcn, paper, nvidia, hpcc, none, fixed:...): sets the CNP interval the rule expects
    /// unless --cnp-interval gives one (HPCC reacts to in-network telemetry, not CNPs: no
    /// interval is expected).
    #[arg(long, value_name = "PRESET")]
    cc: Option<String>,
    /// The link rate PAUSE and PFC pause times are counted at (a quantum is 512 bit times):
    /// 100G, 25G, 400G, ...
    #[arg(long, value_parser = units::rate, default_value = "100G")]
    link_speed: u64,
    /// A priority paused without a break for longer than this is a pause storm.
    #[arg(long, value_parser = units::duration, default_value = "100ms")]
    pfc_storm: std::time::Duration,
    /// Write per connection an SVG of PSN over time and one of the sender rate into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Write one self-contained HTML report (tables and the plots inline).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace-event JSON (one track per QP).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Exit 1 when any connection violates a rule.
    #[arg(long)]
    check: bool,
    /// Replay the CNPs each sender received through the DCQCN reaction-point model (the
    /// paper's and NVIDIA's presets) and say how closely its measured rate follows each.
    #[arg(long)]
    fit_dcqcn: bool,
    /// A NIC's counters beside the capture, ADDR=FILE (the counts over the capture) or
    /// ADDR=BEFORE,AFTER (two snapshots): `ethtool -S`, `rdma statistic show` or
    /// `rdma -j statistic show` output of the host whose RoCE address is ADDR. Each known
    /// counter is set beside what the capture shows of it. Repeatable.
    #[arg(long, value_name = "ADDR=FILE[,FILE]")]
    counters: Vec<String>,
}

/// Counters files are read whole: a bound on what a file can make this read.
const MAX_COUNTERS_FILE: u64 = 16 << 20;

/// One `--counters ADDR=FILE[,FILE]`.
fn host_counters(arg: &str) -> anyhow::Result<analyze::counters::HostCounters> {
    use analyze::counters;
    let Some((addr, files)) = arg.split_once('=') else {
        bail!("--counters {arg}: give ADDR=FILE or ADDR=BEFORE,AFTER");
    };
    let addr: std::net::IpAddr = addr
        .parse()
        .map_err(|_| anyhow::anyhow!("--counters {arg}: {addr} is not an IP address"))?;
    let read = |path: &str| -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_COUNTERS_FILE).read_to_string(&mut text))
            .with_context(|| format!("--counters: reading {path}"))?;
        counters::parse(&text).map_err(|e| anyhow::anyhow!("--counters: {path}: {e}"))
    };
    let paths: Vec<&str> = files.split(',').collect();
    let counts = match paths.as_slice() {
        [one] => read(one)?,
        [before, after] => counters::delta(Some(&read(before)?), &read(after)?)
            .map_err(|e| anyhow::anyhow!("--counters {arg}: {e}"))?,
        _ => bail!("--counters {arg}: give one file, or two (before,after)"),
    };
    Ok(counters::HostCounters { addr, counts })
}

/// The CNP interval the rule expects: `--cnp-interval`, else the `--cc` preset's.
fn cnp_interval(a: &AnalyzeArgs) -> anyhow::Result<std::time::Duration> {
    use roce_stack::cc::{cnp::DEFAULT_CNP_INTERVAL, CcConfig};
    let preset = match &a.cc {
        Some(name) => Some(crate::cc::parse(name).map_err(|e| anyhow::anyhow!("--cc: {e}"))?),
        None => None,
    };
    Ok(match (a.cnp_interval, preset) {
        (Some(d), _) => d,
        // HPCC's senders react to INT in the ACKs; a CNP interval is nobody's to keep.
        (None, Some(CcConfig::Hpcc(_))) => std::time::Duration::ZERO,
        // The notification point paces CNPs whatever the sender's controller: the DCQCN
        // paper's N = 50 us, which roce's endpoints keep.
        (None, _) => DEFAULT_CNP_INTERVAL,
    })
}

/// Writes `path` whole, in place of the old file only once every byte is written.
fn write_file(
    path: &std::path::Path,
    f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    roce_pcap::outfile::write_whole(path, f).with_context(|| format!("writing {}", path.display()))
}

pub(crate) fn run(a: AnalyzeArgs) -> anyhow::Result<ExitCode> {
    for (name, v) in [("--from", a.from), ("--to", a.to)] {
        if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
            bail!("{name} takes a number of seconds ≥ 0");
        }
    }
    if a.link_speed == 0 {
        bail!("--link-speed must be above 0");
    }
    if let (Some(f), Some(t)) = (a.from, a.to) {
        if t <= f {
            bail!("--to ({t}) must be after --from ({f})");
        }
    }
    let opts = Options {
        qp: a.qp,
        from: a.from,
        to: a.to,
        stall_ns: a.stall.as_nanos().min(u128::from(u64::MAX)) as u64,
        cnp_interval_ns: cnp_interval(&a)?.as_nanos().min(u128::from(u64::MAX)) as u64,
        link_bps: a.link_speed,
        storm_ns: a.pfc_storm.as_nanos().min(u128::from(u64::MAX)) as u64,
        pictures: a.plot.is_some() || a.html.is_some() || a.trace.is_some() || a.fit_dcqcn,
        ..Options::default()
    };
    let counters = a
        .counters
        .iter()
        .map(|c| host_counters(c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if a.files.len() > 1 && a.files.iter().any(|f| f == "-") {
        bail!("several captures are read twice each: give files, not `-`");
    }
    // No page or trace over a capture, nor two outputs in one file.
    let inputs: Vec<(&str, &std::path::Path)> = a
        .files
        .iter()
        .filter(|f| *f != "-")
        .map(|f| ("the capture", std::path::Path::new(f)))
        .collect();
    let outputs: Vec<(&str, &std::path::Path)> = [("--html", &a.html), ("--trace", &a.trace)]
        .into_iter()
        .filter_map(|(flag, p)| p.as_deref().map(|p| (flag, p)))
        .collect();
    roce_pcap::outfile::check_distinct(&inputs, &outputs)?;
    let lo = analyze::LocaliseOptions {
        window_ns: a.match_window.as_nanos().min(u128::from(u64::MAX)) as u64,
    };
    let analyze_first = || -> anyhow::Result<Analysis> {
        Ok(match (&a.interface, a.files.first()) {
            (Some(iface), _) => {
                let live_opts = live::LiveOptions {
                    interface: iface.clone(),
                    duration: a.duration.map(std::time::Duration::from_secs_f64),
                    write: None,
                    stop: Some(interrupt_flag()?),
                    one_copy_on_loopback: true,
                };
                let dec_opts = roce_pcap::Options {
                    quiet: true,
                    analyze: true,
                    ..Default::default()
                };
                let mut dec = roce_pcap::Decoder::new(dec_opts);
                dec.set_analysis_options(opts);
                let r = live::run(&live_opts, &mut dec, &mut std::io::sink());
                let mut an = dec.take_analysis().context("no analysis")?;
                if let Err(e) = r {
                    // Nothing captured can be reported when the interface never opened.
                    if an.packets == 0 {
                        bail!("{e}");
                    }
                    an.error = Some(e);
                }
                an
            }
            (None, Some(path)) => analyze::analyze_path(path, opts)?,
            (None, None) => bail!("give a capture file, `-`, or --interface"),
        })
    };
    // Several captures: their matching on a thread of its own, beside the analysis of the
    // first (both read the captures at their own pace).
    let (localised, analysis) = std::thread::scope(|scope| {
        let matching = (a.files.len() > 1).then(|| {
            let paths: Vec<&str> = a.files.iter().map(String::as_str).collect();
            scope.spawn(move || analyze::localise(&paths, lo))
        });
        let analysis = analyze_first();
        let localised = match matching.map(std::thread::ScopedJoinHandle::join) {
            None => Ok(Vec::new()),
            Some(Ok(r)) => r,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
        };
        (localised, analysis)
    });
    let localised = localised?;
    let mut analysis = analysis?;
    analysis.localised = localised;
    analysis.counters = counters;
    if a.files.len() > 1 {
        analysis.captures.clone_from(&a.files);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let printed = if a.json {
        analyze::write_json_lines(&analysis, a.events, &mut out)
    } else {
        analyze::write_text(&analysis, a.events, &mut out)
    };
    let printed = printed.and_then(|()| {
        if a.fit_dcqcn {
            write_fits(&analysis, a.json, &mut out)
        } else {
            Ok(())
        }
    });
    match printed.and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        r => r.context("writing the report")?,
    }
    drop(out);
    if let Some(dir) = &a.plot {
        let files = analyze::write_plots(&analysis, dir)
            .with_context(|| format!("writing plots into {}", dir.display()))?;
        eprintln!("roce analyze: {} plots in {}", files.len(), dir.display());
    }
    if let Some(path) = &a.html {
        write_file(path, |w| analyze::write_html(&analysis, w))?;
    }
    if let Some(path) = &a.trace {
        write_file(path, |w| analyze::write_trace(&analysis, w))?;
    }
    if let Some(e) = &analysis.error {
        match e {
            DecodeError::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            e => {
                eprintln!("roce analyze: {e}");
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    let code = if a.check && analysis.violated() {
        let n = analysis.connections.iter().filter(|c| c.violated()).count();
        eprintln!("roce analyze: {n} connection(s) violate a rule");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    // The process ends here: its memory goes back with it, where freeing the connections one
    // by one costs a tenth of the analysis on a capture of 100,000 QPs.
    std::mem::forget(analysis);
    Ok(code)
}

/// The DCQCN fit of every sender that received CNPs (`--fit-dcqcn`).
fn write_fits(a: &Analysis, json: bool, out: &mut dyn Write) -> std::io::Result<()> {
    use roce_apps::congestion::fit::fit;
    let mut any = false;
    for c in &a.connections {
        for (i, s) in c.sides.iter().enumerate() {
            let Some(f) = fit(&s.cnps_received_at, &s.rate, s.rate_window_ns) else {
                continue;
            };
            if json {
                let errors: serde_json::Map<String, serde_json::Value> = f
                    .error_pct
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), serde_json::json!(v)))
                    .collect();
                let line = serde_json::json!({
                    "type": "dcqcn_fit",
                    "connection": c.id,
                    "side": i,
                    "qpn": s.qpn,
                    "cnps": s.cnps_received_at.len(),
                    "line_rate_gbps": f.line_rate_bps as f64 / 1e9,
                    "windows": f.windows,
                    "error_pct": errors,
                    "best": f.best(),
                });
                writeln!(out, "{line}")?;
            } else {
                if !any {
                    writeln!(
                        out,
                        "\nDCQCN fit (the sender's rate against the model's allowed rate after its CNPs, mean |difference| in % of the line rate)"
                    )?;
                }
                let errs: Vec<String> = f
                    .error_pct
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.1} %"))
                    .collect();
                writeln!(
                    out,
                    "  connection {} side {}: {} CNPs, line rate {:.2} Gb/s, {} windows: {} -> {}",
                    c.id,
                    ["a", "b"][i],
                    s.cnps_received_at.len(),
                    f.line_rate_bps as f64 / 1e9,
                    f.windows,
                    errs.join(", "),
                    f.best()
                )?;
            }
            any = true;
        }
    }
    if !any && !json {
        writeln!(
            out,
            "\nDCQCN fit: no sender received CNPs over enough of the capture"
        )?;
    }
    Ok(())
}
