"""Every Debian package a fix names exists where the fix is printed (issue 28).

Every `apt install` of every fix of every report of the suite (tests/reports.py), and of the catalogue's
own texts, names a package that checks/debian_packages.toml says Debian 12 and 13 have (the machine's
release where it is one of them, else both) for the machine's architecture, in a component the
machine's sources enable or the fix enables first.  The table is written and kept current by
packaging/apt_names.py, which asks real apt (packaging/ci.sh runs it).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import reports

from debtorch import knowledge
from debtorch.machine import Machine

ROOT = Path(__file__).resolve().parent.parent
APT = re.compile(r"\bapt(?:-get)?\s+install\s+([^\n#;`()]*)")
ENABLED = re.compile(r"Components: ([a-z -]+)`|`\.\.\. ([a-z -]+)`|end in `([a-z -]+)`")
RELEASES = ("12", "13")


def packages(fix: str) -> list:
    """The package names of the `apt install` commands of a fix (not options, not names built from
    the running kernel: linux-headers-$(uname -r), linux-headers-6.1.0-18-amd64)."""
    out = []
    for m in APT.finditer(fix):
        for word in m.group(1).split():
            if word.startswith("-") or "$" in word or re.match(r"linux-headers-\d", word):
                continue
            out.append(word.strip('.,"'))
    return out


def enabled_by(fix: str) -> set:
    return {c for m in ENABLED.finditer(fix) for group in m.groups() if group for c in group.split()}


def problems(m: Machine, fix: str) -> list:
    """What is wrong with the packages ``fix`` names on machine ``m``."""
    out = []
    release = m.os.debian.release if m.os.debian else None
    releases = [release] if release in RELEASES else list(RELEASES)
    machine = m.os.arch or "x86_64"
    arch = knowledge.debian_arch(machine)
    for name in packages(fix):
        for rel in releases:
            row = knowledge.debian_package(name, rel)
            if row is None:
                out.append(f"{name}: not in Debian {rel} (checks/debian_packages.toml)")
            elif arch not in row["architectures"]:
                out.append(f"{name}: Debian {rel} has none for {arch or machine}")
            elif (release == rel and m.os.is_debian and m.apt.components is not None and not m.apt.cuda_repo
                  and "container's host" not in fix):
                lacking = set(row.get("needs") or [row["component"]]) - set(m.apt.components) - enabled_by(fix)
                if lacking:
                    out.append(f"{name}: needs {' '.join(sorted(lacking))}, which the sources lack and the fix does "
                               "not enable")
    return out


def test_every_apt_package_of_every_fix_exists_where_it_is_printed() -> None:
    found = []
    seen = 0
    for report in reports.every_report():
        for f, fix in reports.fixes(report):
            seen += len(packages(fix))
            found += [f"{report.name}: {f.id}: {p}" for p in problems(report.machine, fix)]
    assert seen > 50 and found == []


def test_every_package_the_catalogue_names_is_in_the_table() -> None:
    """The catalogue's templates and remedies too (docs/checks.md prints them)."""
    text = (ROOT / "checks" / "findings" / "doctor.toml").read_text()
    named = {p for p in packages(text) if "{" not in p}
    assert named and {p for p in named if knowledge.debian_package(p, "12") is None
                      and knowledge.debian_package(p, "13") is None} == set()


def test_the_table_names_every_release_and_a_date() -> None:
    table = tomllib.loads((ROOT / "checks" / "debian_packages.toml").read_text())
    rows = table["package"]
    assert {r["release"] for r in rows} == set(RELEASES)
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", r["checked"]) and "apt-get install -s" in r["source"] for r in rows)
    assert {knowledge.debian_arch(m) for m in ("x86_64", "aarch64", "armv7l", "ppc64le")} == {"amd64", "arm64", "armhf",
                                                                                             "ppc64el"}


# --- the rule can fail ----------------------------------------------------------------------

def _machine(arch: str = "x86_64", components: tuple = ("main",)) -> Machine:
    return Machine.from_facts({"os": {"id": "debian", "version_id": "12", "platform": "linux", "arch": arch},
                               "apt": {"sources": [{"file": "/etc/apt/sources.list.d/debian.sources", "format": "deb822",
                                                    "types": ["deb"], "suites": ["bookworm"],
                                                    "components": list(components), "enabled": True}]}})


@pytest.mark.parametrize("arch, fix, says", [
    ("x86_64", "sudo apt install nvidia-drivers", "not in Debian 12"),            # a misspelt name
    ("armv7l", "sudo apt install nvidia-driver", "has none for armhf"),           # no armhf build
    ("x86_64", "sudo apt install nvidia-persistenced", "needs contrib non-free, which the sources lack"),
])
def test_a_package_that_is_not_there_fails(arch: str, fix: str, says: str) -> None:
    assert says in " ".join(problems(_machine(arch), fix))


def test_a_fix_that_enables_the_component_passes() -> None:
    fix = ("In /etc/apt/sources.list.d/debian.sources, set every Debian stanza's line to `Components: main contrib "
           "non-free`\n"
           "sudo apt update\nsudo apt install nvidia-persistenced")
    assert problems(_machine(), fix) == []
