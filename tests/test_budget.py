"""Budgets are wall-clock promises: the pieces on a fake clock, and both commands with a workload that hangs.

The commands' tests run ``python -m debtorch`` as a user would and time it from outside: the
command must end within its budget plus the stated slack (``debtorch.budget.SLACK_S``, which
also covers the interpreter's own start), and say in one line where the workload hung.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import ROOT, at_once

from debtorch.budget import SLACK_S, Budget, Where, stopped

TESTS = Path(__file__).parent


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_budget_counts_from_the_commands_start_and_caps_every_wait():
    clock = Clock()
    b = Budget(30, start=95.0, clock=clock)  # the command started 5 s before measuring began
    assert b.spent() == 5 and b.left() == 25
    assert b.cap(600) == 25 and b.binding(600) and not b.binding(10)
    clock.now = 140.0
    assert b.left() == 0 and b.cap(600) == 0 and not b.fits(0.5)
    free = Budget(None, clock=clock)
    assert not free.limited and free.cap(600) == 600 and not free.binding(600)


def test_where_names_the_step_a_workload_hung_in():
    clock = Clock()
    where = Where(clock)
    where.doing("trial 7 (w2 pf2 fp32 t1)")
    where.progress({"event": "progress", "phase": "warmup", "step": 1, "steps": 2})
    clock.now += 12
    assert where.line() == "trial 7 (w2 pf2 fp32 t1), warm-up step 2 of 2 (no progress for 12 s)"
    assert stopped(Budget(20, clock=clock), where) == (
        "stopped at the end of --budget 20 s in trial 7 (w2 pf2 fp32 t1), warm-up step 2 of 2 (no progress for "
        "12 s): the workload hangs there, or needs a larger budget")
    # A trial still making progress when the budget ended is slow, not hung: it is not called hung.
    where.progress({"event": "progress", "phase": "timed", "step": 3, "steps": 20})
    clock.now += 1
    assert where.line() == "trial 7 (w2 pf2 fp32 t1), timed step 4 of 20"
    assert stopped(Budget(20, clock=clock), where) == (
        "stopped at the end of --budget 20 s in trial 7 (w2 pf2 fp32 t1), timed step 4 of 20, still making "
        "progress: a larger budget would let it finish (a busy machine slows every step)")


# -- the commands, with a workload that hangs ---------------------------------------------------

HANGS = [
    ("tune", "tiny:hang_in_load", "in loading tiny:hang_in_load (no progress for "),
    ("tune", "tiny:hang_in_step", "in trial 1 (w0 "),
    ("verify-train", "tiny:hang_in_load", "in loading tiny:hang_in_load (no progress for "),
    # verify-train's first trial calibrates the rules on the workload (docs/tune.md, "Calibrated rules")
    ("verify-train", "tiny:hang_in_step", "in calibrating: w0 "),
]
BUDGET = 20


def timed(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "debtorch", *args], capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=300)
    return r, time.monotonic() - t0


@pytest.fixture(scope="module")
def hung():
    """The four commands of HANGS run at once (each waits on its hung workload, not on the CPU):
    (command, workload) -> (result, seconds it took)."""
    def run(command, workload):
        args = ["--measure"] if command == "tune" else []
        return timed([command, "--python", sys.executable, *args, "--budget", str(BUDGET), "--workload", workload],
                     TESTS / "workloads")

    return at_once({(c, w): (lambda c=c, w=w: run(c, w)) for c, w, _ in HANGS}, workers=len(HANGS))


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("command,workload,where", HANGS)
def test_a_hanging_workload_is_stopped_at_the_budget_naming_where(hung, command, workload, where):
    r, took = hung[command, workload]
    assert r.returncode == 1, r.stderr
    assert took <= BUDGET + SLACK_S, f"{took:.1f} s for --budget {BUDGET}"
    failed = "measurement failed: " if command == "tune" else ""
    line = f"debtorch {command}: {failed}stopped at the end of --budget {BUDGET} s {where}"
    assert [x for x in r.stderr.splitlines() if x.startswith(line)], r.stderr
    assert r.stderr.rstrip().endswith("the workload hangs there, or needs a larger budget")
    assert "Traceback" not in r.stderr


def test_every_count_an_option_takes_is_checked_in_one_wording():
    from debtorch.budget import count_problem

    assert count_problem("--nproc", 4, 1, 65536) is None
    assert count_problem("--nproc", 0, 1, 65536) == "--nproc must be an integer from 1 to 65536 (got 0)"
    assert count_problem("--steps", True, 2, 10) == "--steps must be an integer from 2 to 10 (got True)"
    assert count_problem("--repeats", 2, 3, 1000, "medians need interleaved repeats").endswith(
        "(got 2): medians need interleaved repeats")
