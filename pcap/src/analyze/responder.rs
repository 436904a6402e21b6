//! The responder's side of a direction: its response stream ([`RespState`]) and the handlers
//! of what it sends: ACKs and NAKs (what they acknowledge, ghost and stale ACKs, the ACK
//! order, hole and NAK storm rules), READ responses (matched to their READ, the READ rules),
//! and CNPs (the CNP interval rule and its notes).
use std::collections::VecDeque;

use roce_proto::aeth::{AethKind, NakCode};
use roce_proto::opcode::Class;

use super::emit::{nak_index, Emitter, EventKind};
use super::pkt::Pkt;
use super::requester::{wire, ReqState, ATOMIC};
use super::rules::Rule;
use super::side::TRACE_MAX;
use super::{Connection, Options};

/// A CNP this soon after a NAK from the same side counts as following it.
pub const NAK_CNP_NS: u64 = 100_000;

/// The response stream of one direction (answers to the other direction's requests).
#[derive(Debug, Default)]
pub(super) struct RespState {
    last_ack: Option<u64>,
    last_msn: Option<u32>,
    /// The last sequence NAK: (PSN, time).
    last_nak_psn: Option<(u64, u64)>,
    reads: VecDeque<Answer>,
    last_cnp_t: Option<u64>,
    /// A NAK this side sent that no CNP has followed yet.
    nak_waiting_cnp: Option<u64>,
}

/// A response packet (ACK, NAK, READ response, atomic ACK) of the direction whose responses
/// are `resp`, answering `requests` (`None`: the requests are not in the capture).
pub(super) fn response(
    requests: Option<&mut ReqState>,
    resp: &mut RespState,
    p: &Pkt,
    ev: &mut Emitter<'_, '_>,
) {
    ev.side_mut().responses += 1;
    let Some(r) = requests else {
        unanswerable(p, ev);
        return;
    };
    if !r.started {
        return;
    }
    let u = r.unwrap(p.psn);
    let read_resp = p.opcode.is_read_response();
    if read_resp || r.acked.is_some_and(|a| u <= a) {
        // A response that acknowledges nothing new (a duplicate ACK answering a
        // duplicate), or a READ response (whose predecessor may be missing at the
        // requester): one a requester may resend on.
        r.last_resp_t = Some(p.t);
    }
    // Responses acknowledge up to their PSN (READ responses: their packets).
    let acks = match p.aeth {
        Some(AethKind::Ack { .. }) => true,
        _ => read_resp || p.opcode.operation() == 0x12,
    };
    if acks {
        acknowledge(r, resp, p, u, read_resp, ev);
        ev.trace(p.t, p.psn, 2);
    }
    // A sequence or RNR NAK for PSN n acknowledges everything before n (IBTA 9.7.5.1.2).
    if matches!(
        p.aeth,
        Some(AethKind::Nak(NakCode::PsnSequenceError) | AethKind::RnrNak { .. })
    ) && u <= r.highest + 1
    {
        if r.acked.is_none_or(|a| u - 1 > a) {
            r.acked = Some(u - 1);
            r.last_ack_t = p.t;
        }
        if r.gaps.front().is_some_and(|g| g.0 < u) {
            missed(r, u - 1, p, ev);
        }
        while r
            .outstanding
            .front()
            .is_some_and(|o| o.psn < u && o.read_len.is_none())
        {
            r.outstanding.pop_front();
        }
    }
    if matches!(p.aeth, Some(AethKind::Nak(_) | AethKind::RnrNak { .. })) {
        resp.nak_waiting_cnp = Some(p.t);
        ev.conns[ev.conn].naks_and_cnps.0 += 1;
    }
    nak(r, resp, p, u, ev);
    if read_resp {
        read_response(r, resp, p, u, ev);
    }
}

/// A response whose requests are not in the capture: count what can be counted.
fn unanswerable(p: &Pkt, ev: &mut Emitter<'_, '_>) {
    if let Some(AethKind::Nak(c)) = p.aeth {
        let k = nak_index(Some(c));
        ev.side_mut().naks[k] += 1;
        ev.emit(p, EventKind::Nak(k as u8), None, String::new());
    } else if let Some(AethKind::RnrNak { .. }) = p.aeth {
        ev.side_mut().naks[1] += 1;
        ev.emit(p, EventKind::Nak(1), None, String::new());
    }
}

/// A response that acknowledges up to unwrapped PSN `u`: a ghost ACK, or the ACK order and
/// hole rules, then what it answers.
fn acknowledge(
    r: &mut ReqState,
    resp: &mut RespState,
    p: &Pkt,
    u: u64,
    read_resp: bool,
    ev: &mut Emitter<'_, '_>,
) {
    if u > r.span_end() && !read_resp {
        // Unless the requester goes on past it: then the capture missed the requests it
        // acknowledges (`requester::advance`).
        if r.ghost.is_none_or(|g| u > g.0) {
            // Its MSN past the last ACK's: the responder completed messages the capture
            // did not show (IBTA Vol 1 §9.7.5.1.2: the MSN counts completed messages).
            let moved = resp
                .last_msn
                .is_some_and(|m| p.msn != m && (p.msn.wrapping_sub(m) & 0xff_ffff) < 0x80_0000);
            r.ghost = Some((u, p.frame, moved));
        }
        ev.side_mut().ghost_acks += 1;
        ev.emit(
            p,
            EventKind::GhostAck,
            None,
            format!("PSN {} never sent", p.psn),
        );
        return;
    }
    check_ack_order(r, resp, p, u, read_resp, ev);
    if resp.last_ack.is_none_or(|l| u > l) {
        resp.last_ack = Some(u);
    }
    if r.acked.is_none_or(|a| u > a) {
        r.acked = Some(u);
        r.last_ack_t = p.t;
        r.last_progress_t = p.t;
    }
    retire_answered(r, resp, p, u, read_resp, ev);
}

/// [`Rule::MonotonicMsnAndAckPsn`] (and stale ACKs) and [`Rule::NoAckPastHole`] for an ACK
/// of unwrapped PSN `u`.
fn check_ack_order(
    r: &mut ReqState,
    resp: &mut RespState,
    p: &Pkt,
    u: u64,
    read_resp: bool,
    ev: &mut Emitter<'_, '_>,
) {
    if let Some(last) = resp.last_ack {
        if u < last && !read_resp {
            // Allowed only as the answer to a duplicate request of that PSN.
            // An answer again is right when the request was sent again.
            // An atomic ACK again is the responder answering a duplicate atomic
            // with its saved result (IBTA 9.7.5.1.7.4), whether or not the
            // duplicate was made before the capture point.
            let atomic_again = p.opcode.operation() == 0x12
                && r.done_reads.iter().any(|d| d.0 == u && d.2 == ATOMIC);
            let answered_dup = r.in_episode || atomic_again || r.times_sent(u) >= 2;
            let (ap, lp) = (p.psn, wire(last));
            ev.rule(Rule::MonotonicMsnAndAckPsn)
                .check_why(answered_dup, p.frame, || {
                    format!("ACK PSN {ap} after {lp}, and PSN {ap} was sent only once")
                });
            if !answered_dup {
                ev.side_mut().stale_acks += 1;
                ev.emit(p, EventKind::StaleAck, None, String::new());
            }
        }
    }
    if p.aeth.is_some() {
        if let Some(m) = resp.last_msn {
            let back = (m.wrapping_sub(p.msn) & 0xff_ffff) < 0x80_0000 && m != p.msn;
            let msn = p.msn;
            ev.rule(Rule::MonotonicMsnAndAckPsn)
                .check_why(!back, p.frame, || format!("MSN {msn} after {m}"));
        }
        resp.last_msn = Some(p.msn);
    }
    // While a hole is open (PSNs skipped and not seen since), an ACK stays before it. An
    // ACK past it is judged only when the responder said it lacked a PSN of the hole (a
    // sequence NAK, and the requester did not go back since): otherwise the responder
    // received what the capture missed, and the ACK is evidence of a capture drop, not of a
    // responder acknowledging what it never got.
    if let Some(g) = r.gaps.front().copied().filter(|_| !read_resp) {
        if u < g.0 || r.hole_nakked(g) {
            let (ap, hp) = (p.psn, wire(g.0));
            ev.rule(Rule::NoAckPastHole)
                .check_why(u < g.0, p.frame, || {
                    format!("ACK PSN {ap} with PSN {hp} never seen, after a NAK for it")
                });
        } else {
            ev.rule(Rule::NoAckPastHole).unjudged += 1;
            missed(r, u, p, ev);
        }
    }
}

/// The requests up to unwrapped PSN `upto` that `p` acknowledges and the capture never
/// saw: counted as the requester's packets the capture missed, `p` the evidence.
fn missed(r: &mut ReqState, upto: u64, p: &Pkt, ev: &mut Emitter<'_, '_>) {
    let first = r.gaps.front().map(|g| g.0);
    let n = r.missed_up_to(upto);
    if n > 0 {
        ev.side_other_mut().missed_by_capture += n;
        let from = first.map_or(0, |f| wire(f).value());
        ev.emit(
            p,
            EventKind::CaptureMissed,
            None,
            format!("acknowledges {n} request PSNs from {from} the capture did not see"),
        );
    }
}

/// Takes what a response at unwrapped PSN `u` answers out of the outstanding requests (and
/// measures the ACK RTT).
fn retire_answered(
    r: &mut ReqState,
    resp: &RespState,
    p: &Pkt,
    u: u64,
    read_resp: bool,
    ev: &mut Emitter<'_, '_>,
) {
    // A READ response acknowledges what precedes its READ; the READ itself is
    // done at its last response (in `end_read_response`).
    let cur_read = if read_resp {
        match p.opcode.class() {
            Class::First | Class::Only => Some(u),
            _ => Some(
                resp.reads
                    .iter()
                    .rev()
                    .find(|x| x.next == u)
                    .map_or(u, |x| x.psn),
            ),
        }
    } else {
        None
    };
    // Covered: what precedes the READ being answered, or everything up to the
    // ACK's PSN. A READ is answered only by its responses and an atomic by its
    // atomic ACK: one covered but unanswered stays outstanding, and the response
    // for a later PSN implies its answer was lost (IBTA 9.7.5.1.3).
    let limit = cur_read.unwrap_or(u + 1);
    let atomic_ack = p.opcode.operation() == 0x12;
    let mut i = 0;
    while let Some(&o) = r.outstanding.get(i) {
        if o.psn >= limit {
            break;
        }
        let answered = o.read_len.is_none() || (o.atomic && atomic_ack && o.psn == u);
        if !answered {
            r.last_implied = Some(p.t);
            i += 1;
            continue;
        }
        r.outstanding.remove(i);
        if !o.retx && o.read_len.is_none() {
            ev.side_other_mut().ack_rtt.add(p.t.saturating_sub(o.t));
        }
    }
}

/// A NAK at unwrapped PSN `u`: counted, and a sequence NAK checked against
/// [`Rule::OneNakPerSequenceError`] and noted for the requester's next episode.
fn nak(r: &mut ReqState, resp: &mut RespState, p: &Pkt, u: u64, ev: &mut Emitter<'_, '_>) {
    match p.aeth {
        Some(AethKind::Nak(code)) => {
            let k = nak_index(Some(code));
            ev.side_mut().naks[k] += 1;
            ev.trace(p.t, p.psn, 3);
            if code == NakCode::PsnSequenceError {
                // One NAK per out-of-sequence episode.
                // Again for the same PSN with that PSN not sent since the last one: the
                // responder NAKs each out-of-sequence packet (a NAK storm). Once the
                // requester sent it again (and it was lost again, or RNR NAKed), a new
                // episode may have its NAK.
                // (An RNR NAK since shows the responder took the PSN in sequence again.)
                let storm = resp.last_nak_psn.is_some_and(|(np, nt)| {
                    np == u
                        && r.seen(u).is_none_or(|(t, _)| t < nt)
                        && r.last_rnr.is_none_or(|(rt, _)| rt < nt)
                });
                ev.rule(Rule::OneNakPerSequenceError).check(!storm, p.frame);
                resp.last_nak_psn = Some((u, p.t));
                r.last_nak_seq = Some((u, p.t, p.frame));
                if r.nak_psns.len() < 16 {
                    r.nak_psns.push_back(u);
                }
                if let Some(g) = r.gaps.iter().find(|g| g.0 == u) {
                    ev.side_mut().nak_generation.add(p.t.saturating_sub(g.2));
                }
            }
            ev.emit(p, EventKind::Nak(k as u8), None, format!("PSN {}", p.psn));
        }
        Some(AethKind::RnrNak { timer }) => {
            ev.side_mut().naks[1] += 1;
            if timer == 0 {
                ev.side_mut().rnr_timer_zero += 1;
            }
            r.last_rnr = Some((p.t, roce_proto::aeth::rnr_timer_ns(timer)));
            ev.trace(p.t, p.psn, 3);
            ev.emit(
                p,
                EventKind::Nak(1),
                None,
                format!("timer {} us", roce_proto::aeth::rnr_timer_ns(timer) / 1000),
            );
        }
        _ => {}
    }
}

/// How many READ responses in a row may be missing inside one answer before a response
/// further on is taken for a mismatch rather than the rest of it.
const HOLE_MAX: u64 = 64;

/// A READ being answered: its responses so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct Answer {
    /// Its READ's PSN (its first response's).
    psn: u64,
    /// The length the READ asked for (`None`: the READ request was not in the capture).
    len: Option<u32>,
    /// The PSN its next response takes.
    next: u64,
    /// Payload bytes so far.
    bytes: u64,
    /// Responses of it the capture did not see (between ones it saw).
    missing: u64,
}

/// A READ response at unwrapped PSN `u`: the start of an answer to a READ, its next packet,
/// or a mismatch; its last packet checks [`Rule::ReadResponsesCoverRequest`].
fn read_response(
    r: &mut ReqState,
    resp: &mut RespState,
    p: &Pkt,
    u: u64,
    ev: &mut Emitter<'_, '_>,
) {
    let class = p.opcode.class();
    if matches!(class, Class::First | Class::Middle) {
        r.resp_mtu = r.resp_mtu.max(p.payload_len);
    }
    let unseen = unseen_read(r, resp, p, u, ev);
    let reads = &mut resp.reads;
    // A READ re-issued from the middle of its span is answered from that PSN on with Middle
    // and Last opcodes (as rxe does, IBTA 9.7.5.1.5): that starts a response too.
    let resumed = matches!(class, Class::Middle | Class::Last)
        && !reads.iter().any(|x| x.next == u)
        && (r
            .outstanding
            .iter()
            .any(|o| o.psn == u && o.read_len.is_some() && !o.atomic && o.retx)
            || r.done_reads.iter().any(|d| d.0 == u && d.2 != ATOMIC));
    if unseen {
        push_answer(reads, u, None, p.payload_len);
    } else if matches!(class, Class::First | Class::Only) || resumed {
        if !start_read_response(r, reads, p, u, ev) {
            return;
        }
    } else if let Some(a) = reads.iter_mut().rev().find(|x| x.next == u) {
        a.next += 1;
        a.bytes += u64::from(p.payload_len);
    } else if let Some(a) = reads.iter_mut().rev().find(|x| {
        x.next < u
            && u - x.next <= HOLE_MAX
            && x.len.is_none_or(|l| u < x.psn + span_bound(l, r.resp_mtu))
    }) {
        // Further on in an answer: the responses between were not seen (lost before the
        // capture point, then the requester asks again from the first of them; or missed
        // by the capture). What they carried is unknown: the answer is not judged.
        let n = u - a.next;
        a.missing += n;
        a.next = u + 1;
        a.bytes += u64::from(p.payload_len);
        responses_unseen(n, p, ev);
    } else if let Some((read, len)) = first_unseen(r, reads, u) {
        // Inside the span of a READ sent once and not yet answered: its answer's first
        // responses were not seen.
        let n = u - read;
        reads.push_back(Answer {
            psn: read,
            len,
            next: u + 1,
            bytes: u64::from(p.payload_len),
            missing: n,
        });
        if reads.len() > 1024 {
            reads.pop_front();
        }
        responses_unseen(n, p, ev);
    } else if class == Class::Middle || class == Class::Last {
        // Inside a READ's span but not continuing a response: a duplicate READ answered
        // from another PSN than the one requested.
        read_mismatch(r, p, u, "PSN outside any READ's span", ev);
        return;
    }
    if matches!(class, Class::Last | Class::Only) {
        end_read_response(r, reads, p, u, ev);
    }
}

/// The most PSNs a READ of `len` bytes can take: at the path MTU `mtu` when known, else at
/// the smallest (256).
fn span_bound(len: u32, mtu: u32) -> u64 {
    u64::from(len.div_ceil(if mtu > 0 { mtu } else { 256 }).max(1))
}

/// The PSN of the READ whose answer a Middle or Last response at `u` belongs to when its
/// first responses were not seen: a READ sent once (not resent: a response inside a resent
/// READ's span from elsewhere than it asked is a mismatch) and not being answered, whose
/// span holds `u`.
fn first_unseen(r: &ReqState, reads: &VecDeque<Answer>, u: u64) -> Option<(u64, Option<u32>)> {
    let end = r.outstanding.partition_point(|o| o.psn < u);
    r.outstanding
        .range(..end)
        .rev()
        .take_while(|o| u - o.psn <= HOLE_MAX)
        .find(|o| {
            o.read_len
                .is_some_and(|l| u < o.psn + span_bound(l, r.resp_mtu))
                && !o.atomic
                && !o.retx
                && !reads.iter().any(|a| a.psn == o.psn)
        })
        .map(|o| (o.psn, o.read_len))
}

/// At the end of the capture: the answers to the READs and atomics of `r` still waiting
/// that responses to later requests passed, and that the requester never asked for again.
/// The responder answers in order, and a requester missing an answer asks again (IBTA Vol
/// 1 §9.7.5.1.3): those answers arrived and the capture missed them. Returns their packets
/// (a READ's over its span, less the responses of it seen, in `resp`).
pub(super) fn answers_missed(r: &ReqState, resp: Option<&RespState>) -> u64 {
    let Some(acked) = r.acked else {
        return 0;
    };
    r.outstanding
        .iter()
        .filter(|o| !o.retx)
        .filter_map(|o| {
            let len = o.read_len?;
            let span = if o.atomic {
                1
            } else if r.resp_mtu > 0 {
                span_bound(len, r.resp_mtu)
            } else {
                o.read_span.max(1)
            };
            let seen = resp
                .and_then(|s| s.reads.iter().find(|a| a.psn == o.psn))
                .map_or(0, |a| a.next - a.psn);
            (acked >= o.psn + span).then(|| span.saturating_sub(seen))
        })
        .sum()
}

/// Starts an answer at `u`.
fn push_answer(reads: &mut VecDeque<Answer>, u: u64, len: Option<u32>, payload: u32) {
    reads.push_back(Answer {
        psn: u,
        len,
        next: u + 1,
        bytes: u64::from(payload),
        missing: 0,
    });
    if reads.len() > 1024 {
        reads.pop_front();
    }
}

/// A READ response at unwrapped PSN `u` that no request in the capture accounts for: in a
/// gap of the request PSNs, or past the highest. Its READ was sent and received (the
/// responder answers only what it got, in order): the capture missed it, and the requests
/// before it, which the response acknowledges. Returns `true` when `p` starts the answer
/// to such a READ (a First or Only); a further response of one fills its PSN.
fn unseen_read(
    r: &mut ReqState,
    resp: &mut RespState,
    p: &Pkt,
    u: u64,
    ev: &mut Emitter<'_, '_>,
) -> bool {
    let first = matches!(p.opcode.class(), Class::First | Class::Only);
    let unseen = if r.gap_at(u).is_some() {
        if first {
            missed(r, u - 1, p, ev);
        }
        if let Some(i) = r.gap_at(u) {
            r.fill(u, i);
        }
        if !first
            && !resp
                .reads
                .iter()
                .any(|a| a.next <= u && u - a.next <= HOLE_MAX)
        {
            // Further on in the answer to a READ the capture missed, and its first
            // response with it (the READ's PSN stays in the gap, for the response that
            // acknowledges it to count): an answer of unknown length from here.
            // (Continued by this response, below.)
            resp.reads.push_back(Answer {
                psn: u,
                len: None,
                next: u,
                bytes: 0,
                missing: 1,
            });
            if resp.reads.len() > 1024 {
                resp.reads.pop_front();
            }
            responses_unseen(1, p, ev);
        }
        first.then_some(1)
    } else if first && u > r.span_end() && u - r.span_end() <= HOLE_MAX && r.out_at(u).is_none() {
        // The requests the READ response acknowledges, from the highest seen on, and the
        // READ: none in the capture.
        missed(r, r.highest, p, ev);
        let n = u - r.span_end();
        r.highest = u;
        // Its span is told by its last response (`end_read_response`).
        r.read_extra = Some((0, HOLE_MAX));
        Some(n)
    } else {
        None
    };
    if let Some(n) = unseen {
        ev.side_other_mut().missed_by_capture += n;
        ev.emit(
            p,
            EventKind::CaptureMissed,
            None,
            format!("answers a READ at PSN {} the capture did not see", p.psn),
        );
    }
    unseen.is_some()
}

/// `n` READ responses before `p` in its answer that the capture did not see: counted, `p`
/// the evidence.
fn responses_unseen(n: u64, p: &Pkt, ev: &mut Emitter<'_, '_>) {
    ev.side_mut().unseen_read_responses += n;
    ev.emit(
        p,
        EventKind::CaptureMissed,
        None,
        format!("{n} READ responses before it in its answer not in the capture"),
    );
}

/// The first READ response of an answer, at unwrapped PSN `u`: matched to its READ request
/// (READ latency, [`Rule::DuplicateReadReexecutedFromRequestedPsn`]); `false` when no READ
/// asked for it (a mismatch).
fn start_read_response(
    r: &ReqState,
    reads: &mut VecDeque<Answer>,
    p: &Pkt,
    u: u64,
    ev: &mut Emitter<'_, '_>,
) -> bool {
    // It answers the READ request at this PSN (the latest one, for a re-executed
    // duplicate).
    let req = r
        .outstanding
        .iter()
        .rev()
        .find(|o| o.psn == u && o.read_len.is_some() && !o.atomic)
        .copied();
    match req {
        Some(o) => {
            if !o.retx {
                ev.side_other_mut()
                    .read_latency
                    .add(p.t.saturating_sub(o.t));
            } else {
                ev.rule(Rule::DuplicateReadReexecutedFromRequestedPsn)
                    .check(true, p.frame);
            }
            push_answer(reads, u, Some(o.read_len.unwrap_or(0)), p.payload_len);
        }
        None if r.done_reads.iter().any(|d| d.0 == u) => {
            // The responder answering a duplicate READ again, from its first PSN.
            let &(_, _, len) = r
                .done_reads
                .iter()
                .rev()
                .find(|d| d.0 == u)
                .unwrap_or(&(u, 1, 0));
            ev.rule(Rule::DuplicateReadReexecutedFromRequestedPsn)
                .check(true, p.frame);
            push_answer(reads, u, Some(len), p.payload_len);
        }
        None => {
            // A response that starts at a PSN no READ request has: inside a READ's
            // span is a duplicate READ not re-executed from its requested PSN.
            read_mismatch(r, p, u, "no READ request at this PSN", ev);
            return false;
        }
    }
    true
}

/// A READ response at unwrapped PSN `u` that answers no READ as it should: inside a READ's
/// span it violates [`Rule::DuplicateReadReexecutedFromRequestedPsn`]; it always violates
/// [`Rule::ReadResponsesCoverRequest`].
fn read_mismatch(r: &ReqState, p: &Pkt, u: u64, why: &str, ev: &mut Emitter<'_, '_>) {
    if r.in_read(u) {
        ev.rule(Rule::DuplicateReadReexecutedFromRequestedPsn)
            .check(false, p.frame);
    }
    ev.rule(Rule::ReadResponsesCoverRequest)
        .check(false, p.frame);
    ev.side_mut().read_response_mismatches += 1;
    ev.emit(p, EventKind::ReadResponseMismatch, None, why.into());
}

/// The last READ response of an answer, at unwrapped PSN `u`: its READ is done (its span
/// known) and its bytes checked against the length asked for.
fn end_read_response(
    rq: &mut ReqState,
    reads: &mut VecDeque<Answer>,
    p: &Pkt,
    u: u64,
    ev: &mut Emitter<'_, '_>,
) {
    let Some(i) = reads.iter().rposition(|x| x.next == u + 1) else {
        return;
    };
    let Answer {
        psn: rpsn,
        len,
        bytes,
        missing,
        ..
    } = reads[i];
    reads.remove(i);
    let span = u - rpsn + 1;
    // This READ is answered; another READ before it (re-issued, its answer still
    // on the way) is not.
    if let Some(i) = rq
        .outstanding
        .iter()
        .position(|o| o.psn == rpsn && o.read_len.is_some() && !o.atomic)
    {
        rq.outstanding.remove(i);
    }
    while rq
        .outstanding
        .front()
        .is_some_and(|o| o.psn < rpsn && o.read_len.is_none())
    {
        rq.outstanding.pop_front();
    }
    rq.done_reads.push_back((
        rpsn,
        span,
        len.unwrap_or(bytes.min(u64::from(u32::MAX - 1)) as u32),
    ));
    if rq.done_reads.len() > 64 {
        rq.done_reads.pop_front();
    }
    if rq.highest == rpsn {
        // Its responses told its span exactly.
        rq.read_extra = Some((span - 1, span - 1));
    } else if rq.highest > u {
        // Requests past it were seen before its span was known (taken as the READ's when
        // they fitted its longest span): the PSNs between its end and the next request
        // seen are requests the capture did not see.
        rq.open_gap_after(u, p.t, p.frame);
    }
    let Some(len) = len.filter(|_| missing == 0) else {
        // The READ, or responses of its answer, not in the capture: nothing to judge by.
        ev.rule(Rule::ReadResponsesCoverRequest).unjudged += 1;
        return;
    };
    let ok = bytes == u64::from(len);
    ev.rule(Rule::ReadResponsesCoverRequest).check(ok, p.frame);
    if !ok {
        ev.side_mut().read_response_mismatches += 1;
        ev.emit(
            p,
            EventKind::ReadResponseMismatch,
            None,
            format!("{bytes} bytes for a READ of {len}"),
        );
    }
}

/// A CNP sent by the side whose responses are `resp`, notifying the requester of
/// `requests` (`None`: not in the capture): [`Rule::CnpMinInterval`], NAKs it follows, the
/// CE-to-CNP latency.
pub(super) fn cnp(
    resp: &mut RespState,
    requests: Option<&mut ReqState>,
    opts: &Options,
    p: &Pkt,
    ev: &mut Emitter<'_, '_>,
) {
    ev.side_mut().cnps += 1;
    if let Some(l) = resp.last_cnp_t {
        let gap = p.t.saturating_sub(l);
        ev.side_mut().cnp_interval.add(gap);
        ev.rule(Rule::CnpMinInterval)
            .check(gap >= opts.cnp_interval_ns, p.frame);
    }
    resp.last_cnp_t = Some(p.t);
    if let Some(nt) = resp.nak_waiting_cnp.take() {
        if p.t.saturating_sub(nt) <= NAK_CNP_NS {
            ev.conns[ev.conn].naks_and_cnps.1 += 1;
        }
    }
    if let Some(r) = requests {
        if let Some(ce) = r.first_ce_since_cnp.take() {
            ev.side_mut().ce_to_cnp.add(p.t.saturating_sub(ce));
        }
        let pictures = ev.pictures;
        let s = ev.side_other_mut();
        if pictures && s.cnps_received_at.len() < TRACE_MAX {
            s.cnps_received_at.push(p.t);
        }
        // Marked at the PSN the notified requester had reached (a CNP's own PSN means
        // nothing).
        if r.started {
            ev.trace_other(p.t, wire(r.highest).value(), 4);
        }
    }
    ev.emit(p, EventKind::Cnp, None, String::new());
}

/// The notes of [`Rule::CnpMinInterval`] at the end: the observed minimum interval, and how
/// many of the connection's NAKs a CNP followed within [`NAK_CNP_NS`].
pub(super) fn note_cnp_rule(c: &mut Connection) {
    if let Some(m) = c
        .sides
        .iter()
        .filter(|s| s.cnp_interval.count() > 0)
        .map(|s| s.cnp_interval.quantile(0.0))
        .min()
    {
        *c.rules.get_mut(Rule::CnpMinInterval).note_mut() =
            format!("observed minimum {:.1} us", m as f64 / 1e3);
    }
    let (naks, followed) = c.naks_and_cnps;
    if naks > 0 && c.sides.iter().any(|s| s.cnps > 0) {
        let note = c.rules.get_mut(Rule::CnpMinInterval).note_mut();
        let sep = if note.is_empty() { "" } else { "; " };
        *note += &format!(
            "{sep}{followed} of {naks} NAKs followed by a CNP within {} us",
            NAK_CNP_NS / 1000
        );
    }
}
