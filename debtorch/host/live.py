"""This machine: :class:`LiveHost` reads its files, runs its commands (with a timeout, killing what
they started), opens NVML through pynvml, and measures reads from its disks."""

from __future__ import annotations

import concurrent.futures
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from debtorch import inputs
from debtorch.host.base import (
    NOT_PRESENT,
    READ_BLOCK,
    TIMED_OUT,
    ColdRead,
    CommandResult,
    Host,
    Unavailable,
    nvml_error_text,
    reason_for,
)
from debtorch.host.prestarted import claim
from debtorch.host.processes import kill_group, spawn


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
        proc: Union[subprocess.Popen, CommandResult, None] = None
        if not env:
            proc = claim(args)          # started early (debtorch.host.prestarted)
        if proc is None:
            proc = spawn(args, env)
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
            raise Unavailable(reason_for(exc)) from None
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
            raise Unavailable(reason_for(exc)) from None
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
            raise Unavailable(reason_for(exc)) from None
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


def _load_live_nvml() -> tuple[Any, Optional[str]]:
    try:
        import pynvml  # nvidia-ml-py; optional
    except ImportError:
        return None, "NVML binding not installed (nvidia-ml-py / python3-pynvml)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and friends
        return None, f"NVML did not initialise: {nvml_error_text(exc)}"
    return pynvml, None
