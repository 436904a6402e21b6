#!/usr/bin/env bash
# The fabric simulator at scale, a build before against this one, side by side in one run.
#
#   bash apps/perf-data/sim-scale.sh OLD_ROCE [NEW_ROCE] [ARGS...]
#   MODE=apart bash apps/perf-data/sim-scale.sh OLD_ROCE [NEW_ROCE] [ARGS...]
#
# Runs `roce sim fabric --json` with ARGS (default: the HPCC paper's 320-host fat tree, 50 %
# WebSearch, 10 ms, DCQCN) with both binaries, and prints wall time, peak RSS and
# packet-hops per second of each, the ratios, and whether the FCT reports agree (they
# should, but for what the builds changed on purpose). MODE=together (the default) runs both
# at once, one core each (the new one with --threads 1): the same machine for both, speed
# per core. MODE=apart runs the old one, then the new one on its default threads (every
# core): the wall time a user sees on this machine. Build OLD_ROCE from an older commit with
#   git worktree add /tmp/old REV && (cd /tmp/old && cargo build --release --bin roce)
set -euo pipefail
old=${1:?usage: sim-scale.sh OLD_ROCE [NEW_ROCE] [ARGS...]}
new=${2:-$(dirname "$0")/../../target/release/roce}
shift $(( $# >= 2 ? 2 : 1 ))
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(--topology fat-tree --load 0.5 --duration 10 --cc dcqcn)
fi
mode=${MODE:-together}
out=$(mktemp -d)
run() {  # name binary [extra args]
  local name=$1 bin=$2
  shift 2
  /usr/bin/time -f "%e %M" -o "$out/$name.time" "$bin" sim fabric --json "${args[@]}" "$@" > "$out/$name.json" 2> "$out/$name.err"
}
case $mode in
  together)
    run old "$old" & a=$!
    run new "$new" --threads 1 & b=$!
    wait $a $b ;;
  apart)
    run old "$old"
    run new "$new" ;;
  *) echo "MODE=together or MODE=apart" >&2; exit 2 ;;
esac
echo "mode $mode; new: $(tail -n1 "$out/new.err")"
hops() { grep -o '"packet_hops":[0-9]*' "$out/$1.json" | head -1 | cut -d: -f2; }
printf '%-5s %10s %12s %14s\n' build wall_s peak_rss_MB Mhops_per_s
for n in old new; do
  read -r wall kb < "$out/$n.time"
  h=$(hops $n)
  printf '%-5s %10.1f %12.0f %14.3f\n' $n "$wall" "$(echo "$kb/1024" | bc -l)" "$(echo "$h/$wall/1000000" | bc -l)"
done
read -r ow okb < "$out/old.time"; read -r nw nkb < "$out/new.time"
echo "new/old: wall $(echo "$nw/$ow" | bc -l | cut -c1-5)x, peak RSS $(echo "$nkb/$okb" | bc -l | cut -c1-5)x (speed-up $(echo "$ow/$nw" | bc -l | cut -c1-5)x)"
python3 - "$out/old.json" "$out/new.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
drop = {"sim_ms", "wall_s"}
strip = lambda d: {k: v for k, v in (d.items() if isinstance(d, dict) else {}) if k not in drop}
print("FCT reports identical" if strip(a) == strip(b) else "FCT reports differ")
PY
echo "outputs in $out"
