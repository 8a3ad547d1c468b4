"""A hostile working folder: modules named like Python's own (statistics.py, json.py, platform.py)
beside the user's workload.  The workers of tune --measure and verify-train and the gathered
fleet's torch side import debtorch from its own package and the workload from the folder, and
nothing else from it (docs/security.md).  debtorch's own process runs with -P, as its console
script does (the folder is not on its path)."""

import json
import os
import socket
import subprocess
import sys

import pytest
from clitools import HOSTS, ROOT, at_once

pytestmark = [pytest.mark.slow, pytest.mark.torch]
SHADOWS = ("statistics", "json", "platform")   # imported by the workers' start-up, the engine, fleet's torch side
LAUNCHER = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "VIRTUAL_ENV")


def hostile_folder(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for name in SHADOWS:
        (work / f"{name}.py").write_text(f"open({str(tmp_path / ('IMPORTED-' + name))!r}, 'w').close()\n")
    (work / "mywork.py").write_text("def wrong():\n    return [1]\n")
    return work


def debtorch(folder, *args, env=None):
    env = {**{k: v for k, v in os.environ.items() if k not in LAUNCHER}, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-P", "-m", "debtorch", *args], cwd=folder, capture_output=True, text=True,
                          env=env, timeout=180)


def fleet_of_one(folder):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return debtorch(folder, "fleet", "--json", "--host", str(HOSTS / "debian12-vm-2core"), "--timeout", "60",
                    env={"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each command in a hostile folder of its own, run at once: name -> (folder, result)."""
    commands = {
        "tune": lambda f: debtorch(f, "tune", "--measure", "--budget", "30", "--python", sys.executable,
                                   "--workload", "mywork:wrong"),
        "verify-train": lambda f: debtorch(f, "verify-train", "--quick", "--python", sys.executable,
                                           "--workload", "mywork:wrong"),
        "fleet": fleet_of_one,
    }
    folders = {name: hostile_folder(tmp_path_factory.mktemp("hostile")) for name in commands}
    done = at_once({name: (lambda run=run, f=folders[name]: run(f)) for name, run in commands.items()})
    return {name: (folders[name], done[name]) for name in commands}


def imported(folder):
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith("IMPORTED-"))


@pytest.mark.parametrize("command", ["tune", "verify-train"])
def test_training_workers_import_the_workload_from_the_folder_and_nothing_else(runs, command):
    folder, r = runs[command]
    # No module of the folder replaced one of Python's ...
    assert imported(folder) == [], r.stderr
    # ... and the workload module was found there (it is what returned a list).
    assert r.returncode == 2 and "mywork:wrong returned a list" in r.stderr, r.stderr


def test_the_gathered_fleet_imports_nothing_from_the_folder(runs):
    folder, r = runs["fleet"]
    assert imported(folder) == [], r.stderr
    report = json.loads(r.stdout)
    assert report["nodes"]["compared"] == 1 and r.returncode == report["exit_code"], r.stderr
