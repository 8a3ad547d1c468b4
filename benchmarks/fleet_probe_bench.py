"""Does ``debtorch fleet --probe`` name a really slow rank, and does it accuse healthy ones?

Runs ``torchrun --nproc-per-node N ... debtorch fleet --probe`` on this machine (gloo on the CPU,
each rank replaying a copy of the debian12-vm-2core fixture as its node) several times.  In a
"slowed" run one rank, a different one each run, is put into a cgroup with a CPU quota
(``--quota`` CPUs, cgroup v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``) before it starts: a real
slowdown of that rank's processes, not a sleep in debtorch.  "Control" runs slow nobody.  For each
run it records which nodes the probe named (failed, slow compute, slow all-reduce, slow pair),
and prints how often the slowed rank was named and how often a healthy rank was accused, with the
load average before and after each run (other work on the machine is noise the probe sees too).

    sudo python benchmarks/fleet_probe_bench.py --slowed 6 --control 3 --json /tmp/probe.json

Needs root (to make the cgroup) and torch in this interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "hosts" / "debian12-vm-2core"
WRAPPER = """#!/bin/sh
# One rank of the benchmark: the slowed one moves itself into the quota cgroup first.
if [ -n "$DEBTORCH_SLOW_CGROUP" ] && [ "$RANK" = "$DEBTORCH_SLOW_RANK" ]; then
    echo $$ > "$DEBTORCH_SLOW_CGROUP/cgroup.procs"
fi
exec "$DEBTORCH_PYTHON" -m debtorch fleet "$@"
"""


def make_cgroup(quota: float) -> tuple:
    """(folder, cleanup) of a cgroup limited to ``quota`` CPUs."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists():
        folder = v1 / f"debtorch-probe-{os.getpid()}"
        folder.mkdir()
        (folder / "cpu.cfs_period_us").write_text("100000")
        (folder / "cpu.cfs_quota_us").write_text(str(int(quota * 100000)))
    else:
        base = Path("/sys/fs/cgroup")
        folder = base / f"debtorch-probe-{os.getpid()}"
        folder.mkdir()
        (folder / "cpu.max").write_text(f"{int(quota * 100000)} 100000")

    def cleanup():
        for _ in range(50):
            try:
                folder.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    return folder, cleanup


def loadavg() -> str:
    with open("/proc/loadavg") as fh:
        return " ".join(fh.read().split()[:3])


def one_run(work: Path, nproc: int, budget: float, slow_rank, cgroup) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["DEBTORCH_PYTHON"] = sys.executable
    env["OMP_NUM_THREADS"] = "1"
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "VIRTUAL_ENV"):
        env.pop(var, None)
    if slow_rank is not None:
        env.update(DEBTORCH_SLOW_CGROUP=str(cgroup), DEBTORCH_SLOW_RANK=str(slow_rank))
    before = loadavg()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={nproc}", "--no-python", str(work / "rank.sh"),
                           "--json", "--probe", "--budget", str(budget), "--timeout", "180",
                           "--host", str(work / "r{rank}")], capture_output=True, text=True, env=env, timeout=900)
    wall = time.monotonic() - t0
    out = proc.stdout
    if "{" not in out:
        return {"slow_rank": slow_rank, "error": proc.stderr[-2000:], "load_before": before, "load_after": loadavg()}
    report = json.loads(out[out.index("{"):])
    p = report.get("probe") or {}
    nodes = {n["node"]: n for n in p.get("nodes", [])}
    named = sorted(n for n, row in nodes.items() if row["verdict"] != "ok")
    pairs = [f for f in report["findings"] if f["id"] == "fleet.W018"]
    return {"slow_rank": slow_rank, "slow_node": f"vm{slow_rank}" if slow_rank is not None else None,
            "named": named, "pair_findings": [g["nodes"] for f in pairs for g in f["groups"]],
            "verdicts": {n: row["verdict"] for n, row in nodes.items()},
            "gflops": {n: row["gflops"] for n, row in nodes.items()},
            "busbw_gbs": {n: row["busbw_gbs"] for n, row in nodes.items()},
            "median_gflops": p.get("median_gflops"), "median_busbw_gbs": p.get("median_busbw_gbs"),
            "pairs": p.get("pairs"),
            "wall_s": round(wall, 1), "load_before": before, "load_after": loadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--slowed", type=int, default=6, help="runs with one rank slowed (a different one each run)")
    ap.add_argument("--control", type=int, default=3, help="runs with no rank slowed")
    ap.add_argument("--quota", type=float, default=0.25, help="CPUs the slowed rank may use")
    ap.add_argument("--budget", type=float, default=8.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fleet-probe-"))
    cgroup, cleanup = make_cgroup(args.quota)
    runs = []
    try:
        for r in range(args.nproc):
            shutil.copytree(FIXTURE, work / f"r{r}", symlinks=True)
            (work / f"r{r}" / "proc/sys/kernel/hostname").write_text(f"vm{r}\n")
        (work / "rank.sh").write_text(WRAPPER)
        (work / "rank.sh").chmod(0o755)
        plan = [r % args.nproc for r in range(args.slowed)] + [None] * args.control
        for i, slow in enumerate(plan):
            res = one_run(work, args.nproc, args.budget, slow, cgroup)
            runs.append(res)
            print(f"run {i + 1}/{len(plan)}: slowed {res.get('slow_node') or 'none'}: named {res.get('named')} "
                  f"pairs {res.get('pair_findings')} gflops {res.get('gflops')} busbw {res.get('busbw_gbs')} "
                  f"({res.get('wall_s')} s, load {res['load_before']} -> {res['load_after']})"
                  + (f" ERROR {res['error'][-300:]}" if res.get("error") else ""), flush=True)
    finally:
        cleanup()
        shutil.rmtree(work, ignore_errors=True)
    slowed = [r for r in runs if r.get("slow_rank") is not None and "error" not in r]
    control = [r for r in runs if r.get("slow_rank") is None and "error" not in r]
    right = sum(1 for r in slowed if r["slow_node"] in r["named"])
    healthy = sum(args.nproc - 1 for _ in slowed) + sum(args.nproc for _ in control)
    accused = sum(len([n for n in r["named"] if n != r["slow_node"]]) for r in slowed + control)
    runs_with_false = sum(1 for r in slowed + control if [n for n in r["named"] if n != r["slow_node"]])
    print(f"slowed rank named in {right} of {len(slowed)} runs; healthy ranks accused {accused} times out of "
          f"{healthy} healthy rank-runs ({runs_with_false} of {len(slowed) + len(control)} runs with a false accusation)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, "right": right,
                                               "slowed_runs": len(slowed), "accused": accused,
                                               "healthy_rank_runs": healthy}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
