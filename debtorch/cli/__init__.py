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

__all__ = ["app", "main"]

# Commands whose facts come from this machine's target interpreter (the light probe).
_PROBED = ("facts", "doctor")
_ELSEWHERE = ("--host", "--facts", "--from-collect-env", "--record", "--help")


def __getattr__(name: str):
    if name == "app":  # `from debtorch.cli import app` (tests, the man page)
        from debtorch.cli.program import app  # defer: typer and every command, after main() started the probe

        return app
    raise AttributeError(name)


def _prestart_probe(args: list) -> None:
    """`debtorch facts|doctor` on this machine: start the target interpreter's probes before
    debtorch imports the rest of itself, so that they run meanwhile (the probe is about half
    of doctor's time).  Anything unusual (another machine, --help, a typo) starts nothing;
    the command then runs the probe as usual."""
    if not args or args[0] not in _PROBED:
        return
    opts = args[1:]
    if any(o.split("=", 1)[0] in _ELSEWHERE for o in opts):
        return
    python = None
    for i, o in enumerate(opts):
        if o == "--python" and i + 1 < len(opts):
            python = opts[i + 1]
        elif o.startswith("--python="):
            python = o.split("=", 1)[1]
    from debtorch.host import LiveHost, prestart  # defer: as light as it gets, before the rest
    from debtorch.probes import source  # defer: as above

    host = LiveHost()
    py = host.program(python) if python else host.default_python
    prestart([py, "-c", source("light")])
    if "--deep" in opts:
        prestart([py, "-c", source("deep")])


def _terminated(signum, frame) -> None:
    # SIGTERM (kill, a batch scheduler's timeout) unwinds like an exit, so the
    # training worker is stopped and its temporary folder removed.
    raise SystemExit(128 + signum)


def main() -> None:
    """Console-script entry point."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)
    _prestart_probe(sys.argv[1:])
    import typer  # defer: after the probe started

    from debtorch.cli.program import app  # defer: as above
    from debtorch.cli.shared import EXIT_INTERRUPTED  # defer: as above

    try:
        app()
    except KeyboardInterrupt:
        typer.echo("debtorch: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":  # pragma: no cover
    main()
