"""debtorch lint on real public training scripts, against hand-checked expectations (tests/lint_corpus/).

Each script has a ``<name>.expected.toml`` in tests/lint_corpus/ listing every
finding the linter gives, each judged ``agree`` or ``reject``; a change that
adds, loses or moves a finding fails here until the expectation is judged
again. SOURCES.md names every file's origin, commit and licence. The public
scripts are not in the repository: ``python benchmarks/lint_corpus.py --fetch``
downloads them (tests/lint_corpus/corpus.py says where); without them only the
article's snippets are linted here.
"""

import collections
import tomllib
from pathlib import Path

import pytest

from debtorch.lint.api import lint_file, lint_paths

from lint_corpus import corpus

CORPUS = corpus.HERE
NAMES = corpus.expected_names()
SCRIPTS = [corpus.script(n) for n in NAMES]
FETCHED = corpus.folder().is_dir() and all(p.exists() for p in SCRIPTS)


def expected(path: Path) -> dict:
    return tomllib.loads((CORPUS / (path.stem + ".expected.toml")).read_text())


def _present(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} is not fetched: python benchmarks/lint_corpus.py --fetch")


def test_the_corpus_has_at_least_25_real_scripts_besides_the_articles_snippets():
    real = [n for n in NAMES if not n.startswith("article_")]
    assert len(real) >= 25
    sources = corpus.sources()
    assert sorted(sources) == real, "every public script has a row with its commit in SOURCES.md, and no other"
    assert not [p for p in CORPUS.glob("*.py") if not p.name.startswith("article_") and p.name not in ("corpus.py", "__init__.py")], \
        "public code is fetched, not kept in the repository"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_findings_match_the_hand_checked_expectations(path):
    _present(path)
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


@pytest.mark.skipif(not FETCHED, reason="the public scripts are not fetched: python benchmarks/lint_corpus.py --fetch")
def test_a_folder_with_a_file_that_is_not_python_3_lints_the_others():
    report = lint_paths([str(corpus.folder())])
    assert [Path(e.path).name for e in report.errors] == ["pytorch_examples_imagenet_fp16_2017.py"]
    assert report.errors[0].line == 221  # target.cuda(async=True)
    assert report.files + report.skipped == len([n for n in NAMES if not n.startswith("article_")]) - 1
    assert report.exit_code("warning") == 2
    assert not [f for f in report.findings if f.id == "script.E001"]
