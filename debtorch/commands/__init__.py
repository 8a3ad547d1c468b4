"""Command functions registered in debtorch/cli.py, one module per command, and what they share:
the exit codes, the ``--device`` choice and the one-line error."""

from __future__ import annotations

from enum import Enum

import typer

# Exit codes, the same for every command (docs/cli.md).
EXIT_OK = 0
EXIT_FAILED = 1        # doctor: errors found; tune/verify-train: the measurement failed
EXIT_USAGE = 2         # bad usage or unreadable input
EXIT_INTERRUPTED = 130  # Ctrl-C, after printing what was measured


def exit_for(failure) -> int:
    """The exit code for a failed run: 2 when it was about the user's input (a workload,
    an interpreter without torch, a device: ``failure.user_input``), else 1."""
    return EXIT_USAGE if getattr(failure, "user_input", False) else EXIT_FAILED


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


def fail(prog: str, message: str, code: int = EXIT_USAGE) -> "typer.Exit":
    """Print ``prog: message`` as one line on stderr and leave with ``code``; no traceback."""
    typer.echo(f"{prog}: {message}", err=True)
    raise typer.Exit(code)


def warn(prog: str, message: str) -> None:
    typer.echo(f"{prog}: warning: {message}", err=True)
