//! A client's half of the session: its requests (REQs, SIDR_REQs), asked all at once or one
//! at a time, and asked again while the server is not listening.
use std::net::IpAddr;

use roce_proto::rdma_cm::{service_id, PortSpace};
use roce_proto::Psn;
use roce_stack::cm::reason::INVALID_SERVICE_ID;
use roce_stack::cm::{rdma_cm_req_private, rdma_cm_service_id, ConnectOptions, QpOffer};
use roce_stack::{ConnectParams, Instant};

use super::{CmSession, Role, Slot, SlotState, Terms};
use crate::connect::qps::LocalQp;
use crate::connect::rdma_cm::CmFailure;
use crate::Secrets;

/// One more connection a client asks for ([`CmSession::ask`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The QP to connect.
    pub qp: LocalQp,
    /// Its first PSN.
    pub psn: Psn,
    /// READ/atomic requests it takes as a responder.
    pub responder_resources: u8,
    /// READ/atomic requests it keeps outstanding.
    pub initiator_depth: u8,
    /// The path MTU asked for.
    pub mtu: u32,
    /// The local ACK timeout code asked for.
    pub local_ack_timeout: u8,
    /// The attributes the CM does not settle.
    pub base: ConnectParams,
    /// The source port RDMA-CM's header names.
    pub src_port: u16,
    /// The consumer's private data after RDMA-CM's header.
    pub data: Vec<u8>,
}

/// A client's request, kept to be sent again.
#[derive(Debug, Clone)]
pub(super) enum Request {
    Connect(ConnectOptions),
    Resolve {
        local: IpAddr,
        peer: IpAddr,
        service_id: u64,
        private: Vec<u8>,
    },
}

impl CmSession {
    /// A client at `local` of `peer` for the QPs `qps` (each with its first PSN): one REQ
    /// each, carrying RDMA-CM's header and `data(i)`, sent with the first
    /// [`CmSession::flush`].
    #[allow(clippy::too_many_arguments)]
    pub fn client_with(
        local: IpAddr,
        now: Instant,
        qps: &[(LocalQp, Psn)],
        terms: Terms,
        secrets: &Secrets,
        salt: u64,
        name: &'static str,
        peer: IpAddr,
        data: impl Fn(usize) -> Vec<u8>,
    ) -> Result<Self, crate::DriverError> {
        let mut s = Self::new(now, &[], terms, secrets, salt, name, Role::Client { peer })?;
        s.peer = Some(peer);
        s.local = local;
        for (i, &(qp, psn)) in qps.iter().enumerate() {
            s.ask(
                now,
                Ask {
                    qp,
                    psn,
                    responder_resources: terms.responder_resources,
                    initiator_depth: terms.initiator_depth,
                    mtu: terms.mtu,
                    local_ack_timeout: terms.local_ack_timeout,
                    base: terms.base,
                    src_port: terms.src_port.of(i),
                    data: data(i),
                },
            )?;
        }
        Ok(s)
    }

    /// Client: asks for one more connection (a REQ, sent with the next
    /// [`CmSession::flush`]); returns its index.
    pub fn ask(&mut self, now: Instant, a: Ask) -> Result<usize, CmFailure> {
        let Role::Client { peer } = self.role else {
            return Err(CmFailure::CannotAsk(INVALID_SERVICE_ID));
        };
        let o = ConnectOptions {
            local: self.local,
            peer,
            service_id: rdma_cm_service_id(self.terms.port),
            offer: QpOffer {
                qpn: a.qp.qpn,
                starting_psn: a.psn,
                responder_resources: a.responder_resources,
                initiator_depth: a.initiator_depth,
                rnr_retry_count: self.terms.rnr_retry,
            },
            mtu: a.mtu,
            retry_count: self.terms.retry_count,
            local_ack_timeout: a.local_ack_timeout,
            private_data: rdma_cm_req_private(self.local, peer, a.src_port, &a.data),
        };
        let mut slot = Slot::new(a.qp, a.psn, a.base);
        slot.asked = Some(Request::Connect(o));
        self.slots.push(slot);
        let i = self.slots.len() - 1;
        self.send_request(now, i)?;
        Ok(i)
    }

    /// Client: asks which UD QP serves the server's RDMA-CM port in the UDP port space (a
    /// SIDR_REQ naming `src_port` in RDMA-CM's header), for this end's UD QP `qp`; the
    /// answer is [`super::SessionEvent::Resolved`]. Returns the resolution's index.
    pub fn resolve(
        &mut self,
        now: Instant,
        qp: LocalQp,
        src_port: u16,
    ) -> Result<usize, CmFailure> {
        let Role::Client { peer } = self.role else {
            return Err(CmFailure::CannotAsk(INVALID_SERVICE_ID));
        };
        let mut slot = Slot::new(qp, Psn::new(0), self.terms.base);
        slot.asked = Some(Request::Resolve {
            local: self.local,
            peer,
            service_id: service_id(PortSpace::UDP, self.terms.port),
            private: rdma_cm_req_private(self.local, peer, src_port, &[]),
        });
        self.slots.push(slot);
        let i = self.slots.len() - 1;
        self.send_request(now, i)?;
        Ok(i)
    }

    /// Sends (again) client slot `i`'s request.
    pub(super) fn send_request(&mut self, now: Instant, i: usize) -> Result<(), CmFailure> {
        let s = &mut self.slots[i];
        let conn = match &s.asked {
            Some(Request::Connect(o)) => self.cm.connect(now, o),
            Some(Request::Resolve {
                local,
                peer,
                service_id,
                private,
            }) => self
                .cm
                .sidr_request(now, *local, *peer, *service_id, private),
            None => return Ok(()),
        }
        .map_err(CmFailure::CannotAsk)?;
        s.conn = Some(conn);
        s.state = SlotState::Asked;
        s.again_at = None;
        Ok(())
    }

    /// Client: the server refused slot `i`'s request as not listening: asked again a
    /// while later, unless the retries are spent (then `false`).
    pub(super) fn not_listening(&mut self, now: Instant, i: usize) -> bool {
        let s = &mut self.slots[i];
        if s.refusals >= self.terms.not_listening_retries {
            return false;
        }
        s.refusals += 1;
        s.conn = None;
        s.again_at = Some(now.add_nanos(Self::RETRY.as_nanos() as u64));
        true
    }
}
