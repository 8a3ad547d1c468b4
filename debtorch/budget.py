"""Budgets that are wall-clock promises (``tune --measure --budget``, ``verify-train --budget``), and the one
check of every command's numeric options: a number of seconds (:func:`seconds_problem`), a count
(:func:`count_problem`).

A :class:`Budget` counts from the command's start, and every wait on the worker is capped by what is
left (:meth:`Budget.cap`): a workload that hangs is killed when the budget ends, and the command says
where it hung (:class:`Where`), at most ``SLACK_S`` seconds after its budget.  Standard library only;
the clock is injectable (tests run budgets on a fake clock).
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

SLACK_S = 5.0   # the stated slack: killing the worker's process group and printing the report
HUNG_S = 5.0    # no progress for this long when the budget ended: the workload hangs, rather than being slow
WEEK_S = 7 * 24 * 3600.0   # the most a --budget or a --timeout may be


def seconds_problem(option: str, value: float, least: float = 0.0, most: float = WEEK_S,
                    to: str = "measure anything") -> Optional[str]:
    """The one line for a number of seconds ``option`` cannot take, or None: it must be finite, above 0
    and at most ``most``; below ``least`` it is too small ``to`` do anything, and the line says the least
    that would do.  Every command's ``--budget`` and ``--timeout`` are checked with it, before anything
    starts."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= most):
        return f"{option} must be a number of seconds > 0 and at most {most:g} (got {value:g})"
    if value < least:
        return f"{option} {value:g} is too small to {to}; give at least {least:g} seconds"
    return None


def count_problem(option: str, value: object, least: int, most: int, why: str = "") -> Optional[str]:
    """The one line for a count ``option`` cannot take (steps, rounds, processes, a seed), or None: it must be
    an integer from ``least`` to ``most``; ``why`` says what the least is for.  Every command's counts are
    checked with it, before anything starts."""
    if isinstance(value, int) and not isinstance(value, bool) and least <= value <= most:
        return None
    return f"{option} must be an integer from {least} to {most} (got {value!r})" + (f": {why}" if why else "")


def too_small(budget_s: float, startup_s: float, trials_s: float, need_s: float, cut: str = "") -> str:
    """The one line for a budget found too small once the first trials ran (tune --measure, verify-train):
    what went where, and the budget that would do (``need_s``, the whole command)."""
    return (f"--budget {budget_s:g} is too small for this workload: {startup_s:.0f} s went to start-up, "
            f"{trials_s:.0f} s to its first trials{cut}; give at least {math.ceil(need_s)}")


def still_starting(budget_s: float, spent_s: float) -> str:
    """The one line for a budget that ended while the worker was still starting (importing torch,
    loading the workload) and making progress: start-up alone took all of it."""
    return (f"--budget {budget_s:g} is too small for this workload: start-up (importing torch, loading the "
            f"workload) was still going after {spent_s:.0f} s; give at least {math.ceil(2 * max(budget_s, spent_s))} "
            "(twice what start-up has taken, for it and the first trials)")


class Budget:
    """``seconds`` of wall-clock time from ``start`` (default: now); ``None`` is no limit.  :meth:`hold` keeps
    the end of it back for finishing (stopping a worker): every wait, and what is left, end that much earlier."""

    def __init__(self, seconds: Optional[float], start: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.seconds = None if seconds is None else float(seconds)
        self.clock = clock
        self.start = clock() if start is None else start
        self.reserve = 0.0   # seconds at the end kept for finishing

    def hold(self, seconds: float) -> None:
        """Keep ``seconds`` at the end for finishing (the most any caller asked for)."""
        if math.isfinite(seconds) and seconds > self.reserve:
            self.reserve = seconds

    @property
    def limited(self) -> bool:
        return self.seconds is not None and math.isfinite(self.seconds)

    def spent(self) -> float:
        return max(0.0, self.clock() - self.start)

    def left(self) -> float:
        """Seconds left before what is held for finishing (infinite without a limit; never negative)."""
        if self.seconds is None or not self.limited:
            return math.inf
        return max(0.0, self.seconds - self.reserve - self.spent())

    def fits(self, seconds: float) -> bool:
        """Whether something expected to take ``seconds`` ends within the budget."""
        return seconds <= self.left()

    def cap(self, seconds: float) -> float:
        """A wait of ``seconds``, shortened to what is left."""
        return min(seconds, self.left())

    def binding(self, seconds: float) -> bool:
        """Whether a wait of ``seconds`` starting now would be cut by the budget."""
        return self.left() < seconds

    def words(self) -> str:
        return f"--budget {self.seconds:g} s" if self.limited else "no budget"


class Where:
    """What a run is doing now, in words, for the line that says where it hung:
    "loading tiny:stuck", "trial 7 (w2 pf2 fp32 t1), warm-up step 1 of 2"."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.what = "starting"
        self.step = ""
        self.since = clock()

    def doing(self, what: str, step: str = "") -> None:
        self.what, self.step, self.since = what, step, self.clock()

    def trial(self, what: str, warmup: int) -> None:
        """A trial starts: it is in its first warm-up step (or its first timed one)."""
        self.doing(what, "warm-up step 1" if warmup else "timed step 1")

    def progress(self, event: dict) -> None:
        """An engine progress event (``phase``, ``step``, ``steps``): the step reached so far."""
        phase, step, steps = event.get("phase"), event.get("step"), event.get("steps")
        if isinstance(step, int) and isinstance(steps, int):
            name = "warm-up" if phase == "warmup" else "timed"
            self.step = f"after {name} step {step} of {steps}" if step >= steps else f"{name} step {step + 1} of {steps}"
            self.since = self.clock()

    def quiet(self) -> float:
        """Seconds since the last progress (or since this started)."""
        return self.clock() - self.since

    def hung(self) -> bool:
        return self.quiet() >= HUNG_S

    def line(self) -> str:
        """'trial 7 (w2 fp32), timed step 3 of 20 (no progress for 12 s)'."""
        quiet = self.quiet()
        text = self.what + (f", {self.step}" if self.step else "")
        return text + (f" (no progress for {quiet:.0f} s)" if quiet >= 2 else "")


def stopped(budget: Budget, where: Where) -> str:
    """The one line for a run stopped by its budget while it was somewhere: hung (no progress for
    ``HUNG_S``), or still making progress (too slow for the budget, or a busy machine)."""
    if where.hung():
        return (f"stopped at the end of {budget.words()} in {where.line()}: the workload hangs there, "
                "or needs a larger budget")
    return (f"stopped at the end of {budget.words()} in {where.line()}, still making progress: "
            "a larger budget would let it finish (a busy machine slows every step)")
