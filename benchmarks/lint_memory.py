"""How much memory and output `debtorch lint` takes, by the shape of the script: the figures behind
lint's memory budget (debtorch/lint/api.py, MEMORY_PER_TOKEN; docs/lint.md, "Limits").

Each sample is linted in a fresh interpreter, the whole command as a user runs it (`debtorch lint
FILE`: reading, the token count, parsing, the script's index, every rule, the text report); its peak
resident memory above the same interpreter's peak before linting is divided by the script's size and
by its tokens (`debtorch.lint.api.tokens`), and the report's size is counted.  Samples: real scripts of
the lint corpus (each repeated to the sample size) and shapes made to be dense (the most syntax-tree
nodes per byte a Python file can hold), and shapes that give a finding on every line or thousands on
one line.

    python benchmarks/lint_memory.py [--size 680000] [--markdown]

At the default size (680 KB, issue 30's case) every sample must stay within the budget: linted under
512 MiB, or refused before it is parsed; and print at most a few MB.  Exit 1 when one does not.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from debtorch.lint.api import MEMORY_BUDGET, tokens  # noqa: E402

CHILD = r"""
import io, resource, sys
from debtorch.cli.program import app

class Count(io.TextIOBase):
    n = 0
    def write(self, s):
        self.n += len(s.encode("utf-8", "replace"))
        return len(s)
    def isatty(self):
        return False

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out, err = Count(), io.StringIO()
sys.stdout, real = out, sys.stdout
sys.stderr = err
try:
    code = app(["lint", "--no-torchfix", sys.argv[1]], standalone_mode=False) or 0
except SystemExit as exc:
    code = exc.code
except BaseException as exc:
    code = getattr(exc, "exit_code", type(exc).__name__)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sys.stdout = real
print((after - before) * 1024, out.n, code, "refused" if "memory budget" in err.getvalue() else "linted")
"""

ITEM_LOOP = ("model = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.SGD(model.parameters())\n"
             "for x in loader:\n    loss = model(x.cuda()).sum()\n    loss.backward()\n    opt.step()\n")

# Dense shapes: what packs the most nodes into the fewest bytes (one unit, repeated).
SHAPES: Dict[str, str] = {
    "a name alone on a line (a)": "a\n",
    "statements a;a;a": "a;" * 200 + "a\n",
    "a constant alone (1)": "1\n",
    "empty tuples ()": "()\n",
    "calls f()": "f()\n",
    "calls f(a,b)": "f(a,b)\n",
    "assignments x=1": "x=1\n",
    "a tuple of names a,a,": "x=(" + "a," * 300 + ")\n",
    "unary chains ~~~a": "x=" + "~" * 90 + "a\n",
    "subscripts a[a][a]": "x=a" + "[a]" * 60 + "\n",
    "attribute chains a.b.c": "a.b.c.d\n",
    "lambdas": "lambda:0\n",
    "f-strings of fields": "f'{a}{a}{a}{a}{a}{a}'\n",
    "string literals": "'abcdefghij'\n",
}
# Shapes with findings: one per line in a loop, or thousands on one line.
LOOP_SHAPES: Dict[str, str] = {
    "a loop of .item() lines": "    v = loss.item()\n",
    "one line of .item() calls": None,  # type: ignore[dict-item]  # built in sample_text
}


def sample_text(name: str, unit: str, size: int) -> str:
    if name == "one line of .item() calls":
        n = (size - len(ITEM_LOOP)) // len("v=loss.item();")
        return "import torch\n" + ITEM_LOOP + "    " + "v=loss.item();" * n + "v=0\n"
    if name in LOOP_SHAPES:
        return "import torch\n" + ITEM_LOOP + unit * ((size - len(ITEM_LOOP)) // len(unit))
    return "import torch\n" + unit * (size // len(unit) + 1)


def measure(text: str, folder: Path) -> Tuple[int, int, int, object, str]:
    """(bytes, peak memory, bytes printed, exit status, linted or refused)."""
    path = folder / "sample.py"
    path.write_text(text)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    size = path.stat().st_size
    path.unlink()
    return size, int(out[0]), int(out[1]), out[2], out[3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=680_000, help="bytes per sample")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    corpus = ROOT / "tests" / "lint_corpus"
    samples: Dict[str, str] = {}
    for p in sorted(corpus.glob("article_*.py"))[:2]:
        body = p.read_text()
        samples[f"corpus: {p.name}"] = body * (args.size // max(1, len(body)) + 1)
    samples.update({f"dense: {k}": sample_text(k, v, args.size) for k, v in SHAPES.items()})
    samples.update({f"findings: {k}": sample_text(k, v, args.size) for k, v in LOOP_SHAPES.items()})
    rows: List[Tuple[str, int, int, int, int, object, str]] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in samples.items():
            size, peak, printed, code, what = measure(text, Path(tmp))
            rows.append((name, size, tokens(text), peak, printed, code, what))
    head = ("sample", "bytes", "tokens", "peak memory", "per byte", "per token", "printed", "exit", "")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print(f"{head[0]:<40} {'bytes':>9} {'tokens':>8} {'peak MiB':>9} {'/byte':>6} {'/token':>7} "
              f"{'printed':>9} exit")
    failed = []
    for name, size, ntok, peak, printed, code, what in rows:
        cells = (name, f"{size:,}", f"{ntok:,}", f"{peak / 2**20:.0f} MiB", f"{peak / size:.0f}",
                 f"{peak / max(ntok, 1):.0f}", f"{printed:,}", str(code), what)
        if args.markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print(f"{name:<40} {size:>9,} {ntok:>8,} {peak / 2**20:>9.1f} {peak / size:>6.0f} "
                  f"{peak / max(ntok, 1):>7.0f} {printed:>9,} {code} {what}")
        if peak > MEMORY_BUDGET or printed > 4 * 2**20:
            failed.append(name)
    linted = [r for r in rows if r[6] == "linted"]
    print(f"largest per token, linted samples: {max(r[3] / max(r[2], 1) for r in linted):.0f} bytes; "
          f"most printed: {max(r[4] for r in rows):,} bytes; load average {load:.2f} before the runs")
    for name in failed:
        print(f"OVER: {name}: above {MEMORY_BUDGET // 2**20} MiB or 4 MiB printed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
