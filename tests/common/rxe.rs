//! The Linux kernel's RoCEv2 stack as a peer: a guest of `../shared/tools/rxe-vm` (Soft-RoCE,
//! `rdma_rxe`, with perftest, rdma-core's and librdmacm's stock tools) on the tap `rxetap0`,
//! 198.51.100.2 in the guest and 198.51.100.1 here. One guest at a time ([`Peer::lock`]); every
//! wait is bounded. What a run moved is captured on the tap and checked with `roce decode
//! --check` and `roce analyze` ([`Capture::verify`]).
//!
//! Needs root, `/dev/net/tun`, `qemu-system-x86_64` and `tcpdump`, and the guest's kernel and
//! initrd (`build_vm.sh`, which `.ci/run` runs; [`Peer::lock`] runs it too when they are
//! missing). Outside CI a missing piece is reported as `SKIPPED` and the test passes; under
//! `CI=true` it fails.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::BIN;

/// The guest's address.
pub const VM: &str = "198.51.100.2";
/// This host's address on the tap.
pub const HOST: &str = "198.51.100.1";
/// The tap.
pub const TAP: &str = "rxetap0";
/// The guest's IPv6 address (rxe adds a RoCEv2 GID for it, at index 2) and this host's, on the
/// tap, once [`Net::V6`] set them.
pub const VM6: &str = "2001:db8:51::2";
/// This host's IPv6 address on the tap.
pub const HOST6: &str = "2001:db8:51::1";

/// The addresses a run against the guest uses: IPv4 (rxe's GID index 1, `::ffff:198.51.100.2`)
/// or IPv6 (index 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    /// The guest's address.
    pub vm: &'static str,
    /// This host's address.
    pub host: &'static str,
    /// rxe's GID index of the guest's address.
    pub gid: u8,
    /// What the guest's tools print as this host's GID.
    pub host_gid: &'static str,
}

impl Net {
    /// IPv4.
    pub const V4: Self = Self {
        vm: VM,
        host: HOST,
        gid: 1,
        host_gid: "::ffff:198.51.100.1",
    };
    /// IPv6.
    pub const V6: Self = Self {
        vm: VM6,
        host: HOST6,
        gid: 2,
        host_gid: HOST6,
    };

    /// `cmd` as the guest runs it: over IPv6, after giving eth0 its IPv6 address (duplicate
    /// address detection off, so that the address and rxe's GID for it are there at once).
    pub fn guest(&self, cmd: &str) -> String {
        if *self == Self::V6 {
            format!(
                "echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_dad; ip -6 addr add {VM6}/64 dev eth0; sleep 1; {cmd}"
            )
        } else {
            cmd.to_string()
        }
    }

    /// Gives the tap this host's address of the family (IPv4's is always there).
    pub fn set_up(&self) {
        if *self == Self::V6 {
            // "File exists" on a second run: the address stays on the tap.
            let _ = Command::new("ip")
                .args([
                    "-6",
                    "addr",
                    "add",
                    &format!("{HOST6}/64"),
                    "dev",
                    TAP,
                    "nodad",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

static ONE_GUEST: Mutex<()> = Mutex::new(());

fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/rxe-vm")
}

fn vm_dir() -> PathBuf {
    std::env::var_os("RXE_VM_DIR").map_or_else(|| PathBuf::from("/tmp/rxe-vm"), PathBuf::from)
}

fn ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The right to boot the guest, held for one test.
pub struct Peer(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Peer {
    /// The guest for this test, or why it cannot run here (then the caller returns
    /// [`skipped`]'s verdict).
    pub fn lock() -> Result<Self, String> {
        let guard = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
        // Root: the effective uid in /proc/self/status.
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let root = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0");
        if !root {
            return Err("needs root (a tap device and packet sockets)".into());
        }
        if !Path::new("/dev/net/tun").exists() {
            return Err("no /dev/net/tun".into());
        }
        for tool in ["qemu-system-x86_64", "tcpdump", "ip"] {
            if !ok(Command::new("sh").args(["-c", &format!("command -v {tool}")])) {
                return Err(format!("{tool} is not installed"));
            }
        }
        let dir = vm_dir();
        if !dir.join("initrd.img").exists() || !dir.join("vmlinuz").exists() {
            let built = Command::new(tools().join("build_vm.sh"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !built {
                return Err(format!(
                    "the guest is not built in {} (build_vm.sh failed)",
                    dir.display()
                ));
            }
        }
        // The tap with this host's address, as run_vm.sh makes it, so that roce can bind
        // 198.51.100.1 before the guest boots.
        if !ok(Command::new("ip").args(["link", "show", TAP])) {
            assert!(
                ok(Command::new("ip").args(["tuntap", "add", "dev", TAP, "mode", "tap"])),
                "cannot create the tap {TAP}"
            );
        }
        let have = Command::new("ip")
            .args(["-4", "addr", "show", "dev", TAP])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains(&format!("inet {HOST}/")))
            .unwrap_or(false);
        if !have {
            assert!(ok(Command::new("ip").args([
                "addr",
                "add",
                &format!("{HOST}/24"),
                "dev",
                TAP
            ])));
        }
        assert!(ok(
            Command::new("ip").args(["link", "set", TAP, "mtu", "9000", "up"])
        ));
        Ok(Self(guard))
    }

    /// Boots the guest running `cmd` (a shell command line) in the background.
    pub fn start(&self, cmd: &str) -> Guest {
        let log = tempfile("guest", "log");
        let child = Command::new(tools().join("run_vm.sh"))
            .arg(cmd)
            .env("VM_LOG", &log)
            .env("VM_QUIET", "1")
            .env("VM_TIMEOUT", "240")
            .env("VM_LOCK_WAIT", "30")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run_vm.sh");
        Guest {
            child: Some(child),
            log,
            cmd: cmd.to_string(),
        }
    }
}

/// Outside CI: say why and pass; under `CI=true`: fail.
pub fn skipped(why: &str) {
    assert!(
        std::env::var("CI").is_err(),
        "the kernel's RoCE peer cannot run under CI: {why}"
    );
    eprintln!("SKIPPED: the kernel's RoCE peer (rxe-vm) {why}");
}

fn tempfile(what: &str, ext: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("roce-rxe-{}-{n}-{what}.{ext}", std::process::id()))
}

/// A running guest.
pub struct Guest {
    child: Option<Child>,
    log: PathBuf,
    cmd: String,
}

impl Guest {
    fn console(&self) -> String {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .replace('\r', "")
    }

    /// The command's output so far (between the guest's markers).
    pub fn output(&self) -> String {
        let c = self.console();
        let Some(start) = c.find("=== RXE-CMD-BEGIN ===\n") else {
            return String::new();
        };
        let body = &c[start + "=== RXE-CMD-BEGIN ===\n".len()..];
        match body.find("=== RXE-CMD-END") {
            Some(end) => body[..end].to_string(),
            None => body.to_string(),
        }
    }

    /// Waits until the guest runs the command (it booted): `true` if it does within `secs`.
    pub fn wait_started(&mut self, secs: u64) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(secs) {
            if self.console().contains("=== RXE-CMD-BEGIN ===") {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Waits until the command printed `what` (or the guest ended): `true` if it did.
    pub fn wait_for(&mut self, what: &str, secs: u64) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(secs) {
            if self.output().contains(what) {
                return true;
            }
            if let Some(c) = &mut self.child {
                if c.try_wait().ok().flatten().is_some() {
                    return self.output().contains(what);
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Waits up to `secs` for the command to end: its exit status (None: it did not end, and
    /// the guest was stopped) and output.
    pub fn finish(mut self, secs: u64) -> (Option<i32>, String) {
        let mut child = self.child.take().expect("running");
        let t = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().ok().flatten() {
                break Some(s);
            }
            if t.elapsed() > Duration::from_secs(secs) {
                kill_tree(&mut child);
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let out = self.output();
        let rc = status.and_then(|_| {
            let c = self.console();
            let tail = c.rsplit("=== RXE-CMD-END rc=").next()?;
            (tail.len() < c.len())
                .then(|| tail.split(' ').next()?.trim().parse().ok())
                .flatten()
        });
        (rc, out)
    }

    /// The guest command, for messages.
    pub fn cmd(&self) -> &str {
        &self.cmd
    }
}

fn kill_tree(child: &mut Child) {
    // run_vm.sh runs qemu under timeout(1); end the whole group of children.
    let pid = child.id().to_string();
    let _ = Command::new("pkill").args(["-TERM", "-P", &pid]).status();
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", "qemu-system-x86_64.*rxetap0"])
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Guest {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_tree(&mut c);
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A roce process on this host.
pub struct Host {
    child: Option<Child>,
    args: Vec<String>,
}

impl Host {
    /// Starts `roce ARGS`.
    pub fn start(args: &[&str]) -> Self {
        let child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn roce");
        Self {
            child: Some(child),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Waits up to `secs` for it to end: exit code (None: killed after `secs`), stdout,
    /// stderr.
    pub fn finish(mut self, secs: u64) -> (Option<i32>, String, String) {
        let mut child = self.child.take().expect("running");
        let t = Instant::now();
        let code = loop {
            if let Some(s) = child.try_wait().ok().flatten() {
                break s.code();
            }
            if t.elapsed() > Duration::from_secs(secs) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (code, out, err)
    }

    /// The command line, for messages.
    pub fn args(&self) -> String {
        self.args.join(" ")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// tcpdump on the tap: every RoCEv2 datagram (UDP 4791) and the TCP exchanges.
pub struct Capture {
    child: Option<Child>,
    /// The capture file.
    pub path: PathBuf,
    /// What tcpdump printed (its closing lines count the packets the kernel dropped).
    said: std::sync::Arc<Mutex<String>>,
}

impl Capture {
    /// Starts capturing; returns once tcpdump listens.
    pub fn start() -> Self {
        let path = tempfile("tap", "pcap");
        let mut child = Command::new("tcpdump")
            // Immediate mode: every packet is handed over as it comes, so none is left in
            // the capture ring when tcpdump stops. A 256 MiB ring: with roce and the emulated
            // guest busy on both cores, tcpdump is scheduled late, and a 16 MiB ring (about
            // 4,000 frames of 4 KiB) overflowed now and then.
            .args([
                "-i",
                TAP,
                "--immediate-mode",
                "-U",
                "-B",
                "262144",
                "-s",
                "0",
                "-w",
            ])
            .arg(&path)
            .args(["udp", "port", "4791"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump");
        // tcpdump says "listening on" once the socket is open.
        let mut err = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let said = std::sync::Arc::new(Mutex::new(String::new()));
        let said2 = said.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            let mut seen = Vec::new();
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).into_owned();
                if text.contains("listening on") {
                    let _ = tx.send(());
                }
                if let Ok(mut s) = said2.lock() {
                    *s = text;
                }
            }
        });
        let _ = rx.recv_timeout(Duration::from_secs(10));
        Self {
            child: Some(child),
            path,
            said,
        }
    }

    /// Stops the capture (after what is in flight was written) and checks it: every RoCE
    /// packet decodes with a good ICRC, no connection violates an analysis rule. Returns the
    /// analysis, one JSON object per connection.
    pub fn verify(mut self, what: &str) -> Analysis {
        std::thread::sleep(Duration::from_millis(500));
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
        // A frame the capture missed (not the network) shows up in the analysis as a hole:
        // tcpdump's own count says whether it dropped any.
        std::thread::sleep(Duration::from_millis(100));
        // RXE_KEEP_CAPTURES=DIR keeps every capture there, named after its run, to read after.
        if let Some(dir) = std::env::var_os("RXE_KEEP_CAPTURES") {
            let name: String = what
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            let _ = std::fs::copy(&self.path, PathBuf::from(dir).join(format!("{name}.pcap")));
        }
        let said = self.said.lock().map(|s| s.clone()).unwrap_or_default();
        let dropped = said
            .lines()
            .find(|l| l.contains("dropped by kernel"))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        assert_eq!(dropped, 0, "{what}: tcpdump dropped frames: {said}");
        let dec = Command::new(BIN)
            .arg("decode")
            .arg("--check")
            .arg(&self.path)
            .output()
            .expect("roce decode");
        let summary = String::from_utf8_lossy(&dec.stderr).into_owned();
        assert!(
            dec.status.success() && summary.contains(" 0 ICRC failures, 0 malformed"),
            "{what}: roce decode --check of the capture: {summary}"
        );
        let packets: u64 = summary
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let an = Command::new(BIN)
            .args(["analyze", "--json", "--check"])
            .arg(&self.path)
            .output()
            .expect("roce analyze");
        let text = String::from_utf8_lossy(&an.stdout).into_owned();
        assert!(
            an.status.success(),
            "{what}: roce analyze --check: a rule is violated:\n{text}\n{}",
            String::from_utf8_lossy(&an.stderr)
        );
        // The CM's messages, by name, from the decoder's one-line summaries (" CM REQ ").
        let lines = Command::new(BIN)
            .arg("decode")
            .arg(&self.path)
            .output()
            .expect("roce decode");
        let mut cm = std::collections::BTreeMap::new();
        for l in String::from_utf8_lossy(&lines.stdout).lines() {
            if let Some(rest) = l.split(" CM ").nth(1) {
                let name = rest.split_whitespace().next().unwrap_or("").to_string();
                let why = rest
                    .split_whitespace()
                    .find(|w| w.starts_with("reason=") || w.starts_with("status="));
                if let Some(why) = why {
                    *cm.entry(format!("{name} {why}")).or_insert(0u64) += 1;
                }
                *cm.entry(name).or_insert(0u64) += 1;
            }
        }
        let connections: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["type"] == "connection")
            .collect();
        Analysis {
            packets,
            connections,
            summary,
            cm,
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What `roce analyze` said of a capture.
#[derive(Debug, Default)]
pub struct Analysis {
    /// RoCE packets decoded.
    pub packets: u64,
    /// One `connection` object per connection.
    pub connections: Vec<serde_json::Value>,
    /// `roce decode --check`'s closing line.
    pub summary: String,
    /// CM messages by name (`REQ`, `SIDR_REP`, ...), and REJs and SIDR_REPs also by
    /// name and reason (`REJ reason=consumer_reject`, `SIDR_REP status=success`).
    pub cm: std::collections::BTreeMap<String, u64>,
}

impl Analysis {
    /// Retransmitted packets over every connection.
    pub fn retransmitted(&self) -> u64 {
        self.connections
            .iter()
            .map(|c| c["retransmitted_packets"].as_u64().unwrap_or(0))
            .sum()
    }

    /// Packets the side at `addr` retransmitted, over every connection.
    pub fn retransmitted_by(&self, addr: &str) -> u64 {
        self.connections
            .iter()
            .flat_map(|c| c["sides"].as_array().into_iter().flatten())
            .filter(|s| s["addr"] == addr)
            .map(|s| s["retransmitted_packets"].as_u64().unwrap_or(0))
            .sum()
    }

    /// Retransmission episodes of the side at `addr` by cause (`timeout`, `nak_seq`,
    /// `implied_nak`, `rnr`, `unknown`), summed over every connection.
    pub fn episodes_by(&self, addr: &str) -> std::collections::BTreeMap<String, u64> {
        let mut m = std::collections::BTreeMap::new();
        for s in self
            .connections
            .iter()
            .flat_map(|c| c["sides"].as_array().into_iter().flatten())
            .filter(|s| s["addr"] == addr)
        {
            for (k, v) in s["retransmission_episodes"]
                .as_object()
                .into_iter()
                .flatten()
            {
                *m.entry(k.clone()).or_insert(0) += v.as_u64().unwrap_or(0);
            }
        }
        m
    }

    /// Checks that the side at `addr` resent only when its local ACK timer expired (IBTA
    /// Vol 1 §9.7.6.1.1: no NAK, no response for a later PSN, before any resend of it) and
    /// then at most one packet in twenty of the capture. Under software emulation the guest
    /// now and then falls silent for longer than perftest's 67 ms timeout (ACK round trips
    /// of 134 ms were seen on a loaded host), and a timeout resend is the spec's answer to
    /// that silence; a resend for any other reason is not.
    pub fn resent_only_on_timeout(&self, addr: &str) -> Result<(), String> {
        let n = self.retransmitted_by(addr);
        if n == 0 {
            return Ok(());
        }
        let ep = self.episodes_by(addr);
        let other: u64 = ep
            .iter()
            .filter(|(k, _)| k.as_str() != "timeout")
            .map(|(_, v)| v)
            .sum();
        if other > 0 || ep.get("timeout").copied().unwrap_or(0) == 0 {
            return Err(format!(
                "{n} packets resent by {addr}, not all after a timeout: {ep:?}"
            ));
        }
        if n * 20 > self.packets {
            return Err(format!(
                "{n} of {} packets resent by {addr} (more than 5%), episodes {ep:?}",
                self.packets
            ));
        }
        eprintln!("{n} packets resent by {addr} after its ACK timer expired: {ep:?}");
        Ok(())
    }

    /// NAKs of every kind over every connection.
    pub fn naks(&self) -> u64 {
        self.connections
            .iter()
            .flat_map(|c| c["naks"].as_object().into_iter().flatten())
            .map(|(_, v)| v.as_u64().unwrap_or(0))
            .sum()
    }

    /// CM messages named `name` (`REQ`, `DREQ`, `SIDR_REQ`, ...) in the capture.
    pub fn cm(&self, name: &str) -> u64 {
        self.cm.get(name).copied().unwrap_or(0)
    }

    /// Messages of kind `kind` over every connection but the first to send (perftest's `-R`
    /// exchange, which is SENDs too).
    pub fn messages_after_first(&self, kind: &str) -> u64 {
        let start = |c: &serde_json::Value| {
            c["sides"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["first_s"].as_f64())
                .fold(f64::INFINITY, f64::min)
        };
        let first = self
            .connections
            .iter()
            .map(start)
            .fold(f64::INFINITY, f64::min);
        self.connections
            .iter()
            .filter(|c| start(c) > first)
            .map(|c| c["messages"][kind]["count"].as_u64().unwrap_or(0))
            .sum()
    }

    /// Messages of kind `kind` (write, read, send, ...) over every connection.
    pub fn messages(&self, kind: &str) -> u64 {
        self.connections
            .iter()
            .map(|c| c["messages"][kind]["count"].as_u64().unwrap_or(0))
            .sum()
    }
}
