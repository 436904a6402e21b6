//! The interface between an endpoint's event loop and the program that runs on it.
use roce_stack::{Device, Instant, PostError};

/// What an endpoint runs on a [`Device`]: it posts work requests and consumes completions.
/// The [`Endpoint`](crate::Endpoint) loop calls [`Application::poll`] after every batch of
/// events; a simulation loop can call it the same way (see the `roce-apps` tests).
pub trait Application {
    /// Drains completion queues and posts what can be posted. An `Err` stops the run.
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError>;
    /// `true` when the application has nothing left to do.
    fn done(&self) -> bool;
}

/// Why an application stopped a run.
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
    /// The application's own reason.
    #[error("{0}")]
    Failed(String),
    /// A connection through the CM failed.
    #[error(transparent)]
    Cm(#[from] crate::connect::rdma_cm::CmFailure),
    /// A service ID resolution (SIDR) failed.
    #[error(transparent)]
    Sidr(#[from] crate::connect::sidr::SidrFailure),
    /// What the driver failed at for the application (creating its QPs, drawing its secrets).
    #[error(transparent)]
    Driver(Box<crate::DriverError>),
}

impl From<crate::DriverError> for AppError {
    fn from(e: crate::DriverError) -> Self {
        match e {
            // Not boxed twice.
            crate::DriverError::App(a) => a,
            e => Self::Driver(Box::new(e)),
        }
    }
}

impl AppError {
    /// Whose fault this failure is.
    pub fn fault(&self) -> crate::Fault {
        match self {
            Self::Cm(_) | Self::Sidr(_) => crate::Fault::Peer,
            Self::Failed(_) => crate::Fault::Check,
            Self::Post { .. } => crate::Fault::Local,
            Self::Driver(d) => d.fault(),
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
}
