"""roce.decode and roce.analyze on real captures: each dict equals the line the `roce` command
prints for it (`roce decode --json`, `roce analyze --json`), whatever the source (a path,
bytes, a file object)."""

from __future__ import annotations

import gc
import io
import json
import os
import subprocess
import time

import pytest

import roce
from roce import _roce

CAPTURES = [
    "linlinw5-rdma_ib_tutorial/rdma_write_bw.pcap",
    "linlinw5-rdma_ib_tutorial/rdma_cm.pcap",
    "linlinw5-rdma_ib_tutorial/pingpong_ud.pcap",
    "linlinw5-rdma_ib_tutorial/rdma_atomic_bw.pcap",
]


def cli_lines(roce_cli, *args):
    out = subprocess.run([roce_cli, *args], capture_output=True, check=False).stdout
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("name", CAPTURES)
def test_decode_equals_the_cli_json(roce_cli, captures, name):
    path = captures / name
    want = cli_lines(roce_cli, "decode", "--json", str(path))
    assert want, f"the CLI printed nothing for {path}"
    got = list(roce.decode(str(path)))
    assert got == want
    # The same from bytes and from a file object.
    data = path.read_bytes()
    assert list(roce.decode(data)) == want
    with open(path, "rb") as f:
        assert list(roce.decode(f)) == want
    assert list(roce.decode(io.BytesIO(data))) == want


def test_decode_with_a_snap_length_reads_headers_only(captures):
    path = captures / CAPTURES[0]
    full = list(roce.decode(path))
    cut = list(roce.decode(path, snaplen=64))
    assert len(cut) == len(full)
    roce_full = [d for d in full if "bth" in d]
    roce_cut = [d for d in cut if "bth" in d]
    assert len(roce_cut) == len(roce_full)
    # The BTH survives the cut; the ICRC of a cut packet was never captured.
    assert [d["bth"]["psn"] for d in roce_cut] == [d["bth"]["psn"] for d in roce_full]
    assert any(d.get("icrc_ok") is True for d in roce_full)
    assert not any(d.get("icrc_ok") is True for d in roce_cut if d["payload_len"] > 10)


def test_decode_of_a_damaged_capture_raises_after_the_good_records(captures):
    data = (captures / CAPTURES[0]).read_bytes()
    full = list(roce.decode(data))
    # Cut inside the last record: every record before it comes out, then the error.
    got = []
    with pytest.raises(ValueError):
        for d in roce.decode(data[:-7]):
            got.append(d)
    assert got == full[: len(got)] and len(got) >= len(full) - 1
    with pytest.raises(ValueError):
        list(roce.decode(b"not a capture at all"))
    with pytest.raises(OSError):
        list(roce.decode("/nonexistent/capture.pcap"))
    with pytest.raises(TypeError):
        list(roce.decode(12345))


@pytest.mark.parametrize("name", CAPTURES[:2])
def test_analyze_equals_the_cli_json(roce_cli, captures, name):
    path = str(captures / name)
    want = cli_lines(roce_cli, "analyze", "--json", path)
    assert want and want[0]["type"] == "connection", want[:1]
    assert roce.analyze(path) == want
    want_events = cli_lines(roce_cli, "analyze", "--json", "--events", path)
    assert roce.analyze(path, events=True) == want_events


def test_analyze_of_several_captures_localises_like_the_cli(roce_cli, captures):
    a = captures / "linlinw5-rdma_ib_tutorial/nccl/ring2_node0.pcap"
    b = captures / "linlinw5-rdma_ib_tutorial/nccl/ring2_node1.pcap"
    want = cli_lines(roce_cli, "analyze", "--json", str(a), str(b))
    assert roce.analyze(str(a), str(b)) == want
    with pytest.raises(TypeError):
        roce.analyze(a.read_bytes(), str(b))


def test_analyze_options_are_checked():
    with pytest.raises(ValueError):
        roce.analyze(b"", stall=-1)
    with pytest.raises(TypeError):
        roce.analyze()


def every_capture(captures):
    return sorted(p for p in captures.rglob("*") if p.suffix in (".pcap", ".pcapng"))


def test_decode_equals_the_cli_json_on_every_shared_capture(roce_cli, captures):
    """The dicts are made from the decoder's typed columns, not from the JSON text: on every
    capture beside the repository (soft-RoCE, hardware, NCCL, pcapng) each must still be
    the CLI's line, key for key and value for value."""
    paths = every_capture(captures)
    assert len(paths) >= 10, paths
    for path in paths:
        want = cli_lines(roce_cli, "decode", "--json", str(path))
        got = list(roce.decode(str(path)))
        # Rows made key by key, not copied from a kept empty row of their shape (what a
        # capture of more shapes than are kept gets).
        one_by_one = [d for batch in _roce.DecodeBatches(str(path), None, 0) for d in batch]
        assert len(got) == len(want) == len(one_by_one), path
        for i, (g, w, o) in enumerate(zip(got, want, one_by_one)):
            assert g == w, f"{path} record {i + 1}"
            assert o == w, f"{path} record {i + 1}, made key by key"
            # The keys in the line's order too, nested objects included.
            assert key_order(g) == key_order(w) == key_order(o), f"{path} record {i + 1}"


def key_order(d):
    """The keys of `d` in order, with those of its nested objects."""
    return [(k, key_order(v) if isinstance(v, dict) else None) for k, v in d.items()]


def test_decode_equals_the_cli_json_on_the_benchmark_mix(roce_cli, tmp_path):
    """Every opcode family the generator writes (RC, UD, atomics, CNPs, READs, immediates)."""
    path = tmp_path / "mix.pcap"
    subprocess.run([roce_cli, "gen-capture", "--packets", "20000", str(path)], check=True, capture_output=True)
    want = cli_lines(roce_cli, "decode", "--json", str(path))
    assert len(want) == 20000
    assert list(roce.decode(str(path))) == want


def cut_records(data: bytes, n: int) -> bytes:
    """A classic pcap with every record cut to `n` bytes, its original length kept (what a
    headers-only capture holds)."""
    import struct

    magic = data[:4]
    end = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out = bytearray(data[:24])
    at = 24
    while at + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack(end + "IIII", data[at : at + 16])
        body = data[at + 16 : at + 16 + incl]
        keep = body[:n]
        out += struct.pack(end + "IIII", sec, frac, len(keep), orig) + keep
        at += 16 + incl
    return bytes(out)


@pytest.mark.parametrize("snaplen", [50, 64, 100])
def test_a_snap_length_gives_the_lines_of_a_headers_only_capture(roce_cli, captures, tmp_path, snaplen):
    """`decode(..., snaplen=n)` is the CLI's reading of the same capture written with every
    record cut to n bytes."""
    for name in CAPTURES:
        data = (captures / name).read_bytes()
        cut = tmp_path / "cut.pcap"
        cut.write_bytes(cut_records(data, snaplen))
        want = cli_lines(roce_cli, "decode", "--json", str(cut))
        assert want, name
        assert list(roce.decode(data, snaplen=snaplen)) == want, name


def test_decode_leaves_the_garbage_collector_as_it_found_it(captures):
    """The dicts are made with the cyclic collector paused (they hold no cycles); whether it
    runs after is the caller's choice, as before."""
    import gc

    path = captures / CAPTURES[0]
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            assert sum(1 for _ in roce.decode(path)) > 0
            assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_an_abandoned_decode_ends_its_decoding_thread(roce_cli, tmp_path):
    """A path is decoded ahead on a thread of its own: an iterator dropped half way must not
    leave it reading the rest of the capture."""
    path = tmp_path / "mix.pcap"
    subprocess.run([roce_cli, "gen-capture", "--packets", "300000", str(path)], check=True, capture_output=True)

    def threads():
        return len(os.listdir("/proc/self/task"))

    before = threads()
    it = roce.decode(str(path))
    next(it)
    assert threads() == before + 1, "a path is decoded on a thread of its own"
    del it
    gc.collect()
    deadline = time.monotonic() + 10
    while threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads() == before
