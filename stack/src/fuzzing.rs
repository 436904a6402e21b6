//! Bodies of the stack's fuzz targets, compiled into the library under `cfg(test)` or
//! `cfg(fuzzing)` (with the `sim` feature), so `cargo test` runs them on stable too.
//!
//! [`qp_pair`] drives two connected QPs (RC, UC, or RC with the receives on an SRQ, as the
//! first byte says; memory windows of both types bound, used and invalidated on the way) with
//! arbitrary posts, arbitrary and mutated
//! datagrams, network reordering/loss and time steps decoded from a byte slice, and asserts
//! the invariants: no panic, no byte written outside the regions remote peers and local lists
//! may write, and completions as the in-order [`Model`] allows them: only for requests posted
//! on that queue, each once, in the order posted (an unsignaled send may complete silently).
use std::collections::VecDeque;

use roce_proto::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, Ecn, ImmDt, Msn, Opcode, PKey, PacketRepr,
    Psn, Qpn, RethRepr, Syndrome,
};

use crate::model::{Model, QueueId};
use crate::{
    Access, ConnectParams, Device, Instant, MrHandle, PathConfig, QpAttr, QpCaps, QpState,
    RecvRequest, RemoteAddr, RxMeta, SgList, WorkRequest, WrOp,
};

struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }
}

struct Side {
    dev: Device,
    qpn: Qpn,
    pd: crate::PdHandle,
    /// The shared receive queue the QP's receives go to (mode 2).
    srq: Option<crate::srq::SrqHandle>,
    /// The latest memory window bound over `data`.
    mw: Option<roce_proto::RKey>,
    data: MrHandle,
    guard: MrHandle,
    ro: MrHandle,
    ro_bytes: Vec<u8>,
    /// What may complete, and in which order.
    model: Model,
    sq: QueueId,
    rq: QueueId,
    completions: u64,
}

const DATA_LEN: usize = 8192;

fn connect(s: &mut Side, peer: Qpn, local: &str, remote: &str, mtu: u32) {
    let path = PathConfig {
        local: local.parse().unwrap_or(PathConfig::default().local),
        remote: remote.parse().unwrap_or(PathConfig::default().remote),
        ..PathConfig::default()
    };
    let c = ConnectParams {
        dest_qpn: peer,
        path,
        rq_psn: Psn::new(0xff_fff0),
        sq_psn: Psn::new(0xff_fff0),
        mtu,
        timeout: 4,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 2,
        max_dest_rd_atomic: 2,
        ..ConnectParams::default()
    };
    let r = s.dev.connect_qp(s.qpn, &c);
    assert!(r.is_ok(), "connecting a fresh QP must work: {r:?}");
}

/// What `sd` sees of a datagram from its peer (or, for `stranger`, from an off-path address).
fn from_peer(sd: &Side, ecn: Ecn, stranger: bool) -> RxMeta {
    let path = sd
        .dev
        .qp(sd.qpn)
        .map_or(PathConfig::default(), |q| *q.path());
    let mut meta = path.from_peer(ecn);
    if stranger {
        meta.src = std::net::SocketAddr::new([10, 9, 9, 9].into(), meta.src.port());
    }
    meta
}

/// A side of the pair: mode 0 RC, 1 UC, 2 RC with its receives on an SRQ.
fn side(qpn_base: u32, mode: u8) -> Side {
    let mut dev = Device::new(crate::DeviceConfig {
        qpn_base,
        ..crate::DeviceConfig::default()
    });
    let pd = dev.alloc_pd();
    let data = dev.reg_mr(pd, DATA_LEN, Access(Access::ALL.0 | Access::MW_BIND.0));
    let guard = dev.reg_mr(pd, 64, Access::LOCAL_WRITE);
    let ro = dev.reg_mr(pd, 256, Access::REMOTE_READ);
    let ro_bytes: Vec<u8> = (0..256u32).map(|i| (i * 31) as u8).collect();
    if let Some(m) = dev.mr_mut(ro) {
        m.as_mut_slice().copy_from_slice(&ro_bytes);
    }
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_unacked_psns: 8,
        ..QpCaps::default()
    };
    let (scq, rcq) = (dev.create_cq(), dev.create_cq());
    let srq = (mode == 2).then(|| dev.create_srq(pd, 16).ok()).flatten();
    let qpn = match (mode, srq) {
        (1, _) => dev.create_uc_qp(pd, scq, rcq, caps),
        (_, Some(srq)) => dev.create_qp_with_srq(pd, scq, rcq, caps, srq),
        _ => dev.create_qp(pd, scq, rcq, caps),
    }
    .unwrap_or(Qpn(0));
    let mut model = Model::new();
    let (sq, rq) = (model.add_queue(), model.add_queue());
    Side {
        dev,
        qpn,
        pd,
        srq,
        mw: None,
        data,
        guard,
        ro,
        ro_bytes,
        model,
        sq,
        rq,
        completions: 0,
    }
}

/// Drives a connected QP pair from `data`; panics only when an invariant breaks.
pub fn qp_pair(data: &[u8]) {
    run(data);
}

/// What one run did: (steps, datagrams sent, completions, memory windows bound).
///
/// Longer than 150 lines on purpose: it is one interpreter of the fuzzer's input, a `match`
/// with an arm per action byte over state every arm shares (both sides, the wire, the clock);
/// split into functions, each arm would take that whole state as arguments, and the corpus's
/// meaning (which byte does what) would no longer read top to bottom in one place.
fn run(data: &[u8]) -> (u64, u64, u64, u64) {
    let mut inp = Input { data };
    let mode = inp.byte() % 3;
    let mtu = 256 << (inp.byte() % 5);
    let mut sides = [side(0x11, mode), side(0x200, mode)];
    let (qa, qb) = (sides[0].qpn, sides[1].qpn);
    connect(&mut sides[0], qb, "10.0.0.1", "10.0.0.2", mtu);
    connect(&mut sides[1], qa, "10.0.0.2", "10.0.0.1", mtu);
    let mut now = Instant::ZERO;
    // (to, datagram, the UDP source port it was sent from: a QP may move paths).
    let mut wire: VecDeque<(usize, Vec<u8>, u16)> = VecDeque::new();
    let mut last_sent: Vec<Vec<u8>> = Vec::new();
    let mut buf = Vec::new();
    let mut next_id = 1u64;
    let mut steps = 0;
    let mut windows = 0;
    while !inp.data.is_empty() && steps < 4096 {
        steps += 1;
        let s = usize::from(inp.byte() & 1);
        match inp.byte() % 10 {
            0 | 1 => {
                // Post a send-queue request.
                let op_kind = inp.byte() % 10;
                let off = u64::from(inp.u32()) % (DATA_LEN as u64 + 16);
                let len = inp.u32() % 3000;
                let roff = u64::from(inp.u32()) % (DATA_LEN as u64 + 16);
                let peer = &sides[1 - s];
                let pm = peer.dev.mr(if op_kind == 5 && roff & 1 == 0 {
                    peer.ro
                } else {
                    peer.data
                });
                let mut remote = RemoteAddr {
                    va: pm.map_or(0, |m| m.va()) + roff,
                    rkey: pm.map_or(roce_proto::RKey(0), |m| m.rkey()),
                };
                // Through the peer's memory window (bound over its data region), if any.
                if let Some(k) = peer.mw.filter(|_| roff & 2 == 2) {
                    remote.rkey = k;
                }
                let me = &mut sides[s];
                let Some(m) = me.dev.mr(me.data) else {
                    continue;
                };
                let sgl = SgList::one(m.sge(off, len));
                let op = match op_kind {
                    0 => WrOp::Send,
                    1 => WrOp::SendWithImm(len),
                    2 => WrOp::SendWithInv(remote.rkey),
                    3 => WrOp::Write(remote),
                    4 => WrOp::WriteWithImm(remote, len),
                    5 => WrOp::Read(remote),
                    6 => WrOp::CompareSwap {
                        remote,
                        compare: off,
                        swap: roff,
                    },
                    7 => WrOp::FetchAdd { remote, add: roff },
                    8 => WrOp::AtomicWrite {
                        remote,
                        data: roff.to_le_bytes(),
                    },
                    _ => WrOp::Flush {
                        remote,
                        len,
                        whole_region: off & 1 == 1,
                    },
                };
                let sgl = if op.is_atomic() {
                    SgList::one(m.sge(off & !7, 8))
                } else {
                    sgl
                };
                let wr = WorkRequest {
                    signaled: inp.byte() & 1 == 0,
                    ..WorkRequest::new(next_id, op, sgl)
                };
                if me.dev.post_send(me.qpn, wr).is_ok() {
                    me.model.posted(me.sq, next_id, wr.signaled);
                }
                next_id += 1;
            }
            2 => {
                let off = u64::from(inp.u32()) % DATA_LEN as u64;
                let len = inp.u32() % 4000;
                let me = &mut sides[s];
                let Some(m) = me.dev.mr(me.data) else {
                    continue;
                };
                let r = RecvRequest {
                    wr_id: next_id,
                    sgl: SgList::one(m.sge(off, len)),
                };
                let posted = match me.srq {
                    Some(srq) => me.dev.post_srq_recv(srq, r),
                    None => me.dev.post_recv(me.qpn, r),
                };
                if posted.is_ok() {
                    me.model.posted(me.rq, next_id, true);
                }
                next_id += 1;
            }
            3 => {
                // Arbitrary bytes.
                let n = usize::from(inp.byte());
                let stranger = n & 1 == 1;
                let bytes = inp.take(n).to_vec();
                let meta = from_peer(&sides[s], Ecn::NotEct, stranger);
                sides[s].dev.handle_datagram(now, &meta, &bytes);
            }
            4 => {
                // A mutated copy of something really sent, with or without a fixed ICRC.
                if last_sent.is_empty() {
                    continue;
                }
                let i = usize::from(inp.byte()) % last_sent.len();
                let mut bytes = last_sent[i].clone();
                let flips = inp.byte() % 4;
                for _ in 0..flips {
                    let at = usize::from(inp.byte()) * 7 % bytes.len().max(1);
                    let v = inp.byte();
                    if let Some(b) = bytes.get_mut(at) {
                        *b ^= v;
                    }
                }
                if inp.byte() & 1 == 0 && bytes.len() >= 4 {
                    let path = *sides[s]
                        .dev
                        .qp(sides[s].qpn)
                        .map_or(&PathConfig::default(), |q| q.path());
                    let n = bytes.len();
                    path.rx_icrc(n).fill(&mut bytes);
                }
                let meta = from_peer(&sides[s], Ecn::Ce, flips == 3);
                sides[s].dev.handle_datagram(now, &meta, &bytes);
            }
            5 => {
                // A well-formed packet built from fuzz fields, with a valid ICRC.
                let opcode = Opcode(inp.byte() & 0x1f);
                let me = sides[s].qpn;
                let q = sides[s].dev.qp(me);
                let base = q.map_or(Psn::new(0), |q| q.expected_psn());
                let psn = base.add(u32::from(inp.byte())).sub(128);
                let plen = usize::from(inp.byte()) * 17 % (mtu as usize + 8);
                let payload = vec![inp.byte(); plen];
                let m = sides[s].dev.mr(sides[s].data);
                let va = m.map_or(0, |m| m.va()) + u64::from(inp.u32() % 9000);
                let rkey = m.map_or(roce_proto::RKey(0), |m| m.rkey());
                let h = opcode.ext_headers();
                use roce_proto::ExtHeaders as E;
                let repr = PacketRepr {
                    bth: BthRepr {
                        opcode,
                        pkey: PKey::DEFAULT,
                        dest_qp: me,
                        psn,
                        ack_req: inp.byte() & 1 == 1,
                        pad_count: PacketRepr::pad_for(plen),
                        ..BthRepr::default()
                    },
                    reth: h.contains(E::RETH).then_some(RethRepr {
                        va,
                        rkey,
                        dma_len: inp.u32() % 10_000,
                    }),
                    atomic_eth: h.contains(E::ATOMIC_ETH).then_some(AtomicEthRepr {
                        va,
                        rkey,
                        swap_add: 1,
                        compare: 0,
                    }),
                    aeth: h.contains(E::AETH).then_some(AethRepr {
                        syndrome: Syndrome(inp.byte()),
                        msn: Msn(0),
                    }),
                    atomic_ack_eth: h
                        .contains(E::ATOMIC_ACK_ETH)
                        .then_some(AtomicAckEthRepr { orig_data: 7 }),
                    immdt: h.contains(E::IMMDT).then_some(ImmDt(1)),
                    ieth: h.contains(E::IETH).then_some(roce_proto::IethRepr { rkey }),
                    payload: if opcode.has_payload() { &payload } else { &[] },
                    ..PacketRepr::default()
                };
                let mut bytes = vec![0u8; repr.buffer_len()];
                if let Ok(n) = repr.emit(&mut bytes) {
                    let path = *sides[s]
                        .dev
                        .qp(me)
                        .map_or(&PathConfig::default(), |q| q.path());
                    path.rx_icrc(n).fill(&mut bytes[..n]);
                    let meta = from_peer(&sides[s], Ecn::Ect0, false);
                    sides[s].dev.handle_datagram(now, &meta, &bytes[..n]);
                }
            }
            6 => {
                // Move time forward and run timers.
                now =
                    now.add_nanos(u64::from(inp.byte()) * 1_000 + u64::from(inp.byte()) * 100_000);
                for sd in &mut sides {
                    sd.dev.handle_timeout(now);
                }
            }
            7 => {
                // Network: deliver, drop, duplicate or delay the head of the wire.
                let what = inp.byte() % 4;
                if let Some((to, bytes, port)) = wire.pop_front() {
                    match what {
                        0 => {}
                        1 => {
                            deliver(&mut sides[to], now, &bytes, port);
                            deliver(&mut sides[to], now, &bytes, port);
                        }
                        2 => wire.push_back((to, bytes, port)),
                        _ => deliver(&mut sides[to], now, &bytes, port),
                    }
                }
            }
            8 => {
                // Deliver everything in order.
                while let Some((to, bytes, port)) = wire.pop_front() {
                    deliver(&mut sides[to], now, &bytes, port);
                }
            }
            _ => {
                // Rare state changes.
                let me = sides[s].qpn;
                match inp.byte() % 16 {
                    0 => {
                        let _ = sides[s].dev.modify_qp(me, &QpAttr::to(QpState::Err));
                    }
                    1 => {
                        let _ = sides[s].dev.modify_qp(me, &QpAttr::to(QpState::Sqd));
                    }
                    2 => {
                        let _ = sides[s].dev.modify_qp(me, &QpAttr::to(QpState::Rts));
                    }
                    3 | 4 => {
                        // Bind a window of type 1 (a verb) or 2 (through this QP) over part
                        // of the data region; the peer's requests may use it.
                        let off = u64::from(inp.u32()) % DATA_LEN as u64;
                        let len = u64::from(inp.u32()) % 4096;
                        let access = Access(
                            Access::REMOTE_WRITE.0
                                | Access::REMOTE_READ.0
                                | Access::REMOTE_ATOMIC.0,
                        );
                        let sd = &mut sides[s];
                        let kind = if inp.byte() & 1 == 0 {
                            crate::memory::MwType::Type1
                        } else {
                            crate::memory::MwType::Type2
                        };
                        let va = sd.dev.mr(sd.data).map_or(0, |m| m.va()) + off;
                        if let Some(k) = sd.dev.alloc_mw(sd.pd, kind) {
                            let bound = match kind {
                                crate::memory::MwType::Type1 => {
                                    sd.dev.bind_mw(k, sd.data, va, len, access)
                                }
                                crate::memory::MwType::Type2 => {
                                    let key = inp.byte();
                                    sd.dev.bind_mw_qp(me, k, sd.data, va, len, access, key)
                                }
                            };
                            if let Ok(k) = bound {
                                sd.mw = Some(k);
                                windows += 1;
                            }
                        }
                    }
                    5 => {
                        let sd = &mut sides[s];
                        if let Some(k) = sd.mw {
                            let _ = sd.dev.invalidate_mw(sd.pd, k);
                        }
                    }
                    6 | 7 => {
                        // Move to another path (UDP source port), as an adaptive sender does.
                        let port = 0xc000 | (inp.u32() as u16 & 0x3fff);
                        sides[s].dev.repath_qp(me, port);
                    }
                    _ => {}
                }
            }
        }
        // Collect what each side sends.
        for (i, sd) in sides.iter_mut().enumerate() {
            while let Some(t) = sd.dev.poll_transmit(now, &mut buf) {
                let b = buf[..t.len].to_vec();
                if last_sent.len() >= 32 {
                    last_sent.remove(0);
                }
                last_sent.push(b.clone());
                if wire.len() < 4096 {
                    wire.push_back((1 - i, b, t.path.src_port));
                }
            }
        }
        check(&mut sides);
    }
    // Let the pair settle, with a bound.
    for _ in 0..64 {
        while let Some((to, bytes, port)) = wire.pop_front() {
            deliver(&mut sides[to], now, &bytes, port);
        }
        for (i, sd) in sides.iter_mut().enumerate() {
            while let Some(t) = sd.dev.poll_transmit(now, &mut buf) {
                if wire.len() < 100_000 {
                    wire.push_back((1 - i, buf[..t.len].to_vec(), t.path.src_port));
                }
            }
        }
        if wire.is_empty() {
            let next = sides.iter().filter_map(|s| s.dev.poll_timeout()).min();
            match next {
                Some(t) => {
                    now = now.max(t);
                    for sd in &mut sides {
                        sd.dev.handle_timeout(now);
                    }
                }
                None => break,
            }
        }
        check(&mut sides);
    }
    let sent = sides.iter().map(|s| s.dev.stats().tx_packets).sum();
    let done = sides.iter().map(|s| s.completions).sum();
    (steps, sent, done, windows)
}

/// A datagram from `sd`'s peer, delivered.
/// Delivers a datagram from the peer, sent from UDP source port `port`.
fn deliver(sd: &mut Side, now: Instant, bytes: &[u8], port: u16) {
    let mut meta = from_peer(sd, Ecn::Ect0, false);
    meta.src.set_port(port);
    sd.dev.handle_datagram(now, &meta, bytes);
}

fn check(sides: &mut [Side; 2]) {
    for sd in sides.iter_mut() {
        let (scq, rcq) = sd
            .dev
            .qp_cqs(sd.qpn)
            .unwrap_or((crate::CqHandle(0), crate::CqHandle(0)));
        for (cq, q) in [(scq, sd.sq), (rcq, sd.rq)] {
            while let Some(c) = sd.dev.poll_cq(cq) {
                if let Err(v) = sd.model.check(q, &c) {
                    panic!("{v}");
                }
                assert_eq!(c.qp_num, sd.qpn);
                sd.completions += 1;
            }
        }
        if let Some(g) = sd.dev.mr(sd.guard) {
            assert!(
                g.as_slice().iter().all(|&b| b == 0),
                "a region nobody may write changed"
            );
        }
        if let Some(r) = sd.dev.mr(sd.ro) {
            assert_eq!(r.as_slice(), &sd.ro_bytes[..], "a read-only region changed");
        }
    }
}

/// Drives a CM with arbitrary MADs from `data`: raw bytes, and its own last MAD sent back
/// with the communication IDs swapped, a chosen message kind and bytes changed (so the inputs
/// reach REP, RTU, REJ, MRA, DREQ and DREP handling of real connections), with time steps,
/// accepts, rejects, connects and disconnects. Panics only when an invariant breaks: a
/// connection established twice, more connections than the bound. Returns (MADs handled,
/// connections established).
pub fn cm(data: &[u8]) -> (u64, u64) {
    use crate::cm::{Cm, CmConfig, CmEvent, ConnectOptions, QpOffer, MAX_CONNECTIONS};
    use std::collections::BTreeSet;
    use std::net::{IpAddr, Ipv4Addr};
    let me = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let svc = crate::cm::rdma_cm_service_id(18515);
    let mut cm = Cm::new(CmConfig {
        response_timeout: 4,
        max_retries: 3,
        time_wait_ns: 1_000_000,
        seed: 1,
        ..CmConfig::default()
    });
    cm.listen(svc);
    // SIDR requests too (RDMA-CM's UDP port space).
    cm.listen(roce_proto::rdma_cm::service_id(
        roce_proto::rdma_cm::PortSpace::UDP,
        18515,
    ));
    let offer = QpOffer {
        qpn: Qpn(0x40),
        starting_psn: Psn::new(1),
        responder_resources: 4,
        initiator_depth: 4,
        rnr_retry_count: 7,
    };
    let mut input = Input { data };
    let mut now = Instant::from_nanos(0);
    let mut last = [0u8; 256];
    let (mut handled, mut established) = (0u64, BTreeSet::new());
    let mut pending = Vec::new();
    while !input.data.is_empty() {
        match input.byte() % 6 {
            0 => {
                let mut m = [0u8; 256];
                let n = usize::from(input.byte());
                for b in m.iter_mut().take(n) {
                    *b = input.byte();
                }
                cm.handle_mad(now, peer, me, &m[..n.max(24)]);
                handled += 1;
            }
            1 => {
                // Our last MAD back: IDs swapped, a kind chosen, some bytes changed.
                let mut m = last;
                let (a, b) = (m[24..28].to_vec(), m[28..32].to_vec());
                m[24..28].copy_from_slice(&b);
                m[28..32].copy_from_slice(&a);
                m[17] = [0x13, 0x14, 0x12, 0x11, 0x15, 0x16, 0x10][usize::from(input.byte() % 7)];
                for _ in 0..input.byte() % 4 {
                    let at = 24 + usize::from(input.byte()) % 232;
                    m[at] = input.byte();
                }
                cm.handle_mad(now, peer, me, &m);
                handled += 1;
            }
            2 => {
                now = now.add_nanos(u64::from(input.byte()) * 100_000);
                cm.handle_timeout(now);
            }
            3 => {
                if let Some(c) = pending.pop() {
                    if input.byte() & 1 == 0 {
                        let _ = cm.accept(now, c, offer, &[1, 2, 3]);
                    } else {
                        cm.reject(c, crate::cm::reason::CONSUMER_REJECT, &[]);
                    }
                }
            }
            4 => {
                let _ = cm.connect(
                    now,
                    &ConnectOptions {
                        local: me,
                        peer,
                        service_id: svc,
                        offer,
                        mtu: 256 << (input.byte() % 6),
                        retry_count: 7,
                        local_ack_timeout: 14,
                        private_data: vec![input.byte(); usize::from(input.byte() % 100)],
                    },
                );
            }
            _ => {
                if let Some(&c) = established.iter().next() {
                    cm.disconnect(now, crate::cm::ConnId(c));
                }
            }
        }
        while let Some(o) = cm.poll_transmit() {
            last = o.mad;
        }
        while let Some(e) = cm.poll_event() {
            match e {
                CmEvent::Request { conn, .. } => pending.push(conn),
                CmEvent::Established { conn, .. } => {
                    assert!(established.insert(conn.0), "established twice");
                }
                CmEvent::Disconnected { conn } | CmEvent::TimedOut { conn } => {
                    established.remove(&conn.0);
                }
                CmEvent::Rejected { .. } => {}
                // Answer every SIDR request (the fuzzer's bytes may ask for any service).
                CmEvent::SidrRequest { req } => cm.sidr_reply(&req, 0, Qpn(2), 0x0123_4567, &[]),
                CmEvent::SidrReply { .. } => {}
            }
        }
        assert!(cm.connections() <= MAX_CONNECTIONS);
    }
    (handled, established.len() as u64 + cm.stats().sent)
}

/// Drives a UD QP with arbitrary datagrams (raw bytes, and its own sends mutated), posts and
/// receive buffers of arbitrary sizes. Panics only when an invariant breaks: a completion for
/// a buffer never posted, a receive reporting more bytes than its buffer, a region that no
/// receive covers changed. Returns the completions seen.
pub fn ud(data: &[u8]) -> u64 {
    use crate::qp::ud::{AddressHandle, UdSend, GRH_LEN};
    use roce_proto::QKey;
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    let me = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let mut dev = Device::default();
    let pd = dev.alloc_pd();
    let cq = dev.create_cq();
    let qkey = QKey(0x1111_2222);
    let Ok(qpn) = dev.create_ud_qp(pd, cq, cq, qkey, 1024, 64) else {
        return 0;
    };
    let mr = dev.reg_mr(pd, 64 * 1024, Access::LOCAL_WRITE);
    let guard = dev.reg_mr(pd, 4096, Access::LOCAL_WRITE);
    let mut input = Input { data };
    let mut posted: BTreeMap<u64, u32> = BTreeMap::new();
    let mut next_id = 0u64;
    let mut last = Vec::new();
    let mut seen = 0u64;
    let meta = RxMeta::new(SocketAddr::new(peer, 0xc000), me, Ecn::NotEct);
    while !input.data.is_empty() {
        match input.byte() % 4 {
            0 => {
                // A receive buffer of 0..2047 bytes in one of 32 slots.
                let slot = u64::from(input.byte() % 32);
                let len = u32::from(input.byte()) * 8;
                let sge = dev.mr(mr).map(|m| m.sge(slot * 2048, len.min(2048)));
                if let Some(sge) = sge {
                    let id = next_id;
                    next_id += 1;
                    if dev
                        .post_recv(
                            qpn,
                            RecvRequest {
                                wr_id: id,
                                sgl: SgList::one(sge),
                            },
                        )
                        .is_ok()
                    {
                        posted.insert(id, sge.length);
                    }
                }
            }
            1 => {
                // A send to ourselves (looped back below as a datagram).
                let len = u32::from(input.byte()) * 5;
                let Some(sge) = dev.mr(mr).map(|m| m.sge(0, len)) else {
                    continue;
                };
                let q = if input.byte() & 1 == 0 {
                    qkey
                } else {
                    QKey(0x8000_0000)
                };
                let _ = dev.post_ud_send(
                    qpn,
                    UdSend {
                        wr_id: u64::MAX,
                        sgl: SgList::one(sge),
                        ah: AddressHandle {
                            local: peer,
                            remote: me,
                            remote_port: 4791,
                            dest_qpn: qpn,
                            qkey: q,
                        },
                        imm: (input.byte() & 1 == 1).then_some(7),
                        signaled: true,
                    },
                );
                let mut buf = Vec::new();
                while let Some(t) = dev.poll_transmit(Instant::from_nanos(0), &mut buf) {
                    last = buf[..t.len].to_vec();
                    dev.handle_datagram(Instant::from_nanos(0), &t.rx_meta(), &last);
                }
            }
            2 => {
                // Our last datagram with some bytes changed.
                let mut d = last.clone();
                for _ in 0..input.byte() % 4 {
                    if !d.is_empty() {
                        let at = usize::from(input.byte()) % d.len();
                        d[at] = input.byte();
                    }
                }
                dev.handle_datagram(Instant::from_nanos(0), &meta, &d);
            }
            _ => {
                let n = usize::from(input.byte());
                let d: Vec<u8> = (0..n).map(|_| input.byte()).collect();
                dev.handle_datagram(Instant::from_nanos(0), &meta, &d);
            }
        }
        while let Some(c) = dev.poll_cq(cq) {
            seen += 1;
            if c.wr_id == u64::MAX {
                continue;
            }
            let len = posted
                .remove(&c.wr_id)
                .expect("a completion for a buffer never posted (or twice)");
            if c.status == crate::WcStatus::Success {
                assert!(c.byte_len <= len && c.byte_len as usize >= GRH_LEN);
                assert!(c.src_qp.is_some() && c.src.is_some());
            }
        }
        assert!(
            dev.mr(guard)
                .is_some_and(|g| g.as_slice().iter().all(|&b| b == 0)),
            "a region no receive covers changed"
        );
    }
    seen
}

#[cfg(test)]
mod tests {
    #[test]
    fn ud_survives_random_inputs() {
        let mut x = 0x5eed_0d0d_1234_5678u64;
        let n = if cfg!(debug_assertions) { 300 } else { 3000 };
        let mut total = 0;
        for i in 0..n {
            let data: Vec<u8> = (0..(100 + (i * 71) % 2000))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            total += super::ud(&data);
        }
        assert!(total > n, "{total}");
    }

    #[test]
    fn cm_survives_random_inputs() {
        let mut x = 0x0bad_c0de_1234_5678u64;
        let n = if cfg!(debug_assertions) { 300 } else { 3000 };
        let mut total = (0, 0);
        for i in 0..n {
            let data: Vec<u8> = (0..(200 + (i * 53) % 3000))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            let (h, e) = super::cm(&data);
            total.0 += h;
            total.1 += e;
        }
        assert!(total.0 > n && total.1 > 0, "{total:?}");
    }

    #[test]
    fn qp_pair_survives_random_inputs() {
        let mut x = 0x1234_5678_9abc_def0u64;
        // FUZZ_ITERS / FUZZ_SEED run a longer campaign by hand.
        let default = if cfg!(debug_assertions) { 1500 } else { 20_000 };
        let n: u64 = std::env::var("FUZZ_ITERS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        if let Some(seed) = std::env::var("FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            x ^= seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        }
        let mut total = (0u64, 0u64, 0u64, 0u64);
        let mut by_mode = [0u64; 3];
        for i in 0..n {
            let len = 64 + (i * 37) % 2000;
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect();
            let (s, p, c, w) = super::run(&data);
            total.0 += s;
            total.1 += p;
            total.2 += c;
            total.3 += w;
            by_mode[usize::from(data[0] % 3)] += c;
        }
        eprintln!(
            "fuzz body: {total:?} (steps, datagrams, completions, windows bound); completions by mode (RC, UC, SRQ) {by_mode:?}"
        );
        assert!(
            total.1 > 10 * n && total.2 > n,
            "the inputs must reach the transport"
        );
        assert!(by_mode.iter().all(|&c| c > n / 10), "{by_mode:?}");
        assert!(total.3 > n / 10, "windows bound: {}", total.3);
        super::qp_pair(&[]);
        super::qp_pair(&[0xff; 300]);
        // Found by the fuzzer: a SEND with Invalidate posted on a UC QP (UC has no such
        // opcode) once failed to emit.
        super::qp_pair(&[
            0x01, 0x02, 0x01, 0xe3, 0x00, 0x10, 0x08, 0x40, 0x01, 0x99, 0x99, 0x99, 0x99, 0x99,
            0x8e, 0xe3, 0xe3, 0x99, 0x20, 0x04, 0x81, 0x01, 0x00, 0x8e, 0x01, 0x02, 0x00, 0x00,
            0x01, 0xe3,
        ]);
    }
}
