//! Test support shared by the simulation tests.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use roce_stack::sim::{Sim, TapEvent, TapKind};

/// Writes every datagram the simulator sends (lost ones included) into a pcap file, as
/// Ethernet/IP/UDP frames with the headers the ICRC was computed over, time stamped with the
/// virtual clock. Returns `false` if the file cannot be created.
pub fn write_pcap(sim: &mut Sim, path: &Path) -> bool {
    let Ok(mut cap) = roce_pcap::tap::DatagramCapture::create(path) else {
        return false;
    };
    sim.set_tap(Box::new(move |ev: &TapEvent<'_>| {
        if ev.kind == TapKind::Sent {
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
