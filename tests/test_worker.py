"""The worker subprocess, its protocol and the distributed launcher, end to end.

debtorch's side (runner) is torch-free; the worker runs in the venv's
interpreter, which has torch.  Skipped where that interpreter has no torch;
the tests that start a worker are the slow tier.
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from clitools import at_once

from debtorch.train.device import CPU, CUDA
from debtorch.train.runner import TrainingWorker as Worker
from debtorch.train.runner import launch_distributed
from debtorch.train.settings import Settings
from debtorch.transport import client
from debtorch.transport.client import WorkerError, WorkerTimeout, worker_python

pytestmark = pytest.mark.torch

PYTHON = sys.executable
WORKLOADS = str(Path(__file__).parent / "workloads")


@pytest.fixture(scope="module")
def worker():
    with Worker(PYTHON, cwd=WORKLOADS, timeout=120) as w:
        yield w


def _group(pgid):
    """Live (non-zombie) processes in a process group: read from /proc by the test itself."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(name))
    return found


def _gone(pids, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists()
                 and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
        if not alive:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
def test_worker_uses_this_checkout_of_debtorch(worker):
    info = worker.info()
    assert os.path.realpath(info["debtorch"]) == str(client.PACKAGE_DIR)
    assert info["torch"] and info["python"] == PYTHON


@pytest.mark.slow
def test_a_trial_streams_progress_and_returns_the_result(worker):
    worker.load("tiny:make", device=CPU)
    events = []
    res = worker.trial(Settings(), steps=4, warmup=2, on_progress=events.append)
    assert [(e["phase"], e["step"]) for e in events] == [("warmup", 1), ("warmup", 2)] + [("timed", i) for i in range(1, 5)]
    assert res.steps == 4 and res.samples_per_s > 0 and len(res.losses) == 4
    bare = worker.trial(Settings(), steps=4, warmup=2, mode="bare")
    assert bare.sample_digest == res.sample_digest


@pytest.mark.slow
def test_the_protocol_survives_a_workload_that_prints(worker):
    desc = worker.load("printing:make")
    assert desc.dataset_len == 128
    res = worker.trial(Settings(), steps=2, warmup=1)
    assert len(res.losses) == 2
    tail = "\n".join(worker.stderr_tail)
    assert "printing.py imported" in tail and "raw write to fd 1" in tail and "item " in tail


@pytest.mark.slow
def test_a_broken_workload_module_is_one_line(worker):
    with pytest.raises(WorkerError) as info:
        worker.load("broken:make")
    err = info.value
    assert err.kind == "workload"
    assert str(err) == "cannot import broken (from broken:make): RuntimeError: this module is broken on purpose"


@pytest.mark.slow
@pytest.mark.parametrize("spec,message", [
    ("tiny:wrong", "tiny:wrong returned a list; expected a Workload or dict with model, dataset, loss_fn, batch_size"),
    ("tiny:missing", "tiny:missing returned a dict without dataset, loss_fn"),
    ("tiny:nothing", "tiny has no function nothing (from tiny:nothing)"),
])
def test_a_workload_returning_the_wrong_thing_is_named(worker, spec, message):
    with pytest.raises(WorkerError) as info:
        worker.load(spec)
    assert info.value.kind == "workload" and message in str(info.value)


@pytest.mark.slow
def test_bad_requests_and_devices_are_errors_not_crashes(worker):
    worker.load("tiny:make")
    with pytest.raises(WorkerError, match="unknown setting 'bogus'"):
        worker.request("trial", settings={"bogus": 1})
    with pytest.raises(WorkerError) as info:
        worker.load("tiny:make", device=CUDA)
    assert info.value.kind == "device"
    assert worker.request("info")["protocol"] == 1  # still serving


@pytest.mark.slow
def test_out_of_memory_is_reported_with_the_batch_that_failed(worker):
    worker.load("tiny:oom")
    with pytest.raises(WorkerError) as info:
        worker.trial(Settings(), steps=1, warmup=0)
    assert info.value.kind == "oom"
    assert "at micro-batch 32; try micro_batch 16 with accumulation_steps 2" in str(info.value)


@pytest.mark.slow
def test_a_bus_error_in_a_dataloader_worker_is_diagnosed_as_dev_shm(worker):
    worker.load("tiny:bus_error")
    with pytest.raises(WorkerError) as info:
        worker.trial(Settings(num_workers=1), steps=1, warmup=0)
    assert info.value.kind == "shm" and info.value.finding == "memory.E001"


def test_a_missing_interpreter_is_one_line(tmp_path):
    missing = str(tmp_path / "nope" / "python")
    with pytest.raises(WorkerError) as info:
        Worker(missing).start()
    assert info.value.kind == "no_python" and str(info.value).startswith(missing)


def test_an_interpreter_without_torch_is_named(tmp_path):
    bare = Path("/usr/bin/python3")
    if not bare.exists() or subprocess.run([str(bare), "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("no interpreter without torch here")
    with pytest.raises(WorkerError) as info:
        Worker(str(bare)).start()
    assert info.value.kind == "no_torch"
    assert str(info.value) == f"{bare} has no torch: pip install torch in that venv"


def test_worker_python_prefers_the_option_then_the_venv(replay):
    host = replay("debian12-vm-2core")
    with pytest.raises(WorkerError, match="no such Python interpreter"):
        worker_python("/no/such/python", host)


def _stuck(tmp_path):
    """A worker whose trial never gets a batch (tiny:littering: tiny:stuck, which also leaves a folder
    in its temporary directory), ended by the trial's timeout: what was seen and what it left."""
    w = Worker(PYTHON, cwd=WORKLOADS, timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})
    w.start()
    seen, done, out = set(), threading.Event(), {"worker": w, "tmpdir": tmp_path}

    def watch(pgid):
        while not done.is_set():
            seen.update(_group(pgid))
            time.sleep(0.05)

    try:
        w.load("tiny:littering")
        own = (Path(f"/proc/{w.pid}/environ").read_bytes().split(b"\0"))
        out["tmp"] = next(v.split(b"=", 1)[1].decode() for v in own if v.startswith(b"TMPDIR="))
        out["littered"] = any(os.scandir(out["tmp"]))
        watcher = threading.Thread(target=watch, args=(w.pid,), daemon=True)
        watcher.start()
        try:   # the stuck dataset never yields a batch: the trial can only end by the deadline,
            w.trial(Settings(num_workers=2), steps=1, warmup=0, timeout=10)   # time enough to start workers when busy
        except WorkerTimeout as exc:
            out["raised"] = exc
    finally:
        done.set()
        w.kill()
    out["seen"], out["gone"] = seen, _gone(seen)
    return out


@pytest.fixture(scope="module")
def waited(tmp_path_factory):
    """The stuck trial (which waits out its timeout) and the two launches of two processes, at once."""
    def launch(spec, steps, warmup):
        try:
            return launch_distributed(PYTHON, spec, Settings(), nproc=2, steps=steps, warmup=warmup, cwd=WORKLOADS,
                                      timeout=300)
        except WorkerError as exc:
            return exc

    tmp = tmp_path_factory.mktemp("tmpdir")
    return at_once({"stuck": lambda: _stuck(tmp), "gloo": lambda: launch("tiny:make", 3, 1),
                    "failing": lambda: launch("tiny:wrong", 1, 0)}, workers=3)


@pytest.mark.slow
def test_a_timeout_kills_the_worker_and_its_dataloader_workers(waited):
    stuck = waited["stuck"]
    assert isinstance(stuck.get("raised"), WorkerTimeout)
    assert len(stuck["seen"]) >= 3  # the worker and its two DataLoader workers were there
    assert stuck["worker"].proc.returncode is not None
    assert stuck["gone"]


@pytest.mark.slow
def test_what_a_killed_worker_leaves_in_the_temporary_directory_goes_with_it(waited):
    """A worker killed mid-trial never runs its exit handlers (multiprocessing's pymp-* folders
    stay): its temporary directory is one of debtorch's own folders, removed after it."""
    stuck = waited["stuck"]
    assert Path(stuck["tmp"]).parent.name.startswith("debtorch-worker-") and stuck["littered"]
    assert isinstance(stuck.get("raised"), WorkerTimeout)
    assert not os.path.exists(stuck["tmp"])
    assert [p.name for p in stuck["tmpdir"].iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.slow
def test_ctrl_c_in_the_caller_kills_the_worker_group():
    w = Worker(PYTHON, cwd=WORKLOADS, timeout=120)
    w.start()
    w.load("tiny:make", options={"delay": 0.001})
    pgid = w.pid
    members = {"pids": set()}

    def interrupt(ev):
        # Every process seen in the group during the trial: progress events may be read after
        # the step that sent them, when the DataLoader's workers are already shut down.
        members["pids"].update(_group(pgid))
        if ev["phase"] == "timed":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        w.trial(Settings(num_workers=2), steps=200, warmup=1, on_progress=interrupt)
    assert len(members["pids"]) >= 3  # the worker and its two DataLoader workers were there
    assert _gone(members["pids"])


@pytest.mark.slow
def test_two_processes_train_with_gloo(waited):
    res = waited["gloo"]
    assert res.nproc == 2 and res.backend == "gloo"
    ranks = res.ranks
    assert [r.rank for r in ranks] == [0, 1] and all(r.world_size == 2 for r in ranks)
    assert ranks[0].sample_digest != ranks[1].sample_digest  # each rank trains on its own shard
    assert res.samples_per_s == pytest.approx(sum(r.samples for r in ranks) / max(r.wall_s for r in ranks))
    assert all(x > 0 for x in res.per_rank_samples_per_s)


@pytest.mark.slow
def test_a_failing_rank_is_reported_as_a_finding(waited):
    err = waited["failing"]
    assert isinstance(err, WorkerError) and err.kind == "workload" and "returned a list" in str(err)


@pytest.mark.slow
def test_spawned_dataloader_workers_import_the_workload_and_debtorch(worker):
    # spawn starts fresh interpreters: they must find the workload module and
    # debtorch's shim exactly as the worker did, across an epoch boundary.
    worker.load("tiny:make", options={"n": 64})
    res = worker.trial(Settings(num_workers=1, start_method="spawn", persistent_workers=True),
                       steps=5, warmup=0)
    # 4 untimed steps settle the prefetch queue first: 9 steps of 4-batch epochs cross two boundaries.
    assert res.settle_steps == 4 and res.epochs == 2 and len(res.losses) == 5


def test_the_runner_side_never_imports_torch():
    code = ("import sys, debtorch.train.runner, debtorch.train.settings, debtorch.train.worker; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


def test_a_long_temporary_directory_moves_the_workers_folders_where_a_socket_path_fits(tmp_path, monkeypatch):
    """A DataLoader worker passes each batch through a Unix socket under its TMPDIR (at most 107 bytes): under
    a long TMPDIR (pytest's, a Slurm job's) it could not send a batch, and the training loop waited for ever."""
    import tempfile

    long = tmp_path / ("x" * 60)
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    assert client.short_tmp_base("debtorch-worker-") == "/tmp"
    shim = client.Shim()
    try:
        env = client.private_tmp({}, shim.path)
        assert len(env["TMPDIR"]) + len("/pymp-12345678/listener-12345678") <= client.SOCKET_PATH_MAX
    finally:
        shim.remove()
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    assert client.short_tmp_base("debtorch-worker-") is None
