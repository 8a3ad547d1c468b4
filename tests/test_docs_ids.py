"""Every finding id the code can emit has an entry in docs/checks.md (debtorch lint's: docs/lint.md; cfg.watch's: docs/runtime.md), and the reverse."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ID = re.compile(r"\b([a-z]+\.[EWI]\d{3})\b")


def code_ids():
    found = set()
    for path in (ROOT / "debtorch").rglob("*.py"):
        for m in re.finditer(r"""["']([a-z]+\.[EWI]\d{3})["']""", path.read_text()):
            found.add(m.group(1))
    return found


DOCS = ("checks.md", "lint.md", "runtime.md")


def doc_text():
    return "\n".join((ROOT / "docs" / name).read_text() for name in DOCS)


def doc_ids():
    return set(re.findall(r"^### ([a-z]+\.[EWI]\d{3})", doc_text(), re.M))


def test_every_emitted_id_is_documented():
    missing = code_ids() - doc_ids()
    assert not missing, f"ids without an entry in docs/checks.md, docs/lint.md or docs/runtime.md: {sorted(missing)}"


def test_every_documented_id_exists_in_the_code():
    text = doc_text()
    retired = set(re.findall(r"^### ([a-z]+\.[EWI]\d{3}).*retired", text, re.M))
    stale = doc_ids() - code_ids() - retired
    assert not stale, f"documented ids that no code emits: {sorted(stale)}"
