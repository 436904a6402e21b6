//! Who may connect to this process: the allow-list of peer prefixes (`--allow` in the CLI),
//! consulted wherever a new peer knocks (a TCP accept of a control or exchange connection, a
//! CM REQ or SIDR_REQ on QP1). Unset or empty: everyone. Connected QPs need no list: each
//! takes datagrams only from the peer it was connected to.
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub use ipnetwork::IpNetwork;

static ALLOWED: OnceLock<Vec<IpNetwork>> = OnceLock::new();
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Sets the process's allow-list (once; later calls are ignored and return `false`).
pub fn set_allowed(prefixes: Vec<IpNetwork>) -> bool {
    ALLOWED.set(prefixes).is_ok()
}

/// `true` when `peer` may connect: no list was set, the list is empty, or a prefix of it
/// holds the address (an IPv4-mapped IPv6 address counts as its IPv4 address).
pub fn allowed(peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    match ALLOWED.get() {
        None => true,
        Some(list) => list.is_empty() || list.iter().any(|n| n.contains(peer)),
    }
}

/// Checks `peer`; a refusal is counted and said in one line on stderr (`what`: what it
/// tried, such as "a TCP connection" or "a CM REQ"), at most once per refused address in a
/// row so that a flood is one line.
pub fn admit(peer: IpAddr, what: &str) -> bool {
    if allowed(peer) {
        return true;
    }
    static LAST: std::sync::Mutex<Option<IpAddr>> = std::sync::Mutex::new(None);
    REFUSED.fetch_add(1, Ordering::Relaxed);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if *last != Some(peer) {
        eprintln!("roce: refused {what} from {peer}: not an allowed peer");
        *last = Some(peer);
    }
    false
}

/// Knocks refused so far in this process.
pub fn refused() -> u64 {
    REFUSED.load(Ordering::Relaxed)
}
