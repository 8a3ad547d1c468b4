#!/bin/bash
# Time README.md's commands on a fresh clone, as docs/walkthrough.md's table lists them.
#
#   benchmarks/walkthrough_times.sh [REPO] > times.md
#
# REPO (default: this checkout) is cloned into a new temporary folder; each command runs there in turn
# and prints one Markdown row: what was typed, its wall time, the 1-minute load average before it, and
# its exit status.  About 8 minutes on 2 CPUs (the first ./dev.sh makes .venv and installs torch; the
# measured tune spends its 120 s budget; the fast tier).  Read the load column: these machines are shared.
set -uo pipefail
REPO=$(cd "${1:-$(dirname "$0")/..}" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/debtorch-walkthrough.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

row() {   # row "what the user types" command...
    local what=$1 load t0 t1 rc ms
    shift
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s%N)
    "$@" >"$WORK/last.out" 2>&1
    rc=$?
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    printf '| `%s` | %d.%d s | %s | %s |\n' "$what" $((ms / 1000)) $((ms % 1000 / 100)) "$load" "$rc"
}

echo "Machine: $(nproc) usable CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%F)"
echo
echo "| what you type | took | load (1 min) before | exit status |"
echo "|---|---:|---:|---:|"
row "git clone ... debtorch" git clone -q "$REPO" "$WORK/debtorch"
cd "$WORK/debtorch" || exit 1
DT=.venv/bin/debtorch
row "./dev.sh doctor (first time: makes .venv, installs debtorch and torch)" ./dev.sh doctor
row "./dev.sh doctor (again)" ./dev.sh doctor
row "$DT facts" $DT facts
row "$DT doctor -v" $DT doctor -v
row "$DT doctor --redact" $DT doctor --redact
row "$DT tune" $DT tune
row "$DT tune --write debtorch.toml" $DT tune --write debtorch.toml
row "$DT tune --measure --budget 120 --write measured.toml" $DT tune --measure --budget 120 --write measured.toml
row "$DT tune --measure --device sim:800 --workload builtin:images --budget 60 --write sim.toml" \
    $DT tune --measure --device sim:800 --workload builtin:images --budget 60 --write sim.toml
row "$DT verify-train --quick" $DT verify-train --quick
row "$DT verify-train --config measured.toml --quick" $DT verify-train --config measured.toml --quick
row "$DT verify-train --device sim:800 --workload builtin:images --quick" \
    $DT verify-train --device sim:800 --workload builtin:images --quick
row "$DT lint docs/examples/train_with_debtorch.py" $DT lint docs/examples/train_with_debtorch.py
$DT facts --json >node-a.json 2>/dev/null
cp node-a.json node-b.json
row "$DT fleet node-a.json node-b.json" $DT fleet node-a.json node-b.json
row ".venv/bin/python docs/examples/train_with_debtorch.py --config debtorch.toml --steps 200" \
    .venv/bin/python docs/examples/train_with_debtorch.py --config debtorch.toml --steps 200
row "./dev.sh test -m \"not slow\" (the fast tier)" ./dev.sh test -q -m "not slow"
tail -n 1 "$WORK/last.out" | sed 's/^/fast tier: /'
