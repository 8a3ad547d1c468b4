"""``debtorch lint``: compiler-style text (``path:line:col: id message``) and one JSON object.

The text report streams: one :class:`FileView` per file as soon as it is linted, then the
:class:`LintView`'s summary (``LintView.lines()`` gives the whole report at once, for callers that
have it).  File names, code lines and messages come from the linted files, so every text line is
shown with control characters and bidirectional overrides escaped (:func:`debtorch.textsafe.printable`,
the rule of every text report; the console printer applies it again).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

from debtorch.findings import catalogue
from debtorch.lint.result import PER_FILE, PER_LINE, SCHEMA_VERSION, Located, Report
from debtorch.report import Format, document, plural
from debtorch.report.console import Line
from debtorch.textsafe import printable

INDENT = "    "

def finding_lines(found: Iterable[Located], verbose: bool = False) -> List[str]:
    """``path:line:col: id message``, the code excerpt and ``fix:`` under it (``why:`` with --verbose)."""
    out: List[str] = []
    for f in sorted(found, key=Located.sort_key):
        out.append(f"{f.path}:{f.line}:{f.col}: {f.id} {f.finding.message}")
        code = f.code.strip().expandtabs(4)  # a tab in code is layout, not a control to escape
        if code:
            out.append(INDENT + code)
        if f.finding.fix:
            out.append(INDENT + "fix: " + f.finding.fix)
        rule = catalogue().get(f.id)
        if verbose and rule is not None:
            out.append(INDENT + "why: " + rule.why)
    return [printable(line) for line in out]


def hidden_line(path: str, hidden: int) -> str:
    """The line that says how many findings of a file are not shown."""
    return printable(f"{path}: {plural(hidden, 'more finding')} not shown "
                            f"(at most {PER_LINE} a line and {PER_FILE} a file)")


def text_lines(report: Report, verbose: bool = False) -> List[str]:
    """The whole text report at once: every file's findings, then the summary."""
    out = finding_lines(report.findings, verbose)
    out.append(summary(report))
    return out


def summary(report: Report) -> str:
    c = report.counts()
    files = plural(report.files, "file")
    total = sum(c.values())
    if total:
        parts = [plural(n, name) if name != "info" else f"{n} info"
                 for name, n in (("error", c["error"]), ("warning", c["warning"]), ("info", c["info"])) if n]
        head = f"{plural(total, 'finding')} ({', '.join(parts)}) in {files}"
    else:
        head = f"no findings in {files}"
    extra = []
    if report.not_shown():
        extra.append(f"{report.not_shown()} not shown")
    if report.skipped:
        extra.append(f"{report.skipped} skipped: no PyTorch in them")
    if report.errors:
        extra.append(f"{len(report.errors)} not linted")
    if report.suppressed:
        extra.append(f"{report.suppressed} silenced")
    if report.torchfix:
        extra.append(f"with TorchFix {printable(report.torchfix)}")
    return head + (f" ({'; '.join(extra)})" if extra else "")


class FileView:
    """One file's findings as text, printed as soon as the file is linted."""

    formats = (Format.text,)

    def __init__(self, path: str, found: List[Located], hidden: int, verbose: bool = False):
        self.path, self.found, self.hidden, self.verbose = path, found, hidden, verbose

    def lines(self) -> List[Line]:
        out = [Line(text) for text in finding_lines(self.found, self.verbose)]
        if self.hidden:
            out.append(Line(hidden_line(self.path, self.hidden)))
        return out


class LintView:
    """The run: its summary line (``streamed``: the files' lines were printed already), or the whole
    report; and the JSON document."""

    formats = (Format.text, Format.json)

    def __init__(self, report: Report, fail_on: str, exit_code: int, verbose: bool = False, streamed: bool = False):
        self.report, self.fail_on, self.exit_code, self.verbose = report, fail_on, exit_code, verbose
        self.streamed = streamed

    def lines(self) -> List[Line]:
        if self.streamed:
            return [Line(summary(self.report))]
        return [Line(text) for text in text_lines(self.report, self.verbose)]

    def document(self) -> Dict[str, Any]:
        return to_json(self.report, self.fail_on, self.exit_code)


def to_json(report: Report, fail_on: str, exit_code: int) -> Dict[str, Any]:
    return document(
        SCHEMA_VERSION,
        exit_code=exit_code,
        fail_on=fail_on,
        summary={**report.counts(), "files": report.files, "skipped": report.skipped,
                 "not_linted": len(report.errors), "silenced": report.suppressed,
                 "not_shown": report.not_shown()},
        torchfix=report.torchfix,
        findings=[f.to_json() for f in sorted(report.findings, key=Located.sort_key)],
        errors=[e.to_json() for e in report.errors],
    )
