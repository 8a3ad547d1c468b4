"""What debtorch knows about a machine, as one JSON-ready document (docs/facts.md).

``collect(host, options)`` runs every section's probe against a :class:`Host`, concurrently (a
section that needs another asks the :class:`Context`), and returns a plain dict of sections.  A
value that could not be determined is ``None`` and its reason is under the section's ``unknown``
mapping; a probe that crashes leaves ``{"unknown": {"*": "probe crashed: ..."}}`` and never stops
the others.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import importlib
import threading
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

from debtorch import inputs
from debtorch.__about__ import __version__
from debtorch.facts import schema as _schema
from debtorch.host import Host, Unavailable

SCHEMA_VERSION = 1

# Section name -> module under debtorch.facts with a ``collect(host, ctx)``.
SECTIONS = ("os", "apt", "cpu", "memory", "storage", "nvidia", "cuda", "python", "env", "network")
_MODULES = {"os": "osinfo", "python": "pyenv"}


@dataclass
class Options:
    """What the user asked for: ``--python``, ``--data``, ``--deep``, ``--measure-data`` (with ``--data-rate``)."""

    python: Optional[str] = None
    data: Optional[str] = None
    deep: bool = False
    deep_timeout: float = 120.0
    sections: tuple = SECTIONS
    measure_data: bool = False                       # read a sample of --data's files (after every section)
    data_rate: Optional[float] = None                # samples/s the loader needs, for the doctor's judgement
    data_seconds: float = 20.0                       # the reads' time, at most
    progress: Optional[Callable[[float, str], None]] = None   # the reads' progress (share done, what)


class Section(dict):
    """A section's facts; ``unknown(field, reason)`` records an honest unknown."""

    def unknown(self, name: str, reason: str) -> None:
        self[name] = None
        self.setdefault("unknown", {})[name] = reason

    def set_or_unknown(self, name: str, value: Any, reason: str) -> None:
        if value is None:
            self.unknown(name, reason)
        else:
            self[name] = value


class Context:
    """Gives one section the results of others (waiting for them if needed)."""

    def __init__(self, host: Host, options: Options):
        self.host = host
        self.options = options
        self._futures: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        # Set once every section is submitted: a section asking for one submitted
        # after it (cuda -> python, os -> apt) must wait for it, not get {}.
        self._submitted = threading.Event()

    def section(self, name: str) -> dict:
        self._submitted.wait()
        fut = self._futures.get(name)
        return {} if fut is None else fut.result()


def _run_section(name: str, ctx: Context) -> dict:
    mod = importlib.import_module(f"debtorch.facts.{_MODULES.get(name, name)}")
    try:
        result = mod.collect(ctx.host, ctx)
    except Exception as exc:  # a probe's bug must not hide the rest of the machine
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"
        return {"unknown": {"*": f"probe crashed: {type(exc).__name__}: {exc} ({where})"}}
    return dict(result)


def collect(host: Host, options: Optional[Options] = None) -> dict:
    options = options or Options()
    ctx = Context(host, options)
    names = [s for s in SECTIONS if s in options.sections]
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(names) or 1)
    try:
        try:
            for name in names:
                ctx._futures[name] = pool.submit(_run_section, name, ctx)
        finally:
            # Even when a signal ends the run here: a section waiting for the others must be
            # released, or the pool's shutdown below would wait for it forever.
            ctx._submitted.set()
        results = {name: ctx._futures[name].result() for name in names}
    finally:
        # On the way out of an interrupted run, sections not started are dropped; those running
        # finish within their commands' time limits, so that no command they started outlives us.
        pool.shutdown(wait=True, cancel_futures=True)
    if options.measure_data and options.data:
        _measure_data(host, options, results)
    doc: dict = {
        "schema_version": SCHEMA_VERSION,
        "debtorch_version": __version__,
        "host": host.label,
        "collected_at": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
    doc.update(results)
    return doc


def _measure_data(host: Host, options: Options, results: dict) -> None:
    """``storage.data.read``: the data folder's reads measured (facts/dataread.py), alone on the machine
    after every other section is done; an unknown with its reason when they cannot be."""
    from debtorch.facts import dataread  # defer: only --measure-data reads the data

    data = (results.get("storage") or {}).get("data")
    if not isinstance(data, dict) or not data.get("exists"):
        return
    cpus = (results.get("cpu") or {}).get("usable_cpus") or 1
    root = str(data.get("realpath") or options.data)
    try:
        got = dataread.measure(host, root, dataread.default_readers(cpus),
                               options.data_seconds, options.data_rate, options.progress)
    except (dataread.NothingToRead, Unavailable) as exc:
        data["read"] = None
        data.setdefault("unknown", {})["read"] = str(exc)
        return
    data["read"] = got.to_json()


class FactsFileError(Exception):
    """A saved facts file cannot be used; the message is one line for the user."""


def load(path: str, text: Optional[str] = None) -> dict:
    """Load facts saved by ``debtorch facts --json`` (or ``doctor --json``, which wraps them)
    on any machine: at most 8 MiB, strict JSON, every known field of the right type
    (debtorch/facts/schema.py).  Raises :class:`FactsFileError` with one line."""
    try:
        if text is None:
            text = inputs.read_text(path, what="a facts document")
        doc = inputs.parse_json(text, path)
    except inputs.InputError as exc:
        raise FactsFileError(str(exc)) from None
    return validate(doc, path)


def validate(doc: Any, path: str) -> dict:
    """A parsed facts document (or ``doctor --json`` document), checked and completed:
    the facts, with a section that is absent marked unknown, every known field of the right
    type.  Raises FactsFileError."""
    if not isinstance(doc, dict):
        raise FactsFileError(f"{path}: expected a JSON object of facts")
    # `debtorch doctor --json` wraps the facts; accept both documents.
    if isinstance(doc.get("facts"), dict):
        if "schema_version" not in doc["facts"]:
            raise FactsFileError(f"{path}: 'facts' has no schema_version")
        doc = doc["facts"]
    version = doc.get("schema_version")
    if version is None:
        raise FactsFileError(f"{path}: no schema_version; was it written by 'debtorch facts --json'?")
    if version != SCHEMA_VERSION:
        raise FactsFileError(f"{path}: schema_version {version!r}; this debtorch reads {SCHEMA_VERSION}")
    for name in SECTIONS:
        if doc.get(name) is None:
            doc[name] = {"unknown": {"*": "not in the saved facts"}}
    bad = _schema.check(doc)       # a section that is not a table included
    if bad:
        raise FactsFileError(f"{path}: {bad}")
    return doc


def get(facts: dict, dotted: str, default: Any = None) -> Any:
    """``get(facts, "cpu.usable_cpus")``: a value by path, ``default`` when absent."""
    cur: Any = facts
    for part in dotted.split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return default
        if cur is None:
            return default
    return cur


def unknown_reason(facts: dict, dotted: str) -> Optional[str]:
    """Why ``dotted`` is unknown, if the probe said so."""
    section, _, name = dotted.partition(".")
    sec = facts.get(section) or {}
    unk = sec.get("unknown") or {}
    return unk.get(name) or unk.get("*")
