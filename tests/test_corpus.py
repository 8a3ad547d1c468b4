"""The public corpus (tests/corpus, tests/collect_env; docs/corpus.md) scored by
benchmarks/corpus_score.py: every file read, every field a reader sees right
but those listed as pending, no check crashing, and no finding a file does not
call for, and issue 10's targets; the pending lists only shrink: a test fails
when one of their entries comes right, so it is taken out."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("corpus_score", ROOT / "benchmarks" / "corpus_score.py")
score = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(score)

ROWS, SUMMARY = score.run()
CATALOGUE = (ROOT / "docs" / "checks.md").read_text()
DOCTOR_SOURCE = "\n".join(p.read_text() for p in sorted((ROOT / "debtorch" / "doctor").glob("*.py")))


def _ids(rows):
    return [r["file"] for r in rows]


def test_every_corpus_file_is_read_without_error_and_no_check_crashes():
    assert [r["file"] for r in ROWS if not r["parsed"]] == []
    assert [(r["file"], r["crashed"]) for r in ROWS if r.get("crashed")] == []


def test_the_corpus_covers_what_issue_10_asks_for():
    kinds = SUMMARY["kinds"]
    assert kinds["collect_env"]["files"] >= 50 and kinds["nvidia-smi-xml"]["files"] >= 20
    assert kinds["os-release"]["files"] >= 40 and kinds["cpuinfo"]["files"] >= 10
    per_class = SUMMARY["verdicts"]["per_class"]
    assert all(per_class[c]["expected"] >= 1 for c in score.CLASSES), per_class
    assert all(SUMMARY["settings"][s]["expected"] >= 2 for s in ("wsl", "non-debian", "container"))


@pytest.mark.parametrize("row", ROWS, ids=_ids(ROWS))
def test_fields_are_right_but_the_pending_ones(row):
    """A field the reader gets wrong must be listed in the file's pending_facts; a pending
    field that comes right must leave the list."""
    fields = row["fields"]
    pending = set(row["expected"].get("pending_facts", []))
    wrong = {path for path, _got, _want in fields["wrong"]}
    assert wrong <= pending, [w for w in fields["wrong"] if w[0] not in pending]
    assert fields["pending_right"] == [], f"now right, take out of pending_facts: {fields['pending_right']}"


SMI = [r for r in ROWS if r["kind"] == "nvidia-smi-xml"]


@pytest.mark.parametrize("row", SMI, ids=_ids(SMI))
def test_checks_give_every_gpu_its_compute_capability(row):
    pending = row["expected"]["knowledge"].get("pending", [])
    if pending:
        assert row["knowledge"]["wrong"], "now right: take [knowledge] pending out"
    else:
        assert row["knowledge"]["wrong"] == []


JUDGED = [r for r in ROWS if r["kind"] in ("collect_env", "os-release")]


@pytest.mark.parametrize("row", JUDGED, ids=_ids(JUDGED))
def test_the_doctor_gives_no_finding_a_file_does_not_call_for(row):
    """Like tests/test_collectenv.py: nothing unexpected, every expected id whose check
    exists is given, and a pending id is not (take it out when it is)."""
    verdict = row["expected"]["verdict"]
    want, pending = set(verdict["ids"]), set(verdict.get("pending", []))
    got = set(row["ids"])
    assert all(f"### {fid}:" in CATALOGUE for fid in want), sorted(f for f in want if f"### {f}:" not in CATALOGUE)
    assert pending <= want
    assert got <= want, f"unexpected: {sorted(got - want)}"
    assert not (pending & got), f"now found, no longer pending: {sorted(pending & got)}"
    implemented = {fid for fid in want - pending if f'"{fid}"' in DOCTOR_SOURCE}
    assert implemented <= got, f"missing: {sorted(implemented - got)}"


@pytest.mark.parametrize("kind, pattern", [
    ("collect_env", "*.txt"), ("nvidia-smi-xml", "*.xml"), ("cpuinfo", "*cpuinfo*"), ("cpuinfo", "*-24vcpu"),
])
def test_every_file_is_in_its_folders_sources(kind, pattern):
    folder = ROOT / "tests" / "corpus" / kind
    sources = (folder / "SOURCES.md").read_text()
    for path in folder.glob(pattern):
        if path.suffix not in (".toml", ".md"):
            assert f"`{path.name}`" in sources, path.name


def test_every_os_tree_file_is_in_the_sources():
    folder = ROOT / "tests" / "corpus" / "os-release"
    sources = (folder / "SOURCES.md").read_text()
    for path in folder.rglob("*"):
        if path.is_file() and path.name not in ("SOURCES.md", "expected.toml"):
            assert f"`{path.relative_to(folder)}`" in sources, path


def test_verdict_classes_come_from_one_table_of_ids():
    """Every id the class table names is a documented finding, and a report's class is
    decided by its findings alone."""
    for cls, ids in score.CLASS_IDS.items():
        for fid in ids:
            assert f"### {fid}:" in CATALOGUE, (cls, fid)
    assert score.verdict_class([]) == "healthy"


def test_expected_classes_are_known():
    for r in ROWS:
        if r["kind"] == "collect_env":
            assert r["expected"]["verdict"]["class"] in score.EXPECTED_CLASSES, r["file"]
            assert re.fullmatch(r"[a-z-]+", "".join(r["expected"]["verdict"].get("settings", ["x"]))), r["file"]


def test_a_reports_expected_ids_imply_its_verdict():
    """The ids a report should get and its class agree: a report whose fault the text cannot
    show expects no error of any class, and torch.E003 is the arch class the file names."""
    for r in ROWS:
        if r["kind"] != "collect_env":
            continue
        verdict = r["expected"]["verdict"]
        ids = set(verdict["ids"])
        implied = score.class_of(ids, {i for i in ids if ".E" in i}, verdict["class"] == "arch-too-old")
        assert implied == score.target(r), (r["file"], implied, verdict["class"])


def test_issue_10s_targets_hold():
    """Every file read, at least 98% of fields right, at least 95% of verdicts right and no
    class below 90%, every architecture without wheels flagged and none with wheels."""
    kinds = SUMMARY["kinds"]
    assert all(k["parsed"] == k["files"] for k in kinds.values())
    checked = sum(k["checked"] for k in kinds.values())
    assert sum(k["right"] for k in kinds.values()) >= 0.98 * checked
    v = SUMMARY["verdicts"]
    assert v["right"] >= 0.95 * v["reports"]
    low = {c: d["recall"] for c, d in v["per_class"].items() if d["recall"] is not None and d["recall"] < 0.9}
    assert low == {}
    cn = SUMMARY["cpu_no_wheels"]
    assert cn["flagged"] == cn["files"] and cn["others_flagged"] == 0
