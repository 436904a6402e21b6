//! The analysis as a Chrome/Perfetto trace-event JSON (the "JSON Array/Object Format" that
//! `ui.perfetto.dev` and `chrome://tracing` open): one process per connection, one track
//! (thread) per QP, messages as complete slices, events as instants, the sender's rate as
//! a counter. With several captures (`roce analyze A B ...`), one process more per capture:
//! a track per direction it is upstream of, each packet lost between it and the next capture
//! point an instant when it passed, on the first capture's clock.
use std::io::Write;

use serde_json::{json, Value};

use super::{Analysis, OPS};

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// Writes the trace of `a` to `out`.
pub(crate) fn write<W: Write + ?Sized>(a: &Analysis, out: &mut W) -> std::io::Result<()> {
    let mut ev: Vec<Value> = Vec::new();
    for c in &a.connections {
        let pid = c.id;
        ev.push(json!({"ph": "M", "name": "process_name", "pid": pid,
            "args": {"name": format!("connection {} ({})", c.id, c.paired_by)}}));
        for (tid, s) in c.sides.iter().enumerate() {
            let name = match s.addr {
                Some(_) => super::side::endpoint(s),
                None => format!("side {tid}"),
            };
            ev.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                "args": {"name": name}}),
            );
            for &(start, end, op) in &s.slices {
                ev.push(
                    json!({"ph": "X", "name": OPS[usize::from(op)], "cat": "message",
                    "pid": pid, "tid": tid, "ts": us(start), "dur": us(end.saturating_sub(start))}),
                );
            }
            let window_s = s.rate_window_ns.max(1) as f64 / 1e9;
            for &(w, b) in &s.rate {
                ev.push(
                    json!({"ph": "C", "name": format!("rate side {tid} (Gb/s)"), "pid": pid,
                    "ts": us(w), "args": {"Gb/s": b as f64 * 8.0 / window_s / 1e9}}),
                );
            }
        }
        for e in &c.events {
            let mut args = json!({"frame": e.frame, "psn": e.psn});
            if let Some(cause) = e.cause {
                args["cause"] = json!(cause.name());
            }
            if !e.detail.is_empty() {
                args["detail"] = json!(e.detail);
            }
            ev.push(
                json!({"ph": "i", "s": "t", "name": e.kind.name(), "cat": "event",
                "pid": pid, "tid": e.side, "ts": us(e.t), "args": args}),
            );
        }
    }
    captures(a, &mut ev);
    let doc = json!({"traceEvents": ev, "displayTimeUnit": "ns"});
    serde_json::to_writer(&mut *out, &doc)?;
    writeln!(out)
}

/// The process numbers of the captures start here (connections count from 1).
const CAPTURE_PID: usize = 1 << 24;

/// The processes of [`Analysis::captures`]: one per capture, one track per direction it is
/// upstream of (named with what the pair's matching found), every packet of
/// [`Localisation::frames`](super::Localisation) an instant `lost_between` at the time it
/// passed that capture. Times are on the first capture's clock (the analysis's), through
/// the offset of the pair each capture forms with it; a capture that shares no traffic with
/// the first keeps its own clock (`clock: own` in its process's name).
fn captures(a: &Analysis, ev: &mut Vec<Value>) {
    let Some(first) = a.captures.first() else {
        return;
    };
    let origin = a.first_ns.unwrap_or(0);
    for (i, name) in a.captures.iter().enumerate() {
        let pid = CAPTURE_PID + i;
        // This capture's clock minus the first's.
        let offset = if i == 0 {
            Some(0)
        } else {
            a.localised.iter().find_map(|l| {
                if l.from == *first && l.to == *name {
                    Some(l.clock_offset_ns)
                } else if l.from == *name && l.to == *first {
                    Some(l.clock_offset_ns.saturating_neg())
                } else {
                    None
                }
            })
        };
        let clock = if offset.is_some() { "" } else { ", clock: own" };
        ev.push(json!({"ph": "M", "name": "process_name", "pid": pid,
            "args": {"name": format!("capture {name}{clock}")}}));
        let upstream = a.localised.iter().filter(|l| l.from == *name);
        for (tid, l) in upstream.enumerate() {
            ev.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                "args": {"name": format!(
                    "{} -> {} to {}: {} matched, {} lost between, {} only downstream",
                    l.src, l.dst, l.to, l.matched, l.lost_between, l.only_downstream
                )}}),
            );
            for (&frame, &at) in l.frames.iter().zip(&l.lost_at) {
                let t = at
                    .saturating_sub(offset.unwrap_or(0))
                    .saturating_sub(origin);
                ev.push(
                    json!({"ph": "i", "s": "t", "name": "lost_between", "cat": "loss",
                    "pid": pid, "tid": tid, "ts": t as f64 / 1e3,
                    "args": {"frame": frame, "to": l.to}}),
                );
            }
        }
    }
}
