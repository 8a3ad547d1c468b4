"""``debtorch lint PATH...``: the training loop's performance advice, checked in the script (docs/lint.md).

Thin: parse options, call :func:`debtorch.lint.api.lint_paths`, render, choose
the exit code.  Exit codes (the doctor's): 0 no finding at ``--fail-on``
level; 1 findings at that level; 2 bad input (a path that does not exist, a
file that is not valid Python or cannot be read; the other files are still
linted and reported), 130 interrupted.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import List, Optional

import typer

from debtorch.commands import fail

PROG = "debtorch lint"


class FailOn(str, Enum):
    error = "error"
    warning = "warning"


def lint(
    paths: List[str] = typer.Argument(..., metavar="PATH", help="Python files, or folders to search for *.py."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object: schema_version, summary, findings, errors."),
    fail_on: FailOn = typer.Option("error", "--fail-on", help="Exit 1 when a finding reaches this level."),
    ignore: Optional[List[str]] = typer.Option(None, "--ignore", metavar="ID", help="Silence an id (script.W001) or an area (torchfix); repeatable."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also say why each finding costs time."),
    torchfix: Optional[bool] = typer.Option(None, "--torchfix/--no-torchfix", help="Include TorchFix's findings (default: when it is installed)."),
) -> None:
    """Check training scripts for what makes a loop slow: host waits, DataLoader settings, AMP, accumulation.

    Exit status: 0 no finding at --fail-on level, 1 findings at that level, 2 bad input.
    """
    # Imported here, like the other commands' libraries, so that every other command starts
    # without loading the linter (and the doctor's package, whose Finding it uses).
    from debtorch.lint.api import LintUsageError, known_id, lint_paths
    from debtorch.lint.render import text_lines, to_json
    silenced = [x.strip() for item in (ignore or []) for x in item.split(",") if x.strip()]
    for value in silenced:
        if not known_id(value):
            fail(PROG, f"--ignore {value}: not a lint id (script.W001 ... script.I006, torchfix.TORnnn) or area")
    try:
        report = lint_paths(paths, ignore=silenced, torchfix=torchfix)
    except LintUsageError as exc:
        fail(PROG, str(exc))
    code = report.exit_code(fail_on.value)
    for err in report.errors:
        typer.echo(f"{PROG}: {err.line_text()}", err=True)
    if json_out:
        typer.echo(json.dumps(to_json(report, fail_on.value, code), indent=2))
    else:
        typer.echo("\n".join(text_lines(report, verbose=verbose)))
    raise typer.Exit(code)
