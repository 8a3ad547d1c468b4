"""What the commands show, in one place: one module per command's view, one console printer, one
JSON writer, the progress bars on stderr and ``--redact`` (docs/architecture.md).

A view lists its ``formats`` and has one method per format: ``lines()`` for
text, ``document()`` for JSON, ``env()`` for tune's shell exports.
:func:`show` is the one place where a format becomes output.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any, Dict, Iterable, Protocol, Tuple, Union, runtime_checkable

from debtorch.__about__ import __version__
from debtorch.report import console, jsonout
from debtorch.report.console import Line, Table


class Format(str, Enum):
    """Every output format of every command (docs/cli.md)."""

    text = "text"  # the readable view (the default)
    json = "json"  # --json: one document, strict JSON
    env = "env"    # tune --emit env: shell exports and the torchrun line


def plural(n: int, word: str) -> str:
    """ "1 error", "2 errors"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def document(schema_version: int, **fields: Any) -> Dict[str, Any]:
    """A ``--json`` document: its schema version and debtorch's version first, then ``fields``."""
    return {"schema_version": schema_version, "debtorch_version": __version__, **fields}


class OutputFailed(Exception):
    """Standard output could not take the report; ``str()`` says why in a few words.

    ``pipe``: the reader went away (``| head``), which is no error of ours; the
    command line exits quietly (docs/cli.md, exit codes 141 and 74)."""

    def __init__(self, reason: str, pipe: bool = False):
        super().__init__(reason)
        self.pipe = pipe


class View(Protocol):
    """A command's view: the formats it has, each with its method (:class:`TextView`,
    :class:`JsonView`, :class:`EnvView`)."""

    @property
    def formats(self) -> Tuple[Format, ...]: ...


@runtime_checkable
class TextView(Protocol):
    def lines(self) -> Iterable[Union[Line, Table]]: ...


@runtime_checkable
class JsonView(Protocol):
    def document(self) -> Dict[str, Any]: ...


@runtime_checkable
class EnvView(Protocol):
    def env(self) -> str: ...


def show(view: View, fmt: Format) -> None:
    """Print ``view`` on stdout in ``fmt``, which must be one of ``view.formats``.

    Raises :class:`OutputFailed` when stdout is closed, full or a broken pipe."""
    if fmt not in view.formats:
        raise ValueError(f"{type(view).__name__} has no {fmt.value} format")
    if sys.stdout is None:  # started with stdout closed (>&-): Python gives no stream at all
        raise OutputFailed("standard output is closed")
    try:
        if fmt is Format.text and isinstance(view, TextView):
            console.print_view(view.lines())
        elif fmt is Format.json and isinstance(view, JsonView):
            console.echo(jsonout.dumps(view.document()))
        elif fmt is Format.env and isinstance(view, EnvView):
            console.echo(view.env(), end="")
        else:  # a view that lists a format without its method: a bug of the view
            raise TypeError(f"{type(view).__name__} lists the {fmt.value} format but has no method for it")
        sys.stdout.flush()
    except BrokenPipeError:
        raise OutputFailed("the reader closed the pipe", pipe=True) from None
    except OSError as exc:
        raise OutputFailed(exc.strerror or str(exc)) from None
    except ValueError as exc:  # a stream closed under us ("I/O operation on closed file")
        if "closed file" not in str(exc):
            raise
        raise OutputFailed("standard output is closed") from None
