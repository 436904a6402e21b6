#!/usr/bin/env bash
# roce sim fabric beside the HPCC authors' ns-3 simulator (alibaba-edu/High-Precision-
# Congestion-Control), on the HPCC paper's 320-host fat tree with WebSearch flows, DCQCN and
# HPCC, in one run: wall time, peak RSS and FCT slowdown percentiles per flow-size bucket.
#
#   bash apps/perf-data/ns3/run.sh HPCC_SIMULATION_DIR [LOAD] [MS]
#
# HPCC_SIMULATION_DIR is the `simulation/` directory of a built checkout (README.md here says
# how to build it); LOAD the load of every host link (default 0.5), MS the milliseconds of
# flow arrivals (default 3). The two ns-3 runs go at once (one core each), then roce's two
# (`--cc dcqcn/hpcc` runs them on the two cores). The flows are drawn from the same WebSearch
# distribution at the same load by each simulator's own generator: the same workload, not
# the same flows. Needs python2 for the authors' scripts (pyenv's 2.7 works).
set -euo pipefail
sim=$(cd "${1:?usage: run.sh HPCC_SIMULATION_DIR [LOAD] [MS]}" && pwd)
load=${2:-0.5}
ms=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
roce=${ROCE_BIN:-$here/../../../target/release/roce}
py2=${PYTHON2:-python2}
command -v "$py2" >/dev/null || { echo "run.sh: no python2 (set PYTHON2)" >&2; exit 1; }
[ -x "$sim/build/scratch/third" ] || { echo "run.sh: $sim/build/scratch/third is not built (README.md)" >&2; exit 1; }
[ -x "$roce" ] || { echo "run.sh: no roce binary at $roce (cargo build --release, or ROCE_BIN)" >&2; exit 1; }
out=${OUT:-$(mktemp -d)}
name="roce_ws${load}_${ms}ms"
flows="$sim/mix/$name.txt"

# The flows: the authors' generator, WebSearch, 320 hosts at 100 Gb/s, arrivals over MS ms.
(cd "$sim/../traffic_gen" && "$py2" traffic_gen.py -c WebSearch_distribution.txt -n 320 -l "$load" \
  -b 100G -t "$(echo "$ms/1000" | bc -l)" -o "$flows" > /dev/null)
# traffic_gen writes the count over a longer estimate; the count the simulator reads must be
# the lines that follow.
n=$(($(wc -l < "$flows") - 1))
sed -i "1s/.*/$n/" "$flows"

# The configs: those of the authors' run.py (fat tree, ECN thresholds scaled by rate, a
# 32 MB buffer, 1000-byte payloads), flows from 2 s, stopping at 2 s + 10x the arrivals
# (as roce's runs do), without the queue monitor run.py adds (it costs ~100 s per run).
stop=$(echo "2 + 10 * $ms / 1000" | bc -l)
config() {  # cc-name cc-lines
  cat > "$out/config_$1.txt" <<CFG
ENABLE_QCN 1
USE_DYNAMIC_PFC_THRESHOLD 1
PACKET_PAYLOAD_SIZE 1000
TOPOLOGY_FILE mix/fat.txt
FLOW_FILE mix/$name.txt
TRACE_FILE mix/trace.txt
TRACE_OUTPUT_FILE $out/mix_$1.tr
FCT_OUTPUT_FILE $out/fct_$1.txt
PFC_OUTPUT_FILE $out/pfc_$1.txt
SIMULATOR_STOP_TIME $stop
$2
ALPHA_RESUME_INTERVAL 1
RATE_DECREASE_INTERVAL 4
CLAMP_TARGET_RATE 0
RP_TIMER 300
EWMA_GAIN 0.00390625
FAST_RECOVERY_TIMES 1
MIN_RATE 1000Mb/s
DCTCP_RATE_AI 1000Mb/s
ERROR_RATE_PER_LINK 0.0000
L2_CHUNK_SIZE 4000
L2_ACK_INTERVAL 1
L2_BACK_TO_ZERO 0
GLOBAL_T 1
U_TARGET 0.95
MI_THRESH 0
MULTI_RATE 0
SAMPLE_FEEDBACK 0
PINT_LOG_BASE 1.01
PINT_PROB 1.0
RATE_BOUND 1
LINK_DOWN 0 0 0
ENABLE_TRACE 0
KMAX_MAP 2 100000000000 1600 400000000000 6400
KMIN_MAP 2 100000000000 400 400000000000 1600
PMAX_MAP 2 100000000000 0.20 400000000000 0.20
BUFFER_SIZE 32
QLEN_MON_FILE $out/qlen_$1.txt
QLEN_MON_START 2000000000
QLEN_MON_END 2000000000
CFG
}
config dcqcn "CC_MODE 1
RATE_AI 20Mb/s
RATE_HAI 200Mb/s
HAS_WIN 0
VAR_WIN 0
FAST_REACT 0
INT_MULTI 1
ACK_HIGH_PRIO 1"
config hpcc "CC_MODE 3
RATE_AI 50Mb/s
RATE_HAI 50Mb/s
HAS_WIN 1
VAR_WIN 1
FAST_REACT 1
INT_MULTI 4
ACK_HIGH_PRIO 0"

echo "ns-3: $n flows, load $load, ${ms} ms of arrivals; outputs in $out" >&2
for cc in dcqcn hpcc; do
  (cd "$sim" && LD_LIBRARY_PATH=build /usr/bin/time -f "%e %M" -o "$out/time_ns3_$cc" \
    ./build/scratch/third "$out/config_$cc.txt" > "$out/log_ns3_$cc" 2>&1) &
done
wait
echo "roce sim fabric: the same load and time" >&2
/usr/bin/time -f "%e %M" -o "$out/time_roce" "$roce" sim fabric --topology fat-tree --load "$load" \
  --duration "$ms" --cc dcqcn/hpcc --json > "$out/roce.json" 2> "$out/log_roce"
python3 "$here/compare.py" "$out" "$ms"
