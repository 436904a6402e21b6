"""MRC and UET through roce.parse: the packets XDP2's generators serialised (read here with
scapy, an implementation we did not write) and the MRC conversation `roce gen-capture --mrc`
writes come back as the CLI's JSON objects, with Wireshark 5.0's `uet.*` names."""

from __future__ import annotations

import json
import pathlib
import subprocess

from scapy.all import rdpcap

import roce

UET = pathlib.Path(__file__).resolve().parents[2] / "proto" / "tests" / "data" / "uet"


def frames(path: pathlib.Path) -> list[bytes]:
    return [bytes(p) for p in rdpcap(str(path))]


def cli_json(roce_cli: str, path: pathlib.Path) -> list[dict]:
    out = subprocess.run(
        [roce_cli, "decode", "--json", str(path)], capture_output=True, check=True, text=True
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


def without_frame_and_time(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("frame", "ts")}


def test_xdp2_uet_packets_parse_to_the_cli_objects(roce_cli):
    for name in ("uet_pds.pcap", "uet_ses.pcap"):
        path = UET / name
        cli = cli_json(roce_cli, path)
        fs = frames(path)
        assert len(fs) == len(cli) > 0
        for f, c in zip(fs, cli):
            d = roce.parse(f)
            assert d["transport"] == "uet"
            assert without_frame_and_time(d) == without_frame_and_time(c)
    pds = [roce.parse(f) for f in frames(UET / "uet_pds.pcap")]
    # Field values make_uet_pds.py sets.
    assert pds[12]["uet.pds.nack.code_name"] == "PDC_MODE_MISMATCH"
    assert pds[12]["uet.pds.nack.psn"] == 0x99887766
    assert pds[9]["uet.pds.ack.cc_state.rcv_cwnd_pend"] == 0x7F
    assert pds[0]["uet.ses.std.opcode_name"] == "READ"


def test_an_mrc_conversation_parses_with_its_icrc(roce_cli, tmp_path):
    path = tmp_path / "mrc.pcap"
    subprocess.run(
        [roce_cli, "gen-capture", "--mrc", "--packets", "13", str(path)], check=True
    )
    ds = [roce.parse(f) for f in frames(path)]
    assert all(d["transport"] == "mrc" and d["icrc_ok"] for d in ds)
    nack = next(d for d in ds if d["mrc.bth.opcode_name"] == "MRC_RELIABILITY_NACK")
    assert nack["mrc.neth.nack_reason_name"] == "TRIMMED"
    # A flipped bit in the RETH: the ICRC says so.
    bad = bytearray(frames(path)[0])
    bad[14 + 20 + 8 + 12 + 8 + 3] ^= 1
    assert roce.parse(bytes(bad))["icrc_ok"] is False


def test_decode_and_the_table_hold_mrc_and_uet_as_their_json_lines(roce_cli, tmp_path):
    """roce.decode's dicts of MRC and UET packets are the CLI's JSON lines (flat keys), and
    decode_table and the CLI's Parquet have a column per key."""
    import pyarrow.parquet as pq

    caps = [UET / "uet_pds.pcap", UET / "uet_ses.pcap"]
    for kind in ("--mrc", "--uet"):
        p = tmp_path / f"{kind[2:]}.pcap"
        subprocess.run([roce_cli, "gen-capture", kind, "--packets", "40", str(p)], check=True)
        caps.append(p)
    for path in caps:
        cli = cli_json(roce_cli, path)
        got = list(roce.decode(str(path)))
        assert len(got) == len(cli) > 0, path
        for g, c in zip(got, cli):
            assert without_frame_and_time(g) == without_frame_and_time(c), path
        table = roce.decode_table(str(path), fabric_columns=True)
        rows = table.to_pylist()
        assert [n for n, _ in roce.table_schema(fabric_columns=True)] == table.column_names
        for r, c in zip(rows, cli):
            for k, v in without_frame_and_time(c).items():
                assert r[k] == v, (path, k)
        pq_path = tmp_path / "t.parquet"
        subprocess.run(
            [roce_cli, "decode", "--format", "parquet", "--fabric-columns", "-o", str(pq_path),
             str(path)],
            check=True,
        )
        assert pq.read_table(pq_path).to_pylist() == rows
    sack = next(
        r
        for r in roce.decode_table(str(tmp_path / "mrc.pcap"), fabric_columns=True).to_pylist()
        if r["mrc.bth.opcode_name"] == "MRC_RELIABILITY_SACK"
    )
    assert sack["transport"] == "mrc" and sack["mrc.seth.sacked"] is not None
    # Without the option: RoCE's columns only, the packets rows that say what they are.
    plain = roce.decode_table(str(tmp_path / "mrc.pcap"))
    assert "transport" not in plain.column_names
    assert plain.column_names == [n for n, _ in roce.table_schema()]
    assert all("--fabric-columns" in e for e in plain.column("error").to_pylist())
