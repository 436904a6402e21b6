//! The `roce` command line: argument parsing ([`cmd`], one module per command; [`units`] and
//! [`cc`] read flag values), what surrounds the libraries ([`output`]: report printing, the
//! capture tap, the progress bar, Ctrl-C), and dispatch. Every behaviour lives in the library
//! crates: `roce-pcap` (decode, analyze), `roce-apps` over `roce-driver` and `roce-stack` (loopback,
//! server, client, perf, kv, sim).
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// `println!` to stdout that returns the write's error (a full disk, a closed pipe) instead of
/// panicking, so that every command's output is checked.
macro_rules! outln {
    ($($arg:tt)*) => {
        crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` as [`outln!`] is `println!`.
macro_rules! out {
    ($($arg:tt)*) => {
        crate::output::write_stdout(format_args!($($arg)*))
    };
}

mod args;
mod cc;
mod cmd;
mod flags;
mod output;
mod units;

/// RoCEv2 packet codec, capture decoder and userspace RC transport.
#[derive(Debug, Parser)]
#[command(name = "roce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Servers: accept a TCP connection or a CM REQ only from these peers (ADDR or
    /// ADDR/PREFIX, repeatable or comma-separated); every other peer is refused at once, one
    /// line said per address. Default: anyone.
    #[arg(
        long,
        global = true,
        value_name = "ADDR[/PREFIX]",
        value_delimiter = ','
    )]
    allow: Vec<roce_driver::allow::IpNetwork>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run two RC endpoints over loopback UDP sockets and verify every byte and completion.
    Loopback(cmd::workload::LoopbackArgs),
    /// Serve one client's workload as the responder (the remote end of `roce client`).
    Server(cmd::workload::ServerArgs),
    /// Run the workload against `roce server` as the requester and report.
    Client(cmd::workload::ClientArgs),
    /// Decode RoCE packets from a capture file, stdin (`-`) or a live interface.
    Decode(cmd::decode::DecodeArgs),
    /// Explain what every RC connection of a capture did: pairing, messages, retransmission
    /// episodes and their causes, NAKs, CNPs, latencies and go-back-N verdicts.
    Analyze(cmd::analyze::AnalyzeArgs),
    /// perftest-style bandwidth, message rate and latency (write, read, send, atomic), and the
    /// plain-UDP baseline (udp) of the same wire size through the same sockets.
    Perf(cmd::perf::PerfArgs),
    /// The verbs examples' SEND ping-pong (rc, uc, ud, srq), against rdma-core's stock
    /// ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong or roce.
    Pingpong(cmd::pingpong::PingPongArgs),
    /// librdmacm's rping over RDMA-CM (client SENDs its buffers, the server READs and
    /// WRITEs them), against the stock rping or roce.
    Rping(cmd::rping::RpingArgs),
    /// librdmacm's ucmatose over RDMA-CM: the server SENDs -C messages on each connection,
    /// the client answers with as many, the server disconnects.
    Ucmatose(cmd::cmatose::UcmatoseArgs),
    /// librdmacm's rdma_server: answers a client's 16-byte SEND with one of its own.
    RdmaServer(cmd::cmatose::RdmaServerArgs),
    /// librdmacm's rdma_client: SENDs 16 bytes to an rdma_server and takes its answer.
    RdmaClient(cmd::cmatose::RdmaClientArgs),
    /// librdmacm's udaddy: the server's UD QP found through SIDR, then UD SENDs both ways.
    Udaddy(cmd::udaddy::UdaddyArgs),
    /// KV-cache push of prefill/decode disaggregation: the decode side registers a pool once
    /// and allocates blocks, the prefill side WRITEs the KV layer by layer (the last WRITE per QP
    /// with an immediate); plan by plan, with the model max(bytes/bandwidth, WRs x per-WR cost).
    Kv(cmd::kv::KvArgs),
    /// Simulated experiments (virtual time, deterministic by seed).
    #[command(subcommand)]
    Sim(cmd::sim::SimCommand),
    /// Write a synthetic capture of N RoCE packets (for benchmarks).
    #[command(hide = true)]
    GenCapture {
        /// Number of packets.
        #[arg(long, default_value_t = 1_000_000)]
        packets: u64,
        /// RC conversations instead of the decoder's opcode mix: this many QPs taking turns,
        /// with losses, NAKs and go-back-N (the analysis benchmark).
        #[arg(long, value_name = "QPS")]
        rc: Option<u32>,
        /// With --rc: one request packet in N is lost before the capture point.
        #[arg(long, default_value_t = 200, value_name = "N")]
        loss_every: u64,
        /// With --rc: a PFC frame on the connections' priority after every K RoCE frames
        /// (the analysis's cost with pauses; 0: none).
        #[arg(long, default_value_t = 0, value_name = "K", requires = "rc")]
        pause_every: u64,
        /// With --pause-every: the PFC frames' senders, taking turns.
        #[arg(long, default_value_t = 1, value_name = "S", requires = "rc",
              value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
        pause_senders: u32,
        /// One RC QP's requests at random PSNs instead (the analyzer's worst case: every
        /// packet a gap, a fill or a retransmission).
        #[arg(long, conflicts_with_all = ["rc", "cm_from"])]
        psn_jumps: bool,
        /// All CM MADs instead: cycle through the CM MADs of this capture (the MAD decode
        /// benchmark).
        #[arg(long, value_name = "FILE", conflicts_with = "rc")]
        cm_from: Option<String>,
        /// With --cm-from: the same packets moved off QP1 (to QP 2 on both ends, ICRC
        /// recomputed), so they decode as plain UD SENDs without the MAD decode (its baseline).
        #[arg(long, requires = "cm_from")]
        plain_ud: bool,
        /// MRC conversations instead (UDP 4971): a WRITE sprayed over four entropy values,
        /// a trimmed packet and its NACK, SACKs, the retransmission, a probe.
        #[arg(long, conflicts_with_all = ["rc", "cm_from", "psn_jumps", "uet"])]
        mrc: bool,
        /// UET conversations instead (UDP 4793): RUD requests with SES WRITEs over several
        /// entropy values, ACK_CC with SACK, a trimmed request and its NACK, the RETX.
        #[arg(long, conflicts_with_all = ["rc", "cm_from", "psn_jumps"])]
        uet: bool,
        /// With --mrc or --uet: the payload of a full packet, in bytes.
        #[arg(long, default_value_t = roce_pcap::synth_fabric::DEFAULT_MTU as u32, value_name = "BYTES",
              value_parser = clap::value_parser!(u32).range(1..=9000))]
        mtu: u32,
        /// Output pcap file.
        file: String,
    },
}

impl Command {
    /// The command's name, for error lines (`roce loopback: ...`).
    fn name(&self) -> &'static str {
        match self {
            Self::Loopback(_) => "loopback",
            Self::Server(_) => "server",
            Self::Client(_) => "client",
            Self::Decode(_) => "decode",
            Self::Analyze(_) => "analyze",
            Self::Perf(_) => "perf",
            Self::Pingpong(_) => "pingpong",
            Self::Rping(_) => "rping",
            Self::Ucmatose(_) => "ucmatose",
            Self::RdmaServer(_) => "rdma-server",
            Self::RdmaClient(_) => "rdma-client",
            Self::Udaddy(_) => "udaddy",
            Self::Kv(_) => "kv",
            Self::Sim(_) => "sim",
            Self::GenCapture { .. } => "gen-capture",
        }
    }

    /// `false` for the commands that never take a peer's connection (a capture, a
    /// simulation, a workload client): `--allow` there would be ignored, so it is refused.
    fn takes_peers(&self) -> bool {
        !matches!(
            self,
            Self::Decode(_)
                | Self::Analyze(_)
                | Self::Sim(_)
                | Self::GenCapture { .. }
                | Self::Client(_)
                | Self::RdmaClient(_)
        )
    }

    fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Self::Loopback(a) => cmd::workload::loopback(a),
            Self::Server(a) => cmd::workload::server(a),
            Self::Client(a) => cmd::workload::client(a),
            Self::Decode(a) => cmd::decode::run(a),
            Self::Analyze(a) => cmd::analyze::run(a),
            Self::Perf(a) => cmd::perf::run(a),
            Self::Pingpong(a) => cmd::pingpong::run(a),
            Self::Rping(a) => cmd::rping::run(a),
            Self::Ucmatose(a) => cmd::cmatose::ucmatose(a),
            Self::RdmaServer(a) => cmd::cmatose::rdma_server(a),
            Self::RdmaClient(a) => cmd::cmatose::rdma_client(a),
            Self::Udaddy(a) => cmd::udaddy::run(a),
            Self::Kv(a) => cmd::kv::run(a),
            Self::Sim(c) => cmd::sim::run(c),
            Self::GenCapture {
                packets,
                rc,
                loss_every,
                pause_every,
                pause_senders,
                psn_jumps,
                cm_from,
                plain_ud,
                mrc,
                uet,
                mtu,
                file,
            } => cmd::decode::gen_capture(
                packets,
                (
                    rc,
                    loss_every,
                    roce_pcap::synth::Pauses {
                        every: pause_every,
                        senders: pause_senders,
                    },
                    psn_jumps,
                ),
                cm_from.as_deref(),
                plain_ud,
                (mrc, uet, mtu as usize),
                &file,
            ),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let name = cli.command.name();
    if !cli.allow.is_empty() && !cli.command.takes_peers() {
        eprintln!(
            "roce {name}: --allow names the peers a server accepts; `roce {name}` accepts none"
        );
        return ExitCode::FAILURE;
    }
    roce_driver::allow::set_allowed(cli.allow);
    match cli.command.run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("roce {name}: {}", flags::message(name, &e));
            ExitCode::FAILURE
        }
    }
}
