//! One lookup for every kind of QP: a device holding RC, UC and UD QPs and the GSI names each
//! by its QPN with its service (IBTA Vol 1 §9.8), routes a datagram to the kind it addresses,
//! and refuses what addresses none.
use std::net::{IpAddr, Ipv4Addr};

use std::net::SocketAddr;

use roce_proto::{BthRepr, DethRepr, Ecn, Opcode, PKey, PacketRepr, Psn, QKey, Qpn};
use roce_stack::{Delivery, Device, QpCaps, Refusal, RxMeta, Service};

fn device() -> (Device, [Qpn; 3]) {
    let mut dev = Device::default();
    let pd = dev.alloc_pd();
    let (s, r) = (dev.create_cq(), dev.create_cq());
    let rc = dev.create_qp(pd, s, r, QpCaps::default()).unwrap();
    let uc = dev.create_uc_qp(pd, s, r, QpCaps::default()).unwrap();
    let ud = dev
        .create_ud_qp(pd, s, r, QKey(0x1111_1111), 1024, 16)
        .unwrap();
    (dev, [rc, uc, ud])
}

#[test]
fn every_qp_has_its_service() {
    let (dev, [rc, uc, ud]) = device();
    assert_eq!(dev.service(rc), Some(Service::Rc));
    assert_eq!(dev.service(uc), Some(Service::Uc));
    assert_eq!(dev.service(ud), Some(Service::Ud));
    assert_eq!(dev.service(roce_stack::gsi::GSI_QPN), Some(Service::Ud));
    assert_eq!(dev.service(Qpn(0x00ab_cdef)), None);
    assert_eq!(dev.qp(uc).map(|q| q.service()), Some(Service::Uc));
    assert!(dev.ud_qp(ud).is_some() && dev.qp(ud).is_none());
}

/// A UD SEND ONLY to `qpn` with a Q_Key no QP here has (and no ICRC): refused by every
/// kind, each for its own reason.
fn datagram(qpn: Qpn) -> Vec<u8> {
    let repr = PacketRepr {
        bth: BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            pkey: PKey::DEFAULT,
            dest_qp: qpn,
            psn: Psn::new(0),
            ..BthRepr::default()
        },
        deth: Some(DethRepr {
            qkey: QKey(0x2222_2222),
            resv: 0,
            src_qp: Qpn(0x42),
        }),
        payload: &[0; 256],
        ..PacketRepr::default()
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

#[test]
fn datagrams_reach_the_kind_they_address() {
    let (mut dev, [rc, uc, ud]) = device();
    let meta = RxMeta::new(
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 49152),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        Ecn::NotEct,
    );
    let now = roce_stack::Instant::from_nanos(0);
    for (qpn, service) in [(rc, Service::Rc), (uc, Service::Uc)] {
        let d = dev.handle_datagram(now, &meta, &datagram(qpn));
        assert!(
            matches!(d, Delivery::Dropped(Refusal::Qp { qpn: q, .. }) if q == qpn),
            "{service}: {d:?}"
        );
    }
    let d = dev.handle_datagram(now, &meta, &datagram(ud));
    assert!(
        matches!(d, Delivery::Dropped(Refusal::Ud { qpn, .. }) if qpn == ud),
        "{d:?}"
    );
    let d = dev.handle_datagram(now, &meta, &datagram(roce_stack::gsi::GSI_QPN));
    assert!(
        matches!(d, Delivery::Dropped(Refusal::Management(_))),
        "{d:?}"
    );
    let stranger = Qpn(0x00ab_cdef);
    let d = dev.handle_datagram(now, &meta, &datagram(stranger));
    assert_eq!(d, Delivery::Dropped(Refusal::UnknownQp(stranger)));
}
