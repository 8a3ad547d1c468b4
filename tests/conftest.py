import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What debtorch caches (parsed knowledge files, workload images) goes to a folder of this run,
# never the user's ~/.cache, and every run starts with an empty cache.
if "DEBTORCH_CACHE" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["DEBTORCH_CACHE"] = tempfile.mkdtemp(prefix="debtorch-test-cache-")
    atexit.register(shutil.rmtree, os.environ["DEBTORCH_CACHE"], True)
HOSTS = ROOT / "tests" / "hosts"
REAL_FILES = ROOT / "tests" / "real"   # copies of /work/shared/fixtures/real, see SOURCES.md there


def run_debtorch(*args, input=None, env=None, timeout=120):
    """Run ``python -m debtorch`` from this checkout, as a user would."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(ROOT) + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "debtorch", *args],
        input=input,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


@pytest.fixture
def replay():
    """replay("debian12-vm-2core") -> a ReplayHost of tests/hosts/<name>."""
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


def _this_python_has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.torch``: the test runs PyTorch in this interpreter; skip it where there is none
    (Debian's python3 during the package build, a base install)."""
    if _this_python_has_torch():
        return
    skip = pytest.mark.skip(reason=f"{sys.executable} has no torch")
    for item in items:
        if item.get_closest_marker("torch") is not None:
            item.add_marker(skip)
