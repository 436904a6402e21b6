#!/bin/bash
# MAD decode speed: `roce decode` of a capture that is all CM MADs beside the same decoder on
# the transport-header benchmark capture, same run (see pcap/PERF.md, "MADs").
# Usage: bash pcap/mad-perf.sh [DIR] [PACKETS]   (defaults /tmp/roce-perf, 1,000,000)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/roce-perf}
N=${2:-1000000}
mkdir -p "$DIR"
cargo build --release -q -p roce
ROCE=${CARGO_TARGET_DIR:-target}/release/roce
"$ROCE" gen-capture --packets "$N" "$DIR/bth-$N.pcap"
# Every CM message of the committed fixture, cycled (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR,
# LAP, APR; 256-byte MADs in UD SENDs to QP1).
"$ROCE" gen-capture --cm-from pcap/tests/data/cm.pcap --packets "$N" "$DIR/cm-$N.pcap"
# The same packets moved off QP1: the same bytes decoded as plain UD SENDs (BTH + DETH only),
# the baseline that isolates what decoding the MADs costs.
"$ROCE" gen-capture --cm-from pcap/tests/data/cm.pcap --plain-ud --packets "$N" "$DIR/ud-$N.pcap"

best() {
    local n=$1; shift
    local best=999999
    for _ in $(seq "$n"); do
        local t0 t1
        t0=$(date +%s.%N)
        "$@" > /dev/null 2>&1
        t1=$(date +%s.%N)
        best=$(echo "$t1 $t0 $best" | awk '{d=$1-$2; print (d<$3)?d:$3}')
    done
    echo "$best"
}
rate() { awk -v n="$N" -v t="$1" 'BEGIN{printf "%.2f", n/t/1e6}'; }
printf '%-44s %9s %12s\n' command seconds "M packets/s"
for fmt in "" "--json" "--threads 1"; do
    b=$(best 5 "$ROCE" decode $fmt "$DIR/bth-$N.pcap")
    u=$(best 5 "$ROCE" decode $fmt "$DIR/ud-$N.pcap")
    c=$(best 5 "$ROCE" decode $fmt "$DIR/cm-$N.pcap")
    printf '%-44s %9.3f %12s\n' "roce decode $fmt bth (benchmark capture)" "$b" "$(rate "$b")"
    printf '%-44s %9.3f %12s\n' "roce decode $fmt ud (CM bytes off QP1)" "$u" "$(rate "$u")"
    printf '%-44s %9.3f %12s\n' "roce decode $fmt cm" "$c" "$(rate "$c")"
    echo "  CM / same bytes as plain UD ($fmt): $(awk -v b="$u" -v c="$c" 'BEGIN{printf "%.2f", b/c}') (goal >= 0.8)"
    echo "  CM / transport-header benchmark capture ($fmt): $(awk -v b="$b" -v c="$c" 'BEGIN{printf "%.2f", b/c}')"
done
