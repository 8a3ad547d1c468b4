"""Golden transcripts of `debtorch doctor` on fixture machines: the whole readable view, as a user sees it.

Regenerate after an intended change with: DEBTORCH_REGEN_GOLDEN=1 pytest tests/test_golden_doctor.py
(and read the diff before committing it).
"""

import os
from pathlib import Path

import pytest
from hostkit import HOSTS
from typer.testing import CliRunner

from debtorch.cli import app

GOLDEN = Path(__file__).resolve().parent / "golden"
CASES = {
    "doctor-nouveau.txt": ["--host", str(HOSTS / "debian12-nouveau-gtx1070ti")],
    "doctor-8xa100-deep-verbose.txt": ["--host", str(HOSTS / "debian12-server-8xa100-nvlink"), "--deep", "-v"],
    "doctor-container-t4.txt": ["--host", str(HOSTS / "debian12-container-t4-shm64m")],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_transcript(name):
    res = CliRunner().invoke(app, ["doctor", *CASES[name]])
    text = f"$ debtorch doctor {' '.join(a.replace(str(HOSTS), 'tests/hosts') for a in CASES[name])}\n" \
           f"{res.output}[exit status {res.exit_code}]\n"
    path = GOLDEN / name
    if os.environ.get("DEBTORCH_REGEN_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
