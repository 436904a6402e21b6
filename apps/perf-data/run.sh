#!/bin/bash
# The roce perf campaign of apps/PERF.md: every goal with --baseline, REPS times, one JSON
# line per run prefixed by the 1-minute load average.
# usage: apps/perf-data/run.sh OUTDIR [REPS]   (ROCE=path/to/roce, default target/release/roce;
#        EXTRA="--link udp" adds flags to every run)
# then:  python3 apps/perf-data/summarize.py OUTDIR
# An A/B of two builds: apps/perf-data/ab.sh OLD_ROCE NEW_ROCE OUTDIR [REPS] runs them in turn.
B=${ROCE:-target/release/roce}
OUT=$1; REPS=${2:-5}
mkdir -p "$OUT"
for rep in $(seq 1 "$REPS"); do
  for cfg in "write -s 65536 --mtu 4096 -n 10000" "read -s 65536 --mtu 4096 -n 10000" "send -s 65536 --mtu 4096 -n 10000" \
             "write -s 64 -n 300000" "read -s 64 -n 300000" "send -s 64 -n 300000" \
             "write --lat -s 8 -n 20000" "read --lat -s 8 -n 20000" "send --lat -s 8 -n 20000" "atomic -n 200000" "atomic --lat -n 20000"; do
    name=$(echo "$cfg" | tr ' ' '_')
    echo "$(cut -d' ' -f1 /proc/loadavg) $(timeout 120 "$B" perf $cfg $EXTRA --baseline --json --client-ip 127.0.9.1 --server-ip 127.0.9.2 2>&1)" >> "$OUT/$name.jsonl"
  done
done
