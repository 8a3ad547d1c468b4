"""What every host is: :class:`Host`, the interface every probe uses, the values it answers
(:class:`CommandResult`, :class:`DirEntry`, :class:`ColdRead`) and :class:`Unavailable`, a fact that
could not be read, with its reason in a few words."""

from __future__ import annotations

import concurrent.futures
import errno
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from debtorch import inputs

# Reasons, as short phrases a user can read.
NOT_PRESENT = "not present"
PERMISSION_DENIED = "permission denied"
TIMED_OUT = "timed out"
NOT_RECORDED = "not recorded on the replayed host"
COMMAND_NOT_FOUND = "command not found"
MAX_READ = 8 * 1024 * 1024


class Unavailable(Exception):
    """A fact could not be read.  ``reason`` says why, in a few words."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def reason_for(exc: OSError) -> str:
    """Why a file could not be read, in a few words."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return NOT_PRESENT
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PERMISSION_DENIED
    return exc.strerror or type(exc).__name__


PYTHON_TRACEBACK = "Traceback (most recent call last):"


def meaningful_line(text: str, limit: int = 200) -> str:
    """The line of a program's error output that says what went wrong: after a Python traceback, its
    last line (the exception); else a "Fatal Python error" line; else the first non-blank line (a
    pyenv shim's "pyenv: python2: command not found", /bin/sh's "python9: not found"), never a
    trailing fragment of a note.  "" when there is none."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return ""
    if any(line.startswith(PYTHON_TRACEBACK) for line in lines):
        return lines[-1][:limit]
    fatal = next((line for line in lines if line.startswith("Fatal Python error")), None)
    return (fatal or lines[0])[:limit]


@dataclass(frozen=True)
class CommandResult:
    """What a command did.  ``error`` is None when it ran, whatever its exit status."""

    argv: tuple
    returncode: Optional[int]
    stdout: str
    stderr: str
    error: Optional[str] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    @property
    def reason(self) -> str:
        """Why the command gave nothing usable, for an 'unknown' entry."""
        if self.error:
            return self.error
        if self.returncode != 0:
            said = meaningful_line(self.stderr or self.stdout, 160)
            detail = f": {said}" if said else ""
            return f"exit status {self.returncode}{detail}"
        return ""

    def to_json(self) -> dict:
        return {
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "error": self.error,
        }


@dataclass(frozen=True)
class DirEntry:
    """One name in a folder, as :meth:`Host.scan` sees it (links are never followed)."""

    name: str
    kind: str      # "file" (regular), "dir", "link" or "other"
    size: int      # bytes of a regular file; 0 otherwise


@dataclass(frozen=True)
class ColdRead:
    """One whole-file read from the disk (:meth:`Host.read_cold`): what it read and how long it took."""

    bytes: int
    seconds: float     # from the open to the last read (the cache dropped in between)
    dropped: bool      # the file's cached pages were dropped first (posix_fadvise DONTNEED)


READ_BLOCK = 1024 * 1024


def command_key(argv: Sequence[str]) -> str:
    """The name a command is recorded under: its words joined by spaces."""
    return " ".join(str(a) for a in argv)


class Host:
    """Base class: the interface every probe uses."""

    root: Path
    label: str
    live: bool = False

    # -- files -----------------------------------------------------------
    def path(self, p: str) -> Path:
        """The real path on this machine that stands for absolute path ``p``."""
        raise NotImplementedError

    def read_text(self, p: str, max_bytes: int = MAX_READ) -> str:
        """The first ``max_bytes`` of a regular file (through the one door: a FIFO or a device
        planted in a recording is refused at once, never waited on)."""
        try:
            data = inputs.read_bytes(self.path(p), max_bytes)
        except inputs.NotRegular as exc:
            raise Unavailable(f"is {exc.kind}, not a regular file") from None
        except OSError as exc:
            raise Unavailable(reason_for(exc)) from None
        return data[:max_bytes].decode("utf-8", errors="replace")

    def try_read(self, p: str, max_bytes: int = MAX_READ) -> Optional[str]:
        try:
            return self.read_text(p, max_bytes)
        except Unavailable:
            return None

    def exists(self, p: str) -> bool:
        try:
            return self.path(p).exists()
        except (OSError, Unavailable):
            return False

    def is_dir(self, p: str) -> bool:
        try:
            return self.path(p).is_dir()
        except (OSError, Unavailable):
            return False

    def listdir(self, p: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(p)))
        except OSError as exc:
            raise Unavailable(reason_for(exc)) from None

    def try_listdir(self, p: str) -> list[str]:
        """The names in folder ``p``; [] when it cannot be read."""
        try:
            return self.listdir(p)
        except Unavailable:
            return []

    def readlink(self, p: str) -> str:
        try:
            return os.readlink(self.path(p))
        except OSError as exc:
            raise Unavailable(reason_for(exc)) from None

    def scan(self, p: str, limit: int = 100_000) -> list[DirEntry]:
        """The first ``limit`` names in folder ``p`` with their kind and size (links not followed)."""
        out: list[DirEntry] = []
        try:
            with os.scandir(self.path(p)) as it:
                for entry in it:
                    if len(out) >= limit:
                        break
                    out.append(dir_entry(entry))
        except OSError as exc:
            raise Unavailable(reason_for(exc)) from None
        return out

    def read_cold(self, p: str, limit: int, block: int = READ_BLOCK) -> ColdRead:
        """Read at most ``limit`` bytes of the regular file ``p`` from its disk, not from the page cache,
        and time it (``debtorch doctor --measure-data``).  Only this machine's disks are measured."""
        raise Unavailable(f"{self.label}: only this machine's disks are measured")

    def realpath(self, p: str) -> str:
        """``p`` with symbolic links resolved, as a path on the described machine."""
        real = os.path.realpath(self.path(p))
        rel = os.path.relpath(real, self.root)
        return "/" if rel == "." else "/" + rel

    # -- commands --------------------------------------------------------
    def program(self, p: str) -> str:
        """The program ``p`` names, as this machine would run it (a relative path made absolute)."""
        return p

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 5.0,
        key: Optional[str] = None,
        env: Optional[dict] = None,
    ) -> CommandResult:
        raise NotImplementedError

    def run_all(self, calls: Iterable[dict]) -> list[CommandResult]:
        """Run several commands concurrently; each call is ``run``'s keyword arguments."""
        calls = list(calls)
        if not calls:
            return []
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(calls))) as pool:
            futures = [pool.submit(self.run, **c) for c in calls]
            return [f.result() for f in futures]

    # -- the rest of the machine ----------------------------------------
    def nvml(self) -> tuple[Any, Optional[str]]:
        """An initialised NVML binding (pynvml's API) or ``(None, reason)``."""
        raise NotImplementedError

    @property
    def environ(self) -> dict:
        raise NotImplementedError

    def rlimit(self, name: str) -> tuple[int, int]:
        """(soft, hard) for ``RLIMIT_<name>``; -1 means unlimited."""
        raise NotImplementedError

    def affinity(self) -> list[int]:
        raise NotImplementedError

    def statvfs(self, p: str) -> dict:
        """total, free (for unprivileged users) and used bytes of the filesystem at ``p``."""
        raise NotImplementedError

    def resolve(self, name: str, timeout: float = 5.0) -> list[str]:
        """The addresses ``name`` resolves to (IPv4 first), as the resolver answers here;
        :class:`Unavailable` with the resolver's reason when it does not."""
        raise NotImplementedError

    @property
    def machine(self) -> str:
        raise NotImplementedError

    @property
    def user(self) -> Optional[str]:
        """The user debtorch runs as (only so that --redact can hide it)."""
        raise NotImplementedError

    @property
    def default_python(self) -> str:
        """The interpreter inspected when none is named: the active venv's, else ours."""
        venv = self.environ.get("VIRTUAL_ENV")
        return posixpath.join(venv, "bin", "python") if venv else self._own_python()

    def _own_python(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


def dir_entry(entry: os.DirEntry) -> DirEntry:
    """One name of :meth:`Host.scan`, its kind and size read without following a link."""
    try:
        if entry.is_symlink():
            return DirEntry(entry.name, "link", 0)
        if entry.is_dir(follow_symlinks=False):
            return DirEntry(entry.name, "dir", 0)
        if entry.is_file(follow_symlinks=False):
            return DirEntry(entry.name, "file", entry.stat(follow_symlinks=False).st_size)
    except OSError:
        pass
    return DirEntry(entry.name, "other", 0)


def nvml_error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def norm_path(p: str) -> str:
    """An absolute, normalised path ('//x/./y' -> '/x/y')."""
    return posixpath.normpath("/" + str(p).lstrip("/"))
