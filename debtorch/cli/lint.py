"""``debtorch lint PATH...``: the training loop's performance advice, checked in the script (docs/lint.md;
exit codes: docs/cli.md; a file that cannot be read or parsed is bad input, the others still linted).
The text report streams, a file's findings printed as soon as it is linted; ``--json`` prints one
document at the end."""

from typing import TYPE_CHECKING, List, Optional

import typer

from debtorch.cli.shared import FailOn, Prog, choose_format, present, redactor
from debtorch.host import LiveHost
from debtorch.report import Format
from debtorch.textsafe import printable

if TYPE_CHECKING:
    from debtorch.lint.api import FileResult

prog = Prog("debtorch lint")


def lint(
    paths: List[str] = typer.Argument(..., metavar="PATH", help="Python files, or folders to search for *.py."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object: schema_version, summary, findings, errors."),
    fail_on: FailOn = typer.Option("warning", "--fail-on", help="Exit 1 when a finding reaches this level."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", metavar="ID", help="Silence an id (script.W001) or an area (torchfix); repeatable."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also say why each finding costs time."),
    torchfix: Optional[bool] = typer.Option(None, "--torchfix/--no-torchfix", help="Include TorchFix's findings (default: when it is installed)."),
    redact: bool = typer.Option(False, "--redact", help="Replace this machine's host and user names, home paths and addresses in the paths and messages."),
) -> None:
    """Check training scripts for what makes a loop slow: host waits, DataLoader settings, AMP, accumulation.

    Exit status: 0 no finding at --fail-on level (default warning), 1 findings at that level, 2 bad input.
    """
    from debtorch.lint.api import LintUsageError, known_id, lint_paths  # defer: the linter, only for this command
    from debtorch.report.lint import FileView, LintView  # defer: as above

    fmt = choose_format(prog, json_out)
    silenced = [x.strip() for item in (ignore or []) for x in item.split(",") if x.strip()]
    for value in silenced:
        if not known_id(value):
            prog.fail(f"--ignore {printable(value)}: not a lint id (script.W001 ... script.I006, "
                      f"torchfix.TORnnn) or area")
    r = redactor(host=LiveHost()) if redact else None

    def note_error(res: "FileResult") -> None:
        if res.error is not None:
            line = printable(res.error.line_text())
            prog.note(r.text(line) if r else line)

    def stream(res: "FileResult") -> None:
        note_error(res)
        if res.error is None and (res.findings or sum(res.hidden.values())):
            present(FileView(res.path, res.findings, sum(res.hidden.values()), verbose), Format.text, r)

    try:
        report = lint_paths(paths, ignore=silenced, torchfix=torchfix,
                            on_file=stream if fmt is Format.text else note_error)
    except LintUsageError as exc:
        prog.fail(printable(str(exc)))
    code = report.exit_code(fail_on.value)
    present(LintView(report, fail_on.value, code, verbose, streamed=fmt is Format.text), fmt, r)
    raise typer.Exit(code)
