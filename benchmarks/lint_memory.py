"""How much memory `debtorch lint` needs per byte of a script: the figure behind lint's
memory budget (debtorch/lint/api.py, MEMORY_PER_BYTE; docs/lint.md, "Limits").

Each sample is linted in a fresh interpreter (`lint_text`: ast parsing, the script's index
and every rule), and its peak resident memory above the same interpreter's peak before
linting is divided by the script's size.  Samples: the real scripts of tests/lint_corpus
(each repeated to about 1 MB, so that the interpreter's own start does not dominate) and
shapes made to be dense (the most syntax-tree nodes per byte a Python file can hold).

    python benchmarks/lint_memory.py [--size 1000000] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = r"""
import resource, sys
from debtorch.lint.api import lint_text
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
res = lint_text(data, sys.argv[1])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) * 1024, "error" if res.error else len(res.findings))
"""

# Dense shapes: what packs the most nodes into the fewest bytes.
SHAPES = {
    "x=1 lines": "x=1\n",
    "a+a+... in one expression": None,   # built below: one deep BinOp chain, in chunks of lines
    "calls f(a,b)": "f(a,b)\n",
    "list of 1,": None,
    "attribute chains a.b.c": "a.b.c.d\n",
    "torch loop step": "for x, y in loader:\n    loss = model(x.cuda()).sum()\n    loss.backward()\n"
                       "    print(loss.item())\n",
}


def shape_text(name: str, size: int) -> str:
    if name == "a+a+... in one expression":
        line = "x = " + "+".join(["a"] * 200) + "\n"
        return line * (size // len(line) + 1)
    if name == "list of 1,":
        line = "x = [" + "1," * 300 + "]\n"
        return line * (size // len(line) + 1)
    unit = SHAPES[name]
    return unit * (size // len(unit) + 1)


def measure(text: str, folder: Path, name: str) -> tuple:
    path = folder / f"{abs(hash(name))}.py"
    path.write_text("import torch\n" + text)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    size = path.stat().st_size
    path.unlink()
    return size, int(out[0]), out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000, help="bytes per sample")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    import tempfile

    samples = {f"corpus: {p.name}": p.read_text() for p in sorted((ROOT / "tests" / "lint_corpus").glob("*.py"))
               if p.name != "__init__.py"}
    samples = {k: v * (args.size // max(1, len(v)) + 1) for k, v in list(samples.items())[:6]}
    samples.update({f"dense: {k}": shape_text(k, args.size) for k in SHAPES})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in samples.items():
            size, peak, found = measure(text, Path(tmp), name)
            rows.append((name, size, peak, peak / size, found))
    print("| sample | bytes | peak memory above start | bytes of memory per source byte |" if args.markdown else
          f"{'sample':<44} {'bytes':>10} {'peak MiB':>9} {'per byte':>9}")
    if args.markdown:
        print("|---|---|---|---|")
    for name, size, peak, ratio, _ in rows:
        if args.markdown:
            print(f"| {name} | {size:,} | {peak / 2**20:.0f} MiB | {ratio:.0f} |")
        else:
            print(f"{name:<44} {size:>10,} {peak / 2**20:>9.1f} {ratio:>9.0f}")
    print(f"largest: {max(r[3] for r in rows):.0f} bytes per source byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
