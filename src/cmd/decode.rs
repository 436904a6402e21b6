//! `roce decode`: RoCE packets from a capture file, stdin or a live interface.
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
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
    /// Every field of every header as a tree.
    #[arg(short, long, conflicts_with = "json")]
    verbose: bool,
    /// One JSON object per packet per line.
    #[arg(long)]
    json: bool,
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
    /// Decoding threads for files (default: available parallelism; 1 = sequential).
    #[arg(long, hide = true)]
    threads: Option<usize>,
}

pub(crate) fn run(a: DecodeArgs) -> anyhow::Result<ExitCode> {
    let opcode = match &a.opcode {
        Some(n) => {
            Some(roce_pcap::parse_opcode(n).with_context(|| format!("unknown opcode name {n:?}"))?)
        }
        None => None,
    };
    let opts = Options {
        format: if a.json {
            OutputFormat::Json
        } else if a.verbose {
            OutputFormat::Verbose
        } else {
            OutputFormat::Summary
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
    };
    // The decoder buffers its output and writes it in large chunks: no second buffer here.
    let mut out = std::io::stdout().lock();
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
    drop(out);
    eprintln!("{}", outcome.stats.line());
    match &outcome.error {
        // The reader of our output went away (`| head`): stop quietly, like other tools.
        Some(DecodeError::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Some(e) => eprintln!("roce decode: {e}"),
        None => {}
    }
    Ok(ExitCode::from(outcome.exit_code(a.check) as u8))
}

/// `roce gen-capture`: a synthetic capture of `packets` RoCE packets (for benchmarks).
pub(crate) fn gen_capture(
    packets: u64,
    (rc, loss_every, psn_jumps): (Option<u32>, u64, bool),
    cm_from: Option<&str>,
    plain_ud: bool,
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
    let f = std::fs::File::create(file).with_context(|| format!("creating {file}"))?;
    let mut w = BufWriter::new(f);
    match (rc, input.as_mut()) {
        (_, Some(r)) => roce_pcap::synth::write_cm_capture(r, &mut w, packets, plain_ud),
        (_, None) if psn_jumps => roce_pcap::synth::write_psn_jumps_capture(&mut w, packets),
        (Some(qps), None) => roce_pcap::synth::write_rc_capture(&mut w, packets, qps, loss_every),
        (None, None) => roce_pcap::synth::write_benchmark_capture(&mut w, packets),
    }
    .with_context(|| format!("writing {file}"))?;
    w.flush()?;
    Ok(ExitCode::SUCCESS)
}
