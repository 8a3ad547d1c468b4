"""What linting gives back: findings at places in files, files that could not be read, the whole run.

Output is bounded whatever the file holds (docs/lint.md, "Limits"): a finding keeps an excerpt of its
line around its column (:data:`EXCERPT` characters), and a file shows at most :data:`PER_LINE` findings
a line and :data:`PER_FILE` in all; the rest are counted (``FileResult.hidden``), never stored.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Counter, Dict, Iterable, List, Optional, Tuple

from debtorch.findings import ERROR, INFO, WARNING, Finding, Placed, rank

SCHEMA_VERSION = 1
EXCERPT = 240      # characters of a code line kept around a finding's column
PER_LINE = 5       # findings shown for one line of a file
PER_FILE = 100     # findings shown for one file
ELLIPSIS = "..."


def excerpt(line: str, col: int, width: int = EXCERPT) -> str:
    """The part of ``line`` (trailing blanks dropped) around the 1-based column ``col``: the whole line
    when it fits in ``width`` characters, else ``width`` characters starting a third of the way before
    the column, marked ``...`` where cut."""
    line = line.rstrip()
    if len(line) <= width:
        return line
    start = max(0, min(col - 1 - width // 3, len(line) - width))
    end = start + width
    head = ELLIPSIS if start > 0 else ""
    tail = ELLIPSIS if end < len(line) else ""
    return head + line[start:end] + tail


@dataclass(frozen=True)
class Located(Placed):
    """A finding at ``path:line:col`` (1-based), with an excerpt of the code line it points at."""

    path: str
    line: int
    col: int
    finding: Finding
    code: str = ""

    def sort_key(self) -> Tuple[str, int, int, str]:
        return (self.path, self.line, self.col, self.id)

    def to_json(self) -> Dict[str, Any]:
        f = self.finding
        return {"path": self.path, "line": self.line, "col": self.col, "id": f.id, "level": f.level,
                "message": f.message, "fix": f.fix, "code": self.code}


def located(path: str, line: int, col: int, found: Finding, code_line: str) -> Located:
    """A finding at ``path:line:col`` keeping only an excerpt of ``code_line`` around the column."""
    return Located(path, line, col, found, excerpt(code_line, col))


def new_counts() -> Counter[str]:
    return collections.Counter({ERROR: 0, WARNING: 0, INFO: 0})


@dataclass
class Kept:
    """The findings of one file as they are collected, at most :data:`PER_LINE` a line and
    :data:`PER_FILE` in all (the first in source order); the others counted by level in ``hidden``."""

    found: List[Located] = field(default_factory=list)
    hidden: Counter[str] = field(default_factory=new_counts)
    _per_line: Counter[int] = field(default_factory=collections.Counter)

    def add(self, item: Located) -> None:
        if self._per_line[item.line] >= PER_LINE:
            self.hidden[item.level] += 1
            return
        self._per_line[item.line] += 1
        self.found.append(item)
        if len(self.found) > 4 * PER_FILE:  # keep the memory bounded while a rule is still yielding
            self._trim()

    def extend(self, items: Iterable[Located]) -> None:
        for item in items:
            self.add(item)

    def _trim(self) -> None:
        ordered = sorted(set(self.found), key=Located.sort_key)
        for item in ordered[PER_FILE:]:
            self.hidden[item.level] += 1
        self.found = ordered[:PER_FILE]

    def result(self) -> Tuple[List[Located], Counter[str]]:
        """(the findings shown, in source order; the counts by level of those not shown)."""
        self._trim()
        return self.found, self.hidden


@dataclass(frozen=True)
class FileError:
    """A file that could not be linted: unreadable, or not valid Python (one line)."""

    path: str
    message: str
    line: int = 0
    col: int = 0

    def line_text(self) -> str:
        where = f"{self.path}:{self.line}:{self.col}" if self.line else self.path
        return f"{where}: {self.message}"

    def to_json(self) -> Dict[str, Any]:
        return {"path": self.path, "line": self.line, "col": self.col, "message": self.message}


@dataclass
class Report:
    """Everything one ``debtorch lint`` run found."""

    findings: List[Located] = field(default_factory=list)
    errors: List[FileError] = field(default_factory=list)
    files: int = 0              # files linted (parsed and checked)
    skipped: int = 0            # files found under folders that never mention what the rules look for
    suppressed: int = 0         # findings silenced by --ignore or a noqa comment
    hidden: Counter[str] = field(default_factory=new_counts)  # findings over the per-line and per-file caps
    torchfix: Optional[str] = None  # TorchFix's version when its findings are included
    seconds: float = 0.0

    def counts(self) -> Dict[str, int]:
        """Findings per level, those not shown (over the caps) included."""
        out = {ERROR: self.hidden[ERROR], WARNING: self.hidden[WARNING], INFO: self.hidden[INFO]}
        for f in self.findings:
            out[f.level] += 1
        return out

    def not_shown(self) -> int:
        return sum(self.hidden.values())

    def exit_code(self, fail_on: str = WARNING) -> int:
        """0 none at ``fail_on``; 1 findings at that level or above (shown or not); 2 a file could not be linted."""
        if self.errors:
            return 2
        threshold = rank(fail_on if fail_on in (ERROR, WARNING) else WARNING)
        return 1 if any(n and rank(level) >= threshold for level, n in self.counts().items()) else 0
