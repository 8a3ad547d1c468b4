"""Where the lint corpus's scripts are.

The public training scripts are not in the repository (their code stays with
their projects): SOURCES.md names each one's repository, path and commit, and
``python benchmarks/lint_corpus.py --fetch`` downloads them into the corpus
folder, ``$DEBTORCH_LINT_CORPUS`` or ``.lint-corpus/`` at the top of the
checkout (git ignores it).  The hand-checked expectations (``*.expected.toml``)
and the article's own snippets (``article_*.py``, from the seed article) are
kept here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LINK = re.compile(r"\|\s*([\w.-]+\.py)\s*\|\s*\[[^\]]*\]\((https://github\.com/([^/]+)/([^/]+)/blob/([0-9a-f]{40})/([^)]+))\)")


def folder() -> Path:
    return Path(os.environ.get("DEBTORCH_LINT_CORPUS") or ROOT / ".lint-corpus")


def sources() -> dict:
    """{file name: raw download URL at the named commit} from SOURCES.md."""
    out = {}
    for m in LINK.finditer((HERE / "SOURCES.md").read_text()):
        name, _url, owner, repo, commit, path = m.groups()
        out[name] = f"https://raw.githubusercontent.com/{owner}/{repo}/{commit}/{path}"
    return out


def origins() -> dict[str, tuple[str, str, str, str]]:
    """{file name: (owner, repository, commit, path)} from SOURCES.md."""
    out = {}
    for m in LINK.finditer((HERE / "SOURCES.md").read_text()):
        name, _url, owner, repo, commit, path = m.groups()
        out[name] = (owner, repo, commit, path)
    return out


def expected_names() -> list:
    return sorted(p.name[: -len(".expected.toml")] + ".py" for p in HERE.glob("*.expected.toml"))


def script(name: str) -> Path:
    """The script's path: the article's snippets here, the public ones in the corpus folder."""
    return HERE / name if name.startswith("article_") else folder() / name
