"""The verify-train plan (docs/verify-train.md) and its execution through the training engine's
worker (torch-free: nothing here trains), all within ``budget_s``, a wall-clock promise from the
command's start: interleaved rounds until the speed-up resolves (:func:`debtorch.stats.adaptive_rounds`),
the profile, the convergence runs sized to what the budget still pays for, the multi-process run.
Everything measured goes into a :class:`Measured` as it arrives, so that a failure, the budget's
end or Ctrl-C still reports what was measured.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import Any, Callable, Mapping, Optional, Protocol

from debtorch import stats
from debtorch.budget import Budget, Where, too_small
from debtorch.lint.measured import static_result
from debtorch.train import runner
from debtorch.train.device import Device
from debtorch.train.result import DistributedResult, LoadedWorkload, TrialResult
from debtorch.train.settings import Settings
from debtorch.transport.client import START_TIMEOUT, WorkerError, bounded
from debtorch.verify import analysis
from debtorch.verify.failures import Failure, Fit, from_worker_error, oom_message
from debtorch.verify.results import (
    ARMS,
    BASELINE,
    BASELINE_BOUND,
    TUNED,
    TUNED_BARE,
    TUNED_BOUND,
    TUNED_SYNC,
    AttributionArm,
    HostWaits,
)

# --quick: the real path, in seconds (CI): few steps, no attribution, a 13 s budget (the command
# ends within 15 s, Python's own start-up included).  Built-in workloads also shrink.
QUICK = {"steps": 3, "warmup": 1, "converge_steps": 12, "profile_steps": 2, "budget_s": 13.0, "attribution": False,
         "max_rounds": 5}
DEFAULT_BUDGET_S = 300.0   # a full run: rounds, attribution and convergence runs in five minutes
# Below these no run measures anything (a worker's start imports torch; then a warm-up trial of each
# settings and the first rounds): refused before anything starts.  A budget above them that still
# cannot pay for the first rounds of this workload is refused once the warm-up trials tell.
MIN_BUDGET_S = 20.0
MIN_BUDGET_QUICK_S = 5.0
AFTER_SHARE = 0.5          # the rounds keep at least half the budget left when they start
MIN_CONVERGE = 10          # a convergence run shorter than this compares nothing (two running means)
QUICK_OPTIONS = {
    "builtin:cnn": {"samples": 128, "size": 16, "raw": 32, "width": 8, "batch_size": 8},
    "builtin:transformer": {"samples": 128, "length": 16, "dim": 32, "layers": 1, "batch_size": 8},
    "builtin:images": {"samples": 64, "size": 16, "raw": 48, "width": 8, "batch_size": 8},
}
MIN_REPEATS = 3


@dataclass
class Plan:
    """What to run.  Defaults are the full (not --quick) run."""

    workload: str = "builtin:cnn"
    options: dict[str, Any] = field(default_factory=dict)   # keyword arguments of the workload function
    device: Optional[Device] = None               # None: the worker's choice (cuda when it has one)
    steps: int = 20                               # timed optimizer steps per trial
    warmup: int = 3                               # untimed steps before them
    repeats: int = 3                              # interleaved rounds, at least (more until the speed-up resolves)
    max_rounds: int = 30                          # interleaved rounds, at most
    budget_s: Optional[float] = DEFAULT_BUDGET_S  # wall-clock seconds for everything (None: no limit)
    started: Optional[float] = None               # time.monotonic() at the command's start (None: at Verifier())
    attribution: bool = True                      # tuned without each changed group, in the same rounds
    converge_steps: int = 400                     # cap of a convergence run (0: no convergence runs)
    target_loss: Optional[float] = None           # None: the workload's target_loss
    seed: int = 0
    profile_dir: Optional[str] = None
    profile_steps: int = 5
    nproc: int = 1                                # processes of the multi-process run (1: none)
    launcher_args: list[str] = field(default_factory=list)  # torch.distributed.run's multi-node options
    python: str = sys.executable
    cwd: Optional[str] = None                     # the worker's working directory (workload modules)
    timeout: float = 900.0                        # seconds one trial may take
    quick: bool = False

    @classmethod
    def quick_plan(cls, **kw: Any) -> "Plan":
        """A --quick plan: few steps; built-in workloads at small sizes."""
        plan = cls(**{**QUICK, **kw}, quick=True)
        if not plan.options and plan.workload in QUICK_OPTIONS:
            plan.options = dict(QUICK_OPTIONS[plan.workload])
        return plan

    @property
    def simulated(self) -> bool:
        return self.device is not None and self.device.simulated

    def copy(self) -> "Plan":
        """This plan as it is now (what a report shows of it)."""
        return dataclasses.replace(self, options=dict(self.options), launcher_args=list(self.launcher_args))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Plan":
        values = {f.name: doc[f.name] for f in dataclasses.fields(cls) if f.name in doc}
        if values.get("device") is not None:
            values["device"] = Device.parse(values["device"])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "device": None if self.device is None else str(self.device)}


@dataclass
class RunBudget:
    """How the run went against its budget: the rounds and why they stopped, the convergence runs' cap, where
    the budget cut a trial, the sequential design, what a round took, what was spent."""

    budget_s: Optional[float]
    rounds: int = 0
    stopped: Optional[str] = None
    converge_cap: Optional[int] = None
    cut: Optional[str] = None
    looks: Optional[stats.Looks] = None       # set when the rounds start (a cut round too)
    round_s: Optional[float] = None           # set when a round ran
    spent_s: Optional[float] = None           # set when the run ends

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "RunBudget":
        looks = doc.get("looks")
        return cls(budget_s=doc.get("budget_s"), rounds=doc.get("rounds") or 0, stopped=doc.get("stopped"),
                   converge_cap=doc.get("converge_cap"), cut=doc.get("cut"),
                   looks=stats.Looks(looks["first"], looks["last"]) if looks else None,
                   round_s=doc.get("round_s"), spent_s=doc.get("spent_s"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"budget_s": self.budget_s, "rounds": self.rounds, "stopped": self.stopped,
                               "converge_cap": self.converge_cap, "cut": self.cut}
        if self.looks is not None:
            out["looks"] = self.looks.to_dict()
        if self.round_s is not None:
            out["round_s"] = self.round_s
        if self.spent_s is not None:
            out["spent_s"] = self.spent_s
        return out


@dataclass
class ConvergeRuns:
    """The convergence runs that ran: baseline, tuned, tuned with the baseline's schedule, the fp32 reference."""

    baseline: Optional[TrialResult] = None
    tuned: Optional[TrialResult] = None
    same_schedule: Optional[TrialResult] = None
    reference: Optional[TrialResult] = None

    def runs(self) -> list[tuple[str, TrialResult]]:
        """(name, result) of the runs that ran, in the order they run."""
        out = []
        for f in dataclasses.fields(self):
            result = getattr(self, f.name)
            if result is not None:
                out.append((f.name, result))
        return out

    def keep(self, name: str, result: TrialResult) -> None:
        """Keep the result of run ``name`` (a field's name)."""
        if name not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(name)
        setattr(self, name, result)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "ConvergeRuns":
        runs = cls()
        for name, result in doc.items():
            runs.keep(name, TrialResult.from_json(result))
        return runs

    def to_json(self) -> dict[str, Any]:
        return {name: result.to_json() for name, result in self.runs()}


@dataclass(frozen=True)
class ProfileRun:
    """The profiled trial of tuned: its trace's path, its steps and rate."""

    trace: Optional[str]
    steps: int
    samples_per_s: Optional[float]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _settings_json(s: Optional[Settings], unset: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    return s.to_dict() if s is not None else unset


def _settings(doc: Optional[Mapping[str, Any]]) -> Optional[Settings]:
    return Settings.from_dict(dict(doc)) if doc else None


@dataclass
class Measured:
    """Everything measured so far, filled in as it arrives (a failure, the budget's end or Ctrl-C still
    report what was measured); each part writes its part of the JSON document."""

    plan: Plan = field(default_factory=Plan)
    workload: Optional[LoadedWorkload] = None        # the worker's load response
    worker: dict[str, Any] = field(default_factory=dict)   # the worker's info (torch, devices)
    device: Optional[Device] = None                  # where the trials ran
    baseline: Optional[Settings] = None
    tuned: Optional[Settings] = None
    reference: Optional[Settings] = None             # fp32 reference settings, when AMP is compared
    # arm -> its trials, in round order (ARMS, and "without <group>" arms)
    trials: dict[str, list[TrialResult]] = field(default_factory=lambda: {arm: [] for arm in ARMS})
    attribution: list[AttributionArm] = field(default_factory=list)  # what each arm takes out of tuned
    budget: Optional[RunBudget] = None
    converge: ConvergeRuns = field(default_factory=ConvergeRuns)
    ddp: list[DistributedResult] = field(default_factory=list)       # the multi-process runs
    ddp_settings: Optional[Settings] = None
    profile: Optional[ProfileRun] = None
    failure: Optional[Failure] = None
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    host_waits: Optional[HostWaits] = None           # synchronising calls per step in the workload's code

    @property
    def batch_size(self) -> int:
        """The workload's micro-batch (1 when unknown)."""
        return int((self.workload.batch_size if self.workload is not None else None) or 1)

    def settings_json(self) -> dict[str, Any]:
        """The document's ``settings``: baseline, tuned, the fp32 reference and the multi-process run's."""
        return {"baseline": _settings_json(self.baseline, {}), "tuned": _settings_json(self.tuned, {}),
                "reference": _settings_json(self.reference, None), "ddp": _settings_json(self.ddp_settings, None)}

    def trials_json(self) -> dict[str, Any]:
        return {arm: [t.to_json() for t in runs] for arm, runs in self.trials.items()}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Measured":
        """What a verify-train JSON document recorded (its summary is recomputed from it)."""
        settings = doc.get("settings") or {}
        budget, profile, failure, waits = doc.get("budget"), doc.get("profile"), doc.get("failure"), doc.get("host_waits")
        return cls(plan=Plan.from_json(doc.get("plan") or {}),
                   workload=LoadedWorkload.from_json(doc["workload"]) if doc.get("workload") else None,
                   worker=dict(doc.get("worker") or {}),
                   device=Device.parse(doc["device"]) if doc.get("device") else None,
                   baseline=_settings(settings.get("baseline")), tuned=_settings(settings.get("tuned")),
                   reference=_settings(settings.get("reference")), ddp_settings=_settings(settings.get("ddp")),
                   trials={arm: [TrialResult.from_json(t) for t in runs] for arm, runs in (doc.get("trials") or {}).items()},
                   attribution=[AttributionArm.from_json(a) for a in doc.get("attribution") or []],
                   budget=RunBudget.from_json(budget) if budget else None,
                   converge=ConvergeRuns.from_json(doc.get("converge") or {}),
                   ddp=[DistributedResult.from_json(d) for d in doc.get("ddp") or []],
                   profile=ProfileRun(**profile) if profile else None,
                   failure=Failure.from_json(failure) if failure else None,
                   interrupted=bool(doc.get("interrupted")), notes=list(doc.get("notes") or []),
                   host_waits=HostWaits.from_json(waits) if waits else None)


class Steps(Protocol):
    """What a run tells about its progress (the command's bar, :class:`debtorch.report.progress.StepsBar`)."""

    def plan(self, total_steps: int) -> None: ...

    def begin(self, label: str, steps: int) -> None: ...

    def advance(self, event: dict) -> None: ...

    def end(self) -> None: ...


class Progress:
    """What the command's progress bar is told (:class:`Steps`); this base class shows nothing."""

    def plan(self, total_steps: int) -> None:
        """The number of optimizer steps the whole plan will run (warm-up included); told again when
        rounds are added."""

    def begin(self, label: str, steps: int) -> None:
        """A trial of ``steps`` optimizer steps starts."""

    def advance(self, event: dict) -> None:
        """One optimizer step of the current trial is done (an engine progress event)."""

    def end(self) -> None:
        """The current trial is over (it may have run fewer steps than planned)."""


class JobKind(Enum):
    """What a trial of the plan is for: it decides where its result is kept."""

    PRIME = "prime"                # a warm-up trial of each settings, not counted
    ROUND = "round"                # an arm's trial in an interleaved round
    PROFILE = "profile"            # tuned under torch.profiler
    CONVERGE = "converge"          # a convergence run (``arm``: which)
    CALIBRATION = "calibration"    # a trial of the calibration that sizes the rules' loader


@dataclass
class _Job:
    label: str
    kind: JobKind
    settings: Settings
    arm: str = ""                  # a round's arm; a convergence run's name (ConvergeRuns)
    mode: str = "instrumented"
    steps: int = 20
    warmup: int = 3
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.steps + self.warmup


@dataclass(frozen=True)
class _Arm:
    """An arm of the interleaved rounds: its settings and how its trials run."""

    settings: Settings
    words: str                     # how a round's label names it: "tuned, bare loop"
    mode: str = "instrumented"     # the engine's mode: instrumented, bare or compute_only
    sync_each_step: bool = False   # the loss read every step (what a sync costs on a simulated accelerator)

    @property
    def bound(self) -> bool:
        """A compute-only bound: it runs after the throughput arms of a round and is not warmed up."""
        return self.mode == "compute_only"


class Verifier:
    """Runs a :class:`Plan` in one worker; use as a context manager.  ``facts`` (the machine's, for the
    doctor's /dev/shm check) is optional; ``clock`` is the budget's (a fake one in tests)."""

    def __init__(self, plan: Plan, facts: Optional[dict[str, Any]] = None, progress: Optional[Steps] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.plan = plan
        self.facts = facts
        self.progress: Steps = progress or Progress()
        self.clock = clock
        self.budget = Budget(plan.budget_s, start=plan.started, clock=clock)
        self.where = Where(clock)
        self.worker: Any = None     # a TrainingWorker (a fake one in tests)
        self.measured = Measured(plan=plan.copy())
        self._arms: dict[str, _Arm] = {}        # arm -> its settings and mode, in the rounds' order
        self._costs: list[tuple[float, int, float]] = []   # (clock seconds, steps run, step time) of every trial
        self._started_s = 0.0       # what starting the worker and loading took
        self._primed: dict[str, float] = {}     # repr(settings) -> the step time its warm-up trial showed
        self._trial_t0 = 0.0        # when the trial running started, and the steps it has run
        self._trial_steps = 0
        self._planned = 0           # optimizer steps told to the progress bar
        self._current: Optional[_Job] = None   # the trial running (the one a failure is about)

    # -- life cycle --------------------------------------------------------
    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close(kill=exc_type is not None)

    def close(self, kill: bool = False) -> None:
        if self.worker is not None:
            if kill:
                self.worker.kill()
            else:
                self.worker.close()
            self.worker = None

    def start(self) -> LoadedWorkload:
        """Start the worker and load the workload; return its description.  WorkerError: no torch, a
        workload that cannot be imported, a device this torch cannot use, the budget's end (``budget``)."""
        p = self.plan
        t0 = self.clock()
        if self.worker is None:
            self.spawn()
        loaded = runner.start_and_load(self.worker, self.budget, self.where, p.timeout, p.workload,
                                       device=p.device, options=p.options, seed=p.seed)
        self.measured.workload = loaded
        self.measured.worker = self._request("info")
        self.measured.device = loaded.device
        self._started_s = self.clock() - t0
        return loaded

    def spawn(self) -> None:
        """Start the worker's process without waiting for it (it imports torch meanwhile);
        :meth:`start` waits for it.  A worker without ``spawn`` starts in :meth:`start`."""
        p = self.plan
        self.worker = runner.TrainingWorker(p.python, cwd=p.cwd, timeout=p.timeout,
                                            start_timeout=self.budget.cap(START_TIMEOUT))
        if hasattr(self.worker, "spawn"):
            self.worker.spawn()

    def _request(self, op: str, on_event: Optional[Callable[[dict], None]] = None, **fields: Any) -> dict[str, Any]:
        """One request to the worker, within the budget."""
        worker = self.worker

        def send(timeout: float) -> dict[str, Any]:
            return worker.request(op, on_event=on_event, timeout=timeout, **fields)

        return bounded(self.budget, self.where, send, self.plan.timeout)

    # -- the plan ----------------------------------------------------------
    def prime_jobs(self) -> list[_Job]:
        """One short trial of each settings of the rounds, not counted (a fresh worker's first trial
        of a setting pays one-time costs: lazy imports, kernel creation)."""
        p = self.plan
        out, seen = [], set()
        for name, arm in self._arms.items():
            if arm.mode == "bare" or arm.bound or repr(arm.settings) in seen:
                continue
            seen.add(repr(arm.settings))
            out.append(_Job(f"warming up: {name}", JobKind.PRIME, arm.settings, name, "instrumented", 1,
                            max(1, p.warmup)))
        return out

    def round_jobs(self, r: int) -> list[_Job]:
        """Round ``r`` (0-based): the throughput arms in an order that rotates every other round and is
        reversed in between (ABBA, then the next arm leads), so drift hits all alike; then the
        compute-only bounds."""
        p = self.plan
        n = f"round {r + 1}"
        main = [name for name, arm in self._arms.items() if not arm.bound]
        k = (r // 2) % len(main)
        order = main[k:] + main[:k]
        if r % 2:
            order.reverse()
        bounds = [name for name, arm in self._arms.items() if arm.bound]
        if r % 2:
            bounds.reverse()
        out = []
        for name in order + bounds:
            arm = self._arms[name]
            extra = {"sync_each_step": True} if arm.sync_each_step else {}
            out.append(_Job(f"{n}: {arm.words}", JobKind.ROUND, arm.settings, name, arm.mode, p.steps, p.warmup,
                            extra))
        return out

    def converge_jobs(self, base: Settings, tune: Settings, cap: int) -> list[_Job]:
        """The convergence runs: baseline, tuned, tuned with the baseline's schedule (when it differs
        and attribution is on), and the fp32 reference (when tuned uses AMP and the baseline does not
        train the same curve)."""
        p = self.plan
        target = self._target()
        if cap < 1 or target is None or self.simulated:
            return []
        steps = max(1, cap - p.warmup)
        stop = {"stop_at_target": True, "target_loss": target}

        def run(label: str, name: str, settings: Settings) -> _Job:
            return _Job(f"convergence: {label}", JobKind.CONVERGE, settings, name, "instrumented", steps, p.warmup,
                        stop)

        out = [run("baseline", "baseline", base), run("tuned", "tuned", tune)]
        if p.attribution and analysis.schedule_change(base, tune):
            same = tune.replace(**{f: getattr(base, f) for f in analysis.SCHEDULE})
            out.append(run("tuned, baseline's schedule", "same_schedule", same))
        if tune.precision != "fp32":
            ref = tune.replace(precision="fp32")   # AMP's fp32 reference
            self.measured.reference = ref
            if not self._baseline_is_reference(base, ref):
                out.append(run("fp32 reference", "reference", ref))
        return out

    def jobs(self, baseline: Settings, tuned: Settings) -> list[_Job]:
        """Every single-process trial of a run of exactly ``repeats`` rounds, in order (the plan
        as it would run when no round is added and the budget holds)."""
        self._set_arms(baseline, tuned)
        base, tune = _one_process(baseline), _one_process(tuned)
        out = self.prime_jobs()
        for r in range(self.plan.repeats):
            out.extend(self.round_jobs(r))
        out.extend(self._profile_jobs(tune))
        out.extend(self.converge_jobs(base, tune, self.plan.converge_steps))
        return out

    def _profile_jobs(self, tune: Settings) -> list[_Job]:
        p = self.plan
        if not p.profile_dir:
            return []
        return [_Job("profile: tuned", JobKind.PROFILE, tune, "", "instrumented", max(2, p.profile_steps), 1,
                     {"profile_dir": os.path.abspath(p.profile_dir)})]

    def _set_arms(self, baseline: Settings, tuned: Settings) -> None:
        base, tune = _one_process(baseline), _one_process(tuned)
        m = self.measured
        # A simulated accelerator: the loss read every step (what it costs) instead of the bare loop, and
        # its rate as the bound (no model runs: nothing to bound by compute).
        self._arms = {BASELINE: _Arm(base, "baseline"), TUNED: _Arm(tune, "tuned")}
        if self.simulated:
            self._arms[TUNED_SYNC] = _Arm(tune, "tuned, loss read every step", sync_each_step=True)
        else:
            self._arms[TUNED_BARE] = _Arm(tune, "tuned, bare loop", "bare")
        m.attribution = []
        if self.plan.attribution:
            m.attribution = analysis.attribution_plan(base, tune, default_threads=m.worker.get("threads"))
            for entry in m.attribution:
                if entry.arm and entry.arm not in self._arms and entry.settings is not None:
                    self._arms[entry.arm] = _Arm(Settings.from_dict(entry.settings), entry.arm)
                    m.trials.setdefault(entry.arm, [])
        if not self.simulated:
            self._arms[BASELINE_BOUND] = _Arm(base, "baseline, compute only", "compute_only")
            self._arms[TUNED_BOUND] = _Arm(tune, "tuned, compute only", "compute_only")

    @property
    def simulated(self) -> bool:
        return self.plan.simulated

    def _baseline_is_reference(self, base: Settings, ref: Settings) -> bool:
        return base.precision == "fp32" and analysis.same_numerics(base, ref, self.measured.batch_size)

    def _target(self) -> Optional[float]:
        if self.plan.target_loss is not None:
            return self.plan.target_loss
        return self.measured.workload.target_loss if self.measured.workload is not None else None

    def ddp_settings(self, tuned: Settings) -> Settings:
        """Tuned settings for the multi-process run (threads left to each rank when ``--nproc`` is not
        what the settings were tuned for)."""
        s = tuned.replace(nproc=self.plan.nproc)
        if tuned.nproc != self.plan.nproc and tuned.threads is not None:
            s = s.replace(threads=None)
            self.measured.notes.append(
                f"threads per process left to each rank (usable CPUs // {self.plan.nproc}): the settings "
                f"were tuned for {tuned.nproc} process(es)")
        return s

    # -- estimates -----------------------------------------------------------
    def _median_step(self, arm: str) -> float:
        """The median optimizer step of ``arm``'s trials so far (0 when none)."""
        vals = [r.step_median_s for r in self.measured.trials.get(arm) or []]
        steps = [v for v in vals if isinstance(v, (int, float)) and v > 0]
        return statistics.median(steps) if steps else 0.0

    def _step_s(self, arm: str) -> float:
        """The median optimizer step of ``arm`` in the rounds so far; when unknown, of the slower of baseline
        and tuned; before any round, what its warm-up trial showed (or the slowest warm-up trial)."""
        known = self._median_step(arm) or max(self._median_step(BASELINE), self._median_step(TUNED))
        if known:
            return known
        settings = self._arms[arm].settings if arm in self._arms else None
        return self._primed.get(repr(settings)) or max(self._primed.values(), default=0.0)

    def _overhead_s(self) -> float:
        """What a trial costs beyond its steps (building the model and the DataLoader, the request)."""
        extra = [max(0.0, took - steps * step) for took, steps, step in self._costs if step]
        return statistics.median(extra) if extra else 0.0

    def _ddp_runs(self) -> int:
        """How many multi-process runs: none with one process, one with --quick, else one per round asked."""
        if self.plan.nproc <= 1:
            return 0
        return 1 if self.plan.quick else self.plan.repeats

    def _ddp_cost(self) -> float:
        """What one multi-process run takes: about a worker's start and a trial per process."""
        return self._started_s + (self.plan.steps + self.plan.warmup) * self._step_s(TUNED) * 2

    def _after_cost(self) -> float:
        """What the steps after the rounds need: the profile, the convergence runs at their cap and the
        multi-process runs."""
        p = self.plan
        cost = self._ddp_runs() * self._ddp_cost()
        if p.profile_dir:
            cost += self._overhead_s() + (max(2, p.profile_steps) + 1) * self._step_s(TUNED) + 2.0
        if p.converge_steps > 0 and self._target() is not None:
            slow = max(self._step_s(BASELINE), self._step_s(TUNED))
            cost += self._converge_runs() * (self._overhead_s() + p.converge_steps * slow)
        return cost

    def _converge_runs(self) -> int:
        if BASELINE not in self._arms or TUNED not in self._arms:
            return 2
        return len(self.converge_jobs(self._arms[BASELINE].settings, self._arms[TUNED].settings, 1))

    def _converge_cap(self) -> int:
        """The convergence runs' cap: ``converge_steps``, or as many steps as the budget left pays for
        (what the multi-process runs need kept aside)."""
        p = self.plan
        cap = p.converge_steps
        if not self.budget.limited or cap <= 0:
            return cap
        runs = self._converge_runs()
        slow = max(self._step_s(BASELINE), self._step_s(TUNED))
        left = self.budget.left() - self._ddp_runs() * self._ddp_cost() - runs * self._overhead_s()
        if slow > 0:
            cap = min(cap, int(left / runs / slow))
        return cap

    def _round_steps_s(self) -> float:
        """What one round's steps take at least, by the warm-up trials: each trial's steps at the step time
        of its settings (what a trial costs beyond its steps is left out: a warm-up trial pays one-time
        costs the round's trials do not)."""
        return sum(job.total * self._step_s(job.arm) for job in self.round_jobs(0))

    def _too_small(self) -> bool:
        """After the warm-up trials: whether the budget left cannot pay for even one round (the run would
        end without a result); then ``measured.failure`` says the budget that would pay for the first
        ``repeats`` rounds (a refusal, exit 2), before the rounds start.  A budget that pays for fewer
        rounds than that runs them, and the verdict says what more would resolve."""
        if not self.budget.limited:
            return False
        one = self._round_steps_s()
        left = self.budget.left()
        if one <= left:
            return False
        rounds = self.plan.repeats * one
        self.measured.failure = self._too_small_failure(
            rounds + min(self._after_cost(), rounds),
            f", and one round of its trials needs at least {one:.0f} s of the {left:.0f} s left")
        return True

    def _left_estimate(self) -> float:
        """The cut trial's pace (its steps so far over its time) over the steps left of the warm-up trials
        and the first ``repeats`` rounds: what the budget lacked, at least."""
        done = self._trial_steps + sum(ran for _, ran, _ in self._costs)
        planned = sum(j.total for j in self.prime_jobs()) + sum(
            j.total for r in range(self.plan.repeats) for j in self.round_jobs(r))
        pace = (self.clock() - self._trial_t0) / max(1, self._trial_steps)
        return max(0, planned - done) * pace

    def _too_small_failure(self, more_s: float, why: str) -> Failure:
        """The budget is too small for this workload: what went where (``why``: what did not fit), and the
        budget that would do (``more_s`` seconds beyond what was spent)."""
        spent = self.budget.spent()
        trials = sum(took for took, _, _ in self._costs)
        if self._trial_steps:   # the trial the budget cut had run some steps: its time went to trials too
            trials += self.clock() - self._trial_t0
        message = too_small(self.plan.budget_s or 0.0, spent - trials, trials, spent + more_s, why)
        return Failure("too_small", message, detail={"need_s": math.ceil(spent + more_s), "spent_s": spent})

    # -- running -------------------------------------------------------------
    def run(self, baseline: Settings, tuned: Settings) -> Measured:
        """Run the plan; a failure ends it in ``measured.failure``.  KeyboardInterrupt propagates (the
        worker killed on the way), what was measured staying in ``self.measured``."""
        m = self.measured
        m.baseline, m.tuned = baseline, tuned
        self._set_arms(baseline, tuned)
        base, tune = _one_process(baseline), _one_process(tuned)
        p = self.plan
        budget = m.budget = RunBudget(p.budget_s)
        try:
            self._tell(sum(j.total for j in self.jobs(baseline, tuned)))
            self._run_all(self.prime_jobs())
            if self._too_small():
                return self._done()
            budget.rounds, budget.stopped = self._rounds()
            self._run_all(self._profile_jobs(tune))
            cap = 0 if self.simulated else self._converge_cap()
            if self.simulated and p.converge_steps:
                m.notes.append("convergence runs skipped: a simulated accelerator runs no model, so no loss falls")
            budget.converge_cap = cap
            if 0 < cap < MIN_CONVERGE:
                m.notes.append(f"convergence runs skipped: {self.budget.words()} leaves {self.budget.left():.0f} s, "
                               f"too little for {MIN_CONVERGE} steps each")
                cap = 0
            elif 0 < cap < p.converge_steps:
                m.notes.append(f"convergence runs capped at {cap} steps (of {p.converge_steps}) to fit "
                               f"{self.budget.words()}")
            self._run_all(self.converge_jobs(base, tune, cap))
            self._current = None
            m.host_waits = self.host_waits()
        except WorkerError as exc:
            job = self._current
            if exc.kind == "budget" and not self._complete_rounds() and not self.where.hung():
                more = self._left_estimate()   # still making progress: too slow for the budget, not hung
                m.failure = self._too_small_failure(
                    more, f", and its first {self.plan.repeats} rounds need about {more:.0f} s more")
                return self._done()
            if exc.kind == "budget" and job is not None and job.kind is not JobKind.PRIME and self._complete_rounds():
                budget.cut = exc.message
                if not budget.rounds:  # inside the rounds: those completed count
                    budget.rounds, budget.stopped = self._complete_rounds(), "budget spent"
                m.notes.append(exc.message + "; the report keeps what was measured before")
                return self._done()
            if exc.kind == "budget" or job is None:
                m.failure = from_worker_error(exc, "", self.facts)  # the message says where
            else:
                m.failure = self._failure(exc, job)
            return self._done()
        self._distributed(tuned)
        return self._done()

    def _done(self) -> Measured:
        if self.measured.budget is not None:
            self.measured.budget.spent_s = self.budget.spent()
        return self.measured

    def _tell(self, total: int) -> None:
        self._planned = total
        self.progress.plan(total)

    def _rounds(self) -> tuple[int, str]:
        """Interleaved rounds until the speed-up resolves or the budget (less what comes after) is
        spent; (rounds run, why they stopped)."""
        m, p = self.measured, self.plan
        limit = self.budget.left() if self.budget.limited else math.inf
        keep_for_rest = AFTER_SHARE * limit

        def run_round(r: int) -> dict[str, Optional[float]]:
            jobs = self.round_jobs(r)
            if r >= p.repeats:
                self._tell(self._planned + sum(j.total for j in jobs))
            self._run_all(jobs)
            return {TUNED: m.trials[TUNED][-1].samples_per_s, BASELINE: m.trials[BASELINE][-1].samples_per_s}

        def judge(rates: dict[str, list[Optional[float]]], level: float) -> stats.Estimate:
            """The speed-up so far, at the level of one look."""
            return stats.compare(rates[TUNED], rates[BASELINE], confidence=level)

        def reserve(rates: dict[str, list[Optional[float]]]) -> float:
            """What the steps after the rounds need, at most half of what the rounds were given."""
            return min(self._after_cost(), keep_for_rest)

        assert m.budget is not None   # run() made it
        m.budget.looks = stats.Looks(p.repeats, max(p.repeats, p.max_rounds))   # before: a cut round too
        got = stats.adaptive_rounds(run_round, judge, limit, min_rounds=p.repeats,
                                    max_rounds=max(p.repeats, p.max_rounds), clock=self.clock, reserve=reserve)
        if got.rounds:
            m.budget.round_s = got.spent / got.rounds
        return got.rounds, got.stopped

    def _complete_rounds(self) -> int:
        """Rounds in which both baseline and tuned were measured (what the speed-up pairs)."""
        return min(len(self.measured.trials[BASELINE]), len(self.measured.trials[TUNED]))

    def _distributed(self, tuned: Settings) -> None:
        m = self.measured
        runs = self._ddp_runs()
        if not runs:
            return
        ddp = m.ddp_settings = self.ddp_settings(tuned)
        p = self.plan
        for i in range(runs):
            if i and not self.budget.fits(self._ddp_cost()):
                m.notes.append(f"{i} of {runs} multi-process runs: {self.budget.words()} was spent")
                return
            label = f"{p.nproc} processes: tuned" + (f" ({i + 1}/{runs})" if runs > 1 else "")
            self.progress.begin(label, p.steps + p.warmup)
            self.where.doing(label)

            def launch(timeout: float) -> DistributedResult:
                return runner.launch_distributed(
                    p.python, p.workload, ddp, p.nproc, steps=p.steps, warmup=p.warmup, seed=p.seed, device=m.device,
                    options=p.options, launcher_args=p.launcher_args or None, cwd=p.cwd, timeout=timeout,
                    on_event=self.progress.advance)

            try:
                m.ddp.append(bounded(self.budget, self.where, launch, p.timeout))
            except WorkerError as exc:
                m.failure = from_worker_error(exc, label, self.facts)
                return
            finally:
                self.progress.end()

    def host_waits(self) -> HostWaits:
        """Host waits per step in the workload's code: counted on CUDA, else read from the code (debtorch lint)."""
        device = self.measured.device
        if device is not None and device.is_cuda:
            self.where.doing("counting host waits")
            try:
                got = HostWaits.from_json(self._request("host_waits", seed=self.plan.seed,
                                                        steps=2 if self.plan.quick else 5))
                if got.measured:
                    return got
            except WorkerError as exc:
                if exc.kind == "budget":
                    raise
                self.measured.notes.append(f"host waits per step not counted ({exc}); read from the code instead")
        workload = self.measured.workload
        return HostWaits.from_json(static_result(workload.file if workload is not None else None))

    # -- one trial ---------------------------------------------------------
    def calibration_trial(self, settings: Settings, steps: int, warmup: int) -> TrialResult:
        """One trial of the calibration that sizes the rules' loader (``calibration.TrialFn``): the
        rounds' engine and worker, within the budget, not counted in any arm."""
        return self._run(_Job(f"calibrating: {settings.short()}", JobKind.CALIBRATION, settings, "", "instrumented",
                              steps, warmup))

    def _run(self, job: _Job) -> TrialResult:
        self._current = job
        self.progress.begin(job.label, job.total)
        self.where.trial(job.label, job.warmup)

        def on_event(ev: dict) -> None:
            self.progress.advance(ev)
            self.where.progress(ev)
            if ev.get("event") in (None, "progress"):
                self._trial_steps += 1

        t0 = self._trial_t0 = self.clock()
        self._trial_steps = 0
        try:
            out = self._request("trial", on_event=on_event, settings=job.settings.to_dict(), steps=job.steps,
                                warmup=job.warmup, mode=job.mode, seed=self.plan.seed, sample_memory=True,
                                progress=True, **job.extra)
        finally:
            self.progress.end()
        result = TrialResult.from_json(out if isinstance(out, dict) else {})
        step = result.step_median_s
        ran = (result.steps or job.steps) + job.warmup
        self._costs.append((self.clock() - t0, ran, step if isinstance(step, (int, float)) else 0.0))
        self._trial_steps = 0
        if job.kind is JobKind.PRIME and isinstance(step, (int, float)) and step > 0:
            self._primed[repr(job.settings)] = float(step)
        return result

    def _run_all(self, jobs: list[_Job]) -> None:
        """Run each job and keep its result where it belongs: the rounds' arms, the profile, the convergence
        runs (a priming trial's is not kept)."""
        for job in jobs:
            result, m = self._run(job), self.measured
            if job.kind is JobKind.PROFILE:
                m.profile = ProfileRun(result.profile_trace, job.steps, result.samples_per_s)
            elif job.kind is JobKind.CONVERGE:
                m.converge.keep(job.arm, result)
            elif job.kind is JobKind.ROUND:
                m.trials[job.arm].append(result)

    def _failure(self, exc: WorkerError, job: _Job) -> Failure:
        if exc.kind == "oom" and self.worker is not None and self.worker.proc is not None:
            return self._oom(exc, job)
        return from_worker_error(exc, job.label, self.facts)

    def _oom(self, exc: WorkerError, job: _Job) -> Failure:
        """Halve the micro-batch (doubling accumulation) until a short trial fits."""
        mb0 = job.settings.micro_batch or self.measured.batch_size
        acc0 = job.settings.accumulation_steps
        glob = mb0 * acc0
        fit: Optional[Fit] = None
        stopped = None  # the search ended on another failure (the worker died, a timeout)
        mb = mb0
        while mb > 1 and fit is None:
            mb = mb // 2
            acc = -(-glob // mb)
            trial = job.settings.replace(micro_batch=mb, accumulation_steps=acc)
            self.progress.begin(f"out of memory: trying micro-batch {mb}", 2)
            try:
                self.where.doing(f"out of memory: trying micro-batch {mb}")
                self._request("trial", settings=trial.to_dict(), steps=1, warmup=1, mode="instrumented",
                              seed=self.plan.seed, sample_memory=False, progress=False)
                fit = Fit(mb, acc)
            except WorkerError as again:
                if again.kind != "oom":
                    stopped = f"micro-batch {mb}: {again.message}"
                    break
            finally:
                self.progress.end()
        fail = from_worker_error(exc, job.label, self.facts)
        fail.message = oom_message(self.measured.device, mb0, acc0, fit, stopped)
        fail.suggestion = fit
        if fit is not None:
            fail.fix = (f"set micro_batch = {fit.micro_batch} and accumulation_steps = {fit.accumulation_steps} in "
                        f"[batch] of the config (debtorch tune --global-batch {glob} --micro-batch {fit.micro_batch})")
        return fail


def _one_process(s: Settings) -> Settings:
    """Settings for a single-process trial: the DDP fields do not apply."""
    if s.nproc != 1 or s.backend is not None:
        return s.replace(nproc=1, backend=None)
    return s
