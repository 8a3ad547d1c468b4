"""The id sections of the user docs, generated from the catalogue (checks/findings/*.toml).

A page holds each generated block between two marker lines; the word after ``ids`` selects the
entries (an area, ``os``, or a prefix, ``tune.R``), in the catalogue's order:

    <!-- ids os: generated from checks/findings/ (tests/catalogue_docs.py); edit the entries there -->
    ### os.E001: WSL 1 cannot use an NVIDIA GPU
    ...
    <!-- end ids -->

``python tests/catalogue_docs.py`` rewrites every block; tests/test_catalogue.py checks that they are
current and that every entry has its block on its page.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch.findings import Entry, catalogue  # noqa: E402

BEGIN, END = "<!-- ids ", "<!-- end ids -->"
NOTE = ": generated from checks/findings/ (tests/catalogue_docs.py); edit the entries there -->"
# tune's reasons are table rows: (column title of the settings, column title of the text).
TABLES = {"R": ("setting", "rule"), "M": ("settings", "measured"), "C": ("setting", "calibrated"),
          "P": ("setting", "from the job's watch")}


def selects(key: str, e: Entry) -> bool:
    return e.id.split(".")[0] == key or ("." in key and e.id.startswith(key))


def printed(fix: str) -> str:
    """A printed fix in the docs: each line a code span, the template's ``{name}`` as ``<name>``."""
    lines = []
    for line in fix.split("\n"):
        text = "".join(lit + (f"<{name}>" if name is not None else "")
                       for lit, name, _, _ in string.Formatter().parse(line))
        lines.append(f"`` {text} ``" if "`" in text else f"`{text}`")
    return "; ".join(lines)


def section(e: Entry) -> str:
    out = [f"### {e.id}: {e.title}" + (" (retired)" if e.retired else "")]
    fix = ("**Fix**", e.remedy) if e.remedy else ("**Fix** (as printed)", printed(e.fix) if e.fix else "")
    for label, text in (("**Means**", e.means), ("**Matters**", e.why), fix, ("**Source**", e.source)):
        if text:
            out.append(f"- {label}: {text}")
    return "\n".join(out)


def render(key: str) -> str:
    entries = [e for e in catalogue().values() if selects(key, e)]
    table = TABLES.get(key.split(".")[1][:1] if "." in key else "")
    if table:
        rows = [f"| id | {table[0]} | {table[1]} |", "|---|---|---|"]
        rows += [f"| {e.id}{' (retired)' if e.retired else ''} | {e.settings} | {e.means} |" for e in entries]
        return "\n".join(rows)
    return "\n\n".join(section(e) for e in entries)


def blocks(text: str) -> list:
    """[(key, first line, end line)] of the page's generated blocks (line indexes of the markers)."""
    lines, out = text.split("\n"), []
    for i, line in enumerate(lines):
        if line.startswith(BEGIN):
            key = line[len(BEGIN):].split(":", 1)[0]
            end = next(j for j in range(i + 1, len(lines)) if lines[j] == END)
            out.append((key, i, end))
    return out


def regenerate(text: str) -> str:
    lines = text.split("\n")
    for key, start, end in reversed(blocks(text)):
        lines[start:end + 1] = [BEGIN + key + NOTE, render(key), END]
    return "\n".join(lines)


def pages() -> list:
    return sorted({ROOT / "docs" / e.page for e in catalogue().values()})


if __name__ == "__main__":
    for page in pages():
        text = page.read_text()
        if regenerate(text) != text:
            page.write_text(regenerate(text))
            print(f"rewrote {page.relative_to(ROOT)}")
