"""The search strategy on synthetic, noisy response surfaces (no torch, no clock)."""

import math
import random

import pytest

from debtorch.train.settings import Settings
from debtorch.tune.search import (Outcome, Search, coarse, default_space, grid_points, key, run_grid)


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
CPU_DIMS = default_space(START_CPU, "cpu", 2, ["fp32", "bf16"], conv=True)
START_GPU = Settings(num_workers=2, prefetch_factor=2, persistent_workers=True, start_method="fork",
                     precision="bf16", pin_memory=True, non_blocking=True, threads=1)
GPU_DIMS = default_space(START_GPU, "cuda", 16, ["fp32", "bf16"], conv=False)


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
    dims = default_space(START_CPU, "cpu", 2, ["fp32"], conv=True)[:1]  # channels_last only
    result = Search(same, budget_s=1000).run(START_CPU, dims)
    assert result.choices["channels_last"].rule == "tune.M005"


def test_candidates_are_interleaved_not_measured_back_to_back():
    result = Search(Surface(lambda s: 100.0, noise=0.05, seed=2), budget_s=1000).run(START_CPU, CPU_DIMS[:1])
    phases = [t.settings.precision for t in result.trials if t.phase == "precision"]
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
    dims = {d.name: d for d in default_space(START_GPU, "cuda", 16, ["fp32", "bf16", "fp16"], conv=True,
                                             max_workers=5)}
    assert dims["num_workers"].values == [0, 1, 2, 3, 4, 5]
    assert "pin_memory" in dims and dims["precision"].values == ["fp32", "bf16", "fp16"]
    cpu = {d.name for d in default_space(START_CPU, "cpu", 1, ["fp32"], conv=False)}
    assert cpu == {"num_workers", "prefetch_factor"}  # one CPU: no threads to choose, nothing else


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


def test_threads_follow_workers_only_on_the_rules_line():
    workers = next(d for d in CPU_DIMS if d.name == "num_workers")
    assert workers.set(START_CPU, 1).threads == 1 and workers.set(START_CPU, 3).threads == 1
    off_line = START_CPU.replace(threads=1)  # threads chosen by measurement: left alone
    assert workers.set(off_line, 0).threads == 1
