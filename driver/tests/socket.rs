//! The UDP socket under an endpoint, on real loopback sockets.

/// A receive socket that slept in epoll once (so tokio holds a registration and caches its
/// readiness) must still see a datagram that arrives while its owner spins without ever
/// awaiting, as the endpoint loop does between sleeps: `try_recv` may not answer from tokio's
/// stale "not readable". (It did, for one build: every ping-pong then waited out the 2 ms spin.)
#[test]
fn a_spinning_receiver_sees_datagrams_after_it_slept_once() {
    use roce_driver::socket::RoceSocket;
    use roce_proto::Ecn;
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a: SocketAddr = "127.0.90.1:4791".parse().unwrap();
        let b: SocketAddr = "127.0.90.2:4791".parse().unwrap();
        let mut tx = RoceSocket::bind(a).unwrap();
        let mut rx = RoceSocket::bind(b).unwrap();
        for round in 0..3 {
            tx.send_batch(0xc123, b, Ecn::NotEct, &[b"wake up"])
                .await
                .unwrap();
            // Sleep in epoll (registers the socket), then drain it: tokio now believes the
            // socket is not readable.
            rx.readable().await.unwrap();
            assert_eq!(rx.try_recv(|_, _| false).unwrap(), 1, "round {round}");
            assert_eq!(rx.try_recv(|_, _| false).unwrap(), 0, "round {round}");
            tx.send_batch(0xc123, b, Ecn::NotEct, &[b"while spinning"])
                .await
                .unwrap();
            // Spin, never yielding to tokio, until the datagram shows up (a liveness bound).
            let t0 = Instant::now();
            let mut got = 0;
            while got == 0 && t0.elapsed() < Duration::from_secs(2) {
                got = rx
                    .try_recv(|_, d| {
                        assert_eq!(d, b"while spinning");
                        false
                    })
                    .unwrap();
            }
            assert_eq!(got, 1, "round {round}: queued, but try_recv never looked");
        }
    });
}

/// The packet link's receive ring (needs CAP_NET_RAW, as the packet link does; CI runs as
/// root): each datagram arrives once, with its real IPv4 identification and DF; a datagram
/// longer than a ring slot is dropped and counted, never handed over cut; a flood the
/// endpoint does not read overflows the ring into a counted loss, and what was kept is whole
/// and in order.
#[test]
fn the_packet_ring_hands_over_whole_datagrams_once_and_counts_what_it_drops() {
    use roce_driver::socket::{Link, LinkChoice, RoceSocket};
    use roce_stack::Ipv4Seen;
    use std::net::{SocketAddr, UdpSocket};
    use std::time::{Duration, Instant};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let at: SocketAddr = "127.0.92.1:4791".parse().unwrap();
        let mut rx = RoceSocket::bind_with(at, LinkChoice::PacketRing)
            .expect("the packet link (needs CAP_NET_RAW: run the tests as root)");
        assert_eq!(rx.link(), Link::PacketRing);
        let tx = UdpSocket::bind("127.0.92.2:0").unwrap();
        let src = tx.local_addr().unwrap();
        // Drains until `want` datagrams were handed over or two seconds passed.
        let drain = |rx: &mut RoceSocket, want: usize, got: &mut Vec<(u16, Vec<u8>)>| {
            let t0 = Instant::now();
            while got.len() < want && t0.elapsed() < Duration::from_secs(2) {
                rx.try_recv(|meta, d| {
                    assert_eq!(meta.src, src);
                    let id = match meta.ipv4 {
                        Ipv4Seen::Seen { identification, .. } => identification,
                        other => panic!("the packet link sees the IPv4 header: {other:?}"),
                    };
                    got.push((id, d.to_vec()));
                    false
                })
                .unwrap();
            }
        };
        // Whole datagrams, once each.
        let mut got = Vec::new();
        for i in 0..10u8 {
            tx.send_to(&[i; 100], at).unwrap();
        }
        drain(&mut rx, 10, &mut got);
        assert_eq!(got.len(), 10);
        for (i, (_, d)) in got.iter().enumerate() {
            assert_eq!(d, &vec![i as u8; 100]);
        }
        assert_eq!(
            rx.try_recv(|_, _| -> bool { panic!("seen twice") })
                .unwrap(),
            0
        );
        // Longer than a slot (lo's MTU lets it through whole): counted, not handed over.
        tx.send_to(&vec![7u8; 9000], at).unwrap();
        tx.send_to(b"after", at).unwrap();
        got.clear();
        drain(&mut rx, 1, &mut got);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, b"after");
        assert_eq!(
            rx.link_drops().0,
            1,
            "the long datagram is counted as malformed"
        );
        // A flood nobody reads: the ring fills, the loss is reported, what it kept is whole
        // and in order.
        let n = 20_000u32;
        for i in 0..n {
            tx.send_to(&i.to_be_bytes(), at).unwrap();
        }
        got.clear();
        drain(&mut rx, n as usize, &mut got);
        assert!(
            got.len() < n as usize,
            "{} of {n} kept: the ring never filled?",
            got.len()
        );
        let dropped = rx.link_drops().1;
        assert_eq!(
            got.len() as u64 + dropped,
            u64::from(n),
            "every datagram was either kept or counted as lost"
        );
        let seq: Vec<u32> = got
            .iter()
            .map(|(_, d)| u32::from_be_bytes(d[..4].try_into().unwrap()))
            .collect();
        assert!(seq.windows(2).all(|w| w[0] < w[1]), "out of order");
    });
}
