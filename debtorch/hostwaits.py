"""The host-sync counter: host waits per step counted on CUDA, in the user's interpreter (verify-train's
worker and ``cfg.watch``; lint reads the same places from the code, :mod:`debtorch.lint.measured`).
:func:`syncs_reported` reports every synchronising call under ``torch.cuda.set_sync_debug_mode("warn")``;
:func:`count_host_waits` maps each to the innermost frame in the workload's file.  torch is passed in;
standard library only.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import warnings
from types import FrameType
from typing import Any, Callable, Iterable, Iterator, Optional, TextIO

SYNC_WARNING = "called a synchronizing CUDA operation"  # c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync


def workload_file(spec: str) -> Optional[str]:
    """The file of a loaded workload's module (``module:function``), in the worker; None if unknown."""
    module = spec.split(":", 1)[0]
    if module == "builtin":
        module = "debtorch.train.workloads"
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    return os.path.realpath(path) if path else None


@contextlib.contextmanager
def syncs_reported(torch: Any, on_sync: Callable[[], None]) -> Iterator[None]:
    """Inside, ``on_sync()`` runs at every synchronising CUDA call torch reports (``set_sync_debug_mode("warn")``;
    verify-train's worker and ``cfg.watch`` both count with it).  Other warnings are shown as before; the
    debug mode and the warning filters are put back on the way out."""
    before = getattr(torch.cuda, "get_sync_debug_mode", lambda: 0)()
    with warnings.catch_warnings():
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: Optional[TextIO] = None, line: Optional[str] = None) -> None:  # warnings.showwarning's
            if SYNC_WARNING in str(message):
                on_sync()
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.filterwarnings("always", message=".*" + SYNC_WARNING)
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(before)


def count_host_waits(run: Callable[[Callable[[dict], None]], Any], files: Iterable[str], torch: Any) -> dict:
    """Count synchronising CUDA calls per step, by the line of ``files`` that made them.

    ``run(on_step)`` trains, calling ``on_step(event)`` after each optimizer
    step; the first step (warm-up: lazy initialisation, cuDNN autotuning) is
    not counted.  Returns ``{"measured": True, "steps", "per_step", "lines":
    [{"path", "line", "per_step"}], "elsewhere_per_step"}``, where
    ``elsewhere_per_step`` counts waits outside the workload's files (the
    engine's, PyTorch's own).
    """
    wanted = {os.path.realpath(f) for f in files if f}
    state = {"counting": False, "steps": 0}
    counts: collections.Counter[Optional[tuple[str, int]]] = collections.Counter()

    def on_step(event: dict) -> None:
        if state["counting"]:
            state["steps"] += 1
        state["counting"] = True

    def on_sync() -> None:
        if state["counting"]:
            counts[_user_frame(wanted)] += 1

    with syncs_reported(torch, on_sync):
        run(on_step)
    steps = state["steps"]

    def per(n: int) -> float:
        """A count per counted step (the count itself when no step was counted)."""
        return n / steps if steps else float(n)

    def most_first(place: tuple[tuple[str, int], int]) -> tuple[int, tuple[str, int]]:
        return -place[1], place[0]

    placed = sorted(((k, v) for k, v in counts.items() if k is not None), key=most_first)
    lines = [{"path": p, "line": n, "per_step": per(c)} for (p, n), c in placed]
    return {"measured": True, "steps": steps, "per_step": per(sum(c for _, c in placed)),
            "lines": lines, "elsewhere_per_step": per(counts.get(None, 0))}


def _user_frame(files: set[str]) -> Optional[tuple[str, int]]:
    """(file, line) of the innermost frame of the stack in ``files``; None when no frame is."""
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if path in files or os.path.realpath(path) in files:
            return (os.path.realpath(path), frame.f_lineno)
        frame = frame.f_back
    return None
