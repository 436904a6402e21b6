//! The verbs examples' exchange (`ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong`,
//! `ibv_srq_pingpong`, rdma-core `libibverbs/examples/`): [`roce_proto::pingpong::Record`]s
//! over TCP, in the order the tools keep (`pp_client_exch_dest`, `pp_server_exch_dest`):
//!
//! ```text
//! client                                server (receives posted, QPs in INIT)
//! its record(s), one write each  ---->  reads them; connects its QPs (RTR, RTS; UD: the AH)
//!                                <----  its record(s), one write each
//! "done\0"                       ---->  reads 5 bytes
//! connects its QPs, sends first
//! ```
//!
//! `ibv_srq_pingpong` sends 256 records each way, the ones past its `-q` all zero; the others
//! one. Nothing else crosses the TCP connection: the tools end on their own counts. A peer
//! whose record carries the zero GID ran without `-g` and is refused with that advice.
//!
//! A record is a peer's word about where to send: its GID must be a unicast address, and
//! the address the exchange came from when both are of one family (the stock servers
//! listen on IPv4 only, so an IPv6 GID may come over IPv4), or the address the user named
//! as the peer's RoCE address when the exchange runs over another network. Otherwise it is
//! refused in one line: a record cannot turn this end's traffic on a third host. The whole exchange, whatever the number of records, has one bound
//! ([`EXCHANGE`]).
use std::net::IpAddr;
use std::time::Duration;

use roce_proto::pingpong::{Record, DONE, RECORD_LEN, SRQ_RECORDS};
use roce_proto::{Psn, Qpn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{check_peer_gid, gid_of, PeerGid, Side};
use crate::{DriverError, PeerFault};

/// How long the whole exchange may take, every step and record included (256 records each
/// way for `ibv_srq_pingpong`).
pub const EXCHANGE: Duration = Duration::from_secs(30);

fn err(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> DriverError {
    PeerFault::step(format!("pingpong exchange, {what}"), e).into()
}

/// Records each way: 256 for `ibv_srq_pingpong` (`srq`), else one per QP.
fn records_each_way(side: &Side) -> usize {
    if side.srq.is_some() {
        SRQ_RECORDS
    } else {
        side.qps.len()
    }
}

/// This side's records, padded with zero records to `n`.
fn ours(side: &Side, n: usize) -> Vec<Record> {
    let gid = gid_of(side.ep.local_addr().ip());
    let mut v: Vec<Record> = side
        .qps
        .iter()
        .zip(&side.psns)
        .map(|(q, &psn)| Record {
            lid: 0,
            qpn: q.qpn,
            psn,
            gid,
        })
        .collect();
    v.resize(n.max(v.len()), Record::ZERO);
    v
}

async fn write_records(tcp: &mut TcpStream, recs: &[Record]) -> Result<(), DriverError> {
    for r in recs {
        // One write per record: the tools read each with a single read().
        tcp.write_all(&r.emit())
            .await
            .map_err(|e| err("sending our address", e))?;
    }
    Ok(())
}

async fn read_records(tcp: &mut TcpStream, n: usize) -> Result<Vec<Record>, DriverError> {
    let mut out = Vec::with_capacity(n);
    let mut b = [0u8; RECORD_LEN];
    for i in 0..n {
        tcp.read_exact(&mut b).await.map_err(|source| {
            err(
                "reading the peer's address",
                RecordFault::Short { n: i, source },
            )
        })?;
        out.push(Record::parse(&b).map_err(|e| err("the peer's address", e))?);
    }
    Ok(out)
}

/// What a peer's records say that this end refuses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordFault {
    /// Its first record's GID.
    #[error(transparent)]
    Gid(#[from] PeerGid),
    /// Another number of QPs than this end's.
    #[error("it announced {announced} QPs, this end has {here} (give both ends the same -q)")]
    Count {
        /// The peer's QPs (records with a QPN).
        announced: usize,
        /// This end's.
        here: usize,
    },
    /// Not done within [`EXCHANGE`].
    #[error("not done within {} s", EXCHANGE.as_secs())]
    Late,
    /// Record `n` could not be read whole.
    #[error("record {n}: {source}")]
    Short {
        /// Its index.
        n: usize,
        /// The connection's error.
        #[source]
        source: std::io::Error,
    },
}

/// The hint of [`PeerGid::Missing`] for the verbs examples.
const GID_HINT: &str =
    "its GID is zero: run the peer with -g, the GID index of its RoCEv2 address, 1 on rxe";

/// The QPs the peer announced for this side's `qps` and where it is: its first records, the
/// address from record 0's GID (`ibv_srq_pingpong` addresses every QP with it), checked
/// against `from`: where the exchange came from, or the peer's RoCE address.
fn peers(
    side: &Side,
    recs: &[Record],
    from: IpAddr,
) -> Result<(Vec<(Qpn, Psn)>, IpAddr), DriverError> {
    let gid = recs.first().map(|r| r.gid);
    let ip = check_peer_gid(gid, Some(from), GID_HINT)
        .map_err(|e| err("the peer's address", RecordFault::from(e)))?;
    let n = side.qps.len();
    let used = &recs[..n.min(recs.len())];
    if used.len() < n || used.iter().any(|r| r.qpn.0 == 0) {
        return Err(err(
            "the peer's address",
            RecordFault::Count {
                announced: recs.iter().filter(|r| r.qpn.0 != 0).count(),
                here: n,
            },
        ));
    }
    Ok((used.iter().map(|r| (r.qpn, r.psn)).collect(), ip))
}

/// What the exchange learned: the peer's records (the used ones) and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The peer's records, one per QP of this side.
    pub records: Vec<Record>,
    /// The peer's address (from its GID).
    pub ip: IpAddr,
}

/// The server's half on an accepted connection. `side`'s receives must be posted: the peer
/// sends as soon as it has this side's records. `peer_roce`: the peer's RoCE address, when
/// not the exchange's (its GID must name it).
pub async fn serve(
    tcp: TcpStream,
    side: &mut Side,
    peer_roce: Option<IpAddr>,
) -> Result<Peer, DriverError> {
    bounded(serve_steps(tcp, side, peer_roce)).await
}

/// The client's half on a connected stream: after it the QPs are ready and the server
/// waits for this side's first message. `peer_roce` as for [`serve`].
pub async fn client(
    tcp: TcpStream,
    side: &mut Side,
    peer_roce: Option<IpAddr>,
) -> Result<Peer, DriverError> {
    bounded(client_steps(tcp, side, peer_roce)).await
}

async fn bounded(
    steps: impl std::future::Future<Output = Result<Peer, DriverError>>,
) -> Result<Peer, DriverError> {
    tokio::time::timeout(EXCHANGE, steps)
        .await
        .map_err(|_| err("the exchange", RecordFault::Late))?
}

/// Where the peer's GID must point: `peer_roce`, else where the exchange came from.
fn peer_ip(tcp: &TcpStream, peer_roce: Option<IpAddr>) -> Result<IpAddr, DriverError> {
    if let Some(ip) = peer_roce {
        return Ok(ip);
    }
    Ok(tcp
        .peer_addr()
        .map_err(|e| DriverError::step("the exchange's TCP peer", e))?
        .ip())
}

async fn serve_steps(
    mut tcp: TcpStream,
    side: &mut Side,
    peer_roce: Option<IpAddr>,
) -> Result<Peer, DriverError> {
    let _ = tcp.set_nodelay(true);
    let from = peer_ip(&tcp, peer_roce)?;
    let n = records_each_way(side);
    let theirs = read_records(&mut tcp, n).await?;
    let (qps, ip) = peers(side, &theirs, from)?;
    side.connect(&qps, ip)?;
    write_records(&mut tcp, &ours(side, n)).await?;
    let mut done = [0u8; DONE.len()];
    tcp.read_exact(&mut done)
        .await
        .map_err(|e| err("waiting for \"done\"", e))?;
    Ok(Peer {
        records: theirs[..side.qps.len()].to_vec(),
        ip,
    })
}

async fn client_steps(
    mut tcp: TcpStream,
    side: &mut Side,
    peer_roce: Option<IpAddr>,
) -> Result<Peer, DriverError> {
    let _ = tcp.set_nodelay(true);
    let from = peer_ip(&tcp, peer_roce)?;
    let n = records_each_way(side);
    write_records(&mut tcp, &ours(side, n)).await?;
    let theirs = read_records(&mut tcp, n).await?;
    tcp.write_all(DONE)
        .await
        .map_err(|e| err("sending \"done\"", e))?;
    let (qps, ip) = peers(side, &theirs, from)?;
    side.connect(&qps, ip)?;
    Ok(Peer {
        records: theirs[..side.qps.len()].to_vec(),
        ip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gid_must_be_unicast_and_where_the_exchange_came_from() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let check =
            |gid: &str, from: &str| check_peer_gid(Some(gid_of(ip(gid))), Some(ip(from)), GID_HINT);
        assert_eq!(check("10.0.0.2", "10.0.0.2"), Ok(ip("10.0.0.2")));
        // The exchange over IPv4 (a stock server's), the RoCE address IPv6, and back.
        assert!(check("2001:db8::2", "10.0.0.2").is_ok());
        assert!(check("10.0.0.2", "::ffff:10.0.0.2").is_ok());
        for bad in ["10.0.0.3", "0.0.0.0", "255.255.255.255", "224.0.0.1"] {
            let e = check(bad, "10.0.0.2").unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("refused"), "{e}");
        }
        for bad in ["ff02::1", "2001:db8::3"] {
            assert!(check(bad, "2001:db8::2").is_err(), "{bad}");
        }
        // The zero GID is no address at all: the peer's tool needs its GID index.
        assert_eq!(
            check_peer_gid(Some([0; 16]), Some(ip("10.0.0.2")), GID_HINT),
            Err(PeerGid::Missing { hint: GID_HINT })
        );
    }
}
