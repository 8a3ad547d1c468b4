"""The search strategy on synthetic, noisy response surfaces (no torch, no clock)."""

import math
import random

import pytest

from debtorch.train.device import CPU, CUDA
from debtorch.train.settings import Settings
from debtorch.tune.search import (
    MAX_SPLITS,
    Outcome,
    Search,
    coarse,
    cpu_splits,
    default_space,
    grid_points,
    key,
    run_grid,
)


class Surface:
    """A machine made of a formula: true samples/s per settings, log-normal noise, rare
    outliers, a cost per trial, and optionally drift (the machine slowing down over time)."""

    def __init__(self, f, noise=0.03, seed=0, outliers=0.02, cost=lambda s: 2.0, drift=0.0, fail=lambda s: None):
        self.f, self.noise, self.rng, self.outliers = f, noise, random.Random(seed), outliers
        self.cost, self.drift, self.fail, self.calls = cost, drift, fail, 0

    def __call__(self, s):
        self.calls += 1
        err = self.fail(s)
        if err:
            return Outcome(None, self.cost(s), error=err)
        v = self.f(s) * math.exp(self.rng.gauss(0, self.noise)) * (1 - self.drift * self.calls)
        if self.rng.random() < self.outliers:
            v *= 0.6  # another process stole the CPU for a while
        return Outcome(v, self.cost(s), data_wait=0.1)


def two_core_cpu(s):
    """Like this VM: bf16 and NHWC pay, the two cores are busy computing, workers only steal them."""
    v = 40.0 * (1.7 if s.precision == "bf16" else 1.0)
    v *= 1.15 if s.channels_last else 1.0
    v *= {1: 0.6, 2: 1.0}[s.threads or 2]
    v *= 1.0 if s.num_workers == 0 else 0.85 ** s.num_workers
    return v


def gpu_box(s):
    """A GPU fed by CPU workers: throughput rises with workers until 6, then flattens and falls."""
    w = s.num_workers
    fed = min(1.0, 0.15 + 0.14 * w) if w <= 6 else 0.99 - 0.01 * (w - 6)
    v = 1000.0 * fed * (1.25 if s.pin_memory else 1.0) * (2.0 if s.precision == "bf16" else 1.0)
    return v * (1.03 if s.prefetch_factor == 4 else 1.0)


def shared_cores(s):
    """Like the built-in CNN on this VM: loading is a third of a step, so workers pay, but only
    with one compute thread left to them; workers beside two compute threads fight for the cores."""
    t, w = s.threads or 2, s.num_workers
    one_thread = 0.75  # compute speed with one thread, relative to two
    if w == 0:
        v = 1 / (1 / (1.0 if t == 2 else one_thread) + 0.5)   # loading inline: a third of the step
    elif t == 1:
        v = one_thread * 0.97 ** (w - 1)
    else:
        v = 0.6 * 0.98 ** (w - 1)
    return 300.0 * v * (1.8 if s.precision == "bf16" else 1.0)


START_CPU = Settings(num_workers=0, precision="bf16", threads=2)
CPU_DIMS = default_space(START_CPU, CPU, 2, ["fp32", "bf16"], conv=True)
START_GPU = Settings(num_workers=2, prefetch_factor=2, persistent_workers=True, start_method="fork",
                     precision="bf16", pin_memory=True, non_blocking=True, threads=1)
GPU_DIMS = default_space(START_GPU, CUDA, 16, ["fp32", "bf16"], conv=False)


def grid_cost(points, surface, repeats=3):
    return sum(surface.cost(p) for p in points) * repeats


@pytest.mark.parametrize("seed", range(10))
def test_finds_the_2core_optimum_within_a_quarter_of_the_grids_time(seed):
    points = grid_points(START_CPU, CPU_DIMS)
    best = max(two_core_cpu(p) for p in points)
    surface = Surface(two_core_cpu, seed=seed)
    budget = 0.25 * grid_cost(points, surface)
    result = Search(surface, budget_s=budget).run(START_CPU, CPU_DIMS)
    assert two_core_cpu(result.best) >= 0.95 * best
    assert result.spent <= budget
    assert result.best.channels_last and result.best.num_workers == 0


@pytest.mark.parametrize("seed", range(6))
def test_wide_worker_range_is_raced_coarse_then_refined(seed):
    surface = Surface(gpu_box, seed=seed, cost=lambda s: 1.0 + 0.1 * s.num_workers)
    points = grid_points(START_GPU, GPU_DIMS)
    best = max(gpu_box(p) for p in points)
    budget = 0.25 * grid_cost(points, surface)
    result = Search(surface, budget_s=budget).run(START_GPU, GPU_DIMS)
    assert gpu_box(result.best) >= 0.95 * best
    assert 5 <= result.best.num_workers <= 8
    tried = {t.settings.num_workers for t in result.trials}
    assert len(tried) <= 13  # far from every value from 0 to 32
    assert result.spent <= budget


def test_a_dimension_that_does_not_matter_is_pruned_with_that_reason():
    flat = Surface(lambda s: 100.0 * (1.5 if s.precision == "bf16" else 1.0), noise=0.02, seed=3)
    result = Search(flat, budget_s=500).run(START_CPU, CPU_DIMS)
    choice = result.choices["channels_last"]
    assert choice.rule == "tune.M005" and "no measurable difference" in choice.text
    assert not result.best.channels_last  # the rule's value is kept
    raced = [t for t in result.trials if t.phase == "channels_last"]
    assert len(raced) <= 2 * 7  # one race, never a second pass


def test_measured_reason_says_what_was_measured():
    result = Search(Surface(two_core_cpu, seed=1), budget_s=1000).run(START_CPU, CPU_DIMS)
    text = result.choices["precision"].text
    assert text.startswith("precision=bf16: ") and " samples/s vs " in text and "with precision=fp32, median of " in text
    assert result.choices["precision"].rule == "tune.M003"


def test_drift_alone_does_not_pick_the_first_measured_candidate():
    # Equal candidates on a machine that slows down 0.5% per trial: interleaving must cancel it.
    same = Surface(lambda s: 100.0, noise=0.01, seed=0, outliers=0, drift=0.005)
    dims = [d for d in default_space(START_CPU, CPU, 2, ["fp32"], conv=True) if d.name == "channels_last"]
    result = Search(same, budget_s=1000).run(START_CPU, dims)
    assert result.choices["channels_last"].rule == "tune.M005"


def test_candidates_are_interleaved_not_measured_back_to_back():
    precision = [d for d in CPU_DIMS if d.name == "precision"]
    result = Search(Surface(lambda s: 100.0, noise=0.04, seed=2), budget_s=1000).run(START_CPU, precision)
    phases = [t.settings.precision for t in result.trials if t.phase in ("precision", "leaders")]  # a small space
    assert len(phases) >= 4
    assert any(a != b for a, b in zip(phases, phases[1:]))
    assert phases[:2] != phases[2:4] or len(set(phases[:2])) == 2


def test_failed_trials_are_findings_and_never_chosen():
    def boom(s):
        return "DataLoader worker killed by a bus error" if s.num_workers >= 3 else None

    surface = Surface(lambda s: 100.0 * (1 + 0.2 * s.num_workers), seed=0, fail=boom)
    result = Search(surface, budget_s=1000).run(START_CPU, CPU_DIMS)
    assert result.best.num_workers == 2
    failed = [t for t in result.trials if t.error]
    assert failed and all(t.settings.num_workers >= 3 for t in failed)
    assert len({key(t.settings) for t in failed}) == len(failed)  # a failed config is not retried


def test_budget_is_never_overrun_by_more_than_one_trial():
    surface = Surface(two_core_cpu, seed=0, cost=lambda s: 3.0)
    for budget in (10, 25, 60):
        result = Search(surface, budget_s=budget).run(START_CPU, CPU_DIMS)
        assert result.spent <= budget + 3.0
        assert result.stopped.startswith("budget")


def test_a_failing_start_is_an_error():
    with pytest.raises(RuntimeError, match="starting settings failed: no"):
        Search(Surface(two_core_cpu, fail=lambda s: "no"), budget_s=100).run(START_CPU, CPU_DIMS)


def test_grid_covers_the_same_space_and_finds_the_optimum():
    points = grid_points(START_CPU, CPU_DIMS)
    # workers 0..4 with prefetch 2 or 4 when > 0 (9 loader points) x threads 2 x precision 2 x NHWC 2
    assert len(points) == 9 * 2 * 2 * 2
    assert len({key(p) for p in points}) == len(points)
    assert all(p.validate() == [] for p in points)
    result = run_grid(Surface(two_core_cpu, seed=0), points, repeats=3)
    assert len(result.trials) == 3 * len(points)
    assert two_core_cpu(result.best) >= 0.95 * max(two_core_cpu(p) for p in points)


def test_coarse_values_for_wide_ranges():
    assert coarse([0, 1, 2, 3]) == [0, 1, 2, 3]
    assert coarse(list(range(33))) == [0, 1, 2, 4, 8, 16, 32]
    assert coarse(list(range(1, 13))) == [1, 2, 4, 8, 12]


def test_space_respects_worker_bounds_and_device():
    dims = {d.name: d for d in default_space(START_GPU, CUDA, 16, ["fp32", "bf16", "fp16"], conv=True,
                                             max_workers=5)}
    assert {w for _, w in dims["split"].values} == {0, 1, 2, 3, 4, 5}
    assert {t for t, _ in dims["split"].values} == {1, 2, 3, 4}  # a GPU computes: a few threads feed it
    assert "pin_memory" in dims and dims["precision"].values == ["fp32", "bf16", "fp16"]
    cpu = {d.name: d for d in default_space(START_CPU, CPU, 1, ["fp32"], conv=False)}
    assert set(cpu) == {"split", "prefetch_factor"}  # one CPU: only workers to choose beside it
    assert cpu["split"].values == [(1, 0), (1, 1), (1, 2)]


def test_every_feasible_split_of_two_cpus_is_raced_and_a_model_lattice_of_many():
    every, first = cpu_splits(2)
    assert first == every == [(t, w) for t in (1, 2) for w in range(5)]
    every, first = cpu_splits(16, CPU)
    assert len(every) == 16 * 33 and len(first) == MAX_SPLITS
    assert (16, 0) in first and all(t in (1, 2, 4, 8, 16) and w in (0, 1, 2, 4, 8, 16, 32) for t, w in first)
    assert all(0.5 <= (t + w) / 16 <= 2 for t, w in first)  # near using every CPU once


@pytest.mark.parametrize("seed", range(6))
def test_workers_and_threads_that_only_pay_together_are_found(seed):
    # w1 t1 beats w0 t2, but no single change from w0 t2 to w1 t2 (or w0 t1) does:
    # coordinate descent finds it because threads follow the workers along the CPUs.
    points = grid_points(START_CPU, CPU_DIMS)
    best = max(shared_cores(p) for p in points)
    surface = Surface(shared_cores, seed=seed)
    result = Search(surface, budget_s=0.25 * grid_cost(points, surface)).run(START_CPU, CPU_DIMS)
    assert shared_cores(result.best) >= 0.95 * best
    assert result.best.num_workers >= 1 and result.best.threads == 1


def test_a_split_sets_threads_workers_and_what_goes_with_workers():
    split = next(d for d in CPU_DIMS if d.name == "split")
    s = split.with_value(START_CPU, (1, 2))
    assert (s.threads, s.num_workers, s.prefetch_factor, s.persistent_workers, s.start_method) == \
        (1, 2, 2, True, "fork")
    back = split.with_value(s, (2, 0))
    assert (back.threads, back.num_workers, back.prefetch_factor, back.persistent_workers) == (2, 0, None, False)
    assert split.get(s) == (1, 2) and split.decides() == ("threads", "num_workers")


# ---------------------------------------------------------------------------
# Issue 14: settings that interact.


def issue14(s):
    """Modelled on issue 14's table (2 vCPUs with AMX, the built-in CNN, bf16 and channels-last):
    with two busy cores, workers only pay once compute gives up a core.  t2 w0 is good (634),
    t1 w0 bad (399), t2 w2 bad (577), t1 w2 the best (744); the grid's seven best points all
    use one thread with one to four workers.  fp32 is 0.55x, no channels-last 0.925x."""
    split = {(2, 0): 634, (2, 1): 600, (2, 2): 577, (2, 3): 560, (2, 4): 545,
             (1, 0): 399, (1, 1): 726, (1, 2): 744, (1, 3): 738, (1, 4): 731}[(s.threads, s.num_workers)]
    v = split * (1.0 if s.precision == "bf16" else 0.55) * (1.0 if s.channels_last else 0.925)
    return v * (1.01 if s.num_workers and s.prefetch_factor == 4 else 1.0)


def in_region(s):
    """The issue's joint optimum: one compute thread, one to four workers (bf16, channels-last)."""
    return s.threads == 1 and s.num_workers >= 1 and s.precision == "bf16" and s.channels_last


def one_at_a_time(trial, start, repeats=3):
    """The search issue 14 describes: each setting raced on its own (3 interleaved runs of every
    value, the highest median wins), the others held where they are."""
    def workers(s, v):
        return s.replace(num_workers=v, prefetch_factor=(s.prefetch_factor or 2) if v else None,
                         persistent_workers=bool(v), start_method="fork" if v else None)

    steps = [(lambda s, v: workers(s, v), range(5), lambda s: True),
             (lambda s, v: s.replace(threads=v), (1, 2), lambda s: True),
             (lambda s, v: s.replace(precision=v), ("fp32", "bf16"), lambda s: True),
             (lambda s, v: s.replace(channels_last=v), (False, True), lambda s: True),
             (lambda s, v: s.replace(prefetch_factor=v), (2, 4), lambda s: s.num_workers > 0)]
    best, trials = start, 0
    for apply, values, active in steps:
        if not active(best):
            continue
        cands = [apply(best, v) for v in values]
        runs = {i: [] for i in range(len(cands))}
        for r in range(repeats):
            for i in (range(len(cands)) if r % 2 == 0 else reversed(range(len(cands)))):
                runs[i].append(trial(cands[i]).samples_per_s)
                trials += 1
        best = cands[max(runs, key=lambda i: sorted(runs[i])[len(runs[i]) // 2])]
    return best, trials


SEEDS = range(50)
GRID = grid_points(START_CPU, CPU_DIMS)                 # 72 points: 216 trials in a 3-run grid


def runs_of(search_trials, seeds=SEEDS):
    return [Search(Surface(issue14, noise=0.04, seed=seed), budget_s=2.0 * search_trials).run(START_CPU, CPU_DIMS)
            for seed in seeds]


def test_the_joint_split_is_found_where_one_at_a_time_misses_it_and_runs_agree():
    # 54 trials (a quarter of a 3-run grid) and 50 noise seeds: the split search lands on one
    # thread with workers every time; one setting at a time (33 trials) almost never does.
    results = runs_of(54)
    assert all(r.spent <= 108 for r in results)
    split = sum(r.best.threads == 1 and r.best.num_workers >= 1 for r in results)
    best = max(issue14(p) for p in GRID)
    optimum = sum(in_region(r.best) and issue14(r.best) >= 0.95 * best for r in results)
    baseline = [one_at_a_time(Surface(issue14, noise=0.04, seed=seed), START_CPU)[0] for seed in SEEDS]
    missed = sum(not (b.threads == 1 and b.num_workers >= 1) for b in baseline)
    assert split == 50 and optimum >= 47, (split, optimum)
    assert missed >= 45, missed
    # Repeated runs with different noise choose the same region (the rest of the settings too,
    # when the budget lets channels-last's 8% show through 4% noise: see the next test).
    regions = {(r.best.threads, r.best.num_workers > 0, r.best.precision) for r in results}
    assert regions == {(1, True, "bf16")}


def test_with_a_larger_budget_every_run_reaches_the_joint_optimum():
    results = runs_of(80)
    best = max(issue14(p) for p in GRID)
    assert sum(in_region(r.best) and issue14(r.best) >= 0.95 * best for r in results) >= 48
    # The plateau (one thread with 1-4 workers, within 3% of each other) is within noise: said so.
    assert sum(r.within_noise for r in results) >= 45


def test_the_reason_says_the_split_was_searched():
    result = Search(Surface(issue14, noise=0.03, seed=5), budget_s=108).run(START_CPU, CPU_DIMS)
    choice = result.choices["split"]
    assert choice.rule == "tune.M006" and choice.fields == ("threads", "num_workers")
    assert choice.text.startswith("threads=1 workers=") and "splits of 2 CPUs raced" in choice.text


def layout(s):
    """Precision x memory format on an AMX CPU: bf16 pays only in NHWC (its fast kernels want
    channels-last); bf16 in NCHW is slower (reorders), and so is NHWC in fp32."""
    v = {("fp32", False): 100, ("bf16", False): 94, ("fp32", True): 90, ("bf16", True): 150}
    return v[(s.precision, s.channels_last)] * (1.0 if (s.threads, s.num_workers) == (2, 0) else 0.8)


START_FP32 = Settings(num_workers=0, precision="fp32", threads=2)


@pytest.mark.parametrize("seed", range(8))
def test_an_interaction_is_detected_and_its_combinations_tried(seed):
    result = Search(Surface(layout, noise=0.04, seed=seed), budget_s=200).run(START_FP32, CPU_DIMS)
    assert ("channels_last", "precision") in result.interactions
    assert result.best.precision == "bf16" and result.best.channels_last
    assert "interact" in result.choices["precision"].text and "interact" in result.choices["channels_last"].text
    assert result.spent <= 200
    baseline, _ = one_at_a_time(Surface(layout, noise=0.04, seed=seed), START_FP32)
    assert (baseline.precision, baseline.channels_last) == ("fp32", False)  # one at a time never sees it


def test_settings_that_do_not_interact_are_not_said_to():
    flagged = sum(bool(Search(Surface(two_core_cpu, noise=0.04, seed=seed), budget_s=200)
                       .run(START_CPU, CPU_DIMS).interactions) for seed in range(10))
    assert flagged <= 1


def test_a_flat_surface_is_within_noise_not_a_measured_winner():
    result = Search(Surface(lambda s: 100.0, noise=0.04, seed=3), budget_s=200).run(START_CPU, CPU_DIMS)
    assert result.within_noise and result.runner_up is not None
    assert result.close_call().startswith(f"within noise of {result.runner_up.short()} (")
    clear = Search(Surface(two_core_cpu, noise=0.02, seed=3), budget_s=300).run(START_CPU, CPU_DIMS)
    assert not clear.within_noise and clear.close_call() == ""


def test_switch_z_keeps_the_rules_on_a_flat_noisy_surface_and_still_takes_a_clear_gain():
    # A replay knob (benchmarks/tune_replay.py --search switch_z=2): a challenger must also lead by
    # z standard errors.  On a flat surface at 10% noise the default wanders off the rules' values
    # in some runs; with z = 2 it does so less often, and a clear 1.7x gain (bf16) is still taken.
    flat = lambda s: 100.0  # noqa: E731
    fp32 = Settings(num_workers=0, precision="fp32", threads=2)

    def moved(z):
        return sum(key(Search(Surface(flat, noise=0.10, seed=seed), budget_s=150, switch_z=z)
                       .run(fp32, CPU_DIMS).best) != key(fp32) for seed in range(12))

    assert moved(2.0) < moved(0.0)
    gain = Search(Surface(two_core_cpu, noise=0.10, seed=1), budget_s=300, switch_z=2.0).run(fp32, CPU_DIMS)
    assert gain.best.precision == "bf16"


@pytest.mark.parametrize("seed", range(5))
def test_a_first_race_cut_short_by_the_budget_does_not_fence_the_split_in(seed):
    # A data-bound workload: every extra loader worker pays, up to 4, with both threads computing.
    # A small budget races only the three most promising splits (w0 t2, w1 t1, w1 t2); the
    # refinement must go beyond the largest worker count raced, not only between raced values.
    def loader_bound(s):
        return 100.0 * (1 + 0.2 * s.num_workers) * (1.0 if (s.threads or 2) == 2 else 0.7)

    start = Settings(num_workers=0, precision="fp32", threads=2)
    dims = default_space(start, CPU, 2, ["fp32"], conv=False)
    surface = Surface(loader_bound, noise=0.02, seed=seed, outliers=0, cost=lambda s: 1.0 + 0.2 * s.num_workers)
    result = Search(surface, budget_s=40).run(start, dims)
    first = [t.settings for t in result.trials if t.phase == "split"][:3]
    assert {(s.threads, s.num_workers) for s in first} <= {(2, 0), (1, 1), (2, 1)}
    assert result.best.num_workers == 4 and result.best.threads == 2


@pytest.mark.parametrize("seed", range(6))
def test_cheap_settings_are_raced_before_the_expensive_split(seed):
    # Worker trials cost several times one without workers (start-up, the settled queue); channels-
    # last pays 20% everywhere and the split little.  Raced first, at the rules' split (no workers),
    # channels-last is found within a tight budget; raced after the split, the budget was gone.
    def surface_f(s):
        return 100.0 * (1.2 if s.channels_last else 1.0) * (1 + 0.02 * s.num_workers) * (
            1.0 if (s.threads or 2) == 2 else 0.8)

    start = Settings(num_workers=0, precision="fp32", threads=2)
    dims = default_space(start, CPU, 2, ["fp32"], conv=True)
    assert [d.name for d in dims][:3] == ["channels_last", "split", "prefetch_factor"]
    surface = Surface(surface_f, noise=0.05, seed=seed, cost=lambda s: 1.0 + 2.0 * s.num_workers)
    result = Search(surface, budget_s=45).run(start, dims)
    assert result.best.channels_last


@pytest.mark.parametrize("seed", range(5))
def test_a_small_space_is_measured_whole_once_then_its_leaders_race(seed):
    # 72 points of 2 s each fit half a budget of 400 s: one pass over all of them, then the leaders.
    points = grid_points(START_CPU, CPU_DIMS)
    surface = Surface(shared_cores, seed=seed)
    result = Search(surface, budget_s=400).run(START_CPU, CPU_DIMS)
    grid = [t for t in result.trials if t.phase == "grid"]
    assert {key(t.settings) for t in grid} | {key(START_CPU)} == {key(p) for p in points}
    assert len(grid) == len(points) - 1                               # the start was measured already
    assert result.trials.index(grid[-1]) < min(i for i, t in enumerate(result.trials) if t.phase == "leaders")
    assert shared_cores(result.best) >= 0.95 * max(shared_cores(p) for p in points)
    assert result.spent <= 400 and result.best.threads == 1 and result.best.num_workers >= 1
    # A setting the leaders do not need keeps the rules' value (flat in memory format here).
    assert result.choices["channels_last"].rule == "tune.M005" and not result.best.channels_last


def test_a_space_too_large_for_one_pass_is_searched_decision_by_decision():
    result = Search(Surface(shared_cores, seed=0), budget_s=200).run(START_CPU, CPU_DIMS)
    assert not any(t.phase == "grid" for t in result.trials)
