"""The typer program: the app with every command registered (one module per command in this package)."""

import functools

import typer

from debtorch.__about__ import __version__
from debtorch.cli import _quiet_stdout, doctor, facts, fleet, lint, tune, verify_train
from debtorch.cli.shared import EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_PIPE
from debtorch.findings import CatalogueError
from debtorch.report import OutputFailed

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


def guarded(module, name: str):
    """The command ``name`` of ``module`` (its function of that name, its ``prog``), made to end
    the documented way on what any command may meet: Ctrl-C not handled by the command (130,
    one line), a standard output that cannot take the report (a broken pipe: 141, quiet;
    closed or full: 74, one line), and a malformed catalogue of finding ids (checks/findings/:
    2, one line, like every checks/ data file).  docs/cli.md lists the codes."""
    fn = getattr(module, name.replace("-", "_"))
    prog = module.prog

    @functools.wraps(fn)
    def command(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            prog.fail("interrupted", EXIT_INTERRUPTED)
        except CatalogueError as exc:
            prog.fail(str(exc))
        except BrokenPipeError:  # a progress line on a stderr whose reader went away
            _quiet_stdout()
            raise typer.Exit(EXIT_PIPE) from None
        except OutputFailed as exc:
            if exc.pipe:
                _quiet_stdout()
                raise typer.Exit(EXIT_PIPE) from None
            prog.fail(f"cannot write to standard output: {exc}", EXIT_OUTPUT)

    return command



for _module, _name in ((facts, "facts"), (doctor, "doctor"), (tune, "tune"), (verify_train, "verify-train"),
                       (lint, "lint"), (fleet, "fleet")):
    app.command(name=_name)(guarded(_module, _name))
