#!/bin/bash
# The analysis's cost with PFC frames beside connections (docs/security.md, "Files from
# strangers"): `roce analyze` of the same RC connections with and without pause frames among
# them, in the same run. The goal: within 2x.
# Usage: bash pcap/pfc-perf.sh [DIR] [QPS] [PACKETS] [PAUSE_EVERY] [SENDERS]
#   (defaults /tmp/roce-pfc, 20,000 QPs, 3,000,000 frames, a PFC frame after every 2 RoCE
#   frames, from 4,096 senders: 926,666 pauses; ~1.3 GB of captures)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/roce-pfc}
QPS=${2:-20000}
N=${3:-3000000}
EVERY=${4:-2}
SENDERS=${5:-4096}
mkdir -p "$DIR"
cargo build --release -q -p roce
ROCE=${CARGO_TARGET_DIR:-target}/release/roce
P="$DIR/paused-$QPS-$N-$EVERY-$SENDERS.pcap"
[ -f "$P" ] || "$ROCE" gen-capture --rc "$QPS" --packets "$N" --pause-every "$EVERY" \
    --pause-senders "$SENDERS" "$P"
# The same RoCE frames without the pauses: as many as the paused capture holds.
ROCE_FRAMES=$("$ROCE" decode "$P" 2>&1 >/dev/null | sed -n 's/.* read, \([0-9]*\) RoCE.*/\1/p')
F="$DIR/plain-$QPS-$ROCE_FRAMES.pcap"
[ -f "$F" ] || "$ROCE" gen-capture --rc "$QPS" --packets "$ROCE_FRAMES" "$F"

# best-of-3 wall time (s)
best() {
    local best=999999
    for _ in 1 2 3; do
        /usr/bin/time -f "%e" -o "$DIR/time.out" "$@" > /dev/null 2>&1
        local t; t=$(cat "$DIR/time.out")
        if awk -v a="$t" -v b="$best" 'BEGIN{exit !(a<b)}'; then best=$t; fi
    done
    echo "$best"
}
plain=$(best "$ROCE" analyze "$F" --pfc-storm 100us)
paused=$(best "$ROCE" analyze "$P" --pfc-storm 100us)
echo "machine: $(nproc) cores; $QPS QPs, $ROCE_FRAMES RoCE frames, $((N - ROCE_FRAMES)) PFC frames from $SENDERS senders"
printf '%-34s %8s\n' capture seconds "without the pauses" "$plain" "with the pauses" "$paused"
awk -v a="$paused" -v b="$plain" 'BEGIN{printf "ratio: %.2fx (goal: at most 2x)\n", a/b}'
