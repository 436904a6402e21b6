//! The attack suite: real servers and clients under an attacker on the same host, the way an
//! unprivileged user there can try it. The attacker has an ordinary UDP socket on a third
//! loopback address (127.0.n.3) that never sees the traffic, and plain TCP connections.
//!
//! The in-process attacks are worst cases: the attacker is handed every QPN, PSN, rkey and
//! address the run uses (from a capture tap on the client) and forges each packet with the
//! ICRC the genuine peer's headers give, so that only the address check stands in its way. Each
//! test asserts that the run still verifies every byte (so no attacker byte landed in a
//! region, and no QP left RTS), that the transport sent no NAK and made no rate cut because of
//! it, and that the forged datagrams were dropped as `wrong_address`.
//!
//! The process attacks check that every line and read is bounded (a giant control line, a
//! silent connection, a hostile server's endless line), that sizes a peer picks are bounded,
//! that memory stays under a stated bound (`VmHWM` from `/proc/<pid>/status`), and that exit
//! codes say what verified. Every loop is bounded in time.
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::BIN;
use roce_apps::perf::{self, PerfOptions, PerfTest};
use roce_apps::workload::{self, Report, RunConfig, WorkloadSpec};
use roce_driver::{Direction, Secrets, Tap, TapRecord};
use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, Msn, NakCode, Opcode, PKey, PacketRepr,
    Psn, Qpn, RKey, RethRepr, Syndrome, ROCEV2_UDP_PORT,
};
use roce_stack::{CcConfig, PathConfig};

// ---------------------------------------------------------------------------------------------
// In-process attacks on a verified workload.

/// What the tap learned of one direction of the run.
#[derive(Debug, Clone, Copy)]
struct Flow {
    /// Destination QP of the datagrams.
    qpn: Qpn,
    /// PSN of the latest one.
    psn: Psn,
    /// Their UDP source port.
    sport: u16,
}

#[derive(Debug, Default)]
struct Seen {
    /// Client → server requests.
    request: Option<Flow>,
    /// Server → client responses.
    response: Option<Flow>,
    /// The latest RETH of a client request (a valid address and rkey in the server's region).
    reth: Option<RethRepr>,
}

fn spy(seen: Arc<Mutex<Seen>>) -> Tap {
    Box::new(move |r: &TapRecord<'_>| {
        let Ok(p) = PacketRepr::parse_bytes(r.data) else {
            return;
        };
        let flow = Flow {
            qpn: p.bth.dest_qp,
            psn: p.bth.psn,
            sport: r.src.port(),
        };
        let mut s = seen.lock().unwrap();
        match r.direction {
            Direction::Sent if p.bth.opcode.is_request() => {
                s.request = Some(flow);
                if p.reth.is_some() && p.bth.opcode != Opcode::RC_RDMA_READ_REQUEST {
                    s.reth = p.reth;
                }
            }
            Direction::Received if !p.bth.opcode.is_request() => s.response = Some(flow),
            _ => {}
        }
    })
}

/// Which end the forged datagrams go to.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Victim {
    /// The responder: forged requests "from the client".
    Server,
    /// The requester: forged responses "from the server".
    Client,
}

/// A forged packet for the current state of the run (`k`: which of several PSNs to try).
type Forge = fn(&Seen, u32) -> Option<PacketRepr<'static>>;

const JUNK: [u8; 64] = [0xa7; 64];

fn bth(opcode: Opcode, qpn: Qpn, psn: Psn) -> BthRepr {
    BthRepr {
        opcode,
        pkey: PKey::DEFAULT,
        dest_qp: qpn,
        psn,
        ack_req: true,
        ..BthRepr::default()
    }
}

/// A request to the server at one of the next 16 PSNs it expects.
fn request(s: &Seen, k: u32, opcode: Opcode) -> Option<PacketRepr<'static>> {
    let f = s.request?;
    Some(PacketRepr {
        bth: bth(opcode, f.qpn, f.psn.add(1 + k % 16)),
        ..PacketRepr::default()
    })
}

/// A response to the client for one of the last 16 PSNs it sent.
fn response(s: &Seen, k: u32, opcode: Opcode) -> Option<PacketRepr<'static>> {
    let (req, resp) = (s.request?, s.response?);
    Some(PacketRepr {
        bth: bth(opcode, resp.qpn, req.psn.sub(k % 16)),
        ..PacketRepr::default()
    })
}

fn write_at(s: &Seen, k: u32, va_delta: u64, rkey_xor: u32) -> Option<PacketRepr<'static>> {
    let reth = s.reth?;
    let mut p = request(s, k, Opcode::RC_RDMA_WRITE_ONLY)?;
    p.reth = Some(RethRepr {
        va: reth.va.wrapping_add(va_delta),
        rkey: RKey(reth.rkey.0 ^ rkey_xor),
        dma_len: JUNK.len() as u32,
    });
    p.payload = &JUNK;
    Some(p)
}

/// Runs a verified loopback workload on 127.0.n.1/2 while an attacker on 127.0.n.3 sends
/// what `forge` makes to `victim` for as long as the run lasts (at most 20 s). Returns the
/// report and how many datagrams the attacker sent.
fn attacked_run(n: u8, victim: Victim, forge: Forge, cc: CcConfig) -> (Report, u64) {
    let client: IpAddr = format!("127.0.{n}.1").parse().unwrap();
    let server: IpAddr = format!("127.0.{n}.2").parse().unwrap();
    let attacker = UdpSocket::bind(format!("127.0.{n}.3:0")).unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let thread = {
        let (seen, stop, sent) = (seen.clone(), stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut k = 0u32;
            let mut buf = vec![0u8; 2048];
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
                let (packet, path) = {
                    let s = seen.lock().unwrap();
                    let path = match victim {
                        // As the server sees the client's datagrams, and the other way round.
                        Victim::Server => s.request.map(|f| PathConfig {
                            local: server,
                            remote: client,
                            remote_src_port: f.sport,
                            ..PathConfig::default()
                        }),
                        Victim::Client => s.response.map(|f| PathConfig {
                            local: client,
                            remote: server,
                            remote_src_port: f.sport,
                            ..PathConfig::default()
                        }),
                    };
                    (forge(&s, k), path)
                };
                let (Some(p), Some(path)) = (packet, path) else {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                };
                k = k.wrapping_add(1);
                let len = p.emit(&mut buf).unwrap();
                // The ICRC the genuine peer's headers give: valid for the victim's path.
                path.rx_icrc(len).fill(&mut buf[..len]);
                let to = SocketAddr::new(path.local, ROCEV2_UDP_PORT);
                if attacker.send_to(&buf[..len], to).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                if k.is_multiple_of(4) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        })
    };
    let cfg = RunConfig {
        spec: WorkloadSpec {
            count: 400,
            qps: 2,
            max_size: 16 << 10,
            ..WorkloadSpec::default()
        },
        cc,
        secrets: Secrets::OsRandom,
        ..RunConfig::default()
    };
    let ends = roce_driver::connect::Ends::Both {
        client,
        server,
        port: 0,
    };
    let c = roce_driver::connect::Connector::new(
        roce_driver::connect::Exchange::Control,
        ends,
        cfg.secrets,
        cfg.link,
    );
    let w = workload::WorkloadRun {
        cfg: &cfg,
        impairment: cfg.impairment,
        taps: roce_driver::Taps::client(Some(spy(seen))),
    };
    let r = workload::run(c, w).map(|r| match r {
        roce_driver::connect::Ran::Client(r) => r,
        other => panic!("both ends ran in this process: {other:?}"),
    });
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
    let r = r.unwrap_or_else(|e| panic!("the attacked run failed: {e}"));
    (r, sent.load(Ordering::Relaxed))
}

/// The run verified, nothing the attacker sent had an effect, and it was dropped as coming
/// from the wrong address.
fn unharmed(r: &Report, sent: u64, victim: Victim) {
    assert!(r.ok, "the attacked run did not verify: {:?}", r.errors);
    assert!(sent > 0, "the attacker never got to send");
    let dropped = match victim {
        Victim::Server => r.server.drops.wrong_address,
        Victim::Client => r.client.drops.wrong_address,
    };
    assert!(
        dropped > 0,
        "no forged datagram was dropped as wrong_address ({sent} sent): {:?}",
        r.drops
    );
    // (Loss under load can cause sequence NAKs, RNR NAKs and retransmissions; these only
    // a processed forgery causes.)
    let n = r.naks;
    assert_eq!(
        n.remote_access + n.invalid_request + n.remote_op,
        0,
        "NAKs sent: {n:?}"
    );
    assert_eq!(r.rate_cuts, 0, "rate cuts");
    let d = r.drops;
    assert_eq!(
        d.ghost_response + d.bad_icrc + d.bad_pkey + d.malformed,
        0,
        "a forged datagram got past the address check: {d:?}"
    );
}

fn attack(n: u8, victim: Victim, forge: Forge) {
    let (r, sent) = attacked_run(n, victim, forge, CcConfig::None);
    unharmed(&r, sent, victim);
}

#[test]
fn spoofed_write_lands_nowhere() {
    attack(60, Victim::Server, |s, k| write_at(s, k, 0, 0));
}

#[test]
fn spoofed_send_is_not_delivered() {
    attack(61, Victim::Server, |s, k| {
        let mut p = request(s, k, Opcode::RC_SEND_ONLY)?;
        p.payload = &JUNK;
        Some(p)
    });
}

#[test]
fn write_with_a_wrong_rkey_kills_no_qp() {
    attack(62, Victim::Server, |s, k| write_at(s, k, 0, 0xff));
}

#[test]
fn write_out_of_bounds_kills_no_qp() {
    attack(63, Victim::Server, |s, k| write_at(s, k, 1 << 40, 0));
}

#[test]
fn two_gib_read_kills_no_qp() {
    attack(64, Victim::Server, |s, k| {
        let reth = s.reth?;
        let mut p = request(s, k, Opcode::RC_RDMA_READ_REQUEST)?;
        p.reth = Some(RethRepr {
            dma_len: 1 << 31,
            ..reth
        });
        Some(p)
    });
}

#[test]
fn misaligned_atomic_kills_no_qp() {
    attack(65, Victim::Server, |s, k| {
        let reth = s.reth?;
        let mut p = request(s, k, Opcode::RC_FETCH_ADD)?;
        p.atomic_eth = Some(AtomicEthRepr {
            va: reth.va + 3,
            rkey: reth.rkey,
            swap_add: 1,
            compare: 0,
        });
        Some(p)
    });
}

#[test]
fn small_read_request_reflects_nothing() {
    // 32 bytes on the wire asking for 16 MiB to be sent to the client.
    attack(66, Victim::Server, |s, k| {
        let reth = s.reth?;
        let mut p = request(s, k, Opcode::RC_RDMA_READ_REQUEST)?;
        p.reth = Some(RethRepr {
            dma_len: 16 << 20,
            ..reth
        });
        Some(p)
    });
}

#[test]
fn spoofed_atomic_ack_is_not_delivered() {
    attack(67, Victim::Client, |s, k| {
        let mut p = response(s, k, Opcode::RC_ATOMIC_ACKNOWLEDGE)?;
        p.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: Msn(0),
        });
        p.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig_data: 0xdead_beef,
        });
        Some(p)
    });
}

#[test]
fn spoofed_read_response_is_not_delivered() {
    attack(68, Victim::Client, |s, k| {
        let mut p = response(s, k, Opcode::RC_RDMA_READ_RESPONSE_ONLY)?;
        p.aeth = Some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: Msn(0),
        });
        p.payload = &JUNK;
        Some(p)
    });
}

#[test]
fn ghost_remote_access_nak_fails_no_qp() {
    attack(69, Victim::Client, |s, k| {
        let mut p = response(s, k, Opcode::RC_ACKNOWLEDGE)?;
        p.aeth = Some(AethRepr {
            syndrome: Syndrome::nak(NakCode::RemoteAccessError),
            msn: Msn(0),
        });
        Some(p)
    });
}

#[test]
fn cnp_flood_cuts_no_rate() {
    let (r, sent) = attacked_run(
        70,
        Victim::Client,
        |s, _| {
            let resp = s.response?;
            Some(PacketRepr {
                bth: BthRepr {
                    ack_req: false,
                    ..bth(Opcode::CNP, resp.qpn, Psn::new(0))
                },
                payload: &[0u8; 16],
                ..PacketRepr::default()
            })
        },
        CcConfig::PAPER,
    );
    unharmed(&r, sent, Victim::Client);
    assert_eq!(
        r.cnps_received, 0,
        "forged CNPs reached the congestion control"
    );
}

#[test]
fn perf_udp_baseline_answers_only_its_client() {
    let (client, server) = ("127.0.71.1", "127.0.71.2");
    let attacker = UdpSocket::bind("127.0.71.3:0").unwrap();
    attacker
        .set_read_timeout(Some(Duration::from_millis(1)))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        let attacker = attacker.try_clone().unwrap();
        std::thread::spawn(move || {
            let (mut sent, mut answered) = (0u64, 0u64);
            let started = Instant::now();
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(20) {
                if attacker.send_to(&[0x5a; 16], (server, 4791)).is_ok() {
                    sent += 1;
                }
                if attacker.recv(&mut buf).is_ok() {
                    answered += 1;
                }
            }
            (sent, answered)
        })
    };
    let specs = perf::specs(&PerfOptions {
        test: PerfTest::Udp,
        lat: false,
        size: Some(1024),
        sweep: false,
        iters: None,
        duration: Some(1.0),
        qps: 1,
        mtu: 4096,
        tx_depth: 128,
        outs: Some(8),
        request: Some(16),
        service: roce_stack::Service::Rc,
    })
    .unwrap();
    let mut results = Vec::new();
    let ends = roce_driver::connect::Ends::Both {
        client: client.parse().unwrap(),
        server: server.parse().unwrap(),
        port: 0,
    };
    let c = roce_driver::connect::Connector::new(
        roce_driver::connect::Exchange::Control,
        ends,
        Secrets::OsRandom,
        roce_driver::LinkChoice::Auto,
    );
    let run = perf::PerfRun {
        specs: &specs,
        baseline: false,
        perftest: Default::default(),
    };
    let r = perf::run(c, run, |r: &perf::PerfResult| {
        results.push(r.clone());
        true
    });
    stop.store(true, Ordering::Relaxed);
    let (sent, answered) = thread.join().unwrap();
    r.unwrap();
    let r = &results[0];
    assert!(sent > 0);
    assert_eq!(answered, 0, "the server answered the attacker");
    assert!(
        r.foreign_datagrams > 0,
        "the server did not see the attacker's {sent} datagrams as foreign: {r:?}"
    );
    assert_eq!(
        r.retransmitted_packets, 0,
        "the exchange lost requests: {r:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Attacks on the processes: lines, reads, sizes, memory, exit codes.

/// Peak resident memory so far of a running process, MiB (`VmHWM`), if it still runs.
fn peak_mib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// A child being watched: its peak memory is sampled every 10 ms until it exits or `limit`
/// passes (then it is killed).
struct Watched {
    child: Child,
    peak: f64,
}

impl Watched {
    fn spawn(args: &[&str]) -> Self {
        let child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start roce");
        Self { child, peak: 0.0 }
    }

    fn sample(&mut self) {
        if let Some(p) = peak_mib(self.child.id()) {
            self.peak = self.peak.max(p);
        }
    }

    /// Waits for the exit (sampling memory); `None` if it was still running after `limit`.
    fn wait(&mut self, limit: Duration) -> Option<(i32, String, String)> {
        let started = Instant::now();
        let status = loop {
            self.sample();
            if let Some(st) = self.child.try_wait().unwrap() {
                break Some(st);
            }
            if started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut out = String::new();
        let mut err = String::new();
        let _ = self.child.stdout.take().unwrap().read_to_string(&mut out);
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        status.map(|s| (s.code().unwrap_or(-1), out, err))
    }
}

/// Connects to a server that was just started (within 5 s).
fn connect(addr: &str) -> TcpStream {
    let started = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(e) if started.elapsed() > Duration::from_secs(5) => panic!("connect {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The three servers under test, serving on `ip` at ports `base`, `base + 10`, `base + 20`.
fn servers(ip: &str, base: u16) -> Vec<Vec<String>> {
    let port = |i: u16| (base + 10 * i).to_string();
    [
        vec![
            "server".into(),
            "--bind".into(),
            ip.into(),
            "--port".into(),
            port(0),
        ],
        vec![
            "perf".into(),
            "write".into(),
            "--server".into(),
            "--bind".into(),
            ip.into(),
            "--port".into(),
            port(1),
        ],
        vec![
            "kv".into(),
            "--server".into(),
            "--bind".into(),
            ip.into(),
            "--port".into(),
            port(2),
        ],
    ]
    .into()
}

/// The control address a server's arguments name.
fn control_addr(args: &[String]) -> String {
    let at = |flag: &str| &args[args.iter().position(|a| a == flag).unwrap() + 1];
    format!("{}:{}", at("--bind"), at("--port"))
}

/// Bound on the peak memory of a server or client that only talks on its control connection.
const CONTROL_ONLY_MIB: f64 = 48.0;

/// The clients of [`servers`], from `from`.
fn clients(ip: &str, base: u16, from: &str) -> Vec<Vec<String>> {
    let addr = |i: u16| format!("{ip}:{}", base + 10 * i);
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<String>>();
    vec![
        v(&["client", &addr(0), "--bind", from, "--count", "10"]),
        v(&[
            "perf",
            "write",
            "--bind",
            from,
            "-n",
            "10",
            "--client",
            &addr(1),
        ]),
        v(&["kv", "--bind", from, "--client", &addr(2)]),
    ]
}

/// A stranger's control connection that sends 64 MiB without a newline costs each server
/// that connection (cut at 4 MiB, with bounded memory, said in one line), not its life: the
/// next client is served and verifies.
#[test]
fn giant_control_lines_cost_the_server_that_connection_only() {
    let clients = clients("127.0.72.2", 21072, "127.0.72.1");
    for (args, client) in servers("127.0.72.2", 21072).into_iter().zip(clients) {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut server = Watched::spawn(&argv);
        let mut s = connect(&control_addr(&args));
        // 64 MiB without a newline; the server may hang up at any point.
        let chunk = vec![b'{'; 1 << 20];
        for _ in 0..64 {
            if s.write_all(&chunk).is_err() {
                break;
            }
            server.sample();
        }
        drop(s);
        let peak = server.peak;
        let cargv: Vec<&str> = client.iter().map(String::as_str).collect();
        let (code, out, err) = common::roce(&cargv);
        let (scode, _, serr) = server
            .wait(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{args:?} still running 20 s after its client"));
        assert_eq!(
            code, 0,
            "{cargv:?} after a giant line: {out}{err}\nserver: {serr}"
        );
        assert_eq!(scode, 0, "{args:?}: {serr}");
        let gave_up: Vec<&str> = serr
            .lines()
            .filter(|l| l.contains("gave up a control connection from 127.0.0.1"))
            .collect();
        assert_eq!(gave_up.len(), 1, "{args:?}: {serr}");
        assert!(gave_up[0].contains("longer than"), "{args:?}: {serr}");
        assert!(
            peak < CONTROL_ONLY_MIB,
            "{args:?} peaked at {peak:.0} MiB under a giant line"
        );
    }
}

/// A control connection that says nothing is given up after 10 s, in one line; the client
/// that comes after it is served.
#[test]
fn silent_control_connections_cost_the_server_that_connection_only() {
    // Each server and client on addresses of their own: they serve at once, each with its
    // RoCE socket on UDP 4791.
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let (c, s) = (
                format!("127.0.73.{}", 1 + 2 * i),
                format!("127.0.73.{}", 2 + 2 * i),
            );
            let args = servers(&s, 21073).swap_remove(i);
            let client = clients(&s, 21073, &c).swap_remove(i);
            std::thread::spawn(move || {
                let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                let mut server = Watched::spawn(&argv);
                let _silent = connect(&control_addr(&args));
                std::thread::sleep(Duration::from_secs(11));
                let cargv: Vec<&str> = client.iter().map(String::as_str).collect();
                let c = common::roce(&cargv);
                let r = server.wait(Duration::from_secs(20));
                (args.join(" "), c, r)
            })
        })
        .collect();
    for t in threads {
        let (args, (code, out, err), r) = t.join().unwrap();
        let (scode, _, serr) = r.unwrap_or_else(|| panic!("{args}: still running"));
        assert_eq!(code, 0, "{args}: the client: {out}{err}\nserver: {serr}");
        assert_eq!(scode, 0, "{args}: {serr}");
        let gave_up: Vec<&str> = serr
            .lines()
            .filter(|l| l.contains("gave up a control connection from 127.0.0.1"))
            .collect();
        assert_eq!(gave_up.len(), 1, "{args}: {serr}");
        assert!(gave_up[0].contains("within"), "{args}: {serr}");
    }
}

#[test]
fn a_hostile_server_streaming_an_endless_line_is_cut_off() {
    let clients: [&[&str]; 3] = [
        &["client", "--bind", "127.0.74.1", "--count", "10"],
        &[
            "perf",
            "write",
            "--bind",
            "127.0.74.1",
            "-n",
            "10",
            "--client",
        ],
        &["kv", "--bind", "127.0.74.1", "--client"],
    ];
    for (i, args) in clients.iter().enumerate() {
        let listener = TcpListener::bind(("127.0.74.2", 0)).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let feeder = std::thread::spawn(move || {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let chunk = vec![b'"'; 1 << 20];
            let started = Instant::now();
            // Endless, within bounds: until the client hangs up, or 20 s.
            while started.elapsed() < Duration::from_secs(20) && s.write_all(&chunk).is_ok() {}
        });
        let mut all: Vec<&str> = args.to_vec();
        let at = if i == 0 { 1 } else { all.len() };
        all.insert(at, &addr);
        let mut client = Watched::spawn(&all);
        let (code, _, err) = client
            .wait(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{all:?} still running after 20 s of an endless line"));
        feeder.join().unwrap();
        assert_ne!(code, 0, "{all:?}");
        assert_eq!(err.lines().count(), 1, "{all:?}: one error line: {err}");
        assert!(
            client.peak < CONTROL_ONLY_MIB,
            "{all:?} peaked at {:.0} MiB",
            client.peak
        );
    }
}

/// The first control line a real `roce client ARGS` sends (its hello), caught by a fake
/// server that then hangs up. Each call binds the client on an address of its own: the
/// client's RoCE socket (UDP 4791) is open before its hello, and the tests run in parallel.
fn hello_of(args: &[&str]) -> serde_json::Value {
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(1);
    let n = NEXT.fetch_add(2, Ordering::Relaxed);
    let listener = TcpListener::bind(format!("127.0.75.{}:0", n + 1)).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let bind = format!("127.0.75.{n}");
    let mut cmd: Vec<&str> = vec!["client", &addr, "--bind", &bind];
    cmd.extend_from_slice(args);
    let mut client = Watched::spawn(&cmd);
    let (s, _) = listener.accept().unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let _ = client.wait(Duration::from_secs(15));
    serde_json::from_str(&line).unwrap()
}

/// Sends `lines` to a `roce server` on `ip:port` as a client would, reads its answers, and
/// returns its exit code and stderr.
fn talk_to_server(ip: &str, port: u16, lines: &[String]) -> (i32, String, f64) {
    let p = port.to_string();
    let mut server = Watched::spawn(&["server", "--bind", ip, "--port", &p]);
    let mut s = connect(&format!("{ip}:{p}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rd = BufReader::new(s.try_clone().unwrap());
    for l in lines {
        s.write_all(l.as_bytes()).unwrap();
        s.write_all(b"\n").unwrap();
        if l.contains("hello") {
            let mut welcome = String::new();
            let _ = rd.read_line(&mut welcome);
            assert!(welcome.contains("welcome"), "{welcome}");
        }
        server.sample();
    }
    drop(s);
    let (code, _, err) = server
        .wait(Duration::from_secs(40))
        .expect("the server did not exit");
    (code, err, server.peak)
}

#[test]
fn a_client_that_verifies_nothing_does_not_get_the_server_to_say_ok() {
    let hello = hello_of(&["--count", "50"]).to_string();
    let lines = [hello, "\"ready\"".into(), r#"{"done":{"ok":true}}"#.into()];
    let (code, err, _) = talk_to_server("127.0.76.2", 21076, &lines);
    assert_ne!(code, 0, "the server said OK with nothing verified: {err}");
    assert!(err.contains("FAILED"), "{err}");
}

#[test]
fn a_hello_with_four_billion_operations_takes_no_memory() {
    let mut hello = hello_of(&["--count", "7"]);
    assert_eq!(
        hello["offer"]["msg"]["hello"]["spec"]["count"], 7,
        "the hello's layout changed: {hello}"
    );
    hello["offer"]["msg"]["hello"]["spec"]["count"] = u32::MAX.into();
    let lines = [hello.to_string(), "\"ready\"".into()];
    let (code, err, peak) = talk_to_server("127.0.77.2", 21077, &lines);
    // The client went away without running: the server fails, in one line, without having
    // built a plan of four billion operations.
    assert_ne!(code, 0, "{err}");
    assert!(peak < 64.0, "the server peaked at {peak:.0} MiB");
    assert!(!err.contains("memory allocation"), "{err}");
}

#[test]
fn loopback_memory_does_not_grow_with_the_count() {
    let mut run = Watched::spawn(&[
        "loopback",
        "--client-ip",
        "127.0.78.1",
        "--server-ip",
        "127.0.78.2",
        "--count",
        "4294967295",
        "--size",
        "0-64K",
    ]);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        run.sample();
        assert!(
            run.child.try_wait().unwrap().is_none(),
            "loopback --count 4294967295 stopped early"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let peak = run.peak;
    let _ = run.wait(Duration::ZERO);
    // Plus, on the packet ring (the default as root), the two endpoints' receive rings: fixed
    // sizes, resident once the kernel has written every slot.
    let rings = 2.0 * roce_driver::packet::RING_BYTES as f64 / f64::from(1 << 20);
    assert!(
        peak < 48.0 + rings,
        "loopback --count 4294967295 peaked at {peak:.0} MiB"
    );
}

#[test]
fn loopback_memory_is_sized_to_the_workload() {
    let mut run = Watched::spawn(&[
        "loopback",
        "--client-ip",
        "127.0.79.1",
        "--server-ip",
        "127.0.79.2",
        "--qps",
        "128",
        "--count",
        "10",
    ]);
    let (code, out, err) = run.wait(Duration::from_secs(60)).expect("finished");
    assert_eq!(code, 0, "{out}{err}");
    // 128 QPs of the default 0-1M mix: ~3.3 MiB each (was ~50).
    assert!(run.peak < 640.0, "--qps 128 peaked at {:.0} MiB", run.peak);
}

#[test]
fn the_kv_server_caps_the_pool_and_provides_it_lazily() {
    // Over the cap: refused, in one line, on both ends.
    let mut server = Watched::spawn(&["kv", "--server", "--bind", "127.0.80.2", "--port", "21081"]);
    std::thread::sleep(Duration::from_millis(300));
    let (code, out, err) = common::roce(&[
        "kv",
        "--client",
        "127.0.80.2:21081",
        "--bind",
        "127.0.80.1",
        "--pool",
        "8G",
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("at most 1024 MiB"), "{err}");
    let (scode, _, serr) = server.wait(Duration::from_secs(15)).expect("server exits");
    assert_ne!(scode, 0, "{serr}");
    assert!(
        server.peak < CONTROL_ONLY_MIB,
        "{:.0} MiB for a refused pool",
        server.peak
    );
    // Under a raised cap, a 4 GiB pool costs what is written into it, not 4 GiB.
    let mut server = Watched::spawn(&[
        "kv",
        "--server",
        "--bind",
        "127.0.80.2",
        "--port",
        "21082",
        "--max-pool",
        "8G",
    ]);
    std::thread::sleep(Duration::from_millis(300));
    let (code, out, err) = common::roce(&[
        "kv",
        "--client",
        "127.0.80.2:21082",
        "--bind",
        "127.0.80.1",
        "--pool",
        "4G",
    ]);
    let (scode, _, serr) = server.wait(Duration::from_secs(60)).expect("server exits");
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(scode, 0, "{serr}");
    assert!(
        server.peak < 256.0,
        "a 4 GiB pool with 16 MiB requests peaked at {:.0} MiB",
        server.peak
    );
}

#[test]
fn a_stopped_server_shows_the_qp_failure_first() {
    let (c, s) = ("127.0.81.1", "127.0.81.2");
    let mut server = Watched::spawn(&["server", "--bind", s, "--port", "21083"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Watched::spawn(&[
        "client",
        "127.0.81.2:21083",
        "--bind",
        c,
        "--count",
        "100000",
        "--size",
        "1K-64K",
        "--timeout",
        "10",
    ]);
    std::thread::sleep(Duration::from_millis(600));
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let r = client.wait(Duration::from_secs(30));
    let _ = Command::new("kill").args(["-CONT", &pid]).status();
    let _ = server.child.kill();
    let _ = server.child.wait();
    let (code, out, err) = r.expect("the client still runs 30 s after the server stopped");
    assert_ne!(code, 0, "{out}{err}");
    let first_error = out
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or_else(|| panic!("no report with the QP failure: {out}{err}"));
    assert!(
        first_error.contains("RetryExc") || first_error.contains("status"),
        "the first error is not the QP failure: {out}"
    );
}

#[test]
fn what_validation_accepts_runs() {
    let (code, out, err) = common::roce(&[
        "loopback",
        "--client-ip",
        "127.0.82.1",
        "--server-ip",
        "127.0.82.2",
        "--depth",
        "1024",
        "--qps",
        "1",
        "--count",
        "1500",
        "--size",
        "0-4K",
    ]);
    assert_eq!(code, 0, "--depth 1024: {out}{err}");
    let (code, out, err) = common::roce(&[
        "perf",
        "udp",
        "-n",
        "2000",
        "--client-ip",
        "127.0.82.1",
        "--server-ip",
        "127.0.82.2",
    ]);
    assert_eq!(code, 0, "perf udp without -s: {out}{err}");
    assert!(out.contains("65507"), "{out}");
}
