"""Statistics that say "inconclusive": ratios of medians over interleaved rounds (in logs: nothing
overflows), their intervals (a paired bootstrap widened to hold Student's t: the bootstrap alone is
overconfident with few rounds and heavy tails), verdicts only when an interval lies on one side, and
adaptive rounds whose every look is judged at Pocock's level so that stopping at the first verdict keeps
its 95% (tests/test_stats.py checks the false-alarm rate).  The method and its sources: docs/verify-train.md
("Statistics").  Standard library only, a fixed seed: the same numbers always give the same interval.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Optional, Sequence

CONFIDENCE = 0.95        # of every interval (a sequential look's is higher: Looks)
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
    # The interval rests on fewer rounds than any verdict needs (MIN_ROUNDS): with one degree of freedom
    # Student's t stretches it beyond anything a measurement says (0.00x to 1820361x from 2 rounds), so it is
    # kept here and never stated: the reports say "inconclusive (N rounds)" and how many more would resolve it.
    interval_unresolved: bool = False

    @property
    def resolved(self) -> bool:
        return self.verdict != INCONCLUSIVE

    @property
    def interval(self) -> Optional[tuple[float, float]]:
        """(low, high) when there is an interval worth stating; None with too few rounds for one."""
        if self.interval_unresolved or self.low is None or self.high is None:
            return None
        return self.low, self.high

    def to_dict(self, name: str = "estimate") -> dict:
        """JSON-ready, the figure under ``name`` (``ratio``, ``cost``, ``share``)."""
        d = asdict(self)
        d[name] = d.pop("estimate")
        return d


def _valid(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


_median = statistics.median


def _exp(x: float) -> float:
    return math.exp(max(-MAX_LOG, min(MAX_LOG, x)))


def _one_less(x: float) -> float:
    """A cost from a log-ratio: 1 - exp(x)."""
    return 1.0 - _exp(x)


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile at ``p`` (0.5 < p < 1) with ``df`` whole degrees of freedom (beyond 1000,
    1000: a little wider): P(|T| <= t) in closed form (Abramowitz & Stegun 26.7.3-4), inverted by bisection."""
    df = max(1, min(1000, int(df)))

    def within(t: float) -> float:
        th = math.atan(t / math.sqrt(df))
        c2, term, total, odd = math.cos(th) ** 2, 1.0, 1.0, df % 2
        for j in range(1, (df - 1) // 2 if odd else df // 2):
            term *= c2 * (2 * j - 1 + odd) / (2 * j + odd)
            total += term
        return (2 / math.pi * (th + (math.sin(th) * math.cos(th) * total if df > 1 else 0.0)) if odd
                else math.sin(th) * total)
    lo, hi = 0.0, 1e7   # beyond the quantile of any level used (df 1 at 1 - 1e-7: 3e6)
    for _ in range(90):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if within(mid) < 2 * p - 1 else (lo, mid)
    return hi


def _t_interval(la: list, lb: list, paired: bool, confidence: float) -> Optional[tuple]:
    """Student's t interval of the mean log-ratio (paired) or of the difference of mean logs (Welch's,
    unpaired: its degrees of freedom rounded down, a little wider), and its standard error: (low, high, se);
    None with fewer than two values."""
    arms = [[x - y for x, y in zip(la, lb)]] if paired else [la, lb]
    if min(len(x) for x in arms) < 2:
        return None
    means = [math.fsum(x) / len(x) for x in arms]
    v = [math.fsum((y - m) ** 2 for y in x) / (len(x) - 1) / len(x) for x, m in zip(arms, means)]
    df = len(la) - 1 if paired or not sum(v) else sum(v) ** 2 / sum(w * w / (len(x) - 1) for w, x in zip(v, arms))
    se = math.sqrt(sum(v))
    m, h = means[0] - sum(means[1:]), t_quantile((1 + confidence) / 2, max(1, math.floor(df))) * se
    return m - h, m + h, se


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
    sd = statistics.stdev([p - r * w for p, w in zip(part, whole)])
    h = t_quantile(0.975, n - 1) * sd / (total / n) / math.sqrt(n)
    return r, r - h, r + h


@dataclass
class _LogRatio:
    """log(median(num) / (scale x median(den))) with its bootstrap interval, in logs."""

    est: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    n: int = 0
    se: Optional[float] = None          # Student's standard error of the log-ratio (None below two rounds)
    confidence: float = CONFIDENCE


def log_ratio_interval(num: Sequence, den: Sequence, *, paired: bool = True, scale: float = 1.0,
                       resamples: int = RESAMPLES, seed: int = SEED, confidence: float = CONFIDENCE) -> _LogRatio:
    """The ratio of medians num / (scale x den) in logs, with its interval at ``confidence``: the
    percentile bootstrap widened to hold Student's t interval of the log-ratios (``resamples=0``: Student's
    t alone).  Values that are not finite positive numbers (a failed trial's None, 0, NaN) are left out;
    paired, the round is left out for both arms."""
    out = _LogRatio(confidence=confidence)
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
    out.low, out.high, out.se = min(out.est, t[0] - shift), max(out.est, t[1] - shift), t[2]
    rng, n, stats = random.Random(seed), len(la), []
    for _ in range(max(0, resamples)):
        if paired:
            pick = rng.choices(range(n), k=n)
            stats.append(_median([la[i] for i in pick]) - _median([lb[i] for i in pick]) - shift)
        else:
            stats.append(_median(rng.choices(la, k=len(la))) - _median(rng.choices(lb, k=len(lb))) - shift)
    if stats:
        stats.sort()
        tail = (1.0 - confidence) / 2
        lo_i, hi_i = max(0, math.floor(tail * len(stats))), min(len(stats), math.ceil((1 - tail) * len(stats))) - 1
        out.low, out.high = min(stats[min(lo_i, len(stats) - 1)], out.low), max(stats[max(hi_i, 0)], out.high)
    return out


# A verdict holds when the interval (in logs) lies strictly inside its region, given as
# (verdict, low bound or -inf, high bound or inf, why in words).


Region = tuple[str, float, float, str]   # (verdict, low bound or -inf, high bound or inf, why in words)


def _judge(r: _LogRatio, regions: list[Region],
           impossible_above: Optional[float]) -> tuple[str, Optional[int], bool, str]:
    """(verdict, more_rounds, impossible, reason) for an interval in logs."""
    impossible = impossible_above is not None and r.est is not None and r.est > impossible_above
    if r.est is None:
        return INCONCLUSIVE, MIN_ROUNDS, False, "no round measured both"
    if r.n < MIN_ROUNDS or r.low is None or r.high is None:
        return (INCONCLUSIVE, _rounds_to_resolve(r, regions), impossible,
                f"{r.n} round(s); at least {MIN_ROUNDS} are needed")
    for verdict, a, b, why in regions:
        if r.low > a and r.high < b:
            if impossible and verdict != FAILED:
                break   # an impossible figure is never a result
            return verdict, None, impossible, why
    # The likeliest resolution: the region the point estimate lies in.
    for _verdict, a, b, _ in regions:
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


def _rounds_to_resolve(r: _LogRatio, regions: list[Region]) -> int:
    """More rounds than ``r.n`` (fewer than MIN_ROUNDS) after which the interval would likely lie inside the
    region its estimate lies in: the spread of the rounds so far (Student's standard error times the square
    root of the rounds), at the t quantile of the rounds it would then rest on.  Without a spread (one round)
    or a region, the rounds that make MIN_ROUNDS; more than 100: 101."""
    least = MIN_ROUNDS - r.n
    if r.est is None or r.se is None or r.n < 2:
        return least
    distance = None
    for _verdict, a, b, _ in regions:
        if a < r.est < b:
            distance = min(r.est - a, b - r.est)
    if distance is None:
        return least
    spread = r.se * math.sqrt(r.n)
    for n in range(MIN_ROUNDS, r.n + 101):
        if t_quantile((1 + r.confidence) / 2, n - 1) * spread / math.sqrt(n) < distance:
            return max(least, n - r.n)
    return 101


def _margin(m: Any) -> float:
    if isinstance(m, (int, float)) and math.isfinite(m):
        return min(0.99, max(0.0, float(m)))
    return 0.0


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
    return _estimate("ratio", r, verdict, more, False, why, _exp, confidence)


def cost(instrumented: Sequence, bare: Sequence, *, margin: float = 0.0, paired: bool = True,
         seed: int = SEED, resamples: int = RESAMPLES) -> Estimate:
    """What instrumentation costs: 1 - instrumented / bare speed.  "costs" above ``margin``, "negligible"
    below it (with a margin); below zero beyond noise (the instrumented loop faster) a "failed measurement"."""
    m = _margin(margin)
    r = log_ratio_interval(instrumented, bare, paired=paired, seed=seed, resamples=resamples)
    # In log(instrumented / bare): a cost above m is a ratio below 1 - m.
    e = _at_most_one("cost", r, "a negative cost beyond noise: the instrumented loop cannot be faster",
                     (COSTS, -math.inf, math.log1p(-m), f"the interval lies above {m:.0%}"),
                     (NEGLIGIBLE, math.log1p(-m), math.inf, f"the interval lies below {m:.0%}"), m, _one_less)
    return replace(e, low=e.high, high=e.low)  # 1 - ratio reverses the order: the ratio's high end is the cost's low


def share(part: Sequence, whole: Sequence, *, scale: float = 1.0, margin: float = 0.0, paired: bool = True,
          seed: int = SEED, resamples: int = RESAMPLES) -> Estimate:
    """A share that cannot exceed 1: part / (scale x whole), as a ratio of medians: a run's share of its
    compute-only bound (paired by round), or scaling efficiency (N processes' speed over one's, ``scale``
    N, unpaired).  "below" under 1, "reached" within ``margin`` of 1; above 1 beyond noise "failed
    measurement"; otherwise the figure and its interval are clipped at 1."""
    m = _margin(margin)
    r = log_ratio_interval(part, whole, paired=paired, scale=scale, seed=seed, resamples=resamples)
    e = _at_most_one("share", r, "above 100% beyond noise: a share of a bound cannot exceed it",
                     (BELOW, -math.inf, 0.0, "the interval lies below 100%"),
                     (REACHED, math.log1p(-m), math.inf, f"the interval lies within {m:.0%} of 100%"), m, _exp)
    if e.verdict == FAILED:
        return e
    # Judged, the share is said as what is possible: its figure and interval end at 100% (``impossible``
    # still says when the point estimate lay above it).
    return replace(e, estimate=_at_most(1.0, e.estimate), low=_at_most(1.0, e.low), high=_at_most(1.0, e.high))


def _at_most(bound: float, x: Optional[float]) -> Optional[float]:
    return None if x is None else min(bound, x)


def _at_most_one(kind: str, r: _LogRatio, failed: str, result: Region, within: Region, m: float,
                 f: Callable[[float], float]) -> Estimate:
    """A figure whose ratio cannot exceed 1 (above it beyond noise: a failed measurement): its verdict
    among ``result`` and, with a margin ``m``, ``within``."""
    verdict, more, impossible, why = _judge(r, [(FAILED, 0.0, math.inf, failed), result] + ([within] if m else []), 0.0)
    return _estimate(kind, r, verdict, more, impossible, why, f)


def _estimate(kind: str, r: _LogRatio, verdict: str, more: Optional[int], impossible: bool, why: str,
              f: Callable[[float], float], confidence: float = CONFIDENCE) -> Estimate:
    def mapped(x: Optional[float]) -> Optional[float]:
        return None if x is None else f(x)

    return Estimate(kind=kind, estimate=mapped(r.est), low=mapped(r.low), high=mapped(r.high),
                    rounds=r.n, verdict=verdict, more_rounds=more if verdict == INCONCLUSIVE else None,
                    impossible=impossible, reason=why, confidence=confidence,
                    interval_unresolved=r.n < MIN_ROUNDS)


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
    """A sequential design: a look after every round from ``first`` to ``last``, each judged at
    Pocock's nominal level for that many looks, so that all of them together claim a difference
    between identical arms at most 5% of the time."""

    first: int
    last: int

    @property
    def most(self) -> int:
        return max(1, self.last - self.first + 1)

    @property
    def z(self) -> float:
        """The normal critical value every look shares (beyond the table, Bonferroni's: valid for any looks)."""
        return next((c for k, c in POCOCK.items() if k >= self.most), None) or NORMAL.inv_cdf(
            1 - (1 - CONFIDENCE) / 2 / self.most)

    @property
    def confidence(self) -> float:
        """Each look's nominal confidence (95% with one look)."""
        return 2 * NORMAL.cdf(self.z) - 1

    def taken(self, rounds: int) -> int:
        """The looks ``rounds`` rounds took."""
        return max(0, min(rounds, self.last) - self.first + 1)

    def to_dict(self, rounds: Optional[int] = None) -> dict[str, Any]:
        """The design, and with ``rounds`` the looks they took."""
        return {"procedure": "pocock" if self.most > 1 else "fixed", "first": self.first, "last": self.last,
                "most_looks": self.most, "z": round(self.z, 3), "confidence": round(self.confidence, 5),
                "looks": None if rounds is None else self.taken(rounds)}


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

    ``run_round(i)`` runs round i (0-based) of every arm, interleaved, and returns ``{arm: value}``;
    ``judge(data, confidence)`` turns ``{arm: [values]}`` into an :class:`Estimate` at that confidence
    (``lambda d, c: compare(d["tuned"], d["baseline"], confidence=c)``), or a list of them that resolves
    when every one does (an empty list never does).  Every look, from ``min_rounds`` to ``max_rounds``,
    is judged at the level of their :class:`Looks` (in the result): stopping at the first verdict keeps
    the 95%.  A round starts only when the time spent plus the longest round so far (and
    ``reserve(data)``, what comes after the rounds) fits ``budget_s``; the first whenever the budget is
    positive.  A verdict that more rounds cannot change (an estimate on the boundary) stops early.
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
