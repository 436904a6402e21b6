#!/bin/bash
# Analysis-speed benchmark: `roce analyze` beside `roce decode` on the same file in the same
# run, and the analysis's peak RSS (see pcap/PERF.md, "Analysis").
# Usage: bash pcap/analyze-perf.sh [DIR] [PACKETS] [QPS]
#   (defaults /tmp/roce-perf, 10,000,000 packets, 1,000 QPs; needs ~3.3 GB for the capture)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/roce-perf}
N=${2:-10000000}
QPS=${3:-1000}
mkdir -p "$DIR"
cargo build --release -q -p roce
ROCE=${CARGO_TARGET_DIR:-target}/release/roce
F="$DIR/rc-$N-$QPS.pcap"
[ -f "$F" ] || "$ROCE" gen-capture --rc "$QPS" --loss-every 200 --packets "$N" "$F"

# best-of-N wall time (s) and the peak RSS (KiB) of that run; stdout to /dev/null
best() {
    local n=$1; shift
    local best=999999 rss=0
    for _ in $(seq "$n"); do
        local t kb
        /usr/bin/time -f "%e %M" -o "$DIR/time.out" "$@" > /dev/null 2>&1
        read -r t kb < "$DIR/time.out"
        if awk -v a="$t" -v b="$best" 'BEGIN{exit !(a<b)}'; then best=$t; rss=$kb; fi
    done
    echo "$best $rss"
}
rate() { awk -v n="$1" -v t="$2" 'BEGIN{printf "%.2f", n/t/1e6}'; }

echo "machine: $(nproc) cores, $(uname -r); capture: $N packets, $QPS QPs, $(du -h "$F" | cut -f1)"
read -r d_t d_rss < <(best 3 "$ROCE" decode "$F")
read -r d1_t d1_rss < <(best 3 "$ROCE" decode --threads 1 "$F")
read -r a_t a_rss < <(best 3 "$ROCE" analyze "$F")
read -r j_t j_rss < <(best 1 "$ROCE" analyze --json "$F")
printf '%-40s %9s %12s %12s\n' command seconds "M packets/s" "peak RSS MB"
for row in "roce decode (summary)|$d_t|$d_rss" "roce decode --threads 1|$d1_t|$d1_rss" \
    "roce analyze (text)|$a_t|$a_rss" "roce analyze --json|$j_t|$j_rss"; do
    IFS='|' read -r name t kb <<< "$row"
    printf '%-40s %9.2f %12s %12.1f\n' "$name" "$t" "$(rate "$N" "$t")" "$(awk -v k="$kb" 'BEGIN{print k/1024}')"
done
# The hostile case beside it: one QP's requests at random PSNs (full gap and outstanding tables).
J="$DIR/psn-jumps-1000000.pcap"
[ -f "$J" ] || "$ROCE" gen-capture --psn-jumps --packets 1000000 "$J"
C="$DIR/rc-1000000-64.pcap"
[ -f "$C" ] || "$ROCE" gen-capture --rc 64 --packets 1000000 "$C"
read -r h_t _ < <(best 3 "$ROCE" analyze "$J")
read -r c_t _ < <(best 3 "$ROCE" analyze "$C")
echo "roce analyze, 1 M packets: --psn-jumps ${h_t} s ($(rate 1000000 "$h_t") M/s), --rc 64 ${c_t} s; hostile / clean time: $(awk -v h="$h_t" -v c="$c_t" 'BEGIN{printf "%.2f", h/c}')"
echo "analyze / decode summary rate: $(awk -v a="$a_t" -v d="$d_t" 'BEGIN{printf "%.2f", d/a}') (goal >= 0.5); / single-thread decode: $(awk -v a="$a_t" -v d="$d1_t" 'BEGIN{printf "%.2f", d/a}')"
