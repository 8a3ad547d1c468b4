"""Replay a real grid as a response surface: how often does the search find a
near-best configuration, how often do repeated searches agree, and at what cost?

`benchmarks/tune_bench.py --json run.json` measured every point of the
--measure space on a real machine.  This script runs the search
(`debtorch.tune.search`) many times against those measurements, with the
true answer known: each trial of a configuration draws one of that
configuration's real samples (samples/s and seconds) at random and, with
`--noise`, multiplies it by log-normal noise of that relative spread (a
single-pass grid has one sample per point: without noise every trial of it
would read the same).  The "truth" is each configuration's median in the
file.  It prints, per workload, how often the search's choice reaches 95% of
the best median, how often the runs choose the same region (threads, loader
workers or none, precision), and what share of the grid's time it spent.

    # as tune_bench ran it: the search's own budget (--budget less start-up and calibration)
    python benchmarks/tune_replay.py run.json --workload all --budget 73 --noise 0.10 --runs 300
    # as a share of the grid's measuring time
    python benchmarks/tune_replay.py run.json --budget-share 0.25

A replay measures the search's statistics, not the machine: the surface is
what one grid measured (a lucky or unlucky point stays so), and real noise
has drift and outliers that log-normal noise lacks.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tune_bench import region  # noqa: E402  (the benchmark's own regions)

from debtorch.train.device import Device  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.tune.search import Outcome, Search, default_space, key  # noqa: E402


def replay(data: dict, runs: int, noise: float, budget: float = 0.0, budget_share: float = 0.25,
           search_options: dict = None, order: str = "") -> dict:
    """Run the search ``runs`` times on one workload's grid; what it found, as numbers."""
    samples: dict = {}
    for row in data["grid"]:
        s = Settings.from_dict(row["settings"])
        if row["samples_per_s"] is not None:
            samples.setdefault(key(s), []).append((row["samples_per_s"], row["seconds"]))
    start = Settings.from_dict(data["rules_settings"])
    # tune_bench --device sim: a simulated accelerator
    device = Device.parse((data.get("sim") or {}).get("device", "cpu"))
    dims = default_space(start, device, data["per_process_cpus"], data["precisions"],
                         data["convolutional"] and device.is_cpu, max_workers=data.get("max_workers"))
    if order:  # another order of the dimensions (names, comma-separated; the rest keep theirs, after)
        names = [n.strip() for n in order.split(",")]
        dims = sorted(dims, key=lambda d: names.index(d.name) if d.name in names else len(names))
    medians = {k: statistics.median(v for v, _ in vals) for k, vals in samples.items()}
    best = max(medians.values())
    passes = max(1, max(len(v) for v in samples.values()))
    single_pass = sum(sec for vals in samples.values() for _, sec in vals) / passes
    search_budget = budget if budget else budget_share * single_pass
    fractions, shares, regions, trials = [], [], collections.Counter(), []
    for seed in range(runs):
        rng = random.Random(seed)

        def trial(s):
            v, sec = rng.choice(samples[key(s)])
            return Outcome(v * math.exp(rng.gauss(0, noise)) if noise else v, sec)

        result = Search(trial, budget_s=search_budget, **(search_options or {})).run(start, dims)
        fractions.append(medians[key(result.best)] / best)
        shares.append(result.spent / single_pass)
        regions[region(result.best)] += 1
        trials.append(len(result.trials))
    top, count = regions.most_common(1)[0]
    return {"workload": data.get("name", "?"), "configurations": len(samples), "single_pass_s": single_pass,
            "budget_s": search_budget, "runs": runs, "noise": noise,
            "reach_95": sum(f >= 0.95 for f in fractions) / runs,
            "median": statistics.median(fractions), "p10": sorted(fractions)[runs // 10], "worst": min(fractions),
            "rules": medians[key(start)] / best if key(start) in medians else None,
            "same_region": count / runs, "region": top, "regions": dict(regions),
            "spent_of_single_pass": statistics.median(shares), "trials": statistics.median(trials)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="a tune_bench.py --json file")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--budget", type=float, default=0.0,
                    help="the search's budget in seconds (0: --budget-share of a single-pass grid)")
    ap.add_argument("--budget-share", type=float, default=0.25, help="search budget as a share of a single-pass grid")
    ap.add_argument("--noise", type=float, default=0.0, help="relative log-normal noise added to every trial")
    ap.add_argument("--workload", default="cnn", help="which workload of the file (cnn, transformer, images, all)")
    ap.add_argument("--search", action="append", default=[], metavar="NAME=VALUE",
                    help="a Search option (switch_z=1, min_gain=0.05, repeats=3 ...); repeatable")
    ap.add_argument("--order", default="", help="race the dimensions in this order (split,precision,channels_last...)")
    ap.add_argument("--json-out", help="write the numbers here")
    args = ap.parse_args()

    data = json.loads(Path(args.json).read_text())
    sets = data["workloads"] if "workloads" in data else [data]
    if args.workload != "all":
        sets = [w for w in sets if w.get("name", args.workload) == args.workload]
        if not sets:
            print(f"tune_replay: no workload {args.workload!r} in {args.json}", file=sys.stderr)
            return 2
    options = {}
    for item in args.search:
        name, _, value = item.partition("=")
        try:
            options[name.strip()] = int(value) if value.strip().lstrip("-").isdigit() else float(value)
        except ValueError:
            print(f"tune_replay: --search {item!r}: expected NAME=NUMBER", file=sys.stderr)
            return 2
    out = []
    for w in sets:
        r = replay(w, args.runs, args.noise, args.budget, args.budget_share, options, args.order)
        out.append(r)
        rules = f"; the rules' settings {r['rules']:.0%}" if r["rules"] else ""
        print(f"{r['workload']}: {r['runs']} replayed searches over {r['configurations']} configurations "
              f"(single pass {r['single_pass_s']:.0f} s), budget {r['budget_s']:.0f} s, noise {r['noise']:.0%}: "
              f">= 95% of the best in {r['reach_95']:.0%} of runs (median {r['median']:.1%}, 10th percentile "
              f"{r['p10']:.1%}, worst {r['worst']:.1%}{rules}); same region {r['same_region']:.0%} "
              f"({r['region']}); spent {r['spent_of_single_pass']:.0%} of a single pass, {r['trials']:.0f} trials")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
