"""One ``debtorch tune``, from a machine to settings: the rules, then (``--measure``, on the live machine
only) short trials on a real workload, and the config written from them.  The machine is a facts
document, read through a Host (live or recorded) or saved elsewhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from debtorch import facts as facts_mod
from debtorch import fingerprint, knowledge
from debtorch.budget import Budget
from debtorch.facts import loadavg
from debtorch.host import Host
from debtorch.machine import Machine
from debtorch.train.settings import Settings
from debtorch.tune import calibration, config, measure, rules
from debtorch.tune.search import Result

# What the rules and the fingerprint read (not storage, APT or CUDA libraries: seconds saved).
SECTIONS = ("os", "cpu", "memory", "nvidia", "python", "env")


def read_facts(host: Host, python: Optional[str] = None) -> dict:
    """The facts tune needs, read through ``host``."""
    return facts_mod.collect(host, facts_mod.Options(python=python, sections=SECTIONS))


@dataclass
class Tuned:
    rec: rules.Recommendation
    fingerprint: dict
    result: Optional[Result] = None                    # the measurement, when there was one
    options: Optional[measure.MeasureOptions] = None   # what was measured
    load: Optional[loadavg.Busy] = None                # whether the machine was busy while it was measured

    def write(self, path: str, force: bool = False) -> None:
        """Write the config (atomically; an existing file only with ``force``).  Raises ConfigError."""
        if self.load is not None and self.load.busy:
            self.rec.notes.append(self.load.warning())   # the file keeps it beside the settings
        opts = self.options
        tuned = config.tuned_table(self.rec.chosen_by, self.rec.device, workload=opts.workload if opts else None,
                                   budget_s=opts.budget_s if opts else None)
        config.write_config(path, self.rec, self.fingerprint, tuned, force=force)


def tune(facts: dict, request: rules.Request, host: Optional[Host] = None,
         options: Optional[measure.MeasureOptions] = None, on_trial: Optional[Callable] = None,
         on_label: Optional[Callable[[str], None]] = None) -> Tuned:
    """Settings for the machine ``facts`` describe, by the rules; with ``options``, measured on ``host``
    (``options.search`` false: the rules calibrated on the workload).  Raises RequestError (the request
    does not fit the machine) and MeasureError (``user_input``: about what was given)."""
    rec = rules.recommend(facts, request)
    tuned = Tuned(rec, fingerprint.from_facts(facts), options=options)
    if options is not None:
        what = "--measure" if options.search else "--workload"
        if host is None or not host.live:
            raise measure.MeasureUsageError(f"{what} needs this machine, not a recorded or saved one")
        if request.device is not None and request.device.is_cuda and not Machine.from_facts(facts).gpus.compute:
            raise measure.MeasureUsageError(f"--device {request.device} {what} needs a GPU on this machine; the "
                                            "facts list none")
        before = loadavg.read(host)
        if not options.search:
            tuned.rec = calibrated(facts, request, rec, options, host, on_label)
            # the calibration's trials keep a compute thread per CPU and a loader worker runnable, at most
            tuned.load = load_check(before, loadavg.read(host), Machine.from_facts(facts).cpus.usable,
                                    rec.per_process_cpus + 1)
            return tuned
        tuned.result = measure.measure(rec, facts, options, on_trial=on_trial, host=host)
        tuned.load = load_check(before, loadavg.read(host), Machine.from_facts(facts).cpus.usable,
                                max((trial_tasks(t.settings, rec.per_process_cpus) for t in tuned.result.trials),
                                    default=rec.per_process_cpus))
    return tuned


def calibrated(facts: dict, request: rules.Request, rec: rules.Recommendation, options: measure.MeasureOptions,
               host: Host, on_label: Optional[Callable[[str], None]] = None) -> rules.Recommendation:
    """The rules calibrated on ``options.workload`` (docs/tune.md, "Calibrated rules"): a few trials of the
    rules' settings through the engine ``--measure`` uses, within ``options.budget_s`` from the command's
    start (the calibration itself at most ``calibration.CALIBRATION_S``), then the rules again with what
    they measured.  Raises MeasureError (a BudgetStop when the budget ended in a trial)."""
    budget = Budget(options.budget_s, start=options.started)
    engine = measure.EngineTrials(options.workload, rec.device, options.python, options.seed, host, budget=budget)
    budget.hold(engine.stop_s)   # stopping the worker ends within the budget too (as --measure's)
    try:
        batch = int(engine.info.batch_size or 1)
        try:
            cal = calibration.calibrate(engine.trial, rec.settings, rec.device, batch, rec.per_process_cpus,
                                        seconds=min(calibration.CALIBRATION_S, budget.left()), on_trial=on_label)
        except calibration.CalibrationError as exc:
            raise measure.MeasureError(f"calibration failed: {exc}") from None
        except measure.MeasureError:
            raise
        except Exception as exc:  # a trial that failed (WorkerError): one line
            raise measure.MeasureError(f"calibration failed: {exc}") from None
    finally:
        engine.close()
    again = rules.recommend(facts, dataclasses.replace(request, calibration=cal))
    again.notes.append(calibration.describe(cal))
    return again


def trial_tasks(settings: Settings, cpus: int) -> int:
    """The tasks a trial of ``settings`` keeps runnable: its compute threads (PyTorch's default: the
    process's CPUs) and its loader workers."""
    return (settings.threads or cpus) + settings.num_workers


def load_check(before: loadavg.Reading, after: loadavg.Reading, usable_cpus: int, own: int) -> loadavg.Busy:
    """:func:`debtorch.facts.loadavg.judge` with checks/thresholds.toml's limits."""
    return loadavg.judge(before, after, usable_cpus, own, float(knowledge.threshold("busy_load_per_cpu")),
                         float(knowledge.threshold("busy_steal_share")))
