"""What linting gives back: findings at places in files, files that could not be read, the whole run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from debtorch.findings import ERROR, WARNING, Finding, Placed, rank

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Located(Placed):
    """A finding at ``path:line:col`` (1-based), with the code line it points at."""

    path: str
    line: int
    col: int
    finding: Finding
    code: str = ""

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.col, self.id)

    def to_json(self) -> dict:
        f = self.finding
        return {"path": self.path, "line": self.line, "col": self.col, "id": f.id, "level": f.level,
                "message": f.message, "fix": f.fix, "code": self.code}


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

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "col": self.col, "message": self.message}


@dataclass
class Report:
    """Everything one ``debtorch lint`` run found."""

    findings: List[Located] = field(default_factory=list)
    errors: List[FileError] = field(default_factory=list)
    files: int = 0              # files linted (parsed and checked)
    skipped: int = 0            # files found under folders that never mention what the rules look for
    suppressed: int = 0         # findings silenced by --ignore or a noqa comment
    torchfix: Optional[str] = None  # TorchFix's version when its findings are included
    seconds: float = 0.0

    def counts(self) -> dict:
        out = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            out[f.level] += 1
        return out

    def exit_code(self, fail_on: str = ERROR) -> int:
        """0 none at ``fail_on``; 1 findings at that level or above; 2 a file could not be linted."""
        if self.errors:
            return 2
        threshold = rank(fail_on if fail_on in (ERROR, WARNING) else ERROR)
        return 1 if any(rank(f.level) >= threshold for f in self.findings) else 0
