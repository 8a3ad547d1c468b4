"""The command line: one module per command (debtorch/cli/facts.py, doctor.py,
tune.py, verify_train.py) and what they share (debtorch/cli/shared.py: exit
codes, the one-line failure, the output format, the machine to read).

Thin: a command parses arguments, calls library functions, shows a view
(debtorch/report) and chooses the exit code.  Written in the
``param: T = typer.Option(...)`` style so that Debian 12's typer 0.7 runs it
(no Annotated, no ``X | None``).  A command imports what only it uses inside
its function (``# defer``), so that ``debtorch doctor`` loads no tuner.
"""

from __future__ import annotations

import signal
import sys

import typer

from debtorch import __version__
from debtorch.cli import doctor, facts, lint, tune, verify_train
from debtorch.cli.shared import EXIT_INTERRUPTED

app = typer.Typer(
    name="debtorch",
    help="Is this Debian machine right for PyTorch training, and how should it train?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"debtorch {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """debtorch: doctor, tuner and training benchmark for PyTorch on Debian."""


app.command(name="facts")(facts.facts)
app.command(name="doctor")(doctor.doctor)
app.command(name="tune")(tune.tune)
app.command(name="verify-train")(verify_train.verify_train)
app.command(name="lint")(lint.lint)


def _terminated(signum, frame) -> None:
    # SIGTERM (kill, a batch scheduler's timeout) unwinds like an exit, so the
    # training worker is stopped and its temporary folder removed.
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("debtorch: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    main()
