//! What a record contributes, worked out on the reading thread from its bytes: the RoCE
//! packet (`Pkt`), or a PAUSE/PFC frame or TCP end for the capture-wide state; the CM's and
//! perftest's set-up terms are noted here, where the frames are.
use roce_proto::Frame;

use super::pkt::Pkt;
use super::{control, pfc, terms, Options};
use crate::{link, Timestamp};

/// What a record contributes, worked out from its bytes (the part of the analysis that can
/// run on another thread: link parsing, the ICRC check, the time filter).
#[derive(Debug)]
pub(super) struct Prep {
    pub(super) first_ts: Option<Timestamp>,
    from: Option<f64>,
    to: Option<f64>,
    /// The CM's REQs and REPs and perftest's records, read where the frames are.
    pub(super) terms: terms::TermsState,
}

impl Prep {
    pub(super) fn new(opts: Options) -> Self {
        Self {
            first_ts: None,
            from: opts.from,
            to: opts.to,
            terms: terms::TermsState::default(),
        }
    }

    #[inline]
    pub(super) fn prepare(
        &mut self,
        frame_no: u64,
        ts: Timestamp,
        link_type: u32,
        data: &[u8],
    ) -> Option<Item> {
        let t = self.time(ts)?;
        match link::parse(link_type, data) {
            Ok(f) => self.roce(frame_no, t, &f).map(Item::Roce),
            Err(_) => self.other(frame_no, t, link_type, data),
        }
    }

    /// The packet of a RoCE frame, its CM terms noted.
    #[inline]
    pub(super) fn roce(&mut self, frame_no: u64, t: u64, f: &Frame<'_>) -> Option<Pkt> {
        let p = Pkt::of(frame_no, t, f)?;
        if p.cm.is_some() {
            self.terms.note_cm(&p, f);
        }
        Some(p)
    }

    /// A record that is not RoCE: a PAUSE or PFC frame, or a TCP FIN or RST, for the
    /// analysis; the perftest records of a TCP segment noted here.
    pub(super) fn other(
        &mut self,
        frame: u64,
        t: u64,
        link_type: u32,
        data: &[u8],
    ) -> Option<Item> {
        if let Some(seg) = link::tcp_segment(link_type, data) {
            for dest in terms::records(seg.payload) {
                self.terms.note_record(terms::Record {
                    frame,
                    src: seg.src,
                    dst: seg.dst,
                    ports: (seg.sport, seg.dport),
                    dest,
                });
            }
        }
        Item::other(frame, t, link_type, data)
    }

    /// The record's time since the first record, ns; `None` outside `--from`/`--to`.
    #[inline]
    pub(super) fn time(&mut self, ts: Timestamp) -> Option<u64> {
        let first = *self.first_ts.get_or_insert(ts);
        let rel = ts.since(first);
        // Saturating: a capture may claim any time stamp.
        let t = (rel.secs as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::from(rel.nanos));
        let secs = t as f64 / 1e9;
        if self.from.is_some_and(|f| secs < f) || self.to.is_some_and(|to| secs >= to) {
            return None;
        }
        Some(t)
    }
}

/// What a record gives the analysis.
#[derive(Debug)]
pub(super) enum Item {
    Roce(Pkt),
    Other(Other),
}

/// A record that is not RoCE but tells the analysis something.
#[derive(Debug, Clone, Copy)]
pub(super) enum Other {
    Pause(pfc::Pause),
    TcpEnd(control::TcpEnd),
}

impl Item {
    /// A PAUSE or PFC frame, or a TCP FIN or RST.
    pub(super) fn other(frame: u64, t: u64, link_type: u32, data: &[u8]) -> Option<Self> {
        if let Some((src, r)) = link::mac_control(link_type, data) {
            return pfc::Pause::of(frame, t, src, r).map(|p| Self::Other(Other::Pause(p)));
        }
        let end = link::tcp_end(link_type, data)?;
        Some(Self::Other(Other::TcpEnd(control::TcpEnd {
            frame,
            t,
            end,
        })))
    }
}
