"""roce.analyze's capture quality and findings, as Python dicts: a capture of roce's own
loopback run with requests taken out (as a busy tcpdump drops them) accounts for every one
and violates no rule; a finding names what it saw and what to do."""

from __future__ import annotations

import hashlib
import struct
import subprocess

import roce


def records(data: bytes):
    """The pcap records of `data` (little-endian, nanosecond or microsecond): header, bytes."""
    off = 24
    while off < len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        yield data[off : off + 16], data[off + 16 : off + 16 + incl]
        off += 16 + incl


def drop_requests(data: bytes, per_mille: int, seed: int) -> tuple[bytes, int]:
    """`data` without about `per_mille` of its RoCE request packets (chosen by their
    opcode, QPN and PSN, so the same ones on every run; never a QP's first request, which a
    capture that began after it could not tell from one that missed it)."""
    out, dropped, started = [data[:24]], 0, set()
    for head, pkt in records(data):
        roce_v2 = len(pkt) > 42 and pkt[12:14] == b"\x08\x00" and pkt[23] == 17 and pkt[36:38] == b"\x12\xb7"
        if roce_v2 and pkt[42] != 0x81 and not 0x0D <= pkt[42] & 0x1F <= 0x12:
            first = pkt[47:50] not in started
            started.add(pkt[47:50])
            h = hashlib.blake2b(bytes([seed]) + pkt[42:54], digest_size=4).digest()
            if not first and int.from_bytes(h, "big") % 1000 < per_mille:
                dropped += 1
                continue
        out.append(head + pkt)
    return b"".join(out), dropped


def test_a_capture_that_dropped_requests_accounts_for_each(roce_cli, tmp_path):
    pcap = tmp_path / "loopback.pcap"
    subprocess.run(
        [roce_cli, "loopback", "--seed", "5", "--size", "0-64K", "--count", "80", "--pcap", str(pcap)],
        check=True,
        capture_output=True,
    )
    healthy = roce.analyze(str(pcap))
    assert not [d for d in healthy if d["type"] == "capture_quality"]
    for seed in (1, 2):
        data, dropped = drop_requests(pcap.read_bytes(), 30, seed)
        assert dropped > 10, dropped
        lines = roce.analyze(data)
        quality = [d for d in lines if d["type"] == "capture_quality"]
        assert len(quality) == 1, lines[-3:]
        assert quality[0]["missed_by_capture"] == dropped, (seed, quality)
        assert quality[0]["file_dropped"] is None
        conns = [d for d in lines if d["type"] == "connection"]
        assert sum(c["missed_by_capture"] for c in conns) == dropped
        for c in conns:
            for v in c["verdicts"]:
                assert v["result"] != "violated", (seed, v)


def test_findings_are_dicts_with_their_evidence_and_advice(captures):
    # The hex vectors hold one CNP and no CE mark: a CNP the capture cannot explain.
    lines = roce.analyze(str(captures / "hexvectors/hexvectors-derived.pcap"))
    findings = [d for d in lines if d["type"] == "finding"]
    assert [f["name"] for f in findings] == ["cnp_without_ce"], findings
    f = findings[0]
    assert f["connection"] == 1 and f["side"] in ("a", "b") and f["frames"], f
    assert f["detail"].startswith("1 CNPs sent") and f["advice"], f
