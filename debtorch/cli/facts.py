"""``debtorch facts``: what is known about the machine, with honest unknowns."""

from typing import Optional

import typer

from debtorch import facts as facts_mod
from debtorch.cli.shared import (
    Prog,
    check_python,
    choose_format,
    collect,
    given_paths,
    open_host,
    present,
    redactor,
)
from debtorch.host import Unavailable

prog = Prog("debtorch")


def facts(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document (schema_version 1)."),
    python: Optional[str] = typer.Option(None, "--python", metavar="PATH", help="Interpreter whose PyTorch to inspect (default: $VIRTUAL_ENV's, else this one)."),
    data: Optional[str] = typer.Option(None, "--data", metavar="PATH", help="Where the training data lives: report its disk and filesystem."),
    deep: bool = typer.Option(False, "--deep", help="Import torch in the target interpreter and run it on each device (seconds)."),
    replay: Optional[str] = typer.Option(None, "--host", metavar="DIR", help="Describe a machine recorded in DIR instead of this one."),
    record: Optional[str] = typer.Option(None, "--record", metavar="DIR", help="Also copy everything read into DIR, for replay with --host."),
    redact: bool = typer.Option(False, "--redact", help="Replace host and user names, home paths, serials, UUIDs, MAC and IP addresses (in a --record DIR too)."),
) -> None:
    """Print what is known about this machine, with honest unknowns."""
    from debtorch.report.facts import FactsView  # defer: the readable view, only for this command

    fmt = choose_format(prog, json_out)
    given_paths(prog, data=data, host=replay, record=record, python=python)
    check_python(prog, python, elsewhere=bool(replay))
    host = open_host(prog, replay, record)
    try:
        doc = collect(prog, host, facts_mod.Options(python=python, data=data, deep=deep))
        r = redactor(doc) if redact else None
        if record:
            # With --redact the recording itself is redacted (file contents, names, links and
            # _host.json alike), so that it can be attached to a public bug report.
            with prog.fails_on(Unavailable, prefix="--record "):
                saved = host.save(rewrite=r.recorded if r else None)
            prog.note(f"recorded this machine in {r.text(str(saved.parent)) if r else saved.parent}"
                      + (" (redacted)" if r else ""))
    finally:
        if record:
            host.discard()   # an interrupted recording leaves nothing behind
    present(FactsView(doc), fmt, r)
