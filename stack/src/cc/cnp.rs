//! The notification point (receiver side of ECN): when a CE-marked packet makes a QP send a
//! CNP, and what that CNP looks like (RoCEv2, IBTA Annex A17: opcode 0x81; the pacing rule of the
//! DCQCN paper, Zhu et al., SIGCOMM 2015).
//!
//! [`CnpPacer`] implements the DCQCN paper's rule, per QP: the first CE mark is answered by a
//! CNP at once and opens a window of `interval` (default 50 µs); marks inside the window are
//! counted, and if at least one arrived, one CNP is sent when the window ends (opening the
//! next window). So a QP sends at most one CNP per interval, a congested flow keeps getting
//! one per interval, and no congestion signal is lost to the suppression.
//! [`CnpPolicy::DropWithinInterval`] is the simpler alternative (NVIDIA's
//! `min_time_between_cnps` as usually described): marks inside the window are dropped and
//! only a mark arriving after it triggers the next CNP.
//!
//! Wiring into a QP: on every received data packet of the QP whose IP ECN field is CE, call
//! [`CnpPacer::on_ce_mark`]; when it returns `true`, queue a CNP built by [`cnp_repr`] for the
//! peer QP (the QP's `dest_qp_num`). Fold [`CnpPacer::poll_timeout`] into the QP's timeout
//! and call [`CnpPacer::handle_timeout`] when it passes; `true` again means "send a CNP now".
//! CNPs are not paced by congestion control and carry no PSN semantics.
use core::time::Duration;

use roce_proto::{BthRepr, Opcode, PKey, PacketRepr, Psn, Qpn};

use crate::time::Instant;

/// The default minimum time between two CNPs of one QP (DCQCN paper N = 50 µs; the authors'
/// simulator `CNP_INTERVAL 50`).
pub const DEFAULT_CNP_INTERVAL: Duration = Duration::from_micros(50);

/// Length of a RoCEv2 CNP transport packet: BTH 12 + 16 reserved bytes + ICRC 4.
pub const CNP_TRANSPORT_LEN: usize = 12 + 16 + 4;

/// The 16 reserved (zero) bytes a CNP carries after its BTH.
pub static CNP_PAYLOAD: [u8; 16] = [0; 16];

/// The transport headers of a RoCEv2 CNP addressed to `dest_qp`, the QPN of the *sending* QP
/// of the congested flow (for RC: the receiving QP's `dest_qp_num`).
///
/// Opcode 0x81, SE/M/PadCnt/TVer 0, P_Key 0xFFFF, FECN 0, BECN 1, A 0, PSN 0, 16 zero bytes,
/// as in a ConnectX-4 Lx capture (scapy's test/contrib/roce.uts). Emit it with
/// [`PacketRepr::emit_with_icrc`] (ICRC seeded from the CNP's own IP/UDP headers); the IP
/// header should carry an ECN-capable codepoint and, typically, a high-priority DSCP (48 in
/// the capture).
pub fn cnp_repr(dest_qp: Qpn) -> PacketRepr<'static> {
    PacketRepr {
        bth: BthRepr {
            opcode: Opcode::CNP,
            pkey: PKey::DEFAULT,
            becn: true,
            dest_qp,
            psn: Psn::new(0),
            ..BthRepr::default()
        },
        payload: &CNP_PAYLOAD,
        ..PacketRepr::default()
    }
}

/// What to do with CE marks that arrive within the interval after a CNP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CnpPolicy {
    /// DCQCN paper: remember them and send one CNP when the interval ends.
    #[default]
    Deferred,
    /// Drop them; only a mark after the interval triggers a CNP.
    DropWithinInterval,
}

/// Per-QP CNP rate limiter of the notification point. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnpPacer {
    interval_ns: u64,
    policy: CnpPolicy,
    last_cnp: Option<Instant>,
    /// A mark arrived since `last_cnp` and is owed a CNP at `last_cnp + interval`.
    pending: bool,
    marks: u64,
    cnps: u64,
}

impl Default for CnpPacer {
    /// [`DEFAULT_CNP_INTERVAL`], [`CnpPolicy::Deferred`].
    fn default() -> Self {
        Self::new(DEFAULT_CNP_INTERVAL)
    }
}

impl CnpPacer {
    /// At most one CNP per `interval` (zero: one per mark), [`CnpPolicy::Deferred`].
    pub fn new(interval: Duration) -> Self {
        Self::with_policy(interval, CnpPolicy::Deferred)
    }

    /// At most one CNP per `interval` with the given policy.
    pub fn with_policy(interval: Duration, policy: CnpPolicy) -> Self {
        Self {
            interval_ns: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            policy,
            last_cnp: None,
            pending: false,
            marks: 0,
            cnps: 0,
        }
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }

    /// The policy.
    pub const fn policy(&self) -> CnpPolicy {
        self.policy
    }

    /// CE-marked packets seen.
    pub const fn marks(&self) -> u64 {
        self.marks
    }

    /// CNPs this pacer asked for (returned `true`).
    pub const fn cnps(&self) -> u64 {
        self.cnps
    }

    fn window_end(&self) -> Option<Instant> {
        self.last_cnp.map(|t| t.add_nanos(self.interval_ns))
    }

    fn fire(&mut self, at: Instant) -> bool {
        self.last_cnp = Some(at);
        self.pending = false;
        self.cnps += 1;
        true
    }

    /// The CNP asked for went on the wire at `at` (later than asked, when the egress was
    /// busy): the interval counts from there, so that CNPs are at least one interval apart
    /// on the wire too.
    pub fn on_sent(&mut self, at: Instant) {
        if self.last_cnp.is_some_and(|t| t < at) {
            self.last_cnp = Some(at);
        }
    }

    /// A CE-marked packet for this QP arrived at `now`. Returns `true` when a CNP must be
    /// sent now.
    pub fn on_ce_mark(&mut self, now: Instant) -> bool {
        self.marks += 1;
        match self.window_end() {
            // Inside the window: remember the mark (Deferred) or drop it.
            Some(end) if now < end => {
                if self.policy == CnpPolicy::Deferred {
                    self.pending = true;
                }
                false
            }
            // First mark, or the window is over (a CNP still owed for it, because
            // `handle_timeout` was not called in time, is covered by this one).
            _ => self.fire(now),
        }
    }

    /// When a deferred CNP is due (end of the current window, if a mark arrived in it).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.pending {
            self.window_end()
        } else {
            None
        }
    }

    /// Call when `now >= poll_timeout()`; returns `true` when a CNP must be sent now. Early or
    /// repeated calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) -> bool {
        match self.poll_timeout() {
            // The window starts when the CNP is actually sent.
            Some(due) if now >= due => self.fire(now),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_proto::Icrc;

    fn us(n: u64) -> Instant {
        Instant::from_micros(n)
    }

    #[test]
    fn first_mark_at_once_then_one_per_interval() {
        let mut p = CnpPacer::default();
        assert!(p.on_ce_mark(us(100)), "first mark answered at once");
        assert_eq!(p.poll_timeout(), None);
        // Marks inside [100, 150) µs are suppressed but owed a CNP at 150 µs.
        assert!(!p.on_ce_mark(us(101)));
        assert!(!p.on_ce_mark(us(149)));
        assert_eq!(p.poll_timeout(), Some(us(150)));
        assert!(!p.handle_timeout(us(149)), "early call is harmless");
        assert!(p.handle_timeout(us(150)));
        assert!(!p.handle_timeout(us(150)), "repeated call is harmless");
        assert_eq!(p.poll_timeout(), None);
        // No mark in [150, 200): nothing at 200; the next mark, after the window, goes at once.
        assert!(!p.handle_timeout(us(200)));
        assert!(p.on_ce_mark(us(230)));
        assert_eq!((p.marks(), p.cnps()), (4, 3));
    }

    #[test]
    fn mark_after_an_unserviced_window_fires_at_once() {
        let mut p = CnpPacer::default();
        assert!(p.on_ce_mark(us(0)));
        assert!(!p.on_ce_mark(us(10)));
        // The caller never called handle_timeout; a mark at 70 µs is past the window.
        assert!(p.on_ce_mark(us(70)));
        assert_eq!(p.poll_timeout(), None);
        assert_eq!(p.cnps(), 2);
    }

    #[test]
    fn drop_policy_and_zero_interval() {
        let mut p = CnpPacer::with_policy(DEFAULT_CNP_INTERVAL, CnpPolicy::DropWithinInterval);
        assert!(p.on_ce_mark(us(0)));
        assert!(!p.on_ce_mark(us(49)));
        assert_eq!(p.poll_timeout(), None);
        assert!(p.on_ce_mark(us(50)));
        let mut z = CnpPacer::new(Duration::ZERO);
        assert!(z.on_ce_mark(us(0)) && z.on_ce_mark(us(0)) && z.on_ce_mark(us(1)));
        assert_eq!(z.cnps(), 3);
    }

    /// The ConnectX-4 Lx CNP of scapy's test/contrib/roce.uts: IPv4 + UDP headers and the
    /// transport bytes.
    #[test]
    fn cnp_matches_connectx_vector_a() {
        let ip: [u8; 20] = [
            0x45, // version 4, IHL 5
            0xc2, // TOS: DSCP 48, ECN 10 = ECT(0)
            0x00, 0x3c, // total length 60
            0x71, 0x8c, // identification
            0x40, 0x00, // DF
            0x40, // TTL 64
            0x11, // UDP
            0x91, 0x61, // header checksum
            0x0a, 0x00, 0x11, 0x01, // src 10.0.17.1
            0x0a, 0x00, 0x12, 0x01, // dst 10.0.18.1
        ];
        // UDP: source port 0, destination 4791, length 40, checksum 0.
        let udp: [u8; 8] = [0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00];
        let want: [u8; CNP_TRANSPORT_LEN] = [
            0x81, // opcode CNP
            0x00, // SE 0, M 0, PadCnt 0, TVer 0
            0xff, 0xff, // P_Key
            0x40, // FECN 0, BECN 1
            0x00, 0x01, 0x18, // DestQP 0x118
            0x00, // A 0
            0x00, 0x00, 0x00, // PSN 0
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // 16 reserved bytes
            0x82, 0xfd, 0x00, 0x2a, // ICRC, least-significant byte first
        ];
        let repr = cnp_repr(Qpn(0x118));
        assert_eq!(repr.buffer_len(), CNP_TRANSPORT_LEN);
        let seed = Icrc::rocev2_ipv4(&ip, &udp).unwrap();
        let mut buf = [0u8; CNP_TRANSPORT_LEN];
        assert_eq!(repr.emit_with_icrc(&mut buf, &seed), Ok(CNP_TRANSPORT_LEN));
        assert_eq!(buf, want);
        assert_eq!(PacketRepr::parse_bytes(&want), Ok(repr));
    }
}
