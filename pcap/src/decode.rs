//! The decode run: records in, formatted lines out, counters kept.
//!
//! [`Decoder::record`] takes one captured packet, classifies it (RoCE, malformed RoCE, or
//! something else), checks the ICRC, applies the filters, and appends the chosen format to
//! its output buffer, which goes to the caller's writer in large chunks (the one buffered writer).
use crate::error::DecodeError;
use crate::format::{self, Decoded};
use crate::link;
use crate::progress::Progress;
use crate::reader::{CaptureReader, Record, Timestamp};
use roce_proto::{Frame, Opcode, RocePacket};
use std::io::{self, Read, Write};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// One line per packet.
    #[default]
    Summary,
    /// Every field as an indented tree.
    Verbose,
    /// One JSON object per line.
    Json,
    /// Rows of a table ([`crate::columns`]): nothing is written to the output; the rows
    /// collect in [`Decoder::columns`] for the caller to take.
    Columns,
}

/// What to print and what to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// Output format.
    pub format: OutputFormat,
    /// Only packets to this destination QP.
    pub qp: Option<u32>,
    /// Only packets with this opcode.
    pub opcode: Option<Opcode>,
    /// Only packets with a bad ICRC or that are malformed.
    pub errors: bool,
    /// Stop after printing this many packets.
    pub count: Option<u64>,
    /// Also list packets that are not RoCE, one line each.
    pub all: bool,
    /// Print nothing per packet (counters only).
    pub quiet: bool,
    /// Only MADs of this management class (`--mad-class`; `smp` takes both subnet-management
    /// classes).
    pub mad_class: Option<roce_proto::mad::MgmtClass>,
    /// Only CM messages of this communication ID, local or remote (`--cm-comm-id`).
    pub cm_comm_id: Option<u32>,
    /// Read opcodes 0x40-0x5f as IBTA Reliable Datagram (`--rd`) instead of Mellanox/NVIDIA
    /// Dynamically Connected, which reuses them (and is what such captures hold: RD was never
    /// deployed).
    pub rd: bool,
    /// Run the connection analysis alongside ([`crate::analyze`]) and add each packet's
    /// events (retransmission, nak, psn_gap, ...) to its summary line, tree and JSON
    /// (`--analyze`; sequential).
    pub analyze: bool,
    /// Where MRC and UET are looked for and how their disputed bits are read.
    pub fabric: crate::fabric::FabricOptions,
    /// Only packets of this transport (`--transport`).
    pub transport: Option<crate::fabric::Transport>,
    /// Only packets with this entropy value: the UDP source port, or UET's entropy header
    /// (`--entropy`).
    pub entropy: Option<u32>,
    /// Only MRC/UET packets naming this PDC (or MRC QP) as source or destination (`--pdc`).
    pub pdc: Option<u32>,
    /// The table's MRC and UET columns (`--fabric-columns`, [`crate::columns::FABRIC_FROM`]
    /// on): without them a table is RoCE's columns only, as before there were any, and an
    /// MRC or UET packet a row that says what it is.
    pub fabric_columns: bool,
}

/// Parses an opcode filter: a name as printed (`RC_SEND_ONLY`, `cnp`, `UNKNOWN_0x18`,
/// case-insensitive) or a number (`10`, `0x0a`).
pub fn parse_opcode(s: &str) -> Option<Opcode> {
    let t = s.trim();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u8::from_str_radix(h, 16).ok().map(Opcode);
    }
    if let Ok(n) = t.parse::<u8>() {
        return Some(Opcode(n));
    }
    (0..=255u8)
        .map(Opcode)
        .find(|op| op.to_string().eq_ignore_ascii_case(t))
}

/// Counters of a decode run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Records read.
    pub packets: u64,
    /// RoCE packets (well-formed or not).
    pub roce: u64,
    /// MRC packets (well-formed or not; their malformed and ICRC failures count below too).
    pub mrc: u64,
    /// UET packets (well-formed or not; the malformed count below too).
    pub uet: u64,
    /// RoCE packets whose ICRC is wrong.
    pub icrc_failures: u64,
    /// RoCE packets that could not be fully decoded.
    pub malformed: u64,
    /// RoCE packets cut by the capture's snap length: every header that was captured is
    /// decoded, the ICRC is not captured; neither malformed nor an ICRC failure.
    pub snap_truncated: u64,
    /// Of those, records whose lengths the capturing tool rewrote to what it kept (the
    /// frame's own lengths say it was longer).
    pub lengths_rewritten: u64,
    /// Packets that are not RoCE.
    pub skipped: u64,
    /// Packets printed.
    pub printed: u64,
    /// PAUSE and PFC frames (MAC Control, EtherType 0x8808) among the packets that are not
    /// RoCE: printed with the RoCE packets, since they are what a lossless fabric runs on.
    pub pause_frames: u64,
}

impl Stats {
    /// The closing summary line (for stderr).
    pub fn line(&self) -> String {
        let snap = match (self.snap_truncated, self.lengths_rewritten) {
            (0, _) => String::new(),
            (n, 0) => format!(", {n} cut by the snap length"),
            (n, r) if r == n => {
                format!(", {n} cut by the capture (record lengths rewritten to what was kept)")
            }
            (n, r) => format!(
                ", {n} cut by the snap length or the capture ({r} with record lengths rewritten)"
            ),
        };
        let pause = if self.pause_frames > 0 {
            format!(" ({} of them PFC/PAUSE)", self.pause_frames)
        } else {
            String::new()
        };
        let mut fabric = String::new();
        if self.mrc > 0 {
            fabric += &format!(", {} MRC", self.mrc);
        }
        if self.uet > 0 {
            fabric += &format!(", {} UET", self.uet);
        }
        format!(
            "{} packets read, {} RoCE{fabric}, {} ICRC failures, {} malformed{snap}, {} skipped (not RoCE){pause}",
            self.packets, self.roce, self.icrc_failures, self.malformed, self.skipped
        )
    }
}

/// The result of a whole run: counters, and the error that stopped it early, if any.
#[derive(Debug)]
pub struct Outcome {
    /// Counters.
    pub stats: Stats,
    /// Why the input was not read to its end.
    pub error: Option<DecodeError>,
}

impl Outcome {
    /// 0 when the input was read to its end (and, with `check`, every RoCE packet was
    /// well-formed with a good ICRC); 1 otherwise.
    pub fn exit_code(&self, check: bool) -> i32 {
        // Frames cut by the snap length are neither: their ICRC was never captured.
        let bad = check && (self.stats.malformed > 0 || self.stats.icrc_failures > 0);
        i32::from(self.error.is_some() || bad)
    }
}

/// Output is collected in the decoder's buffer and handed to the writer in chunks of about
/// this many bytes (the one output buffer of a run).
const FLUSH_AT: usize = 64 * 1024;

/// Decodes records one at a time.
#[derive(Debug)]
pub struct Decoder {
    opts: Options,
    stats: Stats,
    first_ts: Option<Timestamp>,
    /// Records before the first one this decoder sees (for parallel batches).
    frame_base: u64,
    line: Vec<u8>,
    endpoints: format::EndpointCache,
    /// A DC packet without its DC bytes, read with the RD layout.
    dc_scratch: Vec<u8>,
    /// The analysis, with `--analyze`.
    analyzer: Option<Box<crate::analyze::Analyzer>>,
    /// The current packet's events.
    flags: Vec<crate::analyze::Event>,
    /// The rows, with [`OutputFormat::Columns`] (made on first use: the other formats never
    /// touch them).
    columns: Option<Box<crate::columns::Columns>>,
}

impl Decoder {
    /// A decoder with empty counters.
    pub fn new(opts: Options) -> Self {
        Self {
            opts,
            stats: Stats::default(),
            first_ts: None,
            frame_base: 0,
            line: Vec::with_capacity(FLUSH_AT + 8192),
            endpoints: format::EndpointCache::default(),
            dc_scratch: Vec::new(),
            analyzer: opts
                .analyze
                .then(|| Box::new(crate::analyze::Analyzer::new(Default::default()))),
            flags: Vec::new(),
            columns: None,
        }
    }

    /// The rows decoded so far and not taken (with [`OutputFormat::Columns`]): take them
    /// with [`crate::columns::Columns::take`] when [`crate::columns::Columns::full`].
    pub fn columns(&mut self) -> &mut crate::columns::Columns {
        self.columns.get_or_insert_with(Box::default)
    }

    /// A decoder for a batch of records in the middle of an input: frame numbers continue
    /// after `frame_base`, and relative times count from `first_ts` (the input's first record).
    pub fn starting_at(opts: Options, frame_base: u64, first_ts: Timestamp) -> Self {
        Self {
            first_ts: Some(first_ts),
            frame_base,
            ..Self::new(opts)
        }
    }

    /// Sets the analysis options (with [`Options::analyze`]; before the first record).
    pub fn set_analysis_options(&mut self, opts: crate::analyze::Options) {
        if self.analyzer.is_some() {
            self.analyzer = Some(Box::new(crate::analyze::Analyzer::new(opts)));
        }
    }

    /// The analysis (with [`Options::analyze`]): ends it and returns it.
    pub fn take_analysis(&mut self) -> Option<crate::analyze::Analysis> {
        self.analyzer.take().map(|a| a.into_analysis(&mut |_| {}))
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// `true` once `--count` packets were printed.
    pub fn done(&self) -> bool {
        self.opts.count.is_some_and(|c| self.stats.printed >= c)
    }

    /// Writes the buffered output to `out` and flushes it.
    pub fn flush<W: Write>(&mut self, out: &mut W) -> io::Result<()> {
        if !self.line.is_empty() {
            out.write_all(&self.line)?;
            self.line.clear();
        }
        out.flush()
    }

    fn emitted<W: Write>(&mut self, out: &mut W) -> io::Result<()> {
        self.stats.printed += 1;
        if self.line.len() >= FLUSH_AT {
            out.write_all(&self.line)?;
            self.line.clear();
        }
        Ok(())
    }

    /// Decodes one record, updates the counters and appends its output (if it passes the
    /// filters) to the decoder's buffer, which goes to `out` in large chunks: call
    /// [`Decoder::flush`] at the end (or after each record, for live output).
    pub fn record<W: Write>(&mut self, rec: &Record<'_>, out: &mut W) -> io::Result<()> {
        self.stats.packets += 1;
        let frame_no = self.frame_base + self.stats.packets;
        let first = *self.first_ts.get_or_insert(rec.ts);
        let rel = rec.ts.since(first);
        // MRC on its own port: read once, as MRC (the analysis reads RoCE frames only).
        if self.analyzer.is_none() {
            if let Some(p) =
                crate::fabric::mrc_on_its_port(rec.link_type, rec.data, &self.opts.fabric)
            {
                return self.fabric_packet(rec, frame_no, rel, &p, out);
            }
        }
        let parsed = link::parse(rec.link_type, rec.data);
        if let Some(a) = self.analyzer.as_mut() {
            self.flags.clear();
            let flags = &mut self.flags;
            a.record_frame(
                frame_no,
                rec.ts,
                parsed.as_ref().ok(),
                (rec.link_type, rec.data),
                &mut |e| {
                    flags.push(e.clone());
                },
            );
        }
        let mut scratch = std::mem::take(&mut self.dc_scratch);
        let r = self.record_parsed(rec, &parsed, &mut scratch, frame_no, rel, out);
        self.dc_scratch = scratch;
        r
    }

    /// Adds the current packet's analysis events to the output just written from `start`.
    fn add_flags(&mut self, start: usize) {
        if self.flags.is_empty() || self.line.len() <= start {
            return;
        }
        let name = |e: &crate::analyze::Event| match e.cause {
            Some(c) => format!("{}({})", e.kind.name(), c.name()),
            None => e.kind.name().to_string(),
        };
        match self.opts.format {
            OutputFormat::Summary => {
                if self.line.last() == Some(&b'\n') {
                    self.line.pop();
                }
                let names: Vec<String> = self.flags.iter().map(name).collect();
                self.line.extend_from_slice(b"  [");
                self.line.extend_from_slice(names.join(", ").as_bytes());
                self.line.extend_from_slice(b"]\n");
            }
            OutputFormat::Json => {
                // `...}\n` becomes `...,"analysis":[...]}\n`.
                if self.line.ends_with(b"}\n") {
                    self.line.truncate(self.line.len() - 2);
                    let v: Vec<serde_json::Value> = self
                        .flags
                        .iter()
                        .map(crate::analyze::event_flag_json)
                        .collect();
                    self.line.extend_from_slice(b",\"analysis\":");
                    self.line
                        .extend_from_slice(serde_json::Value::Array(v).to_string().as_bytes());
                    self.line.extend_from_slice(b"}\n");
                }
            }
            // The table has no column for events.
            OutputFormat::Columns => {}
            OutputFormat::Verbose => {
                let blank = self.line.ends_with(b"\n\n");
                if blank {
                    self.line.pop();
                }
                self.line.extend_from_slice(b"Analysis\n");
                for e in &self.flags {
                    let d = if e.detail.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", e.detail)
                    };
                    let l = format!("    {} (PSN {}){d}\n", name(e), e.psn);
                    self.line.extend_from_slice(l.as_bytes());
                }
                if blank {
                    self.line.push(b'\n');
                }
            }
        }
    }

    fn record_parsed<W: Write>(
        &mut self,
        rec: &Record<'_>,
        parsed: &roce_proto::Result<Frame<'_>>,
        scratch: &mut Vec<u8>,
        frame_no: u64,
        rel: Timestamp,
        out: &mut W,
    ) -> io::Result<()> {
        // A DC packet: its DC bytes are set aside and the rest read with the RD layout.
        let dc = match parsed {
            Ok(f) if !self.opts.rd && !f.truncated => dc_split(f.transport),
            _ => None,
        };
        if let (Some((_, skip)), Ok(f)) = (&dc, parsed) {
            scratch.clear();
            scratch.extend_from_slice(&f.transport[..roce_proto::bth::HEADER_LEN]);
            scratch.extend_from_slice(&f.transport[*skip..]);
        }
        // MRC's opcodes on RoCEv2's port, when the user says they are MRC.
        if self.opts.fabric.mrc_on_rocev2 {
            if let Ok(f) = parsed {
                let mrc_op = f
                    .bth()
                    .is_some_and(|b| roce_proto::mrc::MrcOpcode::from_opcode(b.opcode).is_some());
                if mrc_op {
                    if let Some(p) =
                        crate::fabric::classify(rec.link_type, rec.data, &self.opts.fabric)
                    {
                        return self.fabric_packet(rec, frame_no, rel, &p, out);
                    }
                }
            }
        }
        // The frame stays where `link::parse` put it; `Decoded` borrows it (no copy).
        let (frame, packet) = match parsed {
            Ok(f) if dc.is_some() => (Some(f), RocePacket::new_checked(&scratch[..])),
            Ok(f) => (Some(f), f.packet()),
            Err(e) if link::is_roce_error(e) => (None, Err(*e)),
            Err(e) => {
                if let Some(p) = crate::fabric::classify(rec.link_type, rec.data, &self.opts.fabric)
                {
                    return self.fabric_packet(rec, frame_no, rel, &p, out);
                }
                self.stats.skipped += 1;
                if let Some((src, mc)) = link::mac_control(rec.link_type, rec.data) {
                    self.stats.pause_frames += 1;
                    if !self.opts.quiet
                        && !self.opts.errors
                        && self.opts.qp.is_none()
                        && self.opts.opcode.is_none()
                        && self.opts.mad_class.is_none()
                        && self.opts.cm_comm_id.is_none()
                        && !self.done()
                    {
                        match self.opts.format {
                            OutputFormat::Json => format::json_mac_control(
                                &mut self.line,
                                frame_no,
                                rec.ts,
                                rec.ts_digits,
                                src,
                                &mc,
                            ),
                            OutputFormat::Columns => {
                                self.columns().mac_control(frame_no, rec.ts, src, &mc)
                            }
                            _ => format::summary_mac_control(
                                &mut self.line,
                                frame_no,
                                rel,
                                rec.ts_digits,
                                src,
                                &mc,
                            ),
                        }
                        self.emitted(out)?;
                    }
                    return Ok(());
                }
                if self.opts.all
                    && !self.opts.quiet
                    && !self.opts.errors
                    && self.opts.qp.is_none()
                    && self.opts.opcode.is_none()
                    && !self.done()
                {
                    match self.opts.format {
                        OutputFormat::Json => {
                            format::json_other(&mut self.line, frame_no, rec.ts, rec.ts_digits, e)
                        }
                        OutputFormat::Columns => self.columns().other(frame_no, rec.ts, e),
                        _ => format::summary_other(
                            &mut self.line,
                            frame_no,
                            rel,
                            rec.ts_digits,
                            rec.data.len(),
                            e,
                        ),
                    }
                    self.emitted(out)?;
                }
                return Ok(());
            }
        };
        self.stats.roce += 1;
        let (icrc_ok, conformance) = match (&frame, &packet) {
            // The ICRC covers every byte on the wire, the DC bytes included.
            // Over the transport's bytes: `p`'s, or for DC the packet with its DC bytes.
            (Some(f), Ok(p)) => (
                f.icrc_matches().ok(),
                dc.is_none().then(|| p.conformance().err()).flatten(),
            ),
            _ => (None, None),
        };
        let snap = match (&frame, &packet) {
            (Some(f), Err(_)) => snap_cut(f, rec),
            _ => None,
        };
        let d = Decoded {
            frame_no,
            ts: rec.ts,
            rel,
            ts_digits: rec.ts_digits,
            caplen: rec.data.len(),
            orig_len: rec.orig_len,
            link_type: rec.link_type,
            frame,
            packet,
            icrc_ok,
            conformance,
            snap,
            dc: dc.and_then(|(connect, skip)| {
                let t = frame?.transport;
                Some(format::DcBytes {
                    dceth: &t[12..20],
                    connect: connect.then(|| &t[20..skip]),
                })
            }),
        };
        if let Some(cut) = d.snap {
            self.stats.snap_truncated += 1;
            if cut.wire_len.is_some() {
                self.stats.lengths_rewritten += 1;
            }
        } else if d.is_malformed() {
            self.stats.malformed += 1;
        } else if d.icrc_bad() {
            self.stats.icrc_failures += 1;
        }
        if self.opts.quiet || self.done() || !self.matches(&d) {
            return Ok(());
        }
        let start = self.line.len();
        match self.opts.format {
            OutputFormat::Summary => format::summary(&mut self.line, &d, &mut self.endpoints),
            OutputFormat::Verbose => format::verbose(&mut self.line, &d),
            OutputFormat::Json => format::json(&mut self.line, &d, &mut self.endpoints),
            OutputFormat::Columns => self.columns.get_or_insert_with(Box::default).packet(&d),
        }
        self.add_flags(start);
        self.emitted(out)
    }

    /// An MRC or UET packet: counted, filtered, written in the chosen format.
    fn fabric_packet<W: Write>(
        &mut self,
        rec: &Record<'_>,
        frame_no: u64,
        rel: Timestamp,
        p: &crate::fabric::Packet,
        out: &mut W,
    ) -> io::Result<()> {
        use crate::fabric::Transport;
        match p.transport {
            Transport::Mrc => self.stats.mrc += 1,
            Transport::Uet => self.stats.uet += 1,
            Transport::Roce => {}
        }
        let icrc_bad = p.icrc_ok == Some(false);
        if p.malformed() {
            self.stats.malformed += 1;
        } else if icrc_bad {
            self.stats.icrc_failures += 1;
        }
        let o = &self.opts;
        let mrc_bth = p.bth.filter(|_| p.transport == Transport::Mrc);
        let shown = !o.quiet
            && !self.done()
            && o.transport.is_none_or(|t| t == p.transport)
            && (!o.errors || p.malformed() || icrc_bad)
            && o.mad_class.is_none()
            && o.cm_comm_id.is_none()
            && o.qp
                .is_none_or(|q| mrc_bth.is_some_and(|b| b.dest_qp.0 == q))
            && o.opcode
                .is_none_or(|op| mrc_bth.is_some_and(|b| b.opcode == op))
            && o.entropy.is_none_or(|e| p.entropy() == Some(e))
            && o.pdc.is_none_or(|d| p.pdcs().contains(&Some(d)));
        if !shown {
            return Ok(());
        }
        match self.opts.format {
            OutputFormat::Summary => {
                crate::fabric::summary(&mut self.line, frame_no, rel, rec.ts_digits, p)
            }
            OutputFormat::Verbose => {
                crate::fabric::verbose(&mut self.line, frame_no, rec.ts, rel, rec.ts_digits, p)
            }
            OutputFormat::Json => {
                crate::fabric::json(&mut self.line, frame_no, rec.ts, rec.ts_digits, p)
            }
            OutputFormat::Columns if self.opts.fabric_columns => {
                self.columns().fabric(frame_no, rec.ts, p)
            }
            OutputFormat::Columns => {
                let why = roce_proto::Error::NotRoce {
                    reason: match p.transport {
                        Transport::Mrc => "MRC (its columns come with --fabric-columns)",
                        _ => "UET (its columns come with --fabric-columns)",
                    },
                };
                self.columns().other(frame_no, rec.ts, &why)
            }
        }
        self.emitted(out)
    }

    /// The transport, entropy and PDC filters on a RoCE packet.
    fn roce_passes(&self, d: &Decoded<'_>) -> bool {
        let o = &self.opts;
        if o.transport
            .is_some_and(|t| t != crate::fabric::Transport::Roce)
            || o.pdc.is_some()
        {
            return false;
        }
        o.entropy.is_none_or(|e| {
            d.frame
                .and_then(|f| f.udp)
                .is_some_and(|u| u32::from(u.src_port) == e)
        })
    }

    fn matches(&self, d: &Decoded<'_>) -> bool {
        if !self.roce_passes(d) {
            return false;
        }
        if self.opts.errors && !((d.is_malformed() && d.snap.is_none()) || d.icrc_bad()) {
            return false;
        }
        if (self.opts.mad_class.is_some() || self.opts.cm_comm_id.is_some())
            && !format::mad_matches(d, self.opts.mad_class, self.opts.cm_comm_id)
        {
            return false;
        }
        if self.opts.qp.is_none() && self.opts.opcode.is_none() {
            return true;
        }
        let Some(bth) = d.frame.and_then(Frame::bth) else {
            return false;
        };
        self.opts.qp.is_none_or(|q| bth.dest_qp.0 == q)
            && self.opts.opcode.is_none_or(|o| bth.opcode == o)
    }
}

/// The DC split of a transport packet with an opcode in 0x40-0x5f: whether it carries the
/// 16-byte connect header (opcode 0x55 without SE), and where the RD-layout headers start.
fn dc_split(t: &[u8]) -> Option<(bool, usize)> {
    let op = *t.first()?;
    if op >> 5 != 0x2 {
        return None;
    }
    let connect = op == 0x55 && t.get(1).is_some_and(|b| b & 0x80 == 0);
    let skip = roce_proto::bth::HEADER_LEN + 8 + if connect { 16 } else { 0 };
    (t.len() >= skip + roce_proto::ICRC_LEN).then_some((connect, skip))
}

/// When a frame that did not decode was cut by the capture's snap length (the record is
/// shorter than the frame was on the wire, and the frame's own IP/UDP (or LRH/GRH) lengths are
/// consistent: they leave room for the headers the opcode calls for and the ICRC), how much
/// was there. A frame whose own lengths disagree is malformed, cut or not.
///
/// A record no longer than it says the frame was, whose frame's own lengths say the frame
/// was longer, was cut by a capturing tool that rewrote the record's lengths to what it kept
/// (mirror and NIC-side captures do): it is cut the same way, and said to be
/// ([`format::SnapCut::wire_len`]).
fn snap_cut(f: &Frame<'_>, rec: &Record<'_>) -> Option<format::SnapCut> {
    if !f.truncated {
        return None;
    }
    let rewritten = (rec.orig_len as usize) <= rec.data.len();
    // The frame was as long as its headers before the transport, plus what the transport's
    // own length (IP/UDP or LRH/GRH) claims: a truncated frame's transport runs to the end
    // of the record.
    let wire_len = rewritten.then(|| rec.data.len() - f.transport.len() + f.claimed_len);
    let implied = match f.transport.first() {
        Some(&op) => {
            let op = Opcode(op);
            let hl = op.header_len();
            if f.claimed_len < hl + roce_proto::ICRC_LEN {
                return None;
            }
            let pad = f.transport.get(1).map_or(0, |b| usize::from((b >> 4) & 3));
            Some(
                f.claimed_len
                    .saturating_sub(hl + roce_proto::ICRC_LEN + pad),
            )
        }
        None => None,
    };
    Some(format::SnapCut {
        implied_payload_len: implied,
        wire_len,
    })
}

/// Hands every record of `reader` to `on` with the decoder, until the input ends, the decoder
/// is [`Decoder::done`], `on` fails ([`DecodeError::Write`]) or the reader does
/// ([`DecodeError::Read`]); reports progress every 4,096 records. The one record loop of the
/// sequential decoders ([`decode()`], [`crate::source::decode_columns`]).
pub(crate) fn each_record<R: Read>(
    reader: &mut CaptureReader<R>,
    dec: &mut Decoder,
    progress: Option<&dyn Progress>,
    on: &mut dyn FnMut(&mut Decoder, &Record<'_>) -> io::Result<()>,
) -> Option<DecodeError> {
    let mut n = 0u64;
    while !dec.done() {
        match reader.next_record() {
            Ok(Some(rec)) => {
                if let Err(e) = on(dec, &rec) {
                    return Some(DecodeError::Write(e));
                }
            }
            Ok(None) => return None,
            Err(e) => return Some(DecodeError::Read(e)),
        }
        n += 1;
        if let Some(p) = progress {
            if n.is_multiple_of(4096) {
                p.advance(reader.offset());
            }
        }
    }
    None
}

/// Decodes a whole capture from `reader` into `out`; the output of every record read before an
/// error is written (and flushed) before the error is returned in the [`Outcome`].
pub fn decode<R: Read, W: Write>(
    reader: &mut CaptureReader<R>,
    opts: Options,
    out: &mut W,
    progress: Option<&dyn Progress>,
) -> Outcome {
    let mut dec = Decoder::new(opts);
    let mut error = each_record(reader, &mut dec, progress, &mut |dec, rec| {
        dec.record(rec, &mut *out)
    });
    if let Err(e) = dec.flush(out) {
        error.get_or_insert(DecodeError::Write(e));
    }
    Outcome {
        stats: dec.stats(),
        error,
    }
}
