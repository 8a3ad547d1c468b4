"""Fixtures and hooks only; what tests share otherwise lives in clitools.py and hostkit.py.

Two tiers: ``@pytest.mark.slow`` marks every test that trains or starts a worker or a process of
training (a contributor runs ``./dev.sh test -m "not slow"`` between edits); ``./dev.sh test``
runs both and says what each took.  ``@pytest.mark.torch`` marks a test that needs PyTorch in this
interpreter: whether there is one is decided here, once, without importing it.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
TIERS = {"fast": [0, 0.0], "slow": [0, 0.0]}   # tier -> [tests, seconds]
# Folders of data, not tests: pytest need not walk their 600 folders and 1,000 files on every run.
collect_ignore = ["collect_env", "corpus", "golden", "hosts", "lint_corpus", "real", "verify_workloads", "workloads"]


def pytest_configure(config):
    # What debtorch caches (parsed knowledge files, workload images) goes to a folder of this run,
    # never the user's ~/.cache, and every run starts with an empty cache.
    if "DEBTORCH_CACHE" not in os.environ:
        os.environ["DEBTORCH_CACHE"] = config._debtorch_cache = tempfile.mkdtemp(prefix="debtorch-test-cache-")


def pytest_unconfigure(config):
    if getattr(config, "_debtorch_cache", None):
        shutil.rmtree(config._debtorch_cache, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.torch`` tests are skipped where this interpreter has no torch (Debian's python3
    during the package build, a base install)."""
    if HAS_TORCH:
        return
    skip = pytest.mark.skip(reason=f"{sys.executable} has no torch")
    for item in items:
        if item.get_closest_marker("torch") is not None:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    tier = TIERS["slow" if "slow" in report.keywords else "fast"]
    tier[0] += report.when == "call"
    tier[1] += report.duration


def pytest_terminal_summary(terminalreporter):
    """Each tier's tests and time (setup, call and teardown), so that the fast tier's bound is seen."""
    terminalreporter.write_line("tiers: " + ", ".join(f"{name} {n} tests in {s:.1f} s" for name, (n, s) in TIERS.items())
                                + ' (the fast tier alone: -m "not slow")')


@pytest.fixture
def replay():
    """replay("debian12-vm-2core") -> a ReplayHost of tests/hosts/<name>."""
    from clitools import HOSTS

    from debtorch.host import ReplayHost

    def _make(name):
        return ReplayHost(HOSTS / name)

    return _make


@pytest.fixture
def no_live(monkeypatch):
    """Fail the test if anything starts a process or loads NVML on the live machine."""
    def boom(*a, **k):
        raise AssertionError(f"live process started: {a[:1]}")

    monkeypatch.setattr(subprocess, "Popen", boom)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    return True
