"""No report gives contradictory advice (issue 10, class 7).

debtorch/doctor/consistency.py defines "contradictory" concretely (two different
PyTorch installs, a Linux driver where Windows or the container host serves
CUDA, an install of what is installed, pip into an externally managed Python,
an older and a newer release at once).  Every fixture machine (with and
without --deep), every collect_env report of the corpus, every nvidia-smi XML
replayed as a machine, and the machines the issue names (WSL 2 without a
driver, a Pascal GPU under a cu130 wheel, a GPU that runs only through PTX, a
missing torch on Debian's own Python) must give none.
"""

import json
import shutil
from pathlib import Path

import pytest

from clitools import HOSTS
from hostkit import change_nvml, make_host, probe, set_probe, with_torch
from debtorch import facts as facts_mod
from debtorch.doctor import Context, diagnose
from debtorch.doctor.consistency import contradictions
from debtorch.facts import collectenv
from debtorch.host import ReplayHost
from debtorch.machine import Machine

ROOT = Path(__file__).resolve().parent.parent
HOST_DIRS = sorted(p for p in HOSTS.iterdir() if (p / "_host.json").exists())
REPORTS = sorted((ROOT / "tests" / "corpus" / "collect_env").glob("*.txt")) + \
    sorted((ROOT / "tests" / "collect_env").glob("*.txt"))
XMLS = sorted((ROOT / "tests" / "corpus" / "nvidia-smi-xml").glob("*.xml"))
WS = "debian13-workstation-rtx3080"


def _judge(doc, source="facts"):
    m = Machine.from_facts(doc)
    report = diagnose(m, Context(source=source))
    return m, report.findings


@pytest.mark.parametrize("host", HOST_DIRS, ids=[p.name for p in HOST_DIRS])
@pytest.mark.parametrize("deep", [False, True], ids=["light", "deep"])
def test_fixture_machines_give_no_contradictory_advice(host, deep):
    m, found = _judge(facts_mod.collect(ReplayHost(host), facts_mod.Options(deep=deep)))
    assert contradictions(m, found) == []


@pytest.mark.parametrize("path", REPORTS, ids=[p.stem for p in REPORTS])
def test_corpus_reports_give_no_contradictory_advice(path):
    m, found = _judge(collectenv.parse_file(str(path)), "collect_env")
    assert contradictions(m, found) == []


@pytest.mark.parametrize("xml", XMLS, ids=[p.stem for p in XMLS])
def test_nvidia_smi_machines_give_no_contradictory_advice(xml, tmp_path):
    root = tmp_path / "host"
    (root / "_commands").mkdir(parents=True)
    shutil.copy(xml, root / "_commands" / "smi.xml")
    (root / "_host.json").write_text(json.dumps({
        "nvml": {"error": "NVML binding not installed (nvidia-ml-py / python3-pynvml)"},
        "commands": {"nvidia-smi -q -x": {"returncode": 0, "stdout_file": "smi.xml", "stderr": "", "error": None}}}))
    m, found = _judge(facts_mod.collect(ReplayHost(root), facts_mod.Options()))
    assert contradictions(m, found) == []


# --- the machines issue 10 names ----------------------------------------------------------

def _wsl_report(tmp_path):
    text = (ROOT / "tests" / "corpus" / "collect_env" / "microsoft-WSL-8102.txt").read_text()
    warning = ("/usr/lib/python3/dist-packages/torch/cuda/__init__.py:52: UserWarning: CUDA initialization: "
               "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a "
               "driver from http://www.nvidia.com/Download/index.aspx\n")
    return collectenv.parse(warning + text)


def test_wsl_without_a_driver_names_the_windows_driver_never_a_debian_one(tmp_path):
    m, found = _judge(_wsl_report(tmp_path), "collect_env")
    e8 = next(f for f in found if f.id == "driver.E008")
    assert "on Windows" in e8.fix and "apt install" not in e8.fix
    assert {"os.I003"} <= {f.id for f in found}
    assert contradictions(m, found) == []


def test_a_live_wsl_machine_with_a_driver_fault_names_no_linux_driver(tmp_path):
    host = make_host(tmp_path, base=WS, files={"/proc/sys/kernel/osrelease": "6.6.87.2-microsoft-standard-WSL2\n"})
    m, found = _judge(facts_mod.collect(host, facts_mod.Options()))
    assert m.driver.platform == "windows"
    assert contradictions(m, found) == []


def _pascal(d):
    d["devices"][0]["nvmlDeviceGetName"] = "NVIDIA GeForce GTX 1080"
    d["devices"][0]["nvmlDeviceGetCudaComputeCapability"] = [6, 1]


def test_pascal_under_cu130_is_sent_to_the_cu126_variant_of_the_same_release(tmp_path):
    host = change_nvml(with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0"), _pascal)
    m, found = _judge(facts_mod.collect(host, facts_mod.Options()))
    e3 = next(f for f in found if f.id == "torch.E003")
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126" in e3.fix
    assert "older PyTorch" not in e3.fix
    assert contradictions(m, found) == []


def test_a_ptx_only_fix_never_names_the_installed_variant(tmp_path):
    host = with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0", deep={"arch_list": ["sm_70", "sm_75", "compute_75"]})
    m, found = _judge(facts_mod.collect(host, facts_mod.Options(deep=True)))
    w3 = next(f for f in found if f.id == "torch.W003")
    assert "whl/cu130" not in w3.fix
    assert contradictions(m, found) == []


def test_missing_torch_on_debians_own_python_gets_a_venv(tmp_path):
    host = with_torch(tmp_path, WS, None)
    _, light = probe(host)
    light.update(executable="/usr/bin/python3", venv=False, prefix="/usr")
    hj = host.root / "_host.json"
    meta = json.loads(hj.read_text())
    meta["python"] = "/usr/bin/python3"
    meta.get("environ", {}).pop("VIRTUAL_ENV", None)
    meta["commands"] = {k.replace("/home/ana/venvs/torch/bin/python", "/usr/bin/python3"): v
                        for k, v in meta["commands"].items()}
    hj.write_text(json.dumps(meta))
    host = set_probe(ReplayHost(host.root), "light", light)
    m, found = _judge(facts_mod.collect(host, facts_mod.Options()))
    e1 = next(f for f in found if f.id == "torch.E001")
    assert "python3 -m venv" in e1.fix and "~/venvs/torch/bin/pip install torch==" in e1.fix
    assert not any(line.startswith(("pip install", "/usr/bin/python3 -m pip")) for line in e1.fix.splitlines())
    assert contradictions(m, found) == []


# --- the rule itself can fail ---------------------------------------------------------------

def test_the_rule_catches_each_kind_of_contradiction():
    from debtorch.findings import error

    doc = {"os": {"id": "debian", "version_id": "12", "wsl": 2, "platform": "linux", "externally_managed": True},
           "apt": {"packages": {"firmware-misc-nonfree": {"version": "1", "status": "install ok installed"}}},
           "python": {"executable": "/usr/bin/python3", "venv": False, "version": "3.11.2",
                      "torch": {"installed": True, "version": "2.6.0+cu124", "cuda": "12.4"}}}
    m = Machine.from_facts(doc)
    found = [
        error("torch.E003", "x", fix="pip install torch==2.6.0 --index-url https://download.pytorch.org/whl/cu124"),
        error("cuda.E001", "y", fix="pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"),
        error("driver.E008", "z", fix="sudo apt install nvidia-driver firmware-misc-nonfree"),
        error("torch.E002", "w", fix="Install an older PyTorch release"),
    ]
    said = "\n".join(contradictions(m, found))
    assert "installs the installed torch" in said                    # 3: what is installed
    assert "externally managed" in said                              # 4: PEP 668
    assert "Linux driver where the windows driver" in said           # 2: WSL 2
    assert "firmware-misc-nonfree" in said                           # 3: an installed package
    assert "different PyTorch installs" in said                      # 1: two pip lines
    assert "older PyTorch, another a newer" in said                  # 5: two directions
