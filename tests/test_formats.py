"""Output formats, in one place (debtorch/report): every format of every command is handled,
JSON is strict, and the console styles a line by the kind its renderer gave it."""

import json

import pytest
from hostkit import HOSTS
from typer.testing import CliRunner

from debtorch.cli import app
from debtorch.report import Format, console, jsonout, show
from debtorch.report.doctor import DoctorView, doctor_lines
from debtorch.report.facts import FactsView
from debtorch.report.tune import TuneView
from debtorch.report.verify import VerifyView

SERVER = str(HOSTS / "debian12-server-8xa100-nvlink")
FLAGS = {Format.text: [], Format.json: ["--json"], Format.env: ["--emit", "env"]}
COMMANDS = {"facts": (FactsView, []), "doctor": (DoctorView, []), "tune": (TuneView, []),
            "verify-train": (VerifyView, None)}  # verify-train trains: its CLI runs in test_verify_train.py


def strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in a JSON document")

    return json.loads(text, parse_constant=refuse)


def check_output(fmt: Format, out: str) -> None:
    assert out.strip()
    if fmt is Format.json:
        assert isinstance(strict_json(out), dict)
    elif fmt is Format.env:
        assert out.splitlines()[-1].startswith("torchrun ")


@pytest.mark.parametrize("command,fmt", [(c, f) for c, (view, _) in COMMANDS.items() for f in view.formats
                                         if COMMANDS[c][1] is not None])
def test_every_format_of_every_command_is_handled(command, fmt):
    res = CliRunner().invoke(app, [command, "--host", SERVER, *FLAGS[fmt]])
    assert res.exit_code in (0, 1), res.output
    check_output(fmt, res.stdout)


def test_the_formats_a_command_offers_are_the_ones_its_view_handles():
    assert set(Format) == {f for view, _ in COMMANDS.values() for f in view.formats}
    for view, _ in COMMANDS.values():
        assert {Format.text, Format.json} <= set(view.formats)


def _verify_view():
    from debtorch.train.device import CPU
    from debtorch.train.result import LoadedWorkload, TrialResult
    from debtorch.verify import analysis
    from debtorch.verify.measure import Measured
    from debtorch.verify.run import Outcome

    m = Measured(device=CPU, workload=LoadedWorkload(name="builtin:cnn"))
    m.trials["baseline"] = [TrialResult(samples_per_s=100.0, losses=[float("nan")])] * 3
    m.trials["tuned"] = [TrialResult(samples_per_s=150.0, data_wait_share=float("inf"))] * 3
    summary = analysis.summary(m)
    return VerifyView(Outcome(m, summary, analysis.verdict(summary), ["a warning"], None, {}), 0)


@pytest.mark.parametrize("fmt", list(VerifyView.formats))
def test_every_format_of_verify_train_is_handled(fmt, capsys):
    show(_verify_view(), fmt)
    out = capsys.readouterr().out
    check_output(fmt, out)
    if fmt is Format.text:
        assert "verify-train: builtin:cnn on cpu" in out and "verdict: tuned is 1.50x baseline" in out
    else:  # a NaN loss and an infinite share became null; the warning is in the document as it was built
        doc = strict_json(out)
        assert doc["trials"]["baseline"][0]["losses"] == [None] and doc["warnings"] == ["a warning"]


def test_a_view_refuses_a_format_it_does_not_have():
    with pytest.raises(ValueError, match="FactsView has no env format"):
        show(FactsView({}), Format.env)


def test_json_is_strict_and_keeps_what_it_can():
    doc = strict_json(jsonout.dumps({"nan": float("nan"), "inf": [float("-inf"), 1.5], "ids": {"b", "a"},
                                     "path": HOSTS, "ok": True, "n": 3, "none": None}))
    assert doc == {"nan": None, "inf": [None, 1.5], "ids": ["a", "b"], "path": str(HOSTS), "ok": True, "n": 3,
                   "none": None}


def test_lines_are_styled_by_their_kind_not_by_their_text(monkeypatch, capsys):
    from debtorch.doctor import Report
    from debtorch.findings import ERROR, Finding

    # A fix that starts with "x" (the ASCII error mark) is not an error line.
    report = Report([Finding("cpu.E001", ERROR, "broken", fix="x-server-utils must go\nxz -d it")])
    lines = doctor_lines({}, report, unicode=False)
    kinds = {line.text.strip(): line.kind for line in lines}
    assert kinds["x broken (cpu.E001)"] == "error"
    assert kinds["fix: x-server-utils must go"] == "plain" and kinds["xz -d it"] == "plain"
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    console.print_view([console.Line("bad", "error"), console.Line("x plain")])
    out = capsys.readouterr().out.splitlines()
    assert "\x1b[31m" in out[0] and "\x1b[" not in out[1]
