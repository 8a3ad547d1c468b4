"""A user's training loop on a simulated accelerator, watched (benchmarks/pipeline_bench.py, "watch"):
``builtin:images`` through a plain DataLoader, each batch copied to and computed on debtorch's simulated
device (docs/engine.md) as a GPU script would, ``cfg.watch(loader, json=PATH)`` around it.

    python benchmarks/pipeline_loop.py --device sim:900 --workers 0 --steps 150 --json w0.jsonl
    python benchmarks/pipeline_loop.py --device sim:900 --config prescribed.toml --steps 150 --json again.jsonl

Without ``--config`` the loader is ``--workers`` (prefetch 2, persistent, pinned, non-blocking copies);
with it, the config's loader (``cfg.loader_kwargs``) and copies (``cfg.to_device``).  One pass of
``--steps`` batches (drawn with replacement), so that watch's verdict covers them all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import debtorch  # noqa: E402
from debtorch.cli.shared import parse_device  # noqa: E402
from debtorch.train import apply, sim, workloads  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", required=True, help="sim:RATE")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--config", help="a debtorch.toml: its loader and copies instead of --workers")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--json", required=True, help="cfg.watch's JSON lines")
    ap.add_argument("--device-json", help="also write the simulated device's figures here: its busy share of the "
                    "loop's time (what a GPU's own idle share would be)")
    args = ap.parse_args()

    wl = workloads.images()
    spec = parse_device(args.device).spec
    if spec is None:
        raise SystemExit(f"--device {args.device}: a simulated accelerator, sim:RATE")
    dev = sim.SimDevice(spec)
    sampler = torch.utils.data.RandomSampler(wl.dataset, replacement=True, num_samples=args.steps * args.batch,
                                             generator=torch.Generator().manual_seed(0))
    if args.config:
        cfg = debtorch.load(args.config, warn_on_mismatch=False)
        settings = cfg.settings
        kwargs = cfg.loader_kwargs(batch_size=args.batch, drop_last=True)
        kwargs["batch_size"] = args.batch
        watch = cfg.watch
    else:
        workers = dict(prefetch_factor=2, persistent_workers=True, multiprocessing_context="fork") if args.workers else {}
        settings = Settings(num_workers=args.workers, pin_memory=True, non_blocking=True)
        kwargs = dict(batch_size=args.batch, drop_last=True, num_workers=args.workers, **workers)
        watch = debtorch.watch
    loader = torch.utils.data.DataLoader(wl.dataset, sampler=sampler, **kwargs)
    start = None
    for step, (x, y) in enumerate(watch(loader, json=args.json, every=0)):
        if step == 1:   # as watch: the first step (the workers' start) is not counted
            dev.reset()
            start = time.perf_counter()
        apply.to_device(torch, settings, x, dev)
        apply.to_device(torch, settings, y, dev)
        dev.compute(len(x))
        dev.end_step()
    dev.drain()
    wall = time.perf_counter() - (start or time.perf_counter())
    if args.device_json:
        Path(args.device_json).write_text(json.dumps({
            "rate": dev.spec.rate, "busy_s": dev.busy, "wall_s": wall,
            "idle_share": 1.0 - dev.busy / wall if wall > 0 else None,
            "samples_per_s": (args.steps - 1) * args.batch / wall if wall > 0 else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
