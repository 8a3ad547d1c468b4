"""Typed, bounded data at the edge (checks/ tables, facts documents, the config, the site config): one
small schema language, one error wording.  A spec is a :class:`Value` (rules: what it must be, a test),
a :class:`List` of one spec (``[spec]``) or a :class:`Table` of named fields (a dict; ``"*"`` stands for
every key not named, any other is an error).  A problem is :class:`Invalid`: the key's path
(``gpus[0].name``) and one wording (``must be an integer from 0 to 65536 (got "four")``); :func:`place`
puts the file and the key's TOML line in front.  ``open=True`` reads another debtorch version's document:
``None`` is an unknown, unnamed keys are newer fields.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

from debtorch.inputs import finite

Rule = Tuple[str, Callable[[Any], Any]]


class Invalid(ValueError):
    """A value that breaks its spec: ``path`` names the key, ``problem`` says what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path, self.problem = path, problem


class Value:
    """A leaf: (what it must be, test) rules; a test may raise ValueError to say more."""

    def __init__(self, *rules: Rule) -> None:
        self.rules = rules


@dataclass(frozen=True)
class List:
    item: Spec
    min_len: int = 0
    max_len: Optional[int] = None
    expect: str = "an array"


@dataclass(frozen=True)
class Table:
    fields: Mapping[str, Spec]
    required: Tuple[str, ...] = ()
    keys: Optional[Rule] = None        # what a key that ``"*"`` stands for must be


Spec = Union[Value, List, Table, Dict[str, Any], list[Any]]
ANY = Value()
BOOL = Value(("true or false", lambda v: isinstance(v, bool)))


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(lo: Optional[int] = None, hi: Optional[int] = None) -> Value:
    """An integer (not a bool), from ``lo`` to ``hi`` where given."""
    if lo is None or hi is None:
        return Value(("an integer", is_int))
    return Value((f"an integer from {lo} to {hi}", lambda v: is_int(v) and lo <= v <= hi))


def number(expect: str = "a finite number", within: Callable[[float], bool] = lambda v: True) -> Value:
    """A finite number (not a bool) for which ``within`` holds; ``expect`` says which."""
    return Value((expect, lambda v: finite(v) and within(v)))


def one_of(*choices: str) -> Value:
    return Value((f"one of {', '.join(choices)}", lambda v: isinstance(v, str) and v in choices))


def text(max_len: Optional[int] = None, one_line: bool = False, pattern: Optional[str] = None,
         expect: str = "a string") -> Value:
    """A string: at most ``max_len`` characters, without line breaks, matching ``pattern``."""
    rules: list[Rule] = [("a string", lambda v: isinstance(v, str))]
    if max_len is not None:
        rules.append((f"at most {max_len} characters", lambda v: len(v) <= max_len))
    if one_line:
        rules.append(("one line", lambda v: not any(c in v for c in "\n\r\x00")))
    if pattern is not None:
        rules.append((expect, re.compile(pattern).fullmatch))
    return Value(*rules)


def show(value: Any) -> str:
    """A value as a message quotes it: TOML-like, one printable line, at most 60 characters."""
    if isinstance(value, bool):
        s = "true" if value else "false"
    elif isinstance(value, str):
        s = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, (dict, list)):
        s = "a table" if isinstance(value, dict) else "an array"
    else:
        try:
            s = repr(value) if isinstance(value, (int, float)) else str(value)
        except ValueError:      # an integer of more digits than str() writes
            s = "a number of thousands of digits"
    s = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in s)
    return s if len(s) <= 60 else s[:57] + "..."


def check(value: Any, spec: Spec, path: str = "", open: bool = False) -> None:
    """Raise :class:`Invalid` at the first place (required keys, then in document order)
    where ``value`` breaks ``spec``."""
    if value is None and open:
        return
    if isinstance(spec, Value):
        for expect, ok in spec.rules:
            try:
                if ok(value):
                    continue
                problem = f"must be {expect}"
            except ValueError as exc:
                problem = str(exc)
            raise Invalid(path, f"{problem} (got {show(value)})")
        return
    if isinstance(spec, (List, list)):
        item, lo, hi, expect = ((spec[0], 0, None, "an array") if isinstance(spec, list)
                                else (spec.item, spec.min_len, spec.max_len, spec.expect))
        if not isinstance(value, list):
            raise Invalid(path, f"must be {expect} (got {show(value)})")
        if len(value) < lo or hi is not None and len(value) > hi:
            raise Invalid(path, f"must have {f'{lo} to {hi}' if hi is not None else f'at least {lo}'} items "
                                f"(got {len(value)})")
        for i, x in enumerate(value):
            check(x, item, f"{path}[{i}]", open)
        return
    fields, required, keys = (spec, (), None) if isinstance(spec, dict) else (spec.fields, spec.required, spec.keys)
    if not isinstance(value, dict):
        raise Invalid(path, f"must be a table (got {show(value)})")
    for key in required:
        if key not in value:
            raise Invalid(f"{path}.{key}" if path else key, "missing")
    for key, x in value.items():
        where = f"{path}.{key}" if path else str(key)
        sub = fields.get(key)
        if sub is None:
            sub = fields.get("*")
            if sub is None and open:
                continue
            if sub is None:
                raise Invalid(where, f"unknown key (known: {', '.join(fields)})")
            if keys is not None and not keys[1](key):
                raise Invalid(where, f"not {keys[0]}")
        check(x, sub, where, open)


# ---------------------------------------------------------------------------
# TOML: parse, and find the line of a key (tomllib gives no positions)


def parse_toml(text: str, name: str, error: Callable[[str], Exception]) -> Dict[str, Any]:
    """TOML ``text`` as data, else ``error("NAME:LINE: not valid TOML: ...")``."""
    import tomllib  # defer: only a TOML input needs the parser (doctor stays fast)

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise error(f"{name}:1: not valid TOML (nested too deeply)") from None
    except ValueError as exc:  # TOMLDecodeError, or an integer of more digits than int() takes
        msg = str(exc).replace("\n", " ")
        m = re.search(r"\s*\(at (?:line (\d+), column \d+|end of document)\)\s*$", msg)
        if m is None:  # no place given: the first line, and the message as it is
            raise error(f"{name}:1: not valid TOML: {msg[:200]}") from None
        if m.group(1):
            line = int(m.group(1))
        else:  # at the end of the document: its last line
            line = max(1, len(text.splitlines()))
        raise error(f"{name}:{line}: not valid TOML: {msg[:m.start()]}") from None


def load_toml(text: str, name: str, spec: Spec, error: Callable[[str], Exception]) -> Dict[str, Any]:
    """TOML ``text`` parsed and checked against ``spec``, else ``error`` with :func:`place`'s line."""
    data = parse_toml(text, name, error)
    try:
        check(data, spec)
    except Invalid as exc:
        raise error(place(exc, name, text)) from None
    return data


def place(exc: Invalid, name: str, text: Optional[str] = None) -> str:
    """The one line for the user: ``NAME:LINE: path: problem`` (``NAME: path: problem``
    without TOML ``text`` to find the key's line in)."""
    return f"{name}: {exc}" if text is None else f"{name}:{line_of(key_lines(text), exc.path)}: {exc}"


_SEGMENT = r"""\s*(?:"(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*"""


def _split_key(text: str) -> Optional[list[str]]:
    """'a."b.c".d' -> ['a', 'b.c', 'd']; None when ``text`` is not a key."""
    if not re.fullmatch(rf"{_SEGMENT}(?:\.{_SEGMENT})*", text):
        return None
    parts = []
    for seg in (s.strip() for s in re.findall(_SEGMENT, text)):
        try:
            parts.append(json.loads(seg) if seg[0] == '"' else seg.strip("'"))
        except ValueError:      # a TOML escape JSON does not have
            parts.append(seg[1:-1])
    return parts


def key_lines(text: str) -> Dict[str, int]:
    """{key path: first line} for the tables and keys of TOML ``text``; the rows of an array of
    tables are ``name[0]``, ``name[1]``.  A scanner, not a parser: good enough to point at a
    line, never raises.  A key inside an inline table points at the inline table's line."""
    lines: Dict[str, int] = {}
    rows: Dict[str, int] = {}
    table = ""
    in_multiline: Optional[str] = None
    for no, line in enumerate(str(text).splitlines(), start=1):
        if in_multiline:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = re.match(r"^(\[\[?)\s*(.*?)\s*\]\]?\s*(#.*)?$", stripped)
        if m and not re.match(r"^\[\s*[^\]]*=", stripped):
            parts = _split_key(m.group(2))
            if parts is not None:
                table = ".".join(parts)
                lines.setdefault(table, no)
                if m.group(1) == "[[":
                    rows[table] = rows.get(table, -1) + 1
                    table = f"{table}[{rows[table]}]"
                    lines.setdefault(table, no)
                continue
        key, eq, rest = stripped.partition("=")
        parts = _split_key(key.strip()) if eq else None
        if parts is None:
            continue
        for i in range(1, len(parts) + 1):
            lines.setdefault(".".join(([table] if table else []) + parts[:i]), no)
        for quote in ('"""', "'''"):
            if rest.count(quote) % 2 == 1:
                in_multiline = quote
                break
    return lines


def line_of(lines: Mapping[str, int], path: str) -> int:
    """The line of ``path``, else of its nearest parent, else 1."""
    while path:
        if path in lines:
            return lines[path]
        path = path[:max(path.rfind("."), path.rfind("["), 0)]
    return 1
