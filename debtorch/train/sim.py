"""A simulated accelerator (``--device sim:RATE``): the input pipeline measured the way a GPU sees
it; the model, its parameters and what it leaves out are docs/engine.md's.  No model runs: each
micro-batch is copied "to the device" and ``micro_batch / RATE`` seconds of device work are queued;
the device is a schedule of finish times, so it holds neither a core nor the GIL.  Standard
library only at import (the command line checks specs); torch is imported for the staging copy.
"""

from __future__ import annotations

import collections
import math
import time
from dataclasses import dataclass
from typing import Optional

PREFIX = "sim:"
NUMBERS = {"launch": ("launch_ms", 0.0, 1000.0), "gbps": ("gbps", 1e-3, 1e4), "ahead": ("ahead", 1, 1024)}
MAX_RATE = 1e9


@dataclass(frozen=True)
class SimSpec:
    rate: float          # samples per second the accelerator computes: the device bound
    launch_ms: float     # host CPU time to launch one micro-batch's work
    gbps: float          # host-to-device copy bandwidth, 10^9 bytes per second
    ahead: int           # optimizer steps the host may queue beyond the one the device runs
    sync: bool = False   # read the loss every step: the host waits for the queue to drain
    name: str = ""       # the preset it came from

    def text(self) -> str:
        """The canonical spec: every parameter, so that the worker needs no defaults."""
        return (f"{PREFIX}{self.rate:g},launch={self.launch_ms:g},gbps={self.gbps:g},ahead={self.ahead},"
                f"sync={int(self.sync)}" + (f",name={self.name}" if self.name else ""))

    def words(self) -> str:
        return f"simulated accelerator ({self.rate:g} samples/s{', ' + self.name if self.name else ''})"


def is_sim(device) -> bool:
    return isinstance(device, str) and device.startswith(PREFIX)


def parse(text: str, defaults: Optional[dict] = None, presets: Optional[dict] = None) -> SimSpec:
    """``sim:RATE[,launch=MS][,gbps=GB/s][,ahead=STEPS][,sync=0|1]`` (RATE a number of samples/s or a
    preset name); ``defaults`` and ``presets`` come from checks/ (the command line passes them).
    ValueError with one line on anything else."""
    if not is_sim(text):
        raise ValueError(f"a simulated device is {PREFIX}RATE (got {text!r})")
    head, *opts = text[len(PREFIX):].split(",")
    head, values = head.strip(), dict(defaults or {})
    if presets and head in presets:
        values.update(rate=float(presets[head]), name=head)
    else:
        known = f"; presets: {', '.join(sorted(presets))}" if presets else ""
        values["rate"] = _number(head, float, lambda x: 0 < x <= MAX_RATE, f"{text!r}: {PREFIX}RATE must be a "
                                 f"number above 0 to {MAX_RATE:g} (got {head!r}){known}")
    for opt in opts:
        key, _, val = (x.strip() for x in opt.partition("="))
        if key in NUMBERS:
            field, lo, hi = NUMBERS[key]
            values[field] = _number(val, type(lo), lambda x, lo=lo, hi=hi: lo <= x <= hi,
                                    f"{text!r}: {key} must be a number from {lo:g} to {hi:g} (got {val!r})")
        elif key == "sync" and val in ("0", "1", "on", "off"):
            values["sync"] = val in ("1", "on")
        elif key == "name" and val.replace("-", "").replace(".", "").isalnum():
            values["name"] = val
        else:
            raise ValueError(f"{text!r}: unknown or bad parameter {opt.strip()!r} (known: launch=MS, gbps=GB/s, "
                             "ahead=STEPS, sync=0|1)")
    missing = [f for f, _, _ in NUMBERS.values() if f not in values]
    if missing:
        raise ValueError(f"{text!r}: no value for {', '.join(missing)} (debtorch's command line fills in the defaults)")
    return SimSpec(**values)


def _number(val: str, kind, ok, problem: str):
    """``val`` as ``kind`` (int or float), finite and ``ok``; else ValueError(``problem``)."""
    try:
        x = kind(val)
    except ValueError:
        x = None
    if x is None or not math.isfinite(x) or not ok(x):
        raise ValueError(problem)
    return x


class SimDevice:
    """The device of one trial: a FIFO of device work in time (``free_at``: when it runs dry), the
    steps queued (their finish times), and the window's counters (``reset``)."""

    type = "sim"
    index = None

    def __init__(self, spec: SimSpec, clock=time.perf_counter, sleep=time.sleep):
        self.spec, self.clock, self.sleep = spec, clock, sleep
        self.free_at = 0.0
        self.pending: collections.deque = collections.deque()
        self.staging = None
        self.reset()

    def __str__(self) -> str:
        return self.spec.text()

    def reset(self) -> None:
        # device work queued, host waits, host memcpy, the host's wake-up after the device ran dry (seconds)
        self.busy = self.waited = self.staged = self.wake = 0.0

    def _until(self, t: float) -> None:
        now = self.clock()
        if t > now:
            self.sleep(t - now)
            woke = self.clock()
            self.waited += woke - now
            self.wake += max(0.0, woke - t)

    def _queue(self, seconds: float) -> None:
        self.free_at = max(self.clock(), self.free_at) + seconds
        self.busy += seconds

    def copy(self, tensor, pinned: bool, non_blocking: bool):
        """A host-to-device copy of ``tensor`` (returned as it is: nothing lives on the device)."""
        nbytes = tensor.numel() * tensor.element_size()
        if not (pinned and non_blocking):
            t0 = self.clock()
            self._stage(tensor, nbytes)
            self.staged += self.clock() - t0
        self._queue(nbytes / (self.spec.gbps * 1e9))
        if not non_blocking:
            self._until(self.free_at)
        return tensor

    def _stage(self, tensor, nbytes: int) -> None:
        import torch

        if nbytes == 0:
            return
        if self.staging is None or self.staging.numel() < nbytes:
            self.staging = torch.empty(nbytes, dtype=torch.uint8)
        self.staging[:nbytes].copy_(tensor.detach().contiguous().reshape(-1).view(torch.uint8))

    def compute(self, samples: int) -> None:
        """Launch one micro-batch: its device work starts with the launch and ends no earlier."""
        end = self.clock() + self.spec.launch_ms / 1000.0
        self._queue(samples / self.spec.rate)
        while self.clock() < end:
            pass
        self.free_at = max(self.free_at, end)

    def end_step(self, sync: bool = False) -> None:
        """An optimizer step is queued: wait for the queue to drain (``sync``), or while more than
        ``ahead`` steps are queued beyond the one running."""
        if sync or self.spec.sync:
            self.drain()
            return
        self.pending.append(self.free_at)
        now = self.clock()
        while self.pending and self.pending[0] <= now:
            self.pending.popleft()
        while len(self.pending) > self.spec.ahead + 1:
            self._until(self.pending.popleft())

    def drain(self) -> None:
        self._until(self.free_at)
        self.pending.clear()
