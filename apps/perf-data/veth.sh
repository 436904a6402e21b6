#!/usr/bin/env bash
# The links across a veth pair between two network namespaces (a real Ethernet-framed link,
# where the packet link also sends through its packet socket; on `lo` it cannot): for WRITE,
# READ, SEND and atomics, 64 KiB bandwidth, 64 B message rate (WRITE also against the plain
# UDP blast of the same wire size) and 8 B latency, for each link, interleaved, ROUNDS rounds.
# Needs root. Usage: apps/perf-data/veth.sh [OUT_DIR] (default apps/perf-data/veth); prints a
# summary (medians) and writes one JSON line per run to OUT_DIR/runs.jsonl.
set -euo pipefail
ROCE=${ROCE:-target/release/roce}
OUT=${1:-apps/perf-data/veth}
ROUNDS=${ROUNDS:-3}
LINKS=${LINKS:-udp packet packet-ring}
mkdir -p "$OUT"
: > "$OUT/runs.jsonl"
A=roce-bench-a B=roce-bench-b
cleanup() { ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add $A; ip netns add $B
ip link add rb-a type veth peer name rb-b
ip link set rb-a netns $A; ip link set rb-b netns $B
ip -n $A addr add 10.77.0.1/24 dev rb-a; ip -n $B addr add 10.77.0.2/24 dev rb-b
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set rb-a mtu 9000 up; ip -n $B link set rb-b mtu 9000 up
run() { # link, test, then perf arguments
    local link=$1 test=$2; shift 2
    ip netns exec $B "$ROCE" perf "$test" --server --bind 10.77.0.2 --link "$link" >/dev/null 2>&1 &
    local srv=$!
    for _ in $(seq 50); do ip netns exec $B ss -ltn | grep -q 18515 && break; sleep 0.05; done
    ip netns exec $A "$ROCE" perf "$test" --client 10.77.0.2 --bind 10.77.0.1 --link "$link" --json "$@" \
        | tail -1 | python3 -c 'import json,sys; d=json.load(sys.stdin); d["args"]=sys.argv[1]; print(json.dumps(d))' "$test $*" \
        >> "$OUT/runs.jsonl"
    wait $srv
}
for r in $(seq "$ROUNDS"); do
    for link in $LINKS; do
        run "$link" write -s 65536 --mtu 4096 -n 20000
        run "$link" write -s 64 -n 300000 --baseline
        run "$link" write --lat -s 8 -n 20000
        for t in read send; do
            run "$link" $t -s 65536 --mtu 4096 -n 10000
            run "$link" $t -s 64 -n 200000
            run "$link" $t --lat -s 8 -n 10000
        done
        run "$link" atomic -n 200000
        run "$link" atomic --lat -n 10000
    done
done
python3 - "$OUT/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(link, args, key):
    v = [r[key] for r in rows if r["link"] == link and r["args"] == args]
    return statistics.median(v), min(v), max(v)
figs = []
for t in ["write", "read", "send"]:
    n64k = "20000" if t == "write" else "10000"
    figs += [(f"{t.upper()} 64 KiB, Gb/s", f"{t} -s 65536 --mtu 4096 -n {n64k}", "bw_avg_gbps"),
             (f"{t.upper()} 64 B, M msg/s", f"{t} -s 64 -n " + ("300000 --baseline" if t == "write" else "200000"), "msg_rate_mpps"),
             (f"{t.upper()} 8 B latency, typical us", f"{t} --lat -s 8 -n {n64k}", "t_typical_us")]
figs += [("atomic, M ops/s", "atomic -n 200000", "msg_rate_mpps"),
         ("atomic latency, typical us", "atomic --lat -n 10000", "t_typical_us")]
links = sorted({r["link"] for r in rows}, key=["udp", "packet", "packet-ring"].index)
for name, args, key in figs:
    base = med("udp", args, key)[0]
    cells = []
    for l in links:
        m, lo, hi = med(l, args, key)
        cells.append(f"{l} {m:.3f} ({lo:.3f}-{hi:.3f}) x{m / base:.2f}")
    print(f"{name:32} " + " | ".join(cells))
blast = "write -s 64 -n 300000 --baseline"
for l in links:
    r = [x["msg_rate_mpps"] / x["baseline"]["msg_rate_mpps"] for x in rows if x["link"] == l and x["args"] == blast]
    b = [x["baseline"]["msg_rate_mpps"] for x in rows if x["link"] == l and x["args"] == blast]
    print(f"{l}: WRITE 64 B message rate / plain UDP blast packets/s (same run) {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}), blast {statistics.median(b):.3f} M/s")
for l in links:
    s = [r["sent"] for r in rows if r["link"] == l]
    print(f"{l}: sent through the packet socket {sum(x['packet'] for x in s)}, UDP sockets {sum(x['udp'] for x in s)}, refused {sum(x['packet_dropped'] for x in s)}")
PY
