"""Layers import one way (docs/architecture.md, "The layers").

Walks every module of debtorch, function-local imports included, and fails on
an import of a higher layer; a function-local import between debtorch modules
must say what it defers (a ``# defer`` comment on its line): the only reason to
hide an import in a function is a heavy optional dependency (torch, matplotlib)
or start-up time.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "debtorch"

# Lowest first.  A module may import its own layer and the layers before it.
LAYERS = [
    ("base", ("debtorch.__about__", "debtorch.versions", "debtorch.units", "debtorch.inputs", "debtorch.outputs",
              "debtorch.stats", "debtorch.findings", "debtorch.hostlist", "debtorch.budget", "debtorch.hostwaits",
              "debtorch.schema", "debtorch.textsafe", "debtorch.urlsecrets")),
    ("host", ("debtorch.nvmlfake", "debtorch.host")),
    ("transport", ("debtorch.transport",)),
    ("probes", ("debtorch.probes",)),
    ("facts", ("debtorch.facts",)),
    ("knowledge", ("debtorch.knowledge",)),
    ("machine", ("debtorch.machine", "debtorch.fingerprint")),
    ("doctor", ("debtorch.doctor",)),
    ("lint", ("debtorch.lint",)),
    ("train", ("debtorch.train",)),
    ("tune", ("debtorch.tune",)),
    ("verify", ("debtorch.verify",)),
    ("fleet", ("debtorch.fleet",)),
    ("report", ("debtorch.report",)),
    ("cli", ("debtorch.cli", "debtorch.__main__")),
    ("api", ()),   # the root package: debtorch.load(), debtorch.watch(), __version__; nothing of debtorch imports it
]


def layer_of(module: str):
    """(rank, name) of a debtorch module; the root package is the top floor."""
    if module == "debtorch":
        return len(LAYERS) - 1, "api"
    for rank, (name, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank, name
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS and docs/architecture.md")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def function_local_imports(node: ast.AST, inside: bool = False) -> set:
    """The lines of the imports under ``node`` that lie in a function, at any depth (one walk)."""
    lines = set()
    for child in ast.iter_child_nodes(node):
        if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
            lines.add(child.lineno)
        lines |= function_local_imports(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return lines


def imports(path: Path):
    """(line, imported module, function-local?) for every debtorch import in a file."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    local_lines = function_local_imports(tree)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # "from debtorch import facts" and "from . import y" import modules.
            submodules = (mod == "debtorch" or (node.level and not node.module))
            names = [f"{mod}.{a.name}" if submodules and a.name != "__version__" else mod for a in node.names]
        for name in dict.fromkeys(names):
            if name == "debtorch" or name.startswith("debtorch."):
                yield node.lineno, name, node.lineno in local_lines


FILES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(PACKAGE)) for p in FILES])
def test_imports_go_down_the_layers(path):
    me = module_name(path)
    mine = layer_of(me)
    lines = path.read_text().splitlines()
    wrong = []
    for lineno, name, local in imports(path):
        theirs = layer_of(name)
        if theirs[0] > mine[0]:
            wrong.append(f"line {lineno}: {me} ({mine[1]}) imports {name} ({theirs[1]})")
        if local and "# defer" not in lines[lineno - 1]:
            wrong.append(f"line {lineno}: function-local import of {name} without a '# defer' comment saying why")
    assert not wrong, "\n".join(wrong)


def test_the_walker_sees_function_local_and_relative_imports(tmp_path):
    pkg = tmp_path / "debtorch" / "doctor"
    pkg.mkdir(parents=True)
    f = pkg / "x.py"
    f.write_text("from . import y\n\ndef g():\n    from debtorch.cli import app\n")
    global PACKAGE
    saved, PACKAGE = PACKAGE, tmp_path / "debtorch"
    try:
        found = list(imports(f))
    finally:
        PACKAGE = saved
    assert (1, "debtorch.doctor.y", False) in found and (4, "debtorch.cli", True) in found
