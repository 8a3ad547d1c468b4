"""Where debtorch still reads a result by a string key (issue 32: fewer than 20 such reads).

A *result key* is a key of a document debtorch writes of a result: verify-train's summary, trials,
convergence and multi-process runs, budget, host waits, profile, attribution and failure, the worker's
answer to ``load``; tune's measurement, calibration and prescription; cfg.watch's lines (all read from the
documents recorded in tests/recorded/).  A *read* is ``x["key"]`` or ``x.get("key", ...)`` with such a key,
in the modules that make or read those results (:data:`SCOPE`), outside a ``to_json`` or ``from_json``
(where a result meets its JSON, the one place its keys are spelled).

The same words name other things: a request the worker reads (its wire input), the error context it
keeps, torch's state it saves and puts back, a config file or a settings dict, torch's own objects.  A read
whose receiver is one of those (:data:`NOT_RESULTS`, each with the reason) is not counted, but listed.

    python tests/result_keys.py      # every counted read, then the ones left out and why
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "recorded"

# The modules that make or read the results (debtorch/ elsewhere reads other documents: facts, fleet's).
SCOPE = ("debtorch/tune", "debtorch/train", "debtorch/verify", "debtorch/report/verify.py", "debtorch/report/tune.py",
         "debtorch/report/plot.py", "debtorch/cli/tune.py", "debtorch/cli/verify_train.py")
VERIFY_PARTS = ("summary", "trials", "converge", "ddp", "budget", "host_waits", "profile", "attribution", "failure",
                "workload")
TUNE_PARTS = ("measurement", "calibration", "prescription")
FROM_JSON = ("to_json", "from_json")

# (module, the receiver's name) -> why what it reads is no result.
NOT_RESULTS = {
    ("debtorch/train/worker.py", "req"): "a request the worker reads: its wire input",
    ("debtorch/train/worker.py", "ctx"): "the context a failing request keeps for its one-line account",
    ("debtorch/train/worker.py", "fit"): "the worker's own suggestion, made two lines above",
    ("debtorch/train/worker.py", "sys"): "sys.modules",
    ("debtorch/train/distributed.py", "req"): "the request a rank reads: its input",
    ("debtorch/train/engine.py", "distributed"): "the rank and world size a distributed trial is given",
    ("debtorch/train/engine.py", "dist"): "the same, in the result's making",
    ("debtorch/train/apply.py", "done"): "the torch flags configure() set",
    ("debtorch/train/apply.py", "saved"): "torch's state, saved to be put back",
    ("debtorch/tune/config.py", "doc"): "the config file being parsed",
    ("debtorch/tune/config.py", "schedule"): "the config file's [schedule]",
    ("debtorch/tune/config.py", "tuned"): "the config file's [tuned]",
    ("debtorch/tune/config.py", "values"): "settings fields checked against the machine's bound",
    ("debtorch/tune/runtime.py", "group"): "an optimizer's parameter group",
    ("debtorch/tune/watch.py", "sys"): "sys.modules",
    ("debtorch/tune/prescribe.py", "record"): "a watch file's line, read to choose the verdict it parses",
    ("debtorch/tune/prescribe.py", "chosen"): "the same",
}


@dataclass(frozen=True)
class Read:
    path: str
    line: int
    key: str
    receiver: str
    text: str


def _keys(doc: Any, out: set[str]) -> None:
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.add(k)
            _keys(v, out)
    elif isinstance(doc, list):
        for v in doc:
            _keys(v, out)


def result_keys() -> set[str]:
    """Every key of the recorded result documents."""
    keys: set[str] = set()
    for path in RECORDED.glob("verify-*.json"):
        doc = json.loads(path.read_text())
        for part in VERIFY_PARTS:
            _keys(doc.get(part), keys)
    for path in RECORDED.glob("tune-*.json"):
        doc = json.loads(path.read_text())
        for part in TUNE_PARTS:
            _keys(doc.get(part), keys)
    for pair in json.loads((RECORDED / "watch-lines.json").read_text()):
        _keys(pair["json"], keys)
    return keys


def _files() -> Iterator[Path]:
    for where in SCOPE:
        path = ROOT / where
        yield from (sorted(path.rglob("*.py")) if path.is_dir() else [path])


def _root_name(node: ast.expr) -> str:
    """The name an expression starts from: ``m`` of ``m.worker.get(...)``, ``failed`` of ``failed[0]``."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def reads() -> Iterator[Read]:
    """Every string-key read of a result key in :data:`SCOPE`, outside ``to_json`` and ``from_json``."""
    keys = result_keys()
    for path in _files():
        tree = ast.parse(path.read_text())
        rel = str(path.relative_to(ROOT))
        for fn in [tree, *ast.walk(tree)]:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in FROM_JSON:
                continue
            body = fn.body if isinstance(fn, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if body is None:
                continue
            for node in _own_nodes(body):
                found = _read(node)
                if found is not None and found[0] in keys:
                    yield Read(rel, node.lineno, found[0], found[1], ast.unparse(node)[:80])


def _own_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``body``, not those of the functions defined in it (each function is walked once)."""
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _read(node: ast.AST) -> tuple[str, str] | None:
    """(key, receiver's name) when ``node`` reads a literal key."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.slice.value, _root_name(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value, _root_name(node.func.value)
    return None


def counted() -> tuple[list[Read], list[tuple[Read, str]]]:
    """(the reads of results, the reads left out with the reason)."""
    inside, left_out = [], []
    for r in reads():
        why = NOT_RESULTS.get((r.path, r.receiver))
        if why is None:
            inside.append(r)
        else:
            left_out.append((r, why))
    return inside, left_out


def main() -> int:
    inside, left_out = counted()
    for r in inside:
        print(f"{r.path}:{r.line}: {r.text}")
    print(f"{len(inside)} string-key reads of result values")
    print(f"\nleft out ({len(left_out)}), not results:")
    for r, why in left_out:
        print(f"  {r.path}:{r.line}: {r.text}  [{why}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
