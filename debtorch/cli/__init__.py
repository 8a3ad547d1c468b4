"""The command line: one module per command (debtorch/cli/facts.py, doctor.py,
tune.py, verify_train.py) and what they share (debtorch/cli/shared.py: exit
codes, the one-line failure, the output format, the machine to read).

Thin: a command parses arguments, calls library functions, shows a view
(debtorch/report) and chooses the exit code.  Written in the
``param: T = typer.Option(...)`` style so that Debian 12's typer 0.7 runs it
(no Annotated, no ``X | None``).  A command imports what only it uses inside
its function (``# defer``), so that ``debtorch doctor`` loads no tuner.
The command modules do not use ``from __future__ import annotations``: typer
reads every command's annotations at each start, and as strings they are
compiled and evaluated again each time (10 ms of the doctor's start).
"""

from __future__ import annotations

import errno
import gc
import os
import signal
import sys
from typing import Any, TextIO

from debtorch.cli.codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OUTPUT, EXIT_PIPE

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


class _Forgiving:
    """Standard error that never raises: a note that cannot be written (a full disk, a reader gone)
    is lost, and the command's standard output, the files it writes and its exit code stay what
    they would have been.  Everything but ``write`` and ``flush`` is the stream's own; writing
    bytes still raises TypeError, as click's probe for a binary stream expects."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):  # ENOSPC, EPIPE, EIO; "I/O operation on closed file"
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Closed:
    """Standard output when debtorch was started with it closed (``>&-``; Python gives None): every
    write fails as a closed descriptor would, so that --help and --version end like every command
    (one line, exit 74) instead of printing nothing and exiting 0."""

    encoding = "utf-8"
    errors = "strict"

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _guard_streams() -> None:
    """stderr that cannot fail the command, and a closed stdout that says so when written."""
    if sys.stderr is not None:
        sys.stderr = _Forgiving(sys.stderr)  # type: ignore[assignment]
    if sys.stdout is None:
        sys.stdout = _Closed()  # type: ignore[assignment]


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


def _is_null() -> bool:
    """Whether stdout is /dev/null: rich makes it so when its reader went away (--help | head)."""
    try:
        return os.path.samestat(os.fstat(1), os.stat(os.devnull))
    except OSError:
        return False


def main() -> None:
    """Console-script entry point."""
    _install_handlers()
    _guard_streams()
    code = 0
    null_before = _is_null()
    try:
        _prestart_probe(sys.argv[1:])
        from debtorch.cli.program import app  # defer: typer and every command, after the probe started

        app()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_FAILED)
        if code == EXIT_FAILED and (type(sys.stdout).__name__ == "PacifyFlushWrapper" or _is_null() > null_before):
            _quiet_stdout()  # click's and rich's answer to a reader that went away (--help | head) is 1
            code = EXIT_PIPE
    except OSError as exc:  # what click does not catch: --help or --version on a full disk
        _quiet_stdout()
        code = EXIT_PIPE if exc.errno == errno.EPIPE else EXIT_OUTPUT
        if code == EXIT_OUTPUT:
            sys.stderr.write(f"debtorch: cannot write to standard output: {exc.strerror or exc}\n")
    except KeyboardInterrupt:  # before a command started (imports)
        sys.stderr.write("debtorch: interrupted\n")
        code = EXIT_INTERRUPTED
    finally:
        first = _ending[0] if _ending else None
        _ending.append(None)  # from here on, no signal interrupts the clean-up ...
        for sig in ENDING_SIGNALS:  # ... nor the exit (Python's finalisation restores the defaults)
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, signal.SIG_IGN)
        from debtorch import outputs  # defer: imported by every command that writes; cheap

        outputs.remove_temporary()
    if first not in (None, signal.SIGINT):  # SIGINT said "interrupted" already
        try:
            sys.stderr.write(f"debtorch: stopped by {signal.Signals(first).name}\n")
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
    # Every file was closed and every temporary folder removed above; the collections of the
    # interpreter's exit would only walk every object once more (docs/performance.md: ~15% of
    # the doctor's CPU time).
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
