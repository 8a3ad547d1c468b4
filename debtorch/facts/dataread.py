"""The disk behind the training data, measured (``debtorch doctor --data DIR --measure-data``, docs/checks.md
"The data read check"): a sample of the folder's files read whole with a cold cache, first by one reader,
then by ``readers`` in parallel, each pass within its share of ``seconds``; sequential MB/s and files/s
for each, and what they cap a loader at (a file a sample, the folder's mean file size).  Every read goes
through the Host (:meth:`~debtorch.host.Host.read_cold`: read-only, never through a link, the file's
cached pages dropped first); nothing is written.

The figures go into the facts document as ``storage.data.read``; the doctor's check judges them against the
samples per second the loader needs (``--data-rate``).
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from dataclasses import asdict, dataclass
from typing import Callable, Optional

from debtorch.host import Host, Unavailable

SECONDS = 20.0               # the whole measurement, at most (plus one file's read per reader)
SAMPLE_FILES = 4000          # files read at most
MAX_SCANNED = 200_000        # names looked at while listing the folder, at most
MAX_DEPTH = 16
FILE_LIMIT = 16 * 1024 * 1024   # bytes read of one file, at most (a large shard: its first 16 MiB)
ONE_READER_SHARE = 0.4       # of the time: the single reader's pass (the parallel readers get the rest)
MIN_FILES = 8                # fewer files in the folder: nothing to measure

Progress = Callable[[float, str], None]     # (share of the time spent, what is being done)


@dataclass(frozen=True)
class ReadPass:
    """One pass over part of the sample: ``readers`` threads reading whole files, one after another each."""

    readers: int
    files: int
    bytes: int
    seconds: float          # wall time of the pass
    failed: int = 0         # files that could not be read

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def files_per_s(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "mb_per_s": self.mb_per_s, "files_per_s": self.files_per_s}


@dataclass(frozen=True)
class DataRead:
    """What ``--measure-data`` measured of a folder, and what that caps loading at."""

    path: str
    files_found: int        # regular files listed (at most MAX_SCANNED names looked at)
    mean_file_bytes: float  # of the files listed
    cold: bool              # every read dropped the file's cached pages first
    one: ReadPass
    many: ReadPass
    seconds: float          # what the whole measurement took
    data_rate: Optional[float] = None   # samples/s the loader needs (stated), one file a sample

    @property
    def best_mb_per_s(self) -> float:
        return max(self.one.mb_per_s, self.many.mb_per_s)

    @property
    def best_files_per_s(self) -> float:
        return max(self.one.files_per_s, self.many.files_per_s)

    @property
    def samples_per_s(self) -> float:
        """The most samples/s these reads feed a loader (one file a sample): files/s, or bytes/s over the mean
        file size, whichever is less."""
        by_bytes = self.best_mb_per_s * 1e6 / self.mean_file_bytes if self.mean_file_bytes > 0 else float("inf")
        return min(self.best_files_per_s, by_bytes)

    @property
    def need_mb_per_s(self) -> Optional[float]:
        return None if self.data_rate is None else self.data_rate * self.mean_file_bytes / 1e6

    def to_json(self) -> dict:
        return {"path": self.path, "files_found": self.files_found, "mean_file_bytes": self.mean_file_bytes,
                "cold": self.cold, "one": self.one.to_json(), "many": self.many.to_json(),
                "seconds": self.seconds, "data_rate": self.data_rate, "samples_per_s": self.samples_per_s,
                "need_mb_per_s": self.need_mb_per_s, "best_mb_per_s": self.best_mb_per_s,
                "best_files_per_s": self.best_files_per_s}


class NothingToRead(Exception):
    """The folder holds too few readable files; the message says why."""


def list_files(host: Host, root: str, limit: int = MAX_SCANNED) -> list:
    """(path, size) of the regular files under ``root`` (links never followed; at most ``limit`` names
    looked at, ``MAX_DEPTH`` folders deep), in a stable order."""
    out, todo, seen = [], [(root.rstrip("/") or "/", 0)], 0
    while todo and seen < limit:
        folder, depth = todo.pop()
        try:
            entries = host.scan(folder, limit - seen)
        except Unavailable:
            continue
        seen += len(entries)
        for e in sorted(entries, key=lambda x: x.name):
            path = f"{folder}/{e.name}" if folder != "/" else f"/{e.name}"
            if e.kind == "file" and e.size > 0:
                out.append((path, e.size))
            elif e.kind == "dir" and depth < MAX_DEPTH:
                todo.append((path, depth + 1))
    return out


def _pass(host: Host, files: list, readers: int, seconds: float, progress: Optional[Progress], start_share: float,
          share: float, label: str) -> tuple:
    """Read ``files`` with ``readers`` threads until they are done or ``seconds`` have passed: (pass, cold)."""
    lock = threading.Lock()
    queue = iter(files)
    done = {"files": 0, "bytes": 0, "failed": 0, "cold": True}
    start = time.perf_counter()
    deadline = start + seconds

    def next_file() -> Optional[str]:
        with lock:
            if time.perf_counter() >= deadline:
                return None
            item = next(queue, None)
        return None if item is None else item[0]

    def reader() -> None:
        while True:
            path = next_file()
            if path is None:
                return
            try:
                got = host.read_cold(path, FILE_LIMIT)
            except Unavailable:
                with lock:
                    done["failed"] += 1
                continue
            with lock:
                done["files"] += 1
                done["bytes"] += got.bytes
                done["cold"] = done["cold"] and got.dropped
            if progress is not None:
                spent = min(1.0, (time.perf_counter() - start) / seconds) if seconds > 0 else 1.0
                progress(start_share + share * spent, label)

    if readers == 1:
        reader()
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=readers, thread_name_prefix="debtorch-read") as pool:
            for f in [pool.submit(reader) for _ in range(readers)]:
                f.result()
    took = time.perf_counter() - start
    return ReadPass(readers, done["files"], done["bytes"], took, done["failed"]), done["cold"]


def measure(host: Host, root: str, readers: int, seconds: float = SECONDS, data_rate: Optional[float] = None,
            progress: Optional[Progress] = None, seed: int = 0) -> DataRead:
    """Measure the folder ``root`` (module docstring); raises :class:`NothingToRead` or
    :class:`~debtorch.host.Unavailable` (a machine that is not this one)."""
    started = time.perf_counter()
    if progress is not None:
        progress(0.0, f"listing {root}")
    files = list_files(host, root)
    if len(files) < MIN_FILES:
        raise NothingToRead(f"{len(files)} readable file(s) under {root}: nothing to measure "
                            f"(at least {MIN_FILES})")
    mean = sum(size for _, size in files) / len(files)
    sample = list(files)
    random.Random(seed).shuffle(sample)
    sample = sample[:SAMPLE_FILES]
    # Two halves: the parallel readers never read what the single reader just read (whatever cache
    # the disk itself keeps stays out of it).
    half = max(1, len(sample) // 2)
    budget = max(0.0, seconds - (time.perf_counter() - started))
    one, cold1 = _pass(host, sample[:half], 1, ONE_READER_SHARE * budget, progress, 0.0, ONE_READER_SHARE,
                       "1 reader")
    left = max(0.0, seconds - (time.perf_counter() - started))
    many, cold2 = _pass(host, sample[half:], readers, left, progress, ONE_READER_SHARE, 1 - ONE_READER_SHARE,
                        f"{readers} readers")
    if one.files == 0 and one.failed:
        raise NothingToRead(f"no file under {root} could be read ({one.failed} tried)")
    return DataRead(root, len(files), mean, cold1 and cold2, one, many, time.perf_counter() - started, data_rate)


def default_readers(cpus: int) -> int:
    """Parallel readers: as many as a loader would run workers, twice the CPUs, from 4 to 16."""
    return max(4, min(16, 2 * max(1, cpus)))
