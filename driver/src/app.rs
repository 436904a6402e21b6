//! The interface between an endpoint's event loop and the program that runs on it.
use roce_stack::{Device, Instant};

pub use crate::error::AppError;

/// What an endpoint runs on a [`Device`]: it posts work requests and consumes completions.
/// The [`Endpoint`](crate::Endpoint) loop calls [`Application::poll`] after every batch of
/// events; a simulation loop can call it the same way (see the `roce-apps` tests).
pub trait Application {
    /// Drains completion queues and posts what can be posted. An `Err` stops the run.
    fn poll(&mut self, dev: &mut Device, now: Instant) -> Result<(), AppError>;
    /// `true` when the application has nothing left to do.
    fn done(&self) -> bool;
}
