"""debtorch.stats: intervals that hold, verdicts only beyond noise, impossible figures flagged."""

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debtorch import stats

# Anything a trial could report, and worse: zeros, negatives, huge and tiny numbers, missing values.
value = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                  st.floats(min_value=1e-300, max_value=1e300))
positive = st.floats(min_value=1e-300, max_value=1e300)
arm = st.lists(value, max_size=12)
good_arm = st.lists(positive, min_size=0, max_size=12)


def noisy(rng, level, n, sigma):
    return [level * math.exp(rng.gauss(0, sigma)) for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(arm, arm, st.floats(), st.booleans(), st.floats(allow_nan=True))
def test_any_input_never_raises_and_the_interval_holds_the_estimate(a, b, margin, paired, scale):
    for e in (stats.compare(a, b, margin=margin, paired=paired, resamples=200),
              stats.cost(a, b, margin=margin, paired=paired, resamples=200),
              stats.share(a, b, scale=scale, margin=margin, paired=paired, resamples=200)):
        assert e.verdict in (stats.FASTER, stats.SLOWER, stats.EQUIVALENT, stats.COSTS, stats.NEGLIGIBLE,
                             stats.BELOW, stats.REACHED, stats.INCONCLUSIVE, stats.FAILED)
        if e.low is not None:
            assert e.low <= e.estimate <= e.high
            assert all(math.isfinite(x) for x in (e.low, e.estimate, e.high))
        if e.rounds < stats.MIN_ROUNDS:
            assert e.verdict == stats.INCONCLUSIVE
        assert (e.more_rounds is None) or (e.verdict == stats.INCONCLUSIVE and e.more_rounds >= 1)
        stats.resolve_hint(e.verdict, e.more_rounds)


@settings(max_examples=75, deadline=None)
@given(good_arm, st.floats(min_value=0, max_value=0.5))
def test_identical_arms_are_never_faster_or_slower(a, margin):
    e = stats.compare(a, list(a), margin=margin, resamples=200)
    assert e.verdict not in (stats.FASTER, stats.SLOWER)
    c = stats.cost(a, list(a), margin=margin, resamples=200)
    assert c.verdict not in (stats.COSTS, stats.FAILED)


@settings(max_examples=150, deadline=None)
@given(good_arm, good_arm, st.floats(min_value=0, max_value=0.5), st.booleans(),
       st.floats(min_value=0.5, max_value=8))
def test_impossible_figures_are_always_flagged_never_a_result(a, b, margin, paired, scale):
    c = stats.cost(a, b, margin=margin, paired=paired, resamples=200)
    if c.estimate is not None and c.estimate < 0:
        assert c.impossible and c.verdict in (stats.FAILED, stats.INCONCLUSIVE)
    if c.high is not None and c.high < 0 and c.rounds >= stats.MIN_ROUNDS:
        assert c.verdict == stats.FAILED
    s = stats.share(a, b, scale=scale, margin=margin, paired=paired, resamples=200)
    if s.estimate is not None and s.estimate > 1:
        assert s.impossible and s.verdict in (stats.FAILED, stats.INCONCLUSIVE)
    if s.low is not None and s.low > 1 and s.rounds >= stats.MIN_ROUNDS:
        assert s.verdict == stats.FAILED


def test_the_issues_confident_verdicts_are_inconclusive():
    # verify-train --quick printed "5.07x baseline (0.56-27.46)" and "0.34x (0.21-1.69)": 3 rounds each.
    e = stats.compare([56, 274.6, 253.5], [100, 10, 50])
    assert e.estimate == pytest.approx(5.07) and e.verdict == stats.INCONCLUSIVE
    assert e.low < 1 < e.high and e.more_rounds >= 1
    e = stats.compare([21, 169, 34], [100, 100, 100])
    assert e.estimate == pytest.approx(0.34) and e.verdict == stats.INCONCLUSIVE


def test_a_clear_difference_is_a_verdict_and_the_interval_is_reproducible():
    rng = random.Random(4)
    base, tuned = noisy(rng, 100, 9, 0.05), noisy(rng, 150, 9, 0.05)
    e = stats.compare(tuned, base)
    assert e.verdict == stats.FASTER and 1.3 < e.low < e.estimate < e.high < 1.75
    assert stats.compare(tuned, base) == e  # a fixed seed: the same rounds, the same interval
    assert stats.compare(base, tuned).verdict == stats.SLOWER


def test_noise_as_large_as_the_difference_is_inconclusive_and_more_rounds_resolve_it():
    rng = random.Random(7)
    base, tuned = noisy(rng, 100, 3, 0.15), noisy(rng, 110, 3, 0.15)
    e = stats.compare(tuned, base)
    assert e.verdict == stats.INCONCLUSIVE and e.more_rounds >= 1
    assert "more round" in stats.resolve_hint(e.verdict, e.more_rounds)
    base += noisy(rng, 100, 60, 0.15)
    tuned += noisy(rng, 110, 60, 0.15)
    assert stats.compare(tuned, base).verdict == stats.FASTER


def test_an_equivalence_margin_says_equivalent_when_the_interval_fits_inside():
    rng = random.Random(2)
    a, b = noisy(rng, 100, 15, 0.01), noisy(rng, 100, 15, 0.01)
    assert stats.compare(a, b).verdict == stats.INCONCLUSIVE
    assert stats.compare(a, b, margin=0.03).verdict == stats.EQUIVALENT


def test_costs_and_shares_in_their_own_words():
    bare = [100.0] * 5
    assert stats.cost([90, 91, 89, 90, 90], bare).verdict == stats.COSTS
    assert stats.cost([99.5, 99.6, 99.4, 99.5, 99.7], bare, margin=0.02).verdict == stats.NEGLIGIBLE
    neg = stats.cost([186, 190, 180], [100, 100, 100])          # the issue's "-86%"
    assert neg.verdict == stats.FAILED and neg.impossible and neg.high < 0
    assert stats.share([72, 70, 74, 71], [100, 99, 101, 100]).verdict == stats.BELOW
    bound = stats.share([329, 300, 350], [100, 120, 80])      # the issue's "reached 329%"
    assert bound.verdict == stats.FAILED and bound.low > 1
    half = stats.share([329, 60, 350], [100, 120, 80])        # one round below its bound: not beyond noise
    assert half.verdict == stats.INCONCLUSIVE and half.impossible
    eff = stats.share([922, 900, 950], [100, 95, 110], scale=2, paired=False)  # "461% scaling efficiency"
    assert eff.verdict == stats.FAILED and eff.estimate > 4
    assert stats.share([170, 175, 168], [100, 95, 105], scale=2, paired=False).verdict == stats.BELOW


class Machine:
    """Rounds of two arms on a fake clock: each round costs ``round_s``."""

    def __init__(self, ratio, sigma, round_s=2.0, seed=0):
        self.rng, self.ratio, self.sigma, self.round_s, self.now = random.Random(seed), ratio, sigma, round_s, 0.0

    def clock(self):
        return self.now

    def round(self, i):
        self.now += self.round_s
        return {"base": 100 * math.exp(self.rng.gauss(0, self.sigma)),
                "tuned": 100 * self.ratio * math.exp(self.rng.gauss(0, self.sigma))}


def judge(d, confidence):
    return stats.compare(d["tuned"], d["base"], confidence=confidence)


def test_adaptive_rounds_stop_when_the_verdict_resolves():
    # A clear 1.5x at 3% noise: every look at Pocock's level for rounds 3 to 30 (28 looks, 99.35%),
    # which three rounds (two degrees of freedom) cannot pass; the fourth does, and the rounds stop.
    m = Machine(1.5, 0.03)
    out = stats.adaptive_rounds(m.round, judge, budget_s=100, clock=m.clock)
    assert out.stopped == "resolved" and out.rounds == stats.MIN_ROUNDS + 1
    assert out.estimate.verdict == stats.FASTER and len(out.data["tuned"]) == out.rounds
    assert out.looks == stats.Looks(3, 30) and out.estimate.confidence == pytest.approx(0.9935, abs=1e-4)


def test_adaptive_rounds_add_rounds_for_a_close_call_and_never_overrun_the_budget():
    m = Machine(1.08, 0.08, seed=3)
    out = stats.adaptive_rounds(m.round, judge, budget_s=200, clock=m.clock)
    assert out.rounds > stats.MIN_ROUNDS
    assert out.spent <= 200
    assert out.stopped in ("resolved", "budget spent")
    tight = Machine(1.0, 0.08, seed=3)
    out = stats.adaptive_rounds(tight.round, judge, budget_s=9, clock=tight.clock)
    assert out.rounds == 4 and out.spent <= 9 and out.stopped == "budget spent"
    assert out.estimate.verdict == stats.INCONCLUSIVE


def test_adaptive_rounds_keep_the_reserve_for_what_comes_after():
    # Each round costs 2 s of the fake clock; 9 s are kept for the convergence runs.
    m = Machine(1.0, 0.08, seed=3)
    out = stats.adaptive_rounds(m.round, judge, budget_s=20, clock=m.clock, reserve=lambda data: 9.0)
    assert out.spent + 9.0 <= 20 and out.rounds == 5 and out.stopped == "budget spent"


def test_adaptive_rounds_without_a_budget_run_nothing():
    m = Machine(1.5, 0.03)
    out = stats.adaptive_rounds(m.round, judge, budget_s=0, clock=m.clock)
    assert out.rounds == 0 and out.estimate is None and m.now == 0


@pytest.mark.parametrize("rounds,most", [(3, 0.08), (4, 0.06), (6, 0.06), (12, 0.06)])
def test_identical_machines_rarely_get_a_verdict(rounds, most):
    # Two arms drawn from the same log-normal noise: a verdict is a false alarm.  The bootstrap
    # alone gives one in a quarter of 3-round comparisons; the small-sample guard keeps it near 5%.
    rng = random.Random(rounds)
    alarms = sum(stats.compare(noisy(rng, 100, rounds, 0.1), noisy(rng, 100, rounds, 0.1),
                               resamples=400, seed=k).verdict != stats.INCONCLUSIVE for k in range(300))
    assert alarms / 300 <= most


def test_a_clear_speedup_is_a_verdict_even_in_three_quiet_rounds():
    # The published run: 1.48x-1.62x in every round.
    assert stats.compare([373, 361, 402], [245, 236, 256]).verdict == stats.FASTER


# ---------------------------------------------------------------------------
# Sequential looks: the false-alarm rate of adaptive rounds (issue 25)


def test_pococks_constants_and_students_t_are_the_published_ones():
    # Jennison & Turnbull (2000), Table 2.1: C_P(K) for K = 2, 3, 5, 10 looks at a two-sided 5% level.
    for k, published in ((2, 2.178), (3, 2.289), (5, 2.413), (10, 2.555)):
        assert stats.Looks(1, k).z == pytest.approx(published, abs=0.003)
    assert stats.Looks(3, 3).confidence == pytest.approx(0.95, abs=1e-4)          # one look: a plain 95%
    assert stats.Looks(3, 30).most == 28 and stats.Looks(3, 30).confidence > stats.Looks(3, 5).confidence
    assert stats.Looks(1, 101).z > stats.Looks(1, 100).z                          # Bonferroni beyond the table
    # Student's t quantiles (any table): 97.5% and 99.5% at 1, 2, 10 and 30 degrees of freedom.
    for df, q975, q995 in ((1, 12.706, 63.657), (2, 4.303, 9.925), (10, 2.228, 3.169), (30, 2.042, 2.750)):
        assert stats.t_quantile(0.975, df) == pytest.approx(q975, abs=1e-3)
        assert stats.t_quantile(0.995, df) == pytest.approx(q995, abs=1e-3)


def verdict_at(a, b, confidence):
    """stats.compare's verdict, computed cheaply but exactly: its interval is the union of Student's t
    and the bootstrap, so it resolves only where Student's t alone (resamples=0) does."""
    alone = stats.compare(a, b, confidence=confidence, resamples=0)
    return stats.compare(a, b, confidence=confidence, resamples=200) if alone.resolved else alone


def naive(d, confidence):
    """The rule adaptive rounds had before (the negative control): every look at a plain 95%."""
    return verdict_at(d["tuned"], d["base"], stats.CONFIDENCE)


def sequential(d, confidence):
    return verdict_at(d["tuned"], d["base"], confidence)


def runs(judge, n, first, last, ratio=1.0, sigma=0.10):
    """n seeded runs of adaptive rounds on log-normal rounds: [(verdict, rounds)]."""
    out = []
    for seed in range(n):
        m = Machine(ratio, sigma, seed=seed)
        got = stats.adaptive_rounds(m.round, judge, math.inf, min_rounds=first, max_rounds=last)
        out.append((got.estimate.verdict, got.rounds))
    return out


def bound(n):
    """5% plus its binomial margin over n runs (the normal approximation's 95% one-sided 1.645 sd)."""
    return 0.05 + 1.645 * math.sqrt(0.05 * 0.95 / n)


@pytest.mark.parametrize("n,first,last", [(1000, 3, 30), (2000, 3, 5)])
def test_identical_arms_get_a_verdict_in_at_most_5_percent_of_adaptive_runs(n, first, last):
    # Adaptive rounds look after every round from `first` to `last` (verify-train: 3 to 30, --quick
    # 3 to 5) and stop at the first verdict.  On identical arms every verdict is a false alarm: Pocock's
    # level keeps them at 5% over all the looks; a plain 95% at every look (optional stopping) does not.
    alarms = sum(v != stats.INCONCLUSIVE for v, _ in runs(sequential, n, first, last)) / n
    control = n if last < 10 else 300   # peeking's rate is far above the bound: fewer runs show it (faster)
    peeking = sum(v != stats.INCONCLUSIVE for v, _ in runs(naive, control, first, last)) / control
    assert alarms <= bound(n) and peeking > bound(control)


def test_the_power_it_costs_a_real_20_percent_difference():
    # A 1.2x difference at 10% noise a trial: Pocock's level needs more rounds than peeking at 95%
    # (the price of an honest 5%), but still finds it in almost every run within verify-train's 30.
    before = runs(naive, 200, 3, 30, ratio=1.2)
    after = runs(sequential, 200, 3, 30, ratio=1.2)
    assert sum(v == stats.FASTER for v, _ in after) >= 0.95 * 200
    assert not any(v == stats.SLOWER for v, _ in before + after)
    median = statistics.median
    assert median(r for _, r in before) < median(r for _, r in after) <= 2 * median(r for _, r in before)


def test_fewer_rounds_than_a_verdict_needs_keep_their_interval_unstated_and_project_the_rounds():
    # Two rounds gave "0.00x to 1820361.66x" in verify-train: Student's t with one degree of freedom at the
    # looks' level.  The figures stay (the JSON), marked; the reports state none of them.
    level = stats.Looks(2, 21).confidence
    wide = stats.compare([100, 300], [100, 100], confidence=level)
    assert wide.verdict == stats.INCONCLUSIVE and wide.interval_unresolved and wide.interval is None
    assert wide.low is not None and wide.high > 1e6   # kept, for the JSON
    assert wide.to_dict("ratio")["interval_unresolved"] is True
    # How many more: from the spread of the rounds so far, not "a third round" whatever they say.
    assert 10 < wide.more_rounds <= 100
    tight = stats.compare([110, 112], [100, 100])
    assert tight.interval_unresolved and tight.more_rounds == 1   # rounds this alike: a third resolves it
    assert stats.compare([110, 112, 111], [100, 100, 100]).verdict == stats.FASTER
    one = stats.compare([110], [100])
    assert one.interval_unresolved and one.more_rounds == stats.MIN_ROUNDS - 1   # no spread yet: the least
    three = stats.compare([100, 300, 120], [100, 100, 100])
    assert not three.interval_unresolved and three.interval == (three.low, three.high)
