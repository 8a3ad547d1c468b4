"""``--redact``: hide what identifies a machine or a person, consistently (docs/security.md: what
is replaced, by which stable tokens, and what it cannot know).

Two passes: :meth:`Redactor.learn` reads a facts document for the values its keys name
(``hostname``, ``user``, ``serial`` ...), then :meth:`Redactor.text` replaces those and every value
of a recognisable shape in any text.  :class:`Redacted` applies it to a whole view (every line,
table cell and JSON field), so every command's output is redacted the same way.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any, Optional, Union

from debtorch import urlsecrets
from debtorch.report.console import Line, Table

UUID_RE = re.compile(r"\b(?:GPU-|MIG-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
MAC_RE = re.compile(r"\b[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(?:\1[0-9a-fA-F]{2}){4}\b")  # 00:1b:.. or 00-1B-..
# A network filesystem's server: "nas.example.org:/export" (NFS), "//nas/share" (CIFS).
NET_SOURCE_RE = re.compile(r"^(?:\[([^\]]+)\]|([^\s:/\[\]]+)):/|^//([^/\s]+)/")
NET_HOST_RE = re.compile(r"(?<![\w.@/-])([A-Za-z0-9][\w-]*(?:\.[\w-]+)+)(?=:/)")
URL_USERINFO_RE = urlsecrets.USERINFO  # https://user:token@index.example/simple
IPV4_RE = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])")
IPV6_CANDIDATE = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")
HOME_RE = re.compile(r"(/home/|/Users/|C:\\\\Users\\\\|C:\\Users\\)([^/\\\s'\"]+)")

SECRET_KEYS = {"hostname": "HOST", "user": "USER", "serial": "SERIAL", "uuid": "UUID", "board_id": "BOARD",
               "MASTER_ADDR": "HOST", "SLURMD_NODENAME": "HOST", "SLURM_NODELIST": "HOST", "SLURM_JOB_NODELIST": "HOST",
               "SLURM_STEP_NODELIST": "HOST",
               # network.interfaces: an IPoIB hardware address is 20 bytes, longer than MAC_RE's six.
               "mac": "MAC", "addresses": "IP"}
SOURCE_KEYS = ("source",)   # a mount's source: a network filesystem names its server
VERSIONISH_KEY = re.compile(r"version|wheel|cudnn|nccl|driver|release|firmware", re.I)


class Redactor:
    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}
        self.counters: dict[str, int] = {}
        self.versions: set[str] = set()

    def token(self, kind: str, value: str) -> str:
        # Names are matched whatever their case (ALICE is alice; DNS names ignore case).
        folded = value.lower()
        if folded not in self.tokens:
            self.counters[kind] = self.counters.get(kind, 0) + 1
            self.tokens[folded] = f"{kind}{self.counters[kind]}"
        return self.tokens[folded]

    # First pass: learn the secrets named by their keys, and the versions to keep.
    def learn(self, obj: Any, key: str = "") -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                self.learn(v, str(k))
        elif isinstance(obj, list):
            for v in obj:
                self.learn(v, key)
        elif isinstance(obj, str) and obj:
            kind = SECRET_KEYS.get(key) or SECRET_KEYS.get(key.lower())
            if kind:
                self.secret(kind, obj)
            elif key.lower() in SOURCE_KEYS:
                if m := NET_SOURCE_RE.match(obj):
                    self.secret("HOST", next(g for g in m.groups() if g))
            elif VERSIONISH_KEY.search(key):
                self.versions.add(obj)

    def secret(self, kind: str, value: str) -> None:
        """Learn ``value`` (a host or user name, a serial ...) as a secret of ``kind``."""
        value = value.strip()
        if value.lower() in ("root", "localhost", "n/a", "[n/a]") or len(value) < 2:
            return
        self.token(kind, value)
        if kind == "HOST" and "." in value and not IPV4_RE.fullmatch(value):
            self.token(kind, value.split(".")[0])

    def text(self, s: str) -> str:
        if not s:
            return s
        # Known values first, longest first so that "node1.example" wins over "node1"; any case.
        folded = s.lower()
        for value in sorted(self.tokens, key=len, reverse=True):
            if value in folded:
                s = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", self.tokens[value], s, flags=re.IGNORECASE)
                folded = s.lower()
        s = urlsecrets.scrub(s)     # a URL's credentials and token-like parameters
        s = UUID_RE.sub(lambda m: self.token("UUID", m.group(0)), s)
        s = MAC_RE.sub(lambda m: self.token("MAC", m.group(0).replace("-", ":")), s)
        s = NET_HOST_RE.sub(lambda m: m.group(0) if IPV4_RE.fullmatch(m.group(1)) else self.token("HOST", m.group(1)), s)
        known = set(self.tokens.values())
        s = HOME_RE.sub(lambda m: m.group(0) if m.group(2) in known else m.group(1) + self.token("USER", m.group(2)), s)

        def ip4(m):
            v = m.group(0)
            return v if v in self.versions or any(v in x for x in self.versions) else self.token("IP", v)

        s = IPV4_RE.sub(ip4, s)

        def ip6(m):
            v = m.group(0)
            # PCI addresses (0000:01:00.0), times and MACs are not valid IPv6 addresses.
            try:
                ipaddress.IPv6Address(v)
            except ValueError:
                return v
            return self.token("IP", v)

        s = IPV6_CANDIDATE.sub(ip6, s)
        return s

    def walk(self, obj: Any) -> Any:
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.walk(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.walk(v) for v in obj)
        return self.text(obj) if isinstance(obj, str) else obj


class Redacted:
    """``view`` with every line, table cell, JSON field (keys included) and shell line redacted."""

    def __init__(self, view, redactor: Redactor):
        self.view, self.r = view, redactor
        self.formats = view.formats

    def lines(self) -> list:
        out: list[Union[Line, Table]] = []
        for item in self.view.lines():
            if isinstance(item, Table):
                out.append(Table(self.r.text(item.title), tuple(self.r.text(c) for c in item.columns),
                                 [tuple(self.r.text(str(c)) for c in row) for row in item.rows]))
            else:
                out.append(Line(self.r.text(item.text), item.kind))
        return out

    def document(self) -> dict:
        return self.r.walk(self.view.document())

    def env(self) -> str:
        return self.r.text(self.view.env())


def redact_report(facts: dict, report, site_files=(), r: Optional[Redactor] = None):
    """(redacted facts, redacted report, redacted site config paths): both views are
    rendered from these (the paths may name a home folder).  ``r``: a Redactor that
    already learned ``facts``."""
    if r is None:
        r = Redactor()
        r.learn(facts)
    new_facts = r.walk(facts)
    findings = [
        dataclasses.replace(f, message=r.text(f.message), fix=r.text(f.fix), about=r.text(f.about),
                            facts=r.walk(f.facts))
        for f in report.findings
    ]
    silenced = [dataclasses.replace(f, message=r.text(f.message)) for f in report.silenced]
    areas = {a: dataclasses.replace(st, reason=r.text(st.reason)) for a, st in report.areas.items()}
    return new_facts, type(report)(findings, silenced, report.checks_run, areas), [r.text(p) for p in site_files]
