//! Ground truth for `roce analyze`: impaired simulations, captured, analyzed, and the
//! analysis's per-QP counters required to equal what the simulator's QPs counted and what its
//! links did. Many seeds; the failing seed is printed (`SIM_SEED` reruns one).
mod common;

use std::net::IpAddr;

use roce_pcap::analyze::{self, Analysis, Options, Side};
use roce_stack::sim::{seed_from_env, LinkConfig, SeedGuard, Sim, TapEvent, TapKind};
use roce_stack::{
    Access, ConnectParams, CqHandle, MrHandle, QpCaps, QpStats, RecvRequest, SgList, WcStatus,
    WorkRequest, WrOp,
};

const A: &str = "10.9.0.1";
const B: &str = "10.9.0.2";

struct Host {
    qp: roce_proto::Qpn,
    cq: CqHandle,
    mr: MrHandle,
}

/// What one side posted, by the analyzer's operation index (`analyze::OPS`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Posted([u64; 7]);

struct Run {
    sim: Sim,
    hosts: [Host; 2],
    posted: [Posted; 2],
    /// Receive requests held back (posted by [`late_receives`]).
    late: Vec<(usize, RecvRequest)>,
}

/// A small xorshift for the workload choices (the simulator has its own generator).
struct Pick(u64);
impl Pick {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn setup(seed: u64, link: LinkConfig, opts: ConnectParams) -> Run {
    let mut sim = Sim::new(seed);
    let a = sim.add_endpoint(A.parse().unwrap());
    let b = sim.add_endpoint(B.parse().unwrap());
    sim.set_default_link(link);
    let mut mk = |h| {
        let d = sim.device(h);
        let pd = d.alloc_pd();
        let cq = d.create_cq();
        let mr = d.reg_mr(pd, 1 << 20, Access::ALL);
        let qp = d.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
        Host { qp, cq, mr }
    };
    let ha = mk(a);
    let hb = mk(b);
    sim.connect(a, ha.qp, b, hb.qp, &opts).unwrap();
    Run {
        sim,
        hosts: [ha, hb],
        posted: [Posted::default(); 2],
        late: Vec::new(),
    }
}

/// Posts `n` random work requests from host `h` to the other host: WRITE (with and without
/// immediate), SEND (with and without immediate), READ and fetch-and-add, of random sizes.
/// With `late`, a quarter of the SENDs and WRITEs with immediate find their receive request
/// only when [`late_receives`] posts it (RNR NAKs until then).
fn post(r: &mut Run, h: usize, n: u32, pick: &mut Pick, late: bool) {
    let o = 1 - h;
    let remote = r.sim.device(o).mr(r.hosts[o].mr).unwrap().remote_addr(0);
    for i in 0..n {
        let len = match pick.below(4) {
            0 => 1 + pick.below(64) as u32,
            1 => 1 + pick.below(4096) as u32,
            _ => 1 + pick.below(24 * 1024) as u32,
        };
        let sgl = SgList::one(r.sim.device(h).mr(r.hosts[h].mr).unwrap().sge(0, len));
        let (op, k) = match pick.below(7) {
            0 | 1 => (WrOp::Write(remote), 2),
            2 => (WrOp::WriteWithImm(remote, i), 3),
            3 => (WrOp::Send, 0),
            4 => (WrOp::SendWithImm(i), 1),
            5 => (WrOp::Read(remote), 4),
            _ => {
                let sgl = SgList::one(r.sim.device(h).mr(r.hosts[h].mr).unwrap().sge(0, 8));
                let wr = WorkRequest::new(u64::from(i), WrOp::FetchAdd { remote, add: 1 }, sgl);
                r.sim.device(h).post_send(r.hosts[h].qp, wr).unwrap();
                r.posted[h].0[5] += 1;
                continue;
            }
        };
        if k != 2 && k != 4 {
            // The other side's receive for it (SEND, SEND imm, WRITE imm).
            let rsgl = SgList::one(
                r.sim
                    .device(o)
                    .mr(r.hosts[o].mr)
                    .unwrap()
                    .sge(512 * 1024, 32 * 1024),
            );
            let rr = RecvRequest {
                wr_id: u64::from(i),
                sgl: rsgl,
            };
            if late && (!r.late.is_empty() || pick.below(4) == 0) {
                // Receives are consumed in order: once one is late, the rest wait too.
                r.late.push((o, rr));
            } else {
                r.sim.device(o).post_recv(r.hosts[o].qp, rr).unwrap();
            }
        }
        r.sim
            .device(h)
            .post_send(r.hosts[h].qp, WorkRequest::new(u64::from(i), op, sgl))
            .unwrap();
        r.posted[h].0[k] += 1;
    }
}

/// Runs `us` microseconds, then posts the receive requests held back.
fn late_receives(r: &mut Run, us: u64) {
    let until = r.sim.now() + core::time::Duration::from_micros(us);
    r.sim.run_until(until);
    for (h, rr) in std::mem::take(&mut r.late) {
        let qp = r.hosts[h].qp;
        r.sim.device(h).post_recv(qp, rr).unwrap();
    }
}

/// Runs until idle and requires every work request to complete successfully.
fn finish(r: &mut Run, seed: u64) {
    assert!(
        r.sim.run_until_idle(),
        "seed {seed}: the simulation did not finish"
    );
    for h in 0..2 {
        while let Some(c) = r.sim.device(h).poll_cq(r.hosts[h].cq) {
            assert_eq!(c.status, WcStatus::Success, "seed {seed}: {c:?}");
        }
    }
}

fn analyze_file(path: &std::path::Path) -> Analysis {
    let a = analyze::analyze_path(path.to_str().unwrap(), Options::default())
        .expect("the capture opens");
    assert!(a.error.is_none(), "{:?}", a.error);
    a
}

/// The side of the single connection sent by `addr`.
fn side<'a>(a: &'a Analysis, addr: &str, seed: u64) -> &'a Side {
    assert_eq!(
        a.connections.len(),
        1,
        "seed {seed}: one connection: {:#?}",
        a.connections.len()
    );
    let ip: IpAddr = addr.parse().unwrap();
    a.connections[0]
        .sides
        .iter()
        .find(|s| s.addr == Some(ip))
        .unwrap_or_else(|| panic!("seed {seed}: no side {addr}"))
}

fn naks(s: &QpStats) -> [u64; 6] {
    let n = s.naks_sent;
    [
        n.seq_err,
        n.rnr,
        n.invalid_request,
        n.remote_access,
        n.remote_op,
        0,
    ]
}

/// One seed with `SIM_SEED`, `SIM_SEEDS` of them when set (a longer hunt), else `default`.
fn seed_count(default: u64) -> u64 {
    if std::env::var_os("SIM_SEED").is_some() {
        return 1;
    }
    std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn tmp(name: &str, seed: u64) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "roce-analyze-{}-{name}-{seed}.pcap",
        std::process::id()
    ))
}

/// Captured where the packets leave their sender (what a NIC-side mirror sees): every
/// retransmission, NAK and CNP the QPs counted is in the capture, and the analysis counts
/// exactly those, per QP, over loss, reordering, duplication and CE marks on the links,
/// both directions sending, start PSNs near the wrap.
#[test]
fn counters_equal_the_simulators_at_the_senders() {
    let base = seed_from_env(1);
    let seeds = seed_count(300);
    let mut totals = [0u64; 5];
    for seed in base..base + seeds {
        let _g = SeedGuard(seed);
        let mut pick = Pick(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let link = LinkConfig {
            loss: [0.0, 0.01, 0.03, 0.06][pick.below(4) as usize],
            reorder: [0.0, 0.05][pick.below(2) as usize],
            duplicate: [0.0, 0.02][pick.below(2) as usize],
            ce_mark: [0.0, 0.05][pick.below(2) as usize],
            bandwidth_bps: Some(25_000_000_000),
            ..LinkConfig::default()
        };
        let mut opts = ConnectParams {
            sq_psn: roce_proto::Psn::new(0xff_ffff - pick.below(64) as u32),
            rq_psn: roce_proto::Psn::new(pick.below(0x100_0000) as u32),
            timeout: 8,
            ..ConnectParams::default()
        };
        opts.path.ecn = roce_proto::Ecn::Ect0;
        let mut r = setup(seed, link, opts);
        let path = tmp("send", seed);
        assert!(common::write_pcap_of(&mut r.sim, &path, TapKind::Sent));
        post(&mut r, 0, 30, &mut pick, seed % 3 == 0);
        if seed % 2 == 0 {
            post(&mut r, 1, 12, &mut pick, false);
        }
        late_receives(&mut r, 200);
        finish(&mut r, seed);
        r.sim.set_tap(Box::new(|_: &TapEvent<'_>| {}));
        let a = analyze_file(&path);
        for (h, addr) in [(0, A), (1, B)] {
            let st = *r.sim.device(h).qp(r.hosts[h].qp).unwrap().stats();
            let s = side(&a, addr, seed);
            let ctx = format!("seed {seed} {addr}: analysis {s:#?}\nsimulator {st:#?}");
            assert_eq!(s.messages, r.posted[h].0, "messages, {ctx}");
            assert_eq!(
                s.retransmitted_packets, st.retransmitted_packets,
                "retransmissions, {ctx}"
            );
            assert_eq!(s.naks, naks(&st), "NAKs, {ctx}");
            assert_eq!(s.cnps, st.cnps_sent, "CNPs, {ctx}");
            assert_eq!(s.packets, st.tx_packets, "packets, {ctx}");
            assert_eq!(
                (
                    s.psn_gaps,
                    s.never_seen_psns,
                    s.duplicates,
                    s.ghost_acks,
                    s.out_of_order
                ),
                (0, 0, 0, 0, 0),
                "nothing is missing or doubled at the sender, {ctx}"
            );
            // Every episode has a cause the capture shows.
            let episodes: u64 = s.episodes.iter().sum();
            assert!(episodes <= s.retransmitted_packets, "{ctx}");
            // Each episode is a rewind of the requester (a rewind during an episode joins
            // it); one caused by a timeout was a timer expiry.
            assert!(episodes <= st.rewinds, "episodes and rewinds, {ctx}");
            assert!(s.episodes[2] <= st.timeouts, "timeout episodes, {ctx}");
            totals[0] += s.retransmitted_packets;
            totals[1] += s.naks.iter().sum::<u64>();
            totals[2] += s.cnps;
            totals[3] += episodes;
            totals[4] += s.episodes[1];
        }
        let violated: Vec<_> = a.connections[0]
            .verdicts()
            .into_iter()
            .filter(|v| v.result == "violated")
            .collect();
        let sa = *r.sim.device(0).qp(r.hosts[0].qp).unwrap().stats();
        let sb = *r.sim.device(1).qp(r.hosts[1].qp).unwrap().stats();
        assert!(
            violated.is_empty(),
            "seed {seed}: our own stack violates {violated:#?}\nA {sa:#?}\nB {sb:#?}"
        );
        let _ = std::fs::remove_file(&path);
    }
    // The impairments did something to check.
    assert!(
        totals.iter().all(|&t| t > 0),
        "retransmissions, NAKs, CNPs, episodes, RNR episodes: {totals:?}"
    );
    eprintln!("retransmissions, NAKs, CNPs, episodes, RNR episodes over the seeds: {totals:?}");
}

/// Captured where the packets arrive (a receiver-side mirror) over links that duplicate and
/// CE-mark but do not lose or reorder: the network duplicates of requests the analysis finds
/// are the duplicate requests the responders saw, its CE marks are the links' marks, and
/// every CNP follows a CE mark.
#[test]
fn duplicates_and_ce_marks_equal_the_simulators_at_the_receivers() {
    let base = seed_from_env(100);
    let seeds = seed_count(200);
    let mut totals = [0u64; 3];
    for seed in base..base + seeds {
        let _g = SeedGuard(seed);
        let mut pick = Pick(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        // The copy follows its original at once, as a duplicating switch or a mirror does
        // (the simulator otherwise holds it back up to `reorder_delay`, and two delayed
        // copies of consecutive packets look just like a two-packet resend run).
        let link = LinkConfig {
            duplicate: 0.03,
            ce_mark: 0.08,
            bandwidth_bps: Some(25_000_000_000),
            reorder_delay: std::time::Duration::ZERO,
            ..LinkConfig::default()
        };
        let mut opts = ConnectParams {
            sq_psn: roce_proto::Psn::new(pick.below(0x100_0000) as u32),
            rq_psn: roce_proto::Psn::new(pick.below(0x100_0000) as u32),
            ..ConnectParams::default()
        };
        opts.path.ecn = roce_proto::Ecn::Ect0;
        let mut r = setup(seed, link, opts);
        let path = tmp("recv", seed);
        assert!(common::write_pcap_of(&mut r.sim, &path, TapKind::Delivered));
        post(&mut r, 0, 30, &mut pick, false);
        post(&mut r, 1, 10, &mut pick, false);
        finish(&mut r, seed);
        r.sim.set_tap(Box::new(|_: &TapEvent<'_>| {}));
        let a = analyze_file(&path);
        let mut ce = 0;
        for (h, addr) in [(0, A), (1, B)] {
            let other = *r.sim.device(1 - h).qp(r.hosts[1 - h].qp).unwrap().stats();
            let st = *r.sim.device(h).qp(r.hosts[h].qp).unwrap().stats();
            let s = side(&a, addr, seed);
            let ctx =
                format!("seed {seed} {addr}: analysis {s:#?}\nsimulator {st:#?}\npeer {other:#?}");
            assert_eq!(s.duplicates, other.duplicate_requests, "duplicates, {ctx}");
            assert_eq!(s.retransmitted_packets, st.retransmitted_packets, "{ctx}");
            // CNPs as they arrived (a duplicated CNP arrives twice).
            assert_eq!(s.cnps, other.cnps_received, "CNPs, {ctx}");
            assert!(s.cnps == 0 || s.ce_to_cnp.count() > 0, "{ctx}");
            ce += s.ecn_ce;
            totals[0] += s.duplicates;
            totals[2] += s.cnps;
        }
        let ce_received: u64 = (0..2)
            .map(|h| {
                r.sim
                    .device(h)
                    .qp(r.hosts[h].qp)
                    .unwrap()
                    .stats()
                    .ce_received
            })
            .sum();
        assert_eq!(
            ce,
            ce_received,
            "seed {seed}: CE marks (the links marked {})",
            r.sim.stats().ce_marked
        );
        totals[1] += ce;
        let _ = std::fs::remove_file(&path);
    }
    assert!(
        totals.iter().all(|&t| t > 0),
        "duplicates, CE marks, CNPs: {totals:?}"
    );
    eprintln!("duplicates, CE marks, CNPs over the seeds: {totals:?}");
}
