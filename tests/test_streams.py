"""Standard output that cannot take the report (issue 13, item 9), for every command.

A reader that went away (``| head``) is quiet and exits 141, as ``cat`` does; a
closed stdout (``>&-``) and a full disk (``/dev/full``) give one line on stderr
and exit 74 (docs/cli.md, "Exit codes").  Real processes: the streams are the
operating system's.
"""

import fcntl
import functools
import json
import os
import re
import subprocess
import sys

import pytest
from clitools import HOSTS, ROOT, at_once, cli_runner

from debtorch.cli import app

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


def reader_gone(args):
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first byte: every write fails with EPIPE
    try:
        return run(args, stdout=w)
    finally:
        os.close(w)


def disk_full(args):
    with open("/dev/full", "w") as full:
        return run(args, stdout=full)


def stdout_closed(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "debtorch", *args],
                          stderr=subprocess.PIPE, text=True, env=env, timeout=120)


OUTPUTS = {"reader gone": reader_gone, "disk full": disk_full, "closed": stdout_closed}
HELP = {"--help": ["--help"], "--version": ["--version"], "doctor --help": ["doctor", "--help"]}


@pytest.fixture(scope="module")
def ran():
    """Every command of COMMANDS and HELP with each standard output of OUTPUTS, run at once (each starts an
    interpreter and waits on it): (output, name) -> the finished process."""
    return at_once({(output, name): functools.partial(start, args) for output, start in OUTPUTS.items()
                    for name, args in {**COMMANDS, **HELP}.items()})


@pytest.mark.parametrize("name", COMMANDS)
def test_a_reader_that_went_away_is_quiet_and_exits_141(name, ran):
    res = ran["reader gone", name]
    assert res.returncode == 141, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr
    assert "cannot write" not in res.stderr   # quiet: a broken pipe is no error of ours


@pytest.mark.parametrize("name", COMMANDS)
def test_a_full_disk_is_one_line_and_exits_74(name, ran):
    res = ran["disk full", name]
    assert res.returncode == 74, (res.returncode, res.stderr)
    last = res.stderr.strip().splitlines()[-1]
    assert last.endswith("cannot write to standard output: No space left on device"), res.stderr
    assert "Traceback" not in res.stderr and "Exception ignored" not in res.stderr


@pytest.mark.parametrize("name", COMMANDS)
def test_a_closed_stdout_is_one_line_and_exits_74(name, ran):
    res = ran["closed", name]
    assert res.returncode == 74, (res.returncode, res.stderr)
    assert res.stderr.strip().splitlines()[-1].endswith("cannot write to standard output: standard output is closed")
    assert "Traceback" not in res.stderr


def test_a_closed_stdin_is_bad_input_in_one_line():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(["sh", "-c", 'exec "$@" <&-', "sh", sys.executable, "-m", "debtorch", "doctor",
                          "--from-collect-env", "-"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2 and res.stderr == "debtorch: <stdin>: standard input is closed\n", res.stderr


@pytest.mark.parametrize("name", HELP)
def test_help_and_version_end_like_every_command(name, ran):
    """Issue 23: click answers a broken pipe with 1 and lets a full disk through as a traceback."""
    res = ran["reader gone", name]
    assert res.returncode == 141 and res.stderr == "", (res.returncode, res.stderr)
    res = ran["disk full", name]
    assert res.returncode == 74 and res.stderr == "debtorch: cannot write to standard output: No space left on device\n"
    res = ran["closed", name]
    assert res.returncode == 74, (res.returncode, res.stderr)      # issue 30: --help >&- exited 0
    assert res.stderr == "debtorch: cannot write to standard output: standard output is closed\n"


# -- a reader that leaves in the middle of a report (issue 30) ---------------------------------------------

BIG = {  # reports larger than the pipe below, so that the reader leaves while debtorch is still writing
    "facts --json": ["facts", "--host", str(HOSTS / "debian12-server-8xa100-nvlink"), "--json"],
    "facts": ["facts", "--host", str(HOSTS / "debian12-server-8xa100-nvlink")],
}


@pytest.mark.parametrize("name", BIG)
def test_a_reader_that_leaves_mid_report_is_a_broken_pipe_141(name):
    """Python's buffered writer returns a short count instead of raising when the reader leaves during
    a large write; the command exited 0 with its report cut short.  A 4 KiB pipe (F_SETPIPE_SZ) makes
    "during" certain: the reader takes 100 bytes and leaves while the rest waits to be written."""
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "debtorch", *BIG[name]], stdout=w, stderr=subprocess.PIPE,
                            text=True, env=env)
    os.close(w)
    first = os.read(r, 100)
    os.close(r)
    err = proc.communicate(timeout=120)[1]
    assert first and proc.returncode == 141 and err == "", (proc.returncode, err)


# -- standard error that cannot be written (issue 30) -------------------------------------------------------


def run_with_full_stderr(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open("/dev/full", "w") as full:
        return subprocess.run([sys.executable, "-m", "debtorch", *args], stdout=subprocess.PIPE, stderr=full,
                              text=True, env=env, timeout=120)


def test_a_full_stderr_keeps_the_exit_code_of_bad_usage_and_input():
    """A usage error exited 1, not 2, when its one line could not be written."""
    res = run_with_full_stderr(["doctor", "--no-such-option"])
    assert (res.returncode, res.stdout) == (2, "")
    res = run_with_full_stderr(["verify-train", "--config", "/nonexistent/debtorch.toml", "--json"])
    assert res.returncode == json.loads(res.stdout)["exit_code"] == 2


def test_a_full_stderr_changes_neither_the_report_nor_the_file_written(tmp_path):
    runner = cli_runner()
    ok = runner.invoke(app, ["tune", "--host", HOST, "--write", str(tmp_path / "ok.toml"), "--json"])
    res = run_with_full_stderr(["tune", "--host", HOST, "--write", str(tmp_path / "full.toml"), "--json"])
    assert ok.exit_code == res.returncode == 0 and "wrote" in ok.stderr
    when = re.compile(r'^date = ".*"$', re.M)              # the only line that differs between two runs
    assert when.sub("", (tmp_path / "full.toml").read_text()) == when.sub("", (tmp_path / "ok.toml").read_text())
    # The same document, but for the file's name in its next steps.
    assert json.loads(res.stdout.replace("full.toml", "ok.toml")) == json.loads(ok.stdout)


@pytest.mark.slow
@pytest.mark.torch
def test_verify_train_json_with_a_full_stderr_measures_and_exits_as_usual():
    """Issue 30: verify-train --json printed nothing and exited 1 when its progress lines could not be written."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open("/dev/full", "w") as full:
        res = subprocess.run([sys.executable, "-m", "debtorch", "verify-train", "--quick", "--device", "sim:200",
                              "--json"], stdout=subprocess.PIPE, stderr=full, text=True, env=env, timeout=300)
    doc = json.loads(res.stdout)
    assert res.returncode == doc["exit_code"] == 0 and doc["failure"] is None and doc["summary"] is not None
