"""``--redact``: hide what identifies a machine or a person, consistently.

Host names, user names, home paths, serial numbers, UUIDs, MAC and IP
addresses are replaced by stable tokens (``HOST1``, ``USER1``, ``UUID1``,
``IP1`` ...): the same value always gets the same token within one report,
so the report still reads sensibly when pasted into a public bug report.
Versions that merely look like IPv4 addresses (cuDNN 9.1.0.70) are kept.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

from debtorch.doctor import Report

UUID_RE = re.compile(r"\b(?:GPU-|MIG-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
MAC_RE = re.compile(r"\b[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}\b")
IPV4_RE = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])")
IPV6_CANDIDATE = re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")
HOME_RE = re.compile(r"(/home/|/Users/|C:\\\\Users\\\\|C:\\Users\\)([^/\\\s'\"]+)")

SECRET_KEYS = {"hostname": "HOST", "user": "USER", "serial": "SERIAL", "uuid": "UUID", "board_id": "BOARD",
               "MASTER_ADDR": "HOST", "SLURMD_NODENAME": "HOST", "SLURM_NODELIST": "HOST", "SLURM_JOB_NODELIST": "HOST",
               "SLURM_STEP_NODELIST": "HOST",
               # network.interfaces: an IPoIB hardware address is 20 bytes, longer than MAC_RE's six.
               "mac": "MAC", "addresses": "IP"}
VERSIONISH_KEY = re.compile(r"version|wheel|cudnn|nccl|driver|release|firmware", re.I)


class Redactor:
    def __init__(self) -> None:
        self.tokens: dict[str, str] = {}
        self.counters: dict[str, int] = {}
        self.versions: set[str] = set()

    def token(self, kind: str, value: str) -> str:
        if value not in self.tokens:
            self.counters[kind] = self.counters.get(kind, 0) + 1
            self.tokens[value] = f"{kind}{self.counters[kind]}"
        return self.tokens[value]

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
            if kind and obj not in ("root", "localhost", "N/A", "[N/A]") and len(obj) >= 2:
                self.token(kind, obj)
                if kind == "HOST" and "." in obj:
                    self.token(kind, obj.split(".")[0])
            elif VERSIONISH_KEY.search(key):
                self.versions.add(obj)

    def text(self, s: str) -> str:
        if not s:
            return s
        # Known values first, longest first so that "node1.example" wins over "node1".
        for value in sorted(self.tokens, key=len, reverse=True):
            if value in s:
                s = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", self.tokens[value], s)
        s = UUID_RE.sub(lambda m: self.token("UUID", m.group(0)), s)
        s = MAC_RE.sub(lambda m: self.token("MAC", m.group(0).lower()), s)
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
        if isinstance(obj, str):
            return self.text(obj)
        return obj


def redact_report(facts: dict, report: Report, site_files=()):
    """(redacted facts, redacted report, redacted site config paths): both views are
    rendered from these (the paths may name a home folder)."""
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
    return new_facts, Report(findings, silenced, report.checks_run, areas), [r.text(p) for p in site_files]
