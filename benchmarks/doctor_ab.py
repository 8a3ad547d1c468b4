"""`debtorch doctor` of this tree against another, side by side: is it as fast as before?

    git archive main | tar -x -C /tmp/base      # the tree to compare with (a copy, not a checkout)
    python benchmarks/doctor_ab.py /tmp/base [--rounds 30] [--margin 0.05] [--markdown]

Each round runs every case once from each tree, in an order that alternates, in the same interpreter
(``python -m debtorch`` with the tree first on PYTHONPATH, its modules byte-compiled as installed):
`doctor` on this machine and `doctor --host` on two recorded machines (a VM without a GPU, a
workstation with one: the GPU tables are read).  Per case it reports the medians and the ratio of
speeds (this tree over the other, 1/s) with its 95% interval from debtorch.stats.compare, paired by
round: "equivalent" when the interval lies within +-margin of 1, "slower"/"faster" when it lies beyond
1, else "inconclusive".  The load average before and after goes with the numbers: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch import stats  # noqa: E402

CASES = {
    "doctor (this machine)": ["doctor"],
    "doctor --host debian12-vm-2core": ["doctor", "--host", str(ROOT / "tests" / "hosts" / "debian12-vm-2core")],
    "doctor --host debian13-workstation-rtx3080": ["doctor", "--host",
                                                   str(ROOT / "tests" / "hosts" / "debian13-workstation-rtx3080")],
}


def timed(argv: list, env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/")
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}")
    return elapsed


def tree_env(tree: Path) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)     # as installed: compiled modules
    env["PYTHONPATH"] = str(tree)
    env["DEBTORCH_CHECKS_DIR"] = str(tree / "checks")
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("baseline", type=Path, help="the other tree (a folder holding debtorch/ and checks/)")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--margin", type=float, default=0.05, help="within this of 1 is 'equivalent'")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    trees = {"this": ROOT, "baseline": args.baseline.resolve()}
    envs = {name: tree_env(tree) for name, tree in trees.items()}
    for tree in trees.values():
        subprocess.run([args.python, "-m", "compileall", "-q", str(tree / "debtorch")], check=True)
    load_before = os.getloadavg()
    times: dict = {(case, name): [] for case in CASES for name in trees}
    for case, argv in CASES.items():          # warm the page cache
        for name in trees:
            timed([args.python, "-m", "debtorch", *argv], envs[name])
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(list(trees)))
        for case, argv in CASES.items():
            for name in order:
                times[(case, name)].append(timed([args.python, "-m", "debtorch", *argv], envs[name]))
    load_after = os.getloadavg()
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    head = (f"Measured {time.strftime('%Y-%m-%d')} on {machine}; {args.rounds} interleaved rounds; load average "
            f"{load_before[0]:.1f} before, {load_after[0]:.1f} after.")
    print(head if args.markdown else head + "\n")
    if args.markdown:
        print("\n| case | this tree (median s) | baseline (median s) | speed ratio (95% interval) | verdict |")
        print("|---|---:|---:|---|---|")
    for case in CASES:
        mine, base = times[(case, "this")], times[(case, "baseline")]
        est = stats.compare([1 / t for t in mine], [1 / t for t in base], margin=args.margin)
        interval = f"{est.estimate:.3f} ({est.low:.3f}-{est.high:.3f})"
        if args.markdown:
            print(f"| `{case}` | {statistics.median(mine):.3f} | {statistics.median(base):.3f} | {interval} | {est.verdict} |")
        else:
            print(f"{case:<44} this {statistics.median(mine):.3f} s  baseline {statistics.median(base):.3f} s  "
                  f"speed ratio {interval}  {est.verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
