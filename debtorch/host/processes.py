"""Starting and killing the live machine's commands: each in a session of its own, so that a timeout
kills what it started too (a hung nvidia-smi must never hang debtorch)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Optional, Union

from debtorch.host.base import COMMAND_NOT_FOUND, CommandResult, reason_for


def kill_group(proc: subprocess.Popen) -> None:
    """Kill a process started with start_new_session=True, and everything it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


def spawn(argv: tuple[str, ...], env: Optional[dict[str, str]] = None) -> Union[subprocess.Popen, CommandResult]:
    """Start a command of the live machine, or say why it could not start (a CommandResult)."""
    full_env = dict(os.environ)
    full_env.update({"LC_ALL": "C", "LANG": "C"})
    if env:
        full_env.update(env)
    try:
        # A new session, so that a timeout kills grandchildren too.  From "/", so that no command
        # depends on where debtorch was started (Host.program resolves relative paths).
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=full_env, cwd="/", start_new_session=True)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            reason = COMMAND_NOT_FOUND
        else:
            reason = reason_for(exc)
        return CommandResult(argv, None, "", "", reason)
