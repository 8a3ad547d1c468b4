"""The doctor's check registry, and running it.

A check is a plain function ``check(machine, ctx) -> list[Finding]``
registered for an area.  The registry is an instance (Django's
``CheckRegistry``): the doctor's own checks register on :data:`registry`
through :func:`check`; a test builds a :class:`Registry` of its own.  A
check that raises becomes a ``doctor.E001`` finding in its area, never a
traceback.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Callable, Optional

from debtorch.doctor.areas import AREA_TITLES, AREAS
from debtorch.doctor.siteconfig import SiteConfig
from debtorch.findings import CRASH_ID, ERROR, INFO, WARNING, Finding, finding, rank
from debtorch.knowledge import KnowledgeError
from debtorch.machine import Machine


@dataclass
class Context:
    """What a check may know besides the machine."""

    site: Optional[SiteConfig] = None
    source: str = "live"           # live, facts (a saved file), collect_env


@dataclass
class Report:
    findings: list
    silenced: list = field(default_factory=list)
    checks_run: int = 0
    areas: dict = field(default_factory=dict)      # {area id: AreaState}: what the facts let the checks judge

    def count(self, level: str) -> int:
        return sum(1 for f in self.findings if f.level == level)

    @property
    def crashed(self) -> list:
        return [f for f in self.findings if f.crashed]

    def fails(self, fail_on: str = ERROR) -> bool:
        """Whether a finding reaches ``fail_on`` (error or warning); the command line exits 1 then."""
        threshold = rank(fail_on)
        return any(rank(f.level) >= threshold for f in self.findings)

    def to_json(self) -> dict:
        return {
            "summary": {
                "errors": self.count(ERROR),
                "warnings": self.count(WARNING),
                "infos": self.count(INFO),
                "crashed_checks": len(self.crashed),
                "checks_run": self.checks_run,
            },
            "findings": [f.to_json() for f in self.findings],
            "silenced": [f.id for f in self.silenced],
            "areas": {a: st.to_json() for a, st in self.areas.items()},
        }


class Registry:
    """Checks by area, in registration order."""

    def __init__(self) -> None:
        self._checks: list = []

    def register(self, area: str) -> Callable:
        """Decorator: register a check function for ``area``."""
        if area not in AREA_TITLES:
            raise ValueError(f"unknown area {area!r}")

        def deco(fn: Callable) -> Callable:
            self._checks.append((area, fn))
            return fn

        return deco

    def add(self, area: str, fn: Callable) -> None:
        self.register(area)(fn)

    def copy(self) -> "Registry":
        other = Registry()
        other._checks = list(self._checks)
        return other

    def run(self, machine: Machine, ctx: Optional[Context] = None) -> Report:
        """Every check on ``machine``, findings sorted by area, level and id."""
        ctx = ctx or Context()
        if ctx.site is None:
            ctx.site = SiteConfig()
        order = {a.id: i for i, a in enumerate(AREAS)}
        found: list = []
        for area, fn in self._checks:
            try:
                out = fn(machine, ctx) or []
            except KnowledgeError:
                raise                 # broken data in checks/, not a bug of the check: bad input
            except Exception as exc:  # a check's bug is a finding, not a traceback
                out = [_crash(area, fn, exc)]
            found.extend(out)
        kept = [f for f in found if not ctx.site.silenced(f.id)]
        silenced = [f for f in found if ctx.site.silenced(f.id)]
        kept.sort(key=lambda f: (order.get(f.area, 99), -rank(f.level), f.id, f.about))
        return Report(kept, silenced, len(self._checks))


def _crash(area: str, fn: Callable, exc: BaseException) -> Finding:
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {last.filename.rsplit('/', 1)[-1]}:{last.lineno}" if last else ""
    return finding(CRASH_ID, message=f"check {fn.__name__} crashed: {type(exc).__name__}: {exc}"[:200],
                   about=f"{fn.__module__}.{fn.__name__}{where}", area=area)


# The doctor's own checks register here (debtorch/doctor/checks_*.py).
registry = Registry()
check = registry.register
