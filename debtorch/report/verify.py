"""``debtorch verify-train``: the table, the lines under it and the verdict, or one JSON document.

Pure functions of a :class:`~debtorch.verify.run.Outcome` (what was measured,
its summary, the config and the machine's facts).  The plot: :mod:`debtorch.report.plot`.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

from debtorch import inputs, stats
from debtorch.report import Format, document
from debtorch.report.console import Line, Table
from debtorch.train.settings import Settings, legend
from debtorch.units import human_bytes
from debtorch.verify import analysis
from debtorch.verify.analysis import percent
from debtorch.verify.measure import Measured
from debtorch.verify.run import Outcome

SCHEMA_VERSION = 1


def report_line(result: Optional[dict]) -> Optional[str]:
    """verify-train's line: ``host waits per step: N (file:line, ...)``."""
    if not result:
        return None
    n = result.get("per_step")
    places = [f"{os.path.basename(x['path'])}:{x['line']}" for x in result.get("lines") or []]
    where = f" ({', '.join(places[:6])}{', ...' if len(places) > 6 else ''})" if places else ""
    count = "-" if n is None else (f"{n:.0f}" if float(n).is_integer() else f"{n:.1f}")
    if result.get("measured"):
        how = f"measured with torch.cuda.set_sync_debug_mode over {result.get('steps')} steps"
        if elsewhere := result.get("elsewhere_per_step"):
            how += f"; {elsewhere:.1f} more per step outside the workload's code"
    else:
        how = "read from the code: the lines that would wait on a GPU (debtorch lint)"
    return f"host waits per step: {count}{where}; {how}"


def _rate(arm: dict) -> str:
    if not arm.get("samples_per_s"):
        return "-"
    txt = f"{arm['samples_per_s']:.1f}"
    if arm.get("runs", 0) > 1:
        txt += f" ({arm['samples_per_s_min']:.1f}-{arm['samples_per_s_max']:.1f})"
    return txt


def _bound(summary: dict, arm: str) -> str:
    """An arm's compute-only bound: its rate, or a failed measurement when it came out below the arm's
    own measured rate (never a figure a ceiling cannot be)."""
    bound, rate = summary[arm + "_bound"], summary[arm].get("samples_per_s")
    if analysis.bound_below_rate(summary[arm], bound):
        return f"failed measurement ({bound['samples_per_s']:.1f}, below the {rate:.1f} measured)"
    return _rate(bound)


def _bytes(n: Optional[float]) -> str:
    return "-" if n is None else human_bytes(int(n))


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"


def _shorts(m: Measured) -> list[str]:
    """The settings row's short labels (baseline, tuned), when both are known."""
    try:
        return [Settings.from_dict(m.baseline).short(), Settings.from_dict(m.tuned).short()] if m.baseline and m.tuned else []
    except (KeyError, TypeError):
        return []


def rows(m, summary: dict) -> list:
    """(label, baseline, tuned) rows of the table."""
    b, t = summary["baseline"], summary["tuned"]
    sp = summary["speedup"]
    out = []
    if m.baseline and m.tuned:
        try:
            out.append(("settings", Settings.from_dict(m.baseline).short() + " (defaults)",
                        Settings.from_dict(m.tuned).short()))
        except (KeyError, TypeError):
            pass
    out.append(("samples/s (min-max)", _rate(b), _rate(t)))
    out.append(("speed-up", "1.00x", analysis.figure(sp, "ratio", lambda x: f"{x:.2f}x")))
    out.append(("step time (median)", _ms(b.get("step_s")), _ms(t.get("step_s"))))
    out.append(("  waiting for data", f"{_ms(b.get('data_wait_step_s'))} ({percent(b.get('data_wait_share'))})",
                f"{_ms(t.get('data_wait_step_s'))} ({percent(t.get('data_wait_share'))})"))
    out.append(("  computing", _ms(b.get("compute_step_s")), _ms(t.get("compute_step_s"))))
    bf, simd = summary["bound_fraction"], summary.get("sim")
    if simd:
        out.append(("device bound (simulated)", f"{simd['rate']:g}", f"{simd['rate']:g}"))
    else:
        out.append(("compute-only bound", _bound(summary, "baseline"), _bound(summary, "tuned")))
    out.append(("  reached", analysis.figure(bf.get("baseline"), "share", percent),
                analysis.figure(bf.get("tuned"), "share", percent)))
    out.append(("peak host memory", _bytes(b.get("peak_host_bytes")), _bytes(t.get("peak_host_bytes"))))
    if b.get("peak_device_bytes") is not None or t.get("peak_device_bytes") is not None:
        out.append(("peak device memory", _bytes(b.get("peak_device_bytes")), _bytes(t.get("peak_device_bytes"))))
    if b.get("gpu_util") is not None or t.get("gpu_util") is not None:
        out.append(("GPU utilisation (NVML)", _pct100(b.get("gpu_util")), _pct100(t.get("gpu_util"))))
    conv = summary.get("convergence")
    if conv and conv.get("target_loss") is not None:
        out.append((f"time to loss {conv['target_loss']:g}", analysis.converge_phrase(conv.get("baseline") or {}),
                    analysis.converge_phrase(conv.get("tuned") or {}) if conv.get("tuned") else "-"))
        if conv.get("same_schedule"):
            out.append(("  baseline's schedule", "", analysis.converge_phrase(conv["same_schedule"])))
    return out


def _pct100(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _why(d: dict) -> str:
    """The verdict when it is a result; otherwise why not, or what would resolve it."""
    if d.get("verdict") in analysis.RESULTS:
        return d["verdict"]
    return stats.resolve_hint(d.get("verdict") or "", d.get("more_rounds")) or d.get("reason") or d.get("verdict", "")


def lines(m: Measured, summary: dict, warnings: Sequence[str] = (), verbose: bool = False) -> list:
    """The lines under the table: how the measurement went, what to watch for, what failed; ``verbose``:
    also the statistics behind the verdict (the sequential design of the rounds)."""
    out = []
    if shorts := _shorts(m):
        out.append(legend(shorts))
    out.extend(step_lines(m, summary))
    ic = summary["instrumentation"]
    if ic.get("cost") is not None:
        between = summary["tuned"].get("between_steps_share")
        out.append(f"instrumentation: the per-step clocks and gauges cost {analysis.figure(ic, 'cost', percent)} of "
                   f"tuned's throughput ({_why(ic)}; instrumented vs bare loop, same rounds)"
                   + (f"; bookkeeping between steps took {percent(between)} of the timed window" if between is not None else ""))
    out.extend(sim_lines(summary))
    out.extend(rounds_lines(m, summary, verbose))
    out.extend(attribution_lines(m, summary))
    if waits := report_line(m.host_waits):
        out.append(waits)
    bad = summary.get("disturbed_rounds") or []
    if bad:
        out.append(f"noise: in round{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} a trial ran at under half "
                   "its median speed (another process busy?); medians resist this, the ranges include it")
    conv = summary.get("convergence") or {}
    if amp := conv.get("amp"):
        if amp.get("diverged"):
            out.append(f"AMP: {amp['reason']} (tolerance {amp['tolerance_rel']:.0%}; compared with the "
                       f"fp32 {conv.get('reference')} run on the same batches)")
        elif amp.get("diverged") is None:
            out.append(f"AMP: not judged: {amp['reason']}")
        else:
            gap = amp.get("max_gap_rel")
            out.append(f"AMP: {amp['precision']} loss stays within {amp['tolerance_rel']:.0%} of fp32's over "
                       f"{amp['compared_steps']} steps" + (f" (largest gap {gap:+.1%})" if gap is not None else ""))
    ct = conv.get("tuned")
    if ct and ct.get("nonfinite_loss_step") is not None:
        out.append(f"convergence: tuned's loss became non-finite at step {ct['nonfinite_loss_step'] + 1}; "
                   "more steps will not help")
    elif ct and ct.get("target_step") is None and conv.get("target_loss") is not None:
        last = ct.get("loss_last")
        out.append(f"convergence: tuned did not reach loss {conv['target_loss']:g} within "
                   f"{(ct.get('warmup_steps') or 0) + (ct.get('steps') or 0)} steps"
                   + (f" (last loss {last:.3g})" if inputs.finite(last) else "")
                   + "; raise --max-steps or set --target-loss")
    if sc := summary.get("scaling"):
        eff = analysis.figure(sc, "efficiency", percent)
        one = f"{sc['one_process_samples_per_s']:.1f}" if sc.get("one_process_samples_per_s") else "-"
        many = f"{sc['samples_per_s']:.1f}" if sc.get("samples_per_s") else "-"
        line = (f"{sc['nproc']} processes ({sc.get('backend')}): {many} samples/s vs {one} in one process: "
                f"scaling efficiency {eff}")
        if sc.get("gpu_util") is not None:
            line += f"; GPU utilisation {_pct100(sc.get('one_process_gpu_util'))} -> {_pct100(sc['gpu_util'])}"
        out.append(line)
    t = summary["tuned"]
    if (m.device or "").startswith("cuda") and t.get("runs") and t.get("gpu_util") is None:
        out.append("GPU utilisation: NVML gave no samples (nvidia-ml-py missing in the target environment, "
                   "or NVML does not report utilisation for this GPU)")
    if m.profile and m.profile.get("trace"):
        out.append(f"profile: {m.profile['trace']} (open in https://ui.perfetto.dev or chrome://tracing)")
    notes = sorted(set(summary["tuned"].get("notes", []) + summary["baseline"].get("notes", []) + list(m.notes)))
    out.extend(f"note: {note}" for note in notes)
    kinded = [Line(text) for text in out] + [Line(f"warning: {w}", "warning") for w in warnings]
    if m.failure:
        f = m.failure
        kinded.append(Line(f"FAILED: {f.line()}" + (f" [{f.finding}]" if f.finding else ""), "error"))
        if f.fix:
            kinded.append(Line(f"  fix: {f.fix}"))
    return kinded


def sim_lines(summary: dict) -> list:
    """On a simulated accelerator: what a per-step sync costs against the model, and what it would take
    to feed the device when tuned cannot."""
    s = summary.get("sim")
    if not s:
        return []
    out, c, ib = [], s["sync_cost"], s.get("input_bound")
    if c.get("cost") is not None:
        out.append(f"per-step sync (the loss read every step, as .item() does): costs {analysis.figure(c, 'cost', percent)}"
                   f" of tuned's throughput ({_why(c)})" + (
                       f"; the model (a drained queue: the synced steps' host time plus the device's and the host's wake-up) gives "
                       f"{percent(c['predicted'])}" + (f", {c['model']} the interval" if c.get("model") else "")
                       if c.get("predicted") is not None else "; the model's figure is impossible here (a disturbed "
                       "round)"))
    if ib:
        one = f"{ib['one_process']:.0f}" if ib.get("one_process") else "-"
        out.append(f"input-bound: the device waits for data; this machine's loader ceiling is {ib['ceiling']:.0f} samples/s "
                   f"(tuned), one loading process gives {one} (the baseline, loading in the training process): feeding "
                   f"{s['rate']:g} samples/s takes about {ib['cpus'] or '-'} CPUs of loading beside the training loop")
    out.append(f"{s['words']}: no model ran; the rates are what this machine's CPUs feed a device of that speed "
               "(docs/engine.md), not a GPU measurement")
    return out


def rounds_lines(m: Measured, summary: dict, verbose: bool = False) -> list:
    """How many interleaved rounds ran, why they stopped, and the budget; ``verbose``: also at which look
    and at which level each look was judged (Pocock's boundary)."""
    b = m.budget or {}
    if not b.get("rounds"):
        return []
    stopped = b.get("stopped") or ""
    plan = m.plan or {}
    most = "the most rounds allowed"
    if plan.get("max_rounds"):
        most += f" ({plan['max_rounds']}{' with --quick' if plan.get('quick') else ''})"
    why = {"resolved": "the speed-up resolved", "budget spent": "the budget was spent",
           "max rounds": most, "cannot resolve": "more rounds would not resolve it",
           }.get(stopped, stopped)
    spent = f", {b['spent_s']:.0f} s of a {b['budget_s']:g} s budget" if b.get("spent_s") is not None and b.get(
        "budget_s") else ""
    seq = summary.get("sequential") or {}
    if verbose and seq.get("most_looks", 1) > 1:
        why += (f" at look {seq['looks'] or 0} of at most {seq['most_looks']}; Pocock's boundary: every look's "
                f"interval at {seq['confidence']:.2%}, 95% over all of them")
    return [f"rounds: {b['rounds']} interleaved (stopped: {why}){spent}"]


def attribution_lines(m, summary: dict) -> list:
    """What each change of the tuned settings contributes: tuned over tuned without it, same rounds;
    and the schedule, by time to target with the baseline's schedule."""
    if not (m.plan or {}).get("attribution", True):
        if (m.plan or {}).get("quick"):
            return ["attribution: not measured (--quick); a full run takes each change out of tuned in the same "
                    "rounds"]
        return []
    out = []
    for e in summary.get("attribution") or []:
        if e.get("note"):
            out.append(f"  {e['change']}: {e['note']}")
            continue
        fig = analysis.figure(e, "ratio", lambda x: f"{x:.2f}x")
        hint = "" if e.get("verdict") in analysis.RESULTS else f"; {_why(e)}"
        alone = " (the only change: the speed-up itself)" if e.get("arm") == "baseline" else ""
        out.append(f"  {e['change']}: {fig}{hint}{alone}")
    conv = summary.get("convergence") or {}
    if conv.get("schedule"):
        same, tuned = conv.get("same_schedule"), conv.get("tuned")
        if same and tuned:
            out.append(f"  {conv['schedule']}: no throughput of its own; time to loss {conv['target_loss']:g}: "
                       f"{analysis.converge_phrase(tuned)} with it, {analysis.converge_phrase(same)} with the "
                       "baseline's schedule")
        else:
            out.append(f"  {conv['schedule']}: no throughput of its own; its time to target was not measured")
    if out:
        out.insert(0, "what each change contributes (tuned over tuned without it, same rounds):")
    return out


def _mean_step(m: Measured, arm: dict, settings: dict) -> Optional[float]:
    """An arm's mean optimizer step: the samples of a step over its median samples/s."""
    sps = arm.get("samples_per_s")
    batch = settings.get("micro_batch") or (m.workload or {}).get("batch_size")
    if not sps or not batch:
        return None
    return batch * (settings.get("accumulation_steps") or 1) / sps


def step_lines(m: Measured, summary: dict) -> list:
    """What the table's step times leave a reader to wonder: a data-wait share that rose while tuned got
    faster (a share of a shorter step), and alike median steps beside unlike samples/s (the median leaves
    the slow steps out)."""
    b, t = summary["baseline"], summary["tuned"]
    out = []
    wb, wt = b.get("data_wait_share"), t.get("data_wait_share")
    db, dt = b.get("data_wait_step_s"), t.get("data_wait_step_s")
    cb, ct = b.get("compute_step_s"), t.get("compute_step_s")
    if None not in (wb, wt, db, dt, cb, ct) and wt > wb + 0.01:
        head = f"data wait {percent(wb)} -> {percent(wt)}"
        if dt <= db:
            out.append(f"{head}: a larger share of a shorter step, not more waiting: the wait per step fell "
                       f"({_ms(db)} -> {_ms(dt)}) and the rest of the step fell more ({_ms(cb)} -> "
                       f"{_ms(ct)})")
        elif ct < cb:
            out.append(f"{head}: tuned computes faster ({_ms(cb)} -> {_ms(ct)} a step) and loading did "
                       f"not keep up (the wait per step {_ms(db)} -> {_ms(dt)}): what is left to win is "
                       "in loading (more loader workers or CPUs)")
        else:
            out.append(f"{head}: tuned waits longer for each batch ({_ms(db)} -> {_ms(dt)} a step): its "
                       "loader settings feed this workload slower than the baseline's here")
    sb, st, sp = b.get("step_s"), t.get("step_s"), summary.get("speedup") or {}
    if sb and st and sp.get("ratio") and abs(st / sb - 1) < 0.02 and abs(sp["ratio"] - 1) > 0.05:
        mb, mt = _mean_step(m, b, m.baseline or {}), _mean_step(m, t, m.tuned or {})
        means = f" (mean step {_ms(mb)} vs {_ms(mt)})" if mb and mt else ""
        out.append(f"step time: the median steps are alike ({_ms(sb)} vs {_ms(st)}) but samples/s "
                   f"differs by {abs(sp['ratio'] - 1):.0%}: the difference lies in the slower steps and between "
                   f"steps{means}, which a median leaves out (an epoch's start, where loader workers restart "
                   "unless persistent)")
    return out


def next_steps(o: Outcome) -> list[str]:
    """What to run or change next, in plain words, after the verdict."""
    m, summary = o.measured, o.summary
    if m.interrupted:
        return ["run it again to the end (Ctrl-C stopped it)"]
    if m.failure is not None:
        return ["fix what failed (the line above says how), then run it again"]
    out: list[str] = []
    if o.load is not None and o.load.busy:
        out.append("run it again when the machine is quiet (other work slowed these figures)")
    sp, t = summary.get("speedup") or {}, summary["tuned"]
    simd = summary.get("sim") or {}
    ib = simd.get("input_bound")
    if ib:
        feed = f"this machine's CPUs cannot feed a {simd['rate']:g} samples/s device: give the loader more CPUs"
        if ib.get("cpus"):
            feed += f" (about {ib['cpus']} of loading)"
        out.append(feed)
        out.append("or make each sample cheaper to load (pre-processed or smaller inputs)")
    if sp.get("verdict") not in analysis.RESULTS and sp.get("ratio"):
        limit = analysis.limit_hit(summary, m.plan)
        if limit is None:
            out.append("take either: more rounds would not tell them apart")
        elif limit[1].startswith("--budget"):
            out.append(f"run it again with {limit[1]}: more rounds would likely resolve the speed-up")
        else:
            out.append(f"{limit[1]}: {limit[0]}")
    elif sp.get("verdict") == stats.SLOWER:
        out.append("keep PyTorch's defaults for now, and measure what suits this workload: debtorch tune "
                   "--measure --write debtorch.toml")
    source = (o.config or {}).get("source")
    if not ib and source == "rules":
        workload = (m.plan or {}).get("workload") or "builtin:cnn"
        out.append(f"measure settings for your own workload: debtorch tune --measure --workload {workload} "
                   "--write debtorch.toml, then debtorch verify-train --config debtorch.toml")
    elif source == "config" and sp.get("verdict") == stats.FASTER:
        name = os.path.basename((o.config or {}).get("path") or "debtorch.toml")
        out.append(f'use it in training: cfg = debtorch.load("{name}") (docs/runtime.md), and cfg.watch(loader) '
                   "to judge the real job")
    if not simd and (t.get("data_wait_share") or 0) >= 0.05 and sp.get("verdict") in analysis.RESULTS:
        out.append(f"tuned still waits for data {percent(t['data_wait_share'])} of the time: more loader workers "
                   "or CPUs (debtorch tune --measure races them)")
    waits = m.host_waits or {}
    if waits.get("per_step"):
        where = os.path.basename(waits.get("file") or "") or "your training script"
        out.append(f"remove the host's waits for the device in the loop: debtorch lint {where}")
    return out


class VerifyView:
    """``debtorch verify-train``: the table, the lines under it and the verdict; or the document."""

    formats = (Format.text, Format.json)

    def __init__(self, outcome: Outcome, exit_code: int, verbose: bool = False):
        self.outcome, self.exit_code, self.verbose = outcome, exit_code, verbose

    def lines(self) -> list:
        o = self.outcome
        m = o.measured
        wl = (m.workload or {}).get("name") or (m.plan or {}).get("workload") or "-"
        where = (o.summary.get("sim") or {}).get("words") or m.device or "-"
        table = Table(f"verify-train: {wl} on {where}", ("", "baseline", "tuned"), rows(m, o.summary))
        verdict = ("verdict: " + o.verdict) if o.verdict else "verdict: nothing measured"
        after = next_steps(o)
        return [table, *lines(m, o.summary, o.warnings, self.verbose), Line(verdict),
                *([Line("next: " + "; ".join(after))] if after else [])]

    def document(self) -> dict:
        """Everything, with the config, the warnings and the machine's facts."""
        o, m = self.outcome, self.outcome.measured
        return document(
            SCHEMA_VERSION, command="verify-train", exit_code=self.exit_code, verdict=o.verdict, summary=o.summary,
            plan=m.plan, device=m.device, workload=m.workload, worker=m.worker,
            settings={"baseline": m.baseline, "tuned": m.tuned, "reference": m.reference, "ddp": m.ddp_settings},
            config=o.config, trials=m.trials, converge=m.converge, ddp=m.ddp, profile=m.profile,
            failure=m.failure.to_json() if m.failure else None, interrupted=m.interrupted, notes=m.notes,
            host_waits=m.host_waits, attribution=m.attribution, budget=m.budget, warnings=o.warnings,
            load=o.load.to_json() if o.load is not None else None, next=next_steps(o), facts=o.facts)


class RefusedView:
    """A verify-train that could not run (bad input, or a worker that failed before the first
    trial): the one line as text, and with ``--json`` a document with the failure."""

    formats = (Format.text, Format.json)

    def __init__(self, message: str, exit_code: int, failure=None, facts: Optional[dict] = None):
        self.message, self.exit_code, self.failure, self.facts = message, exit_code, failure, facts

    def lines(self) -> list:
        return [Line(f"FAILED: {self.message}", "error")]

    def document(self) -> dict:
        failure = (self.failure.to_json() if self.failure is not None
                   else {"kind": "refused", "message": self.message, "user_input": self.exit_code == 2})
        return document(SCHEMA_VERSION, command="verify-train", exit_code=self.exit_code,
                        verdict=f"failed: {self.message}", summary=None, failure=failure, interrupted=False,
                        facts=self.facts)
