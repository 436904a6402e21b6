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
use std::net::IpAddr;
use std::time::Duration;

use roce_proto::pingpong::{Record, DONE, RECORD_LEN, SRQ_RECORDS};
use roce_proto::{Psn, Qpn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{gid_of, ip_of_gid, Side};
use crate::DriverError;

/// How long one step may wait for the peer.
const STEP: Duration = Duration::from_secs(30);

fn err(what: &str, e: impl std::fmt::Display) -> DriverError {
    DriverError::Peer(format!("pingpong exchange, {what}: {e}"))
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
        tokio::time::timeout(STEP, tcp.write_all(&r.emit()))
            .await
            .map_err(|_| err("sending our address", "the peer stopped reading"))?
            .map_err(|e| err("sending our address", e))?;
    }
    Ok(())
}

async fn read_records(tcp: &mut TcpStream, n: usize) -> Result<Vec<Record>, DriverError> {
    let mut out = Vec::with_capacity(n);
    let mut b = [0u8; RECORD_LEN];
    for i in 0..n {
        tokio::time::timeout(STEP, tcp.read_exact(&mut b))
            .await
            .map_err(|_| err("reading the peer's address", "nothing for 30 s"))?
            .map_err(|e| err("reading the peer's address", format!("record {i}: {e}")))?;
        out.push(Record::parse(&b).map_err(|e| err("the peer's address", e))?);
    }
    Ok(out)
}

/// The QPs the peer announced for this side's `qps` and where it is: its first records, the
/// address from record 0's GID (`ibv_srq_pingpong` addresses every QP with it).
fn peers(side: &Side, recs: &[Record]) -> Result<(Vec<(Qpn, Psn)>, IpAddr), DriverError> {
    let first = recs
        .first()
        .ok_or_else(|| err("the peer's address", "no record"))?;
    let ip = ip_of_gid(first.gid).ok_or_else(|| {
        err(
            "the peer's address",
            "its GID is zero: run the peer with -g (the GID index of its RoCEv2 address, 1 on rxe)",
        )
    })?;
    let n = side.qps.len();
    let used = &recs[..n.min(recs.len())];
    if used.len() < n || used.iter().any(|r| r.qpn.0 == 0) {
        return Err(err(
            "the peer's address",
            format!(
                "it announced {} QPs, this end has {n} (give both ends the same -q)",
                recs.iter().filter(|r| r.qpn.0 != 0).count()
            ),
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
/// sends as soon as it has this side's records.
pub async fn serve(mut tcp: TcpStream, side: &mut Side) -> Result<Peer, DriverError> {
    let _ = tcp.set_nodelay(true);
    let n = records_each_way(side);
    let theirs = read_records(&mut tcp, n).await?;
    let (qps, ip) = peers(side, &theirs)?;
    side.connect(&qps, ip)?;
    write_records(&mut tcp, &ours(side, n)).await?;
    let mut done = [0u8; DONE.len()];
    tokio::time::timeout(STEP, tcp.read_exact(&mut done))
        .await
        .map_err(|_| err("waiting for \"done\"", "nothing for 30 s"))?
        .map_err(|e| err("waiting for \"done\"", e))?;
    Ok(Peer {
        records: theirs[..side.qps.len()].to_vec(),
        ip,
    })
}

/// The client's half on a connected stream: after it the QPs are ready and the server
/// waits for this side's first message.
pub async fn client(mut tcp: TcpStream, side: &mut Side) -> Result<Peer, DriverError> {
    let _ = tcp.set_nodelay(true);
    let n = records_each_way(side);
    write_records(&mut tcp, &ours(side, n)).await?;
    let theirs = read_records(&mut tcp, n).await?;
    tokio::time::timeout(STEP, tcp.write_all(DONE))
        .await
        .map_err(|_| err("sending \"done\"", "the peer stopped reading"))?
        .map_err(|e| err("sending \"done\"", e))?;
    let (qps, ip) = peers(side, &theirs)?;
    side.connect(&qps, ip)?;
    Ok(Peer {
        records: theirs[..side.qps.len()].to_vec(),
        ip,
    })
}
