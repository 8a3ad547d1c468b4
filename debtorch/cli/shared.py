"""What the commands share: the exit codes, the one-line failure, the ``--device`` option, the output
format, the ``--python`` check, and the machine a command reads (``--host``, ``--record``, ``--facts``).
Only the command line leaves the process with an exit code (``typer.Exit``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Iterator, NoReturn, Optional

import typer

from debtorch import facts as facts_mod
from debtorch.cli.codes import (  # noqa: F401 - the commands import them from here
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_PIPE,
    EXIT_USAGE,
)
from debtorch.host import TIMED_OUT, Host, LiveHost, RecordingHost, ReplayHost, Unavailable
from debtorch.report import Format, View, show
from debtorch.textsafe import printable

if TYPE_CHECKING:   # names only: a --device is parsed only where a command trains, --redact only when asked
    from debtorch.report.redact import Redactor
    from debtorch.train.device import Device


def exit_for(failure: object) -> int:
    """The exit code for a run that failed: 2 when it was about the user's input
    (``failure.user_input``: a workload, an interpreter without torch, a device,
    a recorded machine), else 1."""
    return EXIT_USAGE if getattr(failure, "user_input", False) else EXIT_FAILED


DEVICE_HELP = ("cpu, cuda, cuda:N, or sim:RATE: an accelerator of RATE samples/s simulated on this machine "
               "(docs/engine.md)")


def device_option(prog: Prog, value: Optional[str]) -> Optional[Device]:
    """``--device``, parsed once (:func:`parse_device`): every layer below gets the :class:`Device`."""
    if value is None:
        return None
    with prog.fails_on(ValueError, prefix="--device "):
        return parse_device(value)


def parse_device(value: str) -> Device:
    """A device as a user writes it: cpu, cuda, cuda:N, or ``sim:RATE[,...]`` (a preset's name for RATE)
    with checks/thresholds.toml's defaults and presets; ValueError (one line) when it is not one."""
    from debtorch import knowledge  # defer: the doctor loads none of the training side
    from debtorch.train.device import Device  # defer: as above

    return Device.parse(value, knowledge.load().thresholds)


class FailOn(str, Enum):
    """--fail-on: the level of finding that makes the exit status 1 (doctor, lint)."""

    error = "error"
    warning = "warning"


class Emit(str, Enum):
    env = "env"


@dataclass(frozen=True)
class Prog:
    """A command's voice on stderr: ``debtorch tune: message``."""

    name: str

    def fail(self, message: str, code: int = EXIT_USAGE) -> NoReturn:
        """One line on stderr and leave with ``code``; no traceback."""
        self.note(message)
        raise typer.Exit(code)

    @contextlib.contextmanager
    def fails_on(self, *errors: type[BaseException], code: int = EXIT_USAGE, prefix: str = "") -> Iterator[None]:
        """A block in which any of ``errors`` ends the command: its one line (after ``prefix``), ``code``."""
        try:
            yield
        except errors as exc:
            self.fail(prefix + str(exc), code)

    def warn(self, message: str) -> None:
        self.note(f"warning: {message}")

    def note(self, message: str) -> None:
        typer.echo(f"{self.name}: {one_line(message)}", err=True)


def one_line(text: object) -> str:
    """``text`` with every line break and control character written as an escape (``\\x0a``, ``\\x1e``,
    ``\\u202e``): a key or value quoted from a file ("rlimits.\\x1e") must not break the one line
    (:func:`debtorch.textsafe.printable`, the rule of every text report)."""
    return printable(text)


def choose_format(prog: Prog, json_out: bool, emit: Optional[Emit] = None) -> Format:
    """The output format from ``--json`` (and tune's ``--emit``), the same way in every command."""
    if emit is not None and json_out:
        prog.fail(f"--emit {emit.value} and --json print different things; choose one")
    if emit is Emit.env:
        return Format.env
    return Format.json if json_out else Format.text


def check_python(prog: Prog, python: Optional[str], elsewhere: bool = False) -> None:
    """A --python that names no interpreter is bad usage (exit 2), not an unknown section.

    A bare name is looked up on PATH, as running it would.  When the machine is
    another one (``elsewhere``: --host, --facts) the path is its, not checked here."""
    if not python or elsewhere:
        return
    if os.sep not in python:
        if shutil.which(python) is None:
            prog.fail(f"--python {python}: not found on PATH")
    elif not (os.path.isfile(python) and os.access(python, os.X_OK)):
        prog.fail(f"--python {python}: not an executable file")


def check_answered(prog: Prog, doc: dict, python: Optional[str], host: Host) -> None:
    """An explicit --python on this machine that ran but did not answer the probe (``/bin/true``,
    a Python 2) is not an interpreter debtorch can inspect: bad usage (exit 2), not a finding.
    A probe that timed out stays a finding: the interpreter may only be slow."""
    p = doc.get("python")
    if not isinstance(p, dict):
        p = {}
    if not python or not host.live or not p.get("requested") or p.get("version") is not None:
        return
    reason = str((p.get("unknown") or {}).get("version") or "")
    if TIMED_OUT not in reason:
        prog.fail(f"--python {python}: not a Python interpreter debtorch can inspect ({reason})")


def open_host(prog: Prog, replay: Optional[str] = None, record: Optional[str] = None) -> Host:
    """The machine to read: recorded in ``--host DIR``, or this one (copied into ``--record DIR``)."""
    if replay and record:
        prog.fail("--host and --record cannot be used together")
    with prog.fails_on(Unavailable, prefix="--host " if replay else "--record "):
        if replay:
            return ReplayHost(replay)
        if record:
            from debtorch.facts.apt import DPKG_STATUS, trim_dpkg_status  # defer: only --record trims
            from debtorch.facts.nvidia import PCI_IDS, trim_cmdline, trim_pci_ids  # defer: only --record trims

            # Of the large files, only what the facts read.
            return RecordingHost(record, trim={DPKG_STATUS: trim_dpkg_status, "/proc/cmdline": trim_cmdline,
                                               **{p: trim_pci_ids for p in PCI_IDS}})
    return LiveHost()


def collect(prog: Prog, host: Host, options: facts_mod.Options) -> dict:
    """The facts read through ``host``, which is closed after (:func:`check_answered` applied)."""
    try:
        doc = facts_mod.collect(host, options)
    finally:
        host.close()
    check_answered(prog, doc, options.python, host)
    return doc


def load_facts(prog: Prog, path: str) -> dict:
    """``--facts FILE``: facts saved by ``debtorch facts --json``; one line when it cannot be used."""
    with prog.fails_on(facts_mod.FactsFileError, prefix="--facts "):
        return facts_mod.load(path)


def given_paths(prog: Prog, **paths: Optional[str]) -> None:
    """An option naming a file or folder that was given as "" (``--write ""``) names nothing: bad usage."""
    for name, value in paths.items():
        if value is not None and not value.strip():
            prog.fail(f"--{name.replace('_', '-')} needs a path (got an empty one)")


def redactor(doc: Optional[dict] = None, host: Optional[Host] = None) -> Redactor:
    """A :class:`~debtorch.report.redact.Redactor` that knows the secrets ``doc`` names
    (host and user names, serials ...) and, for a command that reads no facts (lint),
    this machine's host and user names."""
    from debtorch.report.redact import Redactor  # defer: only --redact

    r = Redactor()
    if doc:
        r.learn(doc)
    if host is not None:
        r.learn({"hostname": (host.try_read("/proc/sys/kernel/hostname") or "").strip(), "user": host.user or ""})
    return r


def present(view: View, fmt: Format, redact: Optional[Redactor] = None) -> None:
    """Show ``view`` in ``fmt``; every line, cell and field redacted by ``redact`` (a Redactor) when given."""
    if redact is not None:
        from debtorch.report.redact import Redacted  # defer: only --redact

        view = Redacted(view, redact)
    show(view, fmt)
