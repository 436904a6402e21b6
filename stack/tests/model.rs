//! Reference-model test: random workloads over impaired simulated links; every work request
//! (SEND, SEND with immediate or invalidate, WRITE, WRITE with immediate, READ, compare-and-
//! swap, fetch-and-add, ATOMIC WRITE, FLUSH) completes exactly once with the expected status,
//! receive completions carry the right length and immediate, and final memory on both sides
//! equals a plain in-order model.
//!
//! Seeds: `MODEL_SEEDS` consecutive seeds starting at `SIM_SEED` (default 0); by default 1000
//! in release builds and 120 in debug builds for the main test (0-20% loss, reordering,
//! duplication, 0-2% corruption, rxe's infinite `retry_cnt = 7`), and 300 / 30 for the variant
//! with IBA retry counting and a tenth of the impairments. `SIM_SEED=n MODEL_SEEDS=1` replays one;
//! add `SIM_PCAP=out.pcap` to write its traffic for `roce decode` or Wireshark.
#![allow(clippy::needless_range_loop)]

mod common;

use std::collections::HashMap;
use std::net::IpAddr;

use roce_proto::{Psn, Qpn, RKey};
use roce_stack::sim::{seed_from_env, LinkConfig, Rng, SeedGuard, Sim};
use roce_stack::{
    Access, Completion, ConnectParams, CqHandle, MrHandle, QpCaps, QpState, RecvRequest, SgList,
    WcOpcode, WcStatus, WorkRequest, WrOp,
};

const SRC_LEN: usize = 1 << 21;
const ATOM_WORDS: usize = 64;

struct Side {
    src: MrHandle,
    dst: MrHandle,
    atom: MrHandle,
    res: MrHandle,
    inv: MrHandle,
    /// Bump allocator in `dst`.
    dst_next: usize,
    /// Model of `dst`, `atom`, `res`.
    dst_model: Vec<u8>,
    atom_model: Vec<u64>,
    res_model: Vec<u8>,
    res_next: usize,
}

/// (wr_id, opcode, byte_len, signaled)
type ExpectedSend = (u64, WcOpcode, u32, bool);

struct QpPair {
    qpn: [Qpn; 2],
    scq: [CqHandle; 2],
    rcq: [CqHandle; 2],
}

#[derive(Debug, Clone, PartialEq)]
struct ExpectedRecv {
    wr_id: u64,
    opcode: WcOpcode,
    byte_len: u32,
    imm: Option<u32>,
    inv: Option<RKey>,
}

fn size(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=3 => rng.below(65) as usize,
        4..=6 => 64 + rng.below(4096) as usize,
        7..=8 => 4096 + rng.below(60_000) as usize,
        _ => 65_536 + rng.below((1 << 20) - 65_536 + 1) as usize,
    }
}

/// Splits `[off, off+len)` of region `mr` into 1..=3 SGEs.
fn sgl(rng: &mut Rng, sim: &mut Sim, host: usize, mr: MrHandle, off: usize, len: usize) -> SgList {
    let m = sim.device(host).mr(mr).unwrap();
    if len < 3 || rng.chance(0.5) {
        return SgList::one(m.sge(off as u64, len as u32));
    }
    let a = 1 + rng.below(len as u64 - 2) as usize;
    let b = a + rng.below((len - a) as u64) as usize;
    let mut l = SgList::new();
    for (s, e) in [(0, a), (a, b), (b, len)] {
        if e > s {
            l.push(m.sge((off + s) as u64, (e - s) as u32));
        }
    }
    l
}

/// `iba_retry`: read `retry_cnt = 7` as a plain count (IBA) and cut the impairments tenfold
/// (at most 2% loss), where exhausting seven retries in a row is vanishingly rare.
fn run_seed(seed: u64, iba_retry: bool) {
    let _guard = SeedGuard(seed);
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut sim = Sim::new(seed);
    common::pcap_from_env(&mut sim);
    let ips: [IpAddr; 2] = ["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
    let hosts = [sim.add_endpoint(ips[0]), sim.add_endpoint(ips[1])];
    let impair = rng.below(4);
    let p = |rng: &mut Rng| if impair == 0 { 0.0 } else { rng.unit() * 0.2 };
    let link = LinkConfig {
        delay: std::time::Duration::from_micros(1 + rng.below(10)),
        bandwidth_bps: if rng.chance(0.5) {
            Some(10_000_000_000 + rng.below(90) * 1_000_000_000)
        } else {
            None
        },
        loss: p(&mut rng),
        reorder: p(&mut rng),
        duplicate: p(&mut rng),
        corrupt: if impair == 0 { 0.0 } else { rng.unit() * 0.02 },
        ce_mark: rng.unit() * 0.1,
        ..LinkConfig::default()
    };
    let link = if iba_retry {
        LinkConfig {
            loss: link.loss * 0.1,
            reorder: link.reorder * 0.1,
            duplicate: link.duplicate * 0.1,
            corrupt: link.corrupt * 0.1,
            ..link
        }
    } else {
        link
    };
    sim.set_default_link(link);
    let mtu = [256, 512, 1024, 2048, 4096][rng.below(5) as usize];
    let nqps = 1 + rng.below(4) as usize;
    let timeout = 6 + rng.below(4) as u8;
    let min_rnr_timer = 1 + rng.below(4) as u8;
    let max_rd_atomic = 1 + rng.below(16) as u8;
    let sq_psn = Psn::new(if rng.chance(0.3) {
        0xff_ff00 + rng.below(256) as u32
    } else {
        rng.below(1 << 24) as u32
    });
    let rq_psn = Psn::new(rng.below(1 << 24) as u32);
    let opts = ConnectParams {
        mtu,
        timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer,
        max_rd_atomic,
        max_dest_rd_atomic: max_rd_atomic,
        sq_psn,
        rq_psn,
        ..ConnectParams::default()
    };
    // Memory.
    let mut sides = Vec::new();
    for &h in &hosts {
        let dev = sim.device(h);
        let pd = dev.alloc_pd();
        let src = dev.reg_mr(pd, SRC_LEN, Access::REMOTE_READ);
        let dst = dev.reg_mr(pd, 8 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let atom = dev.reg_mr(
            pd,
            ATOM_WORDS * 8,
            Access::LOCAL_WRITE | Access::REMOTE_ATOMIC | Access::REMOTE_WRITE,
        );
        let res = dev.reg_mr(pd, 8 * 4096, Access::LOCAL_WRITE);
        let inv = dev.reg_mr(pd, 64, Access::REMOTE_WRITE);
        let mut bytes = vec![0u8; SRC_LEN];
        rng.fill(&mut bytes);
        dev.mr_mut(src)
            .unwrap()
            .as_mut_slice()
            .copy_from_slice(&bytes);
        let mut atoms = vec![0u64; ATOM_WORDS];
        for (i, a) in atoms.iter_mut().enumerate() {
            *a = rng.next_u64() >> (i % 3 * 20);
            dev.mr_mut(atom).unwrap().as_mut_slice()[i * 8..i * 8 + 8]
                .copy_from_slice(&a.to_le_bytes());
        }
        sides.push((
            pd,
            bytes,
            Side {
                src,
                dst,
                atom,
                res,
                inv,
                dst_next: 0,
                dst_model: vec![0; 8 << 20],
                atom_model: atoms,
                res_model: vec![0; 8 * 4096],
                res_next: 0,
            },
        ));
    }
    let pds: Vec<_> = sides.iter().map(|s| s.0).collect();
    let srcs: Vec<Vec<u8>> = sides.iter().map(|s| s.1.clone()).collect();
    let mut sides: Vec<Side> = sides.into_iter().map(|s| s.2).collect();
    // Window and ACK-request spacing vary too (a separate stream keeps workloads comparable).
    let mut crng = Rng::new(seed ^ 0xcaca);
    let caps = QpCaps {
        // Up to 20% loss would exhaust an IBA retry count of 7 now and then; use rxe's reading.
        infinite_retry_at_7: !iba_retry,
        max_unacked_psns: [1, 4, 16, 128, 1024][crng.below(5) as usize],
        ack_req_every: [1, 8, 64][crng.below(3) as usize],
        ..QpCaps::default()
    };
    let mut pairs = Vec::new();
    for _ in 0..nqps {
        let mut qpn = [Qpn(0); 2];
        let mut scq = [CqHandle::clone(&sim.device(0).create_cq()); 2];
        let mut rcq = scq;
        for s in 0..2 {
            let dev = sim.device(hosts[s]);
            scq[s] = dev.create_cq();
            rcq[s] = dev.create_cq();
            qpn[s] = dev.create_qp(pds[s], scq[s], rcq[s], caps).unwrap();
        }
        sim.connect(hosts[0], qpn[0], hosts[1], qpn[1], &opts)
            .unwrap();
        pairs.push(QpPair { qpn, scq, rcq });
    }
    // Workload.
    let mut expected_send: HashMap<(usize, usize), Vec<ExpectedSend>> = HashMap::new();
    let mut expected_recv: HashMap<(usize, usize), Vec<ExpectedRecv>> = HashMap::new();
    let mut late_recvs: Vec<(usize, Qpn, RecvRequest)> = Vec::new();
    let nops = 4 + rng.below(16) as usize;
    let mut atom_word_of: HashMap<(usize, usize), usize> = HashMap::new();
    for k in 0..nops {
        let qi = rng.below(nqps as u64) as usize;
        let s = rng.below(2) as usize; // requester side
        let r = 1 - s;
        let kind = rng.below(10);
        let len = if kind >= 6 { 8 } else { size(&mut rng) };
        let signaled = rng.chance(0.8);
        let id = k as u64 + 1;
        let (req_host, resp_host) = (hosts[s], hosts[r]);
        let src_off = rng.below((SRC_LEN - len) as u64 + 1) as usize;
        let op;
        let list;
        let mut wc_len = len as u32;
        match kind {
            0..=2 => {
                // SEND / SEND with imm / SEND with invalidate: the next receive at the peer.
                let imm = (kind == 1).then(|| rng.next_u64() as u32);
                let inv_key = sim.device(resp_host).mr(sides[r].inv).unwrap().rkey();
                op = match kind {
                    0 => WrOp::Send,
                    1 => WrOp::SendWithImm(imm.unwrap()),
                    _ => WrOp::SendWithInv(inv_key),
                };
                list = sgl(&mut rng, &mut sim, req_host, sides[s].src, src_off, len);
                let slack = rng.below(64) as usize;
                let off = sides[r].dst_next;
                sides[r].dst_next += len + slack + 8;
                let rl = sgl(
                    &mut rng,
                    &mut sim,
                    resp_host,
                    sides[r].dst,
                    off,
                    len + slack,
                );
                sides[r].dst_model[off..off + len]
                    .copy_from_slice(&srcs[s][src_off..src_off + len]);
                let rr = RecvRequest {
                    wr_id: 1_000_000 + id,
                    sgl: rl,
                };
                expected_recv
                    .entry((qi, r))
                    .or_default()
                    .push(ExpectedRecv {
                        wr_id: rr.wr_id,
                        opcode: WcOpcode::Recv,
                        byte_len: len as u32,
                        imm,
                        inv: (kind == 2).then_some(inv_key),
                    });
                if rng.chance(0.2) || late_recvs.iter().any(|l| l.1 == pairs[qi].qpn[r]) {
                    late_recvs.push((resp_host, pairs[qi].qpn[r], rr));
                } else {
                    sim.device(resp_host)
                        .post_recv(pairs[qi].qpn[r], rr)
                        .unwrap();
                }
            }
            3 | 4 => {
                let off = sides[r].dst_next;
                sides[r].dst_next += len + 8;
                let dst_mr = sim.device(resp_host).mr(sides[r].dst).unwrap();
                let remote = dst_mr.remote_addr(off as u64);
                list = sgl(&mut rng, &mut sim, req_host, sides[s].src, src_off, len);
                sides[r].dst_model[off..off + len]
                    .copy_from_slice(&srcs[s][src_off..src_off + len]);
                if kind == 4 {
                    let imm = rng.next_u64() as u32;
                    op = WrOp::WriteWithImm(remote, imm);
                    let rr = RecvRequest {
                        wr_id: 1_000_000 + id,
                        sgl: SgList::new(),
                    };
                    expected_recv
                        .entry((qi, r))
                        .or_default()
                        .push(ExpectedRecv {
                            wr_id: rr.wr_id,
                            opcode: WcOpcode::RecvRdmaWithImm,
                            byte_len: len as u32,
                            imm: Some(imm),
                            inv: None,
                        });
                    if late_recvs.iter().any(|l| l.1 == pairs[qi].qpn[r]) || rng.chance(0.2) {
                        late_recvs.push((resp_host, pairs[qi].qpn[r], rr));
                    } else {
                        sim.device(resp_host)
                            .post_recv(pairs[qi].qpn[r], rr)
                            .unwrap();
                    }
                } else {
                    op = WrOp::Write(remote);
                }
            }
            5 => {
                let src_mr = sim.device(resp_host).mr(sides[r].src).unwrap();
                let remote = src_mr.remote_addr(src_off as u64);
                let off = sides[s].dst_next;
                sides[s].dst_next += len + 8;
                list = sgl(&mut rng, &mut sim, req_host, sides[s].dst, off, len);
                sides[s].dst_model[off..off + len]
                    .copy_from_slice(&srcs[r][src_off..src_off + len]);
                op = WrOp::Read(remote);
            }
            8 => {
                // ATOMIC WRITE (IBA 1.5, 9.4.7): eight bytes carried in the request, placed
                // once, in order with the other atomics on the word.
                let n = atom_word_of.len();
                let w = *atom_word_of.entry((qi, s)).or_insert(n % ATOM_WORDS);
                let atom_mr = sim.device(resp_host).mr(sides[r].atom).unwrap();
                let remote = atom_mr.remote_addr((w * 8) as u64);
                let value = rng.next_u64();
                op = WrOp::AtomicWrite {
                    remote,
                    data: value.to_le_bytes(),
                };
                sides[r].atom_model[w] = value;
                list = SgList::new();
                wc_len = 0;
            }
            9 => {
                // FLUSH (IBA 1.5, 9.4.8) of a range of the peer's destination region, or of
                // the whole region: completes, changes nothing.
                let off = rng.below(8 << 20) as usize;
                let dst_mr = sim.device(resp_host).mr(sides[r].dst).unwrap();
                let remote = dst_mr.remote_addr(off as u64);
                op = WrOp::Flush {
                    remote,
                    len: rng.below(((8 << 20) - off) as u64 + 1) as u32,
                    whole_region: rng.chance(0.3),
                };
                list = SgList::new();
                wc_len = 0;
            }
            _ => {
                // One word per (QP, direction): atomics on it run in this QP's order.
                let n = atom_word_of.len();
                let w = *atom_word_of.entry((qi, s)).or_insert(n % ATOM_WORDS);
                let atom_mr = sim.device(resp_host).mr(sides[r].atom).unwrap();
                let remote = atom_mr.remote_addr((w * 8) as u64);
                let cur = sides[r].atom_model[w];
                let orig = cur;
                if kind == 6 {
                    let compare = if rng.chance(0.5) { cur } else { rng.next_u64() };
                    let swap = rng.next_u64();
                    op = WrOp::CompareSwap {
                        remote,
                        compare,
                        swap,
                    };
                    if cur == compare {
                        sides[r].atom_model[w] = swap;
                    }
                } else {
                    let add = rng.next_u64() >> rng.below(64);
                    op = WrOp::FetchAdd { remote, add };
                    sides[r].atom_model[w] = cur.wrapping_add(add);
                }
                let roff = sides[s].res_next;
                sides[s].res_next += 8;
                sides[s].res_model[roff..roff + 8].copy_from_slice(&orig.to_le_bytes());
                list = SgList::one(
                    sim.device(req_host)
                        .mr(sides[s].res)
                        .unwrap()
                        .sge(roff as u64, 8),
                );
                wc_len = 8;
            }
        }
        let wr = WorkRequest {
            signaled,
            fence: rng.chance(0.1),
            ..WorkRequest::new(id, op, list)
        };
        sim.device(req_host)
            .post_send(pairs[qi].qpn[s], wr)
            .unwrap();
        expected_send
            .entry((qi, s))
            .or_default()
            .push((id, op.wc_opcode(), wc_len, signaled));
    }
    // Run; post the late receives part-way through (RNR NAKs and retries meanwhile).
    let late_at = sim.now().add_nanos(rng.below(200_000));
    sim.run_until(late_at);
    for (h, q, rr) in late_recvs {
        sim.device(h).post_recv(q, rr).unwrap();
    }
    assert!(sim.run_until_idle(), "simulation did not go idle");
    // Completions.
    if std::env::var("MODEL_DEBUG").is_ok() {
        eprintln!("link {link:?} opts {opts:?}");
        for pair in &pairs {
            for s in 0..2 {
                let q = sim.device(hosts[s]).qp(pair.qpn[s]).unwrap();
                eprintln!("side {s} {:?} {:?}", q.state(), q.stats());
            }
        }
    }
    for (qi, pair) in pairs.iter().enumerate() {
        for s in 0..2 {
            let dev = sim.device(hosts[s]);
            let mut got: Vec<Completion> = Vec::new();
            while let Some(c) = dev.poll_cq(pair.scq[s]) {
                got.push(c);
            }
            let want: Vec<_> = expected_send
                .get(&(qi, s))
                .map(|v| v.iter().filter(|e| e.3).cloned().collect())
                .unwrap_or_default();
            assert_eq!(
                got.len(),
                want.len(),
                "qp pair {qi} side {s}: send completions {got:#?} want {want:?} (stats {:?})",
                dev.qp(pair.qpn[s]).unwrap().stats()
            );
            for (c, w) in got.iter().zip(&want) {
                assert_eq!(
                    (c.wr_id, c.status, c.opcode, c.byte_len),
                    (w.0, WcStatus::Success, w.1, w.2),
                    "send completion"
                );
                assert_eq!(c.qp_num, pair.qpn[s]);
            }
            let mut rgot = Vec::new();
            while let Some(c) = dev.poll_cq(pair.rcq[s]) {
                rgot.push(c);
            }
            let rwant = expected_recv.remove(&(qi, s)).unwrap_or_default();
            assert_eq!(
                rgot.len(),
                rwant.len(),
                "qp pair {qi} side {s}: recv completions {rgot:#?}"
            );
            for (c, w) in rgot.iter().zip(&rwant) {
                assert_eq!(
                    ExpectedRecv {
                        wr_id: c.wr_id,
                        opcode: c.opcode,
                        byte_len: c.byte_len,
                        imm: c.imm_data,
                        inv: c.invalidated_rkey
                    },
                    *w
                );
                assert_eq!(c.status, WcStatus::Success);
            }
            let qp = dev.qp(pair.qpn[s]).unwrap();
            assert_eq!(qp.state(), QpState::Rts);
            assert_eq!(qp.send_queue_len(), 0);
        }
    }
    // Memory.
    for (i, side) in sides.iter().enumerate() {
        let dev = sim.device(hosts[i]);
        let dst = dev.mr(side.dst).unwrap().as_slice();
        if dst != &side.dst_model[..] {
            let at = dst
                .iter()
                .zip(&side.dst_model)
                .position(|(a, b)| a != b)
                .unwrap();
            panic!("side {i}: dst memory differs from the model at offset {at}");
        }
        let atom = dev.mr(side.atom).unwrap().as_slice();
        for (w, v) in side.atom_model.iter().enumerate() {
            assert_eq!(
                &atom[w * 8..w * 8 + 8],
                &v.to_le_bytes(),
                "side {i}: atomic word {w}"
            );
        }
        assert_eq!(
            dev.mr(side.res).unwrap().as_slice(),
            &side.res_model[..],
            "side {i}: atomic results"
        );
        assert_eq!(
            dev.mr(side.src).unwrap().as_slice(),
            &srcs[i][..],
            "side {i}: source changed"
        );
    }
}

#[test]
fn random_workloads_match_the_in_order_model() {
    let first = seed_from_env(0);
    let default = if cfg!(debug_assertions) { 120 } else { 1000 };
    let n: u64 = std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    for seed in first..first + n {
        run_seed(seed, false);
    }
}

#[test]
fn iba_retry_count_with_low_loss_matches_the_model() {
    let first = seed_from_env(0);
    let default = if cfg!(debug_assertions) { 30 } else { 300 };
    let n: u64 = std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    for seed in first..first + n {
        run_seed(seed, true);
    }
}
