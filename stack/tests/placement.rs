//! ATOMIC WRITE and FLUSH (IBA 1.5, IBTA Vol 1 annex A19) on RC QPs in the simulator: the 8
//! bytes land at once at an aligned address, each answered by an empty READ response; an rkey
//! without REMOTE_WRITE is a remote access error; misaligned posts are refused; and under loss
//! and duplication an ATOMIC WRITE is executed exactly once (a later write to the same word
//! is never undone by a replayed earlier one). A failing case prints its seed.
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use roce_proto::{Psn, RKey};
use roce_stack::sim::{LinkConfig, Sim};
use roce_stack::{
    Access, ConnectParams, CqHandle, MrHandle, PostError, QpCaps, RemoteAddr, SgList, WcOpcode,
    WcStatus, WorkRequest, WrOp,
};

struct Pair {
    sim: Sim,
    x: roce_proto::Qpn,
    scq: CqHandle,
    target: MrHandle,
    read_only: MrHandle,
}

fn pair(seed: u64, loss: f64) -> Pair {
    let mut sim = Sim::new(seed);
    sim.set_default_link(LinkConfig {
        delay: Duration::from_micros(2),
        loss,
        duplicate: loss,
        reorder: loss,
        reorder_delay: Duration::from_micros(5),
        ..LinkConfig::default()
    });
    let a = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let b = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let (pa, pb) = (sim.device(a).alloc_pd(), sim.device(b).alloc_pd());
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
    let c = ConnectParams {
        rq_psn: Psn::new(5),
        sq_psn: Psn::new(9),
        ..ConnectParams::default()
    };
    sim.connect(a, x, b, y, &c).unwrap();
    let target = sim
        .device(b)
        .reg_mr(pb, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let read_only = sim.device(b).reg_mr(pb, 4096, Access::REMOTE_READ);
    Pair {
        sim,
        x,
        scq: sa,
        target,
        read_only,
    }
}

fn remote(p: &mut Pair, mr: MrHandle, off: u64) -> RemoteAddr {
    p.sim.device(1).mr(mr).unwrap().remote_addr(off)
}

fn post(p: &mut Pair, wr_id: u64, op: WrOp) -> Result<(), PostError> {
    let x = p.x;
    p.sim
        .device(0)
        .post_send(x, WorkRequest::new(wr_id, op, SgList::default()))
}

#[test]
fn atomic_write_and_flush_complete_and_land() {
    let mut p = pair(1, 0.0);
    let at = {
        let mr = p.target;
        remote(&mut p, mr, 64)
    };
    post(
        &mut p,
        1,
        WrOp::AtomicWrite {
            remote: at,
            data: *b"8 bytes!",
        },
    )
    .unwrap();
    post(
        &mut p,
        2,
        WrOp::Flush {
            remote: at,
            len: 64,
            whole_region: false,
        },
    )
    .unwrap();
    post(
        &mut p,
        3,
        WrOp::Flush {
            remote: at,
            len: 0,
            whole_region: true,
        },
    )
    .unwrap();
    assert!(p.sim.run_until_idle());
    let scq = p.scq;
    let got: Vec<_> = std::iter::from_fn(|| p.sim.device(0).poll_cq(scq)).collect();
    assert_eq!(got.len(), 3);
    assert_eq!(
        (got[0].wr_id, got[0].opcode, got[0].status),
        (1, WcOpcode::AtomicWrite, WcStatus::Success)
    );
    assert_eq!(
        (got[1].wr_id, got[1].opcode, got[1].status),
        (2, WcOpcode::Flush, WcStatus::Success)
    );
    assert_eq!((got[2].wr_id, got[2].status), (3, WcStatus::Success));
    let t = p.target;
    assert_eq!(
        &p.sim.device(1).mr(t).unwrap().as_slice()[64..72],
        b"8 bytes!"
    );
    // Misaligned: refused at post.
    let odd = {
        let mr = p.target;
        remote(&mut p, mr, 65)
    };
    assert_eq!(
        post(
            &mut p,
            4,
            WrOp::AtomicWrite {
                remote: odd,
                data: [0; 8]
            }
        ),
        Err(PostError::InvalidAtomic)
    );
}

#[test]
fn atomic_write_without_remote_write_is_a_remote_access_error() {
    let mut p = pair(2, 0.0);
    let ro = {
        let mr = p.read_only;
        remote(&mut p, mr, 0)
    };
    post(
        &mut p,
        1,
        WrOp::AtomicWrite {
            remote: ro,
            data: [1; 8],
        },
    )
    .unwrap();
    assert!(p.sim.run_until_idle());
    let scq = p.scq;
    let c = p.sim.device(0).poll_cq(scq).unwrap();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RemAccessErr));
    // An rkey that names nothing, likewise.
    let mut p = pair(3, 0.0);
    let bogus = RemoteAddr {
        va: 0x1000,
        rkey: RKey(0xdead_beef),
    };
    post(
        &mut p,
        1,
        WrOp::AtomicWrite {
            remote: bogus,
            data: [1; 8],
        },
    )
    .unwrap();
    assert!(p.sim.run_until_idle());
    let scq = p.scq;
    assert_eq!(
        p.sim.device(0).poll_cq(scq).unwrap().status,
        WcStatus::RemAccessErr
    );
}

/// 100 seeds at 5 % loss, duplication and reordering: 50 ATOMIC WRITEs of increasing values
/// to one word, each followed by a FLUSH; all complete, in order, and the word ends with the
/// last value (a duplicate of an earlier write, replayed after a later one, would undo it).
#[test]
fn under_impairment_each_atomic_write_happens_once_in_order() {
    for seed in 0..100u64 {
        let mut p = pair(seed, 0.05);
        let at = {
            let mr = p.target;
            remote(&mut p, mr, 128)
        };
        for i in 0..50u64 {
            post(
                &mut p,
                2 * i,
                WrOp::AtomicWrite {
                    remote: at,
                    data: (i + 1).to_le_bytes(),
                },
            )
            .unwrap();
            post(
                &mut p,
                2 * i + 1,
                WrOp::Flush {
                    remote: at,
                    len: 8,
                    whole_region: false,
                },
            )
            .unwrap();
        }
        assert!(p.sim.run_until_idle(), "seed {seed}");
        let scq = p.scq;
        let ids: Vec<u64> = std::iter::from_fn(|| p.sim.device(0).poll_cq(scq))
            .map(|c| {
                assert_eq!(c.status, WcStatus::Success, "seed {seed}: {c:?}");
                c.wr_id
            })
            .collect();
        assert_eq!(ids, (0..100).collect::<Vec<_>>(), "seed {seed}");
        let t = p.target;
        let word = &p.sim.device(1).mr(t).unwrap().as_slice()[128..136];
        assert_eq!(
            u64::from_le_bytes(word.try_into().unwrap()),
            50,
            "seed {seed}"
        );
    }
}
