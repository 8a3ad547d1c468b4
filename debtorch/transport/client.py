"""Running code in the target interpreter, from debtorch's own process (torch-free; docs/engine.md).

A *worker* is a subprocess of the target interpreter running one of debtorch's torch-side modules,
imported through a temporary folder that holds only ``debtorch -> <this package>`` (never the
working folder: docs/security.md).  Besides :class:`debtorch.host.Host`, this module (with
:mod:`debtorch.transport.launch`, for a launcher such as torchrun) is the one place that starts processes, under
Host's rules: a new session, a deadline on every wait, the process group killed on a timeout or
Ctrl-C, failures as one-line errors.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Callable, Optional

from debtorch import outputs
from debtorch.budget import Budget, Where, stopped
from debtorch.host import Host, meaningful_line
from debtorch.host import kill_group as host_kill_group
from debtorch.transport.server import PROTOCOL_FD_ENV

PACKAGE_DIR = Path(__file__).resolve().parent.parent
STDERR_LINES = 200
START_TIMEOUT = 180.0  # importing torch on a cold cache takes a while


# Failures about what the user gave (an interpreter, a workload, a device, settings): every command
# exits 2 for these, 1 for a run that failed (docs/cli.md).
USER_INPUT_KINDS = frozenset({"no_python", "no_torch", "broken_torch", "workload", "device", "bad_request",
                              "settings", "too_small"})   # too_small: a --budget that cannot pay for the first trials


class WorkerError(Exception):
    """A request that failed, or a worker that could not run: a stable ``kind`` (docs/engine.md), and
    ``str()`` one line."""

    def __init__(self, kind: str, message: str, detail: Optional[dict] = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.detail = detail or {}

    @property
    def user_input(self) -> bool:
        """The failure is about what the user gave (see USER_INPUT_KINDS), not the run."""
        return self.kind in USER_INPUT_KINDS

    @property
    def finding(self) -> Optional[str]:
        """The doctor's finding id this failure points at (e.g. memory.E001), if any."""
        return self.detail.get("finding")

    @property
    def suggestion(self) -> Optional[dict]:
        return self.detail.get("suggestion")


class WorkerTimeout(WorkerError):
    pass


def bounded(budget: Budget, where: Where, call: Callable[[float], Any], longest: float) -> Any:
    """``call(timeout)``, its timeout ``longest`` seconds or what is left of ``budget``: a timeout the
    budget caused is a WorkerError of kind ``budget`` that says where it stopped."""
    cut = budget.binding(longest)
    try:
        return call(budget.cap(longest))
    except WorkerError as exc:
        if exc.kind == "timeout" and cut:
            raise WorkerError("budget", stopped(budget, where)) from None
        raise


def worker_python(python_option: Optional[str], host: Host) -> str:
    """The interpreter that trains: ``--python`` if given, else the venv's, else ours; WorkerError
    (``no_python``) when it does not exist."""
    path = host.program(python_option or host.default_python)
    if not host.exists(path):
        raise WorkerError("no_python", f"{path}: no such Python interpreter (--python names one)")
    return path


# A Unix socket's path holds at most 107 bytes (sun_path), and the processes we start make some under
# their TMPDIR: Python's multiprocessing at TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, through which
# torch's DataLoader workers pass each batch's shared-memory descriptor.  Past the limit the worker cannot
# send a batch (the error goes to its stderr) and the loop waits for it for ever.  Our folders
# (PREFIX-XXXXXXXX/tmp, then those 31 bytes) go to /tmp when the temporary directory's own path leaves too
# little room (a pytest or Slurm job's TMPDIR can).
SOCKET_PATH_MAX = 107
SOCKET_TAIL = len("/pymp-12345678/listener-12345678")


def short_tmp_base(prefix: str) -> Optional[str]:
    """Where to make a temporary folder ``PREFIX-XXXXXXXX`` whose ``tmp`` a process's TMPDIR becomes: the
    temporary directory, or /tmp when that leaves too little room for a socket's path (None: the default)."""
    import tempfile  # defer: only a training run needs it

    base = tempfile.gettempdir()
    room = SOCKET_PATH_MAX - SOCKET_TAIL - len(f"/{prefix}12345678/tmp")
    if len(base) <= room or not os.access("/tmp", os.W_OK | os.X_OK):
        return None
    return "/tmp"


def private_tmp(env: dict, folder: str) -> dict:
    """``env`` with a temporary directory of its own inside ``folder`` (a registered temporary folder),
    so that what killed training processes leave there goes with it; torch.compile's cache stays
    where torch would put it (torchinductor_<user> in the temporary directory), kept between runs."""
    import getpass  # defer: only a training run needs the user name
    import tempfile  # defer: as above

    env = dict(env)
    if "TORCHINDUCTOR_CACHE_DIR" not in env:
        with contextlib.suppress(KeyError, OSError):  # no user name (a container without one): torch's own choice
            user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
            tmp_before = env.get("TMPDIR") or tempfile.gettempdir()  # the processes' own, not ours
            env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp_before, "torchinductor_" + user)
    tmp = os.path.join(folder, "tmp")
    os.mkdir(tmp, 0o700)
    env["TMPDIR"] = tmp
    return env


class Shim:
    """A temporary directory holding only ``debtorch -> <our package>``."""

    def __init__(self) -> None:
        # Registered: removed at exit however the run ends (debtorch.outputs).
        self.path = outputs.temporary_folder("debtorch-worker-", dir=short_tmp_base("debtorch-worker-"))
        os.symlink(PACKAGE_DIR, os.path.join(self.path, "debtorch"))

    def env(self, base: dict) -> dict:
        env = dict(base)
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = self.path + (os.pathsep + old if old else "")
        return env

    def boot(self, module: str) -> str:
        """``python -c`` code that runs ``module``'s ``main()``.  -c puts the working folder first on
        sys.path, where a ``statistics.py`` would replace Python's own: the shim takes its place."""
        return (f"import sys; sys.path[:] = [{self.path!r}] + [p for p in sys.path if p]; "
                f"from {module} import main; sys.exit(main())")

    def script(self, module: str) -> str:
        """A script file that runs ``module``'s ``main()``, for launchers that take a script path
        (Python puts a script's own folder, the shim, first on sys.path, and not the working folder)."""
        path = os.path.join(self.path, "debtorch_" + module.rsplit(".", 1)[-1] + ".py")
        with open(path, "w") as fh:
            fh.write(f"import sys\nfrom {module} import main\nsys.exit(main())\n")
        return path

    def remove(self) -> None:
        outputs.remove_folder(self.path)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started in its own session and everything in its group; reap it."""
    host_kill_group(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


class StderrTail(threading.Thread):
    """Keeps the last lines a process wrote to stderr (the workload's prints among them); ``stream`` is
    the process's pipe (None, a process started without one: nothing to keep)."""

    def __init__(self, stream: Optional[IO[bytes]], sink: Optional[Callable[[str], None]] = None) -> None:
        super().__init__(name="debtorch-stderr", daemon=True)
        self.stream = stream
        self.lines: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.sink = sink

    def run(self) -> None:
        if self.stream is None:
            return
        with contextlib.suppress(OSError, ValueError):  # the stream closed under us: nothing more to keep
            for raw in iter(self.stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                self.lines.append(line)
                if self.sink is not None:
                    with contextlib.suppress(Exception):  # a display hook must not kill the reader
                        self.sink(line)

    def last(self) -> str:
        return next((line.strip()[:200] for line in reversed(self.lines) if line.strip()), "")

    def meaningful(self) -> str:
        """The line that says why a process that never spoke the protocol stopped (a pyenv shim's
        first line, a traceback's exception): :func:`debtorch.host.meaningful_line`."""
        return meaningful_line("\n".join(self.lines))


class Worker:
    """A torch-side module of debtorch (``module``) in the target interpreter, as a context manager:
    ``with Worker(python, "debtorch.fleet.torchside") as w: w.request("caps")``.  Every request has a
    deadline (``timeout`` unless the call names one); on a timeout, an exception in the caller
    (Ctrl-C included) or :meth:`close`, the worker's whole process group is killed."""

    # What the worker was doing, by request, for "the worker exited with status 3 while exiting".
    DOING = {"exit": "exiting"}

    def __init__(self, python: str, module: str, env: Optional[dict] = None, timeout: float = 600.0,
                 cwd: Optional[str] = None, on_stderr: Optional[Callable[[str], None]] = None,
                 start_timeout: float = START_TIMEOUT):
        self.python = python
        self.module = module        # the torch-side module: its main() speaks the worker protocol
        self.env = dict(os.environ if env is None else env)
        self.timeout = timeout
        self.cwd = cwd
        self.on_stderr = on_stderr
        self.start_timeout = start_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.hello: Optional[dict] = None
        self._shim: Optional[Shim] = None
        self._rfd: Optional[int] = None
        self._buf = b""
        self._next_id = 0
        self._stderr: Optional[StderrTail] = None
        self._exit_code: Optional[int] = None

    # -- life cycle ------------------------------------------------------
    def __enter__(self) -> "Worker":
        self.start()
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if exc_type is None:
            self.close()
        else:
            self.kill()

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    @property
    def stderr_tail(self) -> list:
        return list(self._stderr.lines) if self._stderr else []

    def start(self) -> dict:
        """Start the worker and wait for its hello (torch imported)."""
        if self.proc is None:
            self.spawn()
        try:
            msg = self._read(time.monotonic() + self.start_timeout, "starting")
        except WorkerError as exc:
            self.kill()
            if exc.kind == "died" and self._exit_code is not None and self._exit_code >= 0:
                # It exited before a word of the protocol: not a Python that runs our worker
                # (--python /bin/true, a Python 2): what the user gave, not a failed run.
                raise WorkerError("no_python", f"{self.python} did not start debtorch's worker ("
                                  f"{exc.message.removeprefix('the worker ')}): is it a Python 3 interpreter "
                                  "(--python)?") from None
            raise
        except BaseException:
            self.kill()
            raise
        if msg.get("event") == "fatal":
            self.kill()
            kind = msg.get("kind", "start")
            if kind == "no_torch":
                raise WorkerError(kind, f"{self.python} has no torch: pip install torch in that venv")
            raise WorkerError(kind, msg.get("message", "the worker failed to start"))
        if msg.get("event") != "hello":
            self.kill()
            raise WorkerError("start", f"{self.python}: unexpected first message from the worker")
        self.hello = msg
        return msg

    def spawn(self) -> None:
        """Start the worker's process without waiting for it: it imports torch (seconds) while the
        caller does something else; :meth:`start` then waits for its hello."""
        if not os.path.exists(self.python):
            raise WorkerError("no_python", f"{self.python}: no such Python interpreter (--python names one)")
        self._shim = Shim()
        rfd, wfd = os.pipe()
        env = private_tmp(self._shim.env(self.env), self._shim.path)
        env[PROTOCOL_FD_ENV] = str(wfd)
        try:
            self.proc = subprocess.Popen(
                [self.python, "-c", self._shim.boot(self.module)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env=env, cwd=self.cwd, pass_fds=(wfd,), start_new_session=True,
            )
        except OSError as exc:
            os.close(rfd)
            os.close(wfd)
            self._shim.remove()
            raise WorkerError("no_python", f"{self.python}: cannot run ({exc.strerror or exc})") from None
        os.close(wfd)
        self._rfd = rfd
        self._stderr = StderrTail(self.proc.stderr, self.on_stderr)
        self._stderr.start()

    def close(self, grace: float = 10.0) -> None:
        """Ask the worker to exit; kill its process group if it does not."""
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(WorkerError, OSError, subprocess.TimeoutExpired):
                    self._send({"op": "exit"})
                    self._read(time.monotonic() + grace, "exiting")
                    self.proc.wait(timeout=grace)
        finally:
            self.kill()  # even when a signal interrupts the goodbye: no worker, no folder left

    def kill(self) -> None:
        """Kill the worker and everything it started (its process group)."""
        if self.proc is not None:
            kill_group(self.proc)
            if self._stderr is not None:
                self._stderr.join(timeout=2)  # EOF arrives once the group is gone
            streams = [self.proc.stdin]
            if not (self._stderr and self._stderr.is_alive()):  # its reader is done with it
                streams.append(self.proc.stderr)
            for stream in streams:
                with contextlib.suppress(OSError):
                    if stream:
                        stream.close()
        if self._rfd is not None:
            os.close(self._rfd)
            self._rfd = None
        if self._shim is not None:
            self._shim.remove()
            self._shim = None

    # -- requests --------------------------------------------------------
    def request(self, op: str, on_event: Optional[Callable[[dict], None]] = None,
                timeout: Optional[float] = None, **fields: Any) -> dict:
        """Send one request; pass its events to ``on_event``; return its result.  A failed request is
        a :class:`WorkerError`; a timeout or any exception in the caller (Ctrl-C too) kills the worker."""
        if self.proc is None or self._rfd is None:
            raise WorkerError("died", "the worker is not running")
        self._next_id += 1
        rid = self._next_id
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        try:
            self._send(dict(fields, op=op, id=rid))
            while True:
                msg = self._read(deadline, op)
                if "event" in msg:
                    if on_event is not None and msg.get("id") in (rid, None):
                        on_event(msg)
                    continue
                if msg.get("id") not in (rid, None):
                    continue
                if msg.get("ok"):
                    return msg.get("result") or {}
                err = msg.get("error") or {}
                raise WorkerError(err.get("kind", "exception"), err.get("message", "the request failed"), err)
        except WorkerError as exc:
            if exc.kind in ("timeout", "died"):
                self.kill()
            raise
        except BaseException:
            self.kill()
            raise

    # -- the wire --------------------------------------------------------
    def _send(self, obj: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died("sending a request") from None

    def _read(self, deadline: float, doing: str) -> dict:
        rfd = self._rfd
        if rfd is None:  # killed (a request timed out, or Ctrl-C) and asked again
            raise WorkerError("died", "the worker is not running")
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout("timeout", f"the worker did not finish {doing} within its time limit; killed it")
            ready, _, _ = select.select([rfd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(rfd, 65536)
            if not chunk:
                raise self._died(doing)
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return {"event": "garbled", "text": line[:200].decode(errors="replace")}

    def _died(self, doing: str) -> WorkerError:
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        if self._stderr is not None:
            self._stderr.join(timeout=2)
        self._exit_code = code
        how = exit_text(code)
        if self._stderr is None:
            last = ""
        elif doing == "starting":
            last = self._stderr.meaningful()       # nothing of the workload yet: the interpreter's own words
        else:
            last = self._stderr.last()
        self.kill()
        return WorkerError("died", f"the worker {how} while {self.DOING.get(doing, doing)}" + (f": {last}" if last else ""))


def exit_text(code: Optional[int]) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"
