//! Scripted single-QP tests (in the manner of smoltcp's TCP socket tests): one real QP, a
//! scripted peer. Each test feeds
//! `PacketRepr`s at explicit times and checks exactly what the QP sends and completes.

use roce_proto::aeth::rnr_timer_ns;
use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, Ecn, Msn, NakCode, Opcode, PKey,
    PacketRepr, Psn, Qpn, RKey, RethRepr, Syndrome,
};
use roce_stack::{
    Access, Completion, ConnectParams, CqHandle, Device, Instant, ModifyError, MrHandle,
    PathConfig, PostError, QpAttr, QpCaps, QpState, RecvRequest, RemoteAddr, SgList, WcOpcode,
    WcStatus, WorkRequest, WrOp,
};

const PEER: Qpn = Qpn(0x99);
const MTU: u32 = 256;

/// Template for packets the scripted peer sends to our QP (dest_qp is filled in by `feed`).
const BTH: BthRepr = BthRepr {
    opcode: Opcode::RC_ACKNOWLEDGE,
    solicited: false,
    migreq: false,
    pad_count: 0,
    tver: 0,
    pkey: PKey::DEFAULT,
    fecn: false,
    becn: false,
    resv6a: 0,
    dest_qp: Qpn(0),
    ack_req: false,
    resv7: 0,
    psn: Psn::new(0),
};

fn ack(psn: u32, syndrome: Syndrome) -> PacketRepr<'static> {
    PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            psn: Psn::new(psn),
            ..BTH
        },
        aeth: Some(AethRepr {
            syndrome,
            msn: Msn(0),
        }),
        ..PacketRepr::default()
    }
}

struct Owned {
    bytes: Vec<u8>,
}
impl Owned {
    fn repr(&self) -> PacketRepr<'_> {
        PacketRepr::parse_bytes(&self.bytes).unwrap()
    }
}

struct H {
    dev: Device,
    qpn: Qpn,
    scq: CqHandle,
    rcq: CqHandle,
    mr: MrHandle,
    now: Instant,
    buf: Vec<u8>,
    path: PathConfig,
}

/// The scripted QP's connection: PSNs 100 (ours) and 500 (the peer's), MTU 256, timeout 8
/// (1.05 ms), 3 retries and 3 RNR retries, 4 READ/atomic each way, every remote access.
fn params() -> ConnectParams {
    ConnectParams {
        dest_qpn: PEER,
        sq_psn: Psn::new(100),
        rq_psn: Psn::new(500),
        path: PathConfig {
            local: "10.0.0.1".parse().unwrap(),
            remote: "10.0.0.2".parse().unwrap(),
            src_port: 0xc001,
            remote_src_port: 0xc002,
            ..PathConfig::default()
        },
        mtu: MTU,
        timeout: 8,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        ..ConnectParams::default()
    }
}

impl H {
    fn new(c: ConnectParams) -> Self {
        let mut dev = Device::default();
        let pd = dev.alloc_pd();
        let scq = dev.create_cq();
        let rcq = dev.create_cq();
        let mr = dev.reg_mr(pd, 1 << 16, Access::ALL);
        for (i, b) in dev
            .mr_mut(mr)
            .unwrap()
            .as_mut_slice()
            .iter_mut()
            .enumerate()
        {
            *b = (i * 7 % 251) as u8;
        }
        let qpn = dev.create_qp(pd, scq, rcq, QpCaps::default()).unwrap();
        dev.connect_qp(qpn, &c).unwrap();
        let path = c.path;
        Self {
            dev,
            qpn,
            scq,
            rcq,
            mr,
            now: Instant::ZERO,
            buf: Vec::new(),
            path,
        }
    }

    fn sge(&self, off: u64, len: u32) -> SgList {
        SgList::one(self.dev.mr(self.mr).unwrap().sge(off, len))
    }

    /// Posts a receive of `len` bytes at the start of the test region.
    fn post_recv(&mut self, wr_id: u64, len: u32) {
        let sgl = self.sge(0, len);
        self.dev
            .post_recv(self.qpn, RecvRequest { wr_id, sgl })
            .unwrap();
    }

    fn remote(&self, off: u64) -> RemoteAddr {
        let m = self.dev.mr(self.mr).unwrap();
        m.remote_addr(off)
    }

    fn post(&mut self, id: u64, op: WrOp, sgl: SgList) {
        self.dev
            .post_send(self.qpn, WorkRequest::new(id, op, sgl))
            .unwrap();
    }

    /// Feeds a packet from the peer, with a correct ICRC.
    fn feed(&mut self, mut p: PacketRepr<'_>) {
        p.bth.dest_qp = self.qpn;
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf).unwrap();
        // What the peer sends is what we receive: the peer's tx seed is our rx seed.
        self.path.rx_icrc(n).fill(&mut buf[..n]);
        self.dev
            .handle_datagram(self.now, &self.path.from_peer(Ecn::Ect0), &buf);
    }

    fn feed_raw(&mut self, bytes: &[u8]) {
        self.dev
            .handle_datagram(self.now, &self.path.from_peer(Ecn::Ect0), bytes);
    }

    /// Everything the QP wants to send now.
    fn sent(&mut self) -> Vec<Owned> {
        let mut out = Vec::new();
        while let Some(t) = self.dev.poll_transmit(self.now, &mut self.buf) {
            let bytes = self.buf[..t.len].to_vec();
            assert!(
                self.path.tx_icrc(t.len).verify(&bytes),
                "our ICRC must verify"
            );
            out.push(Owned { bytes });
        }
        out
    }

    /// Advances time to `t` µs and runs timers.
    fn at_us(&mut self, us: u64) {
        self.now = Instant::from_micros(us);
        self.dev.handle_timeout(self.now);
    }

    fn completions(&mut self, cq: CqHandle) -> Vec<Completion> {
        let mut v = Vec::new();
        while let Some(c) = self.dev.poll_cq(cq) {
            v.push(c);
        }
        v
    }

    fn state(&self) -> QpState {
        self.dev.qp(self.qpn).unwrap().state()
    }

    fn stats(&self) -> roce_stack::QpStats {
        *self.dev.qp(self.qpn).unwrap().stats()
    }
}

fn ops_psns(v: &[Owned]) -> Vec<(Opcode, u32)> {
    v.iter()
        .map(|o| {
            let r = o.repr();
            (r.bth.opcode, r.bth.psn.value())
        })
        .collect()
}

fn statuses(v: &[Completion]) -> Vec<(u64, WcStatus)> {
    v.iter().map(|c| (c.wr_id, c.status)).collect()
}

#[test]
fn send_is_acked_and_completes_once() {
    let mut h = H::new(params());
    h.post(1, WrOp::Send, h.sge(0, 100));
    let s = h.sent();
    assert_eq!(ops_psns(&s), [(Opcode::RC_SEND_ONLY, 100)]);
    let r = s[0].repr();
    assert!(r.bth.ack_req);
    assert_eq!(r.bth.dest_qp, PEER);
    assert_eq!(r.bth.pad_count, 0);
    assert_eq!(r.payload, &h.dev.mr(h.mr).unwrap().as_slice()[..100]);
    h.feed(ack(100, Syndrome::ACK_UNLIMITED));
    let c = h.completions(h.scq);
    assert_eq!(statuses(&c), [(1, WcStatus::Success)]);
    assert_eq!((c[0].opcode, c[0].byte_len), (WcOpcode::Send, 100));
    h.feed(ack(100, Syndrome::ACK_UNLIMITED));
    assert!(h.completions(h.scq).is_empty());
    assert_eq!(h.stats().drops.stale_response, 1);
    assert_eq!(h.dev.poll_timeout(), None, "nothing outstanding: no timer");
}

#[test]
fn segmentation_pad_reth_and_imm_placement() {
    let mut h = H::new(params());
    h.post(
        1,
        WrOp::WriteWithImm(h.remote(4096), 0xdead_beef),
        h.sge(0, 3 * MTU + 5),
    );
    let s = h.sent();
    assert_eq!(
        ops_psns(&s),
        [
            (Opcode::RC_RDMA_WRITE_FIRST, 100),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 101),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 102),
            (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, 103)
        ]
    );
    let first = s[0].repr();
    assert_eq!(first.reth.unwrap().dma_len, 3 * MTU + 5);
    assert_eq!(first.payload.len(), MTU as usize);
    assert!(s[1].repr().reth.is_none() && s[1].repr().immdt.is_none());
    let last = s[3].repr();
    assert_eq!(last.immdt.unwrap().0, 0xdead_beef);
    assert_eq!((last.payload.len(), last.bth.pad_count), (5, 3));
    assert_eq!(
        s.iter().map(|o| o.repr().bth.ack_req).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    // A zero-length SEND is one SEND_ONLY without payload.
    h.post(2, WrOp::Send, SgList::new());
    assert_eq!(ops_psns(&h.sent()), [(Opcode::RC_SEND_ONLY, 104)]);
    // One coalesced ACK completes both.
    h.feed(ack(104, Syndrome::ACK_UNLIMITED));
    assert_eq!(
        statuses(&h.completions(h.scq)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

#[test]
fn read_reserves_one_psn_per_response_packet() {
    let mut h = H::new(params());
    h.post(1, WrOp::Read(h.remote(0)), h.sge(8192, 600));
    h.post(2, WrOp::Send, h.sge(0, 1));
    assert_eq!(
        ops_psns(&h.sent()),
        [
            (Opcode::RC_RDMA_READ_REQUEST, 100),
            (Opcode::RC_SEND_ONLY, 103)
        ]
    );
}

#[test]
fn rnr_retry_then_success() {
    let mut h = H::new(params());
    h.post(1, WrOp::Send, h.sge(0, 10));
    assert_eq!(h.sent().len(), 1);
    h.at_us(1);
    h.feed(ack(100, Syndrome::rnr_nak(4))); // 40 µs
    assert!(
        h.sent().is_empty(),
        "nothing is sent while the RNR timer runs"
    );
    assert_eq!(
        h.dev.poll_timeout(),
        Some(Instant::from_micros(1).add_nanos(rnr_timer_ns(4)))
    );
    h.at_us(40);
    assert!(h.sent().is_empty());
    h.at_us(41);
    assert_eq!(ops_psns(&h.sent()), [(Opcode::RC_SEND_ONLY, 100)]);
    h.feed(ack(100, Syndrome::ACK_UNLIMITED));
    assert_eq!(statuses(&h.completions(h.scq)), [(1, WcStatus::Success)]);
    let st = h.stats();
    assert_eq!((st.naks_received.rnr, st.retransmitted_packets), (1, 1));
}

#[test]
fn rnr_retry_exhaustion() {
    let mut h = H::new(ConnectParams {
        rnr_retry: 2,
        ..params()
    });
    h.post(1, WrOp::Send, h.sge(0, 10));
    h.post(2, WrOp::Write(h.remote(0)), h.sge(0, 10));
    h.sent();
    for i in 0..2 {
        h.feed(ack(100, Syndrome::rnr_nak(1)));
        h.at_us(100 * (i + 1));
        assert_eq!(ops_psns(&h.sent())[0], (Opcode::RC_SEND_ONLY, 100));
    }
    h.feed(ack(100, Syndrome::rnr_nak(1)));
    assert_eq!(
        statuses(&h.completions(h.scq)),
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(h.state(), QpState::Err);
    // Posting in ERR completes at once as flushed.
    h.post(3, WrOp::Send, h.sge(0, 1));
    assert_eq!(statuses(&h.completions(h.scq)), [(3, WcStatus::WrFlushErr)]);
}

#[test]
fn rnr_retry_7_is_infinite() {
    let mut h = H::new(ConnectParams {
        rnr_retry: 7,
        ..params()
    });
    h.post(1, WrOp::Send, h.sge(0, 10));
    h.sent();
    for i in 0..20 {
        h.feed(ack(100, Syndrome::rnr_nak(1)));
        h.at_us(100 * (i + 1));
        assert_eq!(h.sent().len(), 1);
    }
    assert_eq!(h.state(), QpState::Rts);
}

#[test]
fn psn_sequence_error_goes_back_n() {
    let mut h = H::new(params());
    for i in 0..3 {
        h.post(i, WrOp::Send, h.sge(0, 10));
    }
    assert_eq!(h.sent().len(), 3);
    h.feed(ack(101, Syndrome::nak(NakCode::PsnSequenceError)));
    // PSN 100 is implicitly acknowledged; 101 and 102 go again.
    assert_eq!(statuses(&h.completions(h.scq)), [(0, WcStatus::Success)]);
    assert_eq!(
        ops_psns(&h.sent()),
        [(Opcode::RC_SEND_ONLY, 101), (Opcode::RC_SEND_ONLY, 102)]
    );
    // A second NAK for the same PSN while that retry is under way does not restart it.
    h.feed(ack(101, Syndrome::nak(NakCode::PsnSequenceError)));
    assert!(h.sent().is_empty());
    h.feed(ack(102, Syndrome::ACK_UNLIMITED));
    assert_eq!(
        statuses(&h.completions(h.scq)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(h.stats().naks_received.seq_err, 2);
}

#[test]
fn partial_retry_resumes_mid_message() {
    let mut h = H::new(params());
    h.post(1, WrOp::Write(h.remote(0)), h.sge(0, 4 * MTU));
    assert_eq!(h.sent().len(), 4);
    h.feed(ack(102, Syndrome::nak(NakCode::PsnSequenceError)));
    assert!(h.completions(h.scq).is_empty());
    let s = h.sent();
    assert_eq!(
        ops_psns(&s),
        [
            (Opcode::RC_RDMA_WRITE_MIDDLE, 102),
            (Opcode::RC_RDMA_WRITE_LAST, 103)
        ]
    );
    assert!(s[0].repr().reth.is_none());
    assert_eq!(
        s[0].repr().payload,
        &h.dev.mr(h.mr).unwrap().as_slice()[512..768]
    );
    h.feed(ack(103, Syndrome::ACK_UNLIMITED));
    assert_eq!(statuses(&h.completions(h.scq)), [(1, WcStatus::Success)]);
}

fn read_resp(op: Opcode, psn: u32, payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        bth: BthRepr {
            opcode: op,
            psn: Psn::new(psn),
            pad_count: PacketRepr::pad_for(payload.len()),
            ..BTH
        },
        aeth: (op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: Msn(1),
        }),
        payload,
        ..PacketRepr::default()
    }
}

#[test]
fn read_with_partly_lost_responses_resumes_from_bytes_received() {
    let mut h = H::new(params());
    h.post(1, WrOp::Read(h.remote(1000)), h.sge(8192, 4 * MTU - 3));
    assert_eq!(ops_psns(&h.sent()), [(Opcode::RC_RDMA_READ_REQUEST, 100)]);
    let data: Vec<u8> = (0..4 * MTU - 3).map(|i| (i % 13) as u8).collect();
    let m = MTU as usize;
    h.feed(read_resp(
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        100,
        &data[..m],
    ));
    // PSN 101 is lost; 102 reveals it (implied NAK): a new READ for the rest.
    h.feed(read_resp(
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        102,
        &data[2 * m..3 * m],
    ));
    let s = h.sent();
    assert_eq!(ops_psns(&s), [(Opcode::RC_RDMA_READ_REQUEST, 101)]);
    let reth = s[0].repr().reth.unwrap();
    assert_eq!(
        (reth.va, reth.dma_len),
        (h.remote(1000).va + u64::from(MTU), 3 * MTU - 3)
    );
    assert_eq!(h.stats().implied_naks, 1);
    // The rest of the old stream is ignored as stale/beyond; the replay completes it.
    h.feed(read_resp(
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        103,
        &data[3 * m..],
    ));
    assert!(h.sent().is_empty(), "one retry sequence at a time");
    h.feed(read_resp(
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        101,
        &data[m..2 * m],
    ));
    h.feed(read_resp(
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        102,
        &data[2 * m..3 * m],
    ));
    h.feed(read_resp(
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        103,
        &data[3 * m..],
    ));
    let c = h.completions(h.scq);
    assert_eq!(statuses(&c), [(1, WcStatus::Success)]);
    assert_eq!(c[0].byte_len, 4 * MTU - 3);
    assert_eq!(
        &h.dev.mr(h.mr).unwrap().as_slice()[8192..8192 + data.len()],
        &data[..]
    );
}

#[test]
fn lost_atomic_ack_is_an_implied_nak() {
    let mut h = H::new(params());
    h.post(
        1,
        WrOp::FetchAdd {
            remote: h.remote(0),
            add: 1,
        },
        h.sge(64, 8),
    );
    h.post(2, WrOp::Send, h.sge(0, 4));
    assert_eq!(h.sent().len(), 2);
    h.feed(ack(101, Syndrome::ACK_UNLIMITED));
    assert_eq!(h.stats().implied_naks, 1);
    assert_eq!(
        ops_psns(&h.sent()),
        [(Opcode::RC_FETCH_ADD, 100), (Opcode::RC_SEND_ONLY, 101)]
    );
    h.feed(PacketRepr {
        bth: BthRepr {
            opcode: Opcode::RC_ATOMIC_ACKNOWLEDGE,
            psn: Psn::new(100),
            ..BTH
        },
        aeth: Some(AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: Msn(1),
        }),
        atomic_ack_eth: Some(AtomicAckEthRepr { orig_data: 0x1122 }),
        ..PacketRepr::default()
    });
    h.feed(ack(101, Syndrome::ACK_UNLIMITED));
    assert_eq!(
        statuses(&h.completions(h.scq)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(
        &h.dev.mr(h.mr).unwrap().as_slice()[64..72],
        &0x1122u64.to_le_bytes()
    );
}

fn request(op: Opcode, psn: u32) -> PacketRepr<'static> {
    PacketRepr {
        bth: BthRepr {
            opcode: op,
            psn: Psn::new(psn),
            ack_req: true,
            ..BTH
        },
        ..PacketRepr::default()
    }
}

#[test]
fn duplicate_atomic_is_answered_from_the_saved_result() {
    let mut h = H::new(params());
    let word = h.remote(64);
    let before = u64::from_le_bytes(
        h.dev.mr(h.mr).unwrap().as_slice()[64..72]
            .try_into()
            .unwrap(),
    );
    let faa = PacketRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: word.va,
            rkey: word.rkey,
            swap_add: 5,
            compare: 0,
        }),
        ..request(Opcode::RC_FETCH_ADD, 500)
    };
    h.feed(faa);
    h.feed(faa);
    let s = h.sent();
    assert_eq!(
        ops_psns(&s),
        [
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, 500),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, 500)
        ]
    );
    for o in &s {
        assert_eq!(o.repr().atomic_ack_eth.unwrap().orig_data, before);
    }
    let after = u64::from_le_bytes(
        h.dev.mr(h.mr).unwrap().as_slice()[64..72]
            .try_into()
            .unwrap(),
    );
    assert_eq!(after, before.wrapping_add(5), "executed once");
    assert_eq!(h.stats().duplicate_requests, 1);
    // Misaligned atomic: NAK invalid request.
    h.feed(PacketRepr {
        atomic_eth: Some(AtomicEthRepr {
            va: word.va + 4,
            rkey: word.rkey,
            swap_add: 5,
            compare: 0,
        }),
        ..request(Opcode::RC_FETCH_ADD, 501)
    });
    let s = h.sent();
    assert_eq!(
        s[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::InvalidRequest)
    );
    assert_eq!(h.state(), QpState::Err);
}

#[test]
fn duplicate_send_is_reacked_without_touching_the_receive_queue() {
    let mut h = H::new(params());
    let sgl = h.sge(1024, 64);
    h.dev
        .post_recv(h.qpn, RecvRequest { wr_id: 7, sgl })
        .unwrap();
    h.dev
        .post_recv(h.qpn, RecvRequest { wr_id: 8, sgl })
        .unwrap();
    let p = PacketRepr {
        payload: b"abcd",
        ..request(Opcode::RC_SEND_ONLY, 500)
    };
    h.feed(p);
    h.feed(PacketRepr {
        bth: BthRepr {
            ack_req: false,
            ..p.bth
        },
        ..p
    });
    let s = h.sent();
    // The ACK for 500 and the duplicate's re-ACK (PSN = ePSN - 1) coalesce into one.
    assert_eq!(ops_psns(&s), [(Opcode::RC_ACKNOWLEDGE, 500)]);
    assert_eq!(s[0].repr().aeth.unwrap().msn, Msn(1));
    let c = h.completions(h.rcq);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].byte_len, c[0].opcode),
        (7, 4, WcOpcode::Recv)
    );
    assert_eq!(h.dev.qp(h.qpn).unwrap().recv_queue_len(), 1);
    assert_eq!(&h.dev.mr(h.mr).unwrap().as_slice()[1024..1028], b"abcd");
}

#[test]
fn out_of_sequence_gets_one_nak_per_gap() {
    let mut h = H::new(params());
    let w = h.remote(0);
    let wr = |psn| PacketRepr {
        reth: Some(RethRepr {
            va: w.va,
            rkey: w.rkey,
            dma_len: 4,
        }),
        payload: b"wxyz",
        ..request(Opcode::RC_RDMA_WRITE_ONLY, psn)
    };
    h.feed(wr(502));
    h.feed(wr(503));
    let s = h.sent();
    assert_eq!(ops_psns(&s), [(Opcode::RC_ACKNOWLEDGE, 500)]);
    assert_eq!(
        s[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::PsnSequenceError)
    );
    h.feed(wr(504));
    assert!(h.sent().is_empty());
    assert_eq!(h.stats().drops.out_of_sequence, 2);
    h.feed(wr(500));
    h.feed(wr(501));
    // The gap is filled (ACKs for 500 and 501 are pending); 503 opens a new gap at 502 and
    // gets its own NAK, which subsumes the pending ACKs (coalescing).
    h.feed(wr(503));
    let s = h.sent();
    assert_eq!(ops_psns(&s), [(Opcode::RC_ACKNOWLEDGE, 502)]);
    assert_eq!(
        s[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::PsnSequenceError)
    );
    assert_eq!(h.stats().naks_sent.seq_err, 2);
}

#[test]
fn responder_rnr_nak_when_no_receive_is_posted() {
    let mut h = H::new(params());
    let p = PacketRepr {
        payload: b"hi",
        bth: BthRepr {
            pad_count: 2,
            ..request(Opcode::RC_SEND_ONLY, 500).bth
        },
        ..request(Opcode::RC_SEND_ONLY, 500)
    };
    h.feed(p);
    let s = h.sent();
    assert_eq!(s[0].repr().aeth.unwrap().syndrome, Syndrome::rnr_nak(1));
    assert_eq!(s[0].repr().bth.psn, Psn::new(500));
    assert_eq!(h.state(), QpState::Rts, "RNR changes no state");
    h.post_recv(1, 8);
    h.feed(p);
    assert_eq!(
        h.sent()[0].repr().aeth.unwrap().syndrome,
        Syndrome::ACK_UNLIMITED
    );
    assert_eq!(h.completions(h.rcq)[0].byte_len, 2);
}

#[test]
fn rkey_violation_naks_remote_access_errors_the_qp_and_flushes() {
    // Responder side.
    let mut h = H::new(params());
    h.post_recv(9, 8);
    let w = h.remote(0);
    h.feed(PacketRepr {
        reth: Some(RethRepr {
            va: w.va,
            rkey: RKey(w.rkey.0 ^ 0x100),
            dma_len: 4,
        }),
        payload: b"evil",
        ..request(Opcode::RC_RDMA_WRITE_ONLY, 500)
    });
    let s = h.sent();
    assert_eq!(ops_psns(&s), [(Opcode::RC_ACKNOWLEDGE, 500)]);
    assert_eq!(
        s[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::RemoteAccessError)
    );
    assert_eq!(h.state(), QpState::Err);
    assert_eq!(statuses(&h.completions(h.rcq)), [(9, WcStatus::WrFlushErr)]);
    assert_ne!(&h.dev.mr(h.mr).unwrap().as_slice()[..4], b"evil");
    // Out of bounds with the right key is the same error.
    let mut h = H::new(params());
    h.feed(PacketRepr {
        reth: Some(RethRepr {
            va: w.va + (1 << 16) - 2,
            rkey: w.rkey,
            dma_len: 4,
        }),
        payload: b"evil",
        ..request(Opcode::RC_RDMA_WRITE_ONLY, 500)
    });
    assert_eq!(
        h.sent()[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::RemoteAccessError)
    );
    // Requester side: the NAK fails the WR, the QP goes to ERR and the rest is flushed.
    let mut h = H::new(params());
    h.post(1, WrOp::Send, h.sge(0, 4));
    h.post(2, WrOp::Write(h.remote(0)), h.sge(0, 4));
    h.post(3, WrOp::Send, h.sge(0, 4));
    h.post_recv(4, 8);
    h.sent();
    h.feed(ack(101, Syndrome::nak(NakCode::RemoteAccessError)));
    assert_eq!(
        statuses(&h.completions(h.scq)),
        [
            (1, WcStatus::Success),
            (2, WcStatus::RemAccessErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(statuses(&h.completions(h.rcq)), [(4, WcStatus::WrFlushErr)]);
    assert_eq!(h.state(), QpState::Err);
    assert!(h.sent().is_empty());
    assert_eq!(h.dev.poll_timeout(), None);
}

#[test]
fn ghost_ack_for_a_psn_never_sent_is_dropped() {
    let mut h = H::new(params());
    h.feed(ack(100, Syndrome::ACK_UNLIMITED));
    h.post(1, WrOp::Send, h.sge(0, 4));
    h.sent();
    h.feed(ack(101, Syndrome::ACK_UNLIMITED));
    h.feed(ack(5000, Syndrome::nak(NakCode::RemoteAccessError)));
    assert!(h.completions(h.scq).is_empty());
    assert_eq!(h.stats().drops.ghost_response, 3);
    assert_eq!(h.state(), QpState::Rts);
    h.feed(ack(100, Syndrome::ACK_UNLIMITED));
    assert_eq!(statuses(&h.completions(h.scq)), [(1, WcStatus::Success)]);
}

#[test]
fn retry_exhaustion_when_the_peer_disappears() {
    let mut h = H::new(ConnectParams {
        timeout: 8,
        retry_cnt: 3,
        ..params()
    }); // 1.05 ms
    h.post(1, WrOp::Write(h.remote(0)), h.sge(0, 2 * MTU));
    h.post(2, WrOp::Send, h.sge(0, 4));
    assert_eq!(h.sent().len(), 3);
    let t = 4096u64 << 8;
    let mut now = 0;
    for _ in 0..3 {
        let deadline = h.dev.poll_timeout().unwrap().as_nanos();
        assert_eq!(deadline, now + t);
        now = deadline;
        h.now = Instant(now - 1);
        h.dev.handle_timeout(h.now);
        assert!(h.sent().is_empty(), "early timer calls are harmless");
        h.now = Instant(now);
        h.dev.handle_timeout(h.now);
        assert_eq!(
            ops_psns(&h.sent()),
            [
                (Opcode::RC_RDMA_WRITE_FIRST, 100),
                (Opcode::RC_RDMA_WRITE_LAST, 101),
                (Opcode::RC_SEND_ONLY, 102)
            ]
        );
    }
    h.now = h.dev.poll_timeout().unwrap();
    h.dev.handle_timeout(h.now);
    assert_eq!(
        statuses(&h.completions(h.scq)),
        [(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    let st = h.stats();
    assert_eq!((st.timeouts, st.retransmitted_packets), (4, 9));
}

#[test]
fn psn_wraps_at_2_pow_24() {
    let mut h = H::new(ConnectParams {
        sq_psn: Psn::new(0xff_fffe),
        rq_psn: Psn::new(0xff_ffff),
        ..params()
    });
    h.post(1, WrOp::Write(h.remote(0)), h.sge(0, 4 * MTU));
    assert_eq!(
        ops_psns(&h.sent()),
        [
            (Opcode::RC_RDMA_WRITE_FIRST, 0xff_fffe),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 0xff_ffff),
            (Opcode::RC_RDMA_WRITE_MIDDLE, 0),
            (Opcode::RC_RDMA_WRITE_LAST, 1)
        ]
    );
    h.feed(ack(0, Syndrome::nak(NakCode::PsnSequenceError)));
    assert_eq!(
        ops_psns(&h.sent()),
        [
            (Opcode::RC_RDMA_WRITE_MIDDLE, 0),
            (Opcode::RC_RDMA_WRITE_LAST, 1)
        ]
    );
    h.feed(ack(1, Syndrome::ACK_UNLIMITED));
    assert_eq!(statuses(&h.completions(h.scq)), [(1, WcStatus::Success)]);
    assert_eq!(h.dev.qp(h.qpn).unwrap().next_send_psn(), Psn::new(2));
    // Responder across the wrap: 0xffffff then 0.
    let w = h.remote(0);
    h.feed(PacketRepr {
        reth: Some(RethRepr {
            va: w.va,
            rkey: w.rkey,
            dma_len: 2 * MTU,
        }),
        payload: &[1; MTU as usize],
        ..request(Opcode::RC_RDMA_WRITE_FIRST, 0xff_ffff)
    });
    h.feed(PacketRepr {
        payload: &[2; MTU as usize],
        ..request(Opcode::RC_RDMA_WRITE_LAST, 0)
    });
    assert_eq!(ops_psns(&h.sent()), [(Opcode::RC_ACKNOWLEDGE, 0)]);
    assert_eq!(h.dev.qp(h.qpn).unwrap().expected_psn(), Psn::new(1));
    // A packet from before the wrap is a duplicate, not new.
    h.feed(PacketRepr {
        payload: &[2; MTU as usize],
        ..request(Opcode::RC_RDMA_WRITE_LAST, 0xff_fff0)
    });
    assert_eq!(h.stats().duplicate_requests, 1);
}

#[test]
fn bad_icrc_wrong_qp_wrong_state_and_garbage_are_dropped_and_counted() {
    let mut h = H::new(params());
    let mut p = ack(100, Syndrome::ACK_UNLIMITED);
    p.bth.dest_qp = h.qpn;
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    h.path.rx_icrc(buf.len()).fill(&mut buf);
    let mut bad = buf.clone();
    *bad.last_mut().unwrap() ^= 1;
    h.feed_raw(&bad);
    assert_eq!(h.stats().drops.bad_icrc, 1);
    let mut other = buf.clone();
    other[7] ^= 0x40; // another QPN
    h.feed_raw(&other);
    assert_eq!(h.dev.stats().drops.unknown_qp, 1);
    h.feed_raw(&[1, 2, 3]);
    assert_eq!(h.dev.stats().drops.malformed, 1);
    h.dev.modify_qp(h.qpn, &QpAttr::to(QpState::Err)).unwrap();
    h.feed_raw(&buf);
    assert_eq!(h.stats().drops.wrong_state, 1);
}

#[test]
fn modify_rules_and_posting_states() {
    let mut dev = Device::default();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq();
    let mr = dev.reg_mr(pd, 64, Access::LOCAL_WRITE);
    let q = dev.create_qp(pd, cq, cq, QpCaps::default()).unwrap();
    let sgl = SgList::one(dev.mr(mr).unwrap().sge(0, 8));
    assert_eq!(
        dev.post_send(q, WorkRequest::new(1, WrOp::Send, sgl)),
        Err(PostError::WrongState(QpState::Reset))
    );
    assert_eq!(
        dev.modify_qp(q, &QpAttr::to(QpState::Rtr)),
        Err(ModifyError::IllegalTransition {
            from: QpState::Reset,
            to: QpState::Rtr
        })
    );
    assert_eq!(
        dev.modify_qp(q, &QpAttr::to(QpState::Init)),
        Err(ModifyError::MissingAttribute("access_flags"))
    );
    dev.modify_qp(
        q,
        &QpAttr {
            access_flags: Some(Access::NONE),
            ..QpAttr::to(QpState::Init)
        },
    )
    .unwrap();
    dev.post_recv(q, RecvRequest { wr_id: 1, sgl }).unwrap();
    assert_eq!(
        dev.post_send(q, WorkRequest::new(1, WrOp::Send, sgl)),
        Err(PostError::WrongState(QpState::Init))
    );
    let rtr = QpAttr {
        path_mtu: Some(1000),
        dest_qpn: Some(Qpn(5)),
        rq_psn: Some(Psn::new(0)),
        max_dest_rd_atomic: Some(1),
        min_rnr_timer: Some(1),
        path: Some(PathConfig::default()),
        ..QpAttr::to(QpState::Rtr)
    };
    assert_eq!(
        dev.modify_qp(q, &rtr),
        Err(ModifyError::InvalidValue("path_mtu"))
    );
    assert_eq!(dev.qp(q).unwrap().state(), QpState::Init, "nothing changed");
    dev.modify_qp(
        q,
        &QpAttr {
            path_mtu: Some(4096),
            ..rtr
        },
    )
    .unwrap();
    assert_eq!(
        dev.modify_qp(q, &QpAttr::to(QpState::Rts)),
        Err(ModifyError::MissingAttribute("sq_psn"))
    );
    // A receive buffer without LOCAL_WRITE, an unknown key: refused.
    let ro = dev.reg_mr(pd, 64, Access::REMOTE_READ);
    let bad = SgList::one(dev.mr(ro).unwrap().sge(0, 8));
    assert_eq!(
        dev.post_recv(q, RecvRequest { wr_id: 2, sgl: bad }),
        Err(PostError::InvalidSge)
    );
    let oob = SgList::one(dev.mr(mr).unwrap().sge(60, 8));
    assert_eq!(
        dev.post_recv(q, RecvRequest { wr_id: 2, sgl: oob }),
        Err(PostError::InvalidSge)
    );
    // Any state -> ERR flushes the receive queue; ERR -> RESET -> INIT works again.
    dev.modify_qp(q, &QpAttr::to(QpState::Err)).unwrap();
    assert_eq!(
        dev.poll_cq(cq).map(|c| (c.wr_id, c.status)),
        Some((1, WcStatus::WrFlushErr))
    );
    dev.modify_qp(q, &QpAttr::to(QpState::Reset)).unwrap();
    dev.modify_qp(
        q,
        &QpAttr {
            access_flags: Some(Access::NONE),
            ..QpAttr::to(QpState::Init)
        },
    )
    .unwrap();
}

#[test]
fn sqd_finishes_started_messages_only() {
    let mut h = H::new(params());
    h.post(1, WrOp::Write(h.remote(0)), h.sge(0, 4 * MTU));
    let s: Vec<_> = h.sent();
    assert_eq!(s.len(), 4);
    h.dev.modify_qp(h.qpn, &QpAttr::to(QpState::Sqd)).unwrap();
    h.post(2, WrOp::Send, h.sge(0, 4));
    assert!(h.sent().is_empty(), "no new message starts in SQD");
    h.feed(ack(103, Syndrome::ACK_UNLIMITED));
    assert_eq!(statuses(&h.completions(h.scq)), [(1, WcStatus::Success)]);
    h.dev.modify_qp(h.qpn, &QpAttr::to(QpState::Rts)).unwrap();
    assert_eq!(ops_psns(&h.sent()), [(Opcode::RC_SEND_ONLY, 104)]);
}

#[test]
fn ce_mark_sends_a_rate_limited_cnp() {
    let mut h = H::new(params());
    h.post_recv(1, 8);
    let mut p = PacketRepr {
        payload: b"abcd",
        ..request(Opcode::RC_SEND_ONLY, 500)
    };
    p.bth.dest_qp = h.qpn;
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    h.path.rx_icrc(buf.len()).fill(&mut buf);
    h.dev
        .handle_datagram(h.now, &h.path.from_peer(Ecn::Ce), &buf);
    h.dev
        .handle_datagram(h.now, &h.path.from_peer(Ecn::Ce), &buf);
    let s = h.sent();
    assert_eq!(
        ops_psns(&s),
        [(Opcode::CNP, 0), (Opcode::RC_ACKNOWLEDGE, 500)]
    );
    let cnp = s[0].repr();
    assert!(cnp.bth.becn);
    assert_eq!((cnp.bth.dest_qp, cnp.payload), (PEER, &[0u8; 16][..]));
    let st = h.stats();
    assert_eq!((st.ce_received, st.cnps_sent), (2, 1));
}

/// Notification point, DCQCN paper rule with the default 50 µs interval: CE marks at 0, 10 and
/// 60 µs give a CNP at once (0), one at the end of the first window (50 µs, for the 10 µs
/// mark) and one at the end of the next (100 µs, for the 60 µs mark); each CNP is a valid
/// packet (ICRC, BECN, DestQP = the peer) and the deadline shows in `poll_timeout`.
#[test]
fn cnp_interval_first_mark_at_once_then_window_end() {
    let mut h = H::new(params());
    for i in 0..3 {
        h.post_recv(i, 8);
    }
    let mark = |h: &mut H, us: u64, psn: u32| -> Vec<(Opcode, u32, u64)> {
        h.now = Instant::from_micros(us);
        let mut p = PacketRepr {
            payload: b"abcd",
            ..request(Opcode::RC_SEND_ONLY, psn)
        };
        p.bth.dest_qp = h.qpn;
        let mut buf = vec![0u8; p.buffer_len()];
        p.emit(&mut buf).unwrap();
        h.path.rx_icrc(buf.len()).fill(&mut buf);
        h.dev
            .handle_datagram(h.now, &h.path.from_peer(Ecn::Ce), &buf);
        let t = h.now.as_nanos() / 1000;
        h.sent()
            .iter()
            .map(|o| (o.repr().bth.opcode, o.repr().bth.psn.value(), t))
            .collect()
    };
    let cnps = |v: &[(Opcode, u32, u64)]| v.iter().filter(|x| x.0 == Opcode::CNP).count();
    let out = mark(&mut h, 0, 500);
    assert_eq!(cnps(&out), 1, "first mark answered at once: {out:?}");
    assert_eq!(h.dev.poll_timeout(), None, "no deferred CNP owed yet");
    let out = mark(&mut h, 10, 501);
    assert_eq!(cnps(&out), 0, "inside the window: deferred");
    assert_eq!(h.dev.poll_timeout(), Some(Instant::from_micros(50)));
    // Nothing before the window ends.
    h.now = Instant::from_micros(49);
    h.dev.handle_timeout(h.now);
    assert!(h.sent().is_empty());
    h.now = Instant::from_micros(50);
    h.dev.handle_timeout(h.now);
    let s = h.sent();
    assert_eq!(ops_psns(&s), [(Opcode::CNP, 0)], "the owed CNP at 50 us");
    let cnp = s[0].repr();
    assert!(cnp.bth.becn && !cnp.bth.fecn);
    assert_eq!((cnp.bth.dest_qp, cnp.payload), (PEER, &[0u8; 16][..]));
    assert_eq!(s[0].bytes.len(), roce_stack::cc::cnp::CNP_TRANSPORT_LEN);
    // The peer verifies the ICRC with its receive seed = our transmit seed.
    assert!(h.path.tx_icrc(s[0].bytes.len()).verify(&s[0].bytes));
    let out = mark(&mut h, 60, 502);
    assert_eq!(cnps(&out), 0, "inside the second window [50, 100) us");
    assert_eq!(h.dev.poll_timeout(), Some(Instant::from_micros(100)));
    h.now = Instant::from_micros(100);
    h.dev.handle_timeout(h.now);
    assert_eq!(ops_psns(&h.sent()), [(Opcode::CNP, 0)]);
    // No mark in [100, 150): nothing owed.
    assert_eq!(h.dev.poll_timeout(), None);
    let st = h.stats();
    assert_eq!((st.ce_received, st.cnps_sent), (3, 3));
}

/// A CE-marked CNP is counted as a CE mark and a CNP received, but is not answered by a CNP.
#[test]
fn marked_cnp_is_not_answered() {
    let mut h = H::new(params());
    let mut p = roce_stack::cc::cnp::cnp_repr(h.qpn);
    p.bth.dest_qp = h.qpn;
    let mut buf = vec![0u8; p.buffer_len()];
    p.emit(&mut buf).unwrap();
    h.path.rx_icrc(buf.len()).fill(&mut buf);
    h.dev
        .handle_datagram(h.now, &h.path.from_peer(Ecn::Ce), &buf);
    assert!(h.sent().is_empty());
    let st = h.stats();
    assert_eq!((st.ce_received, st.cnps_received, st.cnps_sent), (1, 1, 0));
}

#[test]
fn opcode_sequence_error_naks_invalid_request() {
    let mut h = H::new(params());
    h.post_recv(1, 1024);
    // A SEND_MIDDLE with no SEND_FIRST before it.
    h.feed(PacketRepr {
        payload: &[0; MTU as usize],
        ..request(Opcode::RC_SEND_MIDDLE, 500)
    });
    let s = h.sent();
    assert_eq!(
        s[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::InvalidRequest)
    );
    assert_eq!(h.state(), QpState::Err);
    assert_eq!(statuses(&h.completions(h.rcq)), [(1, WcStatus::WrFlushErr)]);
    assert_eq!(h.stats().naks_sent.invalid_request, 1);
}

#[test]
fn send_longer_than_the_receive_buffer_is_a_length_error() {
    let mut h = H::new(params());
    h.post_recv(1, 3);
    h.feed(PacketRepr {
        payload: b"four",
        ..request(Opcode::RC_SEND_ONLY, 500)
    });
    assert_eq!(
        h.sent()[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::InvalidRequest)
    );
    assert_eq!(statuses(&h.completions(h.rcq)), [(1, WcStatus::LocLenErr)]);
}

#[test]
fn receive_buffer_gone_is_a_remote_operational_error() {
    let mut h = H::new(params());
    let buf = h.dev.reg_mr(first_pd(&h), 64, Access::LOCAL_WRITE);
    let sgl = SgList::one(h.dev.mr(buf).unwrap().sge(0, 64));
    h.dev
        .post_recv(h.qpn, RecvRequest { wr_id: 1, sgl })
        .unwrap();
    assert!(h.dev.dereg_mr(buf));
    h.feed(PacketRepr {
        payload: b"four",
        ..request(Opcode::RC_SEND_ONLY, 500)
    });
    assert_eq!(
        h.sent()[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::RemoteOperationalError)
    );
    assert_eq!(statuses(&h.completions(h.rcq)), [(1, WcStatus::LocProtErr)]);
    assert_eq!(h.state(), QpState::Err);
}

fn first_pd(h: &H) -> roce_stack::PdHandle {
    h.dev.mr(h.mr).unwrap().pd()
}

#[test]
fn duplicate_read_is_re_executed_from_current_memory() {
    let mut h = H::new(params());
    let src = h.remote(2048);
    let read = PacketRepr {
        reth: Some(RethRepr {
            va: src.va,
            rkey: src.rkey,
            dma_len: 2 * MTU,
        }),
        ..request(Opcode::RC_RDMA_READ_REQUEST, 500)
    };
    h.feed(read);
    let s = h.sent();
    assert_eq!(
        ops_psns(&s),
        [
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 500),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 501)
        ]
    );
    assert_eq!(h.dev.qp(h.qpn).unwrap().expected_psn(), Psn::new(502));
    // Memory changes; the duplicate (for the second half only) reads it again.
    h.dev.mr_mut(h.mr).unwrap().as_mut_slice()[2048..2048 + 2 * MTU as usize].fill(0xee);
    h.feed(PacketRepr {
        reth: Some(RethRepr {
            va: src.va + u64::from(MTU),
            rkey: src.rkey,
            dma_len: MTU,
        }),
        ..request(Opcode::RC_RDMA_READ_REQUEST, 501)
    });
    let s = h.sent();
    assert_eq!(ops_psns(&s), [(Opcode::RC_RDMA_READ_RESPONSE_LAST, 501)]);
    assert!(s[0].repr().payload.iter().all(|&b| b == 0xee));
    // A duplicate outside the original range, or with another rkey, finds no resource.
    h.feed(PacketRepr {
        reth: Some(RethRepr {
            va: src.va + u64::from(MTU),
            rkey: src.rkey,
            dma_len: 2 * MTU,
        }),
        ..request(Opcode::RC_RDMA_READ_REQUEST, 501)
    });
    assert!(h.sent().is_empty());
    assert_eq!(h.stats().drops.no_resource, 1);
}

#[test]
fn read_access_is_checked_against_region_rights() {
    let mut h = H::new(params());
    let pd = first_pd(&h);
    let wo = h.dev.reg_mr(pd, 64, Access::REMOTE_WRITE);
    let m = h.dev.mr(wo).unwrap();
    h.feed(PacketRepr {
        reth: Some(RethRepr {
            va: m.va(),
            rkey: m.rkey(),
            dma_len: 8,
        }),
        ..request(Opcode::RC_RDMA_READ_REQUEST, 500)
    });
    assert_eq!(
        h.sent()[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::RemoteAccessError)
    );
}

#[test]
fn qp_without_remote_write_rights_naks_invalid_request() {
    let mut h = H::new(ConnectParams {
        access: Access::REMOTE_READ,
        ..params()
    });
    let w = h.remote(0);
    h.feed(PacketRepr {
        reth: Some(RethRepr {
            va: w.va,
            rkey: w.rkey,
            dma_len: 4,
        }),
        payload: b"nope",
        ..request(Opcode::RC_RDMA_WRITE_ONLY, 500)
    });
    assert_eq!(
        h.sent()[0].repr().aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::InvalidRequest)
    );
}

/// A datagram from anyone but the peer is dropped before anything else looks at it, whatever
/// it carries: a WRITE with the right PSN, rkey and address changes no byte, a NAK fails no
/// request, a CNP cuts no rate; each is counted as `wrong_address` and the QP stays in RTS.
#[test]
fn off_path_datagrams_are_dropped_whatever_they_carry() {
    use std::net::SocketAddr;
    let mut h = H::new(params());
    h.post(1, WrOp::Send, h.sge(0, 4));
    let first = h.sent();
    assert_eq!(ops_psns(&first), [(Opcode::RC_SEND_ONLY, 100)]);
    let w = h.remote(0);
    let before = h.dev.mr(h.mr).unwrap().as_slice()[..4].to_vec();
    let from = |ip: &str, port| SocketAddr::new(ip.parse().unwrap(), port);
    let stranger = [
        from("10.0.0.99", 0xc002), // a third host
        from("127.0.0.1", 0xc002), // another address of ours
        from("10.0.0.1", 0xc002),  // our own address as source
    ];
    let attacks = [
        PacketRepr {
            reth: Some(RethRepr {
                va: w.va,
                rkey: w.rkey,
                dma_len: 4,
            }),
            payload: b"evil",
            ..request(Opcode::RC_RDMA_WRITE_ONLY, 500)
        },
        ack(100, Syndrome::nak(NakCode::RemoteAccessError)),
        PacketRepr {
            bth: BthRepr {
                opcode: Opcode::CNP,
                becn: true,
                ..BTH
            },
            payload: &[0; 16],
            ..PacketRepr::default()
        },
    ];
    let mut sent = 0;
    for src in stranger {
        for attack in &attacks {
            let mut p = *attack;
            p.bth.dest_qp = h.qpn;
            let mut buf = vec![0u8; p.buffer_len()];
            let n = p.emit(&mut buf).unwrap();
            // A valid ICRC for the path: only the address gives it away.
            h.path.rx_icrc(n).fill(&mut buf[..n]);
            let meta = roce_stack::RxMeta::new(src, h.path.local, Ecn::Ect0);
            h.dev.handle_datagram(h.now, &meta, &buf[..n]);
            sent += 1;
        }
    }
    let st = *h.dev.qp(h.qpn).unwrap().stats();
    assert_eq!(st.drops.wrong_address, sent, "{st:?}");
    assert_eq!(st.drops.total(), sent, "nothing else counted: {st:?}");
    assert_eq!((st.rx_packets, st.cnps_received, st.rate_cuts), (0, 0, 0));
    assert_eq!(h.state(), QpState::Rts);
    assert!(h.sent().is_empty(), "no answer to an off-path sender");
    assert!(
        h.completions(h.scq).is_empty(),
        "the SEND is still outstanding"
    );
    assert_eq!(&h.dev.mr(h.mr).unwrap().as_slice()[..4], &before[..]);
    // The peer's own ACK still completes the SEND.
    h.feed(ack(100, Syndrome::ACK_UNLIMITED));
    assert_eq!(statuses(&h.completions(h.scq)), [(1, WcStatus::Success)]);
}

/// `Device::handle_datagram` says what became of each datagram: which QP took it, or which
/// check dropped it and where (the endpoint reads sign of life and a trustworthy source from
/// it, instead of comparing counters).
#[test]
fn each_datagram_says_what_became_of_it() {
    use roce_stack::{Delivery, DropReason, Refusal};
    let mut h = H::new(params());
    let qpn = h.qpn;
    let emit = |p: &PacketRepr<'_>| {
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf).unwrap();
        buf.truncate(n);
        buf
    };
    let mut ack = ack(99, Syndrome::ACK_UNLIMITED);
    ack.bth.dest_qp = qpn;
    let good = {
        let mut b = emit(&ack);
        let n = b.len();
        h.path.rx_icrc(n).fill(&mut b);
        b
    };
    let peer = h.path.from_peer(Ecn::Ect0);
    // From the peer, through the transport checks, but a stale ACK (nothing is outstanding,
    // the requester counts it as such): taken, out of sequence, so nothing a link may learn
    // from.
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &good),
        Delivery::OutOfSequence(qpn)
    );
    let framed = |h: &H, mut p: PacketRepr<'_>| {
        p.bth.dest_qp = qpn;
        let mut b = emit(&p);
        let n = b.len();
        h.path.rx_icrc(n).fill(&mut b);
        b
    };
    // A CNP has no PSN to be in sequence with.
    let cnp = framed(
        &h,
        PacketRepr {
            bth: BthRepr {
                opcode: Opcode::CNP,
                becn: true,
                ..BTH
            },
            payload: &[0; 16],
            ..PacketRepr::default()
        },
    );
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &cnp),
        Delivery::OutOfSequence(qpn)
    );
    // The ACK of a SEND outstanding, and a request at the expected PSN: in sequence. The
    // same request again is a duplicate: out of sequence.
    h.post(1, WrOp::Send, h.sge(0, 4));
    assert_eq!(ops_psns(&h.sent()), [(Opcode::RC_SEND_ONLY, 100)]);
    let acked = framed(&h, self::ack(100, Syndrome::ACK_UNLIMITED));
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &acked),
        Delivery::Connected(qpn)
    );
    h.post_recv(7, 64);
    let send = framed(
        &h,
        PacketRepr {
            payload: b"ping",
            ..request(Opcode::RC_SEND_ONLY, 500)
        },
    );
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &send),
        Delivery::Connected(qpn)
    );
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &send),
        Delivery::OutOfSequence(qpn)
    );
    // The same bytes from another address.
    let mut stranger = peer;
    stranger.src = "10.0.0.66:49152".parse().unwrap();
    assert_eq!(
        h.dev.handle_datagram(h.now, &stranger, &good),
        Delivery::Dropped(Refusal::Qp {
            qpn,
            reason: DropReason::WrongAddress
        })
    );
    // A bad ICRC.
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &bad),
        Delivery::Dropped(Refusal::Qp {
            qpn,
            reason: DropReason::BadIcrc
        })
    );
    // No such QP; no transport header at all; a non-MAD for QP1.
    let mut other = ack;
    other.bth.dest_qp = Qpn(0x12_3456);
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &emit(&other)),
        Delivery::Dropped(Refusal::UnknownQp(Qpn(0x12_3456)))
    );
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &[0x11, 0x22, 0x33]),
        Delivery::Dropped(Refusal::Malformed)
    );
    let mut gsi = ack;
    gsi.bth.dest_qp = Qpn(1);
    assert_eq!(
        h.dev.handle_datagram(h.now, &peer, &emit(&gsi)),
        Delivery::Dropped(Refusal::Management(roce_stack::gsi::MadRefusal::Malformed))
    );
    // Only the first is a sign of life; only it is from a trustworthy source.
    assert_eq!(h.stats().drops.wrong_address, 1);
}
