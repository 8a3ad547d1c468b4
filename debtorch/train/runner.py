"""Training from debtorch's own process (torch-free), through the transport: :class:`TrainingWorker`
runs :mod:`debtorch.train.worker`; :func:`launch_distributed` runs a multi-process trial under
PyTorch's launcher (:mod:`debtorch.transport.launch`).  Protocol and result keys: docs/engine.md."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Optional

from debtorch import outputs
from debtorch.budget import Budget, Where
from debtorch.train.device import Device
from debtorch.train.result import DistributedResult, LoadedWorkload, RankOutcome, TrialResult
from debtorch.train.settings import Settings
from debtorch.transport import launch
from debtorch.transport.client import START_TIMEOUT, Worker, WorkerError, WorkerTimeout, bounded


class TrainingWorker(Worker):
    """The training worker: ``with TrainingWorker(python) as w: w.load(spec); w.trial(settings)``."""

    DOING = {"load": "loading the workload", "trial": "running a trial", "info": "reporting its torch and devices",
             "host_waits": "counting host waits", "exit": "exiting"}

    def __init__(self, python: str, **kw: Any):
        super().__init__(python, "debtorch.train.worker", **kw)

    def info(self, timeout: Optional[float] = None) -> dict[str, Any]:
        return self.request("info", timeout=timeout)

    def load(self, workload: str, device: Optional[Device] = None, options: Optional[dict[str, Any]] = None,
             seed: int = 0, timeout: Optional[float] = None) -> LoadedWorkload:
        return LoadedWorkload.from_json(self.request("load", timeout=timeout, **load_request(workload, device,
                                                                                             options, seed)))

    def trial(self, settings: Settings, steps: int = 20, warmup: int = 3, mode: str = "instrumented",
              seed: int = 0, on_progress: Optional[Callable[[dict], None]] = None,
              profile_dir: Optional[str] = None, sample_memory: bool = True,
              timeout: Optional[float] = None) -> TrialResult:
        return TrialResult.from_json(self.request(
            "trial", on_event=on_progress, timeout=timeout, settings=settings.to_dict(), steps=steps, warmup=warmup,
            mode=mode, seed=seed, profile_dir=profile_dir, sample_memory=sample_memory,
            progress=on_progress is not None))


def load_request(workload: str, device: Optional[Device], options: Optional[dict[str, Any]],
                 seed: int) -> dict[str, Any]:
    """The fields of a ``load`` request (docs/engine.md): the device as its text (None: the worker's choice)."""
    return {"workload": workload, "device": None if device is None else str(device), "options": options or {},
            "seed": seed}


def start_and_load(worker: Any, budget: Budget, where: Where, longest: float, workload: str,
                   device: Optional[Device] = None, options: Optional[dict[str, Any]] = None,
                   seed: int = 0) -> LoadedWorkload:
    """Start ``worker`` (a training worker) and load ``workload``, each wait within ``budget``
    (:func:`~debtorch.transport.client.bounded`); the load's answer."""
    where.doing("starting the worker (importing torch)")

    def start(timeout: float) -> dict:
        worker.start_timeout = timeout
        return worker.start()

    def load(timeout: float) -> dict:
        return worker.request("load", timeout=timeout, **load_request(workload, device, options, seed))

    bounded(budget, where, start, START_TIMEOUT)
    where.doing(f"loading {workload}")
    return LoadedWorkload.from_json(bounded(budget, where, load, longest))


def launch_distributed(python: str, workload: str, settings: Settings, nproc: int, steps: int = 20,
                       warmup: int = 3, seed: int = 0, device: Optional[Device] = None,
                       options: Optional[dict[str, Any]] = None, launcher_args: Optional[list[str]] = None,
                       env: Optional[dict[str, str]] = None, cwd: Optional[str] = None, timeout: float = 900.0,
                       on_event: Optional[Callable[[dict], None]] = None) -> DistributedResult:
    """Run one trial in ``nproc`` processes under ``python -m torch.distributed.run`` (docs/engine.md,
    "More than one process"); ``launcher_args`` are torchrun's multi-node options (else
    ``--standalone``); ``on_event`` receives rank 0's progress events.  The ranks' results gathered."""
    work = launch.work_folder("debtorch-ddp-")
    request = {"workload": workload, "options": options or {}, "settings": settings.to_dict(), "steps": steps,
               "warmup": warmup, "seed": seed, "device": None if device is None else str(device), "out": work}
    req_path = os.path.join(work, "request.json")
    with open(req_path, "w") as fh:
        json.dump(request, fh)
    torchrun_args = [*(launcher_args or ["--standalone"]), f"--nproc_per_node={nproc}"]
    # torch.distributed.run makes torchelastic_* folders in the temporary directory and leaves them
    # there: it (and its ranks) get one inside the work folder, removed after.
    extra_env = {"OMP_NUM_THREADS": str(settings.threads)} if settings.threads else {}
    events = os.path.join(work, "events.jsonl")
    try:
        with launch.Launched(python, "torch.distributed.run", torchrun_args, "debtorch.train.distributed",
                             [req_path], work, env=env, cwd=cwd) as run:
            run.start(extra_env)
            deadline = time.monotonic() + timeout
            seen = 0
            while run.running:
                if time.monotonic() > deadline:
                    run.stop()
                    raise WorkerTimeout("timeout",
                                        f"the {nproc}-process run did not finish within {timeout:g} s; killed it")
                seen = _pump_events(events, seen, on_event)
                time.sleep(0.2)
            run.finished()
            _pump_events(events, seen, on_event)
            ranks = _rank_outcomes(work)
            failed = [r for r in ranks if not r.ok]
            if failed:
                first = failed[0]
                raise WorkerError(first.kind, f"rank {first.rank}: {first.message}", first.error)
            results = [r.result for r in ranks if r.result is not None]
            if run.returncode != 0 or not results:
                raise WorkerError("died", f"torch.distributed.run {run.exit_words()}")
            return DistributedResult.of(results)
    finally:
        outputs.remove_folder(work)


def _rank_outcomes(work: str) -> list[RankOutcome]:
    """The rank<R>.json files of this machine's ranks, in rank order (with multi-node options, other
    nodes keep theirs)."""
    ranks = []
    for name in sorted(os.listdir(work), key=lambda n: (len(n), n)):
        if name.startswith("rank") and name.endswith(".json"):
            with open(os.path.join(work, name)) as fh:
                ranks.append(RankOutcome.from_json(json.load(fh)))
    return ranks


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
