#!/bin/bash
# Decode-speed benchmark for `roce decode` against tshark (see pcap/PERF.md).
# Usage: bash pcap/perf.sh [DIR]   (DIR defaults to /tmp/roce-perf; needs ~170 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/roce-perf}
mkdir -p "$DIR"
cargo build --release -q -p roce
ROCE=${CARGO_TARGET_DIR:-target}/release/roce
"$ROCE" gen-capture --packets 1000000 "$DIR/1m.pcap"
"$ROCE" gen-capture --packets 100000 "$DIR/100k.pcap"
# The 100k file is a byte-exact prefix of the 1M file.
cmp -n "$(stat -c %s "$DIR/100k.pcap")" "$DIR/100k.pcap" "$DIR/1m.pcap"
HEUR=()
for h in rpcrdma_infiniband smcr_infiniband smb_direct_infiniband iser_infiniband lnet_ib \
    sdp_infiniband mellanox_eoib eth_over_ib fc_infiniband drbd_rdma nvme_rdma; do
    HEUR+=(--disable-heuristic "$h")
done

# best-of-N wall time in seconds of a command whose stdout goes to /dev/null
best() {
    local n=$1; shift
    local best=
    for _ in $(seq "$n"); do
        local t0 t1
        t0=$(date +%s.%N)
        "$@" > /dev/null 2>&1
        t1=$(date +%s.%N)
        best=$(echo "$t1 $t0 ${best:-999999}" | awk '{d=$1-$2; print (d<$3)?d:$3}')
    done
    echo "$best"
}
rate() { awk -v n="$1" -v t="$2" 'BEGIN{printf "%.0f", n/t}'; }

echo "machine: $(nproc) cores, $(uname -r), $(tshark --version 2>/dev/null | head -1)"
r_sum=$(best 5 "$ROCE" decode "$DIR/1m.pcap")
r_sum1=$(best 3 "$ROCE" decode --threads 1 "$DIR/1m.pcap")
r_json=$(best 5 "$ROCE" decode --json "$DIR/1m.pcap")
r_json1=$(best 3 "$ROCE" decode --json --threads 1 "$DIR/1m.pcap")
t_sum100k=$(best 3 tshark -r "$DIR/100k.pcap" "${HEUR[@]}")
t_sum1m=$(best 1 tshark -r "$DIR/1m.pcap" "${HEUR[@]}")
t_ek100k=$(best 1 tshark -r "$DIR/100k.pcap" "${HEUR[@]}" -T ek)

printf '%-46s %10s %14s\n' "command" "seconds" "packets/s"
printf '%-46s %10.3f %14s\n' "roce decode 1m.pcap" "$r_sum" "$(rate 1000000 "$r_sum")"
printf '%-46s %10.3f %14s\n' "roce decode --threads 1 1m.pcap" "$r_sum1" "$(rate 1000000 "$r_sum1")"
printf '%-46s %10.3f %14s\n' "roce decode --json 1m.pcap" "$r_json" "$(rate 1000000 "$r_json")"
printf '%-46s %10.3f %14s\n' "roce decode --json --threads 1 1m.pcap" "$r_json1" "$(rate 1000000 "$r_json1")"
printf '%-46s %10.3f %14s\n' "tshark -r 100k.pcap" "$t_sum100k" "$(rate 100000 "$t_sum100k")"
printf '%-46s %10.3f %14s\n' "tshark -r 1m.pcap" "$t_sum1m" "$(rate 1000000 "$t_sum1m")"
printf '%-46s %10.3f %14s\n' "tshark -r 100k.pcap -T ek" "$t_ek100k" "$(rate 100000 "$t_ek100k")"
ratio() { awk -v a="$1" -v na="$2" -v b="$3" -v nb="$4" 'BEGIN{printf "%.1f", (na/a)/(nb/b)}'; }
echo "summary / tshark -r (100k prefix): $(ratio "$r_sum" 1000000 "$t_sum100k" 100000)x (goal 20x); single thread: $(ratio "$r_sum1" 1000000 "$t_sum100k" 100000)x"
echo "summary / tshark -r (1M):          $(ratio "$r_sum" 1000000 "$t_sum1m" 1000000)x; single thread: $(ratio "$r_sum1" 1000000 "$t_sum1m" 1000000)x"
echo "json / tshark -T ek (100k prefix): $(ratio "$r_json" 1000000 "$t_ek100k" 100000)x (goal 50x); single thread: $(ratio "$r_json1" 1000000 "$t_ek100k" 100000)x"
