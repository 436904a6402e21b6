//! What the command line does around the libraries: report printing (text or JSON), the
//! capture tap of `--pcap`, the progress bar of a long decode, and Ctrl-C.
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use roce_driver::endpoint::{Tap, TapRecord};

/// Prints a run's report (text, or one JSON object); exit status 0 only when it verified.
pub(crate) fn report<R: serde::Serialize + std::fmt::Display>(
    r: &R,
    ok: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        print!("{r}");
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A tap writing every datagram into `path` (pcap, Ethernet frames as on the wire).
pub(crate) fn pcap_tap(path: &Option<PathBuf>) -> anyhow::Result<Option<Tap>> {
    let Some(path) = path else { return Ok(None) };
    let mut cap = roce_pcap::tap::DatagramCapture::create(path)?;
    Ok(Some(Box::new(move |r: &TapRecord<'_>| {
        let _ = cap.record(r.time, r.src, r.dst, r.ecn, r.data);
    })))
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
