"""Every row of every checks/ table pinned to its source (issue 10, point 9).

tests/knowledge_pins.txt holds one line per row: file, table, the row's key, a
digest of its values (every column but source, note and confidence) and a
digest of its source.  tests/test_knowledge_pins.py fails when a row changes,
appears or disappears without its pin, so an edit of checks/ never changes a
verdict silently.  To make the edit:

    python tests/knowledge_pins.py --update

re-pins the changed rows, but refuses a row whose values changed while its
source stayed the same: say what was re-read (the page's date or version, the
commit) in the row's source, then re-pin.  The pin file's diff then shows the
row and its new source to the reviewer.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:   # run as a script from the checkout
    sys.path.insert(0, str(ROOT))

from debtorch import knowledge  # noqa: E402

PINS = Path(__file__).resolve().parent / "knowledge_pins.txt"
# Columns that name a row in its table (unique: a test checks it).
KEYS = {
    "toolkit": ("cuda",), "minor_compat": ("major",), "caveat": ("id",), "wheel": ("torch", "releases", "variant", "platform"),
    "gpu": ("name",), "release": ("codename",), "threshold": ("name",), "device": ("id",), "chip": ("chip",),
    "nvcc": ("cuda",), "machine": ("machine",), "archived": ("codename",),
    "files": ("releases", "platform", "variants"), "last_branch": ("arch",), "package": ("name", "release"),
    "architecture": ("debian",),
}
NOT_VALUES = ("source", "note", "confidence")


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:12]


def row_key(table: str, row: dict) -> str:
    parts = []
    for col in KEYS[table]:
        v = row.get(col, "")
        parts.append(v[0] if isinstance(v, list) else str(v))   # wheel rows: the first series they cover
    return "/".join(parts)


def current(folder: Path) -> dict:
    """{(file, table, key): (values digest, source digest)} of the tables in ``folder``."""
    out = {}
    kb = knowledge.Knowledge(folder)
    for name, tables in sorted(kb.tables.items()):
        for table, rows in tables.items():
            for row in rows:
                k = (name, table, row_key(table, row))
                if k in out:
                    raise ValueError(f"{name} [[{table}]] {k[2]!r}: two rows with the same key ({', '.join(KEYS[table])})")
                values = {c: v for c, v in row.items() if c not in NOT_VALUES}
                out[k] = (_digest(values), _digest(row.get("source", "")))
    return out


def read(path: Path = PINS) -> dict:
    pins = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, table, key, values, source = line.split("\t")
        pins[(name, table, key)] = (values, source)
    return pins


def problems(now: dict, pins: dict) -> list:
    """What differs between the tables and the pins, one line each."""
    out = []
    for k in sorted(set(now) | set(pins)):
        where = f"{k[0]} [[{k[1]}]] {k[2]!r}"
        if k not in pins:
            out.append(f"{where}: not pinned (a new row): python tests/knowledge_pins.py --update")
        elif k not in now:
            out.append(f"{where}: pinned but gone: python tests/knowledge_pins.py --update")
        elif now[k] != pins[k]:
            if now[k][0] != pins[k][0] and now[k][1] == pins[k][1]:
                out.append(f"{where}: values changed but the source did not: re-read the source, say what was read "
                           "(date, version, commit) in 'source', then python tests/knowledge_pins.py --update")
            else:
                out.append(f"{where}: changed with its source: python tests/knowledge_pins.py --update")
    return out


def write(now: dict, path: Path = PINS) -> None:
    lines = ["# file\ttable\tkey\tvalues digest\tsource digest  (tests/knowledge_pins.py; docs/knowledge.md)"]
    lines += ["\t".join((*k, *now[k])) for k in sorted(now)]
    path.write_text("\n".join(lines) + "\n")


def update(folder: Path, path: Path = PINS) -> list:
    """Re-pin ``folder``; returns the rows refused (values changed, same source), pinning nothing then."""
    now = current(folder)
    pins = read(path) if path.exists() else {}
    refused = [k for k in now if k in pins and now[k][0] != pins[k][0] and now[k][1] == pins[k][1]]
    if not refused:
        write(now, path)
    return refused


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="re-pin changed rows (not those changed without a new source)")
    ap.add_argument("--checks", default=str(ROOT / "checks"), help="the checks/ folder (default: the checkout's)")
    args = ap.parse_args(argv)
    folder = Path(args.checks)
    if args.update:
        refused = update(folder)
        for k in refused:
            print(f"{k[0]} [[{k[1]}]] {k[2]!r}: values changed but the source did not; not re-pinned", file=sys.stderr)
        return 1 if refused else 0
    found = problems(current(folder), read())
    print("\n".join(found) or "every row pinned")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
