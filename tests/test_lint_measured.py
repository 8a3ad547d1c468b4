"""Host waits per step: read from a workload's code, or counted with torch.cuda.set_sync_debug_mode (faked here).

verify-train reports "host waits per step: N (file:line, ...)"; on CUDA the
worker counts synchronising calls (benchmarks/gpu_check.sh runs it for real
on a GPU machine); elsewhere the static pass says which lines would wait.
"""

import importlib.util
import os
import textwrap
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import debtorch
from debtorch.hostwaits import SYNC_WARNING, count_host_waits
from debtorch.lint.measured import static_result, static_waits
from debtorch.report import verify as report
from debtorch.report.console import texts
from debtorch.train.device import Device
from debtorch.train.result import LoadedWorkload
from debtorch.verify.analysis import summary
from debtorch.verify.measure import Plan, Verifier
from debtorch.verify.results import HostWaits
from debtorch.verify.run import Outcome

BUILTIN_WORKLOADS = Path(debtorch.__file__).resolve().parent / "train" / "workloads.py"  # imports torch: read only

WORKLOAD = textwrap.dedent("""\
    import torch, torch.nn as nn, torch.nn.functional as F

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 2)

        def forward(self, x):
            if x.sum() > 0:
                x = x * 2
            return self.fc(x)

    def loss_fn(out, target):
        print("max", out.max().item())
        return F.cross_entropy(out, target)

    def make():
        return {"model": Net(), "dataset": None, "loss_fn": loss_fn, "batch_size": 8}
    """)


def test_the_static_pass_reads_forward_and_loss_fn_of_a_workload(tmp_path):
    path = tmp_path / "mywork.py"
    path.write_text(WORKLOAD)
    assert [(f.id, f.line) for f in static_waits(str(path))] == [("script.W003", 9), ("script.W001", 14)]
    result = static_result(str(path))
    assert report.report_line(HostWaits.from_json(result)) == (
        "host waits per step: 2 (mywork.py:9, mywork.py:14); read from the code: the lines that would wait on a GPU "
        "(debtorch lint)")


def test_debtorchs_own_workloads_do_not_wait_on_the_host():
    assert static_waits(str(BUILTIN_WORKLOADS)) == []


def test_an_unreadable_workload_file_gives_no_places(tmp_path):
    assert static_waits(str(tmp_path / "missing.py")) == []
    (tmp_path / "bad.py").write_text("def f(:\n")
    assert static_waits(str(tmp_path / "bad.py")) == []


class FakeCuda:
    """torch.cuda's sync debug switch; ops below warn like c10's warn_or_error_on_sync when it is "warn"."""

    def __init__(self):
        self.mode = 0
        self.modes = []

    def get_sync_debug_mode(self):
        return self.mode

    def set_sync_debug_mode(self, mode):
        self.modes.append(mode)
        self.mode = mode


def synchronizing_op(torch):
    """Stands for a CUDA op in torch's own code (tensor.item(), nonzero())."""
    if torch.cuda.mode == "warn":
        warnings.warn(SYNC_WARNING)


USER_CODE = textwrap.dedent("""\
    def forward(op):
        op()            # line 2: one wait per step
        return 1

    def loss(op):
        for _ in range(2):
            op()        # line 7: two waits per step
    """)


def _user_module(tmp_path):
    path = tmp_path / "userwork.py"
    path.write_text(USER_CODE)
    spec = importlib.util.spec_from_file_location("userwork", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return path, mod


def test_counting_maps_each_wait_to_the_users_line_and_skips_the_first_step(tmp_path):
    path, mod = _user_module(tmp_path)
    torch = SimpleNamespace(cuda=FakeCuda())
    op = lambda: synchronizing_op(torch)  # noqa: E731

    def run(on_step):
        for step in range(4):
            mod.forward(op)
            mod.loss(op)
            if step == 0:
                op()  # the first (warm-up) step also waits once more: not counted
            op()      # a wait in code outside the workload's file (the engine's)
            on_step({"phase": "timed", "step": step + 1})

    result = count_host_waits(run, [str(path)], torch)
    assert result["steps"] == 3 and result["per_step"] == 3.0 and result["elsewhere_per_step"] == 1.0
    assert [(Path(x["path"]).name, x["line"], x["per_step"]) for x in result["lines"]] == [
        ("userwork.py", 7, 2.0), ("userwork.py", 2, 1.0)]
    assert torch.cuda.modes == ["warn", 0] and torch.cuda.mode == 0  # the debug mode is put back
    assert report.report_line(HostWaits.from_json(result)) == ("host waits per step: 3 (userwork.py:7, userwork.py:2); measured with "
                                   "torch.cuda.set_sync_debug_mode over 3 steps; 1.0 more per step outside "
                                   "the workload's code")


def test_the_debug_mode_is_restored_when_training_fails(tmp_path):
    torch = SimpleNamespace(cuda=FakeCuda())

    def run(on_step):
        raise RuntimeError("CUDA out of memory")

    try:
        count_host_waits(run, [], torch)
    except RuntimeError:
        pass
    assert torch.cuda.mode == 0


class FakeWorker:
    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        self.proc = None

    def request(self, op, on_event=None, timeout=None, **req):
        self.requests.append(op)
        return self.answer


def _verifier(tmp_path, device, answer):
    path = tmp_path / "mywork.py"
    path.write_text(WORKLOAD)
    v = Verifier(Plan(workload="mywork:make", repeats=3))
    v.worker = FakeWorker(answer)
    v.measured.device = Device.parse(device)
    v.measured.workload = LoadedWorkload(batch_size=8, file=str(path))
    return v


def test_verify_train_reports_the_static_lines_on_a_cpu(tmp_path):
    v = _verifier(tmp_path, "cpu", None)
    m = v.measured
    m.host_waits = v.host_waits()
    assert v.worker.requests == []  # nothing to count without CUDA
    assert "host waits per step: 2 (mywork.py:9, mywork.py:14); read from the code" in texts(report.lines(m, summary(m)))[0]
    outcome = Outcome(measured=m, summary=summary(m), verdict="", warnings=[], config=None, facts={})
    assert report.VerifyView(outcome, 0).document()["host_waits"]["measured"] is False


def test_verify_train_reports_the_count_on_cuda(tmp_path):
    counted = {"measured": True, "steps": 5, "per_step": 1.0, "elsewhere_per_step": 0.0,
               "lines": [{"path": str(tmp_path / "mywork.py"), "line": 14, "per_step": 1.0}]}
    v = _verifier(tmp_path, "cuda:0", counted)
    v.measured.host_waits = v.host_waits()
    assert v.worker.requests == ["host_waits"]
    line = texts(report.lines(v.measured, summary(v.measured)))[0]
    assert line == "host waits per step: 1 (mywork.py:14); measured with torch.cuda.set_sync_debug_mode over 5 steps"


@pytest.mark.torch
def test_the_worker_names_the_workload_file_and_counts_nothing_off_cuda():
    pytest.importorskip("torch")
    from debtorch.train.worker import Session

    session = Session(proto=None)
    loaded = session.op_load({"workload": "builtin:cnn", "device": "cpu",
                           "options": {"samples": 16, "size": 16, "raw": 32, "width": 8, "batch_size": 8}})
    assert loaded["file"] == os.path.realpath(BUILTIN_WORKLOADS)
    assert session.op_host_waits({"steps": 2}) == {"measured": False, "file": loaded["file"]}


def test_the_worker_still_imports_without_debtorchs_dependencies():
    # The worker runs in the user's interpreter, which need not have typer, rich, packaging...:
    # counting host waits must not pull the linter (or the doctor) into it: only the transport's
    # server, the host-sync counter, the simulated accelerator and the worker itself.
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    code = ("import sys, debtorch.train.worker; "
            "print(sorted(m for m in sys.modules if m.startswith('debtorch')))")
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(["debtorch", "debtorch.__about__", "debtorch.hostwaits", "debtorch.train",
                                      "debtorch.train.device", "debtorch.train.sim", "debtorch.train.worker",
                                      "debtorch.transport", "debtorch.transport.server"])
