//! Sending on a non-blocking socket whose buffer may be full, without tokio's readiness in
//! the common case: shared by the UDP link ([`crate::socket`]) and the packet link
//! ([`crate::packet`]), neither of which depends on the other for it.
use std::io;

use tokio::io::Interest;

/// Longest a send waits for a full socket buffer to drain before it fails: nothing drains
/// it when the interface has stopped (a link paused for good, a queue that never empties).
pub const SEND_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs `send` (one non-blocking send on `sock`) directly, not through tokio's readiness; when
/// the buffer is full, registers a duplicate of `sock` with tokio for as long as it takes to
/// drain (dropping it deregisters it before closing the duplicate) and tries again, at most
/// [`SEND_STALL`] in all.
pub(crate) async fn send_when_writable<T>(
    sock: &impl std::os::fd::AsFd,
    mut send: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let mut r = send();
    if !matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
        return r;
    }
    let waiter = tokio::net::UdpSocket::from_std(std::net::UdpSocket::from(
        sock.as_fd().try_clone_to_owned()?,
    ))?;
    let give_up = tokio::time::Instant::now() + SEND_STALL;
    while matches!(&r, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
        tokio::time::timeout_at(give_up, waiter.writable())
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the send buffer stayed full for {} s", SEND_STALL.as_secs()),
                )
            })??;
        // Through tokio, so that a still-full buffer clears its readiness.
        r = waiter.try_io(Interest::WRITABLE, &mut send);
    }
    r
}
