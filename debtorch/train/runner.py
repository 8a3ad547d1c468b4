"""Training from debtorch's own process (torch-free), through the transport: :class:`TrainingWorker`
runs :mod:`debtorch.train.worker`; :func:`launch_distributed` runs a multi-process trial under
PyTorch's launcher.  Protocol and result keys: docs/engine.md."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from typing import Any, Callable, Optional

from debtorch import outputs
from debtorch.budget import Budget, Where
from debtorch.transport.client import (
    START_TIMEOUT,
    Shim,
    StderrTail,
    Worker,
    WorkerError,
    WorkerTimeout,
    bounded,
    exit_text,
    kill_group,
    private_tmp,
    short_tmp_base,
)


class TrainingWorker(Worker):
    """The training worker: ``with TrainingWorker(python) as w: w.load(spec); w.trial(settings)``."""

    DOING = {"load": "loading the workload", "trial": "running a trial", "info": "reporting its torch and devices",
             "host_waits": "counting host waits", "exit": "exiting"}

    def __init__(self, python: str, **kw: Any):
        super().__init__(python, "debtorch.train.worker", **kw)

    def info(self, timeout: Optional[float] = None) -> dict:
        return self.request("info", timeout=timeout)

    def load(self, workload: str, device: Optional[str] = None, options: Optional[dict] = None,
             seed: int = 0, timeout: Optional[float] = None) -> dict:
        return self.request("load", workload=workload, device=device, options=options or {},
                            seed=seed, timeout=timeout)

    def trial(self, settings: Any, steps: int = 20, warmup: int = 3, mode: str = "instrumented",
              seed: int = 0, on_progress: Optional[Callable[[dict], None]] = None,
              profile_dir: Optional[str] = None, sample_memory: bool = True,
              timeout: Optional[float] = None) -> dict:
        if hasattr(settings, "to_dict"):
            settings = settings.to_dict()
        return self.request("trial", on_event=on_progress, timeout=timeout, settings=settings,
                            steps=steps, warmup=warmup, mode=mode, seed=seed,
                            profile_dir=profile_dir, sample_memory=sample_memory,
                            progress=on_progress is not None)


def start_and_load(worker: Any, budget: Budget, where: Where, longest: float, workload: str, **load: Any) -> dict:
    """Start ``worker`` (a training worker) and load ``workload``, each wait within ``budget``
    (:func:`~debtorch.transport.client.bounded`); the load's answer."""
    where.doing("starting the worker (importing torch)")

    def start(timeout: float) -> dict:
        worker.start_timeout = timeout
        return worker.start()

    bounded(budget, where, start, START_TIMEOUT)
    where.doing(f"loading {workload}")
    return bounded(budget, where, lambda timeout: worker.request("load", workload=workload, timeout=timeout, **load),
                   longest)


def launch_distributed(python: str, workload: str, settings: Any, nproc: int, steps: int = 20,
                       warmup: int = 3, seed: int = 0, device: Optional[str] = None,
                       options: Optional[dict] = None, launcher_args: Optional[list] = None,
                       env: Optional[dict] = None, cwd: Optional[str] = None, timeout: float = 900.0,
                       on_event: Optional[Callable[[dict], None]] = None) -> dict:
    """Run one trial in ``nproc`` processes under ``python -m torch.distributed.run`` (docs/engine.md,
    "More than one process"); ``launcher_args`` are torchrun's multi-node options (else
    ``--standalone``); ``on_event`` receives rank 0's progress events.  Returns :func:`aggregate`'s."""
    if hasattr(settings, "to_dict"):
        settings = settings.to_dict()
    shim = Shim()
    work = outputs.temporary_folder("debtorch-ddp-", dir=short_tmp_base("debtorch-ddp-"))
    request = {"workload": workload, "options": options or {}, "settings": settings, "steps": steps,
               "warmup": warmup, "seed": seed, "device": device, "out": work}
    req_path = os.path.join(work, "request.json")
    with open(req_path, "w") as fh:
        json.dump(request, fh)
    args = list(launcher_args) if launcher_args else ["--standalone"]
    # torchrun started like the worker, so that nothing is imported from the working folder.
    argv = [python, "-c", shim.boot("torch.distributed.run"), *args, f"--nproc_per_node={nproc}",
            shim.script("debtorch.train.distributed"), req_path]
    # torch.distributed.run makes torchelastic_* folders in the temporary directory and
    # leaves them there: it (and its ranks) get one inside the work folder, removed after.
    full_env = private_tmp(shim.env(dict(os.environ if env is None else env)), work)
    threads = settings.get("threads")
    if threads:
        full_env["OMP_NUM_THREADS"] = str(threads)
    events = os.path.join(work, "events.jsonl")
    try:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=full_env, cwd=cwd, start_new_session=True)
        except OSError as exc:
            raise WorkerError("no_python", f"{python}: cannot run ({exc.strerror or exc})") from None
        tail = StderrTail(proc.stdout)
        tail.start()
        deadline = time.monotonic() + timeout
        seen = 0
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    _stop_launcher(proc)
                    raise WorkerTimeout("timeout", f"the {nproc}-process run did not finish within {timeout:g} s; killed it")
                seen = _pump_events(events, seen, on_event)
                time.sleep(0.2)
        except BaseException:
            _stop_launcher(proc)
            raise
        tail.join(timeout=5)
        _pump_events(events, seen, on_event)
        ranks = []  # this machine's ranks (with multi-node options, other nodes keep theirs)
        for name in sorted(os.listdir(work), key=lambda n: (len(n), n)):
            if name.startswith("rank") and name.endswith(".json"):
                with open(os.path.join(work, name)) as fh:
                    ranks.append(json.load(fh))
        failed = [r for r in ranks if not r.get("ok")]
        if failed:
            err = failed[0]["error"]
            raise WorkerError(err.get("kind", "exception"), f"rank {failed[0].get('rank')}: {err.get('message')}", err)
        if proc.returncode != 0 or not ranks:
            last = tail.last()
            raise WorkerError("died", f"torch.distributed.run {exit_text(proc.returncode)}" + (f": {last}" if last else ""))
        return aggregate([r["result"] for r in ranks])
    finally:
        shim.remove()
        outputs.remove_folder(work)


def _stop_launcher(proc: subprocess.Popen) -> None:
    """SIGTERM torchrun (it stops its ranks), then kill its group."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    kill_group(proc)


def _pump_events(path: str, seen: int, on_event: Optional[Callable[[dict], None]]) -> int:
    try:
        with open(path, "rb") as fh:
            fh.seek(seen)
            data = fh.read()
    except OSError:
        return seen
    end = data.rfind(b"\n") + 1
    if on_event is not None:
        for line in data[:end].splitlines():
            try:
                on_event(json.loads(line))
            except ValueError:
                continue
    return seen + end


def aggregate(results: list) -> dict:
    """Whole-job throughput from the ranks' results: all samples over the slowest rank's window."""
    slowest = max(r["wall_s"] for r in results)
    total = sum(r["samples"] for r in results)
    return {
        "nproc": len(results),
        "backend": results[0].get("backend"),
        "samples_per_s": total / slowest if slowest > 0 else None,
        "per_rank_samples_per_s": [r["samples_per_s"] for r in results],
        "ranks": results,
    }
