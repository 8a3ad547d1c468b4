# Shared by the packaging/*.sh scripts; source it, do not run it.
# shellcheck shell=bash

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEB_OUT=${DEB_OUT:-$ROOT/out/deb}

# Debian's own tools and Python, nothing from the caller's environment:
# pyenv shims first on PATH make pybuild run the wrong python3.
clean_env() {
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="${CLEAN_HOME:-/root}" LANG=C.UTF-8 \
        PYTHONNOUSERSITE=1 "$@"
}

say() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

need_root() {
    [ "$(id -u)" = 0 ] || die "run as root (it installs packages with apt)"
}

# apt_install PKG...: install what is missing, from Debian's archive.
APT_UPDATED=
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${db:Status-Status}\n' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    need_root
    say "apt-get install ${missing[*]}"
    if [ -z "$APT_UPDATED" ]; then
        clean_env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    clean_env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# copy_tree DEST: the files git knows (tracked, and untracked but not
# ignored) of this checkout, with their modification times.
copy_tree() {
    mkdir -p "$1"
    (cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$1"
}

deb_version() { sed -n '1s/^debtorch (\([^)]*\)).*/\1/p' "$ROOT/debian/changelog"; }

# find_deb: the .deb built by build-deb.sh for the version in debian/changelog.
find_deb() {
    local deb
    deb="$DEB_OUT/debtorch_$(deb_version)_all.deb"
    [ -f "$deb" ] || die "$deb not found: run packaging/build-deb.sh first"
    printf '%s\n' "$deb"
}

# restore_on_exit DIR, for scripts that install the .deb on this machine:
# on exit, purge debtorch unless it was installed before, and remove DIR.
debtorch_installed() { dpkg-query -W -f='${db:Status-Status}' debtorch 2>/dev/null | grep -qx installed; }
restore_on_exit() {
    RESTORE_DIR=$1
    DEBTORCH_WAS_INSTALLED=$(debtorch_installed && echo 1 || true)
    trap _restore EXIT
}
_restore() {
    local rc=$?
    if [ -z "$DEBTORCH_WAS_INSTALLED" ] && debtorch_installed; then
        clean_env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq debtorch >/dev/null 2>&1 || say "could not purge debtorch"
    fi
    rm -rf "$RESTORE_DIR"
    exit $rc
}
