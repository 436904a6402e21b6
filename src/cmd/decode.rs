//! `roce decode`: RoCE packets from a capture file, stdin or a live interface.
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use roce_pcap::fabric::{FabricOptions, Transport};
use roce_pcap::outfile::OutFile;
use roce_pcap::{live, DecodeError, Options, OutputFormat};

use crate::output::{interrupt_flag, Bar};
use crate::units;

#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// Capture file (pcap or pcapng); `-` for stdin.
    #[arg(required_unless_present = "interface", conflicts_with = "interface")]
    file: Option<String>,
    /// Capture live from this interface (needs root or CAP_NET_RAW).
    #[arg(short, long)]
    interface: Option<String>,
    /// Live capture: stop after this many seconds.
    #[arg(long, requires = "interface")]
    duration: Option<f64>,
    /// Live capture: also save every packet seen to this pcap file.
    #[arg(short, long, requires = "interface")]
    write: Option<String>,
    /// Every field of every header as a tree (`--format verbose`).
    #[arg(short, long, conflicts_with_all = ["json", "format"])]
    verbose: bool,
    /// One JSON object per packet per line (`--format json`).
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Output format: summary (one line per packet), verbose (a tree), json (a line per
    /// packet), or parquet (a table, one column per JSON key, nested keys dotted: needs
    /// -o; see docs/decode.md for the schema).
    #[arg(long, value_enum, value_name = "FORMAT")]
    format: Option<Format>,
    /// Write the output to FILE instead of stdout (`-` for stdout).
    #[arg(short, long, value_name = "FILE")]
    output: Option<String>,
    /// Only packets to this destination QP (decimal or 0x hex).
    #[arg(long, value_parser = units::number_u32)]
    qp: Option<u32>,
    /// Only packets with this opcode (name such as RC_SEND_ONLY, or number).
    #[arg(long, value_name = "NAME")]
    opcode: Option<String>,
    /// Only packets with a bad ICRC or that are malformed.
    #[arg(long)]
    errors: bool,
    /// Only MADs of this management class: cm, sa, smp (both subnet-management classes),
    /// smp_dr, perf, bm, dev_mgt, snmp, vendor, ...
    #[arg(long, value_name = "CLASS")]
    mad_class: Option<String>,
    /// Read opcodes 0x40-0x5f as IBTA Reliable Datagram instead of Mellanox/NVIDIA
    /// Dynamically Connected (the default: RD was never deployed, DC reuses its opcodes).
    #[arg(long)]
    rd: bool,
    /// Only CM messages with this communication ID, local or remote (decimal or 0x hex).
    #[arg(long, value_parser = units::number_u32, value_name = "ID")]
    cm_comm_id: Option<u32>,
    /// Stop after N packets are printed.
    #[arg(short, long, value_name = "N")]
    count: Option<u64>,
    /// Also list packets that are not RoCE, one line each.
    #[arg(long)]
    all: bool,
    /// Add each packet's connection-analysis events (retransmission, nak_seq, psn_gap, cnp,
    /// ...; see `roce analyze`) to its line, tree or JSON (`analysis`). Sequential.
    #[arg(long)]
    analyze: bool,
    /// Exit 1 also when a RoCE packet is malformed or fails its ICRC.
    #[arg(long)]
    check: bool,
    /// Only packets of this transport: roce, mrc (OCP MRC, UDP 4971) or uet (Ultra Ethernet,
    /// UDP 4793 or IP protocol 253).
    #[arg(long, value_enum, value_name = "NAME")]
    transport: Option<TransportArg>,
    /// Only packets with this entropy value (the UDP source port; UET over IP: its entropy
    /// header), decimal or 0x hex.
    #[arg(long, value_parser = units::number_u32, value_name = "EV")]
    entropy: Option<u32>,
    /// Only MRC/UET packets naming this PDC (UET) or PDC/QP (MRC) as source or destination.
    #[arg(long, value_parser = units::number_u32, value_name = "ID")]
    pdc: Option<u32>,
    /// --format parquet: a column per MRC and UET field too (implied by --transport mrc or
    /// uet); without it the table is RoCE's columns and an MRC/UET packet a row saying so.
    #[arg(long)]
    fabric_columns: bool,
    /// MRC's UDP destination port.
    #[arg(long, default_value_t = roce_proto::mrc::MRC_UDP_PORT, value_name = "PORT")]
    mrc_port: u16,
    /// Also read opcodes 0xC6-0xDE on UDP 4791 as MRC (on 4791 they are any vendor's).
    #[arg(long)]
    mrc_on_4791: bool,
    /// Where MRC's BTH byte 8 keeps its flags, which the public sources disagree on:
    /// emulator (rtx 0x20, TSETH present 0x10) or ns3 (rtx 0x40).
    #[arg(long, value_enum, default_value_t = MrcFlags::Emulator, value_name = "READING")]
    mrc_flags: MrcFlags,
    /// Whether an MRC WRITE carries a TSETH: flag (the BTH flag of --mrc-flags), absent or
    /// present.
    #[arg(long, value_enum, default_value_t = MrcTseth::Flag, value_name = "RULE")]
    mrc_tseth: MrcTseth,
    /// UET's UDP destination port.
    #[arg(long, default_value_t = roce_proto::uet::UET_UDP_PORT, value_name = "PORT")]
    uet_port: u16,
    /// The length of UET's ACK_CCX/NACK_CCX extensions, which the sources disagree on:
    /// xdp2 (20/8 bytes) or wireshark (28/16).
    #[arg(long, value_enum, default_value_t = UetCcx::Xdp2, value_name = "READING")]
    uet_ccx: UetCcx,
    /// Decoding threads for files (default: available parallelism; 1 = sequential).
    #[arg(long, hide = true)]
    threads: Option<usize>,
}

/// `--transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TransportArg {
    Roce,
    Mrc,
    Uet,
}

/// `--mrc-flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MrcFlags {
    Emulator,
    Ns3,
}

/// `--mrc-tseth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MrcTseth {
    Flag,
    Absent,
    Present,
}

/// `--uet-ccx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum UetCcx {
    Xdp2,
    Wireshark,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    Summary,
    Verbose,
    Json,
    Parquet,
}

pub(crate) fn run(a: DecodeArgs) -> anyhow::Result<ExitCode> {
    let opcode = match &a.opcode {
        Some(n) => {
            Some(roce_pcap::parse_opcode(n).with_context(|| format!("unknown opcode name {n:?}"))?)
        }
        None => None,
    };
    let format = match (a.format, a.json, a.verbose) {
        (Some(f), _, _) => f,
        (None, true, _) => Format::Json,
        (None, _, true) => Format::Verbose,
        _ => Format::Summary,
    };
    let opts = Options {
        format: match format {
            Format::Summary => OutputFormat::Summary,
            Format::Verbose => OutputFormat::Verbose,
            Format::Json => OutputFormat::Json,
            Format::Parquet => OutputFormat::Columns,
        },
        qp: a.qp,
        opcode,
        errors: a.errors,
        count: a.count,
        all: a.all,
        quiet: false,
        mad_class: match &a.mad_class {
            Some(c) => Some(roce_proto::mad::MgmtClass::from_key(c).with_context(|| {
                format!(
                    "--mad-class {c:?}: use cm, sa, smp, smp_dr, perf, bm, dev_mgt, snmp, dev_adm, boot_mgt, bis or cong_mgt"
                )
            })?),
            None => None,
        },
        cm_comm_id: a.cm_comm_id,
        rd: a.rd,
        analyze: a.analyze,
        fabric: fabric_options(&a),
        transport: a.transport.map(|t| match t {
            TransportArg::Roce => Transport::Roce,
            TransportArg::Mrc => Transport::Mrc,
            TransportArg::Uet => Transport::Uet,
        }),
        entropy: a.entropy,
        pdc: a.pdc,
        fabric_columns: a.fabric_columns
            || matches!(a.transport, Some(TransportArg::Mrc | TransportArg::Uet)),
    };
    check_outputs(&a)?;
    if format == Format::Parquet {
        return parquet(&a, opts);
    }
    // The decoder buffers its output and writes it in large chunks: no second buffer here.
    let mut file = match a.output.as_deref() {
        None | Some("-") => None,
        Some(path) => Some(
            OutFile::create(std::path::Path::new(path))
                .with_context(|| format!("creating {path}"))?,
        ),
    };
    let mut stdout;
    let mut out: &mut dyn Write = match &mut file {
        Some(f) => f,
        None => {
            stdout = std::io::stdout().lock();
            &mut stdout
        }
    };
    let outcome = match (&a.interface, &a.file) {
        (Some(iface), _) => {
            let live_opts = live::LiveOptions {
                interface: iface.clone(),
                duration: a.duration.map(std::time::Duration::from_secs_f64),
                write: a.write.clone(),
                stop: Some(interrupt_flag()?),
                one_copy_on_loopback: false,
            };
            live::capture(&live_opts, opts, &mut out)
        }
        (None, Some(path)) => roce_pcap::decode_path_with(
            path,
            opts,
            &mut out,
            a.threads.unwrap_or_else(roce_pcap::default_workers),
            &mut Bar::new(),
        ),
        (None, None) => bail!("give a capture file, `-`, or --interface"),
    };
    // What was decoded is put in place, even before an error in the capture; a write that
    // failed leaves the old file.
    if let Some(f) = file {
        if !matches!(outcome.error, Some(DecodeError::Write(_))) {
            let name = a.output.as_deref().unwrap_or_default();
            f.commit().with_context(|| format!("writing {name}"))?;
        }
    }
    Ok(finish(&outcome, &a))
}

/// Where MRC and UET are looked for, and the readings the user chose.
fn fabric_options(a: &DecodeArgs) -> FabricOptions {
    use roce_proto::{mrc, uet};
    FabricOptions {
        mrc_port: a.mrc_port,
        mrc_on_rocev2: a.mrc_on_4791,
        uet_port: a.uet_port,
        mrc: mrc::Reading {
            flags: match a.mrc_flags {
                MrcFlags::Emulator => mrc::FlagReading::Emulator,
                MrcFlags::Ns3 => mrc::FlagReading::Ns3,
            },
            tseth: match a.mrc_tseth {
                MrcTseth::Flag => mrc::TsethRule::Flag,
                MrcTseth::Absent => mrc::TsethRule::Absent,
                MrcTseth::Present => mrc::TsethRule::Present,
            },
        },
        uet: uet::Reading {
            ccx: match a.uet_ccx {
                UetCcx::Xdp2 => uet::CcxReading::Xdp2,
                UetCcx::Wireshark => uet::CcxReading::Wireshark,
            },
        },
    }
}

/// Refuses an output (`-o`, `--write`) that is the capture read, or each other, in one line.
fn check_outputs(a: &DecodeArgs) -> anyhow::Result<()> {
    use std::path::Path;
    let inputs: Vec<(&str, &Path)> = a
        .file
        .iter()
        .filter(|f| *f != "-")
        .map(|f| ("the capture", Path::new(f)))
        .collect();
    let outputs: Vec<(&str, &Path)> = [("-o", &a.output), ("--write", &a.write)]
        .into_iter()
        .filter_map(|(flag, p)| {
            p.as_deref()
                .filter(|p| *p != "-")
                .map(|p| (flag, Path::new(p)))
        })
        .collect();
    Ok(roce_pcap::outfile::check_distinct(&inputs, &outputs)?)
}

/// Prints the counters and the error, if any (a write error names `-o`'s file); the exit
/// code.
fn finish(outcome: &roce_pcap::Outcome, a: &DecodeArgs) -> ExitCode {
    eprintln!("{}", outcome.stats.line());
    match (&outcome.error, a.output.as_deref()) {
        // The reader of our output went away (`| head`): stop quietly, like other tools.
        (Some(DecodeError::Write(e)), _) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        (Some(DecodeError::Write(e)), Some(file)) if file != "-" => {
            eprintln!("roce decode: writing {file}: {e}")
        }
        (Some(e), _) => eprintln!("roce decode: {e}"),
        (None, _) => {}
    }
    ExitCode::from(outcome.exit_code(a.check) as u8)
}

/// `--format parquet`: the rows of `roce decode --json` as a Parquet file, a row group of
/// [`roce_pcap::columns::BATCH_ROWS`] rows at a time. The file is complete (footer
/// written) even when the capture ends in an error, with every row decoded before it.
fn parquet(a: &DecodeArgs, opts: Options) -> anyhow::Result<ExitCode> {
    if a.interface.is_some() {
        bail!("--format parquet reads a capture file or stdin, not --interface (capture with -w FILE, then convert)");
    }
    if a.analyze {
        bail!("--analyze adds events to summary, verbose and json output; the parquet table has no column for them");
    }
    let Some(output) = a.output.as_deref() else {
        bail!("--format parquet needs -o FILE (or -o - for stdout)");
    };
    let Some(path) = a.file.as_deref() else {
        bail!("give a capture file or `-`");
    };
    // The capture is opened before the output is created: no empty file for a bad input.
    let (mut reader, size) = open_capture(path)?;
    let out = if output == "-" {
        Out::Stdout(std::io::stdout())
    } else {
        Out::File(
            OutFile::create(std::path::Path::new(output))
                .with_context(|| format!("creating {output}"))?,
        )
    };
    let mut bar = Bar::new();
    roce_pcap::Progress::start(&mut bar, size);
    let (outcome, out) = roce_pcap::parquet_file::decode_to_parquet(
        &mut reader,
        opts,
        BufWriter::with_capacity(1 << 20, out),
        a.threads.unwrap_or_else(roce_pcap::default_workers),
        Some(&bar),
    );
    roce_pcap::Progress::finish(&mut bar);
    // The file, footer written, is put in place (even after an error in the capture: it
    // holds every row before it); `None` when a write failed, and the old file stays.
    if let Some(out) = out {
        let out = out
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)
            .with_context(|| format!("writing {output}"))?;
        match out {
            Out::File(f) => f.commit().with_context(|| format!("writing {output}"))?,
            Out::Stdout(mut s) => s.flush().with_context(|| format!("writing {output}"))?,
        }
    }
    Ok(finish(&outcome, a))
}

/// Where `--format parquet` writes.
enum Out {
    Stdout(std::io::Stdout),
    File(OutFile),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Stdout(s) => s.write(buf),
            Self::File(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout(s) => s.flush(),
            Self::File(f) => f.flush(),
        }
    }
}

/// Opens a capture file (`-`: stdin) for reading; its size (0 for stdin) for the progress bar.
fn open_capture(
    path: &str,
) -> anyhow::Result<(roce_pcap::CaptureReader<Box<dyn std::io::Read + Send>>, u64)> {
    let (input, size): (Box<dyn std::io::Read + Send>, u64) = if path == "-" {
        (Box::new(std::io::stdin()), 0)
    } else {
        let f = std::fs::File::open(path).with_context(|| format!("opening {path}"))?;
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(f), size)
    };
    let reader =
        roce_pcap::CaptureReader::new(input, path).with_context(|| format!("reading {path}"))?;
    Ok((reader, size))
}

/// `roce gen-capture`: a synthetic capture of `packets` RoCE packets (for benchmarks).
pub(crate) fn gen_capture(
    packets: u64,
    (rc, loss_every, pauses, psn_jumps): (Option<u32>, u64, roce_pcap::synth::Pauses, bool),
    cm_from: Option<&str>,
    plain_ud: bool,
    (mrc, uet, mtu): (bool, bool, usize),
    file: &str,
) -> anyhow::Result<ExitCode> {
    let mut input = match cm_from {
        Some(src) => {
            let f = std::fs::File::open(src).with_context(|| format!("opening {src}"))?;
            Some(roce_pcap::CaptureReader::new(
                std::io::BufReader::new(f),
                src,
            )?)
        }
        None => None,
    };
    if let Some(src) = cm_from {
        roce_pcap::outfile::check_distinct(
            &[("--cm-from", std::path::Path::new(src))],
            &[("the output", std::path::Path::new(file))],
        )?;
    }
    let f =
        OutFile::create(std::path::Path::new(file)).with_context(|| format!("creating {file}"))?;
    let mut w = BufWriter::new(f);
    match (rc, input.as_mut()) {
        _ if mrc => roce_pcap::synth_fabric::write_mrc_capture(&mut w, packets, mtu),
        _ if uet => roce_pcap::synth_fabric::write_uet_capture(&mut w, packets, mtu),
        (_, Some(r)) => roce_pcap::synth::write_cm_capture(r, &mut w, packets, plain_ud),
        (_, None) if psn_jumps => roce_pcap::synth::write_psn_jumps_capture(&mut w, packets),
        (Some(qps), None) => {
            roce_pcap::synth::write_rc_capture_paused(&mut w, packets, qps, loss_every, pauses)
        }
        (None, None) => roce_pcap::synth::write_benchmark_capture(&mut w, packets),
    }
    .with_context(|| format!("writing {file}"))?;
    roce_pcap::outfile::commit_buffered(w).with_context(|| format!("writing {file}"))?;
    Ok(ExitCode::SUCCESS)
}
