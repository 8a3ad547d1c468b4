"""Findings: small, comparable messages (Django's system checks), made from one catalogue of ids.

Every id any command reports (the doctor's, fleet's, lint's, cfg.watch's, tune's rules) is
declared once, as data, in ``checks/findings/*.toml`` (ruff's codes table): its title, the
message and fix templates, why it matters, the page that documents it, retired or not.
A check fills an entry with what it saw: ``finding("cpu.W001", governor=gov, facts={...})``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from debtorch import inputs, schema

ERROR = "error"
WARNING = "warning"
INFO = "info"
LEVELS = (INFO, WARNING, ERROR)
_RANK = {INFO: 0, WARNING: 1, ERROR: 2}
# The letter of an id is its level; tune's R (rule), M (measured), C (calibrated) and P (from a watch) ids
# are reasons, not findings.
LETTER_LEVELS = {"E": ERROR, "W": WARNING, "I": INFO}

# A check that raised becomes this finding, filed under the check's area.
CRASH_ID = "doctor.E001"

# Where checks/ is: a source checkout, an installed wheel (pyproject force-includes it), the .deb.
_PKG = Path(__file__).resolve().parent
DATA_DIRS = (_PKG.parent / "checks", _PKG / "_data" / "checks", Path("/usr/share/debtorch/checks"))


def _is_code(code: str) -> bool:
    return len(code) == 4 and code[0] in "EWIRMCP" and code[1:].isdigit() and code[1:].isascii()


def _is_area(area: str) -> bool:
    return area.replace("_", "").isalpha() and area.isascii() and area.islower()


def rank(level: str) -> int:
    return _RANK[level]


@dataclass(frozen=True)
class Entry:
    """One id of the catalogue.  ``message`` and ``fix`` are templates (``{name}`` filled by the
    check; ``message`` defaults to ``title``), ``variants`` other wordings of them for other situations
    ({name: {"message": ..., "fix": ...}}); ``means``, ``why``, ``remedy`` (the fix in general terms,
    where the printed one is tailored), ``source`` and ``settings`` (tune) are its documentation on
    ``page`` (docs/)."""

    id: str
    title: str
    page: str
    message: str = ""
    fix: str = ""
    means: str = ""
    why: str = ""
    remedy: str = ""
    source: str = ""
    settings: str = ""
    retired: bool = False
    variants: dict = field(default_factory=dict)

    @property
    def level(self) -> Optional[str]:
        return LETTER_LEVELS.get(self.id.split(".", 1)[1][0])


class CatalogueError(ValueError):
    """A file of checks/findings/ is missing, unreadable or malformed: one line naming the file, the
    line and the key (the command line exits 2, as for any checks/ data file)."""


_TEXT = schema.text(max_len=4096)
_LINE = schema.text(max_len=4096, one_line=True)
_VARIANT = schema.Table({"message": _LINE, "fix": _TEXT})
ENTRY = schema.Table({"title": _LINE, "message": _LINE, "fix": _TEXT, "means": _TEXT, "why": _TEXT, "remedy": _TEXT,
                      "source": _LINE, "settings": _LINE, "retired": schema.BOOL,
                      "variants": schema.Table({"*": _VARIANT}, keys=("a variant name", str.isidentifier))},
                     required=("title",))
CATALOGUE_FILE = schema.Table(
    {"page": schema.text(max_len=200, pattern=r"[a-z0-9_-]+\.md", expect="a page of docs/ like checks.md"),
     "*": schema.Table({"*": ENTRY}, keys=("an id's code like W001 (E, W, I, R, M, C or P and three digits)",
                                           _is_code))},
    keys=("an area like cpu or script", _is_area), required=("page",))


@functools.lru_cache(maxsize=1)
def catalogue() -> Dict[str, Entry]:
    """Every id, in the files' order ({id: Entry}); read once, each file through the one door
    (:mod:`debtorch.inputs`: a regular file, capped) and checked against :data:`CATALOGUE_FILE`.
    Raises :class:`CatalogueError`."""
    folder = next((d / "findings" for d in DATA_DIRS if (d / "findings").is_dir()), None)
    if folder is None:
        raise CatalogueError("debtorch is incomplete: no checks/findings folder in " + ", ".join(map(str, DATA_DIRS)))
    out: Dict[str, Entry] = {}
    for path in sorted(folder.glob("*.toml")):
        try:
            text = inputs.read_text(str(path), inputs.MAX_CONFIG, what="a findings catalogue")
        except inputs.InputError as exc:
            raise CatalogueError(str(exc)) from None
        data = schema.load_toml(text, str(path), CATALOGUE_FILE, CatalogueError)
        page = data.pop("page")
        for area, entries in data.items():
            for code, fields in entries.items():
                if f"{area}.{code}" in out:
                    raise CatalogueError(f"{path}: {area}.{code}: declared twice (also in {out[f'{area}.{code}'].page})")
                out[f"{area}.{code}"] = Entry(f"{area}.{code}", page=page, **fields)
    return out


class FrozenDict(tuple):
    """A dict among a finding's facts, frozen: its (key, value) pairs sorted by key.  A tuple, so that
    findings hash and compare as before, and a type of its own, so that it thaws back into a dict
    (a list of pairs stays a list, an empty dict a dict)."""

    __slots__ = ()


def _key(pair: tuple) -> Any:
    return pair[0]


def _freeze(value: Any) -> Any:
    """A JSON-like value as a hashable one: a dict (or a frozen one) as a :class:`FrozenDict`, a list,
    tuple or set as a tuple; :func:`_thaw` gives the JSON value back."""
    if isinstance(value, FrozenDict):
        value = dict(value)
    if isinstance(value, dict):
        return FrozenDict(sorted(((k, _freeze(v)) for k, v in value.items()), key=_key))
    if isinstance(value, (list, tuple, set, frozenset)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    """The JSON value of a frozen one: a :class:`FrozenDict` as a dict, any other tuple as a list."""
    if isinstance(value, FrozenDict):
        return {k: _thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class Finding:
    """One thing a check has to say: a stable ``id`` (``driver.E001``), a one-line ``message``, the ``fix``
    (Debian's packages, files and commands), the object it is ``about`` ("GPU 0 (NVIDIA A100)"), the
    (path, value) ``facts`` it rests on.  Findings compare equal field by field."""

    id: str
    level: str
    message: str
    fix: str = ""
    about: str = ""
    facts: tuple = field(default=())
    area: str = ""

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"bad level {self.level!r}")
        object.__setattr__(self, "facts", _freeze(self.facts))
        if not self.area:
            object.__setattr__(self, "area", self.id.split(".", 1)[0])

    @property
    def crashed(self) -> bool:
        return self.id == CRASH_ID

    def to_json(self) -> dict:
        return {**{k: getattr(self, k) for k in ("id", "level", "area", "message", "fix", "about")},
                "facts": {k: _thaw(v) for k, v in self.facts}}


def finding(id: str, about: str = "", facts: Optional[dict] = None, *, variant: str = "",
            message: Optional[str] = None, fix: Optional[str] = None, area: str = "", **values: Any) -> Finding:
    """The catalogue's ``id`` filled with what a check saw: ``values`` fill the templates (of
    ``variant``, where given); ``message`` or ``fix`` given whole replace them (a fix tailored to
    the machine)."""
    e = catalogue()[id]
    v = e.variants[variant] if variant else {}
    if message is None:
        message = v.get("message", e.message or e.title).format(**values)
    if fix is None:
        fix = v.get("fix", e.fix).format(**values)
    return Finding(id, e.level or "", message, fix, about, tuple((facts or {}).items()), area)


def finding_fix(id: str, variant: str = "", **values: Any) -> str:
    """The catalogue's fix of ``id`` (of ``variant``) filled with ``values``: where one finding's
    advice is another's too (cpu.W004's for torch.E001 on an architecture without wheels)."""
    e = catalogue()[id]
    v = e.variants[variant] if variant else {}
    return str(v.get("fix", e.fix)).format(**values)


class Placed:
    """Base of a finding placed somewhere (a file's line, groups of nodes): its id and level
    are those of its ``finding``."""

    finding: Finding

    @property
    def id(self) -> str:
        return self.finding.id

    @property
    def level(self) -> str:
        return self.finding.level
