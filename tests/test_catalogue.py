"""The one catalogue of ids (checks/findings/*.toml): well formed, used by the code, and the docs' id
sections generated from it (tests/catalogue_docs.py)."""

import ast
import string
from pathlib import Path

import pytest
from catalogue_docs import BEGIN, blocks, pages, regenerate, selects

from debtorch.findings import LETTER_LEVELS, catalogue, finding

ROOT = Path(__file__).resolve().parent.parent
# What each kind of id is: findings (E, W, I) everywhere, tune's reasons (R rules, M measured, C calibrated, P from a watch).
LETTERS = {"tune": "RMCP"}


def is_id(text: str) -> bool:
    """Shaped like a catalogue id: ``area.LNNN`` (``driver.E001``, ``tune.R020``)."""
    area, _, code = text.partition(".")
    return area.isalpha() and area.islower() and len(code) == 4 and code[0].isupper() and code[1:].isdigit()


def fields(template: str) -> set:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def test_entries_are_well_formed():
    entries = catalogue()
    assert len(entries) > 150
    for e in entries.values():
        area, code = e.id.split(".")
        assert is_id(e.id) and code[0] in LETTERS.get(area, "".join(LETTER_LEVELS)), e.id
        assert e.title and "\n" not in e.title + e.message, e.id
        assert e.means or e.why or e.fix or e.remedy, f"{e.id} says nothing in the docs"
        for v in e.variants.values():
            assert set(v) <= {"message", "fix"} and "\n" not in v.get("message", ""), e.id
            fields(v.get("message", "")), fields(v.get("fix", ""))          # templates parse
        fields(e.message), fields(e.fix)
        if area == "script":
            assert e.source and e.why and e.fix, f"{e.id}: lint's rules each name a source, a cost and a fix"


def test_a_finding_is_its_entry_filled_in():
    f = finding("gpu.E003", index=2, about="GPU 2")
    assert (f.level, f.message, f.fix, f.about) == ("error", "compute mode is Prohibited: no CUDA context can be "
                                                    "created", "sudo nvidia-smi -c DEFAULT -i 2", "GPU 2")
    assert finding("os.I002", variant="not_linux", name="macOS").message == "macOS is not Linux"
    assert finding("os.I002", name="Fedora", fix="tailored").fix == "tailored"
    with pytest.raises(KeyError):
        finding("gpu.E003")                     # a value its template needs is missing
    with pytest.raises(ValueError):
        finding("tune.R001")                    # a reason, not a finding


def _code_ids() -> set:
    """Every string constant in debtorch/ that is an id (the whole string, as the code names one)."""
    found = set()
    for path in (ROOT / "debtorch").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_id(node.value):
                found.add(node.value)
    return found


def test_every_id_the_code_names_is_in_the_catalogue_and_every_live_entry_is_used():
    live = {i for i, e in catalogue().items() if not e.retired}
    named = _code_ids()
    assert not named - set(catalogue()), "ids in the code but not in checks/findings/"
    assert not live - named, "entries no code names: mark them retired = true (ids are never reused)"


def test_every_entry_has_one_generated_block_on_its_page():
    for page in pages():
        keys = [key for key, _, _ in blocks(page.read_text())]
        on_page = [e for e in catalogue().values() if ROOT / "docs" / e.page == page]
        for e in on_page:
            assert sum(selects(k, e) for k in keys) == 1, f"{e.id}: one block on docs/{e.page} must select it"
        for k in keys:
            assert any(selects(k, e) for e in on_page), f"docs/{page.name}: block {k!r} selects no entry"


def test_generated_blocks_are_current():
    stale = [p.name for p in pages() if regenerate(p.read_text()) != p.read_text()]
    assert not stale, f"docs out of date with checks/findings/: run python tests/catalogue_docs.py ({stale})"


def _outside_blocks(text: str) -> tuple:
    """(headings that name an id, ids in a table row's first cell) of a page, outside its generated blocks."""
    inside, headings, cells = False, [], []
    for line in text.split("\n"):
        inside = (inside or line.startswith(BEGIN)) and not line.startswith("<!-- end ids")
        words = line.split()
        if inside or len(words) < 2:
            continue
        if line.startswith("#") and is_id(words[1].rstrip(":")):
            headings.append(line)
        if line.startswith("| ") and is_id(words[1]):
            cells.append(words[1])
    return headings, cells


def test_no_page_documents_an_id_by_hand_and_its_tables_name_catalogued_ids():
    for page in sorted((ROOT / "docs").glob("*.md")):
        headings, cells = _outside_blocks(page.read_text())
        assert not headings, f"docs/{page.name}: an id documented outside checks/findings/: {headings}"
        assert set(cells) <= set(catalogue()), f"docs/{page.name}: a table names unknown ids"
