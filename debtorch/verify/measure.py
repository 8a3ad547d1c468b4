"""The verify-train plan and its execution through the training engine's worker.

Torch-free.  One worker process of the target interpreter
(:class:`debtorch.train.runner.Worker`) loads the workload once and runs
every trial with :func:`debtorch.train.engine.run_trial`; the multi-process
run goes through :func:`debtorch.train.runner.launch_distributed`
(``torch.distributed.run``).  The loop is the engine's: nothing here trains.

The plan (docs/verify-train.md):

0. One short trial of baseline and of tuned, not counted: a fresh worker's
   first trial pays one-time costs its warm-up steps do not absorb.
1. ``repeats`` interleaved rounds.  Each round runs baseline, tuned and
   tuned with the bare loop (their order swapped every other round), then
   the compute-only bound of each (batches already in memory).  Every trial
   is a fresh copy of the model, ``warmup`` steps excluded from its timed
   window of ``steps``.
2. With ``--profile DIR``, a few tuned steps under torch.profiler.
3. Convergence runs: baseline and tuned from the same weights on the same
   batches until the running-mean loss falls below the target (at most
   ``converge_steps`` optimizer steps); when tuned uses AMP, an fp32
   reference with tuned's other settings (or the baseline run, when it
   trains the same curve) to compare the loss curves.
4. With more than one process, the tuned run under torch.distributed.run.

Everything measured is kept in a :class:`Measured` as it arrives, so that a
failure or Ctrl-C still reports what was measured so far.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from debtorch.lint.measured import static_result
from debtorch.train import runner
from debtorch.train.settings import Settings
from debtorch.verify import analysis
from debtorch.verify.failures import Failure, from_worker_error, oom_message

# --quick: the real path, in seconds (CI).  Built-in workloads also shrink.
QUICK = {"steps": 3, "warmup": 1, "converge_steps": 12, "profile_steps": 2}
QUICK_OPTIONS = {
    "builtin:cnn": {"samples": 128, "size": 16, "raw": 32, "width": 8, "batch_size": 8},
    "builtin:transformer": {"samples": 128, "length": 16, "dim": 32, "layers": 1, "batch_size": 8},
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
    repeats: int = 3                              # interleaved rounds (at least 3)
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

    def problems(self) -> list:
        errs = []
        if self.repeats < MIN_REPEATS:
            errs.append(f"--repeats must be at least {MIN_REPEATS} (medians need interleaved repeats)")
        if self.steps < 2:
            errs.append("--steps must be at least 2")
        if self.warmup < 0:
            errs.append("--warmup must be >= 0")
        if self.converge_steps < 0:
            errs.append("--max-steps must be >= 0")
        if self.nproc < 1:
            errs.append("--nproc must be >= 1")
        if self.target_loss is not None and not (math.isfinite(self.target_loss)):
            errs.append("--target-loss must be a finite number")
        return errs

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
    trials: dict = field(default_factory=lambda: {arm: [] for arm in analysis.ARMS})
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
        """The number of optimizer steps the whole plan will run (warm-up included)."""

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
    """Runs a :class:`Plan` in one worker; use as a context manager.

    ``worker_factory(python, cwd=..., timeout=...)`` makes the worker
    (:class:`debtorch.train.runner.Worker`); ``launcher`` is
    :func:`debtorch.train.runner.launch_distributed`.  ``facts`` (the
    machine's, for the doctor's /dev/shm check) is optional.
    """

    def __init__(self, plan: Plan, facts: Optional[dict] = None, progress: Optional[Progress] = None,
                 worker_factory: Optional[Callable] = None, launcher: Optional[Callable] = None):
        self.plan = plan
        self.facts = facts
        self.progress = progress or Progress()
        self._factory = worker_factory or runner.Worker
        self._launch = launcher or runner.launch_distributed
        self._error = runner.WorkerError
        self.worker = None
        self.measured = Measured(plan=plan.to_json())

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
        """Start the worker and load the workload; return its description.

        Raises :class:`debtorch.train.runner.WorkerError` (no torch, a workload
        that cannot be imported, a device this torch cannot use).
        """
        p = self.plan
        self.worker = self._factory(p.python, cwd=p.cwd, timeout=p.timeout)
        self.worker.start()
        self.measured.worker = self.worker.info()
        self.measured.workload = self.worker.load(p.workload, device=p.device, options=p.options, seed=p.seed)
        self.measured.device = self.measured.workload.get("device")
        return self.measured.workload

    # -- the plan ----------------------------------------------------------
    def jobs(self, baseline: Settings, tuned: Settings) -> list:
        """The single-process trials, in the order they run (see the module doc)."""
        p = self.plan
        base, tune = _one_process(baseline), _one_process(tuned)
        # A fresh worker's first trial of each settings pays one-time costs (lazy imports, kernel
        # creation) that its warm-up steps do not absorb: one short trial each, not counted.
        out = [_Job("warming up: baseline", "prime", base, "instrumented", 1, max(1, p.warmup)),
               _Job("warming up: tuned", "prime", tune, "instrumented", 1, max(1, p.warmup))]
        for r in range(p.repeats):
            pair = [_Job(f"round {r + 1}/{p.repeats}: tuned", "tuned", tune, "instrumented", p.steps, p.warmup),
                    _Job(f"round {r + 1}/{p.repeats}: tuned, bare loop", "tuned_bare", tune, "bare", p.steps, p.warmup)]
            if r % 2:
                pair.reverse()
            out.append(_Job(f"round {r + 1}/{p.repeats}: baseline", "baseline", base, "instrumented", p.steps, p.warmup))
            out.extend(pair)
            out.append(_Job(f"round {r + 1}/{p.repeats}: baseline, compute only", "baseline_bound", base,
                            "compute_only", p.steps, p.warmup))
            out.append(_Job(f"round {r + 1}/{p.repeats}: tuned, compute only", "tuned_bound", tune,
                            "compute_only", p.steps, p.warmup))
        if p.profile_dir:
            out.append(_Job("profile: tuned", "profile", tune, "instrumented", max(2, p.profile_steps), 1,
                            {"profile_dir": os.path.abspath(p.profile_dir)}))
        if p.converge_steps > 0 and self._target() is not None:
            cap = max(1, p.converge_steps - p.warmup)
            stop = {"stop_at_target": True, "target_loss": self._target()}
            out.append(_Job("convergence: baseline", "converge:baseline", base, "instrumented", cap, p.warmup, stop))
            out.append(_Job("convergence: tuned", "converge:tuned", tune, "instrumented", cap, p.warmup, stop))
            ref = self.reference(base, tune)
            if ref is not None:
                self.measured.reference = ref.to_dict()
                if not self._baseline_is_reference(base, ref):
                    out.append(_Job("convergence: fp32 reference", "converge:reference", ref, "instrumented",
                                    cap, p.warmup, stop))
        return out

    def reference(self, base: Settings, tune: Settings) -> Optional[Settings]:
        """fp32 with tuned's other settings, when tuned uses AMP (else None)."""
        if tune.precision == "fp32":
            return None
        return tune.replace(precision="fp32")

    def _baseline_is_reference(self, base: Settings, ref: Settings) -> bool:
        batch = int(self.measured.workload.get("batch_size") or 1)
        return base.precision == "fp32" and analysis.same_numerics(base.to_dict(), ref.to_dict(), batch)

    def _target(self) -> Optional[float]:
        if self.plan.target_loss is not None:
            return self.plan.target_loss
        return self.measured.workload.get("target_loss")

    def ddp_settings(self, tuned: Settings) -> Settings:
        """Tuned settings for the multi-process run.

        When ``--nproc`` differs from the processes the settings were tuned
        for, threads are left to each rank (usable CPUs // local processes).
        """
        s = tuned.replace(nproc=self.plan.nproc)
        if tuned.nproc != self.plan.nproc and tuned.threads is not None:
            s = s.replace(threads=None)
            self.measured.notes.append(
                f"threads per process left to each rank (usable CPUs // {self.plan.nproc}): the settings "
                f"were tuned for {tuned.nproc} process(es)")
        return s

    def run(self, baseline: Settings, tuned: Settings) -> Measured:
        """Run the plan; failures end it and are recorded in ``measured.failure``.

        KeyboardInterrupt propagates (the worker is killed on the way); what
        was measured until then stays in ``self.measured``.
        """
        m = self.measured
        m.baseline, m.tuned = baseline.to_dict(), tuned.to_dict()
        jobs = self.jobs(baseline, tuned)
        ddp_runs = (1 if self.plan.quick else self.plan.repeats) if self.plan.nproc > 1 else 0
        ddp = self.ddp_settings(tuned) if ddp_runs else None
        self.progress.plan(sum(j.total for j in jobs) + ddp_runs * (self.plan.steps + self.plan.warmup))
        for job in jobs:
            try:
                result = self._run(job)
            except self._error as exc:
                m.failure = self._failure(exc, job)
                return m
            self._keep(job, result)
        m.host_waits = self.host_waits()
        if ddp is not None:
            m.ddp_settings = ddp.to_dict()
            for i in range(ddp_runs):
                label = f"{self.plan.nproc} processes: tuned" + (f" ({i + 1}/{ddp_runs})" if ddp_runs > 1 else "")
                self.progress.begin(label, self.plan.steps + self.plan.warmup)
                try:
                    m.ddp.append(self._launch(
                        self.plan.python, self.plan.workload, ddp, self.plan.nproc, steps=self.plan.steps,
                        warmup=self.plan.warmup, seed=self.plan.seed, device=m.device, options=self.plan.options,
                        launcher_args=self.plan.launcher_args or None, cwd=self.plan.cwd,
                        timeout=self.plan.timeout, on_event=self.progress.advance))
                except self._error as exc:
                    m.failure = from_worker_error(exc, label, self.facts)
                    return m
                finally:
                    self.progress.end()
        return m

    def host_waits(self) -> dict:
        """Host waits per step in the workload's code: counted on CUDA, else read from the code (debtorch lint)."""
        if (self.measured.device or "").startswith("cuda"):
            try:
                got = self.worker.request("host_waits", timeout=self.plan.timeout, seed=self.plan.seed,
                                          steps=2 if self.plan.quick else 5)
                if got.get("measured"):
                    return got
            except self._error as exc:
                self.measured.notes.append(f"host waits per step not counted ({exc}); read from the code instead")
        return static_result(self.measured.workload.get("file"))

    # -- one trial ---------------------------------------------------------
    def _run(self, job: _Job) -> dict:
        self.progress.begin(job.label, job.total)
        try:
            return self.worker.request(
                "trial", on_event=self.progress.advance, timeout=self.plan.timeout,
                settings=job.settings.to_dict(), steps=job.steps, warmup=job.warmup, mode=job.mode,
                seed=self.plan.seed, sample_memory=True, progress=True, **job.extra)
        finally:
            self.progress.end()

    def _keep(self, job: _Job, result: dict) -> None:
        m = self.measured
        if job.arm == "prime":
            return
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
                self.worker.request("trial", timeout=self.plan.timeout, settings=trial.to_dict(), steps=1,
                                    warmup=1, mode="instrumented", seed=self.plan.seed, sample_memory=False,
                                    progress=False)
                fit = {"micro_batch": mb, "accumulation_steps": acc}
            except self._error as again:
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
