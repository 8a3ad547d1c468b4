"""Every machine the suite has, judged by the doctor: the fixture hosts (with and without --deep), the
collect_env reports of both corpora, the real and the corpus nvidia-smi XMLs, os-release trees and
cpuinfo files replayed as machines, and the machines issue 28 names.  What the fixes' tests (pip lines,
apt packages) run over."""

from __future__ import annotations

import functools
import json
import re
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Iterator, NamedTuple, Optional

from clitools import HOSTS, ROOT

from debtorch import facts as facts_mod
from debtorch.doctor import Context, diagnose
from debtorch.facts import collectenv
from debtorch.findings import Finding
from debtorch.host import ReplayHost
from debtorch.machine import Machine

COLLECT_ENV = sorted((ROOT / "tests" / "corpus" / "collect_env").glob("*.txt")) + \
    sorted((ROOT / "tests" / "collect_env").glob("*.txt"))
XMLS = sorted((ROOT / "tests" / "corpus" / "nvidia-smi-xml").glob("*.xml")) + \
    sorted((ROOT / "tests" / "real" / "nvidia-smi-xml").glob("*.xml"))
TREES = sorted(p for p in (ROOT / "tests" / "corpus" / "os-release").iterdir() if p.is_dir())
CPUINFO = sorted(p for p in (ROOT / "tests" / "corpus" / "cpuinfo").iterdir() if not p.name.endswith((".toml", ".md")))


class Report(NamedTuple):
    name: str
    machine: Machine
    findings: list


def judged(name: str, doc: dict, source: str = "facts") -> Report:
    m = Machine.from_facts(doc)
    return Report(name, m, diagnose(m, Context(source=source)).findings)


def smi_host(xml: Path, folder: Path) -> ReplayHost:
    """A machine whose only recorded command is ``nvidia-smi -q -x`` answering ``xml``."""
    (folder / "_commands").mkdir(parents=True)
    shutil.copy(xml, folder / "_commands" / "smi.xml")
    (folder / "_host.json").write_text(json.dumps({
        "nvml": {"error": "NVML binding not installed (nvidia-ml-py / python3-pynvml)"},
        "commands": {"nvidia-smi -q -x": {"returncode": 0, "stdout_file": "smi.xml", "stderr": "", "error": None}}}))
    return ReplayHost(folder)


def cpuinfo_host(path: Path, folder: Path) -> ReplayHost:
    arch = tomllib.loads(Path(str(path) + ".expected.toml").read_text())["verdict"]["arch"]
    (folder / "proc").mkdir(parents=True)
    shutil.copy(path, folder / "proc" / "cpuinfo")
    (folder / "_host.json").write_text(json.dumps({"machine": arch}))
    return ReplayHost(folder)


def doc(python: Optional[str] = "3.11.2", torch: Optional[str] = None, gpus: tuple = ("NVIDIA GeForce RTX 3090",),
        driver: Optional[str] = "580.95.05", arch: str = "x86_64", **nv: object) -> dict:
    """A minimal facts document: a Debian 12 machine with ``gpus``, ``driver`` and ``torch`` ("2.13.0+cu130")."""
    cu = re.search(r"\+cu(\d+)(\d)$", torch or "")
    t = {"installed": False} if torch is None else {"installed": True, "version": torch,
                                                     "cuda": f"{cu.group(1)}.{cu.group(2)}" if cu else None}
    return {"os": {"id": "debian", "version_id": "12", "platform": "linux", "arch": arch},
            "python": {"version": python, "executable": "/home/ana/venvs/torch/bin/python", "venv": True, "torch": t},
            "nvidia": {"driver_version": driver, "gpus": [{"index": i, "name": g, **nv} for i, g in enumerate(gpus)]}}


# The classes of issue 28, each on a minimal machine: the pip alternative of a driver too old for the
# build, an architecture not in the build, the CPU fallback, cu126 -> cu130 for Blackwell, a release whose
# files carry no label (the fix uninstalls first), and the CPU build on a machine without a GPU.
ISSUE_MACHINES = {
    "driver-too-old-for-cu130": doc(torch="2.13.0+cu130", driver="550.163.01"),
    "pascal-under-cu130": doc(torch="2.13.0+cu130", gpus=("NVIDIA GeForce GTX 1080",)),
    "cpu-fallback-kepler": doc(torch="2.13.0+cu130", gpus=("Tesla K80",)),
    "blackwell-under-cu126": doc(torch="2.13.0+cu126", gpus=("NVIDIA GeForce RTX 5090",)),
    "old-1.7.1-on-pascal-and-driver-440": doc(python="3.8.10", torch="1.7.1+cu110", gpus=("NVIDIA GeForce GTX 1080",),
                                              driver="440.33.01"),
    # aarch64's 2.5.1 files carry no label: PyPI's CPU build and the cu124 index's CUDA build are both "2.5.1".
    "unlabelled-2.5.1-cpu-build-on-gh200": {**doc(python="3.11.4", torch="2.5.1", gpus=("NVIDIA GH200 480GB",),
                                                  driver="550.54.15", arch="aarch64")},
    "cpu-only-on-a-gpu-machine": doc(torch="2.13.0+cpu"),
    "no-gpu-cuda-build": {**doc(torch="2.13.0+cu130", gpus=(), driver=None),
                          "nvidia": {"pci_devices": [], "gpus": []}},
    "debians-own-python-pep668": {**doc(python="3.11.2"), "os": {"id": "debian", "version_id": "12", "platform": "linux",
                                                                 "arch": "x86_64", "externally_managed": True},
                                  "python": {"version": "3.11.2", "executable": "/usr/bin/python3", "venv": False,
                                             "torch": {"installed": False}}},
}


def _recorded() -> Iterator[Report]:
    """The fixture hosts (with and without --deep) and the machines issue 28 names."""
    for host in sorted(p for p in HOSTS.iterdir() if (p / "_host.json").exists()):
        for deep in (False, True):
            yield judged(f"{host.name}{' --deep' if deep else ''}",
                         facts_mod.collect(ReplayHost(host), facts_mod.Options(deep=deep)))
    for name, facts in ISSUE_MACHINES.items():
        yield judged(f"issue 28: {name}", facts)


@functools.lru_cache(maxsize=1)
def recorded_reports() -> tuple:
    """The fixture hosts and the issue's machines, judged once per test session: the fast tier's set."""
    return tuple(_recorded())


def _every() -> Iterator[Report]:
    yield from recorded_reports()
    for path in COLLECT_ENV:
        yield judged(f"collect_env {path.stem}", collectenv.parse_file(str(path)), "collect_env")
    with tempfile.TemporaryDirectory() as tmp:
        for i, xml in enumerate(XMLS):
            yield judged(f"nvidia-smi {xml.stem}", facts_mod.collect(smi_host(xml, Path(tmp) / f"x{i}"), facts_mod.Options()))
        for i, path in enumerate(CPUINFO):
            yield judged(f"cpuinfo {path.name}", facts_mod.collect(cpuinfo_host(path, Path(tmp) / f"c{i}"), facts_mod.Options()))
    for tree in TREES:
        yield judged(f"os-release {tree.name}", facts_mod.collect(ReplayHost(tree), facts_mod.Options()))


@functools.lru_cache(maxsize=1)
def every_report() -> tuple:
    """Every report of the suite, judged once per test session."""
    return tuple(_every())


def fixes(report: Report) -> Iterator[tuple]:
    """(finding, its fix) of a report's findings that have one."""
    for f in report.findings:
        if isinstance(f, Finding) and f.fix:
            yield f, f.fix
