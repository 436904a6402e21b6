#!/bin/bash
# Interleaved A/B of two roce builds over the perf campaign (run.sh's configurations), the
# default loopback, the KV push and the congestion simulation: each round runs A then B, so
# both see the same machine. Results in OUTDIR/a and OUTDIR/b (summarize.py each), and
# OUTDIR/{a,b}/{loopback,kv,sim}.jsonl.
# usage: apps/perf-data/ab.sh A_ROCE B_ROCE OUTDIR [REPS]
#        (EXTRA_A / EXTRA_B: flags for every run of that side, e.g. EXTRA_B="--link packet";
#        the same binary twice with different flags compares the flags)
A=$1; B=$2; OUT=$3; REPS=${4:-5}
mkdir -p "$OUT/a" "$OUT/b"
here=$(dirname "$0")
for rep in $(seq 1 "$REPS"); do
  for side in a b; do
    if [ $side = a ]; then R=$A; X=$EXTRA_A; else R=$B; X=$EXTRA_B; fi
    EXTRA=$X ROCE=$R bash "$here/run.sh" "$OUT/$side" 1
    echo "$(cut -d' ' -f1 /proc/loadavg) $($R loopback $X --json 2>&1)" >> "$OUT/$side/loopback.jsonl"
    echo "$(cut -d' ' -f1 /proc/loadavg) $($R kv $X --json 2>&1)" >> "$OUT/$side/kv.jsonl"
    echo "$(cut -d' ' -f1 /proc/loadavg) $($R sim congestion --json 2>&1)" >> "$OUT/$side/sim.jsonl"
  done
done
