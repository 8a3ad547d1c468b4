#!/bin/bash
# Build debtorch_<version>_all.deb with Debian's own tools, lint it, and
# check that the build is reproducible.
#
#   packaging/build-deb.sh            # as root: installs what debian/control needs
#
# 1. apt-get installs the Build-Depends of debian/control, and lintian.
# 2. Builds the source package and the .deb (dpkg-buildpackage -us -uc -b)
#    in a copy of this checkout, in a clean environment (no pyenv shims).
#    The build runs the test suite on Debian's libraries (pybuild) and
#    generates the man page and bash completion from the CLI.
# 3. Fails if the build log has an error that does not stop the build
#    (dh_python3 prints errors and exits 0), or the .deb lacks the man page,
#    the completion, or any checks/ file of the source.
# 4. lintian on the source and binary packages: fails on any E: or W: tag.
# 5. Builds again in another folder, with another umask, time zone and
#    locale (and without the tests), and compares the two .deb files' sha256.
# The .deb, .buildinfo, .changes, build log and lintian report land in
# out/deb/ (DEB_OUT). Timings are printed at the end.
set -euo pipefail
# shellcheck source=packaging/lib.sh
. "$(dirname "$0")/lib.sh"

T0=$(now)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/debtorch-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/home" "$DEB_OUT"
CLEAN_HOME=$WORK/home
VERSION=$(deb_version)
DEB=debtorch_${VERSION}_all.deb

t=$(now)
if ! clean_env dpkg-checkbuilddeps "$ROOT/debian/control" >/dev/null 2>&1 || ! command -v lintian >/dev/null; then
    need_root
    clean_env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    (cd "$ROOT" && clean_env DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq ./ >/dev/null)
    apt_install lintian dpkg-dev fakeroot
fi
T_DEPS=$(took "$t")

build() { # build DIR [env assignments...]: copy, build, leave the .deb in DIR
    local dir=$1; shift
    copy_tree "$dir/src"
    (cd "$dir/src" && clean_env "$@" dpkg-buildpackage -us -uc -b >"$dir/build.log" 2>&1) || {
        tail -n 40 "$dir/build.log" >&2
        die "dpkg-buildpackage failed (log above)"
    }
    if grep -nE '^(E|dh_[a-z0-9_]+: error):|^E: ' "$dir/build.log" >&2; then
        die "the build log has errors (above), although the build exited 0"
    fi
    [ -f "$dir/$DEB" ] || die "no $DEB after the build"
}

say "building $DEB"
t=$(now)
build "$WORK/1"
T_BUILD=$(took "$t")
grep -E '[0-9]+ passed' "$WORK/1/build.log" | tail -n 1 | sed 's/^/tests at build time: /' >&2 || true

# What must be in the package.
dpkg-deb -c "$WORK/1/$DEB" | awk '{print $NF}' | sed 's|^\./||' >"$WORK/contents"
for f in usr/bin/debtorch usr/share/man/man1/debtorch.1.gz usr/share/bash-completion/completions/debtorch \
         usr/lib/python3/dist-packages/debtorch/cli/__init__.py usr/share/doc/debtorch/copyright; do
    grep -qx "$f" "$WORK/contents" || die "$DEB lacks /$f"
done
if [ -d "$ROOT/checks" ]; then
    (cd "$ROOT" && find checks -type f -name '*.toml' | sort) | while read -r f; do
        grep -qx "usr/share/debtorch/$f" "$WORK/contents" || die "$DEB lacks /usr/share/debtorch/$f"
    done
    if grep -E '^usr/share/debtorch/checks/.+' "$WORK/contents" | grep -q . &&
       grep -E '^usr/lib/python3/dist-packages/debtorch/_data/checks/.+' "$WORK/contents" | grep -q .; then
        die "$DEB has the checks/ data twice"
    fi
fi
dpkg-deb -f "$WORK/1/$DEB" Depends | sed 's/^/Depends: /' >&2

# lintian on the source package (debian/ itself: copyright, tests/control)
# and on the binary package.
say "lintian"
t=$(now)
copy_tree "$WORK/src/debtorch-$VERSION"
(cd "$WORK/src/debtorch-$VERSION" && clean_env dpkg-source -b . >/dev/null 2>&1) || die "dpkg-source -b failed"
root_flag=()
[ "$(id -u)" = 0 ] && root_flag=(--allow-root)
set +e
clean_env lintian "${root_flag[@]}" -EIL +pedantic --tag-display-limit 0 \
    "$WORK/src/debtorch_${VERSION}.dsc" "$WORK/1/debtorch_${VERSION}_"*.changes >"$WORK/lintian.txt" 2>&1
set -e
T_LINT=$(took "$t")
cp "$WORK/lintian.txt" "$DEB_OUT/lintian.txt"
sed 's/^/  /' "$WORK/lintian.txt" >&2
if grep -E '^[EW]: ' "$WORK/lintian.txt" >/dev/null; then
    die "lintian reports errors or warnings (above)"
fi
if grep -vE '^[IPXOCN]: ' "$WORK/lintian.txt" | grep -q .; then
    die "lintian did not run cleanly (above)"
fi

say "building again, elsewhere, to compare"
t=$(now)
# nocheck: the tests ran in the first build and do not change what is built.
(umask 0002; build "$WORK/2/another/path" TZ=Asia/Tokyo LC_ALL=fr_FR.UTF-8 DEB_BUILD_OPTIONS=nocheck)
T_BUILD2=$(took "$t")
sum1=$(sha256sum <"$WORK/1/$DEB" | cut -d' ' -f1)
sum2=$(sha256sum <"$WORK/2/another/path/$DEB" | cut -d' ' -f1)
if [ "$sum1" != "$sum2" ]; then
    diff <(dpkg-deb -c "$WORK/1/$DEB") <(dpkg-deb -c "$WORK/2/another/path/$DEB") >&2 || true
    diff <(dpkg-deb -I "$WORK/1/$DEB") <(dpkg-deb -I "$WORK/2/another/path/$DEB") >&2 || true
    die "two builds differ: $sum1 vs $sum2"
fi

cp "$WORK/1/$DEB" "$WORK/1/build.log" "$WORK/1/"*.buildinfo "$WORK/1/"*.changes "$DEB_OUT/"
echo "$sum1  $DEB" >"$DEB_OUT/$DEB.sha256"
say "OK $DEB_OUT/$DEB ($(stat -c %s "$DEB_OUT/$DEB") bytes), reproducible: sha256 $sum1"
say "timings (s): build-deps $T_DEPS, build $T_BUILD, lintian $T_LINT, second build $T_BUILD2, total $(took "$T0")"
