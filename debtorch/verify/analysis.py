"""From trial results to what verify-train reports: pure functions, torch-free.

A *trial* is the engine's result dict (docs/engine.md): ``samples_per_s``,
``data_wait_share``, per-step ``step_s``/``data_wait_s``/``compute_s``,
``peak_host_bytes``, ``losses``, ``target_step``, ...  An *arm* is one kind
of trial repeated over the interleaved rounds (``baseline``, ``tuned``, the
bare loop, the compute-only bounds).

How the numbers are made (docs/verify-train.md, "Honesty rules"):

* every arm is summarised by the median over its repeats and the spread
  (min to max);
* the speed-up is the ratio of medians; its range is the smallest and the
  largest ratio of a baseline and a tuned trial *of the same round*, since
  trials of one round ran back to back and drift hits both alike;
* the instrumentation's cost is paired the same way: 1 - instrumented/bare
  samples per second, for the tuned settings in the same round;
* AMP's loss curve is compared with fp32's at the same optimizer steps (same
  seed, same batches): running means over ``SMOOTH`` steps; AMP diverges when
  its running mean is above fp32's by more than ``LOSS_TOL_REL`` of fp32's
  (and at least ``LOSS_TOL_ABS``) at any step of the second half of the
  compared steps, turns non-finite where fp32 did not, or needs more than
  ``1 + LOSS_TOL_REL`` times fp32's steps to reach the target.
"""

from __future__ import annotations

import math
import statistics
from typing import Optional

from debtorch.train.runner import scaling_efficiency

SMOOTH = 5            # steps in a running mean (the engine's time-to-target uses the same)
LOSS_TOL_REL = 0.10   # AMP may trail fp32 by 10% of fp32's running-mean loss ...
LOSS_TOL_ABS = 0.02   # ... but a gap below this is never called a divergence

ARMS = ("baseline", "tuned", "tuned_bare", "baseline_bound", "tuned_bound")


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _median(values: list) -> Optional[float]:
    vals = [v for v in values if _finite(v)]
    return statistics.median(vals) if vals else None


def summarise(results: list) -> dict:
    """Median, spread and breakdown of one arm's trials."""
    sps = [r.get("samples_per_s") for r in results]
    good = [v for v in sps if _finite(v) and v > 0]
    med = statistics.median(good) if good else None
    out = {
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
    return out


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


def speedup(tuned: list, baseline: list) -> dict:
    """Tuned over baseline: ratio of medians, and the range of same-round ratios."""
    t, b = summarise(tuned)["samples_per_s"], summarise(baseline)["samples_per_s"]
    pairs = paired_ratios(tuned, baseline)
    return {
        "ratio": (t / b) if t and b else None,
        "low": min(pairs) if pairs else None,
        "high": max(pairs) if pairs else None,
        "pairs": pairs,
    }


def instrumentation_cost(instrumented: list, bare: list) -> dict:
    """Throughput the per-step clocks and gauges cost: 1 - instrumented / bare, same round.

    Negative values are noise (the instrumented trial happened to run faster).
    """
    costs = [1.0 - r for r in paired_ratios(instrumented, bare)]
    return {
        "cost": statistics.median(costs) if costs else None,
        "low": min(costs) if costs else None,
        "high": max(costs) if costs else None,
        "pairs": costs,
    }


DISTURBED = 0.5  # a trial below half its arm's median samples/s ran while something else held the machine


def disturbed_rounds(trials: dict, arms: tuple = ("baseline", "tuned", "tuned_bare")) -> list:
    """1-based rounds in which a trial of ``arms`` ran at under ``DISTURBED`` times its arm's median.

    On a shared machine another process can take a core for part of a run
    and slow a trial several-fold; medians resist that, ranges do not.
    """
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


def bound_fraction(arm: dict, bound: dict) -> Optional[float]:
    """How close an arm comes to its compute-only bound (1.0: data loading costs nothing)."""
    a, b = arm.get("samples_per_s"), bound.get("samples_per_s")
    return (a / b) if a and b else None


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
    """Does AMP's loss curve (trial ``amp``) diverge from fp32's (trial ``ref``)?

    Both are convergence runs from the same weights on the same batches.
    """
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
    """Whether two settings dicts train the same curve up to precision and speed-only choices.

    Micro-batch (the workload's when unset), accumulation and the learning-rate
    schedule decide the loss curve; workers, threads, memory format and the
    like only decide how fast it is walked.
    """
    def key(s: dict) -> tuple:
        sched = s.get("lr_schedule", "constant")
        return (s.get("micro_batch") or batch_size, s.get("accumulation_steps", 1), sched,
                s.get("max_lr") if sched == "onecycle" else None,
                s.get("pct_start") if sched == "onecycle" else None)

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


def converge_phrase(c: dict) -> str:
    """'41 s (180 steps)' or 'not within 300 steps (92 s)'."""
    if c.get("target_step") is not None:
        return f"{seconds(c.get('time_to_target_s'))} ({c['target_step']} steps)"
    ran = (c.get("warmup_steps") or 0) + (c.get("steps") or 0)
    wall = c.get("wall_s")
    return f"not within {ran} steps" + (f" ({seconds(wall)})" if wall else "")


def verdict(summary: dict) -> str:
    """The one line under the table.

    ``summary`` is :func:`summary`'s result.
    """
    sp = summary.get("speedup") or {}
    base, tuned = summary.get("baseline") or {}, summary.get("tuned") or {}
    parts = []
    if sp.get("ratio"):
        rng = f" ({sp['low']:.2f}-{sp['high']:.2f})" if sp.get("low") is not None else ""
        parts.append(f"tuned is {sp['ratio']:.2f}x baseline{rng}")
    elif base.get("samples_per_s") or tuned.get("samples_per_s"):
        parts.append("no speed-up measured (baseline "
                     + (f"{base['samples_per_s']:.1f}" if base.get("samples_per_s") else "-") + " samples/s, tuned "
                     + (f"{tuned['samples_per_s']:.1f}" if tuned.get("samples_per_s") else "-") + ")")
    else:
        parts.append("no speed-up measured")
    if base.get("data_wait_share") is not None and tuned.get("data_wait_share") is not None:
        parts.append(f"data wait {percent(base['data_wait_share'])} -> {percent(tuned['data_wait_share'])}")
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
    if summary.get("scaling") and summary["scaling"].get("efficiency") is not None:
        sc = summary["scaling"]
        parts.append(f"{sc['nproc']} processes at {sc['efficiency']:.0%} scaling efficiency")
    line = ", ".join(parts)
    if summary.get("interrupted"):
        line = "interrupted, so far: " + line
    return line


CONVERGE_KEYS = ("target_loss", "target_step", "time_to_target_s", "steps", "steps_requested", "warmup_steps",
                 "wall_s", "loss_first", "loss_last", "nonfinite_loss_step", "samples_per_s")


def _converge_view(result: Optional[dict]) -> Optional[dict]:
    if not result:
        return None
    return {k: result.get(k) for k in CONVERGE_KEYS}


def summary(m) -> dict:
    """The summary of everything measured in ``m`` (a :class:`~debtorch.verify.measure.Measured`), JSON-ready."""
    arms = {arm: summarise(m.trials.get(arm) or []) for arm in ARMS}
    out = dict(arms)
    out["speedup"] = speedup(m.trials.get("tuned") or [], m.trials.get("baseline") or [])
    out["instrumentation"] = instrumentation_cost(m.trials.get("tuned") or [], m.trials.get("tuned_bare") or [])
    out["bound_fraction"] = {"baseline": bound_fraction(arms["baseline"], arms["baseline_bound"]),
                             "tuned": bound_fraction(arms["tuned"], arms["tuned_bound"])}
    conv = m.converge or {}
    if conv:
        target = next((c.get("target_loss") for c in conv.values() if c.get("target_loss") is not None), None)
        c = {"target_loss": target, "baseline": _converge_view(conv.get("baseline")),
             "tuned": _converge_view(conv.get("tuned")), "reference": None, "amp": None}
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
            "nproc": n,
            "backend": m.ddp[0].get("backend"),
            "runs": len(m.ddp),
            "samples_per_s": many,
            "samples_per_s_all": [r.get("samples_per_s") for r in m.ddp],
            "one_process_samples_per_s": one,
            "efficiency": scaling_efficiency({"samples_per_s": many, "nproc": n}, {"samples_per_s": one}),
            "gpu_util": statistics.fmean(utils) if utils else None,
            "one_process_gpu_util": arms["tuned"]["gpu_util"],
        }
    out["disturbed_rounds"] = disturbed_rounds(m.trials)
    out["interrupted"] = m.interrupted
    out["failed"] = m.failure.line() if m.failure else None
    return out
