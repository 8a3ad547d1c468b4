"""Progress on stderr while something is measured, never on stdout.

On a terminal a rich bar; in a log, one line per trial (verify-train) or
nothing (tune).  No rich Progress is made off a terminal: rich 13.3
(Debian 12) writes a newline when even a disabled one stops.
"""

from __future__ import annotations

from typing import Any, Optional

from debtorch.textsafe import printable


class Bar:
    """A bar counting ``unit`` (a context manager); off a terminal, labels go to the log as
    ``{log}: {label}`` when ``log`` is given."""

    def __init__(self, unit: str, prefix: str = "", log: Optional[str] = None, first: str = "starting") -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.unit, self.prefix, self.log, self.first = unit, prefix, log, first
        self.bar: Any = None         # a rich Progress, on a terminal
        self.task: Any = None

    def __enter__(self) -> "Bar":
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn(self.prefix + "{task.description}"), BarColumn(),
                                TextColumn("{task.completed:.0f}/{task.total:.0f} " + self.unit),
                                TimeElapsedColumn(), console=self.console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.first, total=1)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def label(self, text: str) -> None:
        text = printable(text)
        if self.bar is not None:
            self.bar.update(self.task, description=text)
        elif self.log:
            self.console.print(f"{self.log}: {text}", markup=False, highlight=False, soft_wrap=True)

    def update(self, **kw) -> None:
        """``completed``, ``total`` or ``advance`` of the bar (nothing off a terminal)."""
        if self.bar is not None:
            self.bar.update(self.task, **kw)


class TrialsBar(Bar):
    """``tune --measure``: seconds of the budget spent, and the trial just run (in a log: a line each)."""

    def __init__(self, first: str = "starting the worker (importing torch), then a calibration trial") -> None:
        super().__init__("s", prefix="[bold]measuring[/] ", log="tune", first=first)

    def on_trial(self, trial: Any, spent: float, budget: float) -> None:
        got = f"{trial.samples_per_s:.1f} samples/s" if trial.samples_per_s is not None else "failed"
        self.update(total=budget, completed=min(spent, budget))
        self.label(f"trial {trial.index} ({trial.phase}): {trial.settings.short()} -> {got}, "
                   f"{spent:.0f} s of the search's {budget:.0f}")


class StepsBar(Bar):
    """verify-train: optimizer steps of the whole plan (a :class:`debtorch.verify.measure.Progress`)."""

    def __init__(self):
        super().__init__("steps", log="verify-train", first="starting the worker")
        self.expected = self.done = 0

    def plan(self, total_steps: int) -> None:
        """The steps of the whole plan; told again when rounds are added (the steps done stay)."""
        self.update(total=max(1, total_steps))

    def begin(self, label: str, steps: int) -> None:
        self.expected, self.done = steps, 0
        self.label(label)

    def advance(self, event: dict) -> None:
        if event.get("event") not in (None, "progress"):
            return
        self.done += 1
        if self.done <= self.expected:
            self.update(advance=1)

    def end(self) -> None:
        if self.done < self.expected:
            self.update(advance=self.expected - self.done)


class ShareBar(Bar):
    """``doctor --measure-data``: the share of its time spent, and what it reads (a ``dataread.Progress``)."""

    def __init__(self, prefix: str = "[bold]reading[/] "):
        super().__init__("%", prefix=prefix)

    def __call__(self, share: float, label: str) -> None:
        self.update(total=100, completed=min(100.0, 100.0 * share))
        self.label(label)
