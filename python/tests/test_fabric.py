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
