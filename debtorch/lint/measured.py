"""Host waits per step read from the code: verify-train's "host waits per step" off CUDA (on CUDA the
worker counts them, :mod:`debtorch.hostwaits`).  What a ``--workload`` runs per step: docs/lint.md.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from debtorch.lint.api import parse, read_script
from debtorch.lint.checks import sync_findings
from debtorch.lint.result import Located
from debtorch.lint.script import DEVICE, Flow, Function, Region, Script, Walker, identifier, named_values


def _workload_functions(script: Script) -> List[Function]:
    """``forward`` methods of the file's classes and the functions named as ``loss_fn``."""
    out = [m["forward"] for m in script.methods.values() if "forward" in m]
    for name in set(map(identifier, named_values(script, "loss_fn"))):
        out.extend(script.functions.get(name, ()))
    return out


def static_waits(path: str) -> List[Located]:
    """The places in ``path`` that would make the host wait for the GPU every step (W001-W003); none
    when it cannot be read or parsed."""
    data, error = read_script(path)
    if error is not None:
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
        regions.append(Region(func, func))
        walker = Walker(script, regions[-1])
        walker.visited.add(func)
        walker.run()
        # what the engine passes: inputs and outputs on the device
        flow.env[func] = {a.arg: DEVICE for a in func.args.posonlyargs + func.args.args if a.arg not in ("self", "cls")}
    return sorted(sync_findings(script, flow, regions), key=Located.sort_key)


def static_result(path: Optional[str]) -> Dict[str, Any]:
    """:func:`static_waits` as a result of the shape :func:`count_host_waits` returns (measured False)."""
    found = static_waits(path) if path else []
    return {"measured": False, "steps": None, "per_step": float(len(found)), "file": path,
            "lines": [{"path": f.path, "line": f.line, "per_step": 1.0, "id": f.id} for f in found]}


