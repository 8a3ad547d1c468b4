"""OS and Python-environment checks, on fixture machines built from real os-release files."""

import json

import pytest
from clitools import REAL_FILES
from hostkit import diagnose, facts_of, ids, make_host

from debtorch.machine import Machine

REAL = REAL_FILES / "os-release"


def os_files(name):
    base = REAL / name / "etc"
    return {f"/etc/{p.name}": p.read_text() for p in base.iterdir()}


needs_real = pytest.mark.skipif(not REAL.exists(), reason="shared real fixtures not present")


@needs_real
@pytest.mark.parametrize("name,release,finding", [
    ("debian13", "13", None),
    ("debiantesting", "testing", None),
    ("debian10", "10", "os.W002"),
    ("ubuntu24", None, "os.I001"),
])
def test_release_checks_on_real_os_release_files(tmp_path, name, release, finding):
    doc = facts_of(make_host(tmp_path, files=os_files(name)))
    debian = Machine.from_facts(doc).os.debian
    assert (debian.release if debian and Machine.from_facts(doc).os.is_debian else None) == release
    found = [i for i in ids(diagnose(doc)) if i.startswith("os.")]
    assert found == ([finding] if finding else [])


@needs_real
def test_ubuntu_is_recognised_as_a_derivative(tmp_path):
    o = Machine.from_facts(facts_of(make_host(tmp_path, files=os_files("ubuntu24")))).os
    assert o.derivative and o.is_debian is False
    assert o.debian.release == "13"   # the Debian it is based on: debian_version says trixie/sid


def test_system_python_externally_managed_advises_a_venv(tmp_path, replay):
    base = replay("debian12-vm-2core")
    light = json.loads(base.run(["x"], key=f"{base.default_python} <probe:light>").stdout)
    light.update(executable="/usr/bin/python3", prefix="/usr", base_prefix="/usr", venv=False, torch=None)
    host = make_host(tmp_path, meta={"python": "/usr/bin/python3"},
                     commands={"/usr/bin/python3 <probe:light>": json.dumps(light)})
    doc = facts_of(host)
    assert doc["python"]["venv"] is False and doc["os"]["externally_managed"] is True
    [f] = [f for f in diagnose(doc) if f.id == "python.W001"]
    assert "python3 -m venv" in f.fix
    # The venv the VM really uses gets no such advice.
    assert "python.W001" not in ids(diagnose(base))


def test_interpreter_that_does_not_answer(tmp_path):
    host = make_host(tmp_path, meta={"python": "/opt/broken/bin/python"}, commands={
        "/opt/broken/bin/python <probe:light>": {"returncode": None, "stdout": "", "stderr": "",
                                                 "error": "command not found"}})
    doc = facts_of(host)
    assert doc["python"]["version"] is None and "command not found" in doc["python"]["unknown"]["version"]
    assert "python.E001" in ids(diagnose(doc))


def test_wsl2_and_wsl1(tmp_path):
    wsl2 = make_host(tmp_path, files={"/proc/sys/kernel/osrelease": "5.15.167.4-microsoft-standard-WSL2\n"})
    doc = facts_of(wsl2)
    assert doc["os"]["wsl"] == 2
    assert "os.I003" in ids(diagnose(doc)) and "os.E001" not in ids(diagnose(doc))
    wsl1 = make_host(tmp_path, name="w1", files={"/proc/sys/kernel/osrelease": "4.4.0-19041-Microsoft\n"})
    assert "os.E001" in ids(diagnose(wsl1))
