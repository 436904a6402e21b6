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
            assert_eq!(rx.try_recv(|_, _| {}).unwrap(), 1, "round {round}");
            assert_eq!(rx.try_recv(|_, _| {}).unwrap(), 0, "round {round}");
            tx.send_batch(0xc123, b, Ecn::NotEct, &[b"while spinning"])
                .await
                .unwrap();
            // Spin, never yielding to tokio, until the datagram shows up (a liveness bound).
            let t0 = Instant::now();
            let mut got = 0;
            while got == 0 && t0.elapsed() < Duration::from_secs(2) {
                got = rx
                    .try_recv(|_, d| assert_eq!(d, b"while spinning"))
                    .unwrap();
            }
            assert_eq!(got, 1, "round {round}: queued, but try_recv never looked");
        }
    });
}
