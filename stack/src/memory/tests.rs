use super::pattern::MAX_WRITTEN_RANGES;
use super::*;

#[test]
fn checks_key_pd_access_and_bounds() {
    let mut t = MrTable::default();
    let pd = PdHandle(0);
    let h = t.register(pd, 64, Access::LOCAL_WRITE | Access::REMOTE_READ);
    let mr = t.get(h).unwrap();
    let (rkey, va) = (mr.rkey(), mr.va());
    assert!(t
        .remote(rkey, (pd, roce_proto::Qpn(2)), Access::REMOTE_READ, va, 64)
        .is_ok());
    assert!(t
        .remote(
            rkey,
            (pd, roce_proto::Qpn(2)),
            Access::REMOTE_READ,
            va + 1,
            64
        )
        .is_err());
    assert!(t
        .remote(rkey, (pd, roce_proto::Qpn(2)), Access::REMOTE_WRITE, va, 1)
        .is_err());
    assert!(t
        .remote(
            rkey,
            (PdHandle(1), roce_proto::Qpn(2)),
            Access::REMOTE_READ,
            va,
            1
        )
        .is_err());
    assert!(t
        .remote(
            RKey(rkey.0 ^ 1),
            (pd, roce_proto::Qpn(2)),
            Access::REMOTE_READ,
            va,
            1
        )
        .is_err());
    assert!(t
        .remote(
            rkey,
            (pd, roce_proto::Qpn(2)),
            Access::REMOTE_READ,
            va - 1,
            1
        )
        .is_err());
    assert!(t
        .remote(
            rkey,
            (pd, roce_proto::Qpn(2)),
            Access::REMOTE_READ,
            u64::MAX,
            2
        )
        .is_err());
    assert!(t.invalidate(pd, rkey));
    assert!(t
        .remote(rkey, (pd, roce_proto::Qpn(2)), Access::REMOTE_READ, va, 1)
        .is_err());
    assert!(t.revalidate(h));
    assert!(t.deregister(h));
    assert!(t
        .remote(rkey, (pd, roce_proto::Qpn(2)), Access::REMOTE_READ, va, 1)
        .is_err());
}

#[test]
fn keys_and_addresses_follow_the_seed() {
    let layout = |seed| {
        let mut t = MrTable::new(seed);
        (0..64)
            .map(|_| {
                let h = t.register(PdHandle(0), 4096, Access::ALL);
                let m = t.get(h).unwrap();
                (m.rkey(), m.va())
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(layout(7), layout(7), "one seed, one layout");
    let (a, b) = (layout(7), layout(8));
    assert!(
        a.iter().zip(&b).all(|(x, y)| x.1 != y.1),
        "addresses differ by seed"
    );
    let key_bytes: std::collections::HashSet<u32> = a.iter().map(|k| k.0 .0 & 0xff).collect();
    assert!(key_bytes.len() > 32, "key bytes vary: {key_bytes:?}");
    for (i, (rkey, va)) in a.iter().enumerate() {
        assert_eq!(
            rkey.0 >> 8,
            i as u32 + 1,
            "the upper 24 bits index the table"
        );
        assert!(va % 4096 == 0 && *va >= 4096 && *va < 1 << 47, "{va:#x}");
    }
}

/// A peer scattering single bytes over a pattern region cannot grow its bookkeeping
/// without bound: past MAX_WRITTEN_RANGES disjoint ranges the region says it is not
/// complete, and keeps at most that many; wrong bytes are counted wherever they land.
#[test]
fn pattern_region_bookkeeping_is_bounded_under_scattered_writes() {
    let bytes: std::sync::Arc<[u8]> = (0..=255u8).cycle().take(1000).collect();
    let pattern = Pattern {
        bytes: bytes.clone(),
        start: 3,
        period: 997,
    };
    let mut t = MrTable::default();
    let len = 4 * MAX_WRITTEN_RANGES;
    let h = t
        .register_pattern(PdHandle(0), len, Access::LOCAL_WRITE, pattern.clone())
        .unwrap();
    let idx = h.0 as usize;
    // Every other byte, right values, backwards (no range ever grows in place).
    for off in (0..len).step_by(2).rev() {
        let want = bytes[3 + off % 997];
        t.write(idx, off, &[want]);
    }
    let mr = t.get_mut(h).unwrap();
    let check = mr.pattern_check().unwrap();
    assert!(!check.complete && check.mismatched == 0, "{check:?}");
    let state = mr.pattern.as_ref().unwrap();
    assert!(state.fragmented && state.written.len() <= MAX_WRITTEN_RANGES);
    // A wrong byte anywhere is counted; reads give the pattern, wrapping at the period.
    t.write(idx, 1, &[bytes[3 + 1].wrapping_add(1)]);
    assert_eq!(t.get_mut(h).unwrap().pattern_check().unwrap().mismatched, 1);
    let read = t.bytes(idx, 990, 20);
    let want: Vec<u8> = (990..1010).map(|i| bytes[3 + i % 997]).collect();
    assert_eq!(&read[..], &want[..]);
    // A pattern that runs past its bytes is refused.
    let bad = Pattern {
        start: 10,
        ..pattern
    };
    assert!(t
        .register_pattern(PdHandle(0), 8, Access::NONE, bad)
        .is_none());
}

#[test]
fn transport_writes_mark_pages_dirty() {
    let mut t = MrTable::default();
    let pd = PdHandle(0);
    let h = t.register(pd, 5 * DIRTY_PAGE + 100, Access::LOCAL_WRITE);
    let idx = h.0 as usize;
    assert_eq!(t.get(h).unwrap().dirty_ranges().count(), 0);
    t.write(idx, DIRTY_PAGE - 1, &[7, 7]);
    t.write(idx, 5 * DIRTY_PAGE + 10, &[7]);
    let r: Vec<_> = t.get(h).unwrap().dirty_ranges().collect();
    assert_eq!(
        r,
        vec![0..2 * DIRTY_PAGE, 5 * DIRTY_PAGE..5 * DIRTY_PAGE + 100]
    );
    let mr = t.get_mut(h).unwrap();
    mr.zero_dirty();
    assert!(mr.as_slice().iter().all(|&b| b == 0));
    assert_eq!(mr.dirty_ranges().count(), 0);
    // A region of many pages with one dirty one far in.
    let big = t.register(pd, 1000 * DIRTY_PAGE, Access::LOCAL_WRITE);
    t.write(big.0 as usize, 777 * DIRTY_PAGE + 5, &[1]);
    let r: Vec<_> = t.get(big).unwrap().dirty_ranges().collect();
    assert_eq!(r, vec![777 * DIRTY_PAGE..778 * DIRTY_PAGE]);
}

#[test]
fn gather_and_scatter_span_entries() {
    let mut t = MrTable::default();
    let pd = PdHandle(0);
    let h = t.register(pd, 16, Access::LOCAL_WRITE);
    let mr = t.get(h).unwrap();
    let sgl = SgList::from_slice(&[mr.sge(0, 4), mr.sge(8, 8)]).unwrap();
    t.scatter(pd, &sgl, 2, &[1, 2, 3, 4, 5]).unwrap();
    assert_eq!(
        &t.get(h).unwrap().as_slice()[..12],
        &[0, 0, 1, 2, 0, 0, 0, 0, 3, 4, 5, 0]
    );
    let mut scratch = Vec::new();
    assert_eq!(
        t.gather(pd, &sgl, 2, 5, &mut scratch).unwrap(),
        &[1, 2, 3, 4, 5]
    );
    assert_eq!(t.gather(pd, &sgl, 4, 2, &mut scratch).unwrap(), &[3, 4]);
    assert_eq!(t.scatter(pd, &sgl, 10, &[9, 9, 9]), Err(MemError::Length));
}
