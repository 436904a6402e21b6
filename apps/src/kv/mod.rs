//! KV-cache push for prefill/decode disaggregation (as Mooncake and NIXL do it): the decode
//! instance registers one KV pool once, allocates blocks in it for a request and advertises them
//! (addresses and rkey) out of band; the prefill instance writes the KV into them layer by layer
//! with one-sided RDMA WRITEs (IBTA Vol 1 §9.4), and the last WRITE of each QP carries an
//! immediate that consumes a receive and gives the decode side its only completion.
//! RC executes a QP's requests in order (§9.5), so when that completion arrives every earlier
//! WRITE of the QP has landed; across QPs there is no order, so the receiver counts one
//! immediate per QP.
//!
//! This module does no I/O:
//! * the pool geometry ([`PoolGeometry`]: K and V of a page stored separately or adjacent),
//!   the block allocator ([`allocate`]: contiguous, or scattered as a busy allocator leaves a
//!   pool, seeded), the model shape ([`ModelShape`]);
//! * the copy list of (source offset, destination offset, length) per layer
//!   ([`layer_copies`]) and [`merge`], which turns block copies into the fewest WRITEs by
//!   merging runs contiguous at both source and destination;
//! * a [`Transfer`] (one plan's WRITEs spread over the QPs) and, in [`app`], the two
//!   applications that run it on a device: [`KvSender`] (prefill) and [`KvReceiver`]
//!   (decode), which verifies each QP's bytes the moment that QP's immediate arrives, and
//!   every byte (and that nothing outside the blocks changed) once all QPs have reported;
//! * [`mod@run`]: `roce kv` over real sockets, plan by plan, with the model of the times;
//!   [`run()`] is its one entry, the connector's end(s) over roce's control channel or RDMA-CM.
use std::fmt;

use roce_stack::rng::Rng;
use serde::{Deserialize, Serialize};

use crate::workload::fill_pattern;

pub mod app;
pub mod cm;
mod ends;
pub mod run;

pub use app::{KvReceiver, KvSender};
pub use ends::run;

/// Longest WRITE a merged run may become (the stack's largest message, 1 GiB).
pub const MAX_WRITE: u64 = 1 << 30;

/// Most block copies (so WRITEs) one plan may have: 2^24, 25 times the page-1 plan of the 70B
/// example (80 layers x 4096 tokens).
pub const MAX_COPIES: u64 = 1 << 24;

/// Why a shape, plan or copy list is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// Something larger than this end allows (`what` is larger than `limit`).
    #[error("{what} is larger than {limit}")]
    TooLarge {
        /// What.
        what: &'static str,
        /// Its bound, in words.
        limit: &'static str,
    },
    /// More of something than this end allows.
    #[error("more than {most} {what}{}", hint.map(|h| format!(": {h}")).unwrap_or_default())]
    TooMany {
        /// What.
        what: &'static str,
        /// The most allowed.
        most: u64,
        /// What to do instead.
        hint: Option<&'static str>,
    },
    /// A stream plan whose WRITEs are empty or larger than 1 GiB.
    #[error("a stream needs WRITEs of 1 B to 1 GiB")]
    StreamWrites,
    /// Another number of blocks than the request needs.
    #[error("{given} blocks given, the request needs {need}")]
    BlockCount {
        /// Blocks given.
        given: u64,
        /// Blocks the request needs.
        need: u64,
    },
    /// A block the pool does not have.
    #[error("block {0} is outside the pool")]
    BlockOutside(u32),
    /// A setting out of its range.
    #[error("{setting} must be {range}, not {value}")]
    OutOfRange {
        /// The setting.
        setting: crate::setting::Setting,
        /// The allowed range.
        range: &'static str,
        /// The value given.
        value: u64,
    },
    /// A shape with no layers, no tokens or no bytes per token.
    #[error("the layers, tokens and bytes per token must be at least 1")]
    EmptyShape,
    /// The pool has fewer free blocks than the request needs.
    #[error("the pool holds {have} blocks of this page size, the request needs {need}")]
    PoolTooSmall {
        /// Blocks the request needs.
        need: u64,
        /// Blocks the pool holds.
        have: u64,
    },
    /// Two copies write overlapping destination bytes (the result would depend on order).
    #[error("copies {a} and {b} write overlapping destination bytes")]
    OverlappingDestinations {
        /// Index of one copy in the input.
        a: usize,
        /// Index of the other.
        b: usize,
    },
    /// A copy is longer than the longest WRITE, or its end overflows the address space.
    #[error("copy {0} is longer than one WRITE may be, or wraps the address space")]
    TooLong(usize),
}

impl KvError {
    /// The setting this error is about, where it is about one.
    pub fn setting(&self) -> Option<crate::setting::Setting> {
        match self {
            Self::OutOfRange { setting, .. } => Some(*setting),
            Self::EmptyShape => Some(crate::setting::Setting::Shape),
            _ => None,
        }
    }
}

/// How a pool stores the K and V of one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvLayout {
    /// Per layer, a K area of every block, then a V area (vLLM's per-layer K and V caches):
    /// K and V of a page are two WRITEs.
    Separate,
    /// Per layer, each block holds its page's K then its V: one WRITE per page.
    Adjacent,
}

impl KvLayout {
    /// Name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Separate => "separate",
            Self::Adjacent => "adjacent",
        }
    }
}

/// How the decode side picks the blocks of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocKind {
    /// Blocks `0..n`, in order: an idle pool.
    Contiguous,
    /// Runs of 1 to 15 free blocks (8 on average) between blocks other requests hold, handed
    /// out in a shuffled order: what the free list of a busy pool looks like.
    Scattered,
}

impl AllocKind {
    /// Name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Contiguous => "contiguous",
            Self::Scattered => "scattered",
        }
    }
}

/// The part of a model (one GPU's share) whose KV a request moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelShape {
    /// Transformer layers.
    pub layers: u32,
    /// Prompt tokens.
    pub tokens: u32,
    /// Bytes of K of one token in one layer (V is the same size).
    pub kv_bytes: u32,
}

impl Default for ModelShape {
    /// 8 layers x 4096 tokens x 256 B: 16 MiB of K and V, a size loopback moves quickly.
    fn default() -> Self {
        Self {
            layers: 8,
            tokens: 4096,
            kv_bytes: 256,
        }
    }
}

impl ModelShape {
    /// Bytes of K and V of the whole request.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.layers) * u64::from(self.tokens) * 2 * u64::from(self.kv_bytes)
    }

    /// Blocks a request needs with `page` tokens per block.
    pub fn blocks(&self, page: u32) -> u64 {
        u64::from(self.tokens).div_ceil(u64::from(page.max(1)))
    }

    /// Checks the values a user can give.
    pub fn validate(&self) -> Result<(), KvError> {
        if self.layers == 0 || self.tokens == 0 || self.kv_bytes == 0 {
            return Err(KvError::EmptyShape);
        }
        if self.total_bytes() > 4 << 30 {
            return Err(KvError::TooLarge {
                what: "the KV of the request",
                limit: "4 GiB",
            });
        }
        Ok(())
    }
}

/// Where block `b` of layer `l` keeps its K and V in a pool of `blocks` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolGeometry {
    /// Layers.
    pub layers: u32,
    /// Bytes of K (or V) of one page: page size x bytes per token.
    pub page_bytes: u64,
    /// Blocks per layer.
    pub blocks: u64,
    /// K and V separate or adjacent.
    pub layout: KvLayout,
}

impl PoolGeometry {
    /// The geometry of a pool of `pool_bytes` carved into pages of `page` tokens.
    pub fn carve(shape: &ModelShape, page: u32, layout: KvLayout, pool_bytes: u64) -> Self {
        let page_bytes = u64::from(page) * u64::from(shape.kv_bytes);
        let per_block = u64::from(shape.layers) * 2 * page_bytes;
        Self {
            layers: shape.layers,
            page_bytes,
            blocks: pool_bytes.checked_div(per_block).unwrap_or(0),
            layout,
        }
    }

    /// Bytes of one layer.
    pub fn layer_stride(&self) -> u64 {
        self.blocks * 2 * self.page_bytes
    }

    /// Bytes of the pool.
    pub fn len(&self) -> u64 {
        u64::from(self.layers) * self.layer_stride()
    }

    /// `true` when the pool holds no block.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offset of the K page of `block` in `layer`.
    pub fn k_offset(&self, layer: u32, block: u64) -> u64 {
        let base = u64::from(layer) * self.layer_stride();
        match self.layout {
            KvLayout::Separate => base + block * self.page_bytes,
            KvLayout::Adjacent => base + block * 2 * self.page_bytes,
        }
    }

    /// Offset of the V page of `block` in `layer`.
    pub fn v_offset(&self, layer: u32, block: u64) -> u64 {
        match self.layout {
            KvLayout::Separate => self.k_offset(layer, block) + self.blocks * self.page_bytes,
            KvLayout::Adjacent => self.k_offset(layer, block) + self.page_bytes,
        }
    }
}

/// Picks `need` distinct blocks of a pool of `pool_blocks` (seeded for `Scattered`). The
/// request's block `i` is `result[i]`.
pub fn allocate(
    kind: AllocKind,
    need: u64,
    pool_blocks: u64,
    seed: u64,
) -> Result<Vec<u32>, KvError> {
    if need > pool_blocks {
        return Err(KvError::PoolTooSmall {
            need,
            have: pool_blocks,
        });
    }
    if pool_blocks > u64::from(u32::MAX) {
        return Err(KvError::TooMany {
            what: "blocks in the pool",
            most: u64::from(u32::MAX) + 1,
            hint: None,
        });
    }
    match kind {
        AllocKind::Contiguous => Ok((0..need as u32).collect()),
        AllocKind::Scattered => {
            let mut rng = Rng::new(seed ^ 0xa110_c000);
            let mut taken = vec![false; pool_blocks as usize];
            let mut runs: Vec<(u64, u64)> = Vec::new();
            let mut left = need;
            let mut cursor = 0u64;
            // Runs of free blocks between blocks that other requests hold.
            while left > 0 {
                cursor += 1 + rng.below(8);
                if cursor >= pool_blocks {
                    break;
                }
                let len = (1 + rng.below(15)).min(left).min(pool_blocks - cursor);
                runs.push((cursor, len));
                for b in cursor..cursor + len {
                    taken[b as usize] = true;
                }
                cursor += len;
                left -= len;
            }
            // A crowded pool: what is left comes from the gaps, block by block.
            let mut b = 0;
            while left > 0 {
                if !taken[b] {
                    taken[b] = true;
                    runs.push((b as u64, 1));
                    left -= 1;
                }
                b += 1;
            }
            // A free list hands runs out in no address order.
            for i in (1..runs.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                runs.swap(i, j);
            }
            Ok(runs
                .iter()
                .flat_map(|&(s, n)| (s..s + n).map(|b| b as u32))
                .collect())
        }
    }
}

/// One copy: `len` bytes from offset `src` of the source to offset `dst` of the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockCopy {
    /// Offset in the source region.
    pub src: u64,
    /// Offset in the destination region.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// The copies of one layer: for the request's block `i` (tokens `i*page ..`), its K and its V
/// (one copy each when separate, one copy of K and V together when adjacent), from block `i`
/// of the source pool `src` to block `blocks[i]` of the destination pool `dst`. A last page
/// that is not full copies only its tokens.
pub fn layer_copies(
    shape: &ModelShape,
    page: u32,
    src: &PoolGeometry,
    dst: &PoolGeometry,
    blocks: &[u32],
    layer: u32,
) -> Vec<BlockCopy> {
    let mut out = Vec::with_capacity(blocks.len() * 2);
    for (i, &b) in blocks.iter().enumerate() {
        let first = i as u64 * u64::from(page);
        let used = (u64::from(shape.tokens) - first.min(u64::from(shape.tokens)))
            .min(u64::from(page))
            * u64::from(shape.kv_bytes);
        if used == 0 {
            continue;
        }
        let (i, b) = (i as u64, u64::from(b));
        let full = used == src.page_bytes;
        if src.layout == KvLayout::Adjacent && dst.layout == KvLayout::Adjacent && full {
            out.push(BlockCopy {
                src: src.k_offset(layer, i),
                dst: dst.k_offset(layer, b),
                len: 2 * used,
            });
        } else {
            out.push(BlockCopy {
                src: src.k_offset(layer, i),
                dst: dst.k_offset(layer, b),
                len: used,
            });
            out.push(BlockCopy {
                src: src.v_offset(layer, i),
                dst: dst.v_offset(layer, b),
                len: used,
            });
        }
    }
    out
}

/// Turns block copies into the fewest WRITEs: copies whose source and destination both
/// continue where another's end are merged into one run, up to `max_len` bytes per run.
///
/// Guarantees (property-tested): the same bytes land in the same places; never more runs than
/// non-empty input copies; no two output runs could still merge within `max_len`; merging the
/// output again changes nothing. Zero-length copies are dropped. The output is ordered by
/// (destination - source, source), so runs that belong together are adjacent; order does not
/// matter because destinations must not overlap ([`KvError::OverlappingDestinations`]).
pub fn merge(copies: &[BlockCopy], max_len: u64) -> Result<Vec<BlockCopy>, KvError> {
    for (i, c) in copies.iter().enumerate() {
        if c.len > max_len
            || c.src.checked_add(c.len).is_none()
            || c.dst.checked_add(c.len).is_none()
        {
            return Err(KvError::TooLong(i));
        }
    }
    let mut idx: Vec<usize> = (0..copies.len()).filter(|&i| copies[i].len > 0).collect();
    // Overlapping destinations: sorted by start, each must begin at or after the previous end.
    idx.sort_unstable_by_key(|&i| (copies[i].dst, i));
    for w in idx.windows(2) {
        let (a, b) = (copies[w[0]], copies[w[1]]);
        if a.dst + a.len > b.dst {
            return Err(KvError::OverlappingDestinations {
                a: w[0].min(w[1]),
                b: w[0].max(w[1]),
            });
        }
    }
    // Two copies can only merge when they share the same shift (dst - src); within one shift,
    // sorted by source, mergeable copies are neighbours.
    let shift = |c: &BlockCopy| i128::from(c.dst) - i128::from(c.src);
    idx.sort_unstable_by_key(|&i| (shift(&copies[i]), copies[i].src));
    let mut out: Vec<BlockCopy> = Vec::with_capacity(idx.len());
    for i in idx {
        let c = copies[i];
        match out.last_mut() {
            Some(run)
                if shift(run) == shift(&c)
                    && run.src + run.len == c.src
                    && run.len + c.len <= max_len =>
            {
                run.len += c.len;
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

/// What a plan moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanKind {
    /// The request's KV with pages of `page` tokens.
    Kv {
        /// Tokens per block.
        page: u32,
        /// K and V separate or adjacent.
        layout: KvLayout,
        /// Merge runs contiguous at both ends into one WRITE.
        merge: bool,
        /// How the decode side allocates blocks.
        alloc: AllocKind,
    },
    /// A calibration stream: `wrs` WRITEs of `wr_len` bytes to consecutive addresses.
    Stream {
        /// Bytes per WRITE.
        wr_len: u32,
        /// WRITEs.
        wrs: u32,
    },
}

/// One row of the comparison: a name and what it moves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSpec {
    /// Name in the report.
    pub name: String,
    /// What it moves.
    pub kind: PlanKind,
}

impl PlanSpec {
    /// A KV plan named after its settings (`page16-adjacent-merged`).
    pub fn kv(page: u32, layout: KvLayout, merge: bool, alloc: AllocKind) -> Self {
        Self {
            name: format!(
                "page{page}-{}{}",
                layout.name(),
                if merge { "-merged" } else { "" }
            ),
            kind: PlanKind::Kv {
                page,
                layout,
                merge,
                alloc,
            },
        }
    }

    /// The five plans compared: page 1 with K and V separate; page 16 separate; page 16
    /// adjacent; page 16 merged (adjacent, blocks as `alloc` gives them); one WRITE per layer
    /// (page 16 adjacent, contiguous blocks, merged).
    pub fn defaults(alloc: AllocKind) -> Vec<Self> {
        let mut per_layer = Self::kv(16, KvLayout::Adjacent, true, AllocKind::Contiguous);
        per_layer.name = "per-layer".into();
        vec![
            Self::kv(1, KvLayout::Separate, false, alloc),
            Self::kv(16, KvLayout::Separate, false, alloc),
            Self::kv(16, KvLayout::Adjacent, false, alloc),
            Self::kv(16, KvLayout::Adjacent, true, alloc),
            per_layer,
        ]
    }
}

/// Everything both ends agree on: the shape, the pool, the QPs, the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvSpec {
    /// The model shape.
    pub shape: ModelShape,
    /// Bytes of the decode side's pool (registered once).
    pub pool_bytes: u64,
    /// QPs the WRITEs are spread over.
    pub qps: u32,
    /// Seed of the allocation and the data.
    pub seed: u64,
}

impl KvSpec {
    /// Checks the spec and that every plan fits the pool.
    pub fn validate(&self, plans: &[PlanSpec]) -> Result<(), KvError> {
        self.shape.validate()?;
        if self.qps == 0 || self.qps > 64 {
            return Err(KvError::OutOfRange {
                setting: crate::setting::Setting::Qps,
                range: "1..=64",
                value: u64::from(self.qps),
            });
        }
        if self.pool_bytes > 16 << 30 {
            return Err(KvError::TooLarge {
                what: "the pool",
                limit: "16 GiB",
            });
        }
        if plans.len() > 4096 {
            return Err(KvError::TooMany {
                what: "plans",
                most: 4096,
                hint: None,
            });
        }
        for p in plans {
            match p.kind {
                PlanKind::Kv { page, .. } => {
                    if page == 0 || page > 1 << 20 {
                        return Err(KvError::OutOfRange {
                            setting: crate::setting::Setting::Page,
                            range: "1..=1048576 tokens",
                            value: u64::from(page),
                        });
                    }
                    if 2 * u64::from(page) * u64::from(self.shape.kv_bytes) > MAX_WRITE {
                        return Err(KvError::TooLarge {
                            what: "a page",
                            limit: "512 MiB",
                        });
                    }
                    let g =
                        PoolGeometry::carve(&self.shape, page, KvLayout::Separate, self.pool_bytes);
                    let need = self.shape.blocks(page);
                    if u64::from(self.shape.layers) * need * 2 > MAX_COPIES {
                        return Err(KvError::TooMany {
                            what: "block copies",
                            most: MAX_COPIES,
                            hint: Some("use larger pages"),
                        });
                    }
                    if g.blocks < need {
                        return Err(KvError::PoolTooSmall {
                            need,
                            have: g.blocks,
                        });
                    }
                }
                PlanKind::Stream { wr_len, wrs } => {
                    if wr_len == 0
                        || wrs == 0
                        || u64::from(wr_len) > MAX_WRITE
                        || u64::from(wrs) > MAX_COPIES
                    {
                        return Err(KvError::StreamWrites);
                    }
                    if u64::from(wr_len) * u64::from(wrs) > self.pool_bytes {
                        return Err(KvError::TooLarge {
                            what: "a stream",
                            limit: "the pool",
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The blocks the decode side allocates for plan `index` (empty for a stream).
    pub fn allocate(&self, plan: &PlanSpec, index: u32) -> Result<Vec<u32>, KvError> {
        match plan.kind {
            PlanKind::Kv {
                page,
                layout,
                alloc,
                ..
            } => {
                let g = PoolGeometry::carve(&self.shape, page, layout, self.pool_bytes);
                allocate(
                    alloc,
                    self.shape.blocks(page),
                    g.blocks,
                    self.seed ^ u64::from(index) << 32,
                )
            }
            PlanKind::Stream { .. } => Ok(Vec::new()),
        }
    }

    /// Bytes of source memory the prefill side needs for `plan`.
    pub fn source_len(&self, plan: &PlanSpec) -> u64 {
        match plan.kind {
            PlanKind::Kv { page, .. } => {
                u64::from(self.shape.layers)
                    * self.shape.blocks(page)
                    * 2
                    * u64::from(page)
                    * u64::from(self.shape.kv_bytes)
            }
            PlanKind::Stream { wr_len, wrs } => u64::from(wr_len) * u64::from(wrs),
        }
    }

    /// Plan `index` with the decode side's `blocks`: its WRITEs, spread over the QPs.
    pub fn transfer(
        &self,
        plan: &PlanSpec,
        index: u32,
        blocks: &[u32],
    ) -> Result<Transfer, KvError> {
        self.validate(std::slice::from_ref(plan))?;
        let qps = self.qps as usize;
        let mut per_qp = vec![Vec::new(); qps];
        let mut copies = 0u64;
        let mut bytes = 0u64;
        let mut g = 0usize;
        let mut push = |list: Vec<BlockCopy>, per_qp: &mut Vec<Vec<BlockCopy>>| {
            for c in list {
                bytes += c.len;
                per_qp[g % qps].push(c);
                g += 1;
            }
        };
        match plan.kind {
            PlanKind::Kv {
                page,
                layout,
                merge: m,
                ..
            } => {
                let need = self.shape.blocks(page);
                if blocks.len() as u64 != need {
                    return Err(KvError::BlockCount {
                        given: blocks.len() as u64,
                        need,
                    });
                }
                let dst = PoolGeometry::carve(&self.shape, page, layout, self.pool_bytes);
                if let Some(b) = blocks.iter().find(|&&b| u64::from(b) >= dst.blocks) {
                    return Err(KvError::BlockOutside(*b));
                }
                let src = PoolGeometry {
                    blocks: need,
                    ..dst
                };
                // Layer by layer, as the prefill computes them.
                for layer in 0..self.shape.layers {
                    let list = layer_copies(&self.shape, page, &src, &dst, blocks, layer);
                    copies += list.len() as u64;
                    let list = if m { merge(&list, MAX_WRITE)? } else { list };
                    push(list, &mut per_qp);
                }
            }
            PlanKind::Stream { wr_len, wrs } => {
                let len = u64::from(wr_len);
                let list: Vec<BlockCopy> = (0..u64::from(wrs))
                    .map(|i| BlockCopy {
                        src: i * len,
                        dst: i * len,
                        len,
                    })
                    .collect();
                copies = list.len() as u64;
                push(list, &mut per_qp);
            }
        }
        Ok(Transfer {
            name: plan.name.clone(),
            index,
            per_qp,
            copies,
            bytes,
            source_len: self.source_len(plan),
            pool_len: self.pool_bytes,
            data_seed: self.seed ^ 0xdada_0000 ^ (u64::from(index) << 40),
        })
    }
}

/// One plan's WRITEs, spread over the QPs round robin in layer order, and how to check them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Plan name.
    pub name: String,
    /// Plan number (in the immediates).
    pub index: u32,
    /// Each QP's WRITEs, in posting order. The last one of each QP carries the immediate.
    pub per_qp: Vec<Vec<BlockCopy>>,
    /// Block copies before merging.
    pub copies: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Bytes of source memory.
    pub source_len: u64,
    /// Bytes of the destination pool.
    pub pool_len: u64,
    /// Seed of the source data.
    pub data_seed: u64,
}

impl Transfer {
    /// WRITEs (work requests), not counting the zero-length WRITE with immediate a QP without
    /// any data sends.
    pub fn wrs(&self) -> u64 {
        self.per_qp.iter().map(|l| l.len() as u64).sum()
    }

    /// The immediate of QP `q`'s last WRITE.
    pub fn imm(&self, q: usize) -> u32 {
        0x4b00_0000 | (self.index & 0xfff) << 12 | (q as u32 & 0xfff)
    }

    /// The source bytes (what the prefill computed): a seeded pattern.
    pub fn source(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.source_len as usize];
        fill_pattern(self.data_seed, &mut v);
        v
    }
}

/// A verification failure of the decode side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvMismatch {
    /// QP index, where it concerns one.
    pub qp: Option<usize>,
    /// Destination offset of the first differing byte, where it concerns data.
    pub offset: Option<u64>,
    /// What differed.
    pub detail: String,
}

impl fmt::Display for KvMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(q) = self.qp {
            write!(f, "qp {q} ")?;
        }
        if let Some(o) = self.offset {
            write!(f, "pool offset {o} ")?;
        }
        f.write_str(&self.detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Applies copies to a destination of `dst_len` zero bytes.
    fn apply(src: &[u8], dst_len: usize, copies: &[BlockCopy]) -> Vec<u8> {
        let mut d = vec![0u8; dst_len];
        for c in copies {
            let (s, t, l) = (c.src as usize, c.dst as usize, c.len as usize);
            d[t..t + l].copy_from_slice(&src[s..s + l]);
        }
        d
    }

    /// Copies with disjoint destinations: blocks laid out in the source in list order with
    /// small gaps, and in the destination in a shuffled order with small gaps, so that many
    /// but not all neighbours are contiguous at both ends.
    fn copies() -> impl Strategy<Value = Vec<BlockCopy>> {
        prop::collection::vec((0u64..40, 0u64..3, 0u64..3, any::<u64>()), 0..60).prop_map(
            |blocks| {
                let mut src = 0;
                let mut out: Vec<BlockCopy> = blocks
                    .iter()
                    .map(|&(len, gap, _, _)| {
                        src += if gap == 2 { 7 } else { 0 };
                        let c = BlockCopy { src, dst: 0, len };
                        src += len;
                        c
                    })
                    .collect();
                // Destination order: runs of the source order, runs shuffled by their key.
                let mut order: Vec<usize> = (0..out.len()).collect();
                order.sort_by_key(|&i| (blocks[i].3 >> 61, i));
                let mut dst = 0;
                for i in order {
                    dst += if blocks[i].2 == 2 { 5 } else { 0 };
                    out[i].dst = dst;
                    dst += out[i].len;
                }
                out
            },
        )
    }

    fn extent(c: &[BlockCopy]) -> (usize, usize) {
        (
            c.iter().map(|c| c.src + c.len).max().unwrap_or(0) as usize,
            c.iter().map(|c| c.dst + c.len).max().unwrap_or(0) as usize,
        )
    }

    proptest! {
        #[test]
        fn merge_lands_the_same_bytes_in_fewer_writes(c in copies(), max in 1u64..200) {
            let max = max.max(c.iter().map(|c| c.len).max().unwrap_or(1));
            let m = merge(&c, max).unwrap();
            let (sl, dl) = extent(&c);
            let src: Vec<u8> = (0..sl).map(|i| (i * 7 + 1) as u8 | 1).collect();
            prop_assert_eq!(apply(&src, dl, &c), apply(&src, dl, &m));
            let nonempty = c.iter().filter(|c| c.len > 0).count();
            prop_assert!(m.len() <= nonempty);
            prop_assert_eq!(m.iter().map(|c| c.len).sum::<u64>(), c.iter().map(|c| c.len).sum::<u64>());
            prop_assert!(m.iter().all(|c| c.len > 0 && c.len <= max));
            // Maximal: no two runs could still merge.
            for a in &m {
                for b in &m {
                    prop_assert!(
                        !(a.src + a.len == b.src && a.dst + a.len == b.dst && a.len + b.len <= max),
                        "{:?} and {:?} could merge", a, b
                    );
                }
            }
            // Idempotent.
            prop_assert_eq!(merge(&m, max).unwrap(), m);
        }

        #[test]
        fn unlimited_merge_of_one_contiguous_run_is_one_write(lens in prop::collection::vec(1u64..100, 1..50), base in 0u64..1000) {
            let mut at = 0;
            let c: Vec<BlockCopy> = lens.iter().map(|&len| { let c = BlockCopy { src: at, dst: base + at, len }; at += len; c }).collect();
            prop_assert_eq!(merge(&c, u64::MAX / 4).unwrap(), vec![BlockCopy { src: 0, dst: base, len: at }]);
        }

        #[test]
        fn scattered_allocation_is_distinct_and_in_the_pool(need in 1u64..300, extra in 0u64..600, seed in any::<u64>()) {
            let pool = need + extra;
            let b = allocate(AllocKind::Scattered, need, pool, seed).unwrap();
            prop_assert_eq!(b.len() as u64, need);
            let mut s = b.clone();
            s.sort_unstable();
            s.dedup();
            prop_assert_eq!(s.len() as u64, need);
            prop_assert!(b.iter().all(|&x| u64::from(x) < pool));
        }
    }

    #[test]
    fn overlapping_destinations_and_oversized_copies_are_refused() {
        let c = [
            BlockCopy {
                src: 0,
                dst: 10,
                len: 5,
            },
            BlockCopy {
                src: 5,
                dst: 14,
                len: 5,
            },
        ];
        assert_eq!(
            merge(&c, 100),
            Err(KvError::OverlappingDestinations { a: 0, b: 1 })
        );
        assert_eq!(merge(&c[..1], 4), Err(KvError::TooLong(0)));
        let wrap = [BlockCopy {
            src: u64::MAX,
            dst: 0,
            len: 2,
        }];
        assert_eq!(merge(&wrap, 100), Err(KvError::TooLong(0)));
    }

    #[test]
    fn the_five_plans_have_the_work_request_counts_of_the_model() {
        // The 70B example: 80 layers x 4096 tokens x 256 B.
        let spec = KvSpec {
            shape: ModelShape {
                layers: 80,
                tokens: 4096,
                kv_bytes: 256,
            },
            pool_bytes: (3 * 160) << 20,
            qps: 1,
            seed: 1,
        };
        let plans = PlanSpec::defaults(AllocKind::Contiguous);
        let wrs: Vec<u64> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let b = spec.allocate(p, i as u32).unwrap();
                let t = spec.transfer(p, i as u32, &b).unwrap();
                assert_eq!(t.bytes, 160 << 20, "{}", p.name);
                t.wrs()
            })
            .collect();
        // Contiguous blocks: merging gives one WRITE per layer already.
        assert_eq!(wrs, [655_360, 40_960, 20_480, 80, 80]);
        // A busy pool: merged runs of about 8 pages.
        let p = &PlanSpec::defaults(AllocKind::Scattered)[3];
        let b = spec.allocate(p, 3).unwrap();
        let t = spec.transfer(p, 3, &b).unwrap();
        assert!((1000..20_480).contains(&t.wrs()), "{}", t.wrs());
        assert_eq!(t.copies, 20_480);
    }

    #[test]
    fn partial_last_page_copies_only_its_tokens() {
        let shape = ModelShape {
            layers: 2,
            tokens: 20,
            kv_bytes: 4,
        };
        for layout in [KvLayout::Separate, KvLayout::Adjacent] {
            let dst = PoolGeometry::carve(&shape, 16, layout, 10 * 2 * 2 * 64);
            let src = PoolGeometry { blocks: 2, ..dst };
            let c = layer_copies(&shape, 16, &src, &dst, &[3, 7], 1);
            assert_eq!(
                c.iter().map(|c| c.len).sum::<u64>(),
                20 * 2 * 4,
                "{layout:?}"
            );
            assert_eq!(merge(&c, MAX_WRITE).unwrap().len(), c.len());
        }
    }
}
