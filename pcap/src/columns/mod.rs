//! Decoded packets as columns: the table behind `roce decode --format parquet` and the
//! Python package's `decode_table`.
//!
//! One row per line `roce decode --json` writes, one column per JSON key, nested headers
//! flattened with dotted names (`bth.psn`, `reth.rkey`): [`FIELDS`] is the schema. A row
//! holds the same values as its JSON line, except for three columns:
//! * `ts` is a time stamp in nanoseconds since the epoch (the JSON line's seconds),
//! * `mad`, `cm`, `smp`, `sa` and `mac_control.quanta` hold the JSON text of the value (a
//!   MAD's class-specific fields differ by message; PFC has eight quanta and PAUSE one).
//!
//! Text whose values come from a small set (endpoints, names) is a dictionary column
//! ([`Kind::Dict8`], [`Kind::Dict16`], [`Kind::Dict32`]): each row holds a key into the batch's
//! distinct texts, as Arrow's dictionary type lays it out. Its values are the same texts.
//!
//! A key the JSON line leaves out is a null. [`Columns`] collects rows a batch at a time;
//! its consumers turn a batch into Arrow arrays or a Parquet row group. Memory is bounded by
//! the batch: callers take the columns when [`Columns::full`] says so.

use std::net::IpAddr;

use roce_proto::{Error, Frame};

use crate::digits::{dec, hex_bytes};
use crate::format::{self, Decoded};
use crate::reader::Timestamp;

mod arrays;
mod fabric;
mod schema;
pub use arrays::{Bits, Dict, Keys};
use schema::C;
pub use schema::FIELDS;

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`false`.
    Bool,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 64-bit integer (an offset that may be negative).
    I64,
    /// Nanoseconds since the Unix epoch, UTC (signed 64-bit).
    Timestamp,
    /// UTF-8 text.
    Text,
    /// UTF-8 text from a handful of values (names): keys of 8 bits into the batch's
    /// distinct texts (Arrow's `dictionary<int8, utf8>`).
    Dict8,
    /// UTF-8 text from a few hundred values at most (opcode names): keys of 16 bits.
    Dict16,
    /// UTF-8 text whose values repeat (endpoints, addresses): keys of 32 bits.
    Dict32,
}

/// A column of the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Its name: the JSON key, dotted for a nested one.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
}

/// The first of the MRC and UET columns: theirs are the JSON line's flat keys
/// (`"uet.pds.psn"`), where RoCE's dotted names are nested objects (`{"bth": {"psn": …}}`).
pub const FABRIC_FROM: usize = C::transport as usize;

/// The columns of a table: RoCE's, and with `fabric` MRC's and UET's.
pub fn fields(fabric: bool) -> &'static [Field] {
    if fabric {
        FIELDS
    } else {
        &FIELDS[..FABRIC_FROM]
    }
}

/// The text columns that hold the JSON text of their value (an object or a list in the
/// JSON line), not a string.
pub const JSON_TEXT: &[&str] = &["mad", "cm", "smp", "sa", "mac_control.quanta"];

/// A column's values. A null row holds a zero (or empty text) here and `false` in
/// [`Column::valid`], as Arrow lays nulls out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Values {
    /// [`Kind::Bool`].
    Bool(Bits),
    /// [`Kind::U8`].
    U8(Vec<u8>),
    /// [`Kind::U16`].
    U16(Vec<u16>),
    /// [`Kind::U32`].
    U32(Vec<u32>),
    /// [`Kind::U64`].
    U64(Vec<u64>),
    /// [`Kind::I64`].
    I64(Vec<i64>),
    /// [`Kind::Timestamp`].
    Timestamp(Vec<i64>),
    /// [`Kind::Text`]: row `i` is `bytes[offsets[i]..offsets[i + 1]]` (Arrow's layout; the
    /// first offset is 0).
    Text {
        /// One more than the rows.
        offsets: Vec<i32>,
        /// The texts, one after another (UTF-8).
        bytes: Vec<u8>,
    },
    /// [`Kind::Dict8`], [`Kind::Dict16`], [`Kind::Dict32`]: row `i` is text `keys[i]` of
    /// `dict`.
    Dict {
        /// Per row, the index of its text in `dict` (0 in a null row).
        keys: Keys,
        /// The batch's distinct texts.
        dict: Dict,
    },
}

impl Values {
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::Bool => Self::Bool(Bits::default()),
            Kind::U8 => Self::U8(Vec::new()),
            Kind::U16 => Self::U16(Vec::new()),
            Kind::U32 => Self::U32(Vec::new()),
            Kind::U64 => Self::U64(Vec::new()),
            Kind::I64 => Self::I64(Vec::new()),
            Kind::Timestamp => Self::Timestamp(Vec::new()),
            Kind::Text => Self::Text {
                offsets: vec![0],
                bytes: Vec::new(),
            },
            Kind::Dict8 => Self::dict(Keys::I8(Vec::new())),
            Kind::Dict16 => Self::dict(Keys::I16(Vec::new())),
            Kind::Dict32 => Self::dict(Keys::I32(Vec::new())),
        }
    }
    fn dict(keys: Keys) -> Self {
        Self::Dict {
            keys,
            dict: Dict::default(),
        }
    }
    /// Row `i`'s value of a number or flag column (a flag as 0 or 1; a signed number as its
    /// two's complement bits); `None` for a time stamp or text column, or past its rows.
    pub fn num(&self, i: usize) -> Option<u64> {
        match self {
            Self::Bool(x) => x.get(i).map(u64::from),
            Self::U8(x) => x.get(i).map(|&v| u64::from(v)),
            Self::U16(x) => x.get(i).map(|&v| u64::from(v)),
            Self::U32(x) => x.get(i).map(|&v| u64::from(v)),
            Self::U64(x) => x.get(i).copied(),
            Self::I64(x) => x.get(i).map(|&v| v as u64),
            Self::Timestamp(_) | Self::Text { .. } | Self::Dict { .. } => None,
        }
    }
    /// Row `i`'s bytes of a text or dictionary column; `None` for the other kinds, or past
    /// its rows.
    pub fn text(&self, i: usize) -> Option<&[u8]> {
        match self {
            Self::Text { offsets, bytes } => {
                let (a, b) = (*offsets.get(i)?, *offsets.get(i + 1)?);
                bytes.get(a as usize..b as usize)
            }
            Self::Dict { keys, dict } => dict.text(keys.get(i)?),
            _ => None,
        }
    }
    /// A number (of a numeric column; truncated to its width, which the schema makes wide
    /// enough for every field).
    #[inline(always)]
    fn push_num(&mut self, v: u64) {
        match self {
            Self::Bool(x) => x.push(v != 0),
            Self::U8(x) => x.push(v as u8),
            Self::U16(x) => x.push(v as u16),
            Self::U32(x) => x.push(v as u32),
            Self::U64(x) => x.push(v),
            Self::I64(x) | Self::Timestamp(x) => x.push(v as i64),
            Self::Text { offsets, bytes } => offsets.push(bytes.len() as i32),
            Self::Dict { keys, .. } => keys.push(0),
        }
    }
    /// Empty values with room for as many as these hold.
    fn with_capacity_of(&self) -> Self {
        match self {
            Self::Bool(x) => Self::Bool(Bits::with_capacity(x.len())),
            Self::U8(x) => Self::U8(Vec::with_capacity(x.len())),
            Self::U16(x) => Self::U16(Vec::with_capacity(x.len())),
            Self::U32(x) => Self::U32(Vec::with_capacity(x.len())),
            Self::U64(x) => Self::U64(Vec::with_capacity(x.len())),
            Self::I64(x) => Self::I64(Vec::with_capacity(x.len())),
            Self::Timestamp(x) => Self::Timestamp(Vec::with_capacity(x.len())),
            Self::Text { offsets, bytes } => {
                let mut o = Vec::with_capacity(offsets.len());
                o.push(0);
                Self::Text {
                    offsets: o,
                    bytes: Vec::with_capacity(bytes.len()),
                }
            }
            Self::Dict { keys, .. } => Self::dict(keys.with_capacity_of()),
        }
    }
    /// Null values up to `rows` rows.
    fn pad(&mut self, rows: usize) {
        match self {
            Self::Bool(x) => x.extend_to(rows),
            Self::U8(x) => x.resize(rows, 0),
            Self::U16(x) => x.resize(rows, 0),
            Self::U32(x) => x.resize(rows, 0),
            Self::U64(x) => x.resize(rows, 0),
            Self::I64(x) | Self::Timestamp(x) => x.resize(rows, 0),
            Self::Text { offsets, bytes } => offsets.resize(rows + 1, bytes.len() as i32),
            Self::Dict { keys, .. } => keys.resize(rows),
        }
    }
}

/// One column of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its values, a null's included (none in a [`Batch`]'s column that no row set).
    pub values: Values,
    /// Per row: `false` for a null (empty in a [`Batch`]'s column that no row set: null in
    /// every row).
    pub valid: Bits,
}

impl Column {
    /// `true` when row `i` holds a value.
    pub fn is_valid(&self, i: usize) -> bool {
        self.valid.get(i).unwrap_or(false)
    }
    /// Rows of the `rows` of its batch that are null.
    pub fn nulls(&self, rows: usize) -> usize {
        rows - self.valid.ones()
    }
}

/// Rows of decoded packets, column by column ([`FIELDS`] order), as they are taken from
/// [`Columns`]: every column holds every row, except a column that no row set, which holds
/// none (it is null in every row; [`Column::is_valid`] reads either kind).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batch {
    columns: Vec<Column>,
    rows: usize,
}

impl Batch {
    /// Its rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Its columns, in [`FIELDS`] order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }
    /// Its columns, to take their buffers.
    pub fn into_columns(self) -> Vec<Column> {
        self.columns
    }
}

/// Decoded packets collected row by row, column by column ([`FIELDS`] order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// Each as long as the last row that set it: the nulls after that are added when the
    /// batch is taken (a row sets a few of the columns, so nulls are added in runs).
    columns: Vec<Column>,
    rows: usize,
    /// Text bytes in the batch.
    text_bytes: usize,
    /// The `src` and `dst` keys of the last two conversations' endpoints (both directions
    /// of one connection, typically): runs of packets between the same endpoints look
    /// their texts up once.
    recent: [Option<(Conversation, u32, u32)>; 2],
    /// The slot of `recent` to replace next.
    next_recent: usize,
}

/// The addresses and UDP ports of a packet: source, then destination.
type Conversation = (IpAddr, u16, IpAddr, u16);

impl Default for Columns {
    fn default() -> Self {
        Self {
            columns: FIELDS
                .iter()
                .map(|f| Column {
                    values: Values::new(f.kind),
                    valid: Bits::default(),
                })
                .collect(),
            rows: 0,
            text_bytes: 0,
            recent: [None; 2],
            next_recent: 0,
        }
    }
}

/// Text bytes in one batch after which [`Columns::full`] says so (Arrow's 32-bit offsets
/// stay far from overflowing).
const MAX_TEXT_BYTES: usize = 256 << 20;

impl Columns {
    /// Rows collected.
    pub fn rows(&self) -> usize {
        self.rows
    }
    /// Makes room for `rows` more rows in every column (every column gets every row: a
    /// null is a row too).
    pub fn reserve(&mut self, rows: usize) {
        for col in self.columns.iter_mut() {
            col.valid.reserve(rows);
            match &mut col.values {
                Values::Bool(x) => x.reserve(rows),
                Values::U8(x) => x.reserve(rows),
                Values::U16(x) => x.reserve(rows),
                Values::U32(x) => x.reserve(rows),
                Values::U64(x) => x.reserve(rows),
                Values::I64(x) | Values::Timestamp(x) => x.reserve(rows),
                Values::Text { offsets, .. } => offsets.reserve(rows),
                Values::Dict { keys, .. } => keys.reserve(rows),
            }
        }
    }
    /// Takes the rows as a [`Batch`], leaving none.
    pub fn take(&mut self) -> Batch {
        self.pad();
        let rows = self.rows;
        // The next batch is likely the size of this one: its columns start that large.
        let next = self
            .columns
            .iter()
            .map(|c| Column {
                values: c.values.with_capacity_of(),
                valid: Bits::with_capacity(c.valid.len()),
            })
            .collect();
        let columns = std::mem::replace(&mut self.columns, next);
        self.rows = 0;
        self.text_bytes = 0;
        self.recent = [None; 2];
        Batch { columns, rows }
    }
    /// `true` once the batch has `rows` rows or its texts grew large: time to hand it on.
    pub fn full(&self, rows: usize) -> bool {
        self.rows >= rows || self.text_bytes >= MAX_TEXT_BYTES
    }

    /// Pads the columns some row set with nulls to the last row; a column no row set stays
    /// empty (zeroing its values on the decoding thread, to be thrown away by every
    /// consumer, took a tenth of that thread's time in `--format parquet`).
    fn pad(&mut self) {
        for col in self.columns.iter_mut() {
            if !col.valid.is_empty() && col.valid.len() < self.rows {
                col.values.pad(self.rows);
                col.valid.extend_to(self.rows);
            }
        }
    }
    /// Column `c`, padded with nulls up to the current row.
    #[inline(always)]
    fn col(&mut self, c: impl Col) -> &mut Column {
        let rows = self.rows;
        let col = &mut self.columns[c.at()];
        if col.valid.len() < rows {
            col.values.pad(rows);
            col.valid.extend_to(rows);
        }
        col
    }
    #[inline(always)]
    fn num(&mut self, c: impl Col, v: u64) {
        let col = self.col(c);
        col.values.push_num(v);
        col.valid.push(true);
    }
    #[inline(always)]
    fn flag(&mut self, c: impl Col, v: bool) {
        self.num(c, u64::from(v));
    }
    #[inline]
    fn text(&mut self, c: impl Col, s: &str) {
        self.text_with(c, |b| b.extend_from_slice(s.as_bytes()));
    }
    /// A text column's value, written by `f` (ASCII or UTF-8).
    #[inline]
    fn text_with(&mut self, c: impl Col, f: impl FnOnce(&mut Vec<u8>)) {
        let col = self.col(c);
        if let Values::Text { offsets, bytes } = &mut col.values {
            let at = bytes.len();
            f(bytes);
            let added = bytes.len() - at;
            offsets.push(bytes.len() as i32);
            col.valid.push(true);
            self.text_bytes += added;
        }
    }
    /// The key in dictionary column `c` of the text `write` writes, added if new.
    fn intern(&mut self, c: impl Col, write: impl FnOnce(&mut Vec<u8>)) -> u32 {
        self.key_in(c, |d| d.key_of_text(write))
    }
    /// The key that `find` gives in dictionary column `c`'s dictionary, the text it may
    /// add counted in the batch's text bytes.
    #[inline(always)]
    fn key_in(&mut self, c: impl Col, find: impl FnOnce(&mut Dict) -> u32) -> u32 {
        let Values::Dict { dict, .. } = &mut self.columns[c.at()].values else {
            return 0;
        };
        let before = dict.bytes().len();
        let key = find(dict);
        self.text_bytes += dict.bytes().len() - before;
        key
    }
    /// Dictionary column `c`'s value: its text of key `key`.
    #[inline(always)]
    fn dict_key(&mut self, c: impl Col, key: u32) {
        let col = self.col(c);
        if let Values::Dict { keys, .. } = &mut col.values {
            keys.push(key);
            col.valid.push(true);
        }
    }
    /// Dictionary column `c`'s value: the text `write` writes.
    fn dict_text(&mut self, c: impl Col, write: impl FnOnce(&mut Vec<u8>)) {
        let key = self.intern(c, write);
        self.dict_key(c, key);
    }
    /// Dictionary column `c`'s value: the text of `code` (a small number that says which
    /// text it is), which `write` writes the first time a batch meets it.
    #[inline]
    fn dict_code(&mut self, c: impl Col, code: usize, write: impl FnOnce(&mut Vec<u8>)) {
        let key = self.key_in(c, |d| d.key_of_code(code, write));
        self.dict_key(c, key);
    }
    /// The `src` and `dst` columns of `f`.
    fn endpoints(&mut self, f: &Frame<'_>) {
        let (Some(ip), Some(udp)) = (&f.ip, &f.udp) else {
            self.dict_text(C::src, |b| format::endpoint(b, f, true));
            self.dict_text(C::dst, |b| format::endpoint(b, f, false));
            return;
        };
        let conv = (ip.src, udp.src_port, ip.dst, udp.dst_port);
        let (src, dst) = match self.recent.iter().flatten().find(|r| r.0 == conv) {
            Some(&(_, s, d)) => (s, d),
            None => {
                let s = self.intern(C::src, |b| format::endpoint(b, f, true));
                let d = self.intern(C::dst, |b| format::endpoint(b, f, false));
                self.recent[self.next_recent] = Some((conv, s, d));
                self.next_recent ^= 1;
                (s, d)
            }
        };
        self.dict_key(C::src, src);
        self.dict_key(C::dst, dst);
    }
    /// Ends a row (the columns it did not set are null in it).
    fn end_row(&mut self) {
        self.rows += 1;
    }
    fn start(&mut self, frame_no: u64, ts: Timestamp) {
        self.num(C::frame, frame_no);
        self.num(C::ts, ts.as_ns() as u64);
    }

    /// Adds the row of a RoCE packet (what [`format::json`] writes for it).
    pub fn packet(&mut self, d: &Decoded<'_>) {
        self.start(d.frame_no, d.ts);
        if let Some(f) = d.frame {
            self.frame_columns(d, f);
        }
        if let Some(m) = d.mad() {
            crate::madfmt::json(&mut MadColumns(self), &m);
        }
        match &d.packet {
            Ok(p) => {
                self.num(C::payload_len, p.payload().len() as u64);
                self.text_with(C::icrc, |b| hex_bytes(b, &p.icrc_bytes()));
                if let Some(ok) = d.icrc_ok {
                    self.flag(C::icrc_ok, ok);
                }
            }
            Err(_) if d.snap.is_some() => {
                if let Some(n) = d.snap.and_then(|s| s.implied_payload_len) {
                    self.num(C::payload_len, n as u64);
                }
                let captured = d.captured_payload().map_or(0, <[u8]>::len);
                self.num(C::captured_payload_len, captured as u64);
                self.text(C::icrc, "not_captured");
                self.flag(C::snap_truncated, true);
                if let Some(wire) = d.snap.and_then(|s| s.wire_len) {
                    self.num(C::wire_len, wire as u64);
                }
            }
            Err(e) => self.error(e),
        }
        self.end_row();
    }

    fn error(&mut self, e: &Error) {
        self.text_with(C::error, |b| format::error_text(b, e));
    }

    fn frame_columns(&mut self, d: &Decoded<'_>, f: &Frame<'_>) {
        self.endpoints(f);
        let ecn = f.ecn();
        self.dict_code(C::ecn, usize::from(ecn.bits()), |b| {
            b.extend_from_slice(ecn.name().as_bytes())
        });
        let version = f.version;
        self.dict_code(C::version, version as usize, |b| {
            b.extend_from_slice(version.name().as_bytes())
        });
        if let Some(bth) = f.bth() {
            self.num(C::bth_opcode, u64::from(bth.opcode.0));
            let dc = d.dc.is_some();
            let code = usize::from(bth.opcode.0) << 1 | usize::from(dc);
            self.dict_code(C::bth_opcode_name, code, |b| {
                format::opcode_name(b, bth.opcode, dc)
            });
            self.flag(C::bth_se, bth.solicited);
            self.flag(C::bth_migreq, bth.migreq);
            self.num(C::bth_pad_count, u64::from(bth.pad_count));
            self.num(C::bth_tver, u64::from(bth.tver));
            self.num(C::bth_pkey, u64::from(bth.pkey.0));
            self.flag(C::bth_fecn, bth.fecn);
            self.flag(C::bth_becn, bth.becn);
            self.num(C::bth_dest_qp, u64::from(bth.dest_qp.0));
            self.flag(C::bth_ack_req, bth.ack_req);
            self.num(C::bth_psn, u64::from(bth.psn.value()));
        }
        if let Some(dc) = d.dc {
            self.text_with(C::dc_dceth, |b| hex_bytes(b, dc.dceth));
            if let Some(x) = dc.connect {
                self.text_with(C::dc_connect, |b| hex_bytes(b, x));
            }
        }
        let Some(p) = format::header_view(d) else {
            return;
        };
        if let Some(h) = p.rdeth() {
            self.num(C::rdeth_ee_context, u64::from(h.ee_context));
        }
        if let Some(h) = p.reth() {
            self.num(C::reth_va, h.va());
            self.num(C::reth_rkey, u64::from(h.rkey().0));
            self.num(C::reth_dma_len, u64::from(h.dma_len()));
        }
        if let Some(h) = p.aeth() {
            let s = h.syndrome();
            self.num(C::aeth_syndrome, u64::from(s.0));
            self.dict_code(C::aeth_kind, usize::from(s.0), |b| {
                b.extend_from_slice(s.kind().name().as_bytes())
            });
            self.num(C::aeth_value, u64::from(s.kind().value()));
            self.num(C::aeth_msn, u64::from(h.msn().0));
        }
        if let Some(h) = p.atomic_eth() {
            self.num(C::atomic_eth_va, h.va());
            self.num(C::atomic_eth_rkey, u64::from(h.rkey().0));
            self.num(C::atomic_eth_swap_add, h.swap_add());
            self.num(C::atomic_eth_compare, h.compare());
        }
        if let Some(h) = p.atomic_ack_eth() {
            self.num(C::atomic_ack_eth_orig_data, h.orig_data());
        }
        if let Some(h) = p.immdt() {
            self.num(C::immdt, u64::from(h.0));
        }
        if let Some(h) = p.ieth() {
            self.num(C::ieth_rkey, u64::from(h.rkey.0));
        }
        if let Some(h) = p.deth() {
            self.num(C::deth_qkey, u64::from(h.qkey().0));
            self.num(C::deth_src_qp, u64::from(h.src_qp().0));
        }
    }

    /// Adds the row of a PAUSE or PFC frame (what [`format::json_mac_control`] writes).
    pub fn mac_control(
        &mut self,
        frame_no: u64,
        ts: Timestamp,
        src: [u8; 6],
        mc: &roce_proto::mac_control::Repr,
    ) {
        use roce_proto::mac_control::{Repr, OPCODE_PAUSE, OPCODE_PFC};
        self.start(frame_no, ts);
        self.dict_text(C::src_mac, |b| format::mac(b, src));
        match *mc {
            Repr::Pfc { enable, quanta } => {
                self.num(C::mac_control_opcode, u64::from(OPCODE_PFC));
                self.dict_code(C::mac_control_name, 0, |b| b.extend_from_slice(b"PFC"));
                self.num(C::mac_control_class_enable, u64::from(enable));
                self.text_with(C::mac_control_quanta, |b| {
                    b.push(b'[');
                    for (i, q) in quanta.iter().enumerate() {
                        if i > 0 {
                            b.push(b',');
                        }
                        dec(b, u64::from(*q));
                    }
                    b.push(b']');
                });
            }
            Repr::Pause { quanta } => {
                self.num(C::mac_control_opcode, u64::from(OPCODE_PAUSE));
                self.dict_code(C::mac_control_name, 1, |b| b.extend_from_slice(b"PAUSE"));
                self.text_with(C::mac_control_quanta, |b| dec(b, u64::from(quanta)));
            }
            Repr::Other { opcode } => self.num(C::mac_control_opcode, u64::from(opcode)),
        }
        self.end_row();
    }

    /// Adds the row of a frame that is not RoCE (`--all`; what [`format::json_other`] writes).
    pub fn other(&mut self, frame_no: u64, ts: Timestamp, why: &Error) {
        self.start(frame_no, ts);
        self.error(why);
        self.end_row();
    }
}

/// The MAD objects of a JSON line (`mad`, `cm`, `smp`, `sa`), each into its text column.
struct MadColumns<'c>(&'c mut Columns);

impl crate::madfmt::JsonObj for MadColumns<'_> {
    fn object(&mut self, k: &str, f: &mut dyn FnMut(&mut dyn crate::madfmt::JsonObj)) {
        let c = match k {
            "mad" => C::mad,
            "cm" => C::cm,
            "smp" => C::smp,
            "sa" => C::sa,
            _ => return,
        };
        self.0.text_with(c, |b| {
            let mut o = format::Obj::open(b);
            f(&mut o);
            o.close();
        });
    }
    // A MAD's line has only objects at the top.
    fn num(&mut self, _: &str, _: u64) {}
    fn string(&mut self, _: &str, _: &str) {}
    fn hex(&mut self, _: &str, _: &[u8]) {}
    fn gid(&mut self, _: &str, _: &[u8; 16]) {}
}

/// A column, by name ([`C`]) or by index into [`FIELDS`].
trait Col: Copy {
    fn at(self) -> usize;
}

impl Col for C {
    #[inline(always)]
    fn at(self) -> usize {
        self as usize
    }
}

impl Col for usize {
    #[inline(always)]
    fn at(self) -> usize {
        self
    }
}

/// Rows per batch that `source::decode_columns` hands on by default (a Parquet row group of
/// `roce decode --format parquet`).
pub const BATCH_ROWS: usize = 64 * 1024;
