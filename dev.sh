#!/bin/sh
# Set up a development environment in .venv (idempotent), then run a job.
#   ./dev.sh doctor [ARGS]   set up, then run `debtorch doctor` on this machine
#   ./dev.sh test [ARGS]     set up, then run the test suite (pytest ARGS); what CI runs
#   ./dev.sh test -m "not slow"   the fast tier: no training, no worker (at most 90 s on 2 CPUs)
#   ./dev.sh check           set up, then the static checks: ruff, mypy (pyproject.toml says on what)
#   ./dev.sh setup           only set up
set -eu
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=.venv
# The CPU build of this PyTorch lies on the developers' and CI's disk; a user
# with a GPU gets the CUDA build from PyPI.  Pinned so pip never pulls an
# unexpected multi-GB build.
TORCH=${DEBTORCH_TORCH:-torch==2.13.0}

setup() {
    if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        echo "dev.sh: need Python >= 3.11 as '$PY' (Debian 12: sudo apt install python3)" >&2; exit 2
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        if ! "$PY" -m venv "$VENV" 2>/dev/null; then
            rm -rf "$VENV"
            echo "dev.sh: '$PY -m venv' failed; on Debian: sudo apt install python3-venv" >&2; exit 2
        fi
    fi
    stamp="$VENV/.debtorch-setup"
    want="$(cat pyproject.toml dev.sh | cksum)"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        "$VENV/bin/python" -m pip install -q --upgrade pip
        "$VENV/bin/python" -m pip install -q "$TORCH" -e ".[test,lint,plot,nvml,torch]"
        echo "$want" > "$stamp"
    fi
}

job=${1:-doctor}
[ $# -gt 0 ] && shift
case "$job" in
    setup) setup ;;
    doctor) setup; exec "$VENV/bin/debtorch" doctor "$@" ;;
    test) setup; exec "$VENV/bin/python" -m pytest "$@" ;;
    check) setup; "$VENV/bin/ruff" check . && exec "$VENV/bin/mypy" ;;
    *) echo "usage: ./dev.sh [doctor|test|check|setup] [ARGS]" >&2; exit 2 ;;
esac
