//! The KV-cache push (`roce_apps::kv`) on the simulator: the decode side's immediate arrives
//! only once every byte its QP wrote is in place (checked at that moment), on clean and impaired
//! links; scattered blocks with merging land every byte; the receiver counts one immediate per
//! QP and waits for all of them. Seeds print on failure (replay with `SIM_SEED`).
#[path = "../../stack/tests/common/mod.rs"]
mod common;

use roce_apps::kv::{
    AllocKind, KvLayout, KvReceiver, KvSender, KvSpec, ModelShape, PlanSpec, Transfer,
};
use roce_driver::Application;
use roce_proto::Psn;
use roce_stack::sim::{seed_from_env, LinkConfig, SeedGuard, Sim};
use roce_stack::{Access, ConnectParams, MrHandle};

struct Run {
    sim: Sim,
    sender: KvSender,
    receiver: KvReceiver,
    pool: MrHandle,
}

const A: usize = 0;
const B: usize = 1;

fn setup(spec: &KvSpec, plan: &PlanSpec, link: LinkConfig, seed: u64) -> Run {
    let mut sim = Sim::new(seed);
    sim.set_default_link(link);
    let p = common::connect_pairs(&mut sim, spec.qps, |q| ConnectParams {
        mtu: 1024,
        sq_psn: Psn::new((seed as u32).wrapping_mul(7919).wrapping_add(q) & 0xff_ffff),
        ..ConnectParams::default()
    });
    let (a, b, (pa, pb), send, recv) = (p.a, p.b, p.pd, p.send, p.recv);
    assert_eq!((a, b), (A, B));
    // Decode: the pool, registered once; blocks for the request.
    let pool = sim.device(b).reg_mr(
        pb,
        spec.pool_bytes as usize,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let blocks = spec.allocate(plan, 0).unwrap();
    let transfer: Transfer = spec.transfer(plan, 0, &blocks).unwrap();
    let (va, rkey) = {
        let m = sim.device(b).mr(pool).unwrap();
        (m.va(), m.rkey())
    };
    let receiver = KvReceiver::new(sim.device(b), transfer.clone(), pool, &recv).unwrap();
    // Prefill: the source, computed.
    let src = sim
        .device(a)
        .reg_mr(pa, transfer.source_len as usize, Access::LOCAL_WRITE);
    let data = transfer.source();
    sim.device(a)
        .mr_mut(src)
        .unwrap()
        .as_mut_slice()
        .copy_from_slice(&data);
    let sender = KvSender::new(sim.device(a), transfer, src, &send, va, rkey).unwrap();
    Run {
        sim,
        sender,
        receiver,
        pool,
    }
}

impl Run {
    /// Steps until both are done or nothing moves. After every event the receiver polls, so
    /// it checks a QP's bytes at the moment its immediate completes.
    fn run(&mut self) {
        for _ in 0..20_000_000u64 {
            let now = self.sim.now();
            self.sender.poll(self.sim.device(A), now).unwrap();
            self.receiver.poll(self.sim.device(B), now).unwrap();
            if self.sender.done() && self.receiver.done() {
                return;
            }
            if !self.sim.step() {
                let now = self.sim.now();
                self.sender.poll(self.sim.device(A), now).unwrap();
                self.receiver.poll(self.sim.device(B), now).unwrap();
                if !self.sim.step() {
                    return;
                }
            }
        }
    }

    fn assert_verified(&mut self) {
        assert!(
            self.receiver.mismatches().is_empty(),
            "{:?}",
            self.receiver.mismatches()
        );
        assert!(self.sender.error().is_none(), "{:?}", self.sender.error());
        assert!(self.sender.done(), "sender did not finish");
        assert!(self.receiver.complete(), "receiver not complete");
        let dev = self.sim.device(B);
        assert!(
            self.receiver.finish(dev),
            "{:?}",
            self.receiver.mismatches()
        );
        let t = self.sender.transfer();
        assert!(self.receiver.verified_bytes() >= 2 * t.bytes);
    }
}

fn spec(qps: u32, seed: u64) -> KvSpec {
    let shape = ModelShape {
        layers: 3,
        tokens: 200,
        kv_bytes: 64,
    };
    KvSpec {
        shape,
        pool_bytes: 3 * shape.total_bytes(),
        qps,
        seed,
    }
}

fn impaired() -> LinkConfig {
    LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        duplicate: 0.02,
        corrupt: 0.01,
        ..LinkConfig::default()
    }
}

#[test]
fn immediate_arrives_after_every_byte_of_its_qp_clean_and_impaired() {
    for (i, link) in [LinkConfig::default(), impaired()].into_iter().enumerate() {
        for s in 0..3 {
            let seed = seed_from_env(40) + s;
            let _g = SeedGuard(seed);
            for plan in PlanSpec::defaults(AllocKind::Scattered) {
                let mut r = setup(&spec(2, seed), &plan, link, seed);
                r.run();
                r.assert_verified();
                if i == 1 && plan.name == "page1-separate" {
                    assert!(
                        r.sim.stats().lost > 0 && r.sim.stats().reordered > 0,
                        "the impaired link must lose and reorder: {:?}",
                        r.sim.stats()
                    );
                }
            }
        }
    }
}

#[test]
fn scattered_blocks_merged_land_every_byte() {
    for s in 0..4 {
        let seed = seed_from_env(70) + s;
        let _g = SeedGuard(seed);
        let plan = PlanSpec::kv(4, KvLayout::Adjacent, true, AllocKind::Scattered);
        let sp = spec(3, seed);
        let mut r = setup(&sp, &plan, impaired(), seed);
        let t = r.sender.transfer().clone();
        assert!(
            t.wrs() < t.copies && t.wrs() > u64::from(sp.shape.layers),
            "scattered blocks should merge into some runs, not one per layer: {} of {}",
            t.wrs(),
            t.copies
        );
        r.run();
        r.assert_verified();
    }
}

#[test]
fn receiver_counts_every_qp_before_completing() {
    let seed = seed_from_env(90);
    let _g = SeedGuard(seed);
    let plan = PlanSpec::kv(16, KvLayout::Separate, false, AllocKind::Scattered);
    let mut r = setup(&spec(3, seed), &plan, LinkConfig::default(), seed);
    // QP 2 straggles: nothing posted on it yet.
    r.sender.hold(2, true);
    r.run();
    assert!(
        r.receiver.mismatches().is_empty(),
        "{:?}",
        r.receiver.mismatches()
    );
    assert_eq!(r.receiver.arrived(), 2);
    assert!(!r.receiver.complete() && !r.receiver.done());
    // What QP 2 carries is not there yet: declaring the request complete now would hand the
    // decode step missing KV.
    let t = r.sender.transfer().clone();
    let mem = r.sim.device(B).mr(r.pool).unwrap().as_slice().to_vec();
    let missing = t.per_qp[2]
        .iter()
        .filter(|c| {
            mem[c.dst as usize..(c.dst + c.len) as usize]
                .iter()
                .all(|&b| b == 0)
        })
        .count();
    assert_eq!(missing, t.per_qp[2].len());
    assert!(!r.receiver.finish(r.sim.device(B)));
    r.sender.hold(2, false);
    r.run();
    assert_eq!(r.receiver.arrived(), 3);
    r.assert_verified();
}

#[test]
fn finish_catches_a_wrong_byte_and_a_stray_write() {
    let seed = seed_from_env(5);
    let _g = SeedGuard(seed);
    let plan = PlanSpec::kv(16, KvLayout::Adjacent, true, AllocKind::Scattered);
    for stray in [false, true] {
        let mut r = setup(&spec(1, seed), &plan, LinkConfig::default(), seed);
        r.run();
        assert!(r.receiver.complete());
        let t = r.sender.transfer().clone();
        let first = t.per_qp[0][0];
        let at = if stray {
            // Just before the lowest block (blocks never start at 0 in a scattered pool).
            t.per_qp[0].iter().map(|c| c.dst).min().unwrap() as usize - 1
        } else {
            first.dst as usize + 3
        };
        let m = r.sim.device(B).mr_mut(r.pool).unwrap();
        m.as_mut_slice()[at] ^= 0x5a;
        assert!(!r.receiver.finish(r.sim.device(B)), "stray={stray}");
        let text = r.receiver.mismatches()[0].to_string();
        assert!(text.contains(&format!("pool offset {at}")), "{text}");
    }
}
