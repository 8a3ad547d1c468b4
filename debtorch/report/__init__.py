"""What the commands show, in one place.

One module per command's view (:mod:`~debtorch.report.facts`,
:mod:`~debtorch.report.doctor`, :mod:`~debtorch.report.tune`,
:mod:`~debtorch.report.verify`, with verify-train's plot in
:mod:`~debtorch.report.plot`), one console printer
(:mod:`~debtorch.report.console`), one JSON writer
(:mod:`~debtorch.report.jsonout`), the progress bars on stderr
(:mod:`~debtorch.report.progress`) and ``--redact``
(:mod:`~debtorch.report.redact`).

A view lists its ``formats`` and has one method per format: ``lines()`` for
text, ``document()`` for JSON, ``env()`` for tune's shell exports.
:func:`show` is the one place where a format becomes output.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import assert_never

from debtorch.report import console, jsonout


class Format(str, Enum):
    """Every output format of every command (docs/cli.md)."""

    text = "text"  # the readable view (the default)
    json = "json"  # --json: one document, strict JSON
    env = "env"    # tune --emit env: shell exports and the torchrun line


class OutputFailed(Exception):
    """Standard output could not take the report; ``str()`` says why in a few words.

    ``pipe``: the reader went away (``| head``), which is no error of ours; the
    command line exits quietly (docs/cli.md, exit codes 141 and 74)."""

    def __init__(self, reason: str, pipe: bool = False):
        super().__init__(reason)
        self.pipe = pipe


def show(view, fmt: Format) -> None:
    """Print ``view`` on stdout in ``fmt``, which must be one of ``view.formats``.

    Raises :class:`OutputFailed` when stdout is closed, full or a broken pipe."""
    if fmt not in view.formats:
        raise ValueError(f"{type(view).__name__} has no {fmt.value} format")
    if sys.stdout is None:  # started with stdout closed (>&-): Python gives no stream at all
        raise OutputFailed("standard output is closed")
    try:
        if fmt is Format.text:
            console.print_view(view.lines())
        elif fmt is Format.json:
            console.echo(jsonout.dumps(view.document()))
        elif fmt is Format.env:
            console.echo(view.env(), end="")
        else:
            assert_never(fmt)
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputFailed("the reader closed the pipe", pipe=True) from None
    except OSError as exc:
        raise OutputFailed(exc.strerror or str(exc)) from None
    except ValueError as exc:  # a stream closed under us ("I/O operation on closed file")
        if "closed file" not in str(exc):
            raise
        raise OutputFailed("standard output is closed") from None
