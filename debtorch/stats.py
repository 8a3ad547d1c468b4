"""Statistics that say "inconclusive": intervals, verdicts and adaptive rounds
for interleaved measurements.  Pure standard library (``random``,
``statistics``, ``math``), a fixed seed: the same numbers give the same
interval every time.

The method (docs/verify-train.md, "Statistics"):

* Two arms (tuned and baseline, instrumented and bare, a run and its bound)
  are measured in interleaved *rounds*: round i of one arm ran right beside
  round i of the other, so drift on the machine hits both alike.
* The figure is a **ratio of medians**: median(A) / median(B) over the rounds
  where both arms gave a number (of an even count, the median is the geometric
  mean of the middle two: everything is computed in logarithms, so no input
  can overflow).
* Its interval is a **paired percentile bootstrap**: the rounds are resampled
  with replacement (a round's two numbers stay together), the ratio of medians
  is recomputed ``RESAMPLES`` times from the fixed ``SEED``, and the 2.5th and
  97.5th percentiles bound a 95% interval.  Arms that did not run in the same
  rounds (a multi-process run against single-process rounds) are resampled
  each on its own.  The interval is widened, if need be, to hold the point
  estimate (a percentile interval of a small, discrete bootstrap can miss it).
* **Student's t too**: the bootstrap alone is overconfident with few rounds
  (on identical arms with log-normal noise it excluded "no difference" in 26%
  of 3-round comparisons: it cannot see the uncertainty of so few values) and
  in its far tails (the repeated intervals below), so the interval is widened
  to hold Student's t interval of the mean log-ratio (Welch's, unpaired),
  which keeps its level at any count when the noise is roughly log-normal.
  A verdict therefore needs both to agree (tests/test_stats.py checks the rate).
* A **verdict** only when the whole interval lies on one side: "faster" when
  it lies above 1 (plus an optional equivalence ``margin``), "slower" below;
  with a margin, "equivalent" when it lies inside 1 +- margin.  Otherwise
  "inconclusive", with an estimate of how many more rounds would likely
  resolve it: the interval's half-width shrinks as 1/sqrt(rounds), so
  n x (half-width / distance to the boundary)^2 rounds would put the
  boundary outside it.  Fewer than ``MIN_ROUNDS`` rounds are always
  inconclusive.
* **Physically impossible figures**: a cost below zero (the instrumented loop
  faster than the bare one), a share of a bound above 100%, a scaling
  efficiency above 100%.  When the whole interval is impossible the verdict
  is "failed measurement"; when only the point estimate is, "inconclusive"
  (``impossible`` is set either way): never a result.

**Sequential looks.**  ``adaptive_rounds`` adds rounds until the verdict
resolves or the time budget is spent, as pyperf and hyperfine do.  Stopping at
the first 95% interval that excludes 1 would be optional stopping: each look
is another chance for noise to cross, and over rounds 3 to 30 identical arms
got a verdict in about a quarter of runs (benchmarks/aa_bench.py).  So every
look of a run is tested at **Pocock's constant nominal level** for the most
looks the run may take (:class:`Looks`): Pocock, S. J. (1977), "Group
sequential methods in the design and analysis of clinical trials",
Biometrika 64(2):191-199.  The intervals are then *repeated confidence
intervals* (Jennison & Turnbull (1989), JRSS B 51(3):305-361): all of them
hold together with 95% probability, so a verdict at any look keeps the 95%.
Pocock's constants assume a known variance; with few rounds the same nominal
level is applied to Student's t (the "significance level" approach; exact
t calculations: Jennison & Turnbull (1991), Biometrika 78(1):133-141), and
tests/test_stats.py and benchmarks/aa_bench.py measure the rate that results.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Sequence

CONFIDENCE = 0.95        # of every interval (the Student-t table below is for 95%)
RESAMPLES = 2000
SEED = 20261130          # fixed: the same rounds always give the same interval
MIN_ROUNDS = 3           # fewer rounds never give a verdict
MAX_LOG = 700.0          # exp() of more than this overflows a float: ratios are clamped here

# Verdicts
FASTER, SLOWER, EQUIVALENT = "faster", "slower", "equivalent"        # a ratio of speeds
COSTS, NEGLIGIBLE = "costs", "negligible"                           # a cost
BELOW, REACHED = "below", "reached"                                 # a share of a bound (or of ideal scaling)
INCONCLUSIVE = "inconclusive"
FAILED = "failed measurement"


@dataclass(frozen=True)
class Estimate:
    """A figure with its interval and what it allows one to say."""

    kind: str                       # "ratio", "cost" or "share"
    estimate: Optional[float]       # the point estimate (None: no round gave both numbers)
    low: Optional[float]            # the interval (None with fewer than 2 rounds)
    high: Optional[float]
    rounds: int                     # rounds (pairs) the figure rests on
    verdict: str
    more_rounds: Optional[int] = None   # inconclusive: about this many more rounds would likely resolve it
    impossible: bool = False        # the point estimate lies where no real measurement can
    reason: str = ""                # one line: why this verdict
    confidence: float = CONFIDENCE

    @property
    def resolved(self) -> bool:
        return self.verdict != INCONCLUSIVE

    def to_dict(self, name: str = "estimate") -> dict:
        """JSON-ready, the figure under ``name`` (``ratio``, ``cost``, ``share``)."""
        d = asdict(self)
        d[name] = d.pop("estimate")
        return d


def _valid(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _median(xs: list) -> float:
    return statistics.median(xs)


def _exp(x: float) -> float:
    return math.exp(max(-MAX_LOG, min(MAX_LOG, x)))


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (Lentz's method,
    Numerical Recipes 6.4)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d or 1e-300)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 / ((1.0 + num * d) or 1e-300)
            c = (1.0 + num / c) or 1e-300
            h *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return h


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """Student's t quantile at ``p`` (0.5 < p < 1) with ``df`` degrees of freedom (any df > 0):
    the tail P(T > t) = I_x(df/2, 1/2) / 2 with x = df / (df + t^2), inverted by bisection."""
    def tail(t: float) -> float:
        x, a = df / (df + t * t), df / 2
        front = math.exp(math.lgamma(a + 0.5) - math.lgamma(a) - math.lgamma(0.5) + a * math.log(x)
                         + 0.5 * math.log1p(-x))
        if x < (a + 1) / (a + 2.5):
            return front * _betacf(a, 0.5, x) / a / 2
        return (1.0 - front * _betacf(0.5, a, 1 - x) / 0.5) / 2
    lo, hi = 0.0, 1.0
    while tail(hi) > 1 - p:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tail(mid) > 1 - p else (lo, mid)
    return hi


def _mean_var(xs: list) -> tuple:
    m = math.fsum(xs) / len(xs)
    return m, math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def _t_interval(la: list, lb: list, paired: bool, confidence: float) -> Optional[tuple]:
    """Student's t interval of the mean log-ratio (paired) or of the difference of mean logs
    (Welch, unpaired); None when an arm has fewer than two values."""
    q = (1 + confidence) / 2
    if paired:
        if len(la) < 2:
            return None
        m, v = _mean_var([x - y for x, y in zip(la, lb)])
        h = t_quantile(q, len(la) - 1) * math.sqrt(v / len(la))
        return m - h, m + h
    if len(la) < 2 or len(lb) < 2:
        return None
    (ma, va), (mb, vb) = _mean_var(la), _mean_var(lb)
    va, vb, m = va / len(la), vb / len(lb), ma - mb
    if va + vb == 0:
        return m, m
    df = (va + vb) ** 2 / ((va * va / (len(la) - 1)) + (vb * vb / (len(lb) - 1)))
    h = t_quantile(q, max(1, math.floor(df))) * math.sqrt(va + vb)   # whole degrees, rounded down: a wider interval
    return m - h, m + h


def ratio_of_sums(part: Sequence[float], whole: Sequence[float]) -> tuple:
    """sum(part) / sum(whole) with its 95% interval over the pairs (windows of steps, say): Student's t
    on the residuals part - R x whole, the ratio estimator's delta method.  (estimate, low, high);
    the interval is None below two pairs, everything None when ``whole`` sums to nothing."""
    n, total = len(part), float(sum(whole))
    if not n or not total > 0:
        return None, None, None
    r = sum(part) / total
    if n < 2:
        return r, None, None
    h = t975(n - 1) * statistics.stdev([p - r * w for p, w in zip(part, whole)]) / (total / n) / math.sqrt(n)
    return r, r - h, r + h


@dataclass
class _LogRatio:
    """log(median(num) / (scale x median(den))) with its bootstrap interval, in logs."""

    est: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    n: int = 0


def log_ratio_interval(num: Sequence, den: Sequence, *, paired: bool = True, scale: float = 1.0,
                       resamples: int = RESAMPLES, seed: int = SEED, confidence: float = CONFIDENCE) -> _LogRatio:
    """The ratio of medians num / (scale x den) in logs, with its interval at ``confidence``:
    the percentile bootstrap widened to hold Student's t interval of the log-ratios
    (``resamples=0``: Student's t alone, whose verdicts include every verdict of the two).

    Values that are not finite positive numbers (a failed trial's None, 0, NaN)
    are left out; paired, the round is left out for both arms.
    """
    out = _LogRatio()
    if not _valid(scale):
        return out
    if paired:
        pairs = [(math.log(a), math.log(b)) for a, b in zip(num, den) if _valid(a) and _valid(b)]
        la, lb = [p[0] for p in pairs], [p[1] for p in pairs]
        out.n = len(pairs)
    else:
        la = [math.log(a) for a in num if _valid(a)]
        lb = [math.log(b) for b in den if _valid(b)]
        out.n = min(len(la), len(lb))
    if not la or not lb:
        return out
    shift = math.log(scale)
    out.est = _median(la) - _median(lb) - shift
    t = _t_interval(la, lb, paired, confidence)
    if t is None:
        return out
    # With few rounds the bootstrap cannot see its own uncertainty (on identical arms with three
    # rounds it excludes "no difference" a quarter of the time), nor in its far tails; Student's t
    # holds its level at any count when the noise is roughly log-normal: the wider of the two is kept.
    out.low, out.high = min(out.est, t[0] - shift), max(out.est, t[1] - shift)
    rng = random.Random(seed) if resamples > 0 else None
    stats = []
    n = len(la)
    for _ in range(max(0, resamples)):
        if paired:
            pick = rng.choices(range(n), k=n)
            stats.append(_median([la[i] for i in pick]) - _median([lb[i] for i in pick]) - shift)
        else:
            stats.append(_median(rng.choices(la, k=len(la))) - _median(rng.choices(lb, k=len(lb))) - shift)
    if stats:
        stats.sort()
        alpha = 1.0 - confidence
        lo_i = min(len(stats) - 1, max(0, math.floor(alpha / 2 * len(stats))))
        hi_i = min(len(stats) - 1, max(0, math.ceil((1 - alpha / 2) * len(stats)) - 1))
        out.low, out.high = min(stats[lo_i], out.low), max(stats[hi_i], out.high)
    return out


# A verdict holds when the interval (in logs) lies strictly inside its region, given as
# (verdict, low bound or -inf, high bound or inf, why in words).


def _judge(r: _LogRatio, regions: list, impossible_above: Optional[float]) -> tuple:
    """(verdict, more_rounds, impossible, reason) for an interval in logs."""
    impossible = impossible_above is not None and r.est is not None and r.est > impossible_above
    if r.est is None:
        return INCONCLUSIVE, MIN_ROUNDS, False, "no round measured both"
    if r.n < MIN_ROUNDS or r.low is None:
        return INCONCLUSIVE, MIN_ROUNDS - r.n, impossible, f"{r.n} round(s); at least {MIN_ROUNDS} are needed"
    for verdict, a, b, why in regions:
        if r.low > a and r.high < b:
            if impossible and verdict != FAILED:
                break   # an impossible figure is never a result
            return verdict, None, impossible, why
    # The likeliest resolution: the region the point estimate lies in.
    for verdict, a, b, _ in regions:
        if a < r.est < b:
            need = 0.0
            if a > -math.inf:
                need = max(need, (r.est - r.low) / (r.est - a))
            if b < math.inf:
                need = max(need, (r.high - r.est) / (b - r.est))
            need = min(need, 100.0)   # beyond 10 000 x the rounds: "more than 100" is all a reader needs
            more = max(1, math.ceil(r.n * need * need) - r.n) if need > 0 else 1
            why = "within noise" + (": the point estimate is impossible" if impossible else "")
            return INCONCLUSIVE, more, impossible, why
    return INCONCLUSIVE, None, impossible, "within noise, and the point estimate sits on the boundary"


def _margin(m) -> float:
    return min(0.99, max(0.0, float(m))) if isinstance(m, (int, float)) and math.isfinite(m) else 0.0


def compare(a: Sequence, b: Sequence, *, margin: float = 0.0, paired: bool = True, seed: int = SEED,
            resamples: int = RESAMPLES, confidence: float = CONFIDENCE) -> Estimate:
    """Speed ``a`` over speed ``b`` (samples per second, higher is faster): the ratio of medians.

    "faster" / "slower" only when the interval (at ``confidence``: a look's, :class:`Looks`)
    excludes 1 +- ``margin``; "equivalent" when it lies inside it (only with a margin).
    """
    m = math.log1p(_margin(margin))
    r = log_ratio_interval(a, b, paired=paired, seed=seed, resamples=resamples, confidence=confidence)
    regions = [(FASTER, m, math.inf, f"the interval lies above {1 + _margin(margin):g}"),
               (SLOWER, -math.inf, -m, f"the interval lies below {1 / (1 + _margin(margin)):g}")]
    if m > 0:
        regions.append((EQUIVALENT, -m, m, f"the interval lies within {_margin(margin):.0%} of 1"))
    verdict, more, _, why = _judge(r, regions, None)
    return _estimate("ratio", r, verdict, more, False, why, lambda x: _exp(x), confidence)


def cost(instrumented: Sequence, bare: Sequence, *, margin: float = 0.0, paired: bool = True,
         seed: int = SEED, resamples: int = RESAMPLES) -> Estimate:
    """What instrumentation costs: 1 - instrumented / bare speed (samples per second).

    "costs" when the interval lies above ``margin``; "negligible" when it lies
    below it (only with a margin); a cost below zero beyond noise (the
    instrumented loop faster than the bare one) is a "failed measurement".
    """
    m = _margin(margin)
    r = log_ratio_interval(instrumented, bare, paired=paired, seed=seed, resamples=resamples)
    # In log(instrumented / bare): a cost above m is a ratio below 1 - m.
    regions = [(FAILED, 0.0, math.inf, "a negative cost beyond noise: the instrumented loop cannot be faster"),
               (COSTS, -math.inf, math.log1p(-m), f"the interval lies above {m:.0%}"),
               (NEGLIGIBLE, math.log1p(-m), math.inf, f"the interval lies below {m:.0%}")]
    if m == 0:
        regions.pop()
    verdict, more, impossible, why = _judge(r, regions, 0.0)
    e = _estimate("cost", r, verdict, more, impossible, why, lambda x: 1.0 - _exp(x))
    # 1 - ratio reverses the order: the ratio's high end is the cost's low end.
    if e.low is not None:
        e = Estimate(**{**asdict(e), "low": e.high, "high": e.low})
    return e


def share(part: Sequence, whole: Sequence, *, scale: float = 1.0, margin: float = 0.0, paired: bool = True,
          seed: int = SEED, resamples: int = RESAMPLES) -> Estimate:
    """A share that cannot exceed 1: part / (scale x whole), as a ratio of medians.

    A run's share of its compute-only bound (``part``: the run, ``whole``: the
    bound, paired by round), or scaling efficiency (``part``: N processes'
    samples per second, ``whole``: one process's, ``scale`` N, unpaired).
    "below" when the interval lies under 1; "reached" when it lies within
    ``margin`` of 1 (only with a margin); above 1 beyond noise is a "failed
    measurement".
    """
    m = _margin(margin)
    r = log_ratio_interval(part, whole, paired=paired, scale=scale, seed=seed, resamples=resamples)
    regions = [(FAILED, 0.0, math.inf, "above 100% beyond noise: a share of a bound cannot exceed it"),
               (BELOW, -math.inf, 0.0, "the interval lies below 100%"),
               (REACHED, math.log1p(-m), math.inf, f"the interval lies within {m:.0%} of 100%")]
    if m == 0:
        regions.pop()
    verdict, more, impossible, why = _judge(r, regions, 0.0)
    return _estimate("share", r, verdict, more, impossible, why, lambda x: _exp(x))


def _estimate(kind: str, r: _LogRatio, verdict: str, more, impossible: bool, why: str, f,
              confidence: float = CONFIDENCE) -> Estimate:
    return Estimate(kind=kind, estimate=None if r.est is None else f(r.est),
                    low=None if r.low is None else f(r.low), high=None if r.high is None else f(r.high),
                    rounds=r.n, verdict=verdict, more_rounds=more if verdict == INCONCLUSIVE else None,
                    impossible=impossible, reason=why, confidence=confidence)


def resolve_hint(verdict: str, more_rounds: Optional[int]) -> str:
    """What would resolve an inconclusive figure, in words ('' when resolved): pass an
    Estimate's ``verdict`` and ``more_rounds`` (or its ``to_dict()``'s)."""
    if verdict != INCONCLUSIVE:
        return ""
    if more_rounds is None:
        return "more rounds would not resolve it: the estimate sits on the boundary"
    if more_rounds > 100:
        return "more than 100 more rounds would be needed to resolve it"
    return f"about {more_rounds} more round{'s' if more_rounds != 1 else ''} would likely resolve it"


# ---------------------------------------------------------------------------
# Sequential looks and adaptive rounds

# Pocock's constant C_P(K): the normal critical value that K equally spaced looks share so that
# the chance that any of them crosses it, with no difference, is 5% (two-sided).  Computed by the
# recursive numerical integration of Armitage, McPherson & Rowe (1969, JRSS A 132:235-244) on a
# grid of 0.005, rounded up; it reproduces Jennison & Turnbull's Table 2.1 (Group Sequential
# Methods, 2000: 2.178, 2.289, 2.361, 2.413 ... 2.555 for K = 2, 3, 4, 5 ... 10).  A run that looks
# at every round from a to b (K = b - a + 1) is more correlated from look to look than K equally
# spaced looks from zero, so C_P(K) is conservative for it (rounds 3-30: 2.722 against an exact 2.667).
POCOCK = {1: 1.960, 2: 2.178, 3: 2.291, 4: 2.362, 5: 2.414, 6: 2.454, 7: 2.486, 8: 2.513, 9: 2.536, 10: 2.556,
          11: 2.573, 12: 2.589, 13: 2.603, 14: 2.616, 15: 2.626, 16: 2.637, 17: 2.647, 18: 2.656, 19: 2.665,
          20: 2.673, 21: 2.680, 22: 2.687, 23: 2.694, 24: 2.700, 25: 2.706, 26: 2.711, 27: 2.717, 28: 2.722,
          29: 2.726, 30: 2.731, 40: 2.770, 50: 2.798, 60: 2.819, 80: 2.851, 100: 2.875}
NORMAL = statistics.NormalDist()


@dataclass(frozen=True)
class Looks:
    """A sequential design: a verdict may be claimed after every round from ``first`` to ``last``
    (a look), each look's interval at Pocock's nominal level for that many looks, so that all
    looks together claim a difference between identical arms at most 5% of the time."""

    first: int
    last: int

    @property
    def most(self) -> int:
        """Looks the design allows."""
        return max(1, self.last - self.first + 1)

    @property
    def z(self) -> float:
        """The critical value every look shares (normal scale).  Beyond the table's 100 looks,
        Bonferroni's, valid for any number of looks."""
        k = self.most
        return next((c for n, c in POCOCK.items() if n >= k), None) or NORMAL.inv_cdf(1 - (1 - CONFIDENCE) / 2 / k)

    @property
    def confidence(self) -> float:
        """Each look's nominal confidence (95% with one look)."""
        return 2 * NORMAL.cdf(self.z) - 1

    def taken(self, rounds: int) -> int:
        """Looks taken by ``rounds`` rounds."""
        return max(0, min(rounds, self.last) - self.first + 1)

    def to_dict(self, rounds: Optional[int] = None) -> dict:
        d = {"procedure": "pocock" if self.most > 1 else "fixed", "first": self.first, "last": self.last,
             "most_looks": self.most, "z": round(self.z, 3), "confidence": round(self.confidence, 5)}
        if rounds is not None:
            d["looks"] = self.taken(rounds)
        return d


@dataclass
class Adaptive:
    """What ``adaptive_rounds`` measured and why it stopped."""

    data: dict                       # arm -> values, in round order (None where a round gave none)
    rounds: int
    estimate: Any                    # the judge's last Estimate (or list of them)
    spent: float                     # seconds, by the clock given
    stopped: str                     # "resolved", "budget spent", "max rounds", "cannot resolve", "no budget"
    looks: Optional[Looks] = None    # the sequential design the verdict was judged by


def adaptive_rounds(run_round: Callable[[int], dict], judge: Callable[[dict, float], Estimate], budget_s: float, *,
                    min_rounds: int = MIN_ROUNDS, max_rounds: int = 30,
                    clock: Callable[[], float] = time.monotonic,
                    reserve: Optional[Callable[[dict], float]] = None) -> Adaptive:
    """Run rounds until ``judge``'s verdict resolves, or the budget is spent.

    ``run_round(i)`` runs round i (0-based) of every arm, interleaved, and
    returns ``{arm: value}``; ``judge(data, confidence)`` turns ``{arm: [values]}``
    into an :class:`Estimate` at that confidence (for instance
    ``lambda d, c: compare(d["tuned"], d["baseline"], confidence=c)``), or a list of them that
    resolves when every one does (an empty list never does): every look,
    from ``min_rounds`` to ``max_rounds``, is judged at the design's level
    (:class:`Looks`, also in the result), so that stopping at the first
    verdict keeps the 95% (the module doc).
    A round starts only when the time spent plus the longest round so far fits
    ``budget_s`` (the first round, of unknown cost, whenever the budget is
    positive); at least ``min_rounds`` are run when the budget allows, at most
    ``max_rounds``.  A verdict that more rounds cannot change (a point estimate
    on the boundary) stops early.  ``reserve(data)``, when given, is time the
    budget must keep for what comes after the rounds (estimated from the
    rounds so far): a round starts only when it fits beside it.
    """
    data: dict = {}
    took: list = []
    start = clock()
    est: Any = None
    stopped = "max rounds"
    n = 0
    looks = Looks(max(1, min_rounds), max(1, min_rounds, max_rounds))
    if not (isinstance(budget_s, (int, float)) and budget_s > 0):
        return Adaptive(data, 0, None, 0.0, "no budget", looks)
    while n < looks.last:
        spent = clock() - start
        if took and spent + max(took) + (reserve(data) if reserve else 0.0) > budget_s:
            stopped = "budget spent"
            break
        t0 = clock()
        values = run_round(n) or {}
        took.append(max(0.0, clock() - t0))
        for arm in set(data) | set(values):
            data.setdefault(arm, [None] * n).append(values.get(arm))
        n += 1
        if n >= looks.first:
            est = judge(data, looks.confidence)
            group = est if isinstance(est, list) else [est]
            if group and all(e.resolved for e in group):
                stopped = "resolved"
                break
            if any(e.more_rounds is None and not e.resolved for e in group):
                stopped = "cannot resolve"
                break
    if est is None and n:
        est = judge(data, looks.confidence)
    return Adaptive(data, n, est, clock() - start, stopped, looks)
