//! Live capture from a network interface with `pnet` (an `AF_PACKET` socket on Linux, which
//! needs root or `CAP_NET_RAW`). Each frame goes through the same [`Decoder`] as a file's
//! records, and can be saved with [`PcapWriter`].
use crate::decode::{Decoder, Options, Outcome};
use crate::error::DecodeError;
use crate::link;
use crate::reader::{Record, Timestamp};
use crate::writer::PcapWriter;
use std::io::{BufWriter, ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where and how long to capture.
#[derive(Debug, Clone, Default)]
pub struct LiveOptions {
    /// Interface name (`lo`, `eth0`, …).
    pub interface: String,
    /// Stop after this long (otherwise at `--count` or never).
    pub duration: Option<Duration>,
    /// Save every frame seen to this pcap file.
    pub write: Option<String>,
    /// Stop (normally: flush, summarise, exit 0) once this becomes `true` (the command line
    /// sets it on Ctrl-C).
    pub stop: Option<Arc<AtomicBool>>,
    /// On a loopback interface the packet socket gets every packet twice, as sent and as
    /// received, back to back: keep one (the analysis wants each packet once, as tcpdump
    /// shows it). Off, both copies are decoded.
    pub one_copy_on_loopback: bool,
}

fn now() -> Timestamp {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        secs: d.as_secs() as i64,
        nanos: d.subsec_nanos(),
    }
}

/// Opens the interface, then decodes frames into `out` until `--count` packets were printed,
/// the duration is over, or the stop flag is set.
pub fn capture<W: Write>(lo: &LiveOptions, opts: Options, out: &mut W) -> Outcome {
    let mut dec = Decoder::new(opts);
    let error = run(lo, &mut dec, out).err();
    Outcome {
        stats: dec.stats(),
        error,
    }
}

/// Opens the interface and feeds every frame to `dec` (see [`capture`]).
pub fn run<W: Write>(lo: &LiveOptions, dec: &mut Decoder, out: &mut W) -> Result<(), DecodeError> {
    let live = |m: String| DecodeError::Live(m);
    let iface = pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.name == lo.interface)
        .ok_or_else(|| live(format!("no network interface named {:?}", lo.interface)))?;
    let config = pnet_datalink::Config {
        read_timeout: Some(Duration::from_millis(100)),
        read_buffer_size: 1 << 16,
        promiscuous: false,
        ..Default::default()
    };
    let mut rx = match pnet_datalink::channel(&iface, config) {
        Ok(pnet_datalink::Channel::Ethernet(_tx, rx)) => rx,
        Ok(_) => return Err(live(format!("{}: not an Ethernet interface", lo.interface))),
        Err(e) if e.kind() == ErrorKind::PermissionDenied || e.raw_os_error() == Some(1) => {
            return Err(live(format!(
                "capturing on {} needs root or the CAP_NET_RAW capability ({e})",
                lo.interface
            )))
        }
        Err(e) => return Err(live(format!("opening {}: {e}", lo.interface))),
    };
    // The capture file is written beside its place and put there at the end when every
    // write to it succeeded (`OutFile`): never half a file over an old one.
    let mut pcap = match &lo.write {
        Some(path) => {
            let open = |source| DecodeError::Open {
                name: path.clone(),
                source,
            };
            let f = crate::outfile::OutFile::create(std::path::Path::new(path)).map_err(open)?;
            Some(PcapWriter::new(BufWriter::new(f), link::ETHERNET, true, 262_144).map_err(open)?)
        }
        None => None,
    };
    let skip_copies = lo.one_copy_on_loopback && iface.is_loopback();
    let mut prev: Vec<u8> = Vec::new();
    let start = Instant::now();
    let result = loop {
        let stopped = lo.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
        if stopped || dec.done() || lo.duration.is_some_and(|d| start.elapsed() >= d) {
            break Ok(());
        }
        match rx.next() {
            Ok(frame) => {
                if skip_copies {
                    if prev.as_slice() == frame {
                        // The second copy of the packet just seen.
                        prev.clear();
                        continue;
                    }
                    prev.clear();
                    prev.extend_from_slice(frame);
                }
                let rec = Record {
                    ts: now(),
                    ts_digits: 9,
                    link_type: link::ETHERNET,
                    interface: 0,
                    orig_len: frame.len() as u32,
                    data: frame,
                    offset: 0,
                };
                if let Some(w) = &mut pcap {
                    if let Err(e) = w.write_packet(rec.ts, frame, rec.orig_len) {
                        // The capture file is not put in place: the old one stays.
                        pcap = None;
                        break Err(DecodeError::Write(e));
                    }
                }
                if let Err(e) = dec.record(&rec, out).and_then(|()| dec.flush(out)) {
                    break Err(DecodeError::Write(e));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::TimedOut | ErrorKind::WouldBlock | ErrorKind::Interrupted
                ) => {}
            Err(e) => break Err(live(format!("reading from {}: {e}", lo.interface))),
        }
    };
    if let Some(w) = pcap {
        crate::outfile::commit_buffered(w.into_inner()).map_err(DecodeError::Write)?;
    }
    dec.flush(out).map_err(DecodeError::Write)?;
    result
}

/// `true` when this process may open raw packet sockets (effective uid 0; a process with only
/// `CAP_NET_RAW` is not detected and gets the channel's clear error instead).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}
