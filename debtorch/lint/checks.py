"""The rules of ``debtorch lint`` (docs/lint.md): plain functions of a :class:`Script` returning located
findings.  Precision first: a check names a pattern only where the code says enough to be sure (a value
known to be a GPU tensor, a DataLoader known to feed the training loop); when in doubt it says nothing.
"""

from __future__ import annotations

import ast
import collections
import functools
import io
import re
import tokenize
from typing import Callable, Iterator, List, Optional, Set, Tuple

from debtorch.findings import finding
from debtorch.lint.flow import arguments_given, dict_items, values_of
from debtorch.lint.result import Located, located
from debtorch.lint.script import (
    CPU,
    DEFS,
    DEVICE,
    FUNCS,
    LOADERISH,
    LOOPS,
    LOSSISH,
    MODEL,
    MODELISH,
    NOT_CONSTANT,
    OTHER,
    TENSOR_METHODS,
    Flow,
    Region,
    Script,
    argparse_default,
    argument,
    body_of,
    constant,
    constant_value,
    device_arg,
    identifier,
    is_mod,
    keyword,
    local_nodes,
    method,
    moved_to,
    named_values,
    names_in,
    root_name,
)

Check = Callable[[Script], Iterator[Located]]


def segment(script: Script, node: ast.AST, limit: int = 48) -> str:
    """The code of ``node`` (its first line), shortened to ``limit`` characters."""
    line = script.code(getattr(node, "lineno", 0))
    raw = line.encode("utf-8", "surrogatepass")
    start = getattr(node, "col_offset", 0) or 0
    end = getattr(node, "end_col_offset", None) if getattr(node, "end_lineno", None) == node.lineno else None
    text = raw[start:end].decode("utf-8", "replace") if end is not None else raw[start:].decode("utf-8", "replace")
    text = text.strip()
    if end is None or len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return text


def callee(script: Script, call: ast.Call) -> str:
    """A call as a message names it, never cut mid-expression: ``torch.nn.DataParallel(...)``."""
    return segment(script, call.func, 60) + ("(...)" if call.args or call.keywords else "()")


def column(script: Script, node: ast.AST) -> int:
    """1-based column in characters (ast counts UTF-8 bytes)."""
    line = script.code(getattr(node, "lineno", 0))
    start = getattr(node, "col_offset", 0) or 0
    return len(line.encode("utf-8", "surrogatepass")[:start].decode("utf-8", "replace")) + 1


def at(script: Script, node: ast.AST, id: str, variant: str = "", **values: str) -> Located:
    """The catalogue's ``id`` at ``node`` (docs/lint.md); ``values`` fill its message and fix."""
    line = getattr(node, "lineno", 1) or 1
    return located(script.path, line, column(script, node),
                   finding(id, about=f"{script.path}:{line}", variant=variant, **values), script.code(line))


# ---------------------------------------------------------------------------
# Host waits for the GPU in the loop (W001, W002, W003)

_CONVERT = ("float", "int", "bool", "round", "str", "repr", "print", "format")
# TensorBoard's SummaryWriter (and tensorboardX's) turn a tensor into a NumPy value as they log it:
# add_scalar(tag, value), add_scalars(tag, {name: value}), add_histogram(tag, values).
_TENSORBOARD = {"add_scalar": ("scalar_value", 1), "add_scalars": ("tag_scalar_dict", 1),
                "add_histogram": ("values", 1)}
_TRUTH_METHODS = frozenset("any all isnan isinf isfinite bool eq ne gt lt ge le equal allclose".split())


def _to_cpu(node: ast.AST) -> bool:
    """``x.cpu()``, ``x.to("cpu")``."""
    return method(node) == "cpu" or (method(node) == "to" and bool(node.args) and device_arg(node.args[0]) is False)


def _chain_has_cpu(node: ast.AST) -> bool:
    while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        if _to_cpu(node):
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def sync_hits(script: Script, node: ast.AST, flow: Flow, scope: ast.AST,
              is_test: bool) -> Iterator[Tuple[str, str, ast.AST, str]]:
    """(id, variant, node, code) for every place in ``node`` that makes the host wait for the GPU."""
    kind = lambda n: flow.classify(n, scope)  # noqa: E731
    flow.comprehensions(node, scope)
    flagged_items = False
    for n in local_nodes(node):
        if isinstance(n, ast.Call):
            m = method(n)
            recv = n.func.value if m else None
            if m in ("item", "tolist") or _to_cpu(n):
                k = kind(recv)  # .item() of anything but a host value; .cpu() of what is known to be a tensor
                # (or of a tensor method's result: x.detach(), out.argmax(1))
                wait = k not in (CPU, OTHER, MODEL) if m == "item" else k == DEVICE if m == "tolist" else \
                    (k == DEVICE or (k is None and method(recv) in TENSOR_METHODS)) and not MODELISH.match(identifier(recv))
                if wait and not _chain_has_cpu(recv):
                    flagged_items = True
                    yield "script.W001", "", n, segment(script, n)
            elif m in _TENSORBOARD and _logs_device_tensor(n, kind):
                yield "script.W001", "tensorboard", n, segment(script, n)
            elif m == "format" and isinstance(recv, ast.Constant) and isinstance(recv.value, str):
                if any(kind(a) == DEVICE for a in list(n.args) + [k.value for k in n.keywords]):
                    yield "script.W002", "", n, segment(script, n)
            elif m in ("", "synchronize") and script.qualname(n.func) == "torch.cuda.synchronize":
                yield "script.W001", "synchronize", n, segment(script, n)
            elif isinstance(n.func, ast.Name) and n.func.id in _CONVERT and n.func.id not in script.functions:
                if any(kind(a) == DEVICE and not isinstance(a, ast.JoinedStr) for a in n.args):
                    yield "script.W002", "", n, segment(script, n)
        elif isinstance(n, ast.FormattedValue):
            if kind(n.value) == DEVICE:
                yield "script.W002", "", n.value, "f-string {" + segment(script, n.value) + "}"
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and _is_text(n.left):
            parts = n.right.elts if isinstance(n.right, ast.Tuple) else [n.right]
            if any(kind(p) == DEVICE for p in parts):
                fmt = segment(script, n.left, 40)
                yield "script.W002", "", n, (f"({fmt})" if isinstance(n.left, ast.BinOp) else fmt) + " % " + \
                    ("(...)" if isinstance(n.right, ast.Tuple) else segment(script, n.right, 30))
        elif isinstance(n, (ast.IfExp, ast.Assert)) and _truth_waits(script, n.test, kind):
            yield "script.W003", "", n.test, segment(script, n.test)
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) and \
                _truth_waits(script, n.operand, kind):
            yield "script.W003", "", n, segment(script, n)
    if is_test and not flagged_items and _truth_waits(script, node, kind):
        yield "script.W003", "", node, segment(script, node)


def _logs_device_tensor(call: ast.Call, kind: Callable[[ast.AST], Optional[str]]) -> bool:
    """Is a TensorBoard ``add_scalar``/``add_scalars``/``add_histogram`` call given a GPU tensor?"""
    value = argument(call, *_TENSORBOARD[method(call)])
    if value is None:
        return False
    parts = [v for v in value.values if v is not None] if isinstance(value, ast.Dict) else [value]
    return any(kind(v) == DEVICE for v in parts)


def _is_text(node: ast.AST) -> bool:
    """A string expression: ``"%.3f"``, ``"%11s" * 2 + "%11.4g" * 5``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        return _is_text(node.left) or (isinstance(node.op, ast.Add) and _is_text(node.right))
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str))


def _truth_waits(script: Script, test: ast.AST, kind) -> bool:
    """Does evaluating ``test`` as a Python bool need a GPU tensor's value?"""
    if isinstance(test, ast.BoolOp):
        return any(_truth_waits(script, v, kind) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _truth_waits(script, test.operand, kind)
    if any(method(n) == "item" for n in local_nodes(test) if isinstance(n, ast.Call)):
        return False  # the .item() is the finding
    if isinstance(test, ast.Compare):
        return not any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops) and \
            any(kind(s) == DEVICE for s in [test.left] + test.comparators)
    if isinstance(test, ast.Call):
        if method(test) in _TRUTH_METHODS and kind(test.func.value) == DEVICE:
            return True
        name = script.qualname(test.func)
        return name.startswith("torch.") and name[6:] in _TRUTH_METHODS and any(kind(a) == DEVICE for a in test.args)
    return isinstance(test, (ast.Name, ast.Attribute, ast.Subscript)) and kind(test) == DEVICE


def check_syncs(script: Script) -> Iterator[Located]:
    return sync_findings(script, Flow(script)) if script.cuda_path else iter(())


def sync_findings(script: Script, flow: Flow, regions: Optional[List[Region]] = None) -> Iterator[Located]:
    """W001-W003 in what ``regions`` (default: the training loops) run every step, each place once."""
    seen: Set[Tuple[int, int, str]] = set()
    for step in script.per_step(regions):
        if not step.header and not step.guarded:
            for rule, variant, node, code in sync_hits(script, step.node, flow, step.scope, step.test):
                key = (node.lineno, node.col_offset, rule)
                if key not in seen:
                    seen.add(key)
                    yield at(script, node, rule, variant, call=code)
        flow.assign(step.node, step.scope)


# ---------------------------------------------------------------------------
# Copies without non_blocking where the loader pins memory (W004)

def _truthy_pin(value: ast.AST) -> bool:
    c = constant(value)
    return c is True or (c is NOT_CONSTANT and any(re.search(r"cuda|gpu", name, re.I) for name in names_in(value)))


def _non_blocking(call: ast.Call) -> bool:
    kw = keyword(call, "non_blocking") or keyword(call, "async")
    if kw is None:
        # x.to(device, None, True): to(device, dtype, non_blocking)
        return method(call) == "to" and len(call.args) >= 3 and constant(call.args[2]) is True
    return constant(kw) is not False


def _training_loader_pins(script: Script) -> Optional[bool]:
    """Does a training loader pin memory: True, False (every one is known not to), or None (no training
    loader known, or one whose ``**`` arguments are not shown)."""
    answers = []
    for call in training_loaders(script):
        kwargs, star = loader_kwargs(script, call, script.enclosing_scope(call))
        pin = kwargs.get("pin_memory")
        if pin is None and star:
            return None
        answers.append(pin is not None and _truthy_pin(pin))
    return any(answers) if answers else None


def check_copies(script: Script) -> Iterator[Located]:
    if not script.regions() or not any(map(_truthy_pin, named_values(script, "pin_memory"))):
        return
    if _training_loader_pins(script) is False:
        return  # the loader the training loop reads does not pin (another one of the file does)
    flow = Flow(script)
    for step in script.per_step():
        if not step.header and not step.guarded:
            for n in local_nodes(step.node):
                if not isinstance(n, ast.Call) or not (moved_to(n) or method(n) == "cuda"):
                    continue
                recv = n.func.value
                name = identifier(recv) or ""
                if MODELISH.match(name) or LOSSISH.search(name) or flow.classify(recv, step.scope) in (MODEL, OTHER):
                    continue
                if _fresh(script, recv, step.scope):
                    continue  # a tensor made on the host just now is not pinned: non_blocking would not help
                if _non_blocking(n):
                    continue
                code = segment(script, n, 60)
                yield at(script, n, "script.W004", call=code, fixed=_with_non_blocking(code))
        flow.assign(step.node, step.scope)


def _fresh(script: Script, recv: ast.AST, scope: ast.AST) -> bool:
    """Is ``recv`` a tensor built on the host in the loop (a call's result), not a pinned batch?"""
    if isinstance(recv, ast.Call):
        return method(recv) != "pin_memory"
    if isinstance(recv, ast.Name):
        made = script.kinds(scope).assigned.get(recv.id, [])
        return any(isinstance(v, ast.Call) and script.call_name(v).startswith("torch.") and not _variable(script, v)
                   for v in made)
    return False


def _variable(script: Script, call: ast.Call) -> bool:
    """``Variable(x)`` (torch.autograd's legacy wrapper): the tensor it is given, not a new one."""
    return script.call_name(call) in ("torch.autograd.Variable", "torch.autograd.variable.Variable")


def _with_non_blocking(code: str) -> str:
    if code.endswith("()"):
        return code[:-1] + "non_blocking=True)"
    return code[:-1] + ", non_blocking=True)" if code.endswith(")") else code + " with non_blocking=True"


# ---------------------------------------------------------------------------
# DataLoader construction (W005, I001, I002, I003)

def _unwrap_iter(node: ast.AST) -> ast.AST:
    """``enumerate(tqdm(loader))``, ``logger.log_every(loader, ...)`` -> ``loader``."""
    for _ in range(5):
        if not isinstance(node, ast.Call) or not node.args or identifier(node.func).endswith("DataLoader"):
            break
        loaderish = [a for a in node.args if isinstance(a, (ast.Name, ast.Attribute))
                     and LOADERISH.search(identifier(a) or "")]
        if loaderish:
            node = loaderish[0]
        elif identifier(node.func) in ("enumerate", "tqdm", "iter", "zip", "islice", "Bar", "track", "progress",
                                       "ProgressBar"):
            node = node.args[0]
        else:
            break
    return node


def _loop_sources(script: Script, region: Region) -> List[ast.AST]:
    """What a training loop takes its batches from: what a ``for`` loop iterates, and what the loop calls
    ``next()`` on (``for step in range(n): x, y = next(batches)``, ``while`` loops alike)."""
    out = [_unwrap_iter(region.loop.iter)] if isinstance(region.loop, (ast.For, ast.AsyncFor)) else []
    for step in region.steps:  # a next() that runs every step; one in a validation branch is another loader's
        if step.guarded or step.header or step.scope is not region.scope:
            continue
        out += [_unwrap_iter(n.args[0]) for n in local_nodes(step.node)
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next" and n.args]
    return out


_PASS_THROUGH = ("iter", "enumerate", "tqdm", "islice", "zip", "cycle", "chain", "Bar", "track", "progress", "ProgressBar")


def _generator_params(func: ast.AST) -> Set[str]:
    """The parameters a generator function re-yields the items of (``for b in loader: yield b``,
    ``yield from loader``), however deep in ``while True`` loops."""
    if not isinstance(func, FUNCS):
        return set()
    params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
    out: Set[str] = set()
    for n in local_nodes(func.body):
        if isinstance(n, ast.YieldFrom) and isinstance(n.value, ast.Name) and n.value.id in params:
            out.add(n.value.id)
        elif isinstance(n, (ast.For, ast.AsyncFor)) and isinstance(n.iter, ast.Name) and n.iter.id in params and \
                any(isinstance(y, ast.Yield) for y in local_nodes(n.body)):
            out.add(n.iter.id)
    return out


def _origins(script: Script, expr: ast.AST, scope: ast.AST, at: Optional[ast.AST], depth: int,
             calls: List[ast.Call], names: Set[str]) -> None:
    """The DataLoader calls ``expr`` may stand for, through assignments, parameters bound at the file's
    call sites, ``iter()``, progress bars and generators that re-yield a loader; the names met on the way
    (``names``) are matched against the file's assignments by name as well (attributes, dict entries)."""
    if depth > 6:
        return
    if isinstance(expr, ast.Call):
        if script.call_name(expr).endswith("DataLoader"):
            calls.append(expr)
            return
        func = expr.func
        if isinstance(func, ast.Name) and func.id in _PASS_THROUGH and func.id not in script.functions:
            for a in expr.args[: None if func.id in ("zip", "chain") else 1]:
                _origins(script, a, scope, at, depth + 1, calls, names)
            return
        for f in script.callees(expr, scope):
            for param in _generator_params(f):
                for value, where in arguments_given(script, f, param):
                    if isinstance(value, ast.expr) and value in _call_args(expr):
                        _origins(script, value, where, value, depth + 1, calls, names)
        return
    if isinstance(expr, ast.Name):
        names.add(expr.id)
        for value, where in values_of(script, expr.id, scope, at) or []:
            if isinstance(value, ast.expr):
                _origins(script, value, where, value, depth + 1, calls, names)
        return
    name = identifier(expr)
    if name:
        names.add(name)


def _call_args(call: ast.Call) -> List[ast.expr]:
    return list(call.args) + [k.value for k in call.keywords]


def training_loader_names(script: Script) -> Tuple[Set[str], List[ast.Call]]:
    """Names the training loops iterate (following one level of function parameters), and DataLoader calls iterated directly."""
    names: Set[str] = set()
    direct: List[ast.Call] = []
    for region in script.regions():
        for src in _loop_sources(script, region):
            if isinstance(src, ast.Call) and script.call_name(src).endswith("DataLoader"):
                direct.append(src)
                continue
            if isinstance(src, (ast.Name, ast.Call)):
                _origins(script, src, region.scope, src, 0, direct, names)
            name = identifier(src)
            if not name or isinstance(src, ast.Call):
                continue
            found = {name}
            scope = region.scope
            params = [a.arg for a in scope.args.posonlyargs + scope.args.args] if isinstance(scope, FUNCS) else []
            if name in params:
                found.update(_argument_names(script, scope, params.index(name), name))
            if isinstance(src, ast.Subscript):  # loaders[phase], loaders["train"]: what the dict holds
                for d in found:
                    held = _held(script, d, constant(src.slice))
                    direct += [v for v in held if script.call_name(v).endswith("DataLoader")]
                    names.update(identifier(v) for v in held if isinstance(v, (ast.Name, ast.Attribute)))
            else:
                names.update(found)
    return names, direct


def _held(script: Script, name: str, key) -> List[ast.AST]:
    """The values a dict ``name`` of the file holds under ``key`` (a dict literal, a comprehension, or
    ``name[key] = ...``); under a key that is not a constant, the training one ("train" in it) or all."""
    pairs = []
    for n in script.nodes:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, (ast.Name, ast.Attribute)) and identifier(t) == name:
                    if isinstance(n.value, ast.DictComp):
                        pairs.append((None, n.value.value))
                    elif isinstance(n.value, ast.Dict):
                        pairs += list(zip(map(constant, n.value.keys), n.value.values))  # **d: NOT_CONSTANT
                elif isinstance(t, ast.Subscript) and identifier(t.value) == name:
                    pairs.append((constant(t.slice), n.value))
    if isinstance(key, str):
        return [v for k, v in pairs if k is None or k == key]
    train = [v for k, v in pairs if isinstance(k, str) and "train" in k.lower()]
    return train or [v for _, v in pairs]


def _argument_names(script: Script, func: ast.AST, idx: int, pname: str) -> Set[str]:
    out = set()
    is_method = func in script.owner
    for n in script.nodes:
        if isinstance(n, ast.Call) and identifier(n.func) == func.name and not isinstance(n.func, ast.Call):
            arg = argument(n, pname, idx - 1 if is_method and isinstance(n.func, ast.Attribute) else idx)
            if arg is not None and identifier(arg) and not isinstance(arg, ast.Call):
                out.add(identifier(arg))
    return out


def _loader_returns(script: Script) -> dict:
    """Function name -> what it returns, each element a DataLoader call or None: ``return DataLoader(...)``
    gives one element, ``return train_loader, val_loader`` one per name assigned a DataLoader in that function."""
    out = {}
    for fs in list(script.functions.values()) + [list(m.values()) for m in script.methods.values()]:
        for f in fs:
            made = {}
            for n in local_nodes(f.body):
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and \
                        script.call_name(n.value).endswith("DataLoader"):
                    for t in n.targets:
                        made[identifier(t)] = n.value
            for n in local_nodes(f.body):
                if not isinstance(n, ast.Return) or n.value is None:
                    continue
                parts = n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]
                got = [p if isinstance(p, ast.Call) and script.call_name(p).endswith("DataLoader")
                       else made.get(identifier(p)) if isinstance(p, ast.Name) else None for p in parts]
                if any(got):
                    out[f.name] = got
    return out


def training_loaders(script: Script) -> List[ast.Call]:
    """The DataLoader calls the training loops take their batches from (found once per file)."""
    if script.training_loaders is None:
        script.training_loaders = _find_training_loaders(script)
    return script.training_loaders


def _find_training_loaders(script: Script) -> List[ast.Call]:
    names, direct = training_loader_names(script)
    out = list(direct)
    if not names:
        return out
    returns = _loader_returns(script)
    for n in script.nodes:
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.Call)):
            continue
        target = n.targets[0]
        parts = target.elts if isinstance(target, ast.Tuple) else [target]
        for i, part in enumerate(parts):
            if not isinstance(part, (ast.Name, ast.Attribute)) or identifier(part) not in names:
                continue
            if len(parts) == 1 and script.call_name(n.value).endswith("DataLoader"):
                out.append(n.value)
                continue
            got = returns.get(identifier(n.value.func)) or []
            if len(got) == len(parts) and got[i] is not None:
                out.append(got[i])
    return list({id(c): c for c in out}.values())


def _device_batches(script: Script, call: ast.Call, scope: ast.AST) -> bool:
    """Does the loader's dataset (a class of this file) move its items to the GPU in ``__getitem__``
    (``return seq.cuda()``)? Then workers cannot make its batches and there is nothing to pin."""
    ds = argument(call, "dataset", 0)
    values: List[ast.AST] = [ds] if ds is not None else []
    if isinstance(ds, ast.Name):
        values += [v for v, _ in values_of(script, ds.id, scope, call) or [] if isinstance(v, ast.AST)]
    for v in values:
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in script.classes:
            get = script.method_of(script.classes[v.func.id], "__getitem__")
            if get is not None and any(isinstance(n, ast.Call) and (method(n) == "cuda" or moved_to(n))
                                       for n in local_nodes(get.body)):
                return True
    return False


def _dataset_values(script: Script, call: ast.Call) -> List[ast.expr]:
    """The loader's dataset argument and the values the file assigns to it (when it is a name)."""
    ds = argument(call, "dataset", 0)
    if ds is None:
        return []
    values = [ds]
    if isinstance(ds, ast.Name):
        for n in script.nodes:
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == ds.id for t in n.targets):
                values.append(n.value)
    return values


def _in_memory(script: Script, call: ast.Call) -> bool:
    """Is the loader's dataset held in memory, cheap to index in the main process: a ``TensorDataset``,
    or a dataset class of the file whose ``__getitem__`` only indexes what it holds (tokenized rows)?"""
    for v in _dataset_values(script, call):
        if not isinstance(v, ast.Call):
            continue
        if identifier(v.func) in ("TensorDataset", "StackDataset"):
            return True
        if isinstance(v.func, ast.Name) and v.func.id in script.classes and \
                _only_indexes(script, script.classes[v.func.id]):
            return True
    return False


_CHEAP_CALLS = frozenset("int float len slice range min max type astype long tolist".split())
_CHEAP_TORCH = ("torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.LongTensor", "torch.stack", "torch.cat")


def _only_indexes(script: Script, cls: ast.ClassDef) -> bool:
    """Does ``cls.__getitem__`` only index data the dataset holds (``self.rows[i]["input_ids"]``), with
    conversions (``.long()``, ``torch.tensor(...)``) and no other call: no file read, no decoding, no
    transform?"""
    get = script.method_of(cls, "__getitem__")
    if get is None:
        return False
    indexes_self = False
    for n in local_nodes(body_of(get)):
        if isinstance(n, ast.Subscript) and root_name(n) == "self":
            indexes_self = True
        elif isinstance(n, ast.Call):
            name = identifier(n.func)
            if not (name in _CHEAP_CALLS or (method(n) in TENSOR_METHODS and name != "map") or
                    script.call_name(n) in _CHEAP_TORCH):
                return False
    return indexes_self


MANY_EPOCHS = 5


def _many(loop: ast.AST) -> bool:
    """Does this outer loop run many times: not ``for _ in range(k)`` with a literal k < MANY_EPOCHS, nor
    ``for phase in ["train", "val"]``?"""
    it = loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else None
    if isinstance(it, (ast.List, ast.Tuple)):
        return len(it.elts) >= MANY_EPOCHS
    if isinstance(it, ast.Call) and identifier(it.func) == "range" and it.args:
        bounds = [constant(a) for a in it.args[:2]]
        if all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            count = bounds[0] if len(bounds) == 1 else bounds[1] - bounds[0]
            return count >= MANY_EPOCHS
    return True


def _per_epoch(script: Script) -> bool:
    """Does a training loop run inside an outer loop of many epochs, in its function or through a caller?"""
    for region in script.regions():
        if any(_many(outer) for outer in script.enclosing_loops.get(region.loop, [])):
            return True
        scope = region.scope
        if isinstance(scope, FUNCS) and any(
                isinstance(c, ast.Call) and identifier(c.func) == scope.name and not isinstance(c.func, ast.Call)
                for outer in script.scope_of if _many(outer) for c in local_nodes(outer.body)):
            return True
    return False


def _pretokenized(script: Script) -> bool:
    """A Hugging Face text pipeline: batches are rows of a tokenized in-memory table, cheap to collate."""
    return any(q == "datasets" or q.startswith(("datasets.", "transformers")) for q in script.aliases.values())


_HF_TABLE_METHODS = frozenset("map with_format set_format select shuffle filter train_test_split remove_columns "
                               "rename_column rename_columns with_transform".split())


def _hf_rows(script: Script, node: ast.AST, scope: ast.AST, depth: int = 0) -> Optional[bool]:
    """Is ``node`` a Hugging Face datasets table (``load_dataset(...)``, its ``.map(...)``, a split of it)?
    None when the code does not say."""
    if depth > 6:
        return None
    if isinstance(node, ast.Subscript):
        return _hf_rows(script, node.value, scope, depth + 1)
    if isinstance(node, ast.Call):
        name = script.call_name(node)
        if name.startswith("datasets.") or identifier(node.func) in ("load_dataset", "load_from_disk"):
            return True
        if method(node) in _HF_TABLE_METHODS and isinstance(node.func, ast.Attribute):
            return _hf_rows(script, node.func.value, scope, depth + 1)
        return False if name or script.callees(node, scope) else None
    if isinstance(node, ast.Name):
        answers = [_hf_rows(script, v, where, depth + 1) for v, where in values_of(script, node.id, scope, node) or []
                   if isinstance(v, ast.expr)]
        if answers and all(a is False for a in answers):
            return False
        return True if any(answers) else None
    return None


def _text_rows(script: Script, call: ast.Call, kwargs: dict, scope: ast.AST) -> bool:
    """Does this loader collate rows of a tokenized Hugging Face table (cheap in the main process)?
    Its collate_fn is a data collator, or its dataset comes from the datasets library; where the code
    does not say, a script of that pipeline (it imports datasets or transformers) is given the benefit."""
    collate = kwargs.get("collate_fn")
    if collate is not None and ("ollator" in identifier(collate) or
                                script.qualname(getattr(collate, "func", collate)).startswith("transformers")):
        return True
    ds = argument(call, "dataset", 0)
    rows = _hf_rows(script, ds, scope) if ds is not None else None
    return rows if rows is not None else _pretokenized(script)


def _token_rows(script: Script, call: ast.Call, kwargs: dict, scope: ast.AST) -> bool:
    """Does the code show that this loader's batches are token ids of a text pipeline (small integer
    tensors: pinning them saves nothing measurable)? Its collate_fn is a data collator, its dataset is a
    Hugging Face table, or its dataset is built from a tokenizer or such a table."""
    collate = kwargs.get("collate_fn")
    if collate is not None and "ollator" in identifier(collate):
        return True
    for v in _dataset_values(script, call):
        if _hf_rows(script, v, scope):
            return True
        if isinstance(v, ast.Call) and any("tokeniz" in identifier(a).lower() or _hf_rows(script, a, scope)
                                           for a in _call_args(v)):
            return True
    return False


def loader_kwargs(script: Script, call: ast.Call, scope: ast.AST) -> Tuple[dict, bool]:
    """(the keyword arguments a DataLoader call is given, those of ``**d`` included where ``d`` is known:
    a dict literal, ``dict(...)``, or a name holding one with its later ``d[key] = v``; whether some
    ``**`` argument stays unknown)."""
    out: dict = {}
    unknown = False
    for kw in call.keywords:
        if kw.arg is not None:
            out[kw.arg] = kw.value
            continue
        items = dict_items(script, kw.value, scope, call)
        if items is None:
            unknown = True
        else:
            out.update(items)
    return out, unknown


def check_loaders(script: Script) -> Iterator[Located]:
    loaders = training_loaders(script)
    if not loaders:
        return
    per_epoch = None
    for call in loaders:
        scope = script.enclosing_scope(call)
        if _device_batches(script, call, scope):
            continue  # items already on the GPU: workers cannot make them, pinning has nothing to do
        kwargs, star = loader_kwargs(script, call, scope)
        nw = kwargs.get("num_workers") or (call.args[5] if len(call.args) > 5 else None)
        nwc = constant(nw) if nw is not None else None
        if isinstance(nw, ast.Name):  # a constant of the module or the function: workers = 4
            nwc = constant_value(script, nw, scope, call)
        # num_workers=args.workers: the default of the file's own parser (0: no workers unless asked for)
        default = argparse_default(script, nw.attr) if isinstance(nw, ast.Attribute) else NOT_CONSTANT
        workers_off = (nw is None and not star) or nwc == 0 or (default == 0 and not isinstance(default, bool))
        if workers_off and not _in_memory(script, call) and not _text_rows(script, call, kwargs, scope):
            detail = "num_workers is not set" if nw is None else \
                "num_workers=0" if nwc == 0 else f"num_workers={segment(script, nw)}, 0 by default"
            yield at(script, call, "script.W005", detail=detail)
        if script.cuda_explicit and not star and not _in_memory(script, call) and \
                not _token_rows(script, call, kwargs, scope):
            pin = kwargs.get("pin_memory")
            if pin is None or constant(pin) is False:
                yield at(script, call, "script.I001")
        if not workers_off and not (nw is None and star) and not (isinstance(nwc, int) and nwc <= 0):
            pw = kwargs.get("persistent_workers")
            if (pw is None and not star) or constant(pw) is False:
                if per_epoch is None:
                    per_epoch = _per_epoch(script)
                if per_epoch:
                    persist = "True" if (isinstance(nwc, int) and nwc > 0) or nw is None else f"{segment(script, nw)} > 0"
                    yield at(script, call, "script.I002", persist=persist)
        pf = constant_value(script, kwargs.get("prefetch_factor"), scope, call) \
            if isinstance(kwargs.get("prefetch_factor"), ast.Name) else constant(kwargs.get("prefetch_factor"))
        fixed = ([f"num_workers={nwc}"] if isinstance(nwc, int) and not isinstance(nwc, bool) and nwc > 0 else []) + \
            ([f"prefetch_factor={pf}"] if isinstance(pf, int) else [])
        if fixed:
            yield at(script, call, "script.I003", detail=", ".join(fixed))


# ---------------------------------------------------------------------------
# DataParallel (W006), AMP (W007, W008, W009), profilers (I004, I005), cuDNN (I006)

def _calls(script: Script) -> Iterator[Tuple[ast.Call, str]]:
    for n in script.nodes:
        if isinstance(n, ast.Call):
            if name := script.qualname(n.func):
                yield n, name


def check_data_parallel(script: Script) -> Iterator[Located]:
    if "DataParallel" not in script.text:
        return
    for call, name in _calls(script):
        if name in ("torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                    "torch.nn.parallel.data_parallel.DataParallel"):
            yield at(script, call, "script.W006", call=callee(script, call))


_DEPRECATED_AMP = {
    "torch.cuda.amp.autocast": 'torch.amp.autocast("cuda", ...)',
    "torch.cuda.amp.GradScaler": 'torch.amp.GradScaler("cuda", ...)',
    "torch.cuda.amp.grad_scaler.GradScaler": 'torch.amp.GradScaler("cuda", ...)',
    "torch.cuda.amp.autocast_mode.autocast": 'torch.amp.autocast("cuda", ...)',
    "torch.cuda.amp.custom_fwd": 'torch.amp.custom_fwd(device_type="cuda", ...)',
    "torch.cuda.amp.custom_bwd": 'torch.amp.custom_bwd(device_type="cuda")',
    "torch.cpu.amp.autocast": 'torch.amp.autocast("cpu", ...)',
    "torch.cpu.amp.GradScaler": 'torch.amp.GradScaler("cpu", ...)',
}
_AUTOCASTS = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast_mode.autocast",
              "torch.cuda.amp.autocast_mode.autocast")
_SCALERS = ("torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler",
            "torch.amp.grad_scaler.GradScaler", "torch.GradScaler")


def check_deprecated_amp(script: Script) -> Iterator[Located]:
    """Every use of a deprecated torch.cuda.amp name: a call, a decorator, or the name passed on.  A name
    only listed or compared (``func is torch.cuda.amp.autocast``, a tuple of autocast flavours in a library
    that still accepts them) is not a use: nothing runs it."""
    if "amp" not in script.text:
        return
    inner = set()      # attribute nodes that are part of a longer name
    mentioned = set()  # names only listed or compared
    for n in script.nodes:
        if isinstance(n, ast.Attribute):
            inner.add(id(n.value))
        elif isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            mentioned.update(id(e) for e in n.elts)
        elif isinstance(n, ast.Compare):
            mentioned.update(id(e) for e in [n.left] + n.comparators)
        elif isinstance(n, ast.Dict):
            mentioned.update(id(e) for e in n.keys if e is not None)
    for n in script.nodes:
        if isinstance(n, ast.ImportFrom) and n.module and not n.level:  # the import line, as well as the uses
            names = [f"{n.module}.{a.name}" for a in n.names]
        elif isinstance(n, (ast.Attribute, ast.Name)) and id(n) not in inner and id(n) not in mentioned \
                and isinstance(n.ctx, ast.Load):
            names = [script.qualname(n)]
        else:
            continue
        for name in filter(_DEPRECATED_AMP.__contains__, names):
            yield at(script, n, "script.W007", call=name, replacement="use " + _DEPRECATED_AMP[name])


def _autocast_dtype(script: Script, call: ast.Call, name: str) -> Optional[str]:
    """'fp16', 'bf16', or None (unknown or not CUDA) for an autocast call."""
    if constant(keyword(call, "enabled")) is False:
        return None
    if not name.startswith("torch.cuda.amp") and constant(argument(call, "device_type", 0)) != "cuda":
        return None
    dtype = argument(call, "dtype", 1 if name.startswith(("torch.autocast", "torch.amp")) else None)
    return "fp16" if dtype is None else \
        {"torch.float16": "fp16", "torch.half": "fp16", "torch.bfloat16": "bf16"}.get(script.qualname(dtype))


_FRAMEWORKS = ("accelerate", "lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "colossalai")


def _framework(script: Script, *more: str) -> bool:
    """Does the script import a framework that scales the loss and syncs DDP itself (and ``more``)?"""
    return any(q.split(".")[0] in _FRAMEWORKS + more or (q.startswith("transformers.") and q.endswith("Trainer"))
               for q in script.aliases.values())


def check_fp16_unscaled(script: Script) -> Iterator[Located]:
    if "autocast" not in script.text or re.search(r"scaler", script.text, re.I) \
            or _framework(script, "apex") or not script.regions():
        return
    for call, name in _calls(script):
        if name in _AUTOCASTS and _autocast_dtype(script, call, name) == "fp16" and not _in_inference(script, call):
            yield at(script, call, "script.W008", call=segment(script, call, 40))


def _in_inference(script: Script, node: ast.AST) -> bool:
    """Is ``node`` in a function whose name says evaluation or inference?"""
    return any(f.lineno <= node.lineno <= (f.end_lineno or f.lineno) and
               re.search(r"eval|valid|test|infer|predict|generat|sample", f.name, re.I)
               for fs in list(script.functions.values()) + [list(m.values()) for m in script.methods.values()]
               for f in fs)


def check_bf16_scaled(script: Script) -> Iterator[Located]:
    if "GradScaler" not in script.text or "bfloat16" not in script.text or \
            re.search(r"float16\b|half|fp16", script.text.replace("bfloat16", "")):
        return
    dtypes = [_autocast_dtype(script, c, n) for c, n in _calls(script) if n in _AUTOCASTS]
    if not dtypes or any(d != "bf16" for d in dtypes):
        return
    for call, name in _calls(script):
        if name in _SCALERS and keyword(call, "enabled") is None:
            yield at(script, call, "script.W009", call=segment(script, call, 40))


def check_profiler(script: Script) -> Iterator[Located]:
    if "profile" not in script.text or not script.regions():
        return  # advice for training scripts, not for the profiler's own code or a library's tests
    for call, name in _calls(script):
        if name in ("torch.autograd.profiler.profile", "torch.autograd.profile", "torch.autograd.profiler.record_function_legacy"):
            yield at(script, call, "script.I004", call=name)


def check_nvprof(script: Script) -> Iterator[Located]:
    if "nvprof" not in script.text or not script.regions():
        return  # advice for training scripts; a library's docstring naming nvprof is not one
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(script.text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return
    for tok in tokens:
        if tok.type in (tokenize.COMMENT, tokenize.STRING) and re.search(r"\bnvprof\b", tok.string):
            line, col = tok.start
            yield located(script.path, line, col + 1, finding("script.I005", about=f"{script.path}:{line}"),
                          script.code(line))
            break


_NOT_CONV = tuple(f"torchvision.models.{m}" for m in ("detection", "segmentation", "video", "optical_flow", "vit",
                                                     "swin", "maxvit"))


def check_cudnn_benchmark(script: Script) -> Iterator[Located]:
    text = script.text
    if not script.cuda_explicit or "cudnn.benchmark" in text or "deterministic" in text or \
            "configure_torch" in text or not script.regions():
        return
    for call, name in _calls(script):
        if name in ("torch.nn.Conv2d", "torch.nn.Conv3d", "torch.nn.modules.conv.Conv2d") or \
                (name.startswith("torchvision.models.") and not name.startswith(_NOT_CONV)):
            yield at(script, call, "script.I006")
            return


# ---------------------------------------------------------------------------
# Gradient accumulation (W010) and the schedule under it (W011)

def _direct_nodes(body: list) -> Iterator[Tuple[ast.AST, List[ast.AST]]]:
    """(node, the ``if`` statements around it) in ``body``, not entering nested loops or functions.
    The statements after ``if test: continue`` count as under that ``if`` too (they run only when it
    does not skip: ``if step % accum != 0: continue`` before the optimizer step)."""
    stack: List[Tuple[ast.AST, List[ast.AST]]] = []
    _push_block(stack, body, [])
    while stack:
        node, ifs = stack.pop()
        yield node, ifs
        if isinstance(node, LOOPS + DEFS):
            continue
        if isinstance(node, ast.If):
            stack.append((node.test, ifs))
            _push_block(stack, node.orelse, ifs + [node])
            _push_block(stack, node.body, ifs + [node])
        else:
            stack.extend(reversed([(c, ifs) for c in ast.iter_child_nodes(node)]))


def _push_block(stack: List[Tuple[ast.AST, List[ast.AST]]], body: List[ast.stmt], ifs: List[ast.AST]) -> None:
    """Push ``body``'s statements so that they pop in order, each with the ``if`` statements it runs under."""
    entries: List[Tuple[ast.AST, List[ast.AST]]] = []
    for stmt in body:
        entries.append((stmt, ifs))
        if isinstance(stmt, ast.If) and not stmt.orelse and stmt.body and isinstance(stmt.body[-1], ast.Continue):
            ifs = ifs + [stmt]
    stack.extend(reversed(entries))


def _mod_operand(test: ast.AST) -> Optional[ast.AST]:
    return next((n.right for n in local_nodes(test) if is_mod(n)), None)


def _loss_of_backward(call: ast.Call) -> Optional[ast.AST]:
    """The loss expression a backward call differentiates, or None when a framework scales it."""
    if method(call) != "backward" or call.args:
        return None
    recv = call.func.value
    return recv.args[0] if isinstance(recv, ast.Call) and method(recv) == "scale" and recv.args else recv


def _divided(script: Script, scope: ast.AST, loss: ast.AST, every: ast.AST) -> bool:
    """Is the loss (or anything with the accumulation count) divided or scaled anywhere in the scope?"""
    if any(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.Mult)) for n in local_nodes(loss)):
        return True
    name = root_name(loss) if isinstance(loss, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) else ""
    every_names = set(names_in(every))
    body = scope.body if hasattr(scope, "body") else []
    for n in local_nodes(body):
        # x / N (the loss, or a scale 1.0 / N applied to it); len(loader) / N sizes a schedule instead
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and every_names & set(names_in(n.right)) and \
                not any(isinstance(c, ast.Call) and identifier(c.func) == "len" for c in local_nodes(n.left)):
            return True
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)) and identifier(n.target) == name:
            return True
        if isinstance(n, ast.Assign) and any(identifier(t) == name for t in n.targets):
            if any((isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div)) or method(v) in ("div", "div_", "mul", "mul_")
                   for v in local_nodes(n.value)):
                return True
            if isinstance(n.value, ast.Call) and script.callees(n.value, scope):
                return True  # computed by a function of this file: not judged
        if isinstance(n, ast.Call) and method(n) in ("div_", "mul_") and root_name(n) == name:
            return True
    return False


_Accumulation = collections.namedtuple("_Accumulation", "loop every guard backwards steps")


def _accumulates(script: Script, scope: ast.AST, broad: bool, test: ast.AST) -> bool:
    """Does ``test`` count micro-batches (a ``%``, also through a name it holds; ``broad``: or a name that
    says accumulation)?"""
    return bool(script.mods_of(test, scope)) or (broad and bool(_ACCUM.search(" ".join(names_in(test)))))


def _every(script: Script, scope: ast.AST, test: ast.AST) -> Optional[ast.AST]:
    """The count of a boundary's ``%`` (``accum`` in ``(i + 1) % accum == 0``), or None."""
    mods = script.mods_of(test, scope)
    return mods[0].right if mods else None


_ACCUM = re.compile(r"accum|update_freq|grad_acc", re.I)


def accumulations(script: Script, broad: bool = False) -> List[_Accumulation]:
    """Training loops whose optimizer step runs every N micro-batches (``if (i + 1) % N == 0``).

    ``broad`` also takes a step under a condition that names the accumulation (``if ni - last_step >=
    accumulate``; then ``every`` is None) and a loss scaler told when to step
    (``loss_scaler(loss, optimizer, update_grad=(i + 1) % N == 0)``): enough to know that gradients are
    accumulated, not to size N (W012).
    """
    out = []
    for region in script.regions():
        loop = region.loop
        accumulates = functools.partial(_accumulates, script, region.scope, broad)
        every_of = functools.partial(_every, script, region.scope)

        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        steps, backwards = [], []
        for node, ifs in _direct_nodes(loop.body):
            if isinstance(node, ast.Call):
                if script.is_optimizer_step(node):
                    steps.append((node, ifs))
                elif script.is_backward(node):
                    backwards.append((node, ifs))
                elif broad and script.is_step_wrapper(node):
                    when = next((k.value for k in node.keywords if k.arg in ("update_grad", "need_update")), None)
                    if when is not None and accumulates(when):
                        out.append(_Accumulation(loop, every_of(when), when, [node], [node]))
        guarded = [(s, ifs) for s, ifs in steps if any(accumulates(i.test) for i in ifs)]
        if not guarded or not backwards or len(guarded) < len(steps):
            continue  # an optimizer step outside the boundary: every step updates (a GAN's lazy regulariser)
        guard = next(i for i in guarded[0][1] if accumulates(i.test))
        every = every_of(guard.test)
        said = " ".join(names_in(every)) if every is not None else ""
        if re.search(r"log|print|eval|save|interval|freq", said, re.I) and not _ACCUM.search(said):
            continue
        free = [b for b, ifs in backwards if guard not in ifs]
        if free:
            out.append(_Accumulation(loop, every, guard, free, [s for s, _ in guarded]))
    if broad:
        out += _inner_accumulations(script)
    return out


def _inner_accumulations(script: Script) -> List[_Accumulation]:
    """Training loops whose micro-batches run in an inner loop (backward there, the optimizer step after
    it): ``for _ in range(accum): loss.backward()`` then ``optimizer.step()``.  ``guard`` is the inner
    loop, ``every`` its ``range()`` count when it has one."""
    out = []
    for region in script.regions():
        loop = region.loop
        body = body_of(loop)
        steps = [n for n, _ in _direct_nodes(body) if isinstance(n, ast.Call) and script.is_optimizer_step(n)]
        for inner in (n for n in local_nodes(body) if isinstance(n, (ast.For, ast.AsyncFor))):
            backwards = [n for n in local_nodes(inner.body) if isinstance(n, ast.Call) and script.is_backward(n)]
            inner_steps = [n for n in local_nodes(inner.body) if isinstance(n, ast.Call) and script.is_optimizer_step(n)]
            outer_steps = steps or [n for n in local_nodes(body) if isinstance(n, ast.Call) and
                                    script.is_optimizer_step(n) and not _inside(n, inner)]
            if backwards and not inner_steps and outer_steps:
                count = inner.iter.args[-1] if isinstance(inner.iter, ast.Call) and \
                    identifier(inner.iter.func) == "range" and len(inner.iter.args) == 1 else None
                out.append(_Accumulation(loop, count, inner, backwards, outer_steps))
    return out


def _inside(node: ast.AST, outer: ast.AST) -> bool:
    return any(n is node for n in local_nodes(outer))


def check_accumulation(script: Script) -> Iterator[Located]:
    if _framework(script, "apex"):
        return  # accelerate, DeepSpeed, Lightning scale the loss themselves
    for acc in accumulations(script):
        scope = script.scope_of.get(acc.loop, script.tree)
        every = segment(script, acc.every, 40)
        if constant(acc.every) in (0, 1):
            continue
        for b in acc.backwards:
            loss = _loss_of_backward(b)
            if loss is None or _divided(script, scope, loss, acc.every):
                continue
            yield at(script, b, "script.W010", every=every)




def _wraps_ddp(script: Script) -> bool:
    return any(isinstance(n, ast.Call) and re.search(r"(?:^|_)DDP$|DistributedDataParallel$|^create_ddp_model$",
                                                   identifier(n.func)) for n in script.nodes)


def _accelerate_prepares(script: Script) -> bool:
    """Does the script hand its model to accelerate (``accelerator.prepare(model, ...)``), which wraps it
    in DistributedDataParallel on several GPUs?"""
    return any(q.split(".")[0] == "accelerate" for q in script.aliases.values()) and \
        any(isinstance(n, ast.Call) and method(n) == "prepare" for n in script.nodes)


def check_ddp_accumulation(script: Script) -> Iterator[Located]:
    """W012: accumulation under DistributedDataParallel without no_sync(): every micro-batch all-reduces.
    accelerate skips the sync only inside ``accelerator.accumulate(model)``: a script that prepares its
    model with accelerate and accumulates by hand is judged like a DDP script (docs/lint.md)."""
    text = script.text
    if "no_sync" in text or "require_backward_grad_sync" in text:
        return  # no_sync or its flag is used
    accelerate = _accelerate_prepares(script)
    if ".accumulate(" in text and any(q.split(".")[0] == "accelerate" for q in script.aliases.values()):
        return  # accelerate's accumulate() context skips the sync on the micro-batches that do not step
    others = any(q.split(".")[0] in _FRAMEWORKS and q.split(".")[0] != "accelerate" or
                 (q.startswith("transformers.") and q.endswith("Trainer")) for q in script.aliases.values())
    if others or not (_wraps_ddp(script) or accelerate):
        return  # Lightning, DeepSpeed and the Trainer skip the sync themselves
    seen = set()
    for acc in accumulations(script, broad=True):
        call = acc.backwards[0]
        if _under_sync_wrapper(script, acc.loop, call):
            continue
        if id(call) not in seen:
            seen.add(id(call))
            if acc.every is not None:
                when = f"every {segment(script, acc.every, 60)} micro-batches"
            elif isinstance(acc.guard, (ast.For, ast.AsyncFor)):
                when = f"after the micro-batches of the inner loop (line {acc.guard.lineno})"
            else:
                when = f"only when {segment(script, getattr(acc.guard, 'test', acc.guard), 60)}"
            yield at(script, call, "script.W012", call=callee(script, call), when=when)


def _under_sync_wrapper(script: Script, loop: ast.AST, call: ast.AST) -> bool:
    """Does ``call`` (a backward) run inside ``with f(model, ...)``, a context of another module given the
    DDP model, that may call no_sync() for its caller (``with misc.ddp_sync(ddp, sync):``)? Unknown
    unless the project shows that ``f`` does not; a function of this file does not (the file never
    mentions no_sync, or this rule would not run)."""
    scope = script.scope_of.get(loop, script.tree)
    flow = Flow(script)
    for w in local_nodes(body_of(loop)):
        if not isinstance(w, (ast.With, ast.AsyncWith)) or not _inside(call, w):
            continue
        for item in w.items:
            ctx = item.context_expr
            if not isinstance(ctx, ast.Call) or script.call_name(ctx).startswith("torch.") or script.callees(ctx, scope):
                continue
            if not any(flow.classify(a, scope) == MODEL for a in _call_args(ctx)):
                continue
            summary = script.imported(ctx)
            if summary is None or summary.syncs:
                return True
    return False


_SCHEDULERS = {
    "OneCycleLR": ("total_steps", None),
    "get_linear_schedule_with_warmup": ("num_training_steps", 2),
    "get_cosine_schedule_with_warmup": ("num_training_steps", 2),
    "get_polynomial_decay_schedule_with_warmup": ("num_training_steps", 2),
    "get_scheduler": ("num_training_steps", None),
    "CosineAnnealingLR": ("T_max", 1),
    "LinearLR": ("total_iters", None),
    "PolynomialLR": ("total_iters", 1),
}


def _scheduler_size(script: Script, call: ast.Call, kind: str) -> Optional[ast.AST]:
    size = argument(call, *_SCHEDULERS[kind])
    if size is None and kind == "OneCycleLR":
        size = keyword(call, "steps_per_epoch")
    return size


def _resolve(script: Script, scope: ast.AST, node: ast.AST) -> ast.AST:
    """A name assigned once (in the scope or the module) stands for its value."""
    for _ in range(3):
        if not isinstance(node, ast.Name):
            return node
        values = script.kinds(scope).assigned.get(node.id) or script.kinds(script.tree).assigned.get(node.id) or []
        if len(values) != 1:
            return node
        node = values[0]
    return node


def _in_batches(script: Script, size: ast.AST, every: ast.AST) -> Optional[bool]:
    """True: counts micro-batches (len(loader)...); False: optimizer steps (divided); None: cannot tell."""
    has_len = any(isinstance(n, ast.Call) and identifier(n.func) == "len" and n.args and
                  LOADERISH.search(identifier(n.args[0]) or "") for n in local_nodes(size))
    divided = any(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)) for n in local_nodes(size)) \
        or bool(set(names_in(every)) & set(names_in(size)))
    return not divided if has_len else None


def check_schedule(script: Script) -> Iterator[Located]:
    if ".accumulate(" in script.text:
        return  # accelerate steps a prepared schedule with the optimizer itself
    for acc in accumulations(script):
        scope = script.scope_of.get(acc.loop, script.tree)
        for node, ifs in _direct_nodes(acc.loop.body):
            if not (isinstance(node, ast.Call) and method(node) == "step" and not script.is_optimizer_step(node)):
                continue
            sched_name = identifier(node.func.value)
            with_optimizer = acc.guard in ifs
            ctor = _constructor(script, scope, sched_name)
            if ctor is None:
                continue
            call, kind = ctor
            size = _scheduler_size(script, call, kind)
            if size is None:
                continue
            # sized in micro-batches but stepped with the optimizer, or the other way round
            counted = _in_batches(script, _resolve(script, scope, size), acc.every)
            if counted is None or counted != with_optimizer:
                continue
            every = segment(script, acc.every, 30)
            sized, stepped = ("micro-batches (len of the loader)",
                              f"once per optimizer step (every {every} micro-batches): it never finishes") if counted \
                else (f"optimizer steps (divided by {every})", "every micro-batch")
            yield at(script, call, "script.W011", sched=kind, sized=sized, stepped=stepped,
                     fix_size=f"len(loader) // {every} * epochs", name=sched_name)


def _constructor(script: Script, scope: ast.AST, name: str) -> Optional[Tuple[ast.Call, str]]:
    for s in (scope, script.tree):
        for value in script.kinds(s).assigned.get(name, []):
            if isinstance(value, ast.Call) and identifier(value.func) in _SCHEDULERS:
                return value, identifier(value.func)
    for n in script.nodes:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and \
                any(identifier(t) == name for t in n.targets) and identifier(n.value.func) in _SCHEDULERS:
            return n.value, identifier(n.value.func)
    return None


CHECKS: Tuple[Check, ...] = (
    check_syncs, check_copies, check_loaders, check_data_parallel, check_deprecated_amp, check_fp16_unscaled,
    check_bf16_scaled, check_accumulation, check_schedule, check_ddp_accumulation, check_profiler, check_nvprof,
    check_cudnn_benchmark,
)


def iter_checks(script: Script, checks: Tuple[Check, ...] = CHECKS) -> Iterator[Located]:
    """Every check's findings as they are found; a check that raises becomes a script.E001 finding
    instead (what it yielded before stays)."""
    for check in checks:
        try:
            yield from check(script)
        except (Exception, RecursionError) as exc:  # noqa: BLE001 - a crashed rule is a finding, never a traceback
            text = f"{check.__name__}: {type(exc).__name__}: {str(exc).strip()[:80]}"
            crash = finding("script.E001", about=script.path, error=text)
            yield located(script.path, 1, 1, crash, script.code(1))


def run_checks(script: Script, checks: Tuple[Check, ...] = CHECKS) -> List[Located]:
    """Every check's findings, in a list (:func:`iter_checks`)."""
    return list(iter_checks(script, checks))
