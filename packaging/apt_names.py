#!/usr/bin/python3
"""Check checks/debian_packages.toml against Debian's archive with real apt (issue 28).

    packaging/apt_names.py [--update] [--add NAME ...] [--suites bookworm,trixie]

For each release and architecture it builds a private APT state (its own sources list, lists,
cache and an empty dpkg status: nothing of this machine's), `apt-get update`s it from
deb.debian.org (main contrib non-free non-free-firmware, -updates, -security), then for every
package the table names: `apt-cache show` gives its Section (the component is its prefix:
"contrib/libs" is contrib, "libs" main) and `apt-get install -s` on an empty system must
resolve it and everything it depends on.  A row says where that holds: its component and the
architectures.  Without --update the script fails (exit 1) and prints the rows that differ;
with --update it writes the table with today's date.  --add puts a new package name in.

Needs no root (apt runs with its own Dir), only apt, the Debian archive keyring and the network.
Standard library only: it runs on Debian's python3 in CI (packaging/ci.sh).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "checks" / "debian_packages.toml"
MIRROR = os.environ.get("MIRROR", "http://deb.debian.org/debian")
SECURITY = os.environ.get("SECURITY", "http://deb.debian.org/debian-security")
COMPONENTS = "main contrib non-free non-free-firmware"
# The releases the table covers, and the architectures each releases (Debian's release notes:
# https://www.debian.org/releases/bookworm/ and /trixie/, "supported architectures").
RELEASES = {"12": ("bookworm", ["amd64", "arm64", "armel", "armhf", "i386", "mips64el", "ppc64el", "s390x"]),
            "13": ("trixie", ["amd64", "arm64", "armel", "armhf", "i386", "ppc64el", "riscv64", "s390x"])}
HEADER = """# Debian packages the doctor's fixes name, and where Debian's archive has them (issue 28;
# docs/checks.md, "How fixes are verified").  Written by packaging/apt_names.py --update from
# real apt: `apt-cache show` (the component is the Section's prefix) and `apt-get install -s`
# on an empty system, per release and architecture.  tests/test_apt_fixes.py checks every
# `apt install` of every fix against it; CI (packaging/ci.sh) runs the script and fails when
# the archive no longer agrees.  To name a new package in a fix:
#     packaging/apt_names.py --update --add NAME
#
# [[package]]
#   name           the binary package
#   release        the Debian release ("12", "13")
#   component      main, contrib, non-free or non-free-firmware
#   architectures  the Debian architectures where it installs (of those the release has)
#   needs          the components of everything `apt install NAME` downloads on an empty
#                  system, recommends included (apt-get install --print-uris, on amd64):
#                  what the sources must enable
#   checked        the date apt last confirmed the row
"""


def apt_options(state: Path, arch: str) -> list:
    return ["-q", "-o", f"Dir={state}", "-o", f"Dir::State::status={state}/var/lib/dpkg/status",
            "-o", f"APT::Architecture={arch}", "-o", f"APT::Architectures={arch}",
            "-o", "Dir::Etc::Trusted=/etc/apt/trusted.gpg", "-o", "Dir::Etc::TrustedParts=/etc/apt/trusted.gpg.d",
            "-o", "Acquire::Languages=none", "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root"]


def prepare(base: Path, codename: str, arch: str) -> Path:
    """A private APT state for ``codename`` on ``arch``, updated."""
    state = base / f"{codename}-{arch}"
    for sub in ("etc/apt/sources.list.d", "etc/apt/preferences.d", "var/lib/apt/lists/partial",
                "var/cache/apt/archives/partial", "var/lib/dpkg"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "var/lib/dpkg/status").write_text("")
    (state / "etc/apt/sources.list").write_text(
        f"deb [arch={arch}] {MIRROR} {codename} {COMPONENTS}\n"
        f"deb [arch={arch}] {MIRROR} {codename}-updates {COMPONENTS}\n"
        f"deb [arch={arch}] {SECURITY} {codename}-security {COMPONENTS}\n")
    run(["apt-get", *apt_options(state, arch), "update"])
    return state


def run(argv: list, check: bool = True) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        sys.exit(f"apt_names: {' '.join(argv[:1] + argv[-2:])} failed: {done.stderr.strip()[-300:]}")
    return done


def component_of(state: Path, arch: str, name: str) -> str | None:
    """The component of ``name`` in this state's archive ("contrib"), or None where it has none."""
    done = run(["apt-cache", *apt_options(state, arch), "show", "--no-all-versions", name], check=False)
    m = re.search(r"^Section:\s*(\S+)", done.stdout, re.M)
    if done.returncode != 0 or not m:
        return None
    section = m.group(1)
    return section.split("/", 1)[0] if "/" in section else "main"


def installs(state: Path, arch: str, names: list) -> set:
    """Those of ``names`` that `apt-get install -s` resolves on an empty system of this state: all
    at once where they install together, else one by one."""
    def simulate(which: list) -> bool:
        return run(["apt-get", *apt_options(state, arch), "install", "-s", "--no-install-recommends", *which],
                   check=False).returncode == 0
    if not names:
        return set()
    if simulate(names):
        return set(names)
    return {name for name in names if simulate([name])}


def needs(state: Path, arch: str, name: str) -> list:
    """The components of everything `apt install NAME` would download on an empty system, its
    recommends included (as a plain `apt install` does): what the sources must enable."""
    done = run(["apt-get", *apt_options(state, arch), "install", "--print-uris", "-y", name], check=False)
    found = set(re.findall(r"/pool/(?:updates/)?([a-z-]+)/", done.stdout))
    return [c for c in COMPONENTS.split() if c in found]


def observe(names: list, releases: dict) -> list:
    """The rows apt gives for ``names`` today."""
    today = datetime.date.today().isoformat()
    rows = []
    with tempfile.TemporaryDirectory(prefix="debtorch-apt-names-") as tmp:
        found: dict = {}
        for release, (codename, arches) in releases.items():
            for arch in arches:
                print(f"apt_names: {codename} {arch}", file=sys.stderr)
                state = prepare(Path(tmp), codename, arch)
                components = {name: component_of(state, arch, name) for name in names}
                for name in sorted(installs(state, arch, [n for n, c in components.items() if c])):
                    entry = found.setdefault((name, release), {"components": set(), "arches": [], "needs": None})
                    entry["components"].add(components[name])
                    entry["arches"].append(arch)
                    if entry["needs"] is None:        # on the first architecture that has it (amd64)
                        entry["needs"] = needs(state, arch, name)
        for name in names:
            for release, (codename, _) in releases.items():
                entry = found.get((name, release))
                if entry is None:
                    continue
                rows.append({"name": name, "release": release, "component": "/".join(sorted(entry["components"])),
                             "architectures": entry["arches"], "needs": entry["needs"] or [], "checked": today,
                             "source": f"apt-cache show and apt-get install -s on an empty {codename} system per "
                                       f"architecture, apt-get install --print-uris on amd64 for what it needs "
                                       f"({MIRROR} {codename}, -updates, -security; {COMPONENTS}), "
                                       f"packaging/apt_names.py, {today}"})
    return rows


ARCH_HEADER = """
# [[architecture]]  Debian's name of a CPU architecture and the names `uname -m` gives it
# (kept as written: the script does not check these rows)
"""


def render(rows: list, architectures: list) -> str:
    out = [HEADER]
    if architectures:
        out.append(ARCH_HEADER)
    for a in architectures:
        unames = ", ".join(f'"{u}"' for u in a["uname"])
        out.append(f'\n[[architecture]]\ndebian = "{a["debian"]}"\nuname = [{unames}]\nsource = "{a["source"]}"\n')
    out.append("\n# [[package]] rows\n")
    for r in rows:
        arches = ", ".join(f'"{a}"' for a in r["architectures"])
        needed = ", ".join(f'"{c}"' for c in r["needs"])
        out.append(f'\n[[package]]\nname = "{r["name"]}"\nrelease = "{r["release"]}"\ncomponent = "{r["component"]}"\n'
                   f'architectures = [{arches}]\nneeds = [{needed}]\nchecked = "{r["checked"]}"\nsource = "{r["source"]}"\n')
    return "".join(out)


def _order(row: dict) -> tuple:
    return (row["name"], row["release"])


def key(row: dict) -> tuple:
    return (row["name"], row["release"], row["component"], tuple(row["architectures"]), tuple(row.get("needs", ())))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write the table with what apt says today")
    ap.add_argument("--add", nargs="*", default=[], metavar="NAME", help="package names to add to the table")
    ap.add_argument("--suites", default="", help="only these codenames (bookworm,trixie), for a quick look")
    args = ap.parse_args()
    table = tomllib.loads(TABLE.read_text()) if TABLE.exists() else {"package": []}
    names = list(dict.fromkeys([r["name"] for r in table.get("package", [])] + args.add))
    releases = {rel: v for rel, v in RELEASES.items() if not args.suites or v[0] in args.suites.split(",")}
    rows = observe(names, releases)
    have = {key(r) for r in table.get("package", []) if r["release"] in releases}
    got = {key(r) for r in rows}
    if args.update:
        kept = [r for r in table.get("package", []) if r["release"] not in releases]
        TABLE.write_text(render(sorted(kept + rows, key=_order), table.get("architecture", [])))
        print(f"apt_names: wrote {TABLE} ({len(kept) + len(rows)} rows)", file=sys.stderr)
        return 0
    if have != got:
        for k in sorted(have - got):
            print(f"apt_names: the table says {k}, the archive does not", file=sys.stderr)
        for k in sorted(got - have):
            print(f"apt_names: the archive says {k}, the table does not", file=sys.stderr)
        print("apt_names: run packaging/apt_names.py --update and commit checks/debian_packages.toml", file=sys.stderr)
        return 1
    print(f"apt_names: checks/debian_packages.toml agrees with the archive ({len(rows)} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
