"""Fixes that know where they run (issue 28, item 3): each class on a minimal recorded machine and on a
real file of the corpus.

- In a container, steps that act on the host (persistence mode, kernel modules, Secure Boot, the
  driver, the CPU governor) say they run on the container's host.
- A guest of NVIDIA's licensed vGPU software (nvidia-smi's XML names the product and "Licensed") is
  sent to its vGPU software release, never to nvidia.com's public driver or Debian's.
- Driver advice names the last branch of a retired architecture (R580 for Maxwell, Pascal and Volta;
  checks/cuda_driver.toml [[last_branch]]).
- A GPU nvidia-smi calls "Graphics Device" is named from its PCI id (checks/pci.toml).
- Under WSL, no `lspci -vv` (it sees no GPU there).
- On an architecture without PyTorch wheels (armv7l), torch.E001 gives cpu.W004's advice, not
  pytorch.org's selector.
"""

from __future__ import annotations

import json
from pathlib import Path

import reports
from clitools import HOSTS, ROOT, cli_runner
from hostkit import with_torch

from debtorch import facts as facts_mod
from debtorch.cli import app
from debtorch.doctor import Context, diagnose
from debtorch.findings import finding_fix
from debtorch.host import ReplayHost
from debtorch.machine import Machine

WS = "debian13-workstation-rtx3080"
CORPUS_XML = ROOT / "tests" / "corpus" / "nvidia-smi-xml"
NO_NVML = {"nvml": {"error": "NVML binding not installed (nvidia-ml-py / python3-pynvml)"}}


def _findings(doc: dict, source: str = "facts") -> dict:
    return {f.id: f for f in diagnose(Machine.from_facts(doc), Context(source=source)).findings}


def _host_findings(host: ReplayHost) -> tuple:
    doc = facts_mod.collect(host, facts_mod.Options())
    m = Machine.from_facts(doc)
    return m, {f.id: f for f in diagnose(m, Context(source="facts")).findings}


def _smi(product: str = "Tesla T4", driver: str = "470.82.01", cuda: str = "11.4", extra: str = "",
         virtualization: str = "Pass-Through", device_id: str = "1EB810DE") -> str:
    """A minimal nvidia-smi -q -x of one GPU."""
    return (f"<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<driver_version>{driver}</driver_version>\n"
            f"<cuda_version>{cuda}</cuda_version>\n<attached_gpus>1</attached_gpus>\n"
            f"<gpu id=\"00000000:00:05.0\">\n<product_name>{product}</product_name>\n"
            f"<gpu_virtualization_mode><virtualization_mode>{virtualization}</virtualization_mode></gpu_virtualization_mode>\n"
            f"{extra}<pci><pci_device_id>{device_id}</pci_device_id></pci>\n</gpu>\n</nvidia_smi_log>\n")


def _smi_host(tmp_path: Path, xml: str, torch: str = "2.13.0+cu130", cuda: str = "13.0", **make: object) -> ReplayHost:
    """The workstation host, its NVML binding missing, nvidia-smi answering ``xml``, torch ``torch``."""
    return with_torch(tmp_path, WS, torch, cuda=cuda, meta=NO_NVML, commands={"nvidia-smi -q -x": xml}, **make)


# --- in a container: host-side steps say so ---------------------------------------------------

CONTAINER = {"os": {"id": "debian", "version_id": "12", "platform": "linux", "arch": "x86_64", "container": "docker"},
             "apt": {"packages": {"nvidia-driver": {"version": "535.261.03", "status": "install ok installed"},
                                  "nvidia-kernel-dkms": {"version": "535.261.03", "status": "install ok installed"}},
                     "running_kernel_headers": {"package": "linux-headers-6.1.0-18-amd64", "installed": False}},
             "nvidia": {"pci_devices": [{"address": "0000:01:00.0", "device_id": "2204", "driver": None, "is_gpu": True}],
                        "secure_boot": True, "dkms_mok_key": {"exists": True, "enrolled": False}},
             "cpu": {"governor": "powersave"}}


def test_host_side_steps_in_a_container_say_where_they_run() -> None:
    found = _findings(CONTAINER)
    for fid in ("driver.E004", "driver.E005", "cpu.W001"):
        assert "container's host" in found[fid].fix, fid
        assert not found[fid].fix.startswith(("sudo", "echo")), fid
    plain = _findings({**CONTAINER, "os": {**CONTAINER["os"], "container": None}})
    assert "container's host" not in plain["driver.E005"].fix and plain["driver.E005"].fix.startswith("sudo apt install")


def test_a_module_that_does_not_load_in_a_container_is_the_hosts_to_load() -> None:
    doc = {**CONTAINER, "nvidia": {**CONTAINER["nvidia"], "secure_boot": False}, "apt": {**CONTAINER["apt"],
                                                                                         "running_kernel_headers": {}}}
    assert "container's host" in _findings(doc)["driver.E003"].fix


def test_persistence_mode_on_a_recorded_container_is_set_on_its_host() -> None:
    _, found = _host_findings(ReplayHost(HOSTS / "debian12-container-t4-shm64m"))
    fix = found["gpu.W001"].fix
    assert fix.startswith("Persistence mode is the host's: on the container's host")


def test_a_real_container_report_gets_its_driver_from_the_host() -> None:
    """vllm-project/vllm#14413: torch in a container finds no driver."""
    report = next(r for r in reports.every_report() if r.name == "collect_env vllm-project-vllm-14413")
    e8 = next(f for f in report.findings if f.id == "driver.E008")
    assert "container's host" in e8.fix and "apt install" not in e8.fix


# --- licensed vGPU guests take the vGPU route ------------------------------------------------

LICENSE = ("<vgpu_software_licensed_product><licensed_product_name>NVIDIA Virtual Applications</licensed_product_name>"
           "<license_status>Licensed (Expiry: 2027-1-1 0:0:0 GMT)</license_status></vgpu_software_licensed_product>\n")


def test_a_licensed_vgpu_guest_on_a_gpu_passed_through_takes_the_vgpu_route(tmp_path: Path) -> None:
    m, found = _host_findings(_smi_host(tmp_path, _smi(extra=LICENSE), torch="2.13.0+cu126", cuda="12.6"))
    assert m.gpus.vgpu and "NVIDIA Virtual Applications" in (m.gpus.vgpu_software or "")
    fix = found["cuda.E001"].fix
    assert fix.startswith("Update the vGPU guest driver from the NVIDIA vGPU software release this guest is licensed for")
    assert "nvidia.com/Download" not in fix and "backports" not in fix
    assert found["gpu.I003"].message.startswith("the GPU runs NVIDIA's licensed vGPU software")
    unlicensed = _host_findings(_smi_host(tmp_path / "b", _smi(), torch="2.13.0+cu126", cuda="12.6"))[1]
    assert unlicensed["cuda.E001"].fix.startswith("Upgrade the NVIDIA driver")


def test_the_real_licensed_vgpu_guest_takes_the_vgpu_route(tmp_path: Path) -> None:
    """telegraf's tesla_p4.xml: a GRID P4-1Q, "NVIDIA RTX Virtual Workstation", "Licensed"."""
    xml = (CORPUS_XML / "telegraf-tesla_p4.xml").read_text()
    m, found = _host_findings(_smi_host(tmp_path, xml, torch="2.13.0+cu130", cuda="13.0"))
    assert "NVIDIA RTX Virtual Workstation" in (m.gpus.vgpu_software or "")
    fix = found["cuda.E001"].fix
    assert fix.startswith("Update the vGPU guest driver") and "nvidia.com/Download" not in fix


# --- the last branch of a retired architecture ---------------------------------------------------

def test_driver_advice_names_the_last_branch_of_a_pascal_gpu() -> None:
    pascal = _findings(reports.doc(torch="2.13.0+cu126", gpus=("NVIDIA GeForce GTX 1080",), driver="470.256.02"))
    assert "within R580, the last branch for Pascal GPUs" in pascal["cuda.E001"].fix
    assert "cuda-drivers-580" in pascal["cuda.E001"].fix
    turing = _findings(reports.doc(torch="2.13.0+cu126", gpus=("NVIDIA GeForce RTX 2080",), driver="470.256.02"))
    assert "R580" not in turing["cuda.E001"].fix
    wsl = reports.doc(torch="2.13.0+cu126", gpus=("NVIDIA GeForce GTX 1080",), driver="472.12")
    wsl["os"]["wsl"] = 2
    assert "to an R580 release, the last branch for Pascal GPUs" in _findings(wsl)["cuda.E001"].fix


def test_a_real_pascal_report_is_told_its_last_branch() -> None:
    """pytorch/pytorch#30071: a Pascal GPU whose driver is too old for the build."""
    report = next(r for r in reports.every_report() if r.name == "collect_env pytorch-pytorch-30071")
    e1 = next(f for f in report.findings if f.id == "cuda.E001")
    assert "R580, the last branch for Pascal GPUs" in e1.fix


# --- "Graphics Device" named from its PCI id ------------------------------------------------------

def test_a_graphics_device_is_named_from_its_pci_id(tmp_path: Path) -> None:
    m, _ = _host_findings(_smi_host(tmp_path, _smi(product="Graphics Device", device_id="220410DE", driver="580.95.05",
                                                   virtualization="None")))
    assert [g.name for g in m.gpus] == ["NVIDIA GeForce RTX 3090"] and m.gpus[0].cc == "8.6"


def test_the_real_graphics_device_is_named_from_its_pci_id(tmp_path: Path) -> None:
    """telegraf's gtx-1660-ti.xml: driver 418.43 calls PCI device 2184 "Graphics Device"; pci.ids
    names 2184 the GeForce GTX 1660 (checks/pci.toml)."""
    host = reports.smi_host(CORPUS_XML / "telegraf-gtx-1660-ti.xml", tmp_path / "h")
    res = cli_runner().invoke(app, ["doctor", "--host", str(host.root)])
    assert "1 x NVIDIA GeForce GTX 1660" in res.stdout and "Graphics Device" not in res.stdout


# --- no lspci under WSL ------------------------------------------------------------------------------

WSL_KERNEL = {"/proc/sys/kernel/osrelease": "6.6.87.2-microsoft-standard-WSL2\n"}


def test_no_lspci_under_wsl(tmp_path: Path) -> None:
    xml = _smi(product="NVIDIA GeForce RTX 3080", driver="581.15", virtualization="None",
               extra="<pci><pci_gpu_link_info><link_widths><max_link_width>16x</max_link_width>"
                     "<current_link_width>8x</current_link_width></link_widths></pci_gpu_link_info></pci>\n")
    _, plain = _host_findings(_smi_host(tmp_path / "a", xml))
    _, wsl = _host_findings(_smi_host(tmp_path / "b", xml, files=WSL_KERNEL))
    assert "lspci -vv" in plain["gpu.W006"].fix
    assert "lspci -vv" not in wsl["gpu.W006"].fix and "Windows" in wsl["gpu.W006"].fix


def test_no_lspci_under_wsl_on_a_real_file(tmp_path: Path) -> None:
    """telegraf's quadro-p2000 v12 XML (a narrow link) replayed as a WSL 2 machine."""
    host = reports.smi_host(CORPUS_XML / "telegraf-quadro-p2000-v12.xml", tmp_path / "h")
    (host.root / "proc" / "sys" / "kernel").mkdir(parents=True)
    (host.root / "proc" / "sys" / "kernel" / "osrelease").write_text(WSL_KERNEL["/proc/sys/kernel/osrelease"])
    _, found = _host_findings(ReplayHost(host.root))
    assert "lspci -vv" not in found["gpu.W006"].fix and "Windows" in found["gpu.W006"].fix


# --- 32-bit ARM without torch ---------------------------------------------------------------------

def test_armv7_without_torch_gets_the_no_wheels_advice() -> None:
    found = _findings(reports.doc(torch=None, gpus=(), driver=None, arch="armv7l"))
    assert found["torch.E001"].fix == found["cpu.W004"].fix
    assert "pytorch.org/get-started" not in found["torch.E001"].fix


def test_a_real_armv7_machine_without_torch_gets_the_no_wheels_advice(tmp_path: Path) -> None:
    """The corpus' ARMv7 cpuinfo (ansible's fixtures) as a machine whose Python has no torch."""
    cpuinfo = reports.CPUINFO[[p.name for p in reports.CPUINFO].index("ansible-armv7-rev4-4cpu-cpuinfo")]
    host = reports.cpuinfo_host(cpuinfo, tmp_path / "h")
    meta = json.loads((host.root / "_host.json").read_text())
    meta.update(python="/usr/bin/python3", commands={"/usr/bin/python3 <probe:light>": {
        "returncode": 0, "stdout": json.dumps({"version": "3.11.2", "venv": False, "prefix": "/usr", "torch": None,
                                               "distributions": {}}), "stderr": "", "error": None}})
    (host.root / "_host.json").write_text(json.dumps(meta))
    m, found = _host_findings(ReplayHost(host.root))
    assert m.os.arch == "armv7l" and m.torch.installed is False
    assert found["torch.E001"].fix == finding_fix("cpu.W004", machines="x86_64, aarch64, s390x")
