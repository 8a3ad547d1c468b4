"""Debian (checks/debian.toml, checks/debian_packages.toml): a release by number, codename or alias and
how debtorch stands to it, the archive's suites, Debian's names of CPU architectures, and where the
archive has a package a fix names."""

from __future__ import annotations

import re
from typing import Any, Optional

from packaging.version import Version

from debtorch import versions
from debtorch.knowledge.tables import Row, load
from debtorch.knowledge.thresholds import threshold


def debian_release(release_or_codename: Any) -> Optional[Row]:
    """The debian.toml row for "12", "12.7", "bookworm", "Debian 12", "testing",
    "trixie/sid" (a testing system's debian_version), "sid"; None if unknown."""
    if not isinstance(release_or_codename, (str, int)) or isinstance(release_or_codename, bool):
        return None
    text = str(release_or_codename).strip().lower()
    text = re.sub(r"^debian\s*(gnu/linux\s*)?", "", text).strip()
    if "/" in text:
        text = text.split("/")[0].strip()
    if m := re.fullmatch(r"(\d+)(?:\.\d+)*", text):
        text = m.group(1)
    for row in load().debian:
        names = {row["version"].lower(), row["codename"].lower(), *(a.lower() for a in row.get("aliases", []))}
        if text in names:
            answer = dict(row)
            answer.setdefault("confidence", "confirmed")
            return answer
    return None


def debian_version_for(codename: Any) -> Optional[str]:
    """The release number of a Debian codename, current or archived ("bookworm" -> "12",
    "jessie" -> "8"); None for anything else (a suite alias like "testing" included)."""
    if not isinstance(codename, str):
        return None
    text = codename.strip().lower()
    return next((row["version"] for row in load().all_debian
                 if row["codename"].lower() == text and versions.numeric(row["version"]) is not None), None)


def debian_codename_for(release: Any) -> Optional[str]:
    """The codename of a numbered Debian release, current or archived ("8" -> "jessie")."""
    text = str(release).strip() if isinstance(release, (str, int)) and not isinstance(release, bool) else ""
    return next((row["codename"] for row in load().all_debian if row["version"] == text), None)


def debian_support(release: Any) -> str:
    """How a Debian release ("12", "testing", "15") stands: "supported" (thresholds.toml's
    debian_supported_releases), "older" (a row of checks/debian.toml not supported, or a number below every row),
    "newer" (a number above every row: released after the table was written), or "unknown"."""
    if isinstance(release, str) and not debian_release(release) and debian_version_for(release):
        release = debian_version_for(release)      # an archived codename ("jessie")
    row = debian_release(release)
    if row is not None:
        supported = str(threshold("debian_supported_releases") or "").split()
        names = {row["version"], row["codename"], *row.get("aliases", [])}
        return "supported" if names & set(supported) or str(release).lower() in supported else "older"
    number = versions.numeric(str(release)) if isinstance(release, (str, int)) and not isinstance(release, bool) else None
    known = [v for r in load().debian if (v := versions.numeric(r["version"])) is not None]
    if number is None or not known:
        return "unknown"
    major = Version(str(number.release[0]))
    if major > max(known):
        return "newer"
    return "older" if major < min(known) else "unknown"


# Suite names that are not releases (debian-policy, sources.list(5)).
SUITE_ALIASES = ("stable", "oldstable", "oldoldstable", "testing", "unstable", "experimental")
SUITE_PARTS = ("updates", "backports", "security", "proposed-updates", "backports-sloppy")


def is_debian_suite(suite: Any) -> bool:
    """True for a Debian archive suite: a codename in checks/debian.toml or an alias
    ("stable", "sid"), alone or with -updates, -backports, -security, ..."""
    if not isinstance(suite, str):
        return False
    name, _, part = suite.strip().lower().partition("-")
    if part and part not in SUITE_PARTS:
        return False
    return name in SUITE_ALIASES or debian_release(name) is not None and not name.isdigit()


def debian_arch(machine: Any) -> Optional[str]:
    """Debian's name of a CPU architecture as ``uname -m`` prints it ("x86_64" -> "amd64"), or None."""
    if not isinstance(machine, str) or not machine.strip():
        return None
    text = machine.strip().lower()
    return next((row["debian"] for row in load().tables["debian_packages.toml"]["architecture"]
                 if text == row["debian"] or text in row["uname"]), None)


def debian_package(name: str, release: Any) -> Optional[Row]:
    """The [[package]] row of ``name`` in Debian ``release`` ("12"): its component and the
    architectures it installs on; None where the table does not name it for that release."""
    rel = str(release).split(".")[0] if release is not None else ""
    row = next((r for r in load().tables["debian_packages.toml"]["package"] if r["name"] == name and r["release"] == rel),
               None)
    return dict(row) if row else None


def debian_has(name: str, release: Any, machine: Any) -> Optional[bool]:
    """Whether Debian ``release`` has ``name`` for the CPU ``machine`` (uname -m); None where the
    table does not cover that release or architecture."""
    arch = debian_arch(machine)
    covered = {r["release"] for r in load().tables["debian_packages.toml"]["package"]}
    rel = str(release).split(".")[0] if release is not None else ""
    if arch is None or rel not in covered:
        return None
    row = debian_package(name, rel)
    return bool(row and arch in row["architectures"])


