//! A classic pcap writer (little-endian, microsecond or nanosecond time stamps): what
//! `roce decode --interface --write` saves, and what the stack's capture tap and the fixture
//! generator use.
use crate::reader::Timestamp;
use std::io::{self, Write};

/// Writes a pcap file: a 24-byte header, then one 16-byte record header per packet.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    nanos: bool,
    snaplen: u32,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header. `nanos` selects nanosecond time stamps (magic 0xa1b23c4d);
    /// packets longer than `snaplen` are cut to it.
    pub fn new(mut out: W, link_type: u32, nanos: bool, snaplen: u32) -> io::Result<Self> {
        let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&magic.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&snaplen.to_le_bytes());
        h[20..24].copy_from_slice(&link_type.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self {
            out,
            nanos,
            snaplen,
        })
    }

    /// Writes one packet of `orig_len` bytes on the wire, of which `data` was captured
    /// (further cut to the snap length).
    pub fn write_packet(&mut self, ts: Timestamp, data: &[u8], orig_len: u32) -> io::Result<()> {
        let cap = data.len().min(self.snaplen as usize);
        let frac = if self.nanos {
            ts.nanos
        } else {
            ts.nanos / 1000
        };
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&(ts.secs as u32).to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
        h[12..16].copy_from_slice(&orig_len.max(cap as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&data[..cap])
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}
