"""Errors from the target interpreter keep their first meaningful line (issue 34, item 9): a pyenv
shim that has no such Python says "pyenv: python2: command not found" first and a note about global
versions after it; the doctor and the worker name the first line, once, never the note's last fragment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clitools import cli_runner

from debtorch.host import CommandResult, meaningful_line
from debtorch.transport.client import Worker, WorkerError

SHIM_SAYS = """pyenv: python2: command not found

The `python2' command exists in these Python versions:
  2.7.18

Note: See 'pyenv help global' for tips on allowing both
      python2 and Python versions to be found at the same time.
"""


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    """A fake pyenv shim named python2: pyenv's words on stderr, exit status 127."""
    path = tmp_path / "bin" / "python2"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\ncat >&2 <<'EOF'\n" + SHIM_SAYS + "EOF\nexit 127\n")
    path.chmod(0o755)
    return path


def test_the_meaningful_line_of_a_shim_a_traceback_and_a_fatal_error() -> None:
    assert meaningful_line(SHIM_SAYS) == "pyenv: python2: command not found"
    traceback = "Traceback (most recent call last):\n  File \"<string>\", line 1, in <module>\nImportError: no json\n"
    assert meaningful_line("DeprecationWarning: x\n" + traceback) == "ImportError: no json"
    assert meaningful_line("hello\nFatal Python error: init_fs_encoding\nPython runtime state\n") == \
        "Fatal Python error: init_fs_encoding"
    assert meaningful_line("\n \n") == ""


def test_a_failed_command_is_named_by_its_first_line() -> None:
    res = CommandResult(argv=("python2",), returncode=127, stdout="", stderr=SHIM_SAYS)
    assert res.reason == "exit status 127: pyenv: python2: command not found"


def test_doctor_names_the_shims_first_line_once(shim: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from debtorch.cli import app

    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    res = cli_runner().invoke(app, ["doctor", "--python", "python2"])
    assert res.exit_code == 2
    assert "pyenv: python2: command not found" in res.stderr
    assert res.stderr.count("pyenv: python2") == 1 and "at the same time" not in res.stderr


def test_a_worker_that_never_starts_names_the_shims_first_line(shim: Path) -> None:
    with pytest.raises(WorkerError) as err:
        with Worker(str(shim), "debtorch.fleet.torchside", timeout=30) as w:
            w.request("caps")
    assert "pyenv: python2: command not found" in err.value.message
    assert "at the same time" not in err.value.message
