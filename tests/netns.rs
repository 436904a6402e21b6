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

/// perftest's exchange over RDMA-CM (`-R`) between two roce ends over IPv6, across the veth
/// pair: the comm connection's and the data QP's REQ/REP/RTU carry IPv6 addresses, and the
/// test runs. (perftest 4.5's own `-R` is IPv4 only, in both roles: `docs/stock-tools.md`.)
#[test]
fn perftest_over_rdma_cm_between_two_ipv6_ends() {
    let Some(_pair) = Pair::new() else {
        return skipped();
    };
    for (ns, addr) in [("roce-a", "fd00:78::1/64"), ("roce-b", "fd00:78::2/64")] {
        let dev = if ns == "roce-a" { "roce-va" } else { "roce-vb" };
        assert!(ip(&[
            "-n", ns, "-6", "addr", "add", addr, "dev", dev, "nodad"
        ]));
    }
    // Path MTU 1024: the veth pair's link MTU is 1500.
    let test = [
        "perf",
        "write",
        "--perftest",
        "--cm",
        "-s",
        "65536",
        "-n",
        "200",
        "-m",
        "1024",
    ];
    let mut server = Command::new("ip")
        .args(["netns", "exec", "roce-b", BIN])
        .args(test)
        .args(["--server", "--bind", "fd00:78::2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let out = Command::new("ip")
        .args(["netns", "exec", "roce-a", BIN])
        .args(test)
        .args([
            "--client",
            "[fd00:78::2]:18515",
            "--bind",
            "fd00:78::1",
            "--json",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let started = Instant::now();
    while server.try_wait().unwrap().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "server still running; the client: {text}{err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let served = server.wait_with_output().unwrap();
    assert!(out.status.success(), "{text}{err}");
    assert!(
        served.status.success(),
        "the server: {}",
        String::from_utf8_lossy(&served.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(r["iterations"], 200, "{r}");
    assert_eq!(r["size"], 65536, "{r}");
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

/// Sniffs, on `argv[1]` (a bridge port), one RoCEv2 frame from `argv[2]` to `argv[3]` and
/// prints its destination QPN and destination hardware address: what an attacker is assumed
/// to know (a QPN can be swept), not what it learns from its own port.
const SNIFF: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[1], 0))
s.settimeout(1.0)
end = time.time() + 30
while time.time() < end:
    try:
        f = s.recv(65535)
    except socket.timeout:
        continue
    if len(f) < 54 or f[12:14] != b"\x08\x00" or f[23] != 17:
        continue
    ihl = (f[14] & 15) * 4
    u = 14 + ihl
    if socket.inet_ntoa(f[26:30]) != sys.argv[2] or socket.inet_ntoa(f[30:34]) != sys.argv[3]:
        continue
    if struct.unpack("!H", f[u + 2:u + 4])[0] != 4791:
        continue
    qpn = struct.unpack("!I", f[u + 12:u + 16])[0] & 0xFFFFFF
    print(qpn, f[0:6].hex(), flush=True)
    sys.exit(0)
sys.exit("no RoCE frame seen")
"#;

/// From its own port `argv[1]`, frames that claim the server's address `argv[3]` to the
/// client `argv[2]` (QPN `argv[4]`, hardware address `argv[5]`) from another hardware address
/// (`argv[6]`), for `argv[7]` seconds: CNPs (no PSN at all) and WRITEs at random PSNs, each
/// with a valid ICRC (scapy computes it) and the default P_Key. Prints how many it sent.
const FORGE: &str = r#"
import random, socket, sys, time
from scapy.all import Ether, IP, UDP, Raw, raw
from scapy.contrib.roce import BTH
iface, victim, claimed, qpn, dmac, smac, secs = sys.argv[1:8]
qpn = int(qpn)
dmac = ":".join(dmac[i:i + 2] for i in range(0, 12, 2))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
rng = random.Random(7)
frames = []
for k in range(64):
    base = Ether(src=smac, dst=dmac) / IP(src=claimed, dst=victim, flags="DF", ttl=64) / UDP(sport=49152 + k, dport=4791, chksum=0)
    if k % 2 == 0:
        p = base / BTH(opcode=0x81, dqpn=qpn, pkey=0xFFFF, becn=1, psn=0) / Raw(b"\0" * 16)
    else:
        reth = rng.getrandbits(64).to_bytes(8, "big") + rng.getrandbits(32).to_bytes(4, "big") + (4).to_bytes(4, "big")
        p = base / BTH(opcode=0x0A, dqpn=qpn, pkey=0xFFFF, psn=rng.getrandbits(24), ackreq=1) / Raw(reth + b"evil")
    frames.append(raw(p))
sent = 0
end = time.time() + float(secs)
while time.time() < end:
    for f in frames:
        s.send(f)
        sent += 1
print(sent, flush=True)
"#;

/// Three namespaces on one bridge: the client (`roce-a`, 10.79.0.1), the server (`roce-b`,
/// 10.79.0.2) and an attacker (`roce-c`, 10.79.0.3), the bridge in `roce-br`. The bridge
/// forwards by learned hardware address, as a switch does: a frame the attacker sends from a
/// made-up address teaches the bridge that address, and frames to it go to the attacker only.
struct Bridge(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);
impl Bridge {
    const NS: [&'static str; 4] = ["roce-a", "roce-b", "roce-c", "roce-br"];
    fn new() -> Option<Self> {
        let guard = ONE_PAIR.lock().unwrap_or_else(|e| e.into_inner());
        for ns in Self::NS {
            let _ = ip(&["netns", "del", ns]);
        }
        let mut ok = Self::NS.iter().all(|ns| ip(&["netns", "add", ns]))
            && ip(&["-n", "roce-br", "link", "add", "br0", "type", "bridge"])
            && ip(&["-n", "roce-br", "link", "set", "br0", "up"]);
        for (x, addr) in [
            ("a", "10.79.0.1/24"),
            ("b", "10.79.0.2/24"),
            ("c", "10.79.0.3/24"),
        ] {
            let (host, port, ns) = (format!("rh-{x}"), format!("rb-{x}"), format!("roce-{x}"));
            ok = ok
                && ip(&["link", "add", &host, "type", "veth", "peer", "name", &port])
                && ip(&["link", "set", &host, "netns", &ns])
                && ip(&["link", "set", &port, "netns", "roce-br"])
                && ip(&["-n", "roce-br", "link", "set", &port, "master", "br0", "up"])
                && ip(&["-n", &ns, "addr", "add", addr, "dev", &host])
                && ip(&["-n", &ns, "link", "set", &host, "up"])
                && ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        let b = Self(guard);
        ok.then_some(b)
    }
}
impl Drop for Bridge {
    fn drop(&mut self) {
        for ns in Self::NS {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// The packet link learns where its peer is only from a datagram a QP took *in sequence*
/// (the expected request PSN, or a response for a PSN outstanding): forged CNPs and WRITEs at
/// random PSNs that claim the server's address, sent from another hardware address on the
/// same bridge, are taken or counted by the QP but move none of the client's traffic, and the
/// run completes on both ends. (Before, the first such frame moved the client's traffic to
/// the attacker: `RetryExcErr`, both ends exit 1.)
#[test]
fn forged_frames_on_the_segment_do_not_redirect_a_packet_link_connection() {
    let Some(_bridge) = Bridge::new() else {
        return skipped();
    };
    if !Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(std::env::var("CI").is_err(), "CI installs scapy");
        eprintln!("SKIPPED: python3 with scapy is needed for the forger");
        return;
    }
    let netns = |ns: &str| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]);
        c
    };
    for link in ["packet", "packet-ring"] {
        let srv = netns("roce-b")
            .args([BIN, "perf", "write", "--server", "--bind", "10.79.0.2"])
            .args(["--link", link])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let sniff = netns("roce-br")
            .args(["python3", "-c", SNIFF, "rb-b", "10.79.0.2", "10.79.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let client = netns("roce-a")
            .args([
                BIN,
                "perf",
                "write",
                "--client",
                "10.79.0.2",
                "--bind",
                "10.79.0.1",
            ])
            .args([
                "--link", link, "-s", "65536", "--mtu", "1024", "-n", "20000",
            ])
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let seen = sniff.wait_with_output().unwrap();
        let seen_text = String::from_utf8_lossy(&seen.stdout).into_owned();
        assert!(
            seen.status.success(),
            "{link}: sniffer: {seen_text}{}",
            String::from_utf8_lossy(&seen.stderr)
        );
        let mut it = seen_text.split_whitespace();
        let (qpn, mac) = (
            it.next().unwrap().to_string(),
            it.next().unwrap().to_string(),
        );
        let forger = netns("roce-c")
            .args(["python3", "-c", FORGE, "rh-c", "10.79.0.1", "10.79.0.2"])
            .args([&qpn, &mac, "02:00:00:00:00:66", "3"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Python and scapy start and build the frames in well under a second; the run is
        // still going when they arrive (20,000 WRITEs of 64 KiB take seconds on a bridge).
        std::thread::sleep(Duration::from_millis(1500));
        let mut client = client;
        let attacked = client.try_wait().unwrap().is_none();
        let forge = forger.wait_with_output().unwrap();
        let forged: u64 = String::from_utf8_lossy(&forge.stdout)
            .trim()
            .parse()
            .unwrap_or(0);
        assert!(
            forge.status.success() && forged > 0,
            "{link}: the forger sent nothing: {}",
            String::from_utf8_lossy(&forge.stderr)
        );
        let out = client.wait_with_output().unwrap();
        let srv = srv.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && srv.status.success(),
            "{link}: {forged} forged frames broke the run: client: {text}{}\nserver: {}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&srv.stderr)
        );
        let r: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        // The client kept sending through its packet socket, to the server's real address.
        assert!(
            r["sent"]["packet"].as_u64().unwrap() > 100_000,
            "{link}: {r}"
        );
        assert!(
            attacked,
            "{link}: the run ended before the forger began: {r}"
        );
        eprintln!("{link}: {forged} forged frames, run intact");
    }
}
