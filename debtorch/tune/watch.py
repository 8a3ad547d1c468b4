"""``cfg.watch(loader)``: data wait, host syncs and a verdict from the user's own loop (docs/runtime.md).

Per step, the wait for the next batch and the whole step: on CUDA from events recorded on the current
stream around each fetch and read steps later with ``Event.query()`` (the GPU's idle time, no sync
added), elsewhere the host's clock; host syncs per step with verify-train's counter.  torch is never
imported here: the training script's own is used (``sys.modules``).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import re
import sys
import threading
import time
import weakref
from typing import Any, Iterable, Optional

from debtorch import knowledge, stats
from debtorch.findings import finding
from debtorch.hostwaits import syncs_reported  # the one import of the sync counter
from debtorch.tune.jobprobe import JobProbe

WINDOW_STEPS = 10          # steps per window at the start; merged pairwise to keep at most MAX_WINDOWS
MAX_WINDOWS = 64
SIZE_EVERY = 8             # samples/s from the size of one batch in this many
CHUNK = 8                  # steps booked at once (and CUDA events read): less code runs each step
MIN_SYNC_STEPS = 5         # watch.W002 needs a sync in each of at least this many steps
LOADER_KNOBS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")

_open: "weakref.WeakSet[Watch]" = weakref.WeakSet()     # iterations not yet reported, for the atexit verdict


def _every(value: Any) -> tuple:
    """(steps, seconds) from ``every``: an int counts steps, "30s" or "5m" is a duration; 0 is off."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, 0.0
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([sm])\s*", value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"watch: every must be a number of steps (0: off) or a duration like '60s' or '5m' "
                         f"(got {value!r})")
    return 0, float(m.group(1)) * (60 if m.group(2) == "m" else 1)


def count_samples(batch: Any) -> Optional[int]:
    """Samples in a batch: the first dimension of its first tensor or array (into dicts, tuples and
    lists), or the length of a list of plain items; None when it cannot tell."""
    for _ in range(8):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else None
        if isinstance(batch, dict):
            batch = next(iter(batch.values()), None)
        elif isinstance(batch, (list, tuple)) and batch:
            if not isinstance(batch[0], (list, tuple, dict)) and getattr(batch[0], "shape", None) is None:
                return len(batch)
            batch = batch[0]
        else:
            return None
    return None


def _pct(x: Optional[float]) -> str:
    return "?" if x is None else f"{100 * x:.0f}%"


def judge(s: dict) -> list:
    """The findings of one summary (``Watch.summary``): watch.W001, watch.W002, else watch.I001 or watch.I002."""
    d, out, threshold = s["data_wait"], [], float(knowledge.threshold("dataloader_time_fraction_warn"))
    ci = f"95%: {_pct(d['low'])}-{_pct(d['high'])} over {d['windows']} windows"
    if d["low"] is not None and d["low"] > threshold:
        knobs = ", ".join(f"{k}={v}" for k, v in (s.get("loader") or {}).items())
        out.append(finding("watch.W001", share=_pct(d["share"]), ci=ci, threshold=_pct(threshold),
                           now=knobs and f" (now {knobs})"))
    if s["syncs_per_step"] is not None and s["steps"] >= MIN_SYNC_STEPS and s["steps_with_sync"] == s["steps"]:
        out.append(finding("watch.W002", syncs=s["syncs_per_step"]))
    if out:
        return out
    if d["high"] is not None and d["high"] < threshold:
        syncs = "no host sync every step" if s["syncs_per_step"] is not None else "host syncs not counted (no CUDA)"
        return [finding("watch.I001", share=_pct(d["share"]), ci=ci, threshold=_pct(threshold), syncs=syncs)]
    why = (f"data wait {_pct(d['share'])} ({ci}) spans {_pct(threshold)}" if d["low"] is not None
           else f"{s['steps']} steps make fewer than 2 windows")
    return [finding("watch.I002", why=why)]


def render(s: dict, final: bool) -> str:
    """The line (and, at the verdict, the findings with their fixes)."""
    d = s["data_wait"]
    rate = f", {s['samples_per_s']:.0f} samples/s" if s["samples_per_s"] is not None else ""
    wait = f"data wait {_pct(d['share'])}" + (f" ({_pct(d['low'])}-{_pct(d['high'])})" if d["low"] is not None else "")
    syncs = "host syncs not counted" if s["syncs_per_step"] is None else f"{s['syncs_per_step']:.1f} host syncs/step"
    head = "watch" + (" (left early)" if s.get("left_early") else " (end)" if final else "")
    lines = [f"{head}: {s['steps']} steps, {s['steps_per_s']:.2f} steps/s{rate}, {wait}, {syncs} [{s['timing']}]"]
    ranks = s.get("ranks")
    if ranks:
        worst = max(ranks, key=lambda r: r["data_wait"]["share"] or 0.0)
        total = sum(r["samples_per_s"] or 0.0 for r in ranks)
        lines.append(f"watch ranks: {len(ranks)}, data wait {_pct(min(r['data_wait']['share'] or 0 for r in ranks))}"
                     f"-{_pct(worst['data_wait']['share'])} (slowest: rank {worst['rank']})"
                     + (f", {total:.0f} samples/s in all" if total else ""))
    if final:
        for f in s["findings"]:
            lines.append(f"{f['id']} {f['message']}" + (f"\n  fix: {f['fix']}" if f["fix"] else ""))
    return "\n".join(lines)


class Watch:
    """``watch(iterable, every="60s", file=None, json=None, verdict=True, batch_size=None, timer=False)``:
    yields what ``iterable`` yields and measures each step.  Every ``every`` (steps, or a duration; 0:
    off) a line, and at the end of each pass the verdict (``verdict=False``: none), on stderr or
    appended to ``file``; JSON lines to ``json``; ``timer=True``: the lines on a thread of its own."""

    def __init__(self, iterable: Iterable, *, every: Any = "60s", file: Any = None, json: Any = None,
                 verdict: bool = True, batch_size: Optional[int] = None, timer: bool = False):
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
        self._job = JobProbe()                           # what tune --from-watch needs (the record's "pipeline")

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:               # loader.sampler, loader.dataset, ...
        if name.startswith("_") or "iterable" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.iterable, name)

    # -- the loop --------------------------------------------------------------------------
    def __iter__(self):
        it, stack, log, ended, stop = iter(self.iterable), contextlib.ExitStack(), [], False, threading.Event()
        self._reported, n = False, 0
        self._job.workers(it)
        _open.add(self)
        if self._counting:                                # a later pass of a loop found on CUDA
            self._count_syncs(stack)
        if self.timer:
            threading.Thread(target=self._tick, args=(stop,), daemon=True, name="debtorch-watch").start()
        try:
            while True:
                if self._cuda is not None:
                    self._mark()
                t0 = time.perf_counter()                  # the previous step ends, this one starts with its fetch
                try:
                    batch = next(it)
                except StopIteration:
                    ended = True
                    return
                t1 = time.perf_counter()
                if self._cuda is not None:
                    self._mark(fetched=True)
                n += 1                                    # the size of one batch in SIZE_EVERY: sizing costs
                size = (self.fixed_size or count_samples(batch)) if n % SIZE_EVERY == 2 else -1
                if n == 2:
                    self._job.batch(batch)
                log.append((t0, t1, self._syncs, size))
                if len(log) > CHUNK or n == 2:            # book-keeping in chunks: little code runs each step
                    self._account(log, stack)
                yield batch
        finally:  # nothing here may raise over the loop's own exception
            stop.set()
            with contextlib.suppress(Exception):
                getattr(it, "close", lambda: None)()     # a generator's cleanup; a DataLoader's workers go with `it`
            del it
            with contextlib.suppress(Exception):
                if log:                                   # the step in flight ends: at the last fetch, or now
                    if not ended and self._cuda is not None:
                        self._mark()
                    log.append((t0 if ended else time.perf_counter(), 0.0, self._syncs, -1))
                    self._account(log, stack)
            with contextlib.suppress(Exception):
                stack.close()                             # the sync counter off: the debug mode and filters put back
            self._finish(gather=ended)

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
    def summary(self) -> dict:
        """What has been measured so far, as the JSON lines hold it (without ``findings``)."""
        wins = list(self._wins) + ([tuple(self._cur[:2])] if self._cur[2] else [])
        share, low, high = stats.ratio_of_sums([w for w, _ in wins], [s for _, s in wins])
        rate = (lambda n: n / self.busy if self.busy > 0 and n is not None else None)
        samples = self.steps * self._sized[0] / self._sized[1] if self._sized and self._sized[1] else None
        loader = {k: getattr(self.iterable, k) for k in LOADER_KNOBS if hasattr(self.iterable, k)}
        return {"schema_version": 1, "steps": self.steps, "seconds": self.busy, "steps_per_s": rate(self.steps) or 0.0,
                "samples_per_s": rate(samples),
                "data_wait": {"share": share, "low": None if low is None else max(0.0, low),
                              "high": None if high is None else min(1.0, high), "windows": len(wins)},
                "syncs_per_step": (self._syncs_closed / self.steps if self.steps else 0.0) if self._counting else None,
                "steps_with_sync": self._synced, "timing": "cuda events" if self._cuda is not None else "host clock",
                "loader": {k: v for k, v in loader.items() if isinstance(v, (int, bool, type(None)))},
                "pipeline": self._job.record(self.iterable, self._cuda, self.busy)}

    def _emit(self, final: bool, s: Optional[dict] = None) -> None:
        """Write the line (and the JSON record) on rank 0; a failure is a note on stderr, never the loop's."""
        self._last_line = time.perf_counter()
        try:
            if _rank()[0] != 0:
                return
            s = s or self.summary()
            s.setdefault("findings", [f.to_json() for f in judge(s)])
            s["final"] = final
            if self.verdict or not final:
                _write(self.file, render(s, final))
            if self.json is not None:
                _write(self.json, json.dumps(s, sort_keys=True, default=str))
        except Exception as exc:  # a report must never stop the training, nor hide its own error
            with contextlib.suppress(Exception):
                sys.stderr.write(f"watch: no {'verdict' if final else 'line'} ({type(exc).__name__}: {exc})\n")

    def _finish(self, gather: bool) -> None:
        """The verdict at the end of an iteration (``gather``: it ran out, so every rank is here too), or
        when the loop was left early (break, exception, exit): this rank alone.  Never raises."""
        _open.discard(self)
        if self._reported:
            return
        self._reported = True
        try:
            if self._cuda is not None:
                self._drain(wait=True)
            if not (self.verdict or self.json is not None):
                return
            s = self.summary()
            s["left_early"] = not gather
            s["findings"] = [f.to_json() for f in judge(s)]
            rank, world, dist = _rank()
            if gather and world > 1:
                got: list = [None] * world
                dist.all_gather_object(got, {**s, "rank": rank})      # one collective per verdict
                s["ranks"] = got
                worst = max(got, key=lambda r: r["data_wait"]["share"] or 0.0)
                s["findings"] = [{**f, "message": f"rank {worst['rank']}: {f['message']}"} for f in worst["findings"]]
        except Exception as exc:  # CUDA broken by the loop's own error, say: a note, never a traceback
            with contextlib.suppress(Exception):
                sys.stderr.write(f"watch: no verdict ({type(exc).__name__}: {exc})\n")
            return
        self._emit(final=True, s=s)

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(self.every_s):
            self._emit(final=False)


def _rank() -> tuple:
    """(rank, world size, torch.distributed) of a process group, or (0, 1, None)."""
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), dist
    return 0, 1, None


def _write(dest: Any, text: str) -> None:
    """A line to stderr (None), a text stream, or appended to a file by path (never truncated)."""
    if isinstance(dest, (str, os.PathLike)):
        with open(os.open(os.fspath(dest), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644), "w") as f:
            f.write(text + "\n")
    else:
        (dest or sys.stderr).write(text + "\n")
        (dest or sys.stderr).flush()


@atexit.register
def _at_exit() -> None:
    """Loops left suspended (``next(it)`` by hand) report at exit, rank-locally."""
    for w in list(_open):
        w._finish(gather=False)


watch = Watch
