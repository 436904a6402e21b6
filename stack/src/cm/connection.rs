//! What the consumer asks of the CM about one connection (§12.9): connect (REQ), accept
//! (REP), reject (REJ), refuse a REP, disconnect (DREQ), and the response timeouts and
//! retries that follow (§12.4, §12.6).
use super::*;

impl Cm {
    /// Active side: sends a REQ. Fails (with the REJ reason it would get) when the options
    /// are invalid or the connection table is full.
    pub fn connect(&mut self, now: Instant, o: &ConnectOptions) -> Result<ConnId, u16> {
        let Some(mtu_code) = path_mtu_code(o.mtu) else {
            return Err(reason::INVALID_MTU);
        };
        if self.conns.len() >= MAX_CONNECTIONS {
            return Err(reason::NO_RESOURCES);
        }
        let id = self.new_id();
        let tid = self.rng.next_u64();
        let rt = self.config.response_timeout.min(31);
        let req = Req {
            local_comm_id: id,
            service_id: o.service_id,
            local_ca_guid: self.config.ca_guid,
            local_qpn: o.offer.qpn.0 & 0x00ff_ffff,
            responder_resources: o.offer.responder_resources,
            initiator_depth: o.offer.initiator_depth,
            remote_cm_response_timeout: rt,
            transport_service_type: 0,
            end_to_end_flow_control: 1,
            starting_psn: o.offer.starting_psn.value(),
            local_cm_response_timeout: rt,
            retry_count: o.retry_count & 7,
            partition_key: 0xffff,
            path_packet_payload_mtu: mtu_code,
            rnr_retry_count: o.offer.rnr_retry_count & 7,
            max_cm_retries: self.config.max_retries & 15,
            primary_path: CmPath {
                local_port_lid: 0xffff,
                remote_port_lid: 0xffff,
                local_port_gid: gid(o.local),
                remote_port_gid: gid(o.peer),
                hop_limit: 64,
                local_ack_timeout: o.local_ack_timeout & 31,
                ..CmPath::default()
            },
            private_data: copy_into(&o.private_data),
            ..Req::default()
        };
        let msg = Message::Req(req);
        self.send(o.local, o.peer, tid, &msg);
        self.stats.sent += 1;
        let wait_ns = response_wait_ns(rt);
        self.conns.insert(
            id,
            Conn {
                state: CmState::ReqSent,
                remote_id: 0,
                local: o.local,
                peer: o.peer,
                tid,
                last: Some(msg),
                deadline: Some(now.add_nanos(wait_ns)),
                wait_ns,
                retries_left: self.config.max_retries & 15,
                give_up: now.add_nanos(MAX_SETUP_NS),
                params: Negotiated {
                    local: o.local,
                    peer: o.peer,
                    local_qpn: o.offer.qpn,
                    remote_qpn: Qpn(0),
                    // From the REP.
                    sq_psn: Psn::new(0),
                    rq_psn: o.offer.starting_psn,
                    mtu: o.mtu,
                    max_rd_atomic: o.offer.initiator_depth,
                    max_dest_rd_atomic: o.offer.responder_resources,
                    retry_cnt: o.retry_count & 7,
                    rnr_retry: 0,
                    timeout: o.local_ack_timeout & 31,
                    private_data: Vec::new(),
                },
                release: Vec::new(),
                peer_release: None,
                confirm: Vec::new(),
            },
        );
        Ok(ConnId(id))
    }

    /// Passive side: accepts a REQ announced by [`CmEvent::Request`] with our QP; sends REP.
    /// Returns what the QP is to be connected with: move it to RTR (or RTS) now, before the
    /// REP leaves, as §12.9.7 has the passive side do, since the active side may send as soon
    /// as it has the REP (the RTU and the first requests can arrive together).
    /// [`CmEvent::Established`] follows on the RTU. `None` when the connection is not
    /// waiting for an answer.
    pub fn accept(
        &mut self,
        now: Instant,
        conn: ConnId,
        offer: QpOffer,
        private: &[u8],
    ) -> Option<Negotiated> {
        let c = self.conns.get_mut(&conn.0)?;
        if c.state != CmState::ReqRcvd {
            return None;
        }
        // Depths: no more than the other side can take.
        let rr = offer.responder_resources.min(c.params.max_dest_rd_atomic);
        let id = offer.initiator_depth.min(c.params.max_rd_atomic);
        c.params.local_qpn = offer.qpn;
        c.params.rq_psn = offer.starting_psn;
        c.params.max_dest_rd_atomic = rr;
        c.params.max_rd_atomic = id;
        let rep = Rep {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_id,
            local_qpn: offer.qpn.0 & 0x00ff_ffff,
            starting_psn: offer.starting_psn.value(),
            responder_resources: rr,
            initiator_depth: id,
            end_to_end_flow_control: 1,
            rnr_retry_count: offer.rnr_retry_count & 7,
            local_ca_guid: self.config.ca_guid,
            private_data: copy_into(private),
            ..Rep::default()
        };
        let msg = Message::Rep(rep);
        c.state = CmState::RepSent;
        c.last = Some(msg);
        c.deadline = Some(now.add_nanos(c.wait_ns).min(c.give_up));
        let (local, peer, tid) = (c.local, c.peer, c.tid);
        let params = c.params.clone();
        self.send(local, peer, tid, &msg);
        self.stats.sent += 1;
        Some(params)
    }

    /// Passive side: refuses a REQ announced by [`CmEvent::Request`] (REJ with `reason`,
    /// normally [`reason::CONSUMER_REJECT`]). `false` when it is not waiting for an answer.
    pub fn reject(&mut self, conn: ConnId, why: u16, private: &[u8]) -> bool {
        let Some(c) = self.conns.get(&conn.0) else {
            return false;
        };
        if c.state != CmState::ReqRcvd {
            return false;
        }
        let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
        self.send_rej(local, peer, tid, conn.0, remote, why, 0, private);
        self.remove(conn.0);
        true
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_rej(
        &mut self,
        local: IpAddr,
        peer: IpAddr,
        tid: u64,
        local_id: u32,
        remote_id: u32,
        why: u16,
        rejected: u8,
        private: &[u8],
    ) {
        // A Timeout REJ names the CA whose timer ran out in its ARI (§12.6.7.2, Table 112:
        // the 8-byte CA GUID); Linux matches such a REJ to its connection by that GUID and
        // ignores one without it.
        let (ari, ari_len) = if why == reason::TIMEOUT {
            let mut a = [0u8; 72];
            a[..8].copy_from_slice(&self.config.ca_guid.to_be_bytes());
            (a, 8)
        } else {
            ([0u8; 72], 0)
        };
        let rej = Rej {
            local_comm_id: local_id,
            remote_comm_id: remote_id,
            message_rejected: rejected,
            reject_info_length: ari_len,
            reason: why,
            ari,
            private_data: copy_into(private),
        };
        self.send(local, peer, tid, &Message::Rej(rej));
        self.stats.rejects_sent += 1;
    }

    /// Either side: gives `conn` up, whatever its state, and tells the peer: an established
    /// connection is released (DREQ, and its events follow as for [`Cm::disconnect`]); one
    /// being set up is refused with a REJ (`why`; IBTA Vol 1 §12.6.7 lets either side reject
    /// until it is established) and forgotten at once, so nothing the peer sends later
    /// (an RTU, a REP) revives it. `false` when there is no such connection.
    pub fn abandon(&mut self, now: Instant, conn: ConnId, why: u16) -> bool {
        let Some(c) = self.conns.get(&conn.0) else {
            return false;
        };
        let (local, peer, tid, remote, state) = (c.local, c.peer, c.tid, c.remote_id, c.state);
        match state {
            CmState::Established => return self.disconnect(now, conn),
            // Message rejected: 0 the REQ (passive, before the REP), 1 the REP (active), 2
            // other (the passive side after its REP).
            CmState::ReqRcvd => self.send_rej(local, peer, tid, conn.0, remote, why, 0, &[]),
            CmState::ReqSent => self.send_rej(local, peer, tid, conn.0, remote, why, 1, &[]),
            CmState::RepSent => self.send_rej(local, peer, tid, conn.0, remote, why, 2, &[]),
            // Released already: only the IDs were kept.
            CmState::DreqSent | CmState::TimeWait => {}
        }
        self.remove(conn.0);
        true
    }

    /// Active side: refuses the REP that just established `conn` (its private data is not
    /// what the consumer needs), as §12.6.7 lets a requester: if the RTU has not left yet, it
    /// is withdrawn and a REJ (message rejected: REP) with `why` and `private` goes instead;
    /// otherwise the connection is released with a DREQ. Either way the peer is told, never
    /// left resending its REP. `false` when `conn` is not established.
    pub fn refuse_rep(&mut self, now: Instant, conn: ConnId, why: u16, private: &[u8]) -> bool {
        let Some(c) = self.conns.get(&conn.0) else {
            return false;
        };
        if c.state != CmState::Established {
            return false;
        }
        let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
        let before = self.out.len();
        self.out.retain(|o| {
            let h = MadRepr::parse(&mad::Packet::new_unchecked(&o.mad[..]));
            let is_rtu = h.is_ok_and(|h| h.attribute_id == Rtu::ATTRIBUTE_ID);
            let ours = MessageView::parse(Rtu::ATTRIBUTE_ID, &o.mad[mad::HEADER_LEN..])
                .and_then(|m| m.ok())
                .is_some_and(|m| matches!(m, MessageView::Rtu(r) if r.local_comm_id() == conn.0));
            !(is_rtu && ours && o.peer == peer)
        });
        if self.out.len() < before {
            self.stats.sent = self.stats.sent.saturating_sub(1);
            self.send_rej(local, peer, tid, conn.0, remote, why, 1, private);
            self.remove(conn.0);
            true
        } else {
            self.disconnect(now, conn)
        }
    }

    /// Either side: releases an established connection (DREQ). `false` when it is not
    /// established.
    pub fn disconnect(&mut self, now: Instant, conn: ConnId) -> bool {
        let wait_ns = timeout_ns(self.config.response_timeout.min(31));
        let retries = self.config.max_retries & 15;
        let tid = self.rng.next_u64();
        let Some(c) = self.conns.get_mut(&conn.0) else {
            return false;
        };
        if c.state != CmState::Established {
            return false;
        }
        let msg = Message::Dreq(Dreq {
            local_comm_id: conn.0,
            remote_comm_id: c.remote_id,
            remote_qpn_eecn: c.params.remote_qpn.0 & 0x00ff_ffff,
            private_data: copy_into(&c.release),
        });
        c.state = CmState::DreqSent;
        c.tid = tid;
        c.last = Some(msg);
        c.wait_ns = wait_ns;
        c.retries_left = retries;
        c.deadline = Some(now.add_nanos(wait_ns));
        let (local, peer) = (c.local, c.peer);
        self.send(local, peer, tid, &msg);
        self.stats.sent += 1;
        true
    }

    /// Runs response timeouts and TimeWait ends. Call once `now >= poll_timeout()`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .sidrs
            .iter()
            .filter(|(_, s)| s.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(s) = self.sidrs.get_mut(&id) else {
                continue;
            };
            if s.retries_left == 0 {
                self.sidrs.remove(&id);
                self.stats.timeouts += 1;
                self.event(CmEvent::TimedOut { conn: ConnId(id) });
                continue;
            }
            s.retries_left -= 1;
            s.deadline = now.add_nanos(s.wait_ns);
            let (local, peer, tid, msg) = (s.local, s.peer, s.tid, s.msg);
            self.send(local, peer, tid, &msg);
            self.stats.retries += 1;
        }
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            match c.state {
                CmState::TimeWait => {
                    self.remove(id);
                }
                CmState::ReqSent | CmState::RepSent | CmState::DreqSent
                    if c.retries_left > 0 && (c.state == CmState::DreqSent || now < c.give_up) =>
                {
                    c.retries_left -= 1;
                    let next = now.add_nanos(c.wait_ns);
                    c.deadline = Some(if c.state == CmState::DreqSent {
                        next
                    } else {
                        next.min(c.give_up)
                    });
                    let (local, peer, tid) = (c.local, c.peer, c.tid);
                    if let Some(msg) = c.last {
                        self.send(local, peer, tid, &msg);
                        self.stats.retries += 1;
                    }
                }
                CmState::ReqSent | CmState::RepSent => {
                    // Given up: tell the peer (§12.6.7.2: REJ with reason Timeout).
                    let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
                    let rejected = if c.state == CmState::ReqSent { 0 } else { 1 };
                    self.send_rej(local, peer, tid, id, remote, reason::TIMEOUT, rejected, &[]);
                    self.stats.timeouts += 1;
                    self.remove(id);
                    self.event(CmEvent::TimedOut { conn: ConnId(id) });
                }
                CmState::DreqSent => {
                    // No DREP: released anyway, after TimeWait.
                    self.stats.timeouts += 1;
                    c.state = CmState::TimeWait;
                    c.deadline = Some(now.add_nanos(self.config.time_wait_ns));
                    self.event(CmEvent::Disconnected { conn: ConnId(id) });
                }
                CmState::ReqRcvd => {
                    // The consumer never answered: refuse for it (a Timeout REJ names a
                    // timer of ours the active side cannot match to its REQ; Linux drops it).
                    let (local, peer, tid, remote) = (c.local, c.peer, c.tid, c.remote_id);
                    self.send_rej(
                        local,
                        peer,
                        tid,
                        id,
                        remote,
                        reason::CONSUMER_REJECT,
                        0,
                        &[],
                    );
                    self.stats.timeouts += 1;
                    self.remove(id);
                    self.event(CmEvent::TimedOut { conn: ConnId(id) });
                }
                CmState::Established => c.deadline = None,
            }
        }
    }
}
