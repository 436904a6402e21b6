//! What the command line does around the libraries: report printing (text or JSON), the
//! capture tap of `--pcap`, the progress bar of a long decode, and Ctrl-C.
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use roce_pcap::tap::DatagramCapture;

use roce_driver::endpoint::{Direction, Tap, TapRecord, Taps};

/// Writes `args` to stdout and flushes: an error (one line, exit 1) when the output cannot be
/// written, never a panic.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    o.write_fmt(args)
        .and_then(|()| o.flush())
        .context("writing the output to stdout")
}

/// Prints a run's report (text, or one JSON object); exit status 0 only when it verified.
pub(crate) fn report<R: serde::Serialize + std::fmt::Display>(
    r: &R,
    ok: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        outln!("{}", serde_json::to_string(r)?)?;
    } else {
        out!("{r}")?;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The `--pcap` file of a run, shared with the tap that writes it.
#[derive(Default)]
pub(crate) struct PcapFile(Option<(PathBuf, Arc<Mutex<DatagramCapture>>)>);

impl PcapFile {
    /// A capture of `path`, and the file to finish after the run.
    pub(crate) fn create(
        path: &std::path::Path,
    ) -> anyhow::Result<(Self, Arc<Mutex<DatagramCapture>>)> {
        let cap =
            DatagramCapture::create(path).with_context(|| format!("--pcap {}", path.display()))?;
        let cap = Arc::new(Mutex::new(cap));
        Ok((Self(Some((path.to_path_buf(), Arc::clone(&cap)))), cap))
    }

    /// Flushes the capture: an error when any frame did not reach the file (a full disk,
    /// `/dev/full`), so that nobody is told of a capture that is not there.
    pub(crate) fn finish(self) -> anyhow::Result<()> {
        let Some((path, cap)) = self.0 else {
            return Ok(());
        };
        let mut cap = cap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cap.finish()
            .with_context(|| format!("--pcap {}: the capture is incomplete", path.display()))?;
        Ok(())
    }
}

/// A tap writing into `cap` every datagram it sees, or only those sent (`sent_only`).
fn tap_into(cap: Arc<Mutex<DatagramCapture>>, sent_only: bool) -> Tap {
    Box::new(move |r: &TapRecord<'_>| {
        if sent_only && r.direction != Direction::Sent {
            return;
        }
        let mut cap = cap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = cap.record(r.time, r.src, r.dst, r.ecn, r.data);
    })
}

/// A tap writing every datagram into `path` (pcap, Ethernet frames as on the wire), and the
/// file to finish once the run is over.
pub(crate) fn pcap_tap(path: &Option<PathBuf>) -> anyhow::Result<(Option<Tap>, PcapFile)> {
    let Some(path) = path else {
        return Ok((None, PcapFile::default()));
    };
    let (file, cap) = PcapFile::create(path)?;
    Ok((Some(tap_into(cap, false)), file))
}

/// Taps writing the datagrams of a run whose two ends are in this process into `path`: each
/// end records what it sends, stamped when it was made to leave (the wire's spacing; the
/// receiving end's stamps would be those of its receive batches), so every datagram is in the
/// file once. The two ends write from two threads: records of one end are in time order, the
/// two ends' interleave within a send batch of each other.
pub(crate) fn pcap_taps_at_departure(path: &Option<PathBuf>) -> anyhow::Result<(Taps, PcapFile)> {
    let Some(path) = path else {
        return Ok((Taps::default(), PcapFile::default()));
    };
    let (file, cap) = PcapFile::create(path)?;
    let taps = Taps {
        client: Some(tap_into(Arc::clone(&cap), true)),
        server: Some(tap_into(cap, true)),
    };
    Ok((taps, file))
}

/// A progress bar on stderr for decoding a file of more than 8 MiB, when stderr is a terminal.
#[derive(Debug)]
pub(crate) struct Bar(Option<indicatif::ProgressBar>);

impl Bar {
    pub(crate) fn new() -> Self {
        Self(None)
    }
}

impl roce_pcap::Progress for Bar {
    fn start(&mut self, total: u64) {
        if std::io::stderr().is_terminal() && total > 8 << 20 {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            self.0 = Some(b);
        }
    }

    fn advance(&self, done: u64) {
        if let Some(b) = &self.0 {
            b.set_position(done);
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.0.take() {
            b.finish_and_clear();
        }
    }
}

/// A flag Ctrl-C sets (installs the handler once).
pub(crate) fn interrupt_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    ctrlc::set_handler(move || f.store(true, Ordering::Relaxed))
        .map_err(|e| anyhow::anyhow!("cannot install the Ctrl-C handler: {e}"))?;
    Ok(flag)
}
