"""Every pip line a fix prints installs the wheel it names, run by real pip (issue 28).

Every report of the suite (tests/reports.py: fixture hosts, the collect_env corpora, nvidia-smi XMLs,
os-release trees, cpuinfo files, the machines of each kind of wheel problem) is judged; each fix's commands run in
order (tests/pipindex.py) in a virtual environment holding a stub of the machine's installed torch, each
``pip install`` as ``pip install --dry-run --report`` against a local index of stub wheels named from
checks/torch_wheels.toml, offline.  A line fails when pip would install nothing (it keeps the installed
torch: ``torch==2.13.0`` matches ``2.13.0+cu130``), a build other than the one the line's index names,
or cannot resolve at all.  The fast tier runs the recorded machines (fixture hosts and the machines of
each kind of wheel problem) with this interpreter's pip; the slow tier every report with every pip found
(this interpreter's, Debian 12's python3-pip 23.0.1, a pyenv's 23.2.1).
"""

from __future__ import annotations

import collections
import functools
from pathlib import Path
from typing import Iterator

import pytest
import reports
from pipindex import Index, Pip, Server, Target, pip_packages, platform_fits, run_all, run_fix, steps, target_of


@functools.lru_cache(maxsize=1)
def packages() -> tuple:
    """This interpreter's pip package folder first, then the other pips found (asked once, when a
    test needs them: collecting the suite starts no interpreter)."""
    return tuple(pip_packages())


def this_pip(tmp_path: Path) -> Pip:
    if not packages():
        pytest.skip("this interpreter has no pip")
    return Pip.of(packages()[0], tmp_path)


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Index:
    return Index.build(tmp_path_factory.mktemp("pip") / "index")


def cases(judged: tuple) -> dict:
    """{(target, fix): ["report finding", ...]} for every fix of ``judged`` reports with a pip command:
    each machine and sequence of commands once (fixes that differ only in their words share a case)."""
    found: dict = collections.defaultdict(list)
    first: dict = {}
    for report in judged:
        for f, fix in reports.fixes(report):
            commands = tuple(steps(fix))
            if commands:
                target = target_of(report.machine)
                key = first.setdefault((target, commands), (target, fix))
                found[key].append(f"{report.name}: {f.id}")
    return found


def _failures(judged: tuple, pip: Pip, index: Index, work: Path) -> list:
    every = cases(judged)
    results = run_all(every, pip, index, work)
    return [f"{', '.join(every[case][:3])}\n    {case[1]!r}\n    -> {'; '.join(problems)}"
            for case, problems in results.items() if problems]


def test_the_recorded_machines_have_pip_lines_of_every_kind() -> None:
    """The fast tier's machines cover what the test must see: a pinned label, a series pin, an
    uninstall first (a release whose files carry no label), a fresh venv (PEP 668), PyPI."""
    fixes = "\n".join(fix for _, fix in cases(reports.recorded_reports()))
    for needle in ("torch==2.13.0+cu126", "torch==2.14.*", "pip uninstall torch\npip install torch==2.5.1 ",
                   "venvs/torch/bin/pip install", "pip install nvidia-ml-py"):
        assert needle in fixes, needle


def test_the_recorded_machines_pip_lines_install_the_wheels_they_name(index: Index, tmp_path: Path) -> None:
    """The fixture hosts and the machines of each kind of wheel problem, with this interpreter's pip."""
    assert _failures(reports.recorded_reports(), this_pip(tmp_path), index, tmp_path) == []


@pytest.mark.slow
def test_every_pip_line_of_every_report_installs_the_wheel_it_names(index: Index, tmp_path: Path) -> None:
    """Every report of the suite (both collect_env corpora, the XMLs, os-release trees, cpuinfo files;
    one of them on glibc 2.27, below the manylinux_2_28 of 2.7's files), with every pip of this
    machine: this interpreter's and the others (Debian 12's python3-pip 23.0.1, a pyenv's 23.2.1),
    which match local labels as the current one does."""
    judged = reports.every_report()
    assert "glibc 2.27" in "\n".join(fix for _, fix in cases(judged))
    pips = [Pip.of(package, tmp_path) for package in packages()]
    if not pips:
        pytest.skip("no pip on this machine")
    failed = {pip.version: _failures(judged, pip, index, tmp_path / pip.version) for pip in pips}
    assert failed == {pip.version: [] for pip in pips}


# --- the rule can fail: today's lines ------------------------------------------------------------------

BEFORE = {   # the lines the doctor printed before issue 28, on the machines issue 28 names
    "pascal under cu130": ("2.13.0+cu130", "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"),
    "cpu fallback": ("2.13.0+cu130", "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"),
    "unlabelled 1.7.1": ("1.7.1+cu110", "pip install torch==1.7.1 --index-url https://download.pytorch.org/whl/cu102"),
    "no gpu": ("2.13.0+cu130", "pip install torch --index-url https://download.pytorch.org/whl/cpu"),
    "prose": (None, "sudo apt install python3-pynvml   # contrib; or pip install nvidia-ml-py"),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One pip server (this interpreter's pip) for the tests that run a few lines each."""
    work = tmp_path_factory.mktemp("pip-server")
    one = Server(this_pip(work), work / "server")
    yield one
    one.close()


@pytest.mark.parametrize("name", BEFORE)
def test_the_lines_printed_before_fail(name: str, index: Index, server: Server, tmp_path: Path) -> None:
    installed, fix = BEFORE[name]
    problems = run_fix(fix, Target(installed, "3.12" if installed and installed >= "2" else "3.8"), server, index, tmp_path)
    assert problems, fix
    said = " ".join(problems)
    assert "installs nothing: pip keeps the installed torch" in said or "no shell runs" in said


@pytest.mark.parametrize("fix, target", [
    ("pip install torch==2.13.0+cu118 --index-url https://download.pytorch.org/whl/cu118", Target(None, "3.12")),
    ("pip install torch==2.13.0+cu126 --index-url https://download.pytorch.org/whl/cu126", Target(None, "3.8")),
    ("pip install torch==2.7.*  --index-url https://download.pytorch.org/whl/cu118", Target(None, "3.9", glibc="2.27")),
], ids=["no-such-variant", "no-wheel-for-python-3.8", "glibc-2.27-below-manylinux_2_28"])
def test_a_line_naming_a_wheel_the_machine_cannot_install_fails(fix: str, target: Target, index: Index, server: Server,
                                                                tmp_path: Path) -> None:
    assert "No matching distribution" in " ".join(run_fix(fix, target, server, index, tmp_path))


def test_the_stub_index_has_the_files_of_the_table(index: Index) -> None:
    """Labels and tags as checks/torch_wheels.toml [[files]] names them."""
    names = {n for entries in index.files.values() for _, n, _, _ in entries}
    assert "torch-2.13.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl" in names
    assert "torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl" in names
    assert "torch-1.7.1-cp37-cp37m-linux_x86_64.whl" in names           # cu102's: PyPI's build, no label
    assert "torch-1.7.1+cu92-cp37-cp37m-linux_x86_64.whl" in names
    assert "torch-2.5.1-cp311-cp311-linux_aarch64.whl" in names          # aarch64 cu124: no label
    assert platform_fits("manylinux_2_28_x86_64", "x86_64", "2.36") and not platform_fits("manylinux_2_28_x86_64", "x86_64", "2.27")


def test_commands_are_read_from_lines_colons_and_backticks() -> None:
    fix = ("pip uninstall torch\nUpgrade it: pip install torch==2.14.* --index-url https://download.pytorch.org/whl/cu130"
           "  # release 2.14\npython3 -m venv ~/venvs/torch\n~/venvs/torch/bin/pip install torch==2.13.0+cpu --index-url "
           "https://download.pytorch.org/whl/cpu\nthen run `/usr/bin/python3 -m pip install nvidia-ml-py` (once)")
    got = [(s.kind, s.where, s.args) for s in steps(fix)]
    assert got == [("uninstall", "", ("torch",)),
                   ("install", "", ("torch==2.14.*", "--index-url", "https://download.pytorch.org/whl/cu130")),
                   ("venv", "~/venvs/torch", ()),
                   ("install", "~/venvs/torch", ("torch==2.13.0+cpu", "--index-url", "https://download.pytorch.org/whl/cpu")),
                   ("install", "", ("nvidia-ml-py",))]
    assert [s.kind for s in steps("Reinstall with pip install --force-reinstall torch, from its index.")] == ["prose"]
