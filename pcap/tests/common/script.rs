//! A scripted capture: the packets of one RC connection between A (10.0.0.1, QP 0x11, the
//! requester) and B (10.0.0.2, QP 0x22), written with `roce_proto`, plus CM MADs, TCP
//! segments and PFC frames; and the helpers the analysis tests read its reports with.
use roce_pcap::analyze::{self, Analysis, Connection, Options};
use roce_pcap::synth::packet_for;
use roce_pcap::{link, CaptureReader, PcapWriter, Timestamp};
use roce_proto::aeth::NakCode;
use roce_proto::frame::IpParams;
use roce_proto::{AethRepr, Ecn, FrameBuilder, Msn, Opcode, PacketRepr, Psn, Qpn, RKey, Syndrome};

/// A's QPN (the requester) and B's (the responder).
pub const QA: u32 = 0x11;
pub const QB: u32 = 0x22;
pub const PAYLOAD: [u8; 4096] = [0x5a; 4096];

#[derive(Default)]
pub struct Script {
    /// (time ns, frame bytes), in capture order.
    pub frames: Vec<(u64, Vec<u8>)>,
    /// The DSCP A's and B's packets carry (0 unless set).
    pub dscp: [Option<u8>; 2],
}

pub fn builder(from_a: bool, ce: bool) -> FrameBuilder {
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
    pub fn push(&mut self, t_us: f64, from_a: bool, p: &PacketRepr<'_>, ce: bool, corrupt: bool) {
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
    pub fn req_with(
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
    pub fn req_full(
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
    pub fn read_at(&mut self, t: f64, psn: u32, va: u64, len: u32) -> &mut Self {
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
    pub fn req(&mut self, t: f64, op: Opcode, psn: u32, len: u32) -> &mut Self {
        self.req_with(t, op, psn, len, false, false)
    }
    /// A WRITE of `n` packets of 1024 bytes from `psn`, one microsecond apart.
    pub fn write(&mut self, t: f64, psn: u32, n: u32) -> &mut Self {
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
    pub fn resp(
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
    pub fn ack(&mut self, t: f64, psn: u32, msn: u32) -> &mut Self {
        self.resp(
            t,
            Opcode::RC_ACKNOWLEDGE,
            psn,
            Syndrome::ACK_UNLIMITED,
            msn,
            0,
        )
    }
    pub fn nak(&mut self, t: f64, psn: u32, code: NakCode, msn: u32) -> &mut Self {
        self.resp(t, Opcode::RC_ACKNOWLEDGE, psn, Syndrome::nak(code), msn, 0)
    }
    pub fn rnr(&mut self, t: f64, psn: u32, timer: u8, msn: u32) -> &mut Self {
        self.resp(
            t,
            Opcode::RC_ACKNOWLEDGE,
            psn,
            Syndrome::rnr_nak(timer),
            msn,
            0,
        )
    }
    pub fn read_resp(&mut self, t: f64, op: Opcode, psn: u32, len: u32, msn: u32) -> &mut Self {
        self.resp(t, op, psn, Syndrome::ACK_UNLIMITED, msn, len)
    }
    /// A CNP from B to A's QP.
    pub fn cnp(&mut self, t: f64) -> &mut Self {
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

    pub fn pcap(&self) -> Vec<u8> {
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

    pub fn analyze(&self) -> Analysis {
        self.analyze_with(Options::default())
    }
    pub fn analyze_with(&self, opts: Options) -> Analysis {
        let bytes = self.pcap();
        let mut r = CaptureReader::new(&bytes[..], "scripted").unwrap();
        let a = analyze::analyze(&mut r, opts);
        assert!(a.error.is_none(), "{:?}", a.error);
        a
    }
}

/// Compares the full text report with the golden file `name`.
pub fn golden(name: &str, a: &Analysis) {
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

pub fn one(a: &Analysis) -> &Connection {
    assert_eq!(a.connections.len(), 1, "{}", analyze::text(a, true));
    &a.connections[0]
}

/// The requester's side (A) and the responder's (B).
pub fn sides(c: &Connection) -> (&analyze::Side, &analyze::Side) {
    let a = c.sides.iter().find(|s| s.qpn == Some(QA)).expect("side A");
    let b = c.sides.iter().find(|s| s.qpn == Some(QB)).expect("side B");
    (a, b)
}

pub fn verdict(c: &Connection, rule: &str) -> analyze::Verdict {
    c.verdicts()
        .into_iter()
        .find(|v| v.rule == rule)
        .unwrap_or_else(|| panic!("no rule {rule}"))
}

pub fn kinds(c: &Connection) -> Vec<(&'static str, u64)> {
    c.events.iter().map(|e| (e.kind.name(), e.frame)).collect()
}

/// Every rule `ok` or `not_applicable`.
pub fn clean(c: &Connection) {
    let bad: Vec<_> = c
        .verdicts()
        .into_iter()
        .filter(|v| v.result == "violated")
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}

/// An Ethernet / IPv4 / TCP segment from `src` to `dst` with `flags` (0x01 FIN, 0x04 RST,
/// 0x10 ACK), no payload.
pub fn tcp_frame(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    tcp_frame_with(src, dst, (sport, dport), flags, &[])
}

/// [`tcp_frame`] carrying `payload`.
pub fn tcp_frame_with(
    src: [u8; 4],
    dst: [u8; 4],
    (sport, dport): (u16, u16),
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = (40 + payload.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
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
    f.extend_from_slice(payload);
    f
}

/// A RoCE v1 frame (Ethernet, EtherType 0x8915, GRH from GID `src` to `dst`) carrying
/// `p`, its ICRC computed over the GRH as IBTA Annex A16 says.
pub fn roce_v1_frame(src: [u8; 16], dst: [u8; 16], p: &PacketRepr<'_>) -> Vec<u8> {
    // The transport bytes of the same packet over IPv6 (their ICRC is redone below).
    let b = FrameBuilder::ipv6(src, dst, 0xc000);
    let mut v2 = vec![0u8; b.frame_len(p)];
    let n = b.build(p, &mut v2).expect("builds");
    let transport = &v2[14 + 40 + 8..n];
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x89, 0x15];
    let mut grh = [0u8; 40];
    grh[0] = 0x60;
    grh[4..6].copy_from_slice(&(transport.len() as u16).to_be_bytes());
    grh[6] = 0x1b;
    grh[7] = 64;
    grh[8..24].copy_from_slice(&src);
    grh[24..40].copy_from_slice(&dst);
    f.extend_from_slice(&grh);
    f.extend_from_slice(transport);
    let icrc = roce_proto::Frame::parse_ethernet(&f)
        .expect("a RoCE v1 frame")
        .computed_icrc()
        .expect("its ICRC");
    let at = f.len() - 4;
    f[at..].copy_from_slice(&icrc.to_le_bytes());
    assert_eq!(
        roce_proto::Frame::parse_ethernet(&f)
            .unwrap()
            .icrc_matches(),
        Ok(true)
    );
    f
}

impl Script {
    /// A request from A to B as RoCE v1, from GID `::ffff:10.0.0.1` to `::ffff:10.0.0.2`.
    pub fn req_v1(&mut self, t_us: f64, op: Opcode, psn: u32, len: u32) -> &mut Self {
        let mut p = packet_for(op, 0, &PAYLOAD[..len as usize]);
        p.bth.dest_qp = Qpn(QB);
        p.bth.psn = Psn::new(psn);
        p.bth.ack_req = op.ends_message();
        let gid = |x: u8| {
            let mut g = [0u8; 16];
            g[10..12].copy_from_slice(&[0xff, 0xff]);
            g[12..].copy_from_slice(&[10, 0, 0, x]);
            g
        };
        let f = roce_v1_frame(gid(1), gid(2), &p);
        self.raw(t_us, &f)
    }
    /// A raw frame (not RoCE) at `t_us`.
    pub fn raw(&mut self, t_us: f64, frame: &[u8]) -> &mut Self {
        self.frames.push(((t_us * 1000.0) as u64, frame.to_vec()));
        self
    }
    /// A PFC frame from the switch pausing `priority` for `quanta`.
    pub fn pfc(&mut self, t_us: f64, priority: u8, quanta: u16) -> &mut Self {
        let f = roce_proto::mac_control::pfc_frame([0x02, 0, 0, 0, 0, 0xfe], priority, quanta);
        self.raw(t_us, &f)
    }
}

/// The findings named `name`.
pub fn findings(a: &Analysis, name: &str) -> Vec<analyze::Finding> {
    a.findings()
        .into_iter()
        .filter(|f| f.name == name)
        .collect()
}

impl Script {
    /// A CM MAD from A (`from_a`) or B on QP1 (a UD SEND of the 256-byte MAD: the common
    /// header, then the message).
    pub fn cm(
        &mut self,
        t: f64,
        from_a: bool,
        msg: roce_proto::cm::Message,
        attr: u16,
    ) -> &mut Self {
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
