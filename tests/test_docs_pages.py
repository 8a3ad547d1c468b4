"""User docs say what a user can do; benchmark runs and their history live in benchmarks/results/."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_page_holds_no_run_log_no_issue_number_and_no_path_outside_the_repository(page):
    for n, line in enumerate(page.read_text().splitlines(), 1):
        where = f"{page.relative_to(ROOT)}:{n}"
        assert not re.match(r"#### run|Measured 20\d\d-", line), f"{where}: a run log belongs in benchmarks/results/"
        assert not re.search(r"\bissues? \d", line, re.I), f"{where}: say what the issue asked for, not its number"
        assert "/work/" not in line, f"{where}: names a path outside the repository"


def test_every_link_from_docs_and_results_reaches_a_file():
    for page in PAGES + sorted(RESULTS.glob("*.md")):
        text = page.read_text()
        targets = [page.parent / t for t in re.findall(r"\]\(([^)#:]+)\)", text)]
        targets += [ROOT / t for t in re.findall(r"\bbenchmarks/results/[\w.-]+\.md", text)]
        for target in targets:
            assert target.exists(), f"{page.relative_to(ROOT)} points at {target}, which does not exist"


def test_every_results_file_is_listed_and_every_topic_is_linked_from_a_page():
    listing = (RESULTS / "README.md").read_text()
    pages = "\n".join(p.read_text() for p in PAGES)
    for path in sorted(RESULTS.iterdir()):
        if path.name != "README.md" and path.suffix in (".md", ".json"):
            name = path.name if path.suffix == ".md" else re.sub(r"-run\d.*|-\d{4}-.*", "", path.name)
            assert name in listing, f"benchmarks/results/README.md does not list {path.name}"
        if path.suffix == ".md" and path.name != "README.md" and not re.search(r"\d{4}-\d\d-\d\d", path.name):
            assert f"benchmarks/results/{path.name}" in pages, f"no page in docs/ links benchmarks/results/{path.name}"
