//! Counters: what the transport did and what it dropped, by reason.

/// Why a received datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Not a structurally valid transport packet (too short, bad pad, TVer ≠ 0, …).
    Malformed,
    /// ICRC mismatch.
    BadIcrc,
    /// No QP with the destination QPN.
    UnknownQp,
    /// The QP's state does not accept packets (RESET, INIT, ERR) or this kind of packet.
    WrongState,
    /// Not an RC opcode this QP handles.
    BadOpcode,
    /// P_Key mismatch.
    BadPkey,
    /// A response for a PSN never sent.
    GhostResponse,
    /// A response for a PSN already acknowledged, or otherwise not expected.
    StaleResponse,
    /// Out-of-sequence request after the sequence NAK was already sent.
    OutOfSequence,
    /// Duplicate READ/atomic with no matching responder resource.
    NoResource,
    /// The response queue was full.
    ResponseQueueFull,
    /// Not from the QP's peer address (or not to its own): an off-path sender.
    WrongAddress,
}

/// Drop counters, one per [`DropReason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Drops {
    /// [`DropReason::Malformed`].
    pub malformed: u64,
    /// [`DropReason::BadIcrc`].
    pub bad_icrc: u64,
    /// [`DropReason::UnknownQp`].
    pub unknown_qp: u64,
    /// [`DropReason::WrongState`].
    pub wrong_state: u64,
    /// [`DropReason::BadOpcode`].
    pub bad_opcode: u64,
    /// [`DropReason::BadPkey`].
    pub bad_pkey: u64,
    /// [`DropReason::GhostResponse`].
    pub ghost_response: u64,
    /// [`DropReason::StaleResponse`].
    pub stale_response: u64,
    /// [`DropReason::OutOfSequence`].
    pub out_of_sequence: u64,
    /// [`DropReason::NoResource`].
    pub no_resource: u64,
    /// [`DropReason::ResponseQueueFull`].
    pub response_queue_full: u64,
    /// [`DropReason::WrongAddress`].
    #[cfg_attr(feature = "serde", serde(default))]
    pub wrong_address: u64,
}

impl Drops {
    /// Counts one drop.
    pub fn count(&mut self, r: DropReason) {
        let c = match r {
            DropReason::Malformed => &mut self.malformed,
            DropReason::BadIcrc => &mut self.bad_icrc,
            DropReason::UnknownQp => &mut self.unknown_qp,
            DropReason::WrongState => &mut self.wrong_state,
            DropReason::BadOpcode => &mut self.bad_opcode,
            DropReason::BadPkey => &mut self.bad_pkey,
            DropReason::GhostResponse => &mut self.ghost_response,
            DropReason::StaleResponse => &mut self.stale_response,
            DropReason::OutOfSequence => &mut self.out_of_sequence,
            DropReason::NoResource => &mut self.no_resource,
            DropReason::ResponseQueueFull => &mut self.response_queue_full,
            DropReason::WrongAddress => &mut self.wrong_address,
        };
        *c += 1;
    }

    /// Sum of all drops.
    pub fn total(&self) -> u64 {
        self.malformed
            + self.bad_icrc
            + self.unknown_qp
            + self.wrong_state
            + self.bad_opcode
            + self.bad_pkey
            + self.ghost_response
            + self.stale_response
            + self.out_of_sequence
            + self.no_resource
            + self.response_queue_full
            + self.wrong_address
    }

    fn add(&mut self, o: &Self) {
        self.malformed += o.malformed;
        self.bad_icrc += o.bad_icrc;
        self.unknown_qp += o.unknown_qp;
        self.wrong_state += o.wrong_state;
        self.bad_opcode += o.bad_opcode;
        self.bad_pkey += o.bad_pkey;
        self.ghost_response += o.ghost_response;
        self.stale_response += o.stale_response;
        self.out_of_sequence += o.out_of_sequence;
        self.no_resource += o.no_resource;
        self.response_queue_full += o.response_queue_full;
        self.wrong_address += o.wrong_address;
    }
}

/// NAK counters by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Naks {
    /// PSN sequence error.
    pub seq_err: u64,
    /// RNR NAK.
    pub rnr: u64,
    /// Invalid request.
    pub invalid_request: u64,
    /// Remote access error.
    pub remote_access: u64,
    /// Remote operational error (and unknown codes).
    pub remote_op: u64,
}

impl Naks {
    fn add(&mut self, o: &Self) {
        self.seq_err += o.seq_err;
        self.rnr += o.rnr;
        self.invalid_request += o.invalid_request;
        self.remote_access += o.remote_access;
        self.remote_op += o.remote_op;
    }
}

/// Per-QP (or, summed, per-device) counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpStats {
    /// Datagrams sent.
    pub tx_packets: u64,
    /// Transport bytes sent (BTH through ICRC).
    pub tx_bytes: u64,
    /// Datagrams accepted for processing (after ICRC and QP checks).
    pub rx_packets: u64,
    /// Transport bytes received.
    pub rx_bytes: u64,
    /// Request packets sent again (go-back-N, timeouts, RNR).
    pub retransmitted_packets: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Go-back-N rewinds for any reason.
    pub rewinds: u64,
    /// Implied NAKs (a response beyond a lost READ response / atomic ACK).
    pub implied_naks: u64,
    /// NAKs sent, by kind.
    pub naks_sent: Naks,
    /// NAKs received, by kind.
    pub naks_received: Naks,
    /// Duplicate requests seen by the responder.
    pub duplicate_requests: u64,
    /// Out-of-sequence requests seen by the responder.
    pub out_of_sequence_requests: u64,
    /// ACK packets sent (including atomic ACKs).
    pub acks_sent: u64,
    /// CE-marked datagrams received.
    pub ce_received: u64,
    /// CNPs sent.
    pub cnps_sent: u64,
    /// CNPs received.
    pub cnps_received: u64,
    /// Times the congestion controller lowered the sending rate (on a CNP or a deferred cut).
    #[cfg_attr(feature = "serde", serde(default))]
    pub rate_cuts: u64,
    /// Lowest rate a cut set, bits/s (0: never cut). Summed stats keep the lowest.
    #[cfg_attr(feature = "serde", serde(default))]
    pub min_rate_bps: u64,
    /// Received datagrams dropped, by reason.
    pub drops: Drops,
    /// Received datagrams whose ICRC passed the full 32-bit check: over every covered header
    /// field as it was on the wire (IPv6, or IPv4 from a link that sees the header), or, over
    /// IPv4 on a UDP socket, an exact match with identification 0 and DF.
    #[cfg_attr(feature = "serde", serde(default))]
    pub icrc_full: u64,
    /// Received IPv4 datagrams whose identification and DF the link did not see (a UDP
    /// socket), accepted because some other value of them makes the ICRC valid: a 15-bit
    /// check.
    #[cfg_attr(feature = "serde", serde(default))]
    pub icrc_solved: u64,
}

impl QpStats {
    /// Adds `other` into `self` (device totals).
    pub fn add(&mut self, o: &Self) {
        self.icrc_full += o.icrc_full;
        self.icrc_solved += o.icrc_solved;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.retransmitted_packets += o.retransmitted_packets;
        self.timeouts += o.timeouts;
        self.rewinds += o.rewinds;
        self.implied_naks += o.implied_naks;
        self.naks_sent.add(&o.naks_sent);
        self.naks_received.add(&o.naks_received);
        self.duplicate_requests += o.duplicate_requests;
        self.out_of_sequence_requests += o.out_of_sequence_requests;
        self.acks_sent += o.acks_sent;
        self.ce_received += o.ce_received;
        self.cnps_sent += o.cnps_sent;
        self.cnps_received += o.cnps_received;
        self.rate_cuts += o.rate_cuts;
        if o.min_rate_bps != 0 && (self.min_rate_bps == 0 || o.min_rate_bps < self.min_rate_bps) {
            self.min_rate_bps = o.min_rate_bps;
        }
        self.drops.add(&o.drops);
    }
}
