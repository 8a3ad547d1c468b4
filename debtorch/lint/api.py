"""Linting files and folders, the entry points of ``debtorch lint`` (docs/lint.md): static, the standard
library's ``ast``; no torch import, nothing executed.  ``lint_paths(["train.py", "src/"])`` -> a Report.
"""

from __future__ import annotations

import ast
import io
import itertools
import os
import re
import time
import tokenize
from dataclasses import dataclass, field
from typing import Callable, Counter, Iterable, List, Optional, Sequence, Tuple, Union

from debtorch import inputs
from debtorch.findings import catalogue, finding
from debtorch.lint import torchfix_bridge
from debtorch.lint.checks import iter_checks
from debtorch.lint.project import FunctionSummary, Project, Summaries, top_functions
from debtorch.lint.result import FileError, Kept, Located, Report, located, new_counts
from debtorch.lint.script import Script, return_kind, skips_sync

__all__ = ["FileResult", "Located", "Report", "lint_text", "lint_file", "lint_paths",
           "discover", "LintUsageError"]

# Linting a script (parsing it, indexing it, every rule) takes memory in proportion to its syntax tree,
# not to its bytes: up to about 1,010 bytes per token (a name alone on a line, the densest shape; real
# training scripts 280-700; benchmarks/lint_memory.py), plus about 16 per character of text.  Tokens are
# counted before parsing (:func:`tokens`, an upper bound of the tree's nodes), and a script whose
# estimate exceeds the budget is refused unparsed, whatever its shape.
MEMORY_BUDGET = 512 * 1024 * 1024
MEMORY_PER_TOKEN = 1100
MEMORY_PER_CHAR = 16
MAX_SCRIPT = 8 * 1024 * 1024   # read no more than this (the token count refuses dense files far smaller)
# What the token count counts: a plain string literal is one token (an f-string is counted character by
# character: its fields are nodes), a name, a number, every other character but white space, a line break.
_TOKEN = re.compile(r"""
    [rRbBuU]{0,2}(?<![fF])(?<![fF][rRbB])
        (?:'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | \#[^\n]*
  | [^\W\d]\w*
  | \d[\w.]*
  | [^\s\w]
  | \n
""", re.X)
# Every rule (and TorchFix) needs a file that mentions torch: one that does not cannot give a finding.
MARKERS = (b"torch",)
# Folders never entered when walking: tools' and environments' own trees.
SKIP_DIRS = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules"})
_NOQA = re.compile(r"#\s*noqa\b(?::\s*(?P<ids>[\w.,\s]+))?", re.I)


class LintUsageError(Exception):
    """A path that does not exist (one line)."""


@dataclass
class FileResult:
    """One file's findings (at most PER_LINE a line and PER_FILE in all), or why it was not linted."""

    path: str
    findings: List[Located] = field(default_factory=list)
    error: Optional[FileError] = None
    suppressed: int = 0
    hidden: Counter[str] = field(default_factory=new_counts)  # by level: findings over the caps, not kept


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


def parse(data: Union[str, bytes], path: str = "<string>") -> Tuple[Optional[ast.Module], str, Optional[FileError]]:
    """(tree, text, None), or (None, text, the one-line reason it is not parsed: not valid Python, or
    too large for the memory budget)."""
    text = data if isinstance(data, str) else _decode(data)
    too_big = over_budget(text, path)
    if too_big is not None:
        return None, text, too_big
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        msg = exc.msg.splitlines()[0] if exc.msg else "invalid syntax"
        return None, text, FileError(path, f"not valid Python: {msg}", exc.lineno or 0, exc.offset or 0)
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return None, text, FileError(path, f"not valid Python: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return tree, text, None


def _silenced(f: Located, ignore: frozenset[str], lines: List[str]) -> bool:
    """Silenced by ``--ignore`` (its id or area) or by a ``# noqa`` comment on its whole line."""
    if f.id in ignore or f.id.split(".", 1)[0] in ignore:
        return True
    line = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
    if "noqa" not in line.lower():
        return False
    m = _NOQA.search(line)
    if m is None:
        return False
    listed = m.group("ids")
    return not listed or f.id in re.split(r"[,\s]+", listed)


def summarise(path: str, data: bytes, room: int) -> Optional[Summaries]:
    """What the top-level functions of an imported module of the project give (project.py), or None
    when it is not valid Python or parsing it needs more than ``room`` bytes of memory."""
    text = _decode(data)
    if estimated_memory(text) > room:
        return None
    tree, text, error = parse(text, path)
    if tree is None or error is not None:
        return None
    try:
        script = Script(tree, text, path)
        return {name: FunctionSummary(return_kind(script, f), script.function_kind(f) == "step", skips_sync(f))
                for name, f in top_functions(tree).items()}
    except (Exception, RecursionError):  # noqa: BLE001 - a module that cannot be read is unknown, never a crash
        return None


def project_for(path: str) -> Project:
    """The project a file or folder named on the command line belongs to: the folder itself, or the
    file's own folder."""
    root = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return Project(root, summarise, MAX_SCRIPT)


def lint_text(data: Union[str, bytes], path: str = "<string>", ignore: Iterable[str] = (),
              torchfix: bool = False, project: Optional[Project] = None) -> FileResult:
    """Lint source text (str or bytes); never raises.  The findings kept are bounded (result.py).
    ``project``: the folder tree whose modules the script's imports are read from (project.py)."""
    tree, text, error = parse(data, path)
    result = FileResult(path)
    if error is not None or tree is None:
        result.error = error
        return result
    lines = text.splitlines()
    found: Iterable[Located]
    try:
        room = MEMORY_BUDGET - estimated_memory(text)
        script = Script(tree, text, path, project=project, room=room)
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - a crash is a finding, never a traceback
        crash = finding("script.E001", about=path, error=f"reading: {type(exc).__name__}: {exc}"[:120])
        found = [located(path, 1, 1, crash, lines[0] if lines else "")]
    else:
        found = iter_checks(script)
        if torchfix:
            found = itertools.chain(found, torchfix_bridge.findings(script))
    silence = frozenset(ignore)
    kept = Kept()
    for f in found:
        if _silenced(f, silence, lines):
            result.suppressed += 1
        else:
            kept.add(f)
    result.findings, result.hidden = kept.result()
    return result


def tokens(text: str) -> int:
    """An upper bound of the number of syntax-tree nodes ``text`` parses into (each node needs a token)."""
    return _TOKEN.subn("", text)[1]


def estimated_memory(text: str) -> int:
    """Bytes of memory linting ``text`` may take at most, from its tokens and its length."""
    return tokens(text) * MEMORY_PER_TOKEN + len(text) * MEMORY_PER_CHAR


def over_budget(text: str, path: str) -> Optional[FileError]:
    """Why ``text`` is not parsed (its estimate exceeds MEMORY_BUDGET), or None."""
    need = estimated_memory(text)
    if need <= MEMORY_BUDGET:
        return None
    return FileError(path, f"too large to lint within lint's {inputs.size_text(MEMORY_BUDGET)} memory budget "
                           f"(its syntax tree could take {need // 2**20} MiB)")


def read_script(path: str) -> Tuple[bytes, Optional[FileError]]:
    """A script's bytes through the one door (a regular file only), or why it is not linted: a
    file larger than MAX_SCRIPT is refused unread (parse() refuses a smaller one too dense to parse
    within MEMORY_BUDGET)."""
    try:
        data = inputs.read_bytes(path, MAX_SCRIPT)
    except inputs.NotRegular as exc:
        return b"", FileError(path, f"is {exc.kind}, not a script")
    except OSError as exc:
        return b"", FileError(path, f"cannot read: {exc.strerror or exc}")
    if len(data) > MAX_SCRIPT:
        return b"", FileError(path, f"larger than {inputs.size_text(MAX_SCRIPT)}: too large to lint within lint's "
                                    f"{inputs.size_text(MEMORY_BUDGET)} memory budget")
    return data, None


def lint_file(path: str, ignore: Iterable[str] = (), torchfix: bool = False,
              walked: bool = False, project: Optional[Project] = None) -> Optional[FileResult]:
    """Lint one file; None when ``walked`` (found in a folder) and it mentions nothing the rules look for.
    ``project``: where its imports are read from (default: its own folder)."""
    data, error = read_script(path)
    if error is not None:
        return FileResult(path, error=error)
    if walked and not any(m in data for m in MARKERS):
        return None
    return lint_text(data, path, ignore, torchfix, project if project is not None else project_for(path))


def discover(paths: Sequence[str]) -> List[Tuple[str, bool]]:
    """(file, found by walking a folder) for every file to lint, folders walked for ``*.py`` in name order
    (the folders not entered: docs/lint.md); every path must exist."""
    return [(f, walked) for f, walked, _ in _discover(paths)]


def _discover(paths: Sequence[str]) -> List[Tuple[str, bool, str]]:
    """As :func:`discover`, with the path named on the command line each file came from."""
    for p in paths:
        try:
            os.stat(p)
        except FileNotFoundError:
            raise LintUsageError(f"{p}: no such file or directory") from None
        except OSError as exc:  # a loop of symbolic links, a folder not ours to enter
            raise LintUsageError(f"{p}: {inputs.os_reason(exc)}") from None
    files: List[Tuple[str, bool, str]] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                                 and not os.path.exists(os.path.join(root, d, "pyvenv.cfg")))
                files.extend((os.path.join(root, n), True, p) for n in sorted(names) if n.endswith(".py"))
        else:
            files.append((p, False, p))
    return files


def lint_paths(paths: Sequence[str], ignore: Iterable[str] = (), torchfix: Optional[bool] = None,
               on_file: Optional[Callable[[FileResult], None]] = None) -> Report:
    """Lint files and folders (recursing into *.py).  ``torchfix``: None uses it when installed.
    ``on_file`` is called with each file's result as soon as it is linted (the text report streams).

    Raises :class:`LintUsageError` for a path that does not exist, before linting anything.
    """
    start = time.perf_counter()
    files = _discover(paths)
    projects = {p: project_for(p) for p in paths}   # one per path named: each module is read once a run
    report = Report()
    use_tf = torchfix_bridge.version() if torchfix is not False else None
    if torchfix and use_tf is None:
        raise LintUsageError("--torchfix: TorchFix is not installed (pip install torchfix)")
    report.torchfix = use_tf
    silence = frozenset(ignore)
    for path, walked, named in files:
        res = lint_file(path, silence, bool(use_tf), walked, projects[named])
        if res is None:
            report.skipped += 1
            continue
        if on_file is not None:
            on_file(res)
        if res.error is not None:
            report.errors.append(res.error)
            continue
        report.files += 1
        report.suppressed += res.suppressed
        report.hidden.update(res.hidden)
        report.findings.extend(res.findings)
    report.seconds = time.perf_counter() - start
    return report


def known_id(value: str) -> bool:
    """An id (or area) that --ignore accepts: script.W001, script, torchfix.TOR101, torchfix."""
    return (value.startswith("script.") and value in catalogue()) or value in ("script", torchfix_bridge.AREA) \
        or bool(re.fullmatch(r"torchfix\.TOR\d+", value))
