"""The one door to the machine.

Every read of /proc, /sys, /etc and /var/lib/dpkg, every subprocess, every NVML
call and every system call that describes the machine (rlimits, affinity,
statvfs) goes through a :class:`Host`.  Nothing else in debtorch opens
``/proc/...`` or calls :mod:`subprocess` directly.

Three hosts exist:

* :class:`LiveHost` is this machine.
* :class:`ReplayHost` is a machine replayed from a folder of real files (a fake
  root) plus ``_host.json`` (recorded command outputs, rlimits, environment,
  NVML).  Like python-distro with ``root_dir``, a replayed host never falls back
  to the live machine: what was not recorded is unknown, with the reason
  ``not recorded``.
* :class:`RecordingHost` is the live machine, copying everything it reads into a
  folder that :class:`ReplayHost` can load (``debtorch facts --record DIR``).

A probe that cannot read something gets :class:`Unavailable` with a short
reason ("not present", "permission denied", "timed out", ...); facts turn that
into ``None`` plus the reason, never a traceback.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import errno
import json
import os
import posixpath
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from debtorch import inputs, outputs, schema

# Reasons, as short phrases a user can read.
NOT_PRESENT = "not present"
PERMISSION_DENIED = "permission denied"
TIMED_OUT = "timed out"
NOT_RECORDED = "not recorded on the replayed host"
COMMAND_NOT_FOUND = "command not found"

HOST_FILE = "_host.json"
COMMANDS_DIR = "_commands"
NVML_FILE = "_nvml.json"
MAX_READ = 8 * 1024 * 1024


# The environment variables that change how PyTorch trains: the only ones debtorch
# reads, reports or records (facts.env, RecordingHost); no other variable leaves the machine.
ENV_ALLOWED = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "CUDA_PATH", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "CUDNN_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "GOMP_CPU_AFFINITY",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NVML_BASED_CUDA_CHECK", "TORCH_CUDA_ARCH_LIST",
    "TORCH_HOME", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "VIRTUAL_ENV", "CONDA_PREFIX", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL",
    "WSL_DISTRO_NAME", "KUBERNETES_SERVICE_HOST",
    # torchrun's rendezvous (debtorch fleet reads it; RANK and the like differ per node by design).
    "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_USE_AGENT_STORE",
    # Slurm's allocation and rendezvous.  Not SLURM_* wholesale: SLURM_JOB_USER, SLURM_JOB_ACCOUNT,
    # SLURM_SUBMIT_DIR and SLURM_JOB_NAME name people, projects and home folders.
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE", "SLURM_CPU_BIND", "SLURM_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE",
    "SLURM_GPUS_PER_TASK", "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_CPU",
    "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURMD_NODENAME", "SLURM_JOB_PARTITION",
)
ENV_ALLOWED_PREFIXES = ("NCCL_", "TORCH_", "TORCHINDUCTOR_", "GLOO_", "DEBTORCH_")
FLEET_SECRET = "DEBTORCH_FLEET_SECRET"   # debtorch fleet's shared secret: never read as a fact


def is_allowed(name: str) -> bool:
    return name != FLEET_SECRET and (name in ENV_ALLOWED or name.startswith(ENV_ALLOWED_PREFIXES))


def allowed_environ(environ, keep_venv: bool = True) -> dict:
    """The allowlisted subset of ``environ``, sorted by name."""
    return {k: environ[k] for k in sorted(environ) if is_allowed(k) and (keep_venv or k != "VIRTUAL_ENV")}



class Unavailable(Exception):
    """A fact could not be read.  ``reason`` says why, in a few words."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _link_problem(path: Path) -> str:
    """What the symbolic link ``path`` is, for a message: a loop, or a link."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"is {inputs.os_reason(exc)}"
    return "is a symbolic link"


def _reason_for(exc: OSError) -> str:
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
            raise Unavailable(_reason_for(exc)) from None
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
            raise Unavailable(_reason_for(exc)) from None

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
            raise Unavailable(_reason_for(exc)) from None

    def scan(self, p: str, limit: int = 100_000) -> list[DirEntry]:
        """The first ``limit`` names in folder ``p`` with their kind and size (links not followed)."""
        out: list[DirEntry] = []
        try:
            with os.scandir(self.path(p)) as it:
                for entry in it:
                    if len(out) >= limit:
                        break
                    out.append(_dir_entry(entry))
        except OSError as exc:
            raise Unavailable(_reason_for(exc)) from None
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


# ---------------------------------------------------------------------------
# The live machine


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started with start_new_session=True, and everything it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


def _spawn(argv: tuple, env: Optional[dict] = None) -> Union[subprocess.Popen, CommandResult]:
    """Start a command of the live machine, or say why it could not start (a CommandResult)."""
    full_env = dict(os.environ)
    full_env.update({"LC_ALL": "C", "LANG": "C"})
    if env:
        full_env.update(env)
    try:
        # A new session, so that a timeout kills grandchildren too: a hung
        # nvidia-smi must never hang debtorch.  From "/", so that no command
        # depends on where debtorch was started (Host.program resolves relative paths).
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=full_env, cwd="/", start_new_session=True)
    except OSError as exc:
        reason = COMMAND_NOT_FOUND if isinstance(exc, FileNotFoundError) else _reason_for(exc)
        return CommandResult(argv, None, "", "", reason)


# Commands started before debtorch imported the rest of itself (prestart), waiting for
# LiveHost.run to collect them; any left unclaimed at exit are killed.
_PRESTARTED: dict[tuple, subprocess.Popen] = {}


def prestart(argv: Sequence[str]) -> None:
    """Start a command of the live machine now; the first ``LiveHost().run`` of the same argv
    (without ``env``) collects it.  ``debtorch doctor`` starts the target interpreter's probe
    this way, so that it runs while debtorch imports the rest."""
    argv = tuple(str(a) for a in argv)
    proc = _spawn(argv)
    if not isinstance(proc, CommandResult) and argv not in _PRESTARTED:
        if not _PRESTARTED:
            atexit.register(_kill_unclaimed)
        _PRESTARTED[argv] = proc


def _kill_unclaimed() -> None:
    while _PRESTARTED:
        kill_group(_PRESTARTED.popitem()[1])


class LiveHost(Host):
    """This machine."""

    live = True

    def __init__(self) -> None:
        self.root = Path("/")
        self.label = "live"
        self._nvml_lock = threading.Lock()
        self._nvml: Optional[tuple[Any, Optional[str]]] = None

    def path(self, p: str) -> Path:
        return Path(p)

    def program(self, p: str) -> str:
        # Commands run from "/" (see run); a relative program (--python .venv/bin/python)
        # means the caller's directory, as it would in their shell.
        return os.path.abspath(p) if "/" in p and not p.startswith("/") else p

    def run(self, argv: Sequence[str], timeout: float = 5.0, key: Optional[str] = None,
            env: Optional[dict] = None) -> CommandResult:
        if args := tuple(str(a) for a in argv):
            args = (self.program(args[0]),) + args[1:]
        start = time.monotonic()
        proc = (_PRESTARTED.pop(args, None) if not env else None) or _spawn(args, env)
        if isinstance(proc, CommandResult):
            return proc
        returncode, error = None, None
        try:
            out, err = proc.communicate(timeout=timeout)
            returncode = proc.returncode
        except subprocess.TimeoutExpired:
            kill_group(proc)
            error = f"{TIMED_OUT} after {timeout:g} s"
            try:
                out, err = proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
        return CommandResult(args, returncode, out.decode("utf-8", errors="replace"),
                             err.decode("utf-8", errors="replace"), error, time.monotonic() - start)

    def nvml(self) -> tuple[Any, Optional[str]]:
        with self._nvml_lock:
            if self._nvml is None:
                self._nvml = _load_live_nvml()
            return self._nvml

    @property
    def environ(self) -> dict:
        return dict(os.environ)

    def rlimit(self, name: str) -> tuple[int, int]:
        import resource

        const = getattr(resource, f"RLIMIT_{name}", None)
        if const is None:
            raise Unavailable(NOT_PRESENT)
        soft, hard = resource.getrlimit(const)
        inf = resource.RLIM_INFINITY
        return (-1 if soft == inf else soft, -1 if hard == inf else hard)

    def affinity(self) -> list[int]:
        try:
            return sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError) as exc:
            raise Unavailable(str(exc)) from None

    def statvfs(self, p: str) -> dict:
        try:
            st = os.statvfs(p)
        except OSError as exc:
            raise Unavailable(_reason_for(exc)) from None
        return {
            "total": st.f_blocks * st.f_frsize,
            "free": st.f_bavail * st.f_frsize,
            "used": (st.f_blocks - st.f_bfree) * st.f_frsize,
        }

    def read_cold(self, p: str, limit: int, block: int = READ_BLOCK) -> ColdRead:
        # Never writes: the file is opened read-only, never through a link, never a FIFO or device.
        # posix_fadvise(DONTNEED) drops its clean cached pages (on tmpfs the pages are the file: nothing
        # drops, and the read shows memory's speed, as it should).
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        view = _read_buffer(block)
        total = 0
        start = time.perf_counter()
        try:
            fd = os.open(p, flags)
        except OSError as exc:
            raise Unavailable(_reason_for(exc)) from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise Unavailable(f"is {inputs.kind(mode)}, not a regular file")
            dropped = _drop_cache(fd)
            while total < limit:
                n = os.readv(fd, [view[:min(block, limit - total)]])
                if n <= 0:
                    break
                total += n
        except OSError as exc:
            raise Unavailable(_reason_for(exc)) from None
        finally:
            os.close(fd)
        return ColdRead(total, time.perf_counter() - start, dropped)

    def resolve(self, name: str, timeout: float = 5.0) -> list[str]:
        # getaddrinfo has no timeout of its own and a dead DNS server hangs it: ask in a
        # thread and stop waiting (the thread ends when the resolver gives up).
        import socket  # defer: only a name to resolve needs it (doctor stays fast)

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            infos = pool.submit(socket.getaddrinfo, name, None, 0, socket.SOCK_STREAM).result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise Unavailable(f"{TIMED_OUT} after {timeout:g} s") from None
        except (socket.gaierror, UnicodeError, OSError) as exc:
            raise Unavailable(f"does not resolve ({getattr(exc, 'strerror', None) or exc})") from None
        finally:
            pool.shutdown(wait=False)
        addrs = [str(info[4][0]) for info in infos]
        return sorted(dict.fromkeys(addrs), key=lambda a: (":" in a, addrs.index(a)))

    @property
    def machine(self) -> str:
        return os.uname().machine  # what platform.machine() answers on Linux, without importing it

    def _own_python(self) -> str:
        return sys.executable

    @property
    def user(self) -> Optional[str]:
        try:
            import pwd

            return pwd.getpwuid(os.getuid()).pw_name
        except (KeyError, ImportError):
            return None

    def close(self) -> None:
        with self._nvml_lock:
            if self._nvml and self._nvml[0] is not None:
                try:
                    self._nvml[0].nvmlShutdown()
                except Exception:  # noqa: BLE001 - shutting down must not fail a report
                    pass


_BUFFERS = threading.local()   # one read buffer per reading thread (a fresh 1 MiB a file costs what a read does)


def _read_buffer(size: int) -> memoryview:
    buf = getattr(_BUFFERS, "buf", None)
    if buf is None or len(buf) < size:
        buf = _BUFFERS.buf = memoryview(bytearray(size))
    return buf


def _drop_cache(fd: int) -> bool:
    """Drop the cached pages of an open file (posix_fadvise DONTNEED); whether the kernel took it."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        return False
    return True


def _dir_entry(entry: os.DirEntry) -> DirEntry:
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


def _load_live_nvml() -> tuple[Any, Optional[str]]:
    try:
        import pynvml  # nvidia-ml-py; optional
    except ImportError:
        return None, "NVML binding not installed (nvidia-ml-py / python3-pynvml)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and friends
        return None, f"NVML did not initialise: {_nvml_error_text(exc)}"
    return pynvml, None


def _nvml_error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


# ---------------------------------------------------------------------------
# A machine replayed from a folder


class ReplayHost(Host):
    """A machine replayed from ``folder``: a fake root plus ``_host.json``.

    ``_host.json`` holds what is not a file: ``machine``, ``python`` (the
    interpreter that ran debtorch), ``environ``, ``rlimits``, ``affinity``,
    ``statvfs``, ``resolve`` (name -> addresses, or ``{"error": reason}``) and
    ``commands`` (keyed by :func:`command_key`; a command's
    stdout may live in ``_commands/<file>`` and be named by ``stdout_file``).
    ``nvml`` is either ``{"file": "_nvml.json"}`` (replayed by
    :mod:`debtorch.nvmlfake`) or ``{"error": "..."}``.
    """

    live = False

    def __init__(self, folder, label: Optional[str] = None) -> None:
        try:
            self.root = Path(folder).resolve()
        except (OSError, RuntimeError):  # a loop of symbolic links (RuntimeError before Python 3.13)
            raise Unavailable(f"{folder}: a loop of symbolic links") from None
        if not self.root.is_dir():
            raise Unavailable(f"{folder}: not a folder")
        self.label = label or f"replay:{self.root.name}"
        meta_path = self.root / HOST_FILE
        self.meta: dict = {}
        if meta_path.exists():
            try:
                self.meta = inputs.parse_json(inputs.read_text(str(meta_path), what="a recording"), str(meta_path))
            except inputs.InputError as exc:
                raise Unavailable(str(exc)) from None
            if bad := _meta_problem(self.meta):
                raise Unavailable(f"{meta_path}: {bad}")
        self._nvml: Optional[tuple[Any, Optional[str]]] = None

    def _inside(self, *parts: str) -> Optional[Path]:
        """``root/parts`` when it is a plain name that stays inside the recording, links
        followed; None otherwise (an absolute or ``..`` name must never read the live machine)."""
        name = parts[-1]
        if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
            return None
        path = self.root.joinpath(*parts)
        real = os.path.realpath(path)
        return path if real.startswith(str(self.root) + os.sep) else None

    # Paths are resolved inside the fake root, symlinks included, so that an
    # absolute link in a fixture never escapes to the live machine.
    def path(self, p: str) -> Path:
        parts = [x for x in _norm(p).split("/") if x]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            if part == ".":
                continue
            candidate = self.root.joinpath(*resolved, part)
            if candidate.is_symlink():
                hops += 1
                if hops > 40:
                    raise Unavailable("too many levels of symbolic links")
                target = os.readlink(candidate)
                if target.startswith("/"):
                    resolved = []
                parts = [x for x in target.split("/") if x] + parts
                continue
            resolved.append(part)
        return self.root.joinpath(*resolved)

    def readlink(self, p: str) -> str:
        parent, name = posixpath.split(_norm(p))
        real = self.path(parent) / name
        try:
            return os.readlink(real)
        except OSError as exc:
            raise Unavailable(_reason_for(exc)) from None

    def run(self, argv: Sequence[str], timeout: float = 5.0, key: Optional[str] = None,
            env: Optional[dict] = None) -> CommandResult:
        args = tuple(str(a) for a in argv)
        rec = (self.meta.get("commands") or {}).get(key or command_key(args))
        if rec is None:
            # Never run here: a named probe (key=...) not recorded is unknown; a plain command
            # missing from the recording was not on the recorded machine.
            reason = NOT_RECORDED if key else (self.meta.get("missing_command_reason") or COMMAND_NOT_FOUND)
            return CommandResult(args, None, "", "", reason)
        stdout = rec.get("stdout", "")
        if rec.get("stdout_file"):
            path = self._inside(COMMANDS_DIR, rec["stdout_file"])
            if path is None:
                return CommandResult(args, None, "", "", "recorded output is not a file inside the recording")
            try:
                stdout = inputs.read_text(str(path), what="recorded output")
            except inputs.InputError as exc:
                return CommandResult(args, None, "", "", f"recorded output unreadable: {exc}")
        return CommandResult(args, rec.get("returncode"), stdout, rec.get("stderr", ""), rec.get("error"))

    def nvml(self) -> tuple[Any, Optional[str]]:
        if self._nvml is None:
            spec = self.meta.get("nvml")
            if not spec:
                self._nvml = (None, "NVML binding not installed (nvidia-ml-py / python3-pynvml)")
            elif spec.get("error"):
                self._nvml = (None, spec["error"])
            else:
                from debtorch import nvmlfake  # defer: only a recording with NVML needs the fake (inspect, 30 ms)

                try:
                    path = self._inside(spec.get("file", NVML_FILE))
                    if path is None:
                        raise ValueError("the NVML recording is not a file inside the recording")
                    fake = nvmlfake.load(path)
                    fake.nvmlInit()
                    self._nvml = (fake, None)
                except Exception as exc:  # a fake raising like the real binding
                    self._nvml = (None, f"NVML did not initialise: {_nvml_error_text(exc)}")
        return self._nvml

    @property
    def environ(self) -> dict:
        return dict(self.meta.get("environ") or {})

    def _recorded(self, field: str, key: Optional[str] = None) -> Any:
        """``_host.json``'s ``field`` (its entry ``key``); Unavailable when it was not recorded."""
        val = self.meta.get(field) if key is None else (self.meta.get(field) or {}).get(key)
        if val is None:
            raise Unavailable(NOT_RECORDED)
        return val

    def rlimit(self, name: str) -> tuple[int, int]:
        soft, hard = self._recorded("rlimits", name)
        return int(soft), int(hard)

    def affinity(self) -> list[int]:
        return [int(x) for x in self._recorded("affinity")]

    def statvfs(self, p: str) -> dict:
        return dict(self._recorded("statvfs", _norm(p)))

    def resolve(self, name: str, timeout: float = 5.0) -> list[str]:
        val = self._recorded("resolve", name)
        if isinstance(val, dict):
            raise Unavailable(str(val.get("error") or "does not resolve"))
        return [str(a) for a in val]

    @property
    def machine(self) -> str:
        return self.meta.get("machine", "x86_64")

    def _own_python(self) -> str:
        return self.meta.get("python", "/usr/bin/python3")

    @property
    def user(self) -> Optional[str]:
        return self.meta.get("user")


# ---------------------------------------------------------------------------
# Recording the live machine into a folder that ReplayHost loads


class RecordingHost(LiveHost):
    """The live machine, writing what it reads into ``folder`` (``debtorch facts --record DIR``): only what
    debtorch reads is copied, the environment reduced to the allowlist (:func:`allowed_environ`)."""

    def __init__(self, folder, trim: Optional[dict] = None) -> None:
        super().__init__()
        self.final = Path(folder)
        # A new or empty folder only: a recording must not overwrite a user's files,
        # nor mix with an older recording that replay would then believe.
        try:
            if self.final.is_symlink():  # (exists() is False for a loop, and rename() cannot replace a link)
                raise Unavailable(f"{folder}: {_link_problem(self.final)}; record into a new or empty folder")
            if self.final.exists() and not self.final.is_dir():
                raise Unavailable(f"{folder}: not a folder")
            if self.final.is_dir() and any(self.final.iterdir()):
                raise Unavailable(f"{folder}: not empty (record into a new or empty folder)")
            # Everything goes into a hidden folder beside it, renamed into place by save():
            # an interrupted recording never leaves a folder that replays as a broken machine.
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self.out = Path(outputs.temporary_folder(f".{self.final.name}.recording-", dir=str(self.final.parent)))
        except OSError as exc:
            raise Unavailable(f"{folder}: {_reason_for(exc)}") from None
        self.label = "live (recording)"
        self._lock = threading.Lock()
        self._open = True
        self.meta: dict = {"commands": {}, "statvfs": {}, "rlimits": {}}
        self._trim = trim or {}

    def discard(self) -> None:
        """Remove what was recorded, unless save() moved it into place.  Nothing is written after:
        a thread still reading (a signal cut short the wait for it) must not recreate the folder."""
        with self._lock:
            self._open = False
            outputs.remove_folder(str(self.out))

    def _store(self, dest: Path, text: str) -> None:
        """Write a recorded file: only inside the recording, never through a link."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not (os.path.realpath(dest.parent) + os.sep).startswith(os.path.realpath(self.out) + os.sep):
            return  # a recorded link leads out of the recording: never write there
        if os.path.lexists(dest):
            if os.path.islink(dest) or not os.path.isfile(dest):
                return
            os.unlink(dest)
        outputs.new_file(str(dest), text)

    def __enter__(self) -> "RecordingHost":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self.discard()

    def _dest(self, p: str) -> Path:
        return self.out / _norm(p).lstrip("/")

    def _copy_links(self, p: str) -> None:
        """Recreate the symlinks along ``p`` inside the recording."""
        parts = [x for x in _norm(p).split("/") if x]
        cur = "/"
        for part in parts:
            cur = posixpath.join(cur, part)
            if os.path.islink(cur):
                dest = self._dest(cur)
                if not os.path.lexists(dest):
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(os.readlink(cur), dest)
                target = os.readlink(cur)
                real = posixpath.normpath(posixpath.join(posixpath.dirname(cur), target)) if not target.startswith("/") else target
                rest = "/".join(parts[parts.index(part) + 1 :])
                self._copy_links(posixpath.join(real, rest) if rest else real)
                return

    def _keep(self, p: str, write: Callable[[Path], None]) -> None:
        """Recreate the links along ``p`` in the recording, then ``write`` its copy (its place in the
        recording), unless discarded.  A plain lock: a signal's exception cannot leave it held."""
        with self._lock:
            if self._open:
                self._copy_links(p)
                write(self._dest(os.path.realpath(p)))

    def read_text(self, p: str, max_bytes: int = MAX_READ) -> str:
        text = super().read_text(p, max_bytes)
        trim = self._trim.get(_norm(p))
        self._keep(p, lambda dest: self._store(dest, trim(text) if trim else text))
        return text

    def listdir(self, p: str) -> list[str]:
        names = super().listdir(p)
        self._keep(p, lambda base: self._stand_ins(p, base, names))
        return names

    def _stand_ins(self, p: str, base: Path, names: list[str]) -> None:
        base.mkdir(parents=True, exist_ok=True)
        for name in names:
            full = posixpath.join(p, name)
            if os.path.islink(full):
                if not os.path.lexists(base / name):
                    os.symlink(os.readlink(full), base / name)
                    if os.path.isdir(os.path.realpath(full)):
                        self._dest(os.path.realpath(full)).mkdir(parents=True, exist_ok=True)
            else:
                _stand_in(base / name, os.path.isdir(full))

    def readlink(self, p: str) -> str:
        target = super().readlink(p)
        folder, name = posixpath.split(p)

        def link(dest: Path) -> None:
            dest.mkdir(parents=True, exist_ok=True)
            if not os.path.lexists(dest / name):
                os.symlink(target, dest / name)

        self._keep(folder, link)
        return target

    def exists(self, p: str) -> bool:
        if found := super().exists(p):
            self._keep(p, lambda dest: _stand_in(dest, os.path.isdir(p)))
        return found

    def is_dir(self, p: str) -> bool:
        if found := super().is_dir(p):
            self._keep(p, lambda dest: _stand_in(dest, True))
        return found

    def run(self, argv: Sequence[str], timeout: float = 5.0, key: Optional[str] = None,
            env: Optional[dict] = None) -> CommandResult:
        res = super().run(argv, timeout=timeout, key=key, env=env)
        self._note("commands", key or command_key(res.argv), res.to_json())
        return res

    def _note(self, field: str, key: str, value: Any) -> None:
        """Record ``value`` as ``_host.json``'s ``field[key]``."""
        with self._lock:
            self.meta.setdefault(field, {})[key] = value

    def rlimit(self, name: str) -> tuple[int, int]:
        val = super().rlimit(name)
        self._note("rlimits", name, list(val))
        return val

    def affinity(self) -> list[int]:
        val = super().affinity()
        self.meta["affinity"] = val
        return val

    def statvfs(self, p: str) -> dict:
        val = super().statvfs(p)
        self._note("statvfs", _norm(p), val)
        return val

    def resolve(self, name: str, timeout: float = 5.0) -> list[str]:
        try:
            val = super().resolve(name, timeout)
        except Unavailable as exc:
            self._note("resolve", name, {"error": exc.reason})
            raise
        self._note("resolve", name, val)
        return val

    def save(self, rewrite: Optional[Callable[[str], str]] = None) -> Path:
        """Write ``_host.json`` (and large command outputs) into the folder, then move it into place.

        ``rewrite`` (``facts --record --redact``: the redactor) is applied to every text of the
        recording before it is moved: file contents, file and folder names, link targets,
        command outputs and every string (and key) of ``_host.json`` and the NVML recording."""
        same = rewrite or (lambda text: text)
        # Our own files first: no recorded path may take their names (a machine with a /_host.json).
        for name in (HOST_FILE, NVML_FILE, COMMANDS_DIR):
            if os.path.lexists(self.out / name):
                _remove(self.out / name)
        meta = dict(self.meta)
        meta["machine"] = self.machine
        meta["python"] = self._own_python()
        meta["user"] = self.user
        meta["environ"] = allowed_environ(os.environ, keep_venv=True)
        if rewrite:
            _rewrite_tree(self.out, rewrite)
        commands = {}
        cmd_dir = self.out / COMMANDS_DIR
        for i, (name, rec) in enumerate(sorted(meta["commands"].items())):
            rec = dict(rec)
            if len(rec.get("stdout") or "") > 512:
                cmd_dir.mkdir(exist_ok=True)
                fname = f"{i:02d}-{_slug(same(name))}.out"
                outputs.new_file(str(cmd_dir / fname), same(rec.pop("stdout")))
                rec["stdout_file"] = fname
            commands[name] = rec
        meta["commands"] = commands
        nv = self._nvml
        if nv is not None:
            if nv[0] is None:
                meta["nvml"] = {"error": nv[1]}
            else:
                from debtorch import nvmlfake  # defer: as in ReplayHost.nvml

                dump = _rewrite_json(nvmlfake.dump(nv[0]), same)
                outputs.new_file(str(self.out / NVML_FILE), json.dumps(dump, indent=1, sort_keys=True))
                meta["nvml"] = {"file": NVML_FILE}
        meta = _rewrite_json(meta, same)
        outputs.new_file(str(self.out / HOST_FILE), json.dumps(meta, indent=1, sort_keys=True) + "\n")
        # Into place at once: rename(2) replaces an empty folder, and nothing else.
        try:
            os.rename(self.out, self.final)
        except OSError as exc:
            raise Unavailable(f"{self.final}: {_reason_for(exc)} (the recording is in {self.out})") from None
        return self.final / HOST_FILE


def _stand_in(dest: Path, folder: bool) -> None:
    """A folder, or an empty file: existence is all that was asked, not a copy."""
    if folder:
        dest.mkdir(parents=True, exist_ok=True)
    elif not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.touch()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _rewrite_json(obj: Any, rewrite: Callable[[str], str]) -> Any:
    """Every string of a JSON value, keys included, through ``rewrite``."""
    if isinstance(obj, dict):
        return {rewrite(k) if isinstance(k, str) else k: _rewrite_json(v, rewrite) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rewrite_json(v, rewrite) for v in obj]
    return rewrite(obj) if isinstance(obj, str) else obj


def _rewrite_tree(root: Path, rewrite: Callable[[str], str]) -> None:
    """Every text file, link target and name under ``root`` through ``rewrite`` (deepest first,
    so that a folder is renamed after what it holds).  Nothing outside ``root`` is touched."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames + dirnames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                target = os.readlink(path)
                if rewrite(target) != target:
                    os.unlink(path)
                    os.symlink(rewrite(target), path)
            elif os.path.isfile(path):
                with open(path, "rb") as fh:
                    text = fh.read().decode("utf-8", errors="replace")
                if rewrite(text) != text:
                    os.unlink(path)
                    outputs.new_file(path, rewrite(text))
            new = rewrite(name)
            if new != name and "/" not in new and not os.path.lexists(os.path.join(dirpath, new)):
                os.rename(path, os.path.join(dirpath, new))


_STR, _INT = schema.text(), schema.integer()
_META = {   # a recording's _host.json (open: a newer recording's fields are allowed)
    "machine": _STR, "python": _STR, "user": _STR, "missing_command_reason": _STR, "environ": {"*": _STR},
    "rlimits": {"*": schema.Value(("[soft, hard]", lambda v: isinstance(v, list) and len(v) == 2
                                   and all(schema.is_int(x) for x in v)))},
    "affinity": [_INT], "statvfs": {"*": {"*": schema.number()}}, "nvml": {"*": schema.ANY},
    "commands": {"*": {"stdout": _STR, "stderr": _STR, "stdout_file": _STR, "error": _STR, "returncode": _INT}},
}


def _meta_problem(meta: Any) -> Optional[str]:
    """What is wrong with a recording's _host.json, in one line, or None."""
    try:
        schema.check(meta, _META, open=True)
    except schema.Invalid as exc:
        return str(exc)
    return None


def _norm(p: str) -> str:
    """An absolute, normalised path ('//x/./y' -> '/x/y')."""
    return posixpath.normpath("/" + str(p).lstrip("/"))


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "-" for c in text.split(" -c ")[0])
    return "-".join(x for x in keep.split("-") if x)[:60] or "command"
