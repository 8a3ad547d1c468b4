"""What a name can hold at a place in a function: a small reaching-definitions pass that every rule asks
(docs/lint.md, "How names are followed").

* :class:`Definitions` lists, per scope (a function or the module), every assignment of a name in source
  order: plain and annotated assignments, tuple unpacking (``a, b = x, y`` element by element, ``a, b =
  f()`` through the tuples ``f`` of the same file returns), ``for`` targets, ``with ... as``, ``:=``, and
  the changes made to a dict after it was built (``d[key] = v``, ``d.update(...)``).
* :meth:`Definitions.reaching` answers "what can ``name`` hold at ``node``": the assignments before it in
  the scope, and those after it inside a loop that holds both (they reach it on the next iteration); a
  parameter holds the arguments given at the same file's call sites; a name the scope never assigns is
  the module's.
* :func:`dict_items` reads a dict feeding ``**kwargs``: a literal, ``dict(...)``, or a name holding one,
  with the keys set on it later; unknown (None) when anything else may have changed it.

Conservative by design: when more than one value may reach, or any is unknown, callers stay silent.
Standard library only; nothing is imported or executed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

if TYPE_CHECKING:   # a type only: script.py imports this module (its definitions), not the other way
    from debtorch.lint.script import Script


def all_children(node: ast.AST) -> List[ast.AST]:
    """``node``'s children, kept on the node: ast.iter_child_nodes is slow, and the rules walk often."""
    kids: Optional[List[ast.AST]] = node.__dict__.get("_lint_all")
    if kids is None:
        kids = list(ast.iter_child_nodes(node))
        node.__dict__["_lint_all"] = kids
    return kids


LOOPS = (ast.For, ast.AsyncFor, ast.While)
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
MAX_DEPTH = 6   # how many hops (name -> value -> name ...) a question follows


@dataclass(frozen=True)
class Element:
    """The ``index``-th element of what ``value`` gives (a tuple unpacked from a call or a name)."""

    value: ast.AST
    index: int


@dataclass(frozen=True)
class Item:
    """An element of what ``iterable`` yields (a ``for`` target)."""

    iterable: ast.AST


@dataclass(frozen=True)
class Definition:
    """``name`` is given ``value`` (an expression, an :class:`Element` or an :class:`Item`) at ``node``;
    ``loops``: the loops of the scope around that assignment."""

    name: str
    value: object
    node: ast.AST
    loops: Tuple[ast.AST, ...]


@dataclass(frozen=True)
class KeySet:
    """``d[key] = value`` on a dict ``name`` after it was built (``key`` None: not a constant)."""

    name: str
    key: Optional[str]
    value: ast.AST


def _targets(target: ast.AST, value: object) -> List[Tuple[str, object]]:
    """(name, what it is given) for an assignment of ``value`` to ``target``, tuples unpacked."""
    if isinstance(target, ast.Starred):
        return []   # a starred part takes a list: not a value the rules follow
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if not isinstance(target, (ast.Tuple, ast.List)):
        return []
    out: List[Tuple[str, object]] = []
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and \
            not any(isinstance(e, ast.Starred) for e in value.elts):
        for t, v in zip(target.elts, value.elts):
            out += _targets(t, v)
        return out
    for i, t in enumerate(target.elts):
        if isinstance(value, ast.AST):
            out += _targets(t, Element(value, i))
    return out


class Definitions:
    """Every assignment of one scope, by name, in source order (see the module's docstring)."""

    def __init__(self, script: "Script", scope: ast.AST):
        self.script = script
        self.scope = scope
        self.by_name: Dict[str, List[Definition]] = {}
        self.key_sets: Dict[str, List[KeySet]] = {}
        self.changed: Dict[str, bool] = {}   # a dict changed by a call (d.update(...), d.setdefault(...))
        self.params: List[str] = []
        if isinstance(scope, FUNCS):
            a = scope.args
            self.params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
        body = scope.body if isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) else []
        self._walk(body, ())

    def _walk(self, body: List[ast.stmt], loops: Tuple[ast.AST, ...]) -> None:
        stack: List[Tuple[ast.AST, Tuple[ast.AST, ...]]] = [(s, loops) for s in reversed(body)]
        while stack:
            node, around = stack.pop()
            if isinstance(node, DEFS):
                if isinstance(node, FUNCS + (ast.ClassDef,)):
                    self._add(node.name, node, node, around)
                continue
            self._record(node, around)
            inner = around + (node,) if isinstance(node, LOOPS) else around
            stack.extend((c, inner) for c in reversed(all_children(node)))

    def _add(self, name: str, value: object, node: ast.AST, loops: Tuple[ast.AST, ...]) -> None:
        self.by_name.setdefault(name, []).append(Definition(name, value, node, loops))

    def _record(self, node: ast.AST, loops: Tuple[ast.AST, ...]) -> None:
        pairs: List[Tuple[str, object]] = []
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    key = t.slice.value if isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str) \
                        else None
                    self.key_sets.setdefault(t.value.id, []).append(KeySet(t.value.id, key, node.value))
                pairs += _targets(t, node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = _targets(node.target, node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            pairs = [(node.target.id, ast.BinOp(left=node.target, op=node.op, right=node.value))]
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            pairs = _targets(node.target, Item(node.iter))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs = _targets(node.optional_vars, node.context_expr)
        elif isinstance(node, ast.NamedExpr):
            pairs = _targets(node.target, node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.attr in ("update", "setdefault", "pop", "clear"):
            self.changed[node.func.value.id] = True
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                self.changed[name] = True
        for name, value in pairs:
            self._add(name, value, node, loops)

    def reaching(self, name: str, at: Optional[ast.AST]) -> Optional[List[object]]:
        """The values that may reach ``at`` (every one of the scope when ``at`` is None), or None when
        the scope does not assign ``name`` (then it is a parameter or the module's)."""
        defs = self.by_name.get(name)
        if not defs:
            return None
        if at is None:
            return [d.value for d in defs]
        line = getattr(at, "lineno", 0)
        out = []
        for d in defs:
            before = getattr(d.node, "lineno", 0) <= line
            in_same_loop = any(getattr(loop, "lineno", 0) <= line <= (getattr(loop, "end_lineno", None) or 0)
                               for loop in d.loops)
            if before or in_same_loop:
                out.append(d.value)
        return out


def definitions(script: "Script", scope: ast.AST) -> Definitions:
    """The scope's :class:`Definitions`, built once per script."""
    cache = script.definitions_cache
    found = cache.get(scope)
    if found is None:
        found = cache[scope] = Definitions(script, scope)
    return found


def values_of(script: "Script", name: str, scope: ast.AST, at: Optional[ast.AST]) -> Optional[List[Tuple[object, ast.AST]]]:
    """(value, the scope it is an expression of) for what ``name`` may hold at ``at``: the scope's own
    assignments, the arguments its callers give a parameter, or the module's assignments; None when
    nothing in the file says (a global of another module, a parameter nobody in the file passes)."""
    defs = definitions(script, scope)
    got = defs.reaching(name, at)
    if got is not None:
        return [(v, scope) for v in got]
    if name in defs.params and isinstance(scope, FUNCS):
        args = arguments_given(script, scope, name)
        return args if args else None
    if scope is not script.tree:
        module = definitions(script, script.tree).reaching(name, None)
        if module is not None:
            return [(v, script.tree) for v in module]
    return None


def arguments_given(script: "Script", func: ast.AST, param: str) -> List[Tuple[object, ast.AST]]:
    """(argument, the caller's scope) for every call of ``func`` in the file that binds ``param``."""
    if not isinstance(func, FUNCS):
        return []
    a = func.args
    positional = [p.arg for p in a.posonlyargs + a.args]
    is_method = func in script.owner
    out: List[Tuple[object, ast.AST]] = []
    for call in script.calls_named(func.name):
        if isinstance(call.func, ast.Call):
            continue
        shift = 1 if is_method and isinstance(call.func, ast.Attribute) else 0
        value: Optional[ast.AST] = next((k.value for k in call.keywords if k.arg == param), None)
        if value is None and param in positional:
            i = positional.index(param) - shift
            if 0 <= i < len(call.args) and not any(isinstance(x, ast.Starred) for x in call.args[: i + 1]):
                value = call.args[i]
        if value is not None:
            out.append((value, script.enclosing_scope(call)))
    return out


def dict_items(script: "Script", node: ast.AST, scope: ast.AST, at: Optional[ast.AST],
               depth: int = 0) -> Optional[Dict[str, ast.AST]]:
    """The keys and values of the dict ``node`` stands for, or None when not known for sure."""
    if depth > MAX_DEPTH:
        return None
    out: Dict[str, ast.AST] = {}
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values):
            if k is None:  # {**other}
                inner = dict_items(script, v, scope, at, depth + 1)
                if inner is None:
                    return None
                out.update(inner)
            elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                out[k.value] = v
            else:
                return None
        return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and \
            script.functions.get("dict") is None and len(node.args) <= 1:
        if node.args:
            inner = dict_items(script, node.args[0], scope, at, depth + 1)
            if inner is None:
                return None
            out.update(inner)
        for kw in node.keywords:
            if kw.arg is None:
                inner = dict_items(script, kw.value, scope, at, depth + 1)
                if inner is None:
                    return None
                out.update(inner)
            else:
                out[kw.arg] = kw.value
        return out
    if isinstance(node, ast.Name):
        values = values_of(script, node.id, scope, at)
        defs = definitions(script, scope)
        if not values or len(values) != 1 or defs.changed.get(node.id):
            return None
        value, where = values[0]
        if not isinstance(value, ast.AST):
            return None
        base = dict_items(script, value, where, None, depth + 1)
        if base is None:
            return None
        for ks in definitions(script, where).key_sets.get(node.id, []):
            if ks.key is None:
                return None
            base[ks.key] = ks.value
        return base
    return None
