//! UD QPs between two devices joined in memory: delivery with the GRH area and the sender's
//! QPN and address, immediates, the Q_Key rules (a foreign Q_Key is dropped; a high-bit Q_Key
//! in a work request sends with the QP's own), the one-MTU bound, a missing or short receive
//! buffer, a corrupted datagram, and loss (what arrives is intact, what is lost is counted).
//! A failing case prints its seed.
use std::net::{IpAddr, Ipv4Addr};

use roce_proto::{QKey, Qpn};
use roce_stack::rng::Rng;
use roce_stack::ud::{AddressHandle, UdSend, GRH_LEN};
use roce_stack::{
    Access, CqHandle, Device, DeviceConfig, Instant, MrHandle, PostError, RecvRequest, SgList,
    WcOpcode, WcStatus,
};

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const QKEY: QKey = QKey(0x1234_5678);

struct End {
    dev: Device,
    qpn: Qpn,
    cq: CqHandle,
    mr: MrHandle,
}

fn end(base: u32) -> End {
    let mut dev = Device::new(DeviceConfig {
        qpn_base: base,
        ..DeviceConfig::default()
    });
    let pd = dev.alloc_pd();
    let cq = dev.create_cq();
    let qpn = dev.create_ud_qp(pd, cq, cq, QKEY, 1024, 256).unwrap();
    let mr = dev.reg_mr(pd, 1 << 20, Access::LOCAL_WRITE);
    End { dev, qpn, cq, mr }
}

fn ah(from: IpAddr, to: IpAddr, qpn: Qpn, qkey: QKey) -> AddressHandle {
    AddressHandle {
        local: from,
        remote: to,
        remote_port: 4791,
        dest_qpn: qpn,
        qkey,
    }
}

/// Posts a send of `data` (written at `at` in the sender's region).
fn send(e: &mut End, at: u64, data: &[u8], ah: AddressHandle, imm: Option<u32>, wr_id: u64) {
    e.dev.mr_mut(e.mr).unwrap().as_mut_slice()[at as usize..at as usize + data.len()]
        .copy_from_slice(data);
    let sge = e.dev.mr(e.mr).unwrap().sge(at, data.len() as u32);
    e.dev
        .post_ud_send(
            e.qpn,
            UdSend {
                wr_id,
                sgl: SgList::one(sge),
                ah,
                imm,
                signaled: true,
            },
        )
        .unwrap();
}

fn recv(e: &mut End, at: u64, len: u32, wr_id: u64) {
    let sge = e.dev.mr(e.mr).unwrap().sge(at, len);
    e.dev
        .post_recv(
            e.qpn,
            RecvRequest {
                wr_id,
                sgl: SgList::one(sge),
            },
        )
        .unwrap();
}

/// Moves every datagram `from` sends to `to`, through `keep` (false: lost; it may also
/// change the bytes).
fn carry(from: &mut End, to: &mut End, mut keep: impl FnMut(&mut Vec<u8>) -> bool) -> usize {
    let mut buf = Vec::new();
    let mut n = 0;
    while let Some(t) = from.dev.poll_transmit(Instant::from_nanos(0), &mut buf) {
        let mut d = buf[..t.len].to_vec();
        if keep(&mut d) {
            to.dev
                .handle_datagram(Instant::from_nanos(0), &t.rx_meta(), &d);
        }
        n += 1;
    }
    n
}

#[test]
fn a_datagram_lands_after_the_grh_area_with_its_source() {
    let (mut a, mut b) = (end(0x100), end(0x200));
    recv(&mut b, 0, 2048, 7);
    let msg: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
    send(&mut a, 0, &msg, ah(A, B, b.qpn, QKEY), Some(0xfeed), 1);
    assert_eq!(carry(&mut a, &mut b, |_| true), 1);
    let sc = a.dev.poll_cq(a.cq).expect("a send completion");
    assert_eq!(
        (sc.status, sc.opcode, sc.byte_len),
        (WcStatus::Success, WcOpcode::Send, 200)
    );
    let rc = b.dev.poll_cq(b.cq).expect("a receive completion");
    assert_eq!(rc.status, WcStatus::Success);
    assert_eq!(rc.wr_id, 7);
    assert_eq!(rc.byte_len as usize, GRH_LEN + 200);
    assert_eq!(rc.imm_data, Some(0xfeed));
    assert_eq!(rc.src_qp, Some(a.qpn));
    assert_eq!(rc.src.map(|s| s.ip()), Some(A));
    let mem = b.dev.mr(b.mr).unwrap().as_slice();
    // The GRH area: 20 bytes of zeros, then the IPv4 header (version 4, UDP, A -> B).
    assert!(mem[..20].iter().all(|&x| x == 0));
    let ip = &mem[20..40];
    assert_eq!((ip[0], ip[9]), (0x45, 17));
    assert_eq!(&ip[12..16], &[10, 0, 0, 1]);
    assert_eq!(&ip[16..20], &[10, 0, 0, 2]);
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff, "IPv4 header checksum");
    assert_eq!(&mem[GRH_LEN..GRH_LEN + 200], &msg[..]);
    assert_eq!(b.dev.ud_qp(b.qpn).unwrap().stats().received, 1);
}

#[test]
fn q_keys_are_checked_and_the_high_bit_means_the_qps_own() {
    let (mut a, mut b) = (end(0x100), end(0x200));
    for i in 0..3 {
        recv(&mut b, i * 4096, 4096, i);
    }
    send(
        &mut a,
        0,
        b"wrong key",
        ah(A, B, b.qpn, QKey(0x1111)),
        None,
        1,
    );
    // High bit: sent with A's own Q_Key, which is B's.
    send(
        &mut a,
        64,
        b"controlled",
        ah(A, B, b.qpn, QKey(0x8000_0000)),
        None,
        2,
    );
    carry(&mut a, &mut b, |_| true);
    let s = b.dev.ud_qp(b.qpn).unwrap().stats();
    assert_eq!((s.bad_qkey, s.received), (1, 1));
    let rc = b.dev.poll_cq(b.cq).unwrap();
    assert_eq!(rc.byte_len as usize, GRH_LEN + 10);
    assert!(b.dev.poll_cq(b.cq).is_none());
}

#[test]
fn sizes_buffers_and_corruption() {
    let (mut a, mut b) = (end(0x100), end(0x200));
    // More than the MTU (1024): refused at post.
    let sge = a.dev.mr(a.mr).unwrap().sge(0, 1025);
    let r = a.dev.post_ud_send(
        a.qpn,
        UdSend {
            wr_id: 1,
            sgl: SgList::one(sge),
            ah: ah(A, B, b.qpn, QKEY),
            imm: None,
            signaled: true,
        },
    );
    assert_eq!(r, Err(PostError::TooLong));
    // No receive posted: dropped and counted.
    send(&mut a, 0, &[1; 100], ah(A, B, b.qpn, QKEY), None, 2);
    carry(&mut a, &mut b, |_| true);
    assert_eq!(b.dev.ud_qp(b.qpn).unwrap().stats().no_receive, 1);
    // A buffer without room for the GRH area and the payload: a length error.
    recv(&mut b, 0, 100, 3);
    send(&mut a, 0, &[2; 100], ah(A, B, b.qpn, QKEY), None, 3);
    carry(&mut a, &mut b, |_| true);
    let rc = b.dev.poll_cq(b.cq).unwrap();
    assert_eq!((rc.wr_id, rc.status), (3, WcStatus::LocLenErr));
    // A flipped payload bit: bad ICRC, dropped before a buffer is used.
    recv(&mut b, 0, 4096, 4);
    send(&mut a, 0, &[3; 100], ah(A, B, b.qpn, QKEY), None, 4);
    carry(&mut a, &mut b, |d| {
        let n = d.len();
        d[n - 10] ^= 1;
        true
    });
    assert_eq!(b.dev.ud_qp(b.qpn).unwrap().stats().bad_icrc, 1);
    assert!(b.dev.poll_cq(b.cq).is_none());
    // Not a UD QP of this device, and not an RC one: counted as an unknown QP.
    let before = b.dev.stats().drops.unknown_qp;
    send(&mut a, 0, &[4; 10], ah(A, B, Qpn(0x77_7777), QKEY), None, 5);
    carry(&mut a, &mut b, |_| true);
    assert_eq!(b.dev.stats().drops.unknown_qp, before + 1);
}

/// 200 seeds, 1,000 messages each, 20 % lost, 10 % delivered twice: every delivered message is
/// intact and one that was sent; deliveries = sent - lost + duplicated, all counted.
#[test]
fn under_loss_what_arrives_is_intact_and_what_is_lost_is_counted() {
    for seed in 0..200u64 {
        let (mut a, mut b) = (end(0x100), end(0x200));
        let mut rng = Rng::new(seed);
        let n = 1000u64;
        for i in 0..16 {
            recv(&mut b, i * 2048, 2048, i);
        }
        let (mut lost, mut twice) = (0u64, 0u64);
        let mut delivered = Vec::new();
        for i in 0..n {
            let len = 1 + rng.below(1000) as usize;
            let msg: Vec<u8> = (0..len).map(|k| (i as usize * 31 + k) as u8).collect();
            send(&mut a, 0, &msg, ah(A, B, b.qpn, QKEY), None, i);
            let mut buf = Vec::new();
            let t = a
                .dev
                .poll_transmit(Instant::from_nanos(0), &mut buf)
                .unwrap();
            assert!(a.dev.poll_cq(a.cq).is_some());
            if rng.chance(0.2) {
                lost += 1;
                continue;
            }
            let copies = if rng.chance(0.1) { 2 } else { 1 };
            twice += copies - 1;
            for _ in 0..copies {
                b.dev
                    .handle_datagram(Instant::from_nanos(0), &t.rx_meta(), &buf[..t.len]);
                let rc = b
                    .dev
                    .poll_cq(b.cq)
                    .unwrap_or_else(|| panic!("seed {seed}: lost"));
                assert_eq!(rc.status, WcStatus::Success, "seed {seed}");
                let at = (rc.wr_id * 2048) as usize + GRH_LEN;
                let got = &b.dev.mr(b.mr).unwrap().as_slice()[at..at + len];
                assert_eq!(got, &msg[..], "seed {seed}: message {i} corrupted");
                delivered.push(i);
                // The buffer goes back to the receive queue.
                recv(&mut b, rc.wr_id * 2048, 2048, rc.wr_id);
            }
        }
        assert_eq!(delivered.len() as u64, n - lost + twice, "seed {seed}");
        assert_eq!(
            b.dev.ud_qp(b.qpn).unwrap().stats().received,
            n - lost + twice,
            "seed {seed}"
        );
        assert_eq!(a.dev.ud_qp(a.qpn).unwrap().stats().sent, n, "seed {seed}");
    }
}

/// A UD datagram is accepted from anyone who has the Q_Key, so it counts as accepted but not
/// as accepted by a connected QP: the packet link learns where a peer is on the link only from
/// the latter (`Device::accepted_connected_datagrams`), so a UD datagram with a forged
/// source cannot redirect a connection's traffic.
#[test]
fn ud_datagrams_are_not_connected_acceptances() {
    let (mut a, mut b) = (end(0x100), end(0x200));
    recv(&mut b, 0, 2048, 7);
    send(&mut a, 0, b"from anyone", ah(A, B, b.qpn, QKEY), None, 1);
    assert_eq!(carry(&mut a, &mut b, |_| true), 1);
    assert_eq!(b.dev.ud_qp(b.qpn).unwrap().stats().received, 1);
    assert_eq!(b.dev.accepted_datagrams(), 1);
    assert_eq!(b.dev.accepted_connected_datagrams(), 0);
}
