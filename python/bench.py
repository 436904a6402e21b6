"""roce.decode and roce.decode_table beside scapy on the same packets, and Parquet writing
beside `roce decode --json`, measured side by side in one run.

    python python/bench.py [PACKETS]        (default 1,000,000; needs scapy, pyarrow and
                                             the `roce` command)

Writes the decoder's benchmark capture (`roce gen-capture`: a mix of RC WRITE, SEND, READ,
ACK, atomic, UD and CNP packets), then times (best of 3)
  * roce.decode: every record into a dict (what `roce decode --json` prints),
  * roce.decode_table: every record into a row of a pyarrow.Table,
  * scapy: rdpcap, then each packet's BTH opcode, QPN and PSN read (layer access),
  * `roce decode --format parquet -o FILE` and `roce decode --json > /dev/null`,
and prints packets per second and the ratios. scapy is timed on the first 20,000 packets
(its rate does not depend on the count; the whole file would take minutes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import roce

HERE = os.path.dirname(os.path.abspath(__file__))


def roce_bin() -> str:
    env = os.environ.get("ROCE_BIN")
    if env:
        return env
    for profile in ("release", "debug"):
        p = os.path.join(HERE, "..", "target", profile, "roce")
        if os.path.exists(p):
            return p
    sys.exit("no roce binary: cargo build --release (or set ROCE_BIN)")


def best(f, runs=3):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        n = f()
        times.append(time.perf_counter() - t)
    return n, min(times)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    from scapy.contrib.roce import BTH
    from scapy.utils import rdpcap

    with tempfile.TemporaryDirectory() as d:
        full = os.path.join(d, "bench.pcap")
        small = os.path.join(d, "bench-20k.pcap")
        subprocess.run([roce_bin(), "gen-capture", "--packets", str(n), full], check=True, capture_output=True)
        subprocess.run([roce_bin(), "gen-capture", "--packets", str(min(n, 20_000)), small], check=True, capture_output=True)

        def roce_dicts():
            k = 0
            for p in roce.decode(full):
                k += p["bth"]["psn"] >= 0
            return k

        def roce_dicts_small():
            return sum(1 for _ in roce.decode(small))

        def scapy_layers():
            k = 0
            for p in rdpcap(small):
                if BTH in p:
                    b = p[BTH]
                    k += (b.opcode, b.dqpn, b.psn) is not None
            return k

        def roce_table():
            return roce.decode_table(full).num_rows

        def cli(*args, stdout=subprocess.DEVNULL):
            def run():
                subprocess.run([roce_bin(), "decode", *args, full], check=True, stdout=stdout, stderr=subprocess.DEVNULL)
                return n
            return run

        pq = os.path.join(d, "bench.parquet")
        tn, tt = best(roce_table)
        _, jt = best(cli("--json"))
        _, pt = best(cli("--format", "parquet", "-o", pq))
        rn, rt = best(roce_dicts)
        sn_r, st_r = best(roce_dicts_small)
        sn, st = best(scapy_layers, runs=1)
    print(f"capture: {n} packets (roce gen-capture)")
    print(f"{'':34} {'packets':>9} {'seconds':>8} {'packets/s':>11}")
    print(f"{'roce.decode (dicts)':34} {rn:>9} {rt:>8.3f} {rn / rt:>11,.0f}")
    print(f"{'roce.decode (dicts), first 20k':34} {sn_r:>9} {st_r:>8.3f} {sn_r / st_r:>11,.0f}")
    print(f"{'scapy rdpcap + BTH access, 20k':34} {sn:>9} {st:>8.3f} {sn / st:>11,.0f}")
    print(f"{'roce.decode_table (pyarrow)':34} {tn:>9} {tt:>8.3f} {tn / tt:>11,.0f}")
    print(f"{'roce decode --json > /dev/null':34} {n:>9} {jt:>8.3f} {n / jt:>11,.0f}")
    print(f"{'roce decode --format parquet':34} {n:>9} {pt:>8.3f} {n / pt:>11,.0f}")
    print(f"roce.decode / scapy: {(rn / rt) / (sn / st):.1f}x")
    print(f"roce.decode_table / scapy: {(tn / tt) / (sn / st):.1f}x")
    print(f"parquet time / json time: {pt / jt:.2f}x")


if __name__ == "__main__":
    main()
