"""How good is `debtorch tune --measure`, fairly?  For each workload (the built-in CNN, the
built-in Transformer, the data-bound `builtin:images`), on this machine:

1. `--measure` run `--measure-runs` times (at least 5 for the published table), each as a user
   runs it: a fresh worker, its whole time counted (the worker's start, calibration, the
   search).  How often the runs choose the same *region* (threads, with or without loader
   workers, precision) is reported.
2. An exhaustive grid over the same space, `--grid-repeats` interleaved passes.  The *oracle*
   is the grid's best median: chosen on these repeats only.  `--measure`'s time is compared
   with a **single pass** of the grid (the grid's measuring time / its passes): what one
   measurement of every point costs.
3. A final head-to-head on **fresh** repeats (interleaved rounds, the order rotating, from 3
   until every verdict below resolves, at most `--final-repeats`: debtorch.stats.adaptive_rounds,
   each look at Pocock's level, as verify-train's rounds): the oracle and every `--measure` pick are measured again, so that neither keeps
   the luck that selected it (selection bias), beside the fixed rules: PyTorch's defaults,
   the article's rule (workers = 2 x cores, pinned memory), Lightning's rule (workers = usable
   CPUs // devices - 1), each also **at debtorch's precision** (bf16 where the CPU has it), so
   that "beats every rule" is about the settings tune chooses and not about precision alone;
   and debtorch's rules.  Shares of the oracle are of its re-measured median; `--measure`'s
   margin over the best fixed rule at equal precision is a ratio of medians with its
   interval over the paired rounds (debtorch.stats), "none" when the interval holds 1.

Targets (issues 4, 11 and 14): on every workload `--measure` reaches >= 95% of the re-measured
oracle, spending <= 25% of a single-pass grid's time; repeated runs choose the same region.  The
share is a claim with noise: each pick's share of the oracle is also given as a ratio of medians
over the paired final rounds with its interval (debtorch.stats; repeated, at the final rounds' level),
and the share target is "met" only when every pick's interval lies above 95%, "missed" when one
lies below, otherwise "unresolved" (the rounds cannot tell 95% from 100%).

    # the published table (hours on a quiet 2-core machine):
    python benchmarks/tune_bench.py --budget 180 --measure-runs 5 --doc benchmarks/results/tune.md --json out.json
    # a smoke run (minutes): one workload, a few grid points, one --measure run
    python benchmarks/tune_bench.py --workloads cnn --small --budget 30 --measure-runs 1 --grid-repeats 1 \\
        --max-points 4 --final-repeats 2 --quiet 1 --max-wait 0

On a simulated accelerator (`--device sim`, docs/engine.md), where the loader's settings decide
whether the device waits: `builtin:images` at 1.5x and 3x what one loader process decodes here
(measured first, printed; `--device sim:RATE` names one rate instead).  Each contestant's share
of the device's rate is given beside its share of the oracle, and where even the oracle cannot
feed the device, the loader's ceiling and the CPUs it would take.  Precision, memory format and
the other model settings do nothing there (no model runs).  A space whose single grid pass fits
the budget is measured whole by `--measure` first (debtorch.tune.search, "small space"): its
time target is then one pass plus the repeats that resolve the leaders.

    # issue 20's table (about 1.5 hours on a quiet 2-core machine):
    python benchmarks/tune_bench.py --device sim --workloads images --budget 240 --measure-runs 5 \
        --grid-repeats 1 --final-repeats 5 --json sim.json

Each trial waits until the machine is quiet (`--quiet`, `--max-wait`) and is run again when
other processes took the CPUs meanwhile; waiting is not counted as measuring time.  The load
average before and after is printed: other processes on a shared machine move every number.
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch import facts as facts_mod  # noqa: E402
from debtorch import stats
from debtorch.cli.shared import parse_device  # noqa: E402
from debtorch.host import LiveHost  # noqa: E402
from debtorch.train.device import Device  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.tune import rules  # noqa: E402
from debtorch.tune.measure import EngineTrials, MeasureOptions, Trialer, measure, precisions_for  # noqa: E402
from debtorch.tune.search import default_space, grid_points, key, run_grid  # noqa: E402
from debtorch.verify.measure import QUICK_OPTIONS  # noqa: E402

START, END = "<!-- tune-bench:start -->", "<!-- tune-bench:end -->"
WORKLOADS = {"cnn": "builtin:cnn", "transformer": "builtin:transformer", "images": "builtin:images"}


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
        if self.threshold >= 1 or self.max_wait <= 0:
            return  # not gated (a smoke run)
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
        r = None
        for _ in range(self.retries + 1):
            self.quiet.wait()
            t_total, t_idle = Quiet._stat()
            ours, wall = self._ours(pid), time.monotonic()
            r = self.engine.trial(settings, steps=steps, warmup=warmup)
            t2_total, t2_idle = Quiet._stat()
            wall = time.monotonic() - wall
            busy_s = ((t2_total - t_total) - (t2_idle - t_idle)) / os.sysconf("SC_CLK_TCK")
            others = max(0.0, busy_s / ncpu - (self._ours(pid) - ours) / ncpu) / max(wall, 1e-6)
            self.others_seen.append(others)
            if others <= self.quiet.threshold or self.quiet.threshold >= 1:
                return r
            self.contaminated += 1
            log(f"  {settings.short()}: other processes took {others:.0%} of the CPUs during the trial; again")
        return r


def fixed_rules(facts: dict, rec: rules.Recommendation, precision: str) -> dict:
    """The fixed worker rules at fp32, and again at ``precision`` (debtorch's, when it is not fp32)."""
    cores = facts_mod.get(facts, "cpu.physical_cores") or facts_mod.get(facts, "cpu.logical_cpus") or 1
    usable = facts_mod.get(facts, "cpu.usable_cpus") or 1
    workers = dict(prefetch_factor=2, persistent_workers=True, start_method="fork")
    base = {
        "PyTorch defaults": Settings(),
        f"article: workers = 2 x {cores} cores": Settings(num_workers=2 * cores, pin_memory=True, **workers),
        f"Lightning: workers = {usable} // 1 - 1": Settings(num_workers=max(1, usable - 1), **workers),
    }
    out = dict(base)
    if precision != "fp32":
        for name, s in base.items():
            out[f"{name}, {precision}"] = s.replace(precision=precision)
    out["debtorch rules"] = rec.settings
    return out


def region(s: Settings) -> str:
    """What a choice is, coarsely: threads, loader workers or none, precision."""
    return f"t{s.threads or '-'} {'workers' if s.num_workers else 'no workers'} {s.precision}"


def head_to_head(trialer: Trialer, contestants: dict, rounds: int, judge=lambda data, confidence: []) -> stats.Adaptive:
    """Each distinct setting measured once a round, the order rotating every round (reversed every
    other), until ``judge``'s verdicts resolve (from round 3, at most ``rounds``: stats.adaptive_rounds;
    ``.data`` holds every contestant's values).  Contestants with the same settings (a --measure pick
    that is the oracle, or the rules) share one measurement per round: the same configuration under
    two names must not read as two speeds (a pick equal to the oracle is exactly 100% of it, not 83%
    by the rounds' noise)."""
    groups: dict = {}
    for n, s in contestants.items():
        groups.setdefault(key(s), []).append(n)
    names = [members[0] for members in groups.values()]

    def run_round(r: int) -> dict:
        vals = {}
        k = (r // 2) % len(names)
        order = names[k:] + names[:k]
        for n in (order if r % 2 == 0 else list(reversed(order))):
            out = trialer(contestants[n])
            vals.update(dict.fromkeys(groups[key(contestants[n])], out.samples_per_s))
            log(f"final {r + 1}/{rounds}: {' = '.join(groups[key(contestants[n])])}: {out.samples_per_s or out.error}")
        return vals
    return stats.adaptive_rounds(run_round, judge, math.inf, min_rounds=min(stats.MIN_ROUNDS, rounds),
                                 max_rounds=rounds)


def final_judge(picks: list, fixed: list, oracle: str = "grid (oracle)"):
    """The head-to-head's verdicts at a look: each pick's share of the oracle against the 95% target
    (a ratio against 0.95 x the oracle: "faster" is met, "slower" missed), and the first pick's margin
    over the best fixed rule so far (unless they are the same settings)."""
    def judge(data: dict, confidence: float) -> list:
        target = [v * SHARE_TARGET if v else None for v in data[oracle]]
        out = [stats.compare(data[p], target, confidence=confidence) for p in picks]
        best = max(fixed, key=lambda n: statistics.median([v for v in data[n] if v] or [0]), default=None)
        if best is not None and data[best] != data[picks[0]]:
            out.append(stats.compare(data[picks[0]], data[best], confidence=confidence))
        return out
    return judge


SHARE_TARGET = 0.95


def share_estimate(pick: list, oracle: list, confidence: float = stats.CONFIDENCE) -> dict:
    """A pick's share of the oracle over the paired final rounds (debtorch.stats: ratio of medians,
    paired bootstrap widened to Student's t, at the final rounds' ``confidence``), and where its
    interval lies against the 95% target: "met" (above), "missed" (below), "unresolved" (across it)."""
    est = stats.compare(pick, oracle, confidence=confidence).to_dict("share")
    low, high = est.get("low"), est.get("high")
    if low is None or high is None:
        est["target"] = "unresolved"
    else:
        est["target"] = "met" if low >= SHARE_TARGET else "missed" if high < SHARE_TARGET else "unresolved"
    return est


def share_verdict(estimates: list) -> dict:
    """The workload's verdict on the share target over every distinct pick: missed when any pick's
    interval lies below 95%, met when every one lies above, else unresolved; with the worst pick."""
    if not estimates:
        return {"verdict": "unresolved", "worst": None}
    targets = [e["target"] for e in estimates]
    verdict = "missed" if "missed" in targets else "met" if all(t == "met" for t in targets) else "unresolved"
    worst = min(estimates, key=lambda e: e["share"] if e["share"] is not None else float("inf"))
    return {"verdict": verdict, "worst": worst}


def subsample(points: list, most: int) -> list:
    """At most ``most`` grid points, evenly spread (the rules' settings first)."""
    if not most or len(points) <= most:
        return points
    step = len(points) / most
    return [points[int(i * step)] for i in range(most)]


def loader_rate(args, quiet: Quiet, workload: str, trials: int = 3) -> float:
    """Samples/s one loader process decodes here: the training process loading alone (no workers, one
    thread) for a simulated device far faster than it, median of ``trials``."""
    engine = EngineTrials(workload, parse_device("sim:1e6"), args.python,
                          options=QUICK_OPTIONS.get(workload) if args.small else None)
    try:
        gated = Gated(engine, quiet)
        trialer = Trialer(gated, clock=quiet.clock)
        trialer.calibrate(Settings(threads=1), args.budget)
        rates = [trialer(Settings(threads=1)).samples_per_s for _ in range(trials)]
    finally:
        engine.close()
    return statistics.median(r for r in rates if r)


def bench_workload(args, facts: dict, quiet: Quiet, name: str, text: str = "cpu") -> dict:
    workload = WORKLOADS.get(name, name)
    device = Device.parse(text)
    simulated = device.simulated
    rec = rules.recommend(facts, rules.Request(device=device if simulated else None,
                                               model="conv" if name in ("cnn", "images") else "other"))
    precisions = precisions_for(rec, facts)
    precision = "bf16" if "bf16" in precisions else precisions[0]
    options = QUICK_OPTIONS.get(workload) if args.small else None
    gates = []

    # 1. tune --measure, as a user runs it, several times.
    runs = []
    for i in range(args.measure_runs):
        measured_rec = rules.recommend(facts, rules.Request(device=device if simulated else None,
                                                            model="conv" if name in ("cnn", "images") else "other"))
        t0 = time.monotonic()
        engine = EngineTrials(workload, device, args.python, options=options)
        start_s = time.monotonic() - t0
        gates.append(Gated(engine, quiet))
        try:
            result = measure(measured_rec, facts, MeasureOptions(workload=workload, budget_s=args.budget - start_s,
                                                                 python=args.python),
                             trials=gates[-1], clock=quiet.clock,
                             on_trial=lambda t, spent, budget: log(f"{name} measure {i + 1}: {spent:.0f}/{budget:.0f} s:"
                                                                   f" {t.phase}: {t.settings.short()} -> "
                                                                   f"{t.samples_per_s or t.error}"))
        finally:
            engine.close()
        runs.append({"settings": measured_rec.settings, "seconds": start_s + result.spent, "trials": len(result.trials),
                     "grid_first_s": sum(t.seconds for t in result.trials if t.phase == "grid"),
                     "steps_per_trial": result.steps_per_trial,
                     "reasons": {k: str(v) for k, v in measured_rec.reasons.items()},
                     "within_noise_of": result.runner_up.short() if result.within_noise and result.runner_up else None})
        log(f"{name}: --measure run {i + 1} chose {measured_rec.settings.short()} in {runs[-1]['seconds']:.0f} s")

    # 2. The grid, and 3. the head-to-head, in one worker, trials sized as --measure sized its own.
    engine = EngineTrials(workload, device, args.python, options=options)
    try:
        gates.append(Gated(engine, quiet))
        trialer = Trialer(gates[-1], clock=quiet.clock)
        trialer.calibrate(rec.settings, args.budget)
        trialer.steps = runs[0]["steps_per_trial"] or trialer.steps
        trialer.max_steps = max(trialer.max_steps, trialer.steps)
        dims = default_space(rec.settings, rec.device, rec.per_process_cpus, precisions,
                             bool(trialer.info.convolutional) and not simulated, max_workers=rec.max_workers)
        every = grid_points(rec.settings, dims)
        points = subsample(every, args.max_points)
        log(f"{name}: grid of {len(points)} of {len(every)} points x {args.grid_repeats}")
        grid = run_grid(trialer, points, repeats=args.grid_repeats,
                        on_trial=lambda t, spent, budget: log(f"{name} grid {t.index}/{len(points) * args.grid_repeats}:"
                                                              f" {t.settings.short()} -> {t.samples_per_s or t.error}"))
        single_pass_s = grid.spent / args.grid_repeats
        oracle = grid.best
        contestants = fixed_rules(facts, rec, precision)
        picks = {}
        for i, run in enumerate(runs):
            picks.setdefault(run["settings"].short(), (f"--measure run {i + 1}", run["settings"]))
        for label, s in picks.values():
            contestants[label] = s
        contestants["grid (oracle)"] = oracle
        fixed = [n for n in contestants if n not in dict(picks.values()) and n != "grid (oracle)"
                 and contestants[n].precision == precision]
        final = head_to_head(trialer, contestants, args.final_repeats,
                             final_judge([label for label, _ in picks.values()], fixed))
    finally:
        engine.close()
    out = summarise(name, workload, rec, precision, runs, picks, contestants, final, grid, oracle, single_pass_s,
                    len(every), len(points), gates)
    if simulated:
        out["sim"] = device_shares(out, device.spec, args.loader_rate)
    return out


def device_shares(result: dict, spec, one_process) -> dict:
    """Each contestant's share of the simulated device's rate, and where even the oracle cannot feed it
    (below 95% of it), the loader's ceiling here and the CPUs of loading the rate would take."""
    for row in result["rows"]:
        row["of_device"] = row["samples_per_s"] / spec.rate if row["samples_per_s"] else None
    best = result["targets"]["oracle_remeasured"]
    out = {"device": spec.text(), "words": spec.words(), "rate": spec.rate, "one_process": one_process}
    if best and best < 0.95 * spec.rate:
        out["input_bound"] = {"ceiling": best, "cpus": math.ceil(spec.rate / one_process) if one_process else None}
    return out


def summarise(name, workload, rec, precision, runs, picks, contestants, rounds, grid, oracle, single_pass_s,
              n_every, n_points, gates) -> dict:
    final, confidence = rounds.data, rounds.looks.confidence
    med = {n: statistics.median([v for v in vals if v]) if any(vals) else None for n, vals in final.items()}
    best = med["grid (oracle)"]
    rows = []
    for n, s in contestants.items():
        v = [x for x in final[n] if x]
        spread = (max(v) - min(v)) / med[n] if len(v) > 1 and med[n] else None
        rows.append({"contestant": n, "settings": s.short(), "samples_per_s": med[n], "spread": spread,
                     "of_oracle": med[n] / best if med[n] and best else None, "runs": len(v),
                     "rounds": list(final[n])})
    pick_label = {s: label for s, (label, _) in picks.items()}
    # Each pick against the oracle over the paired final rounds: the share with its interval, and
    # whether the interval lies above the target (met), below it (missed) or across it (unresolved).
    share_of = {label: share_estimate(final[label], final["grid (oracle)"], confidence)
                for label in pick_label.values()}
    run_share = [share_of[pick_label[r["settings"].short()]]["share"] for r in runs]
    shares = [x for x in run_share if x is not None]
    times = [r["seconds"] / single_pass_s for r in runs if single_pass_s]
    regions = collections.Counter(region(r["settings"]) for r in runs)
    top, count = regions.most_common(1)[0]
    fixed_equal = [n for n in contestants if n not in pick_label.values() and n != "grid (oracle)"
                   and contestants[n].precision == precision]
    best_fixed = max(fixed_equal, key=lambda n: med[n] or 0) if fixed_equal else None
    first_pick = pick_label[runs[0]["settings"].short()]
    margin = (stats.compare(final[first_pick], final[best_fixed], confidence=confidence).to_dict("ratio")
              if best_fixed else None)
    if margin and key(contestants[first_pick]) == key(contestants[best_fixed]):
        margin["verdict"] = "the same settings"   # --measure kept them: no margin to measure
    return {
        "workload": workload, "name": name, "precision": precision, "rows": rows,
        "measure_runs": [{**r, "settings": r["settings"].to_dict(), "label": r["settings"].short(),
                          "of_oracle": share,
                          "time_of_single_pass_grid": r["seconds"] / single_pass_s if single_pass_s else None,
                          "of_oracle_interval": share_of[pick_label[r["settings"].short()]]}
                         for r, share in zip(runs, run_share)],
        "targets": {
            "measure_of_oracle_median": statistics.median(shares) if shares else None,
            "measure_of_oracle_worst": min(shares) if shares else None,
            "share_target": share_verdict(list(share_of.values())),
            "measure_time_of_single_pass_grid_median": statistics.median(times) if times else None,
            "same_region": {"region": top, "runs": count, "of": len(runs), "all": dict(regions)},
            "best_fixed_rule_at_equal_precision": best_fixed,
            "margin_over_best_fixed_rule": margin,
            "oracle": oracle.short(),
            "oracle_median_in_grid": grid.median(oracle),
            "oracle_remeasured": best,
        },
        "grid_points": n_points, "grid_points_all": n_every, "single_pass_grid_s": single_pass_s,
        "grid": [{"settings": t.settings.to_dict(), "label": t.settings.short(), "samples_per_s": t.samples_per_s,
                  "seconds": t.seconds} for t in grid.trials],
        "rules_settings": rec.settings.to_dict(), "per_process_cpus": rec.per_process_cpus,
        "precisions": [precision] if precision == "fp32" else ["fp32", precision],
        "convolutional": name in ("cnn", "images"), "max_workers": rec.max_workers,
        "rerun": sum(g.contaminated for g in gates),
        "final_rounds": {"rounds": rounds.rounds, "stopped": rounds.stopped, **rounds.looks.to_dict(rounds.rounds)},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="cnn,transformer,images",
                    help="comma-separated: cnn, transformer, images, or module:function")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--budget", type=float, default=180.0, help="--measure's budget in seconds")
    ap.add_argument("--measure-runs", type=int, default=5, help="--measure runs per workload (>= 5 to publish)")
    ap.add_argument("--grid-repeats", type=int, default=2, help="passes over the grid (the oracle is chosen on them)")
    ap.add_argument("--max-points", type=int, default=0, help="at most this many grid points, evenly spread (0: all)")
    ap.add_argument("--final-repeats", type=int, default=5, help="fresh rounds of the head-to-head")
    ap.add_argument("--small", action="store_true",
                    help="built-in workloads at verify-train --quick's sizes (a smoke run, not a result)")
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--doc", help="replace the results section of this Markdown file (benchmarks/results/tune.md)")
    ap.add_argument("--quiet", type=float, default=0.25,
                    help="start a trial only when the CPUs were at most this busy (0-1) with other work; 1: never wait")
    ap.add_argument("--max-wait", type=float, default=120.0, help="seconds to wait for quiet before a trial")
    ap.add_argument("--device", default="cpu", help="cpu; sim: a simulated accelerator at 1.5x and 3x what one loader "
                    "process decodes here (measured first); sim:RATE[,...]: at that rate (docs/engine.md)")
    args = ap.parse_args()
    if args.measure_runs < 5:
        log(f"--measure-runs {args.measure_runs}: fewer than 5 runs say little about how often the region repeats")

    started = time.monotonic()
    load_before = os.getloadavg()
    host = LiveHost()
    facts = facts_mod.collect(host, facts_mod.Options(python=args.python))
    host.close()
    machine = (f"{facts_mod.get(facts, 'cpu.model')}, {facts_mod.get(facts, 'cpu.usable_cpus')} usable CPUs, "
               f"{(facts_mod.get(facts, 'memory.total') or 0) / 2**30:.0f} GiB RAM, no GPU, "
               f"{facts_mod.get(facts, 'os.pretty_name')}, PyTorch {facts_mod.get(facts, 'python.torch.version')}")
    log(f"machine: {machine}; load average {load_before[0]:.2f}")
    quiet = Quiet(threshold=args.quiet, max_wait=args.max_wait)
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    devices, args.loader_rate = [args.device], None
    if args.device.startswith("sim"):
        first = WORKLOADS.get(names[0], names[0])
        args.loader_rate = loader_rate(args, quiet, first)
        log(f"one loader process decodes {args.loader_rate:.1f} samples/s of {first} here (no workers, one thread)")
        devices = ([str(parse_device(f"sim:{f * args.loader_rate:.0f}")) for f in (1.5, 3.0)] if args.device == "sim"
                   else [str(parse_device(args.device))])
        machine += f"; one loader process decodes {args.loader_rate:.1f} samples/s of {first}"
    results = [bench_workload(args, facts, quiet, w, d) for d in devices for w in names]
    load_after = os.getloadavg()
    text = render(results, machine, load_before, load_after, args, quiet, time.monotonic() - started)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "load_before": load_before,
                                               "load_after": load_after, "args": vars(args),
                                               "workloads": results}, indent=1, default=str))
    if args.doc:
        path = Path(args.doc)
        doc = path.read_text()
        if START in doc and END in doc:
            head, rest = doc.split(START, 1)
            _, tail = rest.split(END, 1)
            path.write_text(head + START + "\n" + text + "\n" + END + tail)
    return 0


def _f(v, fmt) -> str:
    return fmt.format(v) if v is not None else "-"


def _share(target) -> str:
    """'84% (71-99%): unresolved': the worst pick's share with its interval, and the verdict."""
    if not target or not target.get("worst"):
        return "-"
    w = target["worst"]
    interval = f" ({w['low']:.0%}-{w['high']:.0%})" if w.get("low") is not None else ""
    return f"{_f(w['share'], '{:.0%}')}{interval}: {target['verdict']}"


def render(results, machine, before, after, args, quiet, took) -> str:
    date = _dt.date.today().isoformat()
    lines = [
        f"Measured {date} on {machine}; load average {before[0]:.2f} before, {after[0]:.2f} after; "
        f"{took / 60:.0f} min in all. `--measure --budget {args.budget:g}`, {args.measure_runs} run(s) per workload; "
        f"the grid: {args.grid_repeats} interleaved passes; the final head-to-head: fresh rounds from 3 until every "
        f"verdict resolves, at most {args.final_repeats}, each look's interval at Pocock's level (intervals below).",
        "",
        "| workload | --measure of re-measured oracle (median, worst) | worst pick's share, repeated interval: "
        ">= 95%? | --measure time of a single-pass grid | same region | "
        "margin over the best fixed rule at equal precision |",
        "|---|---:|---|---:|---|---|",
    ]
    for r in results:
        t = r["targets"]
        m = t["margin_over_best_fixed_rule"]
        if not m:
            margin = "-"
        elif m["verdict"] == "the same settings":
            margin = "none (the same settings)"
        elif m["verdict"] == "faster":
            margin = f"{m['ratio']:.2f}x ({m['low']:.2f}-{m['high']:.2f})"
        elif m.get("low") is not None:
            margin = f"none ({m['verdict']}, {m['low']:.2f}-{m['high']:.2f})"
        else:
            margin = f"none ({m['verdict']})"
        sr = t["same_region"]
        where = f" on {r['sim']['words']}" if r.get("sim") else ""
        lines.append(f"| `{r['workload']}`{where} | {_f(t['measure_of_oracle_median'], '{:.0%}')}, "
                     f"{_f(t['measure_of_oracle_worst'], '{:.0%}')} | {_share(t.get('share_target'))} | "
                     f"{_f(t['measure_time_of_single_pass_grid_median'], '{:.0%}')} | "
                     f"{sr['runs']} of {sr['of']}: {sr['region']} | {margin} vs {t['best_fixed_rule_at_equal_precision']} |")
    for r in results:
        t, sd = r["targets"], r.get("sim")
        fr = r["final_rounds"]
        where = f" on a {sd['words']}" if sd else ""
        lines += ["", f"`{r['workload']}`{where} (precision {r['precision']}): samples per second, median of "
                      f"{fr['rounds']} fresh interleaved rounds ({fr['stopped']}: look {fr['looks']} of at most "
                      f"{fr['most_looks']}, intervals at {fr['confidence']:.1%}); the oracle `{t['oracle']}` was chosen on the "
                      f"grid's {args.grid_repeats} pass(es) of {r['grid_points']} points "
                      f"(of {r['grid_points_all']}) at {_f(t['oracle_median_in_grid'], '{:.1f}')} samples/s; "
                      f"a single pass took {r['single_pass_grid_s']:.0f} s of measuring.",
                  "",
                  "| contestant | settings | samples/s | spread | of oracle |" + (" of device |" if sd else ""),
                  "|---|---|---:|---:|---:|" + ("---:|" if sd else "")]
        for row in r["rows"]:
            lines.append(f"| {row['contestant']} | `{row['settings']}` | {_f(row['samples_per_s'], '{:.1f}')} | "
                         f"{_f(row['spread'], '{:.0%}')} | {_f(row['of_oracle'], '{:.0%}')} |"
                         + (f" {_f(row.get('of_device'), '{:.0%}')} |" if sd else ""))
        lines.append("")
        if sd and sd.get("input_bound"):
            ib = sd["input_bound"]
            lines += [f"Input-bound: even the oracle feeds the device {ib['ceiling'] / sd['rate']:.0%} of its "
                      f"{sd['rate']:g} samples/s; this machine's loader ceiling is {ib['ceiling']:.0f} samples/s, one "
                      f"loading process decodes {sd['one_process']:.0f}: feeding the device takes about {ib['cpus']} "
                      "CPUs of loading beside the training loop.", ""]
        for i, run in enumerate(r["measure_runs"]):
            grid_first = (f"; the whole space once first ({run['grid_first_s']:.0f} s), then its leaders"
                          if run.get("grid_first_s") else "")
            lines.append(f"- --measure run {i + 1}: `{run['label']}` in {run['seconds']:.0f} s{grid_first} "
                         f"({_f(run['time_of_single_pass_grid'], '{:.0%}')} of a single-pass grid, {run['trials']} "
                         f"trials), {_f(run['of_oracle'], '{:.0%}')} of the oracle"
                         + (f" (interval {run['of_oracle_interval']['low']:.0%}-"
                            f"{run['of_oracle_interval']['high']:.0%})"
                            if (run.get("of_oracle_interval") or {}).get("low") is not None else "")
                         + (f"; within noise of `{run['within_noise_of']}`" if run["within_noise_of"] else ""))
    q = quiet
    lines += ["", f"Shared machine: a trial started when other processes used at most {q.threshold:.0%} of the CPUs "
                  f"(or after {q.max_wait:g} s: {q.forced} times); {q.waited / 60:.0f} min waited, not counted; "
                  f"{sum(r['rerun'] for r in results)} trials run again because others took the CPUs meanwhile."]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
