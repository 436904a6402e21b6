//! The flows of a run: their QP pairs (pooled and reused once free), the pattern each
//! sender writes and each receiver checks in place, the WRITEs posted for one, and Poisson
//! arrivals.
use super::*;

pub(super) struct Flow {
    pub(super) size: u64,
    pub(super) start: Instant,
    pub(super) done: Option<Instant>,
    pub(super) mrs: (MrHandle, MrHandle),
    /// (sender, sender QP, receiver QP).
    pub(super) qps: (usize, roce_proto::Qpn, roce_proto::Qpn),
    /// Offset of its bytes in its sender's pattern.
    pub(super) pattern: u64,
    /// WRITEs it was posted as.
    pub(super) wrs: u64,
    /// Its WRITE completed with an error.
    pub(super) failed: bool,
    /// Its receiver.
    pub(super) dst: usize,
    /// The victim flow (reported apart).
    pub(super) victim: bool,
    /// Links on its path (2 through one switch).
    pub(super) links: u32,
    /// Its sender's path choice ([`Ecmp::Adaptive`]).
    pub(super) paths: Option<roce_stack::paths::PathChooser>,
}

/// A host's protection domain, completion queue (completions are told apart by work request
/// ID) and the QPs free for a new flow.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    pub(super) pd: roce_stack::PdHandle,
    pub(super) cq: roce_stack::CqHandle,
    pub(super) free: Vec<roce_proto::Qpn>,
    /// Its pattern region, once it sent.
    pub(super) pattern: Option<MrHandle>,
}

/// Every host's [`Pool`], made when the host first sends or receives.
#[derive(Debug, Default)]
pub(super) struct Pools(Vec<Option<Pool>>, Option<std::sync::Arc<[u8]>>);

impl Pools {
    /// Host `h`'s pool (a copy of its PD and CQ, and its free QPs taken out: give them back
    /// with [`Pools::give_back`]).
    pub(super) fn of(&mut self, sim: &mut Sim, h: usize) -> Pool {
        if self.0.len() <= h {
            self.0.resize(h + 1, None);
        }
        let p = self.0[h].get_or_insert_with(|| {
            let d = sim.device(h);
            Pool {
                pd: d.alloc_pd(),
                cq: d.create_cq(),
                free: Vec::new(),
                pattern: None,
            }
        });
        let mut out = p.clone();
        // Hand out one free QP at most; the rest stay.
        out.free = p.free.pop().into_iter().collect();
        out
    }

    /// The run's pattern: [`PATTERN_PERIOD`] + [`PATTERN_SLACK`] random bytes, shared by
    /// every pattern region of the run.
    pub(super) fn shared(&mut self, seed: u64) -> std::sync::Arc<[u8]> {
        self.1
            .get_or_insert_with(|| {
                let mut b = vec![0u8; (PATTERN_PERIOD + PATTERN_SLACK) as usize];
                Rng::new(seed ^ 0x7061_7474_6572_6e00).fill(&mut b);
                b.into()
            })
            .clone()
    }

    /// Host `h`'s pattern region (made on first use): [`PATTERN_PERIOD`] +
    /// [`PATTERN_SLACK`] random bytes every flow it sends is cut from; with
    /// [`Regions::Pattern`] the run's shared pattern, generated as it is sent, else bytes of
    /// the host's own.
    pub(super) fn pattern(
        &mut self,
        sim: &mut Sim,
        h: usize,
        seed: u64,
        regions: Regions,
    ) -> MrHandle {
        let _ = self.of(sim, h);
        let pd = self.0[h].as_ref().map(|p| p.pd).expect("made above");
        if let Some(m) = self.0[h].as_ref().and_then(|p| p.pattern) {
            return m;
        }
        let len = (PATTERN_PERIOD + PATTERN_SLACK) as usize;
        let mr = match regions {
            Regions::Pattern => {
                let bytes = self.shared(seed);
                let p = roce_stack::Pattern {
                    bytes,
                    start: 0,
                    period: len,
                };
                sim.device(h)
                    .reg_pattern_mr(pd, len, Access::ALL, p)
                    .expect("a valid pattern")
            }
            Regions::Bytes => {
                let d = sim.device(h);
                let mr = d.reg_mr(pd, len, Access::ALL);
                if let Some(m) = d.mr_mut(mr) {
                    Rng::new(seed ^ (h as u64).wrapping_mul(0xa076_1d64_78bd_642f))
                        .fill(m.as_mut_slice());
                }
                mr
            }
        };
        if let Some(p) = self.0[h].as_mut() {
            p.pattern = Some(mr);
        }
        mr
    }

    pub(super) fn give_back(&mut self, h: usize, qp: roce_proto::Qpn) {
        if let Some(Some(p)) = self.0.get_mut(h) {
            p.free.push(qp);
        }
    }
}

/// A flow's bytes repeat its sender's pattern with this period: odd, so that a packet
/// placed a whole number of MTUs away from where it belongs never finds the same bytes there.
pub(super) const PATTERN_PERIOD: u64 = (1 << 20) - 1;

/// Offsets into the pattern flows start at (one per flow, below this).
pub(super) const PATTERN_SLACK: u64 = 1 << 16;

/// WRITEs a flow may be posted as (its work request IDs are `flow × this + n`).
pub(super) const WRS_PER_FLOW: u64 = 16;

/// Whether `got` holds `pattern` from `offset` on, repeated every [`PATTERN_PERIOD`] bytes.
pub(super) fn holds_pattern(got: &[u8], pattern: &[u8], offset: u64) -> bool {
    let o = offset as usize;
    let Some(period) = pattern.get(o..o + PATTERN_PERIOD as usize) else {
        return false;
    };
    got.chunks(period.len()).all(|g| g == &period[..g.len()])
}

/// Posts a flow of `size` bytes from the sender's pattern region at `offset` to the start of
/// the receiver's region, as WRITEs of up to [`MAX_SGE`](roce_stack::MAX_SGE) periods each
/// (IDs `flow × WRS_PER_FLOW + n`); returns how many.
pub(super) fn post_flow(
    sim: &mut Sim,
    flow: usize,
    (h, sq, smr): (usize, roce_proto::Qpn, MrHandle),
    (dst, rmr): (usize, MrHandle),
    size: u64,
    offset: u64,
) -> u64 {
    let remote = sim.device(dst).mr(rmr).expect("region").remote_addr(0);
    let per_wr = PATTERN_PERIOD * roce_stack::MAX_SGE as u64;
    let wrs = size.div_ceil(per_wr).max(1);
    for n in 0..wrs {
        let start = n * per_wr;
        let len = (size - start).min(per_wr);
        let mut sgl = SgList::default();
        let mut at = 0;
        while at < len {
            let l = (len - at).min(PATTERN_PERIOD);
            let sge = sim.device(h).mr(smr).expect("region").sge(offset, l as u32);
            sgl.push(sge);
            at += l;
        }
        let to = roce_stack::RemoteAddr {
            va: remote.va + start,
            ..remote
        };
        let wr = WorkRequest::new(flow as u64 * WRS_PER_FLOW + n, WrOp::Write(to), sgl);
        sim.device(h).post_send(sq, wr).expect("post");
    }
    wrs
}

/// The default of [`FctSpec::max_active_bytes`]: what the simulator's memory for flows is
/// bounded by.
pub const MAX_ACTIVE_BYTES: u64 = 1 << 30;

/// Frame bytes of `size` payload bytes at `mtu` (headers: Ethernet 14 + FCS 4, IPv4 20,
/// UDP 8, BTH 12, ICRC 4; RETH 16 on the first packet).
pub(super) fn frame_bytes(size: u64, mtu: u32) -> u64 {
    let n = size.div_ceil(u64::from(mtu)).max(1);
    size + n * 62 + 16
}

/// Most flows one experiment starts.
pub const MAX_FLOWS: usize = 100_000;

/// Poisson flow arrivals during `duration` whose sizes, drawn from `cdf` (capped at 64 MiB),
/// load a link of `line_rate_bps` at `load` on average: (arrival, sender index below `hosts`,
/// size), at most [`MAX_FLOWS`].
pub fn poisson_flows(
    cdf: &Cdf,
    load: f64,
    line_rate_bps: u64,
    duration: Duration,
    hosts: usize,
    rng: &mut Rng,
) -> Vec<(Instant, usize, u64)> {
    let mut out = Vec::new();
    let mean_gap_s = cdf.mean() * 8.0 / (load * line_rate_bps as f64);
    let mut t = 0.0f64;
    let end = duration.as_secs_f64();
    loop {
        t += -mean_gap_s * (1.0 - rng.unit()).ln();
        if t >= end || out.len() >= MAX_FLOWS {
            break;
        }
        let h = rng.below(hosts.max(1) as u64) as usize;
        let size = cdf.sample(rng).min(64 << 20);
        out.push((Instant::from_nanos((t * 1e9) as u64), h, size));
    }
    out
}
