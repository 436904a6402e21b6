//! The `peer_unresponsive` rule, judged at the end of the capture: a requester that went
//! back to the same PSN round after round with nothing coming back.
use std::fmt::Write as _;

use super::requester;
use super::rules::Rule;
use super::Connection;

/// The retries IBTA allows a requester at most (the 3-bit retry count, Vol 1 §9.7.6.1.3).
const MAX_RETRIES: u64 = 7;

/// [`Rule::PeerUnresponsive`] for the requests of side `side` of `c` (its request stream
/// `r`, the capture ending at `end`): unanswered when the peer sent no response at all and
/// the requester went back to the same PSN at least twice; the detail infers its local ACK
/// timeout from the rounds' spacing and predicts when `retry exceeded` ends it.
pub(super) fn check_peer_responds(
    c: &mut Connection,
    side: usize,
    r: &requester::ReqState,
    end: u64,
) {
    let answered = c.sides[1 - side].responses > 0;
    let unanswered = !answered && r.rounds >= 2;
    let requests = c.sides[side].requests;
    let why = || {
        let n = r.rounds;
        let timeout = (r.last_round_t - r.first_round_t) / (n - 1);
        // Local ACK timeout 4.096 us x 2^code (IBTA Vol 1 §9.7.6.1.3).
        let code = (timeout as f64 / 4096.0).log2().round().clamp(0.0, 31.0) as u32;
        let ms = |ns: u64| ns as f64 / 1e6;
        let mut d = format!(
            "no response to {requests} requests; the requester went back to PSN {} {n} times, {:.3} ms apart (local ACK timeout code about {code})",
            requester::wire(r.round_psn),
            ms(timeout)
        );
        if n > MAX_RETRIES {
            let _ = write!(
                d,
                "; more rounds than the {MAX_RETRIES} retries IBTA allows"
            );
        } else {
            // The original try, then up to 7 retries a timeout apart; the error comes one
            // timeout after the last.
            let at = r.first_round_t + (MAX_RETRIES) * timeout;
            let _ = write!(
                d,
                "; with the largest retry count ({MAX_RETRIES}) `retry exceeded` at {:.3} ms, {:.3} ms after the capture ends",
                ms(at),
                ms(at.saturating_sub(end))
            );
        }
        d
    };
    c.rules
        .get_mut(Rule::PeerUnresponsive)
        .check_why(!unanswered, r.first_frame, why);
}
