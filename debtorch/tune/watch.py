"""``cfg.watch(loader)``: data wait, host syncs and a verdict from the user's own loop (docs/runtime.md).

Per step, the wait for the next batch and the whole step: on CUDA from events recorded on the current
stream around each fetch and read steps later with ``Event.query()`` (the GPU's idle time, no sync
added), elsewhere the host's clock; host syncs per step with verify-train's counter.  torch is never
imported here: the training script's own is used (``sys.modules``).  Under torch.distributed watch
issues no collective: each rank judges itself, and rank 0 hears the others' summaries through the
process group's store (:class:`_Peers`), waiting a bounded time for them; nothing here may raise into
the loop or wait on it unboundedly.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import datetime
import errno
import itertools
import json
import math
import operator
import os
import re
import stat
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from debtorch import inputs, knowledge, schema, stats
from debtorch.findings import Finding, finding
from debtorch.hostwaits import syncs_reported  # the one import of the sync counter
from debtorch.textsafe import printable
from debtorch.tune.jobprobe import JobProbe

WINDOW_STEPS = 10          # steps per window at the start; merged pairwise to keep at most MAX_WINDOWS
MAX_WINDOWS = 64
SIZE_EVERY = 8             # samples/s from the size of one batch in this many
CHUNK = 8                  # steps booked at once (and CUDA events read): less code runs each step
MIN_SYNC_STEPS = 5         # watch.W002 needs a sync in each of at least this many steps
LOADER_KNOBS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
PEER_WAIT_S = 2.0          # rank 0 waits at most this long at a verdict for the other ranks' summaries
PUBLISH_WAIT_S = 1.0       # a rank waits at most this long for its summary to reach the store
STORE_TIMEOUT_S = 10.0     # any one store operation of watch's own connection gives up after this
MAX_PEER_BYTES = 65536     # a rank's summary as sent; anything larger is not read as one
MAX_EVERY_S = 366 * 86400.0  # a duration for ``every`` (a year): a thread's wait must stay finite

_open: "weakref.WeakSet[Watch]" = weakref.WeakSet()     # iterations not yet reported, for the atexit verdict
_made = itertools.count()  # watches made in this process: the same number names the same loop on every rank


def _every(value: Any) -> Tuple[int, float]:
    """(steps, seconds) from ``every``: an int counts steps, "30s" or "5m" is a duration (at most a
    year); 0 is off."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, 0.0
    m = re.fullmatch(r"\s*(\d{1,12}(?:\.\d{1,12})?)\s*([sm])\s*", value) if isinstance(value, str) else None
    seconds = math.nan
    if m:
        seconds = float(m.group(1)) * (60 if m.group(2) == "m" else 1)
    if not 0 <= seconds <= MAX_EVERY_S:
        raise ValueError(f"watch: every must be a number of steps (0: off) or a duration like '60s' or '5m', "
                         f"at most a year (got {value!r:.80})")
    return 0, seconds


def count_samples(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of its first tensor or array (into dicts, tuples and
    lists), or the length of a list of plain items; None when it cannot tell.  Never raises: a
    batch's ``.shape`` may raise (a strided nested tensor's does), or be anything at all."""
    try:
        for _ in range(8):
            if _has_shape(batch):
                return _first_dim(batch)
            if isinstance(batch, dict):
                batch = next(iter(batch.values()), None)
            elif isinstance(batch, (list, tuple)) and batch:
                if not isinstance(batch[0], (list, tuple, dict)) and not _has_shape(batch[0]):
                    return len(batch)
                batch = batch[0]
            else:
                return None
    except Exception:  # a custom batch type's __len__, __iter__ or __getattr__ raising
        return None
    return None


def _has_shape(x: Any) -> bool:
    """Whether ``x`` is array-like: it has a ``shape`` attribute (reading it may raise)."""
    try:
        return getattr(x, "shape", None) is not None
    except Exception:  # a strided nested tensor: "NestedTensorImpl doesn't support sizes"
        return True


def _first_dim(x: Any) -> Optional[int]:
    """The first dimension of an array-like ``x``: ``shape[0]`` as a non-negative integer, else
    ``x.size(0)`` (what a strided nested tensor answers); None when neither says."""
    for read in (_shape0, _size0):
        try:
            n = operator.index(read(x))
        except Exception:  # no such dimension, not an integer, or a shape that raises
            continue
        return n if n >= 0 else None
    return None


def _shape0(x: Any) -> Any:
    return x.shape[0]


def _size0(x: Any) -> Any:
    return x.size(0)


def _pct(x: Optional[float]) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


@dataclass(frozen=True)
class DataWait:
    """The share of the step time spent waiting for the next batch, with its 95% interval over ``windows``."""

    share: Optional[float]
    low: Optional[float]
    high: Optional[float]
    windows: int

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "DataWait":
        return cls(doc["share"], doc["low"], doc["high"], doc["windows"])

    def to_json(self) -> Dict[str, Any]:
        return {"share": self.share, "low": self.low, "high": self.high, "windows": self.windows}


@dataclass(frozen=True)
class WatchSummary:
    """What watch measured of a pass so far (the fields of its JSON lines, docs/runtime.md), as a rank
    sends it to rank 0 too (then without ``pipeline`` and ``schema_version``)."""

    steps: int
    seconds: float
    steps_per_s: float
    samples_per_s: Optional[float]
    data_wait: DataWait
    syncs_per_step: Optional[float]          # None: not counted (no CUDA)
    steps_with_sync: int
    timing: str                              # "cuda events" or "host clock"
    loader: Optional[Dict[str, Any]]         # the DataLoader's knobs, as the loop had them
    pipeline: Optional[Dict[str, Any]] = None   # what tune --from-watch reads (the job probe's record)
    schema_version: Optional[int] = None
    left_early: Optional[bool] = None        # said at the end of a pass: the loop was left before its end

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "WatchSummary":
        """A summary as a rank sent it (checked against :data:`PEER_SCHEMA` first)."""
        return cls(steps=doc["steps"], seconds=doc["seconds"], steps_per_s=doc["steps_per_s"],
                   samples_per_s=doc["samples_per_s"], data_wait=DataWait.from_json(doc["data_wait"]),
                   syncs_per_step=doc["syncs_per_step"], steps_with_sync=doc["steps_with_sync"],
                   timing=doc["timing"], loader=doc.get("loader"), pipeline=doc.get("pipeline"),
                   schema_version=doc.get("schema_version"), left_early=doc.get("left_early"))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.schema_version is not None:
            out["schema_version"] = self.schema_version
        out.update(steps=self.steps, seconds=self.seconds, steps_per_s=self.steps_per_s,
                   samples_per_s=self.samples_per_s, data_wait=self.data_wait.to_json(),
                   syncs_per_step=self.syncs_per_step, steps_with_sync=self.steps_with_sync, timing=self.timing)
        if self.loader is not None:
            out["loader"] = self.loader
        if self.pipeline is not None:
            out["pipeline"] = self.pipeline
        if self.left_early is not None:
            out["left_early"] = self.left_early
        return out


@dataclass(frozen=True)
class RankVerdict:
    """One rank's summary and its findings, as rank 0 judged it."""

    rank: int
    summary: WatchSummary
    findings: List[Finding]

    def to_json(self) -> Dict[str, Any]:
        return {**self.summary.to_json(), "rank": self.rank, "findings": [f.to_json() for f in self.findings]}


@dataclass(frozen=True)
class Verdict:
    """A line watch writes: the summary, its findings (at the end of a pass, the verdict); under
    torch.distributed, rank 0's with every rank it heard and those it did not."""

    summary: WatchSummary
    findings: List[Finding]
    final: bool
    ranks: Optional[List[RankVerdict]] = None
    ranks_missing: Optional[List[int]] = None

    def to_json(self) -> Dict[str, Any]:
        out = {**self.summary.to_json(), "findings": [f.to_json() for f in self.findings]}
        if self.ranks is not None:
            out["ranks"] = [r.to_json() for r in self.ranks]
        if self.ranks_missing:
            out["ranks_missing"] = self.ranks_missing
        out["final"] = self.final
        return out


def judge(s: WatchSummary) -> List[Finding]:
    """The findings of one summary: watch.W001, watch.W002, else watch.I001 or watch.I002."""
    d, out, threshold = s.data_wait, [], float(knowledge.threshold("dataloader_time_fraction_warn"))
    ci = f"95%: {_pct(d.low)}-{_pct(d.high)} over {d.windows} windows"
    if d.low is not None and d.low > threshold:
        knobs = ", ".join(f"{k}={v}" for k, v in (s.loader or {}).items())
        out.append(finding("watch.W001", share=_pct(d.share), ci=ci, threshold=_pct(threshold),
                           now=knobs and f" (now {knobs})"))
    if s.syncs_per_step is not None and s.steps >= MIN_SYNC_STEPS and s.steps_with_sync == s.steps:
        out.append(finding("watch.W002", syncs=s.syncs_per_step))
    if out:
        return out
    if d.high is not None and d.high < threshold:
        syncs = "no host sync every step" if s.syncs_per_step is not None else "host syncs not counted (no CUDA)"
        return [finding("watch.I001", share=_pct(d.share), ci=ci, threshold=_pct(threshold), syncs=syncs)]
    if d.low is not None:
        why = f"data wait {_pct(d.share)} ({ci}) spans {_pct(threshold)}"
    else:
        why = f"{s.steps} steps make fewer than 2 windows"
    return [finding("watch.I002", why=why)]


def render(v: Verdict) -> str:
    """The line (and, at the verdict, the findings with their fixes)."""
    s, d = v.summary, v.summary.data_wait
    rate = f", {s.samples_per_s:.0f} samples/s" if s.samples_per_s is not None else ""
    wait = f"data wait {_pct(d.share)}" + (f" ({_pct(d.low)}-{_pct(d.high)})" if d.low is not None else "")
    syncs = "host syncs not counted" if s.syncs_per_step is None else f"{s.syncs_per_step:.1f} host syncs/step"
    head = "watch"
    if s.left_early:
        head += " (left early)"
    elif v.final:
        head += " (end)"
    lines = [f"{head}: {s.steps} steps, {s.steps_per_s:.2f} steps/s{rate}, {wait}, {syncs} [{s.timing}]"]
    if v.ranks:
        worst = max(v.ranks, key=_share)
        total = sum(r.summary.samples_per_s or 0.0 for r in v.ranks)
        lines.append(f"watch ranks: {_heard(len(v.ranks), v.ranks_missing or [])}, "
                     f"data wait {_pct(min(r.summary.data_wait.share or 0 for r in v.ranks))}"
                     f"-{_pct(worst.summary.data_wait.share)} (slowest: rank {worst.rank})"
                     + (f", {total:.0f} samples/s in all" if total else ""))
    if v.final:
        for f in v.findings:
            lines.append(f"{f.id} {f.message}" + (f"\n  fix: {f.fix}" if f.fix else ""))
    return "\n".join(lines)


def _heard(n: int, missing: List[int]) -> str:
    """"2", or "1 of 3 (ranks 1, 2 not heard within 2 s)": the ranks a verdict spans."""
    if not missing:
        return str(n)
    names = ", ".join(map(str, missing[:8])) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
    return f"{n} of {n + len(missing)} ({'rank' if len(missing) == 1 else 'ranks'} {names} not heard within " \
           f"{PEER_WAIT_S:g} s)"


class Watch:
    """``watch(iterable, every="60s", file=None, json=None, verdict=True, batch_size=None, timer=False)``:
    yields what ``iterable`` yields and measures each step.  Every ``every`` (steps, or a duration; 0:
    off) a line, and at the end of each pass the verdict (``verdict=False``: none), on stderr or
    appended to ``file``; JSON lines to ``json``; ``timer=True``: the lines on a thread of its own."""

    def __init__(self, iterable: Iterable, *, every: Any = "60s", file: Any = None, json: Any = None,
                 verdict: bool = True, batch_size: Optional[int] = None, timer: bool = False) -> None:
        if not hasattr(iterable, "__iter__"):
            raise TypeError(f"watch: {type(iterable).__name__} is not iterable")
        if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                       or batch_size < 1):
            raise ValueError(f"watch: batch_size must be a positive integer (got {batch_size!r})")
        self.iterable, self.verdict, self.fixed_size = iterable, bool(verdict), batch_size
        self.every_steps, self.every_s = _every(every)
        if timer and not self.every_s:
            raise ValueError("watch: timer=True needs every as a duration ('60s')")
        for name, dest in (("file", file), ("json", json)):
            if not (dest is None or hasattr(dest, "write") or isinstance(dest, (str, os.PathLike))):
                raise TypeError(f"watch: {name} must be a path or a text stream (got {type(dest).__name__})")
            if isinstance(dest, (str, os.PathLike)) and not os.path.isdir(os.path.dirname(os.path.abspath(dest))):
                raise ValueError(f"watch: {name}: no such directory for {os.fspath(dest)!r}")
        self.timer, self.file, self.json = bool(timer), file, json
        self.steps = self._seen = self._synced = self._syncs = self._syncs_closed = 0
        self._sized: Optional[tuple] = (0, 0)             # (samples, batches) of the batches sized; None: unknown
        self.busy = 0.0                                  # host seconds of the counted steps
        self._wins: list = []                            # (wait, step) seconds per closed window
        self._cur = [0.0, 0.0, 0]                        # the window being filled: wait, step, steps
        self._wsize = WINDOW_STEPS
        self._cuda: Any = None                           # torch.cuda once the loop runs there
        self._counting = False                           # host syncs counted (CUDA, set_sync_debug_mode)
        self._pending: collections.deque = collections.deque()   # [start event, fetched event or None]
        self._pool: list = []
        self._last_line = time.perf_counter()
        self._broken = False                             # measuring failed: the loop goes on unmeasured
        self._refused: set = set()                       # destinations refused (noted once): "file", "json"
        self._number, self._passes = next(_made), 0      # this watch, and its passes, on every rank alike
        self._peers: Optional[_Peers] = None             # the other ranks' summaries (a side channel)
        self._job = JobProbe()                           # what tune --from-watch needs (the record's "pipeline")

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:               # loader.sampler, loader.dataset, ...
        if name.startswith("_") or "iterable" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.iterable, name)

    # -- the loop --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        """The batches of ``iterable``, each step measured.  Only the iterable's own ``iter`` and
        ``next`` may raise here: every measurement is inside a guard that, on failure, says so once
        and lets the loop go on unmeasured (:meth:`_give_up`)."""
        it, stack, log, ended, stop = iter(self.iterable), contextlib.ExitStack(), [], False, threading.Event()
        self._reported, self._broken, n, t0 = False, False, 0, 0.0
        self._passes += 1
        self._job.workers(it)
        _open.add(self)
        if self._counting:                                # a later pass of a loop found on CUDA
            self._count_syncs(stack)
        if self.timer:
            threading.Thread(target=self._tick, args=(stop,), daemon=True, name="debtorch-watch").start()
        try:
            while True:
                if self._cuda is not None:
                    try:
                        self._mark()
                    except Exception as exc:  # CUDA broken by the loop's own work, say
                        self._give_up(exc)
                t0 = time.perf_counter()                  # the previous step ends, this one starts with its fetch
                try:
                    batch = next(it)
                except StopIteration:
                    ended = True
                    return
                if not self._broken:
                    try:
                        t1 = time.perf_counter()
                        if self._cuda is not None:
                            self._mark(fetched=True)
                        n += 1                            # the size of one batch in SIZE_EVERY: sizing costs
                        size = (self.fixed_size or count_samples(batch)) if n % SIZE_EVERY == 2 else -1
                        if n == 2:
                            self._job.batch(batch)
                        log.append((t0, t1, self._syncs, size))
                        if len(log) > CHUNK or n == 2:    # book-keeping in chunks: little code runs each step
                            self._account(log, stack)
                    except Exception as exc:  # whatever the batch or the device does: the loop goes on
                        self._give_up(exc)
                yield batch
        finally:  # nothing here may raise over the loop's own exception
            stop.set()
            with contextlib.suppress(Exception):
                getattr(it, "close", lambda: None)()     # a generator's cleanup; a DataLoader's workers go with `it`
            del it
            with contextlib.suppress(Exception):
                if log and not self._broken:              # the step in flight ends: at the last fetch, or now
                    if not ended and self._cuda is not None:
                        self._mark()
                    log.append((t0 if ended else time.perf_counter(), 0.0, self._syncs, -1))
                    self._account(log, stack)
            with contextlib.suppress(Exception):
                stack.close()                             # the sync counter off: the debug mode and filters put back
            self._finish(ended=ended)

    def _give_up(self, exc: Exception) -> None:
        """Measuring failed: one note, then this pass runs unmeasured and gives no verdict."""
        self._broken, self._cuda = True, None
        self._pending.clear()
        _note(f"watch: stopped measuring this pass ({type(exc).__name__}: {exc}); the loop goes on")

    def _account(self, log: list, stack: contextlib.ExitStack) -> None:
        """Close every step of ``log`` but the last, in flight: (fetch start, batch in hand, syncs so far,
        samples or -1) on the host clock; a step ends where the next one's fetch starts."""
        for (t0, t1, syncs, size), nxt in zip(log, log[1:]):
            self._seen += 1
            if self._seen == 1:                           # warm-up, not counted; is the loop on CUDA?
                torch = sys.modules.get("torch")
                cuda = getattr(torch, "cuda", None)
                if cuda is not None and cuda.is_initialized():
                    self._cuda = cuda
                    self._count_syncs(stack)
                continue
            self.steps += 1
            self.busy += nxt[0] - t0
            self._synced += nxt[2] > syncs
            self._syncs_closed = nxt[2]
            if size != -1 and self._sized is not None:
                self._sized = None if size is None else (self._sized[0] + size, self._sized[1] + 1)
            if self._cuda is None:
                self._add(t1 - t0, nxt[0] - t0)
            if (self.every_steps and self.steps % self.every_steps == 0) or (
                    self.every_s and not self.timer and nxt[0] - self._last_line >= self.every_s):
                self._emit(final=False)
        del log[:-1]
        if self._cuda is not None:
            self._drain()
        if self._seen > 1:
            self._job.tick(self.busy)

    def _count_syncs(self, stack: contextlib.ExitStack) -> None:
        with contextlib.suppress(Exception):
            stack.enter_context(syncs_reported(sys.modules["torch"], self._on_sync))
            self._counting = True

    def _on_sync(self) -> None:
        self._syncs += 1

    def _mark(self, fetched: bool = False) -> None:
        """On CUDA: an event on the current stream before a fetch (a new step) or after it."""
        ev = self._pool.pop() if self._pool else self._cuda.Event(enable_timing=True)
        ev.record()
        if fetched:
            if self._pending:                             # (none for the step CUDA was found in)
                self._pending[-1][1] = ev
        else:
            self._pending.append([ev, None])

    def _drain(self, wait: bool = False) -> None:
        """Read the steps whose events the GPU has passed: wait = start..fetched, step = start..next start."""
        q = self._pending
        if wait and q:
            q[-1][0].synchronize()                        # once, at the verdict
        while len(q) > 1 and q[1][0].query():
            start, fetched = q.popleft()
            if fetched is not None:
                self._add(start.elapsed_time(fetched) / 1e3, start.elapsed_time(q[0][0]) / 1e3)
                self._pool.append(fetched)
            self._pool.append(start)
        if wait:                                          # the pass is over: its end mark goes too
            self._pool += [e for pair in q for e in pair if e is not None]
            q.clear()

    def _add(self, wait: float, step: float) -> None:
        self._job.step(wait, step)
        c = self._cur
        c[0] += wait
        c[1] += step
        c[2] += 1
        if c[2] >= self._wsize:
            self._wins.append((c[0], c[1]))
            self._cur = [0.0, 0.0, 0]
            if len(self._wins) >= MAX_WINDOWS:           # keep the windows few: merge neighbours
                w = self._wins
                self._wins = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(w[::2], w[1::2])]
                self._wsize *= 2

    # -- the verdict -----------------------------------------------------------------------
    def _per_second(self, n: Optional[float]) -> Optional[float]:
        """``n`` over the counted steps' host time (None before any)."""
        return n / self.busy if self.busy > 0 and n is not None else None

    def summary(self, left_early: Optional[bool] = None) -> WatchSummary:
        """What has been measured so far (``left_early``: said at the end of a pass)."""
        wins = list(self._wins)
        if self._cur[2]:
            wins.append((self._cur[0], self._cur[1]))
        share, low, high = stats.ratio_of_sums([w for w, _ in wins], [s for _, s in wins])
        if low is not None:
            low = max(0.0, low)     # a share's interval ends where a share can
        if high is not None:
            high = min(1.0, high)
        samples = None
        if self._sized and self._sized[1]:
            samples = self.steps * self._sized[0] / self._sized[1]
        syncs = None
        if self._counting:
            syncs = self._syncs_closed / self.steps if self.steps else 0.0
        knobs = {k: getattr(self.iterable, k) for k in LOADER_KNOBS if hasattr(self.iterable, k)}
        return WatchSummary(
            schema_version=1, steps=self.steps, seconds=self.busy, steps_per_s=self._per_second(self.steps) or 0.0,
            samples_per_s=self._per_second(samples),
            data_wait=DataWait(share, low, high, len(wins)),
            syncs_per_step=syncs, steps_with_sync=self._synced,
            timing="cuda events" if self._cuda is not None else "host clock",
            loader={k: v for k, v in knobs.items() if isinstance(v, (int, bool, type(None)))},
            pipeline=self._job.record(self.iterable, self._cuda, self.busy), left_early=left_early)

    def _emit(self, final: bool, v: Optional[Verdict] = None) -> None:
        """Write the line (and the JSON record) on rank 0; a failure is a note on stderr, never the loop's."""
        self._last_line = time.perf_counter()
        try:
            if _rank()[0] != 0:
                return
            if v is None:
                s = self.summary()
                v = Verdict(s, judge(s), final)
            if self.verdict or not final:
                self._write("file", self.file, render(v))
            if self.json is not None:
                self._write("json", self.json, json.dumps(v.to_json(), sort_keys=True, default=str))
        except Exception as exc:  # a report must never stop the training, nor hide its own error
            _note(f"watch: no {'verdict' if final else 'line'} ({type(exc).__name__}: {exc})")

    def _write(self, name: str, dest: Any, text: str) -> None:
        """``text`` to the destination ``name`` (``file``, ``json``); one refused (not a regular file,
        a link) is said once, then left alone."""
        if name in self._refused:
            return
        try:
            _write(dest, text)
        except _Refused as exc:
            self._refused.add(name)
            _note(f"watch: {name}=...: {exc}; nothing more is written there")

    def _finish(self, ended: bool) -> None:
        """The verdict at the end of a pass (``ended``: the iterable ran out), or when the loop was left
        early (break, exception, exit).  Each rank judges itself; under torch.distributed the other
        ranks send their summaries to rank 0 through the store, never by a collective (the ranks
        may be anywhere in their own code: Join, a barrier, uneven all-reduces), and rank 0 waits
        at most :data:`PEER_WAIT_S` for them.  Never raises."""
        _open.discard(self)
        if self._reported or self._broken:
            return
        self._reported = True
        try:
            if self._cuda is not None:
                self._drain(wait=True)
            if not (self.verdict or self.json is not None):
                return
            s = self.summary(left_early=not ended)
            v = Verdict(s, judge(s), True)
            rank, world, dist = _rank()
            if world > 1:
                if self._peers is None:
                    self._peers = _Peers(dist, self._number)
                if rank != 0:
                    self._peers.publish(self._passes, rank, s)
                    return
                got, missing = self._peers.collect(self._passes, world)
                v = _merge(v, got, missing)
        except Exception as exc:  # CUDA broken by the loop's own error, say: a note, never a traceback
            _note(f"watch: no verdict ({type(exc).__name__}: {exc})")
            return
        self._emit(final=True, v=v)

    def _tick(self, stop: threading.Event) -> None:
        """The timer's thread: a line every ``every_s`` until the pass ends; never raises."""
        with contextlib.suppress(Exception):
            while not stop.wait(min(self.every_s, threading.TIMEOUT_MAX)):
                self._emit(final=False)


def _merge(v: Verdict, peers: Dict[int, WatchSummary], missing: List[int]) -> Verdict:
    """Rank 0's verdict ``v`` with the other ranks' summaries: the spread, and the findings of the
    rank whose data wait is the largest (judged here, from its figures)."""
    ranks = [RankVerdict(0, v.summary, v.findings)]
    ranks += [RankVerdict(r, peer, judge(peer)) for r, peer in sorted(peers.items())]
    worst = max(ranks, key=_share)
    findings = [dataclasses.replace(f, message=f"rank {worst.rank}: {f.message}") for f in worst.findings]
    return Verdict(v.summary, findings, v.final, ranks, missing)


def _share(rank: RankVerdict) -> float:
    return rank.summary.data_wait.share or 0.0


_OPT_NUMBER = schema.Value(("a finite number or null", lambda v: v is None or inputs.finite(v)))
_OPT_SHARE = schema.Value(("a share from 0 to 1 or null", lambda v: v is None or (inputs.finite(v) and 0 <= v <= 1)))
_COUNT = schema.integer(0, 2**62)
PEER_SCHEMA = schema.Table({
    "steps": _COUNT, "seconds": schema.number("a finite number >= 0", lambda v: v >= 0),
    "steps_per_s": schema.number("a finite number >= 0", lambda v: v >= 0), "samples_per_s": _OPT_NUMBER,
    "data_wait": schema.Table({"share": _OPT_SHARE, "low": _OPT_SHARE, "high": _OPT_SHARE, "windows": _COUNT},
                              ("share", "low", "high", "windows")),
    "syncs_per_step": _OPT_NUMBER, "steps_with_sync": _COUNT, "timing": schema.one_of("cuda events", "host clock"),
    "loader": schema.Table({k: schema.Value(("an integer, true, false or null",
                                             lambda v: v is None or isinstance(v, (int, bool)) and abs(v) < 2**31))
                            for k in LOADER_KNOBS}),
    "left_early": schema.BOOL, "*": schema.ANY},
    ("steps", "seconds", "steps_per_s", "samples_per_s", "data_wait", "syncs_per_step", "steps_with_sync", "timing",
     "left_early"))


def peer_summary(raw: Any) -> Optional[WatchSummary]:
    """A summary another rank sent (bytes of JSON), checked against :data:`PEER_SCHEMA` and reduced to
    the fields rank 0 reads; None when it is not one.  The store is open to whoever reaches it."""
    if not isinstance(raw, (bytes, bytearray)) or len(raw) > MAX_PEER_BYTES:
        return None
    try:
        value = inputs.parse_json(inputs.decode(bytes(raw), "summary"), "summary")
        schema.check(value, PEER_SCHEMA)
    except ValueError:  # InputError, schema.Invalid
        return None
    return WatchSummary.from_json({k: value[k] for k in PEER_SCHEMA.fields if k in value and k != "*"})


class _Peers:
    """The side channel of one watch: each rank's summary of pass P under the key ``NUMBER/P/RANK`` of
    the process group's store, on a connection of watch's own (``Store.clone``, each operation bounded
    by :data:`STORE_TIMEOUT_S`), so that the process group's own traffic never waits behind it.  Every
    store operation runs on a thread the caller waits for a bounded time: a store that hangs costs
    the loop at most that wait, once."""

    def __init__(self, dist: Any, number: int) -> None:
        self.dist, self.number = dist, number
        self.store: Any = None
        self.late: List[str] = []    # keys rank 0 gave up on: deleted at its next collection

    def _connect(self) -> Any:
        if self.store is None:
            # The default group's store (torch.distributed keeps it in distributed_c10d; no public
            # accessor as of PyTorch 2.13): set, check, get and delete_key are the store's own
            # requests, never collectives of the process group.
            c10d = self.dist.distributed_c10d
            clone = c10d._get_default_store().clone()     # a connection of its own
            clone.set_timeout(datetime.timedelta(seconds=STORE_TIMEOUT_S))
            self.store = self.dist.PrefixStore(f"debtorch.watch/{self.number}", clone)
        return self.store

    def publish(self, passes: int, rank: int, s: WatchSummary) -> None:
        """Send this rank's summary (without findings: rank 0 judges); wait for it at most
        :data:`PUBLISH_WAIT_S`."""
        value = json.dumps(s.to_json(), default=str)
        _bounded(self._send, PUBLISH_WAIT_S, f"{passes}/{rank}", value)

    def _send(self, key: str, value: str) -> None:
        self._connect().set(key, value)

    def collect(self, passes: int, world: int) -> Tuple[Dict[int, WatchSummary], List[int]]:
        """({rank: summary} of the other ranks heard within :data:`PEER_WAIT_S`, the ranks not heard)."""
        got: Dict[int, WatchSummary] = {}
        keys = {r: f"{passes}/{r}" for r in range(1, world)}
        _bounded(self._poll, PEER_WAIT_S + 0.5, keys, got, time.monotonic() + PEER_WAIT_S)
        heard = dict(got)                                # (the thread may still be adding to got)
        missing = [r for r in keys if r not in heard]
        self.late = [keys[r] for r in missing]
        return heard, missing

    def _poll(self, keys: Dict[int, str], got: Dict[int, Any], deadline: float) -> None:
        store = self._connect()
        for key in self.late:
            store.delete_key(key)
        pending = dict(keys)
        while pending:
            for r, key in list(pending.items()):
                if store.check([key]):                   # never a get that waits for a key
                    raw = store.get(key)
                    store.delete_key(key)
                    del pending[r]
                    summary = peer_summary(raw)
                    if summary is not None:
                        got[r] = summary
            if time.monotonic() >= deadline:
                return
            time.sleep(0.01)


def _bounded(work: Callable[..., None], seconds: float, *args: Any) -> None:
    """``work(*args)`` on a daemon thread, waited for at most ``seconds``; what it raises is noted."""
    thread = threading.Thread(target=_noting, args=(work, *args), daemon=True, name="debtorch-watch-peers")
    thread.start()
    thread.join(seconds)


def _noting(work: Callable[..., None], *args: Any) -> None:
    try:
        work(*args)
    except Exception as exc:  # the store gone or refusing: the verdict goes on without it
        _note(f"watch: the other ranks' summaries: {type(exc).__name__}: {exc}")


def _note(text: str) -> None:
    """One line on stderr (control characters escaped), if stderr takes it."""
    with contextlib.suppress(Exception):
        sys.stderr.write(printable(text) + "\n")


def _rank() -> tuple:
    """(rank, world size, torch.distributed) of a process group, or (0, 1, None)."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), dist
    return 0, 1, None


class _Refused(OSError):
    """A destination path that is not a regular file (a FIFO, a device, a link)."""


# Never through a link, never waiting on a FIFO nobody reads, never truncating.
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _write(dest: Any, text: str) -> None:
    """A line to stderr (None), a text stream, or appended to a regular file by path (never truncated);
    :class:`_Refused` for a path that is a link, a FIFO, a device or a folder."""
    if isinstance(dest, (str, os.PathLike)):
        path = os.fspath(dest)
        try:
            fd = os.open(path, _APPEND, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _Refused("is a symbolic link, not a regular file") from None
            if exc.errno in (errno.ENXIO, errno.EISDIR):   # a FIFO without a reader, a socket, a folder
                raise _Refused(f"is {inputs.kind(os.lstat(path).st_mode)}, not a regular file") from None
            raise
        with open(fd, "a", encoding="utf-8", errors="backslashreplace") as f:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise _Refused(f"is {inputs.kind(mode)}, not a regular file")
            f.write(text + "\n")
    else:
        (dest or sys.stderr).write(text + "\n")
        (dest or sys.stderr).flush()


@atexit.register
def _at_exit() -> None:
    """Loops left suspended (``next(it)`` by hand) report at exit, rank-locally."""
    for w in list(_open):
        w._finish(ended=False)


watch = Watch
