//! Service ID resolution (IBTA Vol 1 §12.11): SIDR_REQ out with its retries, SIDR_REP back,
//! and the passive side's answers; for UD QPs found through the CM (RDMA-CM's UDP port space).
use super::*;

impl Cm {
    /// Active side: asks `peer` which UD QP serves `service_id` (SIDR_REQ, §12.11.1),
    /// resending it on response timeouts up to Max CM Retries; [`CmEvent::SidrReply`] or
    /// [`CmEvent::TimedOut`] follows. `private` is at most 216 bytes
    /// ([`rdma_cm_req_private`] for RDMA-CM's, with the UDP port space's service ID).
    pub fn sidr_request(
        &mut self,
        now: Instant,
        local: IpAddr,
        peer: IpAddr,
        service_id: u64,
        private: &[u8],
    ) -> Result<ConnId, u16> {
        if self.sidrs.len() >= MAX_CONNECTIONS {
            return Err(reason::NO_RESOURCES);
        }
        let id = loop {
            let id = self.new_id();
            if !self.sidrs.contains_key(&id) {
                break id;
            }
        };
        let tid = self.rng.next_u64();
        let msg = Message::SidrReq(SidrReq {
            request_id: id,
            partition_key: 0xffff,
            service_id,
            private_data: copy_into(private),
        });
        self.send(local, peer, tid, &msg);
        self.stats.sent += 1;
        let wait_ns = timeout_ns(self.config.response_timeout.min(31));
        self.sidrs.insert(
            id,
            Sidr {
                local,
                peer,
                tid,
                msg,
                deadline: now.add_nanos(wait_ns),
                wait_ns,
                retries_left: self.config.max_retries & 15,
            },
        );
        Ok(ConnId(id))
    }

    /// Passive side: answers a [`CmEvent::SidrRequest`] (SIDR_REP, §12.11.2) with `status`
    /// (0: our UD QP `qpn` with Q_Key `qkey` serves it).
    pub fn sidr_reply(
        &mut self,
        req: &SidrRequest,
        status: u8,
        qpn: Qpn,
        qkey: u32,
        private: &[u8],
    ) {
        let msg = Message::SidrRep(SidrRep {
            request_id: req.request_id,
            status,
            qpn: qpn.0 & 0x00ff_ffff,
            service_id: req.service_id,
            q_key: qkey,
            private_data: copy_into(private),
            ..SidrRep::default()
        });
        self.send(req.local, req.peer, req.tid, &msg);
        self.stats.sent += 1;
    }

    /// A SIDR_REQ makes no state to be answered: every one is an answer a spoofed source can
    /// aim at someone else (a listened service's answer names its QPN and Q_Key). So they
    /// share the rate limit of the answers to messages that name no connection (REJs to REQs,
    /// DREPs to DREQs): at most [`super::MAX_UNSOLICITED_PER_S`] a second reach the consumer or
    /// are answered here; the rest are counted in `rate_limited` and dropped, and a real
    /// requester's retry gets through once the flood ebbs.
    pub(super) fn on_sidr_req(
        &mut self,
        now: Instant,
        peer: IpAddr,
        local: IpAddr,
        tid: u64,
        r: &SidrReq,
    ) {
        if !self.unsolicited_allowed(now) {
            return;
        }
        let req = SidrRequest {
            peer,
            local,
            tid,
            request_id: r.request_id,
            service_id: r.service_id,
            private_data: r.private_data.to_vec(),
        };
        if self.listeners.contains(&r.service_id) {
            self.event(CmEvent::SidrRequest { req });
        } else {
            // Nobody serves it (§12.11.2: status 1, service ID not supported).
            self.sidr_reply(&req, 1, Qpn(0), 0, &[]);
        }
    }

    pub(super) fn on_sidr_rep(&mut self, peer: IpAddr, r: &SidrRep) {
        // Only the first answer counts; a late copy finds nothing (Linux may answer a
        // resent SIDR_REQ as a new request, with another status).
        let Some(s) = self.sidrs.get(&r.request_id) else {
            self.stats.duplicates += 1;
            return;
        };
        if s.peer != peer {
            self.stats.ignored += 1;
            return;
        }
        self.sidrs.remove(&r.request_id);
        self.event(CmEvent::SidrReply {
            conn: ConnId(r.request_id),
            status: r.status,
            qpn: Qpn(r.qpn),
            qkey: r.q_key,
            private_data: r.private_data.to_vec(),
        });
    }
}
