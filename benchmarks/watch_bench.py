"""What ``cfg.watch`` costs a training loop, and what it says on the built-in workloads.

overhead: a loop of 10 ms steps, bare and watched (the defaults: a line a minute, the verdict at
the end of the pass, written to memory), driven side by side in blocks of 16 steps (whole chunks of
the wrapper's book-keeping), the order alternating, so that the machine's drift hits both alike.
The cost is 1 - watched / bare steps/s over the pairs of blocks, a paired ratio of medians with its
95% bootstrap interval (debtorch.stats.cost), judged against the 1% target.  Beside it: the time
spent inside the watched iterator beyond the bare one (the wrapper's cost without the steps'
noise), its own time in a tight loop, and the verdict's time at the end of a pass.  The step is a
sleep by default (``--step spin``: a busy wait): the wrapper's work adds to either.

workloads: each built-in workload trained in a plain loop (AdamW, PyTorch's DataLoader with
0 and 2 workers) wrapped with ``debtorch.watch``; prints its verdict lines (docs/runtime.md).

    nice python benchmarks/watch_bench.py overhead [--pairs 150] [--block 16] [--step sleep|spin] [--json OUT]
    python benchmarks/watch_bench.py workloads [--steps 40] [--workloads cnn,transformer]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch import stats, watch  # noqa: E402

STEP_S = 0.010
TARGET = 0.01


def step(kind: str) -> None:
    if kind == "sleep":
        time.sleep(STEP_S)
    else:
        end = time.perf_counter() + STEP_S
        while time.perf_counter() < end:
            pass


def pairs(n: int, block: int, kind: str) -> tuple:
    """Seconds of ``n`` blocks of ``block`` steps of each loop, bare and watched, driven side by side
    block by block (the order alternating), so that the machine's drift hits both alike; a block
    holds whole chunks of the wrapper's book-keeping (every CHUNK steps).  And the seconds of the
    watched loop's end-of-pass verdict."""
    data = [[i] * 4 for i in range(n * block)]
    bare, watched = iter(data), iter(watch(data, file=io.StringIO()))
    out: dict = {False: [], True: []}
    inside: dict = {False: [], True: []}      # seconds in next(): the iterator's own time, without the steps' noise
    for i in range(n):
        for w in ((False, True) if i % 2 == 0 else (True, False)):
            it, fetching = (watched if w else bare), 0.0
            t0 = time.perf_counter()
            for _ in range(block):
                t = time.perf_counter()
                next(it)
                fetching += time.perf_counter() - t
                step(kind)
            out[w].append(time.perf_counter() - t0)
            inside[w].append(fetching)
    t0 = time.perf_counter()
    next(watched, None)                       # the pass ends: the verdict
    return out[False], out[True], [(a - b) / block for a, b in zip(inside[True], inside[False])], \
        time.perf_counter() - t0


def per_step_cost(n: int = 20000, repeats: int = 7) -> float:
    """The wrapper's own seconds per step: best of ``repeats`` blocks of ``n`` empty steps, watched - bare."""
    data = [[i] for i in range(n)]

    def best(make) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in make():
                pass
            times.append(time.perf_counter() - t0)
        return min(times) / n

    return best(lambda: watch(data, file=io.StringIO())) - best(lambda: data)


def overhead(args) -> dict:
    bare, watched, inside, verdict_s = pairs(args.pairs, args.block, args.step)
    mean = statistics.fmean(inside)
    half = stats.t_quantile(0.975, len(inside) - 1) * statistics.stdev(inside) / len(inside) ** 0.5
    est = stats.cost([1 / s for s in watched], [1 / s for s in bare], margin=TARGET)
    own = per_step_cost()
    return {"step_s": STEP_S, "step": args.step, "pairs": args.pairs, "block": args.block,
            "loadavg": os.getloadavg(), "bare_block_s": bare, "watched_block_s": watched, "cost": est.to_dict("cost"),
            "cost_of_totals": 1 - sum(bare) / sum(watched),
            "inside_seconds_per_step": [mean - half, mean, mean + half],
            "verdict_s": verdict_s, "own_seconds_per_step": own, "own_share_of_step": own / STEP_S}


def print_overhead(out: dict) -> None:
    c = out["cost"]
    interval = "" if c["low"] is None else f" (95%: {c['low']:+.2%} to {c['high']:+.2%})"
    print(f"{out['pairs']} pairs of blocks of {out['block']} steps of {out['step_s'] * 1e3:.0f} ms ({out['step']}), "
          f"bare and watched side by side; load average {out['loadavg'][0]:.2f}")
    print(f"median block: bare {statistics.median(out['bare_block_s']) * 1e3:.2f} ms, watched "
          f"{statistics.median(out['watched_block_s']) * 1e3:.2f} ms")
    print(f"cost {c['cost']:+.2%}{interval}: {c['verdict']} against {TARGET:.0%} ({c['reason']}) "
          f"{stats.resolve_hint(c['verdict'], c['more_rounds'])}; of the total times {out['cost_of_totals']:+.2%}")
    lo, mean, hi = (x / out["step_s"] for x in out["inside_seconds_per_step"])
    print(f"time inside the watched iterator beyond the bare one: {mean:.3%} of a step (95%: {lo:.3%} to {hi:.3%}), "
          f"{out['inside_seconds_per_step'][1] * 1e6:.1f} us")
    print(f"the wrapper's own time in a tight loop: {out['own_seconds_per_step'] * 1e6:.1f} us a step "
          f"({out['own_share_of_step']:.3%} of {out['step_s'] * 1e3:.0f} ms); the verdict at the end of a pass "
          f"{out['verdict_s'] * 1e3:.1f} ms, once")


def workloads(args) -> None:
    import torch  # defer: only this part trains

    from debtorch.train.workloads import load_workload

    for name in args.workloads.split(","):
        for workers in (0, 2):
            w = load_workload(f"builtin:{name}")
            data = torch.utils.data.Subset(w.dataset, range((args.steps + 1) * w.batch_size))  # + 1: the warm-up step
            loader = torch.utils.data.DataLoader(data, batch_size=w.batch_size, shuffle=True, drop_last=True,
                                                 num_workers=workers, collate_fn=w.collate_fn)
            opt = torch.optim.AdamW(w.model.parameters(), lr=w.lr or 1e-3)
            print(f"--- builtin:{name}, num_workers={workers}, {args.steps} steps", flush=True)
            for x, y in watch(loader, every=0):
                out = w.model(*x) if isinstance(x, (tuple, list)) else w.model(x)
                w.loss_fn(out, y).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            sys.stderr.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="part", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--pairs", type=int, default=150, help="pairs of blocks")
    o.add_argument("--block", type=int, default=16, help="steps a block (whole chunks of book-keeping)")
    o.add_argument("--step", choices=("sleep", "spin"), default="sleep")
    o.add_argument("--json", default=None, help="also write the numbers here")
    w = sub.add_parser("workloads")
    w.add_argument("--steps", type=int, default=40)
    w.add_argument("--workloads", default="cnn,transformer")
    args = ap.parse_args()
    if args.part == "workloads":
        workloads(args)
        return 0
    out = overhead(args)
    print_overhead(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
