"""roce.Device, the sans-IO transport as a golden model, driven from Python.

* RC between two devices over a lossy, reordering channel simulated here (a seeded
  ``random.Random``: about 5% of datagrams dropped, delays jittered so that some overtake
  others, time advanced to the next arrival or deadline, ``handle_timeout`` run when
  ``poll_timeout`` has passed): WRITEs, SENDs, a WRITE with immediate, a READ and the
  atomics complete successfully and the memory holds, byte for byte, what a model of the
  operations says. Every assertion message carries the seed (``ROCE_TEST_SEED=n`` runs one).
* Errors: misuse raises the exception of the Rust error (``PostError``, ``ModifyError``,
  ``CreateError``) or ``DeviceError`` for an unknown handle, with the kind first.
* UD, UC and an SRQ between two devices on a lossless link.
"""

from __future__ import annotations

import heapq
import inspect
import os
import random
import struct

import pytest

import roce


def _export(name):
    """A name from ``roce``, or from the extension while ``roce`` does not re-export it."""
    value = getattr(roce, name, None)
    return value if value is not None else getattr(roce._roce, name)


Device = _export("Device")
Access = _export("Access")
DeviceError = _export("DeviceError")
PostError = _export("PostError")
ModifyError = _export("ModifyError")
CreateError = _export("CreateError")

A_IP, B_IP = "10.0.0.1", "10.0.0.2"
RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC

_env_seed = os.environ.get("ROCE_TEST_SEED")
SEEDS = [int(_env_seed)] if _env_seed else [1, 2, 3, 20240601]


class Link:
    """Devices joined by a channel that drops a fraction ``loss`` of the datagrams and holds
    back a fraction ``reorder`` of them by up to ``jitter_ns`` (the others, sent meanwhile,
    overtake them), with simulated time in nanoseconds. Datagrams go to the device whose
    address they are sent to."""

    def __init__(self, devices, rng, loss=0.05, reorder=0.1, delay_ns=2_000, jitter_ns=6_000):
        self.devices = devices  # address -> Device
        self.rng = rng
        self.loss = loss
        self.reorder = reorder
        self.delay_ns = delay_ns
        self.jitter_ns = jitter_ns
        self.now = 0
        self.queue = []  # (arrival, sequence, transmit)
        self.seq = 0
        self.sent = 0
        self.dropped = 0
        self.dropped_from = {}  # sender address -> datagrams lost
        self.delayed = 0
        self.deliveries = {}

    def pump(self):
        """Takes every datagram the devices have to send now and puts it on the channel."""
        for dev in self.devices.values():
            while True:
                t = dev.poll_transmit(self.now)
                if t is None:
                    break
                self.sent += 1
                if self.rng.random() < self.loss:
                    self.dropped += 1
                    self.dropped_from[t["src"][0]] = self.dropped_from.get(t["src"][0], 0) + 1
                    continue
                at = self.now + self.delay_ns
                if self.rng.random() < self.reorder:  # held back: later datagrams overtake it
                    at += 1 + self.rng.randrange(self.jitter_ns)
                    self.delayed += 1
                heapq.heappush(self.queue, (at, self.seq, t))
                self.seq += 1

    def step(self):
        """Advances to the next arrival or deadline and handles it; False when idle."""
        self.pump()
        times = [self.queue[0][0]] if self.queue else []
        times += [t for t in (d.poll_timeout() for d in self.devices.values()) if t is not None]
        if not times:
            return False
        self.now = max(self.now, min(times))
        while self.queue and self.queue[0][0] <= self.now:
            _, _, t = heapq.heappop(self.queue)
            dst_ip, _ = t["dst"]
            d = self.devices[dst_ip].handle_datagram(self.now, t["payload"], t["src"], dst_ip, t["ecn"])
            self.deliveries[d["delivery"]] = self.deliveries.get(d["delivery"], 0) + 1
        for dev in self.devices.values():
            deadline = dev.poll_timeout()
            if deadline is not None and deadline <= self.now:
                dev.handle_timeout(self.now)
        self.pump()
        return True

    def run_until(self, done, limit_ns=60_000_000_000, max_steps=2_000_000):
        steps = 0
        while not done():
            steps += 1
            if steps > max_steps or self.now > limit_ns or not self.step():
                return False
        return True


class End:
    """One device with a PD, a send and a receive CQ, and a region."""

    def __init__(self, ip, qpn_base, region, key_seed):
        self.ip = ip
        self.dev = Device(qpn_base=qpn_base, key_seed=key_seed)
        self.pd = self.dev.alloc_pd()
        self.scq = self.dev.create_cq()
        self.rcq = self.dev.create_cq()
        self.mr = self.dev.reg_mr(self.pd, region, RW)
        self.done = []

    def poll(self):
        self.done += self.dev.poll_cq(self.scq)
        self.done += self.dev.poll_cq(self.rcq)


def connect_rc(a, b, rng, **kw):
    """Creates an RC (or, with ``uc=True``, UC) QP on each end and connects them with random
    start PSNs."""
    uc = kw.pop("uc", False)
    create = "create_uc_qp" if uc else "create_qp"
    qa = getattr(a.dev, create)(a.pd, a.scq, a.rcq)
    qb = getattr(b.dev, create)(b.pd, b.scq, b.rcq)
    psn_a, psn_b = rng.randrange(1 << 24), rng.randrange(1 << 24)
    sport = Device.udp_sport(qa, qb)
    for (me, q, peer, dest, sq, rq) in ((a, qa, b, qb, psn_a, psn_b), (b, qb, a, qa, psn_b, psn_a)):
        path = {"local": me.ip, "remote": peer.ip, "src_port": sport, "remote_src_port": sport}
        me.dev.connect_qp(q, dest_qpn=dest, rq_psn=rq, sq_psn=sq, path=path, **kw)
        assert me.dev.qp_state(q) == "RTS"
    return qa, qb


@pytest.mark.parametrize("seed", SEEDS)
def test_rc_over_a_lossy_reordering_channel(seed):
    rng = random.Random(seed)
    why = f"seed {seed} (rerun with ROCE_TEST_SEED={seed})"
    region = 1 << 16
    a = End(A_IP, 0x100, bytes(rng.getrandbits(8) for _ in range(region)), key_seed=seed)
    b = End(B_IP, 0x200, region, key_seed=seed + 1)
    qa, qb = connect_rc(a, b, rng, timeout=8)  # 1 ms ACK timeout: less simulated idle time
    link = Link({A_IP: a.dev, B_IP: b.dev}, rng)

    src = a.dev.mr_read(a.mr)
    model_b = bytearray(region)  # what B's region must hold at the end
    va_b, rkey_b = b.dev.mr_remote_addr(b.mr)
    expect_send, expect_recv = [], []  # (wr_id, opcode, byte_len, imm)
    wr = 0

    # Three WRITEs into B's first 32 KiB (possibly overlapping: they execute in order).
    writes = []
    for _ in range(3):
        n = rng.randint(1, 9000)
        src_off, dst_off = rng.randrange(region - n), rng.randrange((1 << 15) - n)
        wr += 1
        a.dev.post_send(qa, wr, "WRITE", [(a.mr, src_off, n)], remote_va=va_b + dst_off, rkey=rkey_b)
        model_b[dst_off : dst_off + n] = src[src_off : src_off + n]
        writes.append((dst_off, n))
        expect_send.append((wr, "RdmaWrite", n, None))

    # Three SENDs (the last with immediate data) into receives at B's 32 KiB..56 KiB.
    recv_at = [(1 << 15) + i * 8192 for i in range(4)]
    for i, at in enumerate(recv_at):
        b.dev.post_recv(qb, 1000 + i, [(b.mr, at, 8192)])
    for i in range(3):
        n = rng.randint(0, 8192)
        src_off = rng.randrange(region - n)
        wr += 1
        imm = 0xC0FFEE00 + i if i == 2 else None
        if imm is None:
            a.dev.post_send(qa, wr, "SEND", [(a.mr, src_off, n)])
        else:
            a.dev.post_send(qa, wr, "SEND_WITH_IMM", [(a.mr, src_off, n)], imm=imm)
        model_b[recv_at[i] : recv_at[i] + n] = src[src_off : src_off + n]
        expect_send.append((wr, "Send", n, None))
        expect_recv.append((1000 + i, "Recv", n, imm))

    # A WRITE with immediate (consumes the fourth receive, places nothing in it).
    n = rng.randint(1, 3000)
    dst_off = (7 << 13) + rng.randrange(4096 - 64)
    wr += 1
    a.dev.post_send(qa, wr, "WRITE_WITH_IMM", [(a.mr, 0, n)], remote_va=va_b + dst_off, rkey=rkey_b, imm=0x1234)
    model_b[dst_off : dst_off + n] = src[:n]
    expect_send.append((wr, "RdmaWrite", n, None))
    expect_recv.append((1003, "RecvRdmaWithImm", n, 0x1234))

    # Atomics on two words of B's last page.
    word_faa, word_cas = region - 64, region - 32
    init_faa, init_cas, add = rng.getrandbits(64), rng.getrandbits(64), rng.getrandbits(64)
    b.dev.mr_write(b.mr, word_faa, struct.pack("<Q", init_faa))
    b.dev.mr_write(b.mr, word_cas, struct.pack("<Q", init_cas))
    model_b[word_faa : word_faa + 8] = struct.pack("<Q", (init_faa + add) % (1 << 64))
    model_b[word_cas : word_cas + 8] = struct.pack("<Q", 0x5A5A5A5A)
    res = a.dev.reg_mr(a.pd, 16, Access.LOCAL_WRITE)
    wr += 1
    a.dev.post_send(qa, wr, "FETCH_ADD", [(res, 0, 8)], remote_va=va_b + word_faa, rkey=rkey_b, add=add)
    expect_send.append((wr, "FetchAdd", 8, None))
    wr += 1
    a.dev.post_send(
        qa, wr, "COMPARE_SWAP", [(res, 8, 8)], remote_va=va_b + word_cas, rkey=rkey_b, compare=init_cas, swap=0x5A5A5A5A
    )
    expect_send.append((wr, "CompSwap", 8, None))

    # A READ of what the first WRITE placed (after it and the later WRITEs, in order).
    read_off, read_len = writes[0]
    dst = a.dev.reg_mr(a.pd, read_len, Access.LOCAL_WRITE)
    wr += 1
    a.dev.post_send(qa, wr, "READ", [(dst, 0, read_len)], remote_va=va_b + read_off, rkey=rkey_b)
    expect_send.append((wr, "RdmaRead", read_len, None))

    def done():
        a.poll()
        b.poll()
        return len(a.done) >= len(expect_send) and len(b.done) >= len(expect_recv)

    ok = link.run_until(done)
    stats = (link.sent, link.dropped, link.delayed, link.now, link.deliveries)
    assert ok, f"{why}: not all completed: a {a.done}, b {b.done}; sent/dropped/delayed/now {stats}"

    got_send = [(c["wr_id"], c["opcode"], c["byte_len"], c["imm"]) for c in a.done]
    got_recv = [(c["wr_id"], c["opcode"], c["byte_len"], c["imm"]) for c in b.done]
    for c in a.done + b.done:
        assert c["status"] == "Success", f"{why}: {c}"
    assert got_send == expect_send, f"{why}: send completions"
    assert got_recv == expect_recv, f"{why}: receive completions"
    for c in b.done:
        assert c["qp"] == qb, why

    # B's memory, byte for byte.
    mem_b = b.dev.mr_read(b.mr, 0, region)
    for i, (x, y) in enumerate(zip(mem_b, model_b)):
        assert x == y, f"{why}: B's byte {i:#x} is {x:#04x}, expected {y:#04x}"
    # What came back: the READ (B's bytes after every earlier WRITE) and the atomics' originals.
    read = a.dev.mr_read(dst, 0, read_len)
    for i in range(read_len):
        assert read[i] == model_b[read_off + i], f"{why}: READ byte {i}"
    orig = struct.unpack("<QQ", a.dev.mr_read(res))
    assert orig == (init_faa, init_cas), f"{why}: atomic originals {orig}"
    # A's source region is untouched.
    assert a.dev.mr_read(a.mr) == src, why
    # A lost request is sent again (the requester's counters say so).
    sa = a.dev.qp_stats(qa)
    if link.dropped_from.get(A_IP):
        assert sa["retransmitted_packets"] > 0, f"{why}: {sa}"
    assert a.dev.qp_state(qa) == "RTS" and b.dev.qp_state(qb) == "RTS", why


def test_errors_raise_with_the_rust_kind():
    dev = Device()
    pd = dev.alloc_pd()
    cq = dev.create_cq()
    mr = dev.reg_mr(pd, 4096, Access.LOCAL_WRITE)
    qpn = dev.create_qp(pd, cq, cq)
    assert dev.qp_state(qpn) == "RESET"

    # A post on a QP in RESET: PostError::WrongState.
    with pytest.raises(PostError) as e:
        dev.post_send(qpn, 1, "SEND", [(mr, 0, 16)])
    assert e.value.kind == "WrongState"
    assert str(e.value).startswith("WrongState: ")
    assert "Reset" in str(e.value)
    assert isinstance(e.value, DeviceError)
    with pytest.raises(PostError, match="^WrongState"):
        dev.post_recv(qpn, 1, [(mr, 0, 16)])
    # An unknown QPN: PostError::NoSuchQp.
    with pytest.raises(PostError) as e:
        dev.post_send(0x777, 1, "SEND")
    assert e.value.kind == "NoSuchQp"

    # An illegal transition and a missing attribute: ModifyError.
    with pytest.raises(ModifyError) as e:
        dev.modify_qp(qpn, "RTS")
    assert e.value.kind == "IllegalTransition"
    with pytest.raises(ModifyError) as e:
        dev.modify_qp(qpn, "INIT")
    assert e.value.kind == "MissingAttribute" and "access_flags" in str(e.value)
    dev.modify_qp(qpn, "INIT", access_flags=Access.REMOTE_WRITE)
    assert dev.qp_state(qpn) == "INIT"
    with pytest.raises(ModifyError, match="^InvalidValue"):
        dev.modify_qp(qpn, "RTR", path_mtu=1000, dest_qpn=5, rq_psn=0, max_dest_rd_atomic=1, min_rnr_timer=1, path={})
    assert dev.qp_state(qpn) == "INIT", "a refused modify changes nothing"

    # Unknown handles of this wrapper: DeviceError of kind UnknownHandle.
    with pytest.raises(DeviceError) as e:
        dev.mr_read(99, 0, 1)
    assert e.value.kind == "UnknownHandle"
    with pytest.raises(DeviceError, match="^UnknownHandle"):
        dev.create_qp(pd, cq, 5)
    with pytest.raises(DeviceError, match="^UnknownHandle"):
        dev.post_recv(qpn, 1, [(42, 0, 8)])
    # Bounds and arguments are Python errors.
    with pytest.raises(ValueError):
        dev.mr_write(mr, 4090, b"0123456789")
    with pytest.raises(ValueError):
        dev.post_send(qpn, 1, "NOT_AN_OPCODE")
    with pytest.raises(ValueError):
        dev.post_send(qpn, 1, "WRITE", [(mr, 0, 8)])  # no remote_va / rkey
    # UD QP with a path MTU that does not exist: CreateError.
    with pytest.raises(CreateError) as e:
        dev.create_ud_qp(pd, cq, cq, 0x11111111, 1000, 16)
    assert e.value.kind == "TooManyQps"
    # UC refuses READ.
    uc = dev.create_uc_qp(pd, cq, cq)
    dev.connect_qp(uc, dest_qpn=0x22, rq_psn=0, sq_psn=0)
    with pytest.raises(PostError, match="^Unsupported"):
        dev.post_send(uc, 1, "READ", [(mr, 0, 8)], remote_va=0, rkey=0)


def test_connect_defaults_are_the_rust_ones():
    dev = Device()
    pd, cq = dev.alloc_pd(), dev.create_cq()
    q = dev.create_qp(pd, cq, cq)
    dev.connect_qp(q, dest_qpn=0x99, rq_psn=5, sq_psn=7)
    info = dev.qp_info(q)
    params = inspect.signature(Device.connect_qp).parameters
    assert info["mtu"] == params["mtu"].default == 1024
    assert (info["state"], info["dest_qpn"], info["next_send_psn"], info["expected_psn"]) == ("RTS", 0x99, 7, 5)
    assert info["path"]["local"] == "127.0.0.1" and info["path"]["remote_port"] == 4791
    assert dev.service(q) == "RC"


def lossless(devices, now=0, max_rounds=1000):
    """Carries datagrams between devices (by destination address) until none is left."""
    delivered = []
    for _ in range(max_rounds):
        moved = False
        for dev in devices.values():
            while True:
                t = dev.poll_transmit(now)
                if t is None:
                    break
                moved = True
                d = devices[t["dst"][0]].handle_datagram(now, t["payload"], t["src"], t["dst"][0], t["ecn"])
                delivered.append(d)
        if not moved:
            return delivered
    raise AssertionError("the devices never went quiet")


def test_ud_send_and_receive():
    rng = random.Random(7)
    qkey = 0x12345678
    a, b = Device(qpn_base=0x100), Device(qpn_base=0x200)
    ends = []
    for dev in (a, b):
        pd, cq = dev.alloc_pd(), dev.create_cq()
        q = dev.create_ud_qp(pd, cq, cq, qkey, 1024, 64)
        mr = dev.reg_mr(pd, 1 << 16, Access.LOCAL_WRITE)
        ends.append((q, cq, mr))
    (qa, cqa, mra), (qb, cqb, mrb) = ends
    assert a.service(qa) == "UD" and a.qp_state(qa) is None
    msgs = [rng.randbytes(n) if hasattr(rng, "randbytes") else bytes(rng.getrandbits(8) for _ in range(n)) for n in (1, 200, 1024)]
    for i in range(len(msgs)):
        b.post_recv(qb, 10 + i, [(mrb, i * 4096, 2048)])
    for i, m in enumerate(msgs):
        a.mr_write(mra, i * 2048, m)
        a.post_ud_send(
            qa, i, [(mra, i * 2048, len(m))], local=A_IP, remote=B_IP, dest_qpn=qb, qkey=qkey, imm=(77 if i == 1 else None)
        )
    delivered = lossless({A_IP: a, B_IP: b})
    assert [d["delivery"] for d in delivered] == ["Datagram"] * 3
    sends = a.poll_cq(cqa)
    assert [(c["wr_id"], c["status"], c["opcode"], c["byte_len"]) for c in sends] == [
        (i, "Success", "Send", len(m)) for i, m in enumerate(msgs)
    ]
    recvs = b.poll_cq(cqb)
    grh = Device.UD_GRH_LEN
    assert len(recvs) == 3
    for i, (c, m) in enumerate(zip(recvs, msgs)):
        assert (c["wr_id"], c["status"], c["opcode"], c["byte_len"]) == (10 + i, "Success", "Recv", grh + len(m))
        assert c["imm"] == (77 if i == 1 else None)
        assert c["src_qp"] == qa and c["src"][0] == A_IP and c["qp"] == qb
        assert b.mr_read(mrb, i * 4096 + grh, len(m)) == m
    assert b.ud_stats(qb)["received"] == 3
    # Too long for the MTU: refused.
    with pytest.raises(PostError, match="^TooLong"):
        a.post_ud_send(qa, 9, [(mra, 0, 2048)], local=A_IP, remote=B_IP, dest_qpn=qb, qkey=qkey)
    # A foreign Q_Key is dropped, with the reason.
    b.post_recv(qb, 99, [(mrb, 0, 2048)])
    a.post_ud_send(qa, 9, [(mra, 0, 8)], local=A_IP, remote=B_IP, dest_qpn=qb, qkey=0x1)
    (d,) = lossless({A_IP: a, B_IP: b})
    assert (d["delivery"], d["refusal"], d["reason"], d["qpn"]) == ("Dropped", "Ud", "BadQkey", qb)


def test_uc_write_and_srq_send():
    rng = random.Random(11)
    a = End(A_IP, 0x100, bytes(range(256)) * 16, key_seed=1)
    b = End(B_IP, 0x200, 4096, key_seed=2)
    qa, qb = connect_rc(a, b, rng, uc=True)
    assert a.dev.service(qa) == "UC"
    va, rkey = b.dev.mr_remote_addr(b.mr, 100)
    a.dev.post_send(qa, 1, "WRITE", [(a.mr, 0, 1500)], remote_va=va, rkey=rkey)
    lossless({A_IP: a.dev, B_IP: b.dev})
    a.poll()
    assert [(c["wr_id"], c["status"], c["opcode"]) for c in a.done] == [(1, "Success", "RdmaWrite")]
    assert b.dev.mr_read(b.mr, 100, 1500) == (bytes(range(256)) * 16)[:1500]
    assert b.dev.mr_dirty_ranges(b.mr) == [(0, 4096)]

    # An RC QP on a shared receive queue takes its receives from there.
    srq = b.dev.create_srq(b.pd, 8)
    qa2 = a.dev.create_qp(a.pd, a.scq, a.rcq)
    qb2 = b.dev.create_qp(b.pd, b.scq, b.rcq, srq=srq)
    sport = Device.udp_sport(qa2, qb2)
    a.dev.connect_qp(qa2, dest_qpn=qb2, rq_psn=3, sq_psn=9, path={"local": A_IP, "remote": B_IP, "src_port": sport, "remote_src_port": sport})
    b.dev.connect_qp(qb2, dest_qpn=qa2, rq_psn=9, sq_psn=3, path={"local": B_IP, "remote": A_IP, "src_port": sport, "remote_src_port": sport})
    with pytest.raises(PostError, match="^HasSrq"):
        b.dev.post_recv(qb2, 1, [(b.mr, 0, 64)])
    b.dev.post_srq_recv(srq, 50, [(b.mr, 2048, 512)])
    b.dev.post_srq_recv(srq, 51, [(b.mr, 2560, 512)])
    assert b.dev.arm_srq_limit(srq, 2)
    a.dev.post_send(qa2, 7, "SEND", [(a.mr, 256, 300)])
    lossless({A_IP: a.dev, B_IP: b.dev})
    b.poll()
    assert [(c["wr_id"], c["status"], c["opcode"], c["byte_len"], c["qp"]) for c in b.done] == [
        (50, "Success", "Recv", 300, qb2)
    ]
    assert b.dev.mr_read(b.mr, 2048, 300) == (bytes(range(256)) * 16)[256:556]
    assert b.dev.srq_len(srq) == 1
    assert b.dev.poll_async_event() == {"event": "SrqLimitReached", "srq": srq}
    assert b.dev.poll_async_event() is None


def pcap_frames(path):
    """The frames of a little-endian microsecond pcap (enough for the shared captures)."""
    data = path.read_bytes()
    assert data[:4] == b"\xd4\xc3\xb2\xa1", "a little-endian microsecond pcap"
    frames, at = [], 24
    while at + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from("<IIII", data, at)
        frames.append(data[at + 16 : at + 16 + caplen])
        at += 16 + caplen
    return frames


def test_gsi_carries_a_real_cm_req_between_devices(captures):
    # The first frame of an rdma_cm capture is a CM REQ (rxe's): its MAD, the UD payload.
    frame = pcap_frames(captures / "linlinw5-rdma_ib_tutorial/rdma_cm.pcap")[0]
    parsed = roce.parse(frame)
    assert parsed["cm"]["message"] == "REQ", parsed
    mad = frame[-4 - 256 : -4]
    a, b = Device(qpn_base=0x100), Device(qpn_base=0x200)
    assert a.gsi_send(A_IP, B_IP, mad)
    (d,) = lossless({A_IP: a, B_IP: b})
    assert d["delivery"] == "Management"
    got = b.gsi_take()
    assert got["mad"] == mad and got["src_qp"] == 1 and got["from"][0] == A_IP and got["to"] == B_IP
    assert b.gsi_take() is None
    assert a.gsi_stats()["sent"] == 1 and b.gsi_stats()["received"] == 1
    with pytest.raises(ValueError, match="256 bytes"):
        a.gsi_send(A_IP, B_IP, mad[:100])
    # A datagram to QP1 that is not a MAD (a UD SEND with another Q_Key) is counted malformed.
    bad = roce.build("UD_SEND_ONLY", dest_qp=1, deth={"qkey": 0x1234, "src_qp": 1}, payload=mad, src=A_IP, dst=B_IP)
    transport = bad[14 + 20 + 8 :]
    d = b.handle_datagram(0, transport, (A_IP, 4791), B_IP, 0)
    assert d["delivery"] == "Dropped" and b.gsi_stats()["malformed"] == 1
