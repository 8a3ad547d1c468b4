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
* **Few rounds**: below ``SMALL_ROUNDS`` (10) rounds the bootstrap alone is
  overconfident (on identical arms with log-normal noise it excluded "no
  difference" in 26% of 3-round comparisons, 12% of 4-round ones: it cannot
  see the uncertainty of so few values), so the interval is widened to hold
  Student's t interval of the mean log-ratio (Welch's, unpaired), which keeps
  its 95% at any count when the noise is roughly log-normal.  With the guard,
  6% at 3 rounds and about 5% from 4 on (tests/test_stats.py checks it).
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

``adaptive_rounds`` adds rounds until the verdict resolves or the time budget
is spent, as pyperf and hyperfine do.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

CONFIDENCE = 0.95        # of every interval (the Student-t table below is for 95%)
RESAMPLES = 2000
SEED = 20261130          # fixed: the same rounds always give the same interval
MIN_ROUNDS = 3           # fewer rounds never give a verdict
SMALL_ROUNDS = 10        # below this, the interval is never narrower than Student's t interval
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


# Student's t, 97.5th percentile, 1 to 30 degrees of freedom (any statistics table).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: float) -> float:
    """Student's t 97.5th percentile (beyond 30 degrees of freedom, 1.96 + 2.4 / df: within 0.3%)."""
    k = max(1, math.floor(df))
    return T975[k - 1] if k <= len(T975) else 1.96 + 2.4 / k


def _t_interval(la: list, lb: list, paired: bool) -> Optional[tuple]:
    """Student's t interval of the mean log-ratio (paired) or of the difference of mean logs
    (Welch, unpaired); None when an arm has fewer than two values."""
    if paired:
        d = [x - y for x, y in zip(la, lb)]
        if len(d) < 2:
            return None
        m, h = statistics.fmean(d), t975(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
        return m - h, m + h
    if len(la) < 2 or len(lb) < 2:
        return None
    va, vb = statistics.variance(la) / len(la), statistics.variance(lb) / len(lb)
    m = statistics.fmean(la) - statistics.fmean(lb)
    if va + vb == 0:
        return m, m
    df = (va + vb) ** 2 / ((va * va / (len(la) - 1)) + (vb * vb / (len(lb) - 1)))
    h = t975(df) * math.sqrt(va + vb)
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
                       resamples: int = RESAMPLES, seed: int = SEED) -> _LogRatio:
    """The ratio of medians num / (scale x den) in logs, with its 95% interval: the percentile
    bootstrap, and below ``SMALL_ROUNDS`` rounds at least Student's t interval of the log-ratios.

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
    if out.n < 2:
        return out
    rng = random.Random(seed)
    stats = []
    if paired:
        n = len(la)
        idx = range(n)
        for _ in range(max(1, resamples)):
            pick = rng.choices(idx, k=n)
            stats.append(_median([la[i] for i in pick]) - _median([lb[i] for i in pick]) - shift)
    else:
        for _ in range(max(1, resamples)):
            stats.append(_median(rng.choices(la, k=len(la))) - _median(rng.choices(lb, k=len(lb))) - shift)
    stats.sort()
    alpha = 1.0 - CONFIDENCE
    lo_i = min(len(stats) - 1, max(0, math.floor(alpha / 2 * len(stats))))
    hi_i = min(len(stats) - 1, max(0, math.ceil((1 - alpha / 2) * len(stats)) - 1))
    out.low, out.high = min(stats[lo_i], out.est), max(stats[hi_i], out.est)
    if out.n < SMALL_ROUNDS:
        # With few rounds the bootstrap cannot see its own uncertainty: on identical arms with
        # three rounds it excludes "no difference" a quarter of the time.  Student's t holds its
        # 95% at any count when the noise is roughly log-normal; the wider of the two is kept.
        t = _t_interval(la, lb, paired)
        if t is not None:
            out.low, out.high = min(out.low, t[0] - shift), max(out.high, t[1] - shift)
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
            resamples: int = RESAMPLES) -> Estimate:
    """Speed ``a`` over speed ``b`` (samples per second, higher is faster): the ratio of medians.

    "faster" / "slower" only when the interval excludes 1 +- ``margin``;
    "equivalent" when it lies inside it (only with a margin).
    """
    m = math.log1p(_margin(margin))
    r = log_ratio_interval(a, b, paired=paired, seed=seed, resamples=resamples)
    regions = [(FASTER, m, math.inf, f"the interval lies above {1 + _margin(margin):g}"),
               (SLOWER, -math.inf, -m, f"the interval lies below {1 / (1 + _margin(margin)):g}")]
    if m > 0:
        regions.append((EQUIVALENT, -m, m, f"the interval lies within {_margin(margin):.0%} of 1"))
    verdict, more, _, why = _judge(r, regions, None)
    return _estimate("ratio", r, verdict, more, False, why, lambda x: _exp(x))


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


def _estimate(kind: str, r: _LogRatio, verdict: str, more, impossible: bool, why: str, f) -> Estimate:
    return Estimate(kind=kind, estimate=None if r.est is None else f(r.est),
                    low=None if r.low is None else f(r.low), high=None if r.high is None else f(r.high),
                    rounds=r.n, verdict=verdict, more_rounds=more if verdict == INCONCLUSIVE else None,
                    impossible=impossible, reason=why)


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
# Adaptive rounds


@dataclass
class Adaptive:
    """What ``adaptive_rounds`` measured and why it stopped."""

    data: dict                       # arm -> values, in round order (None where a round gave none)
    rounds: int
    estimate: Optional[Estimate]
    spent: float                     # seconds, by the clock given
    stopped: str                     # "resolved", "budget spent", "max rounds", "cannot resolve", "no budget"


def adaptive_rounds(run_round: Callable[[int], dict], judge: Callable[[dict], Estimate], budget_s: float, *,
                    min_rounds: int = MIN_ROUNDS, max_rounds: int = 30,
                    clock: Callable[[], float] = time.monotonic,
                    reserve: Optional[Callable[[dict], float]] = None) -> Adaptive:
    """Run rounds until ``judge``'s verdict resolves, or the budget is spent.

    ``run_round(i)`` runs round i (0-based) of every arm, interleaved, and
    returns ``{arm: value}``; ``judge(data)`` turns ``{arm: [values]}`` into an
    :class:`Estimate` (for instance ``lambda d: compare(d["tuned"], d["baseline"])``).
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
    est: Optional[Estimate] = None
    stopped = "max rounds"
    n = 0
    if not (isinstance(budget_s, (int, float)) and budget_s > 0):
        return Adaptive(data, 0, None, 0.0, "no budget")
    while n < max(1, max_rounds):
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
        if n >= min_rounds:
            est = judge(data)
            if est.resolved:
                stopped = "resolved"
                break
            if est.more_rounds is None:
                stopped = "cannot resolve"
                break
    if est is None and n:
        est = judge(data)
    return Adaptive(data, n, est, clock() - start, stopped)
