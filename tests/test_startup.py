"""What `debtorch doctor` loads when it starts (issue 9: at most 10% of collect_env's time).

The time itself is measured by benchmarks/speed_vs_collect_env.py, side by side with
collect_env (docs/performance.md); these tests keep the causes of a slow start from coming back.
"""

import ast
import json
import os
import subprocess
import sys

from clitools import HOSTS, ROOT

PACKAGE = ROOT / "debtorch"

# Run the doctor as the console script does, on a recorded machine (nothing live), and
# report which modules it loaded.
PROBE = """
import json, sys
from debtorch.cli import main
sys.argv = ["debtorch"] + sys.argv[1:]
try:
    main()
except SystemExit:
    pass
sys.stderr.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
"""


def modules_loaded(*args: str, env=None) -> set:
    full = dict(os.environ)
    full["PYTHONPATH"] = str(ROOT)
    full.update(env or {})
    res = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=full, timeout=120)
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("MODULES ")]
    assert line, res.stderr
    return set(json.loads(line[-1][len("MODULES "):]))


def typers_own() -> set:
    """What importing typer loads by itself (Debian 12's typer 0.7 imports rich, for one)."""
    res = subprocess.run([sys.executable, "-c", "import json, sys, typer; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=60)
    return set(json.loads(res.stdout))


def test_the_doctor_loads_only_what_it_uses(tmp_path):
    env = {"DEBTORCH_CACHE": str(tmp_path / "cache")}
    host = str(HOSTS / "debian12-vm-2core")
    typer = typers_own()
    first = modules_loaded("doctor", "--host", host, env=env) - typer
    again = modules_loaded("doctor", "--host", host, env=env) - typer
    assert "debtorch.doctor" in first and "debtorch.machine" in first  # what debtorch loads beyond typer's own
    heavy = {"torch", "numpy", "rich", "matplotlib", "debtorch.tune", "debtorch.train", "debtorch.verify",
             "debtorch.lint", "debtorch.fleet.gather", "debtorch.report.redact", "debtorch.facts.collectenv",
             "debtorch.facts.dataread"}   # --measure-data's reads: nothing of them in a plain doctor
    assert not heavy & first, heavy & first
    # The knowledge files are parsed at every start (no cache, docs/performance.md); nothing is written.
    assert "tomllib" in first and "tomllib" in again
    assert not {"tempfile", "secrets", "socket"} & again, {"tempfile", "secrets", "socket"} & again
    assert not (tmp_path / "cache").exists()


def test_command_modules_keep_their_annotations_as_objects():
    """typer reads each command's annotations at every start; as strings
    (``from __future__ import annotations``) they are compiled again each time."""
    commands = ["doctor", "facts", "fleet", "lint", "tune", "verify_train", "program"]
    for name in commands:
        tree = ast.parse((PACKAGE / "cli" / f"{name}.py").read_text())
        future = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "__future__"
                  and any(a.name == "annotations" for a in n.names)]
        assert not future, f"debtorch/cli/{name}.py: from __future__ import annotations slows every start"
