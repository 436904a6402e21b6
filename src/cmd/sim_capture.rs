//! The simulators' captures: `--pcap` (what reaches each receiver, with the switches' PFC
//! frames) and `--pcap-at ADDR=FILE[@OFFSET_US[:JITTER_NS]]`, a capture at one host's NIC
//! (what it sends as it leaves, what it receives as it arrives) whose clock may be off the
//! simulation's and noisy, as two real capture hosts' clocks are, and that may miss a share of
//! the datagrams (a capture ring that overflows). Several `--pcap-at` give the captures of one
//! run at several points, and the run knows what `roce analyze A B` should find between
//! them: every datagram lost after one captured host sent it, and every one a capture missed,
//! with its frame number and stamp in the capture that has it ([`Truth`], in `--json` as
//! `captures`).
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use roce_pcap::tap::DatagramCapture;
use roce_stack::rng::Rng;
use roce_stack::sim::{Tap, TapEvent, TapKind};
use serde_json::{json, Value};

/// Captures one run may take with `--pcap-at`.
pub(crate) const MAX_POINTS: usize = 8;
/// The largest clock offset of a capture point, µs (an hour).
const MAX_OFFSET_US: i64 = 3_600_000_000;
/// The largest time-stamping noise of a capture point, ns (a millisecond).
const MAX_JITTER_NS: u64 = 1_000_000;
/// Hosts named when a capture point's address is none of them.
const MAX_HOSTS_NAMED: usize = 6;
/// Lost datagrams listed per direction in [`Truth`] (all are counted).
const LISTED: usize = 10_000;
/// Datagrams a capture point follows until they arrive or are lost (the ones in flight).
const MAX_IN_FLIGHT: usize = 1 << 20;

/// A `--pcap-at` capture point.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PointSpec {
    /// The host whose NIC it captures at.
    pub(crate) addr: IpAddr,
    /// The file written.
    pub(crate) path: PathBuf,
    /// Its clock minus the simulation's, ns.
    pub(crate) offset_ns: i64,
    /// Each stamp off by up to this much either way, ns (kept in order).
    pub(crate) jitter_ns: u64,
    /// The share of datagrams it misses (as a capture ring or a mirror port that overflows).
    pub(crate) miss: f64,
}

/// Parses `ADDR=FILE[@OFFSET_US[:JITTER_NS[:MISS]]]`.
pub(crate) fn parse_point(s: &str) -> anyhow::Result<PointSpec> {
    let usage = "ADDR=FILE[@OFFSET_US[:JITTER_NS[:MISS]]]";
    let (addr, rest) = s
        .split_once('=')
        .with_context(|| format!("--pcap-at {s}: expected {usage}"))?;
    let addr: IpAddr = addr
        .parse()
        .with_context(|| format!("--pcap-at {s}: {addr} is not an IP address"))?;
    // A FILE may hold '@': the suffix counts only when it reads as a clock.
    let clock = rest.rsplit_once('@').and_then(|(path, c)| {
        let mut it = c.splitn(3, ':');
        let off = it.next()?.parse::<f64>().ok()?;
        let jit = it.next().unwrap_or("0").parse::<u64>().ok()?;
        let miss = it.next().unwrap_or("0").parse::<f64>().ok()?;
        Some((path, off, jit, miss))
    });
    let (path, offset_us, jitter_ns, miss) = clock.unwrap_or((rest, 0.0, 0, 0.0));
    if path.is_empty() {
        bail!("--pcap-at {s}: no file (expected {usage})");
    }
    if !offset_us.is_finite() || offset_us.abs() > MAX_OFFSET_US as f64 {
        bail!("--pcap-at {s}: the clock offset must be within ±{MAX_OFFSET_US} us");
    }
    if jitter_ns > MAX_JITTER_NS {
        bail!("--pcap-at {s}: the jitter must be at most {MAX_JITTER_NS} ns");
    }
    if !(0.0..1.0).contains(&miss) {
        bail!("--pcap-at {s}: the share missed must be at least 0 and below 1");
    }
    Ok(PointSpec {
        addr,
        path: PathBuf::from(path),
        offset_ns: (offset_us * 1e3).round() as i64,
        jitter_ns,
        miss,
    })
}

/// The simulation's time zero in its captures: an hour after the Unix epoch, so that a
/// capture point's clock up to [`MAX_OFFSET_US`] behind still stamps after the epoch.
const ZERO_NS: i64 = 3_600_000_000_000;

/// The stamp of `ns` since the simulation's time zero.
fn stamp(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(ns.saturating_add(ZERO_NS)).unwrap_or(0))
}

/// One capture point while the run goes.
struct Point {
    spec: PointSpec,
    cap: DatagramCapture,
    rng: Rng,
    first_stamp: Option<i64>,
    /// The last stamp, ns since the simulation's time zero (stamps never go back).
    last_stamp: i64,
    frames: u64,
    /// What this host sent that has not arrived nor been lost, by the simulator's number of
    /// the datagram: its frame and stamp, or `None` when this capture missed it.
    in_flight: HashMap<u64, Option<(u64, i64)>>,
}

impl Point {
    /// Writes the datagram at simulation time `t`: its frame number and stamp, or `None`
    /// when the capture misses it ([`PointSpec::miss`]).
    fn record(&mut self, t: u64, ev: &TapEvent<'_>) -> Option<(u64, i64)> {
        if self.spec.miss > 0.0 && self.rng.unit() < self.spec.miss {
            return None;
        }
        let j = self.spec.jitter_ns as i64;
        let noise = if j > 0 {
            (self.rng.next_u64() % (2 * j as u64 + 1)) as i64 - j
        } else {
            0
        };
        let ns = i64::try_from(t)
            .unwrap_or(i64::MAX)
            .saturating_add(self.spec.offset_ns)
            .saturating_add(noise)
            .max(self.last_stamp);
        self.last_stamp = ns;
        self.first_stamp.get_or_insert(ns);
        let src = SocketAddr::new(ev.src, ev.src_port);
        let dst = SocketAddr::new(ev.dst, ev.dst_port);
        // A failed write is kept by the capture and said when it is finished.
        let _ = self.cap.record(stamp(ns), src, dst, ev.ecn, ev.datagram);
        self.frames += 1;
        Some((self.frames, ns))
    }
}

/// What the captures of a run should show, per direction (sender, receiver).
#[derive(Debug, Default)]
pub(crate) struct Truth {
    dirs: BTreeMap<(IpAddr, IpAddr), DirTruth>,
}

/// One direction's truth: datagrams as (frame, stamp: ns since the simulation's time zero
/// on that capture's clock).
#[derive(Debug, Default)]
struct DirTruth {
    /// Lost in the network after the sender's capture saw them (frames in it).
    lost: Listed,
    /// Delivered, seen by the receiver's capture, missed by the sender's (frames in the
    /// receiver's): what a comparison calls seen downstream only.
    missed_upstream: Listed,
    /// Delivered, seen by the sender's capture, missed by the receiver's (frames in the
    /// sender's): what a comparison cannot tell from a loss between.
    missed_downstream: Listed,
}

/// A count, and the first [`LISTED`] of what it counts.
#[derive(Debug, Default)]
struct Listed {
    count: u64,
    listed: Vec<(u64, i64)>,
}

impl Listed {
    fn add(&mut self, x: (u64, i64)) {
        self.count += 1;
        if self.listed.len() < LISTED {
            self.listed.push(x);
        }
    }

    fn json(&self) -> Value {
        json!({
            "count": self.count,
            "frames": self.listed.iter().map(|x| x.0).collect::<Vec<_>>(),
            "at_ns": self.listed.iter().map(|x| x.1).collect::<Vec<_>>(),
        })
    }
}

struct State {
    delivered: Option<DatagramCapture>,
    /// The run's hosts (the first [`MAX_HOSTS_NAMED`], to name when a capture point names
    /// none of them), and whether each capture point's address is one.
    hosts: Vec<IpAddr>,
    is_host: Vec<bool>,
    points: Vec<Point>,
    truth: Truth,
}

impl State {
    fn point_of(&mut self, addr: IpAddr) -> Option<&mut Point> {
        self.points.iter_mut().find(|p| p.spec.addr == addr)
    }
}

struct Shared(Arc<Mutex<State>>);

impl Tap for Shared {
    fn on_datagram(&mut self, ev: &TapEvent<'_>) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let t = ev.time.as_nanos();
        match ev.kind {
            TapKind::Sent => {
                if let Some(p) = s.point_of(ev.src) {
                    let seen = p.record(t, ev);
                    if p.in_flight.len() < MAX_IN_FLIGHT {
                        p.in_flight.insert(ev.id, seen);
                    }
                }
            }
            TapKind::Delivered | TapKind::Lost => {
                // Some(seen by the sender's capture or not) when the sender is captured.
                let sent = s.point_of(ev.src).and_then(|p| p.in_flight.remove(&ev.id));
                if ev.kind == TapKind::Lost {
                    if let Some(Some(sent)) = sent {
                        let d = s.truth.dirs.entry((ev.src, ev.dst)).or_default();
                        d.lost.add(sent);
                    }
                    return;
                }
                if let Some(cap) = s.delivered.as_mut() {
                    let src = SocketAddr::new(ev.src, ev.src_port);
                    let dst = SocketAddr::new(ev.dst, ev.dst_port);
                    let _ = cap.record(stamp(t as i64), src, dst, ev.ecn, ev.datagram);
                }
                if let Some(p) = s.point_of(ev.dst) {
                    let got = p.record(t, ev);
                    let d = s.truth.dirs.entry((ev.src, ev.dst)).or_default();
                    match (sent, got) {
                        (Some(None), Some(got)) => d.missed_upstream.add(got),
                        (Some(Some(sent)), None) => d.missed_downstream.add(sent),
                        _ => {}
                    }
                }
            }
        }
    }

    fn on_host(&mut self, _index: usize, addr: IpAddr) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if s.hosts.len() < MAX_HOSTS_NAMED {
            s.hosts.push(addr);
        }
        let s = &mut *s;
        for (p, is) in s.points.iter().zip(&mut s.is_host) {
            *is |= p.spec.addr == addr;
        }
    }

    fn on_frame(&mut self, time: roce_stack::Instant, frame: &[u8]) {
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cap) = s.delivered.as_mut() {
            let _ = cap.record_frame(stamp(time.as_nanos() as i64), frame);
        }
    }
}

/// The captures of one simulator run: the tap to give it, then [`Captures::finish`].
pub(crate) struct Captures {
    state: Arc<Mutex<State>>,
    delivered: Option<PathBuf>,
}

/// The DSCP the simulators' captures carry: the simulated fabrics carry RoCE on one
/// priority, the one their PFC frames pause (26, mapped to priority 3 as RoCE NICs do), so
/// a reader of the capture can tell.
fn dscp() -> u8 {
    roce_stack::sim::PFC_PRIORITY << 3 | 2
}

fn create(path: &Path, flag: &str) -> anyhow::Result<DatagramCapture> {
    let mut cap =
        DatagramCapture::create(path).with_context(|| format!("{flag} {}", path.display()))?;
    cap.set_dscp(dscp());
    Ok(cap)
}

impl Captures {
    /// Creates the files (`delivered`: `--pcap`; `points`: `--pcap-at`, seeded by `seed`);
    /// `None` when there are none.
    pub(crate) fn create(
        delivered: Option<&Path>,
        points: &[PointSpec],
        seed: u64,
    ) -> anyhow::Result<Option<(Self, Box<dyn Tap + Send>)>> {
        if delivered.is_none() && points.is_empty() {
            return Ok(None);
        }
        if points.len() > MAX_POINTS {
            bail!("--pcap-at: at most {MAX_POINTS} capture points");
        }
        for (i, p) in points.iter().enumerate() {
            if points[..i].iter().any(|q| q.addr == p.addr) {
                bail!("--pcap-at: {} is named twice", p.addr);
            }
        }
        let state = State {
            delivered: delivered.map(|p| create(p, "--pcap")).transpose()?,
            hosts: Vec::new(),
            is_host: vec![false; points.len()],
            points: points
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    Ok(Point {
                        cap: create(&spec.path, "--pcap-at")?,
                        spec: spec.clone(),
                        rng: Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(i as u64 + 1)),
                        first_stamp: None,
                        last_stamp: i64::MIN,
                        frames: 0,
                        in_flight: HashMap::new(),
                    })
                })
                .collect::<anyhow::Result<_>>()?,
            truth: Truth::default(),
        };
        let state = Arc::new(Mutex::new(state));
        let tap = Box::new(Shared(Arc::clone(&state)));
        Ok(Some((
            Self {
                state,
                delivered: delivered.map(Path::to_path_buf),
            },
            tap,
        )))
    }

    /// Flushes every file (an error when any write failed, or when a capture point saw no
    /// traffic: its address names no host of the run) and says what was written on stderr;
    /// the `captures` object of `--json`.
    pub(crate) fn finish(self) -> anyhow::Result<Value> {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &mut *guard;
        if let (Some(cap), Some(path)) = (s.delivered.as_mut(), &self.delivered) {
            cap.finish()
                .with_context(|| format!("--pcap {}: the capture is incomplete", path.display()))?;
            eprintln!("roce sim fabric: wrote {}", path.display());
        }
        let mut points = Vec::new();
        for (p, &is_host) in s.points.iter_mut().zip(&s.is_host) {
            let path = p.spec.path.display().to_string();
            if !is_host {
                let some: Vec<String> = s.hosts.iter().map(ToString::to_string).collect();
                let _ = std::fs::remove_file(&p.spec.path);
                bail!(
                    "--pcap-at {}: no host of this run has that address (its hosts: {}{})",
                    p.spec.addr,
                    some.join(", "),
                    if some.len() == MAX_HOSTS_NAMED {
                        ", ..."
                    } else {
                        ""
                    }
                );
            }
            p.cap
                .finish()
                .with_context(|| format!("--pcap-at {path}: the capture is incomplete"))?;
            if p.frames == 0 {
                eprintln!(
                    "roce sim fabric: {} sent and received nothing in this run: {path} holds no packet",
                    p.spec.addr
                );
            } else {
                eprintln!(
                    "roce sim fabric: wrote {path} ({} datagrams at {})",
                    p.frames, p.spec.addr
                );
            }
            points.push(json!({
                "address": p.spec.addr.to_string(),
                "file": path,
                "records": p.frames,
                "first_ns": p.first_stamp,
                "last_ns": p.first_stamp.map(|_| p.last_stamp),
                "clock_offset_us": p.spec.offset_ns as f64 / 1e3,
                "jitter_ns": p.spec.jitter_ns,
            }));
        }
        let file_of = |a: IpAddr| {
            s.points
                .iter()
                .find(|p| p.spec.addr == a)
                .map(|p| p.spec.path.display().to_string())
        };
        let directions: Vec<Value> = s
            .truth
            .dirs
            .iter()
            .filter(|(_, d)| d.lost.count + d.missed_upstream.count + d.missed_downstream.count > 0)
            .map(|(&(src, dst), d)| {
                json!({
                    "direction": format!("{src} -> {dst}"),
                    "from": file_of(src),
                    "to": file_of(dst),
                    "lost": d.lost.json(),
                    "missed_upstream": d.missed_upstream.json(),
                    "missed_downstream": d.missed_downstream.json(),
                })
            })
            .collect();
        Ok(json!({ "points": points, "directions": directions }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse_with_and_without_a_clock() {
        let p = parse_point("10.0.1.1=a.pcap").unwrap();
        assert_eq!(p.addr, "10.0.1.1".parse::<IpAddr>().unwrap());
        assert_eq!(
            (p.path.to_str().unwrap(), p.offset_ns, p.jitter_ns),
            ("a.pcap", 0, 0)
        );
        let p = parse_point("10.0.0.1=dir/b@c.pcap@-250.5:300").unwrap();
        assert_eq!(p.path.to_str().unwrap(), "dir/b@c.pcap");
        assert_eq!((p.offset_ns, p.jitter_ns, p.miss), (-250_500, 300, 0.0));
        let p = parse_point("10.0.0.1=c.pcap@0:0:0.01").unwrap();
        assert_eq!((p.offset_ns, p.jitter_ns, p.miss), (0, 0, 0.01));
        let p = parse_point("10.0.0.1=x@y").unwrap();
        assert_eq!((p.path.to_str().unwrap(), p.offset_ns), ("x@y", 0));
        for bad in [
            "a.pcap",
            "host=a.pcap",
            "10.0.0.1=",
            "10.0.0.1=@5",
            "10.0.0.1=a@NaN",
            "10.0.0.1=a@1e12",
            "10.0.0.1=a@0:2000000",
            "10.0.0.1=a@0:0:1",
            "10.0.0.1=a@0:0:-0.1",
            "10.0.0.1=a@0:0:NaN",
        ] {
            assert!(parse_point(bad).is_err(), "{bad}");
        }
    }
}
