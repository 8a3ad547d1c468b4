"""What the engine's instrumentation costs: instrumented against bare samples/s.

The instrumented loop synchronises the device and reads the clock around
every data fetch and every compute segment, reads the memory gauges
between steps (no sampling thread) and keeps per-step losses; the bare loop
does the same training with two clock reads around the whole window.  Both
run in one worker (the real path), interleaved in ABBA order to cancel
drift, repeated, and compared by medians.  Target (issue 5): instrumentation costs at most 2%.

    python benchmarks/engine_overhead.py [--python PATH] [--repeats 6] [--steps 30] [--json OUT]
    python benchmarks/engine_overhead.py --from-json RUN1.json [RUN2.json ...]   # pool saved runs' pairs

Beside the medians it prints a 95% bootstrap interval for the median of the
pairs' costs: the target is resolved as met only when the interval's upper end
is below 2%.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch.facts.cpu import parse_cpuinfo  # noqa: E402
from debtorch.host import LiveHost  # noqa: E402
from debtorch.train.device import Device  # noqa: E402
from debtorch.train.runner import TrainingWorker  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.transport.client import worker_python  # noqa: E402

CASES = {
    "defaults (fp32, w0)": Settings(),
    "fp32, w0, t1": Settings(threads=1),
    "bf16, w1, t1": Settings(precision="bf16", num_workers=1, threads=1),
}


def loadavg(host) -> str:
    """The 1-minute load average: other work on the machine makes every number noisier."""
    return (host.try_read("/proc/loadavg") or "?").split(" ")[0]


def cpu_model(host) -> str:
    return parse_cpuinfo(host.try_read("/proc/cpuinfo") or "").get("model") or platform.processor() or "unknown"


def cost_interval(ratios, rounds: int = 5000, seed: int = 0):
    """95% bootstrap interval of the median of the pairs' costs (1 - instrumented/bare)."""
    costs = [1 - r for r in ratios]
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(costs, k=len(costs))) for _ in range(rounds))
    return [meds[int(0.025 * rounds)], meds[int(0.975 * rounds) - 1]]


def summarise(got: dict) -> dict:
    """One case's numbers from its instrumented and bare samples/s (paired, in order) and between-step shares."""
    ratios = [i / b for i, b in zip(got["instrumented"], got["bare"])]
    inst, bare = statistics.median(got["instrumented"]), statistics.median(got["bare"])
    return {
        "instrumented_samples_per_s": got["instrumented"],
        "bare_samples_per_s": got["bare"],
        "between_steps": got["between_steps"],
        "pairs": len(ratios),
        "instrumented_median": inst,
        "bare_median": bare,
        "overhead_of_medians": 1 - inst / bare,
        "overhead_median_of_pairs": 1 - statistics.median(ratios),
        "overhead_interval_95": cost_interval(ratios),
        "pair_ratio_spread": [min(ratios), max(ratios)],
        # Measured directly, immune to the machine's noise: the share of the timed
        # window spent between steps (progress event, loss read, gauges).
        "between_steps_share_median": statistics.median(got["between_steps"]),
    }


def print_table(out: dict) -> None:
    print(f"machine: {out['machine']['cpu']}, {out['machine']['cpus']} CPUs, torch {out['machine']['torch']}; "
          f"load average {out['loadavg_start']} at the start, {out['loadavg_end']} at the end")
    print(f"{'case':22} {'pairs':>5} {'instrumented':>12} {'bare':>8} {'overhead':>9} {'by pairs':>9} "
          f"{'95% interval':>16} {'pair ratios':>12} {'between':>8}  target")
    for label, c in out["cases"].items():
        lo, hi = c["overhead_interval_95"]
        verdict = "met (<= 2%)" if hi <= 0.02 else "unresolved: the interval reaches past 2%"
        print(f"{label:22} {c['pairs']:5d} {c['instrumented_median']:12.1f} {c['bare_median']:8.1f} "
              f"{c['overhead_of_medians']:9.1%} {c['overhead_median_of_pairs']:9.1%} "
              f"{lo:+7.1%} to {hi:+6.1%} "
              f"{c['pair_ratio_spread'][0]:5.2f}-{c['pair_ratio_spread'][1]:<6.2f} {c['between_steps_share_median']:8.2%}"
              f"  {verdict}")
    print("samples/s are medians; overhead = 1 - instrumented/bare (of medians, and median of ABBA pairs, with its "
          "95% bootstrap interval); between = share of the timed window spent between steps on instrumentation")


def pooled(paths) -> dict:
    """The table for saved runs (--json) of the same machine and workload, their pairs pooled."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    out = {k: docs[0][k] for k in ("machine", "workload", "device", "steps", "warmup")}
    out["loadavg_start"] = ", ".join(str(d["loadavg_start"]) for d in docs)
    out["loadavg_end"] = ", ".join(str(d["loadavg_end"]) for d in docs)
    out["cases"] = {}
    for label in docs[0]["cases"]:
        got = {"instrumented": [], "bare": [], "between_steps": []}
        for d in docs:
            c = d["cases"][label]
            got["instrumented"] += c["instrumented_samples_per_s"]
            got["bare"] += c["bare_samples_per_s"]
            got["between_steps"] += c.get("between_steps") or [c["between_steps_share_median"]]
        out["cases"][label] = {"settings": docs[0]["cases"][label]["settings"], **summarise(got)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None)
    ap.add_argument("--workload", default="builtin:cnn")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=10, help="pairs per case (ABBA order)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--from-json", nargs="+", metavar="RUN", help="report saved runs, their pairs pooled; no measuring")
    args = ap.parse_args()
    if args.from_json:
        print_table(pooled(args.from_json))
        return 0
    host = LiveHost()
    python = worker_python(args.python, host)
    out = {"machine": {"cpu": cpu_model(host), "cpus": len(host.affinity()), "kernel": platform.release()},
           "workload": args.workload, "device": args.device, "steps": args.steps, "warmup": args.warmup,
           "repeats": args.repeats, "cases": {}}
    out["loadavg_start"] = loadavg(host)
    with TrainingWorker(python, timeout=900) as w:
        info = w.info()
        out["machine"].update(torch=info["torch"], python=info["python_version"])
        w.load(args.workload, device=Device.parse(args.device))
        runs = {label: {"instrumented": [], "bare": [], "between_steps": []} for label in CASES}
        # Round-robin over the cases, ABBA within each pair, so that drift in
        # the machine's load falls on every case and both modes alike.
        for r in range(args.repeats):
            for label, settings in CASES.items():
                order = ["instrumented", "bare"] if r % 2 == 0 else ["bare", "instrumented"]
                for mode in order:
                    res = w.trial(settings, steps=args.steps, warmup=args.warmup, mode=mode, seed=r)
                    runs[label][mode].append(res.samples_per_s)
                    if mode == "instrumented":
                        runs[label]["between_steps"].append(res.overhead_s / res.wall_s)
                print(f"{label}: pair {r + 1}/{args.repeats}: instrumented {runs[label]['instrumented'][-1]:.1f}, "
                      f"bare {runs[label]['bare'][-1]:.1f} samples/s, load {loadavg(host)}", file=sys.stderr)
        for label, settings in CASES.items():
            out["cases"][label] = {"settings": settings.to_dict(), **summarise(runs[label])}
    out["loadavg_end"] = loadavg(host)
    print_table(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
