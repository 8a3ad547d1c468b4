"""``--redact``: hide what identifies a machine or a person, consistently (docs/security.md: what
is replaced, by which stable tokens, and what it cannot know).

Two passes: :meth:`Redactor.learn` reads a facts document for the values its keys name
(``hostname``, ``user``, ``serial`` ...), then :meth:`Redactor.text` replaces those and every value
of a recognisable shape in any text.  :class:`Redacted` applies it to a whole view (every line,
table cell and JSON field), so every command's output is redacted the same way.

A host or user name is replaced where it stands as that name: its own field, a whole value, and
wherever it is a whole token of free text, unless it is also a word of the reports' vocabulary
(debtorch's own words, and the machine's OS, APT, CPU and GPU names): a machine named ``debian``
or ``vm`` keeps "Debian GNU/Linux" and "a VM" in its report, and its name is replaced only in its
fields and where the text's shape says it is a host (``user@debian``, ``debian:/export``,
``//debian/``, a text that is the name alone).
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

from debtorch import knowledge, urlsecrets
from debtorch.report.console import Line, Table

if TYPE_CHECKING:   # for the annotations only: the doctor's checks are not imported by every command
    from debtorch.doctor import Report

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
NAME_KINDS = ("HOST", "USER")   # names that may also be ordinary words (debian, vm, main ...)
# A token of free text, as the whole-token match below sees one: a run of letters, digits, _ and -.
WORD_RE = re.compile(r"[\w-]+")
OPEN_SECTIONS = ("env",)   # facts sections whose values are anything a user set (MASTER_ADDR=node17 ...)
# Paths in system folders name packages and devices; elsewhere (a home, a data or a venv folder) a path
# may be named after its user or project, and only its top folder (/srv, /data) is a word of the machine.
SYSTEM_PATH_RE = re.compile(r"^/(?:usr|lib|lib32|lib64|libx32|bin|sbin|etc|sys|proc|dev|run|var/lib)/")


def words(text: str) -> set[str]:
    """The tokens of ``text`` that hold a letter, case-folded."""
    return {w.lower() for w in WORD_RE.findall(text) if any(c.isalpha() for c in w)}


@functools.lru_cache(maxsize=1)
def own_words() -> frozenset[str]:
    """debtorch's own vocabulary: every word of its code and of its data files (checks/), so every
    word its reports can say by themselves (read once per process, only for --redact)."""
    package = Path(__file__).resolve().parent.parent
    files: list[Path] = sorted(package.rglob("*.py"))
    try:
        files += sorted(knowledge.checks_dir().rglob("*.toml"))
    except knowledge.KnowledgeError:
        pass   # the doctor says so; redaction still knows the code's words
    out: set[str] = set()
    for path in files:
        try:
            out |= words(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return frozenset(out)


def machine_words(value: str) -> set[str]:
    """The words a facts string adds to the machine's vocabulary: all of them, but for a path outside
    the system folders only its top folder, and never a home folder's name or a URL's credentials."""
    value = HOME_RE.sub(r"\1", URL_USERINFO_RE.sub("", value))
    if value.startswith("/") and not SYSTEM_PATH_RE.match(value):
        return words(value.split("/")[1])
    return words(value)


@functools.lru_cache(maxsize=4096)
def _whole(value: str) -> re.Pattern[str]:
    """``value`` as a whole token of free text, any case."""
    return re.compile(rf"(?<![\w-]){re.escape(value)}(?![\w-])", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def _named(value: str) -> re.Pattern[str]:
    """Where ``value`` stands as a host or user name by the text's shape: after ``@`` (user@host),
    before ``:/`` (an NFS server), after ``//`` (a URL's or a CIFS share's host)."""
    v = re.escape(value)
    return re.compile(rf"(?<=@){v}(?![\w-])|(?<![\w.@/-]){v}(?=:/(?!/))|(?<=//){v}(?=[/:\s]|$)", re.IGNORECASE)


class Redactor:
    """Learns the secrets of a facts document, then replaces them (and values of known shapes) in
    any text.  ``vocabulary``: the words a name may also be (default: :func:`own_words`); the
    machine's own (OS, APT, CPU and GPU names) are added by :meth:`learn`."""

    def __init__(self, vocabulary: Optional[Iterable[str]] = None) -> None:
        self.tokens: dict[str, str] = {}
        self.kinds: dict[str, str] = {}
        self.counters: dict[str, int] = {}
        self.versions: set[str] = set()
        self.vocabulary: set[str] = set(own_words() if vocabulary is None else vocabulary)

    def token(self, kind: str, value: str) -> str:
        # Names are matched whatever their case (a name in capitals is the same name; DNS names ignore case).
        folded = value.lower()
        if folded not in self.tokens:
            self.counters[kind] = self.counters.get(kind, 0) + 1
            self.tokens[folded] = f"{kind}{self.counters[kind]}"
            self.kinds[folded] = kind
        return self.tokens[folded]

    # First pass: learn the secrets named by their keys, the versions to keep and the machine's vocabulary
    # (the words of its other strings and keys: OS ids and names, APT hosts and suites, CPU and GPU names,
    # packages ...; not of environment variables' values, which may name hosts under any key).
    def learn(self, obj: Any, key: str = "", section: str = "") -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                self.vocabulary |= machine_words(str(k))
                self.learn(v, str(k), section or str(k))
        elif isinstance(obj, list):
            for v in obj:
                self.learn(v, key, section)
        elif isinstance(obj, str) and obj:
            kind = SECRET_KEYS.get(key) or SECRET_KEYS.get(key.lower())
            if kind:
                self.secret(kind, obj)
            elif key.lower() in SOURCE_KEYS:
                if m := NET_SOURCE_RE.match(obj):
                    self.secret("HOST", next(g for g in m.groups() if g))
            else:
                if VERSIONISH_KEY.search(key):
                    self.versions.add(obj)
                if section not in OPEN_SECTIONS:
                    self.vocabulary |= machine_words(obj)

    def secret(self, kind: str, value: str) -> None:
        """Learn ``value`` (a host or user name, a serial ...) as a secret of ``kind``."""
        value = value.strip()
        if value.lower() in ("root", "localhost", "n/a", "[n/a]") or len(value) < 2:
            return
        self.token(kind, value)
        if kind == "HOST" and "." in value and not IPV4_RE.fullmatch(value):
            self.token(kind, value.split(".")[0])

    def ordinary(self, value: str) -> bool:
        """Whether the learned name ``value`` (case-folded) is also a word of the reports' vocabulary,
        so that only its occurrences as a name are replaced."""
        return self.kinds.get(value) in NAME_KINDS and value in self.vocabulary

    def text(self, s: str, names: bool = False) -> str:
        """``s`` with every learned secret and every value of a known shape replaced; ``names``: ``s``
        is a value of a name's own key (``hostname``, ``MASTER_ADDR``), where even a name that is an
        ordinary word stands as that name."""
        if not s:
            return s
        # Known values first, longest first so that "node1.example" wins over "node1"; any case.
        folded = s.lower()
        for value in sorted(self.tokens, key=len, reverse=True):
            if value not in folded:
                continue
            if self.ordinary(value) and not names:
                s = _named(value).sub(self.tokens[value], s)
            else:
                s = _whole(value).sub(self.tokens[value], s)
            folded = s.lower()
        s = urlsecrets.scrub(s)     # a URL's credentials and token-like parameters
        s = UUID_RE.sub(lambda m: self.token("UUID", m.group(0)), s)
        s = MAC_RE.sub(lambda m: self.token("MAC", m.group(0).replace("-", ":")), s)
        s = NET_HOST_RE.sub(lambda m: m.group(0) if IPV4_RE.fullmatch(m.group(1)) else self.token("HOST", m.group(1)), s)
        known = set(self.tokens.values())
        s = HOME_RE.sub(lambda m: m.group(0) if m.group(2) in known else m.group(1) + self.token("USER", m.group(2)), s)

        def ip4(m: re.Match[str]) -> str:
            v = m.group(0)
            return v if v in self.versions or any(v in x for x in self.versions) else self.token("IP", v)

        s = IPV4_RE.sub(ip4, s)

        def ip6(m: re.Match[str]) -> str:
            v = m.group(0)
            # PCI addresses (0000:01:00.0), times and MACs are not valid IPv6 addresses.
            try:
                ipaddress.IPv6Address(v)
            except ValueError:
                return v
            return self.token("IP", v)

        s = IPV6_CANDIDATE.sub(ip6, s)
        return s

    def recorded(self, s: str) -> str:
        """A recorded file's content, name or link target (``facts --record --redact``): as :meth:`text`,
        and a file that holds only a learned name (``/etc/hostname``: the name and a line break) has it
        replaced even when it is an ordinary word."""
        stripped = s.strip()
        if s.endswith("\n") and stripped.lower() in self.tokens:
            return s.replace(stripped, self.tokens[stripped.lower()])
        return self.text(s)

    def walk(self, obj: Any, key: str = "") -> Any:
        """A JSON-like value with every string (and key) redacted; a value under a name's own key
        (``hostname``, ``user``, ``MASTER_ADDR`` ...) has its learned names replaced wherever they stand."""
        if isinstance(obj, dict):
            return {self.text(k) if isinstance(k, str) else k: self.walk(v, str(k)) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.walk(v, key) for v in obj]
        if isinstance(obj, tuple):   # a finding's frozen facts: the same kind of tuple back (findings.FrozenDict)
            return type(obj)(self.walk(v, key) for v in obj)
        if isinstance(obj, str):
            return self.text(obj, names=bool(SECRET_KEYS.get(key) or SECRET_KEYS.get(key.lower())))
        return obj


class Redacted:
    """``view`` with every line, table cell, JSON field (keys included) and shell line redacted."""

    def __init__(self, view: Any, redactor: Redactor):   # any command's view (debtorch/report/__init__.py)
        self.view, self.r = view, redactor
        self.formats = view.formats

    def lines(self) -> list[Union[Line, Table]]:
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


def redact_report(facts: dict, report: Report, site_files: Iterable[str] = (),
                  r: Optional[Redactor] = None) -> tuple[dict, Report, list[str]]:
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
