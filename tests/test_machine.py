"""One reading of the machine (debtorch/machine.py): every consumer gives the same answers.

On every fixture machine (tests/hosts/) and every real collect_env report
(tests/collect_env/), the doctor's report (text and JSON), tune's rules and the
config fingerprint must state the same driver, GPUs, usable CPUs, Debian
release and torch build as the machine view.  Two answers to one question
is a bug (issue 9: one report stated two drivers on the mismatch fixture).
"""

import json
import re
from pathlib import Path

import pytest
from clitools import HOSTS
from typer.testing import CliRunner

from debtorch import facts as facts_mod
from debtorch import fingerprint
from debtorch.cli import app
from debtorch.facts import collectenv
from debtorch.host import ReplayHost
from debtorch.machine import Machine, oldest_cc
from debtorch.tune import rules

HOST_DIRS = sorted(p for p in HOSTS.iterdir() if (p / "_host.json").exists())
REPORTS = sorted((Path(__file__).parent / "collect_env").glob("*.txt"))
runner = CliRunner()


def _machines():
    for d in HOST_DIRS:
        yield pytest.param(("host", d), id=d.name)
    for r in REPORTS:
        yield pytest.param(("collect_env", r), id=r.stem)


def _facts_and_cli(kind, path):
    if kind == "host":
        doc = facts_mod.collect(ReplayHost(path))
        args = ["--host", str(path)]
    else:
        doc = collectenv.parse_file(str(path))
        args = ["--from-collect-env", str(path)]
    text = runner.invoke(app, ["doctor", *args]).output
    out = json.loads(runner.invoke(app, ["doctor", "--json", *args]).output)
    return doc, text, out


def _headline(text, title):
    line = next((ln for ln in text.splitlines() if re.match(rf"\[.\] {re.escape(title)}(:|$)", ln)), "")
    return line.split(": ", 1)[1] if ": " in line else ""


@pytest.mark.parametrize("source", list(_machines()))
def test_every_consumer_gives_the_machine_views_answers(source):
    doc, text, out = _facts_and_cli(*source)
    m = Machine.from_facts(doc)
    # The JSON report's facts are the same machine.
    assert Machine.from_facts(out["facts"]).answers() == m.answers()
    fp = fingerprint.from_facts(doc)

    # The driver: one version in the headline, the findings, and the fingerprint.
    driver = m.driver.version
    head = _headline(text, "NVIDIA driver")
    stated = set(re.findall(r"driver (\d+\.\d+(?:\.\d+)?)", head))
    for f in out["findings"]:
        stated.update(re.findall(r"^driver (\d+\.\d+(?:\.\d+)?)", f["message"]))
        if isinstance(f["facts"].get("driver"), str) and re.match(r"\d", f["facts"]["driver"]):
            stated.add(f["facts"]["driver"])
    assert stated <= ({driver} if driver else set()), f"report states {stated}, machine view {driver}"
    assert fp.get("driver") == driver

    # The GPUs CUDA uses, their compute capability, and what tune makes of them.
    assert fp.get("gpus", [g.name for g in m.gpus.compute]) == [g.name or "unknown GPU" for g in m.gpus.compute]
    rec = rules.recommend(doc)
    if rec.device == "cuda":
        assert rec.settings.nproc == max(1, len(m.gpus.compute))
        cc = oldest_cc(m.gpus.compute)
        want = "bf16" if cc and cc >= (8, 0) else "fp16" if cc and cc >= (7, 0) else "fp32"
        assert rec.settings.precision == want
    for f in out["findings"]:
        if f["id"] in ("torch.E003", "torch.W003"):
            gpu = next(g for g in m.gpus if g.label == f["about"])
            assert f["facts"]["compute_capability"] == gpu.cc

    # Usable CPUs.
    assert fp.get("usable_cpus") == (m.cpus.usable if m.cpus.known else None)
    if m.cpus.known:
        assert rec.per_process_cpus == max(1, m.cpus.usable // rec.settings.nproc)

    # The Debian release: the doctor warns exactly when the view says it is older than supported.
    older = bool(m.os.is_debian and m.os.debian and m.os.debian.relation == "older")
    assert ("os.W002" in [f["id"] for f in out["findings"]]) == older

    # The torch build.
    torch_head = _headline(text, "PyTorch")
    if m.torch.installed:
        assert torch_head.startswith(f"{m.torch.version} ({m.torch.build})")
        assert (fp.get("torch"), fp.get("torch_cuda")) == (m.torch.version, m.torch.cuda or "")
    assert "None" not in torch_head


def test_the_mismatch_fixture_names_one_driver():
    """Kernel module 525.105.17 still loaded, libraries 525.147.05 installed: the driver CUDA
    will use after the reboot is the libraries'; the module is named as such, once."""
    d = HOSTS / "debian12-driver-mismatch-rtx3090"
    m = Machine.from_facts(facts_mod.collect(ReplayHost(d)))
    assert (m.driver.version, m.driver.source, m.driver.kernel_module) == ("525.147.05", "the driver libraries",
                                                                           "525.105.17")
    assert m.driver.mismatch
    text = runner.invoke(app, ["doctor", "--host", str(d)]).output
    assert "NVIDIA driver: driver 525.147.05 (libraries; kernel module 525.105.17 still loaded)" in text


def test_answers_are_plain_data_for_any_document():
    """A document with odd or missing sections still gets answers, never an exception."""
    for doc in ({}, {"nvidia": {"gpus": "x"}, "cpu": {"usable_cpus": "8"}, "os": {"id": 5}},
                {"nvidia": {"gpus": [{"name": "NVIDIA A100-SXM4-80GB"}, "junk"]}, "python": {"torch": {"installed": True}}}):
        a = Machine.from_facts(doc).answers()
        json.dumps(a)


def test_the_parts_show_as_dataclasses_show():
    """The parts read as @dataclass's own repr, compare and hash as values."""
    import dataclasses

    from debtorch import machine

    parts = [c for c in vars(machine).values() if isinstance(c, type) and dataclasses.is_dataclass(c)]
    assert len(parts) >= 15
    for cls in parts:
        twin = dataclasses.make_dataclass(cls.__name__, [(f.name, f.type, dataclasses.field(repr=f.repr))
                                                         for f in dataclasses.fields(cls)], frozen=True)
        values = {f.name: ("v", i) if i % 2 else None for i, f in enumerate(dataclasses.fields(cls))}
        assert repr(cls(**values)) == repr(twin(**values))
        assert cls(**values) == cls(**values) and hash(cls(**values)) == hash(cls(**values))
