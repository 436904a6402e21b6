//! The IB CM (IBTA Vol 1 ch. 12) and RDMA-CM (Annex A11) inside the endpoint's loop: the
//! sans-IO [`roce_stack::cm::Cm`]'s MADs move through the device's QP1 ([`pump`], [`flush`]);
//! what a connection settled connects a QP ([`connect_qp`]). The sessions
//! ([`super::cm_session`], [`super::sidr`]) and perftest's exchange ([`super::perftest`]) are
//! built on these; applications use the sessions.
use std::net::IpAddr;

use roce_proto::{Ecn, ROCEV2_UDP_PORT};
use roce_stack::cm::{Cm, CmConfig, Negotiated};
use roce_stack::gsi::OutgoingMad;
use roce_stack::{CcConfig, ConnectParams, Device, Instant, PathConfig};

use super::{QpRequest, Side};
use crate::connect::qps::{LocalQp, ALL_REMOTE};
use crate::{AppError, DriverError, LinkChoice, Secrets};

/// Moves MADs from the device's QP1 to the CM and runs the CM's timers that are due: after
/// it, `cm.poll_event()` holds what happened.
/// A REQ or SIDR_REQ (a new peer asking for a connection) from an address the allow-list
/// refuses ([`crate::allow`]) is dropped here, unanswered.
pub fn pump(cm: &mut Cm, dev: &mut Device, now: Instant) {
    while let Some(m) = dev.gsi().take() {
        // The MAD header's attribute ID (bytes 16-17): REQ 0x0010, SIDR_REQ 0x0017.
        let asks = matches!(m.mad.get(16..18), Some([0, 0x10]) | Some([0, 0x17]));
        if asks && !crate::allow::admit(m.from.ip(), "a CM REQ") {
            continue;
        }
        cm.handle_mad(now, m.from.ip(), m.to, &m.mad);
    }
    if cm.poll_timeout().is_some_and(|t| t <= now) {
        cm.handle_timeout(now);
    }
}

/// Hands the CM's outgoing MADs to the device's QP1.
pub fn flush(cm: &mut Cm, dev: &mut Device) {
    while let Some(o) = cm.poll_transmit() {
        dev.gsi().send(OutgoingMad {
            local: o.local,
            remote: o.peer,
            remote_port: ROCEV2_UDP_PORT,
            mad: o.mad,
        });
    }
}

/// Connects QP `q` with what the CM settled, on `base` (RNR timer, and the remote access every
/// application here grants), with congestion control `cc` clamped to `line_rate_bps`.
pub fn connect_qp(
    dev: &mut Device,
    q: &LocalQp,
    n: &Negotiated,
    base: &ConnectParams,
    cc: CcConfig,
    line_rate_bps: u64,
) -> Result<(), AppError> {
    let sport = PathConfig::udp_sport(q.qpn.0, n.remote_qpn.0);
    let base = ConnectParams {
        path: PathConfig {
            local: n.local,
            remote: n.peer,
            src_port: sport,
            remote_src_port: sport,
            local_port: ROCEV2_UDP_PORT,
            remote_port: ROCEV2_UDP_PORT,
            ecn: Ecn::Ect0,
            verify_icrc: true,
        },
        access: ALL_REMOTE,
        ..*base
    };
    dev.connect_qp(q.qpn, &n.connect_params(base))
        .map_err(|source| AppError::Modify { qpn: q.qpn, source })?;
    if !matches!(cc, CcConfig::None) {
        dev.set_congestion_control(q.qpn, cc.build(line_rate_bps));
    }
    Ok(())
}

/// Takes QP `q` back to INIT with `base`'s attributes (through RESET: its queues emptied)
/// and drains its completions: a set-up given up leaves nothing of it behind.
pub fn back_to_init(dev: &mut Device, q: &LocalQp, base: &ConnectParams) {
    let _ = dev.modify_qp(q.qpn, &roce_stack::QpAttr::to(roce_stack::QpState::Reset));
    let _ = dev.modify_qp(q.qpn, &base.init_attr());
    while dev.poll_cq(q.send_cq).is_some() {}
    while dev.poll_cq(q.recv_cq).is_some() {}
}

/// A CM whose communication and transaction IDs come from `secrets` (`salt`: which end).
pub fn cm_config(secrets: &Secrets, salt: u64) -> Result<CmConfig, DriverError> {
    Ok(CmConfig {
        seed: secrets.cm_seed(salt)?,
        ..CmConfig::default()
    })
}

/// One end of an exchange through the CM: the [`Side`] `req` asks for on `local` (UDP 4791),
/// its device and start PSNs from `secrets` (`salt`: which end). The CM is the session's
/// ([`super::cm_session::CmSession`], [`super::sidr::SidrSession`]).
pub fn cm_end(
    secrets: &Secrets,
    salt: u64,
    req: QpRequest,
    local: IpAddr,
    link: LinkChoice,
) -> Result<Side, DriverError> {
    Side::new(
        secrets.device(salt)?,
        req,
        secrets.start_psns(req.count, salt)?,
        std::net::SocketAddr::new(local, ROCEV2_UDP_PORT),
        link,
    )
}

/// Why a connection through the CM failed, as an application reports it (IBTA Vol 1 12.6:
/// a REJ with its reason, no answer within the CM's retries, or a local refusal to ask).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmFailure {
    /// The peer answered with a REJ (reasons: IBTA Vol 1 Table 112).
    #[error("{} rejected the connection: {} ({reason}){}", who(peer), reason_name(*reason), rej_hint(*reason, *port, text))]
    Rejected {
        /// The peer, where known.
        peer: Option<IpAddr>,
        /// The REJ's reason code.
        reason: u16,
        /// The RDMA-CM port asked for, where it explains the reason (nothing listens there).
        port: Option<u16>,
        /// The printable text of the REJ's private data (roce puts its reason there).
        text: String,
    },
    /// No answer after the CM's tries.
    #[error("no CM answer from {peer} (UDP 4791) after {tries} tries")]
    NoAnswer {
        /// The peer asked.
        peer: IpAddr,
        /// The tries made.
        tries: u32,
    },
    /// A connected peer stopped answering the CM.
    #[error("the peer stopped answering the CM (no REP, RTU or DREP)")]
    Stopped,
    /// The local CM refused to send the request (its reason code).
    #[error("cannot ask for a connection: {}", reason_name(*.0))]
    CannotAsk(u16),
}

impl CmFailure {
    /// A REJ from `peer` with `reason` and `private_data`; `port` the RDMA-CM port asked for.
    pub fn rejected(
        peer: Option<IpAddr>,
        port: Option<u16>,
        reason: u16,
        private_data: &[u8],
    ) -> Self {
        Self::Rejected {
            peer,
            reason,
            port,
            text: printable(private_data),
        }
    }

    /// No answer from `peer` after the tries of the default CM configuration.
    pub fn no_answer(peer: IpAddr) -> Self {
        Self::NoAnswer {
            peer,
            tries: u32::from(CmConfig::default().max_retries) + 1,
        }
    }
}

/// The printable ASCII of `b` up to its first NUL: the text a REJ's or DREQ's private data
/// carries, with nothing a peer could use to garble a terminal.
pub fn printable(b: &[u8]) -> String {
    b.iter()
        .take_while(|&&x| x != 0)
        .map(|&x| char::from(x))
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(256)
        .collect()
}

fn who(peer: &Option<IpAddr>) -> String {
    peer.map_or_else(|| "the server".to_string(), |p| p.to_string())
}

fn reason_name(reason: u16) -> &'static str {
    roce_proto::cm::rej_reason_name(reason).unwrap_or("unknown reason")
}

fn rej_hint(reason: u16, port: Option<u16>, text: &str) -> String {
    match port {
        Some(p) if reason == roce_stack::cm::reason::INVALID_SERVICE_ID => {
            format!(" (nothing listens on RDMA-CM port {p})")
        }
        _ if text.is_empty() => String::new(),
        _ => format!(" ({text})"),
    }
}

/// Why a SIDR client got no UD QP.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SidrFailure {
    /// The server answered with a status other than 0 (IBTA Vol 1 Table 122).
    #[error("{peer} refused the SIDR request: {} ({status})", roce_proto::cm::sidr_status_name(*status).unwrap_or("unknown status"))]
    Refused {
        /// The server.
        peer: IpAddr,
        /// The SIDR_REP's status.
        status: u8,
    },
    /// No SIDR_REP after the CM's tries.
    #[error("{0} never answered the SIDR request (UDP 4791)")]
    NoAnswer(IpAddr),
    /// The local CM could not send one.
    #[error("cannot send a SIDR request")]
    CannotAsk,
}

impl From<CmFailure> for DriverError {
    fn from(e: CmFailure) -> Self {
        Self::App(AppError::Cm(e))
    }
}
