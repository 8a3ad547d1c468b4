#!/bin/bash
# Install the .deb on a minimal Debian system and remove it again.
#
#   packaging/clean-room.sh [SUITE] [DEB]    # as root; SUITE: bookworm (default) or trixie
#
# 1. debootstrap --variant=minbase SUITE into a temporary folder, from
#    deb.debian.org (main, SUITE-updates, SUITE-security); installs man-db.
#    Downloaded .debs are kept in out/cache/ for the next run (CACHE= to
#    download afresh).
# 2. apt-get satisfy installs the .deb's Depends from Debian main, then
#    lists every file of that system (before).
# 3. apt-get installs the .deb there (it must pull nothing else), then runs
#    inside it, on its own /usr/bin/python3:
#    debtorch --version (must equal the package version),
#    debtorch doctor --json (debtorch facts --json while this branch has no
#    doctor) — one JSON document with a schema_version,
#    man debtorch — must render and list every command.
# 4. apt-get purge debtorch, lists the files again (after) and fails if
#    anything was added or removed (apt/dpkg state, logs and caches
#    excluded): nothing of debtorch is left behind.
# 5. Installs it again with python3-pytest and runs debian/tests/unit (the
#    test suite against the installed package) on SUITE's own Python and
#    libraries (UNIT=0 skips this).
# Runs in its own mount namespace: /proc and /sys mounted for the chroot
# vanish with the script whatever happens; the system is built on a tmpfs
# (TMPFS=0: on disk under /var/tmp, and KEEP=1 keeps it).
set -euo pipefail
# shellcheck source=packaging/lib.sh
. "$(dirname "$0")/lib.sh"

SUITE=${1:-bookworm}
DEB=${2:-}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
# Downloaded .debs are kept here between runs (CACHE= to download afresh).
CACHE=${CACHE-$ROOT/out/cache/clean-room-$SUITE}
SECURITY=${SECURITY:-http://deb.debian.org/debian-security}

need_root
if [ -z "${DEBTORCH_CLEANROOM_NS:-}" ]; then
    # Private mount namespace: nothing mounted here leaks to the host.
    exec unshare --mount --propagation private env DEBTORCH_CLEANROOM_NS=1 "$0" "$@"
fi
[ -n "$DEB" ] || DEB=$(find_deb)
DEB=$(readlink -f "$DEB")
VERSION=$(dpkg-deb -f "$DEB" Version)
apt_install debootstrap

T0=$(now)
WORK=$(mktemp -d /var/tmp/debtorch-cleanroom.XXXXXX)
R=$WORK/root
# The system lives in memory (about 400 MB): dpkg's many fsyncs and the
# final removal cost nothing there. TMPFS=0 puts it on disk instead.
if [ "${TMPFS:-1}" != 0 ]; then
    mount -t tmpfs -o size="${TMPFS_SIZE:-2g}",mode=0755 debtorch-cleanroom "$WORK"
fi

mounts_under() { awk -v r="$WORK" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r; }
cleanup() {
    local rc=$? m
    # Innermost first: /proc and /sys of the chroot, then the tmpfs itself.
    for m in $(mounts_under); do umount "$m" 2>/dev/null || umount -l "$m" || true; done
    if [ -n "$(mounts_under)" ]; then
        say "still mounted under $WORK; not removing it"
    elif [ -n "${KEEP:-}" ] && [ "${TMPFS:-1}" = 0 ]; then
        say "kept $WORK"
    else
        rm -rf --one-file-system "$WORK"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_root() { chroot "$R" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
# No pseudo-terminal for dpkg (the chroot has no /dev/pts).
apt_in_root() { in_root apt-get -o Dpkg::Use-Pty=0 "$@"; }

say "debootstrap --variant=minbase $SUITE"
t=$(now)
cache_opt=()
if [ -n "$CACHE" ]; then
    mkdir -p "$CACHE/debootstrap" "$CACHE/apt/partial"
    cache_opt=(--cache-dir="$CACHE/debootstrap")
fi
debootstrap "${cache_opt[@]}" --variant=minbase "$SUITE" "$R" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
    tail -n 30 "$WORK/debootstrap.log" >&2
    die "debootstrap failed"
}
T_BOOT=$(took "$t")

mount -t proc proc "$R/proc"
mount -t sysfs sysfs "$R/sys"
[ -z "$CACHE" ] || mount --bind "$CACHE/apt" "$R/var/cache/apt/archives"
cp /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
chmod 755 "$R/usr/sbin/policy-rc.d"
cat >"$R/etc/apt/sources.list" <<LIST
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
LIST

t=$(now)
apt_in_root update -qq
apt_in_root install -y -qq --no-install-recommends man-db >"$WORK/man-db.log" 2>&1 || { cat "$WORK/man-db.log" >&2; die "apt-get install man-db failed"; }
T_PREP=$(took "$t")

# The package's dependencies first, from Debian main (apt-get satisfy reads
# them from the .deb), so that "before" and "after" differ by debtorch alone.
say "apt-get satisfy: the dependencies of $(basename "$DEB") from $SUITE main"
t=$(now)
apt_in_root satisfy -y -qq --no-install-recommends "$(dpkg-deb -f "$DEB" Depends)" >"$WORK/deps.log" 2>&1 || {
    cat "$WORK/deps.log" >&2
    die "the dependencies of the .deb cannot be installed from $SUITE main"
}
T_DEPS=$(took "$t")

snapshot() { # every path with its type, minus state that apt, dpkg and logs keep, and the user's
    # cache (root's ~/.cache: what debtorch doctor caches there is the user's, as any program's is)
    (cd "$R" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./run -o -path ./tmp \
        -o -path ./var/lib/apt -o -path ./var/lib/dpkg -o -path ./var/cache -o -path ./var/log -o -path ./root/.cache \) -prune \
        -o -printf '%y %p\n' | sort)
}
snapshot >"$WORK/before"

say "apt-get install ./$(basename "$DEB") in $SUITE"
t=$(now)
cp "$DEB" "$R/tmp/"
apt_in_root install -y -qq --no-install-recommends "/tmp/$(basename "$DEB")" >"$WORK/install.log" 2>&1 || {
    cat "$WORK/install.log" >&2
    die "apt-get install of the .deb failed"
}
T_INSTALL=$(took "$t")
grep -q 'Setting up debtorch' "$WORK/install.log" || die "apt-get did not set up debtorch"
if grep 'Setting up ' "$WORK/install.log" | grep -v 'Setting up debtorch ' | grep .; then
    die "installing the .deb pulled more than the dependencies apt-get satisfy installed (above)"
fi
in_root dpkg-query -W -f='${Package} ${Version}\n' debtorch python3 python3-typer python3-rich 2>/dev/null | sed 's/^/  /' >&2

t=$(now)
out=$(in_root debtorch --version)
[ "$out" = "debtorch $VERSION" ] || die "debtorch --version says '$out', the package is $VERSION"
say "debtorch --version: $out"

if in_root debtorch doctor --help >/dev/null 2>&1; then cmd=doctor; else cmd=facts; fi
set +e
in_root debtorch "$cmd" --json >"$WORK/report.json" 2>"$WORK/report.err"
rc=$?
set -e
# doctor exits 1 when it has findings (a chroot has some); 2 and up is a failure.
if [ "$rc" -gt 1 ] || { [ "$cmd" = facts ] && [ "$rc" -ne 0 ]; }; then
    cat "$WORK/report.err" >&2
    die "debtorch $cmd --json exited $rc"
fi
/usr/bin/python3 - "$WORK/report.json" "$cmd" <<'PY' || die "debtorch $cmd --json printed no valid report"
import json, sys
doc = json.load(open(sys.argv[1]))
assert isinstance(doc, dict) and doc.get("schema_version"), "no schema_version"
osinfo = doc.get("os") or (doc.get("facts") or {}).get("os") or {}
print(f"debtorch {sys.argv[2]} --json: schema_version {doc['schema_version']}, "
      f"{len(json.dumps(doc))} bytes, os {osinfo.get('id')} {osinfo.get('release')}", file=sys.stderr)
PY

page=$(in_root env MANWIDTH=80 MANPAGER=cat man debtorch 2>"$WORK/man.err") || { cat "$WORK/man.err" >&2; die "man debtorch failed"; }
grep -q '^NAME' <<<"$page" || die "man debtorch has no NAME section"
for c in $(in_root /usr/bin/python3 -c 'import typer.main; from debtorch.cli import app; print(" ".join(typer.main.get_command(app).commands))'); do
    grep -q "debtorch $c" <<<"$page" || die "man debtorch does not describe 'debtorch $c'"
done
say "man debtorch: $(wc -l <<<"$page") lines, every command described"
T_RUN=$(took "$t")

say "apt-get purge debtorch"
t=$(now)
apt_in_root purge -y -qq debtorch >"$WORK/purge.log" 2>&1 || { cat "$WORK/purge.log" >&2; die "purge failed"; }
T_PURGE=$(took "$t")
snapshot >"$WORK/after"
if ! diff -u "$WORK/before" "$WORK/after" >"$WORK/leftover.diff"; then
    cat "$WORK/leftover.diff" >&2
    die "the system differs after purging debtorch (above: - gone, + left behind)"
fi
say "nothing left behind: $(wc -l <"$WORK/before") paths, same before install and after purge"

# 5. The autopkgtest unit test (debian/tests/unit: the test suite against
#    the installed package) on this release's Python and libraries.
T_UNIT=skipped
if [ "${UNIT:-1}" != 0 ]; then
    say "debian/tests/unit on $SUITE"
    t=$(now)
    apt_in_root install -y -qq --no-install-recommends "/tmp/$(basename "$DEB")" python3-pytest python3-hypothesis \
        bash-completion groff-base >"$WORK/unit-install.log" 2>&1 || { cat "$WORK/unit-install.log" >&2; die "installing the test dependencies failed"; }
    copy_tree "$R/tmp/unit/src"
    mkdir -p "$R/tmp/unit/tmp"
    chroot "$R" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 AUTOPKGTEST_TMP=/tmp/unit/tmp \
        sh -c 'cd /tmp/unit/src && debian/tests/unit' >"$WORK/unit.log" 2>&1 || { cat "$WORK/unit.log" >&2; die "debian/tests/unit fails on $SUITE"; }
    grep -E '[0-9]+ passed' "$WORK/unit.log" | tail -n 1 | sed "s/^/$SUITE unit: /" >&2
    T_UNIT=$(took "$t")
fi
say "OK on $SUITE; timings (s): debootstrap $T_BOOT, apt update + man-db $T_PREP, dependencies $T_DEPS, install $T_INSTALL, run $T_RUN, purge $T_PURGE, unit $T_UNIT, total $(took "$T0")"
