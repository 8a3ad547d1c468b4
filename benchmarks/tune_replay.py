"""Replay a real grid as a response surface: how often does the search find a
near-best configuration, and at what cost?

`benchmarks/tune_bench.py --json run.json` measured every point of the
--measure space several times on a real machine.  This script runs the search
(`debtorch.tune.search`) many times against those measurements: each trial of
a configuration draws one of that configuration's real samples (samples/s and
seconds) at random.  It prints how often the search's choice reaches 95% of
the grid's best median, and what share of the grid's time it spent.

    python benchmarks/tune_replay.py /tmp/run.json --runs 300 --budget-share 0.25
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from debtorch.train.settings import Settings  # noqa: E402
from debtorch.tune.search import Outcome, Search, default_space, key  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="a tune_bench.py --json file")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--budget-share", type=float, default=0.25, help="search budget as a share of the grid's time")
    ap.add_argument("--workload", default="cnn", help="which workload of the file (cnn, transformer, images)")
    args = ap.parse_args()

    data = json.loads(Path(args.json).read_text())
    if "workloads" in data:  # the multi-workload benchmark: one workload's grid
        data = next(w for w in data["workloads"] if w["name"] == args.workload)
    samples: dict = {}
    for row in data["grid"]:
        s = Settings.from_dict(row["settings"])
        if row["samples_per_s"] is not None:
            samples.setdefault(key(s), []).append((row["samples_per_s"], row["seconds"]))
    start = Settings.from_dict(data["rules_settings"])
    dims = default_space(start, "cpu", data["per_process_cpus"], data["precisions"], data["convolutional"],
                         max_workers=data.get("max_workers"))
    medians = {k: statistics.median(v for v, _ in vals) for k, vals in samples.items()}
    best = max(medians.values())
    grid_s = sum(sec for vals in samples.values() for _, sec in vals)
    fractions, shares = [], []
    for seed in range(args.runs):
        rng = random.Random(seed)

        def trial(s):
            v, sec = rng.choice(samples[key(s)])
            return Outcome(v, sec)

        result = Search(trial, budget_s=args.budget_share * grid_s).run(start, dims)
        fractions.append(medians[key(result.best)] / best)
        shares.append(result.spent / grid_s)
    hit = sum(f >= 0.95 for f in fractions) / len(fractions)
    print(f"{args.runs} replayed searches over {len(samples)} configurations ({grid_s:.0f} s of grid measurements)")
    print(f"choice reaches >= 95% of the best median in {hit:.0%} of runs; "
          f"median {statistics.median(fractions):.1%}, worst {min(fractions):.1%} of the best")
    print(f"time spent: median {statistics.median(shares):.1%}, most {max(shares):.1%} of the grid's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
