//! The JSON objects of the report written straight to the output (serde's `Serialize`), not
//! built as `serde_json::Value` trees first: a capture of 100 k connections has 100 k objects
//! of about 250 keys each, and building the trees cost more than the analysis.
//!
//! The bytes equal those of the `Value`s (whose maps sort their keys): every object here
//! writes its keys in sorted (byte) order, names chosen at run time included. The module's
//! tests check that against a `Value` round trip.
use std::sync::OnceLock;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::side::endpoint;
use super::stats::Dist;
use super::{Cause, Connection, Event, Side, NAK_KINDS, OPS};

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The indices of `names` in sorted order.
fn sorted<const N: usize>(names: [&'static str; N]) -> [usize; N] {
    let mut idx: [usize; N] = core::array::from_fn(|i| i);
    idx.sort_by_key(|&i| names[i]);
    idx
}

fn ops_sorted() -> &'static [usize; 7] {
    static S: OnceLock<[usize; 7]> = OnceLock::new();
    S.get_or_init(|| sorted(OPS))
}

fn naks_sorted() -> &'static [usize; 6] {
    static S: OnceLock<[usize; 6]> = OnceLock::new();
    S.get_or_init(|| sorted(NAK_KINDS))
}

fn causes_sorted() -> &'static [usize; 5] {
    static S: OnceLock<[usize; 5]> = OnceLock::new();
    S.get_or_init(|| sorted(Cause::ALL.map(Cause::name)))
}

/// Declares a borrowed view and its `Serialize` as one JSON object whose entries the body
/// writes into the map `$m`.
macro_rules! object {
    ($(#[$doc:meta])* $name:ident($($f:ident: $ty:ty),*) |$m:ident| $body:block) => {
        $(#[$doc])*
        struct $name<'a>($($ty),*, core::marker::PhantomData<&'a ()>);
        impl Serialize for $name<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let $name($($f),*, _) = *self;
                let mut $m = s.serialize_map(None)?;
                $body
                $m.end()
            }
        }
    };
}

/// Makes a view of [`object!`].
macro_rules! view {
    ($name:ident($($e:expr),*)) => {
        $name($($e),*, core::marker::PhantomData)
    };
}

/// The latency measures of a side, in sorted order of their names.
fn measures(s: &Side) -> [(&'static str, &Dist); 8] {
    let mut m = s.measures();
    m.sort_unstable_by_key(|x| x.0);
    m
}

object!(
    /// A distribution of times: count, and max, p50, p99 in µs.
    DistUs(d: &'a Dist) |m| {
        m.serialize_entry("count", &d.count())?;
        m.serialize_entry("max", &us(d.max()))?;
        m.serialize_entry("p50", &us(d.quantile(0.5)))?;
        m.serialize_entry("p99", &us(d.quantile(0.99)))?;
    }
);

object!(
    /// A distribution of plain numbers.
    DistN(d: &'a Dist) |m| {
        m.serialize_entry("count", &d.count())?;
        m.serialize_entry("max", &d.max())?;
        m.serialize_entry("p50", &d.quantile(0.5))?;
        m.serialize_entry("p99", &d.quantile(0.99))?;
    }
);

object!(
    /// Messages of one kind.
    Messages(count: u64, bytes: u64) |m| {
        m.serialize_entry("bytes", &bytes)?;
        m.serialize_entry("count", &count)?;
    }
);

object!(
    /// A side's latency measures that have samples.
    SideLatency(s: &'a Side) |m| {
        for (name, d) in measures(s) {
            if d.count() > 0 {
                m.serialize_entry(name, &view!(DistUs(d)))?;
            }
        }
    }
);

object!(
    /// A side's messages by kind, the kinds it sent.
    SideMessages(s: &'a Side) |m| {
        for &i in ops_sorted() {
            if s.messages[i] > 0 {
                m.serialize_entry(OPS[i], &view!(Messages(s.messages[i], s.message_bytes[i])))?;
            }
        }
    }
);

object!(
    /// NAKs by kind, of one side or (with two) both.
    Naks(a: &'a [u64; 6], b: Option<&'a [u64; 6]>) |m| {
        for &i in naks_sorted() {
            m.serialize_entry(NAK_KINDS[i], &(a[i] + b.map_or(0, |b| b[i])))?;
        }
    }
);

object!(
    /// Retransmission episodes by cause, of one side or (with two) both.
    Episodes(a: &'a [u64; 5], b: Option<&'a [u64; 5]>) |m| {
        for &i in causes_sorted() {
            m.serialize_entry(Cause::ALL[i].name(), &(a[i] + b.map_or(0, |b| b[i])))?;
        }
    }
);

object!(
    /// One side of a connection.
    SideJson(s: &'a Side) |m| {
        m.serialize_entry("addr", &s.addr.map(|a| a.to_string()))?;
        m.serialize_entry("bytes", &s.bytes)?;
        m.serialize_entry("cnps", &s.cnps)?;
        m.serialize_entry("duplicates", &s.duplicates)?;
        m.serialize_entry("ecn_ce", &s.ecn_ce)?;
        m.serialize_entry("first_s", &(s.first_t as f64 / 1e9))?;
        m.serialize_entry("ghost_acks", &s.ghost_acks)?;
        m.serialize_entry("goodput_gbps", &s.goodput_gbps())?;
        m.serialize_entry("icrc_bad", &s.icrc_bad)?;
        m.serialize_entry("last_s", &(s.last_t as f64 / 1e9))?;
        m.serialize_entry("latency_us", &view!(SideLatency(s)))?;
        m.serialize_entry("messages", &view!(SideMessages(s)))?;
        m.serialize_entry("missed_by_capture", &s.missed_by_capture)?;
        m.serialize_entry("naks", &view!(Naks(&s.naks, None)))?;
        m.serialize_entry("never_seen_psns", &s.never_seen_psns)?;
        m.serialize_entry("out_of_order", &s.out_of_order)?;
        m.serialize_entry("packets", &s.packets)?;
        m.serialize_entry("psn_first", &s.psn_first)?;
        m.serialize_entry("psn_gaps", &s.psn_gaps)?;
        m.serialize_entry("psn_last", &s.psn_last)?;
        m.serialize_entry("psn_wraps", &s.psn_wraps)?;
        m.serialize_entry("qpn", &s.qpn)?;
        if s.rate_after_cnp_pct.count() > 0 {
            m.serialize_entry("rate_after_cnp_pct", &view!(DistN(&s.rate_after_cnp_pct)))?;
        }
        m.serialize_entry("read_response_mismatches", &s.read_response_mismatches)?;
        m.serialize_entry("requests", &s.requests)?;
        m.serialize_entry("responses", &s.responses)?;
        m.serialize_entry("retransmission_episodes", &view!(Episodes(&s.episodes, None)))?;
        m.serialize_entry("retransmitted_packets", &s.retransmitted_packets)?;
        m.serialize_entry("stale_acks", &s.stale_acks)?;
        m.serialize_entry("stalls", &s.stalls)?;
        m.serialize_entry("unseen_read_responses", &s.unseen_read_responses)?;
    }
);

object!(
    /// A connection's latency measures, each from the side that has more of it.
    ConnLatency(x: &'a Side, y: &'a Side) |m| {
        for ((name, a), (_, b)) in measures(x).into_iter().zip(measures(y)) {
            let d = if a.count() >= b.count() { a } else { b };
            if d.count() > 0 {
                m.serialize_entry(name, &view!(DistUs(d)))?;
            }
        }
    }
);

object!(
    /// A connection's messages by kind, every kind.
    ConnMessages(x: &'a Side, y: &'a Side) |m| {
        for &i in ops_sorted() {
            let (count, bytes) = (x.messages[i] + y.messages[i], x.message_bytes[i] + y.message_bytes[i]);
            m.serialize_entry(OPS[i], &view!(Messages(count, bytes)))?;
        }
    }
);

object!(
    /// A verdict.
    VerdictJson(v: &'a super::Verdict) |m| {
        m.serialize_entry("detail", &v.detail)?;
        m.serialize_entry("frames", &v.frames)?;
        m.serialize_entry("result", v.result)?;
        m.serialize_entry("rule", v.rule)?;
    }
);

object!(
    /// A connection's PAUSE and PFC frames.
    ConnPfc(p: &'a super::ConnectionPfc) |m| {
        m.serialize_entry("paused_us", &us(p.paused_ns))?;
        m.serialize_entry("pauses", &p.pauses)?;
        m.serialize_entry("priority", &p.priority)?;
        m.serialize_entry("stalls_covered", &p.stalls_covered)?;
        m.serialize_entry("storms", &p.storms)?;
        m.serialize_entry("victim", &p.victim)?;
    }
);

object!(
    /// A connection (`type: connection`).
    ConnJson(c: &'a Connection) |m| {
        let [x, y] = &c.sides;
        let sum = |f: fn(&Side) -> u64| f(x) + f(y);
        m.serialize_entry("bytes", &sum(|s| s.bytes))?;
        m.serialize_entry("cnps", &sum(|s| s.cnps))?;
        m.serialize_entry("duplicates", &sum(|s| s.duplicates))?;
        m.serialize_entry("ecn_ce", &sum(|s| s.ecn_ce))?;
        m.serialize_entry("endpoints", &[endpoint(x), endpoint(y)])?;
        m.serialize_entry("events_dropped", &c.events_dropped)?;
        m.serialize_entry("ghost_acks", &sum(|s| s.ghost_acks))?;
        m.serialize_entry("icrc_bad", &sum(|s| s.icrc_bad))?;
        m.serialize_entry("id", &c.id)?;
        m.serialize_entry("latency_us", &view!(ConnLatency(x, y)))?;
        let message_count: u64 = x.messages.iter().chain(&y.messages).sum();
        m.serialize_entry("message_count", &message_count)?;
        m.serialize_entry("messages", &view!(ConnMessages(x, y)))?;
        m.serialize_entry("missed_by_capture", &sum(|s| s.missed_by_capture))?;
        m.serialize_entry("naks", &view!(Naks(&x.naks, Some(&y.naks))))?;
        m.serialize_entry("naks_followed_by_cnp", &c.naks_and_cnps.1)?;
        m.serialize_entry("never_seen_psns", &sum(|s| s.never_seen_psns))?;
        m.serialize_entry("out_of_order", &sum(|s| s.out_of_order))?;
        m.serialize_entry("packets", &sum(|s| s.packets))?;
        m.serialize_entry("paired_by", c.paired_by)?;
        m.serialize_entry("peer_process_ended", &c.peer_ended.map(|t| t as f64 / 1e9))?;
        m.serialize_entry("pfc", &view!(ConnPfc(&c.pfc)))?;
        m.serialize_entry("psn_gaps", &sum(|s| s.psn_gaps))?;
        m.serialize_entry("read_response_mismatches", &sum(|s| s.read_response_mismatches))?;
        m.serialize_entry("retransmission_episodes", &view!(Episodes(&x.episodes, Some(&y.episodes))))?;
        m.serialize_entry("retransmitted_packets", &sum(|s| s.retransmitted_packets))?;
        m.serialize_entry("sides", &[view!(SideJson(x)), view!(SideJson(y))])?;
        m.serialize_entry("stale_acks", &sum(|s| s.stale_acks))?;
        m.serialize_entry("stalls", &sum(|s| s.stalls))?;
        m.serialize_entry("type", "connection")?;
        m.serialize_entry("unseen_read_responses", &sum(|s| s.unseen_read_responses))?;
        let verdicts = c.verdicts();
        let v: Vec<_> = verdicts.iter().map(|v| view!(VerdictJson(v))).collect();
        m.serialize_entry("verdicts", &v)?;
    }
);

object!(
    /// An event (`type: event`).
    EventJson(e: &'a Event) |m| {
        m.serialize_entry("cause", &e.cause.map(Cause::name))?;
        m.serialize_entry("connection", &(e.connection + 1))?;
        m.serialize_entry("detail", &e.detail)?;
        m.serialize_entry("frame", &e.frame)?;
        m.serialize_entry("kind", e.kind.name())?;
        m.serialize_entry("psn", &e.psn)?;
        m.serialize_entry("side", &e.side)?;
        m.serialize_entry("t", &(e.t as f64 / 1e9))?;
        m.serialize_entry("type", "event")?;
    }
);

fn line_of(o: &mut Vec<u8>, v: &impl Serialize) {
    // Writing to a Vec cannot fail, and these objects always serialize.
    let _ = serde_json::to_writer(&mut *o, v);
    o.push(b'\n');
}

/// Writes the JSON object of a connection (`type: connection`) and a newline to `o`.
pub(super) fn connection_line(o: &mut Vec<u8>, c: &Connection) {
    line_of(o, &view!(ConnJson(c)));
}

/// Writes the JSON object of an event (`type: event`) and a newline to `o`.
pub(super) fn event_line(o: &mut Vec<u8>, e: &Event) {
    line_of(o, &view!(EventJson(e)));
}

/// The JSON object of a connection as a `Value`.
pub(super) fn connection_value(c: &Connection) -> serde_json::Value {
    serde_json::to_value(view!(ConnJson(c))).unwrap_or_default()
}

/// The JSON object of an event as a `Value`.
pub(super) fn event_value(e: &Event) -> serde_json::Value {
    serde_json::to_value(view!(EventJson(e))).unwrap_or_default()
}
