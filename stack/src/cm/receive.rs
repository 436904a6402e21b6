//! MADs that arrive for the CM (§12.6): parsing and checking the class, then each message in
//! the state machine of §12.9 (REQ, REP, RTU, REJ, MRA, DREQ, DREP; SIDR in `sidr`).
use super::*;

impl Cm {
    /// Handles a MAD received on QP1 from `peer` to our address `local`.
    pub fn handle_mad(&mut self, now: Instant, peer: IpAddr, local: IpAddr, bytes: &[u8]) {
        let Ok(p) = mad::Packet::new_checked(bytes) else {
            self.stats.ignored += 1;
            return;
        };
        let Ok(h) = MadRepr::parse(&p) else {
            self.stats.ignored += 1;
            return;
        };
        if h.mgmt_class != MgmtClass::CM
            || h.method != Method::SEND
            || h.class_version != CM_CLASS_VERSION
            || bytes.len() < mad::MAD_LEN
        {
            self.stats.ignored += 1;
            return;
        }
        let Some(Ok(msg)) = MessageView::parse(h.attribute_id, &bytes[mad::HEADER_LEN..]) else {
            self.stats.ignored += 1;
            return;
        };
        let tid = h.transaction_id;
        match msg {
            MessageView::Req(r) => self.on_req(now, peer, local, tid, &r.to_repr()),
            MessageView::Rep(r) => self.on_rep(now, peer, &r.to_repr()),
            MessageView::Rtu(r) => self.on_rtu(peer, &r.to_repr()),
            MessageView::Rej(r) => self.on_rej(now, peer, &r.to_repr()),
            MessageView::Mra(r) => {
                let id = r.remote_comm_id();
                match self.conns.get_mut(&id) {
                    Some(c)
                        if c.peer == peer
                            && matches!(c.state, CmState::ReqSent | CmState::RepSent) =>
                    {
                        // The peer needs longer: wait its service timeout on top, never
                        // past the end of set-up (MRAs extend nothing beyond it).
                        let wait = timeout_ns(r.service_timeout()).saturating_add(c.wait_ns);
                        c.deadline = Some(now.add_nanos(wait).min(c.give_up));
                        self.stats.mras_received += 1;
                    }
                    _ => self.stats.ignored += 1,
                }
            }
            MessageView::Dreq(r) => self.on_dreq(now, peer, local, tid, &r.to_repr()),
            MessageView::SidrReq(r) => self.on_sidr_req(now, peer, local, tid, &r.to_repr()),
            MessageView::SidrRep(r) => self.on_sidr_rep(peer, &r.to_repr()),
            MessageView::Drep(r) => {
                let id = r.remote_comm_id();
                match self.conns.get_mut(&id) {
                    Some(c) if c.peer == peer && c.state == CmState::DreqSent => {
                        c.peer_release = Some(r.private_data().to_vec());
                        c.state = CmState::TimeWait;
                        c.deadline = Some(now.add_nanos(self.config.time_wait_ns));
                        self.event(CmEvent::Disconnected { conn: ConnId(id) });
                    }
                    Some(c) if c.peer == peer && c.state == CmState::TimeWait => {
                        self.stats.duplicates += 1;
                    }
                    _ => self.stats.ignored += 1,
                }
            }
            _ => self.stats.ignored += 1,
        }
    }

    pub(super) fn on_req(&mut self, now: Instant, peer: IpAddr, local: IpAddr, tid: u64, r: &Req) {
        // A REQ seen before: answer as before (§12.9.8.x duplicate REQ).
        if let Some(&id) = self.by_remote.get(&(peer, r.local_comm_id)) {
            let Some(c) = self.conns.get(&id) else {
                return;
            };
            match c.state {
                CmState::RepSent => {
                    let (l, p, t) = (c.local, c.peer, c.tid);
                    if let Some(msg) = c.last {
                        self.send(l, p, t, &msg);
                        self.stats.resent_answers += 1;
                    }
                }
                CmState::TimeWait => {
                    let (l, p, t, remote) = (c.local, c.peer, c.tid, c.remote_id);
                    self.send_rej(l, p, t, id, remote, reason::STALE_CONNECTION, 0, &[]);
                }
                _ => self.stats.duplicates += 1,
            }
            return;
        }
        // A REQ that makes no connection is answered, but not at any rate a spoofed source
        // asks for.
        let refuse = |this: &mut Self, why: u16| {
            if this.unsolicited_allowed(now) {
                this.send_rej(local, peer, tid, 0, r.local_comm_id, why, 0, &[]);
            }
        };
        if !self.listeners.contains(&r.service_id) {
            return refuse(self, reason::INVALID_SERVICE_ID);
        }
        // QPN 0 is the SMI's and 1 the GSI's (§10.2.5.4), 0xffffff the multicast QPN
        // (§10.5.2.1): no RC connection has one. A P_Key without key bits is invalid
        // (§10.9.1.2).
        if matches!(r.local_qpn, 0 | 1 | 0x00ff_ffff) || r.partition_key & 0x7fff == 0 {
            return refuse(self, reason::UNSUPPORTED_REQUEST);
        }
        if r.transport_service_type != 0 {
            return refuse(self, reason::INVALID_TRANSPORT_TYPE);
        }
        let Some(mtu) = path_mtu_bytes(r.path_packet_payload_mtu) else {
            return refuse(self, reason::INVALID_MTU);
        };
        // The same remote QP connected here under another communication ID: stale.
        if self.conns.values().any(|c| {
            c.peer == peer
                && c.params.remote_qpn.0 == r.local_qpn
                && matches!(c.state, CmState::Established | CmState::RepSent)
        }) {
            return refuse(self, reason::STALE_CONNECTION);
        }
        if self.conns.len() >= MAX_CONNECTIONS || self.events.len() >= MAX_QUEUED {
            return refuse(self, reason::NO_RESOURCES);
        }
        let id = self.new_id();
        let req = PeerRequest {
            peer,
            local,
            service_id: r.service_id,
            remote_qpn: Qpn(r.local_qpn),
            starting_psn: Psn::new(r.starting_psn),
            mtu,
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            local_ack_timeout: r.primary_path.local_ack_timeout,
            private_data: r.private_data.to_vec(),
        };
        let consumer = req
            .rdma_cm()
            .map_or_else(|| req.private_data.clone(), |(_, d)| d.to_vec());
        self.conns.insert(
            id,
            Conn {
                state: CmState::ReqRcvd,
                remote_id: r.local_comm_id,
                local,
                peer,
                tid,
                last: None,
                // The consumer has as long as the active side keeps retrying: after that
                // nobody waits for the answer (and a flood of REQs nobody answers does not
                // hold the table forever).
                deadline: Some(
                    now.add_nanos(
                        response_wait_ns(r.remote_cm_response_timeout)
                            .saturating_mul(u64::from(r.max_cm_retries) + 1)
                            .min(MAX_SETUP_NS),
                    ),
                ),
                // The active side told how long it takes to answer a REP.
                wait_ns: response_wait_ns(r.local_cm_response_timeout),
                retries_left: r.max_cm_retries,
                give_up: now.add_nanos(MAX_SETUP_NS),
                params: Negotiated {
                    local,
                    peer,
                    local_qpn: Qpn(0),
                    remote_qpn: Qpn(r.local_qpn),
                    // The REQ's Starting PSN is what the active side expects: we send from
                    // it; what we expect goes in the REP.
                    sq_psn: Psn::new(r.starting_psn),
                    rq_psn: Psn::new(0),
                    mtu,
                    // Upper bounds until `accept`: the peer's depths the other way round.
                    max_rd_atomic: r.responder_resources,
                    max_dest_rd_atomic: r.initiator_depth,
                    retry_cnt: r.retry_count,
                    rnr_retry: r.rnr_retry_count,
                    timeout: r.primary_path.local_ack_timeout,
                    private_data: consumer,
                },
                release: Vec::new(),
                peer_release: None,
                confirm: Vec::new(),
            },
        );
        self.by_remote.insert((peer, r.local_comm_id), id);
        self.event(CmEvent::Request {
            conn: ConnId(id),
            req,
        });
    }

    pub(super) fn on_rep(&mut self, _now: Instant, peer: IpAddr, r: &Rep) {
        let id = r.remote_comm_id;
        let Some(c) = self.conns.get_mut(&id) else {
            self.stats.ignored += 1;
            return;
        };
        if c.peer != peer {
            self.stats.ignored += 1;
            return;
        }
        match c.state {
            CmState::ReqSent => {
                c.remote_id = r.local_comm_id;
                c.params.remote_qpn = Qpn(r.local_qpn);
                c.params.sq_psn = Psn::new(r.starting_psn);
                // Our requester's depth: no more than the peer accepts; and the reverse.
                c.params.max_rd_atomic = c.params.max_rd_atomic.min(r.responder_resources);
                c.params.max_dest_rd_atomic = c.params.max_dest_rd_atomic.min(r.initiator_depth);
                c.params.rnr_retry = r.rnr_retry_count;
                c.params.private_data = r.private_data.to_vec();
                c.state = CmState::Established;
                c.deadline = None;
                c.last = None;
                let (local, p, tid) = (c.local, c.peer, c.tid);
                let params = c.params.clone();
                let confirm: [u8; 224] = copy_into(&c.confirm);
                self.by_remote.insert((peer, r.local_comm_id), id);
                let rtu = Message::Rtu(Rtu {
                    local_comm_id: id,
                    remote_comm_id: r.local_comm_id,
                    private_data: confirm,
                });
                self.send(local, p, tid, &rtu);
                self.stats.sent += 1;
                self.event(CmEvent::Established {
                    conn: ConnId(id),
                    params,
                });
            }
            CmState::Established if c.remote_id == r.local_comm_id => {
                // Our RTU was lost: the peer resent its REP.
                let (local, p, tid) = (c.local, c.peer, c.tid);
                let rtu = Message::Rtu(Rtu {
                    local_comm_id: id,
                    remote_comm_id: r.local_comm_id,
                    private_data: copy_into(&c.confirm),
                });
                self.send(local, p, tid, &rtu);
                self.stats.resent_answers += 1;
            }
            _ => self.stats.duplicates += 1,
        }
    }

    pub(super) fn on_rtu(&mut self, peer: IpAddr, r: &Rtu) {
        let id = r.remote_comm_id;
        match self.conns.get_mut(&id) {
            Some(c) if c.peer == peer && c.remote_id == r.local_comm_id => match c.state {
                CmState::RepSent => {
                    c.state = CmState::Established;
                    c.deadline = None;
                    c.last = None;
                    c.confirm = r.private_data.to_vec();
                    let params = c.params.clone();
                    self.event(CmEvent::Established {
                        conn: ConnId(id),
                        params,
                    });
                }
                _ => self.stats.duplicates += 1,
            },
            _ => self.stats.ignored += 1,
        }
    }

    pub(super) fn on_rej(&mut self, now: Instant, peer: IpAddr, r: &Rej) {
        // A REJ names our ID as its remote one (zero when it rejects a REQ it could not
        // match; then our ID is found from the peer's, which it gives as its local one).
        let id = if r.remote_comm_id != 0 {
            r.remote_comm_id
        } else {
            match self.by_remote.get(&(peer, r.local_comm_id)) {
                Some(&id) => id,
                None => {
                    self.stats.ignored += 1;
                    return;
                }
            }
        };
        match self.conns.get(&id) {
            Some(c)
                if c.peer == peer
                    && matches!(
                        c.state,
                        CmState::ReqSent | CmState::RepSent | CmState::ReqRcvd
                    ) =>
            {
                self.remove(id);
                self.event(CmEvent::Rejected {
                    conn: ConnId(id),
                    reason: r.reason,
                    private_data: r.private_data.to_vec(),
                });
            }
            // The passive side gave up waiting for our RTU (all lost) and rejected its own
            // REP: the connection we believed established is gone (as Linux's CM does).
            Some(c)
                if c.peer == peer && c.state == CmState::Established && r.message_rejected == 1 =>
            {
                let deadline = Some(now.add_nanos(self.config.time_wait_ns));
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = CmState::TimeWait;
                    c.deadline = deadline;
                }
                self.event(CmEvent::Disconnected { conn: ConnId(id) });
            }
            _ => self.stats.ignored += 1,
        }
    }

    pub(super) fn on_dreq(
        &mut self,
        now: Instant,
        peer: IpAddr,
        local: IpAddr,
        tid: u64,
        r: &Dreq,
    ) {
        let id = r.remote_comm_id;
        let drep = |this: &mut Self, local: IpAddr, data: &[u8]| {
            let m = Message::Drep(Drep {
                local_comm_id: r.remote_comm_id,
                remote_comm_id: r.local_comm_id,
                private_data: copy_into(data),
            });
            this.send(local, peer, tid, &m);
        };
        match self.conns.get_mut(&id) {
            Some(c) if c.peer == peer && c.remote_id == r.local_comm_id => match c.state {
                CmState::Established | CmState::DreqSent | CmState::RepSent => {
                    // Both released at once (DreqSent), or before our RTU arrived: either way
                    // the connection is gone.
                    c.state = CmState::TimeWait;
                    c.deadline = Some(now.add_nanos(self.config.time_wait_ns));
                    c.peer_release = Some(r.private_data.to_vec());
                    let (l, data) = (c.local, c.release.clone());
                    drep(self, l, &data);
                    self.stats.sent += 1;
                    self.event(CmEvent::Disconnected { conn: ConnId(id) });
                }
                CmState::TimeWait => {
                    let (l, data) = (c.local, c.release.clone());
                    drep(self, l, &data);
                    self.stats.resent_answers += 1;
                }
                _ => self.stats.duplicates += 1,
            },
            // §12.9.8.4: a DREQ for no connection is still answered with a DREP (at the
            // rate unsolicited answers are allowed).
            _ => {
                if self.unsolicited_allowed(now) {
                    drep(self, local, &[]);
                }
                self.stats.ignored += 1;
            }
        }
    }
}
