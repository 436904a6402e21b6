"""roce.build, roce.parse and the ICRC: frames crafted field by field come back with those
fields, every opcode with the extended headers it needs, and scapy (an implementation we did
not write) agrees on the bytes."""

from __future__ import annotations

import random

import pytest

import roce

# (opcode, the extended headers it needs, with values)
CASES = [
    ("RC_SEND_ONLY", {}),
    ("RC_SEND_ONLY_WITH_IMMEDIATE", {"immdt": 0xCAFE0001}),
    ("RC_SEND_ONLY_WITH_INVALIDATE", {"ieth": 0x4242}),
    ("RC_RDMA_WRITE_ONLY", {"reth": {"va": 0x7F0000001000, "rkey": 0x2B8, "dma_len": 40}}),
    ("RC_RDMA_READ_REQUEST", {"reth": {"va": 0x1000, "rkey": 7, "dma_len": 4096}}),
    ("RC_ACKNOWLEDGE", {"aeth": {"syndrome": 0x1F, "msn": 12}}),
    (
        "RC_COMPARE_SWAP",
        {"atomic_eth": {"va": 0x2000, "rkey": 9, "swap_add": 5, "compare": 4}},
    ),
    ("RC_ATOMIC_ACKNOWLEDGE", {"aeth": {"syndrome": 0, "msn": 3}, "atomic_ack_eth": {"orig_data": 77}}),
    ("UD_SEND_ONLY", {"deth": {"qkey": 0x11111111, "src_qp": 0x42}}),
]


@pytest.mark.parametrize("opcode,headers", CASES)
@pytest.mark.parametrize("ipv6", [False, True])
def test_built_frames_parse_back_to_their_fields(opcode, headers, ipv6):
    addrs = {"src": "fd00::1", "dst": "fd00::2"} if ipv6 else {"src": "10.0.0.1", "dst": "10.0.0.2"}
    no_payload = ("ACKNOWLEDGE", "READ_REQUEST", "COMPARE_SWAP")
    payload = b"" if any(k in opcode for k in no_payload) else bytes(range(40))
    frame = roce.build(opcode, dest_qp=0x123456, psn=0xABCDE, ack_req=True, payload=payload, **addrs, **headers)
    assert roce.icrc_ok(frame)
    d = roce.parse(frame)
    assert d["bth"]["opcode_name"] == opcode, d
    assert d["bth"]["dest_qp"] == 0x123456
    assert d["bth"]["psn"] == 0xABCDE
    assert d["bth"]["ack_req"] is True
    assert d["icrc_ok"] is True
    assert d["payload_len"] == len(payload)
    assert d["src"].startswith(("[fd00::1]" if ipv6 else "10.0.0.1"))
    for name, value in headers.items():
        got = d[name]
        if isinstance(value, dict):
            for k, v in value.items():
                assert got[k] == v, (name, k, got)
        else:
            assert got, (name, d)


def test_icrc_detects_every_flipped_transport_bit():
    rng = random.Random(7)
    frame = bytearray(roce.build("RC_SEND_ONLY", payload=bytes(64)))
    # BTH starts after Ethernet (14), IPv4 (20) and UDP (8); the ICRC is the last 4 bytes.
    # BTH byte 4 (FECN, BECN, reserved) is masked out of the ICRC (IBTA Vol 1 A17.3.3).
    for _ in range(200):
        at = rng.choice([i for i in range(42, len(frame) - 4) if i != 46])
        bit = 1 << rng.randrange(8)
        frame[at] ^= bit
        assert not roce.icrc_ok(bytes(frame)), f"byte {at} bit {bit}"
        fixed = roce.with_icrc(bytes(frame))
        assert roce.icrc_ok(fixed)
        frame[at] ^= bit
    assert roce.icrc_ok(bytes(frame))
    # ... and flipping it leaves the ICRC good.
    frame[46] ^= 0x80
    assert roce.icrc_ok(bytes(frame))


def test_bad_input_raises_with_the_reason():
    with pytest.raises(ValueError, match="unknown opcode"):
        roce.build("RC_NOT_AN_OPCODE")
    with pytest.raises(ValueError):
        roce.build("RC_RDMA_WRITE_ONLY", payload=b"x")  # needs a RETH
    with pytest.raises(ValueError, match="24-bit"):
        roce.build("RC_SEND_ONLY", psn=1 << 24)
    with pytest.raises(ValueError, match="both"):
        roce.build("RC_SEND_ONLY", src="10.0.0.1", dst="fd00::2")
    with pytest.raises(ValueError):
        roce.icrc(b"\x00" * 10)
    d = roce.parse(b"\x00" * 10)
    assert "bth" not in d


def test_scapy_agrees_on_the_bytes_and_the_icrc():
    # scapy is the oracle here (CI installs it): a missing scapy fails the test.
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    frame = roce.build("RC_SEND_ONLY", dest_qp=0x11, psn=99, payload=b"abcdefgh", src="10.0.0.1", dst="10.0.0.2")
    p = roce.to_scapy(frame)
    assert p[BTH].psn == 99 and p[BTH].dqpn == 0x11 and p[BTH].opcode == 4
    # scapy builds a frame and computes the ICRC itself: roce checks it and finds it good.
    built = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2", flags="DF")
        / UDP(sport=0xC000, dport=4791, chksum=0)
        / BTH(opcode=4, dqpn=0x11, psn=99, padcount=0, pkey=0xFFFF)
        / b"abcdefgh"
    )
    raw = bytes(built)
    assert roce.icrc_ok(raw)
    assert roce.parse(raw)["bth"]["psn"] == 99
    # An edited scapy packet: from_scapy recomputes the ICRC roce would compute.
    p[BTH].psn = 100
    fixed = roce.from_scapy(p)
    assert roce.icrc_ok(fixed) and roce.parse(fixed)["bth"]["psn"] == 100
    assert not roce.icrc_ok(roce.from_scapy(p, fix_icrc=False))
