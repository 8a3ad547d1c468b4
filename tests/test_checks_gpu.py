"""Driver, GPU, CUDA and PyTorch checks: each triggered on a fixture machine, and quiet where it should be."""

import json
from pathlib import Path

import pytest
from hostkit import add_packages, change_nvml, diagnose, facts_of, ids, make_host, relink, with_torch

WS = "debian13-workstation-rtx3080"
SERVER = "debian12-server-8xa100-nvlink"
NOUVEAU = "debian12-nouveau-gtx1070ti"
MISMATCH = "debian12-driver-mismatch-rtx3090"
T4 = "debian12-container-t4-shm64m"
NOUVEAU_DRIVER = ("sys/devices/pci0000:00/0000:00:1c.0/0000:03:00.0/0000:04:01.0/0000:05:00.0/0000:06:01.0/"
                  "0000:07:00.0/driver")
ENABLED = ("deb http://deb.debian.org/debian/ bookworm main contrib non-free non-free-firmware\n"
           "deb http://security.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware\n")


def found(host, **opts):
    return diagnose(facts_of(host, **opts))


def one(findings, fid):
    got = [f for f in findings if f.id == fid]
    assert len(got) == 1, (fid, [f.id for f in findings])
    return got[0]


def test_healthy_workstation_has_no_driver_cuda_or_torch_errors(replay):
    fs = found(replay(WS), deep=True)
    assert not [f for f in fs if f.area in ("driver", "cuda", "torch") and f.level != "info"], ids(fs)


# ---------------------------------------------------------------- driver
def test_nouveau_without_driver_and_without_non_free(replay):
    fs = found(replay(NOUVEAU))
    e1 = one(fs, "driver.E001")
    assert "nvidia-driver" in e1.fix and "0000:07:00.0" in e1.about
    e7 = one(fs, "driver.E007")
    assert "/etc/apt/sources.list" in e7.fix and "main contrib non-free non-free-firmware" in e7.fix
    # firmware-misc-nonfree is installed on this machine: a fix never names what is installed
    assert "sudo apt install linux-headers-amd64 nvidia-driver\n" in e7.fix and "firmware-misc-nonfree" not in e7.fix


def test_with_non_free_enabled_the_fix_is_only_the_install(tmp_path):
    fs = found(make_host(tmp_path, base=NOUVEAU, files={"/etc/apt/sources.list": ENABLED}))
    assert "driver.E008" in ids(fs) and "driver.E007" not in ids(fs)


def test_deb822_sources_get_a_components_line(tmp_path):
    deb822 = ("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n"
              "Components: main non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    host = make_host(tmp_path, base=NOUVEAU, files={"/etc/apt/sources.list": "",
                                                    "/etc/apt/sources.list.d/debian.sources": deb822})
    e7 = one(found(host), "driver.E007")
    assert "In /etc/apt/sources.list.d/debian.sources, set every Debian stanza's line to " \
           "`Components: main contrib non-free non-free-firmware`" in e7.fix


def test_nouveau_with_the_driver_installed_needs_the_initramfs(tmp_path):
    host = make_host(tmp_path, base=NOUVEAU, files={
        "/etc/apt/sources.list": ENABLED,
        "/etc/modprobe.d/nvidia-blacklists-nouveau.conf": "blacklist nouveau\n"})
    host = add_packages(host, ("nvidia-driver", "535.261.03-1"), ("nvidia-kernel-dkms", "535.261.03-1"))
    fs = found(host)
    assert "update-initramfs -u" in one(fs, "driver.E001").fix
    assert not {"driver.E007", "driver.E008", "driver.E003"} & set(ids(fs))


def test_nova_core(tmp_path):
    host = make_host(tmp_path, base=NOUVEAU)
    relink(host, NOUVEAU_DRIVER, "../../../../../../../../bus/pci/drivers/NovaCore")
    (host.root / "sys/bus/pci/drivers/NovaCore").mkdir(parents=True, exist_ok=True)
    fs = found(host)
    assert "blacklist nova_core" in one(fs, "driver.E002").fix and "driver.E001" not in ids(fs)


def test_vfio(tmp_path):
    host = make_host(tmp_path, base=NOUVEAU)
    relink(host, NOUVEAU_DRIVER, "../../../../../../../../bus/pci/drivers/vfio-pci")
    (host.root / "sys/bus/pci/drivers/vfio-pci").mkdir(parents=True, exist_ok=True)
    assert "driver.W001" in ids(found(host))


SECURE_BOOT = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a3b1c4d8fd"


def _unbound_with_driver(tmp_path, headers=True, files=None, secure_boot=False):
    host = make_host(tmp_path, base=NOUVEAU, files={"/etc/apt/sources.list": ENABLED, "/proc/modules": "",
                                                    **(files or {})})
    sb = host.root / SECURE_BOOT
    sb.parent.mkdir(parents=True, exist_ok=True)
    sb.write_bytes(b"\x06\x00\x00\x00" + (b"\x01" if secure_boot else b"\x00"))
    (host.root / NOUVEAU_DRIVER).unlink()
    pk = [("nvidia-driver", "535.261.03-1"), ("nvidia-kernel-dkms", "535.261.03-1")]
    if headers:
        kernel = host.read_text("/proc/sys/kernel/osrelease").strip()
        pk.append((f"linux-headers-{kernel}", "6.1.119-1"))
    return add_packages(host, *pk)


def test_module_not_loaded(tmp_path):
    fs = found(_unbound_with_driver(tmp_path))
    assert "sudo modprobe nvidia" in one(fs, "driver.E003").fix
    assert not {"driver.E004", "driver.E005", "driver.E001"} & set(ids(fs))


def test_headers_missing_so_dkms_could_not_build(tmp_path):
    fs = found(_unbound_with_driver(tmp_path, headers=False))
    e5 = one(fs, "driver.E005")
    assert "linux-headers-6.1.0-28-amd64" in e5.fix and "dpkg-reconfigure nvidia-kernel-dkms" in e5.fix
    assert "driver.E003" not in ids(fs)


def test_secure_boot_with_an_unenrolled_key(tmp_path):
    host = _unbound_with_driver(tmp_path, secure_boot=True)
    path = host.root / SECURE_BOOT
    doc = facts_of(host)
    assert doc["nvidia"]["secure_boot"] is True and doc["nvidia"]["dkms_mok_key"]["exists"] is False
    e4 = one(diagnose(doc), "driver.E004")
    assert "mokutil --import /var/lib/dkms/mok.pub" in e4.fix
    path.write_bytes(b"\x06\x00\x00\x00\x00")    # Secure Boot off: the module loads unsigned
    assert "driver.E004" not in ids(found(host))


def test_driver_library_mismatch(replay):
    e6 = one(found(replay(MISMATCH)), "driver.E006")
    assert "525.105.17" in e6.message and "525.147.05" in e6.message and "reboot" in e6.fix
    assert "driver.E006" not in ids(found(replay(WS)))


def test_nvidia_smi_source_suggests_the_binding(replay):
    assert "driver.I001" in ids(found(replay(T4)))
    assert "driver.I001" not in ids(found(replay(WS)))


# ---------------------------------------------------------------- gpu
def test_server_persistence_and_mig(replay):
    fs = found(replay(SERVER))
    assert "8 GPU(s)" in one(fs, "gpu.W001").message
    assert one(fs, "gpu.I001").about.startswith("GPU 0")
    # One consumer GPU with persistence off: not worth a warning.
    assert "gpu.W001" not in ids(found(replay(WS)))


def test_gpu_faults(tmp_path):
    def change(d):
        d["devices"][3]["nvmlDeviceGetTotalEccErrors"]["1,0"] = 2
        d["devices"][3]["nvmlDeviceGetRemappedRows"] = [0, 3, 1, 1]
        d["devices"][5]["nvmlDeviceGetCurrentClocksEventReasons"] = 0x40 | 0x4
        d["devices"][6]["nvmlDeviceGetComputeMode"] = 2
    fs = found(change_nvml(make_host(tmp_path, base=SERVER), change))
    assert one(fs, "gpu.E001").about.startswith("GPU 3")
    assert one(fs, "gpu.E002").about.startswith("GPU 3")
    assert one(fs, "gpu.W002").about.startswith("GPU 3")
    assert "hw_thermal_slowdown" in one(fs, "gpu.W003").message
    assert "nvidia-smi -c DEFAULT -i 6" in one(fs, "gpu.E003").fix
    assert not {"gpu.E001", "gpu.E002", "gpu.W002", "gpu.W003", "gpu.E003"} & set(ids(found(make_host(tmp_path, base=SERVER, name="ok"))))


def test_p2p_blocked(tmp_path):
    def change(d):
        d["pairs"]["0,4"]["nvmlDeviceGetP2PStatus"]["0"] = 1
    w7 = one(found(change_nvml(make_host(tmp_path, base=SERVER), change)), "gpu.W007")
    assert "0-4" in w7.message and "chipset not supported" in w7.message and "NCCL_P2P_DISABLE=1" in w7.fix
    assert "gpu.W007" not in ids(found(make_host(tmp_path, base=SERVER, name="ok")))


def test_memory_held_by_other_processes(replay):
    w4 = one(found(replay(T4)), "gpu.W004")
    assert "1 process" in w4.message
    assert "gpu.W004" not in ids(found(replay(SERVER)))


def test_pcie_width_and_generation(tmp_path, replay):
    assert "x8 of x16" in one(found(replay(T4)), "gpu.W006").message
    assert "gpu.W006" not in ids(found(replay(SERVER)))

    def idle(d):
        d["devices"][0]["nvmlDeviceGetCurrPcieLinkGeneration"] = 1
        d["devices"][0]["nvmlDeviceGetUtilizationRates"] = {"gpu": 0, "memory": 0}
        d["devices"][0]["nvmlDeviceGetCurrentClocksEventReasons"] = 0x1   # gpu_idle
    fs = found(change_nvml(make_host(tmp_path, base=WS), idle))
    assert "while idle" in one(fs, "gpu.I002").message and "gpu.W005" not in ids(fs)

    def busy(d):
        idle(d)
        d["devices"][0]["nvmlDeviceGetUtilizationRates"] = {"gpu": 97, "memory": 40}
        d["devices"][0]["nvmlDeviceGetCurrentClocksEventReasons"] = 0
    fs = found(change_nvml(make_host(tmp_path, base=WS, name="busy"), busy))
    assert "busy" in one(fs, "gpu.W005").message and "gpu.I002" not in ids(fs)


# ---------------------------------------------------------------- cuda
def test_driver_too_old_for_the_wheel_with_the_variant_that_fits(tmp_path):
    host = with_torch(tmp_path, T4, "2.5.1+cu124", cuda="12.4")        # driver 515: CUDA 11.x only
    e1 = one(found(host), "cuda.E001")
    assert "515.105.01" in e1.message and "--index-url https://download.pytorch.org/whl/cu118" in e1.fix
    host = with_torch(tmp_path, T4, "2.5.1+cu118", cuda="11.8", name="cu118")
    fs = found(host)
    assert "cuda.E001" not in ids(fs) and "cuda.W001" in ids(fs)      # 11.8 runs through minor-version compat


def test_debian_driver_can_never_run_cu130(tmp_path):
    host = with_torch(tmp_path, MISMATCH, "2.13.0+cu130", cuda="13.0")
    fs = found(host)
    e2 = one(fs, "cuda.E002")
    assert "Debian 12" in e2.message and "535.261.03" in e2.message
    assert "pip install torch==2.13.0+cu126 --index-url https://download.pytorch.org/whl/cu126" in e2.fix
    assert "cuda.E001" in ids(fs)
    # NVIDIA's own 595 driver on the Debian 13 workstation runs cu130: no such error there.
    assert "cuda.E002" not in ids(found(with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0", name="ws")))


def test_cuda_init_fails_after_suspend(tmp_path):
    host = with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0", deep={
        "cuda_available": False, "cuda_init": "failed", "device_count": 0, "devices": [], "exercise": {"cpu": {"matmul": "ok", "conv": "ok"}},
        "errors": {"cuda_init": "RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, "
                                "e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. (error 999)"}})
    e3 = one(found(host, deep=True), "cuda.E003")
    assert "999" in e3.message and "modprobe nvidia_uvm" in e3.fix
    assert "cuda.E003" not in ids(found(host))   # without --deep nothing is known


def test_foreign_cudart_loaded_and_ld_library_path_shadowing(replay):
    fs = found(replay(SERVER), deep=True)
    assert "/usr/local/cuda-12.2/lib64" in one(fs, "cuda.E004").fix
    w3 = one(fs, "cuda.W003")
    assert "libcudart.so.12" in w3.message and "libcublas.so.12" in w3.message
    ws = found(replay(WS), deep=True)
    assert not {"cuda.E004", "cuda.W003"} & set(ids(ws))


def test_nvcc_major_differs(tmp_path, replay):
    assert "cuda.W002" not in ids(found(replay(SERVER)))          # nvcc 12.2 beside torch's 12.1: same major
    host = with_torch(tmp_path, SERVER, "2.4.1+cu118", cuda="11.8")
    assert "nvcc 12.2.91" in one(found(host), "cuda.W002").message


# ---------------------------------------------------------------- torch
def test_torch_not_installed_gets_the_pip_line_for_the_driver(tmp_path):
    host = with_torch(tmp_path, WS, None)
    e1 = one(found(host), "torch.E001")
    assert "--index-url https://download.pytorch.org/whl/cu13" in e1.fix


def test_cpu_only_build_on_a_gpu_machine(tmp_path, replay):
    host = with_torch(tmp_path, WS, "2.13.0+cpu", cuda=None, dists={})
    e2 = one(found(host), "torch.E002")
    assert "CPU-only" in e2.message and "pip install torch==2.13.0+cu13" in e2.fix
    assert "torch.E002" not in ids(found(replay("debian12-vm-2core")))   # no GPU: a CPU build is right


def test_gpu_too_new_for_the_wheel(tmp_path):
    def rtx5090(d):
        d["devices"][0]["nvmlDeviceGetName"] = "NVIDIA GeForce RTX 5090"
        d["devices"][0]["nvmlDeviceGetCudaComputeCapability"] = [12, 0]
    host = change_nvml(with_torch(tmp_path, WS, "2.6.0+cu124", cuda="12.4"), rtx5090)
    e3 = one(found(host), "torch.E003")
    assert "sm_120" in e3.message
    assert "--index-url https://download.pytorch.org/whl/cu13" in e3.fix and "release 2.14 does" in e3.fix


def test_gpu_too_old_for_every_arch(tmp_path):
    def k80(d):
        d["devices"][0]["nvmlDeviceGetName"] = "Tesla K80"
        d["devices"][0]["nvmlDeviceGetCudaComputeCapability"] = [3, 7]
    host = change_nvml(with_torch(tmp_path, WS, "2.6.0+cu126", cuda="12.6"), k80)
    assert "older than every arch" in one(found(host), "torch.E003").message


def test_ptx_only(tmp_path):
    host = with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0",
                      deep={"arch_list": ["sm_70", "sm_75", "compute_75"]})
    w3 = one(found(host, deep=True), "torch.W003")
    assert "PTX" in w3.message
    host = with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0", name="sass",
                      deep={"arch_list": ["sm_80", "sm_86"]})
    assert not {"torch.W003", "torch.E003"} & set(ids(found(host, deep=True)))


def test_old_torch_and_old_cudnn(tmp_path, replay):
    host = with_torch(tmp_path, MISMATCH, "1.13.1+cu117", cuda="11.7", deep={"cudnn_version": 8100})
    fs = found(host, deep=True)
    assert "1.13.1" in one(fs, "torch.W001").message
    assert "8.1.0" in one(fs, "torch.W002").message
    assert not {"torch.W001", "torch.W002"} & set(ids(found(replay(WS), deep=True)))


def test_cudnn_missing_from_a_cuda_build(tmp_path):
    host = with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0", dists={}, deep={"cudnn_version": None})
    assert "torch.E004" in ids(found(host, deep=True))
    assert one(found(host, deep=True), "torch.E004").fix.startswith("pip install --force-reinstall torch==2.13.0+")


def test_cudnn_missing_fix_reinstalls_the_installed_build_and_reads_sensibly_without_one():
    from debtorch.doctor import Context
    from debtorch.doctor import diagnose as run
    doc = {"python": {"version": "3.11.2", "executable": "/v/bin/python",
                      "torch": {"installed": True, "version": "2.13.0+cu126", "cuda": "12.6"}}}
    [f] = [f for f in run(doc, Context(source="live")).findings if f.id == "torch.E004"]
    assert f.fix == "pip install --force-reinstall torch==2.13.0+cu126 --index-url https://download.pytorch.org/whl/cu126"
    doc["python"]["torch"]["version"] = "2.99.0+cu126"      # a release checks/ does not know
    [f] = [f for f in run(doc, Context(source="live")).findings if f.id == "torch.E004"]
    assert f.fix.startswith("Reinstall PyTorch from the index of its variant") and "pip install" not in f.fix


def test_import_fails_and_kernels_fail(tmp_path):
    host = with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0", deep={
        "ok": True, "errors": {"import": "ImportError: libcudnn.so.9: cannot open shared object file"}})
    assert "libcudnn.so.9" in one(found(host, deep=True), "torch.E005").message
    host = with_torch(tmp_path, WS, "2.13.0+cu130", cuda="13.0", name="k", deep={
        "exercise": {"cpu": {"matmul": "ok", "conv": "ok"},
                     "cuda:0": {"matmul": "RuntimeError: CUDA error: no kernel image is available for execution on the device",
                                "conv": "ok"}}})
    e6 = one(found(host, deep=True), "torch.E006")
    assert "cuda:0" in e6.message and "no kernel image" in e6.message


def test_cuda_build_without_an_nvidia_gpu(tmp_path, replay):
    host = with_torch(tmp_path, "debian12-vm-2core", "2.13.0", cuda="13.0")
    assert "whl/cpu" in one(found(host), "torch.W004").fix
    assert "torch.W004" not in ids(found(replay("debian12-vm-2core")))   # its CPU build is right


def test_forward_compatibility_is_a_warning_not_an_error(tmp_path):
    host = with_torch(tmp_path, T4, "2.5.1+cu124", cuda="12.4", deep={"cuda_available": True})
    fs = found(host, deep=True)
    assert "cuda-compat" in one(fs, "cuda.W004").fix and "cuda.E001" not in ids(fs)


def test_only_the_drivers_cuda_is_known():
    from debtorch.knowledge import driver_cuda_supports as _by_driver_cuda
    assert _by_driver_cuda("11.4", "12.1") == "too-old"
    assert _by_driver_cuda("12.2", "12.4") == "minor-compat"
    assert _by_driver_cuda("10.1", "10.2") == "too-old"      # no minor-version compatibility before 11.1
    assert _by_driver_cuda("13.2", "12.6") == "full"


def test_torch_missing_fix_runs_pip_only_when_there_is_a_pip_line():
    from debtorch.doctor import Context
    from debtorch.doctor import diagnose as run
    doc = {"python": {"version": "3.11.2", "executable": "/v/bin/python", "torch": {"installed": False}},
           "nvidia": {"gpus": [{"index": 0, "name": "Mystery GPU"}]}}
    [f] = [f for f in run(doc, Context(source="live")).findings if f.id == "torch.E001"]
    assert f.fix.startswith("Install the PyTorch variant")          # was "/v/bin/python -m Install ..."
    doc["nvidia"] = {"pci_devices": []}                              # no NVIDIA GPU: the CPU wheel
    [f] = [f for f in run(doc, Context(source="live")).findings if f.id == "torch.E001"]
    assert f.fix.startswith("/v/bin/python -m pip install torch==")


# --- link width: advice that knows the machine (issue 22) -----------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _xml_machine_findings(tmp_path, name):
    import shutil

    from debtorch import facts as facts_mod
    from debtorch.doctor import Context
    from debtorch.doctor import diagnose as run
    from debtorch.host import ReplayHost
    root = tmp_path / "host"
    (root / "_commands").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "corpus" / "nvidia-smi-xml" / name, root / "_commands" / "smi.xml")
    (root / "_host.json").write_text(json.dumps({
        "nvml": {"error": "NVML binding not installed"},
        "commands": {"nvidia-smi -q -x": {"returncode": 0, "stdout_file": "smi.xml", "stderr": "", "error": None}}}))
    return run(facts_mod.collect(ReplayHost(root), facts_mod.Options()), Context(source="facts")).findings


@pytest.mark.parametrize("xml, says", [
    ("netdata-rtx-3060.xml", "A laptop's GPU"),                  # RTX 3060 Laptop GPU at x8 of x16
    ("telegraf-a10g.xml", "A virtual machine"),                  # AWS A10G, Pass-Through, x8
    ("telegraf-tesla-t4.xml", "A virtual machine"),              # T4 passed through, x8
    ("telegraf-dual_2070-v13.xml", "2 GPUs run x8 each"),        # x8/x8 on a desktop board
    ("pai-gtx-1070-x6.xml", "An x1 link"),                       # a rig's x1 risers
    ("telegraf-quadro-p2000-v12.xml", "reseat the card"),        # one card in a narrow link
])
def test_a_narrow_link_gets_the_advice_of_its_machine(tmp_path, xml, says):
    w6 = [f for f in _xml_machine_findings(tmp_path, xml) if f.id == "gpu.W006"]
    assert w6 and all(says in f.fix for f in w6)
    assert says == "reseat the card" or all("reseat the card" not in f.fix for f in w6)
