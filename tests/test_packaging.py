"""The Debian packaging follows the code: version, dependency bounds, copyright.

These read the source tree's debian/ folder and skip where it is absent
(autopkgtest runs the tests from a copy of tests/ alone).
"""

import hashlib
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from debtorch.__about__ import __version__

ROOT = Path(__file__).resolve().parent.parent
DEBIAN = ROOT / "debian"
needs_debian = pytest.mark.skipif(not (DEBIAN / "control").exists(), reason="no debian/ folder next to tests/")


@needs_debian
def test_debian_changelog_is_at_the_package_version():
    first = (DEBIAN / "changelog").read_text().splitlines()[0]
    m = re.match(r"^debtorch \(([^)]+)\)", first)
    assert m, first
    assert m.group(1) == __version__, "debian/changelog: add an entry for this version (dch -v VERSION)"


@needs_debian
def test_every_runtime_dependency_keeps_its_version_bound_in_the_deb():
    """dh_python3 drops bounds unless debian/py3dist-overrides says PEP386 for that name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    overridden = {}
    for line in (DEBIAN / "py3dist-overrides").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            overridden[canonicalize_name(line.split()[0])] = line
    missing = sorted(needed - set(overridden))
    assert not missing, f"debian/py3dist-overrides: add a line for {missing} (e.g. 'NAME python3-NAME; PEP386')"
    for name in needed:
        assert "PEP386" in overridden[name], f"debian/py3dist-overrides: {overridden[name]!r} drops the bound"


def dep5_stanzas(text):
    """[(patterns, license)] of the Files stanzas of a DEP-5 copyright file."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in para.splitlines():
            if line[:1] in (" ", "\t"):
                if key == "files":  # Files may continue; License text may not count
                    fields[key] += " " + line.strip()
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "files" in fields:
            out.append((fields["files"].split(), fields.get("license", "")))
    return out


def dep5_license(stanzas, path):
    """(license, pattern) for ``path``: the last stanza with a matching pattern wins."""
    found = ("", "")
    for patterns, lic in stanzas:
        for pat in patterns:
            rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pat)
            if re.fullmatch(rx, path):
                found = (lic, pat)
    return found


REAL = ROOT / "tests" / "real"

# Licence in tests/real/SOURCES.md -> a word the DEP-5 License field must hold.
# Any other licence needs a stanza of its own (not the catch-all "*").
LICENSE_WORD = {"MIT": "Expat", "Apache-2.0": "Apache-2.0", "GPL-3.0": "GPL-3"}
OWN = {"—", "-", ""}  # recorded by us: covered by "Files: *"


def copied_files():
    """{path under tests/real: (origin, licence)} from the tables of tests/real/SOURCES.md."""
    out = {}
    for row in (REAL / "SOURCES.md").read_text().splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        folder = names[0].rsplit("/", 1)[0] if "/" in names[0] else ""
        lic = cells[4]
        for name in names:
            if "/" not in name and folder:
                name = f"{folder}/{name}"
            for path in sorted(REAL.glob(name)) or [REAL / name]:
                out[path.relative_to(REAL).as_posix()] = (cells[1], lic)
    return out


@needs_debian
@pytest.mark.skipif(not (REAL / "SOURCES.md").exists(), reason="no tests/real/SOURCES.md")
def test_files_copied_from_other_projects_have_their_licence_in_debian_copyright():
    listed = copied_files()
    assert listed, "tests/real/SOURCES.md lists no files"
    by_hash = {}
    for name, origin in listed.items():
        path = REAL / name
        assert path.is_file(), f"tests/real/SOURCES.md lists {name}, which is not there"
        by_hash[hashlib.sha256(path.read_bytes()).hexdigest()] = (name, *origin)
    stanzas = dep5_stanzas((DEBIAN / "copyright").read_text())
    problems = []
    for path in sorted((ROOT / "tests").rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        hit = by_hash.get(hashlib.sha256(path.read_bytes()).hexdigest())
        if hit is None:
            continue
        name, origin, lic = hit
        if lic in OWN:
            continue
        rel = path.relative_to(ROOT).as_posix()
        have, pattern = dep5_license(stanzas, rel)
        want = next((w for k, w in LICENSE_WORD.items() if lic.startswith(k)), None)
        if (want and want not in have) or (not want and pattern == "*"):
            problems.append(f"{rel}: a copy of {name} from {origin} ({lic}); debian/copyright gives {have!r}")
    assert not problems, "debian/copyright: add Files stanzas for:\n" + "\n".join(problems)


def test_dep5_matching_takes_the_last_stanza():
    stanzas = dep5_stanzas(
        "Format: x\n\nFiles: *\nLicense: Expat\n\nFiles: tests/hosts/*/cpuinfo-?\nLicense: GPL-3+\n Text.\n"
    )
    assert dep5_license(stanzas, "debtorch/cli.py") == ("Expat", "*")
    assert dep5_license(stanzas, "tests/hosts/a/b/cpuinfo-1") == ("GPL-3+", "tests/hosts/*/cpuinfo-?")
    assert dep5_license(stanzas, "tests/hosts/a/cpuinfo-12") == ("Expat", "*")
