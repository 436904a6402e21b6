//! Handles of the verbs objects a [`Device`](crate::Device) owns: protection domains, memory
//! regions and completion queues (IBTA Vol 1 §10.2, §10.6, §11.2.8). A handle is an index into
//! its device's tables; it means nothing on another device. Queue pairs are named by their
//! [`Qpn`](roce_proto::Qpn) instead, which is what the wire carries.

/// A protection domain (IBTA Vol 1 §10.2.3): QPs and memory regions of one domain only
/// reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdHandle(pub(crate) u32);

/// A registered memory region (index into the device's region table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrHandle(pub(crate) u32);

/// A completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqHandle(pub(crate) u32);

impl CqHandle {
    /// The queue's index on its device (0 for the first CQ created).
    pub const fn index(self) -> u32 {
        self.0
    }
}
