"""One node of a fleet: its document (a rank's envelope ``{"fleet": 1, "rank", "node",
"debtorch_version", "findings", "facts"}``, a ``doctor --json`` or a ``facts --json`` document), read
and checked, reduced to what the comparison needs (its answers and its doctor's findings, never the
whole document: rank 0 holds one at a time).  A document that cannot be read, or that another
schema version wrote, is a node with a ``status`` and a one-line ``detail``; it never stops the others.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from debtorch import facts as facts_mod
from debtorch import inputs
from debtorch.doctor import Context, diagnose
from debtorch.machine import Machine

ENVELOPE_VERSION = 1

OK = "ok"
MISSING = "missing"          # never joined the rendezvous within --timeout
DIED = "died"                # joined, sent no document
MALFORMED = "malformed"      # sent something that is not a facts document
SCHEMA = "schema"            # a facts document of another schema version
SKIPPED = "skipped"          # a JSON object that is no node's document (another command's report): not a node
STATUSES = (OK, MISSING, DIED, MALFORMED, SCHEMA, SKIPPED)

# What a facts document holds at its top: its sections and these (debtorch/facts/__init__.py).
FACTS_HEAD = ("schema_version", "debtorch_version", "host", "collected_at")


@dataclass(frozen=True)
class NodeFinding:
    """One finding of a node's own doctor, as the fleet shows it: its id, level, message and fix."""

    id: str
    level: str
    message: str
    fix: str = ""


@dataclass(slots=True)
class Node:
    """One node as the comparison sees it.  Nodes that answered alike may share one ``values``
    dict and one ``findings`` tuple (gathered digests: one per group of nodes)."""

    name: str
    rank: Optional[int] = None
    status: str = OK
    detail: str = ""                               # why, for a node that is not OK
    values: dict = field(default_factory=dict)     # aspect key -> comparable value (None: unknown)
    findings: tuple[NodeFinding, ...] = ()         # its doctor's findings

    @property
    def ok(self) -> bool:
        return self.status == OK


class DocumentError(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


def encode(envelope: dict) -> bytes:
    """An envelope as it travels: compact JSON, zlib-compressed."""
    return zlib.compress(json.dumps(envelope, separators=(",", ":"), default=str).encode(), 6)


def parse(text: str, where: str, validate: Callable[[dict, str], dict] = facts_mod.validate
          ) -> tuple[dict, Optional[list], Any]:
    """(facts, doctor findings as JSON or None, the rank an envelope names) of a document's text;
    :class:`DocumentError` with status malformed, schema or skipped.  ``validate`` checks the facts
    (:func:`debtorch.facts.validate`, or a :class:`Decoder`'s, which gives the same answers)."""
    try:
        doc = inputs.parse_json(text, where)
    except inputs.InputError as exc:
        raise DocumentError(MALFORMED, str(exc).replace(f"{where}: ", "", 1)[:120]) from None
    return parse_doc(doc, where, validate)


def parse_doc(doc: Any, where: str, validate: Callable[[dict, str], dict] = facts_mod.validate
              ) -> tuple[dict, Optional[list], Any]:
    """:func:`parse` of a document already parsed from JSON."""
    if not isinstance(doc, dict):
        raise DocumentError(MALFORMED, "not a JSON object")
    if "fleet" in doc and doc.get("error"):
        raise DocumentError(MALFORMED, f"the node could not describe itself: {str(doc['error'])[:120]}")
    why = not_a_node(doc)
    if why:
        raise DocumentError(SKIPPED, why)
    findings = doc.get("findings") if isinstance(doc.get("findings"), list) else None
    wrapped = doc.get("facts")
    inner: dict = wrapped if isinstance(wrapped, dict) else doc
    version = inner.get("schema_version")
    if version is not None and version != facts_mod.SCHEMA_VERSION:
        raise DocumentError(SCHEMA, f"facts schema_version {version!r}; this debtorch reads "
                                    f"{facts_mod.SCHEMA_VERSION} (debtorch {inner.get('debtorch_version') or '?'})")
    try:
        facts = validate(inner, where)
    except facts_mod.FactsFileError as exc:
        raise DocumentError(MALFORMED, str(exc).replace(f"{where}: ", "", 1)) from None
    return facts, findings, doc.get("rank") if "fleet" in doc else None


def not_a_node(doc: dict) -> str:
    """Why a JSON object is no node's document ("" when it is one): a node's document is a fleet
    envelope, a ``doctor --json`` document (its ``facts``), or a ``facts --json`` document, which
    holds facts sections and nothing else unless it says when it was collected.  Another command's
    report (``tune --json`` has ``env`` and ``settings``) is not a node."""
    if "fleet" in doc or "facts" in doc:
        return ""
    keys = [str(k) for k in doc]
    sections = [k for k in keys if k in facts_mod.SECTIONS]
    foreign = [k[:40] for k in keys if k not in facts_mod.SECTIONS and k not in FACTS_HEAD]
    if sections and (not foreign or "collected_at" in doc):
        return ""
    shown = ", ".join(foreign[:4]) + (", ..." if len(foreign) > 4 else "")
    return ("not a node's 'debtorch facts --json' or 'doctor --json' document"
            + (f" (it has {shown})" if shown else " (no facts in it)"))


def node_findings(machine: Optional[Machine], findings: Optional[list]) -> tuple[NodeFinding, ...]:
    """The node's findings: those its doctor sent (JSON), else the doctor's here on ``machine``."""
    if findings is None:
        assert machine is not None
        return tuple(NodeFinding(f.id, f.level, f.message, f.fix)
                     for f in diagnose(machine, Context(source="facts")).findings)
    return tuple(NodeFinding(f["id"], f["level"], str(f.get("message") or ""), str(f.get("fix") or ""))
                 for f in findings
                 if isinstance(f, dict) and isinstance(f.get("id"), str) and f.get("level") in ("info", "warning", "error"))


def anonymous(facts: dict) -> dict:
    """``facts`` without what names the node or the moment (its host and user names, when it was
    collected): what its answers are read from, so that nodes alike but for their names give answers
    a :class:`Decoder` can share."""
    out = {k: v for k, v in facts.items() if k not in NAMING_TOP}
    os_section = facts.get("os")
    if isinstance(os_section, dict) and set(os_section) & set(NAMING):
        out["os"] = {k: v for k, v in os_section.items() if k not in NAMING}
    return out


NAMING = ("hostname", "user")           # the os section's fields that name the node, not its setup
NAMING_TOP = ("host", "collected_at")   # a facts document's label and time


def read_node(text: str, name: str, read: Callable[[Machine], dict], rank: Optional[int] = None) -> Node:
    """A :class:`Node` from a document's text; ``read`` gives the comparable answers of a Machine
    (of the facts without the node's names: :func:`anonymous`)."""
    try:
        facts, findings, sent_rank = parse(text, name)
    except DocumentError as exc:
        return Node(name=name, rank=rank, status=exc.status, detail=str(exc))
    machine = Machine.from_facts(facts)
    return Node(name=name, rank=sent_rank if isinstance(sent_rank, int) else rank,
                values=read(Machine.from_facts(anonymous(facts))), findings=node_findings(machine, findings))


class Decoder:
    """Reads node documents as :func:`read_node` does, with the same result, faster when many nodes
    are alike: a section it already checked (the same JSON) is not checked again, and the answers of
    facts it already read (the same sections but for the node's names) are not read again.  What it
    remembers is bounded (``MEMO`` entries of each kind)."""

    MEMO = 4096

    def __init__(self, read: Callable[[Machine], dict]):
        self.read = read
        self.valid: set[bytes] = set()                  # hashes of sections that passed the schema
        self.answers: dict[bytes, dict] = {}            # hash of a document's sections -> its answers
        self.findings: dict[tuple, tuple] = {}          # findings -> the first equal tuple (shared)
        self._hashes: dict[str, bytes] = {}             # the last document's, by section
        self._raw: dict[str, str] = {}                  # the last document's sections' JSON text, as read

    def node(self, text: str, name: str, rank: Optional[int] = None) -> Node:
        walked = _walk(text)
        self._raw = walked[1] if walked is not None else {}
        try:
            if walked is None:
                facts, findings, sent_rank = parse(text, name, self._validate)
            else:
                facts, findings, sent_rank = parse_doc(walked[0], name, self._validate)
        except DocumentError as exc:
            return Node(name=name, rank=rank, status=exc.status, detail=str(exc))
        anon = anonymous(facts)
        head = json.dumps({k: v for k, v in anon.items() if k not in facts_mod.SECTIONS},
                          separators=(",", ":"), default=str, sort_keys=True)
        key = hashlib.sha256(b"\0".join([head.encode()] + [self._hashes.get(s, b"-") for s in facts_mod.SECTIONS])
                             ).digest()
        values = self.answers.get(key)
        if values is None:
            values = self.read(Machine.from_facts(anon))
            self._remember(self.answers, key, values)
        found = node_findings(Machine.from_facts(facts), findings) if findings is None else node_findings(None, findings)
        found = self.findings.setdefault(found, found) if len(self.findings) < self.MEMO else found
        return Node(name=name, rank=sent_rank if isinstance(sent_rank, int) else rank, values=values, findings=found)

    def _validate(self, inner: dict, where: str) -> dict:
        """:func:`debtorch.facts.validate`, skipping the sections already seen valid.  A facts
        document's sections are checked independently, so a section that passed once passes again."""
        hashes: dict[str, bytes] = {}
        for name in facts_mod.SECTIONS:
            section = inner.get(name)
            if isinstance(section, dict):
                text = self._raw.get(name) if name != "os" else None
                if text is None:
                    shown = anonymous({"os": section})["os"] if name == "os" else section
                    text = json.dumps(shown, separators=(",", ":"), default=str)
                hashes[name] = hashlib.sha256(name.encode() + b"\0" + text.encode()).digest()
        known = {name for name, h in hashes.items() if h in self.valid and name != "os"}
        stub = {k: ({} if k in known else v) for k, v in inner.items()}
        facts = facts_mod.validate(stub, where)
        for name in known:
            facts[name] = inner[name]
        for name, h in hashes.items():
            if name not in known and name != "os":
                self._remember(self.valid, h)
        self._hashes = hashes
        return facts

    def _remember(self, memo: Any, key: bytes, value: Any = None) -> None:
        if len(memo) >= self.MEMO:
            memo.clear()
        if isinstance(memo, set):
            memo.add(key)
        else:
            memo[key] = value


_WS = re.compile(r"[ \t\n\r]*")


def _after_blanks(text: str, i: int) -> int:
    """Where the JSON whitespace from ``text[i]`` on ends (``i`` when there is none: _WS always matches)."""
    m = _WS.match(text, i)
    return m.end() if m is not None else i


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a number JSON allows")


_JSON = json.JSONDecoder(parse_constant=_no_constant)


def _walk(text: str) -> Optional[tuple[dict, dict[str, str]]]:
    """(the document, {section: its JSON text as written}) of a facts or ``doctor --json`` document's
    text, read as :func:`debtorch.inputs.parse_json` reads it; the sections are those of its
    ``facts`` object when it has one.  None for anything else (the caller then parses the text the
    usual way, which says what is wrong)."""
    try:
        doc, raws, end = _object(text, _after_blanks(text, 0), "facts")
        if _after_blanks(text, end) != len(text):
            return None
    except (ValueError, RecursionError, IndexError):
        return None
    return doc, raws


def _object(text: str, i: int, nested: Optional[str]) -> tuple[dict, dict[str, str], int]:
    """The JSON object at ``text[i]``: (its value, {key: its value's text}, where it ends); the
    object under the key ``nested`` is walked the same way, and its keys' texts are returned."""
    if text[i] != "{":
        raise ValueError("not an object")
    i = _after_blanks(text, i + 1)
    out: dict = {}
    raws: dict[str, str] = {}
    inner: Optional[dict[str, str]] = None
    if text[i] == "}":
        return out, raws, i + 1
    while True:
        key, i = _JSON.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError("a key that is not a string")
        i = _after_blanks(text, i)
        if text[i] != ":":
            raise ValueError("no colon")
        i = _after_blanks(text, i + 1)
        start = i
        if key == nested and text[i] == "{":
            value, inner, i = _object(text, i, None)
        else:
            value, i = _JSON.raw_decode(text, i)
        out[key] = value
        raws[key] = text[start:i]
        i = _after_blanks(text, i)
        if text[i] == ",":
            i = _after_blanks(text, i + 1)
            continue
        if text[i] != "}":
            raise ValueError("no comma")
        if nested is not None and inner is not None and isinstance(out.get(nested), dict):
            return out, inner, i + 1
        return out, raws, i + 1


def envelope(facts: dict, findings: list, rank: int, node: str, version: str) -> dict:
    """What a rank sends: its facts and its doctor's findings (JSON-ready)."""
    return {"fleet": ENVELOPE_VERSION, "rank": rank, "node": node, "debtorch_version": version,
            "findings": findings, "facts": facts}
