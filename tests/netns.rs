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
/// One at a time: the tests of this file share the names.
struct Pair(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);
static ONE_PAIR: std::sync::Mutex<()> = std::sync::Mutex::new(());
impl Pair {
    fn new() -> Option<Self> {
        let guard = ONE_PAIR.lock().unwrap_or_else(|e| e.into_inner());
        let _ = ip(&["netns", "del", "roce-a"]);
        let _ = ip(&["netns", "del", "roce-b"]);
        // A pair left in this namespace by a run that stopped half way.
        let _ = ip(&["link", "del", "roce-va"]);
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
        let pair = Self(guard);
        steps.iter().all(|s| ip(s)).then_some(pair)
    }
}
impl Drop for Pair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", "roce-a"]);
        let _ = ip(&["netns", "del", "roce-b"]);
    }
}

/// Without root or iproute2: reported, and a failure under CI.
fn skipped() {
    assert!(
        std::env::var("CI").is_err(),
        "cannot make network namespaces under CI (needs root and iproute2)"
    );
    eprintln!("SKIPPED: network namespaces need root and iproute2");
}

#[test]
fn server_and_client_across_a_veth_pair_on_both_links() {
    let Some(_pair) = Pair::new() else {
        return skipped();
    };
    for link in ["packet", "packet-ring", "udp"] {
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
        // The report's names are snake_case.
        let name = link.replace('-', "_");
        assert_eq!(r["link"]["client"], name.as_str(), "{r}");
        assert_eq!(r["link"]["server"], name.as_str(), "{r}");
        let (full, solved) = (
            r["icrc_full"].as_u64().unwrap(),
            r["icrc_solved"].as_u64().unwrap(),
        );
        // Both ends are roce, which writes identification 0 and DF: on either link every
        // ICRC gets the full check (the UDP link matches that header exactly), also over the
        // frames the packet links built themselves.
        assert!(full > 0 && solved == 0, "{link}: {full} {solved}");
        let (packet, udp) = (
            r["sent_packet_socket"].as_u64().unwrap(),
            r["sent_udp"].as_u64().unwrap(),
        );
        if link == "udp" {
            assert_eq!(packet, 0, "{r}");
        } else {
            assert!(packet > udp, "{link}: most through the packet socket: {r}");
        }
    }
}

/// Across the veth pair the packet link also sends through its packet socket, writing the
/// IPv4/UDP header itself, once the peer's first accepted datagram showed its hardware
/// address; a UDP-link peer's kernel takes those datagrams like any others (IP checksum,
/// UDP checksum 0), and a packet-link peer checks the ICRC over exactly that header.
#[test]
fn perf_across_a_veth_pair_sends_through_the_packet_socket() {
    let Some(_pair) = Pair::new() else {
        return skipped();
    };
    for (client, server) in [
        ("packet-ring", "packet-ring"),
        ("packet", "udp"),
        ("udp", "packet"),
    ] {
        let mut srv = Command::new("ip")
            .args(["netns", "exec", "roce-b", BIN, "perf", "write", "--server"])
            .args(["--bind", "10.78.0.2", "--link", server])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let out = Command::new("ip")
            .args(["netns", "exec", "roce-a", BIN, "perf", "write"])
            .args(["--client", "10.78.0.2", "--bind", "10.78.0.1"])
            .args([
                "--link", client, "-s", "65536", "--mtu", "1024", "-n", "300",
            ])
            .arg("--json")
            .output()
            .unwrap();
        let status = srv.wait().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && status.success(),
            "{client}/{server}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(r["link"], client, "{r}");
        let (packet, udp) = (
            r["sent"]["packet"].as_u64().unwrap(),
            r["sent"]["udp"].as_u64().unwrap(),
        );
        // 300 WRITEs of 64 packets each.
        assert!(packet + udp >= 300 * 64, "{client}/{server}: {r}");
        if client == "udp" {
            assert_eq!(packet, 0, "{r}");
        } else {
            // Through the UDP sockets only until the server's first ACK was accepted.
            assert!(udp > 0 && udp < 2048, "{client}/{server}: {r}");
            assert!(packet > 16_000, "{client}/{server}: {r}");
        }
        assert_eq!(r["sent"]["packet_dropped"], 0, "{r}");
    }
}

/// On `lo` the packet links send through UDP sockets, because Linux drops frames injected
/// there with a loopback source; in a namespace whose `lo` accepts them (`route_localnet` and
/// `accept_local`, set here inside a fresh namespace only) they send the frames they build.
#[test]
fn loopback_sends_its_own_frames_only_where_lo_accepts_them() {
    let _one = ONE_PAIR.lock().unwrap_or_else(|e| e.into_inner());
    let ns = "roce-lo";
    let _ = ip(&["netns", "del", ns]);
    if !(ip(&["netns", "add", ns]) && ip(&["-n", ns, "link", "set", "lo", "up"])) {
        let _ = ip(&["netns", "del", ns]);
        return skipped();
    }
    let sysctl = |value: &str| {
        let ok = ["all", "lo"].iter().all(|dev| {
            ["route_localnet", "accept_local"].iter().all(|key| {
                // Through /proc (the namespace's own, entered by `ip netns exec`), not the
                // `sysctl` program, which a minimal system may lack.
                Command::new("ip")
                    .args(["netns", "exec", ns, "sh", "-c"])
                    .arg(format!(
                        "echo {value} > /proc/sys/net/ipv4/conf/{dev}/{key}"
                    ))
                    .status()
                    .is_ok_and(|s| s.success())
            })
        });
        assert!(ok, "sysctl in {ns}");
    };
    let run = |link: &str| -> serde_json::Value {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, BIN, "loopback", "--count", "100"])
            .args(["--link", link, "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{link}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let count = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
    for link in ["packet-ring", "packet"] {
        let r = run(link);
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(
            count(&r, "sent_packet_socket"),
            0,
            "{link} on a default lo: {r}"
        );
    }
    sysctl("1");
    for link in ["packet-ring", "packet"] {
        let r = run(link);
        assert_eq!(r["ok"], true, "{r}");
        assert!(
            count(&r, "sent_packet_socket") > count(&r, "sent_udp"),
            "{link} on an lo that takes injected frames: {r}"
        );
        assert_eq!(count(&r, "icrc_solved"), 0, "{r}");
    }
    let _ = ip(&["netns", "del", ns]);
}
