"""One rank of a multi-process trial, started by ``torch.distributed.run`` for
:func:`debtorch.train.runner.launch_distributed` (docs/engine.md, "More than one process"):
:func:`debtorch.train.engine.run_trial` under DDP, its result or error object written to
``rank<R>.json`` beside the request; rank 0 appends its progress events to ``events.jsonl``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any, Optional

from debtorch.outputs import write_atomic
from debtorch.train.result import RankOutcome
from debtorch.transport.server import die_with_parent


def _write(path: str, obj: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(obj, default=str), force=True)


def main() -> int:
    die_with_parent()
    with open(sys.argv[1]) as fh:
        req = json.load(fh)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    out = req["out"]
    context: Optional[dict[str, Any]] = None
    try:
        import torch
        import torch.distributed as dist

        from debtorch.train.device import Device  # defer: with the engine
        from debtorch.train.engine import run_trial  # defer: torch, after torch.distributed is up
        from debtorch.train.settings import Settings  # defer: with the engine
        from debtorch.train.worker import check_device, request_device  # defer: with the engine
        from debtorch.train.workloads import load_workload  # defer: torch

        settings = Settings.from_dict(req.get("settings") or {})
        device = request_device(req.get("device"), torch.cuda.is_available())
        check_device(device)
        if device.is_cuda:
            device = Device.gpu(local_rank)
            torch.cuda.set_device(local_rank)
        backend = settings.backend or ("nccl" if device.is_cuda else "gloo")
        if settings.threads is None:
            try:
                usable = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                usable = os.cpu_count() or 1
            settings = settings.replace(threads=max(1, usable // max(local_world, 1)))
        dist.init_process_group(backend=backend)
        context = {"micro_batch": settings.micro_batch, "accumulation_steps": settings.accumulation_steps,
                   "num_workers": settings.num_workers, "device": str(device)}
        workload = load_workload(req["workload"], req.get("options") or {}, seed=int(req.get("seed", 0)))
        context["micro_batch"] = settings.micro_batch or workload.batch_size
        events = os.path.join(out, "events.jsonl")

        def on_step(ev: dict) -> None:
            if rank == 0:
                with open(events, "a") as fh:
                    fh.write(json.dumps(dict(ev, event="progress", rank=0)) + "\n")

        result = run_trial(workload, settings, device=device, steps=int(req.get("steps", 20)),
                           warmup_steps=int(req.get("warmup", 3)), seed=int(req.get("seed", 0)),
                           on_step=on_step, distributed={"rank": rank, "world_size": world})
        result = dataclasses.replace(result, backend=backend)
        _write(os.path.join(out, f"rank{rank}.json"), RankOutcome(rank, result).to_json())
        dist.barrier()
        dist.destroy_process_group()
        return 0
    except Exception as exc:  # noqa: BLE001 - a rank's failure is a result for the launcher
        from debtorch.train.worker import classify  # defer: only on a failure

        _write(os.path.join(out, f"rank{rank}.json"), RankOutcome(rank, error=classify(exc, context)).to_json())
        return 1


if __name__ == "__main__":
    sys.exit(main())
