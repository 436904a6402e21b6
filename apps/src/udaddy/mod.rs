//! `roce udaddy`: librdmacm's `udaddy` (rdma-core `librdmacm/examples/udaddy.c`): a UD QP
//! found through SIDR (IBTA Vol 1 §12.11) in RDMA-CM's UDP port space (port 7174), then UD
//! SENDs with immediate both ways, so that the stock `udaddy` can be the other end.
//!
//! The client sends a SIDR_REQ (RDMA-CM's `cma_hdr` as private data); the server answers with
//! its UD QP and Q_Key 0x01234567 (RDMA-CM's `RDMA_UDP_QKEY`, which a Linux client requires).
//! The client then SENDs `-C` messages of `-S` bytes with its own QPN as the immediate; the
//! server learns where to answer from the first (the sender's address, the QPN in the
//! immediate, as udaddy does) and SENDs as many back. Both post their receives (`-S` + the
//! 40-byte GRH area) first. UD loses what it loses: a side that has not received everything
//! within the silence bound fails, naming how many arrived.
use std::net::IpAddr;
use std::time::Duration;

use roce_driver::connect::rdma_cm::{cm_side, flush, pump};
use roce_driver::connect::{QpRequest, Side};
use roce_driver::{runtime, AppError, Application, DriverError, LinkChoice, Secrets};
use roce_proto::rdma_cm::{service_id, PortSpace};
use roce_proto::{QKey, Qpn};
use roce_stack::cm::{rdma_cm_req_private, Cm, CmEvent, ConnId};
use roce_stack::ud::{AddressHandle, UdSend, GRH_LEN};
use roce_stack::{
    Access, ConnectParams, Device, Instant, MrHandle, QpCaps, RecvRequest, Service, SgList,
    WcOpcode, WcStatus,
};
use serde::Serialize;

/// udaddy's port.
pub const PORT: u16 = 7174;

pub use roce_proto::rdma_cm::RDMA_UDP_QKEY;

/// A run's settings, as udaddy's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UdaddySpec {
    /// `-C`: messages each way (default 10).
    pub count: u32,
    /// `-S`: bytes per message (default 100; at most the MTU).
    pub size: u32,
    /// The largest message (the UD QP's MTU).
    pub mtu: u32,
    /// RDMA-CM port (UDP port space).
    pub port: u16,
}

impl Default for UdaddySpec {
    fn default() -> Self {
        Self {
            count: 10,
            size: 100,
            mtu: 4096,
            port: PORT,
        }
    }
}

impl UdaddySpec {
    /// Refuses what udaddy refuses.
    pub fn validate(&self) -> Result<(), DriverError> {
        if self.size == 0 || self.size > self.mtu {
            return Err(DriverError::Config(format!(
                "-S {}: 1 to the MTU ({})",
                self.size, self.mtu
            )));
        }
        if !(1..=4096).contains(&self.count) {
            return Err(DriverError::Config(format!("-C {}: 1 to 4096", self.count)));
        }
        Ok(())
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UdaddyResult {
    /// `"client"` or `"server"`.
    pub role: &'static str,
    /// Messages sent.
    pub sent: u64,
    /// Messages received.
    pub received: u64,
    /// The peer's address.
    pub peer: String,
    /// The peer's UD QP.
    pub peer_qpn: u32,
}

/// One side of udaddy.
pub struct Udaddy {
    spec: UdaddySpec,
    client: bool,
    cm: Cm,
    sidr: Option<ConnId>,
    local: IpAddr,
    /// The client: the server's address; the server: the client's, once a message came.
    peer_ip: IpAddr,
    qp: roce_driver::qps::LocalQp,
    buf: MrHandle,
    ah: Option<AddressHandle>,
    sent: u32,
    send_done: u32,
    received: u32,
}

const RECV: u64 = 1;
const SEND: u64 = 2;

impl Udaddy {
    fn new(side: &mut Side, spec: UdaddySpec, client: bool, cm: Cm) -> Result<Self, AppError> {
        let dev = &mut side.ep.dev;
        let len = spec.size as usize + GRH_LEN;
        let buf = dev.reg_mr(side.pd, len, Access::LOCAL_WRITE);
        let qp = side.qps[0];
        for _ in 0..spec.count {
            let sgl = SgList::one(dev.mr(buf).expect("buffer").sge(0, len as u32));
            dev.post_recv(qp.qpn, RecvRequest { wr_id: RECV, sgl })
                .map_err(|e| AppError::post(0, "a receive", e))?;
        }
        Ok(Self {
            spec,
            client,
            cm,
            sidr: None,
            local: side.ep.local_addr().ip(),
            peer_ip: side.ep.local_addr().ip(),
            qp,
            buf,
            ah: None,
            sent: 0,
            send_done: 0,
            received: 0,
        })
    }

    fn send_all(&mut self, dev: &mut Device) -> Result<(), AppError> {
        let Some(ah) = self.ah else {
            return Ok(());
        };
        let sgl = SgList::one(
            dev.mr(self.buf)
                .expect("buffer")
                .sge(GRH_LEN as u64, self.spec.size),
        );
        while self.sent < self.spec.count {
            dev.post_ud_send(
                self.qp.qpn,
                UdSend {
                    wr_id: SEND,
                    sgl,
                    ah,
                    imm: Some(self.qp.qpn.0),
                    signaled: true,
                },
            )
            .map_err(|e| AppError::post(0, "a SEND", e))?;
            self.sent += 1;
        }
        Ok(())
    }
}

impl Application for Udaddy {
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError> {
        pump(&mut self.cm, dev, now);
        while let Some(e) = self.cm.poll_event() {
            match e {
                CmEvent::SidrRequest { req } => {
                    if req.rdma_cm().is_none() {
                        // Status 2: rejected (not RDMA-CM's).
                        self.cm.sidr_reply(&req, 2, Qpn(0), 0, &[]);
                        continue;
                    }
                    self.cm.sidr_reply(&req, 0, self.qp.qpn, RDMA_UDP_QKEY, &[]);
                }
                CmEvent::SidrReply {
                    conn,
                    status,
                    qpn,
                    qkey,
                    ..
                } if Some(conn) == self.sidr => {
                    if status != 0 {
                        return Err(AppError::Failed(format!(
                            "the server refused the SIDR request: {} ({status})",
                            roce_proto::cm::sidr_status_name(status).unwrap_or("unknown status")
                        )));
                    }
                    self.ah = Some(AddressHandle {
                        local: self.local,
                        remote: self.peer_ip,
                        remote_port: roce_proto::ROCEV2_UDP_PORT,
                        dest_qpn: qpn,
                        qkey: QKey(qkey),
                    });
                    self.send_all(dev)?;
                }
                CmEvent::TimedOut { .. } => {
                    return Err(AppError::Failed(
                        "the server never answered the SIDR request".into(),
                    ))
                }
                _ => {}
            }
        }
        let q = self.qp;
        while let Some(c) = dev.poll_cq(q.send_cq).or_else(|| dev.poll_cq(q.recv_cq)) {
            if c.status != WcStatus::Success {
                return Err(AppError::Failed(format!("completion error {:?}", c.status)));
            }
            if c.opcode != WcOpcode::Recv {
                self.send_done += 1;
                continue;
            }
            if c.byte_len != self.spec.size + GRH_LEN as u32 {
                return Err(AppError::Failed(format!(
                    "a message of {} bytes, not -S {}",
                    c.byte_len as usize - GRH_LEN.min(c.byte_len as usize),
                    self.spec.size
                )));
            }
            self.received += 1;
            if self.ah.is_none() {
                // udaddy's reply address: where the datagram came from, the QPN in its
                // immediate.
                let (Some(src), Some(imm)) = (c.src, c.imm_data) else {
                    return Err(AppError::Failed(
                        "a message without the sender's QPN as immediate".into(),
                    ));
                };
                self.peer_ip = src.ip();
                self.ah = Some(AddressHandle {
                    local: self.local,
                    remote: src.ip(),
                    remote_port: roce_proto::ROCEV2_UDP_PORT,
                    dest_qpn: Qpn(imm & 0x00ff_ffff),
                    qkey: QKey(RDMA_UDP_QKEY),
                });
            }
        }
        if !self.client && self.received == self.spec.count {
            self.send_all(dev)?;
        }
        flush(&mut self.cm, dev);
        Ok(())
    }

    fn done(&self) -> bool {
        self.received == self.spec.count && self.send_done == self.spec.count
    }
}

/// How long a side waits for the peer's messages.
const SILENCE: Duration = Duration::from_secs(10);

async fn run(
    spec: UdaddySpec,
    client: bool,
    local: IpAddr,
    server: Option<IpAddr>,
    secrets: Secrets,
    link: LinkChoice,
    ready: impl FnOnce(),
) -> Result<UdaddyResult, DriverError> {
    let salt = if client { 0x0dc1 } else { 0x0d5e };
    let req = QpRequest {
        service: Service::Ud,
        qkey: QKey(RDMA_UDP_QKEY),
        count: 1,
        caps: QpCaps {
            max_send_wr: spec.count,
            max_recv_wr: spec.count,
            ..QpCaps::default()
        },
        srq: None,
        params: ConnectParams {
            mtu: spec.mtu,
            ..ConnectParams::default()
        },
    };
    let svc = service_id(PortSpace::UDP, spec.port);
    let (mut side, cm) = cm_side(&secrets, salt, req, local, link, (!client).then_some(svc))?;
    let mut app = Udaddy::new(&mut side, spec, client, cm).map_err(DriverError::from)?;
    if let Some(peer) = server {
        let now = side.ep.now();
        let private = rdma_cm_req_private(local, peer, 0xc000 | (spec.port & 0x3fff), &[]);
        let id = app
            .cm
            .sidr_request(now, local, peer, svc, &private)
            .map_err(|_| DriverError::Setup("cannot send a SIDR request".into()))?;
        app.sidr = Some(id);
        app.peer_ip = peer;
        flush(&mut app.cm, &mut side.ep.dev);
    }
    ready();
    let silence = if client {
        SILENCE
    } else {
        Duration::from_secs(365 * 24 * 3600)
    };
    let r = side
        .ep
        .run(&mut app, true, std::future::pending(), silence)
        .await;
    if let Err(e) = r {
        return Err(DriverError::Peer(format!(
            "{e} ({} of {} messages received, {} sent)",
            app.received, spec.count, app.send_done
        )));
    }
    Ok(UdaddyResult {
        role: if client { "client" } else { "server" },
        sent: u64::from(app.send_done),
        received: u64::from(app.received),
        peer: app.peer_ip.to_string(),
        peer_qpn: app.ah.map_or(0, |a| a.dest_qpn.0),
    })
}

/// `roce udaddy -b ADDR`: answers one client's SIDR request on `bind` and its messages.
pub fn serve(
    bind: IpAddr,
    spec: UdaddySpec,
    secrets: Secrets,
    link: LinkChoice,
    ready: impl FnOnce(),
) -> Result<UdaddyResult, DriverError> {
    spec.validate()?;
    runtime()?.block_on(run(spec, false, bind, None, secrets, link, ready))
}

/// `roce udaddy -s SERVER`: resolves the server's UD QP through SIDR and exchanges messages.
pub fn client(
    server: IpAddr,
    local: IpAddr,
    spec: UdaddySpec,
    secrets: Secrets,
    link: LinkChoice,
) -> Result<UdaddyResult, DriverError> {
    spec.validate()?;
    runtime()?.block_on(run(spec, true, local, Some(server), secrets, link, || {}))
}
