"""The simulated accelerator checked against a real GPU (issue 20; run by benchmarks/gpu_check.sh).

On a machine with a GPU, for `builtin:images`:

1. the GPU's compute rate for the workload (the engine's compute-only trial: micro-batches already
   in device memory, PyTorch's defaults), RATE;
2. what the simulation assumes, measured on this GPU: the host's time to launch one training step
   (forward, backward and optimizer step enqueued while the GPU is busy) and the pinned
   host-to-device copy bandwidth for one batch;
3. the same settings on the GPU and on `sim:RATE`: PyTorch's defaults and loader-only tuned settings
   (workers, pinned memory, non-blocking copies; the model's settings stay the defaults, so one RATE
   holds for both).  The engine's instrumented loop synchronises the GPU at every clock read, so
   its data-wait share is compared with the simulation's when the loss is read every step (the
   queue drained every step); throughput without per-step syncs, the GPU's bare loop against the
   simulation without syncs, as shares of RATE.  Then `sim:` again with the parameters measured
   in 2, to show whether they close a gap.

Where a data-wait share or a share of RATE differs by more than 10 points, the simulation's
parameters are wrong for this GPU: the line says which one (the one whose measured value differs
most from the default, when the simulation with the measured values closes the gap), or that the
model itself misses a cost.  Writes `--out DIR/loader.toml` (the loader-only settings, for
verify-train) and `DIR/sim-rate` (RATE).  Prints one JSON object last; exit 77 without a GPU, 1 when
a share is more than 10 points off even with the measured parameters.

    python benchmarks/sim_truth.py --out /tmp/truth [--python PATH] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch.cli.shared import parse_device  # noqa: E402
from debtorch.host import LiveHost  # noqa: E402
from debtorch.train.device import CUDA, Device  # noqa: E402
from debtorch.train.runner import TrainingWorker  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.transport.client import worker_python  # noqa: E402

WORKLOAD = "builtin:images"
GAP = 0.10


def loader_tuned(cpus: int) -> Settings:
    workers = max(1, min(8, cpus - 1))   # tune.R003
    return Settings(num_workers=workers, prefetch_factor=2, persistent_workers=True, start_method="fork",
                    pin_memory=True, non_blocking=True)


def measure_parameters(batch_size: int) -> dict:
    """Launch time per step and pinned copy bandwidth, in this process (torch on the GPU)."""
    import torch

    from debtorch.train.workloads import load_workload

    wl = load_workload(WORKLOAD, {"batch_size": batch_size})
    model = wl.model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    items = [wl.dataset[i] for i in range(batch_size)]
    x, y = torch.stack([a for a, _ in items]).cuda(), torch.tensor([int(b) for _, b in items]).cuda()

    def step():
        opt.zero_grad(set_to_none=True)
        wl.loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    launches = []
    for _ in range(10):
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)      # keep the GPU busy, so the host only enqueues (never waits)
        t0 = time.perf_counter()
        step()
        launches.append(time.perf_counter() - t0)
    host = torch.stack([a for a, _ in items]).pin_memory()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        host.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    gbps = 50 * host.numel() * host.element_size() / (time.perf_counter() - t0) / 1e9
    return {"launch_ms": 1000 * statistics.median(launches), "gbps": gbps}


def trials(w: TrainingWorker, device: Device, settings: dict, steps: int, runs: int = 3) -> dict:
    """Median samples/s and data-wait share of each (label, settings, mode, sync) on ``device``."""
    w.load(WORKLOAD, device=device)
    out = {}
    for label, (s, mode, sync) in settings.items():
        got = [w.request("trial", settings=s.to_dict(), steps=steps, warmup=3, mode=mode, sample_memory=False,
                         progress=False, **({"sync_each_step": True} if sync else {})) for _ in range(runs)]
        shares = [g["data_wait_share"] for g in got if g.get("data_wait_share") is not None]
        out[label] = {"samples_per_s": statistics.median(g["samples_per_s"] for g in got),
                      "data_wait_share": statistics.median(shares) if shares else None}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    python = worker_python(args.python, LiveHost())
    with TrainingWorker(python, timeout=600) as w:
        info = w.info()
        if not info["cuda_available"]:
            print(f"sim truth check: FAILED: no GPU visible to {python} (torch {info['torch']}): this check needs "
                  "one", file=sys.stderr)
            print(json.dumps({"skipped": "no GPU", "info": info}))
            return 77
        batch = w.load(WORKLOAD, device=CUDA).batch_size
        rate = w.trial(Settings(), steps=args.steps, warmup=5, mode="compute_only", sample_memory=False).samples_per_s
        tuned = loader_tuned(os.cpu_count() or 2)
        gpu = trials(w, CUDA, {"defaults": (Settings(), "instrumented", False), "tuned": (tuned, "instrumented", False),
                                 "defaults bare": (Settings(), "bare", False), "tuned bare": (tuned, "bare", False)},
                     args.steps)
        measured = measure_parameters(batch)
        specs = {"defaults": parse_device(f"sim:{rate:.1f}"),
                 "measured": parse_device(f"sim:{rate:.1f},launch={measured['launch_ms']:.3f},"
                                          f"gbps={measured['gbps']:.2f}")}
        sims = {}
        for name, spec in specs.items():
            sims[name] = trials(w, spec, {"defaults": (Settings(), "instrumented", True),
                                          "tuned": (tuned, "instrumented", True),
                                          "defaults bare": (Settings(), "instrumented", False),
                                          "tuned bare": (tuned, "instrumented", False)}, args.steps)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "sim-rate").write_text(f"{rate:.1f}\n")
    Path(args.out, "loader.toml").write_text(
        f"schema_version = 1\n[loader]\nnum_workers = {tuned.num_workers}\npin_memory = true\nprefetch_factor = 2\n"
        "persistent_workers = true\nstart_method = \"fork\"\n[compute]\nnon_blocking = true\n")
    default = specs["defaults"].spec
    print(f"GPU compute rate for {WORKLOAD} (compute-only, PyTorch's defaults): {rate:.1f} samples/s")
    print(f"measured here: launch {measured['launch_ms']:.2f} ms per step (simulated: {default.launch_ms:g}), pinned "
          f"copy {measured['gbps']:.1f} GB/s (simulated: {default.gbps:g})")
    print("| settings | what | GPU | sim (defaults) | sim (measured parameters) |\n|---|---|---:|---:|---:|")
    rows, worst = [], {}
    for label in ("defaults", "tuned"):
        for what, key, arm, scale in (("data wait, every step synced", "data_wait_share", label, 1.0),
                                      ("share of RATE, no per-step sync", "samples_per_s", f"{label} bare", rate)):
            vals = [gpu[arm][key], sims["defaults"][arm][key], sims["measured"][arm][key]]
            vals = [None if v is None else v / scale for v in vals]
            rows.append({"settings": label, "what": what, "gpu": vals[0], "sim": vals[1], "sim_measured": vals[2]})
            print(f"| {label} | {what} | " + " | ".join("-" if v is None else f"{v:.0%}" for v in vals) + " |")
            for name, v in (("defaults", vals[1]), ("measured", vals[2])):
                if v is not None and vals[0] is not None:
                    worst[name] = max(worst.get(name, 0.0), abs(v - vals[0]))
    verdict = "the simulation agrees within 10 points"
    if worst.get("defaults", 0) > GAP:
        off = {"launch": abs(measured["launch_ms"] / default.launch_ms - 1) if default.launch_ms else 0.0,
               "gbps": abs(measured["gbps"] / default.gbps - 1)}
        wrong = max(off, key=off.get)
        if worst.get("measured", 1) <= GAP:
            verdict = (f"the defaults are {worst['defaults']:.0%} off; with this GPU's measured parameters within "
                       f"{worst['measured']:.0%}: the default {wrong} (={getattr(default, 'launch_ms' if wrong == 'launch' else 'gbps'):g}) "
                       "is wrong for this GPU")
        else:
            verdict = (f"{worst['measured']:.0%} off even with the measured launch and copy bandwidth: the model misses a "
                       "cost (run-ahead depth, the pin-memory thread's copy, the instrumented loop's syncs: docs/engine.md)")
    print(f"verdict: {verdict}")
    print(json.dumps({"rate": rate, "measured": measured, "specs": specs, "gpu": gpu, "sim": sims, "rows": rows,
                      "worst_gap": worst, "verdict": verdict, "info": info}, indent=1))
    return 1 if worst.get("measured", 0) > GAP else 0


if __name__ == "__main__":
    sys.exit(main())
