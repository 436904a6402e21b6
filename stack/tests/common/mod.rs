//! Test support shared by the simulation tests.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use roce_stack::sim::{Sim, TapEvent, TapKind};

/// Writes every datagram the simulator sends (lost ones included) into a pcap file, as
/// Ethernet/IP/UDP frames with the headers the ICRC was computed over, time stamped with the
/// virtual clock. Returns `false` if the file cannot be created.
pub fn write_pcap(sim: &mut Sim, path: &Path) -> bool {
    write_pcap_of(sim, path, TapKind::Sent)
}

/// [`write_pcap`] of the datagrams of `kind`: `Sent` is a capture where packets leave their
/// sender, `Delivered` one where they arrive.
pub fn write_pcap_of(sim: &mut Sim, path: &Path, kind: TapKind) -> bool {
    let Ok(mut cap) = roce_pcap::tap::DatagramCapture::create(path) else {
        return false;
    };
    sim.set_tap(Box::new(move |ev: &TapEvent<'_>| {
        if ev.kind == kind {
            let t = UNIX_EPOCH + Duration::from_nanos(ev.time.as_nanos());
            let src = std::net::SocketAddr::new(ev.src, ev.src_port);
            let dst = std::net::SocketAddr::new(ev.dst, ev.dst_port);
            let _ = cap.record(t, src, dst, ev.ecn, ev.datagram);
        }
    }));
    true
}

/// `SIM_PCAP=file.pcap` dumps a simulation's traffic for `roce decode` or Wireshark.
pub fn pcap_from_env(sim: &mut Sim) {
    if let Some(p) = std::env::var_os("SIM_PCAP") {
        let path = Path::new(&p);
        assert!(write_pcap(sim, path), "cannot create {}", path.display());
        eprintln!("simulation traffic goes to {}", path.display());
    }
}

/// Two endpoints (10.0.0.1 and 10.0.0.2) with `qps` connected RC QP pairs.
pub struct Pair {
    /// Endpoint index of the requester side.
    pub a: usize,
    /// Endpoint index of the responder side.
    pub b: usize,
    /// Protection domains of `a` and `b`.
    pub pd: (roce_stack::PdHandle, roce_stack::PdHandle),
    /// Requester QPs with their send CQs.
    pub send: Vec<(roce_proto::Qpn, roce_stack::CqHandle)>,
    /// Responder QPs with their receive CQs.
    pub recv: Vec<(roce_proto::Qpn, roce_stack::CqHandle)>,
}

/// Adds the two endpoints to `sim` and connects `qps` QP pairs; `opts(q)` gives each pair's
/// connection options.
pub fn connect_pairs(
    sim: &mut Sim,
    qps: u32,
    opts: impl Fn(u32) -> roce_stack::ConnectParams,
) -> Pair {
    use std::net::{IpAddr, Ipv4Addr};
    let a = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let b = sim.add_endpoint(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let pd = (sim.device(a).alloc_pd(), sim.device(b).alloc_pd());
    let (mut send, mut recv) = (Vec::new(), Vec::new());
    for q in 0..qps {
        let (sa, ra) = (sim.device(a).create_cq(), sim.device(a).create_cq());
        let (sb, rb) = (sim.device(b).create_cq(), sim.device(b).create_cq());
        let caps = roce_stack::QpCaps::default();
        let x = sim
            .device(a)
            .create_qp(pd.0, sa, ra, caps)
            .expect("QP on a");
        let y = sim
            .device(b)
            .create_qp(pd.1, sb, rb, caps)
            .expect("QP on b");
        sim.connect(a, x, b, y, &opts(q)).expect("connect");
        send.push((x, sa));
        recv.push((y, rb));
    }
    Pair {
        a,
        b,
        pd,
        send,
        recv,
    }
}
