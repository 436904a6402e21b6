//! The interface between an endpoint's event loop and the program that runs on it.
use roce_proto::Qpn;
use roce_stack::{Completion, Device, Instant, PostError, WcStatus};

/// What an endpoint runs on a [`Device`]: it posts work requests and consumes completions.
/// The [`Endpoint`](crate::Endpoint) loop calls [`Application::poll`] after every batch of
/// events; a simulation loop can call it the same way (see the `roce-apps` tests).
pub trait Application {
    /// Drains completion queues and posts what can be posted. An `Err` stops the run.
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError>;
    /// `true` when the application has nothing left to do.
    fn done(&self) -> bool;
}

/// Why an application stopped a run, or could not start one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The device refused a post: a QP in ERR, a queue full that should not be.
    #[error("qp {qp}: posting {what}: {source}")]
    Post {
        /// The application's index of the QP.
        qp: usize,
        /// What was being posted.
        what: String,
        /// The device's reason.
        #[source]
        source: PostError,
    },
    /// A work request completed in error (the peer's NAK, retries exhausted, a flush).
    #[error("QP {qpn}: {what} (wr_id {wr_id}) completed with {status:?}")]
    Completion {
        /// The local QP.
        qpn: Qpn,
        /// The work request's id.
        wr_id: u64,
        /// What the request was ("a SEND", "a receive", "a control message").
        what: &'static str,
        /// The device's status.
        status: WcStatus,
    },
    /// A message of a size this end cannot take.
    #[error("QP {qpn}: a message of {got} bytes, not {want}{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    Size {
        /// The local QP it arrived on.
        qpn: Qpn,
        /// Its length.
        got: u64,
        /// The length this end expects (or its most).
        want: u64,
        /// What to do about it, in the tool's terms ("both sides need the same -s").
        hint: Option<&'static str>,
    },
    /// Data that came back differs from what was sent.
    #[error("data mismatch in {what} {n}: sent {sent:?}, got back {got:?}")]
    Mismatch {
        /// What was compared ("ping").
        what: &'static str,
        /// Its number.
        n: u64,
        /// What was sent (printable).
        sent: String,
        /// What came back (printable).
        got: String,
    },
    /// The peer broke the application's protocol, left it early or refused it.
    #[error("{0}")]
    Peer(#[from] crate::PeerFault),
    /// An application's own typed check, of what the peer sent or of its own plan (downcast
    /// `source` to tell).
    #[error("{what}: {source}")]
    Check {
        /// What was checked.
        what: String,
        /// Why it failed.
        #[source]
        source: crate::error::BoxError,
    },
    /// A resource of the application's own (a region, an address handle) is gone, or a
    /// request it cannot make: a defect here, not the peer.
    #[error("{0}")]
    Defect(&'static str),
    /// A connection through the CM failed.
    #[error(transparent)]
    Cm(#[from] crate::connect::rdma_cm::CmFailure),
    /// A service ID resolution (SIDR) failed.
    #[error(transparent)]
    Sidr(#[from] crate::connect::sidr::SidrFailure),
    /// This host could not set something up for the application (its secrets).
    #[error(transparent)]
    Setup(#[from] crate::SetupFailure),
    /// The device refused to create the application's QPs, CQs or SRQ.
    #[error(transparent)]
    Create(#[from] roce_stack::CreateError),
    /// A QP refused a state transition.
    #[error("modify QP {qpn}: {source}")]
    Modify {
        /// The QP.
        qpn: Qpn,
        /// The device's reason.
        #[source]
        source: roce_stack::ModifyError,
    },
}

impl AppError {
    /// Whose fault this failure is.
    pub fn fault(&self) -> crate::Fault {
        match self {
            Self::Cm(_) | Self::Sidr(_) | Self::Peer(_) => crate::Fault::Peer,
            Self::Completion { .. } | Self::Size { .. } | Self::Mismatch { .. } => {
                crate::Fault::Check
            }
            Self::Check { .. } => crate::Fault::Check,
            Self::Post { .. }
            | Self::Defect(_)
            | Self::Setup(_)
            | Self::Create(_)
            | Self::Modify { .. } => crate::Fault::Local,
        }
    }

    /// A refused post of `what` on the application's QP `qp`.
    pub fn post(qp: usize, what: impl Into<String>, source: PostError) -> Self {
        Self::Post {
            qp,
            what: what.into(),
            source,
        }
    }

    /// [`AppError::Completion`] for completion `c` of `what`.
    pub fn completion(what: &'static str, c: &Completion) -> Self {
        Self::Completion {
            qpn: c.qp_num,
            wr_id: c.wr_id,
            what,
            status: c.status,
        }
    }

    /// [`AppError::Check`]: `what` failed for `source`'s reason.
    pub fn check(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Check {
            what: what.into(),
            source: Box::new(source),
        }
    }
}
