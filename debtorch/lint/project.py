"""One level into the project (docs/lint.md, "One level into the project"): the modules of the same
folder tree that a script imports, read (never imported or run) for what their functions return and
whether they train.

``debtorch lint DIR`` resolves imports against DIR; a script given alone, against its own folder.  A
module is found as a file of that tree (``helpers.py``, ``pkg/steps.py``, ``pkg/__init__.py``, relative
imports from the importing file's package); its top-level functions are summarised once per run
(:class:`FunctionSummary`) and its syntax tree dropped.  Only one level: what the helper itself
imports is not followed.  A module too large for what is left of the memory budget beside the script
being linted is not read (its functions are then unknown, which never makes a finding).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Callable, Dict, Optional

from debtorch import inputs


@dataclass(frozen=True)
class FunctionSummary:
    """What a function of another module of the project gives: ``returns``, the kind of its value
    (script.DEVICE, CPU, OTHER, MODEL) when every return agrees, else None; ``trains``, whether one call
    runs a training step (backward or an optimizer step, itself or through its own calls); ``syncs``,
    whether it calls ``no_sync()`` or sets ``require_backward_grad_sync`` (a DDP sync wrapper)."""

    returns: Optional[str]
    trains: bool
    syncs: bool = False


Summaries = Dict[str, FunctionSummary]
# (path, text) -> the summaries of that module's top-level functions; given by api.py (which knows the
# parser and the memory budget), so that this module stays below the rules.
Summarise = Callable[[str, bytes, int], Optional[Summaries]]


class Project:
    """The folder tree of a run and the summaries of the modules read so far (each file once)."""

    def __init__(self, root: str, summarise: Summarise, max_bytes: int):
        self.root = os.path.realpath(root)
        self.summarise = summarise
        self.max_bytes = max_bytes
        self._cache: Dict[str, Optional[Summaries]] = {}

    def inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real == self.root or real.startswith(self.root + os.sep)

    def module_file(self, importer: str, module: str, level: int) -> Optional[str]:
        """The file of ``module`` (``from ..module import`` has ``level`` 2) imported by ``importer``,
        when it is in the project's tree; else None."""
        parts = [p for p in module.split(".") if p] if module else []
        here = os.path.dirname(os.path.abspath(importer))
        if level:
            base = here
            for _ in range(level - 1):
                base = os.path.dirname(base)
            bases = [base]
        else:
            bases = [here, self.root]
        for base in bases:
            stem = os.path.join(base, *parts) if parts else base
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                if os.path.isfile(candidate) and self.inside(candidate) and \
                        os.path.realpath(candidate) != os.path.realpath(importer):
                    return candidate
        return None

    def functions(self, path: str, room: int) -> Optional[Summaries]:
        """The summaries of ``path``'s top-level functions, read once; None when it cannot be read
        or needs more than ``room`` bytes of memory to parse."""
        key = os.path.realpath(path)
        if key in self._cache:
            return self._cache[key]
        try:
            data = inputs.read_bytes(path, self.max_bytes)
        except (OSError, inputs.NotRegular):
            data = b""
        found = self.summarise(path, data, room) if data and len(data) <= self.max_bytes else None
        self._cache[key] = found
        return found


def imported_function(project: Optional[Project], importer: str, qualified: str, room: int) -> Optional[FunctionSummary]:
    """The summary of the function a script's import names (``helpers.to_host``, ``.utils.step``:
    the module path and the function's name), when the module is in the project."""
    if project is None or "." not in qualified:
        return None
    level = len(qualified) - len(qualified.lstrip("."))
    module, _, name = qualified.lstrip(".").rpartition(".")
    path = project.module_file(importer, module, level)
    if path is None:
        return None
    found = project.functions(path, room)
    return found.get(name) if found else None


def imported_method(project: Optional[Project], importer: str, cls: str, name: str, room: int) -> Optional[FunctionSummary]:
    """The summary of method ``name`` of the class a script's import names (``trainer.Trainer``), when its
    module is in the project and the class defines the method itself."""
    if "." not in cls:
        return None
    level = len(cls) - len(cls.lstrip("."))
    module, _, class_name = cls.lstrip(".").rpartition(".")
    path = project.module_file(importer, module, level) if project is not None else None
    found = project.functions(path, room) if project is not None and path is not None else None
    return found.get(f"{class_name}.{name}") if found else None


def top_functions(tree: ast.Module) -> Dict[str, ast.AST]:
    """The module's top-level functions by name, and its top-level classes' methods as ``Class.method``."""
    out: Dict[str, ast.AST] = {}
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[n.name] = n
        elif isinstance(n, ast.ClassDef):
            for m in n.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{n.name}.{m.name}"] = m
    return out
