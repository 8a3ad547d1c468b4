"""One node of a fleet: its document (a rank's envelope ``{"fleet": 1, "rank", "node",
"debtorch_version", "findings", "facts"}``, a ``doctor --json`` or a ``facts --json`` document), read
and checked, reduced to what the comparison needs (its answers and its doctor's findings, never the
whole document: rank 0 holds one at a time).  A document that cannot be read, or that another
schema version wrote, is a node with a ``status`` and a one-line ``detail``; it never stops the others.
"""

from __future__ import annotations

import json
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
STATUSES = (OK, MISSING, DIED, MALFORMED, SCHEMA)


@dataclass
class Node:
    """One node as the comparison sees it."""

    name: str
    rank: Optional[int] = None
    status: str = OK
    detail: str = ""                               # why, for a node that is not OK
    values: dict = field(default_factory=dict)     # aspect key -> comparable value (None: unknown)
    findings: tuple = ()                           # its doctor's findings: (id, level, message)

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


def parse(text: str, where: str) -> tuple[dict, Optional[list], Any]:
    """(facts, doctor findings as JSON or None, the rank an envelope names) of a document's text;
    :class:`DocumentError` with status malformed or schema."""
    try:
        doc = inputs.parse_json(text, where)
    except inputs.InputError as exc:
        raise DocumentError(MALFORMED, str(exc).replace(f"{where}: ", "", 1)[:120]) from None
    if not isinstance(doc, dict):
        raise DocumentError(MALFORMED, "not a JSON object")
    if "fleet" in doc and doc.get("error"):
        raise DocumentError(MALFORMED, f"the node could not describe itself: {str(doc['error'])[:120]}")
    findings = doc.get("findings") if isinstance(doc.get("findings"), list) else None
    inner = doc.get("facts") if isinstance(doc.get("facts"), dict) else doc
    version = inner.get("schema_version")
    if version is not None and version != facts_mod.SCHEMA_VERSION:
        raise DocumentError(SCHEMA, f"facts schema_version {version!r}; this debtorch reads "
                                    f"{facts_mod.SCHEMA_VERSION} (debtorch {inner.get('debtorch_version') or '?'})")
    try:
        facts = facts_mod.validate(inner, where)
    except facts_mod.FactsFileError as exc:
        raise DocumentError(MALFORMED, str(exc).replace(f"{where}: ", "", 1)) from None
    return facts, findings, doc.get("rank") if "fleet" in doc else None


def _findings(machine: Machine, findings: Optional[list]) -> tuple:
    """The node's findings as (id, level, message): those its doctor sent, else the doctor's here."""
    if findings is None:
        return tuple((f.id, f.level, f.message) for f in diagnose(machine, Context(source="facts")).findings)
    return tuple((f["id"], f["level"], str(f.get("message") or "")) for f in findings
                 if isinstance(f, dict) and isinstance(f.get("id"), str) and f.get("level") in ("info", "warning", "error"))


def read_node(text: str, name: str, read: Callable[[Machine], dict], rank: Optional[int] = None) -> Node:
    """A :class:`Node` from a document's text; ``read`` gives the comparable answers of a Machine."""
    try:
        facts, findings, sent_rank = parse(text, name)
    except DocumentError as exc:
        return Node(name=name, rank=rank, status=exc.status, detail=str(exc))
    machine = Machine.from_facts(facts)
    return Node(name=name, rank=sent_rank if isinstance(sent_rank, int) else rank,
                values=read(machine), findings=_findings(machine, findings))


def envelope(facts: dict, findings: list, rank: int, node: str, version: str) -> dict:
    """What a rank sends: its facts and its doctor's findings (JSON-ready)."""
    return {"fleet": ENVELOPE_VERSION, "rank": rank, "node": node, "debtorch_version": version,
            "findings": findings, "facts": facts}
