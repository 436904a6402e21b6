//! Streaming capture reader: pcap (µs or ns, either byte order, and the "modified" variant)
//! and pcapng (several sections and interfaces, EPB and SPB), over any [`Read`].
//!
//! `pcap-parser` parses the container records; this module owns the buffer, so it knows the
//! absolute byte offset of every record (for error messages) and keeps memory constant: the
//! buffer holds at most one record beyond the read-ahead, whatever the file size.
//!
//! End of input is reported in two distinct ways: [`CaptureReader::next_record`] returns
//! `Ok(None)` when the input ends exactly on a record boundary (`Eof`), and
//! `Err(ReadError::Truncated)` when it ends inside a record (`Incomplete`).
use crate::error::ReadError;
use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapNGPacketBlock;
use std::io::{ErrorKind, Read};

/// Bytes read from the source at a time (and the initial buffer size).
const CHUNK: usize = 256 * 1024;
/// Largest record accepted; a length field beyond this is taken as corruption, so a bad file
/// cannot make the reader allocate without bound.
pub const MAX_RECORD: usize = 16 * 1024 * 1024;

/// Most interfaces one pcapng section may describe (an enhanced packet block names its
/// interface with a 32-bit index, so the table would otherwise grow with the input).
pub const MAX_INTERFACES: usize = 65536;

/// A packet time stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nanos: u32,
}

impl Timestamp {
    /// Nanoseconds since the Unix epoch (saturating).
    pub fn as_ns(self) -> i64 {
        self.secs
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::from(self.nanos))
    }

    /// `self - earlier`, saturating at zero.
    pub fn since(self, earlier: Self) -> Self {
        let mut secs = self.secs.saturating_sub(earlier.secs);
        let mut nanos = i64::from(self.nanos) - i64::from(earlier.nanos);
        if nanos < 0 {
            nanos += 1_000_000_000;
            secs = secs.saturating_sub(1);
        }
        if secs < 0 {
            return Self::default();
        }
        Self {
            secs,
            nanos: nanos as u32,
        }
    }
}

/// Which container the input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap.
    Pcap {
        /// Records are big-endian.
        big_endian: bool,
        /// Nanosecond time stamps (magic 0xa1b23c4d).
        nanos: bool,
        /// The "modified" (Kuznetzov) variant with 24-byte record headers.
        modified: bool,
        /// The file's link type.
        link_type: u32,
        /// The file's snap length.
        snaplen: u32,
    },
    /// pcapng.
    PcapNg {
        /// The current section is big-endian.
        big_endian: bool,
    },
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link_type: u32,
    snaplen: u32,
    /// What a time stamp unit is (pcapng `if_tsresol`).
    unit: TsUnit,
    offset: i64,
    /// What its last interface statistics block said the capture dropped (`isb_ifdrop` +
    /// `isb_osdrop`; `None`: no block said).
    dropped: Option<u64>,
}

/// One captured packet, borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Time stamp.
    pub ts: Timestamp,
    /// Decimal digits of the time stamp's precision (6 for µs, 9 for ns).
    pub ts_digits: u8,
    /// Link type (LINKTYPE_* value).
    pub link_type: u32,
    /// Interface index (pcapng), 0 for pcap.
    pub interface: u32,
    /// Length of the packet on the wire.
    pub orig_len: u32,
    /// The captured bytes (`data.len()` is the captured length).
    pub data: &'a [u8],
    /// Byte offset of the record in the input.
    pub offset: u64,
}

/// Streaming reader over a pcap or pcapng byte stream.
#[derive(Debug)]
pub struct CaptureReader<R> {
    src: R,
    name: String,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Input offset of `buf[0]`.
    base: u64,
    eof: bool,
    format: Format,
    interfaces: Vec<Interface>,
    /// What the interface statistics of earlier sections said the capture dropped.
    dropped_before: Option<u64>,
}

enum Step {
    Packet {
        consumed: usize,
        data: core::ops::Range<usize>,
        ts: Timestamp,
        ts_digits: u8,
        link_type: u32,
        interface: u32,
        orig_len: u32,
    },
    Skip(usize),
    Section(usize, bool),
    Interface(usize, Interface),
    /// An interface statistics block: (length, interface, packets it says were dropped).
    Stats(usize, u32, Option<u64>),
    Incomplete(usize),
    Error(&'static str),
}

/// The sum of two counts either of which may be unknown (`None` only when both are).
fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        _ => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

fn needed(n: nom::Needed) -> usize {
    match n {
        nom::Needed::Size(s) => s.get(),
        nom::Needed::Unknown => 1,
    }
}

/// Nanoseconds in `frac` units of which `resolution` make a second (`frac < resolution`).
fn frac_to_nanos(frac: u64, resolution: u64) -> u32 {
    match resolution {
        1_000_000 => (frac * 1000) as u32,
        1_000_000_000 => frac as u32,
        r => ((u128::from(frac) * 1_000_000_000) / u128::from(r.max(1))) as u32,
    }
}

fn digits_for(resolution: u64) -> u8 {
    if resolution <= 1_000_000 {
        6
    } else {
        9
    }
}

/// A pcapng interface's time stamp unit (its `if_tsresol` option, pcapng §4.2): 10^-e s when
/// the top bit is clear, 2^-e s when it is set, e = the low seven bits. Every value is legal,
/// 0 and 0x80 (one-second units) and units far below a nanosecond included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TsUnit {
    /// Units per second, when that number fits 64 bits (10^0..=10^19, 2^0..=2^63).
    PerSecond(u64),
    /// 10^e units per second with e > 19: a 64-bit time stamp is under 2 s.
    Pow10(u8),
    /// 2^e units per second with e > 63: a 64-bit time stamp is under 1 s.
    Pow2(u8),
}

impl TsUnit {
    /// The unit an `if_tsresol` byte names.
    fn of(tsresol: u8) -> Self {
        let e = tsresol & 0x7f;
        if tsresol & 0x80 == 0 {
            match 10u64.checked_pow(u32::from(e)) {
                Some(r) => Self::PerSecond(r),
                None => Self::Pow10(e),
            }
        } else {
            match 1u64.checked_shl(u32::from(e)) {
                Some(r) if e < 64 => Self::PerSecond(r),
                _ => Self::Pow2(e),
            }
        }
    }

    /// Decimal digits its time stamps are shown with.
    fn digits(self) -> u8 {
        match self {
            Self::PerSecond(r) => digits_for(r),
            Self::Pow10(_) | Self::Pow2(_) => 9,
        }
    }

    /// `t` units after `offset` seconds.
    fn stamp(self, t: u64, offset: i64) -> Timestamp {
        let (secs, nanos) = match self {
            Self::PerSecond(r) => {
                let r = r.max(1);
                (t / r, frac_to_nanos(t % r, r))
            }
            // t < 2^64 < 10^20: under 2 s; t / 10^(e-9) ns (e-9 > 10).
            Self::Pow10(e) => {
                let ns = 10u128
                    .checked_pow(u32::from(e) - 9)
                    .map_or(0, |d| u128::from(t) / d);
                ((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32)
            }
            // t < 2^64 <= 2^e: under a second; t * 10^9 / 2^e ns (fits 128 bits).
            Self::Pow2(e) => (0, ((u128::from(t) * 1_000_000_000) >> e) as u32),
        };
        Timestamp {
            secs: offset.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX)),
            nanos,
        }
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header. `name` is used in error messages (the path, or `-`).
    pub fn new(src: R, name: &str) -> Result<Self, ReadError> {
        let mut r = Self {
            src,
            name: name.to_string(),
            buf: vec![0; CHUNK],
            start: 0,
            end: 0,
            base: 0,
            eof: false,
            format: Format::PcapNg { big_endian: false },
            interfaces: Vec::new(),
            dropped_before: None,
        };
        r.fill(24)?;
        let avail = &r.buf[r.start..r.end];
        if avail.len() < 4 {
            return Err(ReadError::NotCapture {
                name: r.name.clone(),
                offset: 0,
                reason: "shorter than a file header",
            });
        }
        let magic = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]);
        if magic == 0x0a0d_0d0a {
            // pcapng: the section header is parsed as an ordinary block by next_record.
            return Ok(r);
        }
        match pcap_parser::parse_pcap_header(avail) {
            Ok((_, h)) => {
                r.format = Format::Pcap {
                    big_endian: h.is_bigendian(),
                    nanos: h.is_nanosecond_precision(),
                    modified: h.is_modified_format(),
                    link_type: h.network.0 as u32,
                    snaplen: h.snaplen,
                };
                r.start += 24;
                Ok(r)
            }
            Err(nom::Err::Incomplete(_)) => Err(ReadError::NotCapture {
                name: r.name.clone(),
                offset: 0,
                reason: "shorter than a pcap file header",
            }),
            Err(_) => Err(ReadError::NotCapture {
                name: r.name.clone(),
                offset: 0,
                reason: "no pcap or pcapng magic number",
            }),
        }
    }

    /// Packets the capture itself dropped, as the file's pcapng interface statistics
    /// blocks say (`isb_ifdrop` + `isb_osdrop` of each interface's last block, over every
    /// section read so far); `None` when no block said (a pcap file never does: tcpdump
    /// prints its "dropped by kernel" count, it does not write it).
    pub fn dropped(&self) -> Option<u64> {
        add(self.dropped_before, self.section_dropped())
    }

    /// [`CaptureReader::dropped`] of the current section.
    fn section_dropped(&self) -> Option<u64> {
        self.interfaces
            .iter()
            .filter_map(|i| i.dropped)
            .fold(None, |a, d| add(a, Some(d)))
    }

    /// The container format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The name given at construction.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes of input consumed so far (the offset of the next record).
    pub fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Makes at least `want` unconsumed bytes available, unless the input ends first.
    fn fill(&mut self, want: usize) -> Result<(), ReadError> {
        if want > MAX_RECORD + 64 {
            return Err(ReadError::Malformed {
                name: self.name.clone(),
                offset: self.offset(),
                reason: "record length beyond 16 MiB",
            });
        }
        if self.end - self.start >= want || self.eof {
            return Ok(());
        }
        // Compact, then grow only if one record needs more than the buffer.
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.base += self.start as u64;
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < want {
            self.buf.resize(want.next_power_of_two().max(CHUNK), 0);
        }
        while self.end < want && !self.eof {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(ReadError::Io {
                        name: self.name.clone(),
                        offset: self.base + self.end as u64,
                        source: e,
                    })
                }
            }
        }
        Ok(())
    }

    fn step(&self) -> Step {
        let avail = &self.buf[self.start..self.end];
        let range_of = |d: &[u8]| {
            let s = d.as_ptr() as usize - self.buf.as_ptr() as usize;
            s..s + d.len()
        };
        match self.format {
            Format::Pcap {
                big_endian,
                nanos,
                modified,
                link_type,
                ..
            } => {
                let res = if modified {
                    pcap_parser::parse_pcap_frame_modified(avail)
                } else if big_endian {
                    pcap_parser::parse_pcap_frame_be(avail)
                } else {
                    pcap_parser::parse_pcap_frame(avail)
                };
                match res {
                    Ok((rest, b)) => {
                        let frac_max = if nanos { 1_000_000_000 } else { 1_000_000 };
                        let frac = u64::from(b.ts_usec) % frac_max;
                        let extra = u64::from(b.ts_usec) / frac_max;
                        Step::Packet {
                            consumed: avail.len() - rest.len(),
                            data: range_of(b.data),
                            ts: Timestamp {
                                secs: i64::from(b.ts_sec) + extra as i64,
                                nanos: frac_to_nanos(frac, frac_max),
                            },
                            ts_digits: if nanos { 9 } else { 6 },
                            link_type,
                            interface: 0,
                            orig_len: b.origlen,
                        }
                    }
                    Err(nom::Err::Incomplete(n)) => Step::Incomplete(avail.len() + needed(n)),
                    Err(_) => Step::Error("record header"),
                }
            }
            Format::PcapNg { big_endian } => {
                // Block length is at bytes 4..8: ask for the whole block at once.
                if avail.len() >= 8 {
                    let l = if big_endian && avail[..4] != [0x0a, 0x0d, 0x0d, 0x0a] {
                        u32::from_be_bytes([avail[4], avail[5], avail[6], avail[7]])
                    } else if avail[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                        // Section header: its own byte-order magic decides.
                        if avail.len() >= 12 && avail[8..12] == [0x1a, 0x2b, 0x3c, 0x4d] {
                            u32::from_be_bytes([avail[4], avail[5], avail[6], avail[7]])
                        } else if avail.len() >= 12 {
                            u32::from_le_bytes([avail[4], avail[5], avail[6], avail[7]])
                        } else {
                            return Step::Incomplete(12);
                        }
                    } else {
                        u32::from_le_bytes([avail[4], avail[5], avail[6], avail[7]])
                    } as usize;
                    if l < 12 || !l.is_multiple_of(4) {
                        return Step::Error("pcapng block length");
                    }
                    if avail.len() < l {
                        return Step::Incomplete(l);
                    }
                } else {
                    return Step::Incomplete(8);
                }
                let res = if big_endian {
                    pcap_parser::parse_block_be(avail)
                } else {
                    pcap_parser::parse_block_le(avail)
                };
                match res {
                    Ok((rest, block)) => {
                        let consumed = avail.len() - rest.len();
                        match block {
                            Block::SectionHeader(shb) => Step::Section(consumed, shb.big_endian()),
                            Block::InterfaceDescription(idb) => Step::Interface(
                                consumed,
                                Interface {
                                    link_type: idb.linktype.0 as u32,
                                    snaplen: idb.snaplen,
                                    unit: TsUnit::of(idb.if_tsresol),
                                    offset: idb.ts_offset(),
                                    dropped: None,
                                },
                            ),
                            Block::EnhancedPacket(epb) => {
                                let Some(iface) = self.interfaces.get(epb.if_id as usize) else {
                                    return Step::Error("packet block names an unknown interface");
                                };
                                let t = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                                Step::Packet {
                                    consumed,
                                    data: range_of(epb.packet_data()),
                                    ts: iface.unit.stamp(t, iface.offset),
                                    ts_digits: iface.unit.digits(),
                                    link_type: iface.link_type,
                                    interface: epb.if_id,
                                    orig_len: epb.origlen,
                                }
                            }
                            Block::SimplePacket(spb) => {
                                let Some(iface) = self.interfaces.first() else {
                                    return Step::Error("simple packet block before any interface");
                                };
                                let mut len = (spb.origlen as usize).min(spb.data.len());
                                if iface.snaplen != 0 {
                                    len = len.min(iface.snaplen as usize);
                                }
                                Step::Packet {
                                    consumed,
                                    data: range_of(&spb.data[..len]),
                                    ts: Timestamp::default(),
                                    ts_digits: iface.unit.digits(),
                                    link_type: iface.link_type,
                                    interface: 0,
                                    orig_len: spb.origlen,
                                }
                            }
                            Block::InterfaceStatistics(isb) => {
                                // isb_ifdrop (5): dropped by the interface; isb_osdrop (7): by
                                // the operating system (pcapng, RFC draft §4.6).
                                let drops = isb.options.iter().filter_map(|o| {
                                    let v: [u8; 8] = o.value().get(..8)?.try_into().ok()?;
                                    matches!(o.code.0, 5 | 7).then(|| {
                                        if big_endian {
                                            u64::from_be_bytes(v)
                                        } else {
                                            u64::from_le_bytes(v)
                                        }
                                    })
                                });
                                let dropped = drops.fold(None, |a: Option<u64>, d| {
                                    Some(a.unwrap_or(0).saturating_add(d))
                                });
                                Step::Stats(consumed, isb.if_id, dropped)
                            }
                            _ => Step::Skip(consumed),
                        }
                    }
                    // The whole block is in the buffer (checked above): wanting more means a
                    // length inside it points past its end.
                    Err(nom::Err::Incomplete(_)) => {
                        Step::Error("pcapng block (a length field points past the block)")
                    }
                    Err(_) => Step::Error("pcapng block"),
                }
            }
        }
    }

    /// The next packet record; `Ok(None)` at the end of the input (on a record boundary).
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>, ReadError> {
        loop {
            match self.step() {
                Step::Packet {
                    consumed,
                    data,
                    ts,
                    ts_digits,
                    link_type,
                    interface,
                    orig_len,
                } => {
                    let offset = self.offset();
                    self.start += consumed;
                    return Ok(Some(Record {
                        ts,
                        ts_digits,
                        link_type,
                        interface,
                        orig_len,
                        data: &self.buf[data],
                        offset,
                    }));
                }
                Step::Skip(n) => self.start += n,
                Step::Section(n, big_endian) => {
                    self.start += n;
                    self.format = Format::PcapNg { big_endian };
                    self.dropped_before = add(self.dropped_before, self.section_dropped());
                    self.interfaces.clear();
                }
                Step::Stats(n, id, dropped) => {
                    self.start += n;
                    if let (Some(i), Some(d)) = (self.interfaces.get_mut(id as usize), dropped) {
                        // Its counts are since the capture began: the last block's hold.
                        i.dropped = Some(d);
                    }
                }
                Step::Interface(n, iface) => {
                    if self.interfaces.len() >= MAX_INTERFACES {
                        return Err(ReadError::Malformed {
                            name: self.name.clone(),
                            offset: self.offset(),
                            reason: "interface description block beyond 65536 in one section",
                        });
                    }
                    self.start += n;
                    self.interfaces.push(iface);
                }
                Step::Incomplete(want) => {
                    if self.eof || want > MAX_RECORD + 64 {
                        let have = self.end - self.start;
                        if have == 0 && self.eof {
                            return Ok(None);
                        }
                        if want > MAX_RECORD + 64 {
                            return Err(ReadError::Malformed {
                                name: self.name.clone(),
                                offset: self.offset(),
                                reason: "record length beyond 16 MiB",
                            });
                        }
                        return Err(ReadError::Truncated {
                            name: self.name.clone(),
                            offset: self.offset(),
                            needed: want,
                            got: have,
                        });
                    }
                    self.fill(want)?;
                }
                Step::Error(what) => {
                    return Err(ReadError::Malformed {
                        name: self.name.clone(),
                        offset: self.offset(),
                        reason: what,
                    })
                }
            }
        }
    }
}
