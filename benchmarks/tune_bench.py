"""How good is `debtorch tune --measure`?  One run on this machine compares, on
the built-in workload (samples per second, median of interleaved repeats):

* PyTorch's defaults (no workers, fp32, PyTorch's threads);
* the article's rule: workers = 2 x cores, pinned memory, prefetch 2;
* Lightning's rule: workers = max(1, usable CPUs // devices - 1);
* debtorch's rules alone (no measurement);
* `debtorch tune --measure` with a budget (its whole time counted: worker
  start, calibration, search);
* an exhaustive grid over the same space as --measure, each point measured
  `--repeats` times, interleaved: the oracle.

Targets (issue 4): --measure reaches >= 95% of the oracle's best throughput,
spends <= 25% of the grid's measuring time, and beats every fixed rule.

    python benchmarks/tune_bench.py --budget 300 --doc docs/tune.md --json out.json

Every contestant is finally measured again in one interleaved head-to-head
(`--final-repeats` rounds, rotating order), so that they share the machine's
conditions; the table reports that median and its spread.  The machine's load
average before and after is printed: other processes on a shared machine move
every number.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch import facts as facts_mod  # noqa: E402
from debtorch.host import LiveHost  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.tune import rules  # noqa: E402
from debtorch.tune.measure import EngineTrials, MeasureOptions, Trialer, measure, precisions_for  # noqa: E402
from debtorch.tune.search import default_space, grid_points, key, run_grid  # noqa: E402

START, END = "<!-- tune-bench:start -->", "<!-- tune-bench:end -->"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Quiet:
    """Waits, before each trial, until other processes leave the CPUs (mostly) idle.

    This machine is shared: other sessions' tests and benchmarks come and go.
    A trial starts when the CPUs were at most ``threshold`` busy over half a
    second (our own worker is idle between trials), or after ``max_wait``
    seconds anyway.  Waiting is not counted as measuring time.
    """

    def __init__(self, threshold: float = 0.25, max_wait: float = 120.0):
        self.threshold, self.max_wait = threshold, max_wait
        self.waited = 0.0
        self.forced = 0
        self.busy_seen: list = []

    @staticmethod
    def _stat() -> tuple:
        with open("/proc/stat") as fh:  # a benchmark script, not debtorch: reads /proc directly
            vals = [int(x) for x in fh.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return sum(vals), idle

    def busy(self, interval: float = 0.5) -> float:
        t1, i1 = self._stat()
        time.sleep(interval)
        t2, i2 = self._stat()
        return 1.0 - (i2 - i1) / max(1, t2 - t1)

    def wait(self) -> None:
        start = time.monotonic()
        while True:
            b = self.busy()
            if b <= self.threshold:
                break
            if time.monotonic() - start > self.max_wait:
                self.forced += 1
                break
            time.sleep(1.0)
        self.busy_seen.append(b)
        self.waited += time.monotonic() - start

    def clock(self) -> float:
        """Monotonic time without the waiting."""
        return time.monotonic() - self.waited


class Gated:
    """An engine whose trials start only when the machine is quiet, and are run again
    (up to ``retries`` times) when other processes took more than ``threshold`` of the
    CPUs while they ran: a busy machine only ever slows a trial, so such a trial says
    more about the neighbours than about the settings."""

    def __init__(self, engine, quiet: Quiet, retries: int = 3):
        self.engine, self.quiet, self.info, self.retries = engine, quiet, engine.info, retries
        self.contaminated = 0
        self.others_seen: list = []

    @staticmethod
    def _ours(pid) -> float:
        """CPU seconds of the worker and its reaped children (DataLoader workers)."""
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return 0.0

    def trial(self, settings, steps, warmup):
        pid = self.engine.worker.pid
        ncpu = os.cpu_count() or 1
        for attempt in range(self.retries + 1):
            self.quiet.wait()
            t_total, t_idle = Quiet._stat()
            ours, wall = self._ours(pid), time.monotonic()
            r = self.engine.trial(settings, steps=steps, warmup=warmup)
            t2_total, t2_idle = Quiet._stat()
            wall = time.monotonic() - wall
            busy_s = ((t2_total - t_total) - (t2_idle - t_idle)) / os.sysconf("SC_CLK_TCK") / 1.0
            others = max(0.0, busy_s / ncpu - (self._ours(pid) - ours) / ncpu) / max(wall, 1e-6)
            self.others_seen.append(others)
            if others <= self.quiet.threshold:
                return r
            self.contaminated += 1
            log(f"  {settings.short()}: other processes took {others:.0%} of the CPUs during the trial; again")
        return r


def fixed_rules(facts: dict, rec: rules.Recommendation) -> dict:
    cores = facts_mod.get(facts, "cpu.physical_cores") or facts_mod.get(facts, "cpu.logical_cpus") or 1
    usable = facts_mod.get(facts, "cpu.usable_cpus") or 1
    article = 2 * cores
    lightning = max(1, usable // 1 - 1)
    workers = dict(prefetch_factor=2, persistent_workers=True, start_method="fork")
    return {
        "PyTorch defaults": Settings(),
        f"article: workers = 2 x {cores} cores": Settings(num_workers=article, pin_memory=True, **workers),
        f"Lightning: workers = {usable} // 1 - 1": Settings(num_workers=lightning, **workers),
        "debtorch rules": rec.settings,
    }


def head_to_head(trialer: Trialer, contestants: dict, rounds: int) -> dict:
    """Each contestant measured ``rounds`` times, the order rotating every round."""
    names = list(contestants)
    vals: dict = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in (order if r % 2 == 0 else list(reversed(order))):
            out = trialer(contestants[n])
            if out.samples_per_s is not None:
                vals[n].append(out.samples_per_s)
            log(f"final {r + 1}/{rounds}: {n}: {out.samples_per_s or out.error}")
    return vals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="builtin:cnn")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--budget", type=float, default=300.0, help="--measure's budget in seconds")
    ap.add_argument("--repeats", type=int, default=3, help="measurements of every grid point")
    ap.add_argument("--final-repeats", type=int, default=5)
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--doc", help="replace the results section of this Markdown file (docs/tune.md)")
    ap.add_argument("--quiet", type=float, default=0.25,
                    help="start a trial only when the CPUs were at most this busy (0-1) with other work")
    ap.add_argument("--max-wait", type=float, default=120.0, help="seconds to wait for quiet before a trial")
    args = ap.parse_args()

    load_before = os.getloadavg()
    host = LiveHost()
    facts = facts_mod.collect(host, facts_mod.Options(python=args.python))
    host.close()
    rec = rules.recommend(facts, rules.Request(model="conv"))
    machine = (f"{facts_mod.get(facts, 'cpu.model')}, {facts_mod.get(facts, 'cpu.usable_cpus')} usable CPUs, "
               f"{(facts_mod.get(facts, 'memory.total') or 0) / 2**30:.0f} GiB RAM, no GPU, "
               f"{facts_mod.get(facts, 'os.pretty_name')}, PyTorch {facts_mod.get(facts, 'python.torch.version')}")
    log(f"machine: {machine}; load average {load_before[0]:.2f}")

    quiet = Quiet(threshold=args.quiet, max_wait=args.max_wait)

    # 1. tune --measure, as a user runs it: a fresh worker, all its time counted
    #    (the worker's start, calibration, the search), waits for quiet excepted.
    measured_rec = rules.recommend(facts, rules.Request(model="conv"))
    t0 = time.monotonic()
    engine = EngineTrials(args.workload, "cpu", args.python)
    start_s = time.monotonic() - t0
    gates = [Gated(engine, quiet)]
    try:
        result = measure(measured_rec, facts, MeasureOptions(workload=args.workload, budget_s=args.budget - start_s,
                                                             python=args.python),
                         trials=gates[0], clock=quiet.clock,
                         on_trial=lambda t, spent, budget: log(f"measure {spent:.0f}/{budget:.0f} s: {t.phase}: "
                                                               f"{t.settings.short()} -> "
                                                               f"{t.samples_per_s or t.error}"))
    finally:
        engine.close()
    measure_s = start_s + result.spent
    log(f"--measure chose {measured_rec.settings.short()} in {measure_s:.0f} s ({len(result.trials)} trials)")

    # 2. The grid and the head-to-head in one worker, trials sized as --measure sized its own.
    engine = EngineTrials(args.workload, "cpu", args.python)
    try:
        gates.append(Gated(engine, quiet))
        trialer = Trialer(gates[1], clock=quiet.clock)
        trialer.calibrate(rec.settings, args.budget)
        trialer.steps = result.steps_per_trial
        trialer.max_steps = max(trialer.max_steps, trialer.steps)
        dims = default_space(rec.settings, "cpu", rec.per_process_cpus, precisions_for(rec, facts),
                             bool(trialer.info.get("convolutional")), max_workers=rec.max_workers)
        points = grid_points(rec.settings, dims)
        log(f"grid: {len(points)} points x {args.repeats}")
        grid = run_grid(trialer, points, repeats=args.repeats,
                        on_trial=lambda t, spent, budget: log(f"grid {t.index}/{len(points) * args.repeats}: "
                                                              f"{t.settings.short()} -> "
                                                              f"{t.samples_per_s or t.error}"))
        grid_s = grid.spent
        oracle = grid.best
        log(f"grid best {oracle.short()} in {grid_s:.0f} s of measuring")

        contestants = fixed_rules(facts, rec)
        contestants["debtorch tune --measure"] = measured_rec.settings
        contestants["grid (oracle)"] = oracle
        final = head_to_head(trialer, contestants, args.final_repeats)
    finally:
        engine.close()
    load_after = os.getloadavg()

    med = {n: statistics.median(v) if v else None for n, v in final.items()}
    best = med["grid (oracle)"]
    rows = []
    for n, s in contestants.items():
        v = final[n]
        spread = (max(v) - min(v)) / med[n] if len(v) > 1 and med[n] else None
        cost = {"debtorch tune --measure": measure_s, "grid (oracle)": grid_s}.get(n)
        rows.append({"contestant": n, "settings": s.short(), "samples_per_s": med[n], "spread": spread,
                     "of_oracle": med[n] / best if med[n] and best else None, "measuring_s": cost, "runs": len(v)})
    m = med["debtorch tune --measure"]
    fixed = [r for r in rows if r["contestant"] not in ("debtorch tune --measure", "grid (oracle)")]
    targets = {
        "measure_of_oracle": m / best if m and best else None,
        "measure_time_of_grid": measure_s / grid_s if grid_s else None,
        "beats_every_fixed_rule": all(m and r["samples_per_s"] and m > r["samples_per_s"] for r in fixed),
        "grid_oracle_in_grid_phase": oracle.short(),
        "grid_best_median_in_grid_phase": grid.median(oracle),
        "measure_choice_median_in_grid_phase": grid.median(measured_rec.settings),
    }
    targets["quiet"] = {"threshold": args.quiet, "waited_s": quiet.waited, "forced": quiet.forced,
                        "rerun": sum(g.contaminated for g in gates),
                        "median_others_during_trial": statistics.median(sum((g.others_seen for g in gates), []))
                        if any(g.others_seen for g in gates) else None,
                        "trials": len(quiet.busy_seen),
                        "median_busy_before_trial": statistics.median(quiet.busy_seen) if quiet.busy_seen else None}
    table = render(rows, targets, machine, load_before, load_after, args, len(points), len(result.trials))
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows, "targets": targets,
                                               "load_before": load_before, "load_after": load_after,
                                               "measure_reasons": {k: str(v) for k, v in measured_rec.reasons.items()},
                                               "grid_trials": [(t.settings.short(), t.samples_per_s, t.seconds)
                                                               for t in grid.trials],
                                               "measure_trials": [(t.phase, t.settings.short(), t.samples_per_s,
                                                                   t.seconds) for t in result.trials]}, indent=1))
    if args.doc:
        path = Path(args.doc)
        text = path.read_text()
        if START in text and END in text:
            head, rest = text.split(START, 1)
            _, tail = rest.split(END, 1)
            path.write_text(head + START + "\n" + table + "\n" + END + tail)
    return 0


def render(rows, targets, machine, before, after, args, n_points, n_trials) -> str:
    def f(v, fmt):
        return fmt.format(v) if v is not None else "-"

    date = _dt.date.today().isoformat()
    q = targets["quiet"]
    lines = [
        f"Measured {date} on {machine}; workload `{args.workload}`; load average {before[0]:.2f} before, "
        f"{after[0]:.2f} after (a shared machine: other processes ran meanwhile); the benchmark ran at "
        f"nice {os.nice(0)} (other processes at 0).",
        "",
        f"Samples per second: median of {args.final_repeats} interleaved runs in a final head-to-head.",
        "",
        "| contestant | settings | samples/s | spread | of oracle | measuring time |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['contestant']} | `{r['settings']}` | {f(r['samples_per_s'], '{:.1f}')} | "
                     f"{f(r['spread'], '{:.0%}')} | {f(r['of_oracle'], '{:.0%}')} | "
                     f"{f(r['measuring_s'], '{:.0f} s')} |")
    lines += [
        "",
        f"- --measure: {n_trials} trials within `--budget {args.budget:g}`; the grid: {n_points} points x "
        f"{args.repeats} runs.",
        f"- --measure reached {f(targets['measure_of_oracle'], '{:.1%}')} of the oracle's throughput "
        f"(target >= 95%).",
        f"- --measure spent {f(targets['measure_time_of_grid'], '{:.1%}')} of the grid's measuring time "
        f"(target <= 25%).",
        f"- --measure beats every fixed rule: {'yes' if targets['beats_every_fixed_rule'] else 'no'}.",
        f"- Shared machine: each trial waited until other processes used at most {q['threshold']:.0%} of the CPUs "
        f"(median {f(q['median_busy_before_trial'], '{:.0%}')} busy at the start of a trial; "
        f"{q['forced']} of {q['trials']} trials started after {args.max_wait:g} s without quiet; "
        f"{q['waited_s'] / 60:.0f} min waited in all, not counted as measuring time). A trial during which "
        f"other processes took more than {q['threshold']:.0%} of the CPUs was run again ({q['rerun']} times; "
        f"median share taken by others during a trial: {f(q['median_others_during_trial'], '{:.0%}')}); the "
        f"reruns count as measuring time.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
