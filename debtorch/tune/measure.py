"""``debtorch tune --measure``: short trials on a real workload, within a budget (docs/tune.md,
"Measurement").  Torch-free: the trials run in a training worker of the target interpreter; this
module calibrates the trial length, hands the search a trial function, and writes what was measured
into the recommendation's reasons.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

from debtorch.budget import Budget, Where, seconds_problem, still_starting, too_small
from debtorch.host import Host, LiveHost
from debtorch.machine import Machine, oldest_cc
from debtorch.train.device import Device
from debtorch.train.result import LoadedWorkload, TrialResult
from debtorch.train.runner import TrainingWorker, start_and_load
from debtorch.train.settings import Settings
from debtorch.transport.client import WorkerError, bounded, worker_python
from debtorch.tune import rules
from debtorch.tune.rules import Reason, Recommendation
from debtorch.tune.search import Outcome, Result, Search, Trial, default_space, key

# Below this no search can run: reading the machine, a worker start (importing torch), loading the
# workload, a calibration and a handful of trials.  Checked before anything starts.
MIN_BUDGET_S = 20.0
TRIAL_TIMEOUT = 600.0                 # one trial, when the budget leaves more
# The search needs room for about this many trials; trials are sized to fit.
TRIALS_PLANNED = 45
MIN_WINDOW_S, MAX_TRIAL_S = 0.3, 8.0   # bounds on a trial's timed window
MIN_STEPS = 3                         # timed steps in a trial, at least
MIN_TRIALS = 6                        # a budget that cannot pay for these measures nothing
CALIBRATION_STEPS = 5
WARMUP_STEPS = 2



class MeasureError(Exception):
    """Measurement failed; the message is one line."""

    user_input = False  # about what the user gave (the command line exits 2), not the run (1)


class MeasureUsageError(MeasureError):
    """Bad input for measurement: workload, budget, device, a machine that is not this one; one line."""

    user_input = True


class TooSmall(Exception):
    """The budget cannot pay for calibration and a few trials of this workload: about ``need``
    more seconds after start-up would."""

    def __init__(self, need: float, where: str = ""):
        super().__init__(f"need about {need:.0f} s")
        self.need, self.where = need, where


class BudgetStop(MeasureError):
    """The budget ended while the worker was busy (a workload that hangs, or one too slow for the
    budget): the worker was killed; the message says where, and ``at`` alone ('trial 2 (w0 fp32), timed
    step 2 of 5').  ``hung``: no progress for a while."""

    def __init__(self, message: str, hung: bool = True, at: str = "") -> None:
        super().__init__(message)
        self.hung, self.at = hung, at


@dataclass
class MeasureOptions:
    workload: str = "builtin:cnn"
    budget_s: float = 120.0
    python: Optional[str] = None
    repeats: int = 3
    seed: int = 0
    started: Optional[float] = None   # time.monotonic() when the command started (None: when measuring starts)
    search: bool = True               # False: only calibrate the rules on the workload (no --measure)


def precisions_for(rec: Recommendation, facts: Union[Machine, dict[str, Any]]) -> list[str]:
    """The precisions worth measuring on this device (never one the hardware lacks)."""
    m = facts if isinstance(facts, Machine) else Machine.from_facts(facts)
    if rec.device.simulated:
        return ["fp32"]  # no model runs
    if rec.device.is_cuda:
        cc = oldest_cc(m.gpus.compute)
        if cc and cc >= (8, 0):
            return ["fp32", "bf16", "fp16"]
        return ["fp32", "fp16"] if cc and cc >= (7, 0) else ["fp32"]
    return ["fp32", "bf16"] if m.cpus.bf16 else ["fp32"]


def apply_result(rec: Recommendation, result: Result) -> Recommendation:
    """Put the measured settings and their reasons into ``rec`` (in place; returned)."""
    rec.settings = result.best
    against = f"; measured against a {rec.device.words()}" if rec.device.simulated else ""
    for dim, choice in result.choices.items():
        for name in choice.fields or (dim,):
            if not choice.measured:
                continue  # the rule's reason stands
            rec.reasons[name] = Reason(choice.rule, choice.text + against)
    close = result.close_call()
    if close and result.runner_up is not None:
        # Not one winner: say so beside every measured setting in which the two differ.
        runner_up = result.runner_up.to_dict()
        differ = [n for n, v in result.best.to_dict().items() if runner_up.get(n) != v]
        for name in differ:
            r = rec.reasons.get(name)
            if r is not None and r.measured:
                rec.reasons[name] = Reason(r.rule, f"{r.text}; the chosen settings are {close}")
        rec.notes.append(f"measured: {result.best.short()} is {close}, noise {result.noise:.1%} per trial: "
                         "either will do")
    rules.worker_companions(rec)
    rules.thread_env(rec)
    rec.chosen_by = "measured"
    return rec


class EngineTrials:
    """Trials in a training worker of the target interpreter.  A worker that dies in a trial (a bus
    error, the OOM killer) is restarted for the next one, the trial failed; every wait is within
    ``budget``, and when it ends inside one the worker is killed and :class:`BudgetStop` says where."""

    def __init__(self, workload: str, device: Optional[Device], python: Optional[str] = None, seed: int = 0,
                 host: Optional[Host] = None, budget: Optional[Budget] = None,
                 options: Optional[dict[str, Any]] = None):
        self.workload, self.device, self.seed, self.options = workload, device, seed, options or {}
        self.budget = budget or Budget(None)
        self.where = Where(self.budget.clock)
        self.count = 0
        self.worker: Optional[TrainingWorker] = None
        # What stopping the worker may cost, measured: at most what starting it did (a kill unmaps what the
        # start mapped, imports and runs nothing: here 30-70 ms against a start of 1-2 s).
        self.stop_s = 0.0
        try:
            self.python = worker_python(python, host or LiveHost())
            self.info = self._start()
        except WorkerError as exc:
            if self.worker is not None:
                self.worker.kill()
            raise self._as_error(exc) from None

    def _as_error(self, exc: WorkerError) -> MeasureError:
        cls = MeasureUsageError if exc.user_input else MeasureError
        return cls(str(exc))

    def _budget_stop(self, call: Callable[[], Any]) -> Any:
        """``call()`` (its waits within the budget); BudgetStop (the worker killed) when the budget cut it."""
        try:
            return call()
        except WorkerError as exc:
            if exc.kind != "budget":
                raise
            if self.worker is not None:
                self.worker.kill()
            raise BudgetStop(exc.message, hung=self.where.hung(), at=self.where.line()) from None

    def _start(self) -> LoadedWorkload:
        worker = self.worker = TrainingWorker(self.python, cwd=os.getcwd())

        def start_and_load_it() -> LoadedWorkload:
            return start_and_load(worker, self.budget, self.where, TRIAL_TIMEOUT, self.workload, device=self.device,
                                  options=self.options, seed=self.seed)

        began = self.budget.clock()
        info = self._budget_stop(start_and_load_it)
        self.stop_s = max(self.stop_s, self.budget.clock() - began)
        return info

    def trial(self, settings: Settings, steps: int, warmup: int) -> TrialResult:
        self.count += 1
        self.where.trial(f"trial {self.count} ({settings.short()})", warmup)
        worker = self.worker
        assert worker is not None   # started by __init__

        def run(timeout: float) -> TrialResult:
            return worker.trial(settings, steps=steps, warmup=warmup, seed=self.seed, sample_memory=False,
                                on_progress=self.where.progress, timeout=timeout)

        def run_in_budget() -> TrialResult:
            return bounded(self.budget, self.where, run, TRIAL_TIMEOUT)

        try:
            return self._budget_stop(run_in_budget)
        except WorkerError as exc:
            if exc.kind in ("died", "timeout"):
                try:
                    worker.kill()
                    self._start()
                except WorkerError as again:
                    raise MeasureError(f"the worker cannot be restarted: {again}") from None
            raise

    def close(self) -> None:
        """Stop the worker: killed, it holds nothing to save (a graceful exit, the interpreter tearing torch
        down, took 0.4-1 s here; a kill 30-70 ms)."""
        if self.worker is not None:
            self.worker.kill()
            self.worker = None


class Trialer:
    """Runs trials through an engine (``trial(settings, steps, warmup) -> dict`` and ``info``, the
    workload's description) and sizes them: calibration, then every config timed over about the same
    window whatever its speed.  Calling it runs one trial: an :class:`~debtorch.tune.search.Outcome`."""

    def __init__(self, engine: Any, clock: Callable[[], float] = time.monotonic):
        self.engine, self.clock = engine, clock
        self.info: LoadedWorkload = getattr(engine, "info", None) or LoadedWorkload()
        self.steps = self.max_steps = CALIBRATION_STEPS
        self.step_s = self.overhead = 0.0
        self.batch = 1
        self.steps_for: dict[tuple, int] = {}
        self.searching = False   # set by calibrate(): from then on, a trial the budget stopped is a failed trial
        self.cut = ""            # where the budget stopped a trial of the search

    def run(self, settings: Settings, steps: int) -> Outcome:
        start = self.clock()
        try:
            r = self.engine.trial(settings, steps=steps, warmup=WARMUP_STEPS)
        except BudgetStop as exc:
            if not self.searching:
                raise
            self.cut = str(exc)
            return Outcome(None, self.clock() - start, error="stopped at the end of the budget")
        except MeasureError:
            raise
        except Exception as exc:  # a failed trial is a finding, not the end of the search
            return Outcome(None, self.clock() - start, error=_one_line(exc))
        cost = self.clock() - start
        if not isinstance(r, TrialResult):
            return Outcome(None, cost, error=_one_line(r))
        sps = r.samples_per_s
        if not isinstance(sps, (int, float)) or sps <= 0:
            return Outcome(None, cost, error="no samples/s in the trial's result")
        return Outcome(float(sps), cost, r.data_wait_share, None)

    def calibrate(self, settings: Settings, seconds: float) -> float:
        """Size trials so that about TRIALS_PLANNED fit ``seconds``; the expected cost of one.  The first
        trial in a fresh worker pays one-time costs and only warms up; the second measures the step
        time and what a trial costs beyond its steps."""
        warm = self.run(settings, 2)
        if warm.samples_per_s is None:
            raise MeasureError(f"the first trial failed: {warm.error}")
        try:
            calib = self.run(settings, CALIBRATION_STEPS)
        except BudgetStop as exc:
            # The first trial finished: the workload runs, but too slowly for this budget.  (Its
            # one-time costs make it a poor estimate of the next, so the calibration is tried.)
            raise TooSmall(warm.seconds * (CALIBRATION_STEPS + WARMUP_STEPS) / (2 + WARMUP_STEPS)
                           * (2 + MIN_TRIALS), exc.at) from None
        if calib.samples_per_s is None:
            raise MeasureError(f"the calibration trial failed: {calib.error}")
        self.batch = (settings.micro_batch or self.info.batch_size or 1) * settings.accumulation_steps
        self.step_s = self.batch / calib.samples_per_s
        self.overhead = max(0.0, calib.seconds - (CALIBRATION_STEPS + WARMUP_STEPS) * self.step_s)
        seconds -= calib.seconds + warm.seconds
        window = min(MAX_TRIAL_S, max(MIN_WINDOW_S, seconds / TRIALS_PLANNED - self.overhead
                                      - WARMUP_STEPS * self.step_s))
        self.steps = max(MIN_STEPS, round(window / self.step_s))
        self.max_steps = max(self.steps, round(4 * MAX_TRIAL_S / self.step_s))
        self.searching = True
        return self.overhead + (self.steps + WARMUP_STEPS) * self.step_s

    def __call__(self, settings: Settings) -> Outcome:
        # Aim every config at the same timed window: one much faster than the rules'
        # would otherwise be timed over a few milliseconds.
        k = key(settings)
        out = self.run(settings, self.steps_for.get(k, self.steps))
        if out.samples_per_s is not None and k not in self.steps_for:
            per_step = self.batch / out.samples_per_s
            self.steps_for[k] = min(self.max_steps, max(MIN_STEPS, round(self.steps * self.step_s / per_step)))
        return out


def measure(rec: Recommendation, facts: dict[str, Any], opts: MeasureOptions, trials: Any = None,
            on_trial: Optional[Callable[[Trial, float, float], None]] = None,
            clock: Callable[[], float] = time.monotonic, host: Optional[Host] = None,
            budget: Optional[Budget] = None) -> Result:
    """Search around ``rec``'s settings on a real workload (``trials``, an engine as :class:`Trialer`
    takes, by default an :class:`EngineTrials` on ``host``); update ``rec``; return the search's
    result.  The budget (``budget``, the one a given engine waits within; by default ``opts.budget_s`` from
    ``opts.started``) holds back what stopping the engine may cost (its ``stop_s``, measured; an engine
    that cannot say, none), so that the last trial, cut or not, and the worker's stop end within it: when
    it ends inside a trial of the search, the search decides with what it has; before the search,
    :class:`BudgetStop` says where."""
    problem = seconds_problem("--budget", opts.budget_s, MIN_BUDGET_S)
    if problem:
        raise MeasureUsageError(problem)
    if budget is None:
        budget = Budget(opts.budget_s, start=opts.started, clock=clock)
    own = trials is None
    if own:
        try:
            trials = EngineTrials(opts.workload, rec.device, opts.python, opts.seed, host, budget=budget)
        except BudgetStop as stop:
            if stop.hung:
                raise
            raise MeasureUsageError(still_starting(opts.budget_s, budget.spent())) from None
    try:
        trialer = Trialer(trials, clock)
        before = budget.spent()
        try:
            cost = trialer.calibrate(rec.settings, budget.left())
        except TooSmall as small:
            raise _too_small(opts, before, budget.spent() - before, small.need, small.where) from None
        # The search keeps what stopping the worker may cost for the end (a hang before it is stopped at
        # the budget's end, within the stated slack).
        budget.hold(getattr(trials, "stop_s", 0.0))
        left = budget.left()
        if left < MIN_TRIALS * cost:
            raise _too_small(opts, before, budget.spent() - before,
                             budget.spent() - before + MIN_TRIALS * cost + budget.reserve)
        conv = bool(trialer.info.convolutional) and not rec.device.simulated
        dims = default_space(rec.settings, rec.device, rec.per_process_cpus, precisions_for(rec, facts), conv,
                             max_workers=rec.max_workers)
        search = Search(trialer, budget_s=left, repeats=opts.repeats, on_trial=on_trial, clock=clock)
        try:
            result = search.run(rec.settings, dims)
        except RuntimeError as exc:
            raise MeasureError(str(exc)) from None
        if not any(c.measured for c in result.choices.values()):
            took = statistics.median(t.seconds for t in result.trials) if result.trials else cost
            more = max(2 * opts.budget_s, (opts.budget_s - left) + 4 * MIN_TRIALS * took)
            raise MeasureUsageError(f"--budget {opts.budget_s:g} was spent before any choice could be measured "
                                    f"(trials took {took:.1f} s, calibrated {cost:.1f} s); give at least "
                                    f"{math.ceil(more)}")
        if own:
            trials.close()   # the worker's stop is the command's time too: within what the budget held for it
        result = dataclasses.replace(result, budget=opts.budget_s, spent=budget.spent(), steps_per_trial=trialer.steps,
                                     reserve=budget.reserve)
        apply_result(rec, result)
        if trialer.cut:
            rec.notes.append(f"the search decided with what it had: {trialer.cut}")
        if rec.settings.nproc > 1:
            rec.notes.append(f"measured in one process with {rec.per_process_cpus} CPU(s), the share each of the "
                             f"{rec.settings.nproc} processes gets; verify-train --nproc measures them together")
        return result
    finally:
        if own:
            trials.close()


def _too_small(opts: MeasureOptions, startup: float, calibration: float, need: float,
               where: str = "") -> MeasureUsageError:
    """The budget cannot pay for this workload's calibration and a few trials: what would."""
    cut = f" (the calibration trial was {where} when it ended)" if where else ""
    return MeasureUsageError(too_small(opts.budget_s, startup, calibration, startup + need, cut))


def _one_line(x: Any) -> str:
    text = str(x).strip().splitlines()
    return (text[-1] if text else type(x).__name__)[:200]
