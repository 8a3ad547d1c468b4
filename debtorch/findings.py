"""Findings: small, comparable messages (Django's system checks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

ERROR = "error"
WARNING = "warning"
INFO = "info"
LEVELS = (INFO, WARNING, ERROR)
_RANK = {INFO: 0, WARNING: 1, ERROR: 2}

# A check that raised becomes this finding, filed under the check's area.
CRASH_ID = "doctor.E001"


def rank(level: str) -> int:
    return _RANK[level]


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set)):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class Finding:
    """One thing the doctor has to say.

    ``id`` is stable (``driver.E001``: area, level letter, number; never
    renumbered).  ``message`` is one line; ``fix`` names the exact Debian
    packages, files and commands (several lines allowed); ``about`` is the
    object concerned ("GPU 0 (NVIDIA A100-SXM4-80GB)"); ``facts`` are the
    (path, value) pairs it rests on.  Findings compare equal field by field.
    """

    id: str
    level: str
    message: str
    fix: str = ""
    about: str = ""
    facts: tuple = field(default=())
    area: str = ""

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"bad level {self.level!r}")
        object.__setattr__(self, "facts", _freeze(dict(self.facts)) if isinstance(self.facts, dict) else _freeze(self.facts))
        if not self.area:
            object.__setattr__(self, "area", self.id.split(".", 1)[0])

    @property
    def crashed(self) -> bool:
        return self.id == CRASH_ID

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "level": self.level,
            "area": self.area,
            "message": self.message,
            "fix": self.fix,
            "about": self.about,
            "facts": {k: _thaw(v) for k, v in self.facts},
        }


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        if value and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in value):
            return {k: _thaw(v) for k, v in value}
        return [_thaw(v) for v in value]
    return value


def error(id: str, message: str, fix: str = "", about: str = "", facts: Optional[dict] = None) -> Finding:
    return Finding(id, ERROR, message, fix, about, tuple((facts or {}).items()))


def warning(id: str, message: str, fix: str = "", about: str = "", facts: Optional[dict] = None) -> Finding:
    return Finding(id, WARNING, message, fix, about, tuple((facts or {}).items()))


def info(id: str, message: str, fix: str = "", about: str = "", facts: Optional[dict] = None) -> Finding:
    return Finding(id, INFO, message, fix, about, tuple((facts or {}).items()))


class Placed:
    """Base of a finding placed somewhere (a file's line, groups of nodes): its id and level
    are those of its ``finding``."""

    finding: Finding

    @property
    def id(self) -> str:
        return self.finding.id

    @property
    def level(self) -> str:
        return self.finding.level
