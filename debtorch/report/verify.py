"""``debtorch verify-train``: the table, the lines under it and the verdict, or one JSON document.

Pure functions of a :class:`~debtorch.verify.run.Outcome` (what was measured,
its summary, the config and the machine's facts).  The plot: :mod:`debtorch.report.plot`.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from debtorch import inputs, stats
from debtorch.report import Format, document
from debtorch.report.console import Line, Table
from debtorch.train.result import TrialResult
from debtorch.train.settings import Settings, legend
from debtorch.units import human_bytes
from debtorch.verify import analysis
from debtorch.verify.analysis import percent
from debtorch.verify.failures import Failure
from debtorch.verify.measure import Measured
from debtorch.verify.results import ArmSummary, Comparison, Convergence, HostWaits, Summary
from debtorch.verify.run import Outcome

SCHEMA_VERSION = 1


def report_line(result: Optional[HostWaits]) -> Optional[str]:
    """verify-train's line: ``host waits per step: N (file:line, ...)``."""
    if result is None:
        return None
    n = result.per_step
    places = [f"{os.path.basename(x.path)}:{x.line}" for x in result.lines]
    where = ""
    if places:
        more = ", ..." if len(places) > 6 else ""
        where = f" ({', '.join(places[:6])}{more})"
    if n is None:
        count = "-"
    elif float(n).is_integer():
        count = f"{n:.0f}"
    else:
        count = f"{n:.1f}"
    if result.measured:
        how = f"measured with torch.cuda.set_sync_debug_mode over {result.steps} steps"
        if result.elsewhere_per_step:
            how += f"; {result.elsewhere_per_step:.1f} more per step outside the workload's code"
    else:
        how = "read from the code: the lines that would wait on a GPU (debtorch lint)"
    return f"host waits per step: {count}{where}; {how}"


def _rate(arm: ArmSummary) -> str:
    if not arm.samples_per_s:
        return "-"
    txt = f"{arm.samples_per_s:.1f}"
    if arm.runs > 1:
        txt += f" ({arm.samples_per_s_min:.1f}-{arm.samples_per_s_max:.1f})"
    return txt


def _bound(arm: ArmSummary, bound: ArmSummary) -> str:
    """An arm's compute-only bound: its rate, or a failed measurement when it came out below the arm's
    own measured rate (never a figure a ceiling cannot be)."""
    if analysis.bound_below_rate(arm, bound):
        return f"failed measurement ({bound.samples_per_s:.1f}, below the {arm.samples_per_s:.1f} measured)"
    return _rate(bound)


def _bytes(n: Optional[float]) -> str:
    return "-" if n is None else human_bytes(int(n))


def _ms(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.0f} ms" if x >= 0.01 else f"{x * 1000:.1f} ms"


def _ratio(x: float) -> str:
    return f"{x:.2f}x"


def _shorts(m: Measured) -> list[str]:
    """The settings row's short labels (baseline, tuned), when both are known."""
    if m.baseline is None or m.tuned is None:
        return []
    return [m.baseline.short(), m.tuned.short()]


def rows(m: Measured, summary: Summary) -> list[tuple[str, str, str]]:
    """(label, baseline, tuned) rows of the table."""
    b, t = summary.baseline, summary.tuned
    out = []
    if m.baseline is not None and m.tuned is not None:
        out.append(("settings", m.baseline.short() + " (defaults)", m.tuned.short()))
    out.append(("samples/s (min-max)", _rate(b), _rate(t)))
    out.append(("speed-up", "1.00x", analysis.figure(summary.speedup, _ratio)))
    out.append(("step time (median)", _ms(b.step_s), _ms(t.step_s)))
    out.append(("  waiting for data", f"{_ms(b.data_wait_step_s)} ({percent(b.data_wait_share)})",
                f"{_ms(t.data_wait_step_s)} ({percent(t.data_wait_share)})"))
    out.append(("  computing", _ms(b.compute_step_s), _ms(t.compute_step_s)))
    bf, simd = summary.bound_fraction, summary.sim
    if simd is not None:
        out.append(("device bound (simulated)", f"{simd.rate:g}", f"{simd.rate:g}"))
    else:
        out.append(("compute-only bound", _bound(b, summary.baseline_bound), _bound(t, summary.tuned_bound)))
    out.append(("  reached", analysis.figure(bf.baseline, percent), analysis.figure(bf.tuned, percent)))
    out.append(("peak host memory", _bytes(b.peak_host_bytes), _bytes(t.peak_host_bytes)))
    if b.peak_device_bytes is not None or t.peak_device_bytes is not None:
        out.append(("peak device memory", _bytes(b.peak_device_bytes), _bytes(t.peak_device_bytes)))
    if b.gpu_util is not None or t.gpu_util is not None:
        out.append(("GPU utilisation (NVML)", _pct100(b.gpu_util), _pct100(t.gpu_util)))
    conv = summary.convergence
    if conv is not None and conv.target_loss is not None:
        tuned = analysis.converge_phrase(conv.tuned) if conv.tuned is not None else "-"
        out.append((f"time to loss {conv.target_loss:g}", analysis.converge_phrase(conv.baseline or TrialResult()),
                    tuned))
        if conv.same_schedule is not None:
            out.append(("  baseline's schedule", "", analysis.converge_phrase(conv.same_schedule)))
    return out


def _pct100(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _why(c: Comparison) -> str:
    """The verdict when it is a result; otherwise why not, or what would resolve it."""
    if c.verdict in analysis.RESULTS:
        return c.verdict
    return stats.resolve_hint(c.verdict or "", c.more_rounds) or c.reason or c.verdict


def lines(m: Measured, summary: Summary, warnings: Sequence[str] = (), verbose: bool = False) -> list[Line]:
    """The lines under the table: how the measurement went, what to watch for, what failed; ``verbose``:
    also the statistics behind the verdict (the sequential design of the rounds)."""
    out = []
    if shorts := _shorts(m):
        out.append(legend(shorts))
    out.extend(step_lines(m, summary))
    ic = summary.instrumentation
    if ic.value is not None:
        between = summary.tuned.between_steps_share
        text = (f"instrumentation: the per-step clocks and gauges cost {analysis.figure(ic, percent)} of "
                f"tuned's throughput ({_why(ic)}; instrumented vs bare loop, same rounds)")
        if between is not None:
            text += f"; bookkeeping between steps took {percent(between)} of the timed window"
        out.append(text)
    out.extend(sim_lines(summary))
    out.extend(rounds_lines(m, summary, verbose))
    out.extend(attribution_lines(m, summary))
    if waits := report_line(m.host_waits):
        out.append(waits)
    bad = summary.disturbed_rounds
    if bad:
        out.append(f"noise: in round{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} a trial ran at under half "
                   "its median speed (another process busy?); medians resist this, the ranges include it")
    out.extend(convergence_lines(summary.convergence))
    if sc := summary.scaling:
        eff = analysis.figure(sc.efficiency, percent)
        one = f"{sc.one_process_samples_per_s:.1f}" if sc.one_process_samples_per_s else "-"
        many = f"{sc.samples_per_s:.1f}" if sc.samples_per_s else "-"
        line = (f"{sc.nproc} processes ({sc.backend}): {many} samples/s vs {one} in one process: "
                f"scaling efficiency {eff}")
        if sc.gpu_util is not None:
            line += f"; GPU utilisation {_pct100(sc.one_process_gpu_util)} -> {_pct100(sc.gpu_util)}"
        out.append(line)
    t = summary.tuned
    if m.device is not None and m.device.is_cuda and t.runs and t.gpu_util is None:
        out.append("GPU utilisation: NVML gave no samples (nvidia-ml-py missing in the target environment, "
                   "or NVML does not report utilisation for this GPU)")
    if m.profile is not None and m.profile.trace:
        out.append(f"profile: {m.profile.trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    notes = sorted(set(summary.tuned.notes + summary.baseline.notes + list(m.notes)))
    out.extend(f"note: {note}" for note in notes)
    kinded = [Line(text) for text in out] + [Line(f"warning: {w}", "warning") for w in warnings]
    if m.failure:
        f = m.failure
        kinded.append(Line(f"FAILED: {f.line()}" + (f" [{f.finding}]" if f.finding else ""), "error"))
        if f.fix:
            kinded.append(Line(f"  fix: {f.fix}"))
    return kinded


def convergence_lines(conv: Optional[Convergence]) -> list[str]:
    """AMP against fp32, and a tuned run that did not reach the target."""
    if conv is None:
        return []
    out = []
    amp = conv.amp
    if amp is not None and amp.diverged:
        out.append(f"AMP: {amp.reason} (tolerance {amp.tolerance_rel:.0%}; compared with the "
                   f"fp32 {conv.reference} run on the same batches)")
    elif amp is not None and amp.diverged is None:
        out.append(f"AMP: not judged: {amp.reason}")
    elif amp is not None:
        gap = amp.max_gap_rel
        out.append(f"AMP: {amp.precision} loss stays within {amp.tolerance_rel:.0%} of fp32's over "
                   f"{amp.compared_steps} steps" + (f" (largest gap {gap:+.1%})" if gap is not None else ""))
    ct = conv.tuned
    if ct is not None and ct.nonfinite_loss_step is not None:
        out.append(f"convergence: tuned's loss became non-finite at step {ct.nonfinite_loss_step + 1}; "
                   "more steps will not help")
    elif ct is not None and ct.target_step is None and conv.target_loss is not None:
        last = ct.loss_last
        out.append(f"convergence: tuned did not reach loss {conv.target_loss:g} within {ct.steps_run} steps"
                   + (f" (last loss {last:.3g})" if inputs.finite(last) else "")
                   + "; raise --max-steps or set --target-loss")
    return out


def sim_lines(summary: Summary) -> list[str]:
    """On a simulated accelerator: what a per-step sync costs against the model, and what it would take
    to feed the device when tuned cannot."""
    s = summary.sim
    if s is None:
        return []
    out, c, ib = [], s.sync_cost, s.input_bound
    if c.cost.value is not None:
        line = (f"per-step sync (the loss read every step, as .item() does): costs {analysis.figure(c.cost, percent)}"
                f" of tuned's throughput ({_why(c.cost)})")
        if c.predicted is not None:
            line += ("; the model (a drained queue: the synced steps' host time plus the device's and the host's "
                     f"wake-up) gives {percent(c.predicted)}")
            if c.model:
                line += f", {c.model} the interval"
        else:
            line += "; the model's figure is impossible here (a disturbed round)"
        out.append(line)
    if ib is not None:
        one = f"{ib.one_process:.0f}" if ib.one_process else "-"
        out.append(f"input-bound: the device waits for data; this machine's loader ceiling is {ib.ceiling:.0f} samples/s "
                   f"(tuned), one loading process gives {one} (the baseline, loading in the training process): feeding "
                   f"{s.rate:g} samples/s takes about {ib.cpus or '-'} CPUs of loading beside the training loop")
    out.append(f"{s.words}: no model ran; the rates are what this machine's CPUs feed a device of that speed "
               "(docs/engine.md), not a GPU measurement")
    return out


ROUNDS_STOPPED = {"resolved": "the speed-up resolved", "budget spent": "the budget was spent",
                  "cannot resolve": "more rounds would not resolve it"}


def rounds_lines(m: Measured, summary: Summary, verbose: bool = False) -> list[str]:
    """How many interleaved rounds ran, why they stopped, and the budget; ``verbose``: also at which look
    and at which level each look was judged (Pocock's boundary)."""
    b = m.budget
    if b is None or not b.rounds:
        return []
    stopped = b.stopped or ""
    plan = m.plan
    if stopped == "max rounds":
        why = "the most rounds allowed"
        if plan.max_rounds:
            why += f" ({plan.max_rounds}{' with --quick' if plan.quick else ''})"
    else:
        why = ROUNDS_STOPPED.get(stopped, stopped)
    spent = f", {b.spent_s:.0f} s of a {b.budget_s:g} s budget" if b.spent_s is not None and b.budget_s else ""
    seq = summary.sequential
    if verbose and seq.looks.most > 1:
        why += (f" at look {seq.taken} of at most {seq.looks.most}; Pocock's boundary: every look's "
                f"interval at {round(seq.looks.confidence, 5):.2%}, 95% over all of them")
    return [f"rounds: {b.rounds} interleaved (stopped: {why}){spent}"]


def attribution_lines(m: Measured, summary: Summary) -> list[str]:
    """What each change of the tuned settings contributes: tuned over tuned without it, same rounds;
    and the schedule, by time to target with the baseline's schedule."""
    if not m.plan.attribution:
        if m.plan.quick:
            return ["attribution: not measured (--quick); a full run takes each change out of tuned in the same "
                    "rounds"]
        return []
    out = []
    for e in summary.attribution:
        entry = e.entry
        if entry.note:
            out.append(f"  {entry.change}: {entry.note}")
            continue
        hint = ""
        if e.ratio is not None and e.ratio.verdict not in analysis.RESULTS:
            hint = f"; {_why(e.ratio)}"
        alone = " (the only change: the speed-up itself)" if entry.arm == "baseline" else ""
        out.append(f"  {entry.change}: {analysis.figure(e.ratio, _ratio)}{hint}{alone}")
    conv = summary.convergence
    if conv is not None and conv.schedule:
        same, tuned = conv.same_schedule, conv.tuned
        if same is not None and tuned is not None and conv.target_loss is not None:
            out.append(f"  {conv.schedule}: no throughput of its own; time to loss {conv.target_loss:g}: "
                       f"{analysis.converge_phrase(tuned)} with it, {analysis.converge_phrase(same)} with the "
                       "baseline's schedule")
        else:
            out.append(f"  {conv.schedule}: no throughput of its own; its time to target was not measured")
    if out:
        out.insert(0, "what each change contributes (tuned over tuned without it, same rounds):")
    return out


def _mean_step(m: Measured, arm: ArmSummary, settings: Optional[Settings]) -> Optional[float]:
    """An arm's mean optimizer step: the samples of a step over its median samples/s."""
    sps = arm.samples_per_s
    batch = (settings.micro_batch if settings is not None else None) or (
        m.workload.batch_size if m.workload is not None else None)
    if not sps or not batch:
        return None
    return batch * (settings.accumulation_steps if settings is not None else 1) / sps


def step_lines(m: Measured, summary: Summary) -> list[str]:
    """What the table's step times leave a reader to wonder: a data-wait share that rose while tuned got
    faster (a share of a shorter step), and alike median steps beside unlike samples/s (the median leaves
    the slow steps out)."""
    b, t = summary.baseline, summary.tuned
    out = []
    wb, wt = b.data_wait_share, t.data_wait_share
    db, dt = b.data_wait_step_s, t.data_wait_step_s
    cb, ct = b.compute_step_s, t.compute_step_s
    if wb is not None and wt is not None and db is not None and dt is not None and cb is not None and ct is not None \
            and wt > wb + 0.01:
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
    sb, st, ratio = b.step_s, t.step_s, summary.speedup.value
    if sb and st and ratio and abs(st / sb - 1) < 0.02 and abs(ratio - 1) > 0.05:
        mb, mt = _mean_step(m, b, m.baseline), _mean_step(m, t, m.tuned)
        means = f" (mean step {_ms(mb)} vs {_ms(mt)})" if mb and mt else ""
        out.append(f"step time: the median steps are alike ({_ms(sb)} vs {_ms(st)}) but samples/s "
                   f"differs by {abs(ratio - 1):.0%}: the difference lies in the slower steps and between "
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
    sp, t = summary.speedup, summary.tuned
    simd = summary.sim
    ib = simd.input_bound if simd is not None else None
    if simd is not None and ib is not None:
        feed = f"this machine's CPUs cannot feed a {simd.rate:g} samples/s device: give the loader more CPUs"
        if ib.cpus:
            feed += f" (about {ib.cpus} of loading)"
        out.append(feed)
        out.append("or make each sample cheaper to load (pre-processed or smaller inputs)")
    if sp.verdict not in analysis.RESULTS and sp.value:
        limit = analysis.limit_hit(summary, m.plan)
        if limit is None:
            out.append("take either: more rounds would not tell them apart")
        elif limit.budget_s is not None:
            out.append(f"run it again with {limit.change}: more rounds would likely resolve the speed-up")
        else:
            out.append(f"{limit.change}: {limit.what}")
    elif sp.verdict == stats.SLOWER:
        out.append("keep PyTorch's defaults for now, and measure what suits this workload: debtorch tune "
                   "--measure --write debtorch.toml")
    source = o.config.source if o.config is not None else None
    if ib is None and source == "rules":
        workload = m.plan.workload or "builtin:cnn"
        out.append(f"measure settings for your own workload: debtorch tune --measure --workload {workload} "
                   "--write debtorch.toml, then debtorch verify-train --config debtorch.toml")
    elif source == "config" and sp.verdict == stats.FASTER:
        name = os.path.basename((o.config.path if o.config is not None else None) or "debtorch.toml")
        out.append(f'use it in training: cfg = debtorch.load("{name}") (docs/runtime.md), and cfg.watch(loader) '
                   "to judge the real job")
    if simd is None and (t.data_wait_share or 0) >= 0.05 and sp.verdict in analysis.RESULTS:
        out.append(f"tuned still waits for data {percent(t.data_wait_share)} of the time: more loader workers "
                   "or CPUs (debtorch tune --measure races them)")
    waits = m.host_waits
    if waits is not None and waits.per_step:
        where = os.path.basename(waits.file or "") or "your training script"
        out.append(f"remove the host's waits for the device in the loop: debtorch lint {where}")
    return out


class VerifyView:
    """``debtorch verify-train``: the table, the lines under it and the verdict; or the document."""

    formats = (Format.text, Format.json)

    def __init__(self, outcome: Outcome, exit_code: int, verbose: bool = False):
        self.outcome, self.exit_code, self.verbose = outcome, exit_code, verbose

    def lines(self) -> list[Any]:
        o = self.outcome
        m = o.measured
        wl = (m.workload.name if m.workload is not None else None) or m.plan.workload or "-"
        if o.summary.sim is not None:
            where = o.summary.sim.words
        else:
            where = str(m.device) if m.device is not None else "-"
        table = Table(f"verify-train: {wl} on {where}", ("", "baseline", "tuned"), rows(m, o.summary))
        verdict = ("verdict: " + o.verdict) if o.verdict else "verdict: nothing measured"
        after = next_steps(o)
        return [table, *lines(m, o.summary, o.warnings, self.verbose), Line(verdict),
                *([Line("next: " + "; ".join(after))] if after else [])]

    def document(self) -> dict[str, Any]:
        """Everything, with the config, the warnings and the machine's facts."""
        o, m = self.outcome, self.outcome.measured
        return document(
            SCHEMA_VERSION, command="verify-train", exit_code=self.exit_code, verdict=o.verdict,
            summary=o.summary.to_json(), plan=m.plan.to_json(), device=m.device.to_json() if m.device else None,
            workload=m.workload.to_json() if m.workload is not None else {}, worker=m.worker,
            settings=m.settings_json(), config=o.config.to_json() if o.config is not None else None,
            trials=m.trials_json(), converge=m.converge.to_json(), ddp=[d.to_json() for d in m.ddp],
            profile=m.profile.to_json() if m.profile is not None else None,
            failure=m.failure.to_json() if m.failure else None, interrupted=m.interrupted, notes=m.notes,
            host_waits=m.host_waits.to_json() if m.host_waits is not None else None,
            attribution=[a.to_json() for a in m.attribution], budget=m.budget.to_json() if m.budget else {},
            warnings=o.warnings, load=o.load.to_json() if o.load is not None else None, next=next_steps(o),
            facts=o.facts)


class RefusedView:
    """A verify-train that could not run (bad input, or a worker that failed before the first
    trial): the one line as text, and with ``--json`` a document with the failure."""

    formats = (Format.text, Format.json)

    def __init__(self, message: str, exit_code: int, failure: Optional[Failure] = None,
                 facts: Optional[dict[str, Any]] = None):
        self.message, self.exit_code, self.failure, self.facts = message, exit_code, failure, facts

    def lines(self) -> list[Line]:
        return [Line(f"FAILED: {self.message}", "error")]

    def document(self) -> dict[str, Any]:
        failure = (self.failure.to_json() if self.failure is not None
                   else {"kind": "refused", "message": self.message, "user_input": self.exit_code == 2})
        return document(SCHEMA_VERSION, command="verify-train", exit_code=self.exit_code,
                        verdict=f"failed: {self.message}", summary=None, failure=failure, interrupted=False,
                        facts=self.facts)
