#!/usr/bin/env python3
"""An RC requester that is not roce: every datagram is built by scapy, whose
scapy.contrib.roce computes the ICRC on its own, with the IPv4/IPv6 and UDP headers other
stacks write (rxe: DF and a counting identification, source port from the kernel's flow-label
hash; no DF; arbitrary source ports). It drives one QP of a roce endpoint and reports what came
back, as one JSON object on stdout.

Usage: scapy_peer.py CONFIG_JSON, where CONFIG_JSON has
  server, peer   the endpoint's and this peer's IP addresses (both IPv4 or both IPv6)
  reply_port     the UDP port the endpoint sends its responses to (on `peer`)
  qpn, psn       the endpoint's QPN and the first PSN it expects
  peer_qpn       this peer's QPN (the endpoint's destination QP)
  va, rkey       the endpoint's region (REMOTE_WRITE and REMOTE_READ)

Sent, in PSN order (each WRITE 16 bytes, at va + 16 * n):
  n = 0  WRITE_ONLY, rxe header: DF, identification 14849, source port rdma_get_udp_sport
  n = 1  WRITE_ONLY, no DF, identification 0xbeef, source port 2
  n = 2  WRITE_ONLY, DF, identification 0, source port 69
  n = 3  WRITE_ONLY, rxe header again (identification 14850), first sent with one byte of the
         payload flipped (must be dropped as bad_icrc, so not ACKed), then intact
  then   READ request for va .. va + 64 (must be answered with the four WRITEs' bytes)
Output: {"acks": [...PSNs ACKed...], "read": hex of the READ response payload or null,
         "naks": [...], "corrupted_sent": 1}
Sending spoofed headers needs a raw socket: run as root.
"""
import json
import socket
import struct
import sys
import time

from scapy.all import IP, IPv6, UDP, Raw, conf, send
from scapy.contrib.roce import BTH
from scapy.supersocket import L3RawSocket

try:
    from scapy.layers.inet6 import L3RawSocket6
except ImportError:  # older scapy
    L3RawSocket6 = None

WRITE_ONLY = 0x0A
READ_REQUEST = 0x0C
ACKNOWLEDGE = 0x11
READ_RESPONSE_ONLY = 0x10


def rdma_get_udp_sport(lqpn, rqpn):
    """include/rdma/ib_verbs.h: rdma_calc_flow_label, rdma_flow_label_to_udp_sport."""
    v = lqpn * rqpn
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    return ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000


def main():
    cfg = json.loads(sys.argv[1])
    v6 = ":" in cfg["server"]
    conf.L3socket = L3RawSocket
    if v6 and L3RawSocket6 is not None:
        conf.L3socket6 = L3RawSocket6
    rx = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((cfg["peer"], cfg["reply_port"]))
    rx.settimeout(0.2)

    def ip(ident, df):
        if v6:
            # Traffic class and flow label are masked by the ICRC: any will do.
            return IPv6(src=cfg["peer"], dst=cfg["server"], tc=0x28, fl=0x12345)
        return IP(src=cfg["peer"], dst=cfg["server"], id=ident, flags="DF" if df else 0)

    def write(psn, n, ident, df, sport, corrupt=False):
        data = bytes([0x40 + n]) * 16
        reth = struct.pack("!QII", cfg["va"] + 16 * n, cfg["rkey"], len(data))

        def build(payload, icrc=None, udp_chksum=None):
            return ip(ident, df) / UDP(sport=sport, dport=4791, chksum=udp_chksum) / BTH(
                opcode=WRITE_ONLY, dqpn=cfg["qpn"], psn=psn, ackreq=1, icrc=icrc
            ) / Raw(reth + payload)

        p = build(data)
        if corrupt:
            # One payload bit flipped, the ICRC left that of the intact packet. The UDP
            # checksum must not catch it first: rxe sends IPv4 with checksum 0; IPv6 needs
            # one, so it is computed over the corrupted datagram.
            intact = BTH(bytes(p[BTH])).icrc  # as dissected; build() writes it back the same
            bad = bytes([data[0] ^ 0x01]) + data[1:]
            p = build(bad, icrc=intact, udp_chksum=None if v6 else 0)
        send(p, verbose=0)

    psn = cfg["psn"]
    rxe = rdma_get_udp_sport(cfg["peer_qpn"], cfg["qpn"])
    write(psn, 0, 14849, True, rxe)
    write((psn + 1) & 0xFFFFFF, 1, 0xBEEF, False, 2)
    write((psn + 2) & 0xFFFFFF, 2, 0, True, 69)
    write((psn + 3) & 0xFFFFFF, 3, 14850, True, rxe, corrupt=True)
    time.sleep(0.05)
    write((psn + 3) & 0xFFFFFF, 3, 14851, True, rxe)
    reth = struct.pack("!QII", cfg["va"], cfg["rkey"], 64)
    read = ip(14852, True) / UDP(sport=rxe, dport=4791) / BTH(
        opcode=READ_REQUEST, dqpn=cfg["qpn"], psn=(psn + 4) & 0xFFFFFF, ackreq=1
    ) / Raw(reth)
    send(read, verbose=0)

    out = {"acks": [], "naks": [], "read": None, "corrupted_sent": 1}
    deadline = time.time() + 3
    while time.time() < deadline and out["read"] is None:
        try:
            d = rx.recv(65536)
        except socket.timeout:
            continue
        op, dqpn, rpsn = d[0], int.from_bytes(d[5:8], "big"), int.from_bytes(d[9:12], "big")
        if dqpn != cfg["peer_qpn"]:
            continue
        syndrome = d[12]
        if op == ACKNOWLEDGE:
            (out["acks"] if syndrome >> 5 == 0 else out["naks"]).append(rpsn)
        elif op == READ_RESPONSE_ONLY:
            out["read"] = d[16:16 + 64].hex()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
