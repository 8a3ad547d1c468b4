"""`debtorch lint` as a user runs it: the compiler-style report, --json, exit codes, TorchFix."""

import json
import sys
import textwrap

import pytest
from clitools import cli_runner

from debtorch.cli import app

SLOW_LOOP = textwrap.dedent("""\
    import torch
    from torch.utils.data import DataLoader
    device = torch.device("cuda")
    model = torch.nn.Linear(8, 2).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=32, num_workers=args.workers, pin_memory=True, persistent_workers=True)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss.backward()
        opt.step()
        total = loss.item()
    """)


def invoke(*args):
    return cli_runner().invoke(app, ["lint", *args])


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SLOW_LOOP)
    return path


def test_the_report_reads_like_a_compiler_with_the_code_and_the_fix(script):
    r = invoke(str(script))
    assert r.exit_code == 1, r.stderr  # a warning fails at the default --fail-on warning, as ruff and flake8
    lines = r.stdout.splitlines()
    assert lines[0] == f"{script}:11:13: script.W001 loss.item() makes the host wait for the GPU every step"
    assert lines[1] == "    total = loss.item()"
    assert lines[2].startswith("    fix: keep the value on the device")
    assert lines[-1] == "1 finding (1 warning) in 1 file"
    assert "why:" in invoke("--verbose", str(script)).stdout


def test_fail_on_warning_exits_1_and_ignore_silences(script):
    assert invoke("--fail-on", "warning", str(script)).exit_code == 1
    assert invoke("--fail-on", "error", str(script)).exit_code == 0  # a warning only: the doctor's default
    r = invoke("--fail-on", "warning", "--ignore", "script.W001", str(script))
    assert r.exit_code == 0 and r.stdout.strip() == "no findings in 1 file (1 silenced)"


def test_json_is_one_object_with_a_schema_version(script):
    r = invoke("--json", str(script))
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and doc["exit_code"] == 1 and doc["fail_on"] == "warning"
    assert r.exit_code == 1
    assert doc["findings"] == [{"path": str(script), "line": 11, "col": 13, "id": "script.W001", "level": "warning",
                                "message": "loss.item() makes the host wait for the GPU every step",
                                "fix": doc["findings"][0]["fix"], "code": "    total = loss.item()"}]
    assert doc["summary"]["warning"] == 1 and doc["errors"] == []


def test_bad_input_is_one_line_and_exit_2(tmp_path, script):
    r = invoke(str(tmp_path / "nope.py"))
    assert r.exit_code == 2 and r.stderr == f"debtorch lint: {tmp_path / 'nope.py'}: no such file or directory\n"
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ndef f(:\n")
    r = invoke(str(bad))
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr == f"debtorch lint: {bad}:2:7: not valid Python: invalid syntax\n"
    r = invoke("--ignore", "W001", str(script))
    assert r.exit_code == 2 and "not a lint id" in r.stderr


def test_a_folder_is_searched_and_one_broken_file_does_not_stop_the_others(tmp_path, script):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "broken.py").write_text("import torch\nfor\n")
    (tmp_path / "pkg" / "notes.py").write_text("def f(:\n")          # no torch: not parsed
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "hidden.py").write_text(SLOW_LOOP)           # hidden folders are not entered
    r = invoke("--json", str(tmp_path))
    doc = json.loads(r.stdout)
    assert r.exit_code == 2
    assert [f["path"] for f in doc["findings"]] == [str(script)]
    assert [e["path"] for e in doc["errors"]] == [str(tmp_path / "pkg" / "broken.py")]
    assert doc["summary"]["files"] == 1 and doc["summary"]["skipped"] == 1
    assert r.stderr.startswith(f"debtorch lint: {tmp_path / 'pkg' / 'broken.py'}:2:")


def test_without_torchfix_asking_for_it_is_bad_usage(script, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchfix", None)  # importing it fails, as when it is not installed
    r = invoke("--torchfix", str(script))
    assert r.exit_code == 2 and "TorchFix is not installed" in r.stderr
    assert invoke("--fail-on", "error", str(script)).exit_code == 0


FAKE_TORCHFIX = '''
DISABLED_BY_DEFAULT = ["TOR3", "TOR4", "TOR9"]
__version__ = "0.0-fake"

class TorchChecker:
    """TorchFix's flake8 plugin interface: (tree, lines), run() yields (line, col, "CODE message", type)."""
    def __init__(self, tree, lines):
        self.lines = lines
    def run(self):
        for i, line in enumerate(self.lines, 1):
            if "torch.load(" in line:
                yield i, 1 + line.index("torch.load("), "TOR102 `torch.load` without `weights_only` parameter is unsafe.", type(self)
            if "DataLoader(" in line:
                yield i, 1, "TOR401 Detected DataLoader running with synchronized implementation.", type(self)
'''


@pytest.fixture
def fake_torchfix(tmp_path, monkeypatch):
    pkg = tmp_path / "fakes" / "torchfix"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.0-fake"\n')
    (pkg / "torchfix.py").write_text(FAKE_TORCHFIX)
    monkeypatch.syspath_prepend(str(tmp_path / "fakes"))
    for name in ("torchfix", "torchfix.torchfix"):
        monkeypatch.delitem(sys.modules, name, raising=False)


def test_torchfix_findings_come_under_their_own_ids(tmp_path, fake_torchfix):
    path = tmp_path / "load.py"
    path.write_text(SLOW_LOOP + "state = torch.load('ckpt.pt')\n")
    r = invoke("--json", str(path))
    doc = json.loads(r.stdout)
    assert doc["torchfix"] == "0.0-fake"
    got = [(f["id"], f["line"]) for f in doc["findings"]]
    assert got == [("script.W001", 11), ("torchfix.TOR102", 12)]  # TOR401 is off by TorchFix's default
    assert invoke("--ignore", "torchfix", str(path)).stdout.strip().endswith("(1 silenced; with TorchFix 0.0-fake)")
    plain = json.loads(invoke("--json", "--no-torchfix", str(path)).stdout)
    assert plain["torchfix"] is None and [f["id"] for f in plain["findings"]] == ["script.W001"]


INFO_ONLY = textwrap.dedent("""\
    import torch
    from torch.utils.data import DataLoader
    model = torch.nn.Linear(8, 2).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=32, num_workers=args.workers, pin_memory=False)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        loss.backward()
        opt.step()
    """)


def test_exit_status_follows_fail_on_like_the_doctor(tmp_path, script):
    """Default warning: 1 on a warning; info never fails; --fail-on error: only errors (a crashed rule)."""
    info = tmp_path / "info.py"
    info.write_text(INFO_ONLY)
    r = invoke("--json", str(info))
    doc = json.loads(r.stdout)
    assert [f["level"] for f in doc["findings"]] == ["info"] and r.exit_code == 0 and doc["exit_code"] == 0
    assert invoke(str(script)).exit_code == 1
    assert invoke("--fail-on", "error", str(script)).exit_code == 0
    assert invoke("--fail-on", "info", str(script)).exit_code == 2  # not a level that --fail-on takes
    clean = tmp_path / "clean.py"
    clean.write_text("import torch\n")
    assert invoke(str(clean)).exit_code == 0


@pytest.mark.parametrize("n", [1000, pytest.param(8000, marks=pytest.mark.slow)])
def test_a_file_of_many_findings_on_one_huge_line_prints_a_bounded_report(tmp_path, n):
    """Issue 30: one 160 KB line of per-step .item() calls (n = 8000; the fast tier's 1000 make a 20 KB
    line, still ten times the findings a file may show): an excerpt per finding, at most 5 a line, the
    rest counted; the exit status still says there were findings."""
    calls = "; ".join(f"v{i} = loss.item()" for i in range(n))
    path = tmp_path / "long.py"
    path.write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.SGD(model.parameters())\n"
                    "for x in loader:\n    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()\n"
                    f"    {calls}\n")
    r = invoke("--no-torchfix", str(path))
    assert r.exit_code == 1
    assert len(r.stdout) < 20_000
    lines = r.stdout.splitlines()
    assert sum(line.startswith(f"{path}:8:") for line in lines) == 5
    assert max(len(line) for line in lines) < 400
    assert f"{path}: {n - 5} more findings not shown (at most 5 a line and 100 a file)" in lines
    assert lines[-1] == f"{n} findings ({n} warnings) in 1 file ({n - 5} not shown)"
    doc = json.loads(invoke("--json", "--no-torchfix", str(path)).stdout)
    assert len(doc["findings"]) == 5 and doc["summary"]["not_shown"] == n - 5 and doc["summary"]["warning"] == n
    assert all(len(f["code"]) <= 246 for f in doc["findings"])


def test_names_and_code_from_the_file_cannot_drive_the_terminal(tmp_path):
    """A file name and a code line holding an escape sequence or a right-to-left override are shown escaped
    in the text report; --json keeps them as they are (JSON escapes them itself)."""
    folder = tmp_path / "evil\x1b]0;pwned\x07"
    folder.mkdir()
    path = folder / "train\u202e.py"
    path.write_text(SLOW_LOOP.replace("total = loss.item()", "total = loss.item()  # \x1b[2J\u202egnol"))
    r = invoke(str(path))
    assert "\x1b" not in r.stdout and "\u202e" not in r.stdout and "\x07" not in r.stdout
    assert "evil\\x1b]0;pwned\\x07" in r.stdout and "train\\u202e.py" in r.stdout
    assert "# \\x1b[2J\\u202egnol" in r.stdout
    doc = json.loads(invoke("--json", str(path)).stdout)
    assert doc["findings"][0]["path"] == str(path) and "\x1b[2J" in doc["findings"][0]["code"]
    broken = folder / "bad\u202e.py"
    broken.write_text("import torch\nfor\n")
    r = invoke(str(broken))
    assert r.exit_code == 2 and "\u202e" not in r.stderr and "bad\\u202e.py" in r.stderr


def test_the_text_report_streams_file_by_file(tmp_path, script, monkeypatch):
    """Each file's findings are printed when that file is linted, before the next one is read."""
    import debtorch.lint.api as api

    second = tmp_path / "second.py"
    second.write_text(SLOW_LOOP)
    printed_before_second = []
    real = api.lint_file

    def spy(path, *args, **kwargs):
        if path == str(second):
            printed_before_second.append(sys.stdout.buffer.getvalue().decode())
        return real(path, *args, **kwargs)

    monkeypatch.setattr(api, "lint_file", spy)
    r = invoke(str(script), str(second))
    assert r.exit_code == 1
    assert printed_before_second and f"{script}:11:13: script.W001" in printed_before_second[0]


def test_findings_at_one_place_come_in_the_same_order_every_run():
    """One import line naming several deprecated names gives one W007 each at the same line and column:
    the report lists them by message, not in the order of a set (which changes with the hash seed)."""
    from debtorch.findings import Finding
    from debtorch.lint.result import Kept, Located

    names = ["autocast", "GradScaler", "custom_fwd", "custom_bwd", "grad_scaler"]  # PER_LINE: 5 shown
    kept = Kept()
    for name in names:
        kept.add(Located("t.py", 7, 1, Finding("script.W007", "warning", f"torch.cuda.amp.{name} is deprecated", "",
                                               "t.py:7")))
    found, _ = kept.result()
    assert [f.finding.message for f in found] == sorted(f"torch.cuda.amp.{name} is deprecated" for name in names)
