//! The IB CM (IBTA Vol 1 ch. 12) and RDMA-CM (Annex A11) as an exchange: the sans-IO
//! [`roce_stack::cm::Cm`] runs inside the endpoint's loop, its MADs moving through the device's
//! QP1 ([`pump`], [`flush`]); what a connection settled connects a QP ([`connect_qp`]). The
//! applications that connect through the CM (`workload`, `perf`, `kv` with `--cm`, `rping`)
//! share these.
use roce_proto::{Ecn, ROCEV2_UDP_PORT};
use roce_stack::cm::{Cm, CmConfig, Negotiated};
use roce_stack::gsi::OutgoingMad;
use roce_stack::{CcConfig, ConnectParams, Device, Instant, PathConfig};

use super::{QpRequest, Side};
use crate::qps::{LocalQp, ALL_REMOTE};
use crate::{AppError, DriverError, LinkChoice, Secrets};

/// Moves MADs from the device's QP1 to the CM and runs the CM's timers that are due: after
/// it, `cm.poll_event()` holds what happened.
pub fn pump(cm: &mut Cm, dev: &mut Device, now: Instant) {
    while let Some(m) = dev.gsi().take() {
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
        .map_err(|e| AppError::Failed(format!("modify QP {}: {e}", q.qpn)))?;
    if !matches!(cc, CcConfig::None) {
        dev.set_congestion_control(q.qpn, cc.build(line_rate_bps));
    }
    Ok(())
}

/// A CM whose communication and transaction IDs come from `secrets` (`salt`: which end).
pub fn cm_config(secrets: &Secrets, salt: u64) -> Result<CmConfig, DriverError> {
    Ok(CmConfig {
        seed: secrets.cm_seed(salt)?,
        ..CmConfig::default()
    })
}

/// One end of an exchange through the CM: the [`Side`] `req` asks for on `local` (UDP 4791),
/// its device, start PSNs and CM IDs from `secrets` (`salt`: which end), and the CM, listening
/// on `listen` when this end is a server.
pub fn cm_side(
    secrets: &Secrets,
    salt: u64,
    req: QpRequest,
    local: std::net::IpAddr,
    link: LinkChoice,
    listen: Option<u64>,
) -> Result<(Side, Cm), DriverError> {
    let side = Side::new(
        secrets.device(salt)?,
        req,
        secrets.start_psns(req.count, salt)?,
        std::net::SocketAddr::new(local, ROCEV2_UDP_PORT),
        link,
    )?;
    let mut cm = Cm::new(cm_config(secrets, salt)?);
    if let Some(svc) = listen {
        cm.listen(svc);
    }
    Ok((side, cm))
}
