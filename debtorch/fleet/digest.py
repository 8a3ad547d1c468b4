"""Digests before documents (docs/fleet.md, "How the gather works"): what a rank sends first, and how
rank 0 groups the nodes by it.

A node's :class:`Answers` are what the comparison reads of it: each aspect's normalised answer
(:func:`debtorch.fleet.compare.answers`), the fingerprint ``--tuned`` compares, and its doctor's
warnings and errors.  Its :class:`Digests` are a short hash of each (:func:`digest`), about 1 KB in
all, with the rank's own random challenge.  Nodes with equal digests answered alike: rank 0 asks one
of them (and a spare) for the whole document, reads the answers from it, checks that they give the
same digests, and gives them to the whole group.  Nodes of another debtorch version are asked for
their documents one by one (their digests may hash another reading of the facts).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from debtorch import fingerprint
from debtorch.findings import INFO
from debtorch.fleet import compare
from debtorch.fleet.nodes import NodeFinding, anonymous, node_findings
from debtorch.machine import Machine

PROTOCOL = 2                 # the digests' "fleet": 1 was a rank sending its whole document at once
DIGEST_CHARS = 24            # hex characters of SHA-256: 96 bits
FINGERPRINT = "fingerprint"  # the digest of the node's fingerprint (what --tuned compares)
KEYS = tuple(a.key for a in compare.ASPECTS) + ("env", FINGERPRINT)
MAX_FINDINGS = 1000
_HEX = re.compile(rf"[0-9a-f]{{{DIGEST_CHARS}}}")
_CHALLENGE = re.compile(r"[0-9a-f]{32}")
_ID = re.compile(r"[a-z][a-z0-9_]{0,30}\.[A-Z][0-9]{3}")


def digest(value: Any) -> Optional[str]:
    """A short hash of a JSON value (an answer, a finding); None stays None (unknown)."""
    if value is None:
        return None
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


@dataclass(frozen=True)
class Answers:
    """What the comparison reads of one node: its answers without ``--tuned``, its fingerprint, and
    its doctor's findings (warnings and errors: the fleet shows no info)."""

    values: dict
    fingerprint: dict
    findings: tuple[NodeFinding, ...]

    @classmethod
    def of(cls, facts: dict, findings: Optional[list]) -> "Answers":
        """A node's answers from its facts (checked) and its doctor's findings (JSON, or None: the
        doctor runs here)."""
        machine = Machine.from_facts(anonymous(facts))
        found = node_findings(Machine.from_facts(facts), findings)
        return cls(compare.answers(machine), fingerprint.from_facts(machine),
                   tuple(f for f in found if f.level != INFO))

    def aspects(self) -> tuple[tuple[str, Optional[str]], ...]:
        values = dict(self.values, **{FINGERPRINT: self.fingerprint})
        return tuple((key, digest(values.get(key))) for key in KEYS)

    def finding_digests(self) -> tuple[tuple[str, str, str], ...]:
        return tuple(sorted((f.id, f.level, digest([f.message, f.fix]) or "") for f in self.findings))

    def values_for(self, tuned: Optional[dict]) -> dict:
        """The answers as :func:`debtorch.fleet.compare.read` gives them (``tuned`` included)."""
        if tuned is None:
            return self.values
        return dict(self.values, tuned=compare.tuned_answer(tuned, self.fingerprint))


@dataclass(frozen=True)
class Digests:
    """What a rank sends first: its node's digests, its debtorch and its own random challenge."""

    rank: int
    node: str
    debtorch_version: str
    challenge: str
    aspects: tuple[tuple[str, Optional[str]], ...]
    findings: tuple[tuple[str, str, str], ...]

    @classmethod
    def of(cls, answers: Answers, rank: int, node: str, version: str, challenge: str) -> "Digests":
        return cls(rank, node, version, challenge, answers.aspects(), answers.finding_digests())

    @property
    def key(self) -> tuple:
        """Equal for nodes that answered alike."""
        return (self.aspects, self.findings)

    def to_json(self) -> dict:
        return {"fleet": PROTOCOL, "rank": self.rank, "node": self.node, "debtorch_version": self.debtorch_version,
                "challenge": self.challenge, "aspects": dict(self.aspects),
                "findings": [list(f) for f in self.findings]}

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_json(cls, doc: Any, known: Optional[set] = None) -> "Digests":
        """Digests as a rank sent them, checked; ValueError with one line saying what is wrong.
        ``known`` holds the keys (:attr:`key`) of digests already checked: equal ones are taken
        without checking each digest again (10,000 nodes of a few kinds: a few checks)."""
        if not isinstance(doc, dict) or doc.get("fleet") != PROTOCOL:
            raise ValueError(f"not digests of fleet protocol {PROTOCOL}")
        rank, node, version, challenge = (doc.get(k) for k in ("rank", "node", "debtorch_version", "challenge"))
        if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(node, str):
            raise ValueError("its digests name no rank and node")
        if not isinstance(version, str) or len(version) > 64:
            raise ValueError("its digests name no debtorch version")
        if not isinstance(challenge, str) or not _CHALLENGE.fullmatch(challenge):
            raise ValueError("its digests carry no challenge")
        aspects = doc.get("aspects")
        if not isinstance(aspects, dict) or set(aspects) != set(KEYS):
            raise ValueError("its digests do not cover what this debtorch compares (another debtorch?)")
        findings = doc.get("findings")
        if not isinstance(findings, list) or len(findings) > MAX_FINDINGS:
            raise ValueError("its digests' findings are not a list (or too many)")
        if not all(isinstance(f, list) and len(f) == 3 and all(isinstance(x, str) for x in f) for f in findings):
            raise ValueError("its digests hold a finding that is not one")
        found = tuple(sorted((f[0], f[1], f[2]) for f in findings))
        key = (tuple((k, aspects[k]) for k in KEYS), found)
        try:
            seen = known is not None and key in known
        except TypeError:      # a value that is no string (a list): unhashable, and no digest
            seen = False
        if not seen:
            for name, value in aspects.items():
                if value is not None and not (isinstance(value, str) and _HEX.fullmatch(value)):
                    raise ValueError(f"its digest of {name} is not one")
            for f in found:
                if not (_ID.fullmatch(f[0]) and f[1] in ("warning", "error") and _HEX.fullmatch(f[2])):
                    raise ValueError("its digests hold a finding that is not one")
            if known is not None:
                known.add(key)
        return cls(rank, node, version, challenge, key[0], key[1])
