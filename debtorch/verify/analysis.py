"""From trial results to what verify-train reports (docs/verify-train.md): pure functions, torch-free.

A *trial* is the engine's :class:`~debtorch.train.result.TrialResult`; an *arm* is one kind of trial
repeated over the interleaved rounds.  Every comparison is a ratio of medians over the paired rounds with
an interval and a verdict from :mod:`debtorch.stats`; a figure that cannot exceed 100% or fall below 0 is a
failed measurement beyond noise, never a result.  What it concludes is typed (:mod:`debtorch.verify.results`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeGuard

from debtorch import stats
from debtorch.inputs import finite
from debtorch.train.result import DistributedResult, TrialResult
from debtorch.train.settings import Settings
from debtorch.verify.results import (
    ARMS,
    BASELINE,
    BASELINE_BOUND,
    TUNED,
    TUNED_BARE,
    TUNED_BOUND,
    TUNED_SYNC,
    ArmSummary,
    Attribution,
    AttributionArm,
    BoundFractions,
    Comparison,
    Convergence,
    CurveCheck,
    InputBound,
    Limit,
    NonFinite,
    Scaling,
    Sequential,
    SimSummary,
    Summary,
    SyncCost,
)

if TYPE_CHECKING:   # the plan and what it measured are made where the plan runs, which imports this module
    from debtorch.verify.measure import Measured, Plan


SMOOTH = 5            # steps in a running mean (the engine's time-to-target uses the same)
LOSS_TOL_REL = 0.10   # AMP may trail fp32 by 10% of fp32's running-mean loss ...
LOSS_TOL_ABS = 0.02   # ... but a gap below this is never called a divergence

INSTRUMENTATION_MARGIN = 0.02   # a cost whose interval lies below 2% is "negligible" (verify-train's target)
BOUND_MARGIN = 0.05             # a share whose interval lies within 5% of its bound has "reached" it
RESULTS = (stats.FASTER, stats.SLOWER, stats.EQUIVALENT, stats.COSTS, stats.NEGLIGIBLE, stats.BELOW, stats.REACHED)


def _finite(value: Any) -> TypeGuard[float]:
    """A real number, neither NaN nor infinite (:func:`debtorch.inputs.finite`)."""
    return finite(value)


def _median(values: Sequence[Any]) -> Optional[float]:
    vals = [v for v in values if _finite(v)]
    return statistics.median(vals) if vals else None


def _max(values: Sequence[Any]) -> Optional[float]:
    vals = [v for v in values if _finite(v)]
    return max(vals) if vals else None


def _between_steps(r: TrialResult) -> Optional[float]:
    """The share of a trial's timed window spent between its steps (bookkeeping), when it was timed per step."""
    if _finite(r.overhead_s) and _finite(r.wall_s) and r.wall_s and r.wall_s > 0:
        return r.overhead_s / r.wall_s
    return None


def summarise(results: Sequence[TrialResult]) -> ArmSummary:
    """Median, spread and breakdown of one arm's trials."""
    sps = [r.samples_per_s for r in results]
    good = [v for v in sps if _finite(v) and v > 0]
    med = statistics.median(good) if good else None
    spread = None
    if good and med:
        spread = (max(good) - min(good)) / med
    return ArmSummary(
        runs=len(good), samples_per_s=med, samples_per_s_min=min(good) if good else None,
        samples_per_s_max=max(good) if good else None, spread=spread, samples_per_s_all=sps,
        data_wait_share=_median([r.data_wait_share for r in results]),
        step_s=_median([r.step_median_s for r in results]),
        data_wait_step_s=_median([_median(r.data_wait_s or []) for r in results]),
        compute_step_s=_median([_median(r.compute_s or []) for r in results]),
        peak_host_bytes=_max([r.peak_host_bytes for r in results]),
        peak_device_bytes=_max([r.peak_device_bytes for r in results]),
        gpu_util=_median([r.gpu_util_mean for r in results]),
        between_steps_share=_median([_between_steps(r) for r in results]),
        notes=sorted({n for r in results for n in (r.notes or [])}))


def paired_ratios(num: Sequence[Optional[TrialResult]], den: Sequence[Optional[TrialResult]]) -> list[float]:
    """num[i] / den[i] for the rounds where both ran (samples per second)."""
    out = []
    for a, b in zip(num, den):
        x = a.samples_per_s if a is not None else None
        y = b.samples_per_s if b is not None else None
        if _finite(x) and _finite(y) and x > 0 and y > 0:
            out.append(x / y)
    return out


def _sps(results: Sequence[Any]) -> list[Optional[float]]:
    """The rates of trials (or of multi-process runs), None for one missing."""
    return [r.samples_per_s if r is not None else None for r in results]


def speedup(tuned: Sequence[TrialResult], baseline: Sequence[TrialResult],
            confidence: float = stats.CONFIDENCE) -> Comparison:
    """Tuned over baseline: the ratio of medians over the paired rounds, its interval at ``confidence``
    and its verdict (faster, slower or inconclusive, see debtorch.stats)."""
    estimate = stats.compare(_sps(tuned), _sps(baseline), confidence=confidence)
    return Comparison("ratio", estimate, paired_ratios(tuned, baseline))


def instrumentation_cost(instrumented: Sequence[TrialResult], bare: Sequence[TrialResult]) -> Comparison:
    """Throughput the per-step clocks and gauges cost: 1 - instrumented / bare, paired by round,
    with its 95% interval and verdict: costs, negligible (below 2%), inconclusive, or a failed
    measurement (negative beyond noise: the instrumented loop cannot be faster)."""
    estimate = stats.cost(_sps(instrumented), _sps(bare), margin=INSTRUMENTATION_MARGIN)
    return Comparison("cost", estimate, [1.0 - r for r in paired_ratios(instrumented, bare)])


def scaling(multi: Sequence[DistributedResult], single: Sequence[TrialResult], nproc: int) -> Comparison:
    """Scaling efficiency: N processes' samples/s over N times one process's (ratio of medians;
    the runs were not in the same rounds, so each is resampled on its own).  Above 100% beyond
    noise is a failed measurement."""
    return Comparison("efficiency", stats.share(_sps(multi), _sps(single), scale=max(1, nproc or 1), paired=False))


# ---------------------------------------------------------------------------
# Attribution: what each change of the tuned settings contributes, so that a speed-up is never
# credited to a set of changes that one of them alone explains

# The settings a config changes, in groups that are taken out of tuned one at a time ("tuned
# without X": X's fields back at the baseline's values), measured in the same interleaved rounds.
# The schedule changes no throughput: it is attributed by a convergence run of tuned with the
# baseline's schedule (time to target with the same recipe).
GROUPS = (
    ("precision", ("precision", "tf32")),
    ("loader", ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "start_method",
                "non_blocking")),
    ("threads", ("threads",)),
    ("channels_last", ("channels_last",)),
    ("fused optimizer", ("fused_optimizer",)),
    ("kernels", ("cudnn_benchmark", "compile")),
    ("batch", ("micro_batch", "accumulation_steps")),
)
SCHEDULE = ("lr_schedule", "max_lr", "pct_start")


def _word(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"{name} {'on' if value else 'off'}"
    return f"{name} {value if value is not None else 'unset'}"


def change_words(baseline: Settings, tuned: Settings, fields: Sequence[str]) -> str:
    """'precision bf16', 'num_workers 2, prefetch_factor 2, ...': what tuned sets differently."""
    return ", ".join(_word(f, getattr(tuned, f)) for f in fields if getattr(tuned, f) != getattr(baseline, f))


def attribution_plan(baseline: Settings, tuned: Settings, default_threads: Optional[int] = None) -> list[AttributionArm]:
    """One entry per group of settings that tuned changes: its ``change`` in words, and either the ``arm``
    that runs tuned without it (``without <group>``, or ``baseline`` when it is the only change) with its
    ``settings``, or a ``note`` saying why nothing needs measuring (threads at PyTorch's own count here)."""
    out: list[AttributionArm] = []
    arms = {_key(baseline): BASELINE, _key(tuned): TUNED}
    for group, fields in GROUPS:
        words = change_words(baseline, tuned, fields)
        if not words:
            continue
        if group == "threads" and baseline.threads is None and default_threads and tuned.threads == default_threads:
            note = f"{default_threads} threads is PyTorch's own choice here: nothing changes"
            out.append(AttributionArm(group, words, note=note))
            continue
        without = tuned.replace(**{f: getattr(baseline, f) for f in fields})
        if without.validate():
            out.append(AttributionArm(group, words, note="cannot be taken out alone (the other settings need it)"))
            continue
        arm = arms.setdefault(_key(without), f"without {group}")
        out.append(AttributionArm(group, words, arm=arm, settings=without.to_dict()))
    return out


def _key(s: Settings) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in s.to_dict().items()))


def schedule_change(baseline: Settings, tuned: Settings) -> str:
    """'lr_schedule onecycle, ...' when tuned's learning-rate schedule differs from the baseline's."""
    return change_words(baseline, tuned, SCHEDULE)


def attribution(plan: Sequence[AttributionArm], trials: dict[str, list[TrialResult]]) -> list[Attribution]:
    """The plan's entries with what each group contributes: tuned over tuned-without-it, paired
    by round (a ratio with its interval and verdict, like the speed-up)."""
    out = []
    tuned = trials.get(TUNED) or []
    for entry in plan:
        ratio = None
        if entry.arm:
            ratio = Comparison("ratio", stats.compare(_sps(tuned), _sps(trials.get(entry.arm) or [])))
        out.append(Attribution(entry, ratio))
    return out


DISTURBED = 0.5  # a trial below half its arm's median samples/s ran while something else held the machine


def disturbed_rounds(trials: dict[str, list[TrialResult]], arms: Sequence[str] = (BASELINE, TUNED, TUNED_BARE)) -> list[int]:
    """1-based rounds in which a trial of ``arms`` ran at under ``DISTURBED`` times its arm's median
    (another process took a core for part of it: medians resist that, ranges do not)."""
    out = set()
    for arm in arms:
        results = trials.get(arm) or []
        med = summarise(results).samples_per_s
        if not med:
            continue
        for i, r in enumerate(results):
            x = r.samples_per_s
            if _finite(x) and x < DISTURBED * med:
                out.add(i + 1)
    return sorted(out)


def bound_fraction(arm: Sequence[TrialResult], bound: Sequence[TrialResult]) -> Comparison:
    """How close an arm's trials come to its compute-only bound's, paired by round (1.0: data
    loading costs nothing): ``share`` with its interval and verdict (below, reached, inconclusive;
    above 100% beyond noise is a failed measurement)."""
    return Comparison("share", stats.share(_sps(arm), _sps(bound), margin=BOUND_MARGIN))


def bound_below_rate(arm: ArmSummary, bound: ArmSummary) -> str:
    """Why an arm's compute-only bound is a failed measurement when its median came out below the arm's
    own measured rate by more than ``BOUND_MARGIN`` (a ceiling cannot be beaten: a bound trial slowed by
    another process), whatever the rounds; '' otherwise."""
    rate, ceiling = arm.samples_per_s, bound.samples_per_s
    if not (_finite(rate) and _finite(ceiling)) or ceiling >= rate * (1 - BOUND_MARGIN):
        return ""
    return (f"the compute-only bound ({ceiling:.1f} samples/s) came out below the measured rate ({rate:.1f}): "
            "a bound cannot be beaten, so a bound trial was slowed (another process?)")


def _failed_bound(share: Comparison, arm: ArmSummary, bound: ArmSummary) -> Comparison:
    """``share``, a failed measurement when the bound came out below the arm's own rate."""
    below = bound_below_rate(arm, bound)
    if not below or share.verdict == stats.FAILED:
        return share
    failed = dataclasses.replace(share.estimate, verdict=stats.FAILED, more_rounds=None, reason=below)
    return Comparison(share.name, failed, share.pairs)


# ---------------------------------------------------------------------------
# A simulated accelerator (debtorch.train.sim): its rate is the bound, a per-step sync has a price


def _per_step(r: Optional[TrialResult]) -> Optional[tuple[float, float, float, float]]:
    """(step, the host's waits for the device, the device's work, the host's wake-up after the device ran dry)
    per step of a simulated trial, seconds."""
    if r is None or r.sim is None or not r.steps or not _finite(r.wall_s) or not _finite(r.sim.device_busy_s):
        return None
    assert r.wall_s is not None
    return r.wall_s / r.steps, r.sim.device_wait_s or 0.0, r.sim.device_busy_s, r.sim.wake_s or 0.0


def predicted_sync_cost(nosync: Sequence[TrialResult], synced: Sequence[TrialResult], launch_s: float) -> Optional[float]:
    """What reading the loss every step costs by the model (the queue drained every step: the device
    idles while the host fetches and copies, the host while the device works, but for the launch they
    share, and the host wakes as late as it measured), paired by round: 1 - step / (host's own time but the
    launch + max(launch, device's work) + wake-up)."""
    costs = []
    for a, b in zip(nosync, synced):
        pa, pb = _per_step(a), _per_step(b)
        if pa and pb:
            step, waited, work, wake = pb
            launch = launch_s * (b.accumulation_steps or 1)
            costs.append(1.0 - pa[0] / (step - waited - launch + max(launch, work) + wake))
    return statistics.median(costs) if costs else None


def simulated(m: Measured, arms: dict[str, ArmSummary]) -> Optional[SimSummary]:
    """On a simulated accelerator: its words, its rate as each arm's bound, the per-step sync's cost
    (measured, paired by round, against the model's), and, when tuned cannot feed it, the loader's
    ceiling and the CPUs it would take."""
    device = m.device
    if device is None or device.spec is None:
        return None
    spec = device.spec
    tuned, sync = m.trials.get(TUNED) or [], m.trials.get(TUNED_SYNC) or []
    cost = Comparison("cost", stats.cost(_sps(sync), _sps(tuned)))
    predicted = predicted_sync_cost(tuned, sync, spec.launch_ms / 1000)
    if predicted is not None and not 0 <= predicted < 1:
        predicted = None   # below 0 the unsynced trials ran slower than the model allows: a disturbed round
    model = None
    if predicted is not None and cost.interval is not None:
        low, high = cost.interval
        model = "within" if low <= predicted <= high else "outside"

    def share_of_rate(arm: str) -> Comparison:
        runs = m.trials.get(arm) or []
        return Comparison("share", stats.share(_sps(runs), [spec.rate] * len(runs), margin=BOUND_MARGIN))

    fractions = BoundFractions(share_of_rate(BASELINE), share_of_rate(TUNED))
    input_bound = None
    t, b = arms[TUNED], arms[BASELINE]
    if (fractions.tuned.high or 1.0) < 1 - BOUND_MARGIN and (t.data_wait_share or 0) >= BOUND_MARGIN:
        one = b.samples_per_s
        input_bound = InputBound(ceiling=t.samples_per_s, one_process=one,
                                 cpus=math.ceil(spec.rate / one) if one else None)
    return SimSummary(device=str(device), words=spec.words(), rate=spec.rate,
                      sync_cost=SyncCost(cost, predicted, model), bound_fraction=fractions, input_bound=input_bound)


def figure(c: Optional[Comparison], fmt: Callable[[float], str]) -> str:
    """A figure as the report prints it: the value and its interval when it is a result,
    otherwise 'inconclusive' or 'failed measurement' with the interval (never the value alone); with too
    few rounds for an interval, 'inconclusive (N rounds)' (the figures stay in the JSON)."""
    if c is None or c.value is None:
        return "-"
    rng = ""
    if c.interval is not None:
        rng = f" ({fmt(c.interval[0])} to {fmt(c.interval[1])})"
    if c.verdict in RESULTS:
        return fmt(c.value) + rng
    if c.verdict == stats.FAILED:
        return "failed measurement" + rng
    n = c.rounds
    return "inconclusive" + (rng or f" ({n} round{'s' if n != 1 else ''})")


def running_means(losses: Sequence[Optional[float]], window: int = SMOOTH) -> list[Optional[float]]:
    """Trailing means over ``window`` steps; index i covers steps i-window+1 .. i (None before)."""
    out: list[Optional[float]] = []
    for i in range(len(losses)):
        if i + 1 < window:
            out.append(None)
            continue
        chunk = losses[i + 1 - window: i + 1]
        if all(_finite(x) for x in chunk):
            out.append(sum(x for x in chunk if x is not None) / window)
        else:
            out.append(float("nan"))
    return out


def all_losses(result: TrialResult) -> list[Optional[float]]:
    """Every optimizer step's loss of a trial, warm-up included, in order."""
    return result.all_losses


def compare_curves(amp: TrialResult, ref: TrialResult, precision: str = "bf16") -> CurveCheck:
    """Does AMP's loss curve (trial ``amp``) diverge from fp32's (``ref``)?  Both convergence runs from
    the same weights on the same batches."""
    a, r = amp.all_losses, ref.all_losses
    n = min(len(a), len(r))

    def judged(**found: Any) -> CurveCheck:
        return CurveCheck(precision, n, LOSS_TOL_REL, LOSS_TOL_ABS, **found)

    for i in range(n):
        if not _finite(a[i]) and _finite(r[i]):
            return judged(diverged=True, step=i + 1,
                          reason=f"{precision} loss became non-finite at step {i + 1} (fp32: {r[i]:.3g})")
        if not _finite(r[i]):
            # fp32 itself diverged: nothing to compare AMP with (the run's failure says so).
            return judged(diverged=None, step=i + 1,
                          reason=f"the fp32 loss became non-finite at step {i + 1}: no curve to compare with")
    if n < 2 * SMOOTH:
        return judged(diverged=None, reason=f"only {n} steps to compare")
    ma, mr = running_means(a[:n]), running_means(r[:n])
    gaps = [(i, (x - y) / y if y else 0.0, x - y) for i, (x, y) in enumerate(zip(ma, mr))
            if x is not None and y is not None and _finite(x) and _finite(y)]
    max_gap = max(g for _, g, _ in gaps) if gaps else None
    final_gap = gaps[-1][1] if gaps else None
    for i, rel, gap in gaps:
        if i >= n // 2 and rel > LOSS_TOL_REL and gap > LOSS_TOL_ABS:
            return judged(diverged=True, step=i + 1, reason=f"{precision} loss {rel:+.0%} above fp32's at step {i + 1}",
                          max_gap_rel=max_gap, final_gap_rel=final_gap)
    ta, tr = amp.target_step, ref.target_step
    if tr is not None and ta is None and len(a) >= tr:
        return judged(diverged=True, reason=f"{precision} did not reach the target; fp32 did at step {tr}",
                      max_gap_rel=max_gap, final_gap_rel=final_gap)
    if tr is not None and ta is not None and ta > tr * (1 + LOSS_TOL_REL) and ta - tr >= SMOOTH:
        return judged(diverged=True, step=ta, reason=f"{precision} needed {ta} steps to reach the target, fp32 {tr}",
                      max_gap_rel=max_gap, final_gap_rel=final_gap)
    return judged(max_gap_rel=max_gap, final_gap_rel=final_gap)


def same_numerics(a: Settings, b: Settings, batch_size: int) -> bool:
    """Whether two settings train the same curve up to precision and speed-only choices (the micro-batch,
    the workload's when unset, accumulation and the schedule decide the loss curve)."""
    def key(s: Settings) -> tuple[Any, ...]:
        if s.lr_schedule == "onecycle":
            return s.micro_batch or batch_size, s.accumulation_steps, s.lr_schedule, s.max_lr, s.pct_start
        return s.micro_batch or batch_size, s.accumulation_steps, s.lr_schedule, None, None

    return key(a) == key(b)


# ---------------------------------------------------------------------------
# Words


def seconds(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.1f} s" if x < 10 else f"{x:.0f} s"


def percent(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x:.0%}" if abs(x) >= 0.1 else f"{x:.1%}"


def converge_phrase(c: TrialResult) -> str:
    """'41 s (180 steps)' or 'not within 300 steps (92 s)'."""
    if c.target_step is not None:
        return f"{seconds(c.time_to_target_s)} ({c.target_step} steps)"
    wall = c.wall_s
    return f"not within {c.steps_run} steps" + (f" ({seconds(wall)})" if wall else "")


def limit_hit(summary: Summary, plan: Optional[Plan] = None) -> Optional[Limit]:
    """The limit that stopped an inconclusive speed-up's rounds and what to change: ``--quick``'s round cap,
    a full run's round cap, or the budget (the one that would pay for the rounds that would likely resolve
    it); None when more rounds would not help or no limit stopped them."""
    more, stopped = summary.speedup.more_rounds, summary.rounds_stopped
    if more is None:
        return None
    if stopped == "max rounds":
        cap = (plan.max_rounds if plan is not None else None) or summary.rounds
        if plan is not None and plan.quick:
            return Limit(f"--quick stops at {cap} rounds", "run without --quick")
        steps = plan.steps if plan is not None else None
        change = "longer trials narrow each round" + (f" (--steps {2 * steps})" if steps else "")
        return Limit(f"verify-train stops at {cap} rounds", change)
    round_s, spent = summary.round_s, summary.spent_s
    if stopped in ("budget spent", None) and more <= 100 and round_s and spent is not None:
        budget = math.ceil((spent + more * round_s) / 10) * 10
        return Limit("the budget was spent", f"--budget {budget:.0f}", budget)
    return None


def verdict(summary: Summary, plan: Optional[Plan] = None) -> str:
    """The one line under the table, from :func:`summary`'s result; ``plan`` (the run's plan) names
    the limit that stopped an inconclusive run's rounds."""
    sp = summary.speedup
    base, tuned = summary.baseline, summary.tuned
    parts = []
    if sp.value and sp.verdict in RESULTS:
        rng = f" ({sp.low:.2f}-{sp.high:.2f})" if sp.low is not None and sp.high is not None else ""
        parts.append(f"tuned is {sp.value:.2f}x baseline{rng}")
    elif sp.value:
        if sp.interval is not None:
            rng = f"tuned/baseline {sp.interval[0]:.2f}-{sp.interval[1]:.2f} over {sp.rounds} rounds"
        else:
            rng = f"{sp.rounds} round" + ("s" if sp.rounds != 1 else "")
        hint = stats.resolve_hint(sp.verdict, sp.more_rounds)
        limit = limit_hit(summary, plan)
        if limit is not None and limit.budget_s is not None:
            hint += f" ({limit.change})"
        elif limit is not None:
            hint += f"; {limit.what}: {limit.change}"
        parts.append(f"speed-up inconclusive ({rng}; {hint})")
    elif base.samples_per_s or tuned.samples_per_s:
        rates = [f"{a.samples_per_s:.1f}" if a.samples_per_s else "-" for a in (base, tuned)]
        parts.append(f"no speed-up measured (baseline {rates[0]} samples/s, tuned {rates[1]})")
    else:
        parts.append("no speed-up measured")
    if base.data_wait_share is not None and tuned.data_wait_share is not None:
        parts.append(f"data wait {percent(base.data_wait_share)} -> {percent(tuned.data_wait_share)}")
    simd = summary.sim
    if simd is not None:
        parts[0] = f"{simd.words}: {parts[0]}"
        parts.append(f"tuned reaches {figure(simd.bound_fraction.tuned, percent)} of the device"
                     + (", input-bound" if simd.input_bound is not None else ""))
    parts += _convergence_words(summary.convergence)
    bad = summary.nonfinite_loss
    if bad:
        parts.append(f"LOSS NOT FINITE in {len(bad)} run(s), first {bad[0].run} at step {bad[0].step}")
    sc = summary.scaling
    if sc is not None and sc.efficiency.value is not None:
        if sc.efficiency.verdict in RESULTS:
            parts.append(f"{sc.nproc} processes at {sc.efficiency.value:.0%} scaling efficiency")
        else:
            parts.append(f"{sc.nproc} processes: scaling efficiency {figure(sc.efficiency, percent)}")
    line = ", ".join(parts)
    if summary.interrupted:
        line = "interrupted, so far: " + line
    return line


def _convergence_words(conv: Optional[Convergence]) -> list[str]:
    """What the verdict says of the convergence runs: time to target, a missed target, AMP diverging."""
    if conv is None:
        return []
    out = []
    cb, ct, target = conv.baseline, conv.tuned, conv.target_loss
    if ct is not None and target is not None:
        if ct.target_step is not None and cb is not None and cb.target_step is not None:
            out.append(f"reached loss {target:g} in {seconds(ct.time_to_target_s)} vs {seconds(cb.time_to_target_s)}")
        elif ct.target_step is not None:
            baseline = converge_phrase(cb) if cb is not None else converge_phrase(TrialResult())
            out.append(f"reached loss {target:g} in {seconds(ct.time_to_target_s)}; baseline {baseline}")
        else:
            out.append(f"tuned did NOT reach loss {target:g} ({converge_phrase(ct)})"
                       + (f"; baseline {converge_phrase(cb)}" if cb is not None else ""))
    if conv.amp is not None and conv.amp.diverged:
        out.append(f"AMP DIVERGED: {conv.amp.reason}")
    return out


def nonfinite_losses(m: Measured) -> list[NonFinite]:
    """Every run whose loss became NaN or infinite (1-based step, warm-up included), in the order they
    ran: the trials, then the convergence runs, then the ranks."""
    out = []

    def look(label: str, result: Optional[TrialResult], settings: Optional[Settings]) -> None:
        step = result.nonfinite_loss_step if result is not None else None
        if isinstance(step, int) and not isinstance(step, bool):
            out.append(NonFinite(label, step + 1, settings.precision if settings is not None else "fp32"))

    for arm in ARMS:
        for i, r in enumerate(m.trials.get(arm) or []):
            look(f"round {i + 1}: {arm.replace('_', ' ')}", r, m.baseline if arm in (BASELINE, BASELINE_BOUND) else m.tuned)
    for name, r in m.converge.runs():
        if name == "reference":
            settings = m.reference
        elif name == BASELINE:
            settings = m.baseline
        else:
            settings = m.tuned
        look(f"convergence: {name}", r, settings)
    for i, d in enumerate(m.ddp):
        for r in d.ranks:
            look(f"{d.nproc} processes, run {i + 1}, rank {r.rank or 0}", r, m.ddp_settings)
    return out


def _convergence(m: Measured) -> Optional[Convergence]:
    """The convergence runs' summary, when any ran."""
    conv = m.converge
    if not conv.runs():
        return None
    target = next((r.target_loss for _, r in conv.runs() if r.target_loss is not None), None)
    baseline, tuned = m.baseline or Settings(), m.tuned or Settings()
    ref_name = "reference" if conv.reference is not None else BASELINE
    ref_run = conv.reference if conv.reference is not None else conv.baseline
    reference, amp = None, None
    if m.reference is not None and conv.tuned is not None and ref_run is not None:
        reference = ref_name
        amp = compare_curves(conv.tuned, ref_run, tuned.precision)
    return Convergence(target_loss=target, baseline=conv.baseline, tuned=conv.tuned,
                       same_schedule=conv.same_schedule, schedule=schedule_change(baseline, tuned) or None,
                       reference=reference, amp=amp)


def _scaling(m: Measured, one: ArmSummary) -> Optional[Scaling]:
    """The multi-process runs' summary, when any ran."""
    if not m.ddp:
        return None
    many = statistics.median([r.samples_per_s for r in m.ddp if r.samples_per_s] or [0]) or None
    n = m.ddp[0].nproc or 1
    utils = [r.gpu_util_mean for d in m.ddp for r in d.ranks if r.gpu_util_mean is not None]
    return Scaling(nproc=n, backend=m.ddp[0].backend, runs=len(m.ddp), samples_per_s=many,
                   samples_per_s_all=[r.samples_per_s for r in m.ddp], one_process_samples_per_s=one.samples_per_s,
                   gpu_util=statistics.fmean(utils) if utils else None, one_process_gpu_util=one.gpu_util,
                   efficiency=scaling(m.ddp, m.trials.get(TUNED) or [], n))


def summary(m: Measured) -> Summary:
    """The summary of everything measured in ``m`` (a :class:`~debtorch.verify.measure.Measured`)."""
    arms = {arm: summarise(m.trials.get(arm) or []) for arm in ARMS}
    budget = m.budget
    looks = budget.looks if budget is not None and budget.looks is not None else stats.Looks(1, 1)
    tuned_trials = m.trials.get(TUNED) or []
    sp = speedup(tuned_trials, m.trials.get(BASELINE) or [], looks.confidence)
    fractions = BoundFractions(
        _failed_bound(bound_fraction(m.trials.get(BASELINE) or [], m.trials.get(BASELINE_BOUND) or []),
                      arms[BASELINE], arms[BASELINE_BOUND]),
        _failed_bound(bound_fraction(tuned_trials, m.trials.get(TUNED_BOUND) or []), arms[TUNED], arms[TUNED_BOUND]))
    sim = simulated(m, arms)
    if sim is not None:
        fractions = sim.bound_fraction
    return Summary(
        baseline=arms[BASELINE], tuned=arms[TUNED], tuned_bare=arms[TUNED_BARE], tuned_sync=arms[TUNED_SYNC],
        baseline_bound=arms[BASELINE_BOUND], tuned_bound=arms[TUNED_BOUND], speedup=sp,
        sequential=Sequential(looks, sp.rounds),
        instrumentation=instrumentation_cost(tuned_trials, m.trials.get(TUNED_BARE) or []),
        bound_fraction=fractions, sim=sim, convergence=_convergence(m), scaling=_scaling(m, arms[TUNED]),
        nonfinite_loss=nonfinite_losses(m), attribution=attribution(m.attribution, m.trials),
        rounds=budget.rounds if budget is not None else None,
        rounds_stopped=budget.stopped if budget is not None else None,
        round_s=budget.round_s if budget is not None else None,
        spent_s=budget.spent_s if budget is not None else None,
        disturbed_rounds=disturbed_rounds(m.trials), interrupted=m.interrupted,
        failed=m.failure.line() if m.failure else None)
