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
import re
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
    assert "pip install torch==2.13.0+cu126 --index-url https://download.pytorch.org/whl/cu126" in e3.fix
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


# --- every corpus device file too (issue 22): os-release trees and cpuinfo files, replayed ----

TREES = sorted(p for p in (ROOT / "tests" / "corpus" / "os-release").iterdir() if p.is_dir())
CPUINFO = sorted(p for p in (ROOT / "tests" / "corpus" / "cpuinfo").iterdir() if not p.name.endswith((".toml", ".md")))


@pytest.mark.parametrize("tree", TREES, ids=[p.name for p in TREES])
def test_os_release_machines_give_no_contradictory_advice(tree):
    m, found = _judge(facts_mod.collect(ReplayHost(tree), facts_mod.Options()))
    assert contradictions(m, found) == []


@pytest.mark.parametrize("path", CPUINFO, ids=[p.name for p in CPUINFO])
def test_cpuinfo_machines_give_no_contradictory_advice(path, tmp_path):
    import tomllib
    arch = tomllib.loads(Path(str(path) + ".expected.toml").read_text())["verdict"]["arch"]
    (tmp_path / "proc").mkdir()
    shutil.copy(path, tmp_path / "proc" / "cpuinfo")
    (tmp_path / "_host.json").write_text(json.dumps({"machine": arch}))
    m, found = _judge(facts_mod.collect(ReplayHost(tmp_path), facts_mod.Options()))
    assert contradictions(m, found) == []


# --- fixes that work on the machine they are for (issue 22) ---------------------------------

def _doc(python="3.11.2", torch=None, gpus=("NVIDIA GeForce RTX 3090",), driver="580.95.05", arch="x86_64", **nv):
    cu = re.search(r"\+cu(\d+)(\d)$", torch or "")
    t = {"installed": False} if torch is None else {"installed": True, "version": torch,
                                                     "cuda": f"{cu.group(1)}.{cu.group(2)}" if cu else None}
    return {"os": {"id": "debian", "version_id": "12", "platform": "linux", "arch": arch},
            "python": {"version": python, "torch": t},
            "nvidia": {"driver_version": driver, "gpus": [{"index": i, "name": g, **nv} for i, g in enumerate(gpus)]}}


def _fixes(doc) -> tuple:
    m = Machine.from_facts(doc)
    found = diagnose(m, Context(source="facts")).findings
    return m, found, "\n".join(f.fix or "" for f in found)


PYTHONS = ["3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]
GPUS = ["Tesla K80", "Tesla M40", "NVIDIA GeForce GTX 1080", "Tesla V100-SXM2-16GB", "Tesla T4",
        "NVIDIA GeForce RTX 3090", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 5090"]
DRIVERS = [None, "450.80.02", "535.261.03", "595.45.04"]
TORCHES = [None, "1.7.1+cu110", "2.6.0+cu124", "2.13.0+cu130"]


def _machines() -> list:
    """Every (Python, GPU, driver, torch) of the lists above.  The fast tier runs the 320 where the torch
    is the (Python + GPU + driver)-th of TORCHES, modulo 4: a covering array of strength 3, so that every
    three values of any three of the four lists meet in some machine; the slow tier runs the other 960."""
    cases = []
    for p, python in enumerate(PYTHONS):
        for g, gpu in enumerate(GPUS):
            for d, driver in enumerate(DRIVERS):
                for t, torch in enumerate(TORCHES):
                    marks = () if t == (p + g + d) % len(TORCHES) else (pytest.mark.slow,)
                    cases.append(pytest.param(python, gpu, driver, torch, marks=marks,
                                              id=f"{torch}-{driver}-{gpu}-{python}"))
    return cases


@pytest.mark.parametrize("python, gpu, driver, torch", _machines())
def test_every_wheel_a_fix_names_exists_for_the_machines_python(python, gpu, driver, torch):
    """A pip line names a wheel checks/torch_wheels.toml lists for the machine's Python and
    architecture (consistency rule 6), whatever the GPU, driver and installed torch."""
    m, found, _ = _fixes(_doc(python, torch, (gpu,), driver))
    assert contradictions(m, found) == []


@pytest.mark.parametrize("python, release, why", [("3.8", "2.4", "Python 3.8"), ("3.6", "1.10", "Python 3.6"),
                                                  ("3.12", "2.14", None)])
def test_the_machines_python_decides_the_release_a_fix_names(python, release, why):
    _, found, _ = _fixes(_doc(python))
    e1 = next(f for f in found if f.id == "torch.E001")
    assert f"torch=={release}.*" in e1.fix
    assert (why in e1.fix) if why else "#" not in e1.fix


def test_no_wheel_is_named_where_pytorch_publishes_none():
    m, found, fixes = _fixes(_doc(gpus=(), arch="armv7l", driver=None))
    assert {"cpu.W004"} <= {f.id for f in found} and "pip install torch" not in fixes
    assert contradictions(m, found) == []


def test_aarch64_gets_the_aarch64_rows():
    _, found, _ = _fixes(_doc(gpus=("NVIDIA GH200 480GB",), arch="aarch64", python="3.12"))
    e1 = next(f for f in found if f.id == "torch.E001")
    assert "torch==2.14.*" in e1.fix and "whl/cu130" in e1.fix      # GH200 (9.0) with driver 580: cu130 (stable)


def test_the_installed_variant_is_never_the_alternative_nor_a_wheel_of_its_cuda():
    """A GTX 1080 under 2.13.0+cu126 on driver 535 (CUDA 12.2): 12.6 runs through minor-version
    compatibility, and no other 2.13 wheel has Pascal code; the fix says so instead of naming
    cu126 again, or 2.14's cu126 as if it were another CUDA."""
    m, found, _ = _fixes(_doc(torch="2.13.0+cu126", gpus=("NVIDIA GeForce GTX 1080",), driver="535.261.03"))
    w1 = next(f for f in found if f.id == "cuda.W001")
    assert "pip install" not in w1.fix and "no other 2.13 wheel" in w1.fix
    assert "variant fits" not in "\n".join(f.fix or "" for f in found)
    assert contradictions(m, found) == []


def test_stable_before_experimental_when_the_driver_is_unknown():
    """2.13's cu132 is experimental (RELEASE.md): with no driver to decide, the CPU-only install
    is sent to the stable cu130, never the experimental build."""
    doc = _doc(torch="2.13.0+cpu", gpus=("NVIDIA GeForce RTX 4090",), driver=None)
    doc["python"]["torch"].update(cuda=None, cpu_only=True)
    doc["os"] = {"id": "fedora", "platform": "linux", "arch": "x86_64"}     # no packaged driver to assume
    _, found, _ = _fixes(doc)
    e2 = next(f for f in found if f.id == "torch.E002")
    assert "torch==2.13.0+cu130 --index-url https://download.pytorch.org/whl/cu130" in e2.fix


def test_a_vgpu_guest_on_a_windows_driver_is_told_the_vgpu_guest_driver():
    """gpu.I003 says to update only to the host's vGPU release: the driver fix says the same, even
    where the guest is Windows (nvidia-smi's WDDM model)."""
    doc = _doc(torch="2.13.0+cu130", gpus=("GRID P4-1Q",), driver="411.31", virtualization_mode="VGPU",
               driver_model="WDDM")
    m, found, _ = _fixes(doc)
    e1 = next(f for f in found if f.id == "cuda.E001")
    assert e1.fix.startswith("Update the vGPU guest driver") and "nvidia.com/Download" not in e1.fix
    assert contradictions(m, found) == []


# --- the rule itself can fail ---------------------------------------------------------------

def test_the_rule_catches_each_kind_of_contradiction():
    from debtorch.findings import finding

    doc = {"os": {"id": "debian", "version_id": "12", "wsl": 2, "platform": "linux", "externally_managed": True},
           "apt": {"packages": {"firmware-misc-nonfree": {"version": "1", "status": "install ok installed"}}},
           "python": {"executable": "/usr/bin/python3", "venv": False, "version": "3.11.2",
                      "torch": {"installed": True, "version": "2.6.0+cu124", "cuda": "12.4"}}}
    m = Machine.from_facts(doc)
    found = [
        finding("torch.E003", message="x", fix="pip install torch==2.6.0 --index-url https://download.pytorch.org/whl/cu124"),
        finding("cuda.E001", message="y", fix="pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"),
        finding("driver.E008", message="z", fix="sudo apt install nvidia-driver firmware-misc-nonfree"),
        finding("torch.E002", message="w", fix="Install an older PyTorch release"),
    ]
    said = "\n".join(contradictions(m, found))
    assert "installs the installed torch" in said                    # 3: what is installed
    assert "externally managed" in said                              # 4: PEP 668
    assert "Linux driver where the windows driver" in said           # 2: WSL 2
    assert "firmware-misc-nonfree" in said                           # 3: an installed package
    assert "different PyTorch installs" in said                      # 1: two pip lines
    assert "older PyTorch, another a newer" in said                  # 5: two directions


def test_the_rule_catches_a_wheel_that_does_not_exist_for_the_machine():
    from debtorch.findings import finding

    py311 = Machine.from_facts({"os": {"platform": "linux", "arch": "x86_64"}, "python": {"version": "3.11.4"}})
    said = contradictions(py311, [
        finding("torch.W001", message="x", fix="pip install torch==1.8.1 --index-url https://download.pytorch.org/whl/cu111"),
        finding("torch.E003", message="y", fix="pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu118")])
    assert "no wheel for Python 3.11" in said[0] and "has no wheel for linux-x86_64" in said[1]
    armv7 = Machine.from_facts({"os": {"platform": "linux", "arch": "armv7l"}, "python": {"version": "3.11.4"}})
    assert "publishes none" in contradictions(armv7, [finding("torch.E001", message="z", fix="pip install torch")])[0]


def test_a_newer_release_the_driver_runs_is_found_below_the_latest():
    """An RTX 5090 (sm_120) under 2.6.0+cu126 on driver 570.124.04 (CUDA 12.8): no 2.6 wheel and no
    wheel of the latest release (cu130 and cu132 need 580) has code for it that the driver runs, but
    2.11's cu128 does: that, not the CPU build (pytorch/pytorch#150733's machine)."""
    m, found, _ = _fixes(_doc(python="3.12.9", torch="2.6.0+cu126", gpus=("NVIDIA GeForce RTX 5090 D",),
                              driver="570.124.04"))
    e3 = next(f for f in found if f.id == "torch.E003")
    assert "torch==2.11.* --index-url https://download.pytorch.org/whl/cu128" in e3.fix
    assert "the newest that driver 570.124.04 runs" in e3.fix and "whl/cpu" not in e3.fix
    assert contradictions(m, found) == []
