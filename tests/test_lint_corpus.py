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
from lint_corpus import corpus

from debtorch.lint.api import lint_file, lint_paths

CORPUS = corpus.HERE
NAMES = corpus.expected_names()
SCRIPTS = [corpus.script(n) for n in NAMES]
FETCHED = corpus.folder().is_dir() and all(p.exists() for p in SCRIPTS)


def expected(path: Path) -> dict:
    return tomllib.loads((CORPUS / (path.stem + ".expected.toml")).read_text())


def _present(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} is not fetched: python benchmarks/lint_corpus.py --fetch")


def test_the_corpus_has_at_least_40_real_scripts_besides_the_articles_snippets():
    real = [n for n in NAMES if not n.startswith("article_")]
    assert len(real) >= 40
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


def _scores(paths: list) -> tuple:
    """(findings judged, precision, recall) of the hand-checked expectations of ``paths``."""
    verdicts = [f["verdict"] for p in paths for f in expected(p).get("finding", [])]
    missed = sum(len(expected(p).get("missed", [])) for p in paths)
    agreed = verdicts.count("agree")
    return len(verdicts), agreed / len(verdicts), agreed / (agreed + missed)


HELD_OUT = [p for p in SCRIPTS if expected(p).get("split") == "held-out"]
DEVELOPMENT = [p for p in SCRIPTS if p not in HELD_OUT]


def test_the_development_split_keeps_its_measured_scores():
    """The development split (the scripts the rules were written against, held-out rounds 1 and 2 included),
    its 76 expectation files: precision 216 of 221 (97.7%), recall 216 of 220 (98.2%) at the rules of
    2d9f17f (the 69 scripts fetched here give 197 of 202 of those findings)."""
    judged, precision, recall = _scores(DEVELOPMENT)
    assert judged >= 221
    assert precision >= 216 / 221 and recall >= 216 / 220


def test_both_scored_held_out_rounds_before_the_last_are_development_now():
    """Rounds 1 and 2 were scored once each (benchmarks/results/lint.md keeps their numbers) and the rules
    were then changed on them: they count as development, with the development split's targets."""
    rounds = collections.Counter(expected(p).get("round") for p in DEVELOPMENT)
    assert rounds["held-out-1"] == 13 and rounds["held-out-2"] == 16
    judged, precision, recall = _scores([p for p in DEVELOPMENT if expected(p).get("round")])
    assert precision >= 0.95 and recall >= 0.9


def test_the_held_out_split_keeps_its_measured_scores():
    """Issue 31's held-out split (round 3: 19 scripts from 19 new repositories, labelled before linting,
    scored once with the rules frozen at 2d9f17f): precision 60 of 60 (100%), recall 60 of 65 (92%); the
    targets (95% and 90%) are met. This holds the measured floor; a rule change that raises it updates the
    expectations, never the labels."""
    assert len(HELD_OUT) >= 15
    assert {expected(p).get("round") for p in HELD_OUT} == {"held-out-3"}
    judged, precision, recall = _scores(HELD_OUT)
    assert judged >= 60
    assert precision >= 1.0 and recall >= 60 / 65


def test_the_held_out_expectations_keep_every_label_made_before_the_run():
    """held_out_3_labels.toml was committed before lint ran on round 3: each label is an agreed finding or a
    miss of the scored expectations, and every other finding there says it was judged after the run."""
    labels = tomllib.loads((CORPUS / "held_out_3_labels.toml").read_text())
    assert sorted(n + ".py" for n in labels) == sorted(p.name for p in HELD_OUT)
    for name, doc in labels.items():
        exp = expected(CORPUS / (name + ".py"))
        kept = collections.Counter((f["id"], f["line"]) for f in exp.get("finding", [])
                                   if f["note"].startswith("labelled before the run"))
        kept.update((m["id"], m["line"]) for m in exp.get("missed", []))
        assert kept == collections.Counter((lab["id"], lab["line"]) for lab in doc["label"]), name
        assert all(f["verdict"] == "agree" for f in exp.get("finding", []) if f["note"].startswith("labelled"))
        assert all("judged after the run" in f["note"] for f in exp.get("finding", [])
                   if not f["note"].startswith("labelled before the run")), name


# Issue 22's patterns, each in a real script (the same patterns on minimal scripts: tests/test_lint_steps.py).
REAL_CASES = [
    ("a loss scaler given the loss and the optimizer", "deit_engine.py", "script.W001", 57),
    ("a step method overridden in a subclass", "detectron2_train_loop_v06.py", "script.W001", 316),
    ("a deprecated AMP import line", "detectron2_train_loop_v06.py", "script.W007", 377),
    ("sum(loss_dict.values())", "detectron2_plain_train_net.py", "script.W003", 142),
    ("the result of clip_grad_norm_", "build_nanogpt_train_gpt2.py", "script.W002", 516),
    ("a tensor unpacked into a % format", "yolov5_train.py", "script.W002", 428),
    ("a loader held in a dict", "pytorch_tutorials_transfer_learning.py", "script.I003", 103),
    ("num_workers from an argparse default of 0", "pfld_train.py", "script.W005", 128),
    ("accumulation under DDP through a loss scaler", "swin_transformer_main.py", "script.W012", 200),
    ("accumulation under DDP, counted by name", "yolov5_train.py", "script.W012", 410),
]
# ... and what must stay silent: the per-step code after `if not should_log: return`, a sys.exit() branch,
# param_groups, accumulation with require_backward_grad_sync.
REAL_SILENT = [
    ("an early return before logging", "torchtitan_train.py", "script.W001", 407),
    ("a branch that ends in sys.exit()", "dino_main_dino.py", "script.W001", 323),
    ("optimizer.param_groups are not tensors", "convnext_engine.py", "script.W003", 103),
    ("require_backward_grad_sync", "build_nanogpt_train_gpt2.py", "script.W012", 500),
]


@pytest.mark.parametrize("what,name,fid,line", REAL_CASES + REAL_SILENT, ids=[c[0] for c in REAL_CASES + REAL_SILENT])
def test_issue_22_patterns_in_real_scripts(what, name, fid, line):
    path = corpus.script(name)
    _present(path)
    got = {(f.id, f.line) for f in lint_file(str(path)).findings}
    assert ((fid, line) in got) == ((what, name, fid, line) in REAL_CASES)


@pytest.mark.skipif(not FETCHED, reason="the public scripts are not fetched: python benchmarks/lint_corpus.py --fetch")
def test_a_folder_with_a_file_that_is_not_python_3_lints_the_others():
    report = lint_paths([str(corpus.folder())])
    assert [Path(e.path).name for e in report.errors] == ["pytorch_examples_imagenet_fp16_2017.py"]
    assert report.errors[0].line == 221  # target.cuda(async=True)
    assert report.files + report.skipped == len([n for n in NAMES if not n.startswith("article_")]) - 1
    assert report.exit_code("warning") == 2
    assert not [f for f in report.findings if f.id == "script.E001"]
