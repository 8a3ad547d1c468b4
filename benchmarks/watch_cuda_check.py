"""``debtorch.watch`` on a real GPU: the CUDA event path, the host-sync count and the overhead.

Checks what only a GPU can show (benchmarks/gpu_check.sh calls it; about a minute):

* share: a loader that takes 20 ms a batch against a step of about 10 ms of GPU work with no
  sync: the GPU idles about half of each step (the host's clock would say nearly all of it);
  the share must come from CUDA events, within 50% +- 12 points, with 0 host syncs a step
  (so the wrapper adds none that torch reports);
* syncs: the same loop with ``loss.item()`` every step: 1 sync a step, watch.W002, and a
  data wait near 20 / 30 (the host waits for the GPU, then for the batch);
* blocking copy: ``.to("cuda")`` from pageable memory, reported (torch counts it as a sync);
* overhead: a 10 ms GPU step on data already on the GPU, bare and watched in interleaved blocks
  of 16 steps (synchronised at each block's end); 1 - watched / bare steps/s with its 95%
  interval (debtorch.stats.cost) against the 1% target.

Prints one JSON object; exit 1 if a check failed, 77 when there is no GPU.

    python benchmarks/watch_cuda_check.py [--pairs 40]
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch import stats, watch  # noqa: E402


def calibrate(torch, a, target_s: float = 0.010) -> int:
    """Matmuls of ``a`` that take about ``target_s`` on the GPU."""
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
    return max(1, round(target_s / ((time.perf_counter() - t0) / 20)))


def loop(torch, a, reps: int, batches, *, item: bool = False, pinned: bool = True) -> dict:
    """One watched pass: each step copies its batch to the GPU and runs ``reps`` matmuls."""
    out = io.StringIO()
    for x in watch(batches, every=0, json=out, file=io.StringIO()):
        x = x.to("cuda", non_blocking=pinned)
        for _ in range(reps):
            y = a @ a
        loss = (y[0, 0] + x.sum()) * 0
        if item:
            loss.item()
    torch.cuda.synchronize()
    return json.loads(out.getvalue().splitlines()[-1])


def slow_loader(torch, n: int, seconds: float, pinned: bool = True):
    """``n`` batches, ``seconds`` each; pinned ones allocated up front (a pinned allocation may sync)."""
    made = [torch.ones(64, 256) for _ in range(n)]
    made = [x.pin_memory() for x in made] if pinned else made
    for x in made:
        time.sleep(seconds)
        yield x


def overhead(torch, a, reps: int, pairs: int, block: int = 16) -> dict:
    data = [torch.ones(64, 256, device="cuda") for _ in range(pairs * block)]

    def steps(it):
        t0 = time.perf_counter()
        for _ in range(block):
            x = next(it)
            for _ in range(reps):
                y = a @ a
            (y[0, 0] + x.sum()) * 0
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    bare, watched = iter(data), iter(watch(data, file=io.StringIO()))
    got: dict = {False: [], True: []}
    for i in range(pairs):
        for w in ((False, True) if i % 2 == 0 else (True, False)):
            got[w].append(steps(watched if w else bare))
    next(watched, None)
    est = stats.cost([1 / s for s in got[True]], [1 / s for s in got[False]], margin=0.01)
    return {"block": block, "bare_block_s": got[False], "watched_block_s": got[True], **est.to_dict("cost")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=40)
    args = ap.parse_args()
    import torch  # defer: a machine without torch gets a clear message from the import

    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no GPU visible to torch"}))
        return 77
    a = torch.randn(2048, 2048, device="cuda") / 2048 ** 0.5
    reps = calibrate(torch, a)
    out: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "matmuls_per_step": reps,
                 "failures": []}
    fail = out["failures"].append

    s = loop(torch, a, reps, slow_loader(torch, 41, 0.020))
    out["share"] = s
    share = s["data_wait"]["share"]
    if s["timing"] != "cuda events" or share is None or abs(share - 0.5) > 0.12:
        fail(f"share: {s['timing']} gave {share}, expected about 0.5 from CUDA events")
    if s["syncs_per_step"] != 0:
        fail(f"share: {s['syncs_per_step']} host syncs a step where the loop has none")

    s = loop(torch, a, reps, slow_loader(torch, 41, 0.020), item=True)
    out["syncs"] = s
    ids = [f["id"] for f in s["findings"]]
    if not s["syncs_per_step"] or abs(s["syncs_per_step"] - 1) > 0.05 or "watch.W002" not in ids:
        fail(f"syncs: {s['syncs_per_step']} a step and {ids}, expected 1 and watch.W002")
    if s["data_wait"]["share"] is None or abs(s["data_wait"]["share"] - 2 / 3) > 0.12:
        fail(f"syncs: data wait {s['data_wait']['share']}, expected about 0.67")

    s = loop(torch, a, reps, slow_loader(torch, 21, 0.005, pinned=False), pinned=False)
    out["blocking_copy_syncs_per_step"] = s["syncs_per_step"]

    out["overhead"] = o = overhead(torch, a, reps, args.pairs)
    if o["verdict"] == "costs":
        fail(f"overhead: {o['cost']:.2%} ({o['low']:.2%} to {o['high']:.2%}), above 1%")
    print(json.dumps(out, indent=1, default=str))
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
