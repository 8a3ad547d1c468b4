#!/bin/bash
# autopkgtest (debian/tests/control) of the built .deb, on this machine.
#
#   packaging/autopkgtest.sh [DEB]     # as root: the null runner installs on this host
#
# Runs "autopkgtest DEB SRC/ -- null" where SRC is a clean copy of this
# checkout (never built, so autopkgtest uses the given .deb and does not
# rebuild). The tests: smoke (superficial: --version, --help, facts --json,
# man page, completion) and unit (the test suite, copied away from the
# source, against the installed package with /usr/bin/python3).
# debtorch is purged again on exit if it was not installed before.
set -euo pipefail
# shellcheck source=packaging/lib.sh
. "$(dirname "$0")/lib.sh"

need_root
DEB=$(readlink -f "${1:-$(find_deb)}")
apt_install autopkgtest
T0=$(now)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/debtorch-autopkgtest.XXXXXX")
mkdir -p "$WORK/home"
CLEAN_HOME=$WORK/home
restore_on_exit "$WORK"

copy_tree "$WORK/src"
set +e
clean_env autopkgtest --output-dir "$WORK/out" "$DEB" "$WORK/src/" -- null >"$WORK/log" 2>&1
rc=$?
set -e
cp "$WORK/log" "$DEB_OUT/autopkgtest.log" 2>/dev/null || true
# autopkgtest exits 0 (all pass), 2 (some skipped), 8 (no tests); all else fails.
grep -E '^[a-z][a-z0-9_-]* +(PASS|FAIL|SKIP|FLAKY|BROKEN)' "$WORK/log" | sed 's/^/  /' >&2 || true
if [ $rc -ne 0 ]; then
    tail -n 60 "$WORK/log" >&2
    die "autopkgtest exited $rc"
fi
say "OK: autopkgtest passed in $(took "$T0") s"
