//! Protection domains and registered memory (IBTA Vol 1 §10.6).
//!
//! A [`MemoryRegion`] owns its bytes (`Vec<u8>`), so the stack never holds a raw pointer. The
//! region gets a virtual address range (`va() .. va() + len()`) that peers use in RETH/AtomicETH,
//! an lkey for local scatter/gather entries and an rkey for remote access. Every access, local or
//! remote, goes through [`MrTable`] which checks key, protection domain, access flags and bounds
//! before a byte moves.
use core::fmt;
use core::ops::BitOr;

use roce_proto::RKey;

pub use crate::handle::{MrHandle, PdHandle};
use crate::rng::Rng;

mod pattern;

use pattern::PatternState;
pub use pattern::{Pattern, PatternCheck};

/// Access rights of a memory region or a queue pair (`ibv_access_flags` values).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u8);

impl Access {
    /// No rights beyond local read.
    pub const NONE: Self = Self(0);
    /// The local HCA may write (receive buffers, READ destinations, atomic results).
    pub const LOCAL_WRITE: Self = Self(1);
    /// Peers may RDMA WRITE.
    pub const REMOTE_WRITE: Self = Self(2);
    /// Peers may RDMA READ.
    pub const REMOTE_READ: Self = Self(4);
    /// Peers may run atomics.
    pub const REMOTE_ATOMIC: Self = Self(8);
    /// Every right.
    pub const ALL: Self = Self(15);
    /// Memory windows may be bound to the region (`IBV_ACCESS_MW_BIND`; not part of `ALL`).
    pub const MW_BIND: Self = Self(16);

    /// `true` when every right in `other` is present.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            "LOCAL_WRITE",
            "REMOTE_WRITE",
            "REMOTE_READ",
            "REMOTE_ATOMIC",
        ];
        let mut first = true;
        f.write_str("Access(")?;
        for (i, n) in names.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(n)?;
                first = false;
            }
        }
        f.write_str(")")
    }
}

/// A remote buffer: virtual address and rkey, as the peer advertised them out of band (the
/// VA and R_Key of a RETH or AtomicETH, IBTA Vol 1 §9.4.3, §9.4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Virtual address at the responder.
    pub va: u64,
    /// The responder region's rkey.
    pub rkey: RKey,
}

/// One scatter/gather entry: `length` bytes at virtual address `addr` of the region `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Virtual address (inside the region's `va() .. va() + len()`).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// Most scatter/gather entries in one work request.
pub const MAX_SGE: usize = 8;

/// A scatter/gather list of up to [`MAX_SGE`] entries, stored inline (posting allocates nothing).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SgList {
    sges: [Sge; MAX_SGE],
    len: u8,
}

impl fmt::Debug for SgList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl SgList {
    /// An empty list (a zero-length message).
    pub const fn new() -> Self {
        Self {
            sges: [Sge {
                addr: 0,
                length: 0,
                lkey: 0,
            }; MAX_SGE],
            len: 0,
        }
    }

    /// A list with one entry.
    pub const fn one(sge: Sge) -> Self {
        let mut l = Self::new();
        l.sges[0] = sge;
        l.len = 1;
        l
    }

    /// A list from a slice, or `None` when it has more than [`MAX_SGE`] entries.
    pub fn from_slice(sges: &[Sge]) -> Option<Self> {
        if sges.len() > MAX_SGE {
            return None;
        }
        let mut l = Self::new();
        l.sges[..sges.len()].copy_from_slice(sges);
        l.len = sges.len() as u8;
        Some(l)
    }

    /// Appends an entry; `false` when the list is full.
    pub fn push(&mut self, sge: Sge) -> bool {
        if usize::from(self.len) == MAX_SGE {
            return false;
        }
        self.sges[usize::from(self.len)] = sge;
        self.len += 1;
        true
    }

    /// The entries.
    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..usize::from(self.len)]
    }

    /// Sum of the entry lengths.
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.length)).sum()
    }
}

impl From<Sge> for SgList {
    fn from(s: Sge) -> Self {
        Self::one(s)
    }
}

/// Registered memory: bytes owned by the stack, reachable through keys.
#[derive(Debug)]
pub struct MemoryRegion {
    pd: PdHandle,
    access: Access,
    lkey: u32,
    rkey: RKey,
    va: u64,
    remote_valid: bool,
    /// The bytes (empty for a pattern region).
    data: Vec<u8>,
    len: usize,
    /// A pattern region's pattern and what was written to it ([`MrTable::register_pattern`]).
    pattern: Option<Box<PatternState>>,
    /// One bit per [`DIRTY_PAGE`] bytes: set when the transport writes there.
    dirty: Vec<u64>,
}

/// Granularity of a region's dirty map ([`MemoryRegion::dirty_ranges`]).
pub const DIRTY_PAGE: usize = 4096;

impl MemoryRegion {
    /// Protection domain.
    pub fn pd(&self) -> PdHandle {
        self.pd
    }
    /// Access flags given at registration.
    pub fn access(&self) -> Access {
        self.access
    }
    /// Local key (for [`Sge::lkey`]).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key (for peers' RETH / AtomicETH).
    pub fn rkey(&self) -> RKey {
        self.rkey
    }
    /// Virtual address of byte 0.
    pub fn va(&self) -> u64 {
        self.va
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// `true` for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// `false` once a SEND with invalidate named this region's rkey.
    pub fn rkey_valid(&self) -> bool {
        self.remote_valid
    }
    /// The bytes (none for a pattern region: see [`MemoryRegion::pattern_check`]).
    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }
    /// The bytes, writable by the application (none for a pattern region).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.data
    }
    /// A pattern region's pattern.
    pub fn pattern(&self) -> Option<&Pattern> {
        self.pattern.as_ref().map(|p| &p.pattern)
    }
    /// What the transport wrote to a pattern region so far (`None` for a region of bytes).
    pub fn pattern_check(&mut self) -> Option<PatternCheck> {
        let len = self.len as u64;
        let p = self.pattern.as_mut()?;
        p.merge();
        let written = p.written.iter().map(|(a, b)| b - a).sum();
        Some(PatternCheck {
            written,
            complete: !p.fragmented && (len == 0 || p.written == [(0, len)]),
            mismatched: p.mismatched,
        })
    }

    /// The byte ranges, in [`DIRTY_PAGE`] units (the last one cut at the region's end), that
    /// the transport wrote since registration or the last [`MemoryRegion::clear_dirty`]:
    /// RDMA WRITEs and atomics of peers, SEND data placed in receives, READ responses and
    /// atomic results. What the application writes itself is not tracked. With it, an
    /// application can check or reset just what was touched instead of a whole large region
    /// (whose untouched pages the operating system then never has to provide).
    pub fn dirty_ranges(&self) -> impl Iterator<Item = core::ops::Range<usize>> + '_ {
        let len = self.len;
        let mut page = 0usize;
        let pages = len.div_ceil(DIRTY_PAGE);
        core::iter::from_fn(move || {
            while page < pages && !self.is_dirty(page) {
                page += if self.dirty[page / 64] == 0 {
                    64 - page % 64
                } else {
                    1
                };
            }
            if page >= pages {
                return None;
            }
            let start = page;
            while page < pages && self.is_dirty(page) {
                page += 1;
            }
            Some(start * DIRTY_PAGE..(page * DIRTY_PAGE).min(len))
        })
    }

    /// Forgets what the transport wrote (the next [`MemoryRegion::dirty_ranges`] starts empty).
    pub fn clear_dirty(&mut self) {
        self.dirty.fill(0);
    }

    /// Zeroes the dirty ranges and clears them: the region is all zeros again if it was at
    /// registration and the application wrote nothing itself.
    pub fn zero_dirty(&mut self) {
        let ranges: Vec<_> = self.dirty_ranges().collect();
        for r in ranges {
            if let Some(d) = self.data.get_mut(r) {
                d.fill(0);
            }
        }
        self.clear_dirty();
    }

    fn is_dirty(&self, page: usize) -> bool {
        self.dirty[page / 64] >> (page % 64) & 1 == 1
    }

    fn mark_dirty(&mut self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        for page in off / DIRTY_PAGE..=(off + len - 1) / DIRTY_PAGE {
            self.dirty[page / 64] |= 1 << (page % 64);
        }
    }
    /// A scatter/gather entry for `len` bytes at `offset` (not checked here; posting checks).
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.va.wrapping_add(offset),
            length: len,
            lkey: self.lkey,
        }
    }
    /// The remote address of byte `offset`: what the owner advertises to a peer for its RETH
    /// or AtomicETH (not checked here; the responder checks).
    pub fn remote_addr(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            va: self.va.wrapping_add(offset),
            rkey: self.rkey,
        }
    }
}

/// Why a memory access was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemError {
    /// Key unknown, other protection domain, missing right, or out of bounds.
    Protection,
    /// The scatter list is shorter than the data.
    Length,
}

/// All regions of a device.
///
/// Keys are `(index + 1) << 8 | key byte` (the verbs layout: the upper 24 bits find the region,
/// the low 8 are its key), and each region's virtual address is a page-aligned address below
/// 2^47. The key byte and the address come from the table's generator, seeded by
/// [`DeviceConfig::key_seed`](crate::DeviceConfig::key_seed): with a seed from the operating
/// system's CSPRNG an off-path sender can guess neither.
#[derive(Debug)]
pub struct MrTable {
    slots: Vec<Option<MemoryRegion>>,
    keys: Rng,
    /// Memory windows; their rkeys are `(MW_KEYS + index + 1) << 8 | key byte`.
    mws: Vec<Option<Window>>,
}

/// Where memory window keys start (`key >> 8`), far above any region index.
const MW_KEYS: u32 = 0x80_0000;

/// A memory window (IBTA Vol 1 §10.6.7): a remote key of its own over a range of a region,
/// with rights no wider than the region's.
#[derive(Debug, Clone, Copy)]
struct Window {
    pd: PdHandle,
    kind: MwType,
    rkey: u32,
    /// (region index, start address, length, rights) while bound.
    bound: Option<(usize, u64, u64, Access)>,
    /// Type 2: the QP the window is bound through; only it may use the rkey.
    qp: Option<roce_proto::Qpn>,
}

/// The two kinds of memory windows (IBTA Vol 1 §10.6.7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwType {
    /// Bound with a verb; not invalidatable by a SEND with Invalidate.
    Type1,
    /// Bound through a QP, which alone may use it; invalidated locally or by a SEND with
    /// Invalidate from that QP's peer.
    Type2,
}

/// Why a memory window could not be bound or invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MwError {
    /// No such window, or the key does not name its current binding.
    #[error("no such memory window (or a stale key)")]
    NoSuchWindow,
    /// The window and the region (or QP) are in different protection domains.
    #[error("the window and the region are in different protection domains")]
    WrongPd,
    /// The region does not allow binding windows (no MW_BIND).
    #[error("the region does not allow memory windows")]
    NotBindable,
    /// Remote write or atomic rights asked over a region without local write.
    #[error("remote write or atomic rights need a locally writable region")]
    Rights,
    /// The range is not inside the region.
    #[error("the range is not inside the region")]
    Range,
    /// A type 2 window that is already bound, or the wrong type for the operation.
    #[error("the window is in the wrong state or of the wrong type for this")]
    State,
}

impl Default for MrTable {
    fn default() -> Self {
        Self::new(0)
    }
}

impl MrTable {
    /// An empty table whose keys and addresses derive from `key_seed`.
    pub(crate) fn new(key_seed: u64) -> Self {
        Self {
            slots: Vec::new(),
            keys: Rng::new(key_seed ^ 0x6b65_7973),
            mws: Vec::new(),
        }
    }

    /// [`MrTable::register`], or `Err` when `len` bytes cannot be had (past the address
    /// space, the process's limit or what the kernel will commit) instead of aborting.
    ///
    /// The region's bytes are zeroed pages the kernel provides on first touch, as
    /// `vec![0; len]` asks for them; stable Rust has no fallible form of that request. So
    /// the size is first reserved with `try_reserve_exact` (which fails cleanly where the
    /// zeroed allocation would abort) and released, and the region then allocated as usual:
    /// a region registered at the limit of what can be had is not written to, page by page,
    /// on registration.
    pub(crate) fn try_register(
        &mut self,
        pd: PdHandle,
        len: usize,
        access: Access,
    ) -> Result<MrHandle, std::collections::TryReserveError> {
        let mut probe: Vec<u8> = Vec::new();
        probe.try_reserve_exact(len)?;
        let mut dirty: Vec<u64> = Vec::new();
        dirty.try_reserve_exact(len.div_ceil(DIRTY_PAGE).div_ceil(64))?;
        drop((probe, dirty));
        Ok(self.register(pd, len, access))
    }

    pub(crate) fn register(&mut self, pd: PdHandle, len: usize, access: Access) -> MrHandle {
        let idx = self
            .slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len());
        if idx == self.slots.len() {
            self.slots.push(None);
        }
        let key = ((idx as u32 + 1) << 8) | (self.keys.next_u64() as u32 & 0xff);
        // A page-aligned base in [4 KiB, 2^47): room above it for any region length.
        let va = (self.keys.below((1 << 35) - 1) + 1) << 12;
        self.slots[idx] = Some(MemoryRegion {
            pd,
            access,
            lkey: key,
            rkey: RKey(key),
            va,
            remote_valid: true,
            data: vec![0; len],
            len,
            pattern: None,
            dirty: vec![0; len.div_ceil(DIRTY_PAGE).div_ceil(64)],
        });
        MrHandle(idx as u32)
    }

    /// Registers a pattern region of `len` bytes: reads give `pattern`'s bytes, writes are
    /// checked against them and not stored ([`MemoryRegion::pattern_check`]), so the region
    /// costs its bookkeeping, not its length. `None` when the pattern's period is 0 or runs
    /// past its bytes.
    pub(crate) fn register_pattern(
        &mut self,
        pd: PdHandle,
        len: usize,
        access: Access,
        pattern: Pattern,
    ) -> Option<MrHandle> {
        if pattern.period == 0 || pattern.start + pattern.period > pattern.bytes.len() {
            return None;
        }
        let h = self.register(pd, 0, access);
        let mr = self.slots[h.0 as usize].as_mut()?;
        mr.len = len;
        mr.dirty = vec![0; len.div_ceil(DIRTY_PAGE).div_ceil(64)];
        mr.pattern = Some(Box::new(PatternState {
            pattern,
            written: Vec::new(),
            fragmented: false,
            mismatched: 0,
            word: [0; 8],
        }));
        Some(h)
    }

    pub(crate) fn deregister(&mut self, h: MrHandle) -> bool {
        match self.slots.get_mut(h.0 as usize) {
            Some(s @ Some(_)) => {
                *s = None;
                // Windows over it grant nothing any more.
                for w in self.mws.iter_mut().flatten() {
                    if w.bound.is_some_and(|b| b.0 == h.0 as usize) {
                        w.bound = None;
                    }
                }
                true
            }
            _ => false,
        }
    }

    /// The region behind a handle.
    pub fn get(&self, h: MrHandle) -> Option<&MemoryRegion> {
        self.slots.get(h.0 as usize)?.as_ref()
    }

    /// The region behind a handle, writable.
    pub fn get_mut(&mut self, h: MrHandle) -> Option<&mut MemoryRegion> {
        self.slots.get_mut(h.0 as usize)?.as_mut()
    }

    /// Allocates a memory window of `pd` (type 1 starts valid and empty, type 2 free).
    pub(crate) fn alloc_mw(&mut self, pd: PdHandle, kind: MwType) -> Option<RKey> {
        if self.mws.len() >= 1 << 20 {
            return None;
        }
        let idx = self.mws.len() as u32;
        let rkey = ((MW_KEYS + idx + 1) << 8) | (self.keys.next_u64() as u32 & 0xff);
        self.mws.push(Some(Window {
            pd,
            kind,
            rkey,
            bound: None,
            qp: None,
        }));
        Some(RKey(rkey))
    }

    fn mw_mut(&mut self, rkey: RKey) -> Option<&mut Window> {
        let idx = (rkey.0 >> 8).checked_sub(MW_KEYS + 1)? as usize;
        let w = self.mws.get_mut(idx)?.as_mut()?;
        (w.rkey == rkey.0).then_some(w)
    }

    /// Binds the window named by `rkey` (its current key) to `[va, va + len)` of region `mr`
    /// with `access` (IBTA Vol 1 §10.6.7.2, the checks of C10-72..75). A type 2 window is
    /// bound through `qp`, which alone may then use it. The key byte becomes `key_byte`
    /// (type 2) or the old one plus one (type 1). Returns the new rkey.
    pub(crate) fn bind_mw(
        &mut self,
        rkey: RKey,
        mr: MrHandle,
        (va, len, access): (u64, u64, Access),
        qp: Option<(roce_proto::Qpn, PdHandle, u8)>,
    ) -> Result<RKey, MwError> {
        let (mr_pd, mr_va, mr_len, mr_access) = {
            let m = self.get(mr).ok_or(MwError::NoSuchWindow)?;
            (m.pd, m.va, m.len as u64, m.access)
        };
        let w = self.mw_mut(rkey).ok_or(MwError::NoSuchWindow)?;
        match (w.kind, qp) {
            (MwType::Type1, None) => {}
            (MwType::Type2, Some((_, qp_pd, _))) if w.bound.is_none() => {
                if qp_pd != w.pd {
                    return Err(MwError::WrongPd);
                }
            }
            _ => return Err(MwError::State),
        }
        if mr_pd != w.pd {
            return Err(MwError::WrongPd);
        }
        if !mr_access.contains(Access::MW_BIND) {
            return Err(MwError::NotBindable);
        }
        let remote_write = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);
        if access.0 & remote_write.0 != 0 && !mr_access.contains(Access::LOCAL_WRITE) {
            return Err(MwError::Rights);
        }
        let off = va.checked_sub(mr_va).ok_or(MwError::Range)?;
        if off.checked_add(len).is_none_or(|end| end > mr_len) {
            return Err(MwError::Range);
        }
        let byte = match qp {
            Some((_, _, b)) => u32::from(b),
            None => (w.rkey + 1) & 0xff,
        };
        w.rkey = (w.rkey & !0xff) | byte;
        // A window grants only remote rights (and never more than the region's).
        let rights = Access(access.0 & mr_access.0 & Access::ALL.0 & !Access::LOCAL_WRITE.0);
        w.bound = (len > 0).then_some((mr.0 as usize, va, len, rights));
        w.qp = qp.map(|(q, _, _)| q);
        Ok(RKey(w.rkey))
    }

    /// Invalidates a type 2 window (locally, or for a SEND with Invalidate from `qp`'s peer:
    /// then it must be bound through `qp`). Type 1 windows cannot be invalidated.
    pub(crate) fn invalidate_mw(
        &mut self,
        pd: PdHandle,
        rkey: RKey,
        qp: Option<roce_proto::Qpn>,
    ) -> Result<(), MwError> {
        let w = self.mw_mut(rkey).ok_or(MwError::NoSuchWindow)?;
        if w.kind != MwType::Type2 || w.bound.is_none() {
            return Err(MwError::State);
        }
        if w.pd != pd || qp.is_some_and(|q| w.qp != Some(q)) {
            return Err(MwError::WrongPd);
        }
        w.bound = None;
        w.qp = None;
        Ok(())
    }

    /// A remote access through a window: the key, PD, the binding QP for type 2, rights and
    /// range; returns the region index and offset.
    fn check_mw(
        &self,
        key: u32,
        pd: PdHandle,
        qp: roce_proto::Qpn,
        need: Access,
        va: u64,
        len: u64,
    ) -> Result<(usize, usize), MemError> {
        let idx = (key >> 8)
            .checked_sub(MW_KEYS + 1)
            .ok_or(MemError::Protection)? as usize;
        let w = self
            .mws
            .get(idx)
            .and_then(Option::as_ref)
            .ok_or(MemError::Protection)?;
        let (mr_idx, start, wlen, rights) = w.bound.ok_or(MemError::Protection)?;
        if w.rkey != key || w.pd != pd || !rights.contains(need) {
            return Err(MemError::Protection);
        }
        if w.kind == MwType::Type2 && w.qp != Some(qp) {
            return Err(MemError::Protection);
        }
        let off = va.checked_sub(start).ok_or(MemError::Protection)?;
        if off.checked_add(len).is_none_or(|e| e > wlen) {
            return Err(MemError::Protection);
        }
        let mr = self
            .slots
            .get(mr_idx)
            .and_then(Option::as_ref)
            .ok_or(MemError::Protection)?;
        Ok((mr_idx, (va - mr.va) as usize))
    }

    fn by_key(&self, key: u32) -> Option<(usize, &MemoryRegion)> {
        let idx = (key >> 8).checked_sub(1)? as usize;
        let mr = self.slots.get(idx)?.as_ref()?;
        (mr.lkey == key).then_some((idx, mr))
    }

    /// Index and byte offset of `[va, va+len)` in the region `key` if it is in `pd`, has
    /// `need` and contains the range.
    fn check(
        &self,
        key: u32,
        remote: bool,
        pd: PdHandle,
        need: Access,
        va: u64,
        len: u64,
    ) -> Result<(usize, usize), MemError> {
        let (idx, mr) = self.by_key(key).ok_or(MemError::Protection)?;
        if mr.pd != pd || !mr.access.contains(need) || (remote && !mr.remote_valid) {
            return Err(MemError::Protection);
        }
        let off = va.checked_sub(mr.va).ok_or(MemError::Protection)?;
        let end = off.checked_add(len).ok_or(MemError::Protection)?;
        if end > mr.len as u64 {
            return Err(MemError::Protection);
        }
        Ok((idx, off as usize))
    }

    /// Checks a remote access by QP `qp` (key, PD, right, bounds; through a memory window
    /// when the key is one); returns (region index, offset).
    pub(crate) fn remote(
        &self,
        rkey: RKey,
        (pd, qp): (PdHandle, roce_proto::Qpn),
        need: Access,
        va: u64,
        len: u64,
    ) -> Result<(usize, usize), MemError> {
        if rkey.0 >> 8 > MW_KEYS {
            return self.check_mw(rkey.0, pd, qp, need, va, len);
        }
        self.check(rkey.0, true, pd, need, va, len)
    }

    /// Bytes of a checked region (generated for a pattern region).
    pub(crate) fn bytes(&self, idx: usize, off: usize, len: usize) -> std::borrow::Cow<'_, [u8]> {
        match &self.slots[idx] {
            Some(mr) => match &mr.pattern {
                Some(p) => {
                    let mut v = Vec::with_capacity(len);
                    p.pattern.read_into(off, len, &mut v);
                    std::borrow::Cow::Owned(v)
                }
                None => std::borrow::Cow::Borrowed(&mr.data[off..off + len]),
            },
            None => std::borrow::Cow::Borrowed(&[]),
        }
    }

    /// Writes `data` at `off` of a checked region (marked dirty; checked against the pattern
    /// of a pattern region).
    pub(crate) fn write(&mut self, idx: usize, off: usize, data: &[u8]) {
        if let Some(mr) = &mut self.slots[idx] {
            mr.mark_dirty(off, data.len());
            match &mut mr.pattern {
                Some(p) => p.note_write(off, data),
                None => mr.data[off..off + data.len()].copy_from_slice(data),
            }
        }
    }

    /// The 8 bytes at `off` of a checked region, for an atomic to read and write (marked
    /// dirty). A pattern region has one word of its own for atomics, wherever they land.
    pub(crate) fn word_mut(&mut self, idx: usize, off: usize) -> &mut [u8] {
        match &mut self.slots[idx] {
            Some(mr) => {
                mr.mark_dirty(off, 8);
                match &mut mr.pattern {
                    Some(p) => &mut p.word,
                    None => &mut mr.data[off..off + 8],
                }
            }
            None => &mut [],
        }
    }

    /// Checks every entry of a local list (for posting): key, PD, LOCAL_WRITE if `write`.
    pub(crate) fn check_sgl(&self, pd: PdHandle, sgl: &SgList, write: bool) -> bool {
        let need = if write {
            Access::LOCAL_WRITE
        } else {
            Access::NONE
        };
        sgl.as_slice().iter().all(|s| {
            s.length == 0
                || self
                    .check(s.lkey, false, pd, need, s.addr, u64::from(s.length))
                    .is_ok()
        })
    }

    /// The `len` bytes at message offset `offset` of a gather list: borrowed straight from
    /// the region when they lie in one entry, otherwise copied into `scratch`.
    pub(crate) fn gather<'a>(
        &'a self,
        pd: PdHandle,
        sgl: &SgList,
        offset: u64,
        len: usize,
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], MemError> {
        if len == 0 {
            return Ok(&[]);
        }
        let mut skip = offset;
        let mut first = true;
        scratch.clear();
        for s in sgl.as_slice() {
            let slen = u64::from(s.length);
            if skip >= slen {
                skip -= slen;
                continue;
            }
            let want = len - scratch.len();
            let take = (slen - skip).min(want as u64) as usize;
            let (idx, off) = self.check(
                s.lkey,
                false,
                pd,
                Access::NONE,
                s.addr.wrapping_add(skip),
                take as u64,
            )?;
            let (src, generated) = match &self.slots[idx] {
                Some(mr) => match &mr.pattern {
                    Some(p) => {
                        // Generated into the scratch, never borrowed.
                        p.pattern.read_into(off, take, scratch);
                        (&[][..], true)
                    }
                    None => (&mr.data[off..off + take], false),
                },
                None => (&[][..], false),
            };
            if generated {
                first = false;
                skip = 0;
                if scratch.len() == len {
                    return Ok(scratch);
                }
                continue;
            }
            if first && take == len {
                return Ok(src);
            }
            first = false;
            scratch.extend_from_slice(src);
            skip = 0;
            if scratch.len() == len {
                return Ok(scratch);
            }
        }
        Err(MemError::Length)
    }

    /// Writes `data` at message offset `offset` of a scatter list (LOCAL_WRITE required).
    pub(crate) fn scatter(
        &mut self,
        pd: PdHandle,
        sgl: &SgList,
        offset: u64,
        mut data: &[u8],
    ) -> Result<(), MemError> {
        let mut skip = offset;
        for s in sgl.as_slice() {
            if data.is_empty() {
                return Ok(());
            }
            let slen = u64::from(s.length);
            if skip >= slen {
                skip -= slen;
                continue;
            }
            let take = (slen - skip).min(data.len() as u64) as usize;
            let (idx, off) = self.check(
                s.lkey,
                false,
                pd,
                Access::LOCAL_WRITE,
                s.addr.wrapping_add(skip),
                take as u64,
            )?;
            self.write(idx, off, &data[..take]);
            data = &data[take..];
            skip = 0;
        }
        if data.is_empty() {
            Ok(())
        } else {
            Err(MemError::Length)
        }
    }

    /// Invalidates remote access through `rkey` if it belongs to `pd`.
    pub(crate) fn invalidate(&mut self, pd: PdHandle, rkey: RKey) -> bool {
        let Some((idx, _)) = self.by_key(rkey.0) else {
            return false;
        };
        match &mut self.slots[idx] {
            Some(mr) if mr.pd == pd => {
                mr.remote_valid = false;
                true
            }
            _ => false,
        }
    }

    /// Makes a region's rkey valid again after an invalidation.
    pub(crate) fn revalidate(&mut self, h: MrHandle) -> bool {
        match self.get_mut(h) {
            Some(mr) => {
                mr.remote_valid = true;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;
