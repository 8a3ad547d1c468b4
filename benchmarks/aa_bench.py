"""A/A: how often do verify-train and tune --measure call identical settings "faster" or "slower"?

An A/A run compares a setting with itself (tuned identical in effect to the baseline).  Every
verdict it gives is a false alarm; a 95% procedure may give one in 20 at most.  Three modes:

* ``offline``: synthetic A/A sequences, no machine time.  Each trial's samples/s is 100 times a
  noise factor from one of the noise models (below); the rounds are interleaved (A B, then B A)
  as verify-train runs them.  On every sequence it runs verify-train's procedure
  (``debtorch.stats.adaptive_rounds``'s looks: rounds 3 to 30, and 3 to 5 for ``--quick``), the
  naive rule it replaced (stop at the first look whose 95% interval excludes 1), and tune
  --measure's race (``debtorch.tune.search.Search.race``) between two equal contestants.  With
  ``--effect 1.2`` arm A is 1.2x faster: how often and after how many rounds each one finds it
  (the power the procedure costs).
* ``verify``: real ``debtorch verify-train --quick`` A/A runs: the baseline (PyTorch's defaults)
  against a config equal to it in effect (``threads`` = PyTorch's own count on this machine,
  asked from the interpreter), each run a fresh command, as a user runs it.
* ``tune``: real races between two equal contestants (PyTorch's defaults, and the same with
  ``threads`` = PyTorch's own count) in tune --measure's worker and trial sizes.

False-alarm rates come with Wilson's 95% score interval (Wilson 1927; Brown, Cai & DasGupta
2001, Statistical Science 16:101-133, recommend it over the normal interval for small counts).

Noise models (offline): ``lognormal`` (10% a trial), ``heavy`` (Student's t with 3 degrees of
freedom, 6% scale, and 5% of trials slowed 1.25-3x, as another process taking a core does),
``drift`` (the machine's speed wanders: an AR(1) level, 0.9 a trial, 4% steps, plus 5% a
trial), and ``recorded`` (residuals of real repeated measurements: every JSON given with
``--recorded``: tune_bench.py's final rounds, verify-train --json documents, this script's own
``verify --json``; each setting's log samples/s less their mean, scaled by sqrt(n/(n-1))).

    python benchmarks/aa_bench.py offline --sequences 5000 --recorded benchmarks/results/tune-bench-*.json
    python benchmarks/aa_bench.py offline --sequences 400 --effect 1.2 --recorded benchmarks/results/tune-bench-*.json
    python benchmarks/aa_bench.py verify --runs 40 --json aa-verify.json      # about 6 min on a quiet machine
    python benchmarks/aa_bench.py tune --runs 40 --small --json aa-tune.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch import stats  # noqa: E402
from debtorch.train.settings import Settings  # noqa: E402
from debtorch.tune.search import Outcome, Search, key  # noqa: E402

MODELS = ("lognormal", "heavy", "drift", "recorded")
DESIGNS = {"full": (3, 30), "quick": (3, 5)}    # verify-train's rounds: at least 3, at most 30 (--quick: 5)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wilson(k: int, n: int, z: float = 1.96) -> tuple:
    """Wilson's score interval for k successes in n trials."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, mid - half), min(1.0, mid + half)


# ---------------------------------------------------------------------------
# Noise


def residuals(paths: list) -> list:
    """Log residuals of repeated real measurements in tune_bench, verify-train and aa_bench JSON files."""
    series = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        for w in doc.get("workloads") or []:                    # tune_bench.py --json: the final rounds
            series += [row["rounds"] for row in w.get("rows") or [] if row.get("rounds")]
        docs = [r.get("document") or {} for r in doc.get("runs") or []] + [doc]   # aa_bench verify / verify-train
        for d in docs:
            for arm in ("baseline", "tuned"):
                series.append([(t or {}).get("samples_per_s") for t in (d.get("trials") or {}).get(arm) or []])
    out = []
    for vals in series:
        logs = [math.log(v) for v in vals if isinstance(v, (int, float)) and v > 0]
        if len(logs) >= 3:
            m = statistics.fmean(logs)
            out += [(x - m) * math.sqrt(len(logs) / (len(logs) - 1)) for x in logs]
    return out


class Noise:
    """A trial's noise factor, one trial after another (the order matters for drift)."""

    def __init__(self, model: str, seed: int, pool: list = ()):
        self.model, self.rng, self.pool, self.level = model, random.Random(seed), pool, 0.0
        if model == "recorded" and not pool:
            raise SystemExit("aa_bench: the recorded model needs --recorded FILE(s) with repeated measurements")

    def __call__(self) -> float:
        g = self.rng.gauss
        if self.model == "lognormal":
            x = g(0, 0.10)
        elif self.model == "heavy":
            x = 0.06 * g(0, 1) / math.sqrt(sum(g(0, 1) ** 2 for _ in range(3)) / 3)
            if self.rng.random() < 0.05:
                x -= math.log(self.rng.uniform(1.25, 3.0))
        elif self.model == "drift":
            self.level = 0.9 * self.level + g(0, 0.04)
            x = self.level + g(0, 0.05)
        else:
            x = self.rng.choice(self.pool)
        return math.exp(x)


def sequence(noise: Noise, rounds: int, effect: float) -> dict:
    """Interleaved rounds of arms A and B (A B, then B A): {arm: [samples/s]}."""
    out: dict = {"a": [], "b": []}
    for r in range(rounds):
        for arm in ("a", "b") if r % 2 == 0 else ("b", "a"):
            out[arm].append(100.0 * (effect if arm == "a" else 1.0) * noise())
    return out


# ---------------------------------------------------------------------------
# The procedures, on numbers


def look(a: list, b: list, confidence: float) -> stats.Estimate:
    """stats.compare at ``confidence``.  Its interval is the union of Student's t and the bootstrap,
    so it resolves only where Student's t alone does: that is checked first (cheap, the same verdict)."""
    alone = stats.compare(a, b, confidence=confidence, resamples=0)
    return stats.compare(a, b, confidence=confidence) if alone.resolved else alone


def sequential(seq: dict, first: int, last: int, naive: bool = False) -> tuple:
    """(verdict, rounds) of adaptive rounds on a recorded sequence: stats.adaptive_rounds with an
    unlimited budget, or (naive) the rule it replaced: every look at 95%."""
    def judge(d: dict, confidence: float) -> stats.Estimate:
        return look(d["a"], d["b"], stats.CONFIDENCE if naive else confidence)
    got = stats.adaptive_rounds(lambda i: {"a": seq["a"][i], "b": seq["b"][i]}, judge, math.inf,
                                min_rounds=first, max_rounds=last)
    return got.estimate.verdict, got.rounds


def race(noise: Noise, effect: float, max_repeats: int = 7) -> tuple:
    """tune --measure's race between two contestants (A ``effect`` times B): (verdict, rounds).
    The verdict is what the search would claim: A or B beyond noise, else inconclusive."""
    a, b = Settings(), Settings(threads=2)
    search = Search(lambda s: Outcome(100.0 * (effect if s == a else 1.0) * noise(), 1.0),
                    budget_s=math.inf, max_repeats=max_repeats)
    search.race([a, b])
    verdict = stats.FASTER if search.better(a, b) else stats.SLOWER if search.better(b, a) else stats.INCONCLUSIVE
    return verdict, max(search.n(a), search.n(b))


def offline(args) -> dict:
    pool = residuals(args.recorded) if args.recorded else []
    if pool:
        log(f"recorded: {len(pool)} residuals from {len(args.recorded)} file(s), robust sd "
            f"{1.4826 * statistics.median(abs(x) for x in pool):.1%}")
    models = [m for m in args.models.split(",") if m != "recorded" or pool]
    rows = []
    for model in models:
        res: dict = {}
        for i in range(args.sequences):
            seq = sequence(Noise(model, i, pool), 30, args.effect)
            for design, (first, last) in DESIGNS.items():
                cut = {arm: v[:last] for arm, v in seq.items()}
                res.setdefault(f"verify {design}", []).append(sequential(cut, first, last))
                res.setdefault(f"verify {design}, naive", []).append(sequential(cut, first, last, naive=True))
            res.setdefault("tune race", []).append(race(Noise(model, 10**6 + i, pool), args.effect))
        for name, got in res.items():
            rows.append(summarise(model, name, got, args.effect))
            log(line(rows[-1]))
    return {"mode": "offline", "sequences": args.sequences, "effect": args.effect, "residuals": len(pool),
            "recorded": args.recorded or [], "rows": rows}


def summarise(model: str, name: str, got: list, effect: float) -> dict:
    """A row: how often a verdict was claimed, with its interval, and the rounds the runs took."""
    wrong = sum(v not in (stats.INCONCLUSIVE, stats.FASTER if effect > 1 else None) for v, _ in got)
    claimed = sum(v != stats.INCONCLUSIVE for v, _ in got)
    rounds = sorted(r for _, r in got)
    resolved = sorted(r for v, r in got if v != stats.INCONCLUSIVE)
    low, high = wilson(claimed if effect == 1 else wrong, len(got))
    return {"model": model, "procedure": name, "runs": len(got), "claimed": claimed, "wrong": wrong,
            "rate": (claimed if effect == 1 else wrong) / len(got), "low": low, "high": high,
            "resolved": claimed / len(got), "rounds_median": statistics.median(rounds),
            "rounds_max": rounds[-1], "rounds_to_verdict_median": statistics.median(resolved) if resolved else None}


def line(r: dict) -> str:
    return (f"{r['model']:<9} {r['procedure']:<22} verdicts {r['claimed']:>4}/{r['runs']} "
            f"({r['resolved']:.1%}); false {r['rate']:.1%} ({r['low']:.1%}-{r['high']:.1%}); rounds median "
            f"{r['rounds_median']:g}, to a verdict {r['rounds_to_verdict_median']}")


# ---------------------------------------------------------------------------
# Real runs


def torch_threads(python: str) -> int:
    """PyTorch's own thread count in the target interpreter (what threads = N changes nothing at)."""
    out = subprocess.run([python, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True,
                         text=True, timeout=300, check=True)
    return int(out.stdout.strip())


def verify_runs(args) -> dict:
    threads = torch_threads(args.python)
    runs = []
    with tempfile.TemporaryDirectory(prefix="aa-bench-") as tmp:
        config = Path(tmp) / "same.toml"
        config.write_text(f"schema_version = 1\n\n[compute]\nthreads = {threads}\n")
        cmd = [args.python, "-m", "debtorch", "verify-train", "--config", str(config), "--json"] + args.extra
        log(f"A/A: {' '.join(cmd[2:])} (threads {threads}: PyTorch's own count here), {args.runs} runs")
        for i in range(args.runs):
            t0 = time.monotonic()
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            wall = time.monotonic() - t0
            try:
                doc = json.loads(out.stdout)
            except ValueError:
                doc = {}
            sp = (doc.get("summary") or {}).get("speedup") or {}
            budget = doc.get("budget") or {}
            runs.append({"exit_code": out.returncode, "wall_s": wall, "verdict": sp.get("verdict"),
                         "ratio": sp.get("ratio"), "low": sp.get("low"), "high": sp.get("high"),
                         "rounds": budget.get("rounds"), "stopped": budget.get("stopped"),
                         "looks": budget.get("looks"), "error": None if doc else out.stderr.strip()[-300:],
                         "document": {"trials": {arm: [{"samples_per_s": (t or {}).get("samples_per_s")}
                                                       for t in (doc.get("trials") or {}).get(arm) or []]
                                                 for arm in ("baseline", "tuned")}}})
            log(f"run {i + 1}/{args.runs}: exit {out.returncode}, {sp.get('verdict')} {sp.get('low')}-{sp.get('high')} "
                f"after {budget.get('rounds')} rounds ({budget.get('stopped')}), {wall:.1f} s")
    return real_summary("verify-train " + " ".join(args.extra), runs, threads)


def tune_runs(args) -> dict:
    from debtorch.train.device import CPU  # noqa: E402
    from debtorch.tune.measure import EngineTrials, Trialer  # noqa: E402  (starts a worker: only here)
    from debtorch.verify.measure import QUICK_OPTIONS  # noqa: E402
    engine = EngineTrials(args.workload, CPU, args.python,
                          options=QUICK_OPTIONS.get(args.workload) if args.small else None)
    runs = []
    try:
        threads = engine.worker.info().get("threads")
        a, b = Settings(), Settings(threads=threads)
        trialer = Trialer(engine)
        trialer.calibrate(a, args.budget)
        log(f"A/A race: {a.short()} against {b.short()} (PyTorch's own count), {trialer.steps} steps a trial")
        for i in range(args.runs):
            t0 = time.monotonic()
            search = Search(trialer, budget_s=math.inf)
            search.race([a, b])
            verdict = (stats.FASTER if search.better(a, b) else stats.SLOWER if search.better(b, a)
                       else stats.INCONCLUSIVE)
            trials = {arm: [{"samples_per_s": v} for v in search.samples.get(key(s), [])]
                      for arm, s in (("baseline", a), ("tuned", b))}
            runs.append({"verdict": verdict, "rounds": max(search.n(a), search.n(b)), "wall_s": time.monotonic() - t0,
                         "document": {"trials": trials}})
            log(f"race {i + 1}/{args.runs}: {verdict} after {runs[-1]['rounds']} rounds")
    finally:
        engine.close()
    return real_summary(f"tune --measure race ({args.workload}{', small' if args.small else ''})", runs, threads)


def real_summary(what: str, runs: list, threads) -> dict:
    # Only a run with at least 3 paired rounds could claim anything: fewer (the budget ended first)
    # are inconclusive by rule and would flatter the rate; they are counted apart.
    done = [r for r in runs if r["verdict"] is not None and (r.get("rounds") or 0) >= stats.MIN_ROUNDS]
    claimed = sum(r["verdict"] != stats.INCONCLUSIVE for r in done)
    low, high = wilson(claimed, len(done))
    rounds = [r["rounds"] for r in done if r.get("rounds") is not None]
    return {"mode": "real", "what": what, "threads": threads, "runs": runs, "completed": len(done),
            "too_few_rounds": len(runs) - len(done),
            "claimed": claimed, "rate": claimed / len(done) if done else None, "low": low, "high": high,
            "rounds": rounds, "wall_s": [r["wall_s"] for r in runs], "load_average": os.getloadavg()}


def render(result: dict) -> str:
    if result["mode"] == "offline":
        effect = result["effect"]
        head = ("| noise | procedure | verdicts | false alarms (Wilson 95%) | rounds, median (max) | to a verdict |"
                if effect == 1 else
                f"| noise | procedure | found {effect:g}x | wrong way | rounds, median (max) | to a verdict |")
        lines = [f"{result['sequences']} synthetic sequences per noise model, arm A {effect:g}x arm B "
                 f"({result['residuals']} recorded residuals).", "", head, "|---|---|---:|---:|---:|---:|"]
        for r in result["rows"]:
            rate = f"{r['rate']:.1%} ({r['low']:.1%}-{r['high']:.1%})"
            first = f"{r['claimed']}/{r['runs']}" if effect == 1 else f"{r['resolved']:.0%}"
            lines.append(f"| {r['model']} | {r['procedure']} | {first} | {rate} | {r['rounds_median']:g} "
                         f"({r['rounds_max']}) | {r['rounds_to_verdict_median'] or '-'} |")
        return "\n".join(lines)
    rate = f"{result['rate']:.1%}" if result["rate"] is not None else "-"
    walls = result["wall_s"]
    return (f"{result['what']}: {result['completed']} A/A runs with at least 3 rounds ({result['too_few_rounds']} "
            f"others ended with fewer; threads = {result['threads']}, PyTorch's own), "
            f"{result['claimed']} verdicts: false-alarm rate {rate} (Wilson 95% {result['low']:.1%}-"
            f"{result['high']:.1%}); rounds {sorted(result['rounds'])}; wall time median "
            f"{statistics.median(walls) if walls else 0:.1f} s, {sum(walls) / 60:.1f} min in all; load average "
            f"{result['load_average'][0]:.2f} at the end")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    off = sub.add_parser("offline", help="synthetic and recorded noise, no machine time")
    off.add_argument("--sequences", type=int, default=200, help="A/A sequences per noise model")
    off.add_argument("--models", default=",".join(MODELS))
    off.add_argument("--recorded", nargs="*", default=[], help="JSON files with repeated real measurements")
    off.add_argument("--effect", type=float, default=1.0, help="arm A's true speed over arm B's (1: A/A)")
    ver = sub.add_parser("verify", help="real verify-train A/A runs (--quick unless other options are given)")
    ver.add_argument("--runs", type=int, default=40)
    ver.add_argument("extra", nargs="*", default=[], help="verify-train's options after -- (default --quick)")
    tun = sub.add_parser("tune", help="real races between two equal contestants")
    tun.add_argument("--runs", type=int, default=40)
    tun.add_argument("--workload", default="builtin:cnn")
    tun.add_argument("--small", action="store_true", help="the workload at verify-train --quick's size")
    tun.add_argument("--budget", type=float, default=120.0, help="sizes the trials as tune --measure --budget does")
    for p in (off, ver, tun):
        p.add_argument("--json", help="write every number here")
        p.add_argument("--md", help="write the table here (Markdown)")
        p.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    if args.mode == "verify" and not args.extra:
        args.extra = ["--quick"]
    result = {"offline": offline, "verify": verify_runs, "tune": tune_runs}[args.mode](args)
    result["date"], result["args"] = time.strftime("%Y-%m-%d %H:%M"), vars(args)
    text = render(result)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    if args.md:
        Path(args.md).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
