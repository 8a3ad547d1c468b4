"""One ``debtorch verify-train``, from its options to what was measured (torch-free): :func:`prepare`
checks the options before anything runs, loads the config and reads this machine; :meth:`Prepared.run`
takes the tuned settings (the config's, or the rules' for this machine and workload), runs the plan
and summarises it.  The command line renders the :class:`Outcome` and chooses the exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from debtorch import facts as facts_mod
from debtorch import fingerprint, inputs
from debtorch.budget import WEEK_S, count_problem, seconds_problem, still_starting
from debtorch.facts import loadavg
from debtorch.host import Host
from debtorch.machine import Machine
from debtorch.train.device import CPU, Device
from debtorch.train.result import LoadedWorkload
from debtorch.train.settings import PROCESS_MAX, Settings
from debtorch.transport.client import WorkerError, worker_python
from debtorch.tune import calibration, config, rules
from debtorch.tune.config import ConfigError, ConfigFile, load_config, usable_cpus
from debtorch.tune.run import load_check, trial_tasks
from debtorch.verify import analysis
from debtorch.verify.failures import Failure, from_worker_error, nonfinite_loss, stale_config
from debtorch.verify.measure import (
    MIN_BUDGET_QUICK_S,
    MIN_BUDGET_S,
    MIN_REPEATS,
    Measured,
    Plan,
    Progress,
    Steps,
    Verifier,
)
from debtorch.verify.results import Summary


def _quiet(text: str) -> None:
    """No one to warn."""


class Refused(Exception):
    """The run cannot go ahead; one line.  ``user_input``: about what the user gave.
    ``failure``: the worker's failure, when it failed before the plan (loading the workload)."""

    def __init__(self, message: str, user_input: bool = True, failure: Optional[Failure] = None):
        super().__init__(message)
        self.user_input = user_input
        self.failure = failure


@dataclass
class Options:
    """The command's options, as given (None: the default, which --quick changes)."""

    workload: str = "builtin:cnn"
    device: Optional[Device] = None
    config: Optional[str] = None
    python: Optional[str] = None
    quick: bool = False
    budget: Optional[float] = None    # None: the plan's default (300 s; --quick 13 s)
    started: Optional[float] = None   # time.monotonic() at the command's start
    repeats: int = 3
    steps: Optional[int] = None
    warmup: Optional[int] = None
    max_steps: Optional[int] = None
    target_loss: Optional[float] = None
    seed: int = 0
    profile: Optional[str] = None
    nproc: Optional[int] = None
    launcher_args: list[str] = field(default_factory=list)
    timeout: float = 900.0
    force: bool = False
    cwd: Optional[str] = None
    oversubscribe: bool = False   # workers and processes beyond this machine's bound are deliberate


# Ranges of the numeric options (docs/verify-train.md): what a run can use, and what the
# libraries underneath accept (a seed numpy takes, a TCP port).
MAX_REPEATS = 1000
MAX_STEPS = 1_000_000
MAX_TIMEOUT_S = WEEK_S
SEED_MAX = 2**32 - 1
CALIBRATION_SHARE = 0.1   # of the budget, at most, for calibrating the rules' loader on the workload


def launcher_args(nnodes: Optional[int], node_rank: Optional[int], master_addr: Optional[str],
                  master_port: Optional[int]) -> list[str]:
    """torch.distributed.run's multi-node options, checked, then passed through as given.

    Raises :class:`Refused` for values torchrun would hang on or reject late: a node
    rank outside ``0 .. nnodes - 1``, a port outside 1-65535, an address that is not one word."""
    problem = None if nnodes is None else count_problem("--nnodes", nnodes, 1, PROCESS_MAX)
    if problem:
        raise Refused(problem)
    if node_rank is not None and not 0 <= node_rank < (nnodes or 1):
        raise Refused(f"--node-rank {node_rank} is not a rank of {nnodes or 1} node(s): it must be from 0 to "
                      f"{(nnodes or 1) - 1}" + ("" if nnodes else " (give --nnodes)"))
    if master_port is not None and not 1 <= master_port <= 65535:
        raise Refused(f"--master-port must be a TCP port, 1 to 65535 (got {master_port})")
    if master_addr is not None and (not master_addr.strip() or any(c.isspace() for c in master_addr)):
        raise Refused(f"--master-addr must be a host name or address (got {master_addr!r})")
    given = (("nnodes", nnodes), ("node_rank", node_rank), ("master_addr", master_addr), ("master_port", master_port))
    return [f"--{name}={value}" for name, value in given if value is not None]


def _range_problem(o: Options) -> Optional[str]:
    """The first numeric option outside its range (docs/verify-train.md), or None."""
    problem = seconds_problem("--timeout", o.timeout, most=MAX_TIMEOUT_S)
    if problem is None and o.budget is not None:
        problem = seconds_problem("--budget", o.budget, MIN_BUDGET_QUICK_S if o.quick else MIN_BUDGET_S)
    if problem:
        return problem
    counts = [("--seed", o.seed, 0, SEED_MAX, ""),
              ("--repeats", o.repeats, MIN_REPEATS, MAX_REPEATS, "medians need interleaved repeats"),
              ("--steps", o.steps, 2, MAX_STEPS, ""), ("--warmup", o.warmup, 0, MAX_STEPS, ""),
              ("--max-steps", o.max_steps, 0, MAX_STEPS, ""), ("--nproc", o.nproc, 1, PROCESS_MAX, "")]
    for name, value, least, most, why in counts:
        problem = None if value is None else count_problem(name, value, least, most, why)
        if problem:
            return problem
    if o.target_loss is not None and not inputs.finite(o.target_loss):
        return "--target-loss must be a finite number"
    return None


@dataclass(frozen=True)
class TunedBy:
    """Where the tuned settings came from (the JSON's ``config``): a config file (``path``), or the rules
    for this machine and the loaded workload; ``record`` is what the document keeps beside the source."""

    source: str                       # "config" or "rules"
    record: dict[str, Any]
    path: Optional[str] = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TunedBy":
        return cls(doc["source"], {k: v for k, v in doc.items() if k != "source"}, doc.get("path"))

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, **self.record}


@dataclass
class Outcome:
    """What a run measured, with what the report shows beside it."""

    measured: Measured
    summary: Summary
    verdict: str
    warnings: list[str]
    config: Optional[TunedBy]   # where the tuned settings came from
    facts: dict[str, Any]
    load: Optional[loadavg.Busy] = None   # whether the machine was busy while measuring

    @property
    def measured_anything(self) -> bool:
        return self.summary.measured_anything


def plan_of(o: Options) -> Plan:
    """The plan for these options; :class:`Refused` names the first problem."""
    if o.launcher_args and not (o.nproc and o.nproc > 1):
        raise Refused("--nnodes, --node-rank, --master-addr and --master-port need --nproc N (N > 1)")
    problem = _range_problem(o)
    if problem:
        raise Refused(problem)
    if o.device is not None and o.device.simulated and (o.nproc or 1) > 1:
        raise Refused("--nproc: a simulated accelerator is one device in one process")
    kw: dict[str, Any] = {"workload": o.workload, "device": o.device, "repeats": o.repeats,
                          "target_loss": o.target_loss, "seed": o.seed, "launcher_args": o.launcher_args,
                          "timeout": o.timeout, "cwd": o.cwd, "profile_dir": o.profile, "started": o.started}
    for name, value in (("steps", o.steps), ("warmup", o.warmup), ("converge_steps", o.max_steps),
                        ("budget_s", o.budget)):
        if value is not None:
            kw[name] = value
    return Plan.quick_plan(**kw) if o.quick else Plan(**kw)


def check_profile_dir(profile: str, force: bool) -> None:
    """Refuse a --profile DIR whose trace cannot be written (before minutes of measuring)."""
    trace = os.path.join(profile, "trace.json")
    if os.path.lexists(trace) and not force:
        raise Refused(f"--profile {profile}: {trace} exists; use --force to replace it")
    try:
        os.makedirs(profile, exist_ok=True)
    except OSError as exc:
        raise Refused(f"--profile {profile}: cannot create the directory ({exc.strerror or exc})") from None
    if not os.access(profile, os.W_OK | os.X_OK):
        raise Refused(f"--profile {profile}: directory is not writable")


def prepare(o: Options, host: Host) -> "Prepared":
    """Everything before the plan runs, on the live machine ``host``; the worker's process starts here, to
    import torch while the machine is read: call :meth:`Prepared.run` (or :meth:`Prepared.close`) after."""
    if not host.live:
        raise Refused(f"verify-train trains on this machine, not a recorded one ({host.label})")
    plan = plan_of(o)
    if o.profile:
        check_profile_dir(o.profile, o.force)
    cfg = None
    if o.config:
        try:
            cfg = load_config(o.config, cpus=None if o.oversubscribe else usable_cpus(host))
        except ConfigError as exc:
            raise Refused(f"--config {exc}") from None
    if o.nproc is not None and not o.oversubscribe:
        workers = cfg.settings.num_workers if cfg is not None else 0
        bad = config.machine_problem({"nproc": o.nproc, "num_workers": workers}, usable_cpus(host))
        if bad:
            what = f"--nproc {bad[1]}" if bad[0] == "nproc" else f"--nproc {o.nproc} with {o.config}'s workers: {bad[1]}"
            raise Refused(f"{what}; give --oversubscribe to allow it deliberately")
    try:
        plan.python = worker_python(o.python, host)
    except WorkerError as exc:
        raise Refused(str(exc)) from None
    verifier = Verifier(plan)
    before = loadavg.read(host)   # before the worker starts: other work's load, not ours
    with contextlib.suppress(WorkerError):  # starting it again in run() says why, as one line
        verifier.spawn()
    try:
        # The machine's facts (no --deep): the JSON document's and the stale-config check's.
        facts = facts_mod.collect(host, facts_mod.Options(python=plan.python))
    except BaseException:
        verifier.close(kill=True)
        raise
    ready = Prepared(o, plan, cfg, facts, verifier=verifier, host=host, load_before=before)
    if cfg is not None and o.config is not None:
        stale = stale_config(cfg.fingerprint, fingerprint.from_facts(ready.facts))
        if stale:
            ready.warnings.append(f"{o.config} was tuned on another machine or environment: {'; '.join(stale)} "
                                  "(re-tune here: debtorch tune --measure --write)")
        path = os.path.abspath(o.config)
        ready.config = TunedBy("config", {"path": path, "settings": cfg.settings.to_dict(), "tuned": cfg.tuned,
                                          "fingerprint": cfg.fingerprint, "env": cfg.env,
                                          "total_steps": cfg.total_steps, "epochs": cfg.epochs, "stale": stale}, path)
    if o.nproc is not None:
        plan.nproc = o.nproc
    return ready


@dataclass
class Prepared:
    """A checked run, ready to start; ``warnings`` so far (a config tuned elsewhere)."""

    options: Options
    plan: Plan
    cfg: Optional[ConfigFile]
    facts: dict[str, Any]
    config: Optional[TunedBy] = None
    warnings: list[str] = field(default_factory=list)
    verifier: Optional[Verifier] = None   # its worker already started by prepare()
    host: Optional[Host] = None           # this machine, for the load after measuring
    load_before: Optional[loadavg.Reading] = None

    def close(self) -> None:
        """Stop the worker prepare() started, when the run is not wanted after all."""
        if self.verifier is not None:
            self.verifier.close(kill=True)

    def run(self, progress: Optional[Steps] = None, warn: Optional[Callable[[str], None]] = None) -> Outcome:
        """Start the worker and run the plan.  A failure during the plan is in the outcome;
        one before it (the worker cannot start, no settings fit) raises :class:`Refused`.
        Ctrl-C ends the run with what was measured so far (``measured.interrupted``)."""
        verifier = self.verifier or Verifier(self.plan)
        verifier.facts, verifier.progress = self.facts, progress or Progress()
        m = verifier.measured
        try:
            # The Verifier closes its worker on the way out and kills it on any exception
            # (Ctrl-C, Refused), so no worker outlives the run.
            with verifier:
                try:
                    info = verifier.start()
                except WorkerError as exc:
                    failure = from_worker_error(exc, "starting", self.facts)
                    if exc.kind == "budget" and not verifier.where.hung() and self.plan.budget_s:
                        # Still starting (importing torch, loading the workload) when the budget ended.
                        failure = Failure("too_small", still_starting(self.plan.budget_s, verifier.budget.spent()))
                    raise Refused(failure.message + (f"; {failure.fix}" if failure.fix else ""),
                                  failure.user_input, failure) from None
                tuned = self._tuned(info, warn or _quiet, verifier)
                if self.options.nproc is None and not self.plan.simulated:
                    self.plan.nproc = tuned.nproc  # the config's (or the rules') processes per machine
                m.plan = self.plan.copy()
                verifier.run(Settings(), tuned)
        except KeyboardInterrupt:
            m.interrupted = True
        if m.failure is not None and m.failure.kind == "too_small":
            raise Refused(m.failure.message, True, m.failure)   # nothing measured: the budget that would do
        summary = analysis.summary(m)
        if m.failure is None and summary.nonfinite_loss:
            # A loss that became NaN is a failed run (exit 1), never "within 10%" of anything.
            m.failure = nonfinite_loss(summary.nonfinite_loss)
            summary = dataclasses.replace(summary, failed=m.failure.line())
        verdict = analysis.verdict(summary, m.plan) if summary.measured_anything else ""
        if m.failure is not None and not verdict:
            verdict = f"failed: {m.failure.line()}"
        load = self._load_check(m)
        if load is not None and load.busy:
            self.warnings.append(load.warning())
            (warn or _quiet)(self.warnings[-1])
        return Outcome(m, summary, verdict, self.warnings, self.config, self.facts, load)

    def _load_check(self, m: Measured) -> Optional[loadavg.Busy]:
        """Was the machine busy with other work while it measured (the load before and after, against its
        usable CPUs beyond the tasks the trials ran)?  None when nothing was read before."""
        if self.host is None or self.load_before is None or not (m.baseline or m.tuned):
            return None
        cpus = Machine.from_facts(self.facts).cpus.usable
        own = max(trial_tasks(s, cpus) for s in (m.baseline, m.tuned) if s is not None)
        return load_check(self.load_before, loadavg.read(self.host), cpus, own)

    def _tuned(self, info: LoadedWorkload, warn: Callable[[str], None], verifier: Optional[Verifier] = None) -> Settings:
        """The config's settings, or the rules' for this machine and the loaded workload, calibrated on it
        through ``verifier``'s worker (docs/tune.md, "Calibrated rules")."""
        trains_on = info.device or CPU
        device = trains_on.unindexed()
        if self.cfg is not None:
            if self.cfg.tuned_on != device:
                self.warnings.append(f"{self.options.config} was tuned for {self.cfg.tuned_for}; "
                                     f"this run trains on {trains_on}")
                warn(self.warnings[-1])
            return self.cfg.settings
        steps = None if device.simulated else self.plan.converge_steps or None
        request = rules.Request(device=device, steps=steps, model="conv" if info.convolutional else "other")
        try:
            rec = rules.recommend(self.facts, request)
        except rules.RequestError as exc:
            raise Refused(f"cannot tune for this machine: {exc}") from None
        cal = self._calibrate(rec, info, verifier) if verifier is not None else None
        if cal is not None:
            rec = rules.recommend(self.facts, dataclasses.replace(request, calibration=cal))
            rec.notes.append(calibration.describe(cal))
        self.config = TunedBy("rules", {"settings": rec.settings.to_dict(),
                                        "reasons": {k: str(v) for k, v in rec.reasons.items()},
                                        "notes": list(rec.notes), "env": dict(rec.env),
                                        "calibration": cal.to_json() if cal is not None else None})
        return rec.settings

    def _calibrate(self, rec: rules.Recommendation, info: LoadedWorkload,
                   verifier: Verifier) -> Optional[calibration.Calibration]:
        """The calibration of the rules on the loaded workload, in at most a tenth of the budget (and
        :data:`calibration.CALIBRATION_S`); None, with a note, when its trials give no usable figures.
        The budget's end and a failed worker pass through (the run reports them)."""
        seconds = calibration.CALIBRATION_S
        if verifier.budget.seconds is not None and verifier.budget.limited:
            seconds = min(seconds, CALIBRATION_SHARE * verifier.budget.seconds)
        batch = int(info.batch_size or 1)
        try:
            return calibration.calibrate(verifier.calibration_trial, rec.settings, rec.device, batch,
                                         rec.per_process_cpus, seconds=seconds, clock=verifier.clock)
        except calibration.CalibrationError as exc:
            verifier.measured.notes.append(f"the rules were not calibrated: {exc}")
            return None
        except WorkerError as exc:
            if exc.kind == "budget":  # the budget's end: the line says where, the run cannot go on
                failure = from_worker_error(exc, "calibrating the rules", self.facts)
                raise Refused(failure.message + (f"; {failure.fix}" if failure.fix else ""), failure.user_input,
                              failure) from None
            # A trial that failed (out of memory, a worker's bus error, a worker that died): the plain
            # rules, and the rounds meet the failure where the report explains it (the micro-batch that fits).
            verifier.measured.notes.append(f"the rules were not calibrated: {exc.message}")
            return None
