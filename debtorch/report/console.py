"""The console printer: every readable view is printed here, on stdout.

A renderer gives each line a kind (``plain``, ``info``, ``ok``, ``warning``,
``error``, ``crash``); the printer styles it by that kind (colour shows only
on a terminal), never by reading the text back.  Tables are printed by rich,
at a fixed width in a log or a pipe.  Nothing is parsed as markup or emoji.
Every line, title and cell goes through :func:`debtorch.textsafe.printable`
here, whatever view made it: text from a facts document, a recording, a fleet
document or a linted file never reaches the terminal as control characters.
Writes are checked whole: a reader that leaves mid-report is a broken pipe,
never a report cut short in silence.
"""

from __future__ import annotations

import errno
import os
import sys
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, TextIO, Union

from debtorch.textsafe import printable

STYLES = {"plain": "", "info": "", "ok": "green", "warning": "yellow", "error": "red", "crash": "magenta",
          "unknown": "cyan"}
LOG_WIDTH = 110  # a table written to a log or a pipe: no terminal to fit


class Line(NamedTuple):
    text: str
    kind: str = "plain"


@dataclass
class Table:
    title: str
    columns: tuple  # the first is left-aligned, the others right-aligned
    rows: list = field(default_factory=list)


def texts(items: Iterable[Union[Line, Table]]) -> list:
    """The text of each line (tables left out): what tests and callers compare."""
    return [item.text for item in items if isinstance(item, Line)]


def print_view(items: Iterable[Union[Line, Table]], file: Optional[TextIO] = None) -> None:
    """Print on stdout (or ``file``)."""
    items = list(items)
    out = file or sys.stdout
    if not any(isinstance(i, Table) for i in items) and not _terminal(out):
        # Lines for a pipe or a log: no colour to add, nothing to wrap, and no rich to import
        # (debtorch doctor's start-up time).
        write_all(out, "".join(printable(item.text) + "\n" for item in items if isinstance(item, Line)))
        return
    from rich.console import Console  # defer: colour and tables only where they show
    from rich.table import Table as RichTable  # defer: as above
    from rich.text import Text  # defer: as above

    class Quiet(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 ("findings"); the command line chooses the code (docs/cli.md).
            self.quiet = True
            raise BrokenPipeError

    console = Quiet(file=file, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console = Quiet(file=file, highlight=False, soft_wrap=True, width=LOG_WIDTH)
    for item in items:
        if isinstance(item, Table):
            table = RichTable(title=Text(printable(item.title)), title_justify="left")
            for i, name in enumerate(item.columns):
                table.add_column(Text(printable(name)), justify="right" if i else "left")
            for row in item.rows:
                table.add_row(*(Text(printable(cell)) for cell in row))
            console.print(table, soft_wrap=False)
        else:
            console.print(Text(printable(item.text), style=STYLES[item.kind]))


def _terminal(out: TextIO) -> bool:
    """Would rich colour this stream? A terminal, or FORCE_COLOR / TTY_COMPATIBLE asking for it."""
    if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return True
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def echo(text: str, end: str = "\n") -> None:
    """Unstyled text on stdout (a JSON document, shell exports), as it is."""
    write_all(sys.stdout, text + end)


def write_all(out: TextIO, text: str) -> None:
    """``text`` on ``out``, flushed, every byte of it or an OSError.

    Python's buffered writer answers a pipe whose reader left during a large write with the count
    it managed, and raises nothing (the text layer above it then says it wrote everything): the
    rest is written again here, which raises the broken pipe (docs/cli.md, exit 141)."""
    buffer = getattr(out, "buffer", None)
    if buffer is None or not hasattr(out, "encoding"):  # an in-memory stream (a test's runner)
        out.write(text)
        out.flush()
        return
    out.flush()
    data = memoryview(text.encode(out.encoding or "utf-8", getattr(out, "errors", None) or "strict"))
    while data:
        written = buffer.write(data)
        if not written:
            raise OSError(errno.EIO, "standard output took nothing")
        data = data[written:]
    buffer.flush()
