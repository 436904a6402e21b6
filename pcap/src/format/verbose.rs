//! `roce decode --verbose`: every header of a packet as a tree, each field with its IBTA
//! name, value and meaning, as Wireshark's packet details pane shows it.
use super::*;

pub(super) fn flag(b: bool) -> u8 {
    u8::from(b)
}

/// Every field of every header, indented, with raw values and their meaning.
pub fn verbose(out: &mut Vec<u8>, d: &Decoded<'_>) {
    let _ = verbose_inner(out, d);
}

fn verbose_inner(out: &mut Vec<u8>, d: &Decoded<'_>) -> std::io::Result<()> {
    write!(
        out,
        "Frame {}: {} bytes on wire, {} captured, time ",
        d.frame_no, d.orig_len, d.caplen
    )?;
    time(out, d.ts, d.ts_digits);
    out.extend_from_slice(b" (+");
    time(out, d.rel, d.ts_digits);
    writeln!(
        out,
        "), link type {} ({})",
        d.link_type,
        crate::link::name(d.link_type)
    )?;
    let Some(f) = d.frame else {
        if let Err(e) = &d.packet {
            writeln!(out, "  Error: {e}")?;
        }
        out.push(b'\n');
        return Ok(());
    };
    network(out, f)?;
    transport(out, d, f)?;
    trailer(out, d)
}

/// The link, network and UDP layers (Ethernet, IPv4/IPv6, UDP; RoCE v1's LRH and GRH).
fn network(out: &mut Vec<u8>, f: &Frame<'_>) -> std::io::Result<()> {
    if let Some(l) = &f.link {
        let m = |a: [u8; 6]| {
            let mut s = [0u8; 17];
            for (i, x) in a.iter().enumerate() {
                s[i * 3] = HEX[usize::from(x >> 4)];
                s[i * 3 + 1] = HEX[usize::from(x & 0xf)];
                if i < 5 {
                    s[i * 3 + 2] = b':';
                }
            }
            s
        };
        out.extend_from_slice(b"  Ethernet\n    dst: ");
        out.extend_from_slice(&m(l.dst));
        out.extend_from_slice(b"\n    src: ");
        out.extend_from_slice(&m(l.src));
        out.push(b'\n');
        for v in l.vlans.iter().flatten() {
            writeln!(
                out,
                "    vlan: tpid {:#06x}, pcp {}, dei {}, vid {}",
                v.tpid,
                v.pcp,
                flag(v.dei),
                v.vid
            )?;
        }
        writeln!(out, "    ether_type: {:#06x}", l.ether_type)?;
    }
    if let Some(i) = &f.ip {
        if i.is_ipv6() {
            writeln!(out, "  IPv6")?;
            writeln!(
                out,
                "    traffic_class: {:#04x} (dscp {}, ecn {} = {})",
                (i.dscp << 2) | i.ecn.bits(),
                i.dscp,
                i.ecn.bits(),
                i.ecn.name()
            )?;
            writeln!(out, "    flow_label: {:#07x}", i.flow_label)?;
            writeln!(out, "    hop_limit: {}", i.ttl)?;
        } else {
            writeln!(out, "  IPv4")?;
            writeln!(
                out,
                "    header_len: {} bytes{}",
                i.header.len(),
                if i.header.len() > 20 {
                    " (options)"
                } else {
                    ""
                }
            )?;
            writeln!(out, "    dscp: {}", i.dscp)?;
            writeln!(out, "    ecn: {} ({})", i.ecn.bits(), i.ecn.name())?;
            writeln!(
                out,
                "    identification: {:#06x} ({})",
                i.identification, i.identification
            )?;
            writeln!(out, "    dont_fragment: {}", flag(i.dont_fragment))?;
            writeln!(out, "    ttl: {}", i.ttl)?;
        }
        writeln!(out, "    src: {}", i.src)?;
        writeln!(out, "    dst: {}", i.dst)?;
    }
    if let Some(u) = &f.udp {
        writeln!(out, "  UDP")?;
        writeln!(out, "    src_port: {}", u.src_port)?;
        writeln!(out, "    dst_port: {} (RoCEv2)", u.dst_port)?;
        writeln!(out, "    length: {}", u.length)?;
        writeln!(
            out,
            "    checksum: {:#06x}{}",
            u.checksum,
            if u.checksum == 0 { " (none)" } else { "" }
        )?;
    }
    if let Some(l) = f.lrh {
        let l = lrh::Packet::new_unchecked(l);
        writeln!(out, "  LRH")?;
        writeln!(out, "    vl: {}", l.vl())?;
        writeln!(out, "    lver: {}", l.lver())?;
        writeln!(out, "    sl: {}", l.sl())?;
        let lnh = match l.lnh() {
            lrh::lnh::IBA_LOCAL => "IBA local: BTH follows",
            lrh::lnh::IBA_GLOBAL => "IBA global: GRH follows",
            lrh::lnh::IPV6 => "raw IPv6",
            _ => "raw",
        };
        writeln!(out, "    lnh: {} ({lnh})", l.lnh())?;
        writeln!(out, "    dlid: {:#06x} ({})", l.dlid(), l.dlid())?;
        writeln!(
            out,
            "    pkt_len: {} words ({} bytes)",
            l.pkt_len(),
            usize::from(l.pkt_len()) * 4
        )?;
        writeln!(out, "    slid: {:#06x} ({})", l.slid(), l.slid())?;
    }
    if let Some(g) = f.grh {
        let g = grh::Packet::new_unchecked(g);
        writeln!(out, "  GRH")?;
        writeln!(out, "    ip_ver: {}", g.ip_ver())?;
        writeln!(
            out,
            "    traffic_class: {:#04x} (ecn {})",
            g.traffic_class(),
            roce_proto::Ecn::from_bits(g.traffic_class()).name()
        )?;
        writeln!(out, "    flow_label: {:#07x}", g.flow_label())?;
        writeln!(out, "    pay_len: {}", g.pay_len())?;
        writeln!(out, "    nxt_hdr: {:#04x} (IBA transport)", g.nxt_hdr())?;
        writeln!(out, "    hop_lmt: {}", g.hop_lmt())?;
        writeln!(out, "    sgid: {}", std::net::Ipv6Addr::from(g.sgid()))?;
        writeln!(out, "    dgid: {}", std::net::Ipv6Addr::from(g.dgid()))?;
    }
    Ok(())
}

/// The transport headers: the BTH, DC's, and every extended header the opcode carries.
fn transport(out: &mut Vec<u8>, d: &Decoded<'_>, f: &Frame<'_>) -> std::io::Result<()> {
    if f.transport.len() >= roce_proto::bth::HEADER_LEN {
        let b = roce_proto::BthPacket::new_unchecked(&f.transport[..roce_proto::bth::HEADER_LEN]);
        let op = b.opcode();
        writeln!(out, "  BTH")?;
        out.extend_from_slice(b"    opcode: ");
        hex(out, u64::from(op.0), 2);
        out.extend_from_slice(b" (");
        opcode_name(out, op, d.dc.is_some());
        out.extend_from_slice(b")\n");
        writeln!(out, "    se: {} (solicited event)", flag(b.solicited()))?;
        writeln!(out, "    migreq: {} (migration request)", flag(b.migreq()))?;
        writeln!(out, "    pad_count: {}", b.pad_count())?;
        writeln!(out, "    tver: {}", b.tver())?;
        writeln!(out, "    pkey: {:#06x}", b.pkey().0)?;
        writeln!(out, "    fecn: {}", flag(b.fecn()))?;
        writeln!(out, "    becn: {}", flag(b.becn()))?;
        writeln!(out, "    resv6a: {:#04x}", b.resv6a())?;
        writeln!(
            out,
            "    dest_qp: {:#08x} ({})",
            b.dest_qp().0,
            b.dest_qp().0
        )?;
        writeln!(out, "    ack_req: {}", flag(b.ack_req()))?;
        writeln!(out, "    resv7: {:#04x}", b.resv7())?;
        writeln!(
            out,
            "    psn: {} ({:#08x})",
            b.psn().value(),
            b.psn().value()
        )?;
    }
    if let Some(dc) = d.dc {
        out.extend_from_slice(
            b"  DC (Mellanox Dynamically Connected; --rd reads these opcodes as RD)\n    dceth: ",
        );
        hex_bytes(out, dc.dceth);
        out.extend_from_slice(b" (8 bytes after the BTH)\n");
        if let Some(x) = dc.connect {
            out.extend_from_slice(b"    connect: ");
            hex_bytes(out, x);
            out.extend_from_slice(b" (16 bytes: DC connect, opcode 0x55 without SE)\n");
        }
    }
    if let Some(p) = header_view(d) {
        if let Some(h) = p.rdeth() {
            writeln!(out, "  RDETH\n    ee_context: {:#08x}", h.ee_context)?;
        }
        if let Some(h) = p.deth() {
            writeln!(out, "  DETH")?;
            writeln!(
                out,
                "    qkey: {:#010x}{}",
                h.qkey().0,
                if h.qkey() == roce_proto::deth::GSI_QKEY {
                    " (GSI)"
                } else {
                    ""
                }
            )?;
            writeln!(out, "    resv: {:#04x}", h.resv())?;
            writeln!(out, "    src_qp: {:#08x} ({})", h.src_qp().0, h.src_qp().0)?;
        }
        if let Some(h) = p.xrceth() {
            writeln!(out, "  XRCETH\n    xrc_srq: {:#08x}", h.xrc_srq.0)?;
        }
        if let Some(h) = p.feth() {
            writeln!(
                out,
                "  FETH\n    word: {:#010x} (selectivity {}, placement type {})",
                h.word,
                h.selectivity(),
                h.placement_type()
            )?;
        }
        if let Some(h) = p.reth() {
            writeln!(out, "  RETH")?;
            writeln!(out, "    va: {:#018x}", h.va())?;
            writeln!(out, "    rkey: {:#010x}", h.rkey().0)?;
            writeln!(out, "    dma_len: {}", h.dma_len())?;
        }
        if let Some(h) = p.atomic_eth() {
            writeln!(out, "  AtomicETH")?;
            writeln!(out, "    va: {:#018x}", h.va())?;
            writeln!(out, "    rkey: {:#010x}", h.rkey().0)?;
            writeln!(
                out,
                "    swap_add: {:#018x} ({})",
                h.swap_add(),
                h.swap_add()
            )?;
            writeln!(out, "    compare: {:#018x} ({})", h.compare(), h.compare())?;
        }
        if let Some(h) = p.aeth() {
            let s = h.syndrome();
            writeln!(out, "  AETH")?;
            write!(out, "    syndrome: {:#04x} (", s.0)?;
            match s.kind() {
                AethKind::Ack { credit: 31 } => write!(out, "ACK, no credit information")?,
                AethKind::Ack { credit } => write!(
                    out,
                    "ACK, credit code {credit} = {} credits",
                    roce_proto::aeth::credits(credit).unwrap_or(0)
                )?,
                AethKind::RnrNak { timer } => write!(
                    out,
                    "RNR NAK, timer code {timer} = {} us",
                    roce_proto::aeth::rnr_timer_ns(timer) / 1000
                )?,
                AethKind::Nak(c) => write!(out, "NAK, code {} = {}", c.code(), c.name())?,
                AethKind::Reserved { value } => write!(out, "reserved, value {value}")?,
            }
            out.extend_from_slice(b")\n");
            writeln!(out, "    msn: {}", h.msn().0)?;
        }
        if let Some(h) = p.atomic_ack_eth() {
            writeln!(
                out,
                "  AtomicAckETH\n    orig_data: {:#018x} ({})",
                h.orig_data(),
                h.orig_data()
            )?;
        }
        if let Some(h) = p.immdt() {
            writeln!(out, "  ImmDt\n    imm_data: {:#010x}", h.0)?;
        }
        if let Some(h) = p.ieth() {
            writeln!(out, "  IETH\n    rkey: {:#010x}", h.rkey.0)?;
        }
    }
    Ok(())
}

/// A MAD's tree, then the payload, pad and ICRC (or what the snap length left of them).
fn trailer(out: &mut Vec<u8>, d: &Decoded<'_>) -> std::io::Result<()> {
    if let Some(m) = d.mad() {
        crate::madfmt::verbose(out, &m)?;
    }
    match &d.packet {
        Err(_) if d.snap.is_some() => {
            let captured = d.captured_payload().map_or(0, <[u8]>::len);
            let (how, wire) = match d.snap.and_then(|s| s.wire_len) {
                Some(w) => (
                    "by the capturing tool, which rewrote the record's length",
                    w,
                ),
                None => ("by the snap length", d.orig_len as usize),
            };
            match d.snap.and_then(|s| s.implied_payload_len) {
                Some(n) => writeln!(
                    out,
                    "  Payload: {n} bytes ({captured} captured: the frame was cut {how}, {} of {wire} bytes)",
                    d.caplen
                )?,
                None => writeln!(
                    out,
                    "  Cut {how}: {} of {wire} bytes captured",
                    d.caplen
                )?,
            }
            writeln!(out, "  ICRC: not captured")?;
        }
        Ok(p) => {
            writeln!(out, "  Payload: {} bytes", p.payload().len())?;
            if !p.pad().is_empty() {
                out.extend_from_slice(b"  Pad: ");
                hex_bytes(out, p.pad());
                out.push(b'\n');
            }
            out.extend_from_slice(b"  ICRC: ");
            hex_bytes(out, &p.icrc_bytes());
            match d.icrc_ok {
                Some(true) => out.extend_from_slice(b" (correct)\n"),
                Some(false) => out.extend_from_slice(b" (BAD)\n"),
                None => out.extend_from_slice(b" (not checked)\n"),
            }
            if let Some(c) = &d.conformance {
                writeln!(out, "  Warning: {c}")?;
            }
        }
        Err(e) => writeln!(out, "  Error: {e}")?,
    }
    out.push(b'\n');
    Ok(())
}
