//! How far a decode got: the hook [`crate::decode()`], [`crate::parallel`] and
//! [`crate::source`] report through, on its own so that none of them imports another for it.

/// Where a decode reports how far it got (the `roce` command line draws a progress bar).
pub trait Progress: Sync {
    /// Decoding a file of `total` bytes starts.
    fn start(&mut self, _total: u64) {}
    /// `done` bytes of the input have been read.
    fn advance(&self, done: u64);
    /// Decoding ended.
    fn finish(&mut self) {}
}

/// No progress reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn advance(&self, _done: u64) {}
}
