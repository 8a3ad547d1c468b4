"""The engine's CUDA path, checked on a machine with a GPU (prepared for a lent GPU machine).

Runs the built-in CNN through the worker on ``cuda`` with the settings a GPU
user would get (AMP bf16 and fp16 with a GradScaler, pinned memory with
non-blocking copies and workers, TF32, cuDNN benchmark, channels_last, fused
AdamW), the compute-only ceiling and the bare loop, and checks what only a
GPU can show: peak device memory, NVML utilisation samples, finite losses,
fp16/bf16 losses close to fp32's.  Prints one JSON object; exit 1 if a check
failed, 77 when there is no GPU.

    python benchmarks/engine_cuda_check.py [--python PATH] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch.host import LiveHost  # noqa: E402
from debtorch.train.runner import TrainingWorker  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.transport.client import WorkerError, worker_python  # noqa: E402

CASES = {
    "defaults": (Settings(), "instrumented"),
    "bf16": (Settings(precision="bf16"), "instrumented"),
    "fp16+scaler": (Settings(precision="fp16"), "instrumented"),
    "tuned": (Settings(precision="bf16", num_workers=4, pin_memory=True, non_blocking=True, prefetch_factor=4,
                       persistent_workers=True, tf32=True, cudnn_benchmark=True, channels_last=True,
                       fused_optimizer=True), "instrumented"),
    "tuned bare": (None, "bare"),
    "tuned compute_only": (None, "compute_only"),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    python = worker_python(args.python, LiveHost())
    out: dict = {"cases": {}, "failures": []}
    with TrainingWorker(python, timeout=600) as w:
        info = w.info()
        out["info"] = info
        if not info["cuda_available"]:
            print(json.dumps({"skipped": "no GPU visible to torch", "info": info}))
            return 77
        w.load("builtin:cnn", device="cuda", options={"batch_size": 128})
        tuned = CASES["tuned"][0]
        for label, (settings, mode) in CASES.items():
            try:
                res = w.trial(settings or tuned, steps=args.steps, warmup=5, mode=mode)
            except WorkerError as exc:
                out["failures"].append(f"{label}: {exc.kind}: {exc}")
                continue
            keep = ("samples_per_s", "data_wait_share", "peak_host_bytes", "peak_device_bytes", "gpu_util_mean",
                    "gpu_util_samples", "loss_first", "loss_last", "nonfinite_loss_step", "notes")
            out["cases"][label] = {k: res.get(k) for k in keep}
            if res["nonfinite_loss_step"] is not None:
                out["failures"].append(f"{label}: non-finite loss at step {res['nonfinite_loss_step']}")
            if mode != "bare" and not res["peak_device_bytes"]:
                out["failures"].append(f"{label}: no peak device memory")
            if mode == "instrumented" and res["gpu_util_samples"] == 0:
                out["failures"].append(f"{label}: no NVML utilisation samples ({'; '.join(res['notes'])})")
        base = out["cases"].get("defaults", {}).get("loss_last")
        for label in ("bf16", "fp16+scaler"):
            last = out["cases"].get(label, {}).get("loss_last")
            if base is not None and last is not None and abs(last - base) > 0.25 * base:
                out["failures"].append(f"{label}: final loss {last:.3f} far from fp32's {base:.3f}")
    print(json.dumps(out, indent=1))
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
