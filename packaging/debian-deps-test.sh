#!/bin/bash
# The project's test suite on Debian 12's own libraries: catches code that
# works only with newer PyPI versions (typer 0.7.0, rich 13.3, packaging 23.0,
# tomlkit 0.11.7, click 8.1.3 on Python 3.11).
#
#   packaging/debian-deps-test.sh [PYTEST ARGS...]    # as root: installs with apt
#
# 1. apt-get installs the Debian packages of debtorch's runtime dependencies
#    (the second column of debian/py3dist-overrides, which a test keeps in
#    step with pyproject.toml), python3-pytest, python3-hypothesis, and
#    bash-completion and groff-base for the man page and completion tests.
# 2. Checks that /usr/bin/python3 imports each of them from Debian's
#    /usr/lib/python3/dist-packages (nothing from pip, /usr/local or a
#    user site) and prints their versions.
# 3. Runs pytest on this checkout's tests and code with /usr/bin/python3 in a
#    clean environment. Tests that need torch skip (Debian 12's python3 has
#    none unless python3-torch is installed).
set -euo pipefail
# shellcheck source=packaging/lib.sh
. "$(dirname "$0")/lib.sh"

T0=$(now)
mapfile -t runtime < <(sed -e 's/#.*//' -e 's/;.*//' "$ROOT/debian/py3dist-overrides" | awk 'NF >= 2 { print $2 }')
[ ${#runtime[@]} -gt 0 ] || die "no packages in debian/py3dist-overrides"
apt_install "${runtime[@]}" python3-pytest python3-hypothesis bash-completion groff-base
T_APT=$(took "$T0")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/debtorch-debdeps.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/home"
CLEAN_HOME=$WORK/home

modules=(typer click rich packaging tomlkit pytest hypothesis)
(cd "$WORK" && clean_env /usr/bin/python3 - "${modules[@]}" <<'PY') || die "a library does not come from Debian's packages (above)"
import importlib, importlib.metadata as md, sys
bad = False
for name in sys.argv[1:]:
    mod = importlib.import_module(name)
    where = getattr(mod, "__file__", "") or ""
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        version = getattr(mod, "__version__", "?")
    ok = where.startswith("/usr/lib/python3/dist-packages/")
    bad |= not ok
    print(f"  {name:<11} {version:<10} {where}{'' if ok else '   <- not from a Debian package'}", file=sys.stderr)
print(f"  python      {sys.version.split()[0]}", file=sys.stderr)
sys.exit(bad)
PY

cd "$ROOT"
t=$(now)
set +e
clean_env PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
say "timings (s): apt $T_APT, pytest $(took "$t"), total $(took "$T0")"
[ $rc -eq 0 ] || die "the test suite fails on Debian's libraries (pytest exit $rc)"
say "OK: the test suite passes on Debian's own libraries"
