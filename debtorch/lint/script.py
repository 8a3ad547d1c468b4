"""A Python file as the linter sees it: imports, functions, training loops, what runs per step
(with its guards), and what names hold: a small flow-sensitive inference, conservative by design
(when in doubt a name is unknown, and unknown never makes a finding).  How loops and steps are
found: docs/lint.md.  Standard library only; nothing is imported or executed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, TypeGuard

from debtorch.lint.flow import Definitions, all_children, values_of
from debtorch.lint.project import FunctionSummary, Project, imported_function, imported_method

DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
Function = ast.FunctionDef | ast.AsyncFunctionDef  # what FUNCS tests for
Loop = ast.For | ast.AsyncFor | ast.While         # what LOOPS tests for

# What a name can hold, as far as the rules care.
DEVICE = "device"      # a tensor that lives where the model computes (CUDA on a GPU path)
CPU = "cpu"            # a tensor on the host (a batch straight from the DataLoader)
OTHER = "other"        # not a tensor: a number, a string, a list, a numpy value
MODEL = "model"        # an nn.Module (calling it gives DEVICE)
MIXED = "mixed"        # assigned different kinds: unknown
FOLLOWS = "follows"    # a function's result is where its tensor arguments are (project.py summaries)

_OPTIMIZER = re.compile(r"optim|^opt(?:$|_|\d|[a-z]$)", re.I)
MODELISH = re.compile(r"^(?:model|net|network|module|.*_model|model_.*|.*_net|net_.*|ddp_.*|generator|discriminator"
                      r"|encoder|decoder|backbone|classifier|teacher|student|ema|critic|actor|policy)$", re.I)
LOSSISH = re.compile(r"loss|criterion|criteria", re.I)
_NOT_A_STEP = re.compile(r"print|log|info|warn|save|write|dump|record|append|update", re.I)  # f(loss, optimizer)
_ACCUMULATION = re.compile(r"accum|grad_acc|update_freq|micro", re.I)
_PERIODIC = re.compile(r"log|print|verbose|debug|eval|valid|val_|_val|save|checkpoint|ckpt|interval|freq|every|display"
                       r"|report|wandb|tensorboard|writer|summary|profil|sample|show|monitor|plot|visual|vis_|_vis"
                       r"|test|track|dump|record|warmup|first|last|final|done|stop|finish|is_end|epoch_end", re.I)
_COUNTER = re.compile(r"^(?:i|j|k|it|itr|idx|step|steps|iter|iters|iteration|epoch|batch_idx|batch_id|batch_i"
                      r"|global_step|num_steps|n_iter|curr_step|cur_step|total_steps|count|counter|iter_num"
                      r"|step_num|batch_num|nb|ib|b_idx|bi|ii|t)$|step|iter|epoch", re.I)
LOADERISH = re.compile(r"loader|dataloader|batches|data_iter|train_iter|prefetcher", re.I)
_DEVICE_ARG = re.compile(r"device|dev$|^dev|gpu|cuda|rank|local_rank", re.I)

# Tensor methods whose result is a tensor where the receiver is.
TENSOR_METHODS = frozenset("""
sum mean max min argmax argmin amax amin eq ne gt lt ge le float half double long int bool bfloat16 detach
clone view reshape squeeze unsqueeze abs pow sqrt norm softmax log_softmax exp log sigmoid tanh relu
masked_fill masked_select std var prod cumsum count_nonzero nonzero all any isnan isinf isfinite contiguous
type_as mul add sub div neg t transpose permute flatten expand expand_as repeat gather index_select
narrow clamp clamp_ round floor ceil sign logical_and logical_or logical_not eq_ mul_ add_ div_ sub_
view_as float_ squeeze_ unsqueeze_ data_ptr_ sort topk median mode kthvalue chunk split unbind
""".split()) - {"data_ptr_"}
# Methods whose result is not a tensor.
PLAIN_METHODS = frozenset("item tolist numpy size dim numel nelement element_size stride is_contiguous "
                          "data_ptr get_device keys values items dtype".split())
# torch.* functions that build a tensor from nothing (on the CPU unless device= says otherwise).
FACTORIES = frozenset("tensor as_tensor from_numpy zeros ones empty full arange linspace logspace rand randn "
                      "randint randperm eye zeros_like ones_like empty_like full_like rand_like randn_like "
                      "randint_like normal bernoulli multinomial".split())
# The legacy constructors (torch.Tensor([...]), torch.LongTensor(n)) build on the host as well;
# torch.cuda.FloatTensor(...) is another name (it has a dot after torch.) and stays unknown.
LEGACY_TENSORS = frozenset("Tensor FloatTensor DoubleTensor HalfTensor BFloat16Tensor LongTensor IntTensor "
                           "ShortTensor ByteTensor CharTensor BoolTensor".split())
# A method whose name says it runs one training step (a convention of trainers: Keras' train_on_batch,
# Lightning's training_step, CycleGAN's optimize_parameters), taken to train where its object's class
# cannot be read (another module outside the project, or one too large to read).
STEP_METHOD = re.compile(r"^(?:train(?:ing)?_(?:step|batch|on_batch|one_batch|one_step)"
                         r"|optimi[sz]e_parameters)$")
# torch.* names that are not tensor computations.
TORCH_PLAIN = frozenset("device no_grad enable_grad inference_mode set_grad_enabled is_tensor numel manual_seed "
                        "load save compile jit autocast get_default_dtype is_grad_enabled cuda backends "
                        "distributed optim nn utils amp profiler set_num_threads get_num_threads "
                        "is_floating_point is_complex typename dtype Size Generator".split())
PLAIN_BUILTINS = frozenset("float int len round str bool repr list dict tuple set sorted isinstance type id hash "
                           "format abs min max sum".split())

MODEL_FACTORIES = ("torchvision.models.", "timm.create_model", "transformers.", "models.")


def body_of(node: ast.AST) -> List[ast.stmt]:
    """The statements of a function or a loop (none for anything else)."""
    body = getattr(node, "body", None)
    return body if isinstance(body, list) else []


def identifier(node: ast.AST) -> str:
    """The last name of an expression: ``self.model`` -> ``model``; ``a[0].b()`` -> ``b``; else ''."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return node.attr
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, (ast.Subscript, ast.Starred)):
            node = node.value
        else:
            return ""


def _constructed(call: ast.Call) -> ast.Call:
    """The call that made an object, past the moves chained on it: ``Trainer(net).cuda()`` -> ``Trainer(net)``."""
    while method(call) in ("cuda", "to", "train", "float", "half") and isinstance(call.func, ast.Attribute) \
            and isinstance(call.func.value, ast.Call):
        call = call.func.value
    return call


def dotted(node: ast.AST) -> str:
    """``self.loss_ema`` -> ``self.loss_ema``, ``x`` -> ``x``; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def root_name(node: ast.AST) -> str:
    """The first name of an expression: ``x.to(d)[0]`` -> ``x``; else ''."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return ""


def method(call: ast.AST) -> str:
    """``x.foo(...)`` -> ``foo``; anything else -> ''."""
    return call.func.attr if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) else ""


def keyword(call: ast.Call, name: str) -> Optional[ast.expr]:
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def argument(call: ast.Call, name: str, pos: Optional[int] = None) -> Optional[ast.expr]:
    """A call's argument ``name``, given by keyword or (where ``pos`` is given) at that position."""
    kw = keyword(call, name)
    if kw is None and pos is not None and 0 <= pos < len(call.args):
        return call.args[pos]
    return kw


def has_star_kwargs(call: ast.Call) -> bool:
    return any(kw.arg is None for kw in call.keywords)


def constant(node: Optional[ast.AST]) -> object:
    """The value of a literal (``True``, ``0``, ``-1``, ``"cuda"``), else a unique marker."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)):
        return -node.operand.value
    return NOT_CONSTANT


NOT_CONSTANT = object()


def children(node: ast.AST) -> List[ast.AST]:
    """``node``'s children without nested functions, classes and lambdas (kept on the node, as
    :func:`all_children` keeps them all)."""
    kids: Optional[List[ast.AST]] = node.__dict__.get("_lint_kids")
    if kids is None:
        kids = [c for c in all_children(node) if not isinstance(c, DEFS)]
        node.__dict__["_lint_kids"] = kids
    return kids


def local_nodes(nodes: ast.AST | Sequence[ast.AST]) -> Iterator[ast.AST]:
    """Every node under ``nodes`` (a node or a list), not entering nested functions, classes or lambdas."""
    stack = [nodes] if isinstance(nodes, ast.AST) else list(nodes)
    stack.reverse()
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def names_in(node: ast.AST) -> Iterator[str]:
    """Every name, attribute and string literal in an expression: what it talks about."""
    for n in local_nodes(node):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            yield n.value


def named_values(script: "Script", name: str) -> Iterator[ast.AST]:
    """The values the file gives as ``name=...`` or under the key ``"name"`` of a dict literal."""
    for n in script.nodes:
        if isinstance(n, ast.keyword) and n.arg == name:
            yield n.value
        elif isinstance(n, ast.Dict):
            yield from (v for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant) and k.value == name)


@dataclass
class Step:
    """One statement or expression that runs every optimizer step (or under a guard)."""

    node: ast.expr | ast.stmt
    guarded: bool
    scope: ast.AST          # the function (or module) the node belongs to
    header: bool = False    # the training loop's own ``for`` target (assigned per step, evaluated once)
    test: bool = False      # the condition of an ``if`` or ``while``


@dataclass
class Region:
    """What one training loop runs per step, in order."""

    loop: Loop | Function   # a function for a workload's own step (measured.py)
    scope: ast.AST
    steps: List[Step] = field(default_factory=list)


class Script:
    """A parsed file and the answers the rules need; built once per file."""

    def __init__(self, tree: ast.Module, text: str, path: str = "<string>", assume_training: bool = False,
                 project: Optional[Project] = None, room: int = 0):
        self.tree, self.text, self.path = tree, text, path
        self.project = project    # the folder tree whose modules an import may name (project.py)
        self.room = room          # bytes of the memory budget left for reading an imported module
        self.definitions_cache: Dict[ast.AST, Definitions] = {}
        self._calls_named: Optional[Dict[str, List[ast.Call]]] = None
        self._imported: Dict[str, Optional[FunctionSummary]] = {}
        self.all_functions: List[Function] = []
        self._whole: Dict[ast.AST, bool] = {}
        self._effects: Dict[tuple, Set[str]] = {}
        self.lines = text.splitlines()
        self.aliases: Dict[str, str] = {}
        self.functions: Dict[str, List[Function]] = {}
        self.methods: Dict[ast.ClassDef, Dict[str, Function]] = {}
        self.classes: Dict[str, ast.ClassDef] = {}
        self.owner: Dict[ast.AST, ast.ClassDef] = {}  # function -> its class, for self.method() calls
        self.scope_of: Dict[Loop, ast.AST] = {}       # loop -> the function (or module) holding it
        self.enclosing_loops: Dict[ast.AST, List[Loop]] = {}  # loop -> the loops around it in its scope
        self._kind: Dict[ast.AST, str] = {}
        self._bases: Dict[ast.ClassDef, List[ast.ClassDef]] = {}
        self.nodes: List[ast.AST] = []
        self._index()
        self.uses_torch = "torch" in text.lower()
        self.cuda_path, self.cuda_explicit = self._gpu()
        if assume_training:  # the fuzz run (benchmarks/lint_corpus.py): every rule on any Python
            self.uses_torch = self.cuda_path = self.cuda_explicit = True
        self._regions: Optional[List[Region]] = None
        self._kinds_cache: Dict[ast.AST, Kinds] = {}
        self._returns: Dict[ast.AST, Optional[str]] = {}
        self._instance_names: Optional[Set[str]] = None
        self.training_loaders: Optional[List[ast.Call]] = None   # checks.training_loaders, once per file

    # -- indexing -------------------------------------------------------
    def _index(self) -> None:
        """One pass over the tree, in source order: every node, the imports, functions, classes and loops."""
        nodes: List[ast.AST] = []
        # (node, the class it is in, its function or the module, the loops around it in that scope)
        todo: List[Tuple[ast.AST, Optional[ast.ClassDef], ast.AST, Tuple[Loop, ...]]] = [(self.tree, None, self.tree, ())]
        while todo:
            node, cls, scope, around = todo.pop()
            nodes.append(node)
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.aliases.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom) and (node.module or node.level):
                for a in node.names:  # a relative import keeps its dots: ".utils.step" (project.py)
                    if a.name != "*":
                        module = "." * node.level + (node.module or "")
                        self.aliases[a.asname or a.name] = f"{module}.{a.name}" if node.module else module + a.name
            if isinstance(node, FUNCS) and node is not self.tree:
                self.all_functions.append(node)
                if cls is None:
                    self.functions.setdefault(node.name, []).append(node)
                else:
                    self.methods.setdefault(cls, {})[node.name] = node
                    self.owner[node] = cls
                    self.functions.setdefault(node.name, [])  # a method is no module-level function
                inner: Tuple[Optional[ast.ClassDef], ast.AST, Tuple[Loop, ...]] = (None, node, ())
            elif isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, node)
                inner = (node, scope, ())
            elif isinstance(node, LOOPS):
                self.scope_of[node] = scope
                self.enclosing_loops[node] = list(around)
                inner = (cls, scope, around + (node,))
            else:
                inner = (cls, scope, around)
            for child in reversed(all_children(node)):
                todo.append((child,) + inner)
        self.nodes = nodes   # every node once, in source order, for the checks that look at the whole file

    def _gpu(self) -> Tuple[bool, bool]:
        """(moves work to a GPU in code, and names CUDA in code): comments and prose do not count."""
        moves = cuda = False
        for n in self.nodes:
            if isinstance(n, ast.Call):
                if method(n) == "cuda" or moved_to(n) or \
                        identifier(n.func) in ("Accelerator", "DistributedDataParallel", "DDP", "Fabric"):
                    moves = True
                elif identifier(n.func) in ("autocast", "GradScaler") and \
                        self.qualname(n.func).startswith("torch.cuda.amp"):
                    moves = cuda = True  # CUDA's own AMP: the script trains on CUDA
            elif isinstance(n, ast.Attribute) and n.attr == "cuda":
                cuda = True
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("cuda") \
                    and len(n.value) < 12:
                cuda = True
        return moves, moves and cuda

    def qualname(self, node: ast.AST) -> str:
        """``nn.DataParallel`` -> ``torch.nn.DataParallel`` after the file's imports; '' if not a dotted name."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return ""
        base = self.aliases.get(node.id, node.id)
        return ".".join([base] + parts[::-1])

    def call_name(self, call: ast.AST) -> str:
        return self.qualname(call.func) if isinstance(call, ast.Call) else ""

    def code(self, line: int) -> str:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""

    # -- what calls what --------------------------------------------------
    def callees(self, call: ast.Call, scope: ast.AST) -> List[Function]:
        """The same-file functions a call may run: ``f()``, ``self.f()``, ``obj.f()`` of a same-file class,
        and a function handed to the call (``timed(step)``, ``retry(step, 3)``, ``partial(step, x)``)."""
        called = self._called(call, scope)
        for arg in list(call.args) + [k.value for k in call.keywords]:
            if isinstance(arg, ast.Name) and not (isinstance(call.func, ast.Name) and call.func.id in self.classes):
                called += [f for f in self.functions.get(arg.id, ()) if f not in called]
        return called

    def _called(self, call: ast.Call, scope: ast.AST) -> List[Function]:
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self.classes:  # a constructor: __init__ runs once, not per step
                return []
            return list(self.functions.get(func.id, ()))
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            recv = func.value.id
            if recv == "self":  # the class's own or inherited method, and its overrides in subclasses
                cls = self.owner.get(scope)
                if cls is None:
                    return []
                own = self.method_of(cls, func.attr)
                overrides = [self.methods[c][func.attr] for c in self.classes.values()
                             if cls in self.bases(c) and func.attr in self.methods.get(c, {})]
                return ([own] if own else []) + overrides
            if not any(func.attr in m for m in self.methods.values()):
                return []  # no class of the file has such a method: nothing to look up
            cls = self.classes.get(recv) or self.kinds(scope).instance_of(recv)  # Class.f() or obj.f()
            found = self.method_of(cls, func.attr) if cls is not None else None
            return [found] if found else []
        return []

    def bases(self, cls: ast.ClassDef, depth: int = 0) -> List[ast.ClassDef]:
        """The same-file classes ``cls`` derives from, nearest first."""
        if depth == 0 and cls in self._bases:
            return self._bases[cls]
        out = []
        for b in cls.bases:
            base = self.classes.get(identifier(b)) if isinstance(b, (ast.Name, ast.Attribute)) else None
            if base is not None and base is not cls and depth < 5:
                out += [base] + self.bases(base, depth + 1)
        if depth == 0:
            self._bases[cls] = out
        return out

    def method_of(self, cls: ast.ClassDef, name: str) -> Optional[Function]:
        """``cls``'s method ``name``, its own or inherited from a same-file base."""
        return next((self.methods[c][name] for c in [cls] + self.bases(cls) if name in self.methods.get(c, {})), None)

    def calls_named(self, name: str) -> List[ast.Call]:
        """Every call in the file whose callee's last name is ``name`` (``f(...)``, ``obj.f(...)``)."""
        if self._calls_named is None:
            self._calls_named = {}
            for n in self.nodes:
                if isinstance(n, ast.Call):
                    self._calls_named.setdefault(identifier(n.func), []).append(n)
        return self._calls_named.get(name, [])

    def enclosing_scope(self, node: ast.AST) -> ast.AST:
        """The innermost function holding ``node`` (by its place in the file), else the module."""
        line, col = getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
        best: ast.AST = self.tree
        best_line = 0
        for f in self.all_functions:
            start: int = getattr(f, "lineno", 0)
            end: int = getattr(f, "end_lineno", None) or start
            if (start, getattr(f, "col_offset", 0)) < (line, col) and line <= end and start >= best_line:
                best, best_line = f, start
        return best

    def imported(self, call: ast.AST) -> Optional[FunctionSummary]:
        """What a function of another module of the project, called here, gives (project.py); None when
        the call is not to one (or it could not be read)."""
        if self.project is None or not isinstance(call, ast.Call):
            return None
        name = self.qualname(call.func)
        if not name or name.split(".")[0] in ("torch", "numpy", "np", "os", "sys", "math", "time"):
            return None
        if isinstance(call.func, ast.Name) and call.func.id in self.functions:
            return None
        if name not in self._imported:
            self._imported[name] = imported_function(self.project, self.path, name, self.room)
        return self._imported[name]

    def trains_elsewhere(self, call: ast.Call, scope: ast.AST) -> bool:
        """Does this call run a training step defined outside the file: a function of another module of
        the project that trains, a method of another module's class that does (``trainer =
        Trainer(net).cuda()`` ... ``trainer.train_step(x, y)``), or, where that class cannot be read, a
        method whose name says it is a training step (STEP_METHOD)?"""
        summary = self.imported(call)
        if summary is not None:
            return summary.trains
        name = method(call)
        recv = call.func.value if isinstance(call.func, ast.Attribute) else None
        readable = self.project is not None and isinstance(recv, ast.Name) and recv.id in self.instance_names()
        if not name or not (readable or STEP_METHOD.match(name)) or self._called(call, scope):
            return False  # (the cheap questions first: most calls are none of these)
        built = self.built_by(recv, scope) if readable and isinstance(recv, ast.Name) else None
        if built is not None and self.project is not None:
            found = imported_method(self.project, self.path, built, name, self.room)
            if found is not None:
                return found.trains
        return bool(STEP_METHOD.match(name))

    def instance_names(self) -> Set[str]:
        """Names the file assigns a call of a capitalised name it imports (``trainer = Trainer(net)``): the
        only receivers :meth:`built_by` can answer for (a cheap first look)."""
        if self._instance_names is None:
            self._instance_names = set()
            for n in self.nodes:
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                    made = _constructed(n.value)
                    if root_name(made.func) in self.aliases and identifier(made.func)[:1].isupper():
                        self._instance_names.update(t.id for t in n.targets if isinstance(t, ast.Name))
        return self._instance_names

    def built_by(self, name: ast.Name, scope: ast.AST) -> Optional[str]:
        """The imported class whose instance ``name`` holds (``Trainer(net)``, ``Trainer(net).cuda()``),
        qualified by the file's imports; None when not one such class."""
        values = values_of(self, name.id, scope, name)
        if not values or len(values) != 1 or not isinstance(values[0][0], ast.Call):
            return None
        func = _constructed(values[0][0]).func
        if not isinstance(func, (ast.Name, ast.Attribute)) or identifier(func)[:1].islower():
            return None
        qualified = self.qualname(func)
        return qualified if "." in qualified and qualified.split(".")[0] not in ("torch", "self") else None

    def is_backward(self, call: ast.AST) -> bool:
        return isinstance(call, ast.Call) and (method(call) in ("backward", "manual_backward") or
                                               self.call_name(call) == "torch.autograd.backward")

    def is_optimizer_step(self, call: ast.AST) -> bool:
        """``optimizer.step()``, and ``scaler.step(optimizer)``, ``loss_scaler.step(opt)``."""
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "step"):
            return False
        if _OPTIMIZER.search(identifier(call.func.value)):
            return True
        return bool(call.args) and bool(_OPTIMIZER.search(identifier(call.args[0])))

    def is_step_wrapper(self, call: ast.AST) -> bool:
        """A callable given the loss and the optimizer, ``loss_scaler(loss, optimizer, clip_grad=...)``
        (timm's, DeiT's and MAE's NativeScaler): it runs backward and the optimizer step."""
        if not (isinstance(call, ast.Call) and call.args and isinstance(call.func, (ast.Name, ast.Attribute))):
            return False
        if not LOSSISH.search(identifier(call.args[0])) or _NOT_A_STEP.search(identifier(call.func)):
            return False
        return any(_OPTIMIZER.search(identifier(a)) and isinstance(a, (ast.Name, ast.Attribute))
                   for a in call.args[1:] + [k.value for k in call.keywords])

    def is_training_call(self, call: ast.AST) -> bool:
        return self.is_backward(call) or self.is_optimizer_step(call) or self.is_step_wrapper(call)

    def _direct(self, body: List[ast.stmt], scope: ast.AST, seen: Set[ast.AST]) -> bool:
        """Does ``body`` train outside nested loops: a training call, or a call of a step function?"""
        stack: List[ast.AST] = list(body)
        while stack:
            node = stack.pop()
            if isinstance(node, DEFS):
                continue
            if isinstance(node, LOOPS):
                stack.append(node.test if isinstance(node, ast.While) else node.iter)
                continue
            if isinstance(node, ast.Call):
                if self.is_training_call(node) or self.trains_elsewhere(node, scope):
                    return True
                for f in self.callees(node, scope):
                    if self.function_kind(f, seen) == "step":
                        return True
            stack.extend(children(node))
        return False

    def function_kind(self, func: Function, seen: Optional[Set[ast.AST]] = None) -> str:
        """'loop' (holds a training loop), 'step' (trains once per call) or 'none'."""
        if func in self._kind:
            return self._kind[func]
        seen = set() if seen is None else seen
        if func in seen:
            return "none"
        seen.add(func)
        if any(isinstance(node, LOOPS) and self._direct(node.body, func, seen) for node in local_nodes(func.body)):
            kind = "loop"
        else:
            kind = "step" if self._direct(func.body, func, seen) else "none"
        self._kind[func] = kind
        return kind

    # -- what runs per step --------------------------------------------------
    def effects(self, body: List[ast.stmt], scope: ast.AST, depth: int = 0) -> Set[str]:
        """What ``body`` runs, nested loops and the functions it calls included: "backward", "step"
        (remembered per body: a loop's or a function's statements are asked about often)."""
        key = (id(body), id(scope))
        known = self._effects.get(key)
        if known is not None:
            return known
        found = self._effects_of(body, scope, depth)
        if depth == 0:
            self._effects[key] = found
        return found

    def _effects_of(self, body: List[ast.stmt], scope: ast.AST, depth: int) -> Set[str]:
        found: Set[str] = set()
        if depth > 3:
            return found
        for node in local_nodes(body):
            if not isinstance(node, ast.Call):
                continue
            if self.is_backward(node):
                found.add("backward")
            elif self.is_optimizer_step(node):
                found.add("step")
            elif self.is_step_wrapper(node):
                found.update(("backward", "step"))
            else:
                if self.trains_elsewhere(node, scope):
                    found.update(("backward", "step"))
                for f in self.callees(node, scope):
                    if f is not scope and not self._holds_training_loop(f, depth + 1):
                        found |= self.effects(body_of(f), f, depth + 1)
            if len(found) == 2:
                break
        return found

    def _holds_training_loop(self, func: ast.AST, depth: int = 0) -> bool:
        """Does ``func`` hold a loop that runs backward and an optimizer step (a whole training loop,
        whose call is an epoch, not a step)?"""
        if func not in self._whole:
            self._whole[func] = False  # a recursive call while answering: not a training loop
            self._whole[func] = any(isinstance(n, LOOPS) and self.effects(n.body, func, depth) == {"backward", "step"}
                                    for n in local_nodes(body_of(func)))
        return self._whole[func]

    def _trains_by_effect(self, loop: ast.AST, scope: ast.AST) -> bool:
        """A loop that runs backward and an optimizer step only through the loops it holds (micro-batches
        in an inner accumulation loop, the step in a loop over several optimizers), none of which does
        both itself: each of its iterations is one optimizer step."""
        if self.effects(body_of(loop), scope) != {"backward", "step"}:
            return False
        inner = [n for n in local_nodes(body_of(loop)) if isinstance(n, LOOPS)]
        return not any(self.effects(n.body, scope) == {"backward", "step"} for n in inner)

    def regions(self) -> List[Region]:
        """Per-step code of every training loop (a loop nested in another shares its statements)."""
        if self._regions is None:
            self._regions = [Region(loop, scope) for loop, scope in self.scope_of.items()
                             if self.uses_torch and (self._direct(loop.body, scope, set()) or
                                                     self._trains_by_effect(loop, scope))]
            for region in self._regions:
                Walker(self, region).run()
        return self._regions

    def per_step(self, regions: Optional[List[Region]] = None) -> Iterator[Step]:
        """Every per-step node of ``regions`` (default: the training loops') once; the first region
        that reaches it wins."""
        seen: Set[int] = set()
        for region in self.regions() if regions is None else regions:
            for step in region.steps:
                if id(step.node) not in seen:
                    seen.add(id(step.node))
                    yield step

    def returns(self, func: ast.AST) -> Optional[str]:
        """What a function of this file returns (:func:`return_kind`), once per function; None while it
        is being answered (a recursive call) and when unknown."""
        if func not in self._returns:
            self._returns[func] = None
            self._returns[func] = return_kind(self, func)
        return self._returns[func]

    def kinds(self, scope: ast.AST) -> "Kinds":
        k = self._kinds_cache.get(scope)
        if k is None:
            k = self._kinds_cache[scope] = Kinds(self, scope)
        return k

    # -- guards ----------------------------------------------------------------
    def boundary(self, stmt: ast.If) -> bool:
        """Is this ``if`` the accumulation boundary (``if (i + 1) % accum == 0: optimizer.step()``)? It
        runs on every optimizer step: what it holds is a per-step cost, not an occasional one."""
        mods = [n for n in local_nodes(stmt.test) if isinstance(n, ast.BinOp) and is_mod(n)]
        if not mods:
            return False
        if any(_ACCUMULATION.search(" ".join(names_in(m.right))) for m in mods):
            return True
        return any(isinstance(n, ast.Call) and (self.is_optimizer_step(n) or self.is_step_wrapper(n))
                   for n in local_nodes(stmt.body) if not isinstance(n, LOOPS))

    def occasional(self, stmt: ast.If, scope: ast.AST) -> bool:
        """Does this ``if`` make its branch occasional: a logging interval, an epoch's end, a once-only
        branch, a flag; and not the accumulation boundary (conditions by what they gate: docs/lint.md)."""
        return not self.boundary(stmt) and self.periodic(stmt.test, scope)

    def periodic(self, test: ast.AST, scope: Optional[ast.AST] = None, depth: int = 0) -> bool:
        """Does this condition make its branch occasional (logging every k steps, a flag, a deadline)?
        A name is judged by what it was assigned in ``scope`` (``should_log = step % k == 0``). An
        interval the code sets to 1 (``log_interval = 1``, an option whose default is 1) is every step."""
        skip = {id(n) for m in local_nodes(test) if is_mod(m) and self.every_time(m, scope) for n in local_nodes(m)}
        for n in local_nodes(test):
            if id(n) in skip:
                continue
            if is_mod(n):
                return True
            if isinstance(n, (ast.Name, ast.Attribute)) and _PERIODIC.search(identifier(n)):
                return True
            if isinstance(n, ast.Name) and scope is not None and depth < 3 and self._periodic_name(n, scope, depth):
                return True
            if isinstance(n, ast.Compare) and not all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in n.ops):
                for side in [n.left] + n.comparators:
                    if _COUNTER.search(identifier(side) or "") and not isinstance(side, ast.Call):
                        return True
            if isinstance(n, ast.Call) and self.call_name(n).startswith(("time.", "random.", "np.random", "numpy.random")):
                return True
        return False

    def every_time(self, mod: ast.AST, scope: Optional[ast.AST]) -> bool:
        """Is ``a % n`` an interval of 1 as the code sets it (a literal, a constant of the module or the
        function, the default of the file's own option)?"""
        if not isinstance(mod, ast.BinOp):
            return False
        return constant_value(self, mod.right, scope if scope is not None else self.tree, mod) == 1

    def interval(self, node: ast.AST, scope: Optional[ast.AST] = None) -> bool:
        """``a % n`` of a step counter by an interval not known to be 1."""
        return is_mod(node) and not self.every_time(node, scope)

    def _periodic_name(self, name: ast.Name, scope: ast.AST, depth: int) -> bool:
        """Was ``name`` assigned only conditions that make a branch occasional?"""
        values = values_of(self, name.id, scope, name)
        if not values or not all(isinstance(v, ast.expr) for v, _ in values):
            return False
        return all(isinstance(v, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and self.periodic(v, where, depth + 1)
                   for v, where in values)

    def only_if_not(self, test: ast.AST, scope: Optional[ast.AST] = None) -> bool:
        """Is the code that runs when ``test`` is false occasional: ``not should_log``, ``step % k != 0``,
        ``step % k``? (What follows ``if test: continue`` or ``return``, and an ``if``'s ``else``.)"""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.periodic(test.operand, scope)
        if isinstance(test, ast.BoolOp):  # `a or b`: the rest runs under not a and not b
            parts = [self.only_if_not(v, scope) for v in test.values]
            return any(parts) if isinstance(test.op, ast.Or) else all(parts)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq):
            return any(self.interval(x, scope) for x in (test.left, test.comparators[0]))
        return self.interval(test, scope)

    def mods_of(self, test: ast.AST, scope: ast.AST) -> List[ast.BinOp]:
        """The ``a % n`` of a condition, those of the values its names hold included
        (``need_update = (i + 1) % accum == 0; if not need_update:``)."""
        parts = [test]
        for n in local_nodes(test):
            if isinstance(n, ast.Name):
                parts += [v for v, _ in values_of(self, n.id, scope, n) or [] if isinstance(v, ast.expr)]
        return [m for p in parts for m in local_nodes(p) if isinstance(m, ast.BinOp) and is_mod(m)]

    def skips_to_step(self, test: ast.AST, rest: List[ast.stmt], scope: ast.AST) -> bool:
        """Is ``if test: continue`` (or ``return``) the accumulation boundary written as an early exit
        (``if step % accum != 0: continue`` before the optimizer step, or ``if not need_update:
        continue`` with ``need_update = (i + 1) % accum == 0``)? What follows it then runs on every
        optimizer step, not occasionally."""
        if any(_ACCUMULATION.search(" ".join(names_in(m.right))) for m in self.mods_of(test, scope)):
            return True
        return any(isinstance(n, ast.Call) and (self.is_optimizer_step(n) or self.is_step_wrapper(n))
                   for n in local_nodes(rest))

    @staticmethod
    def lazy_init(stmt: ast.If) -> bool:
        """``if x is None: x = ...``: the branch that sets ``x`` runs once (the first step), then ``x``
        is no longer None."""
        test = stmt.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
                and constant(test.comparators[0]) is None and isinstance(test.left, (ast.Name, ast.Attribute))):
            return False
        target = dotted(test.left)
        return any(dotted(t) == target for n in local_nodes(stmt.body) for t, _ in assignments(n))


_EXITS = ("sys.exit", "exit", "quit", "os._exit", "os.abort")


def _jump(body: List[ast.stmt], script: "Script") -> Optional[str]:
    """How a block ends: 'return', 'continue' (or break), 'raise' (raise or sys.exit()), or None."""
    last = body[-1] if body else None
    if isinstance(last, (ast.Return, ast.Continue, ast.Break)):
        return "return" if isinstance(last, ast.Return) else "continue"
    if isinstance(last, ast.Raise) or (isinstance(last, ast.Expr) and script.call_name(last.value) in _EXITS):
        return "raise"
    return None


def is_mod(node: ast.AST) -> TypeGuard[ast.BinOp]:
    """``a % b`` of numbers (a step counter), not a ``"%.3f" % x`` format."""
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and \
        not isinstance(node.left, (ast.Constant, ast.JoinedStr))


def argparse_default(script: "Script", dest: str) -> object:
    """The default of the file's own ``parser.add_argument("--dest", default=...)``; NOT_CONSTANT if unknown."""
    for n in script.nodes:
        if isinstance(n, ast.Call) and method(n) == "add_argument":
            name = constant(keyword(n, "dest"))
            if not isinstance(name, str):
                flags = [f for f in map(constant, n.args) if isinstance(f, str)]
                flags = [f for f in flags if f.startswith("--")] or flags
                name = flags[0].lstrip("-").replace("-", "_") if flags else None
            if name == dest:
                default = keyword(n, "default")
                return constant(default) if default is not None else NOT_CONSTANT
    return NOT_CONSTANT


def constant_value(script: "Script", node: Optional[ast.AST], scope: ast.AST, at: Optional[ast.AST]) -> object:
    """What ``node`` is known to hold: a literal; a name the code assigns one literal only (a module
    constant ``workers = 4``, a local ``log_interval = 1``); ``args.x`` the default of the file's own
    ``--x`` option. NOT_CONSTANT otherwise."""
    found = constant(node)
    if found is not NOT_CONSTANT or node is None:
        return found
    if isinstance(node, ast.Name):
        values = values_of(script, node.id, scope, at)
        if values and len(values) == 1 and isinstance(values[0][0], ast.AST):
            return constant(values[0][0])
        return NOT_CONSTANT
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return argparse_default(script, node.attr)
    return NOT_CONSTANT


class Walker:
    """Collects a training loop's per-step statements, in order, with their guards."""

    def __init__(self, script: Script, region: Region):
        self.script = script
        self.region = region
        self.visited: Set[ast.AST] = set()

    def run(self) -> None:
        """Walk the region's loop (its test or its ``for`` header, then its body), or its function's body."""
        loop = self.region.loop
        if isinstance(loop, ast.While):
            self.add(loop.test, False, self.region.scope, test=True)
        elif isinstance(loop, (ast.For, ast.AsyncFor)):
            self.add(for_header(loop), False, self.region.scope, header=True)
        self.block(loop.body, False, self.region.scope, 0)

    def add(self, node: ast.expr | ast.stmt, guarded: bool, scope: ast.AST, header: bool = False,
            test: bool = False) -> None:
        self.region.steps.append(Step(node, guarded, scope, header, test))
        if not header:
            self.calls(node, guarded, scope)

    def calls(self, node: ast.AST, guarded: bool, scope: ast.AST) -> None:
        if guarded:
            return
        for n in local_nodes(node):
            if isinstance(n, ast.Call):
                for f in self.script.callees(n, scope):
                    if f in self.visited or self.script.function_kind(f) == "loop" or len(self.visited) > 50:
                        continue
                    self.visited.add(f)
                    self.block(f.body, False, f, 0)

    def block(self, body: List[ast.stmt], guarded: bool, scope: ast.AST, depth: int) -> Optional[str]:
        """Walk ``body``; returns 'continue' or 'return' when an early exit made the rest of it occasional
        (``if not should_log: return``), for the enclosing blocks that the exit also leaves."""
        if depth > 40:
            return None
        left = None
        for i, stmt in enumerate(body):
            exit_ = None
            if isinstance(stmt, DEFS):
                continue
            if isinstance(stmt, ast.If):
                self.add(stmt.test, guarded, scope, test=True)
                # the branch an occasional condition or a lazy initialisation gates runs now and then;
                # its else runs on the other steps, occasional only where the condition's negation is
                when = guarded or self.script.occasional(stmt, scope) or self.script.lazy_init(stmt)
                otherwise = guarded or self.script.only_if_not(stmt.test, scope)
                for branch, guard in ((stmt.body, when), (stmt.orelse, otherwise)):
                    # a branch that ends the run runs at most once
                    self.block(branch, guard or _jump(branch, self.script) == "raise", scope, depth + 1)
                jump = _jump(stmt.body, self.script)
                if jump in ("return", "continue") and not stmt.orelse and \
                        self.script.only_if_not(stmt.test, scope) and not self.script.skips_to_step(stmt.test, body[i + 1:], scope):
                    exit_ = jump
            elif isinstance(stmt, LOOPS):
                inside = guarded
                if isinstance(stmt, ast.While):
                    self.add(stmt.test, guarded, scope, test=True)
                    inside = guarded or self.script.periodic(stmt.test)
                else:
                    self.add(for_header(stmt), guarded, scope)
                exit_ = self.block(stmt.body, inside, scope, depth + 1)
                self.block(stmt.orelse, True, scope, depth + 1)  # a loop's else runs once
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    self.add(item.context_expr, guarded, scope)
                exit_ = self.block(stmt.body, guarded, scope, depth + 1)
            elif isinstance(stmt, (ast.Try, ast.TryStar)):
                exit_ = self.block(stmt.body, guarded, scope, depth + 1)
                for h in stmt.handlers:
                    self.block(h.body, True, scope, depth + 1)
                self.block(stmt.orelse, guarded, scope, depth + 1)
                self.block(stmt.finalbody, guarded, scope, depth + 1)
            elif isinstance(stmt, ast.Match):
                self.add(stmt.subject, guarded, scope)
                for case in stmt.cases:
                    self.block(case.body, True, scope, depth + 1)
            else:
                self.add(stmt, guarded, scope)
            if exit_ and not (exit_ == "continue" and isinstance(stmt, LOOPS)):
                guarded, left = True, exit_  # what follows runs only when the exit was not taken
        return left


class Kinds:
    """What names hold in one function (or the module), flow-insensitively, for a first guess: a name
    assigned two different kinds is MIXED (unknown).  :class:`Flow` refines it statement by statement."""

    def __init__(self, script: Script, scope: ast.AST):
        self.script = script
        self.scope = scope
        self.names: Dict[str, str] = {}
        self.instances: Dict[str, ast.ClassDef] = {}
        self.assigned: Dict[str, List[ast.expr]] = {}
        self.differentiated: Set[str] = set()   # names the scope calls .backward() on: GPU tensors
        outer = script.kinds(script.tree) if scope is not script.tree else None
        self.outer = outer
        body = scope.body if hasattr(scope, "body") else []
        assigns = []
        for node in local_nodes(body):
            assigns += assignments(node)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and script.is_backward(node) \
                    and method(node) == "backward" and not node.args and isinstance(node.func.value, ast.Name):
                self.names[node.func.value.id] = DEVICE
                self.differentiated.add(node.func.value.id)
        for target, value in assigns:
            if isinstance(target, ast.Name):
                self.assigned.setdefault(target.id, []).append(value)
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in script.classes:
                    self.instances[target.id] = script.classes[value.func.id]
        for _ in range(3):  # a few rounds reach what chains of assignments say
            changed = False
            for target, value in assigns:
                for name, kind in bind(target, value, lambda v: classify(script, v, self.of)):
                    old = self.names.get(name)
                    new = merge(old, kind)
                    if new is not None and new != old:
                        self.names[name] = new
                        changed = True
            if not changed:
                break

    def instance_of(self, name: str) -> Optional[ast.ClassDef]:
        return self.instances.get(name) or (self.outer.instance_of(name) if self.outer is not None else None)

    def of(self, name: str) -> Optional[str]:
        if name in self.names:
            return self.names[name]
        return self.outer.of(name) if self.outer is not None and name not in self.assigned else None


class _IterOf(ast.expr):
    """Stands for 'an element of ``iter``' in a for-loop's assignment to its target."""

    _fields = ("iter",)

    def __init__(self, iter: ast.expr) -> None:  # noqa: A002 - ast's own name for it
        super().__init__()
        self.iter = iter


def assignments(node: ast.AST) -> List[Tuple[ast.expr, ast.expr]]:
    """The (target, value) pairs a node assigns: ``x += v`` as ``x = x + v``, a ``for`` target an
    element of what it iterates, ``with ... as x``, ``x := v``."""
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, ast.AugAssign):
        return [(node.target, ast.BinOp(left=node.target, op=node.op, right=node.value))]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [(node.target, _IterOf(node.iter))]
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [(node.optional_vars, node.context_expr)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target, node.value)]
    return []


def merge(old: Optional[str], new: Optional[str]) -> Optional[str]:
    """What a name holds after a value of kind ``new`` joins the values of kind ``old`` (None: unknown)."""
    if new is None or old == new:
        return old
    if old is None:
        return new
    return MIXED


Classifier = Callable[[ast.AST], Optional[str]]  # an expression -> its kind (DEVICE, CPU, ...), None unknown
Lookup = Callable[[str], Optional[str]]          # a name -> its kind where it is read


def bind(target: ast.AST, value: ast.AST, classify_value: Classifier) -> Iterator[Tuple[str, Optional[str]]]:
    """(name, kind) pairs an assignment makes.  Tuple targets take a tuple literal element by element,
    and what a tuple-returning tensor call (``max(dim)``, ``topk``) or a batch gives alike for every part;
    ``for i, b in enumerate(X)`` binds ``i`` to a number and ``b`` to an element of X."""
    if isinstance(target, ast.Starred):
        target = target.value
    if isinstance(target, ast.Name):
        yield target.id, classify_value(value)
        return
    if not isinstance(target, (ast.Tuple, ast.List)):
        return
    elts = target.elts
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(elts):
        for t, v in zip(elts, value.elts):
            yield from bind(t, v, classify_value)
        return
    if isinstance(value, _IterOf):
        it = value.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.args:
            if it.func.id == "enumerate" and len(elts) == 2:
                yield from bind(elts[0], ast.Constant(0), classify_value)
                yield from bind(elts[1], _IterOf(it.args[0]), classify_value)
                return
            if it.func.id == "zip" and len(elts) == len(it.args):
                for t, a in zip(elts, it.args):
                    yield from bind(t, _IterOf(a), classify_value)
                return
    kind = classify_value(value)
    each = kind if kind in (DEVICE, CPU) else None
    for t in elts:
        yield from bind(t, _Known(each), classify_value)


class _Known(ast.expr):
    """An expression whose kind is already known (a part of a tuple)."""

    _fields = ()

    def __init__(self, kind: Optional[str]) -> None:
        super().__init__()
        self.kind = kind


def classify(script: Script, node: ast.AST, lookup: Lookup, depth: int = 0) -> Optional[str]:
    """The kind of an expression's value (DEVICE, CPU, OTHER, MODEL), or None when unknown."""
    if depth > 30:
        return None
    if isinstance(node, _Known):
        return node.kind

    def rec(part: ast.AST) -> Optional[str]:
        return classify(script, part, lookup, depth + 1)

    if isinstance(node, _IterOf):
        if _is_loader_expr(script, node.iter):
            return CPU
        # for p in model.parameters() / self.master_params: parameters live where the model computes
        if re.search(r"(?<![a-z])param(?!_group)", identifier(node.iter) or "", re.I) and method(node.iter) != "named_parameters":
            return DEVICE if script.cuda_path else None
        return None
    if isinstance(node, ast.Name):
        kind = lookup(node.id)
        return None if kind == MIXED else kind
    if isinstance(node, (ast.Constant, ast.JoinedStr, ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp,
                         ast.SetComp, ast.Tuple)):
        return OTHER
    if isinstance(node, ast.Call):
        return _classify_call(script, node, rec)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Mod) and isinstance(node.left, (ast.Constant, ast.JoinedStr)):
            return OTHER  # "%.3f" % x: a string
        kinds = {rec(node.left), rec(node.right)}
        return _where(kinds) or (OTHER if kinds == {OTHER} else None)
    if isinstance(node, ast.UnaryOp):
        k = rec(node.operand)
        return k if k in (DEVICE, CPU, OTHER) else None
    if isinstance(node, ast.Compare):
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
            return OTHER
        return _where({rec(n) for n in [node.left] + node.comparators})
    if isinstance(node, (ast.Subscript, ast.Starred)):  # x[i], and *t (t's elements): where x and t are
        return _where({rec(node.value)})
    if isinstance(node, ast.Attribute):
        if node.attr in ("shape", "dtype", "device", "ndim", "is_cuda", "requires_grad"):
            return OTHER
        if node.attr in ("data", "grad", "T", "mT", "real", "imag"):
            return _where({rec(node.value)})
        if node.attr in ("loss", "logits") and isinstance(node.value, ast.Name) and rec(node.value) == DEVICE:
            return DEVICE
        return None
    if isinstance(node, ast.IfExp):
        a, b = rec(node.body), rec(node.orelse)
        return a if a == b else None
    return rec(node.value) if isinstance(node, ast.NamedExpr) else None


def _imported_elsewhere(script: Script, func: ast.AST) -> bool:
    """Is ``func`` a name imported from a module other than torch's (a project's ``compute_loss``)? What
    such a function returns is not known from its name: it may already be on the host."""
    if not isinstance(func, ast.Name):
        return False
    origin = script.aliases.get(func.id)
    return origin is not None and not origin.startswith("torch")


def _where(kinds: Set[Optional[str]]) -> Optional[str]:
    """Where a value computed from values of these kinds lives: on the device if any is, else the host."""
    if DEVICE in kinds:
        return DEVICE
    if CPU in kinds:
        return CPU
    return None


def _elements(node: ast.AST, rec: Classifier) -> Optional[str]:
    """Where the elements of a collection live: ``d.values()`` and ``(v for v in d.values())`` of a
    model's outputs are on the device."""
    if isinstance(node, (ast.GeneratorExp, ast.ListComp)) and len(node.generators) == 1:
        target = node.generators[0].target
        if isinstance(target, ast.Name) and isinstance(node.elt, ast.Name) and node.elt.id == target.id:
            return _elements(node.generators[0].iter, rec)
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "values":
        return _where({rec(node.func.value)})
    return _where({rec(node)})


def _is_loader_expr(script: Script, node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        name = script.call_name(node)
        if name.endswith("DataLoader"):
            return True
        wraps = (isinstance(node.func, ast.Name) and node.func.id in ("tqdm", "iter")) or name.endswith("tqdm")
        return bool(node.args) and wraps and _is_loader_expr(script, node.args[0])
    return bool(LOADERISH.search(identifier(node) or "")) and not isinstance(node, ast.Subscript)


def device_arg(node: ast.AST) -> Optional[bool]:
    """True: this argument of .to() names a GPU device; False: the CPU; None: not a device (a dtype...)."""
    c = constant(node)
    if isinstance(c, str):
        if c.startswith("cuda"):
            return True
        return False if c == "cpu" else None
    if isinstance(node, ast.Call) and identifier(node.func) == "device" and node.args:
        return device_arg(node.args[0])
    if isinstance(node, ast.JoinedStr):
        text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        return True if "cuda" in text else None
    name = identifier(node)
    return True if name and _DEVICE_ARG.search(name) and "dtype" not in name.lower() else None


def moved_to(call: ast.AST) -> Optional[bool]:
    """``x.to(where)`` or ``x.to(device=where)``: True to a GPU, False to the CPU, None not a device move."""
    if not (isinstance(call, ast.Call) and method(call) == "to"):
        return None
    target = call.args[0] if call.args else keyword(call, "device")
    if target is None:
        return None
    return device_arg(target)


def _classify_call(script: Script, node: ast.Call, rec: Classifier) -> Optional[str]:
    func = node.func
    if isinstance(func, ast.Attribute):  # a method: x.m(...)
        m, recv = func.attr, func.value
        if m in PLAIN_METHODS:
            return OTHER
        if m == "cpu":
            return CPU
        if m == "cuda":
            return MODEL if rec(recv) == MODEL else DEVICE
        if m == "to":
            rk = rec(recv)
            if rk == MODEL:
                return MODEL
            where = moved_to(node)
            if where is None:  # .to(dtype): where the receiver is
                return _where({rk})
            return DEVICE if where else CPU
        rk = rec(recv)
        if rk == MODEL:
            if m in ("forward", "__call__"):
                return DEVICE
            return MODEL if m in ("train", "eval", "half", "float", "to", "requires_grad_", "cuda") else None
        if m in TENSOR_METHODS and rk in (DEVICE, CPU):
            return rk
    name = script.qualname(func)
    if identifier(func) in ("clip_grad_norm_", "clip_grad_norm"):
        return DEVICE  # the total norm, a tensor where the parameters are
    if isinstance(func, ast.Name) and func.id in PLAIN_BUILTINS:
        if func.id == "abs" and node.args:
            return _where({rec(node.args[0])}) or OTHER
        if func.id == "sum" and node.args:
            return _elements(node.args[0], rec)  # sum(loss_dict.values()): a tensor where its parts are
        return None if func.id in ("min", "max", "sum") else OTHER
    if name.startswith("torch.nn.functional."):
        return CPU if _where({rec(a) for a in node.args}) == CPU else DEVICE
    if name.startswith("torch.nn.") and name.rsplit(".", 1)[-1][:1].isupper():
        return MODEL
    if name.startswith(("torch.nn.parallel.",) + MODEL_FACTORIES) or name == "torch.compile" or \
            name.endswith(("DistributedDataParallel", "DataParallel")) or \
            (name.endswith("from_pretrained") and "Model" in name):
        return MODEL
    if name in ("torch.autograd.Variable", "torch.autograd.variable.Variable"):
        return rec(node.args[0]) if node.args else None  # the legacy wrapper: the tensor it is given
    if name.startswith("torch."):
        short = name[6:]
        head = short.split(".", 1)[0]
        if head in TORCH_PLAIN:
            return None
        if short.endswith("_like") and short in FACTORIES and node.args and keyword(node, "device") is None:
            return _where({rec(node.args[0])})  # torch.zeros_like(x): made where x is
        if short in FACTORIES or short in LEGACY_TENSORS:
            dev = keyword(node, "device")
            if dev is None:
                return CPU
            on_gpu = device_arg(dev)
            if on_gpu is None:
                return None
            return DEVICE if on_gpu else CPU
        return _where({rec(a) for a in node.args}) if "." not in short else None
    if isinstance(func, ast.Name) and func.id in script.classes:
        return MODEL if any("Module" in script.qualname(b) for b in script.classes[func.id].bases) else OTHER
    if isinstance(func, ast.Name) and len(script.functions.get(func.id, ())) == 1:
        # a function of this file (a nested one included): what its returns give
        returns = script.returns(script.functions[func.id][0])
        if returns == FOLLOWS:
            return _where({rec(a) for a in node.args})
        if returns is not None:
            return returns
    summary = script.imported(node)
    if summary is not None and summary.returns is not None:
        if summary.returns == FOLLOWS:  # a tensor computed from its arguments: where they are
            return _where({rec(a) for a in node.args})
        return summary.returns
    fk = rec(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
    if fk == MODEL:
        return DEVICE
    ident = identifier(func)
    if isinstance(func, (ast.Name, ast.Attribute)) and ident and MODELISH.match(ident) and fk is None:
        return DEVICE
    if isinstance(func, (ast.Name, ast.Attribute)) and ident and LOSSISH.search(ident) and fk is None \
            and not script.functions.get(ident) and not _imported_elsewhere(script, func):
        return DEVICE
    return None


def skips_sync(func: ast.AST) -> bool:
    """Does ``func`` call ``no_sync()`` or set ``require_backward_grad_sync`` (DDP's all-reduce skipped)?"""
    for n in local_nodes(body_of(func)):
        if (isinstance(n, ast.Call) and method(n) == "no_sync") or \
                (isinstance(n, ast.Attribute) and n.attr == "require_backward_grad_sync"):
            return True
    return False


def return_kind(script: Script, func: ast.AST) -> Optional[str]:
    """What ``func`` returns: a kind every ``return`` agrees on, computed with its parameters taken to be
    on the device and again on the host (FOLLOWS when the result moves with them); None when unknown or
    when the returns disagree.  The names the function assigns are followed under each assumption
    (``targets = torch.full_like(logits)`` moves with ``logits``); a name it unpacks from a tuple is
    unknown; any other name is the module's."""
    if not isinstance(func, FUNCS):
        return None
    params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
    values = []
    assigned: Dict[str, List[ast.expr]] = {}
    unpacked: Set[str] = set()
    for n in local_nodes(func.body):
        if isinstance(n, ast.Return) and n.value is not None:
            values.append(n.value)
        for target, value in assignments(n):
            if isinstance(target, ast.Name):
                assigned.setdefault(target.id, []).append(value)
            else:
                unpacked.update(t.id for t in local_nodes(target) if isinstance(t, ast.Name))
    if not values:
        return None
    module = script.kinds(script.tree)

    def assuming(where: str) -> Optional[str]:
        known: Dict[str, Optional[str]] = {}

        def lookup(name: str) -> Optional[str]:
            if name in unpacked:
                return None
            if name not in assigned:
                return where if name in params else module.of(name)
            if name not in known:
                known[name] = None  # a name assigned from itself: what its other values say
                found: Optional[str] = None
                for value in assigned[name]:
                    found = merge(found, classify(script, value, lookup))
                known[name] = found
            return known[name]
        found = {classify(script, v, lookup) for v in values}
        return found.pop() if len(found) == 1 else None

    on_device, on_host = assuming(DEVICE), assuming(CPU)
    if on_device == DEVICE and on_host == CPU:
        return FOLLOWS
    return on_device if on_device == on_host else None


class Flow:
    """Kinds of names as a region runs: assignments seen so far override the first guess."""

    def __init__(self, script: Script):
        self.script = script
        self.env: Dict[ast.AST, Dict[str, Optional[str]]] = {}

    def classify(self, node: ast.AST, scope: ast.AST) -> Optional[str]:
        env, kinds = self.env.setdefault(scope, {}), self.script.kinds(scope)

        def lookup(name: str) -> Optional[str]:
            """What the region assigned so far, else the scope's first guess."""
            if name in env:
                return env[name]
            return kinds.of(name)
        return classify(self.script, node, lookup)

    def comprehensions(self, node: ast.AST, scope: ast.AST) -> None:
        """Bind the targets of comprehensions in ``node`` (their elements are what they iterate)."""
        env = self.env.setdefault(scope, {})
        for n in local_nodes(node):
            if isinstance(n, ast.comprehension):
                env.update(bind(n.target, _IterOf(n.iter), lambda v: self.classify(v, scope)))

    def assign(self, stmt: ast.AST, scope: ast.AST) -> None:
        """Record what ``stmt`` assigns; a value of unknown kind given to a name the scope calls
        ``.backward()`` on (``loss = losses[kind](model, x)``) is the GPU tensor it differentiates."""
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            differentiated = self.script.kinds(scope).differentiated
            env = self.env.setdefault(scope, {})
            for t, v in assignments(stmt):
                for name, kind in bind(t, v, lambda v: self.classify(v, scope)):
                    env[name] = DEVICE if kind is None and name in differentiated else kind


def for_header(loop: ast.For | ast.AsyncFor) -> ast.Assign:
    """A ``for`` loop's per-iteration assignment of its target (an element of what it iterates)."""
    return ast.Assign(targets=[loop.target], value=_IterOf(loop.iter), lineno=loop.lineno, col_offset=loop.col_offset)
