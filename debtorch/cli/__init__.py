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

import functools
import os
import signal
import sys

import typer

from debtorch import __version__, outputs
from debtorch.cli import doctor, facts, lint, tune, verify_train
from debtorch.cli.shared import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_PIPE
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
    one line), and a standard output that cannot take the report (a broken pipe: 141, quiet;
    closed or full: 74, one line).  docs/cli.md lists the codes."""
    fn = getattr(module, name.replace("-", "_"))
    prog = module.prog

    @functools.wraps(fn)
    def command(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            prog.fail("interrupted", EXIT_INTERRUPTED)
        except BrokenPipeError:  # a progress line on a stderr whose reader went away
            _quiet_stdout()
            raise typer.Exit(EXIT_PIPE)
        except OutputFailed as exc:
            if exc.pipe:
                _quiet_stdout()
                raise typer.Exit(EXIT_PIPE)
            prog.fail(f"cannot write to standard output: {exc}", EXIT_OUTPUT)

    return command


for _module, _name in ((facts, "facts"), (doctor, "doctor"), (tune, "tune"), (verify_train, "verify-train"),
                       (lint, "lint")):
    app.command(name=_name)(guarded(_module, _name))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for a reader that went away is
    dropped, and Python's last flush at exit cannot fail (the Python documentation's advice
    for SIGPIPE, library/signal.html#note-on-sigpipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no real stdout (a test's runner)
        pass


# Signals that end a run: each unwinds like an exit with 128 + its number, so the training
# worker is stopped and temporary folders are removed.  SIGINT stays KeyboardInterrupt
# (verify-train reports what was measured so far).  Once one has arrived, later ones are
# ignored: the clean-up they would interrupt takes seconds and must finish.
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_ending = []


def _on_signal(signum, frame) -> None:
    if _ending:
        return
    _ending.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)


def _install_handlers() -> None:
    for sig in ENDING_SIGNALS:
        # A signal ignored by whoever started us (nohup ignores SIGHUP) stays ignored.
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _on_signal)


def main() -> None:
    """Console-script entry point."""
    _install_handlers()
    code = 0
    try:
        app()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_FAILED)
    except KeyboardInterrupt:  # before a command started (imports)
        typer.echo("debtorch: interrupted", err=True)
        code = EXIT_INTERRUPTED
    finally:
        first = _ending[0] if _ending else None
        _ending.append(None)  # from here on, no signal interrupts the clean-up ...
        for sig in ENDING_SIGNALS:  # ... nor the exit (Python's finalisation restores the defaults)
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, signal.SIG_IGN)
        outputs.remove_temporary()
    if first not in (None, signal.SIGINT):  # SIGINT said "interrupted" already
        try:
            typer.echo(f"debtorch: stopped by {signal.Signals(first).name}", err=True)
        except OSError:  # SIGHUP: the terminal may be gone
            pass
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        code = code or EXIT_PIPE
    except (OSError, ValueError):
        _quiet_stdout()
        code = code or EXIT_OUTPUT
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
