//! The NIC's own counters, given beside a capture (`roce analyze --counters ADDR=FILE`), and
//! what the capture shows of each: `ethtool -S` (`name: value` lines), `rdma statistic show`
//! (`link mlx5_0/1 name value name value ...`) or `rdma -j statistic show` (a JSON array of
//! objects). One file is read as the counts over the capture; two as a snapshot before it
//! and one after (the counts are their differences). The names are mlx5's, which the rdma
//! tool shows for other NICs too where they count the same thing.
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use super::Analysis;

/// Counters kept from one file at most, and the longest name read: a file is input, and a
/// NIC has a few hundred.
const MAX_COUNTERS: usize = 4096;
const MAX_NAME: usize = 128;

/// Why a counters file could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountersError {
    /// Nothing in it reads as a counter.
    Empty,
    /// More counters than a file is read for (4,096).
    TooMany,
    /// A snapshot after has a counter lower than the one before (reset, or another NIC).
    WentBack(String),
}

impl fmt::Display for CountersError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "no counter in it (ethtool -S, rdma statistic show, or rdma -j statistic show output)"),
            Self::TooMany => write!(f, "more than {MAX_COUNTERS} counters"),
            Self::WentBack(n) => write!(f, "counter {n} is lower after than before: a reset, or another NIC's"),
        }
    }
}

impl std::error::Error for CountersError {}

fn name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_NAME
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        && !n.bytes().all(|b| b.is_ascii_digit())
}

/// Reads one snapshot: every `name: value`, `name value` pair or JSON number member (names
/// of letters, digits, `_` and `.`; values unsigned integers). Counters of several ports in
/// one file are summed by name.
pub fn parse(text: &str) -> Result<BTreeMap<String, u64>, CountersError> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    let mut add = |n: &str, v: u64| -> Result<(), CountersError> {
        if !name_ok(n) {
            return Ok(());
        }
        if !out.contains_key(n) && out.len() >= MAX_COUNTERS {
            return Err(CountersError::TooMany);
        }
        let e = out.entry(n.to_string()).or_insert(0);
        *e = e.saturating_add(v);
        Ok(())
    };
    if let Ok(serde_json::Value::Array(ports)) = serde_json::from_str::<serde_json::Value>(text) {
        for p in ports.iter().filter_map(|p| p.as_object()) {
            for (k, v) in p {
                if let Some(v) = v.as_u64() {
                    add(k, v)?;
                }
            }
        }
    } else {
        for line in text.lines() {
            let t: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || c == ':')
                .filter(|w| !w.is_empty())
                .collect();
            // `name value` pairs anywhere on the line (ethtool's one per line, rdma's many).
            let mut i = 0;
            while i + 1 < t.len() {
                match t[i + 1].parse::<u64>() {
                    Ok(v) if name_ok(t[i]) => {
                        add(t[i], v)?;
                        i += 2;
                    }
                    _ => i += 1,
                }
            }
        }
    }
    if out.is_empty() {
        return Err(CountersError::Empty);
    }
    Ok(out)
}

/// The counts over the capture: `after` less `before` when both are given.
pub fn delta(
    before: Option<&BTreeMap<String, u64>>,
    after: &BTreeMap<String, u64>,
) -> Result<BTreeMap<String, u64>, CountersError> {
    let Some(b) = before else {
        return Ok(after.clone());
    };
    let mut out = BTreeMap::new();
    for (k, &v) in after {
        let was = b.get(k).copied().unwrap_or(0);
        if v < was {
            return Err(CountersError::WentBack(k.clone()));
        }
        out.insert(k.clone(), v - was);
    }
    Ok(out)
}

/// A host's counters, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCounters {
    /// The host's RoCE address (the sides of the capture sent from it are its).
    pub addr: IpAddr,
    /// The counts over the capture, by name.
    pub counts: BTreeMap<String, u64>,
}

/// One counter beside what the capture shows of the same thing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterCheck {
    /// The host.
    pub addr: IpAddr,
    /// The counter's name.
    pub counter: &'static str,
    /// Its count.
    pub value: u64,
    /// What the capture shows of it at this host.
    pub capture: u64,
    /// What it counts, in words.
    pub what: &'static str,
}

impl CounterCheck {
    /// `true` when the two agree: equal, or within 1 % of the larger.
    pub fn agrees(&self) -> bool {
        let (hi, lo) = (self.value.max(self.capture), self.value.min(self.capture));
        hi - lo <= hi / 100
    }
}

/// A counter [`reconcile`] knows: its name, what it counts, and the capture's count of it.
type Known = (&'static str, &'static str, fn(&Tally) -> u64);

/// The counters [`reconcile`] knows.
const KNOWN: [Known; 9] = [
    (
        "np_cnp_sent",
        "CNPs it sent (as the receiver, the notification point)",
        |t| t.cnps_sent,
    ),
    (
        "rp_cnp_handled",
        "CNPs it received (as the sender, the reaction point)",
        |t| t.cnps_received,
    ),
    (
        "np_ecn_marked_roce_packets",
        "CE-marked RoCE packets it received",
        |t| t.ce_received,
    ),
    (
        "out_of_buffer",
        "RNR NAKs it sent (a SEND found no receive posted)",
        |t| t.rnr_sent,
    ),
    ("packet_seq_err", "sequence-error NAKs it received", |t| {
        t.seq_naks_received
    }),
    ("out_of_sequence", "sequence-error NAKs it sent", |t| {
        t.seq_naks_sent
    }),
    (
        "local_ack_timeout_err",
        "its retransmission episodes after its ACK timer fired",
        |t| t.timeouts,
    ),
    (
        "implied_nak_seq_err",
        "its retransmission episodes after an implied NAK",
        |t| t.implied,
    ),
    (
        "duplicate_request",
        "request packets it received again",
        |t| t.duplicates_received,
    ),
];

/// What the capture counts of one host.
#[derive(Debug, Default)]
struct Tally {
    cnps_sent: u64,
    cnps_received: u64,
    ce_received: u64,
    rnr_sent: u64,
    seq_naks_received: u64,
    seq_naks_sent: u64,
    timeouts: u64,
    implied: u64,
    duplicates_received: u64,
    packets_sent: u64,
}

fn tally(a: &Analysis, addr: IpAddr) -> Tally {
    let mut t = Tally::default();
    for c in &a.connections {
        for (i, s) in c.sides.iter().enumerate() {
            if s.addr != Some(addr) || s.packets == 0 {
                continue;
            }
            let peer = &c.sides[1 - i];
            t.packets_sent += s.packets;
            t.cnps_sent += s.cnps;
            t.cnps_received += peer.cnps;
            t.ce_received += peer.ecn_ce;
            t.rnr_sent += s.naks[1];
            t.seq_naks_sent += s.naks[0];
            t.seq_naks_received += peer.naks[0];
            t.timeouts += s.episodes[2];
            t.implied += s.episodes[3];
            t.duplicates_received += peer.retransmitted_packets + peer.duplicates;
        }
    }
    t
}

/// Each known counter of each host beside what the capture shows of it.
pub fn reconcile(a: &Analysis) -> Vec<CounterCheck> {
    let mut out = Vec::new();
    for h in &a.counters {
        let t = tally(a, h.addr);
        for (name, what, of) in KNOWN {
            if let Some(&value) = h.counts.get(name) {
                out.push(CounterCheck {
                    addr: h.addr,
                    counter: name,
                    value,
                    capture: of(&t),
                    what,
                });
            }
        }
    }
    out
}

/// What the capture shows the host at `addr` sent, in packets (for the findings: counters of
/// a host the capture has nothing of are another host's, or the wrong address).
pub(super) fn packets_sent(a: &Analysis, addr: IpAddr) -> u64 {
    tally(a, addr).packets_sent
}

/// The findings the counters give: counters the capture disagrees with, the notification
/// point's counters read at the sender (question 4), counters of a host the capture has
/// nothing from.
pub(super) fn counter_findings(a: &Analysis, out: &mut Vec<super::finding::Finding>) {
    let checks = reconcile(a);
    for h in &a.counters {
        if packets_sent(a, h.addr) == 0 {
            out.push(super::finding::Finding {
                name: "counters_host_not_in_capture",
                connection: None,
                side: None,
                frames: Vec::new(),
                detail: format!("counters were given for {}, and no packet of the capture comes from it", h.addr),
                advice: "Give each host's counters with its RoCE address (the one its packets come from), or capture where that host's traffic passes.",
            });
            continue;
        }
        let get = |n: &str| h.counts.get(n).copied();
        if get("rp_cnp_handled").is_some_and(|v| v > 0)
            && get("np_cnp_sent").unwrap_or(0) == 0
            && get("np_ecn_marked_roce_packets").unwrap_or(0) == 0
        {
            out.push(super::finding::Finding {
                name: "np_counters_at_the_sender",
                connection: None,
                side: None,
                frames: Vec::new(),
                detail: format!(
                    "{}: np_cnp_sent and np_ecn_marked_roce_packets are 0 and rp_cnp_handled is {}: CNPs did reach this sender",
                    h.addr,
                    get("rp_cnp_handled").unwrap_or(0)
                ),
                advice: "The notification point's counters (np_*) count at the receiver, the one that sees the CE marks and sends the CNPs; at a sender they stay 0 whatever ECN does: read them on the receiving host (its rp_* stay 0 in turn).",
            });
        }
        let off: Vec<String> = checks
            .iter()
            .filter(|c| c.addr == h.addr && !c.agrees())
            .map(|c| {
                format!(
                    "{} {} where the capture has {} ({})",
                    c.counter, c.value, c.capture, c.what
                )
            })
            .collect();
        if !off.is_empty() {
            out.push(super::finding::Finding {
                name: "counters_disagree",
                connection: None,
                side: None,
                frames: Vec::new(),
                detail: format!("{}: {}", h.addr, off.join("; ")),
                advice: "A counter counts what the NIC did over the time it was read and on every QP and port it covers; the capture what passed its tap: a counter above the capture is traffic the capture missed or that came outside it (read the counters just before and after the capture), one below it is counted elsewhere (another port, a reset).",
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_formats_read_the_same() {
        let ethtool =
            "NIC statistics:\n     rx_packets: 12\n     np_cnp_sent: 5\n     rp_cnp_handled: 144\n";
        let rdma = "link mlx5_0/1 rp_cnp_handled 144 np_cnp_sent 5 rx_packets 12\n";
        let json = r#"[{"ifname":"mlx5_0","port":1,"rp_cnp_handled":144,"np_cnp_sent":5,"rx_packets":12}]"#;
        let want: BTreeMap<String, u64> = [
            ("np_cnp_sent", 5),
            ("rp_cnp_handled", 144),
            ("rx_packets", 12),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for text in [ethtool, rdma] {
            assert_eq!(parse(text).unwrap(), want, "{text}");
        }
        let mut j = want.clone();
        j.insert("port".into(), 1);
        assert_eq!(parse(json).unwrap(), j);
        // Two ports: summed.
        let two = "link mlx5_0/1 np_cnp_sent 5\nlink mlx5_0/2 np_cnp_sent 7\n";
        assert_eq!(parse(two).unwrap()["np_cnp_sent"], 12);
        assert_eq!(parse("hello\n\n"), Err(CountersError::Empty));
        let many: String = (0..5000).map(|i| format!("c{i}: 1\n")).collect();
        assert_eq!(parse(&many), Err(CountersError::TooMany));
    }

    #[test]
    fn a_delta_is_after_less_before_and_refuses_going_back() {
        let b = parse("x: 10\ny: 3\n").unwrap();
        let a = parse("x: 15\ny: 3\nz: 2\n").unwrap();
        let d = delta(Some(&b), &a).unwrap();
        assert_eq!((d["x"], d["y"], d["z"]), (5, 0, 2));
        assert_eq!(
            delta(Some(&a), &b),
            Err(CountersError::WentBack("x".into()))
        );
        assert_eq!(delta(None, &a).unwrap(), a);
    }
}
