"""A simulated accelerator (``--device sim:RATE``): the input pipeline measured the way a GPU sees
it; the model, its parameters and what it leaves out are docs/engine.md's.  No model runs: each
micro-batch is copied "to the device" and ``micro_batch / RATE`` seconds of device work are queued;
the device is a schedule of finish times, so it holds neither a core nor the GIL.  Standard
library only at import (the command line checks specs); torch is imported for the staging copy.
"""

from __future__ import annotations

import collections
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

PREFIX = "sim:"
# A parameter's name in a spec -> (its SimSpec field, least, most); an int bound makes it an integer.
NUMBERS: dict[str, tuple[str, float, float]] = {"launch": ("launch_ms", 0.0, 1000.0), "gbps": ("gbps", 1e-3, 1e4),
                                                "ahead": ("ahead", 1, 1024)}
MAX_RATE = 1e9
MIN_RATE = 0.01   # samples/s: below it one sample is over 100 s of device work, no budget holds a step
MAX_NAME = 64     # characters of a name=, which the config and every report carry
MAX_SPEC = 512    # characters of a whole spec


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


def from_thresholds(rows: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, float]]:
    """(the defaults, the presets) of a simulated accelerator from checks/thresholds.toml's rows
    (``sim_launch_ms``, ``sim_gbps``, ``sim_ahead``; ``sim_preset_NAME``: a preset's rate)."""
    defaults = {f: rows[f"sim_{f}"]["value"] for f, _, _ in NUMBERS.values() if f"sim_{f}" in rows}
    presets = {name[len("sim_preset_"):]: float(row["value"]) for name, row in rows.items()
               if name.startswith("sim_preset_")}
    return defaults, presets


def parse(text: str, defaults: Optional[Mapping[str, Any]] = None,
          presets: Optional[Mapping[str, float]] = None) -> SimSpec:
    """``sim:RATE[,launch=MS][,gbps=GB/s][,ahead=STEPS][,sync=0|1][,name=NAME]`` (RATE a number of
    samples/s or a preset name); ``defaults`` and ``presets`` come from checks/ (the command line passes
    them).  Each parameter at most once, every value one the simulated device can run with (RATE from
    :data:`MIN_RATE` to :data:`MAX_RATE`).  ValueError with one line on anything else."""
    spec = _quoted(text)
    if not text.startswith(PREFIX):
        raise ValueError(f"a simulated device is {PREFIX}RATE (got {spec})")
    if len(text) > MAX_SPEC:
        raise ValueError(f"{spec}: a simulated device's spec is at most {MAX_SPEC} characters (got {len(text)})")
    head, *opts = text[len(PREFIX):].split(",")
    head = head.strip()
    values: dict[str, Any] = dict(defaults or {})
    if presets and head in presets:
        values.update(rate=float(presets[head]), name=head)
    else:
        known = f"; presets: {', '.join(sorted(presets))}" if presets else ""
        problem = (f"{spec}: {PREFIX}RATE must be a number from {MIN_RATE:g} to {MAX_RATE:g} samples/s "
                   f"(got {_quoted(head)}){known}")
        values["rate"] = _number(head, float, MIN_RATE, MAX_RATE, problem)
    seen: set[str] = set()
    for opt in opts:
        key, _, val = (x.strip() for x in opt.partition("="))
        if key in seen:
            raise ValueError(f"{spec}: {_quoted(key)} is given twice; give each parameter once")
        seen.add(key)
        if key in NUMBERS:
            field, lo, hi = NUMBERS[key]
            problem = f"{spec}: {key} must be a number from {lo:g} to {hi:g} (got {_quoted(val)})"
            values[field] = _number(val, type(lo), lo, hi, problem)
        elif key == "sync" and val in ("0", "1", "on", "off"):
            values["sync"] = val in ("1", "on")
        elif key == "name" and _NAME.fullmatch(val):
            values["name"] = val
        else:
            raise ValueError(f"{spec}: unknown or bad parameter {_quoted(opt.strip())} (known: launch=MS, gbps=GB/s, "
                             f"ahead=STEPS, sync=0|1, name= of at most {MAX_NAME} letters, digits, '-' and '.')")
    missing = [f for f, _, _ in NUMBERS.values() if f not in values]
    if missing:
        raise ValueError(f"{spec}: no value for {', '.join(missing)} (debtorch's command line fills in the defaults)")
    return SimSpec(**values)


_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9.-]{{0,{MAX_NAME - 1}}}")


def _quoted(text: str) -> str:
    """``text`` as a message quotes it: repr, at most 60 characters of it."""
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


def _number(val: str, kind: Callable[[str], float], lo: float, hi: float, problem: str) -> float:
    """``val`` as ``kind`` (int or float), finite and from ``lo`` to ``hi``; else ValueError(``problem``)."""
    try:
        x = kind(val)
    except ValueError:
        raise ValueError(problem) from None
    if not math.isfinite(x) or not lo <= x <= hi:
        raise ValueError(problem)
    return x


class SimDevice:
    """The device of one trial: a FIFO of device work in time (``free_at``: when it runs dry), the
    steps queued (their finish times), and the window's counters (``reset``)."""

    type = "sim"
    index = None

    def __init__(self, spec: SimSpec, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep):
        self.spec, self.clock, self.sleep = spec, clock, sleep
        self.free_at = 0.0
        self.pending: collections.deque[float] = collections.deque()
        self.staging: Any = None   # a torch buffer for pageable batches' staging copies
        self.busy = self.waited = self.staged = self.wake = 0.0
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

    def copy(self, tensor: Any, pinned: bool, non_blocking: bool) -> Any:
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

    def _stage(self, tensor: Any, nbytes: int) -> None:
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
