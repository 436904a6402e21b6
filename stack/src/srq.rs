//! Shared receive queues (IBTA Vol 1 §10.2.9, §11.2.3): one queue of receive requests that
//! several RC QPs of a protection domain consume from, in posting order, whichever QP the
//! message arrives on. A QP created on an SRQ has no receive queue of its own (posting to it
//! is refused); when the SRQ is empty its QPs answer with RNR NAKs, as for an empty receive
//! queue. The limit event (§11.6.2): once armed with a limit, the first time fewer requests
//! than the limit remain, the device raises [`AsyncEvent::SrqLimitReached`] and disarms it
//! (re-arm with [`crate::Device::arm_srq_limit`]).
use std::collections::VecDeque;

use crate::handle::PdHandle;
use crate::wr::RecvRequest;

/// A shared receive queue (index into its device's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqHandle(pub(crate) u32);

/// An asynchronous event of a device (IBTA Vol 1 §11.6.2; verbs' `ibv_get_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// Fewer receive requests than the armed limit remain on this SRQ.
    SrqLimitReached(SrqHandle),
}

/// A shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub(crate) pd: PdHandle,
    pub(crate) max_wr: usize,
    pub(crate) queue: VecDeque<RecvRequest>,
    /// The armed limit.
    pub(crate) limit: Option<usize>,
}

/// What a QP's responder takes its receive requests from when it has an SRQ.
pub(crate) struct SrqCtx<'a> {
    pub(crate) srqs: &'a mut [Srq],
    pub(crate) events: &'a mut VecDeque<AsyncEvent>,
}

impl SrqCtx<'_> {
    pub(crate) fn is_empty(&self, h: SrqHandle) -> bool {
        self.srqs
            .get(h.0 as usize)
            .is_none_or(|s| s.queue.is_empty())
    }

    pub(crate) fn pop(&mut self, h: SrqHandle) -> Option<RecvRequest> {
        let s = self.srqs.get_mut(h.0 as usize)?;
        let r = s.queue.pop_front()?;
        if s.limit.is_some_and(|l| s.queue.len() < l) {
            s.limit = None;
            if self.events.len() < 1024 {
                self.events.push_back(AsyncEvent::SrqLimitReached(h));
            }
        }
        Some(r)
    }
}
