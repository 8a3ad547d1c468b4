"""Signals and faults at random moments (issue 13, items 7 and 10): SIGINT, SIGTERM or SIGHUP
during ``facts --record``, ``tune --measure --write`` and ``verify-train --quick``, as real
processes.  Whatever the moment: the documented exit code (or 0 when the run finished
first), no partial file, no process left, no temporary folder left.

The moments come from a seeded generator (``DEBTORCH_SIGNAL_SEED``, printed on failure);
``DEBTORCH_SIGNAL_CASES`` raises the number of runs per command (default 2).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from clitools import ROOT, at_once

SEED = int(os.environ.get("DEBTORCH_SIGNAL_SEED", random.SystemRandom().randrange(2**32)))
CASES = int(os.environ.get("DEBTORCH_SIGNAL_CASES", "2"))
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# torch's own compile cache: created in the temporary directory by importing torch, kept on purpose.
TORCH_CACHES = ("torchinductor_",)
WORKLOADS = Path(__file__).parent / "verify_workloads"


def marked_processes(token: str) -> list:
    """Processes (ours, their workers, DataLoader workers, torchrun ranks) that carry ``token``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if token.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def no_process_left(token: str, within: float = 20.0) -> list:
    """The marked processes still alive once the kernel has had ``within`` seconds to reap
    what PR_SET_PDEATHSIG killed (asynchronous; polled, not slept)."""
    deadline = time.monotonic() + within
    while True:
        left = marked_processes(token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def moment(rng: random.Random, earliest: float, latest: float) -> tuple:
    """A random ending signal and a random delay."""
    return rng.choice(SIGNALS), rng.uniform(earliest, latest)


def interrupt(args, tmp_path: Path, sig: int, delay: float, cwd=None):
    """Run ``debtorch ARGS`` with a private TMPDIR, send ``sig`` after ``delay`` seconds;
    return (signal, exit code, stderr, leftover processes, leftover temporary entries)."""
    tmpdir = tmp_path / f"tmp-{uuid.uuid4().hex[:6]}"
    tmpdir.mkdir()
    token = f"debtorch-signal-test-{uuid.uuid4().hex}"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmpdir), DEBTORCH_SIGNAL_TEST=token)
    proc = subprocess.Popen([sys.executable, "-m", "debtorch", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd or tmp_path)
    try:
        try:
            proc.wait(timeout=delay)   # finished before the signal: that is a moment too
        except subprocess.TimeoutExpired:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    leftovers = [p.name for p in tmpdir.iterdir() if not p.name.startswith(TORCH_CACHES)]
    return sig, proc.returncode, err, no_process_left(token), leftovers


def check(what, sig, code, err, procs, temps):
    said = f"{what}: {signal.Signals(sig).name}, seed {SEED}: exit {code}\n{err}"
    # 0: finished first; 128 + sig: debtorch stopped on it; -sig: the signal came while Python was
    # still starting, before debtorch's handlers (nothing was made yet, as the checks below say).
    assert code in (0, 128 + sig, -sig), said
    assert code != -sig or err == "", said
    assert "Traceback" not in err, said
    assert procs == [], said
    assert temps == [], said


def test_facts_record_leaves_a_whole_recording_or_nothing(tmp_path):
    rng = random.Random(SEED)
    for i in range(CASES + 1):
        dest = tmp_path / f"rec{i}"
        sig, code, err, procs, temps = interrupt(["facts", "--record", str(dest)], tmp_path, *moment(rng, 0.05, 2.5))
        check("facts --record", sig, code, err, procs, temps)
        hidden = [p.name for p in tmp_path.iterdir() if p.name.startswith(f".rec{i}.recording-")]
        assert hidden == [], (hidden, SEED)
        if code == 0 or dest.exists():   # the signal may come after the recording is in place
            assert (dest / "_host.json").is_file(), SEED


def _config_whole(path: Path) -> None:
    from debtorch.tune.config import load_config

    assert load_config(str(path)).tuned["by"] == "measured"


def _svg_whole(path: Path) -> None:
    # Ctrl-C still reports and plots what was measured: whole, never cut.
    assert path.read_text().rstrip().endswith("</svg>")


TRAINING = [
    ("tune --measure", ["tune", "--measure", "--budget", "40", "--write"], 9.0, _config_whole),
    ("verify-train --quick", ["verify-train", "--quick", "--plot"], 12.0, _svg_whole),
]


@pytest.fixture(scope="module")
def interrupted_training(tmp_path_factory):
    """Every case of TRAINING, run at once (a case mostly waits for its signal): (what, case) ->
    (folder, its file, what interrupt returned).  The moments are drawn first, in order, from SEED."""
    runs = {}
    for what, args, latest, _ in TRAINING:
        rng = random.Random(SEED + len(what))
        for i in range(CASES):
            folder = tmp_path_factory.mktemp("signal")
            out = folder / ("t.toml" if what.startswith("tune") else "p.svg")
            runs[what, i] = (folder, out, [*args, str(out)], *moment(rng, 0.3, latest))
    done = at_once({key: (lambda f=folder, a=args, s=sig, d=delay: interrupt(a, f, s, d, cwd=WORKLOADS))
                    for key, (folder, _, args, sig, delay) in runs.items()}, workers=len(runs))
    return {key: (runs[key][0], runs[key][1], done[key]) for key in runs}


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("what,args,latest,whole", TRAINING)
def test_training_commands_leave_their_file_whole_or_absent_and_nothing_else(interrupted_training, what, args,
                                                                             latest, whole):
    for i in range(CASES):
        folder, out, (sig, code, err, procs, temps) = interrupted_training[what, i]
        check(what, sig, code, err, procs, temps)
        if code == 0 or out.exists():
            whole(out)
        assert [p.name for p in folder.iterdir() if p.name.endswith(".tmp")] == [], SEED


def test_a_second_signal_during_the_clean_up_changes_nothing(tmp_path):
    """Ctrl-C, SIGTERM and SIGHUP at once (an impatient user, a scheduler): the first one handled
    decides the exit code (Python handles pending signals lowest number first), the others are ignored
    while debtorch cleans up."""
    dest = tmp_path / "rec"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmpdir))
    proc = subprocess.Popen([sys.executable, "-m", "debtorch", "facts", "--record", str(dest), "--deep"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    # Wait until the recording has begun (its hidden folder exists), then interrupt three times.
    deadline = time.monotonic() + 30
    while not any(p.name.startswith(".rec.recording-") for p in tmp_path.iterdir()) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if proc.poll() is None:
            proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 129, 130, 143), err
    assert "Traceback" not in err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".rec.recording-")] == []
    assert json.loads((dest / "_host.json").read_text()) if proc.returncode == 0 else not dest.exists()


def wait_until_reading_a_pipe(pid: int, most_s: float = 3.0) -> None:
    """Return once process ``pid`` waits in a read of a pipe, as its kernel stack says
    (/proc/PID/wchan: pipe_read, anon_pipe_read), or after ``most_s`` where /proc does not say."""
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/wchan") as fh:
                if "pipe_read" in fh.read():
                    return
        except OSError:
            pass
        time.sleep(0.02)


def test_a_read_that_waits_honours_sigterm_and_a_fifo_is_never_waited_on(tmp_path):
    """Issue 23: `doctor --from-collect-env -` waiting on a pipe nobody writes stops on SIGTERM
    (143, one line); a FIFO named as an input or planted in a recording is refused at once."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "debtorch", "doctor", "--from-collect-env", "-"], stdin=r,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    os.close(r)
    wait_until_reading_a_pipe(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    os.close(w)
    assert proc.returncode == 143 and err == "debtorch: stopped by SIGTERM\n", (proc.returncode, err)
    fifo = tmp_path / "facts.json"
    os.mkfifo(fifo)
    res = subprocess.run([sys.executable, "-m", "debtorch", "doctor", "--facts", str(fifo)], capture_output=True,
                         text=True, env=env, timeout=30)
    assert res.returncode == 2 and res.stderr == f"debtorch: --facts {fifo}: is a FIFO, not a facts document\n"
