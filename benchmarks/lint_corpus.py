"""debtorch lint on its corpus of real training scripts, and on Python's standard library.

    python benchmarks/lint_corpus.py            # the corpus table: precision and recall per rule, files, time
    python benchmarks/lint_corpus.py --stdlib   # also lint every .py of the standard library, timed
    python benchmarks/lint_corpus.py --markdown # the table as Markdown (benchmarks/results/lint.md)

Precision per rule counts the findings hand-judged "agree" among those the
linter reports (tests/lint_corpus/*.expected.toml); recall counts them
against the agreed findings plus the hand-labelled misses ([[missed]]).
The stdlib run is the "no crash, under 10 s" check of issue 15: every
.py under sysconfig's stdlib path, without site-packages; a crash is a
script.E001 finding or an exception, either of which fails the run.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch.findings import catalogue  # noqa: E402
from debtorch.lint.api import discover, lint_paths, parse  # noqa: E402
from debtorch.lint.checks import run_checks  # noqa: E402
from debtorch.lint.script import Script  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from lint_corpus import corpus  # noqa: E402

CORPUS = corpus.HERE


def expectations(split: str = "all") -> dict:
    """{script name: its expectations}; ``split``: "development", "held-out" (issue 31) or "all"."""
    out = {}
    for path in sorted(CORPUS.glob("*.expected.toml")):
        doc = tomllib.loads(path.read_text())
        if split == "all" or doc.get("split", "development") == split:
            out[path.name[: -len(".expected.toml")] + ".py"] = doc
    return out


def fetch() -> int:
    """Download the public scripts named in SOURCES.md, at their commits, into the corpus folder."""
    import urllib.request

    dest = corpus.folder()
    dest.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, url in sorted(corpus.sources().items()):
        target = dest / name
        if target.exists():
            continue
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                data = resp.read(4 * 1024 * 1024)
        except OSError as exc:
            print(f"{name}: {url}: {exc}", file=sys.stderr)
            failed += 1
            continue
        tmp = target.with_suffix(".part")
        tmp.write_bytes(data if data.endswith(b"\n") else data + b"\n")   # as kept: a final newline added
        tmp.replace(target)
        print(f"{name}: {len(data)} bytes from {url}")
    return 1 if failed else 0


def _git_dir(mirrors: Path, owner: str, repo: str) -> Path | None:
    """The git directory of ``owner/repo``'s snapshot under ``mirrors`` (``owner+repo/repo``, bare or with a
    work tree), or None when that repository has not been fetched."""
    top = mirrors / f"{owner}+{repo}" / "repo"
    for candidate in (top / ".git", top):
        if (candidate / "objects").is_dir():
            return candidate
    return None


def fill_from_mirrors(mirrors: Path) -> int:
    """Write each script of SOURCES.md into the corpus folder from a local git snapshot of its repository
    (``git show COMMIT:PATH``): for machines that cannot reach raw.githubusercontent.com but hold
    snapshots laid out as ``MIRRORS/<owner>+<repo>/repo`` (docs/corpus.md). Returns 1 when any script
    is still missing, naming the repositories to fetch."""
    import subprocess

    dest = corpus.folder()
    dest.mkdir(parents=True, exist_ok=True)
    missing: dict[str, list[str]] = {}
    for name, (owner, repo, commit, path) in sorted(corpus.origins().items()):
        target = dest / name
        if target.exists():
            continue
        git = _git_dir(mirrors, owner, repo)
        if git is None:
            missing.setdefault(f"{owner}/{repo}", []).append(name)
            continue
        shown = subprocess.run(["git", f"--git-dir={git}", "show", f"{commit}:{path}"],
                               capture_output=True, timeout=60, check=False)
        if shown.returncode != 0:
            missing.setdefault(f"{owner}/{repo} at {commit[:12]}", []).append(name)
            continue
        data = shown.stdout
        tmp = target.with_suffix(".part")
        tmp.write_bytes(data if data.endswith(b"\n") else data + b"\n")   # as kept: a final newline added
        tmp.replace(target)
        print(f"{name}: {len(data)} bytes from {owner}/{repo} {commit[:12]}:{path}")
    for where, names in sorted(missing.items()):
        print(f"not in {mirrors}: {where} ({', '.join(names)})", file=sys.stderr)
    return 1 if missing else 0


def corpus_paths(split: str = "all") -> list:
    names = set(expectations(split))
    return [str(corpus.script(n)) for n in corpus.expected_names() if n in names and corpus.script(n).exists()]


def corpus_table(repeats: int = 5, split: str = "all") -> tuple:
    """(rows, totals, files, seconds): per rule reported/agreed/rejected/missed, timed over ``repeats`` runs."""
    times = []
    report = None
    for _ in range(repeats):
        start = time.perf_counter()
        report = lint_paths(corpus_paths(split))
        times.append(time.perf_counter() - start)
    expected = expectations(split)
    got = collections.Counter((Path(f.path).name, f.id, f.line) for f in report.findings)
    verdict = {}
    for name, doc in expected.items():
        for f in doc.get("finding", []):
            verdict.setdefault((name, f["id"], f["line"]), []).append(f["verdict"])
    stats = collections.defaultdict(lambda: collections.Counter())
    for (name, fid, line), n in got.items():
        judged = verdict.get((name, fid, line), [])
        for i in range(n):
            v = judged[i] if i < len(judged) else "unjudged"
            stats[fid][v] += 1
            stats[fid]["reported"] += 1
    for name, doc in expected.items():
        for m in doc.get("missed", []):
            stats[m["id"]]["missed"] += 1
    rows = []
    for fid in sorted(stats):
        s = stats[fid]
        rows.append((fid, s["reported"], s["agree"], s["reject"], s["unjudged"], s["missed"]))
    totals = tuple(sum(r[i] for r in rows) for i in range(1, 6))
    return rows, totals, report.files + report.skipped + len(report.errors), statistics.median(times), report


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.0%}" if b else "-"


def print_table(rows, totals, files, seconds, markdown: bool) -> None:
    head = ("rule", "reported", "agreed", "rejected", "precision", "missed", "recall")
    lines = []
    for fid, rep, agree, reject, unjudged, missed in rows:
        lines.append((fid, str(rep), str(agree), str(reject), _ratio(agree, agree + reject + unjudged), str(missed),
                      _ratio(agree, agree + missed)))
    rep, agree, reject, unjudged, missed = totals
    lines.append(("all", str(rep), str(agree), str(reject), _ratio(agree, agree + reject + unjudged), str(missed),
                  _ratio(agree, agree + missed)))
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(x[i]) for x in [head] + lines) for i in range(len(head))]
        for line in [head] + lines:
            print("  ".join(c.ljust(w) for c, w in zip(line, widths)))
    if unjudged:
        print(f"warning: {unjudged} findings have no hand judgement in the .expected.toml files")
    print(f"files: {files}; time: {seconds * 1000:.0f} ms for the whole corpus (median of 5 runs)")


def stdlib_run() -> int:
    """Two runs over every .py of the standard library (site-packages left out).

    1. ``debtorch lint STDLIB`` as a user gets it: files that never mention
       torch are skipped unparsed (the stdlib has none that do), timed.
    2. The fuzz run: every file parsed and put through every rule as if it
       were a training script that mentions torch and runs on CUDA
       (``Script(..., assume_training=True)``), timed; a rule that raises is
       a script.E001 finding and fails the run, as does any exception.
    """
    root = sysconfig.get_paths()["stdlib"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    start = time.perf_counter()
    report = lint_paths([root])
    seconds = time.perf_counter() - start
    walked = report.files + report.skipped + len(report.errors)
    print(f"stdlib: {root} (load average {load:.2f} before the runs)")
    print(f"  debtorch lint: {walked} .py files, {report.files} mention torch and were checked, "
          f"{report.skipped} skipped unparsed; {len(report.findings)} findings; {seconds:.2f} s")
    files = discover([root])
    crashes, invalid, findings = [], 0, 0
    start = time.perf_counter()
    for path, _ in files:
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        tree, text, error = parse(data, path)
        if error is not None:
            invalid += 1
            continue
        found = run_checks(Script(tree, text, path, assume_training=True))
        findings += len(found)
        crashes.extend(f for f in found if f.id == "script.E001")
    seconds = time.perf_counter() - start
    print(f"  fuzz run, every file through every rule: {len(files)} files, {invalid} not valid Python "
          f"3.{sys.version_info.minor}, {findings} findings, {len(crashes)} crashes; {seconds:.2f} s")
    for c in crashes:
        print(f"    crash: {c.path}: {c.finding.message}")
    return 1 if crashes else 0


def folder_run(files: int = 100) -> None:
    """``debtorch lint DIR`` on a project folder of ``files`` scripts (the corpus's, copied round-robin,
    with a helpers module they import), timed: issue 31's "100-file project folder under 5 s"."""
    import shutil
    import tempfile

    sources = [Path(p) for p in corpus_paths()]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(files):
            src = sources[i % len(sources)]
            text = src.read_text(errors="replace")
            (Path(tmp) / f"m{i:03d}_{src.name}").write_text("from helpers import to_host\n" + text)
        shutil.copy(__file__, Path(tmp) / "helpers.py")
        load = os.getloadavg()[0]
        times = []
        for _ in range(3):
            start = time.perf_counter()
            report = lint_paths([tmp], torchfix=False)
            times.append(time.perf_counter() - start)
        print(f"project folder: {files + 1} files, {report.files} linted, {len(report.findings)} findings; "
              f"{statistics.median(times):.2f} s (median of 3; load average {load:.2f} before)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdlib", action="store_true", help="also lint Python's standard library, timed")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--fetch", action="store_true", help="download the public scripts (SOURCES.md) first")
    parser.add_argument("--from-mirrors", metavar="DIR", type=Path,
                        help="fill the corpus folder from git snapshots DIR/<owner>+<repo>/repo instead")
    parser.add_argument("--split", choices=("all", "development", "held-out"), default="all",
                        help="score one split of the corpus (issue 31's held-out scripts, or the others)")
    parser.add_argument("--folder", action="store_true", help="also time a 100-file project folder")
    args = parser.parse_args()
    if args.fetch and fetch():
        return 1
    if args.from_mirrors is not None and fill_from_mirrors(args.from_mirrors):
        return 1
    missing = [n for n in corpus.expected_names() if not corpus.script(n).exists()]
    if missing:
        print(f"{len(missing)} script(s) not in {corpus.folder()} (run with --fetch): {', '.join(missing[:5])}...",
              file=sys.stderr)
    rows, totals, files, seconds, report = corpus_table(split=args.split)
    print_table(rows, totals, files, seconds, args.markdown)
    if args.folder:
        folder_run()
    unknown = sorted({r[0] for r in rows} - set(catalogue()))
    if unknown:
        print(f"note: ids outside the catalogue: {', '.join(unknown)}")
    return stdlib_run() if args.stdlib else 0


if __name__ == "__main__":
    sys.exit(main())
