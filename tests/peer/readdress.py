#!/usr/bin/env python3
"""Re-addresses the RC traffic of real captures to loopback with scapy.

For every RoCEv2-over-IPv4 RC packet (opcodes 0x00-0x1f) of each capture given, the two
addresses of its conversation become 127.0.98.1 (the first one seen) and 127.0.98.2, and
scapy recomputes the ICRC for the new header (scapy.contrib.roce, independently of roce).
Everything else the sender wrote stays: IPv4 identification, DF, TOS, TTL, UDP source port.
Prints one JSON object per packet: {"file", "frame", "ip": hex of the whole IP datagram}.
Frames cut by the capture's snap length are skipped (their ICRC is not known).
"""
import json
import sys

from scapy.all import IP, UDP, PcapReader, Raw
from scapy.contrib.roce import BTH


def main():
    for path in sys.argv[1:]:
        names = {}
        for frame, pkt in enumerate(PcapReader(path), start=1):
            if IP not in pkt or UDP not in pkt or pkt[UDP].dport != 4791:
                continue
            ip = pkt[IP]
            if len(bytes(ip)) < ip.len:
                continue  # cut by the snap length
            payload = bytes(ip[UDP].payload)[: ip.len - 28]
            if len(payload) < 16 or payload[0] >= 0x20:
                continue  # not RC
            for a in (ip.src, ip.dst):
                names.setdefault(a, "127.0.98.%d" % (len(names) + 1))
            bth = BTH(payload)
            # Rebuild with the new addresses, the sender's own identification, flags, TOS,
            # TTL and ports; the ICRC and checksums computed afresh.
            new = IP(
                src=names[ip.src],
                dst=names[ip.dst],
                id=ip.id,
                flags=ip.flags,
                tos=ip.tos,
                ttl=ip.ttl,
            ) / UDP(sport=ip[UDP].sport, dport=4791, chksum=0) / BTH(
                bytes(bth)[:12] + b"\0\0\0\0"
            )
            # The transport bytes after the BTH, without the old ICRC.
            new[BTH].remove_payload()
            new = new / Raw(payload[12:-4])
            new[BTH].icrc = None
            print(json.dumps({"file": path, "frame": frame, "ip": bytes(new).hex()}))


if __name__ == "__main__":
    main()
