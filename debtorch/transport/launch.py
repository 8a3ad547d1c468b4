"""A launcher in the target interpreter (``python -m torch.distributed.run``) that runs one of debtorch's
torch-side modules as its script: started the way a worker is (:mod:`debtorch.transport.client`: through
the shim, never importing from the working folder; a temporary folder of its own as its TMPDIR; its own
session, so that stopping it stops everything it started), its output kept (the last lines say why it
failed).  :func:`debtorch.train.runner.launch_distributed` runs multi-process trials through it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from types import TracebackType
from typing import Optional, Sequence

from debtorch import outputs
from debtorch.transport.client import (
    Shim,
    StderrTail,
    WorkerError,
    exit_text,
    kill_group,
    private_tmp,
    short_tmp_base,
)

STOP_GRACE_S = 10.0   # a launcher told to stop (SIGTERM) stops its ranks within this, or is killed


class Launched:
    """``python -c <boot launcher> LAUNCHER_ARGS <script of module> MODULE_ARGS``, started by :meth:`start`; use
    as a context manager (on the way out: stopped, its folders removed).  ``folder`` is the caller's work
    folder (a registered temporary one): the processes' TMPDIR is made inside it."""

    def __init__(self, python: str, launcher: str, launcher_args: Sequence[str], module: str,
                 module_args: Sequence[str], folder: str, env: Optional[dict[str, str]] = None,
                 cwd: Optional[str] = None):
        self.python, self.launcher, self.module, self.folder, self.cwd = python, launcher, module, folder, cwd
        self.launcher_args, self.module_args = list(launcher_args), list(module_args)
        self.base_env = dict(os.environ if env is None else env)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.tail: Optional[StderrTail] = None
        self._shim: Optional[Shim] = None

    def __enter__(self) -> "Launched":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def start(self, extra_env: Optional[dict[str, str]] = None) -> None:
        """Start it (``extra_env`` beside the environment given); WorkerError ``no_python`` when the
        interpreter cannot run."""
        self._shim = Shim()
        argv = [self.python, "-c", self._shim.boot(self.launcher), *self.launcher_args,
                self._shim.script(self.module), *self.module_args]
        env = private_tmp(self._shim.env(self.base_env), self.folder)
        env.update(extra_env or {})
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env, cwd=self.cwd, start_new_session=True)
        except OSError as exc:
            raise WorkerError("no_python", f"{self.python}: cannot run ({exc.strerror or exc})") from None
        self.tail = StderrTail(self.proc.stdout)
        self.tail.start()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        return None if self.proc is None else self.proc.returncode

    def finished(self) -> None:
        """It has exited: wait (briefly) for the rest of its output."""
        if self.tail is not None:
            self.tail.join(timeout=5)

    def exit_words(self) -> str:
        """'exited with status 1: <its last line>'."""
        last = self.tail.last() if self.tail is not None else ""
        return exit_text(self.returncode) + (f": {last}" if last else "")

    def stop(self) -> None:
        """SIGTERM the launcher (it stops its ranks), then kill its whole process group."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=STOP_GRACE_S)
        kill_group(self.proc)

    def close(self) -> None:
        """Stopped if still running; the shim removed (the caller removes its folder)."""
        if self.running:
            self.stop()
        if self._shim is not None:
            self._shim.remove()
            self._shim = None


def work_folder(prefix: str) -> str:
    """A registered temporary folder for a launch, where a socket's path still fits (docs/engine.md)."""
    return outputs.temporary_folder(prefix, dir=short_tmp_base(prefix))
