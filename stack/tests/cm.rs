//! The communication manager, both sides in virtual time over a lossy, duplicating MAD
//! channel: establishment and release under loss (every retry path taken and counted), each
//! REJ reason, MRA, duplicates, stale connections, hostile MADs and the bounds. A failing
//! case prints its seed.
use std::net::{IpAddr, Ipv4Addr};

use roce_proto::cm::{Message, Mra, Req};
use roce_proto::mad::{self, Method, MgmtClass, Repr as MadRepr, Status};
use roce_proto::{Psn, Qpn};
use roce_stack::cm::{
    rdma_cm_req_private, rdma_cm_service_id, reason, Cm, CmConfig, CmEvent, CmState, ConnId,
    ConnectOptions, Negotiated, QpOffer, MAX_CONNECTIONS, MAX_SETUP_NS, MAX_UNSOLICITED_PER_S,
    MIN_RESPONSE_WAIT_NS,
};
use roce_stack::rng::Rng;
use roce_stack::Instant;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const SVC: u64 = rdma_cm_service_id(18515);

fn config(seed: u64) -> CmConfig {
    CmConfig {
        // 4.096 µs × 2^8 = 1 ms per try, 5 retries.
        response_timeout: 8,
        max_retries: 5,
        time_wait_ns: 5_000_000,
        seed,
        ..CmConfig::default()
    }
}

fn options(consumer: &[u8]) -> ConnectOptions {
    ConnectOptions {
        local: A,
        peer: B,
        service_id: SVC,
        offer: QpOffer {
            qpn: Qpn(0x3d),
            starting_psn: Psn::new(0x7c_c204),
            responder_resources: 4,
            initiator_depth: 8,
            rnr_retry_count: 7,
        },
        mtu: 1024,
        retry_count: 7,
        local_ack_timeout: 17,
        private_data: rdma_cm_req_private(A, B, 52471, consumer),
    }
}

fn b_offer() -> QpOffer {
    QpOffer {
        qpn: Qpn(0x3b),
        starting_psn: Psn::new(0x72_7d6d),
        responder_resources: 16,
        initiator_depth: 2,
        rnr_retry_count: 6,
    }
}

/// What the passive side's consumer does with a REQ.
#[derive(Clone, Copy, PartialEq)]
enum Answer {
    Accept,
    Reject,
    Ignore,
}

/// Two CMs and the channel between them.
struct Net {
    a: Cm,
    b: Cm,
    now: Instant,
    /// (arrival, to B?, MAD)
    wire: Vec<(Instant, bool, [u8; 256])>,
    rng: Rng,
    loss: f64,
    dup: f64,
    answer: Answer,
    a_events: Vec<CmEvent>,
    b_events: Vec<CmEvent>,
    /// MADs that crossed each way.
    carried: u64,
}

impl Net {
    fn new(seed: u64, loss: f64, dup: f64, answer: Answer) -> Self {
        let mut b = Cm::new(config(seed ^ 0xb));
        b.listen(SVC);
        Self {
            a: Cm::new(config(seed ^ 0xa)),
            b,
            now: Instant::from_nanos(0),
            wire: Vec::new(),
            rng: Rng::new(seed),
            loss,
            dup,
            answer,
            a_events: Vec::new(),
            b_events: Vec::new(),
            carried: 0,
        }
    }

    fn put(&mut self, to_b: bool, mad: [u8; 256]) {
        if self.rng.chance(self.loss) {
            return;
        }
        let copies = if self.rng.chance(self.dup) { 2 } else { 1 };
        for k in 0..copies {
            let delay = 5_000 + self.rng.below(20_000) + k * 3_000;
            self.wire.push((self.now.add_nanos(delay), to_b, mad));
        }
    }

    /// Runs until nothing is in flight and no timer is pending, or `limit_ns` of virtual time.
    fn run(&mut self, limit_ns: u64) {
        let end = self.now.add_nanos(limit_ns);
        loop {
            while let Some(e) = self.a.poll_event() {
                self.a_events.push(e);
            }
            while let Some(e) = self.b.poll_event() {
                if let CmEvent::Request { conn, req } = &e {
                    assert_eq!(req.service_id, SVC);
                    match self.answer {
                        Answer::Accept => {
                            let (h, consumer) = req.rdma_cm().expect("an RDMA-CM REQ");
                            assert_eq!((h.src, h.dst), (A, B));
                            let mut reply = b"rep:".to_vec();
                            reply.extend_from_slice(consumer);
                            assert!(self.b.accept(self.now, *conn, b_offer(), &reply).is_some());
                        }
                        Answer::Reject => {
                            assert!(self.b.reject(*conn, reason::CONSUMER_REJECT, b"go away"))
                        }
                        Answer::Ignore => {}
                    }
                }
                self.b_events.push(e);
            }
            while let Some(o) = self.a.poll_transmit() {
                assert_eq!((o.local, o.peer), (A, B));
                self.put(true, o.mad);
            }
            while let Some(o) = self.b.poll_transmit() {
                assert_eq!((o.local, o.peer), (B, A));
                self.put(false, o.mad);
            }
            let next_wire = self.wire.iter().map(|w| w.0).min();
            let next = [next_wire, self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else { return };
            if t > end {
                return;
            }
            self.now = self.now.max(t);
            // Deliver everything due, in arrival order.
            self.wire.sort_by_key(|w| w.0);
            while self.wire.first().is_some_and(|w| w.0 <= self.now) {
                let (_, to_b, m) = self.wire.remove(0);
                self.carried += 1;
                if to_b {
                    self.b.handle_mad(self.now, A, B, &m);
                } else {
                    self.a.handle_mad(self.now, B, A, &m);
                }
            }
            if self.a.poll_timeout().is_some_and(|d| d <= self.now) {
                self.a.handle_timeout(self.now);
            }
            if self.b.poll_timeout().is_some_and(|d| d <= self.now) {
                self.b.handle_timeout(self.now);
            }
        }
    }
}

fn established(events: &[CmEvent]) -> Option<(ConnId, Negotiated)> {
    events.iter().find_map(|e| match e {
        CmEvent::Established { conn, params } => Some((*conn, params.clone())),
        _ => None,
    })
}

/// The two sides agree on every attribute of the connection.
fn consistent(a: &Negotiated, b: &Negotiated, seed: u64) {
    assert_eq!(a.remote_qpn, b.local_qpn, "seed {seed}");
    assert_eq!(b.remote_qpn, a.local_qpn, "seed {seed}");
    assert_eq!(a.rq_psn, b.sq_psn, "seed {seed}");
    assert_eq!(b.rq_psn, a.sq_psn, "seed {seed}");
    assert_eq!(a.mtu, b.mtu, "seed {seed}");
    // Each requester's depth fits the other's responder resources.
    assert!(a.max_rd_atomic <= b.max_dest_rd_atomic, "seed {seed}");
    assert!(b.max_rd_atomic <= a.max_dest_rd_atomic, "seed {seed}");
    assert_eq!((a.retry_cnt, b.retry_cnt), (7, 7), "seed {seed}");
    assert_eq!(a.rnr_retry, b_offer().rnr_retry_count, "seed {seed}");
    assert_eq!(b.rnr_retry, 7, "seed {seed}");
    assert_eq!((a.timeout, b.timeout), (17, 17), "seed {seed}");
}

#[test]
fn a_clean_connection_is_established_consistently_and_released() {
    let mut n = Net::new(1, 0.0, 0.0, Answer::Accept);
    let conn = n.a.connect(n.now, &options(b"hello")).unwrap();
    assert!(n.a.set_confirm_data(conn, b"in the RTU"));
    n.run(1_000_000_000);
    let (ac, a) = established(&n.a_events).expect("active established");
    let (bc, b) = established(&n.b_events).expect("passive established");
    assert_eq!(ac, conn);
    consistent(&a, &b, 1);
    // Our initiator depth 8 against their responder resources 16; our responder resources 4
    // against their initiator depth 2.
    assert_eq!(a.max_rd_atomic, 8);
    assert_eq!(a.max_dest_rd_atomic, 2);
    // Private data both ways: the REP's to the active side, the consumer's part of the REQ
    // (after RDMA-CM's cma_hdr) to the passive side.
    assert_eq!(&b.private_data[..5], b"hello");
    assert_eq!(&a.private_data[..9], b"rep:hello");
    // 3 MADs: REQ, REP, RTU.
    assert_eq!(
        n.carried,
        3,
        "{:?} {:?} {:?}",
        n.a.stats(),
        n.b.stats(),
        n.b_events
    );
    // Each offer's Starting PSN is what that side expects to receive (Linux's reading): the
    // active side receives from its own 0x7cc204 and sends from the REP's 0x727d6d.
    let params = a.connect_params(roce_stack::ConnectParams::default());
    assert_eq!(
        (params.dest_qpn, params.rq_psn, params.sq_psn, params.mtu),
        (Qpn(0x3b), Psn::new(0x7c_c204), Psn::new(0x72_7d6d), 1024)
    );
    // The RTU's private data reached the passive side.
    assert_eq!(&n.b.peer_confirm_data(bc).unwrap()[..10], b"in the RTU");
    assert_eq!(n.a.state(ac), Some(CmState::Established));
    assert_eq!(n.b.state(bc), Some(CmState::Established));
    // Release from the active side, private data both ways (DREQ's and DREP's).
    assert!(n.a.set_release_data(ac, b"client done"));
    assert!(n.b.set_release_data(bc, b"server summary"));
    assert!(n.a.disconnect(n.now, ac));
    n.run(3_000_000);
    assert!(n.a_events.contains(&CmEvent::Disconnected { conn: ac }));
    assert!(n.b_events.contains(&CmEvent::Disconnected { conn: bc }));
    assert_eq!(&n.b.peer_release_data(bc).unwrap()[..11], b"client done");
    assert_eq!(&n.a.peer_release_data(ac).unwrap()[..14], b"server summary");
    n.run(1_000_000_000);
    // TimeWait over: nothing left.
    assert_eq!((n.a.connections(), n.b.connections()), (0, 0));
    assert_eq!(n.carried, 5);
}

/// 1,000 seeds with 30 % of the MADs lost and 20 % duplicated: each side ends with exactly one
/// outcome; when both are established they agree; release always completes; every retry path
/// is taken somewhere.
#[test]
fn establishment_and_release_survive_loss_and_duplication() {
    let seeds: u64 = std::env::var("CM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let (mut both, mut timed_out) = (0, 0);
    let mut totals = [0u64; 4];
    for seed in 0..seeds {
        let mut n = Net::new(seed, 0.3, 0.2, Answer::Accept);
        let conn = n.a.connect(n.now, &options(b"x")).unwrap();
        n.run(10_000_000_000);
        let outcomes: Vec<&CmEvent> = n
            .a_events
            .iter()
            .filter(|e| !matches!(e, CmEvent::Disconnected { .. }))
            .collect();
        assert_eq!(
            outcomes.len(),
            1,
            "seed {seed}: active outcomes {outcomes:?}"
        );
        match (established(&n.a_events), established(&n.b_events)) {
            (Some((_, a)), Some((bc, b))) => {
                consistent(&a, &b, seed);
                both += 1;
                // Release under the same loss.
                assert!(n.a.disconnect(n.now, conn), "seed {seed}");
                n.run(10_000_000_000);
                assert!(
                    n.a_events.contains(&CmEvent::Disconnected { conn }),
                    "seed {seed}"
                );
                // Only when every DREQ was lost (then the active side timed out waiting for
                // a DREP) may the passive side not have heard of the release.
                assert!(
                    n.b_events.contains(&CmEvent::Disconnected { conn: bc })
                        || n.a.stats().timeouts > 0,
                    "seed {seed}: the passive side never learnt of the release"
                );
            }
            (None, _) => {
                assert!(
                    n.a_events.contains(&CmEvent::TimedOut { conn }),
                    "seed {seed}: {:?}",
                    n.a_events
                );
                timed_out += 1;
            }
            (Some(_), None) => {
                // The RTU and every resent REP were lost: the passive side gave up (it sent a
                // REJ with reason Timeout, itself maybe lost). IBTA leaves the active side to
                // find out on its first transfer.
                assert!(
                    n.b_events
                        .iter()
                        .any(|e| matches!(e, CmEvent::TimedOut { .. })),
                    "seed {seed}"
                );
            }
        }
        // Everything is cleaned up once the timers ran out (the active side too, unless the
        // passive side's REJ was lost as well: then it finds out on its first transfer).
        n.run(100_000_000_000);
        let half_open = established(&n.a_events).is_some() && established(&n.b_events).is_none();
        let a_left = if half_open { 0 } else { n.a.connections() };
        // Every DREQ lost: the passive side still holds its (established) connection, and
        // only that.
        let b_unaware = established(&n.b_events).is_some()
            && !n
                .b_events
                .iter()
                .any(|e| matches!(e, CmEvent::Disconnected { .. }));
        assert_eq!(
            (a_left, n.b.connections()),
            (0, usize::from(b_unaware)),
            "seed {seed}: {:?} {:?}",
            n.a_events,
            n.b_events
        );
        let (sa, sb) = (n.a.stats(), n.b.stats());
        totals[0] += sa.retries + sb.retries;
        totals[1] += sa.resent_answers + sb.resent_answers;
        totals[2] += sa.duplicates + sb.duplicates;
        totals[3] += sa.timeouts + sb.timeouts;
    }
    assert!(both > seeds * 8 / 10, "{both} of {seeds} established");
    assert!(timed_out < seeds / 20, "{timed_out} of {seeds} timed out");
    let [retries, resent, dups, timeouts] = totals;
    eprintln!("{both} of {seeds} established, {timed_out} timed out; retries {retries}, resent answers {resent}, duplicates {dups}, timeouts {timeouts}");
    assert!(retries > 0 && resent > 0 && dups > 0, "{totals:?}");
    let _ = timeouts;
}

#[test]
fn no_listener_is_rejected_with_invalid_service_id() {
    let mut n = Net::new(2, 0.0, 0.0, Answer::Accept);
    let mut o = options(b"");
    o.service_id = rdma_cm_service_id(1);
    let conn = n.a.connect(n.now, &o).unwrap();
    n.run(1_000_000_000);
    assert!(
        matches!(
            n.a_events.as_slice(),
            [CmEvent::Rejected { conn: c, reason: r, .. }] if *c == conn && *r == reason::INVALID_SERVICE_ID
        ),
        "{:?}",
        n.a_events
    );
    assert!(n.b_events.is_empty());
    assert_eq!(n.b.stats().rejects_sent, 1);
    assert_eq!((n.a.connections(), n.b.connections()), (0, 0));
}

#[test]
fn a_consumer_reject_reaches_the_active_side_with_its_private_data() {
    let mut n = Net::new(3, 0.0, 0.0, Answer::Reject);
    let conn = n.a.connect(n.now, &options(b"")).unwrap();
    n.run(1_000_000_000);
    match n.a_events.as_slice() {
        [CmEvent::Rejected {
            conn: c,
            reason: r,
            private_data,
        }] => {
            assert_eq!((*c, *r), (conn, reason::CONSUMER_REJECT));
            assert_eq!(&private_data[..7], b"go away");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_silent_peer_times_out_after_every_retry() {
    let mut n = Net::new(4, 1.0, 0.0, Answer::Accept);
    let conn = n.a.connect(n.now, &options(b"")).unwrap();
    n.run(10_000_000_000);
    assert_eq!(n.a_events, vec![CmEvent::TimedOut { conn }]);
    let s = n.a.stats();
    assert_eq!(s.retries, 5, "max_retries resends");
    assert_eq!(s.timeouts, 1);
    assert_eq!(s.rejects_sent, 1, "REJ with reason Timeout");
    // 1 + 5 tries, each the 4.096 µs × 2^8 the code asks raised to the CM's floor.
    let try_ns = (4096 * 256).max(MIN_RESPONSE_WAIT_NS);
    assert!(n.now.as_nanos() >= 6 * try_ns && n.now.as_nanos() < 7 * try_ns);
}

#[test]
fn a_consumer_that_never_answers_times_the_active_side_out() {
    let mut n = Net::new(5, 0.0, 0.0, Answer::Ignore);
    let conn = n.a.connect(n.now, &options(b"")).unwrap();
    n.run(10_000_000_000);
    assert_eq!(n.a_events, vec![CmEvent::TimedOut { conn }]);
    // Each resent REQ reached the passive side as a duplicate.
    assert_eq!(n.b.stats().duplicates, 5);
    // The REJ (Timeout) cleared the passive side's half-open connection.
    assert_eq!(n.b.connections(), 0);
}

fn mad_of(msg: &Message, tid: u64) -> [u8; 256] {
    let mut m = [0u8; 256];
    MadRepr {
        base_version: 1,
        mgmt_class: MgmtClass::CM,
        class_version: 2,
        method: Method::SEND,
        status: Status(0),
        class_specific: 0,
        transaction_id: tid,
        attribute_id: msg.kind().attribute_id(),
        reserved: 0,
        attribute_modifier: 0,
    }
    .emit(&mut m);
    msg.emit(&mut m[mad::HEADER_LEN..]);
    m
}

fn rej_reason(m: &[u8; 256]) -> Option<u16> {
    match Message::parse(u16::from_be_bytes([m[16], m[17]]), &m[mad::HEADER_LEN..])?.ok()? {
        Message::Rej(r) => Some(r.reason),
        _ => None,
    }
}

#[test]
fn invalid_requests_get_the_reason_that_names_the_problem() {
    let mut b = Cm::new(config(6));
    b.listen(SVC);
    let t = Instant::from_nanos(0);
    let base = Req {
        local_comm_id: 0x1000,
        service_id: SVC,
        local_qpn: 0x40,
        path_packet_payload_mtu: 3,
        partition_key: 0xffff,
        ..Req::default()
    };
    let cases = [
        (
            Req {
                path_packet_payload_mtu: 9,
                ..base
            },
            reason::INVALID_MTU,
        ),
        (
            Req {
                transport_service_type: 1,
                local_comm_id: 0x1001,
                ..base
            },
            reason::INVALID_TRANSPORT_TYPE,
        ),
        (
            Req {
                service_id: 7,
                local_comm_id: 0x1002,
                ..base
            },
            reason::INVALID_SERVICE_ID,
        ),
        // QPNs no connection can have (the SMI's, the GSI's, multicast), P_Keys without key
        // bits.
        (
            Req {
                local_qpn: 0,
                local_comm_id: 0x1003,
                ..base
            },
            reason::UNSUPPORTED_REQUEST,
        ),
        (
            Req {
                local_qpn: 1,
                local_comm_id: 0x1004,
                ..base
            },
            reason::UNSUPPORTED_REQUEST,
        ),
        (
            Req {
                local_qpn: 0xff_ffff,
                local_comm_id: 0x1005,
                ..base
            },
            reason::UNSUPPORTED_REQUEST,
        ),
        (
            Req {
                partition_key: 0,
                local_comm_id: 0x1006,
                ..base
            },
            reason::UNSUPPORTED_REQUEST,
        ),
        (
            Req {
                partition_key: 0x8000,
                local_comm_id: 0x1007,
                ..base
            },
            reason::UNSUPPORTED_REQUEST,
        ),
    ];
    for (req, want) in cases {
        b.handle_mad(t, A, B, &mad_of(&Message::Req(req), 9));
        let out = b.poll_transmit().expect("a REJ");
        assert_eq!(rej_reason(&out.mad), Some(want));
    }
    assert!(b.poll_event().is_none());
    assert_eq!(b.connections(), 0);
}

#[test]
fn duplicates_are_answered_as_before_and_stale_requests_rejected() {
    let mut b = Cm::new(config(7));
    b.listen(SVC);
    let t = Instant::from_nanos(0);
    let req = Req {
        local_comm_id: 0x2000,
        service_id: SVC,
        local_qpn: 0x41,
        path_packet_payload_mtu: 3,
        local_cm_response_timeout: 8,
        max_cm_retries: 3,
        partition_key: 0xffff,
        ..Req::default()
    };
    let req_mad = mad_of(&Message::Req(req), 11);
    b.handle_mad(t, A, B, &req_mad);
    let Some(CmEvent::Request { conn, .. }) = b.poll_event() else {
        panic!("no request")
    };
    assert!(b.accept(t, conn, b_offer(), b"").is_some());
    let rep = b.poll_transmit().unwrap().mad;
    // The REQ again: the same REP again.
    b.handle_mad(t, A, B, &req_mad);
    assert_eq!(b.poll_transmit().unwrap().mad, rep);
    assert_eq!(b.stats().resent_answers, 1);
    // RTU: established.
    let rtu = Message::Rtu(roce_proto::cm::Rtu {
        local_comm_id: 0x2000,
        remote_comm_id: conn.0,
        ..Default::default()
    });
    b.handle_mad(t, A, B, &mad_of(&rtu, 11));
    assert!(matches!(b.poll_event(), Some(CmEvent::Established { .. })));
    // The same QP asking again under a new communication ID: stale.
    let again = Req {
        local_comm_id: 0x2001,
        ..req
    };
    b.handle_mad(t, A, B, &mad_of(&Message::Req(again), 12));
    assert_eq!(
        rej_reason(&b.poll_transmit().unwrap().mad),
        Some(reason::STALE_CONNECTION)
    );
    // Released by the peer; during TimeWait the old REQ is stale too.
    let dreq = Message::Dreq(roce_proto::cm::Dreq {
        local_comm_id: 0x2000,
        remote_comm_id: conn.0,
        remote_qpn_eecn: 0x3b,
        ..Default::default()
    });
    b.handle_mad(t, A, B, &mad_of(&dreq, 13));
    assert_eq!(b.poll_event(), Some(CmEvent::Disconnected { conn }));
    let drep = b.poll_transmit().unwrap().mad;
    assert_eq!(u16::from_be_bytes([drep[16], drep[17]]), 0x0016);
    // A duplicate DREQ gets the DREP again.
    b.handle_mad(t, A, B, &mad_of(&dreq, 13));
    assert_eq!(b.poll_transmit().unwrap().mad, drep);
    b.handle_mad(t, A, B, &req_mad);
    assert_eq!(
        rej_reason(&b.poll_transmit().unwrap().mad),
        Some(reason::STALE_CONNECTION)
    );
    // A DREQ for no connection is answered all the same.
    let stray = Message::Dreq(roce_proto::cm::Dreq {
        local_comm_id: 0x9999,
        remote_comm_id: 0x1234_5678,
        ..Default::default()
    });
    b.handle_mad(t, A, B, &mad_of(&stray, 14));
    let out = b.poll_transmit().unwrap().mad;
    assert_eq!(u16::from_be_bytes([out[16], out[17]]), 0x0016);
}

#[test]
fn an_mra_extends_the_wait_for_the_reply() {
    let mut a = Cm::new(config(8));
    let t0 = Instant::from_nanos(0);
    let conn = a.connect(t0, &options(b"")).unwrap();
    let _req = a.poll_transmit().unwrap();
    let first = a.poll_timeout().unwrap();
    // MRA for the REQ with service timeout 14 (67 ms).
    let mra = Message::Mra(Mra {
        local_comm_id: 0x5555,
        remote_comm_id: conn.0,
        message_mraed: 0,
        service_timeout: 14,
        ..Default::default()
    });
    a.handle_mad(t0, B, A, &mad_of(&mra, 1));
    assert_eq!(a.stats().mras_received, 1);
    let later = a.poll_timeout().unwrap();
    assert!(later.as_nanos() > first.as_nanos() + 60_000_000);
    // Nothing is resent at the original deadline.
    a.handle_timeout(first);
    assert!(a.poll_transmit().is_none());
    assert_eq!(a.state(conn), Some(CmState::ReqSent));
}

/// Hostile MADs (random bytes, and valid messages with random fields, from anywhere) never
/// panic and never leave more connections than the bound.
#[test]
fn hostile_mads_are_survived_and_bounded() {
    let mut b = Cm::new(config(9));
    b.listen(SVC);
    let mut rng = Rng::new(99);
    let mut t = Instant::from_nanos(0);
    for i in 0..20_000u32 {
        let mut m = [0u8; 256];
        rng.fill(&mut m);
        if i % 2 == 0 {
            // A CM header over random fields, of a random CM message kind.
            m[0] = 1;
            m[1] = 0x07;
            m[2] = 2;
            m[3] = 0x03;
            m[16] = 0;
            m[17] = 0x10 + (i % 11) as u8;
            if i % 4 == 0 {
                // A REQ to the listened service with a valid MTU: fills the table.
                m[24 + 8..24 + 16].copy_from_slice(&SVC.to_be_bytes());
                m[24 + 43] &= 0x9f; // RC
                m[24 + 50] = (m[24 + 50] & 0xf0) | 3;
            }
        }
        let from = IpAddr::V4(Ipv4Addr::new(10, 9, (i >> 8) as u8, i as u8));
        b.handle_mad(t, from, B, &m[..(i as usize % 257)]);
        b.handle_mad(t, from, B, &m);
        while b.poll_transmit().is_some() {}
        while b.poll_event().is_some() {}
        if i % 1000 == 0 {
            t = t.add_nanos(1_000_000);
            b.handle_timeout(t);
        }
        assert!(b.connections() <= MAX_CONNECTIONS);
    }
    assert!(b.connections() > 0, "no REQ was ever taken");
    assert!(b.stats().ignored > 0);
}

/// SIDR (§12.11): a SIDR_REQ to a listened service is handed to the consumer and its answer
/// reaches the asker once (a second copy of the answer is ignored); one to a service nobody
/// listens to is answered Unsupported by the CM; one nobody answers times out after the
/// retries.
#[test]
fn sidr_resolves_a_service_to_a_ud_qp() {
    use roce_stack::cm::rdma_cm_req_private;
    let (a_ip, b_ip): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
    let mut a = Cm::new(CmConfig {
        seed: 1,
        ..CmConfig::default()
    });
    let mut b = Cm::new(CmConfig {
        seed: 2,
        ..CmConfig::default()
    });
    let svc = roce_proto::rdma_cm::service_id(roce_proto::rdma_cm::PortSpace::UDP, 7174);
    b.listen(svc);
    let now = Instant::from_nanos(0);
    let carry = |from: &mut Cm, to: &mut Cm| {
        let mut n = 0;
        while let Some(o) = from.poll_transmit() {
            to.handle_mad(now, o.local, o.peer, &o.mad);
            n += 1;
        }
        n
    };
    let private = rdma_cm_req_private(a_ip, b_ip, 5000, b"hi");
    let conn = a.sidr_request(now, a_ip, b_ip, svc, &private).unwrap();
    assert_eq!(carry(&mut a, &mut b), 1);
    let Some(CmEvent::SidrRequest { req }) = b.poll_event() else {
        panic!("no SIDR request")
    };
    assert_eq!((req.peer, req.local, req.service_id), (a_ip, b_ip, svc));
    let (hdr, data) = req.rdma_cm().expect("the cma_hdr");
    assert_eq!((hdr.src, hdr.dst), (a_ip, b_ip));
    assert_eq!(&data[..2], b"hi");
    b.sidr_reply(&req, 0, Qpn(0x1234), 0x0123_4567, b"yes");
    b.sidr_reply(&req, 2, Qpn(0), 0, &[]); // a late second answer
    assert_eq!(carry(&mut b, &mut a), 2);
    match a.poll_event() {
        Some(CmEvent::SidrReply {
            conn: c,
            status,
            qpn,
            qkey,
            private_data,
        }) => {
            assert_eq!((c, status, qpn, qkey), (conn, 0, Qpn(0x1234), 0x0123_4567));
            assert_eq!(&private_data[..3], b"yes");
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(a.poll_event(), None, "the second answer is ignored");
    assert_eq!(a.poll_timeout(), None, "nothing left to wait for");
    // Nobody listens: Unsupported, from the CM itself.
    let other = roce_proto::rdma_cm::service_id(roce_proto::rdma_cm::PortSpace::UDP, 1);
    let c2 = a.sidr_request(now, a_ip, b_ip, other, &private).unwrap();
    carry(&mut a, &mut b);
    assert_eq!(b.poll_event(), None);
    carry(&mut b, &mut a);
    assert!(
        matches!(a.poll_event(), Some(CmEvent::SidrReply { conn, status: 1, .. }) if conn == c2)
    );
    // Nobody answers: resent, then given up.
    let c3 = a.sidr_request(now, a_ip, b_ip, svc, &private).unwrap();
    let mut t = now;
    let mut sent = 0;
    while let Some(d) = a.poll_timeout() {
        t = d;
        sent += a.poll_transmit().map_or(0, |_| 1);
        a.handle_timeout(t);
    }
    sent += std::iter::from_fn(|| a.poll_transmit()).count();
    assert_eq!(sent, 1 + usize::from(CmConfig::default().max_retries));
    assert_eq!(a.poll_event(), Some(CmEvent::TimedOut { conn: c3 }));
    assert!(t > now);
}

/// SIDR_REQs from spoofed sources, to a listened service and to one nobody serves, beside junk
/// REQs: one limit for them all, `MAX_UNSOLICITED_PER_S` a second. Past it a SIDR_REQ draws
/// neither a SIDR_REP from the CM nor a request to the consumer (whose answer would name its
/// QPN and Q_Key); a second later they pass again. (Before, 2,000 spoofed SIDR_REQs drew
/// 2,000 answers.)
#[test]
fn sidr_requests_share_the_rate_limit_of_unsolicited_answers() {
    let svc = roce_proto::rdma_cm::service_id(roce_proto::rdma_cm::PortSpace::UDP, 7174);
    let mut b = Cm::new(config(31));
    b.listen(svc);
    let mut t = Instant::from_nanos(0);
    for round in 0..2u32 {
        let (mut answers, mut requests) = (0u32, 0u32);
        for i in 0..1000u32 {
            let from = IpAddr::V4(Ipv4Addr::new(10, 8, (i >> 8) as u8, i as u8));
            let m = match i % 3 {
                0 => Message::SidrReq(roce_proto::cm::SidrReq {
                    request_id: 0x5000 + i,
                    service_id: svc,
                    ..Default::default()
                }),
                1 => Message::SidrReq(roce_proto::cm::SidrReq {
                    request_id: 0x5000 + i,
                    service_id: 9,
                    ..Default::default()
                }),
                _ => Message::Req(Req {
                    local_comm_id: 0x5000 + i,
                    service_id: 9,
                    local_qpn: 0x43,
                    path_packet_payload_mtu: 3,
                    partition_key: 0xffff,
                    ..Req::default()
                }),
            };
            b.handle_mad(t.add_nanos(u64::from(i) * 1000), from, B, &mad_of(&m, 31));
            while let Some(e) = b.poll_event() {
                let CmEvent::SidrRequest { req } = e else {
                    panic!("{e:?}")
                };
                // The consumer answers every request it is given.
                b.sidr_reply(&req, 0, Qpn(0x1234), 0x0123_4567, &[]);
                requests += 1;
            }
            while b.poll_transmit().is_some() {
                answers += 1;
            }
        }
        assert_eq!(answers, MAX_UNSOLICITED_PER_S, "round {round}");
        assert!(
            requests > 0 && requests < MAX_UNSOLICITED_PER_S,
            "round {round}: {requests}"
        );
        assert_eq!(
            b.stats().rate_limited,
            u64::from((round + 1) * (1000 - MAX_UNSOLICITED_PER_S)),
            "round {round}"
        );
        t = t.add_nanos(1_000_000_000);
    }
}

/// A REP the active consumer cannot use is answered with a REJ (message rejected: REP) in
/// place of the RTU, and the passive side drops the connection; once the RTU has left, the
/// refusal is a DREQ instead. Never silence (the peer would resend its REP until it gives up).
/// Hands every MAD `from` has to send to `to` at `now`, without loss; returns them.
fn carry_at(now: Instant, from: &mut Cm, to: &mut Cm) -> Vec<[u8; 256]> {
    let mut got = Vec::new();
    while let Some(o) = from.poll_transmit() {
        got.push(o.mad);
        to.handle_mad(now, o.local, o.peer, &o.mad);
    }
    got
}

#[test]
fn a_rep_the_consumer_refuses_gets_a_rej_not_silence() {
    for rtu_left in [false, true] {
        let mut a = Cm::new(config(1));
        let mut b = Cm::new(config(2));
        b.listen(SVC);
        let now = Instant::from_nanos(0);
        let carry = |from: &mut Cm, to: &mut Cm| carry_at(now, from, to);
        let conn = a.connect(now, &options(b"hi")).unwrap();
        carry(&mut a, &mut b);
        let Some(CmEvent::Request { conn: bc, .. }) = b.poll_event() else {
            panic!("no REQ")
        };
        assert!(b.accept(now, bc, b_offer(), b"not what a wants").is_some());
        carry(&mut b, &mut a);
        assert!(matches!(a.poll_event(), Some(CmEvent::Established { conn: c, .. }) if c == conn));
        if rtu_left {
            carry(&mut a, &mut b);
            assert!(matches!(b.poll_event(), Some(CmEvent::Established { .. })));
        }
        assert!(a.refuse_rep(now, conn, reason::CONSUMER_REJECT, b"no block"));
        let sent = carry(&mut a, &mut b);
        assert_eq!(sent.len(), 1, "one message, not the RTU and something else");
        let attr = u16::from_be_bytes([sent[0][16], sent[0][17]]);
        if rtu_left {
            assert_eq!(attr, 0x0015, "a DREQ once the RTU is gone");
        } else {
            assert_eq!(attr, 0x0012, "a REJ in the RTU's place");
            assert_eq!(rej_reason(&sent[0]), Some(reason::CONSUMER_REJECT));
            assert_eq!(sent[0][24 + 8] >> 6, 1, "message rejected: the REP");
            assert_eq!(b.connections(), 0, "the passive side let the connection go");
            assert_eq!(a.connections(), 0);
        }
        assert!(
            !a.refuse_rep(now, conn, reason::CONSUMER_REJECT, &[]),
            "only once"
        );
    }
}

/// A passive side that gives up a set-up after its REP (`abandon`) tells the peer with a
/// REJ and forgets the connection: an RTU that comes later establishes nothing. An
/// established connection abandoned is released with a DREQ.
#[test]
fn an_abandoned_set_up_is_refused_and_forgotten() {
    let now = Instant::from_nanos(0);
    let carry = |from: &mut Cm, to: &mut Cm| carry_at(now, from, to);
    for established in [false, true] {
        let mut a = Cm::new(config(3));
        let mut b = Cm::new(config(4));
        b.listen(SVC);
        a.connect(now, &options(b"hi")).unwrap();
        carry(&mut a, &mut b);
        let Some(CmEvent::Request { conn: bc, .. }) = b.poll_event() else {
            panic!("no REQ")
        };
        assert!(b.accept(now, bc, b_offer(), &[]).is_some());
        let rep = b.poll_transmit().expect("a REP").mad;
        if established {
            a.handle_mad(now, B, A, &rep);
            carry(&mut a, &mut b);
            assert!(matches!(b.poll_event(), Some(CmEvent::Established { .. })));
        }
        assert!(b.abandon(now, bc, reason::CONSUMER_REJECT));
        // What B sends is lost on the way: A goes on as if it had not been refused.
        let sent: Vec<[u8; 256]> =
            std::iter::from_fn(|| b.poll_transmit().map(|o| o.mad)).collect();
        assert_eq!(sent.len(), 1, "one message");
        let attr = u16::from_be_bytes([sent[0][16], sent[0][17]]);
        if established {
            assert_eq!(attr, 0x0015, "a DREQ for an established connection");
            continue;
        }
        assert_eq!(attr, 0x0012, "a REJ for a set-up");
        assert_eq!(rej_reason(&sent[0]), Some(reason::CONSUMER_REJECT));
        assert_eq!(b.connections(), 0, "forgotten at once");
        assert!(!b.abandon(now, bc, reason::CONSUMER_REJECT), "only once");
        // The REP reaches A and its RTU comes back: nothing is established.
        a.handle_mad(now, B, A, &rep);
        let rtu = carry(&mut a, &mut b);
        assert_eq!(rtu.len(), 1, "A confirmed");
        while let Some(e) = b.poll_event() {
            assert!(!matches!(e, CmEvent::Established { .. }), "{e:?}");
        }
        assert_eq!(b.connections(), 0);
    }
}

/// A REQ (passive side, `accept`ed) whose codes ask for the longest waits, then MRAs asking
/// for more: the passive side gives the connection up within `MAX_SETUP_NS` of the REQ, with
/// a Timeout REJ. A REQ whose codes ask for none: its REP is resent no faster than
/// `MIN_RESPONSE_WAIT_NS`.
#[test]
fn a_reqs_timeouts_and_mras_hold_a_set_up_no_longer_than_the_bound() {
    for (code, mras) in [(31u8, true), (0, false)] {
        let mut b = Cm::new(config(20 + u64::from(code)));
        b.listen(SVC);
        let t0 = Instant::from_nanos(0);
        let req = Req {
            local_comm_id: 0x3000,
            service_id: SVC,
            local_qpn: 0x42,
            path_packet_payload_mtu: 3,
            partition_key: 0xffff,
            remote_cm_response_timeout: code,
            local_cm_response_timeout: code,
            max_cm_retries: 15,
            ..Req::default()
        };
        b.handle_mad(t0, A, B, &mad_of(&Message::Req(req), 21));
        let Some(CmEvent::Request { conn, .. }) = b.poll_event() else {
            panic!("no request")
        };
        assert!(b.accept(t0, conn, b_offer(), b"").is_some());
        let mut sent = vec![(0u64, b.poll_transmit().expect("the REP"))];
        let mut given_up = None;
        for _ in 0..1000 {
            let Some(t) = b.poll_timeout() else { break };
            if mras {
                // An MRA for the REP asking for the longest service timeout, every time.
                let mra = Message::Mra(Mra {
                    local_comm_id: 0x3000,
                    remote_comm_id: conn.0,
                    message_mraed: 1,
                    service_timeout: 31,
                    ..Default::default()
                });
                b.handle_mad(t, A, B, &mad_of(&mra, 22));
            }
            b.handle_timeout(t);
            while let Some(o) = b.poll_transmit() {
                sent.push((t.as_nanos(), o));
            }
            if let Some(CmEvent::TimedOut { conn: c }) = b.poll_event() {
                assert_eq!(c, conn);
                given_up = Some(t);
                break;
            }
        }
        let end = given_up.expect("the set-up was never given up");
        assert!(
            end.as_nanos() <= MAX_SETUP_NS,
            "code {code}: held until {end:?}"
        );
        let last = &sent.last().unwrap().1;
        assert_eq!(rej_reason(&last.mad), Some(reason::TIMEOUT), "code {code}");
        // Resends of the REP are at least the floor apart.
        let reps: Vec<u64> = sent[..sent.len() - 1].iter().map(|(t, _)| *t).collect();
        for w in reps.windows(2) {
            assert!(w[1] - w[0] >= MIN_RESPONSE_WAIT_NS, "code {code}: {reps:?}");
        }
        if code == 0 {
            // All 15 retries were used, at the floor: 1.6 s, not microseconds.
            assert_eq!(reps.len(), 16, "{reps:?}");
            assert!(end.as_nanos() >= 16 * MIN_RESPONSE_WAIT_NS);
        } else {
            assert!(end.as_nanos() >= MAX_SETUP_NS, "gave up early: {end:?}");
        }
    }
}

/// Junk REQs (no listener) and DREQs for nothing from spoofed sources: at most
/// `MAX_UNSOLICITED_PER_S` answers a second leave, the rest are counted; a second later
/// answers leave again.
#[test]
fn answers_to_messages_for_no_connection_are_rate_limited() {
    let mut b = Cm::new(config(30));
    b.listen(SVC);
    let mut t = Instant::from_nanos(0);
    for round in 0..2u32 {
        let mut answers = 0u32;
        for i in 0..1000u32 {
            let from = IpAddr::V4(Ipv4Addr::new(10, 7, (i >> 8) as u8, i as u8));
            let m = if i % 2 == 0 {
                Message::Req(Req {
                    local_comm_id: 0x4000 + i,
                    service_id: 7,
                    local_qpn: 0x43,
                    path_packet_payload_mtu: 3,
                    partition_key: 0xffff,
                    ..Req::default()
                })
            } else {
                Message::Dreq(roce_proto::cm::Dreq {
                    local_comm_id: 0x4000 + i,
                    remote_comm_id: 0x0bad_0000 + i,
                    ..Default::default()
                })
            };
            b.handle_mad(t.add_nanos(u64::from(i) * 1000), from, B, &mad_of(&m, 30));
            while b.poll_transmit().is_some() {
                answers += 1;
            }
        }
        assert_eq!(answers, MAX_UNSOLICITED_PER_S, "round {round}");
        assert_eq!(
            b.stats().rate_limited,
            u64::from((round + 1) * (1000 - MAX_UNSOLICITED_PER_S))
        );
        t = t.add_nanos(1_000_000_000);
    }
    assert_eq!(b.connections(), 0);
}
