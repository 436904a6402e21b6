//! Memory windows (IBTA Vol 1 §10.6.7) in the simulator: type 1 bound by a verb, type 2 bound
//! through a QP; remote access through a window is limited to its range, its rights and (type
//! 2) its QP; a rebind changes the key byte so the old rkey stops working; SEND with
//! Invalidate revokes a type 2 window (and is refused for a type 1 window); local invalidate
//! too; a revoked rkey gets a remote access error; all of it under loss, reordering and
//! duplication too.
use std::net::{IpAddr, Ipv4Addr};

use roce_proto::{Qpn, RKey};
use roce_stack::sim::{LinkConfig, Rng, SeedGuard, Sim};
use roce_stack::{
    Access, ConnectParams, CqHandle, MrHandle, MwError, MwType, PdHandle, QpCaps, RecvRequest,
    RemoteAddr, SgList, WcStatus, WorkRequest, WrOp,
};

struct Two {
    sim: Sim,
    /// (requester QP on a, its send CQ, responder QP on b, its receive CQ), per pair.
    pairs: Vec<(Qpn, CqHandle, Qpn, CqHandle)>,
    pd_b: PdHandle,
    mr_a: MrHandle,
    mr_b: MrHandle,
}

/// Two devices with `n` QP pairs; b has one region that allows windows.
fn two(n: usize, mr_access: Access) -> Two {
    two_on(n, mr_access, 1, LinkConfig::default())
}

/// [`two`] with seed `seed` over links like `link`.
fn two_on(n: usize, mr_access: Access, seed: u64, link: LinkConfig) -> Two {
    let mut sim = Sim::new(seed);
    sim.set_default_link(link);
    let a = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let b = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let (pa, pb) = (sim.device(a).alloc_pd(), sim.device(b).alloc_pd());
    let mut pairs = Vec::new();
    for _ in 0..n {
        let (sa, ra) = (sim.device(a).create_cq(), sim.device(a).create_cq());
        let (sb, rb) = (sim.device(b).create_cq(), sim.device(b).create_cq());
        let x = sim
            .device(a)
            .create_qp(pa, sa, ra, QpCaps::default())
            .unwrap();
        let y = sim
            .device(b)
            .create_qp(pb, sb, rb, QpCaps::default())
            .unwrap();
        sim.connect(a, x, b, y, &ConnectParams::default()).unwrap();
        pairs.push((x, sa, y, rb));
    }
    let mr_a = sim.device(a).reg_mr(pa, 1 << 16, Access::LOCAL_WRITE);
    let mr_b = sim.device(b).reg_mr(pb, 1 << 16, mr_access);
    Two {
        sim,
        pairs,
        pd_b: pb,
        mr_a,
        mr_b,
    }
}

const ALL_MW: Access = Access(Access::ALL.0 | Access::MW_BIND.0);

impl Two {
    fn va_b(&mut self, off: u64) -> u64 {
        let m = self.mr_b;
        self.sim.device(1).mr(m).unwrap().va() + off
    }

    /// A WRITE of `len` bytes on pair `p` to `(va, rkey)`; returns its completion status.
    fn write(&mut self, p: usize, va: u64, rkey: RKey, len: u32) -> WcStatus {
        let (x, scq, ..) = self.pairs[p];
        let m = self.mr_a;
        let sge = self.sim.device(0).mr(m).unwrap().sge(0, len);
        self.sim
            .device(0)
            .post_send(
                x,
                WorkRequest::new(1, WrOp::Write(RemoteAddr { va, rkey }), SgList::one(sge)),
            )
            .unwrap();
        assert!(self.sim.run_until_idle());
        self.sim
            .device(0)
            .poll_cq(scq)
            .expect("a completion")
            .status
    }

    /// A SEND with Invalidate of `rkey` on pair `p`; returns the receive's completion.
    fn send_inv(&mut self, p: usize, rkey: RKey) -> roce_stack::Completion {
        let (x, _, y, rcq) = self.pairs[p];
        let mb = self.mr_b;
        let rsge = self.sim.device(1).mr(mb).unwrap().sge(60_000, 64);
        self.sim
            .device(1)
            .post_recv(
                y,
                RecvRequest {
                    wr_id: 7,
                    sgl: SgList::one(rsge),
                },
            )
            .unwrap();
        let ma = self.mr_a;
        let sge = self.sim.device(0).mr(ma).unwrap().sge(0, 16);
        self.sim
            .device(0)
            .post_send(
                x,
                WorkRequest::new(2, WrOp::SendWithInv(rkey), SgList::one(sge)),
            )
            .unwrap();
        assert!(self.sim.run_until_idle());
        // The SEND's own completion, so that the next one polled is the next request's.
        let scq = self.pairs[p].1;
        while self.sim.device(0).poll_cq(scq).is_some() {}
        self.sim
            .device(1)
            .poll_cq(rcq)
            .expect("a receive completion")
    }
}

#[test]
fn a_type_1_window_limits_range_and_rights_and_a_rebind_retires_the_old_key() {
    let mut t = two(1, ALL_MW);
    let pd = t.pd_b;
    let mw = t.sim.device(1).alloc_mw(pd, MwType::Type1).unwrap();
    let (mr, va) = (t.mr_b, t.va_b(1000));
    let key = t
        .sim
        .device(1)
        .bind_mw(mw, mr, va, 256, Access::REMOTE_WRITE)
        .unwrap();
    assert_ne!(key, mw, "a bind changes the key byte");
    assert_eq!(t.write(0, va, key, 256), WcStatus::Success);
    // Outside the window (but inside the region): refused.
    let mut t2 = two(1, ALL_MW);
    let (pd2, mr2, va2) = (t2.pd_b, t2.mr_b, t2.va_b(1000));
    let mw2 = t2.sim.device(1).alloc_mw(pd2, MwType::Type1).unwrap();
    let k2 = t2
        .sim
        .device(1)
        .bind_mw(mw2, mr2, va2, 256, Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(t2.write(0, va2 + 200, k2, 100), WcStatus::RemAccessErr);
    // A rebind: the old key no longer works, the new one does.
    let mut t3 = two(1, ALL_MW);
    let (pd3, mr3, va3) = (t3.pd_b, t3.mr_b, t3.va_b(0));
    let mw3 = t3.sim.device(1).alloc_mw(pd3, MwType::Type1).unwrap();
    let old = t3
        .sim
        .device(1)
        .bind_mw(mw3, mr3, va3, 4096, Access::REMOTE_WRITE)
        .unwrap();
    let new = t3
        .sim
        .device(1)
        .bind_mw(old, mr3, va3, 4096, Access::REMOTE_WRITE)
        .unwrap();
    assert_ne!(old, new);
    assert_eq!(t3.write(0, va3, new, 64), WcStatus::Success);
    assert_eq!(t3.write(0, va3, old, 64), WcStatus::RemAccessErr);
}

#[test]
fn binds_check_the_region() {
    let mut t = two(1, Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0));
    let pd = t.pd_b;
    let (mr, va) = (t.mr_b, t.va_b(0));
    let mw = t.sim.device(1).alloc_mw(pd, MwType::Type1).unwrap();
    assert_eq!(
        t.sim.device(1).bind_mw(mw, mr, va, 64, Access::REMOTE_READ),
        Err(MwError::NotBindable)
    );
    let mut t = two(1, Access(Access::MW_BIND.0 | Access::REMOTE_READ.0));
    let pd = t.pd_b;
    let (mr, va) = (t.mr_b, t.va_b(0));
    let mw = t.sim.device(1).alloc_mw(pd, MwType::Type1).unwrap();
    assert_eq!(
        t.sim
            .device(1)
            .bind_mw(mw, mr, va, 64, Access::REMOTE_WRITE),
        Err(MwError::Rights),
        "remote write rights over a region without local write"
    );
    assert_eq!(
        t.sim
            .device(1)
            .bind_mw(mw, mr, va + 65_000, 1000, Access::REMOTE_READ),
        Err(MwError::Range)
    );
    // A type 2 window cannot be bound with the type 1 verb.
    let mw2 = t.sim.device(1).alloc_mw(pd, MwType::Type2).unwrap();
    assert_eq!(
        t.sim
            .device(1)
            .bind_mw(mw2, mr, va, 64, Access::REMOTE_READ),
        Err(MwError::State)
    );
}

#[test]
fn a_type_2_window_serves_its_qp_only_and_send_with_invalidate_revokes_it() {
    let mut t = two(2, ALL_MW);
    let pd = t.pd_b;
    let (mr, va) = (t.mr_b, t.va_b(0));
    let y0 = t.pairs[0].2;
    let mw = t.sim.device(1).alloc_mw(pd, MwType::Type2).unwrap();
    let key = t
        .sim
        .device(1)
        .bind_mw_qp(y0, mw, mr, va, 4096, Access::REMOTE_WRITE, 0x5a)
        .unwrap();
    assert_eq!(key.0 & 0xff, 0x5a);
    assert_eq!(t.write(0, va, key, 128), WcStatus::Success);
    // The other QP pair: the rkey is not its to use.
    assert_eq!(t.write(1, va, key, 128), WcStatus::RemAccessErr);
    // Revoked by the peer of the QP it is bound through.
    let mut t = two(1, ALL_MW);
    let pd = t.pd_b;
    let (mr, va) = (t.mr_b, t.va_b(0));
    let y0 = t.pairs[0].2;
    let mw = t.sim.device(1).alloc_mw(pd, MwType::Type2).unwrap();
    let key = t
        .sim
        .device(1)
        .bind_mw_qp(y0, mw, mr, va, 4096, Access::REMOTE_WRITE, 1)
        .unwrap();
    let c = t.send_inv(0, key);
    assert_eq!(
        (c.status, c.invalidated_rkey),
        (WcStatus::Success, Some(key))
    );
    assert_eq!(
        t.write(0, va, key, 8),
        WcStatus::RemAccessErr,
        "a revoked rkey"
    );
}

#[test]
fn type_1_windows_refuse_remote_invalidation_and_type_2_local_invalidation_works() {
    let mut t = two(1, ALL_MW);
    let pd = t.pd_b;
    let (mr, va) = (t.mr_b, t.va_b(0));
    let mw = t.sim.device(1).alloc_mw(pd, MwType::Type1).unwrap();
    let key = t
        .sim
        .device(1)
        .bind_mw(mw, mr, va, 4096, Access::REMOTE_WRITE)
        .unwrap();
    let c = t.send_inv(0, key);
    assert_eq!(c.status, WcStatus::RemInvReqErr);
    // Local invalidate of a type 2 window.
    let mut t = two(1, ALL_MW);
    let pd = t.pd_b;
    let (mr, va) = (t.mr_b, t.va_b(0));
    let y0 = t.pairs[0].2;
    let mw = t.sim.device(1).alloc_mw(pd, MwType::Type2).unwrap();
    let key = t
        .sim
        .device(1)
        .bind_mw_qp(y0, mw, mr, va, 4096, Access::REMOTE_WRITE, 9)
        .unwrap();
    assert_eq!(t.write(0, va, key, 8), WcStatus::Success);
    t.sim.device(1).invalidate_mw(pd, key).unwrap();
    assert_eq!(t.write(0, va, key, 8), WcStatus::RemAccessErr);
    assert_eq!(t.sim.device(1).invalidate_mw(pd, key), Err(MwError::State));
}

/// 100 seeds at 5 % loss, reordering and duplication: WRITEs through a type 2 window land
/// whole, a SEND with Invalidate revokes it, and a WRITE after that never lands (a remote
/// access error, or the retry count when that NAK was lost).
#[test]
fn under_impairment_a_window_serves_until_revoked() {
    let link = LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        duplicate: 0.05,
        ..LinkConfig::default()
    };
    let mut refused_by_nak = 0;
    for seed in 0..100u64 {
        let _g = SeedGuard(seed);
        let mut t = two_on(1, ALL_MW, seed, link);
        let mut rng = Rng::new(seed);
        let ma = t.mr_a;
        let pattern: Vec<u8> = (0..1 << 16).map(|_| rng.next_u64() as u8).collect();
        t.sim
            .device(0)
            .mr_mut(ma)
            .unwrap()
            .as_mut_slice()
            .copy_from_slice(&pattern);
        let (pd, mr, va) = (t.pd_b, t.mr_b, t.va_b(0));
        let y0 = t.pairs[0].2;
        let mw = t.sim.device(1).alloc_mw(pd, MwType::Type2).unwrap();
        let key = t
            .sim
            .device(1)
            .bind_mw_qp(y0, mw, mr, va, 8192, Access::REMOTE_WRITE, seed as u8)
            .unwrap();
        for _ in 0..10 {
            let off = rng.below(4096);
            let len = 1 + rng.below(4096) as u32;
            assert_eq!(
                t.write(0, va + off, key, len),
                WcStatus::Success,
                "seed {seed}"
            );
            let got = &t.sim.device(1).mr(mr).unwrap().as_slice()[off as usize..][..len as usize];
            assert_eq!(got, &pattern[..len as usize], "seed {seed}: WRITE data");
        }
        let c = t.send_inv(0, key);
        assert_eq!(
            (c.status, c.invalidated_rkey),
            (WcStatus::Success, Some(key)),
            "seed {seed}"
        );
        // Refused: a remote access NAK, or (when that NAK was lost, and the responder, in
        // the error state after it, drops the retries) the retry count running out; the
        // bytes stay as they were either way.
        let before = t.sim.device(1).mr(mr).unwrap().as_slice()[4096..4104].to_vec();
        let status = t.write(0, va + 4096, key, 8);
        assert!(
            matches!(status, WcStatus::RemAccessErr | WcStatus::RetryExcErr),
            "seed {seed}: a revoked rkey gave {status:?}"
        );
        refused_by_nak += u32::from(status == WcStatus::RemAccessErr);
        assert_eq!(
            &t.sim.device(1).mr(mr).unwrap().as_slice()[4096..4104],
            &before[..],
            "seed {seed}: a WRITE through a revoked window landed"
        );
    }
    assert!(
        refused_by_nak >= 80,
        "{refused_by_nak} of 100 refused by a NAK"
    );
}
