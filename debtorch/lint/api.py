"""Linting files and folders, the entry points of ``debtorch lint`` (docs/lint.md): static, the standard
library's ``ast``; no torch import, nothing executed.  ``lint_paths(["train.py", "src/"])`` -> a Report.
"""

from __future__ import annotations

import ast
import io
import os
import re
import time
import tokenize
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence, Tuple

from debtorch import inputs
from debtorch.findings import catalogue, finding
from debtorch.lint import torchfix_bridge
from debtorch.lint.checks import run_checks
from debtorch.lint.result import FileError, Located, Report
from debtorch.lint.script import Script

__all__ = ["FileResult", "Located", "Report", "lint_text", "lint_file", "lint_paths",
           "discover", "LintUsageError"]

# Parsing and indexing a script takes up to 725 bytes of memory per byte of source (dense code such as
# `f(a,b)` lines; real training scripts 74-123: benchmarks/lint_memory.py): a script larger than the
# budget allows at that rate is refused before it is parsed.
MEMORY_BUDGET = 512 * 1024 * 1024
MEMORY_PER_BYTE = 768
MAX_SCRIPT = MEMORY_BUDGET // MEMORY_PER_BYTE
# Every rule (and TorchFix) needs a file that mentions torch: one that does not cannot give a finding.
MARKERS = (b"torch",)
# Folders never entered when walking: tools' and environments' own trees.
SKIP_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules"})
_NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<ids>[\w.,\s]+))?", re.I)


class LintUsageError(Exception):
    """A path that does not exist (one line)."""


@dataclass
class FileResult:
    path: str
    findings: List[Located] = field(default_factory=list)
    error: Optional[FileError] = None
    suppressed: int = 0


def _decode(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-16 (PowerShell's '>'), read as every input is
        return data.decode("utf-16", "replace").lstrip("\ufeff")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    try:
        text = data.decode(encoding, "replace")
    except LookupError:
        text = data.decode("utf-8", "replace")
    return text[1:] if text.startswith("\ufeff") else text


def parse(data, path: str = "<string>") -> Tuple[Optional[ast.Module], str, Optional[FileError]]:
    """(tree, text, None), or (None, text, the one-line reason it is not valid Python)."""
    text = data if isinstance(data, str) else _decode(data)
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        msg = exc.msg.splitlines()[0] if exc.msg else "invalid syntax"
        return None, text, FileError(path, f"not valid Python: {msg}", exc.lineno or 0, exc.offset or 0)
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return None, text, FileError(path, f"not valid Python: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return tree, text, None


def _silenced(f: Located, ignore: frozenset) -> bool:
    if f.id in ignore or f.id.split(".", 1)[0] in ignore:
        return True
    m = _NOQA.search(f.code)
    return bool(m) and (not m.group("ids") or f.id in re.split(r"[,\s]+", m.group("ids")))


def lint_text(data, path: str = "<string>", ignore: Iterable[str] = (), torchfix: bool = False) -> FileResult:
    """Lint source text (str or bytes); never raises."""
    tree, text, error = parse(data, path)
    result = FileResult(path)
    if error is not None:
        result.error = error
        return result
    try:
        script = Script(tree, text, path)
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - a crash is a finding, never a traceback
        crash = finding("script.E001", about=path, error=f"reading: {type(exc).__name__}: {exc}"[:120])
        found = [Located(path, 1, 1, crash)]
    else:
        found = run_checks(script)
        if torchfix:
            found.extend(torchfix_bridge.findings(script))
    silence = frozenset(ignore)
    kept = [f for f in found if not _silenced(f, silence)]
    result.suppressed = len(found) - len(kept)
    result.findings = sorted(set(kept), key=Located.sort_key)
    return result


def read_script(path: str) -> Tuple[bytes, Optional[FileError]]:
    """A script's bytes through the one door (a regular file only), or why it is not linted: a
    file whose parse could exceed MEMORY_BUDGET is refused before it is parsed."""
    try:
        data = inputs.read_bytes(path, MAX_SCRIPT)
    except inputs.NotRegular as exc:
        return b"", FileError(path, f"is {exc.kind}, not a script")
    except OSError as exc:
        return b"", FileError(path, f"cannot read: {exc.strerror or exc}")
    if len(data) > MAX_SCRIPT:
        return b"", FileError(path, f"larger than {inputs.size_text(MAX_SCRIPT)}: parsing it could take more than "
                                    f"lint's {inputs.size_text(MEMORY_BUDGET)} memory budget")
    return data, None


def lint_file(path: str, ignore: Iterable[str] = (), torchfix: bool = False, walked: bool = False) -> Optional[FileResult]:
    """Lint one file; None when ``walked`` (found in a folder) and it mentions nothing the rules look for."""
    data, error = read_script(path)
    if error is not None:
        return FileResult(path, error=error)
    return None if walked and not any(m in data for m in MARKERS) else lint_text(data, path, ignore, torchfix)


def discover(paths: Sequence[str]) -> List[Tuple[str, bool]]:
    """(file, found by walking a folder) for every file to lint, folders walked for ``*.py`` in name order
    (the folders not entered: docs/lint.md); every path must exist."""
    for p in paths:
        try:
            os.stat(p)
        except FileNotFoundError:
            raise LintUsageError(f"{p}: no such file or directory") from None
        except OSError as exc:  # a loop of symbolic links, a folder not ours to enter
            raise LintUsageError(f"{p}: {inputs.os_reason(exc)}") from None
    files: List[Tuple[str, bool]] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                                 and not os.path.exists(os.path.join(root, d, "pyvenv.cfg")))
                files.extend((os.path.join(root, n), True) for n in sorted(names) if n.endswith(".py"))
        else:
            files.append((p, False))
    return files


def lint_paths(paths: Sequence[str], ignore: Iterable[str] = (), torchfix: Optional[bool] = None) -> Report:
    """Lint files and folders (recursing into *.py).  ``torchfix``: None uses it when installed.

    Raises :class:`LintUsageError` for a path that does not exist, before linting anything.
    """
    start = time.perf_counter()
    files = discover(paths)
    report = Report()
    use_tf = torchfix_bridge.version() if torchfix is not False else None
    if torchfix and use_tf is None:
        raise LintUsageError("--torchfix: TorchFix is not installed (pip install torchfix)")
    report.torchfix = use_tf
    ignore = frozenset(ignore)
    for path, walked in files:
        res = lint_file(path, ignore, bool(use_tf), walked)
        if res is None:
            report.skipped += 1
            continue
        if res.error is not None:
            report.errors.append(res.error)
            continue
        report.files += 1
        report.suppressed += res.suppressed
        report.findings.extend(res.findings)
    report.seconds = time.perf_counter() - start
    return report


def known_id(value: str) -> bool:
    """An id (or area) that --ignore accepts: script.W001, script, torchfix.TOR101, torchfix."""
    return (value.startswith("script.") and value in catalogue()) or value in ("script", torchfix_bridge.AREA) \
        or bool(re.fullmatch(r"torchfix\.TOR\d+", value))
