"""The search for the fastest settings: what ``debtorch tune --measure`` does
with its budget.  Torch-free; it only calls a trial function, so tests run it
on synthetic, noisy response surfaces.

Strategy (smarter than a grid, honest about noise):

* Start from the rules' settings (the incumbent).
* Coordinate descent over the dimensions, most influential first
  (precision, memory format, workers, threads, prefetch, pinned memory).
  Workers and compute threads share the CPUs, so the workers race moves the
  threads along the rules' line (CPUs - workers); threads are raced on their
  own afterwards.
* Each dimension is a *race* (successive halving): every candidate is
  measured once per round, in an order that rotates each round so that drift
  in the machine hits every candidate alike.  After the first round the
  hopeless are dropped (below half the leader, and below what the noise seen so
  far could explain); after later rounds, those the
  leader beats beyond noise: two standard errors of a difference of medians,
  the noise pooled from every repeated measurement.  Medians, never means.
  A race runs at least ``repeats`` rounds and stops early only when what is
  left is within ``min_gain`` (3%) of the leader; at most ``max_repeats``.
* The winner replaces the incumbent when its median leads by at least
  ``min_gain``.  When nothing differs by that much, the rule's value stays;
  the dimension is pruned (never raced again) only when it *clearly* does not
  matter: the noise is small enough that a difference of twice ``min_gain``
  would have shown.
* Numeric dimensions with wide ranges are raced coarse first (0, 1, 2, 4,
  8 ...), then bisected towards the winner: the midpoints to its nearest
  tried neighbours, until they are adjacent.
* A second pass revisits a dimension only when another one changed after it
  was decided (threads and workers share the same cores), never one decided
  beyond noise.
* With budget left, close calls are settled where the search ended up: the
  chosen value against its alternatives (or its neighbours, for numbers) in the
  final context, with up to twice as many rounds.
* Every trial's cost is counted; no trial starts that the budget cannot pay.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from debtorch.train.settings import Settings


@dataclass
class Outcome:
    """What one trial returns."""

    samples_per_s: Optional[float]       # None when the trial failed
    seconds: float                       # wall time the trial cost (warm-up and start-up included)
    data_wait: Optional[float] = None    # share of step time spent waiting for data
    error: Optional[str] = None


@dataclass
class Trial:
    """One measurement in the search's log."""

    index: int
    phase: str                 # the dimension being raced, or "start"
    settings: Settings
    samples_per_s: Optional[float]
    seconds: float
    data_wait: Optional[float] = None
    error: Optional[str] = None


TrialFn = Callable[[Settings], Outcome]


def _apply_workers(s: Settings, v: int, cpus: Optional[int] = None) -> Settings:
    """Set the worker count and what goes with it.  Workers and compute threads share
    the CPUs: while the threads are on the rules' line (CPUs - workers), they follow."""
    if cpus is not None and s.threads == max(1, cpus - s.num_workers):
        s = s.replace(threads=max(1, cpus - v))
    if v == 0:
        return s.replace(num_workers=0, prefetch_factor=None, persistent_workers=False, start_method=None)
    return s.replace(num_workers=v, prefetch_factor=s.prefetch_factor or 2, persistent_workers=True,
                     start_method=s.start_method or "fork")


def _apply_pin(s: Settings, v: bool) -> Settings:
    return s.replace(pin_memory=v, non_blocking=v)


@dataclass
class Dimension:
    """One thing to choose: a settings field, its candidate values, and its measured-reason id."""

    name: str
    values: list
    rule: str
    apply: Optional[Callable[[Settings, Any], Settings]] = None
    needs: Optional[Callable[[Settings], bool]] = None   # when the dimension means anything
    numeric: bool = False                                # coarse-to-fine when the range is wide

    def set(self, s: Settings, v: Any) -> Settings:
        return self.apply(s, v) if self.apply else s.replace(**{self.name: v})

    def get(self, s: Settings) -> Any:
        return getattr(s, self.name)

    def active(self, s: Settings) -> bool:
        return self.needs(s) if self.needs else True


def coarse(values: list) -> list:
    """0, 1, 2, 4, 8 ... and the last value: the first race over a wide numeric range."""
    if len(values) <= 5:
        return list(values)
    keep = {values[0], values[-1]}
    v = 1
    while v <= values[-1]:
        if v in values:
            keep.add(v)
        v *= 2
    return sorted(keep)


def default_space(start: Settings, device: str, per_proc_cpus: int, precisions: list, conv: bool,
                  max_workers: Optional[int] = None) -> list:
    """The dimensions ``--measure`` explores, most influential first.

    Workers range over 0 .. 2 x the process's CPUs (the article's rule lies
    inside), capped by ``max_workers`` (shm and open-file limits), with the
    compute threads following them along the rules' line (CPUs - workers);
    then threads are raced on their own, 1 .. the process's CPUs.
    """
    cpus = max(1, per_proc_cpus)
    top = 2 * cpus if max_workers is None else min(2 * cpus, max_workers)
    dims = []
    if len(precisions) > 1:
        dims.append(Dimension("precision", list(precisions), "tune.M003"))
    if conv:
        dims.append(Dimension("channels_last", [False, True], "tune.M004"))
    dims.append(Dimension("num_workers", list(range(0, max(0, top) + 1)), "tune.M001",
                          apply=lambda s, v: _apply_workers(s, v, cpus), numeric=True))
    if cpus > 1:
        dims.append(Dimension("threads", list(range(1, cpus + 1)), "tune.M002", numeric=True))
    dims.append(Dimension("prefetch_factor", [2, 4], "tune.M001", needs=lambda s: s.num_workers > 0))
    if device == "cuda":
        dims.append(Dimension("pin_memory", [False, True], "tune.M001", apply=_apply_pin))
    return dims


@dataclass
class Choice:
    """What the search decided for one dimension, and why."""

    dimension: str
    value: Any
    rule: str
    text: str
    changed: bool
    settled: bool = False    # beyond noise against every other value tried
    measured: bool = True    # False: never raced (no effect in this context, or no trial succeeded)


@dataclass
class Result:
    best: Settings
    start: Settings
    trials: list = field(default_factory=list)
    choices: dict = field(default_factory=dict)     # dimension name -> Choice
    spent: float = 0.0
    budget: float = 0.0
    stopped: str = ""                               # why the search ended

    def median(self, s: Settings) -> Optional[float]:
        vals = [t.samples_per_s for t in self.trials if key(t.settings) == key(s) and t.samples_per_s is not None]
        return statistics.median(vals) if vals else None


class BudgetSpent(Exception):
    pass


def key(s: Settings) -> tuple:
    """A hashable identity for settings (Settings itself is a mutable dataclass)."""
    return dataclasses.astuple(s)


def unique(items: list) -> list:
    seen, out = set(), []
    for s in items:
        if key(s) not in seen:
            seen.add(key(s))
            out.append(s)
    return out


class Search:
    """Coordinate descent with interleaved, repeated races.  See the module doc."""

    def __init__(self, trial: TrialFn, budget_s: float, repeats: int = 3, max_repeats: int = 7,
                 min_gain: float = 0.03, z: float = 2.0,
                 on_trial: Optional[Callable[[Trial, float, float], None]] = None, passes: int = 2):
        self.trial_fn = trial
        self.budget = float(budget_s)
        self.repeats = max(2, repeats)
        self.max_repeats = max(self.repeats, max_repeats)
        self.z = z
        self.min_gain = min_gain
        self.on_trial = on_trial
        self.passes = passes
        self.trials: list[Trial] = []
        self.samples: dict = {}   # key(Settings) -> [samples/s]
        self.errors: dict = {}    # key(Settings) -> error text
        self.known: dict = {}     # key(Settings) -> Settings
        self.spent = 0.0
        self.phase = "start"

    # -- measuring ---------------------------------------------------------
    def _cost_estimate(self, s: Settings) -> float:
        """What the next trial of ``s`` may cost: its own longest so far, else the longest
        of the last few trials (pessimistic, so that the budget holds)."""
        own = [t.seconds for t in self.trials if key(t.settings) == key(s)]
        recent = [t.seconds for t in self.trials[-5:]]
        return max(own or recent or [0.0])

    def measure(self, s: Settings) -> Optional[float]:
        if key(s) in self.errors:
            return None
        if self.trials and self.spent + self._cost_estimate(s) > self.budget:
            raise BudgetSpent()
        out = self.trial_fn(s)
        self.spent += max(0.0, out.seconds)
        t = Trial(len(self.trials) + 1, self.phase, s, out.samples_per_s, out.seconds, out.data_wait, out.error)
        self.trials.append(t)
        self.known[key(s)] = s
        if out.samples_per_s is None:
            self.errors[key(s)] = out.error or "failed"
        else:
            self.samples.setdefault(key(s), []).append(out.samples_per_s)
        if self.on_trial:
            self.on_trial(t, self.spent, self.budget)
        return out.samples_per_s

    def med(self, s: Settings) -> Optional[float]:
        vals = self.samples.get(key(s))
        return statistics.median(vals) if vals else None

    def sigma(self) -> float:
        """Robust relative noise: the spread of log(samples/s) around each config's
        median, pooled over configs measured at least twice (MAD x 1.4826).
        5% until something has been measured twice; never below 1%."""
        res = []
        for vals in self.samples.values():
            logs = [math.log(v) for v in vals if v > 0]
            n = len(logs)
            if n >= 2:
                m = statistics.median(logs)
                res.extend(abs(x - m) * math.sqrt(n / (n - 1)) for x in logs if x != m)
        return max(0.01, 1.4826 * statistics.median(res)) if res else 0.05

    def gap(self, a: Settings, b: Settings) -> float:
        """How far apart (in log samples/s) the medians of ``a`` and ``b`` must be to count:
        z standard errors of a difference of medians, and at least ``min_gain``."""
        na, nb = len(self.samples.get(key(a), [])), len(self.samples.get(key(b), []))
        if not na or not nb:
            return float("inf")
        se = 1.2533 * self.sigma() * math.sqrt(1 / na + 1 / nb)  # a median's standard error is 1.25x a mean's
        return max(math.log1p(self.min_gain), self.z * se)

    def better(self, a: Settings, b: Settings) -> bool:
        """Is ``a`` clearly faster than ``b``?"""
        ma, mb = self.med(a), self.med(b)
        if ma is None or mb is None or ma <= 0 or mb <= 0:
            return False
        return math.log(ma) - math.log(mb) > self.gap(a, b)

    def ahead(self, a: Settings, b: Settings) -> bool:
        """Is ``a``'s median ahead of ``b``'s by at least ``min_gain``?  After a race that could not
        separate them further, the higher median is the better bet."""
        ma, mb = self.med(a), self.med(b)
        return ma is not None and mb is not None and ma > mb * (1 + self.min_gain)

    # -- a race between candidates ----------------------------------------
    def race(self, cands: list) -> list:
        """Measure ``cands`` round by round in rotating order, dropping the clearly slower;
        return the survivors (the leader first)."""
        alive = [c for c in unique(cands) if key(c) not in self.errors]
        rnd = 0
        while alive and rnd < self.max_repeats:
            k = rnd % len(alive)
            order = alive[k:] + alive[:k]
            if rnd % 2:
                order.reverse()
            for c in order:
                self.measure(c)
            rnd += 1
            alive = [c for c in alive if key(c) not in self.errors]
            if len(alive) <= 1:
                break
            lead = self._leader(alive)
            if rnd == 1:
                # Only the hopeless after one sample: below half the leader, and further below
                # than the noise seen so far could explain (a busy machine only ever slows a trial).
                cut = self.med(lead) * min(0.5, math.exp(-4 * self.sigma()))
                alive = [c for c in alive if self.med(c) >= cut]
            else:
                alive = [c for c in alive if c is lead or not self.better(lead, c)]
            if len(alive) <= 1:
                break
            if rnd >= self.repeats and all(
                    math.log(self.med(lead)) - math.log(self.med(c)) <= math.log1p(self.min_gain) for c in alive):
                break  # what is left is practically equal
        lead = self._leader(alive)
        return [lead] + [c for c in alive if c is not lead] if lead is not None else alive

    def run(self, start: Settings, dims: list) -> Result:
        """Coordinate descent from ``start`` over ``dims`` within the budget."""
        best = start
        choices: dict = {}
        stopped = "no dimension left to improve"
        settled: set = set()     # decided beyond noise (a clear winner, or clearly no difference)
        decided_at: dict = {}    # dimension -> number of changes when it was last decided
        changes: list = []       # names of the dimensions that changed best, in order
        try:
            self.phase = "start"
            if self.measure(start) is None:
                raise RuntimeError(f"the starting settings failed: {self.errors[key(start)]}")
            for p in range(self.passes):
                raced = False
                for dim in dims:
                    if dim.name in settled:
                        continue
                    if p > 0 and not any(n != dim.name for n in changes[decided_at.get(dim.name, 0):]):
                        continue  # nothing else changed since it was decided
                    decided_at[dim.name] = len(changes)
                    if not dim.active(best):
                        choices[dim.name] = Choice(dim.name, dim.get(best), "tune.M005",
                                                   f"{dim.name} not measured: no effect with {best.short()}", False,
                                                   measured=False)
                        continue
                    self.phase = dim.name
                    raced = True
                    new_best, choice, spent = self._dimension(best, dim)
                    if choice is not None:
                        choices[dim.name] = choice
                        if choice.settled:
                            settled.add(dim.name)
                    if key(new_best) != key(best):
                        best = new_best
                        changes.append(dim.name)
                    decided_at[dim.name] = len(changes)
                    if spent:
                        raise BudgetSpent()
                if not raced:
                    break
            best = self._refine(best, dims, choices)
        except BudgetSpent:
            stopped = "budget spent"  # the caller's table names the whole budget; this is only the search's share
        for dim in dims:
            if dim.name in choices:
                choices[dim.name].changed = dim.get(best) != dim.get(start)
        return Result(best=best, start=start, trials=self.trials, choices=choices, spent=self.spent,
                      budget=self.budget, stopped=stopped)

    def _refine(self, best: Settings, dims: list, choices: dict) -> Settings:
        """With budget left, settle the close calls: for every dimension not decided beyond
        noise, race the chosen value against its alternatives *where the search ended up*
        (a choice made early may have been made in another context), with more repeats."""
        for dim in dims:
            choice = choices.get(dim.name)
            if choice is None or choice.settled or not dim.active(best):
                continue
            current = dim.get(best)
            if dim.numeric:
                tried = sorted({dim.get(o) for k, o in self.known.items()
                                if k in self.samples and key(dim.set(best, dim.get(o))) == k} | {current})
                i = tried.index(current)
                alternatives = [v for v in tried[max(0, i - 1):i + 2] if v != current]
            else:
                alternatives = [v for v in dim.values if v != current]
            if not alternatives:
                continue
            self.phase = dim.name + " (settle)"
            saved = self.max_repeats
            self.max_repeats = 2 * saved
            try:
                alive = self.race([best] + [dim.set(best, v) for v in alternatives])
            finally:
                self.max_repeats = saved
            winner = self._leader(alive) or best
            new_best, settled_choice = self._choose(dim, best, best, winner)
            if key(new_best) != key(best) or settled_choice.rule != "tune.M005" or choice.rule == "tune.M005":
                choices[dim.name] = settled_choice
            best = new_best
        return best

    def _dimension(self, best: Settings, dim: Dimension) -> tuple:
        """Race one dimension from ``best``: (new best, Choice or None, budget spent?)."""
        current = dim.get(best)
        values = dim.values
        first = coarse(values) if dim.numeric else list(values)
        if current not in first:
            first = sorted(set(first) | {current}) if dim.numeric else first + [current]
        incumbent = dim.set(best, current)
        cands = [dim.set(best, v) for v in first]
        spent = False
        try:
            alive = self.race(cands)
            winner = self._leader(alive) or incumbent
            tried = set(first)
            while dim.numeric:  # bisect towards the winner: the midpoints to its tried neighbours
                v = dim.get(winner)
                lo = max((x for x in tried if x < v), default=v)
                hi = min((x for x in tried if x > v), default=v)
                mids = sorted({x for x in ((lo + v) // 2, (v + hi + 1) // 2) if x in values and x not in tried})
                if not mids:
                    break
                tried.update(mids)
                alive = self.race([winner] + [dim.set(best, x) for x in mids])
                winner = self._leader(alive) or winner
        except BudgetSpent:
            spent = True
            measured = [c for c in cands if len(self.samples.get(key(c), [])) >= 2]
            if key(incumbent) not in {key(c) for c in measured} or len(measured) < 2:
                return best, None, True   # too little to decide: keep the rule's value
            winner = self._leader(measured) or incumbent
        new_best, choice = self._choose(dim, best, incumbent, winner)
        return new_best, choice, spent

    def _equivalent(self, c: Settings, others: list) -> bool:
        """Clearly no difference: every other candidate's median is within ``min_gain`` of
        ``c``'s, and the noise is small enough that a real difference of twice that would
        have shown."""
        if not others:
            return False
        for o in others:
            ma, mb = self.med(c), self.med(o)
            na, nb = len(self.samples.get(key(c), [])), len(self.samples.get(key(o), []))
            if not (ma and mb and na and nb):
                return False
            se = 1.2533 * self.sigma() * math.sqrt(1 / na + 1 / nb)
            if abs(math.log(ma / mb)) + self.z * se > math.log1p(2 * self.min_gain):
                return False
        return True

    def _beats_all(self, c: Settings, dim: Dimension, best: Settings) -> bool:
        others = [o for k, o in self.known.items()
                  if k in self.samples and k != key(c) and key(dim.set(best, dim.get(o))) == k]
        return bool(others) and all(self.better(c, o) for o in others)

    def _leader(self, alive: list) -> Optional[Settings]:
        scored = [(self.med(c), c) for c in alive if self.med(c) is not None]
        if not scored:
            return None
        return max(scored, key=lambda x: x[0])[1]

    def _choose(self, dim: Dimension, best: Settings, incumbent: Settings, winner: Settings) -> tuple:
        n = lambda c: len(self.samples.get(key(c), []))  # noqa: E731
        label = lambda c: f"{dim.name}={_fmt(dim.get(c))}"  # noqa: E731
        if self.med(incumbent) is None:
            return best, Choice(dim.name, dim.get(incumbent), "tune.M005", f"{dim.name} not measured", False,
                                measured=False)
        if key(winner) != key(incumbent) and self.ahead(winner, incumbent):
            text = (f"{label(winner)}: {self.med(winner):.1f} samples/s vs {self.med(incumbent):.1f} with "
                    f"{label(incumbent)}, median of {min(n(winner), n(incumbent))}")
            if not self.better(winner, incumbent):
                text += f" (within noise {self.sigma():.1%}: the likelier of the two)"
            return winner, Choice(dim.name, dim.get(winner), dim.rule, text, True, self._beats_all(winner, dim, best))
        others = [c for k, c in self.known.items()
                  if k in self.samples and k != key(incumbent) and key(dim.set(best, dim.get(c))) == k]
        runner = self._leader(others)
        if runner is not None and self.ahead(incumbent, runner):
            text = (f"{label(incumbent)}: {self.med(incumbent):.1f} samples/s vs {self.med(runner):.1f} with "
                    f"{label(runner)}, median of {min(n(incumbent), n(runner))}")
            if not self.better(incumbent, runner):
                text += f" (within noise {self.sigma():.1%})"
            return incumbent, Choice(dim.name, dim.get(incumbent), dim.rule, text, False,
                                     self._beats_all(incumbent, dim, best))
        slower = [c for c in others if self.better(incumbent, c)]
        if runner is not None and slower:
            close = [c for c in others if c not in slower]
            text = (f"{label(incumbent)}: {self.med(incumbent):.1f} samples/s, median of {n(incumbent)}; "
                    f"{_values(dim, close)} as fast within noise, {_values(dim, slower)} slower")
            return incumbent, Choice(dim.name, dim.get(incumbent), dim.rule, text, False, False)
        tried = [_fmt(v) for v in dim.values if any(dim.get(c) == v for c in others + [incumbent])]
        text = (f"{dim.name}: no measurable difference among {', '.join(tried)} "
                f"(noise {self.sigma():.1%}); {_fmt(dim.get(incumbent))} kept")
        return incumbent, Choice(dim.name, dim.get(incumbent), "tune.M005", text, False,
                                 self._equivalent(incumbent, others))


def _values(dim: Dimension, configs: list) -> str:
    vals = {dim.get(c) for c in configs}
    return ", ".join(_fmt(v) for v in dim.values if v in vals)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


# ---------------------------------------------------------------------------
# The exhaustive grid: the oracle that benchmarks/tune_bench.py compares against.


def grid_points(start: Settings, dims: list) -> list:
    """Every combination of the dimensions' values; a dimension that means nothing
    for a point (prefetch without workers) adds no copies of it."""
    points = [start]
    for dim in dims:
        nxt = []
        for s in points:
            nxt.extend([dim.set(s, v) for v in dim.values] if dim.active(s) else [s])
        points = unique(nxt)
    return points


def run_grid(trial: TrialFn, points: list, repeats: int = 3,
             on_trial: Optional[Callable[[Trial, float, float], None]] = None) -> Result:
    """Measure every point ``repeats`` times, interleaved (each round visits every point)."""
    s = Search(trial, budget_s=float("inf"), repeats=repeats, on_trial=on_trial)
    s.phase = "grid"
    for rnd in range(repeats):
        order = points if rnd % 2 == 0 else list(reversed(points))
        for p in order:
            s.measure(p)
    best = max((p for p in points if s.med(p) is not None), key=s.med)
    return Result(best=best, start=points[0], trials=s.trials, choices={}, spent=s.spent, budget=s.spent,
                  stopped="grid done")
