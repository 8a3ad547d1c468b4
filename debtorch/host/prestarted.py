"""Commands started before debtorch imported the rest of itself: ``debtorch doctor`` starts the
target interpreter's probe this way (cli/__init__.py), so that it runs while debtorch imports the
rest.  The first ``LiveHost().run`` of the same argv collects it; any left unclaimed at exit are
killed."""

from __future__ import annotations

import atexit
import subprocess
from typing import Optional, Sequence

from debtorch.host.base import CommandResult
from debtorch.host.processes import kill_group, spawn

_PRESTARTED: dict[tuple[str, ...], subprocess.Popen] = {}


def prestart(argv: Sequence[str]) -> None:
    """Start a command of the live machine now, for :func:`claim` to collect."""
    args = tuple(str(a) for a in argv)
    proc = spawn(args)
    if not isinstance(proc, CommandResult) and args not in _PRESTARTED:
        if not _PRESTARTED:
            atexit.register(_kill_unclaimed)
        _PRESTARTED[args] = proc


def claim(argv: tuple[str, ...]) -> Optional[subprocess.Popen]:
    """The process :func:`prestart` started for ``argv``, taken from the waiting ones; None if none."""
    return _PRESTARTED.pop(argv, None)


def _kill_unclaimed() -> None:
    while _PRESTARTED:
        kill_group(_PRESTARTED.popitem()[1])
