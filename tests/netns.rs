//! Two network namespaces joined by a veth pair (a real Ethernet-framed link, not `lo`):
//! `roce server` in one, `roce client` in the other, on each link. Needs root and `ip`
//! (iproute2); outside CI a missing one is reported and the test passes, under `CI=true` it
//! fails.
mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The namespaces `roce-a`/`roce-b` with 10.78.0.1/24 and 10.78.0.2/24; removed on drop.
struct Pair;
impl Pair {
    fn new() -> Option<Self> {
        let _ = ip(&["netns", "del", "roce-a"]);
        let _ = ip(&["netns", "del", "roce-b"]);
        let steps: [&[&str]; 11] = [
            &["netns", "add", "roce-a"],
            &["netns", "add", "roce-b"],
            &[
                "link", "add", "roce-va", "type", "veth", "peer", "name", "roce-vb",
            ],
            &["link", "set", "roce-va", "netns", "roce-a"],
            &["link", "set", "roce-vb", "netns", "roce-b"],
            &[
                "-n",
                "roce-a",
                "addr",
                "add",
                "10.78.0.1/24",
                "dev",
                "roce-va",
            ],
            &[
                "-n",
                "roce-b",
                "addr",
                "add",
                "10.78.0.2/24",
                "dev",
                "roce-vb",
            ],
            &["-n", "roce-a", "link", "set", "roce-va", "up"],
            &["-n", "roce-b", "link", "set", "roce-vb", "up"],
            &["-n", "roce-a", "link", "set", "lo", "up"],
            &["-n", "roce-b", "link", "set", "lo", "up"],
        ];
        let pair = Self;
        steps.iter().all(|s| ip(s)).then_some(pair)
    }
}
impl Drop for Pair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", "roce-a"]);
        let _ = ip(&["netns", "del", "roce-b"]);
    }
}

#[test]
fn server_and_client_across_a_veth_pair_on_both_links() {
    let Some(_pair) = Pair::new() else {
        assert!(
            std::env::var("CI").is_err(),
            "cannot make network namespaces under CI (needs root and iproute2)"
        );
        eprintln!("SKIPPED: network namespaces need root and iproute2");
        return;
    };
    for link in ["packet", "udp"] {
        let mut server = Command::new("ip")
            .args([
                "netns",
                "exec",
                "roce-b",
                BIN,
                "server",
                "--bind",
                "10.78.0.2",
            ])
            .args(["--link", link])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                "roce-a",
                BIN,
                "client",
                "10.78.0.2",
                "--bind",
                "10.78.0.1",
            ])
            .args(["--link", link, "--count", "60", "--json"])
            .output()
            .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(s) = server.try_wait().unwrap() {
                break s;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "server still running"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{link}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(status.success(), "{link}: the server failed");
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(r["ok"], true);
        assert_eq!(r["link"]["client"], link, "{r}");
        assert_eq!(r["link"]["server"], link, "{r}");
        let (full, solved) = (
            r["icrc_full"].as_u64().unwrap(),
            r["icrc_solved"].as_u64().unwrap(),
        );
        // Both ends are roce, which writes identification 0 and DF: on either link every
        // ICRC gets the full check (the UDP link matches that header exactly).
        assert!(full > 0 && solved == 0, "{link}: {full} {solved}");
    }
}
