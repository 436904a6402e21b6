//! roce's own handshake on its control channel ([`super::control`]): the client **offers**
//! the application's request with its end's QPs, the server builds its end for that request,
//! connects it to the client's QPs and **answers** with its own, and the client connects to
//! those. The applications exchange only their own messages; which QPs, which PSNs, which
//! RoCE port, and whether the counts agree is the layer's.
//!
//! ```text
//! client                                        server
//! {"offer":{"roce_port","qps","qkey","msg"}} -> offered(): the request, the client's QPs
//!                                               (the application builds its end)
//!                                           <- answer(): its end connected, its QPs
//! offer() returns: its end connected, the answer's message
//! "ready" ->                                    expect_ready()
//! ```
//!
//! The QPs a client announces are connected to at the address the control connection came
//! from, never at one the client names: a client cannot point a server's QPs at a third host.
use std::net::SocketAddr;
use std::time::Duration;

use roce_proto::QKey;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::control::{Answer, Control, Frame, Offer, ANSWER_TIMEOUT};
use super::qps::QpInfo;
use super::Side;
use crate::{setup, DriverError, PeerFault};

/// The client's end as its offer announced it: what [`Control::answer`] connects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedEnd {
    qps: Vec<QpInfo>,
    roce_port: u16,
}

impl OfferedEnd {
    /// How many QPs the client announced (the application checks it against its request
    /// before it builds anything for them).
    pub fn len(&self) -> usize {
        self.qps.len()
    }

    /// Whether the client announced none.
    pub fn is_empty(&self) -> bool {
        self.qps.is_empty()
    }
}

/// A client's offer as a server received it.
#[derive(Debug)]
pub struct Offered<M> {
    /// The application's request.
    pub msg: M,
    /// The Q_Key the client drew for the run's UD QPs (a non-controlled Q_Key: its high bit
    /// clear, IBTA Vol 1 §10.2.4).
    pub qkey: QKey,
    /// The client's end.
    pub end: OfferedEnd,
}

/// What a server received next: an offer, or one of the application's messages (a client
/// that asks for no more runs).
#[derive(Debug)]
pub enum Turn<M> {
    /// A client's offer.
    Offer(Offered<M>),
    /// An application message.
    Msg(M),
}

impl Control {
    /// Client: offers `msg` with `side`'s QPs (and `qkey`, the Q_Key of its UD QPs),
    /// waits [`ANSWER_TIMEOUT`] at most for the server's answer, and connects `side` to the
    /// server's QPs at the server's address (its RoCE port as answered). Returns the
    /// answer's message.
    pub async fn offer<M: Serialize + DeserializeOwned>(
        &mut self,
        side: &mut Side,
        qkey: QKey,
        msg: M,
    ) -> Result<M, DriverError> {
        let offer = Offer {
            roce_port: side.ep.local_addr().port(),
            qps: side.infos(),
            qkey: qkey.0,
            msg,
        };
        self.send_frame(&Frame::Offer(Box::new(offer))).await?;
        let Frame::Answer(a) = self.recv_frame_within::<M>(ANSWER_TIMEOUT).await? else {
            return Err(PeerFault::Expected("an answer to the offer").into());
        };
        let server = self.peer_ip()?;
        side.connect_to(&peers(&a.qps), SocketAddr::new(server, a.roce_port))?;
        Ok(a.msg)
    }

    /// Server: the client's next offer or message, within `within`.
    pub async fn next_offer<M: DeserializeOwned>(
        &mut self,
        within: Duration,
    ) -> Result<Turn<M>, DriverError> {
        match self.recv_frame_within::<M>(within).await? {
            Frame::Offer(o) => {
                let Offer {
                    roce_port,
                    qps,
                    qkey,
                    msg,
                } = *o;
                Ok(Turn::Offer(Offered {
                    msg,
                    qkey: QKey(qkey & 0x7fff_ffff),
                    end: OfferedEnd { qps, roce_port },
                }))
            }
            Frame::Msg(m) => Ok(Turn::Msg(m)),
            _ => Err(PeerFault::Expected("an offer").into()),
        }
    }

    /// Server: the client's offer, within [`ANSWER_TIMEOUT`].
    pub async fn offered<M: DeserializeOwned>(&mut self) -> Result<Offered<M>, DriverError> {
        match self.next_offer(ANSWER_TIMEOUT).await? {
            Turn::Offer(o) => Ok(o),
            Turn::Msg(_) => Err(PeerFault::Expected("an offer").into()),
        }
    }

    /// Server: connects `side` to the client's end `to` (at the address this control
    /// connection came from) and answers with `side`'s QPs and `msg`. The count of QPs
    /// must be `side`'s.
    pub async fn answer<M: Serialize>(
        &mut self,
        side: &mut Side,
        to: &OfferedEnd,
        msg: M,
    ) -> Result<(), DriverError> {
        let client = self.peer_ip()?;
        side.connect_to(&peers(&to.qps), SocketAddr::new(client, to.roce_port))?;
        let answer = Answer {
            roce_port: side.ep.local_addr().port(),
            qps: side.infos(),
            msg,
        };
        self.send_frame(&Frame::Answer(Box::new(answer))).await
    }

    fn peer_ip(&self) -> Result<std::net::IpAddr, DriverError> {
        // An IPv4 peer of a dual-stack listener is named by its IPv4 address, as its RoCE
        // socket is.
        Ok(self
            .peer_addr()
            .map_err(setup("the control connection's peer"))?
            .ip()
            .to_canonical())
    }
}

/// The peer's QPs as [`Side::connect_to`] takes them.
fn peers(infos: &[QpInfo]) -> Vec<(roce_proto::Qpn, roce_proto::Psn)> {
    infos.iter().map(|q| (q.qpn, q.psn)).collect()
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use roce_stack::{QpState, Service};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;
    use crate::connect::QpRequest;
    use crate::{LinkChoice, Secrets};

    fn side(ip: &str, count: u32, salt: u64) -> Side {
        let s = Secrets::from_seed(Some(7));
        let req = QpRequest {
            service: Service::Rc,
            count,
            ..QpRequest::default()
        };
        let local = SocketAddr::new(ip.parse().unwrap(), 0);
        let psns = s.start_psns(count, salt).unwrap();
        Side::new(s.device(salt).unwrap(), req, psns, local, LinkChoice::Udp).unwrap()
    }

    fn states(side: &Side) -> Vec<QpState> {
        side.qps
            .iter()
            .map(|q| side.ep.dev.qp(q.qpn).unwrap().state())
            .collect()
    }

    /// Both ends of a control connection: the client from `c`, the server at `s`.
    async fn pair(c: &str, s: &str) -> (Control, Control) {
        let l = TcpListener::bind((s.parse::<IpAddr>().unwrap(), 0))
            .await
            .unwrap();
        let to = l.local_addr().unwrap();
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(SocketAddr::new(c.parse().unwrap(), 0)).unwrap();
        let (client, server) = tokio::join!(sock.connect(to), l.accept());
        let client: TcpStream = client.unwrap();
        (Control::new(client), Control::new(server.unwrap().0))
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn an_offer_and_its_answer_connect_both_ends_to_each_other() {
        rt().block_on(async {
            let (mut cc, mut sc) = pair("127.0.94.1", "127.0.94.2").await;
            let mut client = side("127.0.94.1", 2, 1);
            let mut server = side("127.0.94.2", 2, 2);
            let (c_infos, s_infos) = (client.infos(), server.infos());
            let serve = async {
                let o: Offered<String> = sc.offered().await?;
                assert_eq!((o.msg.as_str(), o.end.len(), o.qkey), ("hello", 2, QKey(5)));
                sc.answer(&mut server, &o.end, "welcome".to_string()).await
            };
            let (answer, served) = tokio::join!(
                cc.offer(&mut client, QKey(0x8000_0005), "hello".to_string()),
                serve
            );
            served.unwrap();
            assert_eq!(answer.unwrap(), "welcome");
            // Each end's QPs are ready to send, toward the other's, at the other's address.
            for s in [&client, &server] {
                assert_eq!(states(s), vec![QpState::Rts; 2]);
            }
            for (mine, theirs) in [(&client, &s_infos), (&server, &c_infos)] {
                for (q, peer) in mine.qps.iter().zip(theirs.iter()) {
                    let qp = mine.ep.dev.qp(q.qpn).unwrap();
                    assert_eq!(qp.dest_qpn(), peer.qpn);
                }
            }
        });
    }

    #[test]
    fn a_server_refuses_an_offer_of_another_count_of_qps() {
        rt().block_on(async {
            let (mut cc, mut sc) = pair("127.0.94.3", "127.0.94.4").await;
            let mut client = side("127.0.94.3", 1, 1);
            let mut server = side("127.0.94.4", 2, 2);
            let serve = async {
                let o: Offered<u32> = sc.offered().await?;
                sc.answer(&mut server, &o.end, 0).await
            };
            let (_, served) = tokio::join!(
                tokio::time::timeout(
                    Duration::from_millis(200),
                    cc.offer(&mut client, QKey(0), 1)
                ),
                serve
            );
            let e = served.unwrap_err();
            assert!(
                matches!(e, DriverError::Peer(PeerFault::Count { .. })),
                "{e}"
            );
            assert_eq!(states(&server), vec![QpState::Init; 2]);
        });
    }

    #[test]
    fn a_client_takes_only_an_answer() {
        rt().block_on(async {
            let (mut cc, mut sc) = pair("127.0.94.5", "127.0.94.6").await;
            let mut client = side("127.0.94.5", 1, 1);
            let (r, _) = tokio::join!(cc.offer(&mut client, QKey(0), 1u32), async {
                let _: Offered<u32> = sc.offered().await.unwrap();
                sc.send(&2u32).await.unwrap();
            });
            let e = r.unwrap_err();
            assert!(
                matches!(e, DriverError::Peer(PeerFault::Expected(_))),
                "{e}"
            );
            assert_eq!(states(&client), vec![QpState::Init]);
        });
    }
}
