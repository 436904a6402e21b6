//! A finding: what the analysis diagnoses (made in `diagnose.rs`, `diagnose_setup.rs` and
//! `counters.rs`), a leaf the three share.

/// A diagnosis: what was seen, the evidence, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Its name (`rnr_stall`, `pmtu_asymmetry`, `ce_without_cnp`, `cnp_without_ce`,
    /// `read_window_limited`, `retx_timeout`, `tclass_mismatch`, `icrc_bad_unanswered`,
    /// `gid_mismatch`, `roce_v1_beside_v2`, `retry_exceeded`, `cm_unanswered_req`,
    /// `cm_rejected`, `pfc_priority_without_roce`).
    pub name: &'static str,
    /// The connection's id (`None`: the capture's, as a PFC priority's).
    pub connection: Option<usize>,
    /// The side (0 a, 1 b) it is about, when one.
    pub side: Option<usize>,
    /// Frames that show it (the first few).
    pub frames: Vec<u64>,
    /// What was seen, with the values.
    pub detail: String,
    /// What to check or change, in one sentence.
    pub advice: &'static str,
}
