"""``debtorch tune``: the settings with their reasons and the trials, as text, JSON or shell exports."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Optional

from debtorch.report import Format
from debtorch.report.console import Line
from debtorch.train.settings import TABLE_OF, TABLES, UNSET, legend
from debtorch.tune import prescribe
from debtorch.tune.rules import Recommendation
from debtorch.tune.run import Tuned
from debtorch.tune.search import Result
from debtorch.verify.analysis import figure
from debtorch.verify.results import Comparison

JSON_SCHEMA_VERSION = 1


def _value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


CHOSEN_BY = {"rules": "the rules", "measured": "measurement", "calibrated": "the rules calibrated on the workload",
             "watch": "your job's watch record"}


def chosen_by(by: str) -> str:
    """How the settings were chosen, in words ('the rules ...', 'measurement ...')."""
    return CHOSEN_BY.get(by, by)


def settings_lines(rec: Recommendation, width: int = 100) -> list[str]:
    """The settings table: key, value, reason (rule id and text)."""
    values = rec.settings.to_dict()
    device = rec.device.words() if rec.device.simulated else f"{rec.device} training"
    lines = [f"debtorch tune: {device}, chosen by {chosen_by(rec.chosen_by)}"]
    keyw = max(len(f"{TABLE_OF[n]}.{n}") for n in values)
    for table, names in TABLES.items():
        for name in names:
            label = f"{table}.{name}"
            v = values[name]
            shown = _value(v) if v is not None else f"unset ({UNSET.get(name, 'default')})"
            reason = rec.reasons.get(name)
            lines.append(f"  {label:<{keyw}}  {shown}")
            if reason is not None:
                lines.append(f"  {'':<{keyw}}    {reason}")
    if rec.total_steps:
        lines.append(f"  run: {rec.total_steps} optimizer steps")
    if rec.global_batch:
        lines.append(f"  global batch: {rec.global_batch} samples per optimizer step")
    if rec.env:
        lines.append("environment for job scripts (--emit env):")
        for name in sorted(rec.env):
            lines.append(f"  {name}={rec.env[name]}")
            lines.append(f"    {rec.env_reasons[name]}")
    for note in rec.notes:
        lines.append(f"note: {note}")
    if rec.prescription is not None:
        lines.append(prediction_line(rec.prescription))
    return lines


def prediction_line(p: prescribe.Plan) -> str:
    """What the prescribed loader is predicted to do (tune --from-watch); when it keeps up, what a queued
    batch's hand-over takes on the CPUs the workers keep busy."""
    why = ""
    if p.supplied >= p.consumed and p.handover_s is None:
        why = f" (the workers would keep {p.workers_cpus:.1f} CPUs busy decoding, all of them)"
    elif p.saturated:
        why = (f", or more: the workers would keep {p.workers_cpus:.1f} of the {p.cpus} CPUs busy decoding, where "
               "batches are often not ready in time (docs/tune.md)")
    elif p.supplied >= p.consumed and p.handover_s is not None:
        why = (f" (a queued batch's hand-over, about {1e3 * p.handover_s:.1f} ms on CPUs the workers keep "
               f"{p.workers_cpus:.1f} busy)")
    return (f"prediction: {p.workers} worker(s) at {p.per_worker:.0f} samples/s each supply up to {p.supplied:.0f}; "
            f"the loop consumes {p.consumed:.0f}: data wait about {p.predicted_wait:.0%}{why} "
            "(check it: run the job again with cfg.watch)")


@dataclass
class _Row:
    """One settings' trials in the table: the phase it was first raced for, its rates, waits and errors."""

    phase: str
    rates: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def median(self) -> float:
        """The median rate, -1 when every trial failed (such rows sort last)."""
        return statistics.median(self.rates) if self.rates else -1.0


def trials_lines(result: Result, verbose: bool = False) -> list[str]:
    """The table of trials at the end of a measurement, one row per settings tried; ``verbose``: also the
    sequential design "beyond noise" was judged by (Pocock's boundary)."""
    rows: dict[str, _Row] = {}
    for t in result.trials:
        r = rows.setdefault(t.settings.short(), _Row(t.phase))
        r.seconds += t.seconds
        if t.samples_per_s is not None:
            r.rates.append(t.samples_per_s)
        if t.data_wait is not None:
            r.waits.append(t.data_wait)
        if t.error:
            r.errors.append(t.error)
    best = result.best.short()
    w = max([len(k) for k in rows] + [8])
    held = f", {result.reserve:.1f} s of it held for stopping the worker" if result.reserve else ""
    lines = [f"trials: {len(result.trials)} in {result.spent:.1f} s of a {result.budget:.0f} s budget "
             f"({result.stopped}{held})",
             f"  {'settings':<{w}}  {'runs':>4}  {'samples/s':>9}  {'spread':>7}  {'data wait':>9}  first raced for"]
    for k in sorted(rows, key=lambda k: -rows[k].median()):
        r = rows[k]
        if r.rates:
            med = statistics.median(r.rates)
            spread = (max(r.rates) - min(r.rates)) / med if len(r.rates) > 1 and med else 0.0
            cells = f"{med:>9.1f}  {spread:>7.1%}"
        else:
            cells = f"{'failed':>9}  {'':>7}"
        wait = f"{statistics.median(r.waits):>9.1%}" if r.waits else f"{'-':>9}"
        mark = " <- chosen" if k == best else ""
        lines.append(f"  {k:<{w}}  {len(r.rates) + len(r.errors):>4}  {cells}  {wait}  {r.phase}{mark}")
        if r.errors:
            lines.append(f"  {'':<{w}}  error: {r.errors[0]}")
    lines.append(f"  {legend(list(rows))}")
    if result.looks and verbose:
        lines.append(f"beyond noise: Pocock's boundary, {result.looks.most} looks a pair at most, each at "
                     f"{result.looks.confidence:.2%}")
    if result.close_call():
        lines.append(f"the chosen settings are {result.close_call()}: either will do "
                     f"(noise {result.noise:.1%} a trial)")
    for a, b in result.interactions:
        lines.append(f"interaction: the best {a} depends on {b}; they were raced together")
    return lines + contribution_lines(result)


def _ratio(x: float) -> str:
    return f"{x:.2f}x"


def contribution_lines(result: Result) -> list[str]:
    """What each changed choice contributes where the search ended (from trials already run)."""
    out = []
    for c in result.contributions():
        if c.estimate is None:
            out.append(f"  {c.change}: not measured with the other choices as they ended")
            continue
        out.append(f"  {c.change}: {figure(Comparison('ratio', c.estimate), _ratio)}")
    if out:
        out.insert(0, "what each changed choice contributes (chosen / the same with the rules' value, trials above):")
    return out


class TuneView:
    """``debtorch tune``: the trials (when measured) and the settings (unless only written)."""

    formats = (Format.text, Format.json, Format.env)

    def __init__(self, tuned: Tuned, settings: bool = True, written: Optional[str] = None, verbose: bool = False):
        self.rec, self.fingerprint, self.result, self.settings = tuned.rec, tuned.fingerprint, tuned.result, settings
        self.load, self.written, self.verbose = tuned.load, written, verbose
        self.workload = tuned.options.workload if tuned.options is not None else None

    def lines(self) -> list:
        out = [Line(text) for text in trials_lines(self.result, self.verbose)] if self.result is not None else []
        if self.load is not None and self.load.busy:
            out.append(Line(f"warning: {self.load.warning()}", "warning"))
        out += [Line(text) for text in (settings_lines(self.rec) if self.settings else [])]
        return out + [Line("next: " + "; ".join(self.next_steps()))]

    def next_steps(self) -> list[str]:
        """What to run next, in plain words: save the settings, load them in training, check them with
        verify-train, measure them on the user's workload."""
        out = []
        if self.load is not None and self.load.busy:
            out.append("measure again when the machine is quiet (other work slowed these trials)")
        device = f" --device {self.rec.device}" if self.rec.device.simulated else ""
        workload = f" --workload {self.workload}" if self.workload and self.workload != "builtin:cnn" else ""
        if self.written is None:
            again = "the same command with --write debtorch.toml" if self.result is not None else (
                "debtorch tune --write debtorch.toml")
            out.append(f"save them for your training script: {again}")
        else:
            out.append(f'load them in your training script: cfg = debtorch.load("{self.written}") (docs/runtime.md)')
            out.append(f"see what they change on this machine: debtorch verify-train --config {self.written}"
                       f"{device}{workload}")
        if self.result is None:
            out.append("measure them on your own workload: debtorch tune --measure --workload MODULE:FUNCTION "
                       "--write debtorch.toml (docs/workloads.md)")
        return out

    def document(self) -> dict[str, Any]:
        """Settings, reasons, environment, fingerprint and trials."""
        rec, result = self.rec, self.result
        measurement = None
        if result is not None:
            measurement = result.to_json(load=self.load.to_json() if self.load is not None else None)
        return {
            "schema_version": JSON_SCHEMA_VERSION,
            "next": self.next_steps(),
            "device": str(rec.device),
            "chosen_by": rec.chosen_by,
            "settings": rec.settings.to_dict(),
            "reasons": {k: {"rule": r.rule, "text": r.text} for k, r in rec.reasons.items()},
            "env": dict(rec.env),
            "env_reasons": {k: {"rule": r.rule, "text": r.text} for k, r in rec.env_reasons.items()},
            "notes": list(rec.notes),
            "total_steps": rec.total_steps,
            "epochs": rec.epochs,
            "global_batch": rec.global_batch,
            "torchrun": rec.torchrun_line(),
            "fingerprint": self.fingerprint,
            "measurement": measurement,
            "calibration": rec.calibration.to_json() if rec.calibration is not None else None,
            "prescription": rec.prescription.to_json() if rec.prescription is not None else None,
        }

    def env(self) -> str:
        return self.rec.emit_env()
