"""One ``debtorch tune``, from a machine to settings: the rules, then (``--measure``, on the live machine
only) short trials on a real workload, and the config written from them.  The machine is a facts
document, read through a Host (live or recorded) or saved elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from debtorch import facts as facts_mod
from debtorch import fingerprint, knowledge
from debtorch.facts import loadavg
from debtorch.host import Host
from debtorch.machine import Machine
from debtorch.train.settings import Settings
from debtorch.tune import config, measure, rules
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
        measured = self.result is not None
        if self.load is not None and self.load.busy:
            self.rec.notes.append(self.load.warning())   # the file keeps it beside the settings
        tuned = config.tuned_table("measured" if measured else "rules", self.rec.device,
                                   workload=self.options.workload if measured else None,
                                   budget_s=self.options.budget_s if measured else None)
        config.write_config(path, self.rec, self.fingerprint, tuned, force=force)


def tune(facts: dict, request: rules.Request, host: Optional[Host] = None,
         options: Optional[measure.MeasureOptions] = None, on_trial: Optional[Callable] = None) -> Tuned:
    """Settings for the machine ``facts`` describe, by the rules; with ``options``, measured on ``host``.
    Raises RequestError (the request does not fit the machine) and MeasureError (``user_input``: about
    what was given)."""
    rec = rules.recommend(facts, request)
    tuned = Tuned(rec, fingerprint.from_facts(facts), options=options)
    if options is not None:
        if host is None or not host.live:
            raise measure.MeasureUsageError("--measure needs this machine, not a recorded or saved one")
        if request.device == "cuda" and not Machine.from_facts(facts).compute_gpus:
            raise measure.MeasureUsageError("--device cuda --measure needs a GPU on this machine; the facts list none")
        before = loadavg.read(host)
        tuned.result = measure.measure(rec, facts, options, on_trial=on_trial, host=host)
        tuned.load = load_check(before, loadavg.read(host), Machine.from_facts(facts).cpus.usable,
                                max((trial_tasks(t.settings, rec.per_process_cpus) for t in tuned.result.trials),
                                    default=rec.per_process_cpus))
    return tuned


def trial_tasks(settings: Settings, cpus: int) -> int:
    """The tasks a trial of ``settings`` keeps runnable: its compute threads (PyTorch's default: the
    process's CPUs) and its loader workers."""
    return (settings.threads or cpus) + settings.num_workers


def load_check(before: loadavg.Reading, after: loadavg.Reading, usable_cpus: int, own: int) -> loadavg.Busy:
    """:func:`debtorch.facts.loadavg.judge` with checks/thresholds.toml's limits."""
    return loadavg.judge(before, after, usable_cpus, own, float(knowledge.threshold("busy_load_per_cpu")),
                         float(knowledge.threshold("busy_steal_share")))
