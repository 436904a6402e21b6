//! Directions paired into connections: a direction is (sender, receiver, destination QPN);
//! its reverse is found by the CM exchange (REQ/REP carry both QPNs), else by the RoCEv2 UDP
//! source port, else by PSN agreement (a response direction whose PSNs answer a request
//! direction's, merging the two connections). Owns [`Dir`] and the [`Analyzer`]'s direction
//! table.
use std::net::IpAddr;

use super::pkt::{CmFacts, Pkt};
use super::requester::ReqState;
use super::responder::RespState;
use super::rules::Tallies;
use super::{Analyzer, Connection, MAX_DIRECTIONS};

/// CM requests remembered for pairing.
const MAX_CM: usize = 1 << 16;

/// What names a direction: (sender, receiver, destination QPN).
pub(super) type DirKey = (IpAddr, IpAddr, u32);

/// The directions by [`DirKey`]: a hash table of direction numbers and hashes, 8 bytes a
/// slot, each key read from its direction. A map holding the 40-byte keys took 48 bytes a
/// slot, and on a capture of 100,000 QPs its lookups were the costliest reads of the
/// analysis (the whole analysis is 3 % faster with this table). The hash is keyed
/// (foldhash's random seed): a capture cannot choose addresses and QPNs that collide.
#[derive(Debug, Default)]
pub(super) struct DirIndex {
    /// (direction, its key's hash).
    table: hashbrown::HashTable<(u32, u32)>,
    hasher: foldhash::fast::RandomState,
}

impl DirIndex {
    /// The 32 bits of the hash of `key` that the table keeps, spread over 64 (hashbrown
    /// takes the slot from the low bits and a tag from the top ones).
    fn hash(&self, key: &DirKey) -> (u32, u64) {
        use std::hash::BuildHasher;
        let h = self.hasher.hash_one(key);
        let h32 = (h ^ (h >> 32)) as u32;
        (h32, wide(h32))
    }

    /// The direction named `key`.
    #[inline]
    pub(super) fn get(&self, dirs: &[Dir], key: DirKey) -> Option<usize> {
        let (h32, h) = self.hash(&key);
        self.table
            .find(h, |&(d, k)| k == h32 && dirs[d as usize].key() == key)
            .map(|&(d, _)| d as usize)
    }

    /// Notes that direction `d` is named `key`, a key no direction has yet.
    fn insert(&mut self, key: DirKey, d: usize) {
        let (h32, h) = self.hash(&key);
        // Directions are bounded by MAX_DIRECTIONS, far below 2^32.
        let d = u32::try_from(d).unwrap_or(u32::MAX);
        self.table.insert_unique(h, (d, h32), |&(_, h32)| wide(h32));
    }
}

/// A kept 32-bit hash as the table's 64.
fn wide(h32: u32) -> u64 {
    u64::from(h32) << 32 | u64::from(h32)
}

/// One direction: requests and responses from one sender to one QP.
#[derive(Debug)]
///
/// Laid out so that what finding a packet's direction, connection and requests reads (the
/// analyzer's lookahead) is its first cache line, and each direction starts a line: on a
/// capture of many connections these are the reads that miss.
#[repr(C, align(64))]
pub(super) struct Dir {
    src: IpAddr,
    dst: IpAddr,
    /// Its side of the connection (0 or 1).
    side: u8,
    sport: u16,
    /// The destination QPN.
    qpn: u32,
    /// Its connection (an index of the analyzer's connections, below `MAX_DIRECTIONS`).
    conn: u32,
    /// Its requests (on the heap once it sent one or was answered: half the directions of
    /// a capture carry only responses).
    req: Option<Box<ReqState>>,
    /// The reverse direction, once paired (never the direction itself).
    peer: Option<u32>,
    /// The frame of its first packet (directions are made in this order).
    pub(super) first_frame: u64,
    /// Its responses (to the peer's requests).
    pub(super) resp: RespState,
}

/// The requests of a direction that has sent none.
static NO_REQUESTS: std::sync::LazyLock<ReqState> = std::sync::LazyLock::new(ReqState::default);

/// A direction's or connection's index as kept in [`Dir`] (both are bounded by
/// `MAX_DIRECTIONS`, far below 2^32).
fn index32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

impl Dir {
    /// Its connection (an index of the analyzer's connections).
    pub(super) fn conn(&self) -> usize {
        self.conn as usize
    }
    /// Its side of the connection (0 or 1).
    pub(super) fn side(&self) -> usize {
        usize::from(self.side)
    }
    /// The reverse direction, once paired.
    pub(super) fn peer(&self) -> Option<usize> {
        self.peer.map(|p| p as usize)
    }
    fn set_peer(&mut self, peer: usize) {
        self.peer = Some(index32(peer));
    }
    /// What names it.
    pub(super) fn key(&self) -> DirKey {
        (self.src, self.dst, self.qpn)
    }
    /// Its requests.
    pub(super) fn req(&self) -> &ReqState {
        self.req.as_deref().unwrap_or(&NO_REQUESTS)
    }
    /// Its requests, mutably (made on first use).
    pub(super) fn req_mut(&mut self) -> &mut ReqState {
        self.req.get_or_insert_with(Box::default)
    }
}

/// Two distinct directions, mutably: (requests of `req`, responses of `resp`).
fn pair_mut(dirs: &mut [Dir], req: usize, resp: usize) -> (&mut Dir, &mut Dir) {
    if req < resp {
        let (a, b) = dirs.split_at_mut(resp);
        (&mut a[req], &mut b[0])
    } else {
        let (a, b) = dirs.split_at_mut(req);
        (&mut b[0], &mut a[resp])
    }
}

/// The responses of direction `d`, and the requests they answer (its peer's; `None` while
/// unpaired).
pub(super) fn answering(dirs: &mut [Dir], d: usize) -> (&mut RespState, Option<&mut ReqState>) {
    match dirs[d].peer() {
        None => (&mut dirs[d].resp, None),
        Some(pr) => {
            let (req_dir, resp_dir) = pair_mut(dirs, pr, d);
            (&mut resp_dir.resp, Some(req_dir.req_mut()))
        }
    }
}

impl Analyzer {
    /// Notes a CM REQ (its sender's QPN by communication ID) or REP (the two ends' QPNs,
    /// paired), within [`MAX_CM`].
    pub(super) fn note_cm(&mut self, p: &Pkt, cm: CmFacts) {
        if cm.rej.is_some() || self.cm_req.len() >= MAX_CM || self.cm_peer.len() >= 2 * MAX_CM {
            return;
        }
        if !cm.rep {
            self.cm_req.insert(cm.local_comm_id, (p.src, cm.local_qpn));
        } else if let Some(&(req_addr, req_qpn)) = self.cm_req.get(&cm.remote_comm_id) {
            let rep = (p.src, cm.local_qpn);
            self.cm_peer.insert((req_addr, req_qpn), rep);
            self.cm_peer.insert(rep, (req_addr, req_qpn));
        }
    }

    /// The direction of `p`, created (and paired if it can be) on its first packet.
    pub(super) fn dir(&mut self, p: &Pkt) -> Option<usize> {
        if let Some(d) = self.by_key.get(&self.dirs, (p.src, p.dst, p.dest_qp)) {
            return Some(d);
        }
        let d = self.dirs.len();
        if d >= MAX_DIRECTIONS {
            return None;
        }
        // The reverse direction: by the CM, else by the UDP source port.
        let mut peer = None;
        let mut by = "none";
        if let Some(&(addr, qpn)) = self.cm_peer.get(&(p.dst, p.dest_qp)) {
            if addr == p.src {
                peer = self
                    .by_key
                    .get(&self.dirs, (p.dst, p.src, qpn))
                    .filter(|&r| self.dirs[r].peer.is_none());
                by = "cm";
            }
        }
        if peer.is_none() && p.sport != 0 {
            let cands: Vec<usize> = self
                .by_hosts
                .get(&(p.dst, p.src))
                .into_iter()
                .flatten()
                .copied()
                .filter(|&r| {
                    let x = &self.dirs[r];
                    x.peer.is_none() && x.sport == p.sport
                })
                .take(2)
                .collect();
            if cands.len() == 1 {
                peer = Some(cands[0]);
                by = "udp_sport";
            }
        }
        let (conn, side) = match peer {
            Some(r) => {
                self.dirs[r].set_peer(d);
                let c = self.dirs[r].conn();
                self.conns[c].paired_by = by;
                (c, 1 - self.dirs[r].side())
            }
            None => {
                let fresh = Connection {
                    paired_by: "none",
                    rules: Tallies::all(),
                    first_frame: p.frame,
                    ..Connection::default()
                };
                // A slot a merge freed, else a new one (the reports order connections by
                // their first packet, not by slot).
                let c = match self.free_conns.pop() {
                    Some(c) => {
                        *self.conns[c] = fresh;
                        c
                    }
                    None => {
                        self.conns.push(Box::new(fresh));
                        self.conns.len() - 1
                    }
                };
                (c, 0)
            }
        };
        self.conns[conn].sides[side].addr = Some(p.src);
        self.conns[conn].sides[1 - side].qpn = Some(p.dest_qp);
        self.conns[conn].sides[1 - side].addr.get_or_insert(p.dst);
        self.dirs.push(Dir {
            src: p.src,
            dst: p.dst,
            qpn: p.dest_qp,
            sport: p.sport,
            first_frame: p.frame,
            conn: index32(conn),
            // 0 or 1.
            side: side as u8,
            peer: peer.map(index32),
            req: None,
            resp: RespState::default(),
        });
        self.by_key.insert((p.src, p.dst, p.dest_qp), d);
        match peer {
            Some(r) => self.unlist(r),
            None => self.by_hosts.entry((p.src, p.dst)).or_default().push(d),
        }
        Some(d)
    }

    /// Takes a direction that found its pair out of [`Analyzer::by_hosts`] (which lists the
    /// unpaired ones).
    fn unlist(&mut self, d: usize) {
        let key = (self.dirs[d].src, self.dirs[d].dst);
        if let Some(v) = self.by_hosts.get_mut(&key) {
            v.retain(|&x| x != d);
            if v.is_empty() {
                self.by_hosts.remove(&key);
            }
        }
    }

    /// Pairs an unpaired response direction with the request direction whose PSNs it
    /// answers.
    pub(super) fn pair_by_psn(&mut self, d: usize, psn: u32) {
        if self.dirs[d].peer.is_some() {
            return;
        }
        let (src, dst) = (self.dirs[d].src, self.dirs[d].dst);
        let Some(back) = self.by_hosts.get(&(dst, src)) else {
            return;
        };
        // The first few unpaired candidates only: a crafted capture with many QPs between two
        // hosts must not make every response a scan.
        let cand = back.iter().copied().take(64).find(|&r| {
            let x = &self.dirs[r];
            let req = x.req();
            if r == d || x.peer.is_some() || !req.started {
                return false;
            }
            let u = req.unwrap(psn);
            let lo = req.outstanding.front().map_or(req.highest, |o| o.psn);
            u >= lo.saturating_sub(1) && u <= req.highest
        });
        let Some(r) = cand else {
            return;
        };
        // Merge d's connection into r's.
        let (old, new) = (self.dirs[d].conn(), self.dirs[r].conn());
        let side = 1 - self.dirs[r].side();
        let moved = std::mem::take(&mut self.conns[old].sides[0]);
        let events = std::mem::take(&mut self.conns[old].events);
        let dropped = self.conns[old].events_dropped;
        let s = &mut self.conns[new].sides[side];
        let qpn = s.qpn.or(moved.qpn);
        *s = moved;
        s.qpn = qpn;
        self.conns[new]
            .events
            .extend(events.into_iter().map(|mut e| {
                e.connection = new;
                e.side = side;
                e
            }));
        self.conns[new].events_dropped += dropped;
        // The merged connection's slot is free for the next new direction.
        *self.conns[old] = Connection {
            paired_by: "merged",
            ..Connection::default()
        };
        self.free_conns.push(old);
        self.dirs[d].conn = index32(new);
        // 0 or 1.
        self.dirs[d].side = side as u8;
        self.dirs[d].set_peer(r);
        self.dirs[r].set_peer(d);
        self.unlist(r);
        self.unlist(d);
        self.conns[new].paired_by = "psn";
    }
}
