"""What ``cfg.watch(..., json=PATH)`` records for a prescription (``debtorch tune --from-watch``,
docs/tune.md "Prescriptions from your job"): the loader's batch (samples and bytes), the spread of
fetch and step times, the CPUs the training process, its DataLoader workers and the whole machine used
(and the machine's CPUs waiting on I/O), the device.
Kept apart from :mod:`debtorch.tune.watch` so that the loop's own code stays small: the wrapper
hands it each step's figures, the worker processes' ids when a pass starts, and one batch.

The workers' CPU time is read from ``/proc/<pid>/stat``, the machine's from ``/proc/stat``, through the
Host (at most every ``READ_EVERY_S``, between steps); torch is never imported here.
"""

from __future__ import annotations

import collections
import os
import time
from typing import Any, Iterable, Optional

from debtorch.host import Host, LiveHost

KEEP = 4096            # the last steps whose fetch and step times are kept (percentiles)
READ_EVERY_S = 1.0     # the workers' CPU time is read at most this often
MAX_WORKERS_READ = 256


def tensor_bytes(obj: Any, depth: int = 0) -> Optional[int]:
    """Bytes of the tensors and arrays of a batch (into tuples, lists and dicts); None when it has none."""
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    element, count = getattr(obj, "element_size", None), getattr(obj, "nelement", None)
    if callable(element) and callable(count):
        return int(element()) * int(count())
    if depth > 8:
        return None
    items: Iterable[Any] = ()
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (tuple, list)):
        items = obj
    sizes = [b for b in (tensor_bytes(x, depth + 1) for x in items) if b is not None]
    return sum(sizes) if sizes else None


def _percentile(ordered: list, q: float) -> Optional[float]:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _machine_ticks(stat_text: str) -> Optional[tuple]:
    """(busy, iowait) clock ticks of every CPU together, from the ``cpu`` line of ``/proc/stat``."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            try:
                values = [int(x) for x in fields[1:9]]
            except ValueError:
                return None
            if len(values) < 5:
                return None
            idle, iowait = values[3], values[4]
            return sum(values) - idle - iowait, iowait
    return None


def _cpu_seconds(stat_text: str, ticks: int) -> Optional[float]:
    """utime + stime of a ``/proc/<pid>/stat`` line, in seconds."""
    try:
        fields = stat_text.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks
    except (IndexError, ValueError):
        return None


class JobProbe:
    """The figures of one watched loop beyond its data wait.  Never raises into the loop: a figure it cannot
    read stays unknown (None)."""

    def __init__(self, host: Optional[Host] = None, clock: Any = time.perf_counter) -> None:
        self.host = host
        self.clock = clock
        self.waits: collections.deque = collections.deque(maxlen=KEEP)
        self.steps: collections.deque = collections.deque(maxlen=KEEP)
        self.batch_bytes: Optional[int] = None
        self.pids: list = []
        self._start: Optional[tuple] = None      # (busy seconds, process CPU seconds) when counting began
        self._main: Optional[tuple] = None       # (busy, process CPU) at the latest reading
        self._workers0: dict = {}                # pid -> CPU seconds at its first reading
        self._workers: dict = {}                 # pid -> CPU seconds at its latest reading
        self._machine0: Optional[tuple] = None   # (busy, iowait) ticks of the machine when counting began
        self._machine: Optional[tuple] = None
        self._read_at = -READ_EVERY_S
        self._ticks = 100

    def workers(self, iterator: Any) -> None:
        """A pass starts: the ids of the DataLoader's worker processes (persistent ones stay the same)."""
        try:
            procs = getattr(iterator, "_workers", None) or []
            pids = [int(p.pid) for p in procs[:MAX_WORKERS_READ] if getattr(p, "pid", None)]
        except Exception:  # noqa: BLE001 - another iterator's internals: unknown is fine
            pids = []
        self.pids = list(dict.fromkeys(self.pids + pids))

    def batch(self, batch: Any) -> None:
        if self.batch_bytes is None:
            try:
                self.batch_bytes = tensor_bytes(batch)
            except Exception:  # noqa: BLE001 - a batch of the user's own types
                self.batch_bytes = None

    def step(self, wait: float, step: float) -> None:
        self.waits.append(wait)
        self.steps.append(step)

    def tick(self, busy: float, force: bool = False) -> None:
        """Between steps, after ``busy`` seconds of counted steps: the CPU readings, at most every
        ``READ_EVERY_S`` (``force``: now, for a record)."""
        now = self.clock()
        if self._start is not None and now - self._read_at < READ_EVERY_S and not force:
            return
        self._read_at = now
        cpu = time.process_time()
        if self._start is None:
            self._start = (busy, cpu)
            try:
                self._ticks = os.sysconf("SC_CLK_TCK")
            except (ValueError, OSError, AttributeError):
                self._ticks = 100
        self._main = (busy, cpu)
        host = self.host or LiveHost()
        text = host.try_read("/proc/stat", 65536)
        machine = _machine_ticks(text) if text else None
        if machine is not None:
            if self._machine0 is None:
                self._machine0 = machine
            self._machine = machine
        self._read_workers(host)

    def _read_workers(self, host: Host) -> None:
        if not self.pids:
            return
        for pid in self.pids:
            text = host.try_read(f"/proc/{pid}/stat", 4096)
            seconds = _cpu_seconds(text, self._ticks) if text else None
            if seconds is None:
                continue
            self._workers0.setdefault(pid, seconds)
            self._workers[pid] = seconds

    def record(self, loader: Any, cuda: Any, busy: float) -> dict:
        """The ``pipeline`` object of a watch record (docs/runtime.md), after ``busy`` seconds of counted steps."""
        if self._start is not None:
            self.tick(busy, force=True)
        waits, steps = sorted(self.waits), sorted(self.steps)
        span = (self._main[0] - self._start[0]) if self._main and self._start else 0.0
        main_busy = workers_busy = machine_busy = machine_iowait = None
        if span > 0 and self._main and self._start:
            main_busy = (self._main[1] - self._start[1]) / span
            if self._workers:
                workers_busy = sum(self._workers[p] - self._workers0[p] for p in self._workers) / span
            if self._machine and self._machine0:
                machine_busy = (self._machine[0] - self._machine0[0]) / self._ticks / span
                machine_iowait = (self._machine[1] - self._machine0[1]) / self._ticks / span
        try:
            usable: Optional[int] = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            usable = os.cpu_count()
        size = getattr(loader, "batch_size", None)
        return {
            "batch_size": size if isinstance(size, int) and not isinstance(size, bool) else None,
            "batch_bytes": self.batch_bytes,
            "fetch_s": {"median": _percentile(waits, 0.5), "p10": _percentile(waits, 0.1),
                        "p90": _percentile(waits, 0.9), "max": waits[-1] if waits else None},
            "step_s": {"median": _percentile(steps, 0.5), "p90": _percentile(steps, 0.9)},
            "cpus": {"usable": usable, "main_busy": main_busy, "workers_busy": workers_busy,
                     "workers_read": len(self._workers), "machine_busy": machine_busy,
                     "machine_iowait": machine_iowait},
            "device": "cuda" if cuda is not None else "cpu",
            "device_name": _device_name(cuda),
        }


def _device_name(cuda: Any) -> Optional[str]:
    if cuda is None:
        return None
    try:
        return str(cuda.get_device_name())[:200]
    except Exception:  # noqa: BLE001 - the name is a nicety
        return None
