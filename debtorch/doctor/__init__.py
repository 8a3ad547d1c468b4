"""debtorch doctor: turns facts into findings a user can act on.

A check is a plain function ``check(facts, ctx) -> list[Finding]`` registered
for an area with :func:`check`.  :func:`diagnose` runs them all; a check that
raises becomes a ``doctor.E001`` finding in its area, never a traceback.
"""

from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass, field
from typing import Callable, Optional

from debtorch.doctor.findings import CRASH_ID, ERROR, INFO, WARNING, Finding, rank

SCHEMA_VERSION = 1

# Areas in report order, with their titles.
AREAS = (
    ("os", "Operating system"),
    ("apt", "APT sources and packages"),
    ("driver", "NVIDIA driver"),
    ("gpu", "GPUs"),
    ("cuda", "CUDA"),
    ("torch", "PyTorch"),
    ("python", "Python environment"),
    ("cpu", "CPU"),
    ("memory", "Memory and limits"),
    ("storage", "Storage"),
    ("site", "Site rules"),
)
AREA_TITLES = dict(AREAS)

_CHECK_MODULES = (
    "debtorch.doctor.checks_system",
    "debtorch.doctor.checks_resources",
    "debtorch.doctor.checks_nvidia",
    "debtorch.doctor.checks_cuda",
    "debtorch.doctor.checks_site",
)

_REGISTRY: list[tuple[str, Callable]] = []


def check(area: str):
    """Register a check function for ``area``."""
    if area not in AREA_TITLES:
        raise ValueError(f"unknown area {area!r}")

    def deco(fn: Callable) -> Callable:
        _REGISTRY.append((area, fn))
        return fn

    return deco


def registered() -> list[tuple[str, Callable]]:
    return list(_REGISTRY)


@dataclass
class Context:
    """What a check may know besides the facts."""

    site: "object" = None          # debtorch.doctor.siteconfig.SiteConfig
    source: str = "live"           # live, facts (a saved file), collect_env


@dataclass
class Report:
    findings: list[Finding]
    silenced: list[Finding] = field(default_factory=list)
    checks_run: int = 0

    def count(self, level: str) -> int:
        return sum(1 for f in self.findings if f.level == level)

    @property
    def crashed(self) -> list[Finding]:
        return [f for f in self.findings if f.crashed]

    def exit_code(self, fail_on: str = ERROR) -> int:
        """0 when nothing reaches ``fail_on`` (error or warning), else 1."""
        threshold = rank(fail_on)
        return 1 if any(rank(f.level) >= threshold for f in self.findings) else 0

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
        }


def _crash(area: str, fn: Callable, exc: BaseException) -> Finding:
    last = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {last.filename.rsplit('/', 1)[-1]}:{last.lineno}" if last else ""
    return Finding(
        CRASH_ID,
        ERROR,
        f"check {fn.__name__} crashed: {type(exc).__name__}: {exc}"[:200],
        fix="This is a debtorch bug: please report it with `debtorch doctor --json --redact`.",
        about=f"{fn.__module__}.{fn.__name__}{where}",
        area=area,
    )


def diagnose(facts: dict, ctx: Optional[Context] = None) -> Report:
    """Run every registered check on ``facts``."""
    from debtorch.doctor.siteconfig import SiteConfig

    ctx = ctx or Context()
    if ctx.site is None:
        ctx.site = SiteConfig()
    order = {a: i for i, (a, _) in enumerate(AREAS)}
    found: list[Finding] = []
    checks = registered()
    for area, fn in checks:
        try:
            out = fn(facts, ctx) or []
        except Exception as exc:  # a check's bug is a finding, not a traceback
            out = [_crash(area, fn, exc)]
        found.extend(out)
    kept = [f for f in found if not ctx.site.silenced(f.id)]
    silenced = [f for f in found if ctx.site.silenced(f.id)]
    kept.sort(key=lambda f: (order.get(f.area, 99), -rank(f.level), f.id, f.about))
    return Report(kept, silenced, len(checks))


# Register every check now (the modules import `check` from above).
for _mod in _CHECK_MODULES:
    importlib.import_module(_mod)
