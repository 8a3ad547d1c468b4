#!/bin/sh
# The CUDA path of debtorch, for real, on a lent GPU machine: one run of at most
# about 14 minutes (8.5 without the truth check) that leaves its evidence in $OUT (a folder given by the
# environment; ./gpu-check-out when unset).
#
#   OUT=/some/dir PYTHON=/path/to/venv/bin/python sh benchmarks/gpu_check.sh
#
# What it runs (each step with a timeout, 8.5 minutes in all with one GPU; a step that runs out of
# time gets SIGINT, so verify-train still prints what it measured; a failed step is recorded and the
# rest go on):
#   nvidia-smi, `debtorch facts --json`, `debtorch doctor --deep --json`;
#   verify-train on cuda, tuned by the rules (bf16 autocast on compute capability >= 8.0,
#     pinned memory, non-blocking copies, workers, NVML utilisation), with --plot and --profile;
#   verify-train with the same settings at fp16 (autocast + GradScaler);
#   verify-train on a workload that really runs out of GPU memory at its micro-batch
#     (the halving search for what fits);
#   verify-train counting host waits per step with torch.cuda.set_sync_debug_mode on a workload
#     that waits on three known lines (debtorch lint's measured side, issue 15);
#   cfg.watch's CUDA path (benchmarks/watch_cuda_check.py: events read lazily, syncs counted, overhead);
#   verify-train --nproc N with nccl when N >= 2 GPUs are visible;
#   the simulated accelerator's truth check (issue 20, about 5 minutes; alone: `sh benchmarks/gpu_check.sh truth`):
#     benchmarks/sim_truth.py measures the GPU's compute rate for builtin:images, the host's launch time and the
#     pinned copy bandwidth, compares data-wait shares and shares of that rate on the GPU and on sim:RATE, and
#     names the parameter that is wrong when they differ by more than 10 points; then verify-train on the GPU
#     and on sim:RATE with the same loader-only config, their data-wait shares side by side.
# $OUT/summary.txt lists every step, its exit code and its verdict line.  Without a GPU the truth check
# fails loudly (exit 77 from sim_truth.py, "FAILED" in the summary).
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in "$ROOT/.venv/bin/python" "${VIRTUAL_ENV:-/nonexistent}/bin/python" python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch" >/dev/null 2>&1; then PY=$cand; break; fi
  done
fi
PY=${PY:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME SECONDS CMD...: run CMD with stdout to $OUT/NAME.out, stderr to $OUT/NAME.err.
step() {
  name=$1; secs=$2; shift 2
  start=$(date +%s)
  timeout -s INT -k 20 "$secs" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  rc=$?
  note "$name: exit $rc in $(( $(date +%s) - start )) s"
  return 0
}

verdict() {  # the verdict of a verify-train JSON document
  "$PY" -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("  (no JSON: %s)" % e); sys.exit()
print("  verdict:", d.get("verdict"))
s = d.get("summary") or {}
for arm in ("baseline", "tuned"):
    a = s.get(arm) or {}
    print("  %s: %s samples/s, data wait %s, GPU util %s, peak device %s" % (arm, a.get("samples_per_s"),
          a.get("data_wait_share"), a.get("gpu_util"), a.get("peak_device_bytes")))
if d.get("failure"):
    print("  failure:", d["failure"].get("message"))
' "$1" | tee -a "$SUMMARY"
}

# The simulated accelerator against the real GPU (issue 20).
truth() {
  step sim-truth 330 "$PY" benchmarks/sim_truth.py --out "$OUT/truth"
  sed -n '/^GPU compute rate/,/^verdict/p' "$OUT/sim-truth.out" | tee -a "$SUMMARY"
  if ! [ -s "$OUT/truth/sim-rate" ]; then
    note "sim-truth: FAILED: no rate measured (no GPU, or the check broke: $OUT/sim-truth.err)"
    return 1
  fi
  RATE=$(cat "$OUT/truth/sim-rate")
  for dev in cuda "sim:$RATE"; do
    name=verify-truth-$(echo "$dev" | cut -d: -f1)
    step "$name" 150 "$PY" -m debtorch verify-train --device "$dev" --workload builtin:images --json --repeats 3 \
      --steps 20 --max-steps 0 --budget 120 --config "$OUT/truth/loader.toml"
    cp "$OUT/$name.out" "$OUT/$name.json" 2>/dev/null
  done
  "$PY" -c 'import json,sys
def shares(path):
    try:
        s = json.load(open(path)).get("summary") or {}
    except Exception as e:
        return {"error": str(e)}
    return {arm: (s.get(arm) or {}).get("data_wait_share") for arm in ("baseline", "tuned", "tuned_sync")}
gpu, sim = shares(sys.argv[1]), shares(sys.argv[2])
print("  verify-train data wait, GPU (every step synced by its clocks) vs sim: baseline %s vs %s, tuned %s vs %s "
      "(sim, loss read every step: %s)" % (gpu.get("baseline"), sim.get("baseline"), gpu.get("tuned"), sim.get("tuned"),
                                           sim.get("tuned_sync")))
' "$OUT/verify-truth-cuda.json" "$OUT/verify-truth-sim.json" | tee -a "$SUMMARY"
}

note "debtorch gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) python=$PY"
"$PY" -c 'import sys, torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "gpus", torch.cuda.device_count())' >> "$SUMMARY" 2>&1
"$PY" -c 'import pynvml; print("nvidia-ml-py", getattr(pynvml, "__version__", "?"))' >> "$SUMMARY" 2>&1 || note "nvidia-ml-py missing: no NVML utilisation samples"
"$PY" -c 'import typer, rich, packaging, tomlkit' >> "$SUMMARY" 2>&1 || note "debtorch's own dependencies are missing from $PY: the debtorch steps below will fail"
if [ "${1:-}" = truth ]; then
  truth; rc=$?
  note "done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  exit $rc
fi

step nvidia-smi 15 nvidia-smi
step nvidia-smi-topo 15 nvidia-smi topo -m
step facts 30 "$PY" -m debtorch facts --json
cp "$OUT/facts.out" "$OUT/facts.json" 2>/dev/null
step doctor-deep 90 "$PY" -m debtorch doctor --deep --json
cp "$OUT/doctor-deep.out" "$OUT/doctor-deep.json" 2>/dev/null

# Rules-tuned (bf16 on >= 8.0, pinned memory, non-blocking copies, workers) against PyTorch's defaults.
step verify-bf16 120 "$PY" -m debtorch verify-train --device cuda --json --repeats 3 --steps 20 --max-steps 250 \
  --plot "$OUT/verify-bf16.png" --profile "$OUT/profile-bf16" --force
cp "$OUT/verify-bf16.out" "$OUT/verify-bf16.json" 2>/dev/null
verdict "$OUT/verify-bf16.json"

# The same settings at fp16 (autocast + GradScaler), from a tune-written config edited by hand.
rm -f "$OUT/fp16.toml"
step tune-write 30 "$PY" -m debtorch tune --device cuda --steps 250 --write "$OUT/fp16.toml"
if [ -f "$OUT/fp16.toml" ]; then
  sed -i 's/^precision = .*/precision = "fp16"/' "$OUT/fp16.toml"
  step verify-fp16 90 "$PY" -m debtorch verify-train --device cuda --json --repeats 3 --steps 20 --max-steps 250 \
    --config "$OUT/fp16.toml"
  cp "$OUT/verify-fp16.out" "$OUT/verify-fp16.json" 2>/dev/null
  verdict "$OUT/verify-fp16.json"
fi

# A real CUDA out-of-memory: the micro-batch is halved until a step fits (exit 1 expected).
(cd "$ROOT/benchmarks" && step verify-oom 60 "$PY" -m debtorch verify-train --device cuda --quick --json \
  --workload gpu_workloads:hungry)
cp "$OUT/verify-oom.out" "$OUT/verify-oom.json" 2>/dev/null
verdict "$OUT/verify-oom.json"

# Host waits per step (issue 15): verify-train counts synchronising CUDA calls with
# torch.cuda.set_sync_debug_mode("warn") and names the workload's lines; gpu_workloads:waits waits on
# three known lines (an .item(), a Python branch on a tensor, a float() of the loss), once per step each.
(cd "$ROOT/benchmarks" && step verify-waits 60 "$PY" -m debtorch verify-train --device cuda --quick --json \
  --max-steps 0 --workload gpu_workloads:waits)
cp "$OUT/verify-waits.out" "$OUT/verify-waits.json" 2>/dev/null
"$PY" -c 'import json,sys
try:
    w = (json.load(open(sys.argv[1])) or {}).get("host_waits") or {}
except Exception as e:
    print("  host waits: no JSON (%s)" % e); sys.exit()
lines = {x["line"]: x["per_step"] for x in w.get("lines") or []}
want = {43: 1.0, 44: 1.0, 51: 1.0}   # benchmarks/gpu_workloads.py
ok = w.get("measured") and all(abs(lines.get(k, 0) - v) < 1e-9 for k, v in want.items())
print("  host waits: measured=%s per_step=%s lines=%s elsewhere=%s -> %s" % (w.get("measured"), w.get("per_step"),
      sorted(lines.items()), w.get("elsewhere_per_step"), "as expected" if ok else "NOT as expected %s" % want))
' "$OUT/verify-waits.json" | tee -a "$SUMMARY"

# cfg.watch on CUDA: events read lazily (no added sync), host syncs counted, overhead on a 10 ms GPU step.
step watch-cuda 120 "$PY" benchmarks/watch_cuda_check.py
cp "$OUT/watch-cuda.out" "$OUT/watch-cuda.json" 2>/dev/null
"$PY" -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("  watch: no JSON (%s)" % e); sys.exit()
print("  watch:", d.get("failures") or "as expected", "share", (d.get("share") or {}).get("data_wait"),
      "overhead", (d.get("overhead") or {}).get("cost"))' "$OUT/watch-cuda.json" | tee -a "$SUMMARY"

# More than one GPU: DDP over nccl through torch.distributed.run.
NGPU=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${NGPU:-0}" -ge 2 ]; then
  step verify-ddp 90 "$PY" -m debtorch verify-train --device cuda --json --quick --max-steps 0 --nproc "$NGPU"
  cp "$OUT/verify-ddp.out" "$OUT/verify-ddp.json" 2>/dev/null
  verdict "$OUT/verify-ddp.json"
else
  note "verify-ddp: skipped ($NGPU GPU visible; nccl needs one GPU per process)"
fi
truth
note "done $(date -u +%Y-%m-%dT%H:%M:%SZ)"
