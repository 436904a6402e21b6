//! A message channel over a connected RC QP: one JSON document per SEND, for an exchange
//! whose messages travel on one of the run's own QPs (roce's `--cm` applications: the QPs are
//! connected through the CM, and the application's messages follow on the last of them).
use std::collections::VecDeque;

use roce_proto::Qpn;
use roce_stack::{
    Access, Completion, CqHandle, Device, MrHandle, PdHandle, RecvRequest, SgList, Sge, WcStatus,
    WorkRequest, WrOp,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::qps::LocalQp;
use crate::{AppError, PeerFault};

/// Largest control message (one SEND).
pub const MAX_CONTROL_MESSAGE: usize = 4 << 20;

/// Receives the control channel keeps posted.
pub const RECV_SLOTS: usize = 2;

/// Control messages received and not yet taken, at most (a peer that floods is an error).
pub const MAX_INBOX: usize = 8;

/// Messages over an RC QP: one JSON document per SEND, at most [`MAX_CONTROL_MESSAGE`] bytes,
/// one SEND in flight, [`RECV_SLOTS`] receives posted (the peer's extra SENDs wait in RNR
/// retries).
pub struct MessageChannel {
    qpn: Qpn,
    send_cq: CqHandle,
    recv_cq: CqHandle,
    /// `[send slot | receive slot 0 | receive slot 1]`.
    mr: MrHandle,
    outbox: VecDeque<Vec<u8>>,
    sending: bool,
    inbox: VecDeque<Vec<u8>>,
}

impl MessageChannel {
    /// A channel on `qp` (connected, or about to be): registers its buffers, posts receives.
    pub fn new(dev: &mut Device, pd: PdHandle, qp: &LocalQp) -> Result<Self, AppError> {
        let mr = dev.reg_mr(
            pd,
            MAX_CONTROL_MESSAGE * (1 + RECV_SLOTS),
            Access::LOCAL_WRITE,
        );
        let c = Self {
            qpn: qp.qpn,
            send_cq: qp.send_cq,
            recv_cq: qp.recv_cq,
            mr,
            outbox: VecDeque::new(),
            sending: false,
            inbox: VecDeque::new(),
        };
        for slot in 0..RECV_SLOTS {
            c.post_recv(dev, slot)?;
        }
        Ok(c)
    }

    fn slot_sge(&self, dev: &Device, at: usize, len: u32) -> Result<Sge, AppError> {
        dev.mr(self.mr)
            .map(|m| m.sge((at * MAX_CONTROL_MESSAGE) as u64, len))
            .ok_or(AppError::Defect("the control region vanished"))
    }

    fn post_recv(&self, dev: &mut Device, slot: usize) -> Result<(), AppError> {
        let sge = self.slot_sge(dev, 1 + slot, MAX_CONTROL_MESSAGE as u32)?;
        dev.post_recv(
            self.qpn,
            RecvRequest {
                wr_id: slot as u64,
                sgl: SgList::one(sge),
            },
        )
        .map_err(|e| AppError::post(0, "a control receive", e))
    }

    /// Queues `msg`.
    pub fn send<T: Serialize>(&mut self, msg: &T) -> Result<(), AppError> {
        let v = serde_json::to_vec(msg).map_err(|e| AppError::check("a control message", e))?;
        if v.len() > MAX_CONTROL_MESSAGE {
            return Err(AppError::Defect("a control message larger than its slot"));
        }
        self.outbox.push_back(v);
        Ok(())
    }

    /// The next message received, decoded (`Some(Err)`: not a message of this protocol).
    pub fn recv<T: DeserializeOwned>(&mut self) -> Option<Result<T, PeerFault>> {
        self.inbox.pop_front().map(|b| {
            serde_json::from_slice(&b).map_err(|e| PeerFault::Unreadable {
                what: "control message",
                source: Box::new(e),
            })
        })
    }

    fn failed(what: &'static str, c: &Completion) -> AppError {
        AppError::completion(what, c)
    }

    /// Takes completions, re-posts receives, sends what is queued.
    pub fn poll(&mut self, dev: &mut Device) -> Result<(), AppError> {
        while let Some(c) = dev.poll_cq(self.recv_cq) {
            if c.status != WcStatus::Success {
                return Err(Self::failed("receive", &c));
            }
            if self.inbox.len() >= MAX_INBOX {
                return Err(PeerFault::Overran {
                    what: "control messages",
                    limit: MAX_INBOX,
                }
                .into());
            }
            let slot = (c.wr_id as usize).min(RECV_SLOTS - 1);
            let at = (1 + slot) * MAX_CONTROL_MESSAGE;
            let len = (c.byte_len as usize).min(MAX_CONTROL_MESSAGE);
            let bytes = dev
                .mr(self.mr)
                .map(|m| m.as_slice()[at..at + len].to_vec())
                .unwrap_or_default();
            self.inbox.push_back(bytes);
            self.post_recv(dev, slot)?;
        }
        while let Some(c) = dev.poll_cq(self.send_cq) {
            if c.status != WcStatus::Success {
                return Err(Self::failed("send", &c));
            }
            self.sending = false;
        }
        if !self.sending {
            if let Some(m) = self.outbox.pop_front() {
                if let Some(r) = dev.mr_mut(self.mr) {
                    r.as_mut_slice()[..m.len()].copy_from_slice(&m);
                }
                let sge = self.slot_sge(dev, 0, m.len() as u32)?;
                let sgl = if m.is_empty() {
                    SgList::new()
                } else {
                    SgList::one(sge)
                };
                dev.post_send(self.qpn, WorkRequest::new(0, WrOp::Send, sgl))
                    .map_err(|e| AppError::post(0, "a control send", e))?;
                self.sending = true;
            }
        }
        Ok(())
    }
}
