"""Slurm's host lists: ``node[01-03,07],gpu-a1`` <-> ``[node01, node02, node03, node07, gpu-a1]``, as
``scontrol show hostnames`` reads them (zero padding kept, bracket groups multiply) and ``srun --exclude``
takes them; pure, never raising.  Node names are data (a fleet's ranks say their own): :func:`safe`
escapes what is not a host name's, so that a newline, a comma or a terminal's escape code never reaches
a report or a host list as it is.
"""

from __future__ import annotations

import re
from typing import Iterable

MAX_HOSTS = 100_000   # a malformed range like a[0-999999999] must not exhaust memory
MAX_NAME = 255
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_RANK = re.compile(r"rank \d+(?::\d+)?")      # debtorch's name for a rank that has none
_PLAIN = frozenset('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:"\\')


def is_host(name: object) -> bool:
    """A host name (letters, digits, '.', '-', '_'; at most 255 characters)."""
    return isinstance(name, str) and len(name) <= MAX_NAME and _HOST.fullmatch(name) is not None


def safe(name: object) -> str:
    """``name`` as a report may show it: as it is when it is a host name (or debtorch's "rank 3",
    "gpu01:3"), else with every other character escaped (``\\x1b``, ``\\x2c``); never empty."""
    text = str(name)
    if text and len(text) <= 6 * MAX_NAME and (set(text) <= _PLAIN or _RANK.fullmatch(text)):
        return text   # (an escaped name is shown as it is: safe(safe(x)) == safe(x))
    return "".join(_escaped(c) for c in text[:MAX_NAME]) or '""'


def _escaped(c: str) -> str:
    """One character of a name as a report shows it: as it is, or escaped (``\\x1b``, ``\\u202e``)."""
    if c in _PLAIN:
        return c
    if ord(c) < 256:
        return f"\\x{ord(c):02x}"
    return f"\\u{ord(c):04x}"


def _split_top(text: str) -> list[str]:
    """Split at commas that are not inside brackets."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return [x.strip() for x in out if x.strip()]


def _range(item: str) -> list[str]:
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", item.strip())
    if not m:
        return []
    lo, hi = m.group(1), m.group(2) or m.group(1)
    width = len(lo) if lo.startswith("0") or len(lo) == len(hi) else 0
    a, b = int(lo), int(hi)
    return [] if b < a or b - a > MAX_HOSTS else [str(n).zfill(width) for n in range(a, b + 1)]


def _expand_one(word: str, budget: int) -> list[str]:
    m = re.search(r"\[([^\[\]]*)\]", word)
    if not m:
        return [word] if "[" not in word and "]" not in word else []
    head, tail = word[: m.start()], word[m.end():]
    values: list[str] = []
    for item in m.group(1).split(","):
        values.extend(_range(item))
        if len(values) > budget:
            return []
    out: list[str] = []
    for v in values:
        for rest in _expand_one(tail, budget):
            out.append(head + v + rest)
            if len(out) > budget:
                return []
    return out


def expand(text: object) -> list[str]:
    """``node[01-03],login1`` -> ``['node01', 'node02', 'node03', 'login1']`` (order kept).

    A part that cannot be read is left out; anything not a string gives []."""
    if not isinstance(text, str):
        return []
    out: list[str] = []
    for word in _split_top(text):
        out.extend(_expand_one(word, MAX_HOSTS - len(out)))
        if len(out) >= MAX_HOSTS:
            return out[:MAX_HOSTS]
    return out


def first(text: object) -> str | None:
    """The first host of a list (rank 0's node under ``srun``), or None."""
    hosts = expand(text)
    return hosts[0] if hosts else None


def compress(names: Iterable[str]) -> str:
    """``['node01', 'node02', 'node03', 'node07', 'login1']`` -> ``login1,node[01-03,07]``.

    Names with the same prefix and digit width are merged; the result is sorted and expands
    back to the same set of names (each as :func:`safe` shows it)."""
    groups: dict = {}
    plain: set = set()
    for name in names:
        name = safe(name)
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if not m:
            plain.add(name)
            continue
        prefix, digits = m.group(1), m.group(2)
        # One group per prefix and digit count: node01..node10 share a width, n9 and n10 do not.
        groups.setdefault((prefix, len(digits)), set()).add(int(digits))
    parts = sorted(plain)
    for (prefix, width), numbers in sorted(groups.items()):
        nums = sorted(numbers)
        texts = [str(n).zfill(width) for n in nums]
        if len(nums) == 1:
            parts.append(prefix + texts[0])
            continue
        runs, start = [], 0
        for i in range(1, len(nums) + 1):
            if i == len(nums) or nums[i] != nums[i - 1] + 1:
                runs.append(texts[start] if start == i - 1 else f"{texts[start]}-{texts[i - 1]}")
                start = i
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(parts)
