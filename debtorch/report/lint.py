"""``debtorch lint``: compiler-style text (``path:line:col: id message``) and one JSON object."""

from __future__ import annotations

from typing import List

from debtorch.findings import catalogue
from debtorch.lint.result import SCHEMA_VERSION, Report
from debtorch.report import Format, document, plural
from debtorch.report.console import Line

INDENT = "    "


def text_lines(report: Report, verbose: bool = False) -> List[str]:
    """``path:line:col: id message``, the code line and ``fix:`` under it (``why:`` with --verbose), a summary."""
    out: List[str] = []
    for f in sorted(report.findings, key=lambda x: x.sort_key()):
        out.append(f"{f.path}:{f.line}:{f.col}: {f.id} {f.finding.message}")
        if f.code.strip():
            out.append(INDENT + f.code.strip())
        if f.finding.fix:
            out.append(INDENT + "fix: " + f.finding.fix)
        rule = catalogue().get(f.id)
        if verbose and rule is not None:
            out.append(INDENT + "why: " + rule.why)
    out.append(summary(report))
    return out


def summary(report: Report) -> str:
    c = report.counts()
    files = plural(report.files, "file")
    if report.findings:
        parts = [plural(n, name) if name != "info" else f"{n} info"
                 for name, n in (("error", c["error"]), ("warning", c["warning"]), ("info", c["info"])) if n]
        head = f"{plural(len(report.findings), 'finding')} ({', '.join(parts)}) in {files}"
    else:
        head = f"no findings in {files}"
    extra = []
    if report.skipped:
        extra.append(f"{report.skipped} skipped: no PyTorch in them")
    if report.errors:
        extra.append(f"{len(report.errors)} not linted")
    if report.suppressed:
        extra.append(f"{report.suppressed} silenced")
    if report.torchfix:
        extra.append(f"with TorchFix {report.torchfix}")
    return head + (f" ({'; '.join(extra)})" if extra else "")


class LintView:
    formats = (Format.text, Format.json)

    def __init__(self, report: Report, fail_on: str, exit_code: int, verbose: bool = False):
        self.report, self.fail_on, self.exit_code, self.verbose = report, fail_on, exit_code, verbose

    def lines(self) -> list:
        return [Line(text) for text in text_lines(self.report, self.verbose)]

    def document(self) -> dict:
        return to_json(self.report, self.fail_on, self.exit_code)


def to_json(report: Report, fail_on: str, exit_code: int) -> dict:
    return document(
        SCHEMA_VERSION,
        exit_code=exit_code,
        fail_on=fail_on,
        summary={**report.counts(), "files": report.files, "skipped": report.skipped,
                 "not_linted": len(report.errors), "silenced": report.suppressed},
        torchfix=report.torchfix,
        findings=[f.to_json() for f in sorted(report.findings, key=lambda x: x.sort_key())],
        errors=[e.to_json() for e in report.errors],
    )
