"""What the command-line tests share: where the checkout and its fixtures are, debtorch run as a
user runs it, and a CliRunner that works on Debian 12's click and on PyPI's."""

import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ROOT / "tests" / "hosts"       # whole machines recorded as folders of files
REAL_FILES = ROOT / "tests" / "real"   # public files of real machines; where each came from: SOURCES.md there


def cli_runner() -> CliRunner:
    """A runner that keeps stderr apart from stdout, on click 8.1 (Debian 12) and 8.2+."""
    try:
        return CliRunner(mix_stderr=False)  # click < 8.2 (Debian 12's 8.1.3)
    except TypeError:
        return CliRunner()  # click >= 8.2 always separates stderr


def run_debtorch(*args, input=None, env=None, timeout=120):
    """Run ``python -m debtorch`` from this checkout, as a user would."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT) + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "debtorch", *args], input=input, capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def at_once(calls: dict, workers: int = 0) -> dict:
    """``{key: function}`` called in threads, at most ``workers`` at a time (default: one per CPU):
    commands that mostly start interpreters, import torch or wait on a workload share the machine
    better than in a row.  Returns ``{key: what it returned}``; the first exception is raised."""
    workers = workers or len(os.sched_getaffinity(0))
    with concurrent.futures.ThreadPoolExecutor(max(1, min(workers, len(calls)))) as pool:
        futures = {key: pool.submit(fn) for key, fn in calls.items()}
    return {key: future.result() for key, future in futures.items()}


def said(res) -> str:
    """All a CliRunner result printed, stdout then stderr, on click 8.1 (mix_stderr=False) and 8.2+."""
    return res.stdout + res.stderr
