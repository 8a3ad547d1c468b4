"""Rules calibrated in seconds (docs/tune.md, "Calibrated rules"): where a workload is named, a few
short trials of it (at most ``CALIBRATION_S``) measure what the rules cannot know from the facts, the
loader's cost per sample and the rate the device consumes, so that workers and prefetch are sized
for this workload on this machine.  :func:`calibrate` runs the trials through whatever trial function
it is given (``tune``'s :class:`~debtorch.tune.measure.EngineTrials`, verify-train's worker: the one
engine, ``run_trial``), and returns a :class:`Calibration`; the sizing itself is a rule of
:mod:`debtorch.tune.rules` (tune.C001-C003), a pure function of the facts and the calibration.

Torch-free: the trials run in the training worker of the target interpreter.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from debtorch.train.device import Device
from debtorch.train.result import TrialResult
from debtorch.train.settings import Settings

CALIBRATION_S = 15.0      # the calibration's longest time (inside the command's --budget)
PROBE_STEPS = 2           # the first trial: a fresh worker's one-time costs and the step time
MIN_STEPS, MAX_STEPS = 3, 400
SHARE_IN_PROCESS = 0.4    # of the calibration's time left after the probe: the trial that loads in the training process
SHARE_WORKER = 0.8        # of what is left after that: the worker trial (the rest is its start and hand-over)
KEPT_UP = 0.10            # a worker trial waiting for data less than this: the worker kept up
WORKER_START_S = 1.0      # starting a DataLoader worker process (fork), about
FAST_ENOUGH = 1.05        # a device at most this much faster than one loading process needs no worker trial

# (settings, timed steps, warm-up steps) -> the engine's trial result (docs/engine.md, "Result keys").
TrialFn = Callable[[Settings, int, int], TrialResult]


class CalibrationError(Exception):
    """A calibration trial gave no usable figures; one line."""


@dataclass(frozen=True)
class Calibration:
    """What the calibration measured, per micro-batch of ``micro_batch`` samples."""

    device: Device                  # where the trials ran
    micro_batch: int                # samples per micro-batch of the trials
    loader_rate: float              # samples/s one process loads (decode and collate, in the training process)
    in_process_rate: float          # samples/s of the trial that loads in the training process
    main_batch_s: float             # the training process's own host time per micro-batch beyond loading
    device_rate: float              # samples/s the device consumes
    device_source: str              # how device_rate is known, in words
    threads: Optional[int]          # compute threads of the in-process trial
    batch_bytes: Optional[int]      # bytes of one micro-batch's tensors (what a worker puts in /dev/shm)
    fetch_s: float                  # median seconds to load one micro-batch in one process
    fetch_p90_s: float              # their 90th percentile
    worker_rate: Optional[float] = None         # samples/s one DataLoader worker delivered (None: not measured)
    worker_kept_up: bool = False                # that worker was faster than it was asked to be: a lower bound
    worker_threads: Optional[int] = None        # compute threads of the worker trial
    seconds: float = 0.0                        # what the calibration took
    trials: int = 0
    skipped: str = ""                           # a trial left out, and why

    @property
    def kind(self) -> str:
        """"sim", "cuda" or "cpu"."""
        return self.device.kind

    @property
    def per_worker(self) -> float:
        """Samples/s one worker process is taken to deliver: measured when it was the bottleneck, else at
        least what it delivered and what one process loads."""
        if self.worker_rate is None:
            return self.loader_rate
        if self.worker_kept_up:
            return max(self.worker_rate, self.loader_rate)
        return self.worker_rate

    @property
    def spread(self) -> float:
        """How much a micro-batch's load time varies: its 90th percentile over its median."""
        return self.fetch_p90_s / self.fetch_s if self.fetch_s > 0 else 1.0

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "device": str(self.device), "kind": self.kind,
                "per_worker": self.per_worker}


def in_process(base: Settings) -> Settings:
    """``base`` loading in the training process (no DataLoader workers)."""
    return base.replace(num_workers=0, prefetch_factor=None, persistent_workers=False, start_method=None)


def one_worker(base: Settings, threads: Optional[int]) -> Settings:
    """``base`` with one DataLoader worker (PyTorch's prefetch of 2, kept alive, forked)."""
    return base.replace(num_workers=1, prefetch_factor=2, persistent_workers=True, start_method="fork",
                        threads=threads)


def _per_step(values: Optional[list[float]]) -> list[float]:
    """The finite, non-negative ones of a trial's per-step times (none in a bare trial)."""
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _rate(result: TrialResult, what: str) -> float:
    sps = result.samples_per_s
    if not isinstance(sps, (int, float)) or not math.isfinite(sps) or sps <= 0:
        raise CalibrationError(f"the {what} trial gave no samples/s")
    return float(sps)


def _steps_for(seconds: float, step_s: float, least: int = MIN_STEPS) -> int:
    if step_s <= 0:
        return max(least, MIN_STEPS)
    return min(MAX_STEPS, max(least, MIN_STEPS, round(seconds / step_s)))


def calibrate(trial: TrialFn, base: Settings, device: Device, batch_size: int, cpus: int,
              seconds: float = CALIBRATION_S, clock: Callable[[], float] = time.monotonic,
              on_trial: Optional[Callable[[str], None]] = None) -> Calibration:
    """Measure ``base`` (the rules' settings) on the loaded workload through ``trial``, within
    ``seconds`` (at most :data:`CALIBRATION_S`): a probe (a fresh worker's one-time costs, the step
    time), a trial loading in the training process (the loader's cost per sample, the training
    process's own, the device's rate on a CPU or GPU) and, where the device outruns one loading process
    (or on a CPU, where a worker takes a compute thread's CPU), a trial with one DataLoader worker.
    ``cpus``: the CPUs of the training process.  Raises :class:`CalibrationError`; the trial function's
    own errors (the budget's end, a worker that died) pass through."""
    seconds = min(seconds, CALIBRATION_S)
    start = clock()
    say = on_trial or _silent
    accum = max(1, base.accumulation_steps or 1)
    micro = base.micro_batch or batch_size
    w0 = in_process(base)
    say(f"calibrating: {w0.short()} (probe)")
    probe = trial(w0, PROBE_STEPS, 1)
    step_s = probe.step_median_s or micro * accum / _rate(probe, "probe")
    left = seconds - (clock() - start)
    say(f"calibrating: {w0.short()}")
    main = trial(w0, _steps_for(SHARE_IN_PROCESS * left, step_s), 1)
    in_rate = _rate(main, "in-process")
    waits = [w / accum for w in _per_step(main.data_wait_s)]
    computes = [c / accum for c in _per_step(main.compute_s)]
    if not waits or not computes:
        raise CalibrationError("the in-process trial gave no per-step times (an instrumented trial is needed)")
    fetch = statistics.median(waits)
    compute = statistics.median(computes)
    device_waits = main.sim.device_wait_s if main.sim is not None else None
    host = compute
    if isinstance(device_waits, (int, float)):
        host -= device_waits / accum   # the host's waits for the simulated device are not its own work
    if device.rate is not None:
        device_rate, source = device.rate, "simulated"
    elif device.is_cuda:
        device_rate, source = micro / compute, "measured: copy, forward, backward and step"
    else:
        device_rate, source = micro / compute, f"the CPU's compute at {base.threads or cpus} thread(s)"
    cal = Calibration(device=device, micro_batch=micro, loader_rate=micro / fetch if fetch > 0 else in_rate,
                      in_process_rate=in_rate, main_batch_s=max(0.0, host), device_rate=device_rate,
                      device_source=source, threads=base.threads, batch_bytes=_bytes(main),
                      fetch_s=fetch, fetch_p90_s=_percentile(waits, 0.9), trials=2)
    cal = _worker_trial(trial, base, cal, cpus, seconds - (clock() - start), say)
    return dataclasses.replace(cal, seconds=clock() - start)


def _silent(label: str) -> None:
    """No progress to show."""


def _bytes(result: TrialResult) -> Optional[int]:
    b = result.batch_bytes
    return int(b) if isinstance(b, int) and not isinstance(b, bool) and b > 0 else None


def _worker_trial(trial: TrialFn, base: Settings, cal: Calibration, cpus: int, left: float,
                  say: Callable[[str], None]) -> Calibration:
    """One DataLoader worker's rate, where it matters and the time left pays for it."""
    on_cpu = cal.device.is_cpu
    if on_cpu and cpus < 2:
        return dataclasses.replace(cal, skipped="one CPU: a worker would only take it from compute")
    if not on_cpu and cal.device_rate <= cal.loader_rate * FAST_ENOUGH:
        return dataclasses.replace(cal, skipped="one loading process keeps up with the device: no worker trial")
    threads = max(1, cpus - 1) if on_cpu else base.threads
    settings = one_worker(base, threads)
    accum = max(1, base.accumulation_steps or 1)
    settle = math.ceil(2 * 2 / accum)               # engine.settle_steps: two turns of the prefetch queue
    # A worker may deliver less than loading in the training process (the hand-over, a busy machine):
    # its steps are sized at the slower of the two rates seen so far.
    step_s = cal.micro_batch * accum / min(cal.device_rate, cal.loader_rate, cal.in_process_rate)
    least = WORKER_START_S + (1 + 2 * settle) * step_s
    if left < least:
        return dataclasses.replace(cal, skipped=f"no time left for a trial with a worker ({left:.1f} s of "
                                                f"{least:.1f} s)")
    say(f"calibrating: {settings.short()}")
    window = SHARE_WORKER * left - WORKER_START_S - (1 + settle) * step_s
    result = trial(settings, _steps_for(window, step_s, settle), 1)
    share = result.data_wait_share
    kept_up = not isinstance(share, (int, float)) or share < KEPT_UP
    return dataclasses.replace(cal, worker_rate=_rate(result, "one-worker"), worker_kept_up=kept_up,
                               worker_threads=threads, trials=cal.trials + 1)


def describe(cal: Calibration) -> str:
    """One line of what was measured, for notes and reports."""
    worker = ""
    if cal.worker_rate is not None:
        worker = f"; one worker delivers {cal.worker_rate:.0f}" + (" (it kept up)" if cal.worker_kept_up else "")
    return (f"calibrated in {cal.seconds:.1f} s: one process loads {cal.loader_rate:.0f} samples/s "
            f"({1e3 * cal.fetch_s:.1f} ms a batch of {cal.micro_batch}){worker}; the device takes "
            f"{cal.device_rate:.0f} ({cal.device_source})")
