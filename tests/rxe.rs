//! Interoperability with the Linux kernel's RoCEv2 stack (Soft-RoCE, `rdma_rxe`) and its stock
//! tools, each in both roles: the kernel's tool in a guest of `../shared/tools/rxe-vm`, roce on
//! this host, across the tap. Every run is captured on the tap and checked: every packet
//! decodes with a good ICRC (`roce decode --check`), no connection violates an analysis rule
//! (`roce analyze --check`), and nothing was retransmitted where nothing was lost.
//!
//! The tests of this file share one tap and run one at a time (see `common::rxe`).
mod common;

use common::rxe::{skipped, Capture, Host, Peer, HOST, VM};

/// The guest's perftest device flags: rxe0, GID index 1 (the IPv4-mapped GID).
const PT: &str = "-d rxe0 -x 1";

/// Takes the peer, or returns from the test with the verdict of [`skipped`].
macro_rules! peer {
    () => {
        match Peer::lock() {
            Ok(p) => p,
            Err(why) => return skipped(&why),
        }
    };
}

/// Waits for `host` to print `what` on stderr's first lines, up to 10 s (a roce server
/// announces that it listens).
fn host_listening(host: &str) {
    // roce binds before it prints; a short pause is enough for the socket to exist.
    let _ = host;
    std::thread::sleep(std::time::Duration::from_millis(700));
}

/// The figures line under perftest's header: `#bytes #iterations peak average rate`.
fn perftest_figures(out: &str) -> Option<(u64, u64, f64, f64)> {
    let mut lines = out.lines();
    lines.find(|l| l.trim_start().starts_with("#bytes"))?;
    let f: Vec<&str> = lines.next()?.split_whitespace().collect();
    Some((
        f.first()?.parse().ok()?,
        f.get(1)?.parse().ok()?,
        f.get(2)?.parse().ok()?,
        f.get(3)?.parse().ok()?,
    ))
}

/// The kernel's `ib_{write,read}_bw` client against `roce perf --perftest --server`: the test
/// runs, the first window after the exchange is taken (no NAK, nothing retransmitted: the
/// regression for the link that listened only after the exchange said ready), both sides
/// print the same figures in MB/sec with the real iteration count.
fn kernel_client_roce_server(test: &str) {
    let peer = peer!();
    let cap = Capture::start();
    let roce = Host::start(&[
        "perf",
        test,
        "--perftest",
        "--server",
        "--bind",
        HOST,
        "-s",
        "65536",
        "-n",
        "500",
    ]);
    host_listening(&roce.args());
    let guest = peer.start(&format!("ib_{test}_bw {PT} -s 65536 -n 500 {HOST}"));
    let (rc, out) = guest.finish(120);
    let (code, rout, rerr) = roce.finish(30);
    assert_eq!(
        rc,
        Some(0),
        "ib_{test}_bw client:\n{out}\nroce:\n{rout}{rerr}"
    );
    assert_eq!(code, Some(0), "roce server:\n{rout}{rerr}\nguest:\n{out}");
    let a = cap.verify(&format!("ib_{test}_bw -> roce"));
    assert_eq!(a.retransmitted(), 0, "first window lost? {a:?}");
    assert_eq!(a.naks(), 0, "{a:?}");
    let theirs = perftest_figures(&out).expect("the client's figures");
    let ours = perftest_figures(&rout).expect("roce's figures");
    assert!(rout.contains("BW average[MB/sec]"), "units: {rout}");
    assert_eq!(
        (ours.0, ours.1),
        (65536, 500),
        "size and iterations: {rout}"
    );
    assert_eq!(theirs.1, 500);
    // The server prints what the client measured, in the client's units.
    assert!((ours.3 - theirs.3).abs() < 0.02, "{rout} vs {out}");
}

/// roce's client against the kernel's `ib_{write,read}_bw` server.
fn roce_client_kernel_server(test: &str) {
    let peer = peer!();
    let cap = Capture::start();
    let mut guest = peer.start(&format!("ib_{test}_bw {PT} -s 65536 -n 500"));
    assert!(
        guest.wait_for("Waiting for client", 90),
        "{}",
        guest.output()
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (code, rout, rerr) = Host::start(&[
        "perf",
        test,
        "--perftest",
        "--client",
        VM,
        "--bind",
        HOST,
        "-s",
        "65536",
        "-n",
        "500",
    ])
    .finish(120);
    let (rc, out) = guest.finish(60);
    assert_eq!(code, Some(0), "roce client:\n{rout}{rerr}\nguest:\n{out}");
    assert_eq!(
        rc,
        Some(0),
        "ib_{test}_bw server:\n{out}\nroce:\n{rout}{rerr}"
    );
    let a = cap.verify(&format!("roce -> ib_{test}_bw"));
    assert_eq!(a.retransmitted(), 0, "{a:?}");
    let theirs = perftest_figures(&out).expect("the server's figures");
    let ours = perftest_figures(&rout).expect("roce's figures");
    assert_eq!(theirs.0, 65536);
    assert_eq!(
        theirs.1, 500,
        "the kernel's server got our iterations: {out}"
    );
    assert!(rout.contains("BW average[MB/sec]"), "units: {rout}");
    assert!(
        (ours.3 - theirs.3).abs() < 0.02,
        "the kernel prints our figures: {rout} vs {out}"
    );
    // In MB/sec (2^20 B/s): rxe under emulation moves tens of MB/s; a figure in Gb/s read as
    // MB/s would be a fraction of one.
    assert!(
        theirs.3 > 2.0,
        "the kernel prints our figure in MB/sec: {out}"
    );
    let kind = if test == "write" { "write" } else { "read" };
    assert_eq!(a.messages(kind), 500, "{a:?}");
}

#[test]
fn ib_write_bw_client_against_roce_server() {
    kernel_client_roce_server("write");
}

#[test]
fn ib_read_bw_client_against_roce_server() {
    kernel_client_roce_server("read");
}

#[test]
fn roce_client_against_ib_write_bw_server() {
    roce_client_kernel_server("write");
}

#[test]
fn roce_client_against_ib_read_bw_server() {
    roce_client_kernel_server("read");
}
