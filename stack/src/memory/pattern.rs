//! Pattern regions: bytes generated from a pattern when read and checked against it when
//! written, never stored ([`super::MrTable::register_pattern`]).

/// What a pattern region holds: byte `i` is `pattern[start + i % period]`, generated when
/// read, checked when written, never stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The pattern's bytes (shared: many regions use one).
    pub bytes: std::sync::Arc<[u8]>,
    /// Where byte 0 of the region is in it.
    pub start: usize,
    /// The period (`start + period` at most the pattern's length).
    pub period: usize,
}

impl Pattern {
    /// The `len` bytes at region offset `off`, appended to `out`.
    pub(super) fn read_into(&self, off: usize, len: usize, out: &mut Vec<u8>) {
        let mut at = off;
        let end = off + len;
        while at < end {
            let pos = at % self.period;
            let run = (self.period - pos).min(end - at);
            out.extend_from_slice(&self.bytes[self.start + pos..self.start + pos + run]);
            at += run;
        }
    }
    /// How many of `data`'s bytes differ from the pattern's at region offset `off`.
    pub(super) fn mismatches(&self, off: usize, data: &[u8]) -> u64 {
        let mut at = off;
        let mut rest = data;
        let mut bad = 0u64;
        while !rest.is_empty() {
            let pos = at % self.period;
            let run = (self.period - pos).min(rest.len());
            let want = &self.bytes[self.start + pos..self.start + pos + run];
            if want != &rest[..run] {
                bad += want
                    .iter()
                    .zip(&rest[..run])
                    .filter(|(a, b)| a != b)
                    .count() as u64;
            }
            rest = &rest[run..];
            at += run;
        }
        bad
    }
}

/// Disjoint written ranges a pattern region tracks, at most: a region written in more
/// pieces than this (only a peer scattering single bytes would) reports itself incomplete.
pub(super) const MAX_WRITTEN_RANGES: usize = 4096;

#[derive(Debug)]
pub(super) struct PatternState {
    pub(super) pattern: Pattern,
    /// The ranges written, in order of their start once merged.
    pub(super) written: Vec<(u64, u64)>,
    /// More disjoint ranges than [`MAX_WRITTEN_RANGES`] were written.
    pub(super) fragmented: bool,
    pub(super) mismatched: u64,
    /// What an atomic on the region reads and writes (the pattern has no room for it).
    pub(super) word: [u8; 8],
}

impl PatternState {
    pub(super) fn note_write(&mut self, off: usize, data: &[u8]) {
        self.mismatched += self.pattern.mismatches(off, data);
        let (a, b) = (off as u64, (off + data.len()) as u64);
        match self.written.last_mut() {
            // In order, as RC places a message: one range grows.
            Some(last) if last.1 == a => last.1 = b,
            _ => {
                self.written.push((a, b));
                if self.written.len() > MAX_WRITTEN_RANGES {
                    self.merge();
                    if self.written.len() > MAX_WRITTEN_RANGES {
                        self.fragmented = true;
                        self.written.truncate(MAX_WRITTEN_RANGES);
                    }
                }
            }
        }
    }
    pub(super) fn merge(&mut self) {
        self.written.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.written.len());
        for &(a, b) in &self.written {
            match out.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(b),
                _ => out.push((a, b)),
            }
        }
        self.written = out;
    }
}

/// What the transport wrote to a pattern region ([`super::MemoryRegion::pattern_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternCheck {
    /// Bytes written (each counted once, however often it was written).
    pub written: u64,
    /// Every byte of the region was written.
    pub complete: bool,
    /// Bytes written that were not the pattern's.
    pub mismatched: u64,
}

impl PatternCheck {
    /// Every byte written, and each as the pattern has it.
    pub fn verified(&self) -> bool {
        self.complete && self.mismatched == 0
    }
}
