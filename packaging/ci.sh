#!/bin/bash
# Every Debian packaging check, in order, for .ci/run (as root).
#
#   packaging/ci.sh
#
#   build-deb.sh          build, lintian (no E/W), two builds bit-identical
#   debian-deps-test.sh   the test suite on Debian 12's own libraries
#   autopkgtest.sh        debian/tests against the built .deb (null runner)
#   venv-test.sh          packaged debtorch inspects a torch==2.13.0 venv
#   clean-room.sh SUITE   install/run/purge on minimal Debian, for each of
#                         CLEANROOM_SUITES (default: "bookworm trixie")
#   apt_names.py          every Debian package the doctor's fixes name, in the
#                         archive as checks/debian_packages.toml says: apt-cache
#                         show and apt-get install -s on an empty system of each
#                         release and architecture (APT_NAMES=0 skips it)
#
# Stops at the first failure; prints each step's wall time at the end.
set -euo pipefail
# shellcheck source=packaging/lib.sh
. "$(dirname "$0")/lib.sh"

need_root
HERE=$(cd "$(dirname "$0")" && pwd)
summary=()
step() {
    local name=$1 t
    shift
    say "=== $name"
    t=$(now)
    "$@"
    summary+=("$(printf '%-26s %6s s' "$name" "$(took "$t")")")
}
T0=$(now)
step build-deb "$HERE/build-deb.sh"
step debian-deps-test "$HERE/debian-deps-test.sh"
step autopkgtest "$HERE/autopkgtest.sh"
step venv-test "$HERE/venv-test.sh"
for suite in ${CLEANROOM_SUITES:-bookworm trixie}; do
    step "clean-room $suite" "$HERE/clean-room.sh" "$suite"
done
if [ "${APT_NAMES:-1}" != 0 ]; then
    step apt-names clean_env /usr/bin/python3 "$HERE/apt_names.py"
fi
say "=== all Debian packaging checks passed"
printf '  %s\n' "${summary[@]}" "$(printf '%-26s %6s s' total "$(took "$T0")")" >&2
