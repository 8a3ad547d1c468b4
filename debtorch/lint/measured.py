"""Host waits per step, read from the code or counted on CUDA (verify-train's "host waits per step").

* :func:`static_waits` reads a workload file (docs/workloads.md) and returns
  the places the static pass says would make the host wait for the GPU once
  per step: in the script's own training loops, and in what the training
  engine runs per step of a ``--workload``: the ``forward`` of every module
  class in the file and the function given as ``loss_fn``, with what they
  call in the same file.  Standard library only.
* :func:`count_host_waits` runs in the training worker, on CUDA: it runs
  some steps under ``torch.cuda.set_sync_debug_mode("warn")``, which warns
  at every synchronising CUDA call, and maps each warning to the innermost
  frame in the workload's files (its ``file:line``).  torch is passed in;
  this module never imports it.
"""

from __future__ import annotations

import ast
import collections
import os
import sys
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional

from debtorch.lint import parse
from debtorch.lint.checks import at, sync_hits
from debtorch.lint.result import Located
from debtorch.lint.script import DEVICE, Flow, Region, Script, _Walker, identifier

SYNC_WARNING = "called a synchronizing CUDA operation"  # c10/cuda/CUDAFunctions.cpp, warn_or_error_on_sync


def _workload_functions(script: Script) -> List[ast.AST]:
    """``forward`` methods of the file's classes and the functions named as ``loss_fn``."""
    out = [m["forward"] for m in script.methods.values() if "forward" in m]
    names = set()
    for n in script.nodes:
        if isinstance(n, ast.keyword) and n.arg == "loss_fn":
            names.add(identifier(n.value))
        elif isinstance(n, ast.Dict):
            for k, v in zip(n.keys, n.values):
                if isinstance(k, ast.Constant) and k.value == "loss_fn":
                    names.add(identifier(v))
    for name in names:
        out.extend(script.functions.get(name, ()))
    return out


def static_waits(path: str) -> List[Located]:
    """The places in ``path`` that would make the host wait for the GPU every step (W001-W003).

    A file that cannot be read or parsed gives no places.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return []
    tree, text, error = parse(data, path)
    if tree is None:
        return []
    try:
        return _static(Script(tree, text, path))
    except (Exception, RecursionError):  # noqa: BLE001 - a report line, never a crash of verify-train
        return []


def _static(script: Script) -> List[Located]:
    flow = Flow(script)
    regions = list(script.regions())
    for func in _workload_functions(script):
        region = Region(func, func)
        walker = _Walker(script, region)
        walker.visited.add(func)
        walker.block(func.body, False, func, 0)
        params = [a.arg for a in func.args.posonlyargs + func.args.args if a.arg not in ("self", "cls")]
        env = flow.env.setdefault(func, {})
        for p in params:
            env[p] = DEVICE   # what the engine passes: inputs and outputs on the device
        regions.append(region)
    found: Dict[tuple, Located] = {}
    seen = set()
    for region in regions:
        for step in region.steps:
            if id(step.node) in seen:
                continue
            seen.add(id(step.node))
            if not step.header and not step.guarded:
                for rule, node, code in sync_hits(script, step.node, flow, step.scope, step.test):
                    found.setdefault((node.lineno, node.col_offset), at(script, node, rule, call=code))
            flow.assign(step.node, step.scope)
    return sorted(found.values(), key=Located.sort_key)


def workload_file(spec: str) -> Optional[str]:
    """The file of a loaded workload's module (``module:function``), in the worker; None if unknown."""
    module = spec.split(":", 1)[0]
    if module == "builtin":
        module = "debtorch.train.workloads"
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    return os.path.realpath(path) if path else None


def count_host_waits(run: Callable[[Callable[[dict], None]], Any], files: Iterable[str], torch: Any) -> dict:
    """Count synchronising CUDA calls per step, by the line of ``files`` that made them.

    ``run(on_step)`` trains, calling ``on_step(event)`` after each optimizer
    step; the first step (warm-up: lazy initialisation, cuDNN autotuning) is
    not counted.  Returns ``{"measured": True, "steps", "per_step", "lines":
    [{"path", "line", "per_step"}], "elsewhere_per_step"}``, where
    ``elsewhere_per_step`` counts waits outside the workload's files (the
    engine's, PyTorch's own).
    """
    wanted = {os.path.realpath(f) for f in files if f}
    state = {"counting": False, "steps": 0}
    counts: collections.Counter = collections.Counter()

    def on_step(event: dict) -> None:
        if state["counting"]:
            state["steps"] += 1
        state["counting"] = True

    def show(message, category, filename, lineno, file=None, line=None):  # warnings.showwarning's signature
        if not state["counting"] or SYNC_WARNING not in str(message):
            return
        counts[_user_frame(wanted)] += 1

    get = getattr(torch.cuda, "get_sync_debug_mode", lambda: 0)
    before = get()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run(on_step)
        finally:
            torch.cuda.set_sync_debug_mode(before)
    steps = state["steps"]
    per = (lambda n: n / steps) if steps else (lambda n: float(n))
    lines = [{"path": p, "line": n, "per_step": per(c)} for (p, n), c in sorted(
        ((k, v) for k, v in counts.items() if k is not None), key=lambda kv: (-kv[1], kv[0]))]
    return {"measured": True, "steps": steps, "per_step": per(sum(c for k, c in counts.items() if k is not None)),
            "lines": lines, "elsewhere_per_step": per(counts.get(None, 0))}


def _user_frame(files: set) -> Optional[tuple]:
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if path in files or os.path.realpath(path) in files:
            return (os.path.realpath(path), frame.f_lineno)
        frame = frame.f_back
    return None


def static_result(path: Optional[str]) -> dict:
    """:func:`static_waits` as a result of the shape :func:`count_host_waits` returns (measured False)."""
    found = static_waits(path) if path else []
    return {"measured": False, "steps": None, "per_step": float(len(found)), "file": path,
            "lines": [{"path": f.path, "line": f.line, "per_step": 1.0, "id": f.id} for f in found]}


def report_line(result: Optional[dict]) -> Optional[str]:
    """verify-train's line: ``host waits per step: N (file:line, ...)``."""
    if not result:
        return None
    n = result.get("per_step")
    places = [f"{os.path.basename(x['path'])}:{x['line']}" for x in result.get("lines") or []]
    where = f" ({', '.join(places[:6])}{', ...' if len(places) > 6 else ''})" if places else ""
    count = "-" if n is None else (f"{n:.0f}" if float(n).is_integer() else f"{n:.1f}")
    if result.get("measured"):
        how = f"measured with torch.cuda.set_sync_debug_mode over {result.get('steps')} steps"
        elsewhere = result.get("elsewhere_per_step")
        if elsewhere:
            how += f"; {elsewhere:.1f} more per step outside the workload's code"
    else:
        how = "read from the code: the lines that would wait on a GPU (debtorch lint)"
    return f"host waits per step: {count}{where}; {how}"
