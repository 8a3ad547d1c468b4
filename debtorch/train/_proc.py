"""Process helpers for the torch side (standard library only; importable without torch)."""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (``PR_SET_PDEATHSIG``).

    Used by the worker, by each torchrun rank (torchrun starts ranks in their
    own sessions, so a process-group kill does not reach them) and by each
    DataLoader worker, so that killing debtorch never leaves strays behind.
    A no-op where prctl is unavailable.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
