//! `roce analyze` on scripted captures, built with `roce_proto`: one per event and one per
//! verdict (each violation included). Each checks the facts it is about, and its whole text
//! report against a golden file in `tests/golden/analyze/` (`UPDATE_GOLDEN=1` rewrites them;
//! review the diff).
use roce_pcap::analyze::{self, Analysis, Connection, Options};
use roce_pcap::synth::packet_for;
use roce_pcap::{link, CaptureReader, PcapWriter, Timestamp};
use roce_proto::aeth::NakCode;
use roce_proto::frame::IpParams;
use roce_proto::{AethRepr, Ecn, FrameBuilder, Msn, Opcode, PacketRepr, Psn, Qpn, RKey, Syndrome};

/// A's QPN (the requester) and B's (the responder).
const QA: u32 = 0x11;
const QB: u32 = 0x22;
const PAYLOAD: [u8; 4096] = [0x5a; 4096];

#[derive(Default)]
struct Script {
    frames: Vec<(u64, Vec<u8>)>,
    /// The DSCP A's and B's packets carry (0 unless set).
    dscp: [Option<u8>; 2],
}

fn builder(from_a: bool, ce: bool) -> FrameBuilder {
    let (src, dst) = if from_a {
        ([10, 0, 0, 1], [10, 0, 0, 2])
    } else {
        ([10, 0, 0, 2], [10, 0, 0, 1])
    };
    // Both ends of an RC connection use the same entropy port.
    let mut b = FrameBuilder::ipv4(src, dst, 0xc123);
    if let IpParams::V4 { ecn, .. } = &mut b.ip {
        *ecn = if ce { Ecn::Ce } else { Ecn::Ect0 };
    }
    b
}

impl Script {
    fn push(&mut self, t_us: f64, from_a: bool, p: &PacketRepr<'_>, ce: bool, corrupt: bool) {
        let mut b = builder(from_a, ce);
        if let (IpParams::V4 { dscp, .. }, Some(d)) = (&mut b.ip, self.dscp[usize::from(!from_a)]) {
            *dscp = d;
        }
        let mut buf = vec![0u8; b.frame_len(p)];
        let n = b.build(p, &mut buf).expect("builds");
        buf.truncate(n);
        if corrupt {
            let i = buf.len() - 8;
            buf[i] ^= 0x40;
        }
        self.frames.push(((t_us * 1000.0) as u64, buf));
    }

    /// A request from A: `op` at `psn` with `len` payload bytes (READ: `len` is the DMA
    /// length), CE-marked or with a broken ICRC when asked.
    fn req_with(
        &mut self,
        t: f64,
        op: Opcode,
        psn: u32,
        len: u32,
        ce: bool,
        corrupt: bool,
    ) -> &mut Self {
        self.req_full(t, op, psn, len, len, ce, corrupt)
    }
    #[allow(clippy::too_many_arguments)]
    fn req_full(
        &mut self,
        t: f64,
        op: Opcode,
        psn: u32,
        len: u32,
        dma_len: u32,
        ce: bool,
        corrupt: bool,
    ) -> &mut Self {
        let n = if op.has_payload() { len as usize } else { 0 };
        let mut p = packet_for(op, 0, &PAYLOAD[..n]);
        p.bth.dest_qp = Qpn(QB);
        p.bth.psn = Psn::new(psn);
        p.bth.ack_req = op.ends_message();
        p.bth.solicited = false;
        p.bth.migreq = false;
        if let Some(r) = p.reth.as_mut() {
            r.va = 0x1000;
            r.rkey = RKey(0x77);
            r.dma_len = dma_len;
        }
        self.push(t, true, &p, ce, corrupt);
        self
    }
    /// A READ from A at `psn` of `len` bytes from `va`.
    fn read_at(&mut self, t: f64, psn: u32, va: u64, len: u32) -> &mut Self {
        let mut p = packet_for(Opcode::RC_RDMA_READ_REQUEST, 0, &[]);
        p.bth.dest_qp = Qpn(QB);
        p.bth.psn = Psn::new(psn);
        p.bth.ack_req = true;
        p.bth.solicited = false;
        p.bth.migreq = false;
        if let Some(r) = p.reth.as_mut() {
            r.va = va;
            r.rkey = RKey(0x77);
            r.dma_len = len;
        }
        self.push(t, true, &p, false, false);
        self
    }
    fn req(&mut self, t: f64, op: Opcode, psn: u32, len: u32) -> &mut Self {
        self.req_with(t, op, psn, len, false, false)
    }
    /// A WRITE of `n` packets of 1024 bytes from `psn`, one microsecond apart.
    fn write(&mut self, t: f64, psn: u32, n: u32) -> &mut Self {
        for i in 0..n {
            let op = match (i, n) {
                (_, 1) => Opcode::RC_RDMA_WRITE_ONLY,
                (0, _) => Opcode::RC_RDMA_WRITE_FIRST,
                (i, n) if i + 1 == n => Opcode::RC_RDMA_WRITE_LAST,
                _ => Opcode::RC_RDMA_WRITE_MIDDLE,
            };
            self.req_full(t + f64::from(i), op, psn + i, 1024, 1024 * n, false, false);
        }
        self
    }
    /// A response from B: `op` at `psn` with `syndrome`, MSN `msn`, `len` payload bytes.
    fn resp(
        &mut self,
        t: f64,
        op: Opcode,
        psn: u32,
        syndrome: Syndrome,
        msn: u32,
        len: u32,
    ) -> &mut Self {
        let mut p = packet_for(op, 0, &PAYLOAD[..len as usize]);
        p.bth.dest_qp = Qpn(QA);
        p.bth.psn = Psn::new(psn);
        p.bth.ack_req = false;
        p.bth.solicited = false;
        p.bth.migreq = false;
        if p.aeth.is_some() {
            p.aeth = Some(AethRepr {
                syndrome,
                msn: Msn(msn),
            });
        }
        self.push(t, false, &p, false, false);
        self
    }
    fn ack(&mut self, t: f64, psn: u32, msn: u32) -> &mut Self {
        self.resp(
            t,
            Opcode::RC_ACKNOWLEDGE,
            psn,
            Syndrome::ACK_UNLIMITED,
            msn,
            0,
        )
    }
    fn nak(&mut self, t: f64, psn: u32, code: NakCode, msn: u32) -> &mut Self {
        self.resp(t, Opcode::RC_ACKNOWLEDGE, psn, Syndrome::nak(code), msn, 0)
    }
    fn rnr(&mut self, t: f64, psn: u32, timer: u8, msn: u32) -> &mut Self {
        self.resp(
            t,
            Opcode::RC_ACKNOWLEDGE,
            psn,
            Syndrome::rnr_nak(timer),
            msn,
            0,
        )
    }
    fn read_resp(&mut self, t: f64, op: Opcode, psn: u32, len: u32, msn: u32) -> &mut Self {
        self.resp(t, op, psn, Syndrome::ACK_UNLIMITED, msn, len)
    }
    /// A CNP from B to A's QP.
    fn cnp(&mut self, t: f64) -> &mut Self {
        let mut p = packet_for(Opcode::CNP, 0, &[]);
        p.bth.dest_qp = Qpn(QA);
        p.bth.psn = Psn::new(0);
        // In a class of its own (mlx5's cnp_dscp, 48) when B's packets have one set.
        let b = self.dscp[1];
        self.dscp[1] = b.map(|_| 48);
        self.push(t, false, &p, false, false);
        self.dscp[1] = b;
        self
    }

    fn pcap(&self) -> Vec<u8> {
        let mut w = PcapWriter::new(Vec::new(), link::ETHERNET, true, 262_144).unwrap();
        for (t, f) in &self.frames {
            let ts = Timestamp {
                secs: 1_800_000_000 + (t / 1_000_000_000) as i64,
                nanos: (t % 1_000_000_000) as u32,
            };
            w.write_packet(ts, f, f.len() as u32).unwrap();
        }
        w.flush().unwrap();
        w.into_inner()
    }

    fn analyze(&self) -> Analysis {
        self.analyze_with(Options::default())
    }
    fn analyze_with(&self, opts: Options) -> Analysis {
        let bytes = self.pcap();
        let mut r = CaptureReader::new(&bytes[..], "scripted").unwrap();
        let a = analyze::analyze(&mut r, opts);
        assert!(a.error.is_none(), "{:?}", a.error);
        a
    }
}

/// Compares the full text report with the golden file `name`.
fn golden(name: &str, a: &Analysis) {
    let text = analyze::text(a, true);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/analyze")
        .join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        text,
        want,
        "{name}: the report differs from {}",
        path.display()
    );
}

fn one(a: &Analysis) -> &Connection {
    assert_eq!(a.connections.len(), 1, "{}", analyze::text(a, true));
    &a.connections[0]
}

/// The requester's side (A) and the responder's (B).
fn sides(c: &Connection) -> (&analyze::Side, &analyze::Side) {
    let a = c.sides.iter().find(|s| s.qpn == Some(QA)).expect("side A");
    let b = c.sides.iter().find(|s| s.qpn == Some(QB)).expect("side B");
    (a, b)
}

fn verdict(c: &Connection, rule: &str) -> analyze::Verdict {
    c.verdicts()
        .into_iter()
        .find(|v| v.rule == rule)
        .unwrap_or_else(|| panic!("no rule {rule}"))
}

fn kinds(c: &Connection) -> Vec<(&'static str, u64)> {
    c.events.iter().map(|e| (e.kind.name(), e.frame)).collect()
}

/// Every rule `ok` or `not_applicable`.
fn clean(c: &Connection) {
    let bad: Vec<_> = c
        .verdicts()
        .into_iter()
        .filter(|v| v.result == "violated")
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn clean_connection_has_no_events_and_keeps_every_rule() {
    let mut s = Script::default();
    s.write(0.0, 100, 3).ack(5.0, 102, 1);
    s.req(10.0, Opcode::RC_SEND_ONLY, 103, 100)
        .ack(12.0, 103, 2);
    s.req(20.0, Opcode::RC_RDMA_READ_REQUEST, 104, 2048)
        .read_resp(22.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 104, 1024, 3)
        .read_resp(23.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 105, 1024, 3);
    s.req(30.0, Opcode::RC_SEND_ONLY, 106, 10).ack(31.0, 106, 4);
    let a = s.analyze();
    let c = one(&a);
    assert_eq!(c.paired_by, "udp_sport");
    assert!(c.events.is_empty(), "{:?}", kinds(c));
    let (ra, _) = sides(c);
    assert_eq!(ra.messages, [2, 0, 1, 0, 1, 0, 0]);
    assert_eq!(ra.message_bytes[4], 2048);
    assert_eq!(ra.ack_rtt.count(), 3);
    assert_eq!(ra.read_latency.count(), 1);
    assert_eq!(verdict(c, "read_responses_cover_request").result, "ok");
    assert_eq!(verdict(c, "monotonic_msn_and_ack_psn").result, "ok");
    assert_eq!(
        verdict(c, "gbn_restart_at_naked_psn").result,
        "not_applicable"
    );
    clean(c);
    golden("clean", &a);
}

#[test]
fn nak_sequence_error_episode_restarts_at_the_naked_psn() {
    let mut s = Script::default();
    // PSN 2 is lost before the capture point: 3 and 4 arrive out of sequence.
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .req(4.0, Opcode::RC_SEND_ONLY, 4, 64)
        .nak(5.0, 2, NakCode::PsnSequenceError, 2)
        .req(7.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(8.0, Opcode::RC_SEND_ONLY, 3, 64)
        .req(9.0, Opcode::RC_SEND_ONLY, 4, 64)
        .ack(11.0, 4, 5);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!(ra.psn_gaps, 1);
    assert_eq!(ra.never_seen_psns, 0, "the resent PSN 2 filled the gap");
    assert_eq!(ra.retransmitted_packets, 3);
    assert_eq!(ra.episodes, [1, 0, 0, 0, 0]);
    assert_eq!(rb.naks, [1, 0, 0, 0, 0, 0]);
    assert_eq!(ra.nak_response.count(), 1);
    assert_eq!(rb.nak_generation.count(), 1);
    assert_eq!(verdict(c, "gbn_restart_at_naked_psn").result, "ok");
    assert_eq!(verdict(c, "one_nak_per_sequence_error").result, "ok");
    clean(c);
    golden("nak_seq", &a);
}

#[test]
fn timeout_episode_restarts_at_the_oldest_unacknowledged_psn() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 10, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 11, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 12, 64)
        .ack(4.0, 10, 1)
        // Silence: the ACKs for 11 and 12 are lost; A's timer (about 16 ms) fires.
        .req(16_800.0, Opcode::RC_SEND_ONLY, 11, 64)
        .req(16_801.0, Opcode::RC_SEND_ONLY, 12, 64)
        .ack(16_803.0, 12, 3);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.episodes, [0, 0, 1, 0, 0]);
    assert_eq!(ra.retransmitted_packets, 2);
    let rto = ra.retransmission_timeout.quantile(0.5);
    assert!(
        (16_700_000..16_900_000).contains(&rto),
        "observed timeout {rto} ns"
    );
    assert_eq!(verdict(c, "timeout_restart_at_oldest_unacked").result, "ok");
    clean(c);
    golden("timeout", &a);
}

#[test]
fn rnr_episode_reports_the_wait_beside_the_naks_timer() {
    let mut s = Script::default();
    // Timer code 14: 1.28 ms.
    s.req(0.0, Opcode::RC_SEND_ONLY, 5, 64)
        .rnr(2.0, 5, 14, 0)
        .req(1_400.0, Opcode::RC_SEND_ONLY, 5, 64)
        .ack(1_402.0, 5, 1);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!(rb.naks, [0, 1, 0, 0, 0, 0]);
    assert_eq!(ra.episodes, [0, 1, 0, 0, 0]);
    assert_eq!(ra.rnr_wait.quantile(0.5), 1_398_000);
    let e = c
        .events
        .iter()
        .find(|e| e.kind.name() == "retransmission")
        .unwrap();
    assert!(
        e.detail.contains("1398.0 us") && e.detail.contains("1280.0 us"),
        "{}",
        e.detail
    );
    clean(c);
    golden("rnr", &a);
}

#[test]
fn implied_nak_episode_after_an_ack_past_an_unanswered_read() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_RDMA_READ_REQUEST, 20, 512)
        .req(1.0, Opcode::RC_SEND_ONLY, 21, 64)
        // The READ response is lost before the capture point; the ACK for 21 implies it.
        .ack(3.0, 21, 2)
        .req(4.0, Opcode::RC_RDMA_READ_REQUEST, 20, 512)
        .read_resp(6.0, Opcode::RC_RDMA_READ_RESPONSE_ONLY, 20, 512, 2);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.episodes, [0, 0, 0, 1, 0]);
    assert_eq!(ra.retransmitted_packets, 1);
    assert_eq!(
        verdict(c, "duplicate_read_reexecuted_from_requested_psn").result,
        "ok"
    );
    assert_eq!(verdict(c, "read_responses_cover_request").result, "ok");
    clean(c);
    golden("implied_nak", &a);
}

#[test]
fn unknown_cause_when_only_one_direction_is_captured() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 1, 64);
    let a = s.analyze();
    let c = one(&a);
    assert_eq!(c.paired_by, "none");
    let ra = c.sides.iter().find(|s| s.requests > 0).unwrap();
    assert_eq!(ra.retransmitted_packets, 2);
    assert_eq!(ra.episodes, [0, 0, 0, 0, 1]);
    golden("unknown", &a);
}

#[test]
fn out_of_order_gap_and_never_seen() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 1, 64)
        // 4 and 5 never appear.
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .req(4.0, Opcode::RC_SEND_ONLY, 6, 64);
    let a = s.analyze();
    let c = one(&a);
    let ra = &c.sides[0];
    assert_eq!(ra.out_of_order, 1);
    assert_eq!(ra.psn_gaps, 2);
    assert_eq!(ra.never_seen_psns, 2);
    assert_eq!(ra.retransmitted_packets, 0);
    golden("out_of_order", &a);
}

#[test]
fn network_duplicate_is_not_a_retransmission() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(1.2, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(4.0, 2, 3);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!((ra.duplicates, ra.retransmitted_packets), (1, 0));
    clean(c);
    golden("duplicate", &a);
}

#[test]
fn naks_by_code() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .nak(1.0, 0, NakCode::InvalidRequest, 0)
        .req(2.0, Opcode::RC_SEND_ONLY, 1, 64)
        .nak(3.0, 1, NakCode::RemoteAccessError, 0)
        .req(4.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(5.0, 2, NakCode::RemoteOperationalError, 0);
    let a = s.analyze();
    let c = one(&a);
    let (_, rb) = sides(c);
    assert_eq!(rb.naks, [0, 0, 1, 1, 1, 0]);
    let names: Vec<_> = kinds(c).into_iter().map(|k| k.0).collect();
    assert_eq!(
        names,
        ["nak_invalid_request", "nak_remote_access", "nak_remote_op"]
    );
    golden("naks", &a);
}

#[test]
fn ghost_and_stale_acks() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(2.0, 1, 2)
        .ack(3.0, 0, 2)
        .ack(4.0, 9, 2);
    let a = s.analyze();
    let c = one(&a);
    let (_, rb) = sides(c);
    assert_eq!((rb.ghost_acks, rb.stale_acks), (1, 1));
    let v = verdict(c, "monotonic_msn_and_ack_psn");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[4u64][..]));
    golden("ghost_stale", &a);
}

#[test]
fn ecn_marks_cnps_and_their_latency() {
    let mut s = Script::default();
    s.req_with(0.0, Opcode::RC_SEND_ONLY, 0, 64, true, false)
        .cnp(3.0)
        .req(60.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req_with(61.0, Opcode::RC_SEND_ONLY, 2, 64, true, false)
        .cnp(62.0)
        .ack(63.0, 2, 3);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!((ra.ecn_ce, rb.cnps), (2, 2));
    assert_eq!(rb.ce_to_cnp.count(), 2);
    assert_eq!(rb.ce_to_cnp.quantile(1.0), 3_000);
    assert_eq!(rb.cnp_interval.quantile(0.5), 59_000);
    assert!(ra.cnps_received_at.is_empty(), "kept for pictures only");
    let pictured = s.analyze_with(Options {
        pictures: true,
        ..Options::default()
    });
    let (pa, _) = sides(one(&pictured));
    assert_eq!(pa.cnps_received_at.len(), 2);
    assert!(
        pa.trace.iter().filter(|p| p.2 == 4).count() == 2,
        "CNP marks on A's PSN line"
    );
    let v = verdict(c, "cnp_min_interval");
    assert_eq!(v.result, "ok");
    assert!(
        v.detail.contains("observed minimum 59.0 us"),
        "{}",
        v.detail
    );
    golden("cnp", &a);
}

#[test]
fn bad_icrc_is_flagged() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req_with(1.0, Opcode::RC_SEND_ONLY, 1, 64, false, true)
        .ack(2.0, 1, 2);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.icrc_bad, 1);
    assert_eq!(kinds(c), [("icrc_bad", 2)]);
    golden("icrc_bad", &a);
}

#[test]
fn stall_mid_capture_and_at_the_end() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        // 150 ms without an ACK, then more requests, and no ACK until the end.
        .req(150_000.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(150_002.0, 0, 1)
        .req(150_003.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(400_000.0, 0, 1);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.stalls, 2, "{:?}", kinds(c));
    golden("stall", &a);
}

#[test]
fn short_read_response_violates_the_read_rule() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_RDMA_READ_REQUEST, 50, 3000)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 50, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 51, 500, 1);
    let a = s.analyze();
    let c = one(&a);
    let (_, rb) = sides(c);
    assert_eq!(rb.read_response_mismatches, 1);
    let v = verdict(c, "read_responses_cover_request");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[3u64][..]));
    golden("read_short", &a);
}

#[test]
fn restart_at_the_wrong_psn_after_a_nak_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .nak(4.0, 1, NakCode::PsnSequenceError, 1)
        // Restarts at 2, skipping the NAKed PSN 1.
        .req(6.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(7.0, Opcode::RC_SEND_ONLY, 3, 64);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "gbn_restart_at_naked_psn");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[6u64][..]));
    assert!(
        v.detail.contains("restarted at PSN 2, the NAK asked for 1"),
        "{}",
        v.detail
    );
    assert!(a.violated());
    golden("violation_wrong_restart", &a);
}

#[test]
fn restart_past_the_oldest_unacknowledged_after_a_timeout_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(3.0, 0, 1)
        .req(20_000.0, Opcode::RC_SEND_ONLY, 2, 64);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "timeout_restart_at_oldest_unacked");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[5u64][..]));
    golden("violation_timeout_restart", &a);
}

#[test]
fn nak_storm_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(2.0, 1, NakCode::PsnSequenceError, 1)
        .req(3.0, Opcode::RC_SEND_ONLY, 3, 64)
        .nak(4.0, 1, NakCode::PsnSequenceError, 1)
        .req(5.0, Opcode::RC_SEND_ONLY, 4, 64)
        .nak(6.0, 1, NakCode::PsnSequenceError, 1);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "one_nak_per_sequence_error");
    assert_eq!(
        (v.result, v.frames.as_slice()),
        ("violated", &[5u64, 7][..])
    );
    golden("violation_nak_storm", &a);
}

#[test]
fn an_ack_past_a_hole_the_responder_nakked_is_a_violation() {
    // The responder said it lacked PSN 1 (a sequence NAK), the requester never went back,
    // and the responder acknowledged PSN 3: it acknowledged what it knew it did not have.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 3, 64)
        .nak(3.0, 1, NakCode::PsnSequenceError, 1)
        .ack(4.0, 3, 3);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "no_ack_past_hole");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[5u64][..]));
    assert_eq!(sides(c).0.missed_by_capture, 0);
    golden("violation_ack_past_hole", &a);
}

#[test]
fn an_ack_past_a_hole_is_a_capture_drop_not_a_violation() {
    // PSN 1 never seen, and the responder acknowledged it: a responder acknowledges only
    // what it received in order, so the requester sent it and the capture missed it. The
    // hole rule is not judged on it, and the report says the capture dropped a packet.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 3, 64)
        .ack(3.0, 3, 3);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "no_ack_past_hole");
    assert_eq!(v.result, "not_judged", "{v:?}");
    let (ra, rb) = sides(c);
    assert_eq!((ra.missed_by_capture, ra.never_seen_psns), (1, 0));
    assert_eq!(rb.missed_by_capture, 0);
    assert!(!c.violated());
    golden("capture_missed_request", &a);
}

#[test]
fn a_read_the_capture_missed_is_known_by_its_responses() {
    // Two READs; the capture missed the second READ request and a SEND before it, and one
    // response in the middle of the first READ's answer. The responses show the READ was
    // sent (and the SEND before it, which they acknowledge); the first answer is not judged
    // (a response of it is missing), and nothing is violated.
    let mut s = Script::default();
    s.read_at(0.0, 10, 0x1000, 3072)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 10, 1024, 1)
        // PSN 11's response (Middle) is not in the capture.
        .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 12, 1024, 1)
        // SEND 13 and READ 14 (2048 bytes) are not in the capture.
        .read_resp(8.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 14, 1024, 3)
        .read_resp(9.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 15, 1024, 3)
        .req(10.0, Opcode::RC_SEND_ONLY, 16, 64)
        .ack(12.0, 16, 4);
    let a = s.analyze();
    let c = one(&a);
    let (ra, rb) = sides(c);
    assert_eq!(ra.missed_by_capture, 2, "{:?}", kinds(c));
    assert_eq!(rb.unseen_read_responses, 1, "{:?}", kinds(c));
    assert_eq!((ra.psn_gaps, ra.never_seen_psns), (0, 0), "{:?}", kinds(c));
    assert_eq!(ra.retransmitted_packets, 0);
    let v = verdict(c, "read_responses_cover_request");
    assert_eq!(v.result, "not_judged", "{v:?}");
    for v in c.verdicts() {
        assert_ne!(v.result, "violated", "{v:?}");
    }
}

#[test]
fn msn_going_back_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(1.0, 0, 5)
        .req(2.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(3.0, 1, 4);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "monotonic_msn_and_ack_psn");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[4u64][..]));
    assert!(v.detail.contains("MSN 4 after 5"), "{}", v.detail);
    golden("violation_msn", &a);
}

#[test]
fn duplicate_read_answered_from_another_psn_is_a_violation() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_RDMA_READ_REQUEST, 30, 3072)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 32, 1024, 1)
        // The same READ again (its responses lost after the capture point)...
        .req(20_000.0, Opcode::RC_RDMA_READ_REQUEST, 30, 3072)
        // ... answered from PSN 31, not from the requested 30.
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 32, 1024, 1);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "duplicate_read_reexecuted_from_requested_psn");
    assert_eq!(v.result, "violated", "{v:?}");
    assert_eq!(v.frames.first(), Some(&6));
    golden("violation_duplicate_read", &a);
}

#[test]
fn cnps_too_close_are_a_violation() {
    let mut s = Script::default();
    s.req_with(0.0, Opcode::RC_SEND_ONLY, 0, 64, true, false)
        .cnp(1.0)
        .req_with(2.0, Opcode::RC_SEND_ONLY, 1, 64, true, false)
        .cnp(11.0)
        .ack(12.0, 1, 2);
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "cnp_min_interval");
    assert_eq!((v.result, v.frames.as_slice()), ("violated", &[4u64][..]));
    assert!(
        v.detail.contains("observed minimum 10.0 us"),
        "{}",
        v.detail
    );
    // --cnp-interval lower than what was seen: no violation.
    let relaxed = s.analyze_with(Options {
        cnp_interval_ns: 5_000,
        ..Options::default()
    });
    assert_eq!(verdict(one(&relaxed), "cnp_min_interval").result, "ok");
    golden("violation_cnp_interval", &a);
}

#[test]
fn psn_wrap_is_not_a_gap() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0xff_fffe, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 0xff_ffff, 64)
        .req(2.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(3.0, Opcode::RC_SEND_ONLY, 1, 64)
        .ack(4.0, 1, 4);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(
        (ra.psn_gaps, ra.psn_wraps, ra.retransmitted_packets),
        (0, 1, 0)
    );
    assert_eq!((ra.psn_first, ra.psn_last), (Some(0xff_fffe), Some(1)));
    clean(c);
}

#[test]
fn time_and_qp_filters() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1_000.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(2_000.0, Opcode::RC_SEND_ONLY, 2, 64);
    let a = s.analyze_with(Options {
        from: Some(0.0005),
        to: Some(0.0015),
        ..Options::default()
    });
    assert_eq!(one(&a).sides[0].requests, 1);
    let none = s.analyze_with(Options {
        qp: Some(0x999),
        ..Options::default()
    });
    assert!(none.connections.is_empty());
    let b = s.analyze_with(Options {
        qp: Some(QB),
        ..Options::default()
    });
    assert_eq!(b.connections.len(), 1);
}

#[test]
fn naks_followed_by_cnps_are_counted() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(2.0, 1, NakCode::PsnSequenceError, 1)
        // This NIC's notification point answers the NAK with a CNP...
        .cnp(3.0)
        .req(4.0, Opcode::RC_SEND_ONLY, 1, 64)
        .req(5.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(6.0, 2, 3)
        .req(300.0, Opcode::RC_SEND_ONLY, 4, 64)
        .nak(301.0, 3, NakCode::PsnSequenceError, 3)
        // ... but not this one (the CNP comes 200 us later).
        .cnp(501.0);
    let a = s.analyze();
    let c = one(&a);
    assert_eq!(c.naks_and_cnps, (2, 1));
    let v = verdict(c, "cnp_min_interval");
    assert!(
        v.detail
            .contains("1 of 2 NAKs followed by a CNP within 100 us"),
        "{}",
        v.detail
    );
}

#[test]
fn time_going_back_and_far_jumps_are_survived() {
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .nak(50.0, 1, NakCode::PsnSequenceError, 1)
        // Earlier than the NAK: a capture merged from two taps, or a hostile one.
        .req(10.0, Opcode::RC_SEND_ONLY, 1, 64)
        .rnr(60.0, 2, 31, 1)
        .req(5.0, Opcode::RC_SEND_ONLY, 2, 64)
        .cnp(3.0)
        .ack(1.0e15, 2, 3)
        .req(2.0, Opcode::RC_SEND_ONLY, 3, 64);
    let a = s.analyze_with(Options {
        pictures: true,
        ..Options::default()
    });
    assert_eq!(a.connections.len(), 1);
    let _ = analyze::text(&a, true);
    let mut html = Vec::new();
    analyze::write_html(&a, &mut html).unwrap();
}

/// The READ of the `a_read_resumed_*` scripts: one READ message and one SEND, `retx`
/// request packets resent in one episode, no gap and no rule violated.
fn one_read_resumed(s: &Script, retx: u64) {
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.retransmitted_packets, retx, "{:?}", kinds(c));
    // The resumed READ is not a second READ message.
    assert_eq!(ra.messages, [1, 0, 0, 0, 1, 0, 0], "{:?}", ra.message_bytes);
    assert_eq!((ra.psn_gaps, ra.out_of_order), (0, 0), "{:?}", kinds(c));
    assert_eq!(ra.episodes.iter().sum::<u64>(), 1, "{:?}", kinds(c));
    for v in c.verdicts() {
        assert_ne!(v.result, "violated", "{v:?}");
    }
}

#[test]
fn a_read_resumed_from_the_middle_is_a_retransmission() {
    // IBTA 9.4.4: a requester may retry a READ from any PSN inside it. The last two of four
    // responses are lost before the capture point; after its timeout the requester asks
    // again for the remaining 2048 bytes, at the PSN of the first missing response.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_at(20_000.0, 32, 0x1000 + 2048, 2048)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .req(20_010.0, Opcode::RC_SEND_ONLY, 34, 64)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 1);
}

#[test]
fn a_read_resumed_from_the_middle_behind_later_requests_is_a_retransmission() {
    // As above, with a SEND sent after the READ: the timeout resends the READ's remaining
    // part from its first missing response's PSN, then the SEND.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .req(1.0, Opcode::RC_SEND_ONLY, 34, 64)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_at(20_000.0, 32, 0x1000 + 2048, 2048)
        .req(20_001.0, Opcode::RC_SEND_ONLY, 34, 64)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 2);
}

#[test]
fn a_read_resumed_after_responses_lost_past_the_capture_point_is_a_retransmission() {
    // Every response was captured, the last two lost after the capture point: the requester
    // resumes from the first it did not get.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 32, 1024, 1)
        .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .read_at(20_000.0, 32, 0x1000 + 2048, 2048)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .req(20_010.0, Opcode::RC_SEND_ONLY, 34, 64)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 1);
}

#[test]
fn a_read_resumed_is_judged_by_its_psns_whatever_its_reth_says() {
    // The resumed READ's RETH asks for the rest from the READ's first address, not from
    // where the rest begins: its PSN, inside the span the first responses took (1,024-byte
    // packets: four PSNs), is what makes it the same READ again.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 4096)
        .read_resp(2.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 1024, 1)
        .read_resp(3.0, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 31, 1024, 1)
        .read_at(20_000.0, 32, 0x1000, 2048)
        .read_resp(20_002.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 1024, 1)
        .read_resp(20_003.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 1024, 1)
        .req(20_010.0, Opcode::RC_SEND_ONLY, 34, 64)
        .ack(20_012.0, 34, 2);
    one_read_resumed(&s, 1);
}

#[test]
fn back_to_back_reads_of_one_buffer_are_two_reads() {
    // perftest's READs: the same buffer again, the next READ right behind the first one's
    // span, before any response showed the path MTU (4,096: two PSNs each). Not a resume.
    let mut s = Script::default();
    s.read_at(0.0, 30, 0x1000, 8192)
        .read_at(1.0, 32, 0x1000, 8192)
        .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 30, 4096, 1)
        .read_resp(6.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 31, 4096, 1)
        .read_resp(7.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 32, 4096, 2)
        .read_resp(8.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 33, 4096, 2)
        // Then the same again once the MTU is known.
        .read_at(10.0, 34, 0x1000, 8192)
        .read_resp(15.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 34, 4096, 3)
        .read_resp(16.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 35, 4096, 3)
        .read_at(17.0, 36, 0x1000, 8192)
        .read_resp(25.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 36, 4096, 4)
        .read_resp(26.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 37, 4096, 4);
    let a = s.analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(ra.messages, [0, 0, 0, 0, 4, 0, 0], "{:?}", kinds(c));
    assert_eq!(ra.retransmitted_packets, 0, "{:?}", kinds(c));
    for v in c.verdicts() {
        assert_ne!(v.result, "violated", "{v:?}");
    }
}

#[test]
fn a_requester_nothing_answers_is_a_peer_unresponsive_verdict() {
    // Three SENDs, then three rounds of the same three, 1 ms apart, and not one response:
    // the peer is unreachable (or gone, or the GID or QPN is wrong).
    let mut s = Script::default();
    for round in 0..4u32 {
        let t = f64::from(round) * 1000.0;
        for (i, psn) in (10..13).enumerate() {
            s.req(t + i as f64, Opcode::RC_SEND_ONLY, psn, 64);
        }
    }
    let a = s.analyze();
    let c = one(&a);
    let v = verdict(c, "peer_unresponsive");
    assert_eq!(v.result, "violated", "{v:?}");
    assert_eq!(v.frames, [1]);
    for part in [
        "no response to 12 requests",
        "went back to PSN 10 3 times, 1.000 ms apart",
        "local ACK timeout code about 8",
        "`retry exceeded` at",
    ] {
        assert!(v.detail.contains(part), "{part:?} in {}", v.detail);
    }
    golden("peer_unresponsive", &a);
}

#[test]
fn one_direction_of_a_healthy_connection_is_not_unresponsive() {
    // A capture of the requests only (the ACKs took another path): the PSNs move on, nothing
    // goes back, so the missing responses are the capture's, not the peer's.
    let mut s = Script::default();
    for psn in 0..40u32 {
        s.req(f64::from(psn) * 10.0, Opcode::RC_SEND_ONLY, psn, 64);
    }
    let a = s.analyze();
    let v = verdict(one(&a), "peer_unresponsive");
    assert_eq!(v.result, "ok", "{v:?}");
}

/// An Ethernet / IPv4 / TCP segment from `src` to `dst` with `flags` (0x01 FIN, 0x04 RST,
/// 0x10 ACK), no payload.
fn tcp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    f
}

impl Script {
    /// A raw frame (not RoCE) at `t_us`.
    fn raw(&mut self, t_us: f64, frame: &[u8]) -> &mut Self {
        self.frames.push(((t_us * 1000.0) as u64, frame.to_vec()));
        self
    }
    /// A PFC frame from the switch pausing `priority` for `quanta`.
    fn pfc(&mut self, t_us: f64, priority: u8, quanta: u16) -> &mut Self {
        let f = roce_proto::mac_control::pfc_frame([0x02, 0, 0, 0, 0, 0xfe], priority, quanta);
        self.raw(t_us, &f)
    }
}

/// Three SENDs answered, then (at 100 us) `end` from `from_b` (B's TCP channel to A, or A's
/// to B) when given, then three rounds of three more SENDs 1 ms apart; B answers those
/// when `answered`.
fn after_tcp_end(end: Option<(bool, u8)>, answered: bool) -> Script {
    let mut s = Script::default();
    for psn in 0..3u32 {
        s.req(f64::from(psn), Opcode::RC_SEND_ONLY, psn, 64);
    }
    s.ack(5.0, 2, 3);
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    if let Some((from_b, flags)) = end {
        let f = if from_b {
            tcp_frame(b, a, 18515, 40000, flags)
        } else {
            tcp_frame(a, b, 40000, 18515, flags)
        };
        s.raw(100.0, &f);
    }
    for round in 0..3u32 {
        let t = 200.0 + f64::from(round) * 1000.0;
        for (i, psn) in (3..6).enumerate() {
            s.req(t + i as f64, Opcode::RC_SEND_ONLY, psn, 64);
        }
        if answered {
            s.ack(t + 10.0, 5, 6 + round);
        }
    }
    s
}

fn ended(c: &Connection) -> Vec<&analyze::Event> {
    c.events
        .iter()
        .filter(|e| e.kind.name() == "peer_process_ended")
        .collect()
}

#[test]
fn requests_after_the_peer_closed_its_tcp_channel_are_a_peer_process_ended() {
    for (flags, what) in [(0x11, "TCP FIN"), (0x04, "TCP RST")] {
        let a = after_tcp_end(Some((true, flags)), false).analyze();
        let c = one(&a);
        let e = ended(c);
        assert_eq!(e.len(), 1, "{}", analyze::text(&a, true));
        assert_eq!(e[0].frame, 5, "the FIN's frame");
        assert_eq!(c.sides[e[0].side].qpn, Some(QA), "on the requester's side");
        for part in [
            what,
            "from 10.0.0.2:18515 to 10.0.0.1:40000",
            "peer process ended",
        ] {
            assert!(e[0].detail.contains(part), "{part:?} in {}", e[0].detail);
        }
        assert_eq!(c.peer_ended, Some(100_000));
        let j = analyze::connection_json(c);
        assert_eq!(j["peer_process_ended"], serde_json::json!(0.0001), "{j}");
    }
    golden(
        "peer_process_ended",
        &after_tcp_end(Some((true, 0x11)), false).analyze(),
    );
}

#[test]
fn a_tcp_close_is_not_a_peer_process_ended_when_the_peer_still_answers_or_closed_nothing() {
    for (end, answered, why) in [
        (None, false, "no TCP end in the capture"),
        (Some((false, 0x11)), false, "the requester's own FIN"),
        (Some((true, 0x11)), true, "the peer answers after its FIN"),
        (Some((true, 0x10)), false, "a plain ACK ends nothing"),
    ] {
        let a = after_tcp_end(end, answered).analyze();
        let c = one(&a);
        assert!(ended(c).is_empty(), "{why}: {}", analyze::text(&a, true));
        assert_eq!(c.peer_ended, None, "{why}");
    }
}

/// A 10-packet WRITE held back after its 5th packet for 220 ms; with `pause`, the switch
/// pauses `pause` (priority, refreshing XOFF every 100 us) through the wait.
fn held_write(pause: Option<u8>) -> Script {
    let mut s = Script::default();
    let op = |i: u32| match i {
        0 => Opcode::RC_RDMA_WRITE_FIRST,
        9 => Opcode::RC_RDMA_WRITE_LAST,
        _ => Opcode::RC_RDMA_WRITE_MIDDLE,
    };
    for i in 0..5u32 {
        s.req_full(f64::from(i), op(i), i, 1024, 10 * 1024, false, false);
    }
    if let Some(prio) = pause {
        let mut t = 10.0;
        while t < 219_000.0 {
            s.pfc(t, prio, 0xffff);
            t += 100.0;
        }
        s.pfc(219_000.0, prio, 0);
    }
    for i in 5..10u32 {
        s.req_full(
            220_000.0 + f64::from(i),
            op(i),
            i,
            1024,
            10 * 1024,
            false,
            false,
        );
    }
    s.ack(220_020.0, 9, 1);
    s
}

#[test]
fn a_stall_under_pfc_is_covered_with_its_storm_and_the_connection_is_a_victim() {
    // DSCP 0, untagged: priority 0.
    let a = held_write(Some(0)).analyze();
    let c = one(&a);
    let (ra, _) = sides(c);
    assert_eq!(
        ra.stalls,
        1,
        "held back mid-message: {}",
        analyze::text(&a, true)
    );
    assert_eq!(c.pfc.priority, Some(0));
    assert_eq!(c.pfc.stalls_covered, 1, "{:?}", c.pfc);
    assert_eq!(
        c.pfc.storms, 1,
        "paused 219 ms without a break: {:?}",
        c.pfc
    );
    assert!(c.pfc.victim, "no CE, no CNP of its own: {:?}", c.pfc);
    assert_eq!(c.pfc.pauses, 2190, "{:?}", c.pfc);
    assert!(
        (c.pfc.paused_ns as i64 - 218_990_000).abs() < 1_000,
        "{:?}",
        c.pfc
    );
    let covered: Vec<_> = c
        .events
        .iter()
        .filter(|e| e.kind.name() == "stall_paused")
        .collect();
    assert_eq!(covered.len(), 1);
    assert_eq!(covered[0].frame, 6, "the first pausing frame");
    assert!(
        covered[0].detail.contains("priority 0 was paused"),
        "{}",
        covered[0].detail
    );
    assert_eq!(a.pfc.len(), 1);
    let p = &a.pfc[0];
    assert_eq!(
        (p.priority, p.frames, p.xoff, p.senders),
        (0, 2191, 2190, 1)
    );
    assert_eq!((p.storms.len(), p.stalls_covered, p.victims), (1, 1, 1));
    let j = analyze::connection_json(c);
    assert_eq!(j["pfc"]["stalls_covered"], 1, "{j}");
    assert_eq!(j["pfc"]["victim"], true, "{j}");
    let lines = analyze::json_lines(&a, false);
    let pfc: serde_json::Value = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "pfc")
        .expect("a pfc line");
    assert_eq!(pfc["pausing_frames"], 2190, "{pfc}");
    golden("pfc_stall", &a);
}

#[test]
fn a_stall_without_pfc_or_under_another_priority_is_not_covered() {
    for (pause, why) in [
        (None, "no PFC frame"),
        (Some(5), "priority 5 paused, not 0"),
    ] {
        let a = held_write(pause).analyze();
        let c = one(&a);
        assert_eq!(sides(c).0.stalls, 1, "{why}");
        assert_eq!(c.pfc.stalls_covered, 0, "{why}: {:?}", c.pfc);
        assert_eq!(
            (c.pfc.pauses, c.pfc.paused_ns),
            (0, 0),
            "{why}: {:?}",
            c.pfc
        );
        assert!(!c.pfc.victim, "{why}");
        assert!(
            c.events.iter().all(|e| e.kind.name() != "stall_paused"),
            "{why}"
        );
    }
}

/// `s`'s frames as a pcapng file (one interface, microseconds) with an interface
/// statistics block at the end saying the capture dropped `ifdrop` and `osdrop` packets.
fn pcapng_with_drops(s: &Script, ifdrop: u64, osdrop: u64) -> Vec<u8> {
    fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let len = (12 + body.len().div_ceil(4) * 4) as u32;
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.resize(out.len() + (4 - body.len() % 4) % 4, 0);
        out.extend_from_slice(&len.to_le_bytes());
    }
    let mut out = Vec::new();
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    block(&mut out, 0x0a0d_0d0a, &shb);
    let mut idb = vec![1, 0, 0, 0];
    idb.extend_from_slice(&262_144u32.to_le_bytes());
    block(&mut out, 1, &idb);
    for (t, f) in &s.frames {
        let us = 1_800_000_000_000_000u64 + t / 1000;
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((us >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(us as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(f.len() as u32).to_le_bytes());
        epb.extend_from_slice(f);
        block(&mut out, 6, &epb);
    }
    let mut isb = vec![0u8; 12];
    for (code, v) in [(5u16, ifdrop), (7, osdrop)] {
        isb.extend_from_slice(&code.to_le_bytes());
        isb.extend_from_slice(&8u16.to_le_bytes());
        isb.extend_from_slice(&v.to_le_bytes());
    }
    isb.extend_from_slice(&[0, 0, 0, 0]);
    block(&mut out, 5, &isb);
    out
}

#[test]
fn a_pcapng_file_that_says_it_dropped_packets_is_reported() {
    // What dumpcap writes when the kernel dropped packets: its interface statistics.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 2, 64)
        .ack(3.0, 2, 2);
    let bytes = pcapng_with_drops(&s, 25, 3);
    let mut r = CaptureReader::new(&bytes[..], "dropped.pcapng").unwrap();
    let a = analyze::analyze(&mut r, Options::default());
    assert_eq!(a.packets, 3);
    assert_eq!(a.file_dropped, Some(28));
    let q = a.capture_quality();
    assert_eq!((q.missed, q.file_dropped), (1, Some(28)));
    let text = analyze::text(&a, false);
    assert!(
        text.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("capture quality: 1 packets")
                && l.ends_with("the file says the capture dropped 28")),
        "{text}"
    );
    // The same packets as a pcap file: no count to report.
    let plain = s.pcap();
    let mut r = CaptureReader::new(&plain[..], "dropped.pcap").unwrap();
    assert_eq!(
        analyze::analyze(&mut r, Options::default()).file_dropped,
        None
    );
}

/// The findings named `name`.
fn findings(a: &Analysis, name: &str) -> Vec<analyze::Finding> {
    a.findings()
        .into_iter()
        .filter(|f| f.name == name)
        .collect()
}

#[test]
fn an_rnr_nak_with_timer_zero_is_an_rnr_stall_finding() {
    // rdma_cm leaves min_rnr_timer at 0: 655.36 ms for every receive the responder lacked.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .rnr(2.0, 0, 0, 0)
        .req(655_400.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(655_402.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "rnr_stall");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].connection, f[0].side, f[0].frames.as_slice()),
        (Some(1), Some(1), &[2u64][..])
    );
    assert!(
        f[0].detail.contains("1 with timer code 0 (655.36 ms"),
        "{}",
        f[0].detail
    );
    assert!(f[0].detail.contains("waited 655.398 ms"), "{}", f[0].detail);
    assert!(f[0].advice.contains("min_rnr_timer"));
    // With a short timer, the stall is named without the timer advice.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .rnr(2.0, 0, 14, 0)
        .req(1_000.0, Opcode::RC_SEND_ONLY, 0, 64)
        .ack(1_002.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "rnr_stall");
    assert!(!f[0].detail.contains("timer code 0") && !f[0].advice.contains("min_rnr_timer"));
    // No RNR NAK, no finding.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64).ack(2.0, 0, 1);
    assert!(s.analyze().findings().is_empty());
}

#[test]
fn sides_segmenting_at_different_mtus_are_a_pmtu_asymmetry_finding() {
    // A writes in 4,096-byte packets; B answers A's READ in 1,024-byte ones.
    let mut s = Script::default();
    s.req_full(
        0.0,
        Opcode::RC_RDMA_WRITE_FIRST,
        0,
        4096,
        5000,
        false,
        false,
    )
    .req_full(1.0, Opcode::RC_RDMA_WRITE_LAST, 1, 904, 5000, false, false)
    .read_at(2.0, 2, 0x1000, 2048)
    .ack(3.0, 1, 1)
    .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 2, 1024, 2)
    .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, 1024, 2);
    let a = s.analyze();
    let f = findings(&a, "pmtu_asymmetry");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(f[0].detail, "side a segments at 4096 bytes, side b at 1024");
    let (ra, rb) = sides(one(&a));
    assert_eq!((ra.path_mtu, rb.path_mtu), (4096, 1024));
    // The same MTU both ways: nothing to say.
    let mut s = Script::default();
    s.req_full(
        0.0,
        Opcode::RC_RDMA_WRITE_FIRST,
        0,
        1024,
        1100,
        false,
        false,
    )
    .req_full(1.0, Opcode::RC_RDMA_WRITE_LAST, 1, 76, 1100, false, false)
    .read_at(2.0, 2, 0x1000, 2048)
    .ack(3.0, 1, 1)
    .read_resp(4.0, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 2, 1024, 2)
    .read_resp(5.0, Opcode::RC_RDMA_READ_RESPONSE_LAST, 3, 1024, 2);
    assert!(findings(&s.analyze(), "pmtu_asymmetry").is_empty());
}

#[test]
fn ce_marks_no_cnp_answers_and_cnps_no_ce_explains_are_findings() {
    let mut s = Script::default();
    for psn in 0..4u32 {
        s.req_with(
            f64::from(psn),
            Opcode::RC_SEND_ONLY,
            psn,
            64,
            psn % 2 == 1,
            false,
        );
    }
    s.ack(10.0, 3, 4);
    let a = s.analyze();
    let f = findings(&a, "ce_without_cnp");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].side, f[0].frames.as_slice()),
        (Some(0), &[2u64, 4][..])
    );
    assert!(f[0]
        .detail
        .starts_with("2 of its packets arrived marked CE"));
    assert!(findings(&a, "cnp_without_ce").is_empty());
    // The CE marks answered: no finding.
    s.cnp(3.0);
    assert!(findings(&s.analyze(), "ce_without_cnp").is_empty());
    // CNPs and no CE mark anywhere.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .cnp(1.0)
        .ack(2.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "cnp_without_ce");
    assert_eq!(
        (f.len(), f[0].side),
        (1, Some(1)),
        "{}",
        analyze::text(&a, true)
    );
}

#[test]
fn reads_held_to_a_window_are_a_read_window_limited_finding() {
    // 40 READs, a new one only when one of the two outstanding is answered: a window of 2.
    let window = |w: u32| {
        let mut s = Script::default();
        let mut t = 0.0;
        let mut next_resp = 0u32;
        for psn in 0..40u32 {
            if psn >= w {
                s.read_resp(
                    t,
                    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                    next_resp,
                    64,
                    next_resp + 1,
                );
                next_resp += 1;
                t += 1.0;
            }
            s.read_at(t, psn, 0x1000, 64);
            t += 1.0;
        }
        while next_resp < 40 {
            s.read_resp(
                t,
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                next_resp,
                64,
                next_resp + 1,
            );
            next_resp += 1;
            t += 1.0;
        }
        s.analyze()
    };
    let a = window(2);
    let f = findings(&a, "read_window_limited");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "never more than 2 READs and atomics outstanding, and at 2 for 39 of its 40"
    );
    assert!(f[0].advice.contains("max_rd_atomic"));
    // All 40 outstanding at once: no window held them.
    assert!(findings(&window(40), "read_window_limited").is_empty());
}

#[test]
fn pauses_on_a_priority_no_roce_uses_are_a_finding() {
    // The RoCE traffic is on priority 0 (DSCP 0); PFC pauses priority 3.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .pfc(1.0, 3, 0xffff)
        .ack(2.0, 0, 1);
    let a = s.analyze();
    let f = findings(&a, "pfc_priority_without_roce");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert!(
        f[0].detail.starts_with("priority 3 paused by 1 frames"),
        "{}",
        f[0].detail
    );
    assert!(f[0].detail.ends_with("(RoCE on [0])"), "{}", f[0].detail);
    let json = analyze::json_lines(&a, false);
    assert!(
        json.contains("\"name\":\"pfc_priority_without_roce\""),
        "{json}"
    );
    // Pausing RoCE's own priority: no finding.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
        .pfc(1.0, 0, 0xffff)
        .ack(2.0, 0, 1);
    assert!(findings(&s.analyze(), "pfc_priority_without_roce").is_empty());
}

#[test]
fn timer_driven_episodes_are_a_retx_timeout_finding_with_the_code_they_imply() {
    // Two episodes, each after about 16.8 ms of silence: 4.096 us x 2^12 = 16.777 ms.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 10, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(4.0, 10, 1)
        .req(16_800.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(16_803.0, 11, 2)
        .req(16_900.0, Opcode::RC_SEND_ONLY, 12, 64)
        .req(33_700.0, Opcode::RC_SEND_ONLY, 12, 64)
        .ack(33_703.0, 12, 3);
    let a = s.analyze();
    let f = findings(&a, "retx_timeout");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].side, f[0].frames.as_slice()),
        (Some(0), &[4u64, 7][..])
    );
    assert!(
        f[0].detail
            .starts_with("2 retransmission episodes began when the timer fired")
            && f[0]
                .detail
                .contains("a local ACK timeout code of about 12 (4.096 us x 2^12 = 16.777 ms)")
            && !f[0].detail.contains("grow"),
        "{}",
        f[0].detail
    );
    // One timeout is not a schedule.
    let mut s = Script::default();
    s.req(0.0, Opcode::RC_SEND_ONLY, 10, 64)
        .req(1.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(4.0, 10, 1)
        .req(16_800.0, Opcode::RC_SEND_ONLY, 11, 64)
        .ack(16_803.0, 11, 2);
    assert!(findings(&s.analyze(), "retx_timeout").is_empty());
}

#[test]
fn ends_marking_different_traffic_classes_are_a_tclass_mismatch_finding() {
    // A's requests in DSCP 26 (the lossless class), B's ACKs in DSCP 0.
    let script = |b: u8| {
        let mut s = Script {
            dscp: [Some(26), Some(b)],
            ..Script::default()
        };
        s.req(0.0, Opcode::RC_SEND_ONLY, 0, 64)
            .ack(2.0, 0, 1)
            .cnp(3.0);
        s.analyze()
    };
    let a = script(0);
    let f = findings(&a, "tclass_mismatch");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(f[0].detail, "side a marks DSCP 26, side b DSCP 0");
    // The same class both ways (the CNP, in its own class, does not count).
    assert!(findings(&script(26), "tclass_mismatch").is_empty());
}

#[test]
fn requests_with_a_wrong_icrc_and_no_answer_are_a_finding() {
    // An FPGA's requests, their ICRC computed wrong: the NIC drops them, nothing answers.
    let mut s = Script::default();
    for psn in 0..3u32 {
        s.req_with(f64::from(psn), Opcode::RC_SEND_ONLY, psn, 64, false, true);
    }
    let a = s.analyze();
    let f = findings(&a, "icrc_bad_unanswered");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "3 of its 3 requests carry a wrong ICRC and nothing answered them"
    );
    assert_eq!(f[0].frames, [1, 2, 3]);
    // Answered, or with a good ICRC: not this.
    s.ack(5.0, 2, 3);
    assert!(findings(&s.analyze(), "icrc_bad_unanswered").is_empty());
    let mut s = Script::default();
    for psn in 0..3u32 {
        s.req(f64::from(psn), Opcode::RC_SEND_ONLY, psn, 64);
    }
    assert!(findings(&s.analyze(), "icrc_bad_unanswered").is_empty());
}

impl Script {
    /// A CM MAD from A (`from_a`) or B on QP1 (a UD SEND of the 256-byte MAD: the common
    /// header, then the message).
    fn cm(&mut self, t: f64, from_a: bool, msg: roce_proto::cm::Message, attr: u16) -> &mut Self {
        let mut mad = [0u8; 256];
        mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
        mad[16..18].copy_from_slice(&attr.to_be_bytes());
        msg.emit(&mut mad[24..]);
        let mut p = packet_for(Opcode::UD_SEND_ONLY, 0, &mad);
        p.bth.dest_qp = Qpn(1);
        if let Some(d) = p.deth.as_mut() {
            d.src_qp = Qpn(1);
        }
        self.push(t, from_a, &p, false, false);
        self
    }
}

#[test]
fn cm_requests_unanswered_and_rejected_are_findings() {
    use roce_proto::cm::{Message, Rej, Rep, Req};
    let req = |id: u32| {
        Message::Req(Req {
            local_comm_id: id,
            local_qpn: QA,
            ..Req::default()
        })
    };
    let mut s = Script::default();
    // Request 1 answered; request 2 sent twice (a retry) and never answered; request 3
    // rejected (reason 28, consumer_reject).
    s.cm(0.0, true, req(1), Req::ATTRIBUTE_ID)
        .cm(
            1.0,
            false,
            Message::Rep(Rep {
                local_comm_id: 9,
                remote_comm_id: 1,
                local_qpn: QB,
                ..Rep::default()
            }),
            Rep::ATTRIBUTE_ID,
        )
        .cm(2.0, true, req(2), Req::ATTRIBUTE_ID)
        .cm(3.0, true, req(3), Req::ATTRIBUTE_ID)
        .cm(
            4.0,
            false,
            Message::Rej(Rej {
                local_comm_id: 10,
                remote_comm_id: 3,
                reason: 28,
                ..Rej::default()
            }),
            Rej::ATTRIBUTE_ID,
        )
        .cm(2000.0, true, req(2), Req::ATTRIBUTE_ID);
    let a = s.analyze();
    assert_eq!(
        (
            a.cm.requests,
            a.cm.unanswered,
            a.cm.unanswered_frames.as_slice()
        ),
        (3, 1, &[3u64][..])
    );
    let f = findings(&a, "cm_unanswered_req");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        f[0].detail,
        "1 of the capture's 3 CM connection requests got no reply or reject"
    );
    let f = findings(&a, "cm_rejected");
    assert_eq!(f.len(), 1, "{}", analyze::text(&a, true));
    assert_eq!(
        (f[0].detail.as_str(), f[0].frames.as_slice()),
        ("1 REJs with reason 28 (consumer_reject)", &[5u64][..])
    );
    // Every request answered: nothing to say.
    let mut s = Script::default();
    s.cm(0.0, true, req(1), Req::ATTRIBUTE_ID).cm(
        1.0,
        false,
        Message::Rep(Rep {
            local_comm_id: 9,
            remote_comm_id: 1,
            local_qpn: QB,
            ..Rep::default()
        }),
        Rep::ATTRIBUTE_ID,
    );
    let a = s.analyze();
    assert_eq!((a.cm.requests, a.cm.unanswered), (1, 0));
    assert!(a.findings().is_empty(), "{:?}", a.findings());
}
