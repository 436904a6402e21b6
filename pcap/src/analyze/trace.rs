//! The analysis as a Chrome/Perfetto trace-event JSON (the "JSON Array/Object Format" that
//! `ui.perfetto.dev` and `chrome://tracing` open): one process per connection, one track
//! (thread) per QP, messages as complete slices, events as instants, the sender's rate as
//! a counter.
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
    let doc = json!({"traceEvents": ev, "displayTimeUnit": "ns"});
    serde_json::to_writer(&mut *out, &doc)?;
    writeln!(out)
}
