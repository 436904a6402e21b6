//! Pattern regions (`Device::reg_pattern_mr`): a region whose bytes are a shared pattern,
//! generated when read and checked when written, never stored. An RC WRITE of megabytes from
//! one pattern region to another over a lossy, duplicating, reordering link is verified byte
//! for byte without either side holding the bytes; a WRITE of other bytes, or one cut short,
//! is not. A failing case prints its seed.
mod common;

use std::sync::Arc;
use std::time::Duration;

use roce_proto::Psn;
use roce_stack::sim::{LinkConfig, Sim};
use roce_stack::{Access, ConnectParams, MrHandle, Pattern, SgList, WcStatus, WorkRequest, WrOp};

const PERIOD: usize = (1 << 16) - 1;

fn pattern(seed: u64, start: usize) -> Pattern {
    let mut bytes = vec![0u8; PERIOD + 4096];
    let mut x = seed | 1;
    for b in &mut bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    Pattern {
        bytes: Arc::from(bytes),
        start,
        period: PERIOD,
    }
}

/// Writes `len` bytes from a region of device 0 (a pattern region of `src`, or a region of
/// bytes holding `plain`) to a pattern region of `dst` on device 1, over a link losing,
/// duplicating and reordering `loss` of the datagrams; returns the receiver's check and
/// the completion status.
fn write(
    seed: u64,
    loss: f64,
    len: usize,
    src: Option<Pattern>,
    plain: Option<Vec<u8>>,
    dst: Pattern,
    wr_len: usize,
) -> (roce_stack::PatternCheck, WcStatus) {
    let mut sim = Sim::new(seed);
    sim.set_default_link(LinkConfig {
        delay: Duration::from_micros(2),
        loss,
        duplicate: loss,
        reorder: loss,
        reorder_delay: Duration::from_micros(5),
        ..LinkConfig::default()
    });
    let c = ConnectParams {
        rq_psn: Psn::new(5),
        sq_psn: Psn::new(9),
        ..ConnectParams::default()
    };
    let pair = common::connect_pairs(&mut sim, 1, |_| c);
    let (a, b, (pa, pb)) = (pair.a, pair.b, pair.pd);
    let (x, sa) = pair.send[0];
    let smr: MrHandle = match (src, plain) {
        (Some(p), _) => sim
            .device(a)
            .reg_pattern_mr(pa, len, Access::LOCAL_WRITE, p)
            .unwrap(),
        (None, Some(bytes)) => {
            let m = sim.device(a).reg_mr(pa, len, Access::LOCAL_WRITE);
            sim.device(a)
                .mr_mut(m)
                .unwrap()
                .as_mut_slice()
                .copy_from_slice(&bytes);
            m
        }
        _ => unreachable!(),
    };
    let rmr = sim
        .device(b)
        .reg_pattern_mr(pb, len, Access::LOCAL_WRITE | Access::REMOTE_WRITE, dst)
        .unwrap();
    assert!(
        sim.device(b).mr(rmr).unwrap().as_slice().is_empty(),
        "nothing stored"
    );
    let remote = sim.device(b).mr(rmr).unwrap().remote_addr(0);
    let sge = sim.device(a).mr(smr).unwrap().sge(0, wr_len as u32);
    sim.device(a)
        .post_send(
            x,
            WorkRequest::new(1, WrOp::Write(remote), SgList::one(sge)),
        )
        .unwrap();
    assert!(sim.run_until_idle(), "seed {seed}: the run never went idle");
    let wc = sim
        .device(a)
        .poll_cq(sa)
        .unwrap_or_else(|| panic!("seed {seed}: no completion"));
    let check = sim.device(b).mr_mut(rmr).unwrap().pattern_check().unwrap();
    (check, wc.status)
}

#[test]
fn megabytes_between_pattern_regions_verify_under_loss() {
    for seed in 0..8u64 {
        let len = 3 << 20;
        let p = pattern(77, 100);
        let (check, status) = write(seed, 0.02, len, Some(p.clone()), None, p, len);
        assert_eq!(status, WcStatus::Success, "seed {seed}");
        assert!(check.verified(), "seed {seed}: {check:?}");
        assert_eq!(check.written, len as u64, "seed {seed}");
    }
}

#[test]
fn other_bytes_or_too_few_do_not_verify() {
    let len = 200_000;
    let p = pattern(77, 100);
    // The same pattern from another start: every packet's bytes are wrong.
    let (check, status) = write(1, 0.0, len, Some(pattern(77, 101)), None, p.clone(), len);
    assert_eq!(status, WcStatus::Success);
    assert!(
        !check.verified() && check.complete && check.mismatched > 0,
        "{check:?}"
    );
    // Bytes of a region that hold the pattern but one.
    let mut plain = Vec::new();
    let mut x = 0;
    while plain.len() < len {
        let pos = x % PERIOD;
        plain.push(p.bytes[p.start + pos]);
        x += 1;
    }
    let (check, _) = write(2, 0.0, len, None, Some(plain.clone()), p.clone(), len);
    assert!(
        check.verified(),
        "the pattern's own bytes from a plain region: {check:?}"
    );
    plain[123_456] ^= 1;
    let (check, _) = write(2, 0.0, len, None, Some(plain), p.clone(), len);
    assert_eq!((check.complete, check.mismatched), (true, 1), "{check:?}");
    // A WRITE shorter than the region leaves it incomplete.
    let (check, _) = write(3, 0.0, len, Some(p.clone()), None, p, len - 1000);
    assert!(!check.complete && check.mismatched == 0, "{check:?}");
    assert_eq!(check.written, (len - 1000) as u64);
}
