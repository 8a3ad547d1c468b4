"""The command line.  Thin: parse arguments, call a library function, render,
choose the exit code.  Written in the ``param: T = typer.Option(...)`` style
so that Debian 12's typer 0.7 runs it (no Annotated, no ``X | None``).

Exit codes (docs/cli.md): 0 fine; 1 findings at or above ``--fail-on``, or a
run that failed; 2 bad usage or unreadable input.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import List, Optional

import typer

from debtorch import __version__

app = typer.Typer(
    name="debtorch",
    help="Is this Debian machine right for PyTorch training, and how should it train?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2


class Format(str, Enum):
    text = "text"
    json = "json"


def fail(message: str, code: int = EXIT_USAGE) -> "typer.Exit":
    """Print one line to stderr and leave with ``code``."""
    typer.echo(f"debtorch: {message}", err=True)
    raise typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"debtorch {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_callback(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """debtorch: doctor, tuner and training benchmark for PyTorch on Debian."""


def _host(replay: Optional[str], record: Optional[str] = None):
    from debtorch.host import LiveHost, RecordingHost, ReplayHost, Unavailable

    if replay and record:
        fail("--host and --record cannot be used together")
    if replay:
        try:
            return ReplayHost(replay)
        except Unavailable as exc:
            fail(f"--host {exc.reason}")
    if record:
        from debtorch.facts.apt import DPKG_STATUS, trim_dpkg_status

        return RecordingHost(record, trim={DPKG_STATUS: trim_dpkg_status})
    return LiveHost()


@app.command()
def facts(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document (schema_version 1)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter whose PyTorch to inspect (default: $VIRTUAL_ENV's, else this one)."),
    data: Optional[str] = typer.Option(None, "--data", metavar="PATH", help="Where the training data lives: report its disk and filesystem."),
    deep: bool = typer.Option(False, "--deep", help="Import torch in the target interpreter and run it on each device (seconds)."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Describe a machine recorded in DIR instead of this one."),
    record: Optional[str] = typer.Option(None, "--record", metavar="DIR", help="Also copy everything read into DIR, for replay with --host."),
) -> None:
    """Print what is known about this machine, with honest unknowns."""
    from debtorch import facts as facts_mod
    from debtorch import render

    host = _host(replay, record)
    try:
        doc = facts_mod.collect(host, facts_mod.Options(python=python, data=data, deep=deep))
    finally:
        host.close()
    if record:
        path = host.save()
        typer.echo(f"debtorch: recorded this machine in {path.parent}", err=True)
    if json_out:
        typer.echo(json.dumps(doc, indent=2, sort_keys=False, default=_json_default))
    else:
        render.print_facts(doc)


# --- debtorch tune (issue 4): the command lives in debtorch/commands/tune.py ---
from debtorch.commands.tune import tune as _tune  # noqa: E402

app.command(name="tune")(_tune)
# --- end debtorch tune -------------------------------------------------------


def _json_default(obj):
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("debtorch: interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
