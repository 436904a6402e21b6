//! The verified workload with its QPs connected through the IB CM on QP1 (IBTA Vol 1 ch. 12)
//! instead of the TCP control channel: `roce server --cm`, `roce client --cm`, `roce loopback
//! --cm`. Everything goes over UDP 4791.
//!
//! As rdma_cm applications do, what the two ends must agree on travels in CM private data:
//! * **REQ** (one per QP; after RDMA-CM's `cma_hdr`, at most 56 bytes): the workload spec
//!   (the plan is built from it on both ends), the QP's index, the congestion control kind.
//! * **REP**: the responder block of that QP (address, rkey, length).
//! * **DREQ** (the client, when every operation completed): whether it saw no mismatch.
//! * **DREP**: the server's summary: verified, mismatches, bytes verified, its link and every
//!   counter of its device (saturated at 2^32 - 1, except byte counts).
//!
//! The service ID is RDMA-CM's for the TCP port space and the given port (18515 by default,
//! as perftest and rping use). Both ends use UDP port 4791.
use std::future::pending;
use std::net::{IpAddr, SocketAddr};
use std::ops::ControlFlow;
use std::time::Duration;

use roce_driver::connect::cm_group::{
    self, Accept, Admit, Group, Host, Hosted, Joined, Joining, Listen, Served,
};
use roce_driver::connect::cm_session::{Asked, CmSession, SourcePort, Terms};
use roce_driver::connect::qps::{create_qps, LocalQp, RemoteBuffer, ALL_REMOTE};
use roce_driver::connect::AfterGivingUp;
use roce_driver::endpoint::{Endpoint, Tap, Taps};
use roce_driver::impair::Impairment;
use roce_driver::{
    bind_endpoint, runtime, AppError, Application, DriverError, Link, LinkChoice, PeerFault,
    Secrets,
};
use roce_proto::{Psn, ROCEV2_UDP_PORT};
use roce_stack::{
    CcConfig, ConnectParams, CqHandle, Device, Drops, Instant, Naks, PdHandle, QpCaps, QpStats,
};

use super::run::{RunConfig, ServerOutcome, Side};
use super::{OpKind, Plan, Report, Requester, Responder, WorkloadSpec};

/// First bytes of every private data block this module writes.
const MAGIC: &[u8; 4] = b"rcm1";

/// Operation kinds a REQ can list.
const MAX_OPS: usize = 14;

/// What the client asks for, in a REQ's consumer private data.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ReqData {
    qp: u16,
    spec: WorkloadSpec,
    dcqcn: bool,
    line_rate_bps: u64,
}

impl ReqData {
    fn encode(&self) -> Vec<u8> {
        let s = &self.spec;
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&self.qp.to_be_bytes());
        v.extend_from_slice(&(s.qps as u16).to_be_bytes());
        for x in [s.min_size, s.max_size, s.count, s.depth] {
            v.extend_from_slice(&x.to_be_bytes());
        }
        v.extend_from_slice(&s.seed.to_be_bytes());
        v.extend_from_slice(&self.line_rate_bps.to_be_bytes());
        v.push(u8::from(self.dcqcn));
        v.push(s.ops.len().min(MAX_OPS) as u8);
        for k in s.ops.iter().take(MAX_OPS) {
            v.push(OpKind::ALL.iter().position(|x| x == k).unwrap_or(0) as u8);
        }
        v
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let b = b.strip_prefix(MAGIC)?;
        let u16_at = |i: usize| Some(u16::from_be_bytes(b.get(i..i + 2)?.try_into().ok()?));
        let u32_at = |i: usize| Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let u64_at = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
        let nops = usize::from(*b.get(37)?);
        if nops == 0 || nops > MAX_OPS {
            return None;
        }
        let ops = b
            .get(38..38 + nops)?
            .iter()
            .map(|&i| OpKind::ALL.get(usize::from(i)).copied())
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            qp: u16_at(0)?,
            spec: WorkloadSpec {
                ops,
                transports: vec![super::Transport::Rc],
                datagram_max: WorkloadSpec::default().datagram_max,
                qps: u32::from(u16_at(2)?),
                min_size: u32_at(4)?,
                max_size: u32_at(8)?,
                count: u32_at(12)?,
                depth: u32_at(16)?,
                seed: u64_at(20)?,
            },
            line_rate_bps: u64_at(28)?,
            dcqcn: *b.get(36)? == 1,
        })
    }
}

fn encode_block(b: &RemoteBuffer) -> Vec<u8> {
    b.to_private_data(MAGIC)
}

fn decode_block(b: &[u8]) -> Option<RemoteBuffer> {
    RemoteBuffer::from_private_data(b, MAGIC)
}

/// Every counter of a device, in one order (byte counts and the minimum rate are 64-bit on
/// the wire, the rest saturate at 32 bits).
fn stats_words(s: &QpStats) -> Vec<u64> {
    let n = |k: &Naks| {
        [
            k.seq_err,
            k.rnr,
            k.invalid_request,
            k.remote_access,
            k.remote_op,
        ]
    };
    let d = &s.drops;
    let mut v = vec![
        s.tx_packets,
        s.rx_packets,
        s.retransmitted_packets,
        s.timeouts,
        s.rewinds,
        s.implied_naks,
        s.duplicate_requests,
        s.out_of_sequence_requests,
        s.acks_sent,
        s.ce_received,
        s.cnps_sent,
        s.cnps_received,
        s.rate_cuts,
        s.icrc_full,
        s.icrc_solved,
    ];
    v.extend(n(&s.naks_sent));
    v.extend(n(&s.naks_received));
    v.extend([
        d.malformed,
        d.bad_icrc,
        d.unknown_qp,
        d.wrong_state,
        d.bad_opcode,
        d.bad_pkey,
        d.ghost_response,
        d.stale_response,
        d.out_of_sequence,
        d.no_resource,
        d.response_queue_full,
        d.wrong_address,
    ]);
    v
}

fn stats_from(w: &[u64], tx_bytes: u64, rx_bytes: u64, min_rate_bps: u64) -> Option<QpStats> {
    let g = |i: usize| w.get(i).copied();
    let naks = |at: usize| -> Option<Naks> {
        Some(Naks {
            seq_err: g(at)?,
            rnr: g(at + 1)?,
            invalid_request: g(at + 2)?,
            remote_access: g(at + 3)?,
            remote_op: g(at + 4)?,
        })
    };
    Some(QpStats {
        tx_packets: g(0)?,
        tx_bytes,
        rx_packets: g(1)?,
        rx_bytes,
        retransmitted_packets: g(2)?,
        timeouts: g(3)?,
        rewinds: g(4)?,
        implied_naks: g(5)?,
        duplicate_requests: g(6)?,
        out_of_sequence_requests: g(7)?,
        acks_sent: g(8)?,
        ce_received: g(9)?,
        cnps_sent: g(10)?,
        cnps_received: g(11)?,
        rate_cuts: g(12)?,
        min_rate_bps,
        icrc_full: g(13)?,
        icrc_solved: g(14)?,
        naks_sent: naks(15)?,
        naks_received: naks(20)?,
        drops: Drops {
            malformed: g(25)?,
            bad_icrc: g(26)?,
            unknown_qp: g(27)?,
            wrong_state: g(28)?,
            bad_opcode: g(29)?,
            bad_pkey: g(30)?,
            ghost_response: g(31)?,
            stale_response: g(32)?,
            out_of_sequence: g(33)?,
            no_resource: g(34)?,
            response_queue_full: g(35)?,
            wrong_address: g(36)?,
        },
    })
}

/// The server's summary, in its DREP.
fn encode_summary(s: &Side) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    v.push(u8::from(s.complete));
    v.push(match s.link {
        Some(Link::Udp) => 1,
        Some(Link::Packet) => 2,
        Some(Link::PacketRing) => 3,
        None => 0,
    });
    v.extend_from_slice(&(s.mismatches.len() as u32).to_be_bytes());
    for x in [
        s.verified_bytes,
        s.stats.tx_bytes,
        s.stats.rx_bytes,
        s.stats.min_rate_bps,
    ] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    for x in stats_words(&s.stats) {
        v.extend_from_slice(&(x.min(u64::from(u32::MAX)) as u32).to_be_bytes());
    }
    v
}

fn decode_summary(b: &[u8]) -> Option<Side> {
    let b = b.strip_prefix(MAGIC)?;
    let u64_at = |i: usize| Some(u64::from_be_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let u32_at = |i: usize| Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let mismatches = u32_at(2)?;
    let words: Vec<u64> = (0..37)
        .map(|k| u32_at(38 + 4 * k).map(u64::from))
        .collect::<Option<_>>()?;
    Some(Side {
        complete: *b.first()? == 1,
        link: match b.get(1)? {
            1 => Some(Link::Udp),
            2 => Some(Link::Packet),
            3 => Some(Link::PacketRing),
            _ => None,
        },
        mismatches: (0..mismatches.min(1))
            .map(|_| format!("{mismatches} mismatches (the server's own output lists them)"))
            .collect(),
        verified_bytes: u64_at(6)?,
        stats: stats_from(&words, u64_at(14)?, u64_at(22)?, u64_at(30)?)?,
        ..Side::default()
    })
}

fn cc_of(dcqcn: bool) -> CcConfig {
    if dcqcn {
        CcConfig::Dcqcn(roce_stack::DcqcnParams::default())
    } else {
        CcConfig::None
    }
}

/// The server: accepts one client's REQs, then serves its workload until it releases.
struct CmServer {
    secrets: Secrets,
    pd: PdHandle,
    req: Option<ReqData>,
    mine: Vec<LocalQp>,
    psns: Vec<Psn>,
    responder: Option<Responder>,
    blocks: Vec<RemoteBuffer>,
    link: Link,
}

impl Served for CmServer {
    fn admit(&mut self, dev: &mut Device, asked: &Asked) -> Result<Admit, AppError> {
        let Some(data) = ReqData::decode(&asked.data) else {
            eprintln!(
                "roce: refused a CM REQ from {} (REJ consumer_reject): it carries no roce workload request; for librdmacm's tools use roce rping, ucmatose, rdma-server or udaddy",
                asked.peer
            );
            return Ok(Admit::Refuse(b"not a roce workload REQ"));
        };
        match &self.req {
            None => {
                if data.spec.validate().is_err() || data.spec.qps > 1024 {
                    return Ok(Admit::Refuse(b"invalid spec"));
                }
                let n = data.spec.qps;
                self.mine = create_qps(dev, self.pd, n, QpCaps::default(), ALL_REMOTE)?;
                self.psns = self.secrets.start_psns(n, 0x5e7e)?;
                let recv: Vec<(roce_proto::Qpn, CqHandle)> =
                    self.mine.iter().map(|q| (q.qpn, q.recv_cq)).collect();
                // Each QP's block and receives are made ready when its own REQ comes
                // (`accept`): one REQ costs the QP it connects, not the whole run it names.
                let (r, blocks) =
                    Responder::unprepared(dev, self.pd, Plan::new(&data.spec), &recv)?;
                self.responder = Some(r);
                self.blocks = blocks;
                self.req = Some(ReqData {
                    qp: 0,
                    ..data.clone()
                });
            }
            // The session refuses other peers while a set-up is under way.
            Some(first) if first.spec != data.spec => return Ok(Admit::Refuse(b"busy")),
            Some(_) => {}
        }
        Ok(Admit::Member {
            k: usize::from(data.qp),
            of: self.mine.len(),
        })
    }

    fn accept(&mut self, dev: &mut Device, k: usize) -> Result<Accept, AppError> {
        let (Some(req), Some(r)) = (&self.req, &mut self.responder) else {
            return Err(AppError::Defect("a connection admitted before its run"));
        };
        // The QP is ready before the REP leaves: the client may send right after its RTU.
        r.prepare(dev, k)?;
        Ok(Accept {
            qp: self.mine[k],
            psn: self.psns[k],
            base: ConnectParams::default(),
            rd_atomic: 16,
            cc: cc_of(req.dcqcn),
            line_rate_bps: req.line_rate_bps,
            reply: encode_block(&self.blocks[k]),
        })
    }

    fn poll(&mut self, group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        let Some(r) = &mut self.responder else {
            return Ok(());
        };
        if !group.all_up() {
            return Ok(());
        }
        r.poll(dev, now)?;
        // What the DREP that answers the client's DREQ will say.
        let side = Side {
            mismatches: r.mismatches().iter().map(ToString::to_string).collect(),
            verified_bytes: r.tally().verified_bytes,
            stats: dev.stats(),
            complete: r.verified() && r.mismatches().is_empty(),
            link: Some(self.link),
            ..Side::default()
        };
        group.set_release_data(&encode_summary(&side));
        Ok(())
    }
}

/// A workload server over the CM: one client; a set-up given up costs it that set-up (the
/// capture goes on in the next).
struct WorkloadHost {
    secrets: Secrets,
    tap: Option<Tap>,
}

impl Host for WorkloadHost {
    type Run = CmServer;
    type Output = ServerOutcome;

    fn name(&self) -> &'static str {
        "roce server"
    }

    fn open(&mut self, ep: &mut Endpoint) -> Result<CmServer, DriverError> {
        if let Some(t) = self.tap.take() {
            ep.set_tap(t);
        }
        Ok(CmServer {
            secrets: self.secrets,
            pd: ep.dev.alloc_pd(),
            req: None,
            mine: Vec::new(),
            psns: Vec::new(),
            responder: None,
            blocks: Vec::new(),
            link: ep.link(),
        })
    }

    fn lost(&mut self, ep: &mut Endpoint) {
        self.tap = ep.take_tap();
    }

    fn ended(
        &mut self,
        ep: Endpoint,
        h: Hosted<CmServer>,
    ) -> Result<ControlFlow<ServerOutcome>, DriverError> {
        let r = h.run.responder.as_ref();
        Ok(ControlFlow::Break(ServerOutcome {
            complete: r.is_some_and(|r| r.verified() && r.mismatches().is_empty()),
            mismatches: r.map_or_else(Vec::new, |r| {
                r.mismatches().iter().map(ToString::to_string).collect()
            }),
            verified_bytes: r.map_or(0, |r| r.tally().verified_bytes),
            stats: ep.dev.stats(),
            link: Some(ep.link()),
            peer: h.group.peer(),
        }))
    }
}

/// Serves one client that connects through the CM to `bind` (UDP 4791) on RDMA-CM port
/// `port`. Blocking; `ready` is called once the socket is bound.
#[allow(clippy::too_many_arguments)]
pub(crate) fn serve_cm(
    bind: IpAddr,
    port: u16,
    impairment: Impairment,
    secrets: Secrets,
    link: LinkChoice,
    tap: Option<Tap>,
    after: AfterGivingUp,
    ready: impl FnOnce(),
) -> Result<ServerOutcome, DriverError> {
    let at = Listen {
        bind,
        port,
        secrets,
        link,
        impairment,
        salt: 0x5e7e,
    };
    cm_group::serve(at, WorkloadHost { secrets, tap }, after, ready)
}

/// The client's phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Connecting,
    Running,
    Releasing,
}

struct CmClient {
    cfg: RunConfig,
    pd: PdHandle,
    mine: Vec<LocalQp>,
    blocks: Vec<Option<RemoteBuffer>>,
    requester: Option<Requester>,
    phase: Phase,
    summary: Option<Side>,
    started: Option<std::time::Instant>,
    seconds: f64,
}

impl Joined for CmClient {
    /// A connection up: its REP's responder block.
    fn up(&mut self, _dev: &mut Device, k: usize, reply: &[u8]) -> Result<(), AppError> {
        let Some(b) = decode_block(reply) else {
            return Err(PeerFault::Foreign {
                what: "roce responder block",
                server: "roce server",
                hint: None,
            }
            .into());
        };
        self.blocks[k] = Some(b);
        Ok(())
    }

    fn released_early(&mut self, _group: &Group, _k: usize) -> Result<(), AppError> {
        Err(PeerFault::Left("the workload finished").into())
    }

    /// The server's summary rides in its DREP.
    fn released(&mut self, group: &Group, k: usize) {
        if let Some(s) = group.release_data(k).and_then(decode_summary) {
            self.summary = Some(s);
        }
    }

    /// Once every connection is up: the requester; once it is done, the release (with the
    /// verdict in the DREQ).
    fn poll(&mut self, group: &mut Group, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        if self.phase == Phase::Connecting && group.all_up() {
            let blocks: Vec<RemoteBuffer> = self.blocks.iter().flatten().copied().collect();
            let send: Vec<(roce_proto::Qpn, CqHandle)> =
                self.mine.iter().map(|q| (q.qpn, q.send_cq)).collect();
            self.requester = Some(Requester::new(
                dev,
                self.pd,
                Plan::new(&self.cfg.spec),
                &send,
                &blocks,
            ));
            self.phase = Phase::Running;
            self.started = Some(std::time::Instant::now());
        }
        if self.phase == Phase::Running {
            if let Some(r) = &mut self.requester {
                r.poll(dev, now)?;
                if r.done() {
                    self.seconds = self.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
                    let ok = [u8::from(r.mismatches().is_empty())];
                    let mut data = MAGIC.to_vec();
                    data.extend_from_slice(&ok);
                    self.phase = Phase::Releasing;
                    group.release(now, &data);
                }
            }
        }
        Ok(())
    }
}

/// Connects to `server`'s CM (UDP 4791, RDMA-CM port `port`) from `local`, runs the workload
/// as the requester, releases the connections, and reports with the server's summary.
pub(crate) fn run_client_cm(
    local: IpAddr,
    server: IpAddr,
    port: u16,
    cfg: &RunConfig,
    tap: Option<Tap>,
) -> Result<Report, DriverError> {
    cfg.validate()?;
    if local.is_unspecified() {
        return Err(crate::Combination::CmNeedsBind.into());
    }
    runtime()?.block_on(async move {
        let mut dev = cfg.secrets.device(0xc11e)?;
        let pd = dev.alloc_pd();
        let mine = create_qps(&mut dev, pd, cfg.spec.qps, QpCaps::default(), ALL_REMOTE)?;
        let psns = cfg.secrets.start_psns(cfg.spec.qps, 0xc11e)?;
        let mut ep = bind_endpoint(
            dev,
            SocketAddr::new(local, ROCEV2_UDP_PORT),
            ROCEV2_UDP_PORT,
            cfg.impairment,
            cfg.link,
        )?;
        if let Some(t) = tap {
            ep.set_tap(t);
        }
        let n = mine.len();
        let t = &cfg.transport;
        let terms = Terms {
            port,
            responder_resources: t.max_dest_rd_atomic,
            initiator_depth: t.max_rd_atomic,
            rnr_retry: t.rnr_retry,
            mtu: t.mtu,
            retry_count: t.retry_cnt,
            local_ack_timeout: t.timeout,
            base: cfg.transport,
            cc: cfg.cc,
            line_rate_bps: cfg.line_rate_bps,
            src_port: SourcePort::Fixed(ROCEV2_UDP_PORT),
            not_listening_retries: 0,
        };
        let with_psns: Vec<(LocalQp, Psn)> = mine.iter().copied().zip(psns).collect();
        // A REQ per QP, each carrying the spec (the server builds the same plan from it).
        let session = CmSession::client_with(
            local,
            ep.now(),
            &with_psns,
            terms,
            &cfg.secrets,
            0xc11e,
            "roce client",
            server,
            |k| {
                ReqData {
                    qp: k as u16,
                    spec: cfg.spec.clone(),
                    dcqcn: matches!(cfg.cc, CcConfig::Dcqcn(_)),
                    line_rate_bps: cfg.line_rate_bps,
                }
                .encode()
            },
        )?;
        let app = CmClient {
            cfg: cfg.clone(),
            pd,
            mine,
            blocks: vec![None; n],
            requester: None,
            phase: Phase::Connecting,
            summary: None,
            started: None,
            seconds: 0.0,
        };
        // The CM's own retries bound the wait for the server (about 2 s).
        let silence = cfg.silence.max(Duration::from_secs(5));
        let mut app = Joining::new(session, n, app);
        let result = ep.run(&mut app, true, pending(), silence).await;
        let app = app.run;
        let Some(r) = &app.requester else {
            return Err(match result {
                Err(e) => e,
                Ok(()) => PeerFault::Left("the connections were established").into(),
            });
        };
        let mine_side = Side::of(r.mismatches(), r.tally(), &ep, r.done());
        let server_side = app.summary.clone().unwrap_or_default();
        let mut report = Report::new(
            r.tally(),
            &mine_side,
            &server_side,
            app.seconds,
            cfg.secrets,
        );
        if let Err(e) = result {
            report.errors.push(e.to_string());
            report.ok = false;
        } else if app.summary.is_none() {
            report
                .errors
                .push("the server's summary never arrived (its DREP was lost)".into());
            report.ok = false;
        }
        Ok(report)
    })
}

/// `roce loopback --cm`: a `--cm` server at `server_ip` and the client at `client_ip` (both
/// UDP 4791, so two addresses), each on its own thread, the QPs connected through the CM.
pub(crate) fn loopback_cm(
    cfg: &RunConfig,
    client_ip: IpAddr,
    server_ip: IpAddr,
    taps: Taps,
) -> Result<Report, DriverError> {
    cfg.validate()?;
    let Taps {
        client: tap,
        server: server_tap,
    } = taps;
    if client_ip == server_ip {
        return Err(crate::Combination::CmNeedsTwoAddresses.into());
    }
    let server_impairment = Impairment {
        seed: cfg.impairment.seed.wrapping_add(1),
        ..cfg.impairment
    };
    let (secrets, link) = (cfg.secrets, cfg.link);
    let port = 18515;
    let (report, served) = roce_driver::connect::one_process_both(
        "roce-cm-server",
        move |ready| {
            serve_cm(
                server_ip,
                port,
                server_impairment,
                secrets,
                link,
                server_tap,
                AfterGivingUp::Fail,
                ready,
            )
        },
        || run_client_cm(client_ip, server_ip, port, cfg, tap),
    )?;
    // The client's failure is the story; a server failure after a finished client is
    // part of its report.
    let mut r = report?;
    if let Some(Err(e)) = served {
        r.errors.push(format!("server: {e}"));
        r.ok = false;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_proto::RKey;

    #[test]
    fn private_data_round_trips_and_fits() {
        let d = ReqData {
            qp: 3,
            spec: WorkloadSpec {
                ops: OpKind::ALL.to_vec(),
                ..WorkloadSpec::default()
            },
            dcqcn: true,
            line_rate_bps: 25_000_000_000,
        };
        let e = d.encode();
        assert!(
            e.len() <= 92 - roce_proto::rdma_cm::CMA_HDR_LEN,
            "{}",
            e.len()
        );
        let mut padded = e.clone();
        padded.resize(56, 0);
        assert_eq!(ReqData::decode(&padded), Some(d));
        assert_eq!(ReqData::decode(&padded[1..]), None);
        let b = RemoteBuffer {
            va: 0x7f00_0000_1000,
            rkey: RKey(0x1234),
            len: 4096,
        };
        assert_eq!(decode_block(&encode_block(&b)), Some(b));
        let stats = QpStats {
            tx_packets: 5,
            tx_bytes: 1 << 40,
            drops: Drops {
                wrong_address: 9,
                ..Drops::default()
            },
            naks_received: Naks {
                remote_op: 2,
                ..Naks::default()
            },
            ..QpStats::default()
        };
        let side = Side {
            complete: true,
            verified_bytes: 77,
            stats,
            link: Some(Link::Packet),
            ..Side::default()
        };
        let s = encode_summary(&side);
        assert!(s.len() <= 220, "{}", s.len());
        let back = decode_summary(&s).unwrap();
        assert_eq!(back.stats, stats);
        assert!(back.complete && back.verified_bytes == 77 && back.link == Some(Link::Packet));
        assert!(decode_summary(&s[..s.len() - 1]).is_none());
    }
}
