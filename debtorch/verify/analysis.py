"""From trial results to what verify-train reports (docs/verify-train.md): pure functions, torch-free.

A *trial* is the engine's result dict (docs/engine.md); an *arm* is one kind of trial repeated over
the interleaved rounds.  Every comparison is a ratio of medians over the paired rounds with an
interval and a verdict from :mod:`debtorch.stats`; a figure that cannot exceed 100% or fall below 0
is a failed measurement beyond noise, never a result.
"""

from __future__ import annotations

import math
import statistics
from typing import Optional

from debtorch import stats
from debtorch.inputs import finite as _finite
from debtorch.train import sim
from debtorch.train.settings import Settings

SMOOTH = 5            # steps in a running mean (the engine's time-to-target uses the same)
LOSS_TOL_REL = 0.10   # AMP may trail fp32 by 10% of fp32's running-mean loss ...
LOSS_TOL_ABS = 0.02   # ... but a gap below this is never called a divergence

ARMS = ("baseline", "tuned", "tuned_bare", "tuned_sync", "baseline_bound", "tuned_bound")
INSTRUMENTATION_MARGIN = 0.02   # a cost whose interval lies below 2% is "negligible" (verify-train's target)
BOUND_MARGIN = 0.05             # a share whose interval lies within 5% of its bound has "reached" it
RESULTS = (stats.FASTER, stats.SLOWER, stats.EQUIVALENT, stats.COSTS, stats.NEGLIGIBLE, stats.BELOW, stats.REACHED)


def _median(values: list) -> Optional[float]:
    vals = [v for v in values if _finite(v)]
    return statistics.median(vals) if vals else None


def summarise(results: list) -> dict:
    """Median, spread and breakdown of one arm's trials."""
    sps = [r.get("samples_per_s") for r in results]
    good = [v for v in sps if _finite(v) and v > 0]
    med = statistics.median(good) if good else None
    return {
        "runs": len(good),
        "samples_per_s": med,
        "samples_per_s_min": min(good) if good else None,
        "samples_per_s_max": max(good) if good else None,
        "spread": ((max(good) - min(good)) / med) if good and med else None,
        "samples_per_s_all": sps,
        "data_wait_share": _median([r.get("data_wait_share") for r in results]),
        "step_s": _median([r.get("step_median_s") for r in results]),
        "data_wait_step_s": _median([_median(r.get("data_wait_s") or []) for r in results]),
        "compute_step_s": _median([_median(r.get("compute_s") or []) for r in results]),
        "peak_host_bytes": _max([r.get("peak_host_bytes") for r in results]),
        "peak_device_bytes": _max([r.get("peak_device_bytes") for r in results]),
        "gpu_util": _median([r.get("gpu_util_mean") for r in results]),
        "between_steps_share": _median([r["overhead_s"] / r["wall_s"] for r in results
                                        if _finite(r.get("overhead_s")) and _finite(r.get("wall_s")) and r["wall_s"] > 0]),
        "notes": sorted({n for r in results for n in (r.get("notes") or [])}),
    }


def _max(values: list) -> Optional[float]:
    vals = [v for v in values if _finite(v)]
    return max(vals) if vals else None


def paired_ratios(num: list, den: list) -> list:
    """num[i] / den[i] for the rounds where both ran (samples per second)."""
    out = []
    for a, b in zip(num, den):
        x, y = (a or {}).get("samples_per_s"), (b or {}).get("samples_per_s")
        if _finite(x) and _finite(y) and x > 0 and y > 0:
            out.append(x / y)
    return out


def _sps(results: list) -> list:
    return [(r or {}).get("samples_per_s") for r in results]


def speedup(tuned: list, baseline: list, confidence: float = stats.CONFIDENCE) -> dict:
    """Tuned over baseline: the ratio of medians over the paired rounds, its interval at
    ``confidence`` (``low``, ``high``) and ``verdict`` (faster, slower or inconclusive, see debtorch.stats)."""
    out = stats.compare(_sps(tuned), _sps(baseline), confidence=confidence).to_dict("ratio")
    out["pairs"] = paired_ratios(tuned, baseline)
    return out


def instrumentation_cost(instrumented: list, bare: list) -> dict:
    """Throughput the per-step clocks and gauges cost: 1 - instrumented / bare, paired by round,
    with its 95% interval and verdict: costs, negligible (below 2%), inconclusive, or a failed
    measurement (negative beyond noise: the instrumented loop cannot be faster)."""
    out = stats.cost(_sps(instrumented), _sps(bare), margin=INSTRUMENTATION_MARGIN).to_dict("cost")
    out["pairs"] = [1.0 - r for r in paired_ratios(instrumented, bare)]
    return out


def scaling(multi: list, single: list, nproc: int) -> dict:
    """Scaling efficiency: N processes' samples/s over N times one process's (ratio of medians;
    the runs were not in the same rounds, so each is resampled on its own).  Above 100% beyond
    noise is a failed measurement."""
    return stats.share(_sps(multi), _sps(single), scale=max(1, nproc or 1), paired=False).to_dict("efficiency")


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


def _word(name: str, value) -> str:
    if isinstance(value, bool):
        return f"{name} {'on' if value else 'off'}"
    return f"{name} {value if value is not None else 'unset'}"


def change_words(baseline: dict, tuned: dict, fields: tuple) -> str:
    """'precision bf16', 'num_workers 2, prefetch_factor 2, ...': what tuned sets differently."""
    return ", ".join(_word(f, tuned.get(f)) for f in fields if tuned.get(f) != baseline.get(f))


def _key(s: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in s.items()))


def attribution_plan(baseline: dict, tuned: dict, default_threads: Optional[int] = None) -> list:
    """One entry per group of settings that tuned changes: ``group``, ``change`` (in words),
    and either ``arm`` (the arm that runs tuned without it: ``without <group>``, or
    ``baseline`` when it is the only change) with its ``settings``, or a ``note`` saying why
    nothing needs measuring (threads at PyTorch's own count here)."""
    out, arms = [], {_key(baseline): "baseline", _key(tuned): "tuned"}
    for group, fields in GROUPS:
        words = change_words(baseline, tuned, fields)
        if not words:
            continue
        entry = {"group": group, "change": words}
        if (group == "threads" and baseline.get("threads") is None and default_threads
                and tuned.get("threads") == default_threads):
            entry["note"] = f"{default_threads} threads is PyTorch's own choice here: nothing changes"
            out.append(entry)
            continue
        without = {**tuned, **{f: baseline.get(f) for f in fields}}
        if Settings.from_dict(without).validate():
            entry["note"] = "cannot be taken out alone (the other settings need it)"
            out.append(entry)
            continue
        arm = arms.setdefault(_key(without), f"without {group}")
        entry.update(arm=arm, settings=without)
        out.append(entry)
    return out


def schedule_change(baseline: dict, tuned: dict) -> str:
    """'lr_schedule onecycle, ...' when tuned's learning-rate schedule differs from the baseline's."""
    return change_words(baseline, tuned, SCHEDULE)


def attribution(plan: list, trials: dict) -> list:
    """The plan's entries with what each group contributes: tuned over tuned-without-it, paired
    by round (a ratio with its interval and verdict, like the speed-up)."""
    out = []
    tuned = trials.get("tuned") or []
    for entry in plan:
        e = {k: v for k, v in entry.items() if k != "settings"}
        if entry.get("arm"):
            e.update(stats.compare(_sps(tuned), _sps(trials.get(entry["arm"]) or [])).to_dict("ratio"))
        out.append(e)
    return out


DISTURBED = 0.5  # a trial below half its arm's median samples/s ran while something else held the machine


def disturbed_rounds(trials: dict, arms: tuple = ("baseline", "tuned", "tuned_bare")) -> list:
    """1-based rounds in which a trial of ``arms`` ran at under ``DISTURBED`` times its arm's median
    (another process took a core for part of it: medians resist that, ranges do not)."""
    out = set()
    for arm in arms:
        results = trials.get(arm) or []
        med = summarise(results)["samples_per_s"]
        if not med:
            continue
        for i, r in enumerate(results):
            x = r.get("samples_per_s")
            if _finite(x) and x < DISTURBED * med:
                out.add(i + 1)
    return sorted(out)


def bound_fraction(arm: list, bound: list) -> dict:
    """How close an arm's trials come to its compute-only bound's, paired by round (1.0: data
    loading costs nothing): ``share`` with its interval and verdict (below, reached, inconclusive;
    above 100% beyond noise is a failed measurement)."""
    return stats.share(_sps(arm), _sps(bound), margin=BOUND_MARGIN).to_dict("share")


def bound_below_rate(arm: dict, bound: dict) -> str:
    """Why an arm's compute-only bound is a failed measurement when its median came out below the arm's
    own measured rate by more than ``BOUND_MARGIN`` (a ceiling cannot be beaten: a bound trial slowed by
    another process), whatever the rounds; '' otherwise."""
    rate, ceiling = arm.get("samples_per_s"), bound.get("samples_per_s")
    if not (_finite(rate) and _finite(ceiling)) or ceiling >= rate * (1 - BOUND_MARGIN):
        return ""
    return (f"the compute-only bound ({ceiling:.1f} samples/s) came out below the measured rate ({rate:.1f}): "
            "a bound cannot be beaten, so a bound trial was slowed (another process?)")


# ---------------------------------------------------------------------------
# A simulated accelerator (debtorch.train.sim): its rate is the bound, a per-step sync has a price


def _per_step(r: dict) -> Optional[tuple]:
    """(step, the host's waits for the device, the device's work, the host's wake-up after the device ran dry)
    per step of a simulated trial, seconds."""
    d, steps = (r or {}).get("sim") or {}, (r or {}).get("steps") or 0
    if not steps or not _finite(r.get("wall_s")) or not _finite(d.get("device_busy_s")):
        return None
    return r["wall_s"] / steps, d.get("device_wait_s") or 0.0, d["device_busy_s"], d.get("wake_s") or 0.0


def predicted_sync_cost(nosync: list, synced: list, launch_s: float) -> Optional[float]:
    """What reading the loss every step costs by the model (the queue drained every step: the device
    idles while the host fetches and copies, the host while the device works, but for the launch they
    share, and the host wakes as late as it measured), paired by round: 1 - step / (host's own time but the
    launch + max(launch, device's work) + wake-up)."""
    costs = []
    for a, b in zip(nosync, synced):
        pa, pb = _per_step(a), _per_step(b)
        if pa and pb:
            step, waited, work, wake = pb
            launch = launch_s * (b.get("accumulation_steps") or 1)
            costs.append(1.0 - pa[0] / (step - waited - launch + max(launch, work) + wake))
    return statistics.median(costs) if costs else None


def simulated(m, arms: dict) -> Optional[dict]:
    """On a simulated accelerator: its words, its rate as each arm's bound, the per-step sync's cost
    (measured, paired by round, against the model's), and, when tuned cannot feed it, the loader's
    ceiling and the CPUs it would take."""
    if not sim.is_sim(m.device or ""):
        return None
    spec = sim.parse(m.device)
    tuned, sync = m.trials.get("tuned") or [], m.trials.get("tuned_sync") or []
    cost = stats.cost(_sps(sync), _sps(tuned)).to_dict("cost")
    predicted = predicted_sync_cost(tuned, sync, spec.launch_ms / 1000)
    # Below 0 the unsynced trials ran slower than the model allows: a disturbed round, not a figure.
    cost["predicted"] = predicted if predicted is not None and 0 <= predicted < 1 else None
    if cost["predicted"] is not None and cost.get("low") is not None:
        cost["model"] = "within" if cost["low"] <= cost["predicted"] <= cost["high"] else "outside"
    out = {"device": m.device, "words": spec.words(), "rate": spec.rate, "sync_cost": cost,
           "bound_fraction": {a: stats.share(_sps(m.trials.get(a) or []), [spec.rate] * len(m.trials.get(a) or []),
                                             margin=BOUND_MARGIN).to_dict("share") for a in ("baseline", "tuned")}}
    share, t, b = out["bound_fraction"]["tuned"], arms["tuned"], arms["baseline"]
    if (share.get("high") or 1.0) < 1 - BOUND_MARGIN and (t.get("data_wait_share") or 0) >= BOUND_MARGIN:
        one = b.get("samples_per_s")
        out["input_bound"] = {"ceiling": t.get("samples_per_s"), "one_process": one,
                              "cpus": math.ceil(spec.rate / one) if one else None}
    return out


def figure(d: Optional[dict], key: str, fmt) -> str:
    """A figure as the report prints it: the value and its interval when it is a result,
    otherwise 'inconclusive' or 'failed measurement' with the interval (never the value alone)."""
    if not d or d.get(key) is None:
        return "-"
    rng = f" ({fmt(d['low'])} to {fmt(d['high'])})" if d.get("low") is not None else ""
    if d.get("verdict") in RESULTS:
        return fmt(d[key]) + rng
    if d.get("verdict") == stats.FAILED:
        return "failed measurement" + rng
    n = d.get("rounds", 0)
    return "inconclusive" + (rng or f" ({n} round{'s' if n != 1 else ''})")


def running_means(losses: list, window: int = SMOOTH) -> list:
    """Trailing means over ``window`` steps; index i covers steps i-window+1 .. i (None before)."""
    out: list = []
    for i in range(len(losses)):
        if i + 1 < window:
            out.append(None)
            continue
        chunk = losses[i + 1 - window: i + 1]
        out.append(sum(chunk) / window if all(_finite(x) for x in chunk) else float("nan"))
    return out


def all_losses(result: dict) -> list:
    """Every optimizer step's loss of a trial, warm-up included, in order."""
    return list(result.get("warmup_losses") or []) + list(result.get("losses") or [])


def compare_curves(amp: dict, ref: dict, precision: str = "bf16") -> dict:
    """Does AMP's loss curve (trial ``amp``) diverge from fp32's (``ref``)?  Both convergence runs from
    the same weights on the same batches."""
    a, r = all_losses(amp), all_losses(ref)
    n = min(len(a), len(r))
    out = {"precision": precision, "compared_steps": n, "tolerance_rel": LOSS_TOL_REL,
           "tolerance_abs": LOSS_TOL_ABS, "diverged": False, "reason": None,
           "max_gap_rel": None, "final_gap_rel": None, "step": None}
    for i in range(n):
        if not _finite(a[i]) and _finite(r[i]):
            out.update(diverged=True, step=i + 1,
                       reason=f"{precision} loss became non-finite at step {i + 1} (fp32: {r[i]:.3g})")
            return out
        if not _finite(r[i]):
            # fp32 itself diverged: nothing to compare AMP with (the run's failure says so).
            out.update(diverged=None, step=i + 1,
                       reason=f"the fp32 loss became non-finite at step {i + 1}: no curve to compare with")
            return out
    if n < 2 * SMOOTH:
        out.update(diverged=None, reason=f"only {n} steps to compare")
        return out
    ma, mr = running_means(a[:n]), running_means(r[:n])
    gaps = [(i, (x - y) / y if y else 0.0, x - y) for i, (x, y) in enumerate(zip(ma, mr))
            if x is not None and y is not None and _finite(x) and _finite(y)]
    if gaps:
        out["max_gap_rel"] = max(g for _, g, _ in gaps)
        out["final_gap_rel"] = gaps[-1][1]
    for i, rel, gap in gaps:
        if i >= n // 2 and rel > LOSS_TOL_REL and gap > LOSS_TOL_ABS:
            out.update(diverged=True, step=i + 1,
                       reason=f"{precision} loss {rel:+.0%} above fp32's at step {i + 1}")
            return out
    ta, tr = amp.get("target_step"), ref.get("target_step")
    if tr is not None and ta is None and len(a) >= tr:
        out.update(diverged=True, reason=f"{precision} did not reach the target; fp32 did at step {tr}")
    elif tr is not None and ta is not None and ta > tr * (1 + LOSS_TOL_REL) and ta - tr >= SMOOTH:
        out.update(diverged=True, step=ta,
                   reason=f"{precision} needed {ta} steps to reach the target, fp32 {tr}")
    return out


def same_numerics(a: dict, b: dict, batch_size: int) -> bool:
    """Whether two settings dicts train the same curve up to precision and speed-only choices (the
    micro-batch, the workload's when unset, accumulation and the schedule decide the loss curve)."""
    def key(s: dict) -> tuple:
        sched = s.get("lr_schedule", "constant")
        return (s.get("micro_batch") or batch_size, s.get("accumulation_steps", 1), sched,
                s.get("max_lr") if sched == "onecycle" else None,
                s.get("pct_start") if sched == "onecycle" else None)

    return key(a) == key(b)


# ---------------------------------------------------------------------------
# Words


def seconds(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x:.1f} s" if x < 10 else f"{x:.0f} s")


def percent(x: Optional[float]) -> str:
    return "-" if x is None else (f"{x:.0%}" if abs(x) >= 0.1 else f"{x:.1%}")


def converge_phrase(c: dict) -> str:
    """'41 s (180 steps)' or 'not within 300 steps (92 s)'."""
    if c.get("target_step") is not None:
        return f"{seconds(c.get('time_to_target_s'))} ({c['target_step']} steps)"
    ran = (c.get("warmup_steps") or 0) + (c.get("steps") or 0)
    wall = c.get("wall_s")
    return f"not within {ran} steps" + (f" ({seconds(wall)})" if wall else "")


def limit_hit(summary: dict, plan: Optional[dict] = None) -> Optional[tuple[str, str]]:
    """(the limit that stopped an inconclusive speed-up's rounds, what to change) in words: ``--quick``'s
    round cap, a full run's round cap, or the budget (the one that would pay for the rounds that would
    likely resolve it); None when more rounds would not help or no limit stopped them."""
    sp, plan = summary.get("speedup") or {}, plan or {}
    more, stopped = sp.get("more_rounds"), summary.get("rounds_stopped")
    if more is None:
        return None
    if stopped == "max rounds":
        cap = plan.get("max_rounds") or summary.get("rounds")
        if plan.get("quick"):
            return f"--quick stops at {cap} rounds", "run without --quick"
        steps = plan.get("steps")
        return f"verify-train stops at {cap} rounds", "longer trials narrow each round" + (
            f" (--steps {2 * steps})" if steps else "")
    round_s, spent = summary.get("round_s"), summary.get("spent_s")
    if stopped in ("budget spent", None) and more <= 100 and round_s and spent is not None:
        return "the budget was spent", f"--budget {math.ceil((spent + more * round_s) / 10) * 10:.0f}"
    return None


def verdict(summary: dict, plan: Optional[dict] = None) -> str:
    """The one line under the table, from :func:`summary`'s result; ``plan`` (the run's plan) names
    the limit that stopped an inconclusive run's rounds."""
    sp = summary.get("speedup") or {}
    base, tuned = summary.get("baseline") or {}, summary.get("tuned") or {}
    parts = []
    if sp.get("ratio") and sp.get("verdict") in RESULTS:
        rng = f" ({sp['low']:.2f}-{sp['high']:.2f})" if sp.get("low") is not None else ""
        parts.append(f"tuned is {sp['ratio']:.2f}x baseline{rng}")
    elif sp.get("ratio"):
        rng = (f"tuned/baseline {sp['low']:.2f}-{sp['high']:.2f} over {sp['rounds']} rounds"
               if sp.get("low") is not None
               else f"{sp.get('rounds', 0)} round" + ("s" if sp.get("rounds") != 1 else ""))
        hint = stats.resolve_hint(sp['verdict'], sp.get('more_rounds'))
        limit = limit_hit(summary, plan)
        if limit is not None and limit[1].startswith("--budget"):
            hint += f" ({limit[1]})"
        elif limit is not None:
            hint += f"; {limit[0]}: {limit[1]}"
        parts.append(f"speed-up inconclusive ({rng}; {hint})")
    elif base.get("samples_per_s") or tuned.get("samples_per_s"):
        parts.append("no speed-up measured (baseline "
                     + (f"{base['samples_per_s']:.1f}" if base.get("samples_per_s") else "-") + " samples/s, tuned "
                     + (f"{tuned['samples_per_s']:.1f}" if tuned.get("samples_per_s") else "-") + ")")
    else:
        parts.append("no speed-up measured")
    if base.get("data_wait_share") is not None and tuned.get("data_wait_share") is not None:
        parts.append(f"data wait {percent(base['data_wait_share'])} -> {percent(tuned['data_wait_share'])}")
    simd = summary.get("sim")
    if simd:
        parts[0] = f"{simd['words']}: {parts[0]}"
        parts.append(f"tuned reaches {figure(simd['bound_fraction']['tuned'], 'share', percent)} of the device"
                     + (", input-bound" if simd.get("input_bound") else ""))
    conv = summary.get("convergence") or {}
    cb, ct = conv.get("baseline"), conv.get("tuned")
    target = conv.get("target_loss")
    if ct and target is not None:
        if ct.get("target_step") is not None and cb and cb.get("target_step") is not None:
            parts.append(f"reached loss {target:g} in {seconds(ct.get('time_to_target_s'))} "
                         f"vs {seconds(cb.get('time_to_target_s'))}")
        elif ct.get("target_step") is not None:
            parts.append(f"reached loss {target:g} in {seconds(ct.get('time_to_target_s'))}; "
                         f"baseline {converge_phrase(cb or {})}")
        else:
            parts.append(f"tuned did NOT reach loss {target:g} ({converge_phrase(ct)})"
                         + (f"; baseline {converge_phrase(cb)}" if cb else ""))
    amp = conv.get("amp")
    if amp and amp.get("diverged"):
        parts.append(f"AMP DIVERGED: {amp['reason']}")
    bad = summary.get("nonfinite_loss") or []
    if bad:
        parts.append(f"LOSS NOT FINITE in {len(bad)} run(s), first {bad[0]['run']} at step {bad[0]['step']}")
    if summary.get("scaling") and summary["scaling"].get("efficiency") is not None:
        sc = summary["scaling"]
        if sc.get("verdict") in RESULTS:
            parts.append(f"{sc['nproc']} processes at {sc['efficiency']:.0%} scaling efficiency")
        else:
            parts.append(f"{sc['nproc']} processes: scaling efficiency {figure(sc, 'efficiency', percent)}")
    line = ", ".join(parts)
    if summary.get("interrupted"):
        line = "interrupted, so far: " + line
    return line


def nonfinite_losses(m) -> list:
    """Every run whose loss became NaN or infinite: ``{"run", "step", "precision"}`` (1-based step,
    warm-up included), in the order they ran: the trials, then the convergence runs, then the ranks."""
    out = []

    def look(label: str, result: Optional[dict], settings: Optional[dict]) -> None:
        step = (result or {}).get("nonfinite_loss_step")
        if isinstance(step, int) and not isinstance(step, bool):
            out.append({"run": label, "step": step + 1, "precision": (settings or {}).get("precision", "fp32")})

    for arm in ARMS:
        for i, r in enumerate(m.trials.get(arm) or []):
            look(f"round {i + 1}: {arm.replace('_', ' ')}", r, m.baseline if arm.startswith("baseline") else m.tuned)
    for name, r in (m.converge or {}).items():
        look(f"convergence: {name}", r, m.reference if name == "reference" else
             m.baseline if name == "baseline" else m.tuned)
    for i, d in enumerate(m.ddp or []):
        for r in d.get("ranks") or []:
            look(f"{d.get('nproc')} processes, run {i + 1}, rank {r.get('rank', 0)}", r, m.ddp_settings)
    return out


CONVERGE_KEYS = ("target_loss", "target_step", "time_to_target_s", "steps", "steps_requested", "warmup_steps",
                 "wall_s", "loss_first", "loss_last", "nonfinite_loss_step", "samples_per_s")


def _converge_view(result: Optional[dict]) -> Optional[dict]:
    return {k: result.get(k) for k in CONVERGE_KEYS} if result else None


def summary(m) -> dict:
    """The summary of everything measured in ``m`` (a :class:`~debtorch.verify.measure.Measured`), JSON-ready."""
    arms, budget = {arm: summarise(m.trials.get(arm) or []) for arm in ARMS}, m.budget or {}
    out = dict(arms)
    looks = stats.Looks(**{k: (budget.get("looks") or {}).get(k, 1) for k in ("first", "last")})
    out["speedup"] = speedup(m.trials.get("tuned") or [], m.trials.get("baseline") or [], looks.confidence)
    out["sequential"] = looks.to_dict(out["speedup"]["rounds"])
    out["instrumentation"] = instrumentation_cost(m.trials.get("tuned") or [], m.trials.get("tuned_bare") or [])
    out["bound_fraction"] = {arm: bound_fraction(m.trials.get(arm) or [], m.trials.get(arm + "_bound") or [])
                             for arm in ("baseline", "tuned")}
    for arm, share in out["bound_fraction"].items():
        below = bound_below_rate(arms[arm], arms[arm + "_bound"])
        if below and share.get("verdict") != stats.FAILED:
            share.update(verdict=stats.FAILED, more_rounds=None, reason=below)
    out["sim"] = simulated(m, arms)
    if out["sim"]:
        out["bound_fraction"] = out["sim"]["bound_fraction"]
    conv = m.converge or {}
    if conv:
        target = next((c.get("target_loss") for c in conv.values() if c.get("target_loss") is not None), None)
        c = {"target_loss": target, "baseline": _converge_view(conv.get("baseline")),
             "tuned": _converge_view(conv.get("tuned")), "same_schedule": _converge_view(conv.get("same_schedule")),
             "schedule": schedule_change(m.baseline or {}, m.tuned or {}) or None, "reference": None, "amp": None}
        precision = (m.tuned or {}).get("precision", "fp32")
        ref_name = "reference" if "reference" in conv else "baseline"
        if m.reference is not None and conv.get("tuned") and conv.get(ref_name):
            c["reference"] = ref_name
            c["amp"] = compare_curves(conv["tuned"], conv[ref_name], precision)
        out["convergence"] = c
    if m.ddp:
        many = statistics.median([r["samples_per_s"] for r in m.ddp if r.get("samples_per_s")] or [0]) or None
        one = arms["tuned"]["samples_per_s"]
        n = m.ddp[0].get("nproc") or 1
        utils = [r.get("gpu_util_mean") for d in m.ddp for r in d.get("ranks") or [] if r.get("gpu_util_mean") is not None]
        out["scaling"] = {
            "nproc": n, "backend": m.ddp[0].get("backend"), "runs": len(m.ddp), "samples_per_s": many,
            "samples_per_s_all": [r.get("samples_per_s") for r in m.ddp], "one_process_samples_per_s": one,
            "gpu_util": statistics.fmean(utils) if utils else None, "one_process_gpu_util": arms["tuned"]["gpu_util"],
            **scaling(m.ddp, m.trials.get("tuned") or [], n),
        }
    out.update(nonfinite_loss=nonfinite_losses(m), attribution=attribution(m.attribution, m.trials),
               rounds=budget.get("rounds"), rounds_stopped=budget.get("stopped"), round_s=budget.get("round_s"),
               spent_s=budget.get("spent_s"), disturbed_rounds=disturbed_rounds(m.trials), interrupted=m.interrupted,
               failed=m.failure.line() if m.failure else None)
    return out
