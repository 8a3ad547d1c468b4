"""The GPU fixture machines, replayed: what a user of `debtorch facts` would see on each."""

import json
import threading

import pytest
from clitools import HOSTS, cli_runner
from typer.testing import Result

from debtorch import facts
from debtorch.facts import nvidia
from debtorch.host import CommandResult, ReplayHost
from debtorch.machine import Machine

GPU_HOSTS = ["debian13-workstation-rtx3080", "debian12-server-8xa100-nvlink", "debian12-nouveau-gtx1070ti",
             "debian12-driver-mismatch-rtx3090", "debian12-container-t4-shm64m"]
NOUVEAU_GPU = "pci0000:00/0000:00:1c.0/0000:03:00.0/0000:04:01.0/0000:05:00.0/0000:06:01.0/0000:07:00.0"


def collect(name, **options):
    return facts.collect(ReplayHost(HOSTS / name), facts.Options(**options))


@pytest.mark.parametrize("name", GPU_HOSTS)
def test_every_fixture_replays_without_a_live_process_or_a_crash(name, no_live):
    doc = collect(name, deep=name in ("debian13-workstation-rtx3080", "debian12-server-8xa100-nvlink"))
    for section in facts.SECTIONS:
        assert "*" not in (doc[section].get("unknown") or {}), (section, doc[section].get("unknown"))
    gpus_on_the_bus = [d for d in doc["nvidia"]["pci_devices"] if d["is_gpu"]]
    assert gpus_on_the_bus, "every GPU fixture has a GPU on the PCI bus"
    json.dumps(doc)


def test_workstation_one_consumer_gpu_through_nvml(no_live):
    n = collect("debian13-workstation-rtx3080")["nvidia"]
    assert n["source"] == "nvml" and n["nvml"]["available"]
    assert (n["driver_version"], n["cuda_driver_version"]) == ("595.58.03", "13.2")
    assert n["kernel_module"] == {**n["kernel_module"], "version": "595.58.03", "flavor": "open"}
    assert n["userspace_driver_version"] == "595.58.03"
    [g] = n["gpus"]
    assert (g["name"], g["compute_capability"]) == ("NVIDIA GeForce RTX 3080", "8.6")
    assert g["pci_address"] == "0000:0c:00.0" == n["pci_devices"][0]["address"]
    # A consumer GPU: ECC and MIG are "not supported", a normal answer.
    assert g["ecc_mode_current"] is None and g["unknown"]["ecc_mode_current"] == nvidia.NOT_SUPPORTED
    assert g["persistence_mode"] is False
    assert n["topology"] is None
    # Secure Boot is on and the DKMS module is signed with an enrolled key: nothing to fix.
    assert n["secure_boot"] is True and n["dkms_module"] is True
    assert n["dkms_mok_key"] == {"path": "/var/lib/dkms/mok.pub", "exists": True, "enrolled": True}
    assert [b["module"] for b in n["blacklisted"]] == ["nouveau"]
    assert set(n["modules"]) == {"nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"}


def test_workstation_deep_probe_and_wheels(no_live):
    doc = collect("debian13-workstation-rtx3080", deep=True)
    deep = doc["python"]["deep"]
    assert deep["cuda_available"] and deep["devices"][0]["capability"] == "8.6"
    assert "sm_86" in deep["arch_list"]
    cu = doc["cuda"]
    assert cu["toolkit_nvcc"] is None and "no nvcc" in cu["unknown"]["toolkit_nvcc"]
    assert {w["library"] for w in cu["wheel_libraries"] if w["source"] == "nvidia wheel"} >= {"cudart", "cudnn", "nccl"}
    cudnn = next(w for w in cu["wheel_libraries"] if w["name"] == "libcudnn.so.9")
    assert cudnn["package_version"] == "9.20.0.48"
    assert cu["shadowing"] == []


def test_server_eight_a100_on_nvlink(no_live):
    n = collect("debian12-server-8xa100-nvlink")["nvidia"]
    assert len(n["gpus"]) == 8
    assert len([d for d in n["pci_devices"] if d["is_gpu"]]) == 8
    switches = [d for d in n["pci_devices"] if not d["is_gpu"]]
    assert len(switches) == 6 and {d["driver"] for d in switches} == {"nvidia-nvswitch"}
    pairs = n["topology"]
    assert len(pairs) == 28
    assert all(p["link"] == "nvlink" and p["nvlink_count"] == 12 and p["nvlink_via"] == "nvswitch" for p in pairs)
    assert all(p["p2p_read"] == "ok" for p in pairs)
    levels = {tuple(p["gpus"]): p["pcie_level"] for p in pairs}
    assert levels[(0, 1)] == "multiple_switches" and levels[(0, 2)] == "numa_node" and levels[(0, 4)] == "system"
    # GPU 0 is the recorded A100 (MIG on); all have persistence off and ECC on with no errors.
    assert [g["mig_mode_current"] for g in n["gpus"]] == [True] + [False] * 7
    assert all(g["persistence_mode"] is False and g["ecc_mode_current"] is True
               and g["ecc_uncorrected_volatile"] == 0 for g in n["gpus"])
    assert len({g["uuid"] for g in n["gpus"]}) == 8
    assert n["kernel_module"]["flavor"] == "proprietary" and n["secure_boot"] is False
    assert n["kernel_cmdline"] == {"intel_iommu": "on", "iommu": "pt"}


def test_server_ld_library_path_shadows_the_wheels(no_live):
    doc = collect("debian12-server-8xa100-nvlink", deep=True)
    cu = doc["cuda"]
    assert cu["toolkit_nvcc"]["version"] == "12.2.91" and cu["toolkit_nvcc"]["found_via"] == "/usr/local/cuda/bin"
    assert cu["cuda_home"]["usr_local_cuda"] == "/usr/local/cuda-12.2"      # through /etc/alternatives
    shadow = {s["name"]: s for s in cu["shadowing"]}
    assert set(shadow) == {"libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libnvrtc.so.12"}
    assert (shadow["libcudart.so.12"]["ld_library_path_version"], shadow["libcudart.so.12"]["wheel_version"]) == \
        ("12.2.53", "12.1.105")
    cache = {c["name"]: c["version"] for c in cu["linker_cache"]}
    assert cache["libcudnn.so.8"] == "8.9.4" and cache["libcuda.so.1"] == "535.54.03"
    # The deep probe shows the loader really took the toolkit's cudart.
    assert any("cuda-12.2" in p and "libcudart" in p for p in doc["python"]["deep"]["mapped_libraries"])


def test_nouveau_holds_the_gpu_and_nothing_nvidia_works(no_live):
    doc = collect("debian12-nouveau-gtx1070ti")
    n = doc["nvidia"]
    [gpu] = [d for d in n["pci_devices"] if d["is_gpu"]]
    assert gpu["driver"] == "nouveau" and gpu["name"] == "GP104 [GeForce GTX 1070 Ti]"
    assert set(n["modules"]) == {"nouveau"}
    assert n["kernel_module"] is None and "not loaded" in n["unknown"]["kernel_module"]
    assert n["nvml"]["available"] is False and n["nvml"]["error_kind"] == "library_not_found"
    assert n["nvidia_smi"]["error_kind"] == "command_not_found"
    assert n["gpus"] is None and n["source"] is None
    assert n["blacklisted"] == [] and n["module_files"] == []
    assert n["secure_boot"] is True
    # What the doctor needs next to it: non-free not enabled, no headers.
    assert Machine.from_facts(doc).apt.components == ["main", "non-free-firmware"]
    assert doc["apt"]["running_kernel_headers"]["installed"] is False


def test_driver_upgraded_without_reboot(no_live):
    n = collect("debian12-driver-mismatch-rtx3090")["nvidia"]
    assert n["kernel_module"]["version"] == "525.105.17"
    assert n["userspace_driver_version"] == "525.147.05"
    assert n["nvml"]["error_kind"] == "driver_library_mismatch"
    assert n["nvidia_smi"]["error"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert n["nvidia_smi"]["error_kind"] == "driver_library_mismatch" and n["nvidia_smi"]["returncode"] == 18
    assert n["gpus"] is None
    [gpu] = n["pci_devices"]
    assert gpu["driver"] == "nvidia"          # the module is loaded; only user space moved on


def test_container_t4_from_nvidia_smi(no_live):
    doc = collect("debian12-container-t4-shm64m")
    n = doc["nvidia"]
    assert doc["os"]["container"] == "docker"
    assert doc["memory"]["shm_total"] == 64 * 2 ** 20
    assert n["source"] == "nvidia-smi" and n["nvml"]["error_kind"] == "binding_not_installed"
    [g] = n["gpus"]
    assert (g["name"], g["compute_capability"]) == ("Tesla T4", "7.5")
    assert g["processes"] == [{"pid": 5762, "used_memory": 1005 * 2 ** 20}]      # memory held by another process
    assert (g["pcie_current_width"], g["pcie_max_width"]) == (8, 16)
    assert (n["driver_version"], n["cuda_driver_version"]) == ("515.105.01", "11.7")
    # /sys/firmware is masked in containers: unknown, not "no UEFI".
    assert n["uefi"] is None and n["secure_boot"] is None
    assert "container" in n["unknown"]["secure_boot"]


# ---------------------------------------------------------------- variants the fixtures do not cover


def _server_variant(tmp_path, change):
    from hostkit import make_host

    host = make_host(tmp_path, base="debian12-server-8xa100-nvlink")
    path = host.root / "_nvml.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return ReplayHost(host.root)


def test_p2p_blocked_and_faults_show_per_pair_and_per_gpu(tmp_path, no_live):
    def change(d):
        d["pairs"]["0,4"]["nvmlDeviceGetP2PStatus"]["0"] = 1          # chipset not supported
        d["devices"][3]["nvmlDeviceGetTotalEccErrors"]["1,0"] = 2
        d["devices"][3]["nvmlDeviceGetRemappedRows"] = [0, 3, 1, 0]
        d["devices"][5]["nvmlDeviceGetCurrentClocksEventReasons"] = 0x40 | 0x4
    n = facts.collect(_server_variant(tmp_path, change), facts.Options(sections=("nvidia",)))["nvidia"]
    pair = next(p for p in n["topology"] if p["gpus"] == [0, 4])
    assert pair["p2p_read"] == "chipset not supported"
    g3, g5 = n["gpus"][3], n["gpus"][5]
    assert g3["ecc_uncorrected_volatile"] == 2
    assert (g3["remapped_rows_uncorrectable"], g3["remapped_rows_pending"]) == (3, True)
    assert g5["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]


def test_hung_nvidia_smi_is_a_fact_not_a_hang(tmp_path, no_live):
    from hostkit import make_host

    host = make_host(tmp_path, base="debian12-container-t4-shm64m",
                     commands={"nvidia-smi -q -x": {"returncode": None, "stdout": "", "stderr": "",
                                                    "error": "timed out after 15 s"}})
    n = facts.collect(host, facts.Options(sections=("nvidia",)))["nvidia"]
    assert n["nvidia_smi"]["error_kind"] == "timed_out" and n["gpus"] is None


def test_hung_nvml_is_abandoned_at_the_deadline():
    release = threading.Event()

    class StuckHost(ReplayHost):
        def nvml(self):
            release.wait(30)      # an NVML call on a GPU that fell off the bus
            return None, "never"

    host = StuckHost(HOSTS / "debian13-workstation-rtx3080")
    try:
        result, reason = nvidia._nvml_result(nvidia._start_nvml(host), 0.2)
    finally:
        release.set()
    assert result is None and "did not answer" in reason


def test_live_nvidia_smi_timeout_kills_the_process():
    """The runner used for nvidia-smi kills a command at its timeout (what a hung nvidia-smi gets)."""
    from debtorch.host import LiveHost

    res = LiveHost().run(["sh", "-c", "sleep 20"], timeout=0.3, key="nvidia-smi -q -x")
    assert isinstance(res, CommandResult) and nvidia.classify_failure(res.error) == "timed_out"


# ---------------------------------------------------------------- what the user reads


def facts_command(*args: str) -> Result:
    """``debtorch facts ARGS`` run in this process, as the command line runs it."""
    from debtorch.cli import app

    return cli_runner().invoke(app, ["facts", *args])


def test_facts_command_shows_gpus_driver_and_libraries():
    out = facts_command("--host", str(HOSTS / "debian12-server-8xa100-nvlink"))
    assert out.exit_code == 0, out.stderr
    text = out.stdout
    assert "driver                 535.54.03 (via nvml), supports CUDA up to 12.2" in text
    assert "GPU 7                  NVIDIA A100-SXM4-80GB, sm 8.0, 80.0 GiB" in text
    assert "GPU pairs              28 x NVLink x12 via nvswitch" in text
    assert "nvcc (a toolkit)       12.2.91 at /usr/local/cuda/bin/nvcc (not what PyTorch runs)" in text
    assert "libcudart.so.12: /usr/local/cuda-12.2/lib64/libcudart.so.12 (12.2.53) is loaded before the wheel's" in text


def test_facts_command_on_the_mismatch_machine_names_both_versions():
    out = facts_command("--host", str(HOSTS / "debian12-driver-mismatch-rtx3090"))
    assert out.exit_code == 0, out.stderr
    assert "kernel module          525.105.17 (proprietary)" in out.stdout
    assert "user-space driver      525.147.05" in out.stdout
    assert "nvidia-smi             failed: Failed to initialize NVML: Driver/library version mismatch" in out.stdout


def test_gpu_held_by_nova_core_is_named_by_its_module(tmp_path, no_live):
    """nova-core's PCI driver directory is called NovaCore; the fact says nova_core, as /proc/modules does."""
    from hostkit import make_host

    host = make_host(tmp_path, base="debian12-nouveau-gtx1070ti",
                     files={"/proc/modules": "nova_core 425984 0 - Live 0x0000000000000000\n"})
    link = host.root / "sys/devices" / NOUVEAU_GPU / "driver"
    target = link.readlink().parent / "NovaCore"
    link.unlink()
    link.symlink_to(target)
    n = facts.collect(host, facts.Options(sections=("nvidia",)))["nvidia"]
    gpu = next(d for d in n["pci_devices"] if d["is_gpu"])
    assert gpu["driver"] == "nova_core" and set(n["modules"]) == {"nova_core"}


def test_machine_without_gpu_asks_neither_nvml_nor_nvidia_smi(replay, no_live):
    doc = facts.collect(replay("debian12-vm-2core"), facts.Options(sections=("nvidia", "cuda")))
    n, cu = doc["nvidia"], doc["cuda"]
    assert n["pci_devices"] == [] and n["gpus"] == []
    assert n["nvml"]["error_kind"] == "no_gpu" and n["nvidia_smi"] is None
    assert cu["toolkit_nvcc"]["release"] == "13.0"          # a toolkit on PATH; PyTorch here is CPU-only
    assert cu["cuda_home"]["usr_local_cuda"] == "/usr/local/cuda-13.0"
    assert [c["name"] for c in cu["linker_cache"] if c["library"] == "cudart"] == ["libcudart.so.13", "libcudart.so"]
