#!/bin/bash
# The packaged debtorch, on Debian's /usr/bin/python3, inspects a venv that
# holds torch==2.13.0 (the CPU build) and reports that torch correctly.
#
#   packaging/venv-test.sh [DEB]     # as root: installs the .deb with apt
#
# 1. A venv made with pyenv's Python 3.11 (VENV_PYTHON to choose another),
#    with pip install torch==2.13.0; kept in out/cache/venv-torch-2.13.0
#    for the next run (VENV=DIR to use another one).
# 2. apt-get installs the .deb on this machine (purged again on exit if it
#    was not installed before); /usr/bin/debtorch must run on /usr/bin/python3.
# 3. In a clean environment, asserts on
#    debtorch facts --json --python VENV/bin/python: the venv is seen as a
#    venv, torch 2.13.0+cpu, variant cpu, CPU-only, no CUDA/ROCm;
#    the same with VENV activated (VIRTUAL_ENV) and no --python;
#    with --deep: torch imported in the venv, CUDA not available, and a
#    matmul and a convolution ran on the CPU.
set -euo pipefail
# shellcheck source=packaging/lib.sh
. "$(dirname "$0")/lib.sh"

TORCH=2.13.0
need_root
DEB=$(readlink -f "${1:-$(find_deb)}")
VENV=${VENV:-$ROOT/out/cache/venv-torch-$TORCH}
T0=$(now)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/debtorch-venv.XXXXXX")
mkdir -p "$WORK/home"
CLEAN_HOME=$WORK/home
restore_on_exit "$WORK"

# 1. The venv.
t=$(now)
if [ ! -x "$VENV/bin/python" ] || ! ls "$VENV"/lib/python*/site-packages/torch-"$TORCH"*.dist-info >/dev/null 2>&1; then
    py=${VENV_PYTHON:-}
    if [ -z "$py" ]; then
        pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
        py=$(ls -d "$pyenv_root"/versions/3.11*/bin/python3.11 2>/dev/null | sort -V | tail -n 1)
    fi
    if [ -z "$py" ] || [ ! -x "$py" ]; then
        die "no Python 3.11 to make the venv with (set VENV_PYTHON)"
    fi
    say "making $VENV with $py and torch==$TORCH"
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q "torch==$TORCH" >"$WORK/pip.log" 2>&1 || {
        cat "$WORK/pip.log" >&2
        die "pip install torch==$TORCH failed"
    }
fi
T_VENV=$(took "$t")

# 2. The package.
t=$(now)
clean_env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$DEB" >"$WORK/install.log" 2>&1 || {
    cat "$WORK/install.log" >&2
    die "apt-get install $DEB failed"
}
T_INSTALL=$(took "$t")
[ "$(head -n 1 /usr/bin/debtorch)" = "#!/usr/bin/python3" ] || die "/usr/bin/debtorch does not run on /usr/bin/python3: $(head -n 1 /usr/bin/debtorch)"

# 3. What it says about the venv.
t=$(now)
clean_env /usr/bin/debtorch facts --json --python "$VENV/bin/python" >"$WORK/given.json"
clean_env VIRTUAL_ENV="$VENV" /usr/bin/debtorch facts --json >"$WORK/activated.json"
clean_env /usr/bin/debtorch facts --json --deep --python "$VENV/bin/python" >"$WORK/deep.json"
T_RUN=$(took "$t")

/usr/bin/python3 - "$VENV" "$TORCH" "$WORK" <<'PY' || die "the report on the venv is wrong (above)"
import json, os, sys

venv, want, work = sys.argv[1], sys.argv[2], sys.argv[3]
failed = []

def check(what, ok, got):
    print(f"  {'ok ' if ok else 'BAD'} {what}: {got}", file=sys.stderr)
    if not ok:
        failed.append(what)

for name in ("given", "activated", "deep"):
    doc = json.load(open(os.path.join(work, name + ".json")))
    py = doc["python"]
    t = py.get("torch") or {}
    print(f"{name}:", file=sys.stderr)
    check("interpreter", os.path.realpath(py.get("prefix") or "") == os.path.realpath(venv), py.get("prefix"))
    check("is a venv", py.get("venv") is True, py.get("venv"))
    check("torch installed", t.get("installed") is True, t.get("installed"))
    check("torch version", t.get("version") == want + "+cpu", t.get("version"))
    check("variant", t.get("variant") == "cpu", t.get("variant"))
    check("CPU-only", t.get("cpu_only") is True and not t.get("cuda") and not t.get("hip"), (t.get("cpu_only"), t.get("cuda"), t.get("hip")))
    if name == "deep":
        deep = py.get("deep") or {}
        check("deep probe imported torch", deep.get("version") == want + "+cpu", deep.get("version") or deep.get("errors"))
        check("CUDA not available", deep.get("cuda_available") is False, deep.get("cuda_available"))
        cpu = (deep.get("exercise") or {}).get("cpu") or {}
        check("matmul and conv on the CPU", cpu.get("matmul") == "ok" and cpu.get("conv") == "ok", cpu)
sys.exit(1 if failed else 0)
PY
say "OK: /usr/bin/debtorch (Debian's python3) reports torch $TORCH+cpu, CPU-only, in $VENV"
say "timings (s): venv $T_VENV, install $T_INSTALL, three facts runs $T_RUN, total $(took "$T0")"
