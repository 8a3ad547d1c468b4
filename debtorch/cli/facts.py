"""``debtorch facts``: what is known about the machine, with honest unknowns."""

from __future__ import annotations

from typing import Optional

import typer

from debtorch import facts as facts_mod
from debtorch.cli.shared import Prog, check_python, choose_format, collect, open_host
from debtorch.report import show

prog = Prog("debtorch")


def facts(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document (schema_version 1)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter whose PyTorch to inspect (default: $VIRTUAL_ENV's, else this one)."),
    data: Optional[str] = typer.Option(None, "--data", metavar="PATH", help="Where the training data lives: report its disk and filesystem."),
    deep: bool = typer.Option(False, "--deep", help="Import torch in the target interpreter and run it on each device (seconds)."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Describe a machine recorded in DIR instead of this one."),
    record: Optional[str] = typer.Option(None, "--record", metavar="DIR", help="Also copy everything read into DIR, for replay with --host."),
) -> None:
    """Print what is known about this machine, with honest unknowns."""
    from debtorch.report.facts import FactsView  # defer: the readable view, only for this command

    fmt = choose_format(prog, json_out)
    check_python(prog, python, elsewhere=bool(replay))
    host = open_host(prog, replay, record)
    try:
        doc = collect(host, facts_mod.Options(python=python, data=data, deep=deep))
        if record:
            prog.note(f"recorded this machine in {host.save().parent}")
    finally:
        if record:
            host.discard()   # an interrupted recording leaves nothing behind
    show(FactsView(doc), fmt)
