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

from debtorch import __version__

ROOT = Path(__file__).resolve().parent.parent
# The developers' shared fixtures: next to the main checkout, or one level up from a worktree.
SHARED_REAL = next(
    (p / "shared" / "fixtures" / "real" for p in (ROOT.parent, ROOT.parent.parent) if (p / "shared" / "fixtures" / "real").is_dir()),
    ROOT.parent / "shared" / "fixtures" / "real",
)
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
    """The license of ``path``: the last stanza with a matching pattern wins."""
    found = None
    for patterns, lic in stanzas:
        for pat in patterns:
            rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pat)
            if re.fullmatch(rx, path):
                found = lic
    return found


# SOURCES.md licence -> a word the DEP-5 License field must contain.
LICENSE_WORD = {"MIT": "Expat", "Apache-2.0": "Apache-2.0", "GPL-3.0": "GPL-3"}


def shared_fixture_licenses():
    """{sha256: (name in SOURCES.md, repo, license)} of the developers' shared real fixtures."""
    table = (SHARED_REAL / "SOURCES.md").read_text()
    out = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0].startswith("`"):
            continue
        name, repo, lic = cells[0].strip("`"), cells[1], cells[4].split()[0]
        path = SHARED_REAL / name
        if path.is_file():
            out[hashlib.sha256(path.read_bytes()).hexdigest()] = (name, repo, lic)
    return out


@needs_debian
@pytest.mark.skipif(not (SHARED_REAL / "SOURCES.md").exists(), reason="the shared real fixtures are not here")
def test_fixture_files_copied_from_other_projects_are_in_debian_copyright():
    known = shared_fixture_licenses()
    stanzas = dep5_stanzas((DEBIAN / "copyright").read_text())
    problems = []
    for path in sorted((ROOT / "tests" / "hosts").rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        hit = known.get(hashlib.sha256(path.read_bytes()).hexdigest())
        if hit is None:
            continue
        name, repo, lic = hit
        rel = path.relative_to(ROOT).as_posix()
        have = dep5_license(stanzas, rel) or ""
        want = LICENSE_WORD.get(lic, lic)
        if want not in have:
            problems.append(f"{rel} is {name} from {repo} ({lic}); debian/copyright says {have!r}")
    assert not problems, "debian/copyright: add Files stanzas for:\n" + "\n".join(problems)


def test_dep5_matching_takes_the_last_stanza():
    stanzas = dep5_stanzas(
        "Format: x\n\nFiles: *\nLicense: Expat\n\nFiles: tests/hosts/*/cpuinfo-?\nLicense: GPL-3+\n Text.\n"
    )
    assert dep5_license(stanzas, "debtorch/cli.py") == "Expat"
    assert dep5_license(stanzas, "tests/hosts/a/b/cpuinfo-1") == "GPL-3+"
    assert dep5_license(stanzas, "tests/hosts/a/cpuinfo-12") == "Expat"
