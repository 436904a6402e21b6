//! A capture tap for UDP sockets: writes each RoCEv2 datagram a socket sent or received as an
//! Ethernet/IP/UDP frame whose headers are those Linux writes for it (IPv4: DF, identification
//! 0, TTL 64, TOS = the ECN codepoint, correct checksums; IPv6: traffic class = ECN, hop limit
//! 64), so the capture reads in `roce decode` and tshark with every ICRC valid.
//!
//! It knows nothing of the stack: the CLI hands it addresses, ECN and bytes.
use std::io::{self, BufWriter};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use roce_proto::frame::IpParams;
use roce_proto::{Ecn, FrameBuilder};

use crate::outfile::OutFile;
use crate::reader::Timestamp;
use crate::writer::PcapWriter;

/// Link type of the file: Ethernet.
const LINKTYPE_ETHERNET: u32 = 1;

/// Writes datagrams into a pcap file as Ethernet frames. The file is written beside its
/// place and put there when the capture is finished or dropped with every write done
/// ([`OutFile`]): a capture whose writes failed leaves the old file as it was.
#[derive(Debug)]
pub struct DatagramCapture {
    /// `None` once put in place.
    out: Option<PcapWriter<BufWriter<OutFile>>>,
    frame: Vec<u8>,
    /// Datagrams written.
    pub count: u64,
    /// The first write that failed: nothing is written after it, and [`DatagramCapture::finish`]
    /// returns it.
    failed: Option<io::Error>,
    /// The DSCP of the IP headers written.
    dscp: u8,
}

impl DatagramCapture {
    /// Creates `path` (in place of the old file once finished). Errors name the path.
    pub fn create(path: &Path) -> io::Result<Self> {
        let f = OutFile::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Self {
            out: Some(PcapWriter::new(
                BufWriter::with_capacity(1 << 20, f),
                LINKTYPE_ETHERNET,
                true,
                262_144,
            )?),
            frame: Vec::with_capacity(9000),
            count: 0,
            failed: None,
            dscp: 0,
        })
    }

    /// Sets the DSCP of the IP headers written from now on (6 bits; 0 at first): what tells a
    /// reader the datagrams' priority (a RoCE NIC maps DSCP 26 to priority 3).
    pub fn set_dscp(&mut self, dscp: u8) {
        self.dscp = dscp & 0x3f;
    }

    /// Writes one datagram (`payload` = the UDP payload, BTH through ICRC).
    pub fn record(
        &mut self,
        time: SystemTime,
        src: SocketAddr,
        dst: SocketAddr,
        ecn: Ecn,
        payload: &[u8],
    ) -> io::Result<()> {
        let ip = match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpParams::V4 {
                src: s.octets(),
                dst: d.octets(),
                dscp: self.dscp,
                ecn,
                ttl: 64,
                identification: 0,
                dont_fragment: true,
            },
            (IpAddr::V6(s), IpAddr::V6(d)) => IpParams::V6 {
                src: s.octets(),
                dst: d.octets(),
                traffic_class: self.dscp << 2 | ecn.bits(),
                flow_label: 0,
                hop_limit: 64,
            },
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "mixed IPv4/IPv6 addresses",
                ))
            }
        };
        let b = FrameBuilder {
            dst_mac: [0; 6],
            src_mac: [0; 6],
            vlans: [None, None],
            ip,
            src_port: src.port(),
            dst_port: dst.port(),
            udp_checksum: true,
        };
        self.frame.resize(b.frame_len_for(payload.len()), 0);
        b.wrap(payload, &mut self.frame)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let frame = std::mem::take(&mut self.frame);
        let r = self.write(time, &frame);
        self.frame = frame;
        r
    }

    /// Writes `frame` unless an earlier write failed; remembers the first failure.
    fn write(&mut self, time: SystemTime, frame: &[u8]) -> io::Result<()> {
        if self.failed.is_some() {
            return Err(io::Error::other("an earlier write to the capture failed"));
        }
        let Some(out) = self.out.as_mut() else {
            return Err(io::Error::other("the capture is finished"));
        };
        let d = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let ts = Timestamp {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        };
        match out.write_packet(ts, frame, frame.len() as u32) {
            Ok(()) => {
                self.count += 1;
                Ok(())
            }
            Err(e) => {
                let r = io::Error::new(e.kind(), e.to_string());
                self.failed = Some(e);
                Err(r)
            }
        }
    }

    /// Writes one whole Ethernet frame (without FCS) as it is, e.g. a PFC frame.
    pub fn record_frame(&mut self, time: SystemTime, frame: &[u8]) -> io::Result<()> {
        self.write(time, frame)
    }

    /// Flushes the file.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.as_mut().map_or(Ok(()), PcapWriter::flush)
    }

    /// Flushes and closes the capture: the number of frames written, or the first write that
    /// failed (a full disk, `/dev/full`), so that a caller never says it wrote a capture it
    /// did not.
    pub fn finish(&mut self) -> io::Result<u64> {
        if let Some(e) = self.failed.take() {
            // Said once: the capture is short from here on.
            self.failed = Some(io::Error::new(e.kind(), e.to_string()));
            return Err(e);
        }
        let Some(out) = self.out.take() else {
            return Ok(self.count);
        };
        match crate::outfile::commit_buffered(out.into_inner()) {
            Ok(()) => Ok(self.count),
            Err(e) => {
                self.failed = Some(io::Error::new(e.kind(), e.to_string()));
                Err(e)
            }
        }
    }
}

impl Drop for DatagramCapture {
    /// A capture dropped unfinished is put in place too when every write succeeded (what
    /// was captured before a run failed is what explains the failure); after a failed write
    /// the old file stays.
    fn drop(&mut self) {
        if self.failed.is_none() {
            let _ = self.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_proto::{BthRepr, Frame, Opcode, PacketRepr};

    #[test]
    fn recorded_datagrams_decode_with_valid_icrc() {
        let dir = std::env::temp_dir().join(format!("roce-tap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tap.pcap");
        let src: SocketAddr = "127.0.0.1:49152".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        // A datagram as a socket sender builds it: ICRC from fields (ID 0, DF).
        let p = PacketRepr {
            bth: BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                pad_count: 1,
                ..BthRepr::default()
            },
            payload: b"abc",
            ..PacketRepr::default()
        };
        let b = FrameBuilder::ipv4([127, 0, 0, 1], [127, 0, 0, 2], 49152);
        let mut t = vec![0u8; p.buffer_len()];
        let seed = b.icrc_seed(t.len());
        p.emit_with_icrc(&mut t, &seed).unwrap();
        {
            let mut cap = DatagramCapture::create(&path).unwrap();
            cap.record(SystemTime::now(), src, dst, Ecn::Ce, &t)
                .unwrap();
        }
        let bytes = std::fs::read(&path).unwrap();
        let frame = &bytes[24 + 16..];
        let f = Frame::parse_ethernet(frame).unwrap();
        assert_eq!(f.ecn(), Ecn::Ce);
        assert_eq!(f.verify_icrc(), Ok(true));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
