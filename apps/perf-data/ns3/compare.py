"""The table of apps/perf-data/ns3/run.sh: ns-3's FCT files beside roce's JSON.

    python3 compare.py OUT_DIR MS

ns-3's slowdown is the authors' (fct_analysis.py): FCT over the flow's standalone FCT (the
base RTT plus its bytes with headers at line rate), at least 1. roce's is FCT over the ideal
FCT (a round trip over its path plus its frame bytes at the host rate). Buckets are roce's.
"""

import json
import os
import sys

BUCKETS = [("<10KB", 0, 10_000), ("10KB-100KB", 10_000, 100_000), ("100KB-1MB", 100_000, 1_000_000),
           ("1MB-10MB", 1_000_000, 10_000_000), (">10MB", 10_000_000, 1 << 62)]


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))
    return xs[k]


def ns3(out, cc):
    by = {b[0]: [] for b in BUCKETS}
    n = 0
    with open(os.path.join(out, f"fct_{cc}.txt")) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 8:
                continue
            size, fct, alone = int(parts[4]), int(parts[6]), int(parts[7])
            n += 1
            for name, lo, hi in BUCKETS:
                if lo <= size < hi:
                    by[name].append(max(1.0, fct / alone))
    wall, kb = open(os.path.join(out, f"time_ns3_{cc}")).read().split()
    return n, by, float(wall), int(kb) / 1024


def main():
    out, ms = sys.argv[1], sys.argv[2]
    flows_file = [l for l in open(os.path.join(out, "config_dcqcn.txt")) if l.startswith("FLOW_FILE")]
    roce_runs = json.load(open(os.path.join(out, "roce.json")))
    rw, rkb = open(os.path.join(out, "time_roce")).read().split()
    print(f"| simulator | cc | flows done | wall | peak RSS | bucket | p50 | p95 | p99 |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|")
    for cc in ("dcqcn", "hpcc"):
        n, by, wall, mb = ns3(out, cc)
        for i, (name, _, _) in enumerate(BUCKETS):
            xs = by[name]
            head = f"| ns-3 (HPCC authors') | {cc} | {n} | {wall:.0f} s | {mb:.0f} MB" if i == 0 else "| | | | |"
            print(f"{head} | {name} ({len(xs)}) | {pct(xs, 50):.2f} | {pct(xs, 95):.2f} | {pct(xs, 99):.2f} |")
    for r in roce_runs:
        b = dict(r["buckets"])
        for i, (name, _, _) in enumerate(BUCKETS):
            x = b.get(name, {})
            head = (f"| roce sim fabric | {r['cc']} | {r['completed']} | {float(rw):.0f} s (both) | {int(rkb) / 1024:.0f} MB (both)"
                    if i == 0 else "| | | | |")
            print(f"{head} | {name} ({x.get('flows', 0)}) | {x.get('p50', float('nan')):.2f} | {x.get('p95', float('nan')):.2f} | {x.get('p99', float('nan')):.2f} |")
    print(f"\n{ms} ms of arrivals; {flows_file[0].split()[1] if flows_file else ''}")


if __name__ == "__main__":
    main()
