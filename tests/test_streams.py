"""Standard output that cannot take the report (issue 13, item 9), for every command.

A reader that went away (``| head``) is quiet and exits 141, as ``cat`` does; a
closed stdout (``>&-``) and a full disk (``/dev/full``) give one line on stderr
and exit 74 (docs/cli.md, "Exit codes").  Real processes: the streams are the
operating system's.
"""

import os
import subprocess
import sys

import pytest
from clitools import HOSTS, ROOT

HOST = str(HOSTS / "debian12-vm-2core")
LINT_FILE = str(ROOT / "tests" / "lint_corpus" / "article_amp.py")
COMMANDS = {
    "facts": ["facts", "--host", HOST],
    "facts --json": ["facts", "--host", HOST, "--json"],
    "doctor": ["doctor", "--host", HOST, "-v"],
    "tune": ["tune", "--host", HOST],
    "tune --emit env": ["tune", "--host", HOST, "--emit", "env"],
    "lint": ["lint", LINT_FILE],
    "verify-train --json": ["verify-train", "--config", "/nonexistent/debtorch.toml", "--json"],
}


def run(args, stdout, pass_fds=()):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "debtorch", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, env=env, timeout=120, pass_fds=pass_fds)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_reader_that_went_away_is_quiet_and_exits_141(name):
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte: every write fails with EPIPE
    try:
        res = run(COMMANDS[name], stdout=w)
    finally:
        os.close(w)
    assert res.returncode == 141, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
    assert "cannot write" not in res.stderr   # quiet: a broken pipe is no error of ours


@pytest.mark.parametrize("name", COMMANDS)
def test_a_full_disk_is_one_line_and_exits_74(name):
    with open("/dev/full", "w") as full:
        res = run(COMMANDS[name], stdout=full)
    assert res.returncode == 74, (res.returncode, res.stderr)
    last = res.stderr.strip().splitlines()[-1]
    assert last.endswith("cannot write to standard output: No space left on device"), res.stderr
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_a_closed_stdout_is_one_line_and_exits_74(name):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "debtorch", *COMMANDS[name]],
                         stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert res.returncode == 74, (res.returncode, res.stderr)
    assert res.stderr.strip().splitlines()[-1].endswith("cannot write to standard output: standard output is closed")
    assert "Traceback" not in res.stderr


def test_a_closed_stdin_is_bad_input_in_one_line():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", sys.executable, "-m", "debtorch", "doctor",
                          "--from-collect-env", "-"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2 and res.stderr == "debtorch: <stdin>: standard input is closed\n", res.stderr


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["doctor", "--help"]])
def test_help_and_version_end_like_every_command(args):
    """Issue 23: click answers a broken pipe with 1 and lets a full disk through as a traceback."""
    r, w = os.pipe()
    os.close(r)
    try:
        res = run(args, stdout=w)
    finally:
        os.close(w)
    assert res.returncode == 141 and res.stderr == "", (res.returncode, res.stderr)
    with open("/dev/full", "w") as full:
        res = run(args, stdout=full)
    assert res.returncode == 74 and res.stderr == "debtorch: cannot write to standard output: No space left on device\n"
