//! The row of an MRC or UET packet: the columns its JSON line's keys name, filled from the
//! same walk of its fields ([`crate::fabric`]).
use std::collections::HashMap;
use std::sync::OnceLock;

use super::{Columns, C, FIELDS};
use crate::digits::hex_bytes;
use crate::fabric::walk::{walk, Fields};
use crate::fabric::Packet;
use crate::reader::Timestamp;

/// The column of each MRC and UET key.
fn index() -> &'static HashMap<&'static str, usize> {
    static INDEX: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    INDEX.get_or_init(|| {
        FIELDS
            .iter()
            .enumerate()
            .skip(C::transport as usize)
            .map(|(i, f)| (f.name, i))
            .collect()
    })
}

impl Columns {
    /// Adds the row of an MRC or UET packet (what [`crate::fabric::json`] writes for it).
    pub fn fabric(&mut self, frame_no: u64, ts: Timestamp, p: &Packet) {
        use crate::fabric::out::addr;
        self.start(frame_no, ts);
        let t = p.transport;
        self.dict_code(C::transport, t as usize, |b| {
            b.extend_from_slice(t.name().as_bytes())
        });
        self.dict_text(C::src, |b| addr(b, p.ends.src, None));
        self.dict_text(C::dst, |b| addr(b, p.ends.dst, None));
        if let Some((s, d)) = p.ends.ports {
            self.num(C::src_port, u64::from(s));
            self.num(C::dst_port, u64::from(d));
        }
        let ecn = p.ends.ecn;
        self.dict_code(C::ecn, usize::from(ecn.bits()), |b| {
            b.extend_from_slice(ecn.name().as_bytes())
        });
        walk(p, &mut Sink(self));
        self.num(C::payload_len, p.payload_len as u64);
        if let Some(ok) = p.icrc_ok {
            self.flag(C::icrc_ok, ok);
        }
        self.end_row();
    }
}

/// The walk's fields into their columns. Every key the walk writes has a column
/// (`every_key_of_the_walk_has_its_column` checks it).
struct Sink<'c>(&'c mut Columns);

impl Sink<'_> {
    fn at(k: &str) -> Option<usize> {
        index().get(k).copied()
    }
}

impl Fields for Sink<'_> {
    fn header(&mut self, _: &str, _: &str) {}
    fn num(&mut self, k: &str, v: u64) {
        if let Some(i) = Self::at(k) {
            self.0.num(i, v);
        }
    }
    fn int(&mut self, k: &str, v: i64) {
        if let Some(i) = Self::at(k) {
            // An I64 column keeps the bits as they are.
            self.0.num(i, v as u64);
        }
    }
    fn hex(&mut self, k: &str, v: u64, _: u32) {
        self.num(k, v);
    }
    fn flag(&mut self, k: &str, v: bool) {
        self.num(k, u64::from(v));
    }
    fn text(&mut self, k: &str, v: &str) {
        if k == "error" {
            self.0.text(C::error, v);
        } else if let Some(i) = Self::at(k) {
            self.0.dict_text(i, |b| b.extend_from_slice(v.as_bytes()));
        }
    }
    fn bytes(&mut self, k: &str, v: &[u8]) {
        if let Some(i) = Self::at(k) {
            self.0.text_with(i, |b| hex_bytes(b, v));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columns::Kind;

    /// Records every key the walk writes, with the kind its method means.
    #[derive(Default)]
    struct Keys(Vec<(String, Kind)>);

    impl Fields for Keys {
        fn header(&mut self, _: &str, _: &str) {}
        fn num(&mut self, k: &str, _: u64) {
            self.0.push((k.into(), Kind::U64));
        }
        fn int(&mut self, k: &str, _: i64) {
            self.0.push((k.into(), Kind::I64));
        }
        fn hex(&mut self, k: &str, _: u64, _: u32) {
            self.0.push((k.into(), Kind::U64));
        }
        fn flag(&mut self, k: &str, _: bool) {
            self.0.push((k.into(), Kind::Bool));
        }
        fn text(&mut self, k: &str, _: &str) {
            self.0.push((k.into(), Kind::Dict16));
        }
        fn bytes(&mut self, k: &str, _: &[u8]) {
            self.0.push((k.into(), Kind::Text));
        }
    }

    #[test]
    fn every_key_of_the_walk_has_its_column() {
        let mut seen = 0;
        for p in crate::synth_fabric::every_packet_kind() {
            let mut keys = Keys::default();
            walk(&p, &mut keys);
            for (k, kind) in keys.0 {
                if k == "error" {
                    continue;
                }
                let i = index().get(k.as_str()).copied();
                let f = i.map(|i| FIELDS[i]);
                assert_eq!(f.map(|f| f.kind), Some(kind), "{k}: {f:?}");
                seen += 1;
            }
        }
        assert!(seen > 100, "{seen} keys walked");
    }
}
