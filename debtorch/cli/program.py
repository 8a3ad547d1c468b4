"""The typer program: the app with every command registered (one module per command in this package)."""

from __future__ import annotations

import typer

from debtorch import __version__
from debtorch.cli import doctor, facts, fleet, lint, tune, verify_train

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
app.command(name="fleet")(fleet.fleet)
