//! The analysis as text (a table of connections, then each connection's verdicts and event
//! episodes), JSON lines (stable keys, documented in `docs/analyze.md`), and one HTML page.
use std::fmt::Write as _;
use std::io::Write;

use serde_json::{json, Value};

use super::side::endpoint;
use super::text::{pad_right, push_u64};
use super::{Analysis, Cause, Connection, Event, PriorityPfc, Side, NAK_KINDS, OPS};

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// A rate with a unit that keeps three digits.
fn rate_into(o: &mut String, gbps: f64) {
    let _ = if gbps >= 1.0 {
        write!(o, "{gbps:.2}G")
    } else if gbps >= 1e-3 {
        write!(o, "{:.2}M", gbps * 1e3)
    } else {
        write!(o, "{:.2}K", gbps * 1e6)
    };
}

/// Writes `name count` of every nonzero count, comma-separated, or `-`.
fn counts_into(o: &mut String, names: impl Iterator<Item = &'static str>, counts: &[u64]) {
    let start = o.len();
    for (name, &n) in names.zip(counts).filter(|(_, n)| **n > 0) {
        if o.len() > start {
            o.push_str(", ");
        }
        o.push_str(name);
        o.push(' ');
        push_u64(o, n);
    }
    if o.len() == start {
        o.push('-');
    }
}

/// Right-aligns what was written from `at` on in `width` characters (`{:>width}`).
fn pad_left(o: &mut String, at: usize, width: usize) {
    const SPACES: &str = "                                                  ";
    let n = o.len() - at;
    if n < width {
        o.insert_str(at, &SPACES[..(width - n).min(SPACES.len())]);
    }
}

/// `n` right-aligned in `width` characters (`{:>width}`).
fn push_u64_right(o: &mut String, n: u64, width: usize) {
    let at = o.len();
    push_u64(o, n);
    pad_left(o, at, width);
}

/// Writes `addr` or `addr qp 0x..` of a side (as `{addr}` and ` qp {qpn:#x}` write them).
fn endpoint_into(o: &mut String, s: &Side) {
    match s.addr {
        Some(std::net::IpAddr::V4(a)) => {
            for (i, b) in a.octets().into_iter().enumerate() {
                if i > 0 {
                    o.push('.');
                }
                push_u64(o, u64::from(b));
            }
        }
        Some(a) => {
            let _ = write!(o, "{a}");
        }
        None => o.push('?'),
    }
    if let Some(q) = s.qpn {
        o.push_str(" qp 0x");
        let digits = (32 - q.leading_zeros()).div_ceil(4).max(1);
        for k in (0..digits).rev() {
            o.push(char::from(
                crate::digits::HEX[(q >> (4 * k) & 0xf) as usize],
            ));
        }
    }
}

/// The text report's line on the capture's own completeness, when there is something to
/// say ([`Analysis::capture_quality`]).
fn capture_quality_into(o: &mut String, a: &Analysis) {
    let q = a.capture_quality();
    if !q.is_notable() {
        return;
    }
    o.push_str("capture quality: ");
    if q.missed + q.unseen_read_responses > 0 {
        let _ = write!(
            o,
            "{} packets the connections show were sent are not in the capture ({} requests the responses acknowledge and answers the requesters acted on, {} READ responses inside answers) on {} connections; the checks that need them are not judged",
            q.missed + q.unseen_read_responses,
            q.missed,
            q.unseen_read_responses,
            q.connections
        );
    } else {
        o.push_str("no packet missing that the connections' answers show");
    }
    if let Some(d) = q.file_dropped {
        let _ = write!(o, "; the file says the capture dropped {d}");
    }
    o.push('\n');
}

/// The text report's head: the capture's counts, PAUSE and PFC, and the table's header.
fn table_head(a: &Analysis) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} packets, {} RoCE ({} UD datagrams, not connections), {} connections",
        a.packets,
        a.roce,
        a.datagrams,
        a.connections.len()
    );
    capture_quality_into(&mut o, a);
    for p in &a.pfc {
        let _ = writeln!(
            o,
            "PFC/PAUSE priority {}: {} frames ({} pausing) from {} senders, paused {:.3} ms in all (longest {:.3} ms), {} pause storms; {} stalls covered, {} victim connections",
            p.priority,
            p.frames,
            p.xoff,
            p.senders,
            p.paused_ns as f64 / 1e6,
            p.longest_ns as f64 / 1e6,
            p.storms.len(),
            p.stalls_covered,
            p.victims
        );
    }
    if a.untracked > 0 {
        let _ = writeln!(
            o,
            "{} packets of directions past the first {} of their share of the host pairs not analyzed",
            a.untracked,
            super::MAX_DIRECTIONS
        );
    }
    let _ = writeln!(
        o,
        "{:>4} {:<44} {:<9} {:>8} {:>11} {:>8} {:>6} {:<22} {:<18} {:>5} {:>9} {:>8}",
        "conn",
        "endpoints (a <-> b)",
        "paired",
        "packets",
        "bytes",
        "goodput",
        "retx",
        "episodes",
        "NAKs",
        "CNPs",
        "p99 RTT",
        "verdict"
    );
    o
}

/// The table's rows of `conns`, a line each: `{:>4} {:<44} {:<9} {:>8} {:>11} {:>8} {:>6}
/// {:<22} {:<18} {:>5} {:>7.1}us` and the verdict, written without the formatting
/// machinery (a row per connection: 100,000 of them took 75 ms through `write!`).
fn table_rows(o: &mut String, conns: &[Box<Connection>]) {
    for c in conns {
        let [x, y] = &c.sides;
        let episodes: [u64; 5] = std::array::from_fn(|i| x.episodes[i] + y.episodes[i]);
        let naks: [u64; 6] = std::array::from_fn(|i| x.naks[i] + y.naks[i]);
        let rtt = if x.ack_rtt.count() >= y.ack_rtt.count() {
            &x.ack_rtt
        } else {
            &y.ack_rtt
        };
        push_u64_right(o, c.id as u64, 4);
        o.push(' ');
        let at = o.len();
        endpoint_into(o, x);
        o.push_str(" <-> ");
        endpoint_into(o, y);
        pad_right(o, at, 44);
        o.push(' ');
        let at = o.len();
        o.push_str(c.paired_by);
        pad_right(o, at, 9);
        o.push(' ');
        push_u64_right(o, x.packets + y.packets, 8);
        o.push(' ');
        push_u64_right(o, x.bytes + y.bytes, 11);
        o.push(' ');
        let at = o.len();
        rate_into(o, x.goodput_gbps().max(y.goodput_gbps()));
        pad_left(o, at, 8);
        o.push(' ');
        push_u64_right(o, x.retransmitted_packets + y.retransmitted_packets, 6);
        o.push(' ');
        let at = o.len();
        counts_into(o, Cause::ALL.iter().map(|c| c.name()), &episodes);
        pad_right(o, at, 22);
        o.push(' ');
        let at = o.len();
        counts_into(o, NAK_KINDS.iter().copied(), &naks);
        pad_right(o, at, 18);
        o.push(' ');
        push_u64_right(o, x.cnps + y.cnps, 5);
        let _ = write!(o, " {:>7.1}us ", us(rtt.quantile(0.99)));
        let mut violated = c.rules.violated_rules().peekable();
        if violated.peek().is_none() {
            o.push_str("ok");
        } else {
            o.push_str("VIOLATED: ");
            for (i, rule) in violated.enumerate() {
                if i > 0 {
                    o.push_str(", ");
                }
                o.push_str(rule.name());
            }
        }
        o.push('\n');
    }
}

/// A side's line of what went wrong (retransmissions, NAKs, gaps, ...): the counts that are
/// not zero, or no line when all are.
fn anomalies_into(o: &mut String, s: &Side) {
    let start = o.len();
    let item = |o: &mut String, name: &str, n: u64| {
        if n > 0 {
            o.push_str(if o.len() == start { "    " } else { ", " });
            o.push_str(name);
            o.push(' ');
            push_u64(o, n);
        }
    };
    if s.retransmitted_packets > 0 {
        o.push_str(if o.len() == start { "    " } else { ", " });
        let _ = write!(
            o,
            "retransmitted {} packets in episodes ",
            s.retransmitted_packets
        );
        counts_into(o, Cause::ALL.iter().map(|c| c.name()), &s.episodes);
    }
    if s.naks.iter().any(|&n| n > 0) {
        o.push_str(if o.len() == start { "    " } else { ", " });
        o.push_str("NAKs sent ");
        counts_into(o, NAK_KINDS.iter().copied(), &s.naks);
    }
    item(o, "gaps", s.psn_gaps);
    item(o, "never seen PSNs", s.never_seen_psns);
    item(o, "missed by the capture", s.missed_by_capture);
    item(o, "unseen READ responses", s.unseen_read_responses);
    item(o, "out of order", s.out_of_order);
    item(o, "duplicates", s.duplicates);
    item(o, "ghost ACKs", s.ghost_acks);
    item(o, "stale ACKs", s.stale_acks);
    item(o, "CNPs", s.cnps);
    item(o, "CE", s.ecn_ce);
    item(o, "bad ICRC", s.icrc_bad);
    item(o, "stalls", s.stalls);
    item(o, "READ mismatches", s.read_response_mismatches);
    if o.len() > start {
        o.push('\n');
    }
}

/// One connection's section of the text report.
fn section(o: &mut String, c: &Connection, events: bool) {
    o.push_str("\nconnection ");
    push_u64(o, c.id as u64);
    o.push_str(" (");
    endpoint_into(o, &c.sides[0]);
    o.push_str(" <-> ");
    endpoint_into(o, &c.sides[1]);
    o.push_str(", paired by ");
    o.push_str(c.paired_by);
    o.push_str(")\n");
    for (i, s) in c.sides.iter().enumerate() {
        if s.packets == 0 {
            let _ = writeln!(o, "  side {}: nothing captured", ["a", "b"][i]);
            continue;
        }
        o.push_str(["  side a ", "  side b "][i]);
        endpoint_into(o, s);
        o.push_str(": ");
        push_u64(o, s.packets);
        o.push_str(" packets (");
        push_u64(o, s.requests);
        o.push_str(" requests, ");
        push_u64(o, s.responses);
        o.push_str(" responses), messages: ");
        let start = o.len();
        for (k, (n, b)) in OPS
            .iter()
            .zip(s.messages.iter().zip(s.message_bytes))
            .filter(|(_, (n, _))| **n > 0)
        {
            if o.len() > start {
                o.push_str(", ");
            }
            o.push_str(k);
            o.push(' ');
            push_u64(o, *n);
            o.push_str(" (");
            push_u64(o, b);
            o.push_str(" B)");
        }
        if o.len() == start {
            o.push('-');
        }
        o.push('\n');
        anomalies_into(o, s);
        for (name, d) in s.measures() {
            if d.count() > 0 {
                let _ = writeln!(
                    o,
                    "    {name}: p50 {:.1} us, p99 {:.1} us, max {:.1} us ({} samples)",
                    us(d.quantile(0.5)),
                    us(d.quantile(0.99)),
                    us(d.max()),
                    d.count()
                );
            }
        }
        let r = &s.rate_after_cnp_pct;
        if r.count() > 0 {
            let _ = writeln!(
                o,
                "    rate after a CNP, % of the rate before: p50 {}, p99 {}, max {} ({} CNPs)",
                r.quantile(0.5),
                r.quantile(0.99),
                r.max(),
                r.count()
            );
        }
    }
    let f = &c.pfc;
    if let (Some(p), true) = (f.priority, f.pauses > 0 || f.paused_ns > 0) {
        let _ = write!(
            o,
            "  PFC: priority {p} paused {:.3} ms during the connection ({} pausing frames), {} of its stalls covered, {} pause storms",
            f.paused_ns as f64 / 1e6,
            f.pauses,
            f.stalls_covered,
            f.storms
        );
        if f.victim {
            o.push_str("; a victim: paused with no congestion of its own (no CE, no CNP)");
        }
        o.push('\n');
    }
    c.rules.write_verdicts(o);
    // Events collapsed into runs of one kind (or every one with `events`).
    let mut runs: Vec<(&Event, u64, u64)> = Vec::new();
    for e in &c.events {
        match runs.last_mut() {
            Some((first, n, last))
                if !events && first.kind == e.kind && first.side == e.side && e.cause.is_none() =>
            {
                *n += 1;
                *last = e.frame;
            }
            _ => runs.push((e, 1, e.frame)),
        }
    }
    for (e, n, last) in runs {
        let cause = e
            .cause
            .map_or(String::new(), |c| format!(" ({})", c.name()));
        let frames = if n > 1 {
            format!("frames {}..{} ({n} packets)", e.frame, last)
        } else {
            format!("frame {}", e.frame)
        };
        let line = format!(
            "  event {:>12.9}s side {} {:<22} psn {:<8} {frames}{cause} {}",
            e.t as f64 / 1e9,
            ["a", "b"][e.side],
            e.kind.name(),
            e.psn,
            e.detail
        );
        let _ = writeln!(o, "{}", line.trim_end());
    }
    if c.events_dropped > 0 {
        let _ = writeln!(o, "  ({} more events not listed)", c.events_dropped);
    }
}

/// The text report.
pub fn text(a: &Analysis, events: bool) -> String {
    let mut o = Vec::new();
    let _ = write_text(a, events, &mut o);
    String::from_utf8(o).unwrap_or_default()
}

/// Connections whose text sections are formatted by one thread at a time.
const SECTIONS_AT_ONCE: usize = 2048;

/// Writes the text report to `out`, a connection at a time.
pub fn write_text<W: Write + ?Sized>(
    a: &Analysis,
    events: bool,
    out: &mut W,
) -> std::io::Result<()> {
    out.write_all(table_head(a).as_bytes())?;
    in_parallel(&a.connections, out, table_rows)?;
    out.write_all(findings_text(a).as_bytes())?;
    out.write_all(agreed_text(a).as_bytes())?;
    out.write_all(counters_text(a).as_bytes())?;
    in_parallel(&a.connections, out, |o: &mut String, conns| {
        for c in conns {
            section(o, c, events);
        }
    })?;
    out.write_all(super::localise::localisation_text(&a.localised).as_bytes())
}

/// The text report's findings ([`Analysis::findings`]), after the table: a line each,
/// what was seen then what to do; nothing when there are none.
fn findings_text(a: &Analysis) -> String {
    let mut o = String::new();
    let findings = a.findings();
    if findings.is_empty() {
        return o;
    }
    o.push_str("\nfindings:\n");
    for f in &findings {
        let _ = write!(o, "  {}", f.name);
        if let Some(c) = f.connection {
            let _ = write!(o, " (connection {c}");
            if let Some(s) = f.side {
                let _ = write!(o, " side {}", ["a", "b"][s & 1]);
            }
            o.push(')');
        }
        let _ = write!(o, ": {}", f.detail);
        if !f.frames.is_empty() {
            let _ = write!(o, " (frames {})", frame_list(&f.frames));
        }
        let _ = writeln!(o, ". {}", f.advice);
    }
    o
}

/// What one exchange agreed, in a line: the ends (address, QPN, GID), then the REQ's terms.
fn agreed_line(g: &super::Agreed) -> String {
    let mut o = String::new();
    let conns: Vec<String> = g.connections.iter().map(|c| c.0.to_string()).collect();
    let _ = write!(
        o,
        "{} at frame {}",
        if g.by == "cm" {
            "the CM"
        } else {
            "perftest's records"
        },
        g.frame
    );
    if !conns.is_empty() {
        let _ = write!(o, " (connection {})", conns.join(", "));
    }
    o.push_str(": ");
    for (i, e) in g.ends.iter().enumerate() {
        if i == 1 {
            o.push_str(" <-> ");
        }
        let _ = write!(o, "{}", e.from);
        if let Some(q) = e.qpn {
            let _ = write!(o, " QP {q:#x}");
        }
        if let Some(gid) = e.gid {
            let _ = write!(o, " GID {gid}");
        }
        if let Some(r) = e.reads_accepted {
            let _ = write!(o, " reads {r}");
        }
    }
    if let Some(t) = g.ack_timeout {
        let _ = write!(
            o,
            "; ACK timeout code {t} ({:.3} ms)",
            roce_proto::cm::timeout_ns(t) as f64 / 1e6
        );
    }
    let terms = [
        ("retry", g.retry_count.map(u32::from)),
        ("RNR retry", g.rnr_retry_count.map(u32::from)),
        ("path MTU", g.path_mtu),
        ("traffic class", g.traffic_class.map(u32::from)),
    ];
    for (name, v) in terms {
        if let Some(v) = v {
            let _ = write!(o, ", {name} {v}");
        }
    }
    o
}

/// A counter beside the capture as its JSON object (`type: counter`).
pub fn counter_json(c: &super::counters::CounterCheck) -> Value {
    serde_json::json!({
        "type": "counter",
        "addr": c.addr.to_string(),
        "counter": c.counter,
        "value": c.value,
        "capture": c.capture,
        "what": c.what,
        "agrees": c.agrees(),
    })
}

/// A counter beside the capture in a line.
fn counter_line(c: &super::counters::CounterCheck) -> String {
    format!(
        "{} {} {}, the capture {} ({}){}",
        c.addr,
        c.counter,
        c.value,
        c.capture,
        c.what,
        if c.agrees() { "" } else { ": DIFFERS" }
    )
}

/// The text report's `counters:` block: each known counter given beside the capture's count.
fn counters_text(a: &Analysis) -> String {
    let mut o = String::new();
    let checks = super::counters::reconcile(a);
    if !checks.is_empty() {
        o.push_str("\ncounters:\n");
        for c in &checks {
            let _ = writeln!(o, "  {}", counter_line(c));
        }
    }
    o
}

/// The text report's `set up:` block: what the ends of connections agreed, a line each.
fn agreed_text(a: &Analysis) -> String {
    let mut o = String::new();
    if a.agreed.is_empty() {
        return o;
    }
    o.push_str(
        "
set up:
",
    );
    for g in &a.agreed {
        let _ = writeln!(o, "  {}", agreed_line(g));
    }
    o
}

/// The capture's quality as its JSON line's object (`{"type":"capture_quality",...}`).
pub fn capture_quality_json(q: &super::CaptureQuality) -> Value {
    serde_json::json!({
        "type": "capture_quality",
        "missed_by_capture": q.missed,
        "unseen_read_responses": q.unseen_read_responses,
        "connections": q.connections,
        "file_dropped": q.file_dropped,
    })
}

/// A finding's JSON object (`{"type":"finding",...}`).
pub fn finding_json(f: &super::Finding) -> Value {
    serde_json::json!({
        "type": "finding",
        "name": f.name,
        "connection": f.connection,
        "side": f.side.map(|s| ["a", "b"][s & 1]),
        "frames": f.frames,
        "detail": f.detail,
        "advice": f.advice,
    })
}

/// The JSON object of what two ends agreed (`type: agreed`): the exchange, each end's
/// address, GID, QPN and READ depth, the REQ's path terms, the connections of its QPs.
pub fn agreed_json(g: &super::Agreed) -> Value {
    let end = |e: &super::AgreedEnd| {
        serde_json::json!({
            "from": e.from.to_string(),
            "gid": e.gid.map(|g| g.to_string()),
            "qpn": e.qpn,
            "reads_accepted": e.reads_accepted,
        })
    };
    serde_json::json!({
        "type": "agreed",
        "by": g.by,
        "frame": g.frame,
        "native_ib": g.native_ib,
        "ends": [end(&g.ends[0]), end(&g.ends[1])],
        "ack_timeout": g.ack_timeout,
        "retry_count": g.retry_count,
        "rnr_retry_count": g.rnr_retry_count,
        "path_mtu": g.path_mtu,
        "traffic_class": g.traffic_class,
        "connections": g.connections.iter().map(|c| c.0).collect::<Vec<_>>(),
    })
}

/// Frame numbers as a reader wants them: `-` for none, else comma-separated.
fn frame_list(frames: &[u64]) -> String {
    if frames.is_empty() {
        return "-".into();
    }
    let mut o = String::new();
    for (i, f) in frames.iter().enumerate() {
        if i > 0 {
            o.push_str(", ");
        }
        let _ = write!(o, "{f}");
    }
    o
}

/// One JSON value and a newline onto `o`.
fn line(o: &mut Vec<u8>, v: &Value) {
    // Writing to a Vec cannot fail, and a Value always serializes.
    let _ = serde_json::to_writer(&mut *o, v);
    o.push(b'\n');
}

/// A buffer [`in_parallel`] fills: text, or bytes.
trait Buf: Default + Send {
    fn reset(&mut self);
    fn bytes(&self) -> &[u8];
}

impl Buf for String {
    fn reset(&mut self) {
        self.clear();
    }
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Buf for Vec<u8> {
    fn reset(&mut self) {
        self.clear();
    }
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// Writes to `out` what `fill` makes of the connections, a few thousand at a time, half of
/// each group made on a second thread; in order. The two buffers are kept from group to
/// group (a fresh buffer per group grew by copying, a tenth of the report's time).
fn in_parallel<W: Write + ?Sized, B: Buf, F>(
    conns: &[Box<Connection>],
    out: &mut W,
    fill: F,
) -> std::io::Result<()>
where
    F: Fn(&mut B, &[Box<Connection>]) + Sync,
{
    // Each buffer on cache lines of its own: the two threads update their buffers'
    // lengths with every write.
    #[repr(align(128))]
    #[derive(Default)]
    struct Own<B>(B);
    let mut bufs: [Own<B>; 2] = Default::default();
    for group in conns.chunks(2 * SECTIONS_AT_ONCE) {
        let (first, second) = group.split_at(group.len().min(SECTIONS_AT_ONCE));
        let [Own(b0), Own(b1)] = &mut bufs;
        b0.reset();
        b1.reset();
        let fill = &fill;
        std::thread::scope(|scope| {
            if !second.is_empty() {
                scope.spawn(move || fill(b1, second));
            }
            fill(b0, first);
        });
        out.write_all(bufs[0].0.bytes())?;
        out.write_all(bufs[1].0.bytes())?;
    }
    Ok(())
}

/// Writes the JSON lines to `out`, a line at a time.
pub fn write_json_lines<W: Write + ?Sized>(
    a: &Analysis,
    events: bool,
    out: &mut W,
) -> std::io::Result<()> {
    in_parallel(&a.connections, out, |o: &mut Vec<u8>, conns| {
        for c in conns {
            super::json::connection_line(o, c);
        }
    })?;
    let mut o = Vec::new();
    let q = a.capture_quality();
    if q.is_notable() {
        line(&mut o, &capture_quality_json(&q));
    }
    for f in &a.findings() {
        line(&mut o, &finding_json(f));
    }
    for g in &a.agreed {
        line(&mut o, &agreed_json(g));
    }
    for c in &super::counters::reconcile(a) {
        line(&mut o, &counter_json(c));
    }
    for p in &a.pfc {
        line(&mut o, &pfc_json(p));
    }
    for l in &a.localised {
        line(&mut o, &super::localise::localisation_json(l));
    }
    out.write_all(&o)?;
    if events {
        let mut o = Vec::new();
        for c in &a.connections {
            o.clear();
            for e in &c.events {
                super::json::event_line(&mut o, e);
            }
            out.write_all(&o)?;
        }
    }
    Ok(())
}

/// The JSON object of a connection (`type: connection`).
pub fn connection_json(c: &Connection) -> Value {
    super::json::connection_value(c)
}

/// The JSON object of one priority's PAUSE and PFC frames (`type: pfc`).
pub fn pfc_json(p: &PriorityPfc) -> Value {
    let storms: Vec<Value> = p
        .storms
        .iter()
        .map(|&(t, len, frame)| json!({"t": t as f64 / 1e9, "length_us": us(len), "frame": frame}))
        .collect();
    json!({
        "type": "pfc",
        "priority": p.priority,
        "frames": p.frames,
        "pausing_frames": p.xoff,
        "senders": p.senders,
        "paused_us": us(p.paused_ns),
        "longest_pause_us": us(p.longest_ns),
        "storms": storms,
        "stalls_covered": p.stalls_covered,
        "victims": p.victims,
        "intervals_dropped": p.intervals_dropped,
    })
}

/// The JSON object of an event (`type: event`).
pub fn event_json(e: &Event) -> Value {
    super::json::event_value(e)
}

/// The JSON of an event as a packet flag (`roce decode --analyze`): `event`, and `cause`
/// and `detail` when it has them.
pub fn event_flag_json(e: &Event) -> Value {
    let mut v = json!({"event": e.kind.name()});
    if let Some(c) = e.cause {
        v["cause"] = json!(c.name());
    }
    if !e.detail.is_empty() {
        v["detail"] = json!(e.detail);
    }
    v
}

/// One JSON object per line: a connection per connection, the PFC priorities, then (with
/// `events`) every event.
pub fn json_lines(a: &Analysis, events: bool) -> String {
    let mut o = Vec::new();
    let _ = write_json_lines(a, events, &mut o);
    String::from_utf8(o).unwrap_or_default()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One self-contained HTML page: the text report's tables and every connection's plots inline.
pub(super) fn html<W: Write + ?Sized>(a: &Analysis, out: &mut W) -> std::io::Result<()> {
    writeln!(
        out,
        "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\"><head><meta charset=\"utf-8\"/><title>roce analyze</title>\n<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}}.violated{{color:#b00;font-weight:bold}}.ok{{color:#070}}pre{{font-size:12px}}</style></head><body>"
    )?;
    writeln!(
        out,
        "<h1>roce analyze</h1><p>{} packets, {} RoCE, {} connections</p>",
        a.packets,
        a.roce,
        a.connections.len()
    )?;
    let mut quality = String::new();
    capture_quality_into(&mut quality, a);
    if !quality.is_empty() {
        writeln!(out, "<p>{}</p>", escape(quality.trim_end()))?;
    }
    writeln!(out, "<table><tr><th>conn</th><th>endpoints</th><th>paired by</th><th>packets</th><th>retransmitted</th><th>NAKs</th><th>CNPs</th><th>verdict</th></tr>")?;
    for c in &a.connections {
        let v = if c.violated() {
            "<span class=\"violated\">violated</span>"
        } else {
            "<span class=\"ok\">ok</span>"
        };
        let [x, y] = &c.sides;
        writeln!(
            out,
            "<tr><td><a href=\"#c{}\">{}</a></td><td>{} &#8596; {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{v}</td></tr>",
            c.id,
            c.id,
            escape(&endpoint(x)),
            escape(&endpoint(y)),
            c.paired_by,
            x.packets + y.packets,
            x.retransmitted_packets + y.retransmitted_packets,
            x.naks.iter().chain(&y.naks).sum::<u64>(),
            x.cnps + y.cnps
        )?;
    }
    writeln!(out, "</table>")?;
    let findings = a.findings();
    if !findings.is_empty() {
        writeln!(out, "<h2>Findings</h2><ul>")?;
        for f in &findings {
            let at = f.connection.map_or(String::new(), |c| {
                format!(
                    " (<a href=\"#c{c}\">connection {c}</a>{})",
                    f.side
                        .map_or(String::new(), |s| format!(" side {}", ["a", "b"][s & 1]))
                )
            });
            writeln!(
                out,
                "<li><b>{}</b>{at}: {}; frames {}. {}</li>",
                f.name,
                escape(&f.detail),
                frame_list(&f.frames),
                escape(f.advice)
            )?;
        }
        writeln!(out, "</ul>")?;
    }
    let checks = super::counters::reconcile(a);
    if !checks.is_empty() {
        writeln!(out, "<h2>Counters</h2><ul>")?;
        for c in &checks {
            writeln!(out, "<li>{}</li>", escape(&counter_line(c)))?;
        }
        writeln!(out, "</ul>")?;
    }
    if !a.agreed.is_empty() {
        writeln!(out, "<h2>Set up</h2><ul>")?;
        for g in &a.agreed {
            writeln!(out, "<li>{}</li>", escape(&agreed_line(g)))?;
        }
        writeln!(out, "</ul>")?;
    }
    for c in &a.connections {
        writeln!(out, "<h2 id=\"c{}\">Connection {}</h2><table><tr><th>rule</th><th>result</th><th>detail</th><th>frames</th></tr>", c.id, c.id)?;
        for v in c.verdicts() {
            writeln!(
                out,
                "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>",
                v.rule,
                if v.result == "violated" {
                    "violated"
                } else {
                    "ok"
                },
                v.result,
                escape(&v.detail),
                frame_list(&v.frames)
            )?;
        }
        writeln!(out, "</table>")?;
        for svg in super::plot::svgs(c) {
            // Inline: no external fetches.
            out.write_all(svg.as_bytes())?;
            writeln!(out)?;
        }
    }
    out.write_all(super::localise::html_section(&a.localised).as_bytes())?;
    writeln!(
        out,
        "<h2>Text report</h2><pre>{}</pre></body></html>",
        escape(&text(a, false))
    )
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::net::IpAddr;

    use super::{endpoint_into, pad_left, pad_right, push_u64_right, Side};

    /// The table's writers give what `format!` gives: addresses of both families, QPNs of
    /// every width, numbers and texts shorter, as long as, and longer than their column.
    #[test]
    fn the_writers_match_the_formatting_machinery() {
        let addrs: [Option<IpAddr>; 5] = [
            None,
            Some("0.0.0.0".parse().unwrap()),
            Some("192.168.100.255".parse().unwrap()),
            Some("fe80::1:2".parse().unwrap()),
            Some("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap()),
        ];
        for addr in addrs {
            for qpn in [
                None,
                Some(0),
                Some(1),
                Some(0xf),
                Some(0x10),
                Some(0x1234),
                Some(0xff_ffff),
            ] {
                let mut s = Side::default();
                (s.addr, s.qpn) = (addr, qpn);
                let mut want = addr.map_or("?".to_string(), |a| a.to_string());
                if let Some(q) = qpn {
                    let _ = write!(want, " qp {q:#x}");
                }
                let mut got = String::new();
                endpoint_into(&mut got, &s);
                assert_eq!(got, want);
            }
        }
        for n in [0u64, 7, 10, 99, 1234, 99_999, 123_456_789, u64::MAX] {
            for w in [0, 1, 4, 8, 11] {
                let mut got = String::from("x");
                push_u64_right(&mut got, n, w);
                assert_eq!(got, format!("x{n:>w$}"));
            }
        }
        for text in ["", "ok", "udp_sport", "a text longer than its column"] {
            for w in [0, 2, 9, 22] {
                let mut right = String::from("x");
                right.push_str(text);
                pad_right(&mut right, 1, w);
                assert_eq!(right, format!("x{text:<w$}"));
                let mut left = String::from("x");
                left.push_str(text);
                pad_left(&mut left, 1, w);
                assert_eq!(left, format!("x{text:>w$}"));
            }
        }
    }
}
