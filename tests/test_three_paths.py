"""One machine, one verdict (issue 34, item 3): ``doctor --host``, ``doctor --facts`` and ``doctor
--from-collect-env`` on every fixture host and on the collect_env text that host would print
(tests/collectenv_text.py), through the command line.

The saved facts give exactly the findings of the machine.  The collect_env text carries less evidence
(no PCI bus, no APT, no limits), so it may find less; it never finds an error or a warning the machine
itself does not give (a finding whose premise is unknown is not an error), never exits worse, and
where it knows the same driver and GPUs, it gives the same CUDA and PyTorch findings.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import HOSTS, cli_runner
from collectenv_text import collect_env_text
from hostkit import change_nvml, facts_of, with_torch

from debtorch.cli import app
from debtorch.host import ReplayHost
from debtorch.machine import Machine

HOST_NAMES = sorted(p.name for p in HOSTS.iterdir() if (p / "_host.json").exists())


def _pascal(d: dict) -> None:
    d["devices"][0]["nvmlDeviceGetName"] = "NVIDIA GeForce GTX 1080"
    d["devices"][0]["nvmlDeviceGetCudaComputeCapability"] = [6, 1]


# Variants whose PyTorch findings are errors (the fixture hosts have few): a Pascal GPU under a cu130
# build (torch.E003), and a CPU build on a GPU machine (torch.E002).
VARIANTS = {
    "pascal-under-cu130": lambda tmp: change_nvml(with_torch(tmp, "debian13-workstation-rtx3080", "2.13.0+cu130",
                                                              cuda="13.0"), _pascal),
    "cpu-build-on-a-gpu": lambda tmp: with_torch(tmp, "debian13-workstation-rtx3080", "2.13.0+cpu"),
}


def _doctor(*args: str) -> tuple:
    """(exit status, [(id, level)]) of `debtorch doctor --json ARGS`."""
    res = cli_runner().invoke(app, ["doctor", "--json", *args])
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(res.stdout)
    return res.exit_code, [(f["id"], f["level"]) for f in doc["findings"]], doc


# Findings whose premises a collect_env text carries in full: torch's version and build, the driver's
# version, the GPUs' names, nvcc (not the PCI bus, APT, LD_LIBRARY_PATH or --deep's probe).
FROM_VERSIONS = {"torch.E001", "torch.E002", "torch.E003", "torch.I001", "torch.W001", "cuda.E001", "cuda.W001",
                 "cuda.W002"}


def _from_versions(findings: list) -> set:
    return {fid for fid, _ in findings if fid in FROM_VERSIONS}


def _three(host: ReplayHost, tmp_path: Path) -> tuple:
    doc = facts_of(host)
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(doc))
    text = tmp_path / "collect_env.txt"
    text.write_text(collect_env_text(doc))
    return doc, _doctor("--host", str(host.root)), _doctor("--facts", str(facts)), _doctor("--from-collect-env", str(text))


@pytest.mark.parametrize("name", HOST_NAMES + list(VARIANTS))
def test_the_three_paths_agree(name: str, tmp_path: Path) -> None:
    host = VARIANTS[name](tmp_path) if name in VARIANTS else ReplayHost(HOSTS / name)
    doc, (live_rc, live, _), (facts_rc, facts, _), (text_rc, text, text_doc) = _three(host, tmp_path)
    assert (facts_rc, facts) == (live_rc, live)
    serious = {fid for fid, level in live if level in ("error", "warning")}
    assert {fid for fid, level in text if level in ("error", "warning")} <= serious
    assert text_rc <= live_rc
    machine, said = Machine.from_facts(doc), Machine.from_facts(text_doc["facts"])
    same_evidence = (said.driver.version == machine.driver.version and said.gpus.present == machine.gpus.present
                     and [g.name for g in said.gpus.listed] == [g.name for g in machine.gpus.listed])
    if same_evidence:
        assert _from_versions(text) == _from_versions(live)


def test_the_variants_give_pytorch_errors_on_every_path(tmp_path: Path) -> None:
    """The comparison above is not empty: the same PyTorch error from the machine and from its report."""
    for name, make in VARIANTS.items():
        _, (_, live, _), _, (_, text, _) = _three(make(tmp_path / name), tmp_path / name)
        errors = {fid for fid, level in live if level == "error" and fid.startswith("torch.")}
        assert errors and errors <= _from_versions(text), name


def test_a_cpu_build_beside_a_cuda_toolkit_is_a_question_from_a_report(tmp_path: Path) -> None:
    """The machine (no NVIDIA GPU on its PCI bus) is fine; its report names no GPU or driver: the CPU
    build beside CUDA 13.0's nvcc is asked about (info), never an error, and no fix assumes Debian's
    packaged driver."""
    _, (live_rc, live, _), _, (text_rc, text, doc) = _three(ReplayHost(HOSTS / "debian12-vm-2core"), tmp_path)
    assert live_rc == text_rc == 0 and live == []
    assert text == [("torch.I001", "info")]
    fix = doc["findings"][0]["fix"]
    assert "Debian's packaged driver" not in fix and "If it has none, the CPU build is right." in fix
