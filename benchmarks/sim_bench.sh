#!/bin/sh
# Issue 20's measurements, on a quiet machine, in one command (51 min on a quiet 2-CPU Xeon with BUDGET=150):
#
#   OUT=sim-bench-out PYTHON=.venv/bin/python sh benchmarks/sim_bench.sh
#
# 1. benchmarks/tune_bench.py --device sim: one loader process's decoding rate of builtin:images
#    (measured first, printed), then at 1.5x and 3x that rate: 5 `tune --measure` runs, the grid,
#    the re-measured oracle against the fixed rules, each pick's share of the oracle and of the
#    device (42 min at BUDGET=150);
# 2. at each rate, `debtorch tune --measure --device sim:RATE --write` and verify-train with that
#    config (benchmarks/verify_train_bench.py: the speed-up over PyTorch's defaults, tuned's share
#    of the device, the input-bound line, the per-step sync's cost against the model; about 5 min
#    each);
# 3. with BUSY=1, verify-train at 1.5x again beside two busy loops (it must say "inconclusive" only
#    when its interval spans 1; about 3 min).
# Results: $OUT/*.md (tables) and $OUT/*.json (every number).
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-sim-bench-out}
BUDGET=${BUDGET:-240}
mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

log "tune_bench on a simulated accelerator (load average $(cut -d' ' -f1 /proc/loadavg))"
"$PY" benchmarks/tune_bench.py --device sim --workloads images --budget "$BUDGET" --measure-runs 5 --grid-repeats 1 \
  --final-repeats 5 --json "$OUT/tune-bench.json" > "$OUT/tune-bench.md"
SPECS=$("$PY" -c 'import json, sys
print(" ".join(w["sim"]["device"] for w in json.load(open(sys.argv[1]))["workloads"]))' "$OUT/tune-bench.json")
FIRST=
for spec in $SPECS; do
  rate=$(echo "$spec" | sed 's/^sim:\([^,]*\),.*/\1/')
  FIRST=${FIRST:-$spec}
  log "tune --measure and verify-train at sim:$rate"
  "$PY" -m debtorch tune --measure --device "$spec" --workload builtin:images --budget "$BUDGET" \
    --write "$OUT/tuned-$rate.toml" --force > "$OUT/tune-$rate.txt"
  "$PY" benchmarks/verify_train_bench.py --device "$spec" --config "$OUT/tuned-$rate.toml" --workload builtin:images \
    --repeats 7 --steps 30 --budget 900 --json "$OUT/verify-$rate.json" > "$OUT/verify-$rate.md"
done
if [ "${BUSY:-0}" = 1 ] && [ -n "$FIRST" ]; then
  rate=$(echo "$FIRST" | sed 's/^sim:\([^,]*\),.*/\1/')
  log "verify-train at sim:$rate beside two busy loops"
  sh -c 'while :; do :; done' & b1=$!
  sh -c 'while :; do :; done' & b2=$!
  "$PY" benchmarks/verify_train_bench.py --device "$FIRST" --config "$OUT/tuned-$rate.toml" --workload builtin:images \
    --repeats 7 --steps 30 --budget 900 --quiet 9 --max-wait 0 --json "$OUT/verify-busy-$rate.json" \
    > "$OUT/verify-busy-$rate.md" || true
  kill "$b1" "$b2"
fi
log "done: $OUT"
