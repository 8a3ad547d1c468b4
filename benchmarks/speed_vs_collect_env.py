"""debtorch facts / doctor / doctor --deep against `python -m torch.utils.collect_env`.

Runs every command in the same interpreter (a venv that has torch and
debtorch), interleaved round by round so that machine noise hits all of them
alike, and reports medians and the ratio to collect_env.  Targets: facts <= 25%
of collect_env's wall time (issues 2 and 3), doctor <= 10% (issue 9), doctor
--deep <= 100%.

    python benchmarks/speed_vs_collect_env.py [--rounds 7] [--python PATH] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time


def timed(argv, env) -> float:
    start = time.perf_counter()
    res = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    elapsed = time.perf_counter() - start
    if res.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {res.returncode}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch and debtorch")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table for docs/")
    args = ap.parse_args()
    py = args.python
    env = dict(os.environ)
    # As installed (pip and the .deb byte-compile the package): compiled modules, not source
    # compiled on every run because this shell says PYTHONDONTWRITEBYTECODE.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([py, "-m", "compileall", "-q", os.path.join(root, "debtorch")], check=True, env=env)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    commands = {
        "collect_env": [py, "-m", "torch.utils.collect_env"],
        "debtorch facts": [py, "-m", "debtorch", "facts", "--python", py],
        "debtorch doctor": [py, "-m", "debtorch", "doctor", "--python", py],
        "debtorch doctor --deep": [py, "-m", "debtorch", "doctor", "--deep", "--python", py],
    }
    for argv in commands.values():   # warm the page cache once
        timed(argv, env)
    times: dict = {k: [] for k in commands}
    for _ in range(args.rounds):
        for name, argv in commands.items():
            times[name].append(timed(argv, env))
    base = statistics.median(times["collect_env"])
    targets = {"debtorch facts": 0.25, "debtorch doctor": 0.10, "debtorch doctor --deep": 1.0}
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = med / base
        target = targets.get(name)
        verdict = "" if target is None else ("meets" if ratio <= target else "MISSES") + f" <= {target:.0%}"
        rows.append((name, med, min(ts), max(ts), ratio, verdict))
    machine = f"{platform.node() and 'host'}: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    if args.markdown:
        print(f"Measured {time.strftime('%Y-%m-%d')} on {machine}; {args.rounds} interleaved rounds, medians.\n")
        print("| command | median s | min s | max s | vs collect_env | target |")
        print("|---|---|---|---|---|---|")
        for name, med, lo, hi, ratio, verdict in rows:
            print(f"| `{name}` | {med:.3f} | {lo:.3f} | {hi:.3f} | {ratio:.1%} | {verdict} |")
    else:
        print(f"{machine}; {args.rounds} interleaved rounds")
        for name, med, lo, hi, ratio, verdict in rows:
            print(f"{name:<24} median {med:6.3f} s  (min {lo:.3f}, max {hi:.3f})  {ratio:6.1%} of collect_env  {verdict}")
    misses = [r for r in rows if r[5].startswith("MISSES")]
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
