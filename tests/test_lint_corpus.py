"""debtorch lint on real public training scripts, against hand-checked expectations (tests/lint_corpus/).

Each ``<name>.py`` has a ``<name>.expected.toml`` beside it listing every
finding the linter gives, each judged ``agree`` or ``reject``; a change that
adds, loses or moves a finding fails here until the expectation is judged
again. SOURCES.md names every file's origin and licence.
"""

import collections
import tomllib
from pathlib import Path

import pytest

from debtorch.lint.api import lint_file, lint_paths

CORPUS = Path(__file__).resolve().parent / "lint_corpus"
SCRIPTS = sorted(CORPUS.glob("*.py"))


def expected(path: Path) -> dict:
    return tomllib.loads(path.with_suffix(".expected.toml").read_text())


def test_the_corpus_has_at_least_25_real_scripts_besides_the_articles_snippets():
    real = [p for p in SCRIPTS if not p.name.startswith("article_")]
    assert len(real) >= 25
    sources = (CORPUS / "SOURCES.md").read_text()
    for p in SCRIPTS:
        assert p.with_suffix(".expected.toml").exists(), p.name
        assert f"{p.name}" in sources or p.name.startswith("article_"), f"{p.name} has no row in SOURCES.md"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_findings_match_the_hand_checked_expectations(path):
    doc = expected(path)
    res = lint_file(str(path))
    if "error" in doc:
        assert res.error is not None and doc["error"] in res.error.message
        return
    assert res.error is None, res.error
    got = collections.Counter((f.id, f.line) for f in res.findings)
    want = collections.Counter((f["id"], f["line"]) for f in doc.get("finding", []))
    assert got == want
    assert all(f["verdict"] in ("agree", "reject") for f in doc.get("finding", []))
    assert all(f.get("note") for f in doc.get("finding", []) if f["verdict"] == "reject"), "a rejection needs a note"


def test_precision_on_the_corpus_is_at_least_90_percent():
    verdicts = [f["verdict"] for p in SCRIPTS for f in expected(p).get("finding", [])]
    assert len(verdicts) >= 50
    assert verdicts.count("agree") / len(verdicts) >= 0.9


def test_a_folder_with_a_file_that_is_not_python_3_lints_the_others():
    report = lint_paths([str(CORPUS)])
    assert [Path(e.path).name for e in report.errors] == ["pytorch_examples_imagenet_fp16_2017.py"]
    assert report.errors[0].line == 221  # target.cuda(async=True)
    assert report.files + report.skipped == len(SCRIPTS) - 1
    assert report.exit_code("warning") == 2
    assert not [f for f in report.findings if f.id == "script.E001"]
