"""What the engine's instrumentation costs: instrumented against bare samples/s.

The instrumented loop synchronises the device and reads the clock around
every data fetch and every compute segment, reads the memory gauges
between steps (no sampling thread) and keeps per-step losses; the bare loop
does the same training with two clock reads around the whole window.  Both
run in one worker (the real path), interleaved in ABBA order to cancel
drift, repeated, and compared by medians.  Target (issue 5): instrumentation costs at most 2%.

    python benchmarks/engine_overhead.py [--python PATH] [--repeats 6] [--steps 30] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch.facts.cpu import parse_cpuinfo  # noqa: E402
from debtorch.host import LiveHost  # noqa: E402
from debtorch.train.runner import Worker, worker_python  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None)
    ap.add_argument("--workload", default="builtin:cnn")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=10, help="pairs per case (ABBA order)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    host = LiveHost()
    python = worker_python(args.python, host)
    out = {"machine": {"cpu": cpu_model(host), "cpus": len(host.affinity()), "kernel": platform.release()},
           "workload": args.workload, "device": args.device, "steps": args.steps, "warmup": args.warmup,
           "repeats": args.repeats, "cases": {}}
    out["loadavg_start"] = loadavg(host)
    with Worker(python, timeout=900) as w:
        info = w.info()
        out["machine"].update(torch=info["torch"], python=info["python_version"])
        w.load(args.workload, device=args.device)
        runs = {label: {"instrumented": [], "bare": [], "between_steps": []} for label in CASES}
        # Round-robin over the cases, ABBA within each pair, so that drift in
        # the machine's load falls on every case and both modes alike.
        for r in range(args.repeats):
            for label, settings in CASES.items():
                order = ["instrumented", "bare"] if r % 2 == 0 else ["bare", "instrumented"]
                for mode in order:
                    res = w.trial(settings, steps=args.steps, warmup=args.warmup, mode=mode, seed=r)
                    runs[label][mode].append(res["samples_per_s"])
                    if mode == "instrumented":
                        runs[label]["between_steps"].append(res["overhead_s"] / res["wall_s"])
                print(f"{label}: pair {r + 1}/{args.repeats}: instrumented {runs[label]['instrumented'][-1]:.1f}, "
                      f"bare {runs[label]['bare'][-1]:.1f} samples/s, load {loadavg(host)}", file=sys.stderr)
        for label, settings in CASES.items():
            got = runs[label]
            ratios = [i / b for i, b in zip(got["instrumented"], got["bare"])]
            inst, bare = statistics.median(got["instrumented"]), statistics.median(got["bare"])
            out["cases"][label] = {
                "settings": settings.to_dict(),
                "instrumented_samples_per_s": got["instrumented"],
                "bare_samples_per_s": got["bare"],
                "instrumented_median": inst,
                "bare_median": bare,
                "overhead_of_medians": 1 - inst / bare,
                "overhead_median_of_pairs": 1 - statistics.median(ratios),
                "pair_ratio_spread": [min(ratios), max(ratios)],
                # Measured directly, immune to the machine's noise: the share of the timed
                # window spent between steps (progress event, loss read, gauges).
                "between_steps_share_median": statistics.median(got["between_steps"]),
            }
    out["loadavg_end"] = loadavg(host)
    print(f"machine: {out['machine']['cpu']}, {out['machine']['cpus']} CPUs, torch {out['machine']['torch']}; "
          f"load average {out['loadavg_start']} at the start, {out['loadavg_end']} at the end")
    print(f"{'case':22} {'instrumented':>12} {'bare':>8} {'overhead':>9} {'by pairs':>9} {'pair ratios':>12} {'between':>8}")
    for label, c in out["cases"].items():
        print(f"{label:22} {c['instrumented_median']:12.1f} {c['bare_median']:8.1f} "
              f"{c['overhead_of_medians']:9.1%} {c['overhead_median_of_pairs']:9.1%} "
              f"{c['pair_ratio_spread'][0]:5.2f}-{c['pair_ratio_spread'][1]:<6.2f} {c['between_steps_share_median']:8.2%}")
    print("samples/s are medians; overhead = 1 - instrumented/bare (of medians, and median of ABBA pairs); "
          "between = share of the timed window spent between steps on instrumentation")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
