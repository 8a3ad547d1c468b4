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
from typing import Any, Callable, Optional

from debtorch import stats
from debtorch.budget import Budget, Where, too_small
from debtorch.lint.measured import static_result
from debtorch.train import runner, sim
from debtorch.train.settings import Settings
from debtorch.transport.client import START_TIMEOUT, WorkerError, bounded
from debtorch.verify import analysis
from debtorch.verify.failures import Failure, from_worker_error, oom_message

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
    options: dict = field(default_factory=dict)   # keyword arguments of the workload function
    device: Optional[str] = None                  # None: the worker's choice (cuda when it has one)
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
    launcher_args: list = field(default_factory=list)  # torch.distributed.run's multi-node options
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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class Measured:
    """Everything measured so far; JSON-ready."""

    plan: dict = field(default_factory=dict)
    workload: dict = field(default_factory=dict)     # the worker's load response
    worker: dict = field(default_factory=dict)       # the worker's info (torch, devices)
    device: Optional[str] = None
    baseline: dict = field(default_factory=dict)     # settings
    tuned: dict = field(default_factory=dict)
    reference: Optional[dict] = None                 # fp32 reference settings, when AMP is compared
    trials: dict = field(default_factory=lambda: {arm: [] for arm in analysis.ARMS})  # and "without <group>" arms
    attribution: list = field(default_factory=list)  # analysis.attribution_plan: what each arm takes out of tuned
    budget: dict = field(default_factory=dict)       # budget_s, spent_s, rounds, stopped, converge_cap
    converge: dict = field(default_factory=dict)     # baseline / tuned / reference -> trial
    ddp: list = field(default_factory=list)          # launch_distributed results
    ddp_settings: Optional[dict] = None
    profile: Optional[dict] = None
    failure: Optional[Failure] = None
    interrupted: bool = False
    notes: list = field(default_factory=list)
    host_waits: Optional[dict] = None                # synchronising calls per step in the workload's code


class Progress:
    """What the command's progress bar is told; this base class shows nothing."""

    def plan(self, total_steps: int) -> None:
        """The number of optimizer steps the whole plan will run (warm-up included); told again when
        rounds are added."""

    def begin(self, label: str, steps: int) -> None:
        """A trial of ``steps`` optimizer steps starts."""

    def advance(self, event: dict) -> None:
        """One optimizer step of the current trial is done (an engine progress event)."""

    def end(self) -> None:
        """The current trial is over (it may have run fewer steps than planned)."""


@dataclass
class _Job:
    label: str
    arm: str
    settings: Settings
    mode: str = "instrumented"
    steps: int = 20
    warmup: int = 3
    extra: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.steps + self.warmup


class Verifier:
    """Runs a :class:`Plan` in one worker; use as a context manager.  ``facts`` (the machine's, for the
    doctor's /dev/shm check) is optional; ``clock`` is the budget's (a fake one in tests)."""

    def __init__(self, plan: Plan, facts: Optional[dict] = None, progress: Optional[Progress] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.plan = plan
        self.facts = facts
        self.progress = progress or Progress()
        self.clock = clock
        self.budget = Budget(plan.budget_s, start=plan.started, clock=clock)
        self.where = Where(clock)
        self.worker = None
        self.measured = Measured(plan=plan.to_json())
        self._arms: dict = {}       # arm -> settings of the interleaved rounds
        self._costs: list = []      # (clock seconds, steps run) of every trial, for estimates
        self._started_s = 0.0       # what starting the worker and loading took
        self._primed: dict = {}     # repr(settings) -> the step time its warm-up trial showed
        self._trial_t0 = 0.0        # when the trial running started, and the steps it has run
        self._trial_steps = 0
        self._planned = 0           # optimizer steps told to the progress bar
        self._current: Optional[_Job] = None   # the trial running (the one a failure is about)

    # -- life cycle --------------------------------------------------------
    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(kill=exc_type is not None)

    def close(self, kill: bool = False) -> None:
        if self.worker is not None:
            (self.worker.kill if kill else self.worker.close)()
            self.worker = None

    def start(self) -> dict:
        """Start the worker and load the workload; return its description.  WorkerError: no torch, a
        workload that cannot be imported, a device this torch cannot use, the budget's end (``budget``)."""
        p = self.plan
        t0 = self.clock()
        if self.worker is None:
            self.spawn()
        self.measured.workload = runner.start_and_load(self.worker, self.budget, self.where, p.timeout, p.workload,
                                                       device=p.device, options=p.options, seed=p.seed)
        self.measured.worker = self._request("info")
        self.measured.device = self.measured.workload.get("device")
        self._started_s = self.clock() - t0
        return self.measured.workload

    def spawn(self) -> None:
        """Start the worker's process without waiting for it (it imports torch meanwhile);
        :meth:`start` waits for it.  A worker without ``spawn`` starts in :meth:`start`."""
        p = self.plan
        self.worker = runner.TrainingWorker(p.python, cwd=p.cwd, timeout=p.timeout,
                                            start_timeout=self.budget.cap(START_TIMEOUT))
        if hasattr(self.worker, "spawn"):
            self.worker.spawn()

    def _request(self, op: str, on_event: Optional[Callable] = None, **fields: Any) -> dict:
        """One request to the worker, within the budget."""
        return bounded(self.budget, self.where, lambda timeout: self.worker.request(
            op, on_event=on_event, timeout=timeout, **fields), self.plan.timeout)

    # -- the plan ----------------------------------------------------------
    def prime_jobs(self) -> list:
        """One short trial of each settings of the rounds, not counted (a fresh worker's first trial
        of a setting pays one-time costs: lazy imports, kernel creation)."""
        p = self.plan
        out, seen = [], set()
        for arm, s in self._arms.items():
            if arm.endswith("_bare") or arm.endswith("_bound") or repr(s) in seen:
                continue
            seen.add(repr(s))
            out.append(_Job(f"warming up: {arm}", "prime", s, "instrumented", 1, max(1, p.warmup)))
        return out

    def round_jobs(self, r: int) -> list:
        """Round ``r`` (0-based): the throughput arms in an order that rotates every other round and is
        reversed in between (ABBA, then the next arm leads), so drift hits all alike; then the
        compute-only bounds."""
        p = self.plan
        n = f"round {r + 1}"
        main = [a for a in self._arms if not a.endswith("_bound")]
        k = (r // 2) % len(main)
        order = main[k:] + main[:k]
        if r % 2:
            order.reverse()
        out = [_Job(f"{n}: {a.replace('_bare', ', bare loop').replace('_sync', ', loss read every step')}", a,
                    self._arms[a], "bare" if a.endswith("_bare") else "instrumented", p.steps, p.warmup,
                    {"sync_each_step": True} if a.endswith("_sync") else {}) for a in order]
        bounds = [a for a in ("baseline_bound", "tuned_bound") if a in self._arms]
        for a in (bounds if r % 2 == 0 else bounds[::-1]):
            out.append(_Job(f"{n}: {a.split('_')[0]}, compute only", a, self._arms[a], "compute_only", p.steps,
                            p.warmup))
        return out

    def converge_jobs(self, base: Settings, tune: Settings, cap: int) -> list:
        """The convergence runs: baseline, tuned, tuned with the baseline's schedule (when it differs
        and attribution is on), and the fp32 reference (when tuned uses AMP and the baseline does not
        train the same curve)."""
        p = self.plan
        if cap < 1 or self._target() is None or self.simulated:
            return []
        steps = max(1, cap - p.warmup)
        stop = {"stop_at_target": True, "target_loss": self._target()}
        out = [_Job("convergence: baseline", "converge:baseline", base, "instrumented", steps, p.warmup, stop),
               _Job("convergence: tuned", "converge:tuned", tune, "instrumented", steps, p.warmup, stop)]
        if p.attribution and analysis.schedule_change(base.to_dict(), tune.to_dict()):
            same = tune.replace(**{f: getattr(base, f) for f in analysis.SCHEDULE})
            out.append(_Job("convergence: tuned, baseline's schedule", "converge:same_schedule", same,
                            "instrumented", steps, p.warmup, stop))
        ref = tune.replace(precision="fp32") if tune.precision != "fp32" else None  # AMP's fp32 reference
        if ref is not None:
            self.measured.reference = ref.to_dict()
            if not self._baseline_is_reference(base, ref):
                out.append(_Job("convergence: fp32 reference", "converge:reference", ref, "instrumented", steps,
                                p.warmup, stop))
        return out

    def jobs(self, baseline: Settings, tuned: Settings) -> list:
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

    def _profile_jobs(self, tune: Settings) -> list:
        p = self.plan
        if not p.profile_dir:
            return []
        return [_Job("profile: tuned", "profile", tune, "instrumented", max(2, p.profile_steps), 1,
                     {"profile_dir": os.path.abspath(p.profile_dir)})]

    def _set_arms(self, baseline: Settings, tuned: Settings) -> None:
        base, tune = _one_process(baseline), _one_process(tuned)
        m = self.measured
        # A simulated accelerator: the loss read every step (what it costs) instead of the bare loop, and
        # its rate as the bound (no model runs: nothing to bound by compute).
        self._arms = {"baseline": base, "tuned": tune, "tuned_sync" if self.simulated else "tuned_bare": tune}
        m.attribution = []
        if self.plan.attribution:
            m.attribution = analysis.attribution_plan(base.to_dict(), tune.to_dict(),
                                                      default_threads=(m.worker or {}).get("threads"))
            for entry in m.attribution:
                if entry.get("arm") and entry["arm"] not in self._arms:
                    self._arms[entry["arm"]] = Settings.from_dict(entry["settings"])
                    m.trials.setdefault(entry["arm"], [])
        if not self.simulated:
            self._arms.update(baseline_bound=base, tuned_bound=tune)

    @property
    def simulated(self) -> bool:
        return sim.is_sim(self.plan.device)

    def _baseline_is_reference(self, base: Settings, ref: Settings) -> bool:
        batch = int(self.measured.workload.get("batch_size") or 1)
        return base.precision == "fp32" and analysis.same_numerics(base.to_dict(), ref.to_dict(), batch)

    def _target(self) -> Optional[float]:
        if self.plan.target_loss is not None:
            return self.plan.target_loss
        return self.measured.workload.get("target_loss")

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
    def _step_s(self, arm: str) -> float:
        """The median optimizer step of ``arm`` in the rounds so far (of the slowest arm when unknown)."""
        def median(a: str) -> float:
            vals = [(r or {}).get("step_median_s") for r in self.measured.trials.get(a) or []]
            vals = [v for v in vals if isinstance(v, (int, float)) and v > 0]
            return statistics.median(vals) if vals else 0.0

        return (median(arm) or max(median("baseline"), median("tuned"))
                or self._primed.get(repr(self._arms.get(arm))) or max(self._primed.values(), default=0.0))

    def _overhead_s(self) -> float:
        """What a trial costs beyond its steps (building the model and the DataLoader, the request)."""
        extra = [max(0.0, took - steps * step) for took, steps, step in self._costs if step]
        return statistics.median(extra) if extra else 0.0

    def _ddp_runs(self) -> int:
        return 0 if self.plan.nproc <= 1 else 1 if self.plan.quick else self.plan.repeats

    def _ddp_cost(self) -> float:
        """What one multi-process run takes: about a worker's start and a trial per process."""
        return self._started_s + (self.plan.steps + self.plan.warmup) * self._step_s("tuned") * 2

    def _after_cost(self) -> float:
        """What the steps after the rounds need: the profile, the convergence runs at their cap and the
        multi-process runs."""
        p = self.plan
        cost = self._ddp_runs() * self._ddp_cost()
        if p.profile_dir:
            cost += self._overhead_s() + (max(2, p.profile_steps) + 1) * self._step_s("tuned") + 2.0
        if p.converge_steps > 0 and self._target() is not None:
            slow = max(self._step_s("baseline"), self._step_s("tuned"))
            cost += self._converge_runs() * (self._overhead_s() + p.converge_steps * slow)
        return cost

    def _converge_runs(self) -> int:
        base, tune = self._arms.get("baseline"), self._arms.get("tuned")
        return 2 if base is None or tune is None else len(self.converge_jobs(base, tune, 1))

    def _converge_cap(self) -> int:
        """The convergence runs' cap: ``converge_steps``, or as many steps as the budget left pays for
        (what the multi-process runs need kept aside)."""
        p = self.plan
        cap = p.converge_steps
        if not self.budget.limited or cap <= 0:
            return cap
        runs = self._converge_runs()
        slow = max(self._step_s("baseline"), self._step_s("tuned"))
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
        m.baseline, m.tuned = baseline.to_dict(), tuned.to_dict()
        self._set_arms(baseline, tuned)
        base, tune = _one_process(baseline), _one_process(tuned)
        p = self.plan
        m.budget = {"budget_s": p.budget_s, "rounds": 0, "stopped": None, "converge_cap": None, "cut": None}
        try:
            self._tell(sum(j.total for j in self.jobs(baseline, tuned)))
            self._run_all(self.prime_jobs())
            if self._too_small():
                return self._done()
            m.budget["rounds"], m.budget["stopped"] = self._rounds()
            self._run_all(self._profile_jobs(tune))
            cap = 0 if self.simulated else self._converge_cap()
            if self.simulated and p.converge_steps:
                m.notes.append("convergence runs skipped: a simulated accelerator runs no model, so no loss falls")
            m.budget["converge_cap"] = cap
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
            if exc.kind == "budget" and job is not None and job.arm != "prime" and self._complete_rounds():
                m.budget["cut"] = exc.message
                if not m.budget["rounds"]:  # inside the rounds: those completed count
                    m.budget["rounds"], m.budget["stopped"] = self._complete_rounds(), "budget spent"
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
        self.measured.budget["spent_s"] = self.budget.spent()
        return self.measured

    def _tell(self, total: int) -> None:
        self._planned = total
        self.progress.plan(total)

    def _rounds(self) -> tuple:
        """Interleaved rounds until the speed-up resolves or the budget (less what comes after) is
        spent; (rounds run, why they stopped)."""
        m, p = self.measured, self.plan
        limit = self.budget.left() if self.budget.limited else math.inf
        keep_for_rest = AFTER_SHARE * limit

        def run_round(r: int) -> dict:
            jobs = self.round_jobs(r)
            if r >= p.repeats:
                self._tell(self._planned + sum(j.total for j in jobs))
            self._run_all(jobs)
            return {"tuned": (m.trials["tuned"][-1] or {}).get("samples_per_s"),
                    "baseline": (m.trials["baseline"][-1] or {}).get("samples_per_s")}

        m.budget["looks"] = stats.Looks(p.repeats, max(p.repeats, p.max_rounds)).to_dict()  # before: a cut round too
        got = stats.adaptive_rounds(run_round, lambda data, level: stats.compare(data["tuned"], data["baseline"],
                                                                                confidence=level),
                                    limit, min_rounds=p.repeats, max_rounds=max(p.repeats, p.max_rounds),
                                    clock=self.clock, reserve=lambda data: min(self._after_cost(), keep_for_rest))
        if got.rounds:
            m.budget["round_s"] = got.spent / got.rounds
        return got.rounds, got.stopped

    def _complete_rounds(self) -> int:
        """Rounds in which both baseline and tuned were measured (what the speed-up pairs)."""
        return min(len(self.measured.trials["baseline"]), len(self.measured.trials["tuned"]))

    def _distributed(self, tuned: Settings) -> None:
        m = self.measured
        runs = self._ddp_runs()
        if not runs:
            return
        ddp = self.ddp_settings(tuned)
        m.ddp_settings = ddp.to_dict()
        for i in range(runs):
            if i and not self.budget.fits(self._ddp_cost()):
                m.notes.append(f"{i} of {runs} multi-process runs: {self.budget.words()} was spent")
                return
            label = f"{self.plan.nproc} processes: tuned" + (f" ({i + 1}/{runs})" if runs > 1 else "")
            self.progress.begin(label, self.plan.steps + self.plan.warmup)
            self.where.doing(label)
            try:
                m.ddp.append(bounded(self.budget, self.where, lambda timeout: runner.launch_distributed(
                    self.plan.python, self.plan.workload, ddp, self.plan.nproc, steps=self.plan.steps,
                    warmup=self.plan.warmup, seed=self.plan.seed, device=m.device, options=self.plan.options,
                    launcher_args=self.plan.launcher_args or None, cwd=self.plan.cwd, timeout=timeout,
                    on_event=self.progress.advance), self.plan.timeout))
            except WorkerError as exc:
                m.failure = from_worker_error(exc, label, self.facts)
                return
            finally:
                self.progress.end()

    def host_waits(self) -> dict:
        """Host waits per step in the workload's code: counted on CUDA, else read from the code (debtorch lint)."""
        if (self.measured.device or "").startswith("cuda"):
            self.where.doing("counting host waits")
            try:
                got = self._request("host_waits", seed=self.plan.seed, steps=2 if self.plan.quick else 5)
                if got.get("measured"):
                    return got
            except WorkerError as exc:
                if exc.kind == "budget":
                    raise
                self.measured.notes.append(f"host waits per step not counted ({exc}); read from the code instead")
        return static_result(self.measured.workload.get("file"))

    # -- one trial ---------------------------------------------------------
    def calibration_trial(self, settings: Settings, steps: int, warmup: int) -> dict:
        """One trial of the calibration that sizes the rules' loader (``calibration.TrialFn``): the
        rounds' engine and worker, within the budget, not counted in any arm."""
        return self._run(_Job(f"calibrating: {settings.short()}", "calibration", settings, "instrumented", steps,
                              warmup))

    def _run(self, job: _Job) -> dict:
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
        step = out.get("step_median_s") if isinstance(out, dict) else None
        ran = (out.get("steps") or job.steps) + job.warmup if isinstance(out, dict) else job.total
        self._costs.append((self.clock() - t0, ran, step if isinstance(step, (int, float)) else 0.0))
        self._trial_steps = 0
        if job.arm == "prime" and isinstance(step, (int, float)) and step > 0:
            self._primed[repr(job.settings)] = float(step)
        return out

    def _run_all(self, jobs: list) -> None:
        """Run each job and keep its result where it belongs: the rounds' arms, the profile, the convergence
        runs (a priming trial's is not kept)."""
        for job in jobs:
            result, m = self._run(job), self.measured
            if job.arm == "prime":
                continue
            if job.arm == "profile":
                m.profile = {"trace": result.get("profile_trace"), "steps": job.steps,
                             "samples_per_s": result.get("samples_per_s")}
            elif job.arm.startswith("converge:"):
                m.converge[job.arm.split(":", 1)[1]] = result
            else:
                m.trials[job.arm].append(result)

    def _failure(self, exc, job: _Job) -> Failure:
        if getattr(exc, "kind", None) == "oom" and self.worker is not None and self.worker.proc is not None:
            return self._oom(exc, job)
        return from_worker_error(exc, job.label, self.facts)

    def _oom(self, exc, job: _Job) -> Failure:
        """Halve the micro-batch (doubling accumulation) until a short trial fits."""
        batch = int(self.measured.workload.get("batch_size") or 1)
        mb0 = job.settings.micro_batch or batch
        acc0 = job.settings.accumulation_steps
        glob = mb0 * acc0
        fit = None
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
                fit = {"micro_batch": mb, "accumulation_steps": acc}
            except WorkerError as again:
                if again.kind != "oom":
                    stopped = f"micro-batch {mb}: {again.message}"
                    break
            finally:
                self.progress.end()
        device = self.measured.device or "the device"
        fail = from_worker_error(exc, job.label, self.facts)
        fail.message = oom_message(device, mb0, acc0, fit, stopped)
        fail.suggestion = fit
        if fit:
            fail.fix = (f"set micro_batch = {fit['micro_batch']} and accumulation_steps = "
                        f"{fit['accumulation_steps']} in [batch] of the config "
                        f"(debtorch tune --global-batch {glob} --micro-batch {fit['micro_batch']})")
        return fail


def _one_process(s: Settings) -> Settings:
    """Settings for a single-process trial: the DDP fields do not apply."""
    return s.replace(nproc=1, backend=None) if (s.nproc != 1 or s.backend is not None) else s
